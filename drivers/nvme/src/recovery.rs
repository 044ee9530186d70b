//! Controller-level recovery used by queue pairs when commands time out or the controller
//! fails: Abort, controller reset (CC.EN 1 → 0 → 1, admin queue reprogrammed, queues granted
//! again), and the controller's liveness state.
//!
//! A reset never blocks a reactor. It is a state machine ([`ResetStep`], SPDK's
//! `spdk_nvme_ctrlr_reset_poll_async`): the queue pair that needs it starts it (making
//! `CtrlrInner::reset_gen` odd), and every submit or poll of any queue pair of the controller
//! advances it by what the controller has done meanwhile, taking the reset and admin-queue
//! locks only with `try_lock`: Quiescing (Delete I/O SQ then CQ of each queue ID in use, while
//! the controller still answers) → Disabling (CC.EN cleared, CSTS.RDY=0, then the admin queue
//! is reprogrammed) → Enabling (CSTS.RDY=1) → SettingQueues (Set Features Number of Queues) →
//! done (`reset_gen` even again). Each step has a deadline on the driver's clock (a short
//! budget for the deletions, CAP.TO for the ready bit, the admin timeout for the command).
//!
//! The deletions are Linux's `nvme_dev_disable` order: a controller told to delete a queue
//! aborts the commands it still runs from it, one by one, before it answers, where clearing
//! CC.EN makes it drop them all at once. QEMU 7.2's NVMe controller segfaults when CC.EN is
//! cleared under reads it still has in flight: 2 runs of vm_nvme's step 10 in 178 crashed it
//! before the deletions, none in 1,800 after (`VM_NVME_RESETS`).
//!
//! Queue pairs notice the odd generation at their next submit or poll (one atomic load), stop
//! touching their hardware queues and hold new submissions in software; once the generation is
//! even again they recreate their own I/O queues on their own rings (Create I/O CQ and SQ,
//! also submitted and polled without waiting: [`CtrlrInner::admin_try`]), resubmit (or fail)
//! what was outstanding, then submit what they held. SPDK does the same for PCIe: reuse the qpair
//! memory, re-create each I/O qpair after the controller is re-initialised.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::admin::AdminQueue;
use crate::ctrlr::{
    CtrlrInner, DELETE_CQ, DELETE_SQ, SET_NUM_QUEUES, delete_queue_sqe, granted_queues,
    nvme_configure_admin, nvme_disable, nvme_enable, nvme_ready, set_num_queues_sqe, try_lock,
};
use crate::error::NvmeError;
use crate::regs::{Csts, off};
use crate::spec::{Cqe, Sqe, admin_opc};

/// Whether the controller can be used at all (a reset in progress is told by an odd
/// `CtrlrInner::reset_gen`, not here). It leaves `Alive` for good.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CtrlrLiveness {
    /// The controller works.
    Alive,
    /// Registers read all ones: the device is gone.
    Removed,
    /// A reset failed: the controller is unusable.
    Failed,
}

/// A [`CtrlrLiveness`] shared by the queue pairs of a controller: only its values are ever
/// stored.
pub(crate) struct AtomicLiveness(AtomicU8);

impl AtomicLiveness {
    pub(crate) const fn new(v: CtrlrLiveness) -> AtomicLiveness {
        AtomicLiveness(AtomicU8::new(v as u8))
    }

    pub(crate) fn load(&self, order: Ordering) -> CtrlrLiveness {
        Self::decode(self.0.load(order))
    }

    pub(crate) fn store(&self, v: CtrlrLiveness, order: Ordering) {
        self.0.store(v as u8, order);
    }

    pub(crate) fn swap(&self, v: CtrlrLiveness, order: Ordering) -> CtrlrLiveness {
        Self::decode(self.0.swap(v as u8, order))
    }

    fn decode(v: u8) -> CtrlrLiveness {
        match v {
            0 => CtrlrLiveness::Alive,
            1 => CtrlrLiveness::Removed,
            2 => CtrlrLiveness::Failed,
            _ => unreachable!("AtomicLiveness holds {v}: only CtrlrLiveness values are stored"),
        }
    }
}

/// `d` in ns on the driver's clock, clamped so that adding it to a clock read cannot
/// overflow.
pub(crate) fn clamp_ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX / 2)) as u64
}

