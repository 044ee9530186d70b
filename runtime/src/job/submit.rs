//! A job's submission side: refill the queue in bursts of at most `submit_batch` I/Os, each
//! burst under one plug and one flush (one doorbell). The common timed case (one op, no
//! verify, no per-I/O priority) takes a straight path through the queue's `submit_with`;
//! everything else goes I/O by I/O.

use pmio::plug::Plug;
use pmio::{Io, IoBuf, Op};

use super::error::JobError;
use super::pattern;
use super::spec::Phase;
use super::state::{Job, next_rng};
use super::stats::Counts;

impl Job {
    /// Submits bursts until the queue is full (or the fill is done). Returns I/Os submitted.
    #[inline]
    pub(crate) fn refill(
        &mut self,
        phase: Phase,
        plug: &mut Plug,
        counts: &mut Counts,
    ) -> Result<usize, JobError> {
        let mut total = 0;
        loop {
            let room = (self.depth - self.q.outstanding()).min(self.st.nfree as u32);
            let mut want = room.min(self.submit_batch);
            if phase == Phase::Fill {
                want = want.min((self.region_units - self.cursor).min(u64::from(u32::MAX)) as u32);
            }
            if want == 0 {
                return Ok(total);
            }
            let n = self.submit_burst(phase, want, plug)?;
            counts.submit_calls += 1;
            counts.submitted += n as u64;
            total += n;
            if n < want as usize {
                return Ok(total);
            }
        }
    }

    /// The burst's ops: all reads, all writes, or (mixed workloads) drawn per I/O into
    /// `mix`. Returns (reads, writes).
    #[inline]
    fn plan_ops(&mut self, phase: Phase, want: u32) -> (u32, u32) {
        match (phase, self.read_pct) {
            (Phase::Fill, _) | (_, 0) => (0, want),
            (_, 100) => (want, 0),
            (_, p) => {
                let mut reads = 0;
                for m in &mut self.mix[..want as usize] {
                    *m = (next_rng(&mut self.rng) >> 32) % 100 < u64::from(p);
                    reads += u32::from(*m);
                }
                (reads, want - reads)
            }
        }
    }

    /// `submit_burst` for the common timed case: one op for the whole burst, no verify
    /// bookkeeping, no per-I/O priority draw. Same I/O stream as the general path, handed to
    /// the queue in one `submit_with` (the per-burst checks done once).
    #[inline]
    fn submit_burst_plain(&mut self, want: u32, plug: &mut Plug) -> Result<usize, JobError> {
        let st = &mut self.st;
        let nblocks = st.nblocks;
        let bs = st.bs as usize;
        let base = st.base;
        let region_start = st.region_start;
        let mut io = Io {
            op: if self.read_pct == 100 {
                Op::Read
            } else {
                Op::Write
            },
            nblocks,
            ..Io::default()
        };
        if let Some(c) = self.prio_fixed {
            io.prio.class = c;
        }
        let (random, units) = (self.random, self.region_units);
        let (rng, cursor) = (&mut self.rng, &mut self.cursor);
        let mut filled = 0u32;
        let mut last_slot = 0u16;
        plug.begin();
        self.q.expect_n(plug, &io, want);
        let (n, err) = self.q.submit_with(plug, &io, want, || {
            let unit = if random {
                let r = next_rng(rng);
                ((u128::from(r) * u128::from(units)) >> 64) as u64
            } else {
                let u = *cursor % units;
                *cursor += 1;
                u
            };
            let slot = st.pop_slot();
            filled += 1;
            last_slot = slot;
            // SAFETY: as in `submit_burst`: slot < depth, so its `bs` bytes lie inside the
            // buffers, and a slot serves one I/O at a time (free stack).
            let ptr = unsafe { base.add(usize::from(slot) * bs) };
            // SAFETY: the buffer stays valid and untouched until completion (as above).
            let buf = unsafe { IoBuf::from_raw_parts(ptr, bs as u32) };
            (
                (region_start + unit) * u64::from(nblocks),
                buf,
                u64::from(slot),
            )
        });
        plug.finish();
        self.q.flush();
        if filled > n {
            // The I/O refused took a slot that nothing was queued for, and (sequential) the
            // next unit: the next burst starts with it.
            st.push_slot(last_slot);
            if !random {
                self.cursor -= 1;
            }
        }
        match err {
            Some(e) if !e.is_busy() => Err(JobError::Submit(e)),
            _ => Ok(n as usize),
        }
    }

