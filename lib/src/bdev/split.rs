//! Splitting an I/O the device cannot take in one request into child requests, and
//! completing the parent once (Linux's bio split, SPDK's child requests).
//!
//! A device declares two limits in [`BdevInfo`](super::BdevInfo): `max_transfer_blocks`, the
//! largest request, and `boundary_blocks`, a multiple of blocks no request may cross (NVMe's
//! NOIOB, SPDK's `optimal_io_boundary`, Linux's `chunk_sectors`; 0 = none). An I/O that breaks
//! either is cut, front to back, into children: each as long as both limits allow from where
//! the previous one ended ([`child_blocks`]), its buffer the matching part of the parent's.
//! Together the children cover the parent's blocks and buffer exactly once, in order.
//!
//! `Splits` keeps the parents in progress for one [`BdevQueue`](super::BdevQueue), in a
//! table sized at open (no allocation per I/O). A child is an ordinary request that takes a
//! tag like any other; its `flags` carry `ReqFlags::CHILD` and its `token` names the
//! parent's slot. When a child completes, the parent notes the first error; the last child
//! completes the parent, reported once with its own extent, buffer, token and submit time.
//!
//! **Tags: a resumable scheme.** A parent is accepted as soon as one child has a tag; it issues
//! as many children as tags allow at once, and waits (FIFO, oldest parent first) for the rest.
//! Every `poll` of the queue, after freeing the tags of what completed, issues waiting children
//! before the submitter can take those tags again, and starts them at once (the submitter need
//! not flush). A waiting parent therefore never needs more tags than the queue has (a 1 MiB
//! I/O on a 4-deep queue of a 64 KiB device goes through 4 children at a time), and it always
//! makes progress: until it is fully issued, either it has a child in flight or the tags are
//! held by requests that complete (an older waiting parent, issued first, or other I/O). A
//! parent with no tag at all for its first child is refused with `Busy`, nothing queued.
//! After a child fails, no more children are issued (as SPDK stops a split after an error);
//! the parent completes with that error once the children in flight are back.

use std::collections::VecDeque;

use crate::hctx::HctxType;
use crate::request::{Io, IoBuf, IoStatus, ReqFlags, Request};

/// Whether an I/O of `nblocks` at `lba` must be split: longer than `max` blocks, or crossing
/// a multiple of `boundary` blocks (`boundary` 0: none).
#[inline]
pub fn must_split(lba: u64, nblocks: u32, max: u32, boundary: u32) -> bool {
    nblocks > max || (boundary != 0 && crosses(lba, nblocks, boundary))
}

/// Whether `nblocks` at `lba` cross a multiple of `boundary` (non-zero) blocks.
#[inline]
pub(crate) fn crosses(lba: u64, nblocks: u32, boundary: u32) -> bool {
    let b = u64::from(boundary);
    // Boundaries are powers of two nearly always (clusters, strips, NOIOB): a mask, not a
    // division, on the per-I/O path.
    let within = if boundary.is_power_of_two() {
        lba & (b - 1)
    } else {
        lba % b
    };
    within + u64::from(nblocks) > b
}

/// Length of the child that starts at `lba` with `left` (> 0) blocks of its parent to go: as
/// many as `max` allows, and no further than the next multiple of `boundary` (0: none).
#[inline]
pub fn child_blocks(lba: u64, left: u32, max: u32, boundary: u32) -> u32 {
    let mut n = left.min(max);
    if boundary != 0 {
        let to_boundary = u64::from(boundary) - lba % u64::from(boundary);
        n = n.min(to_boundary.min(u64::from(u32::MAX)) as u32);
    }
    n
}

/// The children of `nblocks` (> 0) at `lba` as `(lba, nblocks)`, front to back.
pub fn children(
    lba: u64,
    nblocks: u32,
    max: u32,
    boundary: u32,
) -> impl Iterator<Item = (u64, u32)> {
    let mut at = 0u32;
    std::iter::from_fn(move || {
        if at == nblocks {
            return None;
        }
        let start = lba + u64::from(at);
        let n = child_blocks(start, nblocks - at, max, boundary);
        at += n;
        Some((start, n))
    })
}

