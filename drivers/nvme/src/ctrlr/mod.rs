//! The controller: bring-up, identify and namespaces, I/O queue creation and deletion,
//! shutdown; [`Controller`], what an attached controller offers its user.
//!
//! Bring-up follows NVMe base spec §3.5.1 and SPDK's `nvme_ctrlr_process_init`: disable the
//! controller if a previous user left it enabled, program the admin queue, enable, identify
//! the controller and its active namespaces, and ask for I/O queues. Each state has its own
//! deadline: CAP.TO × 500 ms for ready transitions, the admin timeout for commands.
//!
//! # Transports
//! The same model drives a PCIe controller (registers in BAR0, queues in host memory) and an
//! NVMe/TCP one (`crate::tcp`: registers as Fabrics properties, each queue a connection). The
//! transport is reached through [`RegisterIo`] (register access), `crate::admin::AdminQueue`
//! (admin commands) and `Transport` (I/O queue pairs, reset, detach); the I/O queue pairs
//! are two concrete `DriverQueue` types chosen when a queue is opened, so the PCIe hot path
//! makes no indirect call for it.
//!
//! # Files
//! (PCIe) marks what is particular to a controller whose queues live in host memory; the
//! rest is the controller model any transport shares.
//! - `mod.rs`: [`Controller`] (the public handle: reset, DMA registration, detach) and
//!   `CtrlrInner`, what queue pairs and bdevs share of it, with the admin queue's lock.
//! - `options.rs`: [`NvmeOptions`], defaults and validation.
//! - `init.rs`: [`Init`], the bring-up state machine: states, deadlines, admin commands across
//!   polls, the [`Controller`] it builds.
//! - `enable.rs`: the CC / CSTS handshake: read CAP, disable, program the admin queue, enable
//!   (shared with the controller reset in `recovery.rs`), normal shutdown.
//! - `identify.rs`: Identify Controller, the active namespace list, each [`Namespace`].
//! - `queues.rs`: the I/O queues granted (Set Features Number of Queues), queue IDs, Create
//!   and Delete I/O SQ / CQ (PCIe).
//!
//! Recovery (Abort, the non-blocking controller reset, liveness) is `recovery.rs`.

mod enable;
mod identify;
mod init;
mod options;
mod queues;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::admin::AdminQueue;
use crate::dma::{DmaMapper, Mappings};
use crate::error::NvmeError;
use crate::recovery::{AtomicLiveness, CtrlrLiveness, ResetStep};
use crate::regs::{Cap, RegisterIo};
use crate::spec::{Cqe, IdentifyController, Sqe};

pub(crate) use enable::{nvme_configure_admin, nvme_disable, nvme_enable, nvme_ready};
pub use identify::Namespace;
pub use init::{Init, InitState};
pub use options::NvmeOptions;
pub(crate) use queues::{
    CREATE_CQ, CREATE_SQ, DELETE_CQ, DELETE_SQ, SET_NUM_QUEUES, create_cq_sqe, create_sq_sqe,
    delete_queue_sqe, granted_queues, set_num_queues_sqe,
};

/// What is particular to the controller's transport.
pub(crate) enum Transport {
    /// Registers in BAR0, queues in host memory (`CtrlrInner::regs`, `mapper`, the admin
    /// queue's rings): everything PCIe needs is in the shared fields.
    Pcie,
    /// NVMe/TCP: where the controller is, its options, the admin connection, the reconnect
    /// state.
    Tcp(Box<crate::tcp::TcpCtrlr>),
}

/// Host memory page size the driver uses (CC.MPS = 0).
pub const PAGE_SIZE: u64 = 4096;

/// What queue pairs and bdevs share of a controller.
pub(crate) struct CtrlrInner {
    pub name: String,
    pub regs: Arc<dyn RegisterIo>,
    pub mapper: Arc<Mappings>,
    pub cap: Cap,
    pub vs: u32,
    admin: Mutex<AdminQueue>,
    /// In-use flags of I/O queue IDs (index 0, the admin queue, unused).
    qids: Mutex<queues::QidMap>,
    pub io_queues: u16,
    pub id: Box<IdentifyController>,
    pub namespaces: Vec<Namespace>,
    /// Largest transfer of one command, bytes.
    pub max_transfer: u64,
    /// The controller was found enabled at attach (a previous user did not shut it down, or
    /// shut it down without disabling it) and was reset.
    pub reset_at_attach: bool,
    pub detached: AtomicBool,
    pub open_qpairs: AtomicUsize,
    /// Controller reset generation: odd while a reset is in progress, even otherwise. It moves
    /// by one when a reset starts and when it ends, by two when the device is found removed;
    /// queue pairs recreate their queues when it moved (and is even again).
    pub reset_gen: AtomicU64,
    /// The step a reset in progress is at (`None` when none is), see `recovery.rs`.
    pub(crate) reset: Mutex<Option<ResetStep>>,
    /// Alive, removed (registers read all ones) or failed (a reset failed).
    pub liveness: AtomicLiveness,
    /// Origin of the driver's clock (`now_ns`): reset deadlines and queue pairs' timestamps.
    pub epoch: Instant,
    pub opts: NvmeOptions,
    pub(crate) transport: Transport,
}

