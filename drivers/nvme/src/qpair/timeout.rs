//! Timeouts and controller health, off the hot path: commands past
//! `NvmeOptions::io_timeout` (found by the tracker's scan; each is aborted, a second timeout
//! resets the controller), the CSTS check every `health_check_interval` (fatal status → reset; all ones
//! → removed), and the Aborts in flight, looked for at each poll and never waited for.

use pmio::request::Request;

use super::NvmeQpair;
use crate::error::NvmeError;
use crate::regs::{Csts, off};

/// An Abort in flight on the admin queue.
#[derive(Clone, Copy)]
pub(super) struct PendingAbort {
    /// The Abort's command identifier on the admin queue.
    abort_cid: u16,
    /// The I/O command it aborts.
    tag: u16,
    /// When it counts as failed (ns since `epoch`).
    deadline: u64,
}

impl NvmeQpair {
    /// Reads CSTS when due (fatal status → reset; all ones → removed) and looks for
    /// timed-out commands when due (abort; a second timeout or a failed abort → reset).
    #[cold]
    pub(super) fn check(&mut self, rqs: &mut [Request], now: u64) {
        if !self.aborts_pending.is_empty() && !self.poll_aborts(rqs, now) {
            return;
        }
        if now >= self.next_health {
            self.next_health = now.saturating_add(self.health_ns);
            let csts = Csts(self.regs.read32(off::CSTS));
            if csts.is_all_ones() {
                self.ctrlr.mark_removed();
                self.sync_ctrlr(rqs);
                return;
            }
            if csts.cfs() {
                log::error!(
                    "{}: controller fatal status (CSTS.CFS) seen by qpair {}",
                    self.ctrlr.name,
                    self.rings.qid
                );
                self.reset_controller(rqs);
                return;
            }
        }
        if self.trk.timeout_ns == 0 || now < self.trk.next_scan {
            return;
        }
        let mut next = u64::MAX;
        let mut reset = false;
        let mut from = 0;
        while let Some(idx) = self.trk.overdue(from, now, &mut next) {
            from = idx + 1;
            self.trk.stats.timeouts += 1;
            if self.trk.slots[idx].aborted {
                log::error!(
                    "{}: qpair {}: command {idx} still not complete after an abort",
                    self.ctrlr.name,
                    self.rings.qid
                );
                reset = true;
                break;
            }
            log::warn!(
                "{}: qpair {}: command {idx} timed out; aborting it",
                self.ctrlr.name,
                self.rings.qid
            );
            match self.ctrlr.abort_submit(self.rings.qid, idx as u16) {
                Ok(None) => {
                    // The admin queue is busy, or a controller reset is in progress (the
                    // next poll follows it): scan again at the next poll.
                    next = now;
                    break;
                }
                Ok(Some(abort_cid)) => {
                    self.aborts_pending.push(PendingAbort {
                        abort_cid,
                        tag: idx as u16,
                        deadline: now.saturating_add(self.abort_ns),
                    });
                    self.trk.aborting(idx, now, &mut next);
                }
                Err(NvmeError::DeviceRemoved { .. }) => {
                    self.ctrlr.mark_removed();
                    self.sync_ctrlr(rqs);
                    return;
                }
                Err(e) => {
                    log::error!(
                        "{}: qpair {}: abort of command {idx} failed: {e}",
                        self.ctrlr.name,
                        self.rings.qid
                    );
                    self.trk.stats.aborts_failed += 1;
                    reset = true;
                    break;
                }
            }
        }
        self.trk.next_scan = next;
        if reset {
            self.reset_controller(rqs);
        }
    }

    /// Looks for the outcome of pending Aborts (the reactor never waits for one). Returns
    /// false when the queue pair was reset or failed meanwhile (the caller stops).
    #[cold]
    fn poll_aborts(&mut self, rqs: &mut [Request], now: u64) -> bool {
        let mut i = 0;
        while i < self.aborts_pending.len() {
            let p = self.aborts_pending[i];
            let failed = match self.ctrlr.abort_poll(p.abort_cid) {
                Ok(Some(found)) => {
                    if !found {
                        log::warn!(
                            "{}: qpair {}: abort of command {}: not aborted by the controller",
                            self.ctrlr.name,
                            self.rings.qid,
                            p.tag
                        );
                    }
                    self.aborts_pending.swap_remove(i);
                    continue;
                }
                Ok(None) if now < p.deadline => {
                    i += 1;
                    continue;
                }
                Ok(None) => NvmeError::Timeout {
                    ctrlr: self.ctrlr.name.clone(),
                    state: "waiting for an Abort",
                    ms: self.abort_ns / 1_000_000,
                },
                Err(NvmeError::DeviceRemoved { .. }) => {
                    self.ctrlr.mark_removed();
                    self.sync_ctrlr(rqs);
                    return false;
                }
                Err(e) => e,
            };
            log::error!(
                "{}: qpair {}: abort of command {} failed: {failed}",
                self.ctrlr.name,
                self.rings.qid,
                p.tag
            );
            self.trk.stats.aborts_failed += 1;
            self.reset_controller(rqs);
            return false;
        }
        true
    }
}
