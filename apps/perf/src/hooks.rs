//! What pmio-perf plugs into the job engine's workers ([`pmio_runtime::job`]): the live
//! counters behind the once-a-second line, failures and mismatches on stderr, and the
//! report sent back to the main thread.

use std::sync::Arc;
use std::sync::mpsc::Sender;

use pmio::Request;
use pmio_runtime::job::pattern::Mismatch;
use pmio_runtime::job::{Counts, Hooks, WorkerReport};

use crate::report::CoreCounters;

/// One core's hooks.
pub struct PerfHooks {
    pub counters: Arc<CoreCounters>,
    pub tx: Sender<WorkerReport>,
}

impl Hooks for PerfHooks {
    #[inline]
    fn turn(&mut self, counts: &Counts) {
        self.counters.publish(counts);
    }

    fn io_failed(&mut self, bdev: &str, rq: &Request) {
        eprintln!(
            "pmio-perf: {bdev} {} LBA {} failed: {:?}",
            rq.op.name(),
            rq.lba,
            rq.status
        );
    }

    fn verify_mismatch(&mut self, bdev: &str, m: &Mismatch) {
        eprintln!("pmio-perf: verify mismatch on {bdev}: {m}");
    }

    fn finished(&mut self, report: WorkerReport) {
        let _ = self.tx.send(report);
    }
}
