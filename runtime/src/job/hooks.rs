//! What an application plugs into a worker: where its report goes, a live display, early
//! stop, statistics of the open queues, and how failed I/O and bad data are shown.
//!
//! A worker is generic over its hooks, so each call is a direct (usually inlined) call, and
//! none is made per I/O: failed I/Os and mismatches are shown after their completion batch.

use pmio::Request;
use pmio::bdev::BdevQueue;

use super::pattern::Mismatch;
use super::report::WorkerReport;
use super::stats::Counts;

/// Most failed I/Os and mismatches shown per job through the hooks (all are counted).
pub const MAX_SHOWN: u64 = 16;

/// The application's side of a worker; every method runs on the worker's reactor.
pub trait Hooks: 'static {
    /// Every job's queue has opened (`job` = index among the specs), before the first I/O:
    /// e.g. publish [`BdevQueue::stats_cell`] for live statistics.
    fn opened(&mut self, job: usize, q: &BdevQueue) {
        let _ = (job, q);
    }

    /// Asked once per poller turn while running: `true` stops submitting; the worker drains
    /// and reports `aborted` (a daemon shutting down).
    #[inline]
    fn abort(&self) -> bool {
        false
    }

    /// Once per poller turn, with the running totals.
    #[inline]
    fn turn(&mut self, counts: &Counts) {
        let _ = counts;
    }

    /// An I/O failed (the first [`MAX_SHOWN`] of a job, with its mismatches).
    #[cold]
    fn io_failed(&mut self, bdev: &str, rq: &Request) {
        let _ = (bdev, rq);
    }

    /// A block read back did not hold what was last written (the first [`MAX_SHOWN`] of a
    /// job, with its failed I/Os).
    #[cold]
    fn verify_mismatch(&mut self, bdev: &str, m: &Mismatch) {
        let _ = (bdev, m);
    }

    /// The worker has drained and unregistered its poller; its queues close after this.
    fn finished(&mut self, report: WorkerReport);
}
