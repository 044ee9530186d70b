//! One mq-deadline instance per device, shared by the reactors that use it.
//!
//! The scheduler sits behind one `parking_lot` mutex taken once per *batch* (insert a burst,
//! dispatch up to the free driver tags, requeue), never per request. Completion does not take
//! the lock at all: it updates the per-class atomic `completed` counters (one add per class
//! per batch) and reads the merged-member links, which are frozen while a request is in flight.
//! The tag layer's `limit_depth` reads an atomic copy of `async_depth`, also lock-free.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use crate::request::{IoStatus, Op, PrioClass, ReqFlags};

use super::deadline::{
    CompletionSide, Deadline, DeadlineOptions, Inserted, Members, PrioStats, limit_depth_for,
};
use super::{Dispatched, SchedError, SchedRq};

/// What one `insert_batch` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsertSummary {
    /// Requests queued in a tree and FIFO.
    pub queued: u32,
    /// Requests put on the dispatch list (HEAD).
    pub head: u32,
    /// Requests merged into a queued request.
    pub merged: u32,
}

/// An mq-deadline scheduler shared by several reactors (`Send + Sync`).
///
/// What every submit and poll reads without the lock (the completion side, the shallow
/// depth, the pending hint) sits on cache lines of its own, away from the lock and the
/// scheduler state every locked batch writes.
#[derive(Debug)]
pub struct SharedDeadline {
    hot: Line<ReadMostly>,
    inner: Line<Mutex<Deadline>>,
}

/// Aligns its content to a cache line, so it shares no line with its neighbours.
#[derive(Debug)]
#[repr(align(64))]
struct Line<T>(T);

/// The lock-free side of a [`SharedDeadline`]: read by every reactor, rarely written.
#[derive(Debug)]
struct ReadMostly {
    side: Arc<CompletionSide>,
    async_depth: AtomicU32,
    /// Lock-free "anything to dispatch?" hint, refreshed after every locked batch (stored
    /// only when it changes).
    pending: AtomicU32,
    nr_requests: u32,
}

impl SharedDeadline {
    /// Builds the scheduler (options validated once here).
    pub fn new(opts: DeadlineOptions) -> Result<SharedDeadline, SchedError> {
        let dd = Deadline::new(opts)?;
        let side = Arc::clone(dd.side());
        let async_depth = dd.options().effective_async_depth();
        let nr_requests = dd.nr_requests();
        Ok(SharedDeadline {
            hot: Line(ReadMostly {
                side,
                async_depth: AtomicU32::new(async_depth),
                pending: AtomicU32::new(0),
                nr_requests,
            }),
            inner: Line(Mutex::new(dd)),
        })
    }

    /// Scheduler tags: ids are `0..nr_requests`.
    pub fn nr_requests(&self) -> u32 {
        self.hot.0.nr_requests
    }

    /// Shallow depth for the tag layer (`None` for synchronous reads, flush and FUA: no limit,
    /// batched allocation allowed). Lock-free.
    #[inline]
    pub fn limit_depth(&self, op: Op, flags: ReqFlags) -> Option<u32> {
        limit_depth_for(op, flags, self.hot.0.async_depth.load(Ordering::Relaxed))
    }

    /// Lock-free hint: whether requests wait in the scheduler. A reactor may skip
    /// `dispatch_batch` when this is false and its own ready list is known empty.
    #[inline]
    pub fn has_pending(&self) -> bool {
        self.hot.0.pending.load(Ordering::Relaxed) != 0
    }

    fn publish(&self, dd: &Deadline) {
        let hint = if dd.has_work() {
            dd.pending().max(1)
        } else {
            0
        };
        // Every reactor reads this line per poll: leave it alone when nothing changed.
        if self.hot.0.pending.load(Ordering::Relaxed) != hint {
            self.hot.0.pending.store(hint, Ordering::Relaxed);
        }
    }

    /// Inserts a burst under one lock acquisition. Stops at the first invalid request and
    /// returns its error; the requests before it are inserted.
    pub fn insert_batch(&self, rqs: &[SchedRq], now_ns: u64) -> Result<InsertSummary, SchedError> {
        let mut sum = InsertSummary::default();
        let mut dd = self.inner.0.lock();
        let result = insert_each(&mut dd, rqs, now_ns, &mut sum);
        self.publish(&dd);
        drop(dd);
        result.map(|()| sum)
    }

