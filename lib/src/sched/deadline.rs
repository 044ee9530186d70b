//! mq-deadline: per-priority deadline scheduling with O(1) accounting.
//!
//! A mirror of Linux's `block/mq-deadline.c`. Per priority class (RT, BE, IDLE) and direction
//! (read; write = everything that is not a read) there is a sector-sorted tree and a FIFO whose
//! entries carry a deadline; head insertions and requeues go to a dispatch list that is served
//! before everything else.
//!
//! Files, one mechanism each (the sort trees are `sched/sorttree.rs`):
//! - `deadline.rs` (this file): the scheduler's state, construction, insertion
//!   (`dd_insert_request`), counters and teardown;
//! - `deadline/options.rs`: [`DeadlineOptions`] (defaults, validation) and the runtime
//!   tunables, by their Linux sysfs names;
//! - `deadline/slab.rs`: one slot per scheduler tag, and the deadline FIFOs linked through it;
//! - `deadline/merge.rs`: back and front merges of a new request into queued ones;
//! - `deadline/dispatch.rs`: the dispatch algorithm (`dd_dispatch_request`), hand-out and
//!   requeue;
//! - `deadline/bypass.rs`: a burst handed out whole in one step when dispatch would do just
//!   that (one form public and self-checking, one crate-private that trusts its caller);
//! - `deadline/completion.rs`: what is updated without the lock (completion, member chains,
//!   the `completed` counters) and the memory-ordering argument for it;
//! - `deadline/tests.rs`: deterministic and property tests.
//!
//! The per-class counters `inserted`, `merged` and `dispatched` are plain integers owned by
//! whoever holds the scheduler (its lock, in [`super::SharedDeadline`]); `completed` is an
//! atomic updated without that lock, plus the completions of counted bursts that a reactor
//! held back while it still had requests of that class in flight and then reported under
//! the lock it took anyway (`Deadline::insert_dispatch_counted`). "Queued at this priority" is
//! `inserted − completed`: three loads, never a sum over cores (the 2021 regression that cost
//! Linux two thirds of its IOPS).
//!
//! Time is injected (`now_ns`); nothing here reads a clock or sleeps, so every behaviour is
//! deterministic and testable.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::request::{Op, PrioClass, ReqFlags};

use super::sorttree::{MAX_SECTOR, Tree};
use super::{Dir, SchedError, SchedRq};

mod bypass;
mod completion;
mod dispatch;
mod merge;
mod options;
mod slab;

pub(crate) use completion::CompletionSide;
pub use completion::Members;
pub use options::{
    DeadlineOptions, MAX_NR_REQUESTS, TUNABLES, default_nr_requests, limit_depth_for,
};
use slab::{Slot, State};

/// "No request" in the index links of the slab.
const NIL: u32 = u32::MAX;

/// Number of priority classes.
const NR_PRIO: usize = 3;

/// Snapshot of one priority class's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrioStats {
    /// Requests inserted (a requeued request is counted once).
    pub inserted: u64,
    /// Requests merged into another request.
    pub merged: u64,
    /// Requests taken out of the scheduler (merged members are not counted; a requeued
    /// request is counted once).
    pub dispatched: u64,
    /// Requests completed (every merged member counts).
    pub completed: u64,
    /// `inserted − completed`: in the scheduler or in flight.
    pub queued: u64,
}

/// Asserts that every class has drained: everything inserted was dispatched and completed,
/// and nothing is queued (tests of the scheduler and of the block layer over it).
#[cfg(test)]
pub(crate) fn assert_drained(stats: impl Fn(PrioClass) -> PrioStats) {
    for p in PrioClass::ALL {
        let s = stats(p);
        assert_eq!(
            (s.inserted, s.completed, s.queued),
            (s.dispatched, s.dispatched, 0),
            "{p:?}"
        );
    }
}

