//! The I/O calls of a [`BdevQueue`] (`submit`, `submit_with`, `flush`, `poll`) and the path
//! without a scheduler, which each of them takes unless the queue has one (then it hands over
//! to `sched_path/` at its first branch: once per call, or once per run of a burst).
//!
//! Without a scheduler a request takes a driver tag through the submitter's plug at submit,
//! waits in its hctx's pending list, goes to the driver with the rest of the list at `flush`
//! (one doorbell per hctx), and is reaped, reported and freed by `poll` in driver batches.

use super::complete::report_done;
use super::validate::BurstShape;
use super::{BdevQueue, IoPath, SubmitError, split};
use crate::bdev::histogram::Runs;
use crate::bdev::stats::now_ns;
use crate::plug::Plug;
use crate::request::{Io, IoBuf, Request};

impl BdevQueue {
    /// Validates `io`, takes a request for it and queues it for the next [`flush`]. Returns
    /// the request's tag. [`SubmitError::Busy`] when its hctx has no free request.
    ///
    /// An I/O the device cannot take whole (above its `max_transfer_blocks`, or across its
    /// `boundary_blocks`) is split into child requests ([`super::split`]): accepted once its
    /// first child has a tag (that tag is returned), refused with `Busy` with nothing queued
    /// otherwise; children that found no tag are issued and started by later `poll`s. Its
    /// completion is reported once, after the last child, with the first error of any.
    ///
    /// [`flush`]: BdevQueue::flush
    #[inline]
    pub fn submit(&mut self, plug: &mut Plug, io: &Io) -> Result<u16, SubmitError> {
        self.validate(io)?;
        if split::must_split(io.lba, io.nblocks, self.max_transfer, self.boundary) {
            return self.submit_split(plug, io);
        }
        let (ty, flags) = self.queues.map(io.op, io.flags);
        if self.burst_ns == 0 {
            if self.path.is_sched() {
                return self.submit_sched(plug, io, ty, flags);
            }
            self.burst_ns = now_ns();
        }
        let now = self.burst_ns;
        let h = &mut self.hctx[self.hctx_at[ty.index()] as usize];
        let tag = plug
            .take(self.key, ty, &h.tags, &mut h.hint)
            .ok_or(SubmitError::Busy)?;
        let rq = &mut h.pool[tag];
        rq.prepare(io, now);
        rq.flags = flags;
        // At most `depth` tags exist, so a pending slot is always free.
        h.pending[h.npending] = tag;
        h.npending += 1;
        self.inflight += 1;
        Ok(tag)
    }

    /// Submits up to `n` I/Os shaped like `io` (its op, flags, priority and block count),
    /// `next()` giving each one's LBA, buffer and token: the same as `n` calls of
    /// [`submit`](BdevQueue::submit) with `io` updated from `next()` before each, but the
    /// per-burst work (op checks, hctx mapping, the burst clock) is done once.
    ///
    /// Stops at the first I/O that cannot be queued and returns how many were queued, with
    /// the reason: `Busy` (no free request), or the I/O's validation error. `next()` was
    /// then called once more than the count queued (that I/O is the one refused), except when
    /// the shape itself is refused (unsupported op, 0 blocks) before any call.
    ///
    /// I/Os the device may have to split (longer than its transfer limit, or any I/O on a
    /// device with a boundary) go through `submit` one by one, inside the burst.
    #[inline]
    pub fn submit_with<F>(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        n: u32,
        mut next: F,
    ) -> (u32, Option<SubmitError>)
    where
        F: FnMut() -> (u64, IoBuf, u64),
    {
        if n == 0 {
            return (0, None);
        }
        let shape = match self.burst_shape(io) {
            Ok(shape) => shape,
            Err(e) => return (0, Some(e)),
        };
        let sched = self.path.is_sched();
        let mut done = 0;
        loop {
            // One branch per run of the burst, not per I/O.
            let (queued, care) = if sched {
                self.sched_burst_run(plug, io, &shape, n - done, &mut next)
            } else {
                self.burst_run(plug, io, &shape, n - done, &mut next)
            };
            done += queued;
            let Some(care) = care else {
                return (done, (done < n).then_some(SubmitError::Busy));
            };
            // Invalid, or to be split: the whole of `submit`, then on with the burst.
            if let Err(e) = self.submit(plug, &care) {
                return (done, Some(e));
            }
            done += 1;
            if done == n {
                return (n, None);
            }
        }
    }

