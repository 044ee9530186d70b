//! pmio-runtime: embedding pmio in an application, on the reactors of `pmio-reactors` and
//! the public block layer of `pmio`.
//!
//! - [`job`]: the job engine. Per-core workers keep I/O in flight on bdev queues (random or
//!   sequential, read/write mixes, priority classes, verify patterns, latency histograms);
//!   pmio-perf and pmio-tgt's `perform_tests` are two front ends of it.
//!
//! Run 50 ms of random 4 KiB reads on a null device from one reactor:
//!
//! ```
//! use std::sync::{Arc, mpsc};
//! use pmio::BlockDevice;
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, now_ns};
//! use pmio_runtime::job::{Hooks, JobSpec, Phase, Timing, Worker, WorkerOptions, WorkerReport};
//!
//! /// Where the report goes: a channel to this thread.
//! struct Done(mpsc::Sender<WorkerReport>);
//! impl Hooks for Done {
//!     fn finished(&mut self, report: WorkerReport) {
//!         let _ = self.0.send(report);
//!     }
//! }
//!
//! let dev: Arc<dyn BlockDevice> = pmio_null::NullDevice::new(Default::default())?;
//! let first = CoreMask::available()?.first();
//! let reactors = Reactors::start(CoreMask::parse(&format!("[{first}]"))?, ReactorsOptions::default())?;
//! let (tx, rx) = mpsc::channel();
//! let now = now_ns();
//! let timing = Arc::new(Timing::started(now, now + 50_000_000));
//! reactors.run_on(first, move |ctx| {
//!     let job = JobSpec::new(dev, 32, 4096); // 32 I/Os in flight
//!     Worker::start(ctx, WorkerOptions::new(Phase::Run, timing), vec![job], Done(tx))
//! })??;
//! let report = rx.recv()?;
//! assert!(report.error.is_none() && report.jobs[0].ios > 0);
//! assert_eq!(report.jobs[0].bytes, report.jobs[0].ios * 4096);
//! reactors.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod job;
