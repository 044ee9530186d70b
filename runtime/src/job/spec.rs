//! What a job is asked to do ([`JobSpec`], its priorities [`PrioMix`]), which phase a worker
//! runs ([`Phase`]) and when it measures and stops ([`Timing`]). Checked once, at start
//! ([`JobSpec::validate`]), so the I/O path never re-checks them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pmio::bdev::SchedMode;
use pmio::bdev::histogram::BdevHistogram;
use pmio::{BlockDevice, DmaRegion, PrioClass};

use super::error::JobError;
use super::pattern;

/// What a worker's jobs do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Verify preparation: write every unit of each job's region once, sequentially, then
    /// stop (the timing's end is not consulted). Measures from the start.
    Fill,
    /// The timed workload: measure from the timing's start, stop submitting at its end.
    Run,
}

/// Priority classes of a job's I/Os: cumulative percentages (`cum[c]` = share of classes
/// `0..=c`, in [`PrioClass`] order rt, be, idle; `cum[2]` = 100).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrioMix {
    cum: [u8; 3],
}

impl PrioMix {
    /// Every I/O in `class`.
    pub fn single(class: PrioClass) -> PrioMix {
        let mut cum = [0u8; 3];
        for (c, v) in cum.iter_mut().enumerate() {
            *v = if c >= class as usize { 100 } else { 0 };
        }
        PrioMix { cum }
    }

    /// The mix of `shares` (percent of I/Os in rt, be, idle), or `None` unless they sum to 100.
    pub fn from_shares(shares: [u8; 3]) -> Option<PrioMix> {
        let mut cum = [0u8; 3];
        let mut acc = 0u32;
        for (v, s) in cum.iter_mut().zip(shares) {
            acc += u32::from(s);
            *v = u8::try_from(acc).ok()?;
        }
        (acc == 100).then_some(PrioMix { cum })
    }

    /// The class of all I/Os, when there is only one.
    pub fn only(&self) -> Option<PrioClass> {
        PrioClass::ALL.into_iter().find(|&c| self.share(c) == 100)
    }

    /// Percentage of I/Os in `class`.
    pub fn share(&self, class: PrioClass) -> u8 {
        let i = class as usize;
        self.cum[i] - if i == 0 { 0 } else { self.cum[i - 1] }
    }

    /// The class for a draw `r` in `0..100`.
    #[inline]
    pub fn pick(&self, r: u8) -> PrioClass {
        if r < self.cum[0] {
            PrioClass::Rt
        } else if r < self.cum[1] {
            PrioClass::Be
        } else {
            PrioClass::Idle
        }
    }
}

/// One (core, device) job: a queue of its own on the device, `depth` I/Os of `bs` bytes kept
/// in flight over a region of the device.
pub struct JobSpec {
    pub dev: Arc<dyn BlockDevice>,
    /// I/Os in flight (buffer slots), 1..=65535.
    pub depth: u32,
    /// Driver queue depth, 1..=`depth` (smaller under mq-deadline: the rest wait in the
    /// scheduler). Default: `depth`.
    pub queue_depth: u32,
    /// Most I/Os per burst (one plug, one flush: one doorbell). Default: min(32, depth).
    pub submit_batch: u32,
    /// Most completions reaped per poll call. Default: 32.
    pub complete_batch: u32,
    /// I/O size in bytes: a non-zero multiple of the device's block size.
    pub bs: u64,
    /// Random offsets (else sequential, wrapping at the region's end). Default: true.
    pub random: bool,
    /// Share of reads, percent (the rest are writes). Default: 100.
    pub read_pct: u8,
    /// First unit (`bs`-sized chunk of the device) this job addresses. Default: 0.
    pub region_start: u64,
    /// Units this job addresses. Default: the whole device.
    pub region_units: u64,
    /// Verification: the sequence number last written per unit of the region (0 = never
    /// written); writes carry [`pattern`]s and reads are checked against it. The region must
    /// hold more units than `depth` (two I/Os never share a unit). Handed back in the
    /// result. Default: `None`.
    pub verify: Option<Vec<u32>>,
    /// The scheduler as this job's queue sees it. Default: none.
    pub sched: SchedMode,
    /// Priority classes of the I/Os (`None`: the default class, no per-class latency).
    pub prio: Option<PrioMix>,
    /// The device's latency histogram switch the job's queue follows (the registry's, so
    /// `bdev_get_histogram` counts the job's I/O). Default: `None`.
    pub histogram: Option<Arc<BdevHistogram>>,
    /// Buffers given by [`JobSpec::with_buffers`]; `None` (default): the job allocates them
    /// on its reactor with the device's [`BlockDevice::dma_options`] and frees them after
    /// its queue.
    pub(crate) bufs: Option<DmaRegion>,
}

