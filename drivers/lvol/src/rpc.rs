//! SPDK's `bdev_lvol_*` methods (feature `rpc`) on the daemon's [`BdevHost`], with SPDK's
//! parameters (`module/bdev/lvol/vbdev_lvol_rpc.c`), results and error codes: a failure found
//! before the operation starts is its negative errno; one the operation itself meets is
//! `-32602` with strerror's text, as SPDK's completion callbacks answer.
//!
//! Every lvol is a bdev named by its uuid with the alias `lvs/lvol`, module `lvol`; a bdev an
//! lvstore lives on is claimed ([`BdevUser`]) and cannot be deleted before the store. Lvstores
//! are never written to `save_config`: the base bdev's own call is, and when it runs again the
//! store is found on it ([`BdevModule::examine`], as at `bdev_examine`).

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use pmio::BlockDevice;
use pmio_blobstore::ClearMethod;
use pmio_blobstore::lvol::LvstoreOptions;
use pmio_jsonrpc::decl;
use pmio_jsonrpc::{Method, RUNTIME, RpcError, code};
use pmio_runtime::rpc::{BdevHost, BdevModule, BdevRecord, BdevUser};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{LvolDevice, LvolError, LvolInfo, LvolStore, Stop, StoreInfo};

/// The module's name in records and errors.
pub const MODULE: &str = "lvol";

/// The lvol module of a daemon: its lvstores, over the daemon's bdevs.
pub struct LvolRpc {
    pub bdevs: Arc<BdevHost>,
    stores: Mutex<Vec<Arc<LvolStore>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An error the store operation met: SPDK's callback reply, with the reason logged.
fn op_error(e: &LvolError) -> RpcError {
    log::error!("lvol: {e}");
    RpcError::new(
        code::INVALID_PARAMS,
        format!("{}: {e}", pmio_jsonrpc::error::strerror(e.errno().abs())),
    )
}

/// `clear_method` values SPDK accepts (case-insensitive).
fn clear_method(
    s: Option<&str>,
    default: ClearMethod,
    what: &str,
) -> Result<ClearMethod, RpcError> {
    Ok(match s.map(str::to_ascii_lowercase).as_deref() {
        None => default,
        Some("none") => ClearMethod::None,
        Some("unmap") => ClearMethod::Unmap,
        Some("write_zeroes") => ClearMethod::WriteZeroes,
        Some(_) => return Err(RpcError::new(-libc::EINVAL, what.to_string())),
    })
}

impl LvolRpc {
    /// The module over `bdevs`, registered with it as a module (examine) and a user (claims).
    pub fn new(bdevs: Arc<BdevHost>) -> Arc<LvolRpc> {
        let m = Arc::new(LvolRpc {
            bdevs: Arc::clone(&bdevs),
            stores: Mutex::new(Vec::new()),
        });
        bdevs.add_module(Arc::new(Hook(Arc::downgrade(&m))));
        bdevs.add_user(Arc::new(Hook(Arc::downgrade(&m))));
        m
    }

    /// The stores, in the order they were created or found.
    pub fn stores(&self) -> Vec<Arc<LvolStore>> {
        lock(&self.stores).clone()
    }

    /// Unregisters every lvol bdev and unloads every store cleanly (daemon shutdown, after
    /// the targets serving the lvols have stopped).
    pub fn shutdown(&self) {
        let stores = std::mem::take(&mut *lock(&self.stores));
        for s in stores {
            for d in s.devices() {
                let n = d.info().name.clone();
                let _ = self.bdevs.registry.unregister(&n);
                self.bdevs.forget_bdev_state(&n);
                self.bdevs.forget_record(&n);
            }
            if let Err(e) = s.stop(Stop::Unload) {
                log::error!("lvstore {}: unload at shutdown: {e}", s.uuid());
            }
        }
    }