/// Tags a plug should expect for one I/O of `nblocks` on a device whose largest request is
/// `max` blocks: the children a split by size makes (a boundary may add one).
#[inline]
pub fn expected_children(nblocks: u32, max: u32) -> u32 {
    if nblocks > max {
        nblocks.div_ceil(max.max(1))
    } else {
        1
    }
}

/// The part of the parent's buffer a child `off` blocks into it, `nblocks` long, uses (none
/// for an op without data).
#[inline]
fn child_buf(parent: &Io, off: u32, nblocks: u32, block_size: u32) -> IoBuf {
    if !parent.op.has_data() {
        return IoBuf::EMPTY;
    }
    parent.buf.range(off * block_size, nblocks * block_size)
}

/// One parent I/O in progress.
#[derive(Clone, Copy, Debug, Default)]
struct Parent {
    /// The I/O as submitted (extent, buffer, token, priority).
    io: Io,
    /// The hctx type and flags it maps to (its children's).
    ty: HctxType,
    flags: ReqFlags,
    /// The submitter's clock at submission.
    submit_ns: u64,
    /// Success, or the first error a child completed with.
    status: IoStatus,
    /// Blocks issued as children so far (from the front).
    issued: u32,
    /// Children issued and not completed.
    inflight: u32,
    /// Whether it is in the waiting FIFO.
    waiting: bool,
}

impl Parent {
    /// Whether every child that will ever be issued has been (all blocks, or an error stopped
    /// it).
    fn issued_all(&self) -> bool {
        self.issued == self.io.nblocks || !self.status.is_success()
    }
}

/// The parents in progress on one queue; see the module docs.
#[derive(Debug)]
pub(crate) struct Splits {
    parents: Box<[Parent]>,
    /// Free slots of `parents` (capacity: all of them).
    free: Vec<u16>,
    /// Parents with children still to issue, oldest first (capacity: all of them; a parent is
    /// in it at most once).
    waiting: VecDeque<u16>,
    /// Children completed, since the last [`Splits::take_absorbed`], that did not complete
    /// their parent (reported to nobody).
    absorbed: usize,
    /// Children issued and not completed, over all parents (completion batches look for
    /// children only while there are some).
    children: u32,
    max: u32,
    boundary: u32,
    block_size: u32,
}

impl Splits {
    /// A table of `capacity` parents for a device with these limits. `capacity` is the tags
    /// the queue has: every parent in progress holds at least one.
    pub(crate) fn new(capacity: u32, max: u32, boundary: u32, block_size: u32) -> Splits {
        let capacity = capacity.clamp(1, u32::from(u16::MAX) + 1) as usize;
        Splits {
            parents: vec![Parent::default(); capacity].into_boxed_slice(),
            free: (0..capacity).rev().map(|s| s as u16).collect(),
            waiting: VecDeque::with_capacity(capacity),
            absorbed: 0,
            children: 0,
            max,
            boundary,
            block_size,
        }
    }

    /// Takes a slot for `io` (mapped to `ty` with `flags`, submitted at `now`); `None` when the
    /// table is full (then every tag is in use: the caller answers busy).
    pub(crate) fn start(
        &mut self,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
        now: u64,
    ) -> Option<u16> {
        let slot = self.free.pop()?;
        self.parents[usize::from(slot)] = Parent {
            io: *io,
            ty,
            flags,
            submit_ns: now,
            status: IoStatus::Success,
            issued: 0,
            inflight: 0,
            waiting: false,
        };
        Some(slot)
    }

    /// The hctx type of `slot`'s children.
    pub(crate) fn hctx_type(&self, slot: u16) -> HctxType {
        self.parents[usize::from(slot)].ty
    }

