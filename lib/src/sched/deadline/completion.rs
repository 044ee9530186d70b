//! The part of mq-deadline updated without the scheduler's lock: completion.
//!
//! Per scheduler tag a [`Link`] of three atomics, per class a `completed` counter. Every
//! access to them is a method here, so the memory-ordering argument below is the whole story.
//!
//! **Who writes what.**
//! - Under the scheduler's lock, from insertion to hand-out: a request's chain, `next` (the
//!   next member of a merged request, in sector order) and `head` (a carrier's first member):
//!   [`CompletionSide::start_chain`], [`CompletionSide::append`], [`CompletionSide::set_head`].
//! - Under the lock, at hand-out: `meta = INFLIGHT | class` on the carrier, with `MEMBER` on
//!   each merged member, the members first ([`CompletionSide::mark_member`], then
//!   [`CompletionSide::mark_carrier`]); at requeue, `meta = 0` again
//!   ([`CompletionSide::take_back`], [`CompletionSide::unmark_member`]).
//! - Without the lock, by whoever completes a carrier (its owner): `meta = 0` on the carrier
//!   and its members, reading the chain on the way; then one add per class to `completed`
//!   ([`CompletionSide::complete_batch`], [`CompletionSide::complete_counted`]).
//!
//! **Why these orderings suffice.**
//! 1. *Hand-out publishes the chain.* The chain is written (Relaxed) before the hand-out's
//!    Release stores of `meta`; the completer's Acquire load of the carrier's `meta` therefore
//!    sees the final `head` and every `next`, and the members' `MEMBER` marks (stored before
//!    the carrier's). This holds wherever the completion is reported from, whether or not the
//!    caller's own hand-over of the id synchronises.
//! 2. *A chain is frozen while in flight.* `next` and `head` are written only under the lock
//!    and before the hand-out marks the request, and a request is inserted again only when
//!    [`CompletionSide::in_flight`] (Acquire) finds it unmarked; the Release stores that
//!    unmark members pair with it. The caller's side of this: an id is inserted again only
//!    after the `complete_batch` that completed it has returned, by a thread that learned of
//!    the completion from it (the owner: the block layer frees a batch's tags after the
//!    call). Not from inside `f`: the walk reads a member's `next` after reporting it.
//! 3. *Load and store, not a read-modify-write, at completion.* Only the owner completes a
//!    request, so nobody else writes its `meta` then; a second completion of one request (a
//!    caller bug) is still caught unless two threads race on it.
//! 4. *Counters are Relaxed.* `completed` is read under the lock to compute "queued =
//!    inserted − completed"; a stale read only makes a class look busier than it is (a lower
//!    class waits a little longer, a bypass is declined), never idle while it has requests,
//!    and a reactor always sees its own earlier completions.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::request::{IoStatus, PrioClass};
use crate::sched::SchedError;

use super::{Deadline, NIL, NR_PRIO};

/// Meta word of a request in flight: bit 31 set, class in the low bits.
const INFLIGHT: u32 = 1 << 31;
/// Meta bit of a merged member (completed through its carrier, never on its own).
const MEMBER: u32 = 1 << 30;

/// Per-id links readable without the lock. `next` chains the members of a merged request in
/// sector order (written under the lock while the requests are queued, read at completion);
/// `head` is a carrier's first member; `meta` is `INFLIGHT | class` while handed out.
#[derive(Debug)]
struct Link {
    next: AtomicU32,
    head: AtomicU32,
    meta: AtomicU32,
}

/// One counter per cache line, so completers of different classes do not share a line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCounter(AtomicU64);

/// Completion state shared by a scheduler and whoever completes its requests.
///
/// Invariant: a request's links are changed only under the scheduler's lock while it is
/// queued, and read here only after it was handed out (the hand-out synchronises).
#[derive(Debug)]
pub(crate) struct CompletionSide {
    completed: [PaddedCounter; NR_PRIO],
    links: Box<[Link]>,
}

impl CompletionSide {
    pub(super) fn new(nr: u32) -> CompletionSide {
        let links = (0..nr)
            .map(|_| Link {
                next: AtomicU32::new(NIL),
                head: AtomicU32::new(NIL),
                meta: AtomicU32::new(0),
            })
            .collect();
        CompletionSide {
            completed: Default::default(),
            links,
        }
    }

    #[inline]
    pub(super) fn completed(&self, prio: PrioClass) -> u64 {
        self.completed[prio as usize].0.load(Ordering::Relaxed)
    }

    /// Whether `id` is handed out and not completed (as a carrier or a member).
    #[inline]
    pub(super) fn in_flight(&self, id: u32) -> bool {
        self.links[id as usize].meta.load(Ordering::Acquire) & INFLIGHT != 0
    }

    // ------------------------------------------------------------------------------------
    // Under the lock: chains of queued requests, hand-out and requeue marks.

    /// `id`, just queued, is a chain of its own.
    #[inline]
    pub(super) fn start_chain(&self, id: u32) {
        let link = &self.links[id as usize];
        link.next.store(NIL, Ordering::Relaxed);
        link.head.store(id, Ordering::Relaxed);
    }