    /// The unit the next I/O addresses.
    #[inline]
    fn next_unit(&mut self, phase: Phase) -> u64 {
        if phase == Phase::Fill || !self.random {
            let u = self.cursor % self.region_units;
            self.cursor += 1;
            u
        } else {
            let r = next_rng(&mut self.rng);
            ((u128::from(r) * u128::from(self.region_units)) >> 64) as u64
        }
    }

    /// Submits one burst of `want` I/Os under one plug and flushes it (one doorbell).
    #[inline]
    fn submit_burst(
        &mut self,
        phase: Phase,
        want: u32,
        plug: &mut Plug,
    ) -> Result<usize, JobError> {
        if phase == Phase::Run
            && self.st.verify.is_none()
            && self.prio_mix.is_none()
            && matches!(self.read_pct, 0 | 100)
        {
            return self.submit_burst_plain(want, plug);
        }
        let (reads, writes) = self.plan_ops(phase, want);
        let uniform_read = writes == 0;
        let nblocks = self.st.nblocks;
        let bs = self.st.bs;
        let base = self.st.base;
        let mut io = Io {
            nblocks,
            ..Io::default()
        };
        if let Some(c) = self.prio_fixed {
            io.prio.class = c;
        }
        plug.begin();
        if reads > 0 {
            io.op = Op::Read;
            self.q.expect_n(plug, &io, reads);
        }
        if writes > 0 {
            io.op = Op::Write;
            self.q.expect_n(plug, &io, writes);
        }
        let mut n = 0;
        let mut result = Ok(());
        for i in 0..want as usize {
            let is_read = if reads == 0 || uniform_read {
                uniform_read
            } else {
                self.mix[i]
            };
            let slot = self.st.pop_slot();
            let mut unit = self.next_unit(phase);
            if let Some(v) = &mut self.st.verify {
                // Never two I/Os on one unit at once: sequence numbers stay well defined.
                // The region holds more units than the queue depth, so a free one exists.
                while v.inflight[unit as usize] {
                    unit = (unit + 1) % self.region_units;
                }
                v.inflight[unit as usize] = true;
            }
            // SAFETY: slot < depth, so the slot's `bs` bytes lie inside the buffers (depth * bs
            // bytes), which live as long as the job; a slot is used by one I/O at a time
            // (popped from the free stack, pushed back at its completion).
            let ptr = unsafe { base.add(slot as usize * bs as usize) };
            let lba = (self.st.region_start + unit) * u64::from(nblocks);
            if !is_read && let Some(v) = &mut self.st.verify {
                let seq = v.seqs[unit as usize] + 1;
                v.seqs[unit as usize] = seq;
                // SAFETY: as above; the slot is not in flight, so we may write it.
                let buf = unsafe { std::slice::from_raw_parts_mut(ptr, bs as usize) };
                for (b, block) in buf
                    .chunks_exact_mut(self.st.block_size as usize)
                    .enumerate()
                {
                    pattern::fill(block, lba + b as u64, u64::from(seq));
                }
            }
            io.op = if is_read { Op::Read } else { Op::Write };
            io.lba = lba;
            if let Some(m) = &self.prio_mix {
                io.prio.class = m.pick(((next_rng(&mut self.rng) >> 32) % 100) as u8);
            }
            // SAFETY: see above; the buffer stays valid and untouched until completion.
            io.buf = unsafe { IoBuf::from_raw_parts(ptr, bs as u32) };
            io.token = u64::from(slot);
            match self.q.submit(plug, &io) {
                Ok(_) => n += 1,
                Err(e) => {
                    // Give the slot (and the unit) back: nothing was queued for them. A
                    // sequential pass (the fill above all: a unit it skips is never written)
                    // retries the unit next time. A queue is busy with room left when
                    // I/Os are split into several requests.
                    self.st.push_slot(slot);
                    if phase == Phase::Fill || !self.random {
                        self.cursor -= 1;
                    }
                    if let Some(v) = &mut self.st.verify {
                        v.inflight[unit as usize] = false;
                        if !is_read {
                            v.seqs[unit as usize] -= 1;
                        }
                    }
                    if !e.is_busy() {
                        result = Err(JobError::Submit(e));
                    }
                    break;
                }
            }
        }
        plug.finish();
        self.q.flush();
        result.map(|()| n)
    }
}
