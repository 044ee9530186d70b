//! `poll` on the scheduler path: driver batches reaped hctx by hctx, requests handed out by
//! count completed by count, the others completed through the scheduler without its lock
//! (each merged member exactly once, with the carrier's status), every member stamped,
//! counted and reported, and the scheduler tags freed with one `put_batch`; then split
//! parents issue waiting children and the scheduler dispatches into the room freed.

use super::SchedPath;
use crate::bdev::queue::BdevQueue;
use crate::bdev::queue::complete::report_done;
use crate::bdev::split::Splits;
use crate::bdev::stats::{QueueStats, now_ns};
use crate::request::{IoStatus, Request};

impl BdevQueue {
    /// `poll` with a scheduler: reap driver completions, complete them through the scheduler
    /// (every merged member once; requests handed out by count, by count), then dispatch
    /// more if the scheduler has work.
    pub(in crate::bdev::queue) fn poll_sched<F: FnMut(&Request)>(
        &mut self,
        max: usize,
        mut f: F,
    ) -> usize {
        let Some(sp) = self.path.sched() else {
            return 0;
        };
        let shared = sp.shared;
        let refused = if sp.failed.is_empty() {
            0
        } else {
            self.fail_refused(&mut f)
        };
        // The layout is fixed at open: one loop, compiled once per layout, chosen per poll.
        if shared {
            self.poll_layout::<true, F>(max, f, refused)
        } else {
            self.poll_layout::<false, F>(max, f, refused)
        }
    }

    /// `poll_sched`'s loop over the hctxs for the driver-tag layout `SHARED` (the driver runs
    /// requests in the scheduler pool and hands back scheduler tags; else it runs copies in
    /// its own pool): each driver batch is taken apart by the layout
    /// ([`SchedPath::reap_shared`], [`SchedPath::reap_copy`]) and what came through the
    /// scheduler is completed through it. `refused`: requests `poll_sched` already completed
    /// in this call (counted in the return value).
    fn poll_layout<const SHARED: bool, F: FnMut(&Request)>(
        &mut self,
        max: usize,
        mut f: F,
        refused: usize,
    ) -> usize {
        let mut members = refused;
        let (first, nh) = self.rotate_poll();
        let Some(sp) = self.path.sched_mut() else {
            return members;
        };
        let block_size = u64::from(self.block_size);
        let mut reaped = 0;
        let mut now = 0;
        for i in 0..nh {
            if reaped >= max {
                break;
            }
            let hi = (first + i) % nh;
            let h = &mut self.hctx[hi];
            h.done.clear();
            let pool = if SHARED {
                sp.pool.as_mut_slice()
            } else {
                h.pool.as_mut_slice()
            };
            let n = h.drv.poll(pool, &mut h.done, max - reaped);
            if n == 0 {
                continue;
            }
            now = now_ns();
            sp.drv_busy[hi] -= n as u32;
            reaped += n;
            if SHARED {
                let split = self.split.as_deref_mut();
                if !sp.reap_shared(&h.done, now, block_size, &mut self.stats, split, &mut f) {
                    members += n;
                    continue;
                }
            } else {
                sp.reap_copy(hi, h);
            }
            let split = self.split.as_deref_mut();
            sp.complete_members(now, block_size, &mut self.stats, split, &mut f);
            // Counted requests were reported by `reap_shared`; `freed` holds them too.
            members += sp.freed.len();
        }
        self.end_sched_poll(members, now)
    }

    /// Completes the requests the scheduler refused (a bug) with `EINVAL`; returns how many.
    #[cold]
    fn fail_refused<F: FnMut(&Request)>(&mut self, f: &mut F) -> usize {
        let Some(sp) = self.path.sched_mut() else {
            return 0;
        };
        let now = now_ns();
        let block_size = u64::from(self.block_size);
        for &local in &sp.failed {
            let rq = &mut sp.pool[local];
            rq.status = IoStatus::Errno(libc::EINVAL);
            report_done(
                rq,
                now,
                block_size,
                &mut self.stats,
                self.split.as_deref_mut(),
                f,
            );
        }
        sp.tags.put_batch(&mut sp.put_hint, &sp.failed);
        let n = sp.failed.len();
        sp.failed.clear();
        n
    }

    /// The end of a scheduler `poll` that completed `members` requests (`now`: the clock of
    /// its last batch, 0 if none): publish the statistics, issue the children split parents
    /// wait to issue, then dispatch more if driver room was freed or another reactor parked
    /// requests for this one. Returns the I/Os completed (children only count with their
    /// parent).
    fn end_sched_poll(&mut self, mut members: usize, mut now: u64) -> usize {
        let mut resume = false;
        if let Some(s) = self.split.as_deref_mut()
            && s.needs_poll_end()
        {
            members -= s.take_absorbed();
            resume = s.has_waiting();
        }
        if resume {
            self.resume_splits();
        }
        if members > 0 {
            self.inflight -= members as u32;
            self.cell.publish(&self.stats);
            self.cell.set_outstanding(self.inflight);
        }
        let Some(sp) = self.path.sched_mut() else {
            return members;
        };
        if sp.dd.has_pending() {
            if now == 0 {
                now = now_ns();
            }
            sp.dispatch(&mut self.hctx, &self.hctx_at, now);
        }
        members
    }
}

impl SchedPath {
    /// Completes `done_ids` through the scheduler (every merged member once, with its
    /// carrier's status), reports each member, and frees the scheduler tags in `freed` (those
    /// already there too) with one `put_batch`.
    fn complete_members<F: FnMut(&Request)>(
        &mut self,
        now: u64,
        block_size: u64,
        stats: &mut QueueStats,
        mut split: Option<&mut Splits>,
        f: &mut F,
    ) {
        let (base, pool, freed) = (self.base, &mut self.pool, &mut self.freed);
        let res = self
            .dd
            .complete_batch(self.done_ids.iter().copied(), |id, status| {
                let Some(local) = id.checked_sub(base).and_then(|l| u16::try_from(l).ok()) else {
                    log::error!("mq-deadline: completed request {id} of another owner");
                    return;
                };
                let rq = &mut pool[local];
                rq.status = status;
                report_done(rq, now, block_size, stats, split.as_deref_mut(), f);
                freed.push(local);
            });
        if let Err(e) = res {
            log::error!("mq-deadline completion: {e}");
        }
        self.tags.put_batch(&mut self.put_hint, &self.freed);
    }
}