impl CtrlrInner {
    /// Whether the controller is alive, removed or failed.
    #[inline]
    pub(crate) fn liveness(&self) -> CtrlrLiveness {
        self.liveness.load(Ordering::Acquire)
    }

    /// Records that the device is gone; every queue pair fails its I/O at its next poll.
    #[cold]
    pub(crate) fn mark_removed(&self) {
        if self.liveness.swap(CtrlrLiveness::Removed, Ordering::AcqRel) != CtrlrLiveness::Removed {
            log::error!(
                "{}: device removed (registers read all ones): failing all I/O",
                self.name
            );
            // By two: a reset in progress stays in progress (it ends at its next step).
            self.reset_gen.fetch_add(2, Ordering::AcqRel);
        }
    }

    /// Submits an Abort of command `cid` of SQ `sqid` without waiting; returns the Abort's
    /// own command identifier, for [`CtrlrInner::abort_poll`], or `None` when nothing was
    /// submitted: another thread holds the admin queue right now (try again later), or a
    /// controller reset is in progress (it recovers the command anyway).
    #[cold]
    pub(crate) fn abort_submit(&self, sqid: u16, cid: u16) -> Result<Option<u16>, NvmeError> {
        self.check_attached()?;
        let mut sqe = Sqe::new(admin_opc::ABORT, 0);
        sqe.cdw10 = u32::from(cid) << 16 | u32::from(sqid);
        let Some(mut admin) = self.try_admin() else {
            return Ok(None);
        };
        if self.reset_in_progress() {
            return Ok(None);
        }
        admin
            .submit(&*self.regs, sqe)
            .map(Some)
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
    /// While another thread holds the admin queue, or a controller reset is in progress, the
    /// Abort stays pending (a reset makes it moot: the queue pair drops it then).
    #[cold]
    pub(crate) fn abort_poll(&self, abort_cid: u16) -> Result<Option<bool>, NvmeError> {
        let Some(mut admin) = self.try_admin() else {
            return Ok(None);
        };
        if self.reset_in_progress() {
            return Ok(None);
        }
        match admin.poll_for(&*self.regs, abort_cid) {
            Some(cqe) if cqe.status().is_success() => Ok(Some(cqe.dw0 & 1 == 0)),
            Some(cqe) => Err(NvmeError::AdminCommand {
                ctrlr: self.name.clone(),
                what: "Abort",
                status: cqe.status(),
            }),
            None => {
                admin.check_alive(&*self.regs, &self.name, "waiting for an Abort")?;
                Ok(None)
            }
        }
    }

    /// Whether a controller reset is in progress (the queues are down).
    #[inline]
    pub(crate) fn reset_in_progress(&self) -> bool {
        self.reset_gen.load(Ordering::Acquire) & 1 == 1
    }

    /// The driver's clock: ns since `epoch` (the queue pairs read the same clock).
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn ready_timeout_ns(&self) -> u64 {
        // CAP.TO = 0 is not allowed; treat it as the smallest unit.
        self.cap.timeout_ms().max(500) * 1_000_000
    }

    /// Starts a controller reset unless one started since generation `seen_gen` was read
    /// (another queue pair's). Clears CC.EN and returns at once: [`CtrlrInner::reset_poll`]
    /// does the rest. Returns `Ok(false)` when it cannot start now without waiting (another
    /// thread holds the reset or the admin queue): the caller asks again at its next poll.
    /// Fails when the controller is removed, failed or detached.
    #[cold]
    pub(crate) fn reset_start(&self, seen_gen: u64, now: u64) -> Result<bool, NvmeError> {
        let Some(mut step) = try_lock(&self.reset) else {
            return Ok(false);
        };
        if self.reset_gen.load(Ordering::Acquire) != seen_gen {
            return Ok(true);
        }
        match self.liveness() {
            CtrlrLiveness::Removed => {
                return Err(NvmeError::DeviceRemoved {
                    ctrlr: self.name.clone(),
                });
            }
            CtrlrLiveness::Failed => {
                return Err(NvmeError::ControllerFatal {
                    ctrlr: self.name.clone(),
                    state: "after a failed reset",
                });
            }
            CtrlrLiveness::Alive => {}
        }
        self.check_attached()?;
        // Held so that no blocking admin command (`admin_exec`) is running when the admin
        // queue goes away; commands run across polls (Aborts, queue creation) are dropped by
        // their queue pairs when they see the reset.
        let Some(_admin) = self.try_admin() else {
            return Ok(false);
        };
        log::warn!("{}: resetting the controller", self.name);
        let csts = Csts(self.regs.read32(off::CSTS));
        let answers = csts.rdy() && !csts.cfs() && !csts.is_all_ones();
        *step = Some(match self.next_qid_in_use(0) {
            Some(qid) if answers => ResetStep::Quiescing {
                qid,
                cq: false,
                cmd: PendingAdmin::default(),
                deadline: now.saturating_add(QUIESCE_BUDGET_NS),
            },
            _ => self.disable(now),
        });
        // Queue pairs stop ringing their doorbells from here on; one already past its check
        // rings a queue being deleted (its command is then aborted, or lost and recovered
        // with the rest).
        self.reset_gen.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    /// Clears CC.EN: the first step of a reset after the queues are deleted (or without
    /// deleting them, when the controller does not answer).
    fn disable(&self, now: u64) -> ResetStep {
        nvme_disable(&*self.regs);
        ResetStep::Disabling {
            deadline: now.saturating_add(self.ready_timeout_ns()),
        }
    }

    /// Advances the reset in progress as far as it goes without waiting (nothing when no
    /// reset is in progress, or when another thread holds the reset or the admin queue right
    /// now). When it ends, `reset_gen` moves to even; a failure leaves the controller `Failed`
    /// (or `Removed`).
    #[cold]
    pub(crate) fn reset_poll(&self, now: u64) {
        let Some(mut step) = try_lock(&self.reset) else {
            return;
        };
        let Some(mut admin) = step.as_ref().and_then(|_| self.try_admin()) else {
            return;
        };
        // A controller that answers at once goes through every step in one call: two
        // deletions per I/O queue ID, then Disabling → Enabling → SettingQueues → done.
        for _ in 0..2 * usize::from(self.io_queues) + 3 {
            let Some(cur) = *step else { return };
            let next = if self.detached.load(Ordering::Acquire) {
                Err(NvmeError::Detached {
                    ctrlr: self.name.clone(),
                })
            } else {
                self.reset_advance(cur, &mut admin, now)
            };
            match next {
                Ok(Some(next)) if next == cur => return,
                Ok(Some(next)) => {
                    log::trace!("{}: reset step {next:?}", self.name);
                    *step = Some(next);
                }
                Ok(None) => {
                    log::info!("{}: controller reset done", self.name);
                    *step = None;
                    self.reset_gen.fetch_add(1, Ordering::AcqRel);
                }
                Err(e) => {
                    if matches!(e, NvmeError::DeviceRemoved { .. }) {
                        log::error!("{e}");
                        self.liveness
                            .store(CtrlrLiveness::Removed, Ordering::Release);
                    } else {
                        log::error!("{}: controller reset failed: {e}", self.name);
                        self.liveness
                            .store(CtrlrLiveness::Failed, Ordering::Release);
                    }
                    *step = None;
                    self.reset_gen.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// Drives a reset in progress to its end, sleeping briefly between steps: for callers off
    /// the I/O path (opening a queue pair), never for a reactor's poll or submit.
    pub(crate) fn reset_wait(&self) {
        while self.reset_in_progress() {
            self.reset_poll(self.now_ns());
            if self.reset_in_progress() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// One step of a reset: what `cur` waits for, checked once. Returns the next step (`cur`
    /// itself while still waiting), `None` when the reset is done.
    fn reset_advance(
        &self,
        cur: ResetStep,
        admin: &mut AdminQueue,
        now: u64,
    ) -> Result<Option<ResetStep>, NvmeError> {
        let regs = &*self.regs;
        let (deadline, state) = match cur {
            ResetStep::Quiescing {
                qid,
                cq,
                mut cmd,
                deadline,
            } => return self.quiesce_step(admin, qid, cq, &mut cmd, deadline, now),
            ResetStep::Disabling { deadline } => {
                if nvme_ready(regs, &self.name, false, RDY0)? {
                    nvme_configure_admin(regs, admin, self.cap);
                    nvme_enable(regs);
                    return Ok(Some(ResetStep::Enabling {
                        deadline: now.saturating_add(self.ready_timeout_ns()),
                    }));
                }
                (deadline, RDY0)
            }
            ResetStep::Enabling { deadline } => {
                if nvme_ready(regs, &self.name, true, RDY1)? {
                    return Ok(Some(ResetStep::SettingQueues {
                        cmd: PendingAdmin::default(),
                    }));
                }
                (deadline, RDY1)
            }
            ResetStep::SettingQueues { mut cmd } => {
                let sqe = set_num_queues_sqe(self.io_queues);
                return match self.admin_step(admin, &mut cmd, sqe, SET_NUM_QUEUES, now)? {
                    Some(cqe) => self.queues_granted(&cqe).map(|()| None),
                    None => Ok(Some(ResetStep::SettingQueues { cmd })),
                };
            }
        };
        if now > deadline {
            return Err(NvmeError::Timeout {
                ctrlr: self.name.clone(),
                state,
                ms: self.ready_timeout_ns() / 1_000_000,
            });
        }
        Ok(Some(cur))
    }

    /// One Quiescing step: Delete I/O SQ `qid` (or, with `cq`, its CQ) advanced once. A
    /// deletion the controller refuses (the queue pair had not recreated that queue after an
    /// earlier reset) is skipped; once every queue ID in use is done, or the budget is spent
    /// or the controller stops answering, the controller is disabled.
    fn quiesce_step(
        &self,
        admin: &mut AdminQueue,
        qid: u16,
        cq: bool,
        cmd: &mut PendingAdmin,
        deadline: u64,
        now: u64,
    ) -> Result<Option<ResetStep>, NvmeError> {
        let (opc, what) = if cq {
            (admin_opc::DELETE_IO_CQ, DELETE_CQ)
        } else {
            (admin_opc::DELETE_IO_SQ, DELETE_SQ)
        };
        let next = match self.admin_step(admin, cmd, delete_queue_sqe(opc, qid), what, now) {
            Ok(None) if now <= deadline => {
                return Ok(Some(ResetStep::Quiescing {
                    qid,
                    cq,
                    cmd: *cmd,
                    deadline,
                }));
            }
            Ok(None) => {
                log::warn!(
                    "{}: queue deletions before the reset took over {} ms: disabling the controller",
                    self.name,
                    QUIESCE_BUDGET_NS / 1_000_000
                );
                None
            }
            Ok(Some(_)) | Err(NvmeError::AdminCommand { .. }) if !cq => Some((qid, true)),
            Ok(Some(_)) | Err(NvmeError::AdminCommand { .. }) => {
                self.next_qid_in_use(qid).map(|q| (q, false))
            }
            Err(e @ NvmeError::DeviceRemoved { .. }) => return Err(e),
            Err(e) => {
                log::warn!("{}: {e}: disabling the controller", self.name);
                None
            }
        };
        Ok(Some(match next {
            Some((qid, cq)) if now <= deadline => ResetStep::Quiescing {
                qid,
                cq,
                cmd: PendingAdmin::default(),
                deadline,
            },
            _ => self.disable(now),
        }))
    }

    /// Checks the Set Features Number of Queues completion of a reset (or an NVMe/TCP
    /// reconnect): the controller must grant as many I/O queue pairs as at attach (the queue
    /// IDs in use stay valid).
    pub(crate) fn queues_granted(&self, cqe: &Cqe) -> Result<(), NvmeError> {
        let granted = granted_queues(cqe);
        if granted < self.io_queues {
            return Err(NvmeError::Unsupported {
                ctrlr: self.name.clone(),
                reason: format!(
                    "{granted} I/O queue pairs granted after the reset, {} before",
                    self.io_queues
                ),
            });
        }
        Ok(())
    }

    /// Advances admin command `cmd`, which belongs to the controller as the reset that made
    /// generation `reset_gen` left it, without waiting: submits `sqe` unless it is submitted
    /// already, then looks for its completion once. `None` while it is pending, also while
    /// another thread holds the admin queue, and for good once the generation moved (a reset
    /// in progress or done since: the caller follows it, starting over). Without that check a
    /// caller preempted across a whole reset would recreate a queue of the generation before
    /// in the new one, and its next attempt would find it there. Fails on an error status,
    /// after the admin timeout, on a fatal controller status or a vanished device.
    #[cold]
    pub(crate) fn admin_try(
        &self,
        reset_gen: u64,
        cmd: &mut PendingAdmin,
        sqe: Sqe,
        what: &'static str,
        now: u64,
    ) -> Result<Option<Cqe>, NvmeError> {
        self.check_attached()?;
        let Some(mut admin) = self.try_admin() else {
            return Ok(None);
        };
        // Under the admin queue's lock: a reset's steps take it too, so a command sent here
        // goes out before the next reset deletes or disables anything.
        if self.reset_gen.load(Ordering::Acquire) != reset_gen {
            return Ok(None);
        }
        self.admin_step(&mut admin, cmd, sqe, what, now)
    }

    /// [`CtrlrInner::admin_try`] on the locked admin queue.
    fn admin_step(
        &self,
        admin: &mut AdminQueue,
        cmd: &mut PendingAdmin,
        sqe: Sqe,
        what: &'static str,
        now: u64,
    ) -> Result<Option<Cqe>, NvmeError> {
        let regs = &*self.regs;
        let admin_ns = clamp_ns(self.opts.admin_timeout);
        let cid = match cmd.cid {
            Some(cid) => cid,
            None => {
                let cid = admin.submit(regs, sqe).ok_or_else(|| NvmeError::Timeout {
                    ctrlr: self.name.clone(),
                    state: "waiting for a free admin queue slot",
                    ms: 0,
                })?;
                *cmd = PendingAdmin {
                    cid: Some(cid),
                    deadline: now.saturating_add(admin_ns),
                };
                cid
            }
        };
        match admin.poll_for(regs, cid) {
            Some(cqe) if cqe.status().is_success() => Ok(Some(cqe)),
            Some(cqe) => Err(NvmeError::AdminCommand {
                ctrlr: self.name.clone(),
                what,
                status: cqe.status(),
            }),
            None => {
                admin.check_alive(regs, &self.name, what)?;
                if now > cmd.deadline {
                    return Err(NvmeError::Timeout {
                        ctrlr: self.name.clone(),
                        state: what,
                        ms: admin_ns / 1_000_000,
                    });
                }
                Ok(None)
            }
        }
    }
}

/// An admin command run across polls (submitted, then looked for; never waited for).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PendingAdmin {
    /// Its command identifier, once submitted.
    cid: Option<u16>,
    /// When it times out (ns on the driver's clock), once submitted.
    deadline: u64,
}

impl PendingAdmin {
    /// Whether the command was sent to the controller.
    pub(crate) fn submitted(&self) -> bool {
        self.cid.is_some()
    }
}

/// What a reset waits for, in timeout messages.
const RDY0: &str = "waiting for CSTS.RDY=0 after a reset";
const RDY1: &str = "waiting for CSTS.RDY=1 after a reset";

/// How long a reset spends deleting the I/O queues before it disables the controller anyway:
/// a controller that needs a reset may not answer admin commands either, and disabling works
/// without the deletions (they only spare the controller aborting everything at once).
const QUIESCE_BUDGET_NS: u64 = 1_000_000_000;

/// The step a controller reset is at (SPDK's `spdk_nvme_ctrlr_reset_poll_async`): each is
/// checked once per poll, never waited for. Deadlines are ns on the driver's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResetStep {
    /// Delete I/O SQ `qid` (or, with `cq`, its CQ) submitted or about to be (`cmd`); then the
    /// next queue ID in use, and CC.EN is cleared after the last or at `deadline`.
    Quiescing {
        qid: u16,
        cq: bool,
        cmd: PendingAdmin,
        deadline: u64,
    },
    /// CC.EN cleared: waiting for CSTS.RDY=0; then the admin queue is reprogrammed and
    /// CC.EN set.
    Disabling { deadline: u64 },
    /// Waiting for CSTS.RDY=1; then Set Features Number of Queues is submitted.
    Enabling { deadline: u64 },
    /// Set Features Number of Queues submitted (its admin command identifier and deadline
    /// in `cmd`); waiting for its completion.
    SettingQueues { cmd: PendingAdmin },
}
