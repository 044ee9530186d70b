//! One (core, device) job's state: its queue, buffer slots, cursor and random stream, and
//! what its completions count; opened from a [`JobSpec`] on the worker's reactor and turned
//! into a [`JobResult`] when drained. Submission is in `submit.rs`, completion in
//! `complete.rs`.

use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::plug::Plug;
use pmio::{DmaRegion, IoStatus, PrioClass};

use super::complete::Shown;
use super::error::JobError;
use super::hooks::MAX_SHOWN;
use super::report::JobResult;
use super::spec::{JobSpec, Phase, PrioMix};
use super::stats::{ClassLatency, LatencyRuns, new_classes, spent_hist};

/// `--verify` bookkeeping of a region.
pub(crate) struct VerifyState {
    /// The sequence number last written per unit (0 = never).
    pub(crate) seqs: Vec<u32>,
    /// Units with an I/O in flight: never two at once, so sequence numbers stay defined.
    pub(crate) inflight: Vec<bool>,
}

/// Per-job state touched by completions (split from the queue so the completion callback
/// can borrow it while the queue is polled).
pub(crate) struct JobState {
    /// The buffers: `depth` slots of `bs` bytes from `base`.
    pub(crate) base: *mut u8,
    pub(crate) bs: u64,
    pub(crate) block_size: u32,
    pub(crate) nblocks: u32,
    /// Free buffer slots: a stack, `slots[..nfree]`.
    pub(crate) slots: Box<[u16]>,
    pub(crate) nfree: usize,
    pub(crate) verify: Option<VerifyState>,
    pub(crate) region_start: u64,
    pub(crate) measuring: bool,
    pub(crate) lat: LatencyRuns,
    /// Per priority class (rt, be, idle): latency and I/Os, with a priority mix.
    pub(crate) classes: Option<Box<ClassLatency>>,
    /// I/Os completed while measuring (counted per completion batch).
    pub(crate) ios: u64,
    /// I/Os that failed (since measuring began); bytes moved = (ios - errors) × bs.
    pub(crate) errors: u64,
    pub(crate) mismatches: u64,
    /// Failures and mismatches queued to be shown through the hooks so far, and the queue.
    pub(crate) shown: u64,
    pub(crate) to_show: Vec<Shown>,
    /// The batch being reaped has cold work: failures or mismatches (`Job::after_batch`).
    pub(crate) cold: bool,
    /// The batch's last failure (completion time, status); the failure streak: when it began
    /// (0: none) and how many of the queue's I/Os had succeeded then; why the device is
    /// unusable once the streak has gone on too long (`complete.rs`).
    pub(crate) last_failure: Option<(u64, IoStatus)>,
    pub(crate) failing_since: u64,
    pub(crate) ok_at_failing: u64,
    pub(crate) unusable: Option<String>,
    pub(crate) name: String,
    /// Buffers that came with the spec (handed back), else ours: dropped after the queue
    /// (`Job` declares `q` before `st`).
    pub(crate) bufs: Option<DmaRegion>,
    pub(crate) bufs_given: bool,
}

/// One (core, device) job.
pub(crate) struct Job {
    pub(crate) q: BdevQueue,
    pub(crate) st: JobState,
    pub(crate) depth: u32,
    pub(crate) submit_batch: u32,
    pub(crate) complete_batch: usize,
    pub(crate) random: bool,
    pub(crate) read_pct: u8,
    /// The class of every I/O (a single class), or the per-I/O mix.
    pub(crate) prio_fixed: Option<PrioClass>,
    pub(crate) prio_mix: Option<PrioMix>,
    pub(crate) region_units: u64,
    pub(crate) cursor: u64,
    pub(crate) rng: u64,
    /// Ops of a mixed burst (true = read); `submit_batch` entries.
    pub(crate) mix: Box<[bool]>,
}

