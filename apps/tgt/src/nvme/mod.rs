//! SPDK's `bdev_nvme_*` methods on pmio's NVMe driver: controllers attached over PCIe (VFIO)
//! or NVMe/TCP, one bdev per namespace.
//!
//! - [`args`]: `bdev_nvme_attach_controller`'s parameters decoded (shared with
//!   `--check-config`); [`trid`]: where a controller is, as SPDK prints it.
//!
//! Attach brings the controller up (reset, admin queue, identify; for TCP, the connection and
//! the fabrics Connect: seconds at worst), so it runs on the RPC connection thread, never on a
//! reactor, with the controller's name and path reserved rather than the controller list
//! locked; it answers with one bdev name per namespace, `<name>n<nsid>`, as SPDK. Attaching the
//! same name to the same path again returns the existing names (idempotent); a name or path
//! already in use is -17 naming the controller. Detach and daemon shutdown remove the bdevs
//! first, then run the controller's shutdown sequence. `bdev_nvme_reset_controller` resets a
//! controller on the connection thread and answers once it is back; the reactors' queue pairs
//! hold their I/O meanwhile and recreate their queues at their next poll (no reactor waits).

pub mod args;
mod tcp;
pub mod trid;

use std::sync::Arc;

use pmio::BlockDevice;
use pmio_nvme::{Controller, NvmeError};
use serde_json::{Value, json};

use crate::methods::{Method, Rpc};
use crate::target::{CtrlrRecord, Target};
use args::AttachArgs;
use pmio_jsonrpc::RUNTIME;
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::params::Params;
use pmio_runtime::rpc::BdevRecord;
use trid::Trid;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        Method::new(
            "bdev_nvme_attach_controller",
            RUNTIME,
            bdev_nvme_attach_controller,
        ),
        Method::new(
            "bdev_nvme_detach_controller",
            RUNTIME,
            bdev_nvme_detach_controller,
        ),
        Method::new(
            "bdev_nvme_reset_controller",
            RUNTIME,
            bdev_nvme_reset_controller,
        ),
        Method::new(
            "bdev_nvme_get_controllers",
            RUNTIME,
            bdev_nvme_get_controllers,
        ),
    ]
}

/// SPDK-style errno for a driver error; the message keeps the driver's explanation.
fn nvme_error(e: &NvmeError) -> RpcError {
    let errno = match e {
        NvmeError::InvalidAddress(_) | NvmeError::InvalidOption(_) => libc::EINVAL,
        NvmeError::NoSuchDevice { .. }
        | NvmeError::NotBoundToVfio { .. }
        | NvmeError::NoIommuGroup { .. }
        | NvmeError::VfioUnavailable { .. }
        | NvmeError::DeviceRemoved { .. }
        | NvmeError::Detached { .. } => libc::ENODEV,
        NvmeError::GroupNotViable { .. } | NvmeError::Resetting { .. } => libc::EBUSY,
        NvmeError::Permission { .. } => libc::EACCES,
        NvmeError::MemlockTooLow { .. } | NvmeError::DmaAlloc(_) => libc::ENOMEM,
        NvmeError::Timeout { .. } => libc::ETIMEDOUT,
        // SPDK's attach answers a target it cannot reach or connect to with -EIO too, but
        // with the reason logged; pmio's message carries it.
        NvmeError::Disconnected { .. } => libc::EIO,
        NvmeError::Unsupported { .. } => libc::EOPNOTSUPP,
        _ => libc::EIO,
    };
    RpcError::errno_detail(-errno, e)
}

/// A controller the driver brought up, with what the daemon keeps about it.
struct Attached {
    ctrlr: Controller,
    /// The `bdev_nvme_attach_controller` parameters `save_config` writes.
    saved: Value,
    /// The host NQN it connected with (empty for PCIe).
    hostnqn: String,
}

fn bdev_nvme_attach_controller(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let a = args::parse(params)?;
    let t = &rpc.target;
    let _slot = match reserve(t, &a)? {
        Reserved::Present(names) => return Ok(json!(names)),
        Reserved::Slot(s) => s,
    };
    let attached = match &a.tcp {
        None => attach_pcie(rpc, &a)?,
        Some(tcp) => tcp::attach(rpc, &a, tcp)?,
    };
    register(t, a.name, a.trid, attached)
}

/// A PCIe controller through VFIO: the driver's defaults with what `bdev_nvme_set_options`
/// mapped and the attach's queue count.
fn attach_pcie(rpc: &Rpc, a: &AttachArgs) -> Result<Attached, RpcError> {
    let mut opts = rpc.settings.nvme_options(&a.name);
    if let Some(n) = a.num_io_queues {
        opts.max_io_queues = n;
    }
    opts.validate().map_err(|e| nvme_error(&e))?;
    let ctrlr = pmio_nvme::attach(a.trid.traddr(), opts).map_err(|e| nvme_error(&e))?;
    Ok(Attached {
        ctrlr,
        saved: json!({"name": a.name, "trtype": "PCIe", "traddr": a.trid.traddr()}),
        hostnqn: String::new(),
    })
}

