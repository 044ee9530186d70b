//! Recreating the I/O queues after a controller reset, on the same rings (as SPDK does for
//! PCIe: the qpair memory is reused and each I/O queue re-created once the controller is
//! re-initialised): what completed before the reset is reaped, then Create I/O CQ and SQ are
//! each submitted and looked for without waiting, and once both exist every command that was
//! outstanding is resubmitted (or failed) and what was held is submitted. Closing the queue
//! pair meanwhile deletes only what exists. PCIe: a fabrics queue pair reconnects instead.

use std::sync::atomic::Ordering;

use pmio::request::{IoStatus, Request};

use super::NvmeQpair;
use super::state::QpairState;
use super::tracker::CmdSlot;
use crate::ctrlr::{CREATE_CQ, CREATE_SQ, PAGE_SIZE, create_cq_sqe, create_sq_sqe};
use crate::error::{IoError, NvmeError};
use crate::recovery::PendingAdmin;
use crate::ring::Rings;
use crate::spec::Sqe;

/// A queue pair recreating its I/O queues after the controller reset that made generation
/// `reset_gen`: Create I/O CQ, then (`sq`) SQ, each run across polls in `cmd`.
#[derive(Clone, Copy)]
pub(super) struct Recreating {
    pub(super) reset_gen: u64,
    sq: bool,
    cmd: PendingAdmin,
}

impl NvmeQpair {
    /// After the controller reset that made generation `cur_gen`: reaps what completed before
    /// it, recreates the queues on the same rings (Create I/O CQ, then SQ, each advanced
    /// without waiting: the queues stay down until both exist), then resubmits (or fails)
    /// every command that was outstanding and submits what was held.
    #[cold]
    pub(super) fn recreate(&mut self, rqs: &mut [Request], cur_gen: u64, now: u64) {
        let mut r = match self.recreating {
            Some(r) if r.reset_gen == cur_gen => r,
            _ => {
                self.trk.stats.resets += 1;
                self.reap_before_reset(rqs);
                Recreating {
                    reset_gen: cur_gen,
                    sq: false,
                    cmd: PendingAdmin::default(),
                }
            }
        };
        loop {
            let (sqe, what) = self.create_sqe(r.sq);
            match self
                .ctrlr
                .admin_try(r.reset_gen, &mut r.cmd, sqe, what, now)
            {
                Ok(None) => {
                    self.recreating = Some(r);
                    self.set_state(QpairState::Resetting);
                    return;
                }
                Ok(Some(_)) if !r.sq => {
                    r.sq = true;
                    r.cmd = PendingAdmin::default();
                }
                Ok(Some(_)) => break,
                Err(e) => {
                    self.recreating = None;
                    self.recreate_failed(rqs, e);
                    return;
                }
            }
        }
        self.recreating = None;
        // A queue pair that could not recreate its queues after an earlier reset gets
        // another chance with this one.
        self.reset_gen = cur_gen;
        self.set_state(QpairState::Alive);
        self.aborts_pending.clear();
        let mut pushed = false;
        for idx in 0..self.trk.slots.len() {
            if !self.trk.slots[idx].outstanding {
                continue;
            }
            if self.requeue(rqs, idx) {
                pushed = true;
            } else {
                let retries = self.trk.slots[idx].recoveries;
                self.trk.fail_slot(rqs, idx, IoError::TimedOut { retries });
            }
        }
        if pushed {
            self.rings.ring_sq(&*self.regs);
        }
        self.submit_held(rqs);
        if self.trk.timeout_ns != 0 {
            self.trk.next_scan = self.trk.now_ns() + self.trk.timeout_ns;
        }
    }

    /// Before recreating the queues: reaps what the controller completed before the reset
    /// (it is disabled: entries already posted are final), then empties the rings.
    #[cold]
    fn reap_before_reset(&mut self, rqs: &mut [Request]) {
        let mut reaped = 0u32;
        while reaped < self.rings.entries {
            let Some(cqe) = self.rings.pop() else { break };
            reaped += 1;
            let idx = usize::from(cqe.cid);
            let live = self.trk.slots.get(idx).is_some_and(|s| s.outstanding) && idx < rqs.len();
            if !live {
                self.unknown(cqe);
            } else if cqe.status().is_success() && !self.trk.slots[idx].aborted {
                self.trk.slots[idx] = CmdSlot {
                    done_once: true,
                    ..CmdSlot::default()
                };
                rqs[idx].status = IoStatus::Success;
                self.trk.failed.push(idx as u16);
            }
            // Other statuses: resubmitted after the reset like everything still outstanding.
        }
        self.rings = Rings::new(
            &self.mem,
            0,
            self.rings.qid,
            self.rings.entries,
            self.ctrlr.cap.dstrd(),
            PAGE_SIZE as usize,
        );
    }

    /// The queues could not be recreated: every request fails, now and later (until another
    /// reset gives this queue pair another chance).
    #[cold]
    fn recreate_failed(&mut self, rqs: &mut [Request], e: NvmeError) {
        log::error!(
            "{}: qpair {}: cannot recreate the queues after a reset: {e}",
            self.ctrlr.name,
            self.rings.qid
        );
        let state = if matches!(e, NvmeError::DeviceRemoved { .. }) {
            self.ctrlr.mark_removed();
            QpairState::Removed
        } else {
            QpairState::Failed
        };
        self.reset_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        self.fail_queue(rqs, state);
    }

    /// The command that recreates the CQ (`sq` false) or the SQ after a reset.
    fn create_sqe(&self, sq: bool) -> (Sqe, &'static str) {
        let (qid, entries) = (self.rings.qid, self.rings.entries);
        if sq {
            (create_sq_sqe(qid, entries, self.rings.sq_iova), CREATE_SQ)
        } else {
            (create_cq_sqe(qid, entries, self.rings.cq_iova), CREATE_CQ)
        }
    }

    /// Closing while the queues are being recreated after a reset: lets a Create command
    /// already sent finish (closing is off the I/O path, so it may wait), then deletes what
    /// exists of the queues, SQ before CQ. Deleting a queue never created would fail, and a
    /// failed delete leaks the rings (and with them the device's DMA mapping).
    #[cold]
    pub(super) fn delete_recreated(&mut self, mut r: Recreating) -> Result<(), NvmeError> {
        // The CQ exists once its SQ is being created.
        let (mut cq, mut sq) = (r.sq, false);
        if r.cmd.submitted() {
            let (sqe, what) = self.create_sqe(r.sq);
            loop {
                if self.ctrlr.reset_gen.load(Ordering::Acquire) != r.reset_gen {
                    // Another reset began: it deletes every I/O queue.
                    return Ok(());
                }
                match self
                    .ctrlr
                    .admin_try(r.reset_gen, &mut r.cmd, sqe, what, self.trk.now_ns())
                {
                    Ok(Some(_)) => {
                        (cq, sq) = (true, r.sq);
                        break;
                    }
                    Ok(None) => std::thread::sleep(std::time::Duration::from_micros(100)),
                    // Refused by the controller: nothing was created.
                    Err(NvmeError::AdminCommand { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        let qid = self.rings.qid;
        if sq {
            self.ctrlr.delete_sq(qid)?;
        }
        if cq {
            self.ctrlr.delete_cq(qid)?;
        }
        Ok(())
    }
}
