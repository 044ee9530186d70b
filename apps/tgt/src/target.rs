//! The daemon's state: the framework state machine, its bdevs ([`BdevHost`]), the targets that
//! serve them, the NVMe bdev module (the controllers it attached), the reactors.
//!
//! RPC methods run on connection threads and only touch this state and the bdev registry; work
//! that must happen on a reactor (opening queues, running I/O) is sent there as a message and its
//! result comes back on a channel.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use pmio_jsonrpc::RpcState;
use pmio_lvol::rpc::LvolRpc;
use pmio_nvme::rpc::NvmeRpc;
use pmio_nvmf::rpc::NvmfRpc;
use pmio_reactors::ReactorsHandle;
use pmio_reactors::rpc::ReactorsRpc;
use pmio_runtime::rpc::BdevHost;
use pmio_ublk::rpc::UblkRpc;
use pmio_vhost::rpc::VhostRpc;

/// The daemon state shared by every RPC connection.
pub struct Target {
    /// Every bdev, with the module that made it, its users and statistics.
    pub bdevs: Arc<BdevHost>,
    /// The NVMe/TCP target serving these bdevs (the `nvmf_*` and `sock_*` methods).
    pub nvmf: NvmfRpc,
    /// The vhost-user-blk target serving these bdevs to VMs (the `vhost_*` methods).
    pub vhost: VhostRpc,
    /// The ublk target serving these bdevs as local block devices (the `ublk_*` methods).
    pub ublk: UblkRpc,
    /// The NVMe bdev module: attached controllers, driver defaults (the `bdev_nvme_*` methods).
    pub nvme: Arc<NvmeRpc>,
    /// The RAID bdev module: its arrays (the `bdev_raid_*` methods).
    pub raid: pmio_raid::rpc::RaidRpc,
    /// The lvol module: lvstores found on or created on these bdevs (the `bdev_lvol_*` methods).
    pub lvol: Arc<LvolRpc>,
    /// The rbd bdev module: registered Ceph clusters (the `bdev_rbd_*` methods).
    pub rbd: pmio_rbd::rpc::RbdRpc,
    /// The keyring: keys the NVMe-oF target and the NVMe host name (the `keyring_*` methods).
    pub keyring: pmio_keyring::rpc::KeyringRpc,
    state: AtomicU8,
    /// The reactors as the reactor methods see them (thread ids, start time).
    pub reactors: ReactorsRpc,
}

impl Target {
    /// A target on `reactors`, in `state`.
    pub fn new(reactors: ReactorsHandle, state: RpcState) -> Target {
        let bdevs = Arc::new(BdevHost::new(reactors.clone()));
        let vhost = VhostRpc::new(bdevs.clone());
        let ublk = UblkRpc::new(bdevs.clone());
        // One keyring for the daemon: the NVMe-oF target and the NVMe host look keys up in it.
        let keyring = pmio_keyring::rpc::KeyringRpc::default();
        let nvmf = NvmfRpc::with_keyring(bdevs.clone(), keyring.keyring.clone());
        Target {
            reactors: ReactorsRpc::new(reactors.clone()),
            nvmf,
            vhost,
            ublk,
            nvme: Arc::new(NvmeRpc::with_keyring(
                bdevs.clone(),
                keyring.keyring.clone(),
            )),
            raid: pmio_raid::rpc::RaidRpc::new(bdevs.clone()),
            lvol: LvolRpc::new(bdevs.clone()),
            rbd: pmio_rbd::rpc::RbdRpc::new(bdevs.clone()),
            keyring,
            bdevs,
            state: AtomicU8::new(state as u8),
        }
    }

    /// The reactors.
    pub fn reactors(&self) -> &ReactorsHandle {
        self.bdevs.reactors()
    }

    /// Nanoseconds since the target started.
    pub fn uptime_ns(&self) -> u64 {
        self.bdevs.uptime_ns()
    }

    /// Current framework state.
    pub fn state(&self) -> RpcState {
        if self.state.load(Ordering::Acquire) == RpcState::Startup as u8 {
            RpcState::Startup
        } else {
            RpcState::Runtime
        }
    }

    /// Moves to runtime; false if already there.
    pub fn start_runtime(&self) -> bool {
        self.state
            .compare_exchange(
                RpcState::Startup as u8,
                RpcState::Runtime as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}