/// One priority class: sort trees and FIFOs per direction, plus counters.
///
/// Laid out so that what a counted burst writes (`latest_pos`, `inserted`, `dispatched`)
/// shares one cache line, and each class has lines of its own: a burst moves one line of
/// scheduler state (besides the lock's) between the cores that share the scheduler.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct PerPrio {
    /// Sector of the last request dispatched per direction (Linux's `latest_pos`).
    latest_pos: [u64; 2],
    inserted: u64,
    merged: u64,
    dispatched: u64,
    /// Completions of requests handed out by count that their reactor reported with its
    /// next locked batch instead of the atomic (`insert_dispatch_counted`'s `completed`).
    completed_locked: u64,
    fifo_head: [u32; 2],
    fifo_tail: [u32; 2],
    sort: [Tree; 2],
}

impl PerPrio {
    fn new(nr: u32) -> PerPrio {
        PerPrio {
            sort: [Tree::with_capacity(nr), Tree::with_capacity(nr)],
            fifo_head: [NIL; 2],
            fifo_tail: [NIL; 2],
            ..PerPrio::default()
        }
    }
}

/// What became of an inserted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Queued in its class's tree and FIFO.
    Queued,
    /// Put on the dispatch list (HEAD flag).
    Head,
    /// Merged into request `into` (its carrier), which will complete it.
    Merged { into: u32 },
}

/// The mq-deadline scheduler of one device, single-threaded (wrap it in
/// [`super::SharedDeadline`] to share it between reactors).
#[derive(Debug)]
pub struct Deadline {
    opts: DeadlineOptions,
    fifo_expire_ns: [u64; 2],
    aging_ns: u64,
    async_depth: u32,
    slots: Box<[Slot]>,
    side: Arc<CompletionSide>,
    prios: [PerPrio; NR_PRIO],
    /// Head insertions and requeues.
    dispatch: VecDeque<u32>,
    /// Per owner: requests taken out of the scheduler for it by another owner's dispatch.
    ready: Box<[VecDeque<u32>]>,
    /// The dispatch algorithm's batch state: the current batch's direction, its length so
    /// far, and how many times reads were preferred over waiting writes.
    last_dir: Dir,
    batching: u32,
    starved: u32,
    /// Requests (carriers) in the trees or the dispatch list.
    pending: u32,
    /// Requests in all ready lists.
    ready_total: u32,
    /// Whether `dispatch_run` may take sequential runs at once and bursts may bypass the
    /// queues (tests turn it off to compare with the algorithm taken one step at a time).
    fast_runs: bool,
}

impl Deadline {
    /// A scheduler with validated options; allocates everything it will ever need.
    pub fn new(opts: DeadlineOptions) -> Result<Deadline, SchedError> {
        opts.validate()?;
        let nr = opts.nr_requests;
        let owners = usize::from(opts.owners);
        Ok(Deadline {
            fifo_expire_ns: opts.fifo_expire_ns(),
            aging_ns: opts.aging_ns(),
            async_depth: opts.effective_async_depth(),
            slots: vec![Slot::EMPTY; nr as usize].into_boxed_slice(),
            side: Arc::new(CompletionSide::new(nr)),
            prios: [PerPrio::new(nr), PerPrio::new(nr), PerPrio::new(nr)],
            dispatch: VecDeque::with_capacity(nr as usize),
            ready: (0..owners)
                .map(|_| VecDeque::with_capacity(nr as usize))
                .collect(),
            last_dir: Dir::Read,
            batching: 0,
            starved: 0,
            pending: 0,
            ready_total: 0,
            fast_runs: true,
            opts,
        })
    }

    pub(crate) fn side(&self) -> &Arc<CompletionSide> {
        &self.side
    }

    /// The options in effect (tunables reflect runtime changes).
    pub fn options(&self) -> &DeadlineOptions {
        &self.opts
    }

    /// Scheduler tags (`0..nr_requests` are valid ids).
    pub fn nr_requests(&self) -> u32 {
        self.opts.nr_requests
    }

    /// Shallow depth the tag layer applies to a request (`dd_limit_depth`); `None` = no limit
    /// and batched allocation allowed.
    pub fn limit_depth(&self, op: Op, flags: ReqFlags) -> Option<u32> {
        limit_depth_for(op, flags, self.async_depth)
    }

