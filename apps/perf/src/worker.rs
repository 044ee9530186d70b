//! One core's work: drive its (core, device) jobs at the queue depth from a reactor poller.
//!
//! Each poller turn, per job: reap one completion batch (`-c`), then refill the queue in
//! bursts of at most `-s` I/Os — one plug and one flush (one doorbell) per burst. Latency is
//! always tracked (hdrhistogram, one record per I/O; timestamps come from the bdev layer's
//! batched clock reads).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;

use hdrhistogram::Histogram;
use pmio::bdev::{BdevQueue, BdevQueueOptions, SchedMode};
use pmio::dma::DmaRegion;
use pmio::plug::Plug;
use pmio::{BlockDevice, Io, IoBuf, Op, PrioClass, Request};
use pmio_reactors::{PollerId, PollerResult, ReactorCtx, ReactorStats};

use crate::cli::PrioMix;
use crate::pattern;
use crate::report::{CoreCounters, CoreResult, Counts, new_hist};

/// Mismatches printed per core (all are counted).
const MAX_PRINTED_MISMATCHES: u64 = 16;

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `--verify` preparation: write every unit of the region once, sequentially.
    Fill,
    /// The timed workload.
    Run,
}

/// One (core, device) pair's parameters.
pub struct JobSpec {
    pub dev: Arc<dyn BlockDevice>,
    pub depth: u32,
    /// Driver queue depth (at most `depth`).
    pub queue_depth: u32,
    pub submit_batch: u32,
    pub complete_batch: u32,
    /// I/O size in bytes (a multiple of the device's block size).
    pub bs: u64,
    pub random: bool,
    /// Share of reads, percent.
    pub read_pct: u8,
    /// First unit (I/O-sized chunk) and number of units this job addresses.
    pub region_start: u64,
    pub region_units: u64,
    /// `--verify`: the sequence number last written per unit of the region (1 after the
    /// fill; 0 = never written). `None` without `--verify`.
    pub verify: Option<Vec<u32>>,
    /// The device's scheduler as this job's queue sees it.
    pub sched: SchedMode,
    /// Priority classes of the job's I/Os (`None`: default class, no per-class report).
    pub prio: Option<PrioMix>,
}

/// When to measure, shared by the main thread and the workers (reactor clock, ns).
#[derive(Debug, Default)]
pub struct Timing {
    /// 0 until the main thread says go.
    pub measure_start: AtomicU64,
    pub end: AtomicU64,
}

/// What a core sends back when it is done.
pub struct Outcome {
    pub result: CoreResult,
    /// Per job, the verify table (for the next phase).
    pub verify: Vec<Option<Vec<u32>>>,
    /// A fatal error (queue open or submit failure), if any.
    pub error: Option<String>,
}

struct VerifyState {
    seqs: Vec<u32>,
    inflight: Vec<bool>,
}

/// Latency histogram and I/O count per priority class (rt, be, idle).
type ClassAcc = [(Histogram<u64>, u64); 3];

/// Per-job state touched by completions (split from the queue so the completion callback
/// can borrow it while the queue is polled).
struct JobState {
    bufs: DmaRegion,
    bs: u64,
    block_size: u32,
    nblocks: u32,
    /// Free buffer slots: a stack, `slots[..nfree]`.
    slots: Box<[u16]>,
    nfree: usize,
    verify: Option<VerifyState>,
    region_start: u64,
    measuring: bool,
    hist: Histogram<u64>,
    /// Per priority class (rt, be, idle): latency and I/Os, with --prio / --prio-mix.
    classes: Option<Box<ClassAcc>>,
    /// Run-length of equal latencies not yet recorded: completions reaped in one batch
    /// share their completion time, and those submitted in one burst their submit time, so
    /// a batch usually holds one or two distinct latencies — one `record_n` each.
    run_lat: u64,
    run_n: u64,
    /// I/Os completed while measuring (counted per completion batch).
    ios: u64,
    /// I/Os that failed (since measuring began); bytes moved = (ios - errors) × bs.
    errors: u64,
    mismatches: u64,
    printed: u64,
    name: String,
}

struct Job {
    q: BdevQueue,
    st: JobState,
    depth: u32,
    submit_batch: u32,
    complete_batch: usize,
    random: bool,
    read_pct: u8,
    /// The class of every I/O (--prio), or the per-I/O mix (--prio-mix).
    prio_fixed: Option<PrioClass>,
    prio_mix: Option<PrioMix>,
    region_units: u64,
    cursor: u64,
    rng: u64,
    /// Ops of a mixed burst (true = read); `submit_batch` entries.
    mix: Box<[bool]>,
}