    fn record(&self, lvs_name: &str, l: &LvolInfo, base: &str) -> BdevRecord {
        let mut r = BdevRecord::new(&l.bdev_name, MODULE, None);
        r.parent = Some(base.to_string());
        r.aliases = vec![format!("{lvs_name}/{}", l.name)];
        r
    }

    /// Registers the bdevs of `store`'s lvols that are not registered yet.
    fn register_all(&self, store: &LvolStore) -> Result<(), RpcError> {
        let name = store.name().map_err(|e| op_error(&e))?;
        let base = store.base().info().name.clone();
        let infos = store.lvols().map_err(|e| op_error(&e))?;
        for d in store.devices() {
            let Some(l) = infos.iter().find(|l| l.blob_id == d.blob_id()) else {
                continue;
            };
            if self.bdevs.registry.get(&l.bdev_name).is_some() {
                continue;
            }
            self.bdevs
                .add_bdev_unexamined(d, self.record(&name, l, &base))?;
        }
        Ok(())
    }

    fn register(&self, store: &LvolStore, dev: Arc<LvolDevice>) -> Result<String, RpcError> {
        let name = store.name().map_err(|e| op_error(&e))?;
        let l = store
            .lvols()
            .map_err(|e| op_error(&e))?
            .into_iter()
            .find(|l| l.blob_id == dev.blob_id())
            .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
        let base = store.base().info().name.clone();
        let bdev = l.bdev_name.clone();
        self.bdevs
            .add_bdev_unexamined(dev, self.record(&name, &l, &base))?;
        Ok(bdev)
    }

    fn replace(&self, store: &LvolStore, dev: Arc<LvolDevice>) -> Result<(), RpcError> {
        let name = store.name().map_err(|e| op_error(&e))?;
        let l = store
            .lvols()
            .map_err(|e| op_error(&e))?
            .into_iter()
            .find(|l| l.blob_id == dev.blob_id())
            .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
        let base = store.base().info().name.clone();
        self.bdevs.replace_bdev(dev, self.record(&name, &l, &base))
    }

    /// The store `uuid` xor `lvs_name` names (`vbdev_get_lvol_store_by_uuid_xor_name`).
    fn store_by(&self, uuid: Option<&str>, name: Option<&str>) -> Result<Arc<LvolStore>, RpcError> {
        let found = match (uuid, name) {
            (Some(_), Some(_)) | (None, None) => return Err(RpcError::errno(-libc::EINVAL)),
            (Some(u), None) => {
                let u = pmio::Uuid::parse(u).ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
                self.stores().into_iter().find(|s| s.uuid() == u)
            }
            (None, Some(n)) => self
                .stores()
                .into_iter()
                .find(|s| s.name().is_ok_and(|m| m == n)),
        };
        found.ok_or_else(|| RpcError::errno(-libc::ENODEV))
    }

    /// The store and lvol a bdev name (uuid or `lvs/lvol`) means; -ENODEV if none.
    fn lvol_by_bdev(&self, name: &str) -> Result<(Arc<LvolStore>, LvolInfo), RpcError> {
        let dev = self
            .bdevs
            .find_bdev(name)
            .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
        let bdev = dev.info().name.clone();
        for s in self.stores() {
            if s.devices().iter().any(|d| d.info().name == bdev) {
                let l = s
                    .lvols()
                    .map_err(|e| op_error(&e))?
                    .into_iter()
                    .find(|l| l.bdev_name == bdev)
                    .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
                return Ok((s, l));
            }
        }
        Err(RpcError::errno(-libc::ENODEV))
    }

    fn store_of_base(&self, base: &str) -> Option<Arc<LvolStore>> {
        self.stores()
            .into_iter()
            .find(|s| s.base().info().name == base)
    }

