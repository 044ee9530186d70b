//! SPDK's `bdev_raid_*` methods (feature `rpc`) on the daemon's [`BdevHost`], with SPDK's
//! parameters, replies and errors (`module/bdev/raid/bdev_raid_rpc.c`): create, delete,
//! get_bdevs, add_base_bdev, remove_base_bdev and set_options.
//!
//! An array's members are claimed: deleting one is refused while it is in an array (take it
//! out first with `bdev_raid_remove_base_bdev`). `save_config` writes `bdev_raid_create`
//! after the members' own create calls (the bdev section is in creation order), as SPDK
//! writes it, except for arrays with a superblock: as in SPDK, those come back from their
//! members' superblocks when the members are examined. `bdev_raid_set_options` comes first
//! ([`RaidRpc::config`]).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use pmio::{BlockDevice, Uuid};
use pmio_jsonrpc::decl;
use pmio_jsonrpc::{Method, RUNTIME, Registry, RpcError, STARTUP, code};
use pmio_runtime::rpc::params;
use pmio_runtime::rpc::{BdevHost, BdevModule, BdevRecord, BdevUser};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::assembly::{Decision, Found, Gathering};
use crate::keeper;
use crate::rebuild::{ProcessOptions, Runner};
use crate::{RaidDevice, RaidLevel, RaidOptions};

/// The module's name in SPDK's errors and records.
pub const MODULE: &str = "raid";

/// The raid module's state: its arrays, on the daemon's bdev host.
pub struct RaidRpc {
    host: Arc<BdevHost>,
    state: Arc<State>,
}

/// What the module's methods and its hooks on the host share.
struct State {
    arrays: Mutex<Vec<Arc<RaidDevice>>>,
    /// Members found by examine whose arrays are not complete yet.
    gathering: Mutex<Gathering<Arc<dyn BlockDevice>>>,
    /// `bdev_raid_set_options`.
    opts: Mutex<ProcessOptions>,
    host: Weak<BdevHost>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RaidRpc {
    /// The module on `host`, claiming its arrays' members there and examining new bdevs for
    /// raid superblocks.
    pub fn new(host: Arc<BdevHost>) -> RaidRpc {
        let state = Arc::new(State {
            arrays: Mutex::new(Vec::new()),
            gathering: Mutex::new(Gathering::default()),
            opts: Mutex::new(ProcessOptions::default()),
            host: Arc::downgrade(&host),
        });
        host.add_user(Arc::new(Hook(Arc::clone(&state))));
        host.add_module(Arc::new(Hook(Arc::clone(&state))));
        RaidRpc { host, state }
    }

    fn find(&self, name: &str) -> Option<Arc<RaidDevice>> {
        self.state.find(name)
    }
}

impl State {
    fn find(&self, name: &str) -> Option<Arc<RaidDevice>> {
        lock(&self.arrays)
            .iter()
            .find(|a| a.info().name == name)
            .cloned()
    }

    fn array_of_member(&self, name: &str) -> Option<Arc<RaidDevice>> {
        lock(&self.arrays)
            .iter()
            .find(|a| a.has_member(name))
            .cloned()
    }

    /// The array holding `name` in a slot, taking I/O or failed.
    fn array_holding(&self, name: &str) -> Option<Arc<RaidDevice>> {
        lock(&self.arrays).iter().find(|a| a.holds(name)).cloned()
    }

