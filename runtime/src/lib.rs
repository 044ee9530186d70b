//! pmio-runtime: embedding pmio in an application, on the reactors of `pmio-reactors` and
//! the public block layer of `pmio`.
//!
//! - [`Bdev`]: async bdev I/O from tasks on a reactor. [`Bdev::open`] opens the device on the
//!   calling reactor and registers the poller that drives it; its futures own their buffers
//!   and hand them back (`let (res, buf) = bdev.read(buf, lba).await`). The contract (buffer
//!   ownership, one doorbell per turn, a full queue waits, no allocation per I/O) is
//!   [`pmio::aio`]'s.
//! - [`registry`]: the process's named devices, where [`Bdev::open`] looks.
//! - [`rpc`] (feature `rpc`): the bdevs a daemon's RPC methods share ([`rpc::BdevHost`]) and
//!   the methods of the bdev layer and the job engine (`bdev_get_bdevs`, `perform_tests`, ...).
//! - [`job`]: the job engine. Per-core workers keep I/O in flight on bdev queues (random or
//!   sequential, read/write mixes, priority classes, verify patterns, latency histograms);
//!   pmio-perf and pmio-tgt's `perform_tests` are two front ends of it.
//!
//! The examples (`cargo run -p pmio-runtime --example NAME`): `hello_bdev` (SPDK's hello_bdev),
//! `bdev_copy` (many I/Os in flight between two devices), `callback_style` (a poller over
//! [`pmio::bdev::BdevQueue`], the SPDK way), `aio_cost` (CPU per I/O, async against poller).
//!
//! Write and read back a block from a task:
//!
//! ```
//! use pmio::aio::BufPool;
//! use pmio::dma::DmaPoolOptions;
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
//!
//! let dev = pmio_malloc::MallocDevice::new(pmio_malloc::MallocOptions {
//!     name: "LibMalloc0".into(),
//!     ..Default::default()
//! })?;
//! pmio_runtime::registry().register(dev)?;
//! let core = CoreMask::available()?.first();
//! let reactors = Reactors::start(CoreMask::from_cores([core])?, ReactorsOptions::default())?;
//! let task = reactors.spawn_on(core, || async {
//!     let bdev = pmio_runtime::Bdev::open("LibMalloc0")?;
//!     let pool = BufPool::new(DmaPoolOptions { count: 2, buf_size: 512, ..Default::default() })?;
//!     let mut buf = pool.get().unwrap();
//!     buf.fill(7);
//!     let (res, _buf) = bdev.write(buf, 0).await;
//!     res?;
//!     let (res, back) = bdev.read(pool.get().unwrap(), 0).await;
//!     res?;
//!     Ok::<bool, Box<dyn std::error::Error + Send + Sync>>(back.iter().all(|&b| b == 7))
//! })?;
//! assert!(task.join()?.expect("I/O"));
//! reactors.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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

mod bdev;
pub mod job;
#[cfg(feature = "rpc")]
pub mod rpc;

pub use bdev::{Bdev, OpenError, registry};