    /// Requests at `prio` inserted and not completed (in the scheduler or in flight). O(1).
    #[inline]
    pub fn queued(&self, prio: PrioClass) -> u64 {
        let p = &self.prios[prio as usize];
        let completed = self.side.completed(prio) + p.completed_locked;
        debug_assert!(completed <= p.inserted, "completed exceeds inserted");
        p.inserted.saturating_sub(completed)
    }

    /// Counters of one class.
    pub fn stats(&self, prio: PrioClass) -> PrioStats {
        let p = &self.prios[prio as usize];
        PrioStats {
            inserted: p.inserted,
            merged: p.merged,
            dispatched: p.dispatched,
            completed: self.side.completed(prio) + p.completed_locked,
            queued: self.queued(prio),
        }
    }

    /// Whether anything waits to be dispatched (for any owner).
    pub fn has_work(&self) -> bool {
        self.pending != 0 || self.ready_total != 0
    }

    /// Requests waiting in the scheduler (trees and dispatch list), not counting ready lists.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Whether `owner` has requests waiting for it (dispatch list or ready list).
    pub fn has_work_for(&self, owner: u16) -> bool {
        self.pending != 0
            || self
                .ready
                .get(usize::from(owner))
                .is_some_and(|r| !r.is_empty())
    }

    /// Inserts one request at time `now_ns` (`dd_insert_request`): HEAD requests go to the
    /// dispatch list; others are merged into an adjacent queued request when allowed, else
    /// queued in their class's tree and FIFO with deadline `now + expire[dir]`.
    pub fn insert(&mut self, rq: &SchedRq, now_ns: u64) -> Result<Inserted, SchedError> {
        let id = rq.id;
        let Some(slot) = self.slots.get(id as usize) else {
            return Err(SchedError::BadId { id });
        };
        if slot.state != State::Out || self.side.in_flight(id) {
            return Err(SchedError::Busy { id });
        }
        if rq.sector > MAX_SECTOR || rq.sector + u64::from(rq.nblocks) > MAX_SECTOR + 1 {
            return Err(SchedError::SectorRange {
                id,
                sector: rq.sector,
            });
        }
        if rq.owner >= self.opts.owners {
            return Err(SchedError::BadOwner {
                owner: rq.owner,
                owners: self.opts.owners,
            });
        }
        let dir = Dir::of(rq.op);
        self.slots[id as usize] = Slot::queued(
            rq,
            now_ns,
            self.fifo_expire_ns[dir as usize],
            self.opts.block_size,
        );
        self.side.start_chain(id);
        self.prios[rq.prio as usize].inserted += 1;

        if rq.flags.contains(ReqFlags::HEAD) {
            self.slots[id as usize].state = State::Head;
            self.dispatch.push_front(id);
            self.pending += 1;
            return Ok(Inserted::Head);
        }
        let (p, d) = (rq.prio as usize, dir as usize);
        let end = rq.sector + u64::from(rq.nblocks);
        let probe = self.prios[p].sort[d].probe(rq.sector, end, id);
        if let Some(into) = self.try_insert_merge(id, probe) {
            return Ok(Inserted::Merged { into });
        }
        self.prios[p].sort[d].insert_at(probe.pos, id, rq.sector);
        self.fifo_push_back(p, d, id);
        self.pending += 1;
        Ok(Inserted::Queued)
    }

    /// Checks that nothing is queued or in flight (Linux's exit invariant). Logs and returns
    /// an error naming the first class that still has requests.
    pub fn teardown_check(&self) -> Result<(), SchedError> {
        for prio in PrioClass::ALL {
            let queued = self.queued(prio);
            if queued != 0 {
                log::error!(
                    "mq-deadline: teardown with {queued} {} requests queued or in flight",
                    prio.name()
                );
                return Err(SchedError::NotIdle { prio, queued });
            }
        }
        Ok(())
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Reported, never a panic in drop: the caller had its chance with `teardown_check`.
        let _ = self.teardown_check();
    }
}

#[cfg(test)]
mod tests;
