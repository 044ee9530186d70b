//! `flush` on the scheduler path, and dispatch. A regular burst (one class, no HEAD, nothing
//! adjacent) that the drivers have room for and that the scheduler would hand out whole anyway
//! is counted inserted and dispatched at once and goes straight to the drivers; any other is
//! inserted (merges, sort trees, FIFOs) and dispatched under one lock. What is handed out is
//! started by the layout's `start_*` (`shared_pool.rs`, `driver_pool.rs`); what finds no
//! driver tag goes back to the scheduler.

use super::{NO_END, SchedPath};
use crate::bdev::queue::{BdevQueue, Hctx};
use crate::bdev::stats::now_ns;
use crate::hctx::HctxType;
use crate::request::{IoBuf, PrioClass, Request};
use crate::sched::{Dispatched, SchedError, SchedRq, SharedDeadline};

impl BdevQueue {
    /// `flush` with a scheduler: insert the burst (one lock), then dispatch what the driver
    /// queues have room for (one lock) and ring each driver once.
    pub(in crate::bdev::queue) fn flush_sched(&mut self) -> usize {
        let Some(sp) = self.path.sched_mut() else {
            return 0;
        };
        let now = if sp.burst_ns == 0 {
            now_ns()
        } else {
            sp.burst_ns
        };
        sp.burst_ns = 0;
        if sp.npending > 0 {
            if sp.shared
                && let Some(n) = sp.flush_direct(&mut self.hctx, &self.hctx_at)
            {
                return n;
            }
            sp.reset_burst();
            sp.insert_pending(&self.hctx, now);
            return sp.start(&mut self.hctx, &self.hctx_at, now);
        }
        // Nothing new: pick up what waits (requeued, or parked here by another reactor).
        if !sp.dd.has_pending() {
            return 0;
        }
        sp.dispatch(&mut self.hctx, &self.hctx_at, now)
    }
}

impl SchedPath {
    /// Inserts the requests `queue_resumed` queued after `from` (the pending burst before
    /// them stays for the next flush) and dispatches what the driver queues have room for.
    /// Returns how many started.
    pub(in crate::bdev::queue) fn start_resumed(
        &mut self,
        from: usize,
        hctx: &mut [Hctx],
        hctx_at: &[u8],
        now: u64,
    ) -> usize {
        if self.npending == from {
            return 0;
        }
        self.insert_from(from, hctx, now);
        self.start(hctx, hctx_at, now)
    }

    /// Inserts the pending burst and dispatches what the driver queues have room for, under
    /// one lock (into `out`, started by [`SchedPath::start`]). The scheduler refuses a request
    /// only on a bug (ids and owner are checked at open, sectors by the device's size): then
    /// each is retried alone, and a refused one completes with `EINVAL` at the next poll.
    fn insert_pending(&mut self, hctx: &[Hctx], now: u64) {
        self.insert_from(0, hctx, now);
    }

    /// `insert_pending` of the pending requests after the first `from` (which stay pending).
    fn insert_from(&mut self, from: usize, hctx: &[Hctx], now: u64) {
        self.rqs.clear();
        for &t in &self.pending[from..self.npending] {
            self.rqs.push(SchedRq::from_request(
                self.base + u32::from(t),
                self.owner,
                &self.pool[t],
            ));
        }
        self.npending = from;
        let room = self.room(hctx);
        self.out.clear();
        let res = self
            .dd
            .insert_dispatch_batch(&self.rqs, self.owner, now, room, &mut self.out);
        if let Err(e) = res {
            log::error!("mq-deadline insert: {e}");
            for i in 0..self.rqs.len() {
                match self.dd.insert_batch(&self.rqs[i..=i], now) {
                    // Busy: it went in (and maybe out) with the batch.
                    Ok(_) | Err(SchedError::Busy { .. }) => {}
                    Err(e) => {
                        log::error!("mq-deadline: {e}; failing the request with EINVAL");
                        self.failed.push((self.rqs[i].id - self.base) as u16);
                    }
                }
            }
        }
    }

    /// Free driver tags over all hctxs.
    #[inline]
    fn room(&self, hctx: &[Hctx]) -> usize {
        hctx.iter()
            .zip(&self.drv_busy)
            .map(|(h, &b)| (h.tags.depth() - b) as usize)
            .sum()
    }