/// One core's worker: its jobs, plug and counters.
pub struct Worker {
    core: u32,
    phase: Phase,
    jobs: Vec<Job>,
    plug: Plug,
    timing: Arc<Timing>,
    counters: Arc<CoreCounters>,
    counts: Counts,
    measure_start: u64,
    end: u64,
    measuring: bool,
    stopping: bool,
    start_stats: Option<ReactorStats>,
    start_ns: u64,
    error: Option<String>,
    tx: Sender<Outcome>,
    poller: Rc<Cell<Option<PollerId>>>,
}

impl Worker {
    /// Opens every job's queue on this reactor and registers the worker's poller.
    pub fn start(
        ctx: &mut ReactorCtx,
        phase: Phase,
        specs: Vec<JobSpec>,
        timing: Arc<Timing>,
        counters: Arc<CoreCounters>,
        tx: Sender<Outcome>,
    ) -> Result<(), String> {
        let mut jobs = Vec::with_capacity(specs.len());
        let mut plug = Plug::default();
        for (i, s) in specs.into_iter().enumerate() {
            let name = s.dev.info().name.clone();
            let block_size = s.dev.info().block_size;
            let dev = Arc::clone(&s.dev);
            let q = BdevQueue::open(
                s.dev,
                BdevQueueOptions {
                    depth: s.queue_depth,
                    sched: s.sched,
                },
            )
            .map_err(|e| e.to_string())?;
            q.register_plug(&mut plug);
            let bufs = DmaRegion::with_options((s.depth as u64 * s.bs) as usize, dev.dma_options())
                .map_err(|e| format!("bdev {name}: I/O buffers: {e}"))?;
            // SAFETY: `bufs` lives in this job next to its queue, which is dropped first (field
            // order of `Job`); no I/O uses the region after that.
            unsafe { dev.register_memory(&[(bufs.as_ptr(), bufs.len())]) };
            let units = s.region_units as usize;
            let verify = s.verify.map(|seqs| VerifyState {
                inflight: vec![false; units],
                seqs,
            });
            jobs.push(Job {
                st: JobState {
                    bufs,
                    bs: s.bs,
                    block_size,
                    nblocks: (s.bs / u64::from(block_size)) as u32,
                    slots: (0..s.depth as u16).rev().collect(),
                    nfree: s.depth as usize,
                    verify,
                    region_start: s.region_start,
                    measuring: phase == Phase::Fill,
                    hist: new_hist(),
                    classes: s
                        .prio
                        .map(|_| Box::new([(new_hist(), 0), (new_hist(), 0), (new_hist(), 0)])),
                    run_lat: 0,
                    run_n: 0,
                    ios: 0,
                    errors: 0,
                    mismatches: 0,
                    printed: 0,
                    name,
                },
                q,
                depth: s.depth,
                submit_batch: s.submit_batch,
                complete_batch: s.complete_batch as usize,
                random: s.random,
                read_pct: s.read_pct,
                prio_fixed: s.prio.and_then(|m| m.only()),
                prio_mix: s.prio.filter(|m| m.only().is_none()),
                region_units: s.region_units,
                cursor: 0,
                rng: seed(ctx.core(), i),
                mix: vec![false; s.submit_batch as usize].into_boxed_slice(),
            });
        }
        let poller = Rc::new(Cell::new(None));
        let mut w = Worker {
            core: ctx.core(),
            phase,
            jobs,
            plug,
            timing,
            counters,
            counts: Counts::default(),
            measure_start: 0,
            end: 0,
            measuring: phase == Phase::Fill,
            stopping: false,
            start_stats: None,
            start_ns: 0,
            error: None,
            tx,
            poller: Rc::clone(&poller),
        };
        let id = ctx.register_poller("perf", move |ctx| w.step(ctx));
        poller.set(Some(id));
        Ok(())
    }