    /// Looks for an lvstore on bdev `name` (examine).
    fn examine(&self, name: &str) {
        if self.bdevs.record(name).is_some_and(|r| r.module == MODULE)
            || self.store_of_base(name).is_some()
        {
            return;
        }
        let Some(dev) = self.bdevs.registry.get(name) else {
            return;
        };
        match LvolStore::load(dev) {
            Ok(s) => {
                if self.stores().iter().any(|o| o.uuid() == s.uuid()) {
                    log::warn!(
                        "bdev {name}: lvstore {} is already loaded from another bdev; not loading it twice",
                        s.uuid()
                    );
                    let _ = s.stop(Stop::Crash);
                    return;
                }
                log::info!(
                    "bdev {name}: found lvstore {} ({} lvols)",
                    s.name().unwrap_or_default(),
                    s.devices().len()
                );
                lock(&self.stores).push(Arc::clone(&s));
                if let Err(e) = self.register_all(&s) {
                    log::error!("bdev {name}: registering its lvols: {e}");
                }
            }
            Err(e) => log::debug!("bdev {name}: no lvstore: {e}"),
        }
    }

    fn user_of(&self, name: &str) -> Option<String> {
        let s = self.store_of_base(name)?;
        Some(format!(
            "bdev {name} holds lvstore {}: delete the lvstore first (bdev_lvol_delete_lvstore)",
            s.name().unwrap_or_else(|_| s.uuid().to_string())
        ))
    }

    fn driver_specific(&self, name: &str) -> Option<Value> {
        for s in self.stores() {
            if !s.devices().iter().any(|d| d.info().name == name) {
                continue;
            }
            let all = s.lvols().ok()?;
            let l = all.iter().find(|l| l.bdev_name == name)?;
            let mut o = json!({
                "lvol_store_uuid": s.uuid().to_string(),
                "base_bdev": s.base().info().name,
                "thin_provision": l.thin,
                "num_allocated_clusters": l.num_allocated_clusters,
                "snapshot": l.is_snapshot,
                "clone": l.base_snapshot.is_some(),
            });
            if let Some(b) = &l.base_snapshot {
                o["base_snapshot"] = json!(b);
            }
            if l.is_snapshot {
                o["clones"] = json!(l.clones);
            }
            o["esnap_clone"] = json!(false);
            return Some(json!({ "lvol": o }));
        }
        None
    }
}

/// The module's hooks on the host, holding it weakly (the host outlives nothing here).
struct Hook(Weak<LvolRpc>);

impl BdevModule for Hook {
    fn examine(&self, name: &str) {
        if let Some(m) = self.0.upgrade() {
            m.examine(name);
        }
    }

    fn driver_specific(&self, name: &str) -> Option<Value> {
        self.0.upgrade()?.driver_specific(name)
    }
}

impl BdevUser for Hook {
    fn user_of(&self, name: &str) -> Option<String> {
        self.0.upgrade()?.user_of(name)
    }
}

/// The methods of the lvol module.
pub fn methods() -> Vec<Method<Arc<LvolRpc>>> {
    vec![
        Method::new("bdev_lvol_create_lvstore", RUNTIME, create_lvstore),
        Method::new("bdev_lvol_delete_lvstore", RUNTIME, delete_lvstore),
        Method::new("bdev_lvol_rename_lvstore", RUNTIME, rename_lvstore),
        Method::new("bdev_lvol_get_lvstores", RUNTIME, get_lvstores),
        Method::new("bdev_lvol_create", RUNTIME, create),
        Method::new("bdev_lvol_delete", RUNTIME, delete),
        Method::new("bdev_lvol_get_lvols", RUNTIME, get_lvols),
        Method::new("bdev_lvol_resize", RUNTIME, resize),
        Method::new("bdev_lvol_set_read_only", RUNTIME, set_read_only),
        Method::new("bdev_lvol_rename", RUNTIME, rename),
        Method::new("bdev_lvol_snapshot", RUNTIME, snapshot),
        Method::new("bdev_lvol_clone", RUNTIME, clone),
        Method::new("bdev_lvol_inflate", RUNTIME, inflate),
        Method::new("bdev_lvol_decouple_parent", RUNTIME, decouple_parent),
    ]
}

/// `bdev_lvol_create_lvstore` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateLvstore {
    pub bdev_name: String,
    pub lvs_name: String,
    /// Cluster size in bytes (default 4 MiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_sz: Option<u32>,
    /// `none`, `unmap` (default) or `write_zeroes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_method: Option<String>,
    /// Metadata pages per 100 clusters (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_md_pages_per_cluster_ratio: Option<u32>,
    /// Metadata page size: 4096 only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md_page_size: Option<u32>,
}

