//! Live counters, the once-a-second line, the summary and the JSON report.

use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram;
use pmio_runtime::job::{Counts, WorkerReport, new_hist};
use serde::Serialize;

use crate::cli::Opts;

/// Counters of one core, written by its worker's hooks once per poller turn (single writer:
/// plain relaxed stores) and read by the main thread once a second.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct CoreCounters {
    pub ios: AtomicU64,
    pub submit_calls: AtomicU64,
    pub submitted: AtomicU64,
    pub reap_calls: AtomicU64,
    pub reaped: AtomicU64,
}

impl CoreCounters {
    /// Publishes the worker's running totals.
    #[inline]
    pub fn publish(&self, c: &Counts) {
        self.ios.store(c.ios, Ordering::Relaxed);
        self.submit_calls.store(c.submit_calls, Ordering::Relaxed);
        self.submitted.store(c.submitted, Ordering::Relaxed);
        self.reap_calls.store(c.reap_calls, Ordering::Relaxed);
        self.reaped.store(c.reaped, Ordering::Relaxed);
    }

    /// Reads the totals.
    pub fn load(&self) -> Counts {
        Counts {
            ios: self.ios.load(Ordering::Relaxed),
            submit_calls: self.submit_calls.load(Ordering::Relaxed),
            submitted: self.submitted.load(Ordering::Relaxed),
            reap_calls: self.reap_calls.load(Ordering::Relaxed),
            reaped: self.reaped.load(Ordering::Relaxed),
        }
    }
}

/// The once-a-second line, in t/io_uring's format.
pub fn second_line(delta: &Counts, secs: f64, bs: u64) -> String {
    let iops = (delta.ios as f64 / secs) as u64;
    let bw = (delta.ios as f64 * bs as f64 / secs / (1 << 20) as f64) as u64;
    let per = |n: u64, d: u64| n.checked_div(d).unwrap_or(0);
    format!(
        "IOPS={iops}, BW={bw}MiB/s, IOS/call={}/{}",
        per(delta.submitted, delta.submit_calls),
        per(delta.reaped, delta.reap_calls)
    )
}

/// What one core measured in the timed phase.
#[derive(Debug)]
pub struct CoreResult {
    pub core: u32,
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub verify_mismatches: u64,
    pub hist: Histogram<u64>,
    /// Per priority class (rt, be, idle): latency and I/Os, with --prio / --prio-mix.
    pub classes: Option<Vec<(Histogram<u64>, u64)>>,
    /// Measured wall time (ns) of the timed phase on this core.
    pub elapsed_ns: u64,
    /// Reactor busy share of the timed phase, percent.
    pub busy_pct: f64,
}

/// Adds per-class latencies and I/O counts (rt, be, idle) into `acc`.
fn add_classes<'a>(
    acc: &mut Option<Vec<(Histogram<u64>, u64)>>,
    classes: impl Iterator<Item = &'a (Histogram<u64>, u64)>,
) {
    let acc = acc.get_or_insert_with(|| (0..3).map(|_| (new_hist(), 0)).collect());
    for (a, (h, n)) in acc.iter_mut().zip(classes) {
        // Same bounds everywhere, so add cannot fail.
        let _ = a.0.add(h);
        a.1 += n;
    }
}

impl CoreResult {
    /// Folds a worker's jobs into its core's result.
    pub fn of(w: &WorkerReport) -> CoreResult {
        let mut hist = new_hist();
        let (mut ios, mut bytes, mut errors, mut mism) = (0, 0, 0, 0);
        let mut classes: Option<Vec<(Histogram<u64>, u64)>> = None;
        for j in &w.jobs {
            // Every job's histogram has the same bounds, so add cannot fail.
            let _ = hist.add(&j.hist);
            if let Some(c) = &j.classes {
                add_classes(&mut classes, c.iter());
            }
            ios += j.ios;
            bytes += j.bytes;
            errors += j.errors;
            mism += j.verify_mismatches;
        }
        CoreResult {
            core: w.core,
            ios,
            bytes,
            errors,
            verify_mismatches: mism,
            hist,
            classes,
            elapsed_ns: w.elapsed_ns(),
            busy_pct: w.busy_pct,
        }
    }
}

