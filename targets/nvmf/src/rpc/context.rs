//! What the nvmf and sock methods run on: the NVMe/TCP target and the daemon's bdevs.

use std::sync::Arc;

use pmio_runtime::rpc::{BdevHost, BdevUser};

use crate::NvmfTarget;
use pmio_keyring::Keyring;

/// The context of the `nvmf_*` and `sock_*` methods: the target they configure and the bdevs
/// its namespaces are made of. A daemon holds one and hangs [`super::methods`] on its registry
/// with a projection to it.
#[derive(Clone)]
pub struct NvmfRpc {
    /// The NVMe/TCP target (SPDK's `spdk_nvmf_tgt`).
    pub tgt: Arc<NvmfTarget>,
    /// Every bdev of the daemon.
    pub bdevs: Arc<BdevHost>,
    /// The keys hosts authenticate with (`nvmf_subsystem_add_host --dhchap-key` names them).
    pub keyring: Arc<Keyring>,
}

impl NvmfRpc {
    /// A target on `bdevs`' reactors serving `bdevs`' devices, registered with the host as a
    /// user of the bdevs its namespaces are made of (they are never deleted under it).
    pub fn new(bdevs: Arc<BdevHost>) -> NvmfRpc {
        NvmfRpc::with_keyring(bdevs, Arc::default())
    }

    /// The same, looking keys up in the daemon's `keyring`.
    pub fn with_keyring(bdevs: Arc<BdevHost>, keyring: Arc<Keyring>) -> NvmfRpc {
        let tgt = NvmfTarget::new(bdevs.reactors().clone(), bdevs.registry.clone());
        bdevs.add_user(Arc::new(NvmfUser(tgt.clone())));
        NvmfRpc {
            tgt,
            bdevs,
            keyring,
        }
    }
}

/// The NVMe/TCP target as a user of bdevs: a namespace's bdev is claimed.
struct NvmfUser(Arc<NvmfTarget>);

impl BdevUser for NvmfUser {
    fn user_of(&self, name: &str) -> Option<String> {
        self.0.bdev_in_use(name).map(|(nqn, nsid)| {
            format!(
                "bdev {name} is namespace {nsid} of NVMe-oF subsystem {nqn}; remove it first \
                 (nvmf_subsystem_remove_ns {nqn} {nsid})"
            )
        })
    }

    fn bdev_replaced(&self, dev: &Arc<dyn pmio::BlockDevice>) {
        self.0.bdev_replaced(dev);
    }
}