    /// The chain starting at `head` follows the one ending at `tail` (a merge).
    #[inline]
    pub(super) fn append(&self, tail: u32, head: u32) {
        self.links[tail as usize]
            .next
            .store(head, Ordering::Relaxed);
    }

    /// The member after `id` in its chain (`NIL` at the end).
    #[inline]
    pub(super) fn next(&self, id: u32) -> u32 {
        self.links[id as usize].next.load(Ordering::Relaxed)
    }

    /// Carrier `id`'s first member, for its completer.
    #[inline]
    pub(super) fn set_head(&self, id: u32, head: u32) {
        self.links[id as usize].head.store(head, Ordering::Relaxed);
    }

    /// Hands out `m` as a merged member of a class-`prio` carrier.
    #[inline]
    pub(super) fn mark_member(&self, m: u32, prio: PrioClass) {
        self.links[m as usize]
            .meta
            .store(INFLIGHT | MEMBER | prio as u32, Ordering::Release);
    }

    /// Hands out carrier `id` of class `prio`: after its members, as it publishes them.
    #[inline]
    pub(super) fn mark_carrier(&self, id: u32, prio: PrioClass) {
        self.links[id as usize]
            .meta
            .store(INFLIGHT | prio as u32, Ordering::Release);
    }

    /// Requeue: takes carrier `id` back if it is handed out and not completed.
    pub(super) fn take_back(&self, id: u32) -> bool {
        let link = &self.links[id as usize];
        let meta = link.meta.load(Ordering::Acquire);
        meta & (INFLIGHT | MEMBER) == INFLIGHT
            && link
                .meta
                .compare_exchange(meta, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// Requeue: member `m` of a carrier taken back is no longer handed out.
    #[inline]
    pub(super) fn unmark_member(&self, m: u32) {
        self.links[m as usize].meta.store(0, Ordering::Release);
    }

    // ------------------------------------------------------------------------------------
    // Without the lock: completion.

    /// Members of a handed-out carrier, in sector order (the carrier included).
    pub(crate) fn members(&self, carrier: u32) -> Members<'_> {
        let next = match self.links.get(carrier as usize) {
            Some(l) => l.head.load(Ordering::Relaxed),
            None => NIL,
        };
        Members {
            links: &self.links,
            next,
            left: self.links.len(),
        }
    }

    /// Completes `counts[class]` requests of each class that were handed out without
    /// per-request state (`Deadline::insert_dispatch_counted`).
    #[inline]
    pub(crate) fn complete_counted(&self, counts: [u64; NR_PRIO]) {
        for (c, n) in self.completed.iter().zip(counts) {
            if n != 0 {
                c.0.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Completes handed-out carriers: `f(member, status)` once per member, then one atomic
    /// add per class for the whole batch. Ids that are not in flight are rejected (logged)
    /// and the rest still complete.
    pub(crate) fn complete_batch<I, F>(&self, done: I, mut f: F) -> Result<usize, SchedError>
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        let mut per_prio = [0u64; NR_PRIO];
        let mut total = 0;
        let mut first_err = None;
        for (id, status) in done {
            let Some(link) = self.links.get(id as usize) else {
                log::error!("mq-deadline: completion of unknown request id {id}");
                first_err.get_or_insert(SchedError::BadId { id });
                continue;
            };
            // Load and store, not a read-modify-write: see the module's point 3.
            let meta = link.meta.load(Ordering::Acquire);
            let owned = meta & (INFLIGHT | MEMBER) == INFLIGHT;
            if owned {
                link.meta.store(0, Ordering::Relaxed);
            } else {
                log::error!(
                    "mq-deadline: completion of request {id}, which is not a request in flight"
                );
                first_err.get_or_insert(SchedError::NotInFlight { id });
                continue;
            }
            let prio = (meta & 0x3) as usize;
            let mut m = link.head.load(Ordering::Relaxed);
            let mut left = self.links.len();
            while m != NIL && left > 0 {
                if m != id {
                    self.links[m as usize].meta.store(0, Ordering::Release);
                }
                f(m, status);
                per_prio[prio] += 1;
                total += 1;
                m = self.links[m as usize].next.load(Ordering::Relaxed);
                left -= 1;
            }
        }
        self.complete_counted(per_prio);
        match first_err {
            None => Ok(total),
            Some(e) => Err(e),
        }
    }
}

/// Iterator over the members of a merged request, in sector order.
#[derive(Debug)]
pub struct Members<'a> {
    links: &'a [Link],
    next: u32,
    left: usize,
}

impl Iterator for Members<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.next == NIL || self.left == 0 {
            return None;
        }
        let id = self.next;
        self.next = self.links[id as usize].next.load(Ordering::Relaxed);
        self.left -= 1;
        Some(id)
    }
}

impl Deadline {
    /// Completes handed-out requests without needing `&mut`: `f(member, status)` once for
    /// every member of each (merged) request, in sector order. See
    /// [`crate::sched::SharedDeadline::complete_batch`].
    pub fn complete_batch<I, F>(&self, done: I, f: F) -> Result<usize, SchedError>
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        self.side.complete_batch(done, f)
    }

    /// Members of a handed-out request, in sector order (the request itself included).
    pub fn members(&self, id: u32) -> Members<'_> {
        self.side.members(id)
    }
}