/// What [`reserve`] found.
enum Reserved<'a> {
    /// The same name is attached on the same path: its bdev names.
    Present(Vec<String>),
    /// Name and path are reserved for this attach until the slot is dropped.
    Slot(AttachSlot<'a>),
}

/// A name and path reserved by an attach in progress.
struct AttachSlot<'a> {
    target: &'a Target,
    name: String,
}

impl Drop for AttachSlot<'_> {
    fn drop(&mut self) {
        self.target.attaching_mut().retain(|(n, _)| *n != self.name);
    }
}

/// Checks `a`'s name and path against the attached controllers and the attaches in progress,
/// and reserves both: the controller comes up without the list locked, and two attaches
/// never take the same name or path.
fn reserve<'a>(t: &'a Target, a: &AttachArgs) -> Result<Reserved<'a>, RpcError> {
    let ctrlrs = t.ctrlrs_mut();
    let mut attaching = t.attaching_mut();
    if let Some(c) = ctrlrs.iter().find(|c| c.name == a.name) {
        if c.trid.same_path(&a.trid) {
            return Ok(Reserved::Present(c.bdevs.clone()));
        }
        if a.multipath {
            return Err(RpcError::errno_detail(
                -libc::EOPNOTSUPP,
                format_args!(
                    "controller {} is attached at {}: pmio attaches one path per controller",
                    a.name,
                    c.trid.describe()
                ),
            ));
        }
        return Err(RpcError::errno_detail(
            -libc::EEXIST,
            format_args!(
                "controller {} is already attached at {}",
                a.name,
                c.trid.describe()
            ),
        ));
    }
    if let Some(c) = ctrlrs.iter().find(|c| c.trid.same_path(&a.trid)) {
        return Err(RpcError::errno_detail(
            -libc::EEXIST,
            format_args!(
                "{} is already attached as controller {}",
                a.trid.describe(),
                c.name
            ),
        ));
    }
    if let Some((n, _)) = attaching
        .iter()
        .find(|(n, tr)| *n == a.name || tr.same_path(&a.trid))
    {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!(
                "controller {n} at {} is being attached by another call",
                a.trid.describe()
            ),
        ));
    }
    attaching.push((a.name.clone(), a.trid.clone()));
    Ok(Reserved::Slot(AttachSlot {
        target: t,
        name: a.name.clone(),
    }))
}

/// Registers the bdevs of a controller that came up and records it; on failure (a bdev name
/// taken meanwhile, the daemon stopping) removes what it registered and detaches it.
fn register(t: &Target, name: String, trid: Trid, a: Attached) -> Result<Value, RpcError> {
    let ctrlr = Arc::new(a.ctrlr);
    let mut ctrlrs = t.ctrlrs_mut();
    let mut names: Vec<String> = Vec::new();
    let mut failed = None;
    if t.bdevs.is_stopping() {
        failed = Some(RpcError::errno_detail(
            -libc::ESHUTDOWN,
            "pmio-tgt is shutting down",
        ));
    }
    for b in ctrlr.bdevs() {
        if failed.is_some() {
            break;
        }
        let bname = b.info().name.clone();
        let mut record = BdevRecord::new(&bname, "nvme", None);
        record.parent = Some(name.clone());
        record.driver_specific = json!({"nvme": [{"trid": trid.json(), "ctrlr": name}]});
        match t.bdevs.add_bdev(b, record) {
            Ok(()) => names.push(bname),
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        for n in &names {
            let _ = t.bdevs.registry.unregister(n.as_str());
        }
        t.bdevs.forget_children(&name);
        if let Err(d) = ctrlr.detach() {
            log::warn!("{name}: detach after failed attach: {d}");
        }
        return Err(e);
    }
    log::info!(
        "attached NVMe controller {name} ({} {}): bdevs {names:?}",
        trid.trtype(),
        trid.describe()
    );
    ctrlrs.push(CtrlrRecord {
        name,
        trid,
        bdevs: names.clone(),
        ctrlr,
        saved: a.saved,
        hostnqn: a.hostnqn,
    });
    Ok(json!(names))
}

/// SPDK's `bdev_nvme_detach_controller`: `name`, and optionally which path
/// (`trtype`, `traddr`, `adrfam`, `trsvcid`, `subnqn`, `hostaddr`, `hostsvcid`): the controller
/// goes only if every key given matches it.
fn bdev_nvme_detach_controller(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("name")?;
    let mut keys: Vec<(&str, String)> = Vec::new();
    for k in [
        "trtype",
        "traddr",
        "adrfam",
        "trsvcid",
        "subnqn",
        "hostaddr",
        "hostsvcid",
    ] {
        if let Some(v) = p.opt::<String>(k)? {
            keys.push((k, v));
        }
    }
    p.finish()?;
    let t = &rpc.target;
    let mut ctrlrs = t.ctrlrs_mut();
    let Some(pos) = ctrlrs
        .iter()
        .position(|c| c.name == name && path_matches(&c.trid, &keys))
    else {
        return Err(RpcError::errno(-libc::ENODEV));
    };
    if let Some(b) = ctrlrs[pos].bdevs.iter().find(|b| t.bdevs.is_claimed(b)) {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {b} of controller {name} is running perform_tests"),
        ));
    }
    // No namespace may take one of its bdevs between this check and the detach.
    let owners = t.bdevs.hold_bdev_owners();
    for b in &ctrlrs[pos].bdevs {
        t.bdevs.check_no_user(b)?;
    }
    let c = ctrlrs.remove(pos);
    drop(ctrlrs);
    let r = detach(t, c);
    drop(owners);
    r.map_err(|e| nvme_error(&e))?;
    Ok(Value::Bool(true))
}

