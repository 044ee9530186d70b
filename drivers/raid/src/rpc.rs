//! SPDK's `bdev_raid_create`, `bdev_raid_delete` and `bdev_raid_get_bdevs` (feature `rpc`),
//! on the daemon's [`BdevHost`], with SPDK's parameters, replies and errors
//! (`module/bdev/raid/bdev_raid_rpc.c`).
//!
//! An array's members are claimed: deleting one is refused while the array exists (SPDK
//! instead pulls the member out of the array; pmio has no hot removal of members yet).
//! `save_config` writes `bdev_raid_create` after the members' own create calls (the bdev
//! section is in creation order), as SPDK writes it.

use std::sync::{Arc, Mutex, MutexGuard};

use pmio::{BlockDevice, Uuid};
use pmio_jsonrpc::decl;
use pmio_jsonrpc::{Method, RUNTIME, Registry, RpcError, code};
use pmio_runtime::rpc::params;
use pmio_runtime::rpc::{BdevHost, BdevModule, BdevRecord, BdevUser};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{RaidDevice, RaidLevel, RaidOptions};

/// The module's name in SPDK's errors and records.
pub const MODULE: &str = "raid";

/// The raid module's state: its arrays, on the daemon's bdev host.
pub struct RaidRpc {
    host: Arc<BdevHost>,
    arrays: Arc<Mutex<Vec<Arc<RaidDevice>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RaidRpc {
    /// The module on `host`, claiming its arrays' members there.
    pub fn new(host: Arc<BdevHost>) -> RaidRpc {
        let arrays = Arc::new(Mutex::new(Vec::new()));
        host.add_user(Arc::new(Members(Arc::clone(&arrays))));
        host.add_module(Arc::new(Members(Arc::clone(&arrays))));
        RaidRpc { host, arrays }
    }

    fn find(&self, name: &str) -> Option<Arc<RaidDevice>> {
        lock(&self.arrays)
            .iter()
            .find(|a| a.info().name == name)
            .cloned()
    }
}

/// The arrays as users of bdevs: a member is claimed.
struct Members(Arc<Mutex<Vec<Arc<RaidDevice>>>>);

impl BdevUser for Members {
    fn user_of(&self, name: &str) -> Option<String> {
        lock(&self.0).iter().find(|a| a.has_member(name)).map(|a| {
            let raid = &a.info().name;
            format!(
                "bdev {name} is a base bdev of raid bdev {raid}; delete it first \
                     (bdev_raid_delete {raid})"
            )
        })
    }
}

/// The arrays as a bdev module: `driver_specific.raid` as it is now (a raid1 member failed
/// out shows at once).
impl BdevModule for Members {
    fn driver_specific(&self, name: &str) -> Option<Value> {
        lock(&self.0)
            .iter()
            .find(|a| a.info().name == name)
            .map(|a| json!({ "raid": info_json(a) }))
    }
}

/// The methods of the raid module.
pub fn methods() -> Registry<RaidRpc> {
    [
        Method::new("bdev_raid_create", RUNTIME, bdev_raid_create),
        Method::new("bdev_raid_delete", RUNTIME, bdev_raid_delete),
        Method::new("bdev_raid_get_bdevs", RUNTIME, bdev_raid_get_bdevs),
    ]
    .into_iter()
    .collect()
}

/// `base_bdevs`: a list of names, or rpc.py's older one string of names split by spaces.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum BaseBdevs {
    List(Vec<String>),
    Spaced(String),
}

impl BaseBdevs {
    fn names(&self) -> Vec<String> {
        match self {
            BaseBdevs::List(v) => v.clone(),
            BaseBdevs::Spaced(s) => s.split_whitespace().map(str::to_string).collect(),
        }
    }
}

