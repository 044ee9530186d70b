//! The hot path: `DriverQueue` for the queue pair. A submit batch becomes SQEs and one SQ
//! doorbell write; a poll reports requests failed before the device, walks the CQ by phase
//! tag (retrying retryable statuses within `NvmeOptions::io_retries`), and rings the CQ head
//! doorbell once. Recovery is entered only when the controller's reset generation moved, the
//! queues are down, or the clock says a deadline or health check may be due.

use std::sync::atomic::Ordering;

use pmio::bdev::DriverQueue;
use pmio::request::{IoStatus, Request};

use super::NvmeQpair;
use super::state::QpairState;
use super::tracker::CmdSlot;
use crate::error::IoError;
use crate::spec::Cqe;

impl DriverQueue for NvmeQpair {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        if self.ctrlr.mapper.generation() != self.dma_gen {
            self.refresh_dma_ranges();
        }
        if self.ctrlr.reset_gen.load(Ordering::Relaxed) != self.reset_gen
            || self.state == QpairState::Resetting
        {
            self.sync_ctrlr(rqs);
        }
        match self.state {
            QpairState::Alive => self.submit_batch(rqs, tags),
            QpairState::Resetting => self.trk.hold(rqs, tags),
            QpairState::Removed | QpairState::Failed => self.reject_dead(rqs, tags),
        }
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        if self.ctrlr.reset_gen.load(Ordering::Relaxed) != self.reset_gen
            || self.state == QpairState::Resetting
        {
            self.sync_ctrlr(rqs);
        }
        let mut n = self.trk.report_failed(rqs, done, max);
        if self.state == QpairState::Resetting {
            // The queues are down until the controller reset is done.
            return n;
        }
        let sq_before = self.trk.stats.submitted;
        let mut consumed = 0u32;
        while n < max && consumed < self.rings.entries {
            let Some(cqe) = self.rings.pop() else { break };
            consumed += 1;
            if self.complete(rqs, cqe, done) {
                n += 1;
                self.trk.stats.completed += 1;
            }
        }
        if consumed > 0 {
            self.rings.ring_cq(&*self.regs);
        }
        if self.trk.stats.submitted != sq_before {
            self.rings.ring_sq(&*self.regs);
        }
        // Timeouts and controller health: one clock read per poll while commands are in the
        // device; the scan itself runs only when something may be due.
        if self.trk.outstanding > self.trk.failed.len() {
            let now = self.trk.now_ns();
            self.trk.last_now = now;
            if now >= self.trk.next_scan.min(self.next_health) || !self.aborts_pending.is_empty() {
                self.check(rqs, now);
            }
        }
        n
    }

    fn outstanding(&self) -> usize {
        self.trk.outstanding
    }
}

impl NvmeQpair {
    /// Writes one SQE per request and rings the SQ doorbell once.
    #[inline]
    pub(super) fn submit_batch(&mut self, rqs: &mut [Request], tags: &[u16]) {
        let now = self.trk.batch_clock();
        let mut pushed = false;
        for &tag in tags {
            let Some(idx) = self.trk.claim(rqs, tag, now) else {
                continue;
            };
            match self.build(&rqs[idx]) {
                Ok(sqe) if self.rings.push(&sqe) => pushed = true,
                Ok(_) => self.trk.unclaim(rqs, idx, IoError::Removed),
                Err(e) => self.trk.unclaim(rqs, idx, e),
            }
        }
        if pushed {
            self.rings.ring_sq(&*self.regs);
        }
    }

    /// Handles one completion; returns whether a request is done (its tag pushed on `done`).
    #[inline]
    fn complete(&mut self, rqs: &mut [Request], cqe: Cqe, done: &mut Vec<u16>) -> bool {
        let tag = cqe.cid;
        let live = self
            .trk
            .slots
            .get(usize::from(tag))
            .is_some_and(|s| s.outstanding)
            && usize::from(tag) < rqs.len();
        if !live {
            self.unknown(cqe);
            return false;
        }
        let st = cqe.status();
        let idx = usize::from(tag);
        if st.is_success() {
            rqs[idx].status = IoStatus::Success;
        } else if st.is_sq_deletion_abort()
            && self.ctrlr.reset_gen.load(Ordering::Acquire) != self.reset_gen
        {
            // A reset's own Delete I/O SQ, seen by a poll that began before the reset (which
            // may even be over by now): the command stays outstanding and is resubmitted once
            // this queue pair has recreated its queues.
            return false;
        } else if self.trk.slots[idx].aborted {
            // The completion of a command aborted after a timeout: resubmit within budget.
            if self.requeue(rqs, idx) {
                return false;
            }
            self.trk.give_up(rqs, idx);
        } else if st.is_retryable() && self.trk.slots[idx].retries < self.max_retries {
            self.trk.slots[idx].retries += 1;
            self.trk.slots[idx].ts = self.trk.last_now;
            self.trk.stats.retries += 1;
            if self.resubmit(&rqs[idx]) {
                return false;
            }
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        } else {
            self.device_error(tag, st);
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        }
        self.trk.slots[idx] = CmdSlot {
            done_once: true,
            ..CmdSlot::default()
        };
        self.trk.outstanding -= 1;
        done.push(tag);
        true
    }

    #[cold]
    fn refresh_dma_ranges(&mut self) {
        self.dma_gen = self.ctrlr.mapper.snapshot(&mut self.dma_ranges);
    }

    #[cold]
    pub(super) fn unknown(&mut self, cqe: Cqe) {
        if self
            .trk
            .slots
            .get(usize::from(cqe.cid))
            .is_some_and(|s| s.done_once)
        {
            self.trk.stats.duplicates += 1;
            log::warn!(
                "{}: qpair {}: duplicate completion for command {} ignored",
                self.ctrlr.name,
                self.rings.qid,
                cqe.cid
            );
            return;
        }
        self.trk.stats.unknown_completions += 1;
        log::warn!(
            "{}: qpair {}: completion for command {} that is not outstanding ignored (status {})",
            self.ctrlr.name,
            self.rings.qid,
            cqe.cid,
            cqe.status()
        );
    }

    #[cold]
    fn device_error(&mut self, tag: u16, st: crate::spec::Status) {
        self.trk.stats.errors += 1;
        self.trk.last_error = Some(IoError::Status(st));
        log::debug!("{}: request {tag} failed: {st}", self.ctrlr.name);
    }

    #[cold]
    fn resubmit(&mut self, rq: &Request) -> bool {
        match self.build(rq) {
            Ok(sqe) if self.rings.push(&sqe) => {
                self.trk.stats.submitted += 1;
                true
            }
            _ => false,
        }
    }
}