/// Whether every `(key, value)` of a detach names `trid`'s path. pmio's host picks no source
/// address, so `hostaddr`/`hostsvcid` match only when empty.
fn path_matches(trid: &Trid, keys: &[(&str, String)]) -> bool {
    let j = trid.json();
    keys.iter().all(|(k, v)| match *k {
        "hostaddr" | "hostsvcid" => v.is_empty(),
        "traddr" | "trtype" | "adrfam" => j
            .get(*k)
            .and_then(Value::as_str)
            .is_some_and(|s| s.eq_ignore_ascii_case(v)),
        _ => j.get(*k).and_then(Value::as_str) == Some(v.as_str()),
    })
}

/// SPDK's `bdev_nvme_reset_controller` (`name`, optional `cntlid`, which must then be the
/// controller's): resets the controller and answers `true` once the reset is over.
fn bdev_nvme_reset_controller(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("name")?;
    let cntlid: Option<u16> = p.opt("cntlid")?;
    p.finish()?;
    let ctrlr = rpc
        .target
        .ctrlrs_mut()
        .iter()
        .find(|c| c.name == name)
        .map(|c| Arc::clone(&c.ctrlr))
        .ok_or_else(|| {
            RpcError::errno_detail(-libc::ENODEV, format_args!("no NVMe controller {name}"))
        })?;
    if let Some(id) = cntlid
        && id != ctrlr.identify().cntlid
    {
        return Err(RpcError::errno_detail(
            -libc::ENODEV,
            format_args!(
                "controller {name} has cntlid {}, not {id}",
                ctrlr.identify().cntlid
            ),
        ));
    }
    ctrlr.reset().map_err(|e| nvme_error(&e))?;
    log::info!("reset NVMe controller {name}");
    Ok(Value::Bool(true))
}

/// SPDK's `bdev_nvme_get_controllers` (optional `name`): each controller with its one path,
/// `{"name", "ctrlrs": [{"state", "trid", "cntlid", "host"}]}`.
fn bdev_nvme_get_controllers(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: Option<String> = p.opt("name")?;
    p.finish()?;
    let all = rpc.target.ctrlrs();
    let picked: Vec<&CtrlrRecord> = all
        .iter()
        .filter(|c| name.as_ref().is_none_or(|n| *n == c.name))
        .collect();
    if name.is_some() && picked.is_empty() {
        return Err(RpcError::errno(-libc::ENODEV));
    }
    Ok(Value::Array(picked.into_iter().map(ctrlr_json).collect()))
}

/// One controller as SPDK lists it, with SPDK's state names: `enabled`, `resetting` (an
/// NVMe/TCP controller reconnecting), `failed` (its reconnects ran past
/// `ctrlr_loss_timeout_sec`, or its reset failed: only detaching is left).
fn ctrlr_json(c: &CtrlrRecord) -> Value {
    let state = c.ctrlr.state().as_str();
    json!({
        "name": c.name,
        "ctrlrs": [{
            "state": state,
            "trid": c.trid.json(),
            "cntlid": c.ctrlr.identify().cntlid,
            "host": {"nqn": c.hostnqn, "addr": "", "svcid": ""}
        }]
    })
}

/// The `bdev_nvme_attach_controller` calls that reattach every controller (`save_config`).
pub fn config(t: &Target) -> Vec<Value> {
    t.ctrlrs()
        .into_iter()
        .map(|c| json!({"method": "bdev_nvme_attach_controller", "params": c.saved}))
        .collect()
}

/// Removes a controller's bdevs, then shuts it down.
fn detach(t: &Target, c: CtrlrRecord) -> Result<(), NvmeError> {
    for b in &c.bdevs {
        let _ = t.bdevs.registry.unregister(b);
        t.bdevs.forget_bdev_state(b);
    }
    t.bdevs.forget_children(&c.name);
    let r = c.ctrlr.detach();
    match &r {
        Ok(()) => log::info!(
            "detached NVMe controller {} ({})",
            c.name,
            c.trid.describe()
        ),
        Err(e) => log::warn!("detaching NVMe controller {}: {e}", c.name),
    }
    r
}

/// Detaches every controller (daemon shutdown).
pub fn detach_all(t: &Target) {
    let all: Vec<CtrlrRecord> = std::mem::take(&mut *t.ctrlrs_mut());
    for c in all.into_iter().rev() {
        let _ = detach(t, c);
    }
}

#[cfg(test)]
mod tests;