impl Job {
    /// Opens the job's queue on this reactor (registered with `plug`) and its buffers.
    pub(crate) fn open(
        s: JobSpec,
        phase: Phase,
        plug: &mut Plug,
        seed: u64,
    ) -> Result<Job, JobError> {
        s.validate()?;
        let info = s.dev.info();
        let (name, block_size) = (info.name.clone(), info.block_size);
        let dev = s.dev.clone();
        let mut q = BdevQueue::open(
            s.dev,
            BdevQueueOptions {
                depth: s.queue_depth,
                sched: s.sched,
            },
        )?;
        if let Some(h) = s.histogram {
            q.attach_histogram(h);
        }
        q.register_plug(plug);
        let bufs_given = s.bufs.is_some();
        let bufs = match s.bufs {
            Some(b) => b,
            None => DmaRegion::with_options((s.depth as u64 * s.bs) as usize, dev.dma_options())
                .map_err(|source| JobError::Buffers {
                    bdev: name.clone(),
                    source,
                })?,
        };
        // SAFETY: a region of ours stays mapped, same pages, until the queue is dropped (the
        // field order of `Job`); a given one as `JobSpec::with_buffers` requires of its giver.
        unsafe { dev.register_memory(&[(bufs.as_ptr(), bufs.len())]) };
        let units = s.region_units as usize;
        let verify = s.verify.map(|seqs| VerifyState {
            inflight: vec![false; units],
            seqs,
        });
        Ok(Job {
            st: JobState {
                base: bufs.as_ptr(),
                bs: s.bs,
                block_size,
                nblocks: (s.bs / u64::from(block_size)) as u32,
                slots: (0..s.depth as u16).rev().collect(),
                nfree: s.depth as usize,
                verify,
                region_start: s.region_start,
                measuring: phase == Phase::Fill,
                lat: LatencyRuns::new(),
                classes: s.prio.map(|_| new_classes()),
                ios: 0,
                errors: 0,
                mismatches: 0,
                shown: 0,
                to_show: Vec::with_capacity(MAX_SHOWN as usize),
                cold: false,
                last_failure: None,
                failing_since: 0,
                ok_at_failing: 0,
                unusable: None,
                name,
                bufs: Some(bufs),
                bufs_given,
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
            rng: seed,
            mix: vec![false; s.submit_batch as usize].into_boxed_slice(),
        })
    }

    /// Whether a fill has addressed every unit of the region.
    pub(crate) fn filled(&self) -> bool {
        self.cursor >= self.region_units
    }

    /// Measuring begins: forget the warm-up.
    #[cold]
    pub(crate) fn begin_measuring(&mut self) {
        let st = &mut self.st;
        st.measuring = true;
        st.lat.reset();
        if let Some(c) = &mut st.classes {
            for (h, n) in c.iter_mut() {
                h.reset();
                *n = 0;
            }
        }
        st.ios = 0;
        st.errors = 0;
        self.q.reset_histogram();
    }

    /// The measurements of a drained job (its histograms and tables move out).
    #[cold]
    pub(crate) fn take_result(&mut self) -> JobResult {
        let st = &mut self.st;
        JobResult {
            name: st.name.clone(),
            ios: st.ios,
            bytes: st.ios.saturating_sub(st.errors) * st.bs,
            errors: st.errors,
            verify_mismatches: st.mismatches,
            hist: std::mem::replace(&mut st.lat.hist, spent_hist()),
            classes: st.classes.take(),
            verify: st.verify.take().map(|v| v.seqs),
            queue_stats: *self.q.stats(),
            bufs: if st.bufs_given { st.bufs.take() } else { None },
        }
    }
}

/// A job's random seed: the clock, its core and its index.
pub(crate) fn seed(core: u32, job: usize) -> u64 {
    let t = pmio::bdev::now_ns();
    (t ^ (u64::from(core) << 32) ^ (job as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}

/// xorshift64*: one multiply and three shifts per draw.
#[inline]
pub(crate) fn next_rng(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}