/// Latency summary (ns).
#[derive(Debug, Serialize, Default, Clone, Copy)]
pub struct Lat {
    pub avg: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// One priority class's share of the report.
#[derive(Debug, Serialize)]
pub struct ClassReport {
    pub iops: u64,
    pub ios: u64,
    pub lat_ns: Lat,
}

impl Lat {
    fn of(hist: &Histogram<u64>) -> Lat {
        if hist.is_empty() {
            return Lat::default();
        }
        Lat {
            avg: hist.mean() as u64,
            p50: hist.value_at_quantile(0.50),
            p99: hist.value_at_quantile(0.99),
            p999: hist.value_at_quantile(0.999),
            max: hist.max(),
        }
    }
}

/// Per core entry of the report.
#[derive(Debug, Serialize)]
pub struct CoreReport {
    pub core: u32,
    pub iops: u64,
    pub bw_bytes: u64,
    pub busy_pct: f64,
}

/// The final report (`--json` prints it as is).
#[derive(Debug, Serialize)]
pub struct Report {
    pub iops: u64,
    pub bw_bytes: u64,
    pub ios: u64,
    pub errors: u64,
    pub verify_mismatches: u64,
    pub elapsed_s: f64,
    pub lat_ns: Lat,
    /// Per priority class (`rt`, `be`, `idle`), with --prio / --prio-mix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<std::collections::BTreeMap<&'static str, ClassReport>>,
    pub cores: Vec<CoreReport>,
    /// CPU time of the whole process (user+system) per completed I/O, ns.
    pub cpu_ns_per_io: f64,
    pub devices: Vec<String>,
    pub options: Opts,
    /// With --latency-histogram: per job, SPDK's non-empty buckets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_histograms: Option<Vec<crate::lathist::JobBuckets>>,
}

impl Report {
    /// Folds the cores' results.
    pub fn build(
        results: Vec<CoreResult>,
        opts: &Opts,
        devices: Vec<String>,
        cpu_ns: u64,
    ) -> Report {
        let mut hist = new_hist();
        let (mut ios, mut bytes, mut errors, mut mism) = (0, 0, 0, 0);
        let mut elapsed_ns = 1u64;
        let mut cores = Vec::new();
        let mut classes: Option<Vec<(Histogram<u64>, u64)>> = None;
        for r in &results {
            if let Some(c) = &r.classes {
                add_classes(&mut classes, c.iter());
            }
            // Each core's histogram has the same bounds, so add cannot fail.
            let _ = hist.add(&r.hist);
            ios += r.ios;
            bytes += r.bytes;
            errors += r.errors;
            mism += r.verify_mismatches;
            elapsed_ns = elapsed_ns.max(r.elapsed_ns);
            let secs = r.elapsed_ns.max(1) as f64 / 1e9;
            cores.push(CoreReport {
                core: r.core,
                iops: (r.ios as f64 / secs) as u64,
                bw_bytes: (r.bytes as f64 / secs) as u64,
                busy_pct: (r.busy_pct * 10.0).round() / 10.0,
            });
        }
        let secs = elapsed_ns as f64 / 1e9;
        let lat = if hist.is_empty() {
            Lat::default()
        } else {
            Lat {
                avg: hist.mean() as u64,
                p50: hist.value_at_quantile(0.50),
                p99: hist.value_at_quantile(0.99),
                p999: hist.value_at_quantile(0.999),
                max: hist.max(),
            }
        };
        Report {
            iops: (ios as f64 / secs) as u64,
            bw_bytes: (bytes as f64 / secs) as u64,
            ios,
            errors,
            verify_mismatches: mism,
            elapsed_s: (secs * 1000.0).round() / 1000.0,
            lat_ns: lat,
            classes: classes.map(|c| {
                pmio::PrioClass::ALL
                    .iter()
                    .zip(c)
                    .filter(|(_, (_, n))| *n > 0)
                    .map(|(p, (h, n))| {
                        (
                            p.name(),
                            ClassReport {
                                iops: (n as f64 / secs) as u64,
                                ios: n,
                                lat_ns: Lat::of(&h),
                            },
                        )
                    })
                    .collect()
            }),
            cores,
            cpu_ns_per_io: if ios > 0 {
                (cpu_ns as f64 / ios as f64 * 10.0).round() / 10.0
            } else {
                0.0
            },
            devices,
            options: opts.clone(),
            latency_histograms: None,
        }
    }

    /// The human summary.
    pub fn summary(&self) -> String {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let mut s = String::new();
        s.push_str(&format!(
            "Total: IOPS={}, BW={:.1}MiB/s, ios={}, errors={}, verify_mismatches={}, time={:.2}s\n",
            self.iops,
            mib(self.bw_bytes),
            self.ios,
            self.errors,
            self.verify_mismatches,
            self.elapsed_s
        ));
        for c in &self.cores {
            s.push_str(&format!(
                "  core {:>3}: IOPS={}, BW={:.1}MiB/s, busy={:.1}%\n",
                c.core,
                c.iops,
                mib(c.bw_bytes),
                c.busy_pct
            ));
        }
        let us = |n: u64| n as f64 / 1000.0;
        s.push_str(&format!(
            "Latency (us): avg={:.2}, p50={:.2}, p99={:.2}, p99.9={:.2}, max={:.2}\n",
            us(self.lat_ns.avg),
            us(self.lat_ns.p50),
            us(self.lat_ns.p99),
            us(self.lat_ns.p999),
            us(self.lat_ns.max)
        ));
        s.push_str(
            "  (every I/O recorded; stamps from one clock read per submit burst and one per \
             completion batch)\n",
        );
        for (name, c) in self.classes.iter().flatten() {
            s.push_str(&format!(
                "  class {name:>4}: IOPS={}, ios={}, latency (us) p50={:.2}, p99={:.2}, p99.9={:.2}\n",
                c.iops,
                c.ios,
                us(c.lat_ns.p50),
                us(c.lat_ns.p99),
                us(c.lat_ns.p999)
            ));
        }
        s.push_str(&format!(
            "CPU per I/O: {:.1} ns (process user+system time / I/Os)",
            self.cpu_ns_per_io
        ));
        s
    }
}

/// CPU time (user + system) this process has used, in ns.
pub fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format() {
        let d = Counts {
            ios: 2_000_000,
            submit_calls: 62_500,
            submitted: 2_000_000,
            reap_calls: 100_000,
            reaped: 2_000_000,
        };
        assert_eq!(
            second_line(&d, 1.0, 4096),
            "IOPS=2000000, BW=7812MiB/s, IOS/call=32/20"
        );
        assert_eq!(
            second_line(&Counts::default(), 1.0, 4096),
            "IOPS=0, BW=0MiB/s, IOS/call=0/0"
        );
    }

    #[test]
    fn counters_publish_and_diff() {
        let c = CoreCounters::default();
        let a = Counts {
            ios: 5,
            submit_calls: 1,
            submitted: 5,
            reap_calls: 2,
            reaped: 5,
        };
        c.publish(&a);
        assert_eq!(c.load(), a);
        let mut b = a;
        b.add(&a);
        assert_eq!(b.since(&a), a);
    }
}
