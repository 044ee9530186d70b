//! Latency histograms in SPDK's layout (`include/spdk/histogram_data.h`), kept per queue and
//! merged on request.
//!
//! A value `v` (a latency in ns) falls in *range* `r = 64 - granularity - clz(v)` (0 for small
//! values) and, within it, in one of `2^granularity` buckets: `(v >> (r - 1)) & mask` (`v &
//! mask` in range 0). So every range doubles the bucket width and the relative error stays
//! below `2^-granularity` everywhere. Buckets are laid out range by range, from `min_range` to
//! `max_range`: exactly SPDK's array, so its base64 form (`bdev_get_histogram`) reads with SPDK's
//! own `scripts/histogram.py`.
//!
//! How they are kept:
//! - [`BdevHistogram`] is a device's switch (SPDK's `bdev_enable_histogram`): its shape, the
//!   operation it counts, and the histograms of the queues that count.
//! - Each [`super::BdevQueue`] that the switch is attached to checks, once per `poll`, whether
//!   the switch changed (one relaxed load of a generation number). On a change it takes, once,
//!   the switch's lock and allocates a [`Histogram`] of its own; from then on each completion
//!   of the chosen operation adds one to one bucket: a relaxed load and store, no lock, no
//!   read-modify-write (the queue is the histogram's only writer), no allocation.
//! - [`BdevHistogram::merged`] sums every queue's histogram (and those of closed queues, folded
//!   in when they close) into a [`HistogramData`].
//!
//! ```
//! use pmio::bdev::histogram::{HistogramData, HistogramShape};
//! let shape = HistogramShape::default(); // SPDK's: granularity 7, ranges 0..=57
//! let mut h = HistogramData::new(shape);
//! for v in [1_000, 1_000, 50_000] {
//!     h.tally(v);
//! }
//! assert_eq!(h.total(), 3);
//! let p50 = h.percentile(50.0);
//! assert!((992..=1_008).contains(&p50));
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::request::OpSet;

/// SPDK's `SPDK_HISTOGRAM_GRANULARITY_DEFAULT`: 128 buckets per range.
pub const GRANULARITY_DEFAULT: u32 = 7;

/// Granularities SPDK's decoder takes (`uint8`); above 30 a histogram would not fit memory.
pub const GRANULARITY_MAX: u32 = 30;

/// The bucket layout of a histogram: granularity and the ranges it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramShape {
    /// log2 of the buckets per range.
    pub granularity: u32,
    /// First range kept (values below fall in its first bucket).
    pub min_range: u32,
    /// Last range kept (values above fall in its last bucket).
    pub max_range: u32,
}

impl Default for HistogramShape {
    /// SPDK's default: granularity 7, every value from 0 to `u64::MAX`.
    fn default() -> Self {
        HistogramShape::new(GRANULARITY_DEFAULT, 0, u64::MAX).expect("the default shape is valid")
    }
}

/// Why a histogram shape was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HistogramError {
    /// The granularity is outside 1..=[`GRANULARITY_MAX`].
    #[error("histogram granularity {0} outside 1..={GRANULARITY_MAX}")]
    Granularity(u32),
    /// `min_val >= max_val` (SPDK's `spdk_histogram_data_alloc_sized_ext` refuses it too).
    #[error("histogram min value {min} is not below its max value {max}")]
    Bounds {
        /// The smallest value asked for.
        min: u64,
        /// The largest value asked for.
        max: u64,
    },
}

impl HistogramShape {
    /// The shape covering `min_val..max_val` at `granularity` (SPDK's
    /// `spdk_histogram_data_alloc_sized_ext`).
    pub fn new(granularity: u32, min_val: u64, max_val: u64) -> Result<Self, HistogramError> {
        if granularity == 0 || granularity > GRANULARITY_MAX {
            return Err(HistogramError::Granularity(granularity));
        }
        if min_val >= max_val {
            return Err(HistogramError::Bounds {
                min: min_val,
                max: max_val,
            });
        }
        Ok(HistogramShape {
            granularity,
            min_range: range_of(granularity, min_val),
            max_range: range_of(granularity, max_val - 1),
        })
    }

    /// Buckets per range.
    pub fn buckets_per_range(&self) -> usize {
        1 << self.granularity
    }

    /// Number of buckets.
    pub fn num_buckets(&self) -> usize {
        self.buckets_per_range() * (self.max_range - self.min_range + 1) as usize
    }

