//! Controller-level recovery used by queue pairs when commands time out or the controller
//! fails: Abort, controller reset (CC.EN 1 → 0 → 1, admin queue reprogrammed, queues granted
//! again), and the controller's liveness state.
//!
//! A reset is done by the queue pair that needs it, under the admin-queue lock; it bumps
//! `CtrlrInner::reset_gen`, and every queue pair notices the change at its next submit or
//! poll (one atomic load) and recreates its own I/O queues on its own rings, then resubmits
//! (or fails) what was outstanding. SPDK does the same for PCIe: reuse the qpair memory,
//! re-create each I/O qpair after the controller is re-initialised.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::admin::{AdminQueue, check_alive};
use crate::ctrlr::{CtrlrInner, PAGE_SIZE};
use crate::error::NvmeError;
use crate::regs::{Cc, Csts, off};
use crate::spec::{Sqe, admin_opc, fid};

/// The controller works.
pub(crate) const ALIVE: u8 = 0;
/// Registers read all ones: the device is gone.
pub(crate) const REMOVED: u8 = 1;
/// A reset failed: the controller is unusable.
pub(crate) const FAILED: u8 = 2;

impl CtrlrInner {
    /// `ALIVE`, `REMOVED` or `FAILED`.
    #[inline]
    pub(crate) fn liveness(&self) -> u8 {
        self.dead.load(Ordering::Acquire)
    }