    /// Dispatches up to the driver queues' free room (one scheduler lock) and starts it.
    pub(super) fn dispatch(&mut self, hctx: &mut [Hctx], hctx_at: &[u8], now: u64) -> usize {
        let room = self.room(hctx);
        if room == 0 {
            return 0;
        }
        self.out.clear();
        self.dd.dispatch_batch(self.owner, now, room, &mut self.out);
        self.start(hctx, hctx_at, now)
    }

    /// Hands the pending burst to the drivers whole, in the scheduler pool, when it is regular
    /// (one class, no HEAD, nothing adjacent to its predecessor in its direction), every hctx
    /// has room for its share, and the scheduler counts it inserted and dispatched at once
    /// ([`SharedDeadline::insert_dispatch_counted`]: nothing waits there, no higher class is
    /// queued or in flight). This is what insert + dispatch would hand out, in submission
    /// order. Returns how many started, or `None` when nothing changed.
    #[inline]
    fn flush_direct(&mut self, hctx: &mut [Hctx], hctx_at: &[u8]) -> Option<usize> {
        let n = self.npending;
        // Requests waiting in the scheduler (lock-free hint): the full path, one lock.
        if self.burst_irregular || self.burst_classes.count_ones() != 1 || self.dd.has_pending() {
            return None;
        }
        for ty in HctxType::ALL {
            let want = self.burst_hctx[ty.index()];
            if want != 0 {
                let hi = usize::from(hctx_at[ty.index()]);
                if hctx[hi].tags.depth() - self.drv_busy[hi] < want {
                    return None;
                }
            }
        }
        let prio = PrioClass::ALL[self.burst_classes.trailing_zeros() as usize];
        let latest = self.burst_end.map(|e| (e != NO_END).then_some(e));
        // Held-back completions are reported with this call, taken or not.
        let done = std::mem::take(&mut self.deferred);
        if !self
            .dd
            .insert_dispatch_counted(prio, n as u32, latest, done)
        {
            return None;
        }
        self.counted_inflight[prio as usize] += n as u32;
        self.npending = 0;
        if let [h] = hctx {
            self.drv_busy[0] += n as u32;
            h.drv.submit(self.pool.as_mut_slice(), &self.pending[..n]);
        } else {
            for &tag in &self.pending[..n] {
                let h = &mut hctx[usize::from(hctx_at[self.pool[tag].hctx.index()])];
                // The room check above bounds each hctx's share by its depth.
                h.pending[h.npending] = tag;
                h.npending += 1;
            }
            for (hi, h) in hctx.iter_mut().enumerate() {
                if h.npending > 0 {
                    self.drv_busy[hi] += h.npending as u32;
                    h.drv
                        .submit(self.pool.as_mut_slice(), &h.pending[..h.npending]);
                    h.npending = 0;
                }
            }
        }
        self.reset_burst();
        Some(n)
    }

    /// Starts the handed-out requests in `out` (see `start_shared` and `start_copy`).
    #[inline]
    fn start(&mut self, hctx: &mut [Hctx], hctx_at: &[u8], now: u64) -> usize {
        if self.shared {
            self.start_shared(hctx, hctx_at, now)
        } else {
            self.start_copy(hctx, hctx_at, now)
        }
    }
}

/// Gives handed-out requests back to the scheduler: the hctx of the first is full (room was
/// counted over all of them).
#[cold]
pub(super) fn requeue(dd: &SharedDeadline, rest: &[Dispatched]) {
    if let Err(e) = dd.requeue_batch(rest.iter().map(|d| d.id)) {
        log::error!("mq-deadline requeue: {e}");
    }
}

/// The buffer of the merged I/O `d` whose carrier is `rq` (an op that moves data, its own
/// extent not yet replaced by the merged one): the carrier's own pointer, moved to the
/// segment's start so that it keeps the provenance of the region the members were cut from,
/// `d.nblocks` blocks long.
#[inline]
pub(super) fn merged_buf(rq: &Request, d: &Dispatched) -> IoBuf {
    let len = u64::from(d.nblocks) * u64::from(rq.buf.len() / rq.nblocks.max(1));
    let ptr = rq.buf.as_ptr().with_addr(d.addr as usize);
    // SAFETY: the scheduler merged these requests into one segment only because their buffers
    // are contiguous (`max_segments` is 1, checked at open): the range is the members' buffers
    // end to end, each valid until its request completes (the submitter's `IoBuf` contract),
    // and the merged I/O completes no later than any member.
    unsafe { IoBuf::from_raw_parts(ptr, len as u32) }
}