    /// One run of `submit_with` (no scheduler): up to `n` I/Os until one finds no tag (then
    /// fewer queued and `None`) or needs care (returned, not queued).
    #[inline]
    fn burst_run<F>(
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
        if self.burst_ns == 0 {
            self.burst_ns = now_ns();
        }
        let now = self.burst_ns;
        let hi = self.hctx_at[ty.index()] as usize;
        for i in 0..n {
            (io.lba, io.buf, io.token) = next();
            if shape.needs_care(&io) {
                self.inflight += i;
                return (i, Some(io));
            }
            let h = &mut self.hctx[hi];
            let Some(tag) = plug.take(self.key, ty, &h.tags, &mut h.hint) else {
                self.inflight += i;
                return (i, None);
            };
            let rq = &mut h.pool[tag];
            rq.prepare(&io, now);
            rq.flags = flags;
            h.pending[h.npending] = tag;
            h.npending += 1;
        }
        self.inflight += n;
        (n, None)
    }

    /// Starts every pending request: one driver `submit` call (one doorbell) per hctx that
    /// has any. Returns how many were started.
    #[inline]
    pub fn flush(&mut self) -> usize {
        self.burst_ns = 0;
        let mut n = 0;
        match self.path {
            IoPath::Sched(_) => return self.flush_sched(),
            IoPath::Plain => {
                for h in &mut self.hctx {
                    if h.npending == 0 {
                        continue;
                    }
                    h.drv
                        .submit(h.pool.as_mut_slice(), &h.pending[..h.npending]);
                    n += h.npending;
                    h.npending = 0;
                }
            }
        }
        n
    }

    /// Reaps up to `max` completions (in driver batches of at most `max`), calls `f` for each
    /// completed request (status, token, `submit_ns`, `complete_ns` are set), updates the
    /// statistics, and frees the tags. Returns how many completed.
    ///
    /// While the device's latency histogram is on (see [`BdevQueue::attach_histogram`]), each
    /// completion of the operation it counts is also tallied in this queue's histogram.
    #[inline]
    pub fn poll<F: FnMut(&Request)>(&mut self, max: usize, f: F) -> usize {
        match self.hist.as_deref_mut().map(|h| h.sync().is_some()) {
            Some(true) => self.poll_tallied(max, f),
            _ => self.reap(max, f),
        }
    }

    /// `poll` with the histogram on: each completion tallied before `f` sees it.
    fn poll_tallied<F: FnMut(&Request)>(&mut self, max: usize, mut f: F) -> usize {
        let Some(mut qh) = self.hist.take() else {
            return self.reap(max, f);
        };
        let n = match qh.sync() {
            Some((h, op)) => {
                let op = *op;
                let mut runs = Runs::new(h);
                // Inlined into reap's loop as the caller's own callback is (a call per I/O
                // otherwise: about 4 ns of pmio-perf's 25 on the null device).
                let n = self.reap(
                    max,
                    #[inline(always)]
                    |rq: &Request| {
                        if op.contains(rq.op) {
                            runs.add(rq.complete_ns.saturating_sub(rq.submit_ns));
                        }
                        f(rq)
                    },
                );
                runs.flush();
                n
            }
            None => self.reap(max, f),
        };
        self.hist = Some(qh);
        n
    }

    /// `poll`'s body: reap through the scheduler or straight from the driver queues.
    #[inline]
    fn reap<F: FnMut(&Request)>(&mut self, max: usize, mut f: F) -> usize {
        if self.path.is_sched() {
            return self.poll_sched(max, f);
        }
        let mut total = 0;
        let (first, nh) = self.rotate_poll();
        for i in 0..nh {
            if total >= max {
                break;
            }
            let h = &mut self.hctx[(first + i) % nh];
            h.done.clear();
            let n = h.drv.poll(h.pool.as_mut_slice(), &mut h.done, max - total);
            if n == 0 {
                continue;
            }
            let now = now_ns();
            let block_size = u64::from(self.block_size);
            // Children of split I/O are looked for only while some are in flight: the batch
            // loop of everything else is the one without them.
            match self.split.as_deref_mut().filter(|s| s.has_children()) {
                None => {
                    for &tag in &h.done {
                        let rq = &mut h.pool[tag];
                        report_done(rq, now, block_size, &mut self.stats, None, &mut f);
                    }
                }
                Some(s) => {
                    for &tag in &h.done {
                        let rq = &mut h.pool[tag];
                        report_done(rq, now, block_size, &mut self.stats, Some(s), &mut f);
                    }
                }
            }
            h.tags.put_batch(&mut h.put_hint, &h.done);
            total += n;
        }
        if let Some(s) = self.split.as_deref()
            && s.needs_poll_end()
        {
            return self.poll_end_split(total);
        }
        if total > 0 {
            self.inflight -= total as u32;
            self.cell.publish(&self.stats);
            self.cell.set_outstanding(self.inflight);
        }
        total
    }
}
