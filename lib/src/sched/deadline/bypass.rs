//! Bypasses: a burst that mq-deadline would hand out whole anyway is inserted and handed out
//! in one step, past the trees, FIFOs and the dispatch algorithm.
//!
//! The scheduler-wide condition ([`Deadline::hands_out_whole`]): nothing waits in the
//! scheduler (no queued, head or ready request, so no deadline, aging or direction choice is
//! pending) and no class above the burst's has requests queued or in flight (so it would not
//! wait). Counters move as insert + dispatch would (`inserted` and `dispatched` once each).
//! What differs from the full path: the order inside the one burst (submission order instead
//! of sector order), and merges between requests of the burst that are adjacent without being
//! consecutive, which the full path's insert merge would join and a bypass sends as separate
//! commands (the data is the same). Only the predecessor is checked, as Linux's plug merge
//! checks only the previous request since 5.16 ("block: only check previous entry for plug
//! merge attempt"): looking further costs every burst a search for a merge random I/O almost
//! never has.
//!
//! Two forms:
//! - [`Deadline::insert_dispatch_direct`] checks every request itself and keeps per-request
//!   state: its requests complete (and may be requeued) as any other.
//! - [`Deadline::insert_dispatch_counted`] keeps no per-request state and trusts its caller
//!   for the per-request conditions; crate-private for that reason. Its one caller, the block
//!   layer's scheduler path, establishes them as it builds the burst, and completes the
//!   requests by count (`SharedDeadline::complete_counted`).

use crate::request::{PrioClass, ReqFlags};
use crate::sched::sorttree::MAX_SECTOR;
use crate::sched::{Dir, Dispatched, SchedRq};

use super::Deadline;
use super::slab::{Slot, State};

impl Deadline {
    /// Whether a burst of class `prio` may bypass the queues (see the module): bypasses are
    /// on (tests turn them off with the run fast path), nothing waits in the scheduler, and
    /// no higher class has requests queued or in flight.
    #[inline]
    fn hands_out_whole(&self, prio: PrioClass) -> bool {
        self.fast_runs
            && self.pending == 0
            && self.ready_total == 0
            && !(0..prio as usize).any(|h| self.queued(PrioClass::ALL[h]) != 0)
    }

    /// Inserts and hands out a burst in one step when mq-deadline would dispatch all of it at
    /// once anyway, returning `false` (nothing changed) otherwise. The conditions: nothing
    /// waits in the scheduler, no class above the burst's has requests queued or in flight,
    /// the burst fits `max`, and every request is `owner`'s, of one class, not a HEAD
    /// insertion, not in the scheduler or in flight, inside the sector range, and not
    /// adjacent to its predecessor in the burst (sequential streams take the full path).
    /// The burst goes out in submission order, and requests of it that are adjacent without
    /// being consecutive go out unmerged. `out` should have room for the burst.
    pub fn insert_dispatch_direct(
        &mut self,
        rqs: &[SchedRq],
        owner: u16,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> bool {
        if rqs.is_empty() || rqs.len() > max || !self.hands_out_whole(rqs[0].prio) {
            return false;
        }
        let prio = rqs[0].prio;
        let p = prio as usize;
        let mut prev_dir = None;
        let (mut prev_start, mut prev_end) = (0u64, 0u64);
        for rq in rqs {
            let end = rq.sector + u64::from(rq.nblocks);
            let dir = Dir::of(rq.op);
            let ok = rq.prio == prio
                && rq.owner == owner
                && !rq.flags.contains(ReqFlags::HEAD)
                && self
                    .slots
                    .get(rq.id as usize)
                    .is_some_and(|s| s.state == State::Out)
                && !self.side.in_flight(rq.id)
                && rq.sector <= MAX_SECTOR
                && end <= MAX_SECTOR + 1
                && (prev_dir != Some(dir) || (prev_end != rq.sector && end != prev_start));
            if !ok {
                return false;
            }
            prev_dir = Some(dir);
            (prev_start, prev_end) = (rq.sector, end);
        }
        for rq in rqs {
            let dir = Dir::of(rq.op);
            // Queued and handed out in the same step.
            let slot = Slot {
                state: State::Out,
                started: true,
                ..Slot::queued(
                    rq,
                    now_ns,
                    self.fifo_expire_ns[dir as usize],
                    self.opts.block_size,
                )
            };
            self.slots[rq.id as usize] = slot;
            self.side.start_chain(rq.id);
            self.side.mark_carrier(rq.id, prio);
            out.push(slot.dispatched(rq.id));
            self.prios[p].latest_pos[dir as usize] = rq.sector + u64::from(rq.nblocks);
        }
        let n = rqs.len() as u64;
        self.prios[p].inserted += n;
        self.prios[p].dispatched += n;
        true
    }

    /// The counted form of [`Deadline::insert_dispatch_direct`], for a caller that vouches
    /// for every per-request condition itself: `n` requests, all of class `prio`, all the
    /// caller's own and none in the scheduler or in flight (it owns their scheduler tags),
    /// none a HEAD insertion, each inside the sector range and not adjacent to its
    /// predecessor in the burst; the caller has driver room for all `n`. `latest_pos[dir]` is
    /// the end of the burst's last request in that direction (`None`: none in that
    /// direction). `completed[class]` are completions of earlier counted requests the caller
    /// has not reported yet: they are counted first, whatever the answer (a reactor may hold
    /// a class's completions back while it still has requests of that class in flight, so
    /// "queued > 0" is unchanged by the delay, and report them here, on the line this call
    /// writes anyway, instead of with an atomic add on a line every reactor writes).
    ///
    /// Under the scheduler-wide condition (see the module), the burst is counted as inserted
    /// and dispatched (once each, as insert + dispatch would) and `true` is returned;
    /// otherwise nothing else changes. No per-request state is kept: these requests are not
    /// merge candidates (they left the scheduler at once), cannot be requeued, and complete
    /// by count (`SharedDeadline::complete_counted`), not through `complete_batch`.
    pub(crate) fn insert_dispatch_counted(
        &mut self,
        prio: PrioClass,
        n: u32,
        latest_pos: [Option<u64>; 2],
        completed: [u64; 3],
    ) -> bool {
        for (pp, c) in self.prios.iter_mut().zip(completed) {
            pp.completed_locked += c;
        }
        if n == 0 || !self.hands_out_whole(prio) {
            return false;
        }
        let pp = &mut self.prios[prio as usize];
        for (pos, latest) in pp.latest_pos.iter_mut().zip(latest_pos) {
            if let Some(l) = latest {
                *pos = l;
            }
        }
        pp.inserted += u64::from(n);
        pp.dispatched += u64::from(n);
        true
    }

    /// Completes requests handed out by [`Deadline::insert_dispatch_counted`]:
    /// `counts[class]` of each class. Lock-free (one atomic add per class with a count). The
    /// block layer completes them through `SharedDeadline::complete_counted`, which needs no
    /// lock to reach the same counters; this is the single-threaded scheduler's form.
    #[cfg(test)]
    pub(crate) fn complete_counted(&self, counts: [u64; 3]) {
        self.side.complete_counted(counts);
    }
}