    /// Dispatches up to `max` requests for `owner` under one lock acquisition (see
    /// [`Deadline::dispatch_batch`]).
    pub fn dispatch_batch(
        &self,
        owner: u16,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> usize {
        if max == 0 {
            return 0;
        }
        let mut dd = self.inner.0.lock();
        let n = dd.dispatch_batch(owner, now_ns, max, out);
        self.publish(&dd);
        n
    }

    /// `insert_batch` then `dispatch_batch` under one lock acquisition: the usual flush of a
    /// reactor that inserts a burst and immediately fills its free driver tags.
    pub fn insert_dispatch_batch(
        &self,
        rqs: &[SchedRq],
        owner: u16,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> Result<(InsertSummary, usize), SchedError> {
        let mut sum = InsertSummary::default();
        let mut dd = self.inner.0.lock();
        // The common flush: an idle scheduler and room for the whole burst.
        let before = out.len();
        if dd.insert_dispatch_direct(rqs, owner, now_ns, max, out) {
            drop(dd);
            sum.queued = rqs.len() as u32;
            return Ok((sum, out.len() - before));
        }
        let result = insert_each(&mut dd, rqs, now_ns, &mut sum);
        let n = if max == 0 {
            0
        } else {
            dd.dispatch_batch(owner, now_ns, max, out)
        };
        self.publish(&dd);
        drop(dd);
        result.map(|()| (sum, n))
    }

    /// [`Deadline::insert_dispatch_counted`] under one lock acquisition: a burst of `n`
    /// requests of class `prio` the caller has vetted, counted as inserted and dispatched
    /// when the scheduler is idle enough to hand it out whole; `false` (nothing else
    /// changed) otherwise. `completed` (held-back completions of earlier counted requests,
    /// per class) is counted either way. Complete counted requests with
    /// [`SharedDeadline::complete_counted`] or through a later call's `completed`.
    #[inline]
    pub(crate) fn insert_dispatch_counted(
        &self,
        prio: PrioClass,
        n: u32,
        latest_pos: [Option<u64>; 2],
        completed: [u64; 3],
    ) -> bool {
        // Nothing is published: a counted burst leaves the scheduler's pending state as it was
        // (it is taken only when nothing waits).
        self.inner
            .0
            .lock()
            .insert_dispatch_counted(prio, n, latest_pos, completed)
    }

    /// Completes requests handed out by [`SharedDeadline::insert_dispatch_counted`]:
    /// `counts[class]` per class (`PrioClass as usize`). Lock-free.
    #[inline]
    pub(crate) fn complete_counted(&self, counts: [u64; 3]) {
        self.hot.0.side.complete_counted(counts);
    }

    /// Gives handed-out requests back (the driver could not take them), under one lock
    /// acquisition; they are dispatched again first, in the order given.
    pub fn requeue_batch<I>(&self, ids: I) -> Result<(), SchedError>
    where
        I: IntoIterator<Item = u32>,
        I::IntoIter: DoubleEndedIterator,
    {
        let mut dd = self.inner.0.lock();
        let mut result = Ok(());
        // The dispatch list is LIFO for head insertions: push in reverse to keep the order.
        for id in ids.into_iter().rev() {
            if let Err(e) = dd.requeue(id) {
                log::error!("mq-deadline: {e}");
                result = Err(e);
            }
        }
        self.publish(&dd);
        result
    }

    /// Completes handed-out requests without the lock: `f(member, status)` exactly once for
    /// every member of each (possibly merged) request, with that request's status. Returns
    /// how many members completed; an id that is not a request in flight is logged and
    /// reported as an error after the others completed.
    #[inline]
    pub fn complete_batch<I, F>(&self, done: I, f: F) -> Result<usize, SchedError>
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        self.hot.0.side.complete_batch(done, f)
    }

    /// Members of a handed-out request in sector order (the request itself included).
    /// Lock-free; valid from dispatch until completion.
    pub fn members(&self, id: u32) -> Members<'_> {
        self.hot.0.side.members(id)
    }

    /// Counters of one class (takes the lock).
    pub fn stats(&self, prio: PrioClass) -> PrioStats {
        self.inner.0.lock().stats(prio)
    }

    /// Requests of one class inserted and not completed (takes the lock). O(1).
    pub fn queued(&self, prio: PrioClass) -> u64 {
        self.inner.0.lock().queued(prio)
    }

    /// Sets a tunable by name (Linux sysfs names; times in ms).
    pub fn set_param(&self, name: &str, value: u64) -> Result<(), SchedError> {
        let mut dd = self.inner.0.lock();
        dd.set_param(name, value)?;
        self.hot
            .0
            .async_depth
            .store(dd.options().effective_async_depth(), Ordering::Relaxed);
        Ok(())
    }

    /// Reads a tunable by name.
    pub fn get_param(&self, name: &str) -> Result<u64, SchedError> {
        self.inner.0.lock().get_param(name)
    }

    /// All tunables as (name, value), for `bdev_get_*`-style RPC output.
    pub fn params(&self) -> Vec<(&'static str, u64)> {
        let dd = self.inner.0.lock();
        super::deadline::TUNABLES
            .iter()
            .filter_map(|&n| dd.get_param(n).ok().map(|v| (n, v)))
            .collect()
    }

    /// Checks that nothing is queued or in flight; call before dropping the device.
    pub fn teardown_check(&self) -> Result<(), SchedError> {
        self.inner.0.lock().teardown_check()
    }

    /// Runs `f` on the scheduler under its lock (tests, diagnostics).
    pub fn with_locked<R>(&self, f: impl FnOnce(&mut Deadline) -> R) -> R {
        f(&mut self.inner.0.lock())
    }
}

