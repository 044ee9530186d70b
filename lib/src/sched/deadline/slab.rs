//! The slab: one [`Slot`] per scheduler tag, what the scheduler knows of a request while it
//! holds it, and the deadline FIFOs threaded through it by index (O(1) push, unlink and
//! replace, nothing allocated).

use crate::request::{Op, PrioClass, ReqFlags};
use crate::sched::{Dir, Dispatched, SchedRq};

use super::{Deadline, NIL};

/// Where a request id currently is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Never inserted, or handed out (in flight or completed): may be inserted.
    Out,
    /// In its class's sort tree and FIFO.
    Queued,
    /// In the dispatch list (head insertion or requeue).
    Head,
    /// Merged into another request that is still in the scheduler.
    Member,
    /// Taken out of the scheduler for another owner; waits in that owner's ready list.
    Ready,
}

/// Slab entry, indexed by scheduler tag. Carrier fields describe the merged request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    pub(super) state: State,
    pub(super) owner: u16,
    pub(super) op: Op,
    pub(super) prio: PrioClass,
    pub(super) flags: ReqFlags,
    /// Whether it was already counted as dispatched (requeues count once).
    pub(super) started: bool,
    pub(super) sector: u64,
    pub(super) nblocks: u32,
    pub(super) nsegs: u32,
    /// First member's buffer address (0: unknown / none).
    pub(super) addr: u64,
    /// End of the last member's buffer (0: unknown / none).
    pub(super) end_addr: u64,
    pub(super) insert_ns: u64,
    pub(super) deadline_ns: u64,
    pub(super) fifo_prev: u32,
    pub(super) fifo_next: u32,
    pub(super) chain_head: u32,
    pub(super) chain_tail: u32,
    pub(super) nr_members: u32,
}

impl Slot {
    pub(super) const EMPTY: Slot = Slot {
        state: State::Out,
        owner: 0,
        op: Op::Read,
        prio: PrioClass::Be,
        flags: ReqFlags::NONE,
        started: false,
        sector: 0,
        nblocks: 0,
        nsegs: 0,
        addr: 0,
        end_addr: 0,
        insert_ns: 0,
        deadline_ns: 0,
        fifo_prev: NIL,
        fifo_next: NIL,
        chain_head: NIL,
        chain_tail: NIL,
        nr_members: 0,
    };

    /// `rq` just inserted at `now_ns`: queued, alone (a chain of one member, one buffer
    /// segment), due `expire_ns` later; not in a FIFO yet. `block_size` tells where its buffer
    /// ends, to recognise a contiguous neighbour.
    #[inline]
    pub(super) fn queued(rq: &SchedRq, now_ns: u64, expire_ns: u64, block_size: u32) -> Slot {
        let bytes = u64::from(rq.nblocks) * u64::from(block_size);
        Slot {
            state: State::Queued,
            owner: rq.owner,
            op: rq.op,
            prio: rq.prio,
            flags: rq.flags,
            started: false,
            sector: rq.sector,
            nblocks: rq.nblocks,
            nsegs: 1,
            addr: rq.addr,
            end_addr: if rq.addr == 0 {
                0
            } else {
                rq.addr.wrapping_add(bytes)
            },
            insert_ns: now_ns,
            deadline_ns: now_ns.saturating_add(expire_ns),
            fifo_prev: NIL,
            fifo_next: NIL,
            chain_head: rq.id,
            chain_tail: rq.id,
            nr_members: 1,
        }
    }

    /// What the driver is given for carrier `id`: the merged request this slot describes.
    #[inline]
    pub(super) fn dispatched(&self, id: u32) -> Dispatched {
        Dispatched {
            id,
            owner: self.owner,
            op: self.op,
            prio: self.prio,
            flags: self.flags,
            sector: self.sector,
            nblocks: self.nblocks,
            addr: self.addr,
            nsegs: self.nsegs,
            nr_members: self.nr_members,
        }
    }

    #[inline]
    pub(super) fn dir(&self) -> Dir {
        Dir::of(self.op)
    }

    #[inline]
    pub(super) fn end(&self) -> u64 {
        self.sector + u64::from(self.nblocks)
    }
}

/// The deadline FIFOs: per class and direction, a list linked through the slots'
/// `fifo_prev` / `fifo_next`, its ends in the class's `fifo_head` / `fifo_tail`.
impl Deadline {
    pub(super) fn fifo_push_back(&mut self, p: usize, d: usize, id: u32) {
        let tail = self.prios[p].fifo_tail[d];
        {
            let s = &mut self.slots[id as usize];
            s.fifo_prev = tail;
            s.fifo_next = NIL;
        }
        self.fifo_point(p, d, tail, NIL, id, id);
    }

    pub(super) fn fifo_unlink(&mut self, p: usize, d: usize, id: u32) {
        let Slot {
            fifo_prev: prev,
            fifo_next: next,
            ..
        } = self.slots[id as usize];
        self.fifo_point(p, d, prev, next, next, prev);
        let s = &mut self.slots[id as usize];
        s.fifo_prev = NIL;
        s.fifo_next = NIL;
    }

    /// Puts unlinked `new` where `old` is and unlinks `old`.
    pub(super) fn fifo_replace(&mut self, p: usize, d: usize, old: u32, new: u32) {
        let Slot {
            fifo_prev: prev,
            fifo_next: next,
            ..
        } = self.slots[old as usize];
        {
            let s = &mut self.slots[new as usize];
            s.fifo_prev = prev;
            s.fifo_next = next;
        }
        self.fifo_point(p, d, prev, next, new, new);
        let s = &mut self.slots[old as usize];
        s.fifo_prev = NIL;
        s.fifo_next = NIL;
    }

    /// Points the link after `prev` (the FIFO's head when `prev` is `NIL`) at `fwd`, and the
    /// link before `next` (its tail when `next` is `NIL`) at `back`.
    #[inline]
    fn fifo_point(&mut self, p: usize, d: usize, prev: u32, next: u32, fwd: u32, back: u32) {
        if prev == NIL {
            self.prios[p].fifo_head[d] = fwd;
        } else {
            self.slots[prev as usize].fifo_next = fwd;
        }
        if next == NIL {
            self.prios[p].fifo_tail[d] = back;
        } else {
            self.slots[next as usize].fifo_prev = back;
        }
    }
}
