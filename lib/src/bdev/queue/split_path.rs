//! A [`BdevQueue`]'s side of splitting (the scheme is in [`crate::bdev::split`]): submitting a
//! parent's children, completing the parent with its last child, and issuing the children of
//! parents that wait for tags at the end of `poll`.
//!
//! Children are requests like any other: without a scheduler they take driver tags (through
//! the submitter's plug at submit), with mq-deadline scheduler tags (the plug for synchronous
//! reads, the scheduler's shallow depth otherwise), and go out at the submitter's next
//! `flush`, where the scheduler may merge them with neighbours as far as the device's limits
//! allow. Children issued by `poll` start there and then: one driver `submit` per hctx, or
//! one insert and dispatch of the scheduler. Nothing here runs for an I/O that needs no split.

use super::complete::record_done;
use super::sched_path::SchedPath;
use super::{BdevQueue, SubmitError};
use crate::bdev::split::Splits;
use crate::bdev::stats::{QueueStats, now_ns};
use crate::hctx::{HCTX_MAX_TYPES, HctxType};
use crate::plug::Plug;
use crate::request::{Io, ReqFlags, Request};

impl BdevQueue {
    /// `submit` of an I/O the device cannot take whole (validated): a parent slot, then as
    /// many children as tags allow; the rest wait for `poll`. `Busy` with nothing queued when
    /// not even the first child finds a tag.
    #[inline(never)]
    pub(super) fn submit_split(&mut self, plug: &mut Plug, io: &Io) -> Result<u16, SubmitError> {
        let (ty, flags) = self.queues.map(io.op, io.flags);
        let now = self.burst_clock();
        let Some(s) = self.split.as_deref_mut() else {
            // `open` builds the table for every device that may split.
            return Err(SubmitError::Busy);
        };
        let slot = s.start(io, ty, flags, now).ok_or(SubmitError::Busy)?;
        let mut first = None;
        while let Some((child, cflags)) = self.split.as_deref().and_then(|s| s.next_child(slot)) {
            let Some(tag) = self.queue_child(Some(&mut *plug), &child, ty, cflags, now) else {
                break;
            };
            first.get_or_insert(tag);
            if let Some(s) = self.split.as_deref_mut() {
                s.issued(slot, child.nblocks);
            }
        }
        let Some(s) = self.split.as_deref_mut() else {
            return Err(SubmitError::Busy);
        };
        let Some(tag) = first else {
            s.cancel(slot);
            return Err(SubmitError::Busy);
        };
        s.wait_if_unfinished(slot);
        self.inflight += 1;
        Ok(tag)
    }

    /// The clock of the current burst (read now if this is its first I/O), as `submit` keeps
    /// it: in the scheduler path with a scheduler, else in the queue.
    fn burst_clock(&mut self) -> u64 {
        if let Some(sp) = self.path.sched_mut() {
            return sp.burst_clock();
        }
        if self.burst_ns == 0 {
            self.burst_ns = now_ns();
        }
        self.burst_ns
    }

    /// Takes a tag for `child` (hctx `ty`, request flags `flags`) and queues it: through
    /// `plug` at submit (for the next flush), without one from `poll` (behind any pending
    /// burst, started by `resume_splits`). `None` when no tag is free.
    fn queue_child(
        &mut self,
        plug: Option<&mut Plug>,
        child: &Io,
        ty: HctxType,
        flags: ReqFlags,
        now: u64,
    ) -> Option<u16> {
        let key = self.key;
        if let Some(sp) = self.path.sched_mut() {
            return match plug {
                Some(plug) => sp.queue(plug, key, child, ty, flags).ok(),
                None => sp.queue_resumed(child, ty, flags, now),
            };
        }
        let h = &mut self.hctx[self.hctx_at[ty.index()] as usize];
        let tag = match plug {
            Some(plug) => plug.take(key, ty, &h.tags, &mut h.hint),
            None => h.tags.get(&mut h.hint),
        }?;
        let rq = &mut h.pool[tag];
        rq.prepare(child, now);
        rq.flags = flags;
        // At most `depth` tags exist, so a pending slot is always free.
        h.pending[h.npending] = tag;
        h.npending += 1;
        Some(tag)
    }

    /// Split parents in progress (tests).
    #[cfg(test)]
    pub(crate) fn split_parents(&self) -> usize {
        self.split.as_deref().map_or(0, Splits::in_progress)
    }

    /// The end of a `poll` (no scheduler) that reaped `reaped` requests while the split table
    /// has work: children that did not complete their parent are not I/Os the submitter sees;
    /// parents waiting for tags issue children now. Returns the I/Os completed.
    #[cold]
    #[inline(never)]
    pub(super) fn poll_end_split(&mut self, reaped: usize) -> usize {
        let Some(s) = self.split.as_deref_mut() else {
            return reaped;
        };
        let done = reaped - s.take_absorbed();
        let resume = s.has_waiting();
        if reaped > 0 {
            self.inflight -= done as u32;
            self.cell.publish(&self.stats);
        }
        if resume {
            self.resume_splits();
        }
        done
    }

    /// Issues the children of waiting parents, oldest parent first, while tags last, and starts
    /// them (the pending burst of the submitter, if any, stays for its flush). Runs in `poll`
    /// right after completions freed their tags, before the submitter can take them.
    #[cold]
    #[inline(never)]
    pub(super) fn resume_splits(&mut self) {
        let now = now_ns();
        let mut from = [0usize; HCTX_MAX_TYPES];
        for (f, h) in from.iter_mut().zip(&self.hctx) {
            *f = h.npending;
        }
        let sched_from = self.path.sched().map(SchedPath::pending_len);
        'parents: while let Some(slot) = self.split.as_deref().and_then(Splits::first_waiting) {
            let Some(ty) = self.split.as_deref().map(|s| s.hctx_type(slot)) else {
                break;
            };
            while let Some((child, cflags)) = self.split.as_deref().and_then(|s| s.next_child(slot))
            {
                if self.queue_child(None, &child, ty, cflags, now).is_none() {
                    break 'parents;
                }
                if let Some(s) = self.split.as_deref_mut() {
                    s.issued(slot, child.nblocks);
                }
            }
            if let Some(s) = self.split.as_deref_mut() {
                s.pop_waiting();
            }
        }
        if let (Some(sp), Some(from)) = (self.path.sched_mut(), sched_from) {
            sp.start_resumed(from, &mut self.hctx, &self.hctx_at, now);
            return;
        }
        for (h, &from) in self.hctx.iter_mut().zip(&from) {
            if h.npending > from {
                h.drv
                    .submit(h.pool.as_mut_slice(), &h.pending[from..h.npending]);
                h.npending = from;
            }
        }
    }
}

/// A child completed (`rq`, stamped at `now`): its parent takes note, and when it was the last
/// child the parent is recorded in `stats` and reported to `f`.
#[cold]
#[inline(never)]
pub(super) fn report_child<F: FnMut(&Request)>(
    rq: &mut Request,
    now: u64,
    block_size: u64,
    stats: &mut QueueStats,
    split: &mut Splits,
    f: &mut F,
) {
    if let Some(parent) = split.child_done(rq) {
        record_done(&parent, now, block_size, stats, f);
    }
}
