//! What a worker counts: live call/I-O counters ([`Counts`]) and latency histograms, fed one
//! record per run of equal latencies ([`LatencyRuns`]). Histograms are allocated once per
//! job, never per I/O.

use hdrhistogram::Histogram;

/// A histogram for I/O latencies in ns: 1 ns .. 1 hour, 3 significant digits.
pub fn new_hist() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, 3_600_000_000_000, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("constant histogram bounds are valid: {e}"),
    }
}

/// The smallest histogram, to leave behind where a job's histogram was handed out.
pub(crate) fn spent_hist() -> Histogram<u64> {
    match Histogram::new(1) {
        Ok(h) => h,
        Err(e) => unreachable!("one significant digit is valid: {e}"),
    }
}

/// Latency histogram and I/O count per priority class, indexed by [`pmio::PrioClass`]
/// (rt, be, idle).
pub type ClassLatency = [(Histogram<u64>, u64); 3];

/// An empty [`ClassLatency`].
pub(crate) fn new_classes() -> Box<ClassLatency> {
    Box::new([(new_hist(), 0), (new_hist(), 0), (new_hist(), 0)])
}

/// A worker's running totals since it started (warm-up included), for a live display:
/// handed to [`super::Hooks::turn`] once per poller turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// I/Os completed.
    pub ios: u64,
    /// Bursts submitted (each one plug, one flush).
    pub submit_calls: u64,
    /// I/Os submitted.
    pub submitted: u64,
    /// Poll calls that reaped something.
    pub reap_calls: u64,
    /// Completions reaped.
    pub reaped: u64,
}

impl Counts {
    /// Adds another worker's totals.
    pub fn add(&mut self, o: &Counts) {
        self.ios += o.ios;
        self.submit_calls += o.submit_calls;
        self.submitted += o.submitted;
        self.reap_calls += o.reap_calls;
        self.reaped += o.reaped;
    }

    /// `self - earlier`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            ios: self.ios - earlier.ios,
            submit_calls: self.submit_calls - earlier.submit_calls,
            submitted: self.submitted - earlier.submitted,
            reap_calls: self.reap_calls - earlier.reap_calls,
            reaped: self.reaped - earlier.reaped,
        }
    }
}

/// A latency histogram that records runs of equal latencies with one `record_n`: completions
/// reaped in one batch share their completion time, and those submitted in one burst their
/// submit time, so a batch usually holds one or two distinct latencies.
pub(crate) struct LatencyRuns {
    pub(crate) hist: Histogram<u64>,
    run_lat: u64,
    run_n: u64,
}

impl LatencyRuns {
    pub(crate) fn new() -> LatencyRuns {
        LatencyRuns {
            hist: new_hist(),
            run_lat: 0,
            run_n: 0,
        }
    }

    /// Counts one latency into the pending run (recorded by [`LatencyRuns::flush`] or when
    /// the run ends).
    #[inline(always)]
    pub(crate) fn record(&mut self, lat: u64) {
        if lat != self.run_lat {
            self.flush();
            self.run_lat = lat;
        }
        self.run_n += 1;
    }

    /// Records the pending run.
    #[inline]
    pub(crate) fn flush(&mut self) {
        if self.run_n > 0 {
            self.hist.saturating_record_n(self.run_lat, self.run_n);
            self.run_n = 0;
        }
    }

    /// Forgets everything recorded (measuring begins).
    pub(crate) fn reset(&mut self) {
        self.hist.reset();
        self.run_n = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_record_every_latency() {
        let mut l = LatencyRuns::new();
        for lat in [5, 5, 5, 7, 5, 9, 9] {
            l.record(lat);
        }
        l.flush();
        assert_eq!(l.hist.len(), 7);
        assert_eq!(l.hist.count_at(5), 4);
        assert_eq!(l.hist.count_at(9), 2);
        l.record(3);
        l.reset();
        l.flush();
        assert_eq!(l.hist.len(), 0, "a pending run is dropped by reset");
    }
}