    /// Looks for a raid superblock on bdev `name` (SPDK's `raid_bdev_examine`).
    fn examine(&self, name: &str) {
        let Some(host) = self.host.upgrade() else {
            return;
        };
        if host.record(name).is_some_and(|r| r.module == MODULE)
            || self.array_of_member(name).is_some()
        {
            return;
        }
        let Some(dev) = host.registry.get(name) else {
            return;
        };
        let sb = match keeper::read_superblock(&dev) {
            Ok(Some(sb)) => sb,
            Ok(None) => return,
            Err(e) => {
                log::warn!("bdev {name}: raid superblock unreadable: {e}");
                return;
            }
        };
        let running = lock(&self.arrays)
            .iter()
            .find(|a| a.info().uuid == sb.uuid)
            .cloned();
        if let Some(a) = running {
            let now = a.superblock().map_or(0, |s| s.seq_number);
            log::warn!(
                "bdev {name}: carries superblock {} of raid bdev {}, which runs at {now} without it:                  refused as stale (bdev_raid_add_base_bdev {} {name} rebuilds it)",
                sb.seq_number,
                a.info().name,
                a.info().name
            );
            return;
        }
        let raid = sb.name.clone();
        let found = Found {
            sb,
            uuid: dev.info().uuid,
            dev,
        };
        match lock(&self.gathering).offer(found) {
            Decision::Wait => {
                log::info!("bdev {name}: member of raid bdev {raid}, waiting for the others")
            }
            Decision::Stale {
                member,
                seq,
                newest,
            } => log::warn!(
                "raid bdev {raid}: member {member} carries superblock {seq}, behind {newest}: refused as stale"
            ),
            Decision::Assemble { sb, slots } => self.assemble(&host, sb, slots),
        }
    }

    fn assemble(
        &self,
        host: &BdevHost,
        sb: crate::superblock::Superblock,
        slots: Vec<Option<Arc<dyn BlockDevice>>>,
    ) {
        let raid = sb.name.clone();
        for m in slots.iter().flatten() {
            if let Err(e) = host.check_no_user(&m.info().name) {
                log::error!("raid bdev {raid}: not assembled: {}", e.message);
                return;
            }
        }
        let dev = match RaidDevice::assemble(sb, slots) {
            Ok(d) => d,
            Err(e) => {
                log::error!("raid bdev {raid}: not assembled: {e}");
                return;
            }
        };
        let mut record = BdevRecord::new(&raid, MODULE, None);
        record.driver_specific = json!({ "raid": info_json(&dev) });
        lock(&self.arrays).push(Arc::clone(&dev));
        if let Err(e) = host.add_bdev(Arc::clone(&dev) as Arc<dyn BlockDevice>, record) {
            log::error!(
                "raid bdev {raid}: assembled but not registered: {}",
                e.message
            );
            lock(&self.arrays).retain(|a| !Arc::ptr_eq(a, &dev));
            return;
        }
        log::info!(
            "raid bdev {raid}: assembled from its superblocks ({} of {} members, superblock {})",
            dev.health().operational_count(),
            dev.health().slots(),
            dev.superblock().map_or(0, |s| s.seq_number)
        );
        let opts = *lock(&self.opts);
        if let Err(e) = dev.resume(opts, &Runner::first_core(host.reactors())) {
            log::error!("raid bdev {raid}: rebuild not resumed: {e}");
        }
    }
}

/// The module's hooks on the host.
struct Hook(Arc<State>);

/// The arrays as users of bdevs: a member is claimed.
impl BdevUser for Hook {
    fn user_of(&self, name: &str) -> Option<String> {
        self.0.array_of_member(name).map(|a| {
            let raid = &a.info().name;
            format!(
                "bdev {name} is a base bdev of raid bdev {raid}; remove it first \
                 (bdev_raid_remove_base_bdev {name}) or delete the array (bdev_raid_delete {raid})"
            )
        })
    }
}

/// The arrays as a bdev module: examine looks for superblocks; `driver_specific.raid` as it
/// is now (a raid1 member failed out shows at once).
impl BdevModule for Hook {
    fn examine(&self, name: &str) {
        self.0.examine(name);
    }