    /// One poller turn.
    fn step(&mut self, ctx: &mut ReactorCtx) -> PollerResult {
        let now = ctx.now_ns();
        if self.end == 0 {
            let end = self.timing.end.load(Ordering::Acquire);
            if end == 0 {
                return PollerResult::Idle; // waiting for go
            }
            self.end = end;
            self.measure_start = self.timing.measure_start.load(Ordering::Acquire);
            self.start_ns = now;
            if self.phase == Phase::Fill {
                self.start_stats = ctx.handle().stats(self.core);
            }
        }
        if !self.measuring && now >= self.measure_start {
            self.begin_measuring(ctx, now);
        }
        if self.phase == Phase::Run && now >= self.end {
            self.stopping = true;
        }
        let mut did = false;
        for j in &mut self.jobs {
            did |= j.reap(&mut self.counts) > 0;
            if !self.stopping && self.error.is_none() {
                match j.refill(self.phase, &mut self.plug, &mut self.counts) {
                    Ok(n) => did |= n > 0,
                    Err(e) => self.error = Some(e),
                }
            }
        }
        self.counters.publish(&self.counts);
        if self.phase == Phase::Fill && self.jobs.iter().all(|j| j.cursor >= j.region_units) {
            self.stopping = true;
        }
        if self.error.is_some() {
            self.stopping = true;
        }
        if self.stopping && self.jobs.iter().all(|j| j.q.outstanding() == 0) {
            self.finish(ctx, now);
            return PollerResult::Idle;
        }
        did.into()
    }

    #[cold]
    fn begin_measuring(&mut self, ctx: &mut ReactorCtx, now: u64) {
        self.measuring = true;
        self.start_ns = now;
        self.start_stats = ctx.handle().stats(self.core);
        for j in &mut self.jobs {
            j.st.measuring = true;
            j.st.hist.reset();
            if let Some(c) = &mut j.st.classes {
                for (h, n) in c.iter_mut() {
                    h.reset();
                    *n = 0;
                }
            }
            j.st.run_n = 0;
            j.st.ios = 0;
            j.st.errors = 0;
        }
    }

    #[cold]
    fn finish(&mut self, ctx: &mut ReactorCtx, now: u64) {
        if let Some(id) = self.poller.take() {
            ctx.unregister_poller(id);
        } else {
            return; // already finished
        }
        log::debug!("core {}: plug {:?}", self.core, self.plug.stats());
        let busy_pct = match (self.start_stats, ctx.handle().stats(self.core)) {
            (Some(a), Some(b)) => b.since(&a).busy_pct(),
            _ => 0.0,
        };
        let mut hist = new_hist();
        let (mut ios, mut bytes, mut errors, mut mism) = (0, 0, 0, 0);
        let mut verify = Vec::with_capacity(self.jobs.len());
        let mut classes: Option<Vec<(Histogram<u64>, u64)>> = None;
        for j in &mut self.jobs {
            let _ = hist.add(&j.st.hist);
            if let Some(c) = &j.st.classes {
                let acc = classes.get_or_insert_with(|| (0..3).map(|_| (new_hist(), 0)).collect());
                for (a, (h, n)) in acc.iter_mut().zip(c.iter()) {
                    let _ = a.0.add(h);
                    a.1 += n;
                }
            }
            ios += j.st.ios;
            bytes += j.st.ios.saturating_sub(j.st.errors) * j.st.bs;
            errors += j.st.errors;
            mism += j.st.mismatches;
            verify.push(j.st.verify.take().map(|v| v.seqs));
        }
        let elapsed_ns = if self.phase == Phase::Run {
            now.min(self.end).saturating_sub(self.start_ns)
        } else {
            now.saturating_sub(self.start_ns)
        };
        let _ = self.tx.send(Outcome {
            result: CoreResult {
                core: self.core,
                ios,
                bytes,
                errors,
                verify_mismatches: mism,
                hist,
                classes,
                elapsed_ns: elapsed_ns.max(1),
                busy_pct,
            },
            verify,
            error: self.error.take(),
        });
    }
}

