//! Driver-tag layout 1: the driver queues run requests where they live, in the scheduler pool,
//! as Linux's driver tag maps to the scheduler's request (`tags->rqs[tag] = rq`) instead of
//! copying it. The queues were opened with a command id per scheduler tag
//! ([`SchedPath::driver_depth`]); the driver tag is a counted slot of the hctx's `depth`. The
//! driver sees the dispatch time in `submit_ns` and a merged carrier's merged extent; both are
//! saved at start and restored before completion reports them ([`Via`] says which).

use super::dispatch::{merged_buf, requeue};
use super::{SchedPath, Via};
use crate::bdev::queue::Hctx;
use crate::bdev::queue::complete::report_done;
use crate::bdev::split::Splits;
use crate::bdev::stats::QueueStats;
use crate::request::Request;

impl SchedPath {
    /// Starts the handed-out requests in `out` where they are, in the scheduler pool: room on
    /// the request's hctx (a counter against its depth: the driver tag), the merged I/O
    /// written into the carrier (its own extent saved), the dispatch time as the driver's
    /// `submit_ns` (the submitter's saved), one driver `submit` per hctx. Requests no room is
    /// left for go back to the scheduler. Returns how many started.
    pub(super) fn start_shared(&mut self, hctx: &mut [Hctx], hctx_at: &[u8], now: u64) -> usize {
        let n = self.out.len();
        let mut started = 0;
        for k in 0..n {
            let d = self.out[k];
            let local = (d.id - self.base) as u16;
            let t = usize::from(local);
            let rq = &mut self.pool[local];
            let hi = usize::from(hctx_at[rq.hctx.index()]);
            let h = &mut hctx[hi];
            if self.drv_busy[hi] >= h.tags.depth() {
                requeue(&self.dd, &self.out[k..n]);
                break;
            }
            self.saved_ns[t] = rq.submit_ns;
            rq.submit_ns = now;
            self.via[t] = if d.nr_members > 1 {
                self.saved_ext[t] = (rq.lba, rq.nblocks, rq.buf);
                if rq.op.has_data() {
                    // Restored from `saved_ext` at completion.
                    rq.buf = merged_buf(rq, &d);
                }
                rq.lba = d.sector;
                rq.nblocks = d.nblocks;
                Via::Merged
            } else {
                Via::Sched
            };
            self.drv_busy[hi] += 1;
            h.pending[h.npending] = local;
            h.npending += 1;
            started += 1;
        }
        self.sched_inflight += started as u32;
        for h in hctx.iter_mut() {
            h.submit_pending(Some(self.pool.as_mut_slice()));
        }
        started
    }

    /// Completes the requests of a driver batch (`done`, stamped at `now`) that were handed
    /// out by count: one counter add per class per batch, reported to the scheduler once the
    /// class has none of them left in flight, and their tags freed straight from `done` when
    /// the whole batch was counted. Returns whether some came through the scheduler (maybe
    /// merged): those get their own extent and clock back and wait in `done_ids` for
    /// `complete_members`, the counted ones in `freed` beside them.
    // Always inlined: the body of `poll_layout`'s loop, in a file of its own.
    #[inline(always)]
    pub(super) fn reap_shared<F: FnMut(&Request)>(
        &mut self,
        done: &[u16],
        now: u64,
        block_size: u64,
        stats: &mut QueueStats,
        split: Option<&mut Splits>,
        f: &mut F,
    ) -> bool {
        let mut counted = [0u64; 3];
        let mut walk = false;
        // With nothing from the scheduler in flight every request is counted, and with
        // one class counted in flight every request is of that class: no per-request
        // look-up at all (the common case).
        let all_counted = self.sched_inflight == 0;
        let mut busy = self
            .counted_inflight
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0);
        let only = match (busy.next(), busy.next()) {
            (Some((c, _)), None) if all_counted => Some(c),
            _ => None,
        };
        // Children of split I/O are looked for only while some are in flight.
        let mut split = split.filter(|s| s.has_children());
        for &tag in done {
            if !all_counted && self.via[usize::from(tag)] != Via::Counted {
                walk = true;
                continue;
            }
            let rq = &mut self.pool[tag];
            if only.is_none() {
                counted[rq.prio.class as usize] += 1;
            }
            report_done(rq, now, block_size, stats, split.as_deref_mut(), f);
        }
        if let Some(c) = only {
            counted[c] = done.len() as u64;
        }
        if counted != [0; 3] {
            let mut report = [0u64; 3];
            for c in 0..3 {
                if counted[c] == 0 {
                    continue;
                }
                self.counted_inflight[c] -= counted[c] as u32;
                self.deferred[c] += counted[c];
                if self.counted_inflight[c] == 0 {
                    report[c] = std::mem::take(&mut self.deferred[c]);
                }
            }
            if report != [0; 3] {
                self.dd.complete_counted(report);
            }
        }
        if !walk {
            self.tags.put_batch(&mut self.put_hint, done);
            return false;
        }
        // Some came through the scheduler: restore them for `complete_members` to complete
        // (with their merged members) through it and free every tag of the batch at once.
        self.freed.clear();
        self.done_ids.clear();
        for &tag in done {
            let t = usize::from(tag);
            match self.via[t] {
                Via::Counted => self.freed.push(tag),
                via => {
                    let rq = &mut self.pool[tag];
                    rq.submit_ns = self.saved_ns[t];
                    if via == Via::Merged {
                        (rq.lba, rq.nblocks, rq.buf) = self.saved_ext[t];
                    }
                    self.via[t] = Via::Counted;
                    self.sched_inflight -= 1;
                    self.done_ids.push((self.base + u32::from(tag), rq.status));
                }
            }
        }
        true
    }
}