    fn driver_specific(&self, name: &str) -> Option<Value> {
        self.0.find(name).map(|a| json!({ "raid": info_json(&a) }))
    }
}

/// The methods of the raid module.
pub fn methods() -> Registry<RaidRpc> {
    [
        Method::new("bdev_raid_create", RUNTIME, bdev_raid_create),
        Method::new("bdev_raid_delete", RUNTIME, bdev_raid_delete),
        Method::new("bdev_raid_get_bdevs", RUNTIME, bdev_raid_get_bdevs),
        Method::new("bdev_raid_add_base_bdev", RUNTIME, bdev_raid_add_base_bdev),
        Method::new(
            "bdev_raid_remove_base_bdev",
            RUNTIME,
            bdev_raid_remove_base_bdev,
        ),
        // As SPDK: at start-up too, so a configuration sets them before its arrays.
        Method::new(
            "bdev_raid_set_options",
            STARTUP | RUNTIME,
            bdev_raid_set_options,
        ),
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
    lock(&m.state.arrays).push(Arc::clone(&dev));
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
    /// Wipe the superblock from every member, so examine no longer assembles the array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_sb: Option<bool>,
}

fn bdev_raid_delete(m: &RaidRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RaidDelete = decode(params)?;
    if m.find(&p.name).is_none() {
        return Err(RpcError::new(
            -libc::ENODEV,
            format!("raid bdev {} not found", p.name),
        ));
    }
    let dev = m.find(&p.name).expect("checked above");
    m.host.delete_bdev(&p.name, MODULE)?;
    lock(&m.state.arrays).retain(|a| a.info().name != p.name);
    if p.clear_sb == Some(true) {
        keeper::clear_superblock(&dev);
    }
    Ok(Value::Bool(true))
}

/// `bdev_raid_add_base_bdev` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaidAddBaseBdev {
    pub raid_bdev: String,
    pub base_bdev: String,
}

fn bdev_raid_add_base_bdev(
    m: &RaidRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    // SPDK answers an undecodable add with -32603, not -32700.
    let p: RaidAddBaseBdev = decl::decode(params).map_err(|e| {
        log::warn!("bdev_raid_add_base_bdev: {e}");
        RpcError::new(code::INTERNAL_ERROR, "spdk_json_decode_object failed")
    })?;
    let Some(raid) = m.find(&p.raid_bdev) else {
        return Err(RpcError::new(
            -libc::ENODEV,
            format!("raid bdev {} is not found in config", p.raid_bdev),
        ));
    };
    let failed = |errno: i32, why: &dyn std::fmt::Display| {
        RpcError::new(
            -errno,
            format!(
                "Failed to add base bdev {} to RAID bdev {}: {} ({why})",
                p.base_bdev,
                p.raid_bdev,
                std::io::Error::from_raw_os_error(errno)
            ),
        )
    };
    let _owners = m.host.hold_bdev_owners();
    let dev = m
        .host
        .find_bdev(&p.base_bdev)
        .ok_or_else(|| failed(libc::ENODEV, &"no such bdev"))?;
    if let Err(e) = m.host.check_no_user(&p.base_bdev) {
        return Err(failed(libc::EBUSY, &e.message));
    }
    if m.host.is_claimed(&p.base_bdev) {
        return Err(failed(
            libc::EBUSY,
            &"in use by a running perform_tests job",
        ));
    }
    let opts = *lock(&m.state.opts);
    let slot = raid
        .add_member(dev, opts, &Runner::first_core(m.host.reactors()))
        .map_err(|e| failed(-e.errno(), &e))?;
    log::info!(
        "bdev_raid_add_base_bdev: {} is member {slot} of {}, rebuilding",
        p.base_bdev,
        p.raid_bdev
    );
    Ok(Value::Bool(true))
}

/// `bdev_raid_remove_base_bdev` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaidRemoveBaseBdev {
    pub name: String,
}