/// `bdev_raid_create` parameters, in the order rpc.py sends them (SPDK's `save_config`
/// puts `uuid` and `strip_size_kb` before `raid_level`; SPDK reads either).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaidCreate {
    pub name: String,
    /// `raid0`/`0`, `raid1`/`1` or `concat`.
    pub raid_level: String,
    pub base_bdevs: BaseBdevs,
    /// Strip size in KiB (raid0, concat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strip_size_kb: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// SPDK's superblock on every member (their data then starts 1 MiB in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superblock: Option<bool>,
}

/// SPDK's raid methods answer an undecodable request with -32700.
fn parse_error() -> RpcError {
    RpcError::new(code::PARSE_ERROR, "spdk_json_decode_object failed")
}

fn decode<T: serde::de::DeserializeOwned>(params: Option<&Value>) -> Result<T, RpcError> {
    decl::decode(params).map_err(|e| {
        log::warn!("bdev_raid: {e}");
        match RpcError::from(e) {
            // -95 for a key pmio takes only at SPDK's default stays as it is.
            e if e.code == -libc::EOPNOTSUPP => e,
            _ => parse_error(),
        }
    })
}

fn create_failed(name: &str, errno: i32, why: impl std::fmt::Display) -> RpcError {
    RpcError::new(
        -errno,
        format!(
            "Failed to create RAID bdev {name}: {} ({why})",
            std::io::Error::from_raw_os_error(errno)
        ),
    )
}

fn bdev_raid_create(m: &RaidRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RaidCreate = decode(params)?;
    let names = p.base_bdevs.names();
    if names.iter().any(String::is_empty) {
        return Err(RpcError::new(
            -libc::EINVAL,
            "The base bdev name cannot be empty: Invalid argument",
        ));
    }
    let Some(level) = RaidLevel::parse(&p.raid_level) else {
        return Err(parse_error());
    };
    let uuid = params::parse_uuid(p.uuid.as_deref())?;
    let sb = p.superblock.unwrap_or(false);
    m.host.check_name_free(&p.name)?;
    // Holding the owners' lock, no member can be deleted or taken between the look-up and
    // the claim the array's registration makes.
    let _owners = m.host.hold_bdev_owners();
    let mut members: Vec<Arc<dyn BlockDevice>> = Vec::with_capacity(names.len());
    for n in &names {
        let dev = m
            .host
            .find_bdev(n)
            .ok_or_else(|| create_failed(&p.name, libc::ENODEV, format_args!("no bdev {n}")))?;
        // Another array, a namespace or a vhost controller using it says why.
        if let Err(e) = m.host.check_no_user(n) {
            return Err(create_failed(&p.name, libc::EBUSY, e.message));
        }
        if m.host.is_claimed(n) {
            return Err(create_failed(
                &p.name,
                libc::EBUSY,
                format_args!("{n} is in use by a running perform_tests job"),
            ));
        }
        members.push(dev);
    }
    let dev = RaidDevice::new(RaidOptions {
        name: p.name.clone(),
        uuid,
        level,
        strip_size_kb: p.strip_size_kb.unwrap_or(0),
        members,
        superblock: p.superblock.unwrap_or(false),
    })
    .map_err(|e| create_failed(&p.name, -e.errno(), e))?;
    let create = RaidCreate {
        name: p.name.clone(),
        uuid: Some(dev.info().uuid.to_string()),
        strip_size_kb: (dev.strip_size_kb() != 0).then_some(dev.strip_size_kb()),
        raid_level: level.name().into(),
        base_bdevs: BaseBdevs::List(names),
        superblock: None,
    };
    // As SPDK: an array with a superblock is not in save_config; its members' superblocks
    // bring it back when they are examined.
    let call = (!sb).then(|| params::call("bdev_raid_create", &create));
    let mut record = BdevRecord::new(&p.name, MODULE, call);
    record.driver_specific = json!({ "raid": info_json(&dev) });
    m.host
        .add_bdev(Arc::clone(&dev) as Arc<dyn BlockDevice>, record)?;
    lock(&m.arrays).push(Arc::clone(&dev));
    log::info!(
        "bdev_raid_create: {} ({level}, {} base bdevs, {} blocks)",
        p.name,
        dev.health().slots(),
        dev.info().num_blocks
    );
    Ok(Value::Bool(true))
}