    /// Records that the device is gone; every queue pair fails its I/O at its next poll.
    #[cold]
    pub(crate) fn mark_removed(&self) {
        if self.dead.swap(REMOVED, Ordering::AcqRel) != REMOVED {
            log::error!(
                "{}: device removed (registers read all ones): failing all I/O",
                self.name
            );
            self.reset_gen.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Submits an Abort of command `cid` of SQ `sqid` without waiting; returns the Abort's
    /// own command identifier, for [`CtrlrInner::abort_poll`].
    #[cold]
    pub(crate) fn abort_submit(&self, sqid: u16, cid: u16) -> Result<u16, NvmeError> {
        if self.detached.load(Ordering::Acquire) {
            return Err(NvmeError::Detached {
                ctrlr: self.name.clone(),
            });
        }
        let mut sqe = Sqe::new(admin_opc::ABORT, 0);
        sqe.cdw10 = u32::from(cid) << 16 | u32::from(sqid);
        self.admin()
            .submit(&*self.regs, sqe)
            .ok_or_else(|| NvmeError::Timeout {
                ctrlr: self.name.clone(),
                state: "waiting for a free admin queue slot for an Abort",
                ms: 0,
            })
    }

    /// The outcome of an Abort submitted by [`CtrlrInner::abort_submit`]: `None` while it is
    /// pending; `Some(true)` when the controller aborted the command (its completion, with
    /// status "command abort requested", follows on the I/O queue); `Some(false)` when it did
    /// not (not found, or already completing). Fails on an error status, a fatal controller
    /// status or a vanished device.
    #[cold]
    pub(crate) fn abort_poll(&self, abort_cid: u16) -> Result<Option<bool>, NvmeError> {
        let mut admin = self.admin();
        match admin.poll_for(&*self.regs, abort_cid) {
            Some(cqe) if cqe.status().is_success() => Ok(Some(cqe.dw0 & 1 == 0)),
            Some(cqe) => Err(NvmeError::AdminCommand {
                ctrlr: self.name.clone(),
                what: "Abort",
                status: cqe.status(),
            }),
            None => {
                check_alive(&*self.regs, &self.name, "waiting for an Abort")?;
                Ok(None)
            }
        }
    }

    /// Resets the controller unless another queue pair did since generation `seen_gen` was
    /// read: disable, wait for not-ready, reprogram the admin queue, enable, wait for ready,
    /// ask for the same number of I/O queues. Every queue pair then recreates its queues.
    /// A failure leaves the controller `FAILED` (or `REMOVED`).
    #[cold]
    pub(crate) fn reset(&self, seen_gen: u64) -> Result<(), NvmeError> {
        let mut admin = self.admin();
        if self.reset_gen.load(Ordering::Acquire) != seen_gen {
            return Ok(());
        }
        match self.liveness() {
            REMOVED => {
                return Err(NvmeError::DeviceRemoved {
                    ctrlr: self.name.clone(),
                });
            }
            FAILED => {
                return Err(NvmeError::ControllerFatal {
                    ctrlr: self.name.clone(),
                    state: "after a failed reset",
                });
            }
            _ => {}
        }
        if self.detached.load(Ordering::Acquire) {
            return Err(NvmeError::Detached {
                ctrlr: self.name.clone(),
            });
        }
        log::warn!("{}: resetting the controller", self.name);
        let r = self.reset_locked(&mut admin);
        match &r {
            Ok(()) => log::info!("{}: controller reset done", self.name),
            Err(NvmeError::DeviceRemoved { .. }) => {
                self.dead.store(REMOVED, Ordering::Release);
            }
            Err(e) => {
                log::error!("{}: controller reset failed: {e}", self.name);
                self.dead.store(FAILED, Ordering::Release);
            }
        }
        self.reset_gen.fetch_add(1, Ordering::AcqRel);
        r
    }

    fn reset_locked(&self, admin: &mut AdminQueue) -> Result<(), NvmeError> {
        let regs = &*self.regs;
        let ready_timeout = Duration::from_millis(self.cap.timeout_ms().max(500));
        let cc = regs.read32(off::CC);
        regs.write32(off::CC, cc & !(Cc::EN | Cc::SHN_MASK));
        self.wait_ready(false, ready_timeout)?;
        admin.reset(self.cap.dstrd(), PAGE_SIZE as usize);
        admin.program(regs);
        let cc = Cc::for_enable(self.cap, PAGE_SIZE).0;
        regs.write32(off::CC, cc);
        regs.write32(off::CC, cc | Cc::EN);
        self.wait_ready(true, ready_timeout)?;
        let n = u32::from(self.io_queues.saturating_sub(1));
        let mut sqe = Sqe::new(admin_opc::SET_FEATURES, 0);
        sqe.cdw10 = fid::NUMBER_OF_QUEUES;
        sqe.cdw11 = n << 16 | n;
        let cqe = admin.exec(
            regs,
            sqe,
            self.opts.admin_timeout,
            &self.name,
            "Set Features Number of Queues",
        )?;
        let granted = ((cqe.dw0 & 0xffff) as u16).min((cqe.dw0 >> 16) as u16);
        if granted.saturating_add(1) < self.io_queues {
            return Err(NvmeError::Unsupported {
                ctrlr: self.name.clone(),
                reason: format!(
                    "{} I/O queue pairs granted after the reset, {} before",
                    granted + 1,
                    self.io_queues
                ),
            });
        }
        Ok(())
    }

    /// Waits until CSTS.RDY equals `ready` (fails on all ones, or on CFS while enabling).
    fn wait_ready(&self, ready: bool, timeout: Duration) -> Result<(), NvmeError> {
        let deadline = Instant::now() + timeout;
        loop {
            let csts = Csts(self.regs.read32(off::CSTS));
            if csts.is_all_ones() {
                return Err(NvmeError::DeviceRemoved {
                    ctrlr: self.name.clone(),
                });
            }
            if ready && csts.cfs() {
                return Err(NvmeError::ControllerFatal {
                    ctrlr: self.name.clone(),
                    state: "waiting for CSTS.RDY=1 after a reset",
                });
            }
            if csts.rdy() == ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(NvmeError::Timeout {
                    ctrlr: self.name.clone(),
                    state: if ready {
                        "waiting for CSTS.RDY=1 after a reset"
                    } else {
                        "waiting for CSTS.RDY=0 after a reset"
                    },
                    ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}
