//! Merging (Linux's `blk-merge.c` as mq-deadline uses it): a new request joins a queued
//! neighbour of the same class and direction that it touches, back merge first, and a grown
//! request then joins the neighbour it now touches too. A merged request is one carrier with
//! its members chained in sector order; each member still completes on its own.

use crate::request::{Op, ReqFlags};
use crate::sched::sorttree::Probe;

use super::slab::{Slot, State};
use super::{Deadline, NIL};

/// How a request joins a queued carrier: behind it (a back merge) or in front of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Merge {
    Back,
    Front,
}

impl Deadline {
    /// Whether a request may take part in a merge at all (Linux's `rq_mergeable`).
    fn mergeable(s: &Slot) -> bool {
        matches!(s.op, Op::Read | Op::Write)
            && !s.flags.contains(ReqFlags::FUA)
            && !s.flags.contains(ReqFlags::HEAD)
            && s.nblocks != 0
    }

    /// Whether `lo` followed by `hi` (adjacent in sectors) may become one request; returns the
    /// merged segment count. The children of a split I/O merge like any request (each member
    /// still completes on its own), within the device's limits.
    fn merge_fits(&self, lo: &Slot, hi: &Slot) -> Option<u32> {
        const ANY: ReqFlags = ReqFlags::SYNC.union(ReqFlags::CHILD);
        // Same owner too: the owner completes the members, whose requests live in its pool.
        let same = lo.op == hi.op
            && lo.owner == hi.owner
            && lo.prio == hi.prio
            && lo.flags.without(ANY) == hi.flags.without(ANY)
            && lo.end() == hi.sector;
        if !same || !Self::mergeable(lo) || !Self::mergeable(hi) {
            return None;
        }
        let blocks = u64::from(lo.nblocks) + u64::from(hi.nblocks);
        if blocks > u64::from(self.opts.max_transfer_blocks) {
            return None;
        }
        let b = u64::from(self.opts.boundary_blocks);
        if b != 0 && lo.sector / b != (hi.end() - 1) / b {
            return None;
        }
        let contiguous = lo.end_addr != 0 && lo.end_addr == hi.addr;
        let segs = lo.nsegs + hi.nsegs - u32::from(contiguous);
        (segs <= self.opts.max_segments).then_some(segs)
    }

    /// Tries to merge the new request `id` into a queued neighbour: back merge first (a queued
    /// request ending where `id` starts), then front merge (one starting where `id` ends).
    /// After a merge, the grown request may now touch another queued one: merge those too,
    /// as Linux's `attempt_back_merge` / `attempt_front_merge`.
    pub(super) fn try_insert_merge(&mut self, id: u32, probe: Probe) -> Option<u32> {
        let s = &self.slots[id as usize];
        // Without a buffer address two requests make two segments.
        if !Self::mergeable(s) || (s.addr == 0 && self.opts.max_segments < 2) {
            return None;
        }
        let new = *s;
        let (p, d) = (new.prio as usize, new.dir() as usize);
        if let Some(q) = probe.back
            && let Some(segs) = self.merge_fits(&self.slots[q as usize], &new)
        {
            self.absorb(q, id, Merge::Back, segs);
            self.prios[p].merged += 1;
            if let Some(r) = self.front_neighbour(q) {
                self.merge_queued(q, r);
            }
            return Some(q);
        }
        if self.opts.front_merges
            && let Some(q) = probe.front
            && let Some(segs) = self.merge_fits(&new, &self.slots[q as usize])
        {
            // The queued request keeps its place in the FIFO; re-key it in the tree.
            let old = self.slots[q as usize].sector;
            self.prios[p].sort[d].remove(q, old);
            self.absorb(q, id, Merge::Front, segs);
            let sector = self.slots[q as usize].sector;
            self.prios[p].sort[d].insert(q, sector);
            self.prios[p].merged += 1;
            if let Some(prev) = self.back_neighbour(q) {
                self.merge_queued(prev, q);
                return Some(prev);
            }
            return Some(q);
        }
        None
    }

    /// A queued request of the same class and direction starting where `q` ends, if it can be
    /// merged behind `q`.
    fn front_neighbour(&self, q: u32) -> Option<u32> {
        let s = &self.slots[q as usize];
        let r = self.prios[s.prio as usize].sort[s.dir() as usize].first_at_or_after(s.end())?;
        self.merge_fits(s, &self.slots[r as usize]).map(|_| r)
    }

    /// A queued request of the same class and direction ending where `q` starts, if `q` can
    /// be merged behind it.
    fn back_neighbour(&self, q: u32) -> Option<u32> {
        let s = &self.slots[q as usize];
        let r = self.prios[s.prio as usize].sort[s.dir() as usize].last_before(s.sector)?;
        self.merge_fits(&self.slots[r as usize], s).map(|_| r)
    }

    /// Carrier `q` absorbs the unqueued request `n` that touches it: behind it
    /// (`Merge::Back`) or in front of it (`Merge::Front`; the caller then re-keys `q`, whose
    /// start moved). Sizes add up; the merged request keeps `q`'s place in the FIFO and the
    /// earlier insertion time and deadline (as Linux's `dd_merged_requests`).
    fn absorb(&mut self, q: u32, n: u32, merge: Merge, segs: u32) {
        let ns = self.slots[n as usize];
        let qs = &mut self.slots[q as usize];
        match merge {
            Merge::Back => {
                self.side.append(qs.chain_tail, ns.chain_head);
                qs.chain_tail = ns.chain_tail;
                qs.end_addr = ns.end_addr;
            }
            Merge::Front => {
                self.side.append(ns.chain_tail, qs.chain_head);
                qs.chain_head = ns.chain_head;
                qs.sector = ns.sector;
                qs.addr = ns.addr;
            }
        }
        qs.nblocks += ns.nblocks;
        qs.nsegs = segs;
        qs.nr_members += ns.nr_members;
        qs.insert_ns = qs.insert_ns.min(ns.insert_ns);
        qs.deadline_ns = qs.deadline_ns.min(ns.deadline_ns);
        self.make_member(n);
    }

    /// `n` now belongs to a carrier's chain: not a carrier itself any more.
    fn make_member(&mut self, n: u32) {
        let s = &mut self.slots[n as usize];
        s.state = State::Member;
        s.chain_head = NIL;
        s.chain_tail = NIL;
    }

    /// Queued `lo` absorbs queued `hi` right behind it (`dd_merged_requests`): `hi` leaves the
    /// tree and FIFO; `lo` inherits `hi`'s FIFO position and time when those are earlier.
    fn merge_queued(&mut self, lo: u32, hi: u32) {
        let Some(segs) = self.merge_fits(&self.slots[lo as usize], &self.slots[hi as usize]) else {
            return;
        };
        let hs = self.slots[hi as usize];
        let (p, d) = (hs.prio as usize, hs.dir() as usize);
        self.prios[p].sort[d].remove(hi, hs.sector);
        if hs.deadline_ns < self.slots[lo as usize].deadline_ns {
            self.fifo_unlink(p, d, lo);
            self.fifo_replace(p, d, hi, lo);
        } else {
            self.fifo_unlink(p, d, hi);
        }
        self.pending -= 1;
        self.absorb(lo, hi, Merge::Back, segs);
        self.prios[p].merged += 1;
    }
}
