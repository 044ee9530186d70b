//! `bdev_nvme_attach_controller` / `bdev_nvme_detach_controller` (trtype PCIe) on pmio's VFIO
//! NVMe driver.
//!
//! Attach brings the controller up (reset, admin queue, identify: seconds at worst), so it runs
//! on the RPC connection thread, never on a reactor; it answers with one bdev name per namespace,
//! `<name>n<nsid>`, as SPDK. Attaching the same name to the same address again returns the
//! existing names (idempotent); a name or address already in use is -17 naming the controller.
//! Detach and daemon shutdown remove the bdevs first, then run the controller's shutdown
//! sequence (CC.SHN, wait for CSTS.SHST). `bdev_nvme_reset_controller` resets a controller on
//! the connection thread and answers once it is back; the reactors' queue pairs hold their
//! I/O meanwhile and recreate their queues at their next poll (no reactor waits).

use std::sync::Arc;

use pmio::BlockDevice;
use pmio_nvme::NvmeError;
use serde_json::{Value, json};

use crate::jsonrpc::RpcError;
use crate::methods::{Method, RUNTIME, Rpc};
use crate::params::Params;
use crate::target::{BdevKind, CtrlrRecord, Target};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        Method {
            name: "bdev_nvme_attach_controller",
            states: RUNTIME,
            run: bdev_nvme_attach_controller,
        },
        Method {
            name: "bdev_nvme_detach_controller",
            states: RUNTIME,
            run: bdev_nvme_detach_controller,
        },
        Method {
            name: "bdev_nvme_reset_controller",
            states: RUNTIME,
            run: bdev_nvme_reset_controller,
        },
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
        NvmeError::Unsupported { .. } => libc::EOPNOTSUPP,
        _ => libc::EIO,
    };
    RpcError::errno_detail(-errno, e)
}

/// Fabrics-only parameters rpc.py may send: refused for PCIe when given. (`hostnqn` is not
/// among them: SPDK's `save_config` writes it for every controller, PCIe ones included, and
/// SPDK accepts it back.)
const FABRICS_ONLY: [&str; 7] = [
    "adrfam",
    "trsvcid",
    "subnqn",
    "hostaddr",
    "hostsvcid",
    "psk",
    "dhchap_key",
];