    /// The next child of `slot` to issue (`None` when there is none): its extent and part of
    /// the buffer, the parent's priority, `flags` with [`ReqFlags::CHILD`], the slot as token.
    /// Nothing changes until [`Splits::issued`] says it was queued.
    pub(crate) fn next_child(&self, slot: u16) -> Option<(Io, ReqFlags)> {
        let p = &self.parents[usize::from(slot)];
        if p.issued_all() {
            return None;
        }
        let lba = p.io.lba + u64::from(p.issued);
        let n = child_blocks(lba, p.io.nblocks - p.issued, self.max, self.boundary);
        let io = Io {
            lba,
            nblocks: n,
            buf: child_buf(&p.io, p.issued, n, self.block_size),
            flags: p.io.flags.union(ReqFlags::CHILD),
            token: u64::from(slot),
            ..p.io
        };
        Some((io, p.flags.union(ReqFlags::CHILD)))
    }

    /// The child [`Splits::next_child`] gave, `nblocks` long, was queued.
    pub(crate) fn issued(&mut self, slot: u16, nblocks: u32) {
        let p = &mut self.parents[usize::from(slot)];
        p.issued += nblocks;
        p.inflight += 1;
        self.children += 1;
    }

    /// Whether any child is in flight (else a completion batch has none to look for).
    #[inline]
    pub(crate) fn has_children(&self) -> bool {
        self.children != 0
    }

    /// `slot` could not queue its first child: forget it.
    pub(crate) fn cancel(&mut self, slot: u16) {
        debug_assert_eq!(self.parents[usize::from(slot)].inflight, 0);
        self.free.push(slot);
    }

    /// After queueing what it could: `slot` waits for tags if children remain.
    pub(crate) fn wait_if_unfinished(&mut self, slot: u16) {
        let p = &mut self.parents[usize::from(slot)];
        if !p.issued_all() && !p.waiting {
            p.waiting = true;
            self.waiting.push_back(slot);
        }
    }

    /// The oldest parent waiting for tags.
    pub(crate) fn first_waiting(&self) -> Option<u16> {
        self.waiting.front().copied()
    }

    /// Whether a parent waits for tags.
    pub(crate) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The oldest waiting parent has issued everything it will: it leaves the FIFO.
    pub(crate) fn pop_waiting(&mut self) {
        if let Some(slot) = self.waiting.pop_front() {
            self.parents[usize::from(slot)].waiting = false;
        }
    }

    /// Whether the queue's `poll` has work here: children absorbed to account for, or parents
    /// waiting for tags.
    #[inline]
    pub(crate) fn needs_poll_end(&self) -> bool {
        self.absorbed != 0 || !self.waiting.is_empty()
    }

    /// Children that completed without completing their parent since the last call.
    #[inline]
    pub(crate) fn take_absorbed(&mut self) -> usize {
        std::mem::take(&mut self.absorbed)
    }

    /// A child completed (`rq`, its status set). Returns the parent's completion when this was
    /// its last child: the child's request with the parent's extent, buffer, flags, token,
    /// submit time and status (the first error of any child). Otherwise counts the child as
    /// absorbed and returns `None`.
    pub(crate) fn child_done(&mut self, rq: &Request) -> Option<Request> {
        let slot = rq.token as u16;
        let Some(p) = self.parents.get_mut(usize::from(slot)) else {
            log::error!("split: completion of a child of parent {slot}, which does not exist");
            self.absorbed += 1;
            return None;
        };
        debug_assert!(p.inflight > 0, "child of parent {slot} completed twice");
        p.inflight -= 1;
        self.children -= 1;
        if p.status.is_success() && !rq.status.is_success() {
            p.status = rq.status;
        }
        if p.inflight > 0 || !p.issued_all() {
            self.absorbed += 1;
            return None;
        }
        let p = *p;
        if p.waiting {
            // An error ended it while it waited for tags (cold: errors only).
            self.waiting.retain(|&s| s != slot);
        }
        self.free.push(slot);
        Some(Request {
            flags: p.flags,
            prio: p.io.prio,
            lba: p.io.lba,
            nblocks: p.io.nblocks,
            buf: p.io.buf,
            status: p.status,
            submit_ns: p.submit_ns,
            token: p.io.token,
            ..*rq
        })
    }

    /// Parents in progress.
    #[cfg(test)]
    pub(crate) fn in_progress(&self) -> usize {
        self.parents.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests;