impl CtrlrInner {
    pub(crate) fn admin(&self) -> MutexGuard<'_, AdminQueue> {
        // A panic while holding the lock leaves the queue consistent (commands are
        // independent), so a poisoned lock is still usable.
        self.admin.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The admin queue if no one holds it now (reactors never wait for it on a reset).
    pub(crate) fn try_admin(&self) -> Option<MutexGuard<'_, AdminQueue>> {
        try_lock(&self.admin)
    }

    /// Runs one admin command to completion (not while a controller reset is in progress:
    /// the admin queue is being reprogrammed).
    pub fn admin_exec(&self, sqe: Sqe, what: &'static str) -> Result<Cqe, NvmeError> {
        self.check_attached()?;
        let mut admin = self.admin();
        if self.reset_in_progress() {
            return Err(NvmeError::Resetting {
                ctrlr: self.name.clone(),
            });
        }
        admin.exec(&*self.regs, sqe, self.opts.admin_timeout, &self.name, what)
    }
}

impl CtrlrInner {
    /// Fails once the controller is detached.
    pub(crate) fn check_attached(&self) -> Result<(), NvmeError> {
        if self.detached.load(Ordering::Acquire) {
            return Err(NvmeError::Detached {
                ctrlr: self.name.clone(),
            });
        }
        Ok(())
    }

    /// Fails when the controller is detached, removed or failed.
    pub(crate) fn check_usable(&self) -> Result<(), NvmeError> {
        self.check_attached()?;
        match self.liveness() {
            CtrlrLiveness::Alive => Ok(()),
            CtrlrLiveness::Removed => Err(NvmeError::DeviceRemoved {
                ctrlr: self.name.clone(),
            }),
            CtrlrLiveness::Failed => Err(NvmeError::ControllerFatal {
                ctrlr: self.name.clone(),
                state: "after a failed reset",
            }),
        }
    }
}

/// Locks `m` unless another thread holds it (a poisoned lock is still usable: its users
/// leave the data consistent).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl Drop for CtrlrInner {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("{e}");
        }
        self.mapper.unregister_all();
    }
}

/// Where a controller stands ([`Controller::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtrlrState {
    /// Usable.
    Enabled,
    /// Reconnecting (NVMe/TCP) or resetting: I/O is held, or failed fast after
    /// `fast_io_fail_timeout_sec`, until it is back.
    Resetting,
    /// Given up for good: every I/O fails; only detaching is left.
    Failed,
    /// Being detached.
    Deleting,
}

impl CtrlrState {
    /// SPDK's name of the state (`bdev_nvme_get_controllers`).
    pub fn as_str(self) -> &'static str {
        match self {
            CtrlrState::Enabled => "enabled",
            CtrlrState::Resetting => "resetting",
            CtrlrState::Failed => "failed",
            CtrlrState::Deleting => "deleting",
        }
    }
}

/// An attached controller. Namespaces are exposed as bdevs ([`Controller::bdevs`]); the
/// controller is shut down by [`Controller::detach`], or when the controller and every bdev
/// and queue pair of it are gone.
pub struct Controller {
    pub(crate) inner: Arc<CtrlrInner>,
}

impl Controller {
    /// Brings up the controller behind `regs` (see the module docs).
    pub fn attach_with(
        regs: Arc<dyn RegisterIo>,
        mapper: Arc<dyn DmaMapper>,
        opts: NvmeOptions,
    ) -> Result<Controller, NvmeError> {
        Init::new(regs, mapper, opts)?.run()
    }

    /// Controller name (`Nvme0`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Active namespaces with a usable format.
    pub fn namespaces(&self) -> &[Namespace] {
        &self.inner.namespaces
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.inner.id
    }

    /// Largest transfer of one command in bytes (MDTS, and one PRP list page).
    pub fn max_transfer_bytes(&self) -> u64 {
        self.inner.max_transfer
    }

    /// I/O queue pairs the controller granted.
    pub fn io_queues(&self) -> u16 {
        self.inner.io_queues
    }

    /// VS register (MJR \[31:16\], MNR \[15:8\], TER \[7:0\]).
    pub fn version(&self) -> u32 {
        self.inner.vs
    }

    /// CAP register.
    pub fn cap(&self) -> Cap {
        self.inner.cap
    }

    /// Whether attach found the controller enabled (left so by a previous user) and reset it.
    pub fn reset_at_attach(&self) -> bool {
        self.inner.reset_at_attach
    }