fn bdev_raid_remove_base_bdev(
    m: &RaidRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: RaidRemoveBaseBdev = decode(params)?;
    let failed = |errno: i32| RpcError::new(-errno, "Failed to remove base bdev from raid bdev");
    let Some(raid) = m.state.array_holding(&p.name) else {
        return Err(failed(if m.host.find_bdev(&p.name).is_some() {
            libc::EINVAL
        } else {
            libc::ENODEV
        }));
    };
    let slot = raid.remove_member(&p.name).map_err(|e| {
        log::warn!("bdev_raid_remove_base_bdev: {e}");
        failed(-e.errno())
    })?;
    log::info!(
        "bdev_raid_remove_base_bdev: {} left slot {slot} of {}",
        p.name,
        raid.info().name
    );
    Ok(Value::Bool(true))
}

/// `bdev_raid_set_options` parameters (each kept as it is when absent).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaidSetOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_window_size_kb: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_max_bandwidth_mb_sec: Option<u32>,
}

fn bdev_raid_set_options(m: &RaidRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RaidSetOptions = match params {
        Some(_) => decode(params)?,
        None => RaidSetOptions::default(),
    };
    let mut opts = lock(&m.state.opts);
    let next = ProcessOptions {
        window_size_kb: p.process_window_size_kb.unwrap_or(opts.window_size_kb),
        max_bandwidth_mb_sec: p
            .process_max_bandwidth_mb_sec
            .unwrap_or(opts.max_bandwidth_mb_sec),
    };
    if next.window_size_kb == 0 {
        return Err(RpcError::errno(-libc::EINVAL));
    }
    *opts = next;
    Ok(Value::Bool(true))
}

impl RaidRpc {
    /// The options a rebuild started now runs with.
    pub fn process_options(&self) -> ProcessOptions {
        *lock(&self.state.opts)
    }

    /// The module's part of save_config's bdev section, written before any bdev's create
    /// call (SPDK's `raid_bdev_config_json`: `bdev_raid_set_options`, always, with both
    /// values), so a rebuild that an assembly resumes runs with them.
    pub fn config(&self) -> Vec<Value> {
        let o = self.process_options();
        vec![params::call(
            "bdev_raid_set_options",
            &RaidSetOptions {
                process_window_size_kb: Some(o.window_size_kb),
                process_max_bandwidth_mb_sec: Some(o.max_bandwidth_mb_sec),
            },
        )]
    }
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
    let mut out: Vec<Value> = lock(&m.state.arrays)
        .iter()
        .filter(|a| p.category == "all" || a.state() == p.category)
        .map(|a| {
            let mut v = json!({ "name": a.info().name });
            if let (Value::Object(o), Value::Object(i)) = (&mut v, info_json(a)) {
                o.extend(i);
            }
            v
        })
        .collect();
    // Arrays examine is still gathering members for are SPDK's `configuring` ones.
    if ["all", "configuring"].contains(&p.category.as_str()) {
        for (sb, found) in lock(&m.state.gathering).pending() {
            out.push(json!({
                "name": sb.name,
                "uuid": sb.uuid.to_string(),
                "strip_size_kb": u64::from(sb.strip_size) * u64::from(sb.block_size) / 1024,
                "state": "configuring",
                "raid_level": sb.level.name(),
                "superblock": true,
                "num_base_bdevs": sb.num_base_bdevs,
                "num_base_bdevs_discovered": found,
                "num_base_bdevs_operational": sb.members.iter()
                    .filter(|m| m.state == crate::superblock::MemberState::Configured)
                    .count(),
            }));
        }
    }
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
    let mut v = json!({
        "uuid": a.info().uuid.to_string(),
        "strip_size_kb": a.strip_size_kb(),
        "state": a.state(),
        "raid_level": a.level().name(),
        "superblock": sb.is_some(),
        "num_base_bdevs": n,
        "num_base_bdevs_discovered": discovered,
        "num_base_bdevs_operational": h.operational_count(),
        "base_bdevs_list": members,
    });
    if let Some(p) = a.process() {
        let blocks = p.offset();
        v["process"] = json!({
            "type": "rebuild",
            "target": p.target_name,
            "progress": {
                "blocks": blocks,
                "percent": (blocks * 100 / a.info().num_blocks.max(1)) as u32,
            },
        });
    }
    v
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
