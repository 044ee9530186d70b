//! Following a controller reset (SPDK's nvme_qpair.c side of it), off the hot path: starting
//! the reset this queue pair wants, advancing the one in progress by one non-blocking step
//! per submit or poll, taking the queues down meanwhile; resubmitting commands within the
//! recovery budget (`NvmeOptions::recovery_retries`) after a timeout, abort or reset; and
//! failing every request once the device is removed or the controller failed. The queues
//! themselves are recreated in `recreate.rs`.

use std::sync::atomic::Ordering;

use pmio::request::Request;

use super::NvmeQpair;
use super::state::QpairState;
use crate::error::IoError;
use crate::recovery::CtrlrLiveness;

impl NvmeQpair {
    /// The controller's reset generation moved, or this queue pair waits for a reset: starts
    /// the reset it wants or advances the one in progress by one non-blocking step, then
    /// follows the controller: queues down (`Resetting`) while the reset is in progress,
    /// recreated once it is done, every request failed if the controller is removed or failed.
    #[cold]
    pub(super) fn sync_ctrlr(&mut self, rqs: &mut [Request]) {
        let now = self.trk.now_ns();
        if self.want_reset && !self.start_reset(rqs, now) {
            return;
        }
        let mut cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen & 1 == 1 {
            self.ctrlr.reset_poll(now);
            cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        }
        match self.ctrlr.liveness() {
            CtrlrLiveness::Removed => {
                self.reset_gen = cur_gen;
                self.fail_queue(rqs, QpairState::Removed);
            }
            CtrlrLiveness::Failed => {
                self.reset_gen = cur_gen;
                self.fail_queue(rqs, QpairState::Failed);
            }
            CtrlrLiveness::Alive if cur_gen & 1 == 1 || self.want_reset => {
                if self.state != QpairState::Resetting {
                    self.set_state(QpairState::Resetting);
                    // Aborts submitted before a reset never complete (the admin queue is
                    // reset too); the reset recovers their commands.
                    self.aborts_pending.clear();
                }
            }
            CtrlrLiveness::Alive if cur_gen == self.reset_gen => {
                // No reset happened after all: the queues are intact.
                self.set_state(QpairState::Alive);
                self.submit_held(rqs);
            }
            CtrlrLiveness::Alive => self.recreate(rqs, cur_gen, now),
        }
    }

    /// Starts the controller reset this queue pair wants, unless another queue pair's already
    /// did (it stays wanted when the reset cannot start without waiting). Returns false when
    /// it cannot be reset at all and this queue pair failed everything instead.
    #[cold]
    fn start_reset(&mut self, rqs: &mut [Request], now: u64) -> bool {
        match self.ctrlr.reset_start(self.reset_gen, now) {
            Ok(started) => self.want_reset = !started,
            Err(e) => {
                self.want_reset = false;
                log::error!("{e}");
                // Removed or failed: followed like any other queue pair. Detached: no
                // controller to reset.
                if self.ctrlr.liveness() == CtrlrLiveness::Alive {
                    self.fail_queue(rqs, QpairState::Failed);
                    return false;
                }
            }
        }
        true
    }

    /// Resets the controller (unless another queue pair already did): starts the reset and
    /// takes this queue pair's queues down until it is done, without waiting for it.
    #[cold]
    pub(super) fn reset_controller(&mut self, rqs: &mut [Request]) {
        self.want_reset = true;
        self.sync_ctrlr(rqs);
    }

    /// Resubmits the command of slot `idx` after a timeout, abort or reset, unless its
    /// budget is spent. Returns whether it was resubmitted.
    #[cold]
    pub(super) fn requeue(&mut self, rqs: &[Request], idx: usize) -> bool {
        if !self.trk.may_recover(idx) || idx >= rqs.len() {
            return false;
        }
        let now = self.trk.now_ns();
        match self.build(&rqs[idx]) {
            Ok(sqe) if self.rings.push(&sqe) => {
                self.trk.recovered(idx, now);
                true
            }
            _ => false,
        }
    }

    /// After a controller reset: submits what was held, in order.
    #[cold]
    pub(super) fn submit_held(&mut self, rqs: &mut [Request]) {
        let held = self.trk.take_held();
        if !held.is_empty() {
            self.submit_batch(rqs, &held);
        }
        self.trk.restore_held(held);
    }

    /// The queue pair gives up on its queues (`state` is `Removed` or `Failed`): Aborts in
    /// flight are dropped, and everything in the device or held fails, now and later.
    #[cold]
    pub(super) fn fail_queue(&mut self, rqs: &mut [Request], state: QpairState) {
        self.set_state(state);
        self.aborts_pending.clear();
        self.fail_all(rqs, self.dead_error());
    }

    /// What every request fails with once the queue pair is `Removed` or `Failed`.
    fn dead_error(&self) -> IoError {
        if self.state == QpairState::Removed {
            IoError::Removed
        } else {
            IoError::ControllerFailed
        }
    }

    /// Fails every command in the device, and every held submission, with `err`.
    #[cold]
    fn fail_all(&mut self, rqs: &mut [Request], err: IoError) {
        for idx in 0..self.trk.slots.len() {
            if self.trk.slots[idx].outstanding {
                self.trk.stats.failed_dead += 1;
                self.trk.fail_slot(rqs, idx, err);
            }
        }
        self.trk.fail_held(rqs, err);
        self.trk.next_scan = u64::MAX;
    }

    /// Rejects a batch: the controller is removed or failed.
    #[cold]
    pub(super) fn reject_dead(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.trk.reject_all(rqs, tags, self.dead_error());
    }
}