    /// Position of value `v` in the bucket array (SPDK's `spdk_histogram_data_tally`).
    #[inline]
    pub fn bucket_of(&self, v: u64) -> usize {
        let range = range_of(self.granularity, v);
        let mask = (1u64 << self.granularity) - 1;
        let (range, index) = if range < self.min_range {
            (self.min_range, 0)
        } else if range > self.max_range {
            (self.max_range, mask)
        } else {
            (range, (v >> range.saturating_sub(1)) & mask)
        };
        (((range - self.min_range) as usize) << self.granularity) + index as usize
    }

    /// The value bucket `i` ends at (exclusive; SPDK's `__spdk_histogram_data_get_bucket_start`
    /// of the bucket, which is the start of the next one).
    pub fn bucket_end(&self, i: usize) -> u64 {
        let range = self.min_range + (i >> self.granularity) as u32;
        let index = (i & (self.buckets_per_range() - 1)) as u64 + 1;
        if range > 0 {
            // Saturates in the top range of a full-width histogram, whose last end is 2^64.
            let base = 1u64
                .checked_shl(range + self.granularity - 1)
                .unwrap_or(u64::MAX);
            base.saturating_add(index << (range - 1))
        } else {
            index
        }
    }

    /// The value bucket `i` starts at.
    pub fn bucket_start(&self, i: usize) -> u64 {
        if i == 0 { 0 } else { self.bucket_end(i - 1) }
    }
}

/// SPDK's `__spdk_histogram_data_get_bucket_range`.
#[inline]
fn range_of(granularity: u32, v: u64) -> u32 {
    let lsb = 64 - granularity;
    let clz = v.leading_zeros();
    lsb.saturating_sub(clz)
}

/// One queue's histogram: one writer (the queue's reactor), any number of readers.
#[derive(Debug)]
pub struct Histogram {
    shape: HistogramShape,
    buckets: Box<[AtomicU64]>,
}