fn bdev_nvme_attach_controller(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("name")?;
    let trtype: String = p.req("trtype")?;
    let traddr: String = p.req("traddr")?;
    let num_io_queues: Option<u16> = p.opt("num_io_queues")?;
    for k in [
        "prchk_reftag",
        "prchk_guard",
        "hdgst",
        "ddgst",
        "allow_unrecognized_csi",
    ] {
        p.accept_default(k, json!(false))?;
    }
    p.accept_default("multipath", json!("disable"))?;
    // Newer SPDK clients always send these.
    p.accept_default("disable_sq_flow_control", json!(false))?;
    if let Some(o) = p.opt::<serde_json::Map<String, Value>>("multipath_opts")?
        && !o.is_empty()
    {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            "multipath_opts: pmio attaches one path per controller",
        ));
    }
    let mut fabrics = Vec::new();
    for k in FABRICS_ONLY
        .into_iter()
        .chain(["dhchap_ctrlr_key", "priority"])
    {
        if p.opt::<Value>(k)?.is_some() {
            fabrics.push(k);
        }
    }
    // A PCIe controller has no host NQN; SPDK writes one for every controller it saves.
    p.opt::<String>("hostnqn")?;
    // Reconnect/timeouts tunables of fabrics controllers: meaningless for PCIe, accepted.
    for k in [
        "ctrlr_loss_timeout_sec",
        "reconnect_delay_sec",
        "fast_io_fail_timeout_sec",
        "fabrics_connect_timeout_us",
        "max_bdevs",
    ] {
        p.opt::<i64>(k)?;
    }
    p.finish()?;
    if !trtype.eq_ignore_ascii_case("pcie") {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!("trtype {trtype}: pmio attaches PCIe controllers only"),
        ));
    }
    if let Some(k) = fabrics.first() {
        return Err(RpcError::errno_detail(
            -libc::EINVAL,
            format_args!("parameter \"{k}\" does not apply to trtype PCIe"),
        ));
    }
    let t = &rpc.target;
    // Hold the controller list across the whole attach: two attaches never race.
    let mut ctrlrs = t.ctrlrs_mut();
    if let Some(c) = ctrlrs.iter().find(|c| c.name == name) {
        if c.traddr.eq_ignore_ascii_case(&traddr) {
            return Ok(json!(c.bdevs));
        }
        return Err(RpcError::errno_detail(
            -libc::EEXIST,
            format_args!("controller {name} is already attached at {}", c.traddr),
        ));
    }
    if let Some(c) = ctrlrs
        .iter()
        .find(|c| c.traddr.eq_ignore_ascii_case(&traddr))
    {
        return Err(RpcError::errno_detail(
            -libc::EEXIST,
            format_args!("{traddr} is already attached as controller {}", c.name),
        ));
    }
    // The driver's defaults with what bdev_nvme_set_options mapped (config::settings).
    let mut opts = rpc.settings.nvme_options(&name);
    if let Some(n) = num_io_queues {
        opts.max_io_queues = n;
    }
    opts.validate().map_err(|e| nvme_error(&e))?;
    let ctrlr = pmio_nvme::attach(&traddr, opts).map_err(|e| nvme_error(&e))?;
    let ctrlr = Arc::new(ctrlr);
    let mut names: Vec<String> = Vec::new();
    for b in ctrlr.bdevs() {
        let bname = b.info().name.clone();
        if let Err(e) = t.add_bdev(
            b,
            BdevKind::Nvme {
                ctrlr: name.clone(),
            },
            None,
        ) {
            for n in &names {
                let _ = t.registry.unregister(n.as_str());
            }
            t.forget_ctrlr_bdevs(&name);
            if let Err(d) = ctrlr.detach() {
                log::warn!("{name}: detach after failed attach: {d}");
            }
            return Err(e);
        }
        names.push(bname);
    }
    log::info!("attached NVMe controller {name} at {traddr}: bdevs {names:?}");
    ctrlrs.push(CtrlrRecord {
        name,
        traddr,
        bdevs: names.clone(),
        ctrlr,
    });
    Ok(json!(names))
}

fn bdev_nvme_detach_controller(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("name")?;
    let trtype: Option<String> = p.opt("trtype")?;
    let traddr: Option<String> = p.opt("traddr")?;
    for k in ["adrfam", "trsvcid", "subnqn", "hostaddr", "hostsvcid"] {
        p.opt::<String>(k)?;
    }
    p.finish()?;
    let t = &rpc.target;
    let mut ctrlrs = t.ctrlrs_mut();
    let Some(pos) = ctrlrs.iter().position(|c| {
        c.name == name
            && traddr
                .as_ref()
                .is_none_or(|a| a.eq_ignore_ascii_case(&c.traddr))
            && trtype
                .as_ref()
                .is_none_or(|tt| tt.eq_ignore_ascii_case("pcie"))
    }) else {
        return Err(RpcError::errno(-libc::ENODEV));
    };
    if let Some(b) = ctrlrs[pos].bdevs.iter().find(|b| t.is_claimed(b)) {
        return Err(RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {b} of controller {name} is running perform_tests"),
        ));
    }
    // No namespace may take one of its bdevs between this check and the detach.
    let owners = t.hold_bdev_owners();
    for b in &ctrlrs[pos].bdevs {
        t.check_no_namespace(b)?;
    }
    let c = ctrlrs.remove(pos);
    drop(ctrlrs);
    let r = detach(t, c);
    drop(owners);
    r.map_err(|e| nvme_error(&e))?;
    Ok(Value::Bool(true))
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

/// Removes a controller's bdevs, then shuts it down.
fn detach(t: &Target, c: CtrlrRecord) -> Result<(), NvmeError> {
    for b in &c.bdevs {
        let _ = t.registry.unregister(b);
        t.forget_bdev_state(b);
    }
    t.forget_ctrlr_bdevs(&c.name);
    let r = c.ctrlr.detach();
    match &r {
        Ok(()) => log::info!("detached NVMe controller {} ({})", c.name, c.traddr),
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
