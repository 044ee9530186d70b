//! The module's own state, the context its methods run on: the attached controllers, the
//! attaches in progress, the driver defaults, and the daemon's bdevs they add theirs to.

use std::sync::{Arc, Mutex, MutexGuard};

use pmio_runtime::rpc::BdevHost;
use serde_json::{Value, json};

use super::defaults::SharedDefaults;
use super::trid::Trid;
use crate::{Controller, NvmeError};

/// An attached NVMe controller.
#[derive(Clone)]
pub struct CtrlrRecord {
    /// Controller name.
    pub name: String,
    /// Where it is.
    pub trid: Trid,
    /// Bdev names, one per namespace.
    pub bdevs: Vec<String>,
    /// The driver's controller.
    pub ctrlr: Arc<Controller>,
    /// The `bdev_nvme_attach_controller` parameters that attach it again (`save_config`).
    pub saved: Value,
    /// The host NQN it connected with (empty for PCIe).
    pub hostnqn: String,
}

/// A controller a transport brought up, with what the module keeps about it.
pub struct Attached {
    /// The driver's controller.
    pub ctrlr: Controller,
    /// The `bdev_nvme_attach_controller` parameters `save_config` writes.
    pub saved: Value,
    /// The host NQN it connected with (empty for PCIe).
    pub hostnqn: String,
}

/// The NVMe bdev module of a daemon: what its `bdev_nvme_*` methods run on.
pub struct NvmeRpc {
    /// The daemon's bdevs; each namespace is one.
    pub bdevs: Arc<BdevHost>,
    ctrlrs: Mutex<Vec<CtrlrRecord>>,
    /// Controllers being attached (name, path): reserved so that two attaches never take the
    /// same name or path while the slow bring-up runs with `ctrlrs` unlocked. Locked after
    /// `ctrlrs`.
    attaching: Mutex<Vec<(String, Trid)>>,
    defaults: Arc<SharedDefaults>,
    /// The keys controllers authenticate with (`--dhchap-key` names them).
    pub keyring: Arc<pmio_keyring::Keyring>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NvmeRpc {
    /// The module on the daemon's `bdevs`, with no controller and the driver's defaults.
    pub fn new(bdevs: Arc<BdevHost>) -> NvmeRpc {
        NvmeRpc::with_keyring(bdevs, Arc::default())
    }

    /// The same, looking keys up in the daemon's `keyring`.
    pub fn with_keyring(bdevs: Arc<BdevHost>, keyring: Arc<pmio_keyring::Keyring>) -> NvmeRpc {
        NvmeRpc {
            bdevs,
            ctrlrs: Mutex::new(Vec::new()),
            attaching: Mutex::new(Vec::new()),
            defaults: Arc::default(),
            keyring,
        }
    }

    /// The driver defaults later attaches use (`bdev_nvme_set_options` sets them).
    pub fn defaults(&self) -> &Arc<SharedDefaults> {
        &self.defaults
    }

    /// Attached controllers.
    pub fn ctrlrs(&self) -> Vec<CtrlrRecord> {
        lock(&self.ctrlrs).clone()
    }

    /// Locks the controller list (attach/detach hold it across the whole operation).
    pub fn ctrlrs_mut(&self) -> MutexGuard<'_, Vec<CtrlrRecord>> {
        lock(&self.ctrlrs)
    }

    /// Locks the list of attaches in progress (after [`NvmeRpc::ctrlrs_mut`]).
    pub fn attaching_mut(&self) -> MutexGuard<'_, Vec<(String, Trid)>> {
        lock(&self.attaching)
    }

    /// The module's part of `save_config`: the `bdev_nvme_attach_controller` calls that
    /// reattach every controller.
    pub fn config(&self) -> Vec<Value> {
        self.ctrlrs()
            .into_iter()
            .map(|c| json!({"method": "bdev_nvme_attach_controller", "params": c.saved}))
            .collect()
    }

    /// Removes a controller's bdevs, then shuts it down.
    pub fn detach(&self, c: CtrlrRecord) -> Result<(), NvmeError> {
        for b in &c.bdevs {
            let _ = self.bdevs.registry.unregister(b);
            self.bdevs.forget_bdev_state(b);
        }
        self.bdevs.forget_children(&c.name);
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

    /// Detaches every controller, last attached first (daemon shutdown).
    pub fn detach_all(&self) {
        let all: Vec<CtrlrRecord> = std::mem::take(&mut *self.ctrlrs_mut());
        for c in all.into_iter().rev() {
            let _ = self.detach(c);
        }
    }
}