fn create_lvstore(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: CreateLvstore = decl::decode(p)?;
    let clear = clear_method(
        p.clear_method.as_deref(),
        ClearMethod::Unmap,
        "Invalid clear_method parameter",
    )?;
    if p.md_page_size.is_some_and(|s| s != 0 && s != 4096) {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            "md_page_size: pmio's blobstore has 4096-byte metadata pages only",
        ));
    }
    let _owners = m.bdevs.hold_bdev_owners();
    let dev = m
        .bdevs
        .find_bdev(&p.bdev_name)
        .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
    let base = dev.info().name.clone();
    if m.bdevs.record(&base).is_some_and(|r| r.module == MODULE) {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            format_args!("bdev {base} is an lvol; pmio does not nest lvstores"),
        ));
    }
    if m.bdevs.is_claimed_by_anyone(&base) {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {base} is claimed"),
        ));
    }
    if m.stores()
        .iter()
        .any(|s| s.name().is_ok_and(|n| n == p.lvs_name))
    {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            pmio_jsonrpc::error::strerror(libc::EEXIST),
        ));
    }
    let defaults = LvstoreOptions::default();
    let opts = LvstoreOptions {
        name: p.lvs_name.clone(),
        uuid: None,
        cluster_size: p
            .cluster_sz
            .filter(|&c| c != 0)
            .unwrap_or(defaults.cluster_size),
        clear_method: clear,
        md_pages_per_cluster_ratio: p
            .num_md_pages_per_cluster_ratio
            .filter(|&r| r != 0)
            .unwrap_or(defaults.md_pages_per_cluster_ratio),
    };
    let s = LvolStore::create(dev, &opts).map_err(|e| op_error(&e))?;
    let uuid = s.uuid().to_string();
    lock(&m.stores).push(s);
    log::info!("created lvstore {} on {base}", p.lvs_name);
    Ok(json!(uuid))
}

/// `bdev_lvol_delete_lvstore` / `bdev_lvol_get_lvstores` / `bdev_lvol_grow_lvstore`
/// parameters: one of the two.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LvstoreRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lvs_name: Option<String>,
}

fn delete_lvstore(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: LvstoreRef = decl::decode(p)?;
    let s = m.store_by(p.uuid.as_deref(), p.lvs_name.as_deref())?;
    let owners = m.bdevs.hold_bdev_owners();
    for d in s.devices() {
        m.bdevs.check_no_user(&d.info().name)?;
        if m.bdevs.is_claimed(&d.info().name) {
            return Err(RpcError::errno_detail(
                -libc::EBUSY,
                format_args!("lvol {} is in use by a job", d.info().name),
            ));
        }
    }
    for d in s.devices() {
        let n = d.info().name.clone();
        let _ = m.bdevs.registry.unregister(&n);
        m.bdevs.forget_bdev_state(&n);
        m.bdevs.forget_record(&n);
    }
    drop(owners);
    lock(&m.stores).retain(|o| !Arc::ptr_eq(o, &s));
    s.destroy().map_err(|e| op_error(&e))?;
    Ok(Value::Bool(true))
}

/// `bdev_lvol_rename_lvstore` / `bdev_lvol_rename` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rename {
    pub old_name: String,
    pub new_name: String,
}