    /// Starts a controller reset and returns without waiting for it (SPDK's
    /// `spdk_nvme_ctrlr_reset` split as `..._reset_poll_async`): the queue pairs of the
    /// controller advance it as they submit and poll, holding new submissions meanwhile, then
    /// recreate their queues and resubmit what was outstanding. Nothing happens when a reset
    /// is in progress already. Fails when the controller is detached, removed or failed.
    pub fn start_reset(&self) -> Result<(), NvmeError> {
        let inner = &self.inner;
        if let Some(t) = inner.tcp() {
            inner.check_usable()?;
            t.request_reset();
            return Ok(());
        }
        loop {
            let seen = inner.reset_gen.load(Ordering::Acquire);
            if seen & 1 == 1 || inner.reset_start(seen, inner.now_ns())? {
                return Ok(());
            }
            // Another thread holds the admin queue for a moment (this caller is no reactor).
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Resets the controller and waits for the reset to end (off the I/O path: an RPC or a
    /// management thread, never a reactor): starts it as [`Controller::start_reset`] does,
    /// then drives it between short sleeps alongside the queue pairs' polls. The queue pairs
    /// recreate their own queues at their next submit or poll. Fails, with the reset's
    /// outcome, when the controller is left removed or failed.
    pub fn reset(&self) -> Result<(), NvmeError> {
        let before = self.inner.reset_gen.load(Ordering::Acquire);
        self.start_reset()?;
        if self.inner.tcp().is_some() {
            // Done when the controller thread reconnected (two generations on) or gave up.
            while self.inner.reset_gen.load(Ordering::Acquire) < (before | 1) + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        } else {
            self.inner.reset_wait();
        }
        match self.inner.liveness() {
            CtrlrLiveness::Removed => Err(NvmeError::DeviceRemoved {
                ctrlr: self.inner.name.clone(),
            }),
            CtrlrLiveness::Failed => Err(NvmeError::ControllerFatal {
                ctrlr: self.inner.name.clone(),
                state: "after a failed reset",
            }),
            CtrlrLiveness::Alive => Ok(()),
        }
    }

    /// The transport: "PCIe" or "TCP" (SPDK's `trtype`).
    pub fn transport(&self) -> &'static str {
        match self.inner.transport {
            Transport::Pcie => "PCIe",
            Transport::Tcp(_) => "TCP",
        }
    }

    /// Where an NVMe/TCP controller is (traddr, trsvcid, subnqn); `None` on PCIe.
    pub fn tcp_target(&self) -> Option<&crate::tcp::TcpTarget> {
        self.inner.tcp().map(|t| &t.target)
    }

    /// The options an NVMe/TCP controller was attached with; `None` on PCIe.
    pub fn tcp_options(&self) -> Option<&crate::tcp::TcpOptions> {
        self.inner.tcp().map(|t| &t.opts)
    }

    /// The host NQN an NVMe/TCP controller connected with; `None` on PCIe.
    pub fn hostnqn(&self) -> Option<&str> {
        self.inner.tcp().map(|t| t.hostnqn.as_str())
    }

    /// Whether the controller is usable now: not detached, not failed, and (NVMe/TCP) not
    /// reconnecting.
    pub fn connected(&self) -> bool {
        self.state() == CtrlrState::Enabled
    }

    /// Where the controller stands, as SPDK's `bdev_nvme_get_controllers` names it: a
    /// controller that gave up (its reset failed, its reconnects ran past
    /// `ctrlr_loss_timeout_sec`, or its device is gone) is `Failed` for good, one still trying
    /// is `Resetting`.
    pub fn state(&self) -> CtrlrState {
        if self.inner.detached.load(Ordering::Acquire) {
            return CtrlrState::Deleting;
        }
        if self.inner.liveness() != CtrlrLiveness::Alive {
            return CtrlrState::Failed;
        }
        if self.inner.reset_in_progress() {
            return CtrlrState::Resetting;
        }
        CtrlrState::Enabled
    }

    /// Queue pairs currently open.
    pub fn open_qpairs(&self) -> usize {
        self.inner.open_qpairs.load(Ordering::Acquire)
    }

    /// Makes `len` bytes at `addr` usable as I/O buffers: maps them for the device,
    /// replacing registrations they overlap (so a reused address never reaches stale pages;
    /// do not re-register memory with I/O in flight). Mappings still registered are removed
    /// when the controller goes.
    ///
    /// # Safety
    /// As [`DmaMapper::map`]: the memory must stay valid until [`Controller::dma_unregister`]
    /// or until the controller is dropped.
    pub unsafe fn dma_register(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.inner.mapper.register(&[(addr, len)]) }
    }

    /// Undoes [`Controller::dma_register`] (no I/O may use the memory any more).
    pub fn dma_unregister(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        self.inner.mapper.unregister(addr, len)
    }

    /// Shuts the controller down (normal shutdown, bounded wait). Queue pairs should be
    /// closed first; any still open stop working. Idempotent.
    pub fn detach(&self) -> Result<(), NvmeError> {
        self.inner.shutdown()
    }
}
