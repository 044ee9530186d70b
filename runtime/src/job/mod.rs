//! The job engine: per-core workers that keep I/O in flight on bdev queues from a reactor
//! poller, as fio's and bdevperf's jobs do. pmio-perf's workers and pmio-tgt's
//! `perform_tests` run on it.
//!
//! A [`JobSpec`] describes one (core, device) job: depth, I/O size, random or sequential,
//! read share, the region it addresses, scheduler, priority classes, verification. A
//! [`Worker`] runs a core's jobs on its reactor: it opens a queue per job, waits for the
//! shared [`Timing`]'s go, refills each queue in bursts (one plug, one doorbell per burst),
//! reaps in batches, records every latency, stops at the end (or on [`Hooks::abort`] or a
//! failure), drains, and hands a [`WorkerReport`] to its [`Hooks`]. No allocation, lock or
//! dynamic call per I/O.
//!
//! Files, one mechanism each:
//! - `spec.rs`: [`JobSpec`] (validated once at start), [`PrioMix`], [`Phase`], [`Timing`].
//! - `worker.rs`: [`Worker`], the per-core poller state machine (wait, measure, stop,
//!   drain, report).
//! - `state.rs`: one job's state (queue, buffer slots, cursor, random stream, counters),
//!   opened from its spec and turned into a [`JobResult`].
//! - `submit.rs`: the submission side (refill, bursts, the plain fast path, verify writes).
//! - `complete.rs`: the completion side (reap, latency, classes, failures, verify reads).
//! - `stats.rs`: [`Counts`] and latency histograms.
//! - [`pattern`]: the self-describing verify pattern of a block.
//! - `hooks.rs`: [`Hooks`], what an application plugs into a worker.
//! - `report.rs`: [`WorkerReport`] and [`JobResult`].
//! - `error.rs`: [`JobError`].

mod complete;
mod error;
mod hooks;
pub mod pattern;
mod report;
mod spec;
mod state;
mod stats;
mod submit;
mod worker;

pub use error::JobError;
pub use hooks::{Hooks, MAX_SHOWN};
pub use report::{JobResult, WorkerReport};
pub use spec::{JobSpec, Phase, PrioMix, Timing};
pub use stats::{ClassLatency, Counts, new_hist};
pub use worker::{Worker, WorkerOptions};

#[cfg(test)]
mod tests;