impl JobSpec {
    /// A job of random reads over the whole device, with the defaults above.
    pub fn new(dev: Arc<dyn BlockDevice>, depth: u32, bs: u64) -> JobSpec {
        let region_units = dev.info().size_bytes().checked_div(bs).unwrap_or(0);
        JobSpec {
            dev,
            depth,
            queue_depth: depth,
            submit_batch: depth.min(32),
            complete_batch: 32,
            bs,
            random: true,
            read_pct: 100,
            region_start: 0,
            region_units,
            verify: None,
            sched: SchedMode::None,
            prio: None,
            histogram: None,
            bufs: None,
        }
    }

    /// Runs the job's I/O in `region` (at least `depth * bs` bytes: e.g. allocated off the
    /// reactor and reused across runs), handed back in the result.
    ///
    /// # Safety
    /// The job registers the region with the device ([`BlockDevice::register_memory`]): it
    /// must stay mapped, with the same pages, until every queue of the device on the job's
    /// reactor has been dropped, or at least until no I/O of the device uses an address in it
    /// again. Keep a handed-back region for the device's lifetime (a buffer cache) rather
    /// than free it.
    pub unsafe fn with_buffers(mut self, region: DmaRegion) -> JobSpec {
        self.bufs = Some(region);
        self
    }

    /// The region given by [`JobSpec::with_buffers`], of a job that will not run: for the
    /// caller to keep (it may still be registered with the device), not to free.
    pub fn into_buffers(self) -> Option<DmaRegion> {
        self.bufs
    }

    /// Checks everything the engine relies on; the first problem found, naming the device.
    pub fn validate(&self) -> Result<(), JobError> {
        let info = self.dev.info();
        let invalid = |reason: String| JobError::Invalid {
            bdev: info.name.clone(),
            reason,
        };
        let (depth, bs, block) = (self.depth, self.bs, u64::from(info.block_size));
        if depth == 0 || depth > u32::from(u16::MAX) {
            return Err(invalid(format!("depth {depth} not in 1..=65535")));
        }
        if self.queue_depth == 0 || self.queue_depth > depth {
            return Err(invalid(format!(
                "queue depth {} not in 1..=depth ({depth})",
                self.queue_depth
            )));
        }
        if self.submit_batch == 0 || self.complete_batch == 0 {
            return Err(invalid("submit and complete batches must not be 0".into()));
        }
        if bs == 0 || !bs.is_multiple_of(block) || bs > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "I/O size {bs} is not a multiple of the block size {block} below 4 GiB"
            )));
        }
        if self.read_pct > 100 {
            return Err(invalid(format!("read share {}% above 100", self.read_pct)));
        }
        let end = self.region_start.checked_add(self.region_units);
        if self.region_units == 0 || end.is_none_or(|e| e > info.size_bytes() / bs) {
            return Err(invalid(format!(
                "region of {} units from unit {} is empty or beyond the device",
                self.region_units, self.region_start
            )));
        }
        let need = u64::from(depth) * bs;
        if let Some(b) = &self.bufs
            && (b.len() as u64) < need
        {
            return Err(invalid(format!(
                "buffers of {} bytes, {need} needed",
                b.len()
            )));
        }
        if let Some(v) = &self.verify {
            if v.len() as u64 != self.region_units || self.region_units <= u64::from(depth) {
                return Err(invalid(format!(
                    "verify table of {} units for a region of {} units (more than the depth \
                     {depth} needed)",
                    v.len(),
                    self.region_units
                )));
            }
            if (info.block_size as usize) < pattern::MIN_BLOCK || !block.is_multiple_of(8) {
                return Err(invalid(format!(
                    "block size {block} cannot carry a pattern"
                )));
            }
        }
        Ok(())
    }
}

/// When workers measure and stop (reactor clock, [`pmio_reactors::now_ns`]), shared by the
/// thread that starts them and the workers: workers started before [`Timing::go`] wait,
/// idle, so every core begins at once.
#[derive(Debug, Default)]
pub struct Timing {
    measure_start: AtomicU64,
    /// 0 until go.
    end: AtomicU64,
}

impl Timing {
    /// Not started: workers wait for [`Timing::go`].
    pub fn new() -> Timing {
        Timing::default()
    }

    /// Already started (a job that starts on its own, as `perform_tests`'s).
    pub fn started(measure_start_ns: u64, end_ns: u64) -> Timing {
        let t = Timing::new();
        t.go(measure_start_ns, end_ns);
        t
    }

    /// Starts the workers: I/O completing before `measure_start_ns` is warm-up (not counted),
    /// and no I/O is submitted from `end_ns` (`u64::MAX`: never) on.
    pub fn go(&self, measure_start_ns: u64, end_ns: u64) {
        self.measure_start
            .store(measure_start_ns, Ordering::Release);
        // Pairs with the Acquire load in `window`: measure_start is visible once end is.
        self.end.store(end_ns.max(1), Ordering::Release);
    }

    /// (measure start, end) once started.
    pub(crate) fn window(&self) -> Option<(u64, u64)> {
        match self.end.load(Ordering::Acquire) {
            0 => None,
            end => Some((self.measure_start.load(Ordering::Acquire), end)),
        }
    }
}