/// `bdev_raid_delete` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaidDelete {
    pub name: String,
}

fn bdev_raid_delete(m: &RaidRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RaidDelete = decode(params)?;
    if m.find(&p.name).is_none() {
        return Err(RpcError::new(
            -libc::ENODEV,
            format!("raid bdev {} not found", p.name),
        ));
    }
    m.host.delete_bdev(&p.name, MODULE)?;
    lock(&m.arrays).retain(|a| a.info().name != p.name);
    Ok(Value::Bool(true))
}

/// `bdev_raid_get_bdevs` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaidGetBdevs {
    /// `all`, `online`, `configuring` or `offline`.
    pub category: String,
}

fn bdev_raid_get_bdevs(m: &RaidRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RaidGetBdevs = decode(params)?;
    if !["all", "online", "configuring", "offline"].contains(&p.category.as_str()) {
        return Err(RpcError::errno(-libc::EINVAL));
    }
    let out: Vec<Value> = lock(&m.arrays)
        .iter()
        // pmio's arrays are complete when made: none is ever `configuring`.
        .filter(|a| p.category == "all" || a.state() == p.category)
        .map(|a| {
            let mut v = json!({ "name": a.info().name });
            if let (Value::Object(o), Value::Object(i)) = (&mut v, info_json(a)) {
                o.extend(i);
            }
            v
        })
        .collect();
    Ok(Value::Array(out))
}

/// SPDK's `raid_bdev_write_info_json`: the array and its members.
pub fn info_json(a: &RaidDevice) -> Value {
    let h = a.health();
    let n = h.slots();
    let slots = a.members();
    let sb = a.superblock();
    let members: Vec<Value> = slots
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let configured = m.is_some() && h.writable(i);
            let data_size = if m.is_some() {
                a.layout().member_blocks[i]
            } else {
                0
            };
            json!({
                "name": m.as_ref().map(|m| m.info().name.clone()),
                "uuid": m.as_ref().map_or(Uuid::default(), |m| m.info().uuid).to_string(),
                "is_configured": configured,
                "data_offset": if m.is_some() { a.layout().data_offset } else { 0 },
                "data_size": data_size,
            })
        })
        .collect();
    let discovered = (0..n)
        .filter(|&i| slots[i].is_some() && h.writable(i))
        .count();
    json!({
        "uuid": a.info().uuid.to_string(),
        "strip_size_kb": a.strip_size_kb(),
        "state": a.state(),
        "raid_level": a.level().name(),
        "superblock": sb.is_some(),
        "num_base_bdevs": n,
        "num_base_bdevs_discovered": discovered,
        "num_base_bdevs_operational": h.operational_count(),
        "base_bdevs_list": members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_bdevs_take_a_list_or_rpc_py_spaced_string() {
        let p: RaidCreate = serde_json::from_value(json!({
            "name": "r", "raid_level": "0", "strip_size_kb": 64, "base_bdevs": "a  b c"
        }))
        .unwrap();
        assert_eq!(p.base_bdevs.names(), ["a", "b", "c"]);
        let p: RaidCreate = serde_json::from_value(json!({
            "name": "r", "raid_level": "raid1", "base_bdevs": ["a", "b"]
        }))
        .unwrap();
        assert_eq!(p.base_bdevs.names(), ["a", "b"]);
        assert!(decode::<RaidCreate>(Some(&json!({"name": "r"}))).is_err());
        assert_eq!(
            decode::<RaidCreate>(Some(
                &json!({"name": "r", "raid_level": "0", "base_bdevs": [], "x": 1})
            ))
            .unwrap_err()
            .code,
            code::PARSE_ERROR
        );
    }
}