impl Histogram {
    /// A histogram of `shape` with every bucket 0.
    pub fn new(shape: HistogramShape) -> Histogram {
        Histogram {
            shape,
            buckets: (0..shape.num_buckets())
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Its shape.
    pub fn shape(&self) -> HistogramShape {
        self.shape
    }

    /// Counts value `v`. Only the histogram's single writer may call this: a load and a store,
    /// not a read-modify-write, so a second writer would lose counts.
    #[inline]
    pub fn tally(&self, v: u64) {
        self.tally_n(v, 1);
    }

    /// Counts value `v` `n` times (the single writer only, as [`Histogram::tally`]).
    #[inline]
    pub fn tally_n(&self, v: u64, n: u64) {
        let b = &self.buckets[self.shape.bucket_of(v)];
        b.store(b.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Sets every bucket to 0. Only the histogram's single writer may call this.
    pub fn reset(&self) {
        for b in self.buckets.iter() {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// Adds every bucket into `out` (same shape; a reader's snapshot, bucket by bucket).
    fn add_to(&self, out: &mut HistogramData) {
        for (o, b) in out.buckets.iter_mut().zip(self.buckets.iter()) {
            *o += b.load(Ordering::Relaxed);
        }
    }
}

/// Tallies runs of equal values with one [`Histogram::tally_n`]: completions reaped in one
/// batch share their completion time and those submitted in one burst their submit time, so a
/// poll's latencies come in a few runs (the job engine's `LatencyRuns` does the same for its
/// hdrhistogram).
#[derive(Debug)]
pub(crate) struct Runs<'a> {
    hist: &'a Histogram,
    value: u64,
    n: u64,
}

impl<'a> Runs<'a> {
    pub(crate) fn new(hist: &'a Histogram) -> Runs<'a> {
        Runs {
            hist,
            value: 0,
            n: 0,
        }
    }

    /// Counts `v` into the current run, tallying the run before it if `v` ends it.
    #[inline(always)]
    pub(crate) fn add(&mut self, v: u64) {
        if v != self.value {
            self.flush();
            self.value = v;
        }
        self.n += 1;
    }

    /// Tallies the current run.
    #[inline]
    pub(crate) fn flush(&mut self) {
        if self.n > 0 {
            self.hist.tally_n(self.value, self.n);
            self.n = 0;
        }
    }
}

/// A histogram's counts, merged and owned: what `bdev_get_histogram` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramData {
    /// Its shape.
    pub shape: HistogramShape,
    /// Count per bucket, SPDK's order.
    pub buckets: Vec<u64>,
}

/// One bucket with a count, with the values it holds and the share of counts at or below it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketCount {
    /// First value of the bucket.
    pub start: u64,
    /// End of the bucket (exclusive).
    pub end: u64,
    /// Values counted in it.
    pub count: u64,
    /// Percent of all values in this bucket or below.
    pub cumulative_pct: f64,
}

impl HistogramData {
    /// Empty counts of `shape`.
    pub fn new(shape: HistogramShape) -> HistogramData {
        HistogramData {
            shape,
            buckets: vec![0; shape.num_buckets()],
        }
    }

    /// Counts from SPDK's byte form (little-endian u64 per bucket), or `None` if the length
    /// does not match `shape`.
    pub fn from_le_bytes(shape: HistogramShape, bytes: &[u8]) -> Option<HistogramData> {
        if bytes.len() != shape.num_buckets() * 8 {
            return None;
        }
        let buckets = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Some(HistogramData { shape, buckets })
    }

    /// SPDK's byte form: the buckets as little-endian u64s (base64 of it is
    /// `bdev_get_histogram`'s `histogram`).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        self.buckets.iter().flat_map(|b| b.to_le_bytes()).collect()
    }

    /// Counts `v` once.
    pub fn tally(&mut self, v: u64) {
        let i = self.shape.bucket_of(v);
        self.buckets[i] += 1;
    }

    /// Adds another histogram of the same shape (`false`, unchanged, for another shape).
    pub fn merge(&mut self, o: &HistogramData) -> bool {
        if o.shape != self.shape {
            return false;
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        true
    }

    /// Values counted.
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The buckets that hold values, lowest first.
    pub fn nonzero(&self) -> Vec<BucketCount> {
        let total = self.total().max(1) as f64;
        let mut so_far = 0;
        let mut out = Vec::new();
        for (i, &count) in self.buckets.iter().enumerate() {
            if count == 0 {
                continue;
            }
            so_far += count;
            out.push(BucketCount {
                start: self.shape.bucket_start(i),
                end: self.shape.bucket_end(i),
                count,
                cumulative_pct: so_far as f64 * 100.0 / total,
            });
        }
        out
    }

    /// The value below which `pct` percent of the counted values fall: the end of the first
    /// bucket whose cumulative share reaches `pct` (0 when nothing was counted).
    pub fn percentile(&self, pct: f64) -> u64 {
        let total = self.total();
        if total == 0 {
            return 0;
        }
        let want = ((pct / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut so_far = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            so_far += c;
            if so_far >= want {
                return self.shape.bucket_end(i);
            }
        }
        self.shape.bucket_end(self.buckets.len() - 1)
    }
}

/// What a device's histogram counts: its shape and the operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistogramConfig {
    /// Bucket layout.
    pub shape: HistogramShape,
    /// The operations counted ([`OpSet::ALL`]: every one, SPDK's default; one, for SPDK's
    /// `opc`; none, for an SPDK I/O type pmio never issues).
    pub ops: OpSet,
}

/// A device's histogram switch and the histograms of its queues (see the module docs).
#[derive(Debug, Default)]
pub struct BdevHistogram {
    /// Changed (under `state`'s lock) by every enable and disable; queues compare it with the
    /// one they last saw, once per poll.
    generation: AtomicU64,
    state: Mutex<SwitchState>,
}

#[derive(Debug, Default)]
struct SwitchState {
    config: Option<HistogramConfig>,
    /// Histograms of the queues counting now.
    live: Vec<Arc<Histogram>>,
    /// Counts of queues that closed since the histogram was enabled.
    retired: Option<HistogramData>,
}

impl BdevHistogram {
    /// A switch that is off.
    pub fn new() -> BdevHistogram {
        BdevHistogram::default()
    }

    /// Turns counting on with `config`, from zero counts (as SPDK allocates new per-channel
    /// histograms on enable). Queues start counting at their next poll.
    pub fn enable(&self, config: HistogramConfig) {
        let mut st = self.state.lock();
        st.config = Some(config);
        st.live.clear();
        st.retired = None;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Turns counting off and drops the counts. Queues stop counting at their next poll.
    pub fn disable(&self) {
        let mut st = self.state.lock();
        st.config = None;
        st.live.clear();
        st.retired = None;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// What is counted now, `None` when off.
    pub fn config(&self) -> Option<HistogramConfig> {
        self.state.lock().config
    }

    /// Every queue's counts summed, `None` when off.
    pub fn merged(&self) -> Option<HistogramData> {
        let st = self.state.lock();
        let config = st.config?;
        let mut out = st
            .retired
            .clone()
            .unwrap_or_else(|| HistogramData::new(config.shape));
        for h in &st.live {
            h.add_to(&mut out);
        }
        Some(out)
    }

    /// Number of queues counting now.
    pub fn live_queues(&self) -> usize {
        self.state.lock().live.len()
    }
}

/// A queue's side of its device's [`BdevHistogram`].
#[derive(Debug)]
pub(crate) struct QueueHistogram {
    switch: Arc<BdevHistogram>,
    /// The switch's generation this queue last followed.
    seen: u64,
    /// The histogram this queue counts into and the operation counted, while on.
    active: Option<(Arc<Histogram>, OpSet)>,
}

impl QueueHistogram {
    /// A queue's side of `switch`, following it from the first poll.
    pub(crate) fn new(switch: Arc<BdevHistogram>) -> QueueHistogram {
        QueueHistogram {
            switch,
            seen: u64::MAX,
            active: None,
        }
    }

    /// Follows the switch if it changed (one relaxed load when it did not); returns what to
    /// count into, while on.
    #[inline]
    pub(crate) fn sync(&mut self) -> Option<&(Arc<Histogram>, OpSet)> {
        if self.switch.generation.load(Ordering::Relaxed) != self.seen {
            self.follow();
        }
        self.active.as_ref()
    }

    /// Zeroes this queue's own counts (after following the switch).
    pub(crate) fn reset(&mut self) {
        if let Some((h, _)) = self.sync() {
            h.reset();
        }
    }

    /// Takes the switch's state: a histogram of this queue's own when on, none when off.
    #[cold]
    fn follow(&mut self) {
        let mut st = self.switch.state.lock();
        self.seen = self.switch.generation.load(Ordering::Acquire);
        self.active = st.config.map(|c| {
            let h = Arc::new(Histogram::new(c.shape));
            st.live.push(Arc::clone(&h));
            (h, c.ops)
        });
    }
}

impl Drop for QueueHistogram {
    /// Folds this queue's counts into the switch's, so a closed queue's I/O stays counted.
    fn drop(&mut self) {
        let Some((h, _)) = self.active.take() else {
            return;
        };
        let mut st = self.switch.state.lock();
        let Some(pos) = st.live.iter().position(|l| Arc::ptr_eq(l, &h)) else {
            return; // re-enabled or disabled since: these counts were dropped
        };
        st.live.swap_remove(pos);
        let retired = st
            .retired
            .get_or_insert_with(|| HistogramData::new(h.shape));
        h.add_to(retired);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Op;

    /// SPDK's arithmetic, written as in `histogram_data.h`, to check ours against.
    #[allow(clippy::implicit_saturating_sub)] // SPDK's form, on purpose
    fn spdk_tally_pos(g: u32, min_range: u32, max_range: u32, v: u64) -> usize {
        let lsb = 64 - g;
        let clz = if v > 0 { v.leading_zeros() } else { 64 };
        let mut range = if clz <= lsb { lsb - clz } else { 0 };
        let index;
        if range < min_range {
            range = min_range;
            index = 0;
        } else if range > max_range {
            range = max_range;
            index = (1u64 << g) - 1;
        } else {
            let shift = if range == 0 { 0 } else { range - 1 };
            index = (v >> shift) & ((1u64 << g) - 1);
        }
        (((range - min_range) as usize) << g) + index as usize
    }

    #[test]
    fn default_shape_is_spdks() {
        let s = HistogramShape::default();
        assert_eq!((s.granularity, s.min_range, s.max_range), (7, 0, 57));
        assert_eq!(s.num_buckets(), 58 * 128);
    }

    #[test]
    fn buckets_match_spdks_arithmetic() {
        let shapes = [
            HistogramShape::default(),
            HistogramShape::new(3, 0, u64::MAX).unwrap(),
            HistogramShape::new(7, 1_000, 10_000_000).unwrap(),
        ];
        let mut v = 1u64;
        let mut values = vec![0u64, 1, 2, 127, 128, 129, 255, 256, u64::MAX];
        while v < u64::MAX / 3 {
            values.push(v);
            values.push(v + v / 3);
            v = v * 3 + 1;
        }
        for s in shapes {
            for &v in &values {
                let ours = s.bucket_of(v);
                assert_eq!(
                    ours,
                    spdk_tally_pos(s.granularity, s.min_range, s.max_range, v),
                    "{s:?} {v}"
                );
                assert!(ours < s.num_buckets());
                // Inside the covered ranges, a value lies in its bucket's bounds.
                let r = range_of(s.granularity, v);
                if (s.min_range..=s.max_range).contains(&r) && r < 57 {
                    assert!(
                        s.bucket_start(ours) <= v && v < s.bucket_end(ours),
                        "{s:?} {v}: [{}, {})",
                        s.bucket_start(ours),
                        s.bucket_end(ours)
                    );
                }
            }
        }
    }

    #[test]
    fn percentiles_of_known_values() {
        let mut h = HistogramData::new(HistogramShape::default());
        for _ in 0..90 {
            h.tally(10_000);
        }
        for _ in 0..10 {
            h.tally(1_000_000);
        }
        assert_eq!(h.total(), 100);
        let p50 = h.percentile(50.0);
        let p99 = h.percentile(99.0);
        // Granularity 7: a bucket is at most 1/64 of its value wide.
        assert!((10_000..=10_000 + 10_000 / 64).contains(&p50), "{p50}");
        assert!(
            (1_000_000..=1_000_000 + 1_000_000 / 64).contains(&p99),
            "{p99}"
        );
        let nz = h.nonzero();
        assert_eq!(nz.len(), 2);
        assert_eq!((nz[0].count, nz[1].count), (90, 10));
        assert!((nz[0].cumulative_pct - 90.0).abs() < 1e-9);
        let bytes = h.to_le_bytes();
        assert_eq!(
            HistogramData::from_le_bytes(h.shape, &bytes),
            Some(h.clone())
        );
        assert_eq!(HistogramData::from_le_bytes(h.shape, &bytes[8..]), None);
    }

    #[test]
    fn refuses_bad_shapes() {
        assert_eq!(
            HistogramShape::new(0, 0, 10),
            Err(HistogramError::Granularity(0))
        );
        assert_eq!(
            HistogramShape::new(7, 10, 10),
            Err(HistogramError::Bounds { min: 10, max: 10 })
        );
    }

    #[test]
    fn queues_follow_the_switch_and_closed_queues_stay_counted() {
        let sw = Arc::new(BdevHistogram::new());
        let mut a = QueueHistogram::new(Arc::clone(&sw));
        assert!(a.sync().is_none());
        assert!(sw.merged().is_none());
        sw.enable(HistogramConfig {
            shape: HistogramShape::default(),
            ops: OpSet::EMPTY.with(Op::Read),
        });
        let mut b = QueueHistogram::new(Arc::clone(&sw));
        for q in [&mut a, &mut b] {
            let (h, op) = q.sync().expect("on");
            assert_eq!(*op, OpSet::EMPTY.with(Op::Read));
            h.tally(5_000);
        }
        assert_eq!(sw.live_queues(), 2);
        assert_eq!(sw.merged().unwrap().total(), 2);
        drop(b);
        assert_eq!(sw.live_queues(), 1);
        assert_eq!(
            sw.merged().unwrap().total(),
            2,
            "a closed queue's counts stay"
        );
        sw.disable();
        assert!(a.sync().is_none());
        assert!(sw.merged().is_none());
        sw.enable(HistogramConfig {
            shape: HistogramShape::default(),
            ops: OpSet::ALL,
        });
        assert_eq!(sw.merged().unwrap().total(), 0, "enabling starts from zero");
    }

    #[test]
    fn concurrent_reader_sees_counts_grow() {
        let sw = Arc::new(BdevHistogram::new());
        sw.enable(HistogramConfig {
            shape: HistogramShape::default(),
            ops: OpSet::ALL,
        });
        let w = Arc::clone(&sw);
        let writer = std::thread::spawn(move || {
            let mut q = QueueHistogram::new(w);
            for i in 0..100_000u64 {
                let (h, _) = q.sync().expect("on");
                h.tally(i);
            }
            q
        });
        let mut last = 0;
        while !writer.is_finished() {
            let t = sw.merged().unwrap().total();
            assert!(t >= last);
            last = t;
        }
        let q = writer.join().unwrap();
        assert_eq!(sw.merged().unwrap().total(), 100_000);
        drop(q);
        assert_eq!(sw.merged().unwrap().total(), 100_000);
    }
}
