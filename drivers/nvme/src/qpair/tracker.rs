//! What a queue pair tracks of its requests, the same on either transport (SPDK keeps it in
//! the transport-neutral `nvme_qpair`, beside `nvme_pcie_qpair` and `nvme_tcp_qpair`): one
//! [`CmdSlot`] per tag, the submissions held while the queues are down, the requests that
//! completed without the device (reported at the next poll), the counters, and the clock of
//! the I/O deadlines (`NvmeOptions::io_timeout`). Each queue pair keeps its own mechanism to
//! send commands and to recover; nothing here touches a queue, a register or a socket.

use std::time::Instant;

use pmio::request::Request;

use super::QpairStats;
use crate::ctrlr::CtrlrInner;
use crate::error::IoError;
use crate::recovery::clamp_ns;

/// What the queue pair knows of the command of one tag (its CID).
#[derive(Clone, Copy, Default)]
pub(crate) struct CmdSlot {
    /// In the device (PCIe: in the SQ; NVMe/TCP: sent on the current connection).
    pub(crate) outstanding: bool,
    pub(crate) retries: u8,
    /// Resubmissions after timeouts, resets and reconnects.
    pub(crate) recoveries: u8,
    /// An Abort was sent for it (a second timeout resets the controller).
    pub(crate) aborted: bool,
    /// Completed since its last submission (a later completion is a duplicate).
    pub(crate) done_once: bool,
    /// Submitted while the queues were down and held in software (not in the device).
    pub(crate) held: bool,
    /// Submission time (ns since the controller's epoch), one clock read per submit batch.
    pub(crate) ts: u64,
}

/// The requests of one queue pair, by tag.
pub(crate) struct Tracker {
    /// The controller's name, for the log.
    name: Box<str>,
    qid: u16,
    depth: u32,
    /// Per tag (CID): the state of its command.
    pub(crate) slots: Vec<CmdSlot>,
    /// Tags submitted while the queues are down, in submission order (capacity `depth`).
    pub(crate) held: Vec<u16>,
    /// Tags whose request completed without the device (rejected, failed), reported at the
    /// next poll (capacity `depth`).
    pub(crate) failed: Vec<u16>,
    /// Requests submitted and not yet reported done: in the device, held or failed.
    pub(crate) outstanding: usize,
    pub(crate) stats: QpairStats,
    pub(crate) last_error: Option<IoError>,
    /// Clock origin of `CmdSlot::ts` (the controller's).
    epoch: Instant,
    /// I/O timeout in ns (0: off).
    pub(crate) timeout_ns: u64,
    /// When the next look for commands past their deadline is due (ns since `epoch`;
    /// `u64::MAX`: nothing submitted since the last look).
    pub(crate) next_scan: u64,
    /// The latest clock read (ns since `epoch`): the timestamp of retried commands.
    pub(crate) last_now: u64,
    /// Resubmissions one command gets after timeouts and resets before it fails.
    pub(crate) max_recoveries: u8,
}

impl Tracker {
    /// The tracker of queue `qid` of `ctrlr`, for tags `0..depth`.
    pub(crate) fn new(ctrlr: &CtrlrInner, qid: u16, depth: u32) -> Tracker {
        let d = depth as usize;
        Tracker {
            name: ctrlr.name.as_str().into(),
            qid,
            depth,
            slots: vec![CmdSlot::default(); d],
            held: Vec::with_capacity(d),
            failed: Vec::with_capacity(d),
            outstanding: 0,
            stats: QpairStats::default(),
            last_error: None,
            epoch: ctrlr.epoch,
            timeout_ns: clamp_ns(ctrlr.opts.io_timeout),
            next_scan: u64::MAX,
            last_now: 0,
            max_recoveries: ctrlr.opts.recovery_retries,
        }
    }

    /// The driver's clock: ns since the controller's epoch.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The timestamp of a submit batch: one clock read, only when timeouts are on (else 0);
    /// arms the deadline scan if it was idle.
    #[inline]
    pub(crate) fn batch_clock(&mut self) -> u64 {
        if self.timeout_ns == 0 {
            return 0;
        }
        let now = self.now_ns();
        self.last_now = now;
        if self.next_scan == u64::MAX {
            self.next_scan = now + self.timeout_ns;
        }
        now
    }

