//! `--latency-histogram`: each job's queue counts its I/Os' latencies in SPDK's histogram
//! buckets ([`pmio::bdev::histogram`]; the job zeroes its queue's counts when the warm-up
//! ends, so they are the timed phase's I/Os, as the summary's), and the report prints them as spdk_nvme_perf's `-LL`
//! does (`print_performance` in `app/spdk_nvme_perf/perf.c`): per device and core, the
//! "Summary latency data" cut-offs, then the "Latency histogram" with every non-empty bucket.

use std::fmt::Write;
use std::sync::Arc;

use pmio::OpSet;
use pmio::bdev::histogram::{BdevHistogram, HistogramConfig, HistogramData, HistogramShape};

/// spdk_nvme_perf's `g_latency_cutoffs`.
const CUTOFFS: [f64; 15] = [
    0.01, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999, 0.99999, 0.999999,
    0.9999999,
];

/// One job's histogram: its device, core and switch.
pub struct JobHistogram {
    pub device: String,
    pub core: u32,
    pub switch: Arc<BdevHistogram>,
}

impl JobHistogram {
    /// A histogram switch, on, for the job of `device` on `core`.
    pub fn new(device: &str, core: u32) -> JobHistogram {
        let switch = Arc::new(BdevHistogram::new());
        switch.enable(HistogramConfig {
            shape: HistogramShape::default(),
            ops: OpSet::ALL,
        });
        JobHistogram {
            device: device.to_string(),
            core,
            switch,
        }
    }

    /// The counts so far.
    pub fn data(&self) -> HistogramData {
        self.switch
            .merged()
            .unwrap_or_else(|| HistogramData::new(HistogramShape::default()))
    }
}

/// One job's non-empty buckets, for `--json`.
#[derive(Debug, serde::Serialize)]
pub struct JobBuckets {
    pub device: String,
    pub core: u32,
    /// `[start_ns, end_ns, count]` of each bucket that holds I/Os, lowest first.
    pub buckets: Vec<[u64; 3]>,
}

impl JobBuckets {
    /// The buckets of `h`.
    pub fn of(device: &str, core: u32, h: &HistogramData) -> JobBuckets {
        JobBuckets {
            device: device.to_string(),
            core,
            buckets: h
                .nonzero()
                .iter()
                .map(|b| [b.start, b.end, b.count])
                .collect(),
        }
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// SPDK's `check_cutoff` lines for `h`.
fn cutoffs(h: &HistogramData, out: &mut String) {
    let total = h.total();
    if total == 0 {
        return;
    }
    let mut next = CUTOFFS.iter().peekable();
    let mut so_far = 0;
    for (i, &count) in h.buckets.iter().enumerate() {
        if count == 0 {
            continue;
        }
        so_far += count;
        let pct = so_far as f64 / total as f64;
        while let Some(&&c) = next.peek() {
            if pct < c {
                break;
            }
            let _ = writeln!(
                out,
                "{:9.5}% : {:9.3}us",
                c * 100.0,
                us(h.shape.bucket_end(i))
            );
            next.next();
        }
    }
}

/// SPDK's `print_bucket` lines for `h`.
fn buckets(h: &HistogramData, out: &mut String) {
    for b in h.nonzero() {
        let _ = writeln!(
            out,
            "{:9.3} - {:9.3}: {:9.4}%  ({:9})",
            us(b.start),
            us(b.end),
            b.cumulative_pct,
            b.count
        );
    }
}

/// The `-LL` text for every job: the summaries first, then the histograms, as spdk_nvme_perf
/// prints them.
pub fn render(jobs: &[(String, u32, HistogramData)]) -> String {
    let mut out = String::new();
    for (dev, core, h) in jobs {
        let _ = writeln!(
            out,
            "Summary latency data for {dev:<43.43} from core {core}:"
        );
        let _ = writeln!(
            out,
            "================================================================================="
        );
        cutoffs(h, &mut out);
        out.push('\n');
    }
    for (dev, core, h) in jobs {
        let _ = writeln!(out, "Latency histogram for {dev:<43.43} from core {core}:");
        let _ = writeln!(
            out,
            "=============================================================================="
        );
        let _ = writeln!(out, "       Range in us     Cumulative    IO count");
        buckets(h, &mut out);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_as_spdk_nvme_perf() {
        let mut h = HistogramData::new(HistogramShape::default());
        for _ in 0..99 {
            h.tally(10_000);
        }
        h.tally(2_000_000);
        let text = render(&[("Null0".into(), 1, h)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Summary latency data for Null0                                       from core 1:"
        );
        // 1% .. 98% are the 10 us bucket; 99% too (99 of 100); 99.5% and up the 2 ms one.
        assert_eq!(lines[2], "  1.00000% :    10.048us");
        assert!(lines.contains(&" 99.00000% :    10.048us"), "{text}");
        assert!(lines.contains(&" 99.50000% :  2007.040us"), "{text}");
        let hist_at = lines
            .iter()
            .position(|l| l.starts_with("Latency histogram for Null0"))
            .unwrap();
        assert_eq!(
            lines[hist_at + 2],
            "       Range in us     Cumulative    IO count"
        );
        assert_eq!(
            lines[hist_at + 3],
            "    9.984 -    10.048:   99.0000%  (       99)"
        );
        assert_eq!(
            lines[hist_at + 4],
            " 1998.848 -  2007.040:  100.0000%  (        1)"
        );
    }
}