fn rename_lvstore(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: Rename = decl::decode(p)?;
    let s = m.store_by(None, Some(&p.old_name))?;
    if p.old_name != p.new_name
        && m.stores()
            .iter()
            .any(|o| o.name().is_ok_and(|n| n == p.new_name))
    {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            pmio_jsonrpc::error::strerror(libc::EEXIST),
        ));
    }
    s.rename(&p.new_name).map_err(|e| op_error(&e))?;
    for l in s.lvols().map_err(|e| op_error(&e))? {
        m.bdevs
            .set_aliases(&l.bdev_name, vec![format!("{}/{}", p.new_name, l.name)]);
    }
    Ok(Value::Bool(true))
}

fn store_json(i: &StoreInfo) -> Value {
    json!({
        "uuid": i.uuid.to_string(),
        "name": i.name,
        "base_bdev": i.base_bdev,
        "total_data_clusters": i.total_data_clusters,
        "free_clusters": i.free_clusters,
        "block_size": i.block_size,
        "cluster_size": i.cluster_size,
    })
}

fn get_lvstores(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let stores = match p {
        None => m.stores(),
        Some(_) => {
            let p: LvstoreRef = decl::decode(p)?;
            vec![m.store_by(p.uuid.as_deref(), p.lvs_name.as_deref())?]
        }
    };
    let mut out = Vec::new();
    for s in stores {
        out.push(store_json(&s.info().map_err(|e| op_error(&e))?));
    }
    Ok(Value::Array(out))
}

/// `bdev_lvol_create` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Create {
    /// The lvstore's uuid (or `lvs_name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lvs_name: Option<String>,
    pub lvol_name: String,
    pub size_in_mib: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thin_provision: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_method: Option<String>,
}

fn create(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: Create = decl::decode(p)?;
    let s = m.store_by(p.uuid.as_deref(), p.lvs_name.as_deref())?;
    let clear = clear_method(
        p.clear_method.as_deref(),
        ClearMethod::Default,
        "Invalid clean_method option",
    )?;
    let size = p
        .size_in_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| RpcError::errno(-libc::EINVAL))?;
    let dev = s
        .create_lvol(&p.lvol_name, size, p.thin_provision.unwrap_or(false), clear)
        .map_err(|e| op_error(&e))?;
    Ok(json!(m.register(&s, dev)?))
}

/// Parameters naming one lvol bdev (`bdev_lvol_delete`, `bdev_lvol_set_read_only`,
/// `bdev_lvol_inflate`, `bdev_lvol_decouple_parent`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LvolRef {
    pub name: String,
}

fn delete(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: LvolRef = decl::decode(p)?;
    let (s, l) = m.lvol_by_bdev(&p.name)?;
    if l.clones.len() > 1 {
        // As SPDK (`spdk_lvol_deletable`): a snapshot with one clone is merged into it, one
        // with more is refused before its bdev goes.
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            pmio_jsonrpc::error::strerror(libc::EPERM),
        ));
    }
    m.bdevs.delete_bdev(&l.bdev_name, MODULE)?;
    s.delete_lvol(&l.name).map_err(|e| op_error(&e))?;
    Ok(Value::Bool(true))
}

fn inflate(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    detach(m, p, LvolStore::inflate)
}

fn decouple_parent(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    detach(m, p, LvolStore::decouple_parent)
}

fn detach(
    m: &Arc<LvolRpc>,
    p: Option<&Value>,
    how: fn(&LvolStore, &str) -> crate::Result<()>,
) -> Result<Value, RpcError> {
    let p: LvolRef = decl::decode(p)?;
    let (s, l) = m.lvol_by_bdev(&p.name)?;
    how(&s, &l.name).map_err(|e| op_error(&e))?;
    Ok(Value::Bool(true))
}

/// `bdev_lvol_get_lvols` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GetLvols {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lvs_uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lvs_name: Option<String>,
}

