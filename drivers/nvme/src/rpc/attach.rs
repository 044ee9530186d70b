//! `bdev_nvme_attach_controller`: the name and path reserved, the controller brought up by its
//! transport with the list unlocked, its namespaces registered as bdevs.

use std::sync::Arc;

use pmio::BlockDevice;
use pmio_jsonrpc::RpcError;
use pmio_runtime::rpc::BdevRecord;
use serde_json::{Value, json};

use super::args::{self, AttachArgs};
use super::context::{Attached, CtrlrRecord, NvmeRpc};
use super::error::nvme_error;
use super::tcp;
use super::trid::Trid;

/// SPDK's `bdev_nvme_attach_controller` ([`NvmeAttach`](super::params::NvmeAttach)): one bdev
/// name per namespace.
pub fn bdev_nvme_attach_controller(
    m: &NvmeRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let a = args::parse(params)?;
    let _slot = match reserve(m, &a)? {
        Reserved::Present(names) => return Ok(json!(names)),
        Reserved::Slot(s) => s,
    };
    let attached = match &a.tcp {
        None => attach_pcie(m, &a)?,
        Some(tcp) => tcp::attach(&a, tcp, &m.defaults().get(), &m.keyring)?,
    };
    register(m, a.name, a.trid, attached)
}

/// A PCIe controller through VFIO: the driver's defaults with what `bdev_nvme_set_options`
/// mapped and the attach's queue count.
fn attach_pcie(m: &NvmeRpc, a: &AttachArgs) -> Result<Attached, RpcError> {
    let mut opts = m.defaults().options(&a.name);
    if let Some(n) = a.num_io_queues {
        opts.max_io_queues = n;
    }
    opts.validate().map_err(|e| nvme_error(&e))?;
    let ctrlr = crate::attach(a.trid.traddr(), opts).map_err(|e| nvme_error(&e))?;
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
    module: &'a NvmeRpc,
    name: String,
}

impl Drop for AttachSlot<'_> {
    fn drop(&mut self) {
        self.module.attaching_mut().retain(|(n, _)| *n != self.name);
    }
}

/// Checks `a`'s name and path against the attached controllers and the attaches in progress,
/// and reserves both: the controller comes up without the list locked, and two attaches
/// never take the same name or path.
fn reserve<'a>(m: &'a NvmeRpc, a: &AttachArgs) -> Result<Reserved<'a>, RpcError> {
    let ctrlrs = m.ctrlrs_mut();
    let mut attaching = m.attaching_mut();
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
        module: m,
        name: a.name.clone(),
    }))
}

/// Registers the bdevs of a controller that came up and records it; on failure (a bdev name
/// taken meanwhile, the daemon stopping) removes what it registered and detaches it.
fn register(m: &NvmeRpc, name: String, trid: Trid, a: Attached) -> Result<Value, RpcError> {
    let ctrlr = Arc::new(a.ctrlr);
    let mut ctrlrs = m.ctrlrs_mut();
    let mut names: Vec<String> = Vec::new();
    let mut failed = None;
    if m.bdevs.is_stopping() {
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
        match m.bdevs.add_bdev(b, record) {
            Ok(()) => names.push(bname),
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        for n in &names {
            let _ = m.bdevs.registry.unregister(n.as_str());
        }
        m.bdevs.forget_children(&name);
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