fn seed(core: u32, job: usize) -> u64 {
    let t = pmio::bdev::now_ns();
    (t ^ (u64::from(core) << 32) ^ (job as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}

#[inline]
fn next_rng(x: &mut u64) -> u64 {
    // xorshift64*
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

impl Job {
    /// Reaps one completion batch.
    #[inline]
    fn reap(&mut self, counts: &mut Counts) -> usize {
        if self.q.outstanding() == 0 {
            return 0;
        }
        let st = &mut self.st;
        let n = self.q.poll(
            self.complete_batch,
            #[inline(always)]
            |rq| st.complete(rq),
        );
        st.flush_hist();
        if st.measuring {
            st.ios += n as u64;
        }
        if n > 0 {
            counts.reap_calls += 1;
            counts.reaped += n as u64;
            counts.ios += n as u64;
        }
        n
    }

    /// Submits bursts until the queue is full (or the fill is done). Returns I/Os submitted.
    #[inline]
    fn refill(
        &mut self,
        phase: Phase,
        plug: &mut Plug,
        counts: &mut Counts,
    ) -> Result<usize, String> {
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

    /// `submit_burst` for the common timed case: one op for the whole burst, no `--verify`
    /// bookkeeping, no per-I/O priority draw. Same I/O stream as the general path, handed to
    /// the queue in one `submit_with` (the per-burst checks done once).
    #[inline]
    fn submit_burst_plain(&mut self, want: u32, plug: &mut Plug) -> Result<usize, String> {
        let st = &mut self.st;
        let nblocks = st.nblocks;
        let bs = st.bs as usize;
        let base = st.bufs.as_ptr();
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
            // SAFETY: as in `submit_burst`: slot < depth, so its `bs` bytes lie inside `bufs`,
            // and a slot serves one I/O at a time (free stack).
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
            Some(e) if !e.is_busy() => Err(format!("submit: {e}")),
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
    fn submit_burst(&mut self, phase: Phase, want: u32, plug: &mut Plug) -> Result<usize, String> {
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
        let base = self.st.bufs.as_ptr();
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
            // SAFETY: slot < depth, so the slot's `bs` bytes lie inside `bufs` (depth * bs
            // bytes), which lives as long as the job; a slot is used by one I/O at a time
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
                        result = Err(format!("submit: {e}"));
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

impl JobState {
    /// One completion: its latency (exact, per I/O: one histogram record per run of equal
    /// latencies), its class, errors, verification, and its buffer slot back. I/O and byte
    /// counts are kept per completion batch (`Job::reap`, `Worker::finish`).
    #[inline(always)]
    fn complete(&mut self, rq: &Request) {
        if self.measuring {
            let lat = rq.complete_ns.saturating_sub(rq.submit_ns).max(1);
            if lat != self.run_lat {
                self.flush_hist();
                self.run_lat = lat;
            }
            self.run_n += 1;
            if let Some(c) = &mut self.classes {
                let (h, n) = &mut c[rq.prio.class as usize];
                h.saturating_record(lat);
                *n += 1;
            }
        }
        if !rq.status.is_success() {
            self.failed(rq);
        }
        if self.verify.is_some() {
            self.verify_done(rq);
        }
        self.push_slot(rq.token as u16);
    }

    #[cold]
    #[inline(never)]
    fn failed(&mut self, rq: &Request) {
        self.errors += 1;
        if self.printed < MAX_PRINTED_MISMATCHES {
            self.printed += 1;
            eprintln!(
                "pmio-perf: {} {} LBA {} failed: {:?}",
                self.name,
                rq.op.name(),
                rq.lba,
                rq.status
            );
        }
    }

    /// `--verify`: the unit is free again; a successful read is checked.
    #[inline(never)]
    fn verify_done(&mut self, rq: &Request) {
        let unit = rq.lba / u64::from(self.nblocks) - self.region_start;
        if let Some(v) = &mut self.verify {
            v.inflight[unit as usize] = false;
        }
        if rq.op == Op::Read && rq.status.is_success() {
            self.check(rq, unit);
        }
    }

    /// Takes a free buffer slot. The caller asks for at most as many slots as are free
    /// (`refill` bounds a burst by the queue's room, and slots outnumber nothing in flight).
    #[inline]
    fn pop_slot(&mut self) -> u16 {
        self.nfree -= 1;
        self.slots[self.nfree]
    }

    /// Returns a buffer slot.
    #[inline]
    fn push_slot(&mut self, slot: u16) {
        self.slots[self.nfree] = slot;
        self.nfree += 1;
    }

    /// Records the pending run of equal latencies.
    #[inline]
    fn flush_hist(&mut self) {
        if self.run_n > 0 {
            self.hist.saturating_record_n(self.run_lat, self.run_n);
            self.run_n = 0;
        }
    }

    #[cold]
    fn check(&mut self, rq: &Request, unit: u64) {
        let seq = u64::from(self.verify.as_ref().map_or(0, |v| v.seqs[unit as usize]));
        // SAFETY: the read completed, so its buffer slot is ours again and holds `bs` bytes
        // inside `bufs`.
        let buf = unsafe { std::slice::from_raw_parts(rq.buf.as_ptr(), rq.buf.len() as usize) };
        for (b, block) in buf.chunks_exact(self.block_size as usize).enumerate() {
            if let Err(m) = pattern::check(block, rq.lba + b as u64, seq) {
                self.mismatches += 1;
                if self.printed < MAX_PRINTED_MISMATCHES {
                    self.printed += 1;
                    eprintln!("pmio-perf: verify mismatch on {}: {m}", self.name);
                }
            }
        }
    }
}
