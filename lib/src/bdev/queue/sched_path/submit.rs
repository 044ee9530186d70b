//! Submitting to the scheduler path: a scheduler tag (the plug's batch for synchronous reads,
//! a single tag under the scheduler's shallow depth otherwise), the request prepared in the
//! scheduler pool and appended to the pending list, and what `flush` needs to know of the
//! burst as a whole (its classes, HEAD or adjacent requests, requests per hctx).

use super::SchedPath;
use crate::bdev::queue::validate::BurstShape;
use crate::bdev::queue::{BdevQueue, SubmitError};
use crate::bdev::stats::now_ns;
use crate::hctx::HctxType;
use crate::plug::{DevKey, Plug};
use crate::request::{Io, IoBuf, ReqFlags};

impl SchedPath {
    /// Takes a scheduler tag for `io` (a split's child issued by `poll`, mapped to `ty` with
    /// `flags`: no plug, the scheduler's depth limit) and queues it after the pending burst,
    /// to be inserted by [`SchedPath::start_resumed`]. `None` when no tag is free.
    pub(in crate::bdev::queue) fn queue_resumed(
        &mut self,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
        now: u64,
    ) -> Option<u16> {
        let tag = match self.dd.limit_depth(io.op, flags) {
            None => self.tags.get(&mut self.hint),
            Some(depth) => self.tags.get_shallow(&mut self.hint, depth),
        }?;
        let rq = &mut self.pool[tag];
        rq.prepare(io, now);
        rq.flags = flags;
        rq.hctx = ty;
        // At most `per_owner` scheduler tags exist, so a pending slot is always free.
        self.pending[self.npending] = tag;
        self.npending += 1;
        Some(tag)
    }

    /// The request side of `submit_sched` (also a split's children at submit): the tag (through
    /// `plug`, whose cache entries for the queue are `key`'s), the request, the pending list and
    /// what flush needs to know of the burst; not `inflight`.
    #[inline]
    pub(in crate::bdev::queue) fn queue(
        &mut self,
        plug: &mut Plug,
        key: DevKey,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
    ) -> Result<u16, SubmitError> {
        if self.burst_ns == 0 {
            self.burst_ns = now_ns();
        }
        let tag = match self.dd.limit_depth(io.op, flags) {
            None => plug.take(key, ty, &self.tags, &mut self.hint),
            Some(depth) => self.tags.get_shallow(&mut self.hint, depth),
        }
        .ok_or(SubmitError::Busy)?;
        let rq = &mut self.pool[tag];
        rq.prepare(io, self.burst_ns);
        rq.flags = flags;
        // The hctx the request will be dispatched to (scheduler requests are all `Default`
        // in the pool; this field tells dispatch where to go).
        rq.hctx = ty;
        // At most `per_owner` scheduler tags exist, so a pending slot is always free.
        self.pending[self.npending] = tag;
        self.npending += 1;
        // What flush needs to know to hand the burst out whole (see `flush_direct`).
        let dir = u8::from(!io.op.is_read());
        let end = io.lba.wrapping_add(u64::from(io.nblocks));
        self.burst_classes |= 1 << (io.prio.class as u8);
        // Branch-free: `&` and `|` on bools evaluate both sides.
        self.burst_irregular |= flags.contains(ReqFlags::HEAD)
            | ((self.prev_dir == dir) & ((self.prev_end == io.lba) | (end == self.prev_start)));
        self.prev_dir = dir;
        self.prev_start = io.lba;
        self.prev_end = end;
        self.burst_end[usize::from(dir)] = end;
        self.burst_hctx[ty.index()] += 1;
        Ok(tag)
    }
}

impl BdevQueue {
    /// `submit` with a scheduler: take a scheduler tag (plug batch for synchronous reads,
    /// shallow single tag otherwise) and queue the request for the next flush.
    #[inline]
    pub(in crate::bdev::queue) fn submit_sched(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
    ) -> Result<u16, SubmitError> {
        let key = self.key;
        let Some(sp) = self.path.sched_mut() else {
            return Err(SubmitError::Busy);
        };
        let tag = sp.queue(plug, key, io, ty, flags)?;
        self.inflight += 1;
        Ok(tag)
    }

    /// One run of `submit_with` with a scheduler (the per-burst work done once: hctx mapping,
    /// the scheduler's depth limit, the burst clock and class): up to `n` I/Os until one finds
    /// no tag (then fewer queued and `None`) or needs care (returned, not queued).
    #[inline]
    pub(in crate::bdev::queue) fn sched_burst_run<F>(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        shape: &BurstShape,
        n: u32,
        next: &mut F,
    ) -> (u32, Option<Io>)
    where
        F: FnMut() -> (u64, IoBuf, u64),
    {
        let mut io = *io;
        let (ty, flags) = (shape.ty, shape.flags);
        let key = self.key;
        let Some(sp) = self.path.sched_mut() else {
            return (0, None);
        };
        if sp.burst_ns == 0 {
            sp.burst_ns = now_ns();
        }
        let now = sp.burst_ns;
        let depth = sp.dd.limit_depth(io.op, flags);
        let dir = u8::from(!io.op.is_read());
        let nb = u64::from(io.nblocks);
        // Every I/O of this call has direction `dir`: a predecessor in the other direction
        // (or none) becomes an extent no valid I/O touches (LBAs are below 2^48).
        let (mut prev_start, mut prev_end) = if sp.prev_dir == dir {
            (sp.prev_start, sp.prev_end)
        } else {
            (u64::MAX, u64::MAX)
        };
        let mut adjacent = false;
        let mut queued = 0u32;
        let mut care = None;
        for _ in 0..n {
            (io.lba, io.buf, io.token) = next();
            if shape.needs_care(&io) {
                care = Some(io);
                break;
            }
            let tag = match depth {
                None => plug.take(key, ty, &sp.tags, &mut sp.hint),
                Some(d) => sp.tags.get_shallow(&mut sp.hint, d),
            };
            let Some(tag) = tag else {
                break;
            };
            let rq = &mut sp.pool[tag];
            rq.prepare(&io, now);
            rq.flags = flags;
            rq.hctx = ty;
            sp.pending[sp.npending] = tag;
            sp.npending += 1;
            let end = io.lba.wrapping_add(nb);
            adjacent |= (prev_end == io.lba) | (end == prev_start);
            (prev_start, prev_end) = (io.lba, end);
            queued += 1;
        }
        if queued > 0 {
            sp.burst_classes |= 1 << (io.prio.class as u8);
            sp.burst_irregular |= adjacent || flags.contains(ReqFlags::HEAD);
            (sp.prev_dir, sp.prev_start, sp.prev_end) = (dir, prev_start, prev_end);
            sp.burst_end[usize::from(dir)] = prev_end;
            sp.burst_hctx[ty.index()] += queued;
            self.inflight += queued;
        }
        (queued, care)
    }
}