/// Inserts `rqs` one by one into `sum`, stopping at the first invalid request (the ones
/// before it stay inserted).
#[inline]
fn insert_each(
    dd: &mut Deadline,
    rqs: &[SchedRq],
    now_ns: u64,
    sum: &mut InsertSummary,
) -> Result<(), SchedError> {
    for rq in rqs {
        match dd.insert(rq, now_ns)? {
            Inserted::Queued => sum.queued += 1,
            Inserted::Head => sum.head += 1,
            Inserted::Merged { .. } => sum.merged += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Two threads share one instance, each inserting its own ids, dispatching with its own
    /// owner number and completing what it gets: every request completes exactly once.
    #[test]
    fn two_owners_no_request_lost_or_duplicated() {
        const PER: u32 = 64;
        const ROUNDS: u64 = 2000;
        let dd = Arc::new(
            SharedDeadline::new(DeadlineOptions {
                nr_requests: 2 * PER,
                owners: 2,
                max_segments: 8,
                ..DeadlineOptions::default()
            })
            .unwrap(),
        );
        let completions: Arc<Vec<AtomicU64>> =
            Arc::new((0..2 * PER).map(|_| AtomicU64::new(0)).collect());
        let threads: Vec<_> = (0..2u16)
            .map(|owner| {
                let dd = Arc::clone(&dd);
                let completions = Arc::clone(&completions);
                std::thread::spawn(move || {
                    let base = u32::from(owner) * PER;
                    let mut free: Vec<u32> = (base..base + PER).collect();
                    let mut rqs = Vec::with_capacity(16);
                    let mut out = Vec::with_capacity(16);
                    let mut inserted = 0u64;
                    let mut seed = 0x1234_5678u32 + u32::from(owner);
                    let mut now = 0;
                    for round in 0..ROUNDS {
                        now += 100_000;
                        rqs.clear();
                        while rqs.len() < 8 {
                            let Some(id) = free.pop() else { break };
                            seed ^= seed << 13;
                            seed ^= seed >> 17;
                            seed ^= seed << 5;
                            rqs.push(SchedRq {
                                id,
                                owner,
                                op: if seed & 1 == 0 { Op::Read } else { Op::Write },
                                prio: PrioClass::ALL[(seed >> 1) as usize % 3],
                                flags: ReqFlags::NONE,
                                // Small range: neighbours and merges are frequent.
                                sector: u64::from(seed >> 8) % 64 * 8,
                                nblocks: 8,
                                addr: 0,
                            });
                        }
                        dd.insert_batch(&rqs, now).unwrap();
                        inserted += rqs.len() as u64;
                        out.clear();
                        dd.dispatch_batch(owner, now, 16, &mut out);
                        if round % 7 == 0 && !out.is_empty() {
                            // The driver refuses the last one: give it back.
                            let d = out.pop().unwrap();
                            dd.requeue_batch([d.id]).unwrap();
                        }
                        for d in &out {
                            assert_eq!(d.owner, owner);
                        }
                        dd.complete_batch(out.iter().map(|d| (d.id, IoStatus::Success)), |m, _| {
                            assert!((base..base + PER).contains(&m), "member of another owner");
                            completions[m as usize].fetch_add(1, Ordering::Relaxed);
                            free.push(m);
                        })
                        .unwrap();
                    }
                    // Drain this owner's requests (the other thread takes its own).
                    while free.len() < PER as usize {
                        now += 100_000_000;
                        out.clear();
                        dd.dispatch_batch(owner, now, 16, &mut out);
                        dd.complete_batch(out.iter().map(|d| (d.id, IoStatus::Success)), |m, _| {
                            completions[m as usize].fetch_add(1, Ordering::Relaxed);
                            free.push(m);
                        })
                        .unwrap();
                        std::thread::yield_now();
                    }
                    inserted
                })
            })
            .collect();
        let inserted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let completed: u64 = completions.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        assert_eq!(completed, inserted);
        let stats: Vec<PrioStats> = PrioClass::ALL.iter().map(|&p| dd.stats(p)).collect();
        assert_eq!(stats.iter().map(|s| s.inserted).sum::<u64>(), inserted);
        assert_eq!(stats.iter().map(|s| s.completed).sum::<u64>(), inserted);
        assert!(stats.iter().all(|s| s.queued == 0));
        assert!(
            stats.iter().map(|s| s.merged).sum::<u64>() > 0,
            "the test should merge"
        );
        dd.teardown_check().unwrap();
        assert!(!dd.has_pending());
    }

    #[test]
    fn params_listed_and_set_at_runtime() {
        let dd = SharedDeadline::new(DeadlineOptions::default()).unwrap();
        let params = dd.params();
        assert_eq!(params.len(), super::super::deadline::TUNABLES.len());
        assert!(params.contains(&("fifo_batch", 16)));
        dd.set_param("fifo_batch", 32).unwrap();
        assert_eq!(dd.get_param("fifo_batch"), Ok(32));
        assert!(dd.set_param("prio_aging_expire", 0).is_err());
    }
}