    /// The slot index of `tag` when it can be submitted; otherwise the request is rejected
    /// (a tag beyond the depth) or ignored (already outstanding or held), and `None`.
    #[inline]
    pub(crate) fn free_tag(&mut self, rqs: &mut [Request], tag: u16) -> Option<usize> {
        let idx = usize::from(tag);
        if idx >= self.slots.len() || idx >= rqs.len() {
            let depth = self.depth;
            self.reject(rqs, tag, IoError::BadTag { tag, depth });
            return None;
        }
        let slot = self.slots[idx];
        if slot.outstanding || slot.held {
            log::error!(
                "{}: request {tag} submitted while outstanding; ignored",
                self.name
            );
            return None;
        }
        Some(idx)
    }

    /// Takes `tag` for a command sent at `now` (outstanding, counted as submitted), when
    /// [`Tracker::free_tag`] allows; its retry and recovery counts carry over (a free slot
    /// has none, a resubmitted one keeps its own). Give it back with [`Tracker::unclaim`] if
    /// the command cannot be sent after all. Marking the slot before the command is built
    /// spares the hot path a second bounds check on it.
    #[inline]
    pub(crate) fn claim(&mut self, rqs: &mut [Request], tag: u16, now: u64) -> Option<usize> {
        let idx = self.free_tag(rqs, tag)?;
        let slot = &mut self.slots[idx];
        *slot = CmdSlot {
            outstanding: true,
            retries: slot.retries,
            recoveries: slot.recoveries,
            ts: now,
            ..CmdSlot::default()
        };
        self.outstanding += 1;
        self.stats.submitted += 1;
        Some(idx)
    }

    /// The command of a claimed slot could not be sent: its request is rejected with `err`.
    #[cold]
    pub(crate) fn unclaim(&mut self, rqs: &mut [Request], idx: usize, err: IoError) {
        self.slots[idx] = CmdSlot::default();
        self.outstanding -= 1;
        self.stats.submitted -= 1;
        self.reject(rqs, idx as u16, err);
    }

    /// Completes `tag` with `err` at the next poll (counted as outstanding until then).
    #[cold]
    pub(crate) fn reject(&mut self, rqs: &mut [Request], tag: u16, err: IoError) {
        log::debug!("{}: request {tag} rejected: {err}", self.name);
        self.last_error = Some(err);
        self.stats.rejected += 1;
        if let Some(rq) = rqs.get_mut(usize::from(tag)) {
            rq.status = err.to_io_status();
        }
        if self.failed.len() < self.failed.capacity() {
            self.failed.push(tag);
            self.outstanding += 1;
        } else {
            log::error!(
                "{}: more failed requests than tags; request {tag} dropped",
                self.name
            );
        }
    }

    /// Fails the request of outstanding slot `idx` with `err` (reported at the next poll).
    #[cold]
    pub(crate) fn fail_slot(&mut self, rqs: &mut [Request], idx: usize, err: IoError) {
        self.slots[idx] = CmdSlot {
            done_once: true,
            ..CmdSlot::default()
        };
        if let Some(rq) = rqs.get_mut(idx) {
            rq.status = err.to_io_status();
        }
        self.last_error = Some(err);
        // Still counted in `outstanding` until the poll reports it.
        self.failed.push(idx as u16);
    }

    /// Reports up to `max` requests that completed without the device; returns how many.
    #[inline]
    pub(crate) fn report_failed(
        &mut self,
        rqs: &[Request],
        done: &mut Vec<u16>,
        max: usize,
    ) -> usize {
        if self.failed.is_empty() {
            return 0;
        }
        self.report_failed_cold(rqs, done, max)
    }

    #[cold]
    fn report_failed_cold(&mut self, rqs: &[Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(tag) = self.failed.pop() else { break };
            self.outstanding -= 1;
            self.stats.completed += 1;
            if rqs
                .get(usize::from(tag))
                .is_none_or(|r| !r.status.is_success())
            {
                self.stats.errors += 1;
            }
            done.push(tag);
            n += 1;
        }
        n
    }

