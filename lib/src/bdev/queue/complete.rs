//! What every `poll` shares, with or without a scheduler: the order it visits the hctxs in,
//! and how a completed request is stamped, counted and reported (a split's child to its
//! parent instead).

use super::BdevQueue;
use super::split_path;
use crate::bdev::split::Splits;
use crate::bdev::stats::QueueStats;
use crate::request::{ReqFlags, Request};

impl BdevQueue {
    /// The hctx a `poll` visits first and how many there are; the next `poll` starts at the
    /// one after it, so a queue that keeps returning `max` completions cannot starve another.
    #[inline]
    pub(super) fn rotate_poll(&mut self) -> (usize, usize) {
        let nh = self.hctx.len();
        let first = self.poll_first;
        if nh > 1 {
            self.poll_first = (first + 1) % nh;
        }
        (first, nh)
    }
}

/// Stamps `rq` complete at `now`, records it in `stats` and reports it to `f`; with `split`
/// (children in flight), a split's child goes to its parent instead, which is recorded and
/// reported with its last child.
// Always inlined: it runs per I/O, and as a call it is not inlined into pmio-perf's poller;
// called with `None`, the child check compiles away.
#[inline(always)]
pub(super) fn report_done<F: FnMut(&Request)>(
    rq: &mut Request,
    now: u64,
    block_size: u64,
    stats: &mut QueueStats,
    split: Option<&mut Splits>,
    f: &mut F,
) {
    rq.complete_ns = now;
    if let Some(split) = split
        && rq.flags.contains(ReqFlags::CHILD)
    {
        split_path::report_child(rq, now, block_size, stats, split, f);
        return;
    }
    record_done(rq, now, block_size, stats, f);
}

/// Records the completed `rq` (stamped at `now`) in `stats` and reports it to `f`.
#[inline(always)]
pub(super) fn record_done<F: FnMut(&Request)>(
    rq: &Request,
    now: u64,
    block_size: u64,
    stats: &mut QueueStats,
    f: &mut F,
) {
    let lat = now.saturating_sub(rq.submit_ns);
    let bytes = if rq.op.has_data() {
        u64::from(rq.nblocks) * block_size
    } else {
        0
    };
    stats
        .op_mut(rq.op)
        .record(bytes, lat, rq.status.is_success());
    f(rq);
}
