//! What a worker hands back when its jobs have drained: one [`JobResult`] per job, in the
//! order given, inside a [`WorkerReport`].

use hdrhistogram::Histogram;
use pmio::DmaRegion;
use pmio::bdev::QueueStats;

use super::error::JobError;
use super::stats::ClassLatency;

/// One job's measurements (I/O completed while measuring: after the warm-up, drain included).
pub struct JobResult {
    /// The device's name.
    pub name: String,
    /// I/Os completed.
    pub ios: u64,
    /// Bytes moved by the I/Os that succeeded.
    pub bytes: u64,
    /// I/Os that failed.
    pub errors: u64,
    /// Blocks read back that did not hold what was last written (with verify).
    pub verify_mismatches: u64,
    /// Latency of every I/O, submit (or scheduler insertion) to completion, ns.
    pub hist: Histogram<u64>,
    /// Per priority class, with [`super::JobSpec::prio`].
    pub classes: Option<Box<ClassLatency>>,
    /// The verify table, for the next phase.
    pub verify: Option<Vec<u32>>,
    /// The queue's counters when it drained (everything it did, warm-up included).
    pub queue_stats: QueueStats,
    /// The buffers the spec gave, handed back.
    pub bufs: Option<DmaRegion>,
}

/// A worker's report.
pub struct WorkerReport {
    pub core: u32,
    /// In the order of the specs.
    pub jobs: Vec<JobResult>,
    /// Reactor busy share from the start of measuring to the drain, percent.
    pub busy_pct: f64,
    /// When this worker began measuring (its first turn from the timing's measure start).
    pub measure_start_ns: u64,
    /// The timing's end (`u64::MAX` for none).
    pub end_ns: u64,
    /// When the last I/O had completed.
    pub drained_ns: u64,
    /// Stopped early by [`super::Hooks::abort`].
    pub aborted: bool,
    /// The failure that stopped the worker, if any.
    pub error: Option<JobError>,
}

impl WorkerReport {
    /// Measured time up to the timing's end (or the drain, if earlier), ns, at least 1: the
    /// I/O of the drain counted in a run that lasted as long as asked.
    pub fn elapsed_ns(&self) -> u64 {
        self.drained_ns
            .min(self.end_ns)
            .saturating_sub(self.measure_start_ns)
            .max(1)
    }

    /// Measured time up to the drain, ns, at least 1.
    pub fn elapsed_with_drain_ns(&self) -> u64 {
        self.drained_ns.saturating_sub(self.measure_start_ns).max(1)
    }
}