fn get_lvols(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let stores = match p {
        None => m.stores(),
        Some(_) => {
            let p: GetLvols = decl::decode(p)?;
            if p.lvs_uuid.is_none() && p.lvs_name.is_none() {
                m.stores()
            } else {
                vec![m.store_by(p.lvs_uuid.as_deref(), p.lvs_name.as_deref())?]
            }
        }
    };
    let mut out = Vec::new();
    for s in stores {
        let i = s.info().map_err(|e| op_error(&e))?;
        for l in s.lvols().map_err(|e| op_error(&e))? {
            out.push(json!({
                "alias": format!("{}/{}", i.name, l.name),
                "uuid": l.uuid.map(|u| u.to_string()).unwrap_or_default(),
                "name": l.name,
                "is_thin_provisioned": l.thin,
                "is_snapshot": l.is_snapshot,
                "is_clone": l.base_snapshot.is_some(),
                "is_esnap_clone": false,
                "is_degraded": false,
                "num_allocated_clusters": l.num_allocated_clusters,
                "lvs": {"name": i.name, "uuid": i.uuid.to_string()},
            }));
        }
    }
    Ok(Value::Array(out))
}

/// `bdev_lvol_resize` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Resize {
    pub name: String,
    pub size_in_mib: u64,
}

fn resize(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: Resize = decl::decode(p)?;
    let (s, l) = m.lvol_by_bdev(&p.name)?;
    let size = p
        .size_in_mib
        .checked_mul(1 << 20)
        .ok_or_else(|| RpcError::errno(-libc::EINVAL))?;
    let dev = s.resize(&l.name, size).map_err(|e| op_error(&e))?;
    m.replace(&s, dev)?;
    Ok(Value::Bool(true))
}

fn set_read_only(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: LvolRef = decl::decode(p)?;
    let (s, l) = m.lvol_by_bdev(&p.name)?;
    let dev = s.set_read_only(&l.name).map_err(|e| op_error(&e))?;
    m.replace(&s, dev)?;
    Ok(Value::Bool(true))
}

fn rename(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: Rename = decl::decode(p)?;
    let (s, l) = m.lvol_by_bdev(&p.old_name)?;
    s.rename_lvol(&l.name, &p.new_name)
        .map_err(|e| op_error(&e))?;
    let lvs = s.name().map_err(|e| op_error(&e))?;
    m.bdevs
        .set_aliases(&l.bdev_name, vec![format!("{lvs}/{}", p.new_name)]);
    Ok(Value::Bool(true))
}

/// `bdev_lvol_snapshot` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub lvol_name: String,
    pub snapshot_name: String,
}

fn snapshot(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: Snapshot = decl::decode(p)?;
    derive(m, &p.lvol_name, |s, l| s.snapshot(l, &p.snapshot_name))
}

/// Makes a new lvol out of lvol bdev `from` (its snapshot, or a clone of it) with `make`
/// (given the store and `from`'s lvol name), registers its bdev and returns the name.
fn derive(
    m: &Arc<LvolRpc>,
    from: &str,
    make: impl FnOnce(&LvolStore, &str) -> crate::Result<Arc<LvolDevice>>,
) -> Result<Value, RpcError> {
    let (s, l) = m.lvol_by_bdev(from)?;
    let dev = make(&s, &l.name).map_err(|e| op_error(&e))?;
    Ok(json!(m.register(&s, dev)?))
}

/// `bdev_lvol_clone` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Clone {
    pub snapshot_name: String,
    pub clone_name: String,
}

fn clone(m: &Arc<LvolRpc>, _: &str, p: Option<&Value>) -> Result<Value, RpcError> {
    let p: Clone = decl::decode(p)?;
    derive(m, &p.snapshot_name, |s, l| s.clone_lvol(l, &p.clone_name))
}

impl std::fmt::Debug for LvolRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LvolRpc")
            .field("stores", &lock(&self.stores).len())
            .finish()
    }
}