    /// Rejects a batch with `err`: the queue pair can no longer reach the device (a tag
    /// already outstanding is left alone).
    #[cold]
    pub(crate) fn reject_all(&mut self, rqs: &mut [Request], tags: &[u16], err: IoError) {
        for &tag in tags {
            if self
                .slots
                .get(usize::from(tag))
                .is_some_and(|s| s.outstanding)
            {
                continue;
            }
            self.stats.failed_dead += 1;
            self.reject(rqs, tag, err);
        }
    }

    /// Holds submissions in software while the queues are down (in order; counted as
    /// outstanding).
    #[cold]
    pub(crate) fn hold(&mut self, rqs: &mut [Request], tags: &[u16]) {
        for &tag in tags {
            let Some(idx) = self.free_tag(rqs, tag) else {
                continue;
            };
            self.slots[idx].held = true;
            self.held.push(tag);
            self.outstanding += 1;
        }
    }

    /// Takes the held tags out (no longer held nor counted); give the vector back with
    /// [`Tracker::restore_held`] so its capacity is kept (no allocation).
    pub(crate) fn take_held(&mut self) -> Vec<u16> {
        let held = std::mem::take(&mut self.held);
        self.outstanding -= held.len();
        for &tag in &held {
            self.slots[usize::from(tag)].held = false;
        }
        held
    }

    pub(crate) fn restore_held(&mut self, mut held: Vec<u16>) {
        held.clear();
        self.held = held;
    }

    /// Fails every held submission with `err` (a resubmission's retry and recovery counts
    /// go with it).
    #[cold]
    pub(crate) fn fail_held(&mut self, rqs: &mut [Request], err: IoError) {
        let held = self.take_held();
        for &tag in &held {
            self.slots[usize::from(tag)] = CmdSlot::default();
            self.stats.failed_dead += 1;
            self.reject(rqs, tag, err);
        }
        self.restore_held(held);
    }

    /// Whether the command of slot `idx` may be resubmitted once more after a timeout,
    /// abort, reset or reconnect (`NvmeOptions::recovery_retries`).
    pub(crate) fn may_recover(&self, idx: usize) -> bool {
        self.slots[idx].recoveries < self.max_recoveries
    }

    /// Slot `idx` was resubmitted at `now` after a timeout, abort, reset or reconnect.
    #[cold]
    pub(crate) fn recovered(&mut self, idx: usize, now: u64) {
        let slot = self.slots[idx];
        self.slots[idx] = CmdSlot {
            outstanding: true,
            retries: slot.retries,
            recoveries: slot.recoveries + 1,
            ts: now,
            ..CmdSlot::default()
        };
        self.stats.submitted += 1;
        self.stats.recovered += 1;
        if self.timeout_ns != 0 {
            self.next_scan = self.next_scan.min(now + self.timeout_ns);
        }
    }

    /// An aborted, reset or reconnected command exhausted its resubmissions: its request
    /// fails with `IoError::TimedOut` (the caller reports it).
    #[cold]
    pub(crate) fn give_up(&mut self, rqs: &mut [Request], idx: usize) {
        let retries = self.slots[idx].recoveries;
        log::error!(
            "{}: qpair {}: command {idx} timed out; failed after {retries} resubmissions",
            self.name,
            self.qid
        );
        let err = IoError::TimedOut { retries };
        self.last_error = Some(err);
        self.stats.errors += 1;
        if let Some(rq) = rqs.get_mut(idx) {
            rq.status = err.to_io_status();
        }
    }

    /// The first command at or after slot `from` that is past its deadline at `now`; the
    /// deadlines of the outstanding commands passed over lower `next`.
    #[cold]
    pub(crate) fn overdue(&self, from: usize, now: u64, next: &mut u64) -> Option<usize> {
        for (idx, slot) in self.slots.iter().enumerate().skip(from) {
            if !slot.outstanding {
                continue;
            }
            if now.saturating_sub(slot.ts) < self.timeout_ns {
                *next = (*next).min(slot.ts + self.timeout_ns);
                continue;
            }
            return Some(idx);
        }
        None
    }

    /// An Abort was sent at `now` for the command of slot `idx`, past its deadline: it gets
    /// one more `io_timeout` to complete.
    #[cold]
    pub(crate) fn aborting(&mut self, idx: usize, now: u64, next: &mut u64) {
        self.stats.aborts += 1;
        self.slots[idx].aborted = true;
        self.slots[idx].ts = now;
        *next = (*next).min(now + self.timeout_ns);
    }
}
