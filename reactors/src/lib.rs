//! pmio reactors: one pinned thread per core, each running a polling loop — SPDK's reactor
//! and thread model, without the block layer (this crate knows nothing of blocks).
//!
//! - [`CoreMask`] parses masks as SPDK and fio users write them: `0x3`, `3` (hex, as SPDK's
//!   `-m 3`), `[0,1]`, `0-3,6`; bad masks and cores this process may not use are typed errors.
//! - [`Reactors::start`] spawns one thread per core, named `reactor_N`, pinned with
//!   `sched_setaffinity`. Each loop turn runs up to [`ReactorsOptions::msg_batch`] messages,
//!   every active poller, the timed pollers that are due, and charges the turn to busy or idle
//!   time (one clock read per turn).
//! - Messages are `FnOnce(&mut ReactorCtx) + Send` closures on a lock-free queue per reactor
//!   (crossbeam `SegQueue`), sent from reactors or any other thread; one sender's messages to
//!   one reactor run in the order sent.
//! - Pollers (`FnMut(&mut ReactorCtx) -> PollerResult`, not `Send`: they live on their
//!   reactor) are registered and unregistered through [`ReactorCtx`], also from inside a poller.
//! - Reactor-local typed state: [`ReactorCtx::local`], [`ReactorCtx::set_local`], ...
//! - A local executor per reactor: [`ReactorCtx::spawn`], [`spawn_local`] and
//!   [`ReactorsHandle::spawn_on`] run futures (`!Send` ones too) as tasks that never leave
//!   their reactor, polled each turn between messages and pollers; a [`JoinHandle`] delivers
//!   the output to a task on any reactor or to a blocked thread. [`yield_now`] and [`sleep`]
//!   for tasks. Contract (wakers, budget, cancellation, stop) under [Tasks](#tasks).
//! - Interrupt mode ([`ReactorsOptions::interrupt_idle`]): a reactor idle for that long sleeps
//!   on an eventfd and the fds it watches ([`ReactorCtx::watch_fd`]) until a message, stop, a
//!   ready fd, or its next timed poller; senders write the eventfd only when the target sleeps.
//!   Default off (busy polling).
//! - Stop: [`Reactors::stop`] runs every accepted message, drops tasks, pollers and locals on
//!   their threads, and joins. Per-reactor [`ReactorStats`] are readable from any thread.
//! - A daemon's stop signals: [`ShutdownSignals`] blocks SIGINT, SIGTERM, SIGQUIT and SIGHUP
//!   before the reactors start and lets the main thread wait for one (SPDK's app framework
//!   stops on them).
//!
//! # Stop semantics
//!
//! [`ReactorsHandle::request_stop`] (or [`Reactors::stop`], which also joins) sets a flag;
//! from then on every `send` fails with [`ReactorError::Stopped`] and the closure is dropped
//! unrun. Each reactor finishes its current turn, stops running pollers, runs **every message
//! whose `send` returned `Ok`** (a sender racing with stop either gets `Ok` and its message
//! runs, or gets `Stopped`; nothing accepted is dropped), then drops its unfinished tasks, its
//! pollers and its reactor-local values on its own thread and exits. Messages running in that final drain see
//! [`ReactorCtx::is_stopping`] and cannot send any more messages (`Stopped`), so apps tear
//! down cross-reactor state (e.g. with [`ReactorsHandle::run_on_all`]) *before* stopping.
//! If a message or poller panics, its reactor drops its queued messages (blocked `run_on`
//! callers get [`ReactorError::Panicked`]), requests stop for the group, and `stop`/`wait`
//! report `Panicked`.
//!
//! # Tasks
//!
//! Each reactor runs the futures spawned on it, polled from its own loop: a turn runs
//! messages, then up to [`ReactorsOptions::task_budget`] queued tasks (each at most once),
//! then pollers. A task is `!Send`-friendly and stays on its core; a waker on that core queues
//! it locally, a waker elsewhere hands it over through the reactor's inbox (waking it from an
//! interrupt-mode sleep), neither allocating. Dropping a [`JoinHandle`] detaches the task;
//! [`JoinHandle::abort`] cancels it. At stop, unfinished tasks are dropped on their own reactor
//! after its last messages and before its pollers and locals; their handles yield
//! [`ReactorError::TaskStopped`]. A future must therefore be safe to drop at any await point.
//!
//! ```
//! use std::time::Duration;
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, sleep, spawn_local};
//!
//! let reactors = Reactors::start(CoreMask::available()?, ReactorsOptions::default())?;
//! let (first, last) = (reactors.cores()[0], *reactors.cores().last().unwrap());
//! // A task on `last` that awaits a task on `first` (a cross-core wake).
//! let remote = reactors.spawn_on(first, || async {
//!     sleep(Duration::from_millis(1)).await;
//!     7
//! })?;
//! let sum = reactors.spawn_on(last, move || async move {
//!     let local = spawn_local(async { 35 });
//!     remote.await.unwrap() + local.await.unwrap()
//! })?;
//! assert_eq!(sum.join()?, 42); // blocks this (non-reactor) thread
//! reactors.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Interrupt mode
//!
//! Active pollers run only while the reactor is awake: an interrupt-mode reactor sleeps once
//! all its turns were idle for [`ReactorsOptions::interrupt_idle`], and wakes for a message, a
//! stop request, its next timed poller, or a watched fd becoming ready; then its pollers run as
//! on any turn. The sleep is one `ppoll` over the reactor's eventfd and its watched fds.
//!
//! - A poller idle because it waits for a socket (or any fd: a pipe, a device's eventfd)
//!   watches the fd with [`ReactorCtx::watch_fd`] instead of calling `stay_awake`, so the
//!   reactor sleeps until data arrives. [`ReactorCtx::set_fd_interest`] changes what wakes it
//!   (a connection asks for [`FdInterest::Write`] only while it has output queued: a socket is
//!   almost always writable), [`ReactorCtx::unwatch_fd`] ends the watch (before the fd is
//!   closed). Readiness is level-triggered: what is left unread wakes the reactor again at
//!   once, and data that arrives just before the sleep is never missed.
//!   [`ReactorStats::fd_wakeups`] counts the wake-ups a ready fd caused.
//! - A poller idle only because it waits for something that has no fd (a device completion
//!   queue polled in memory) calls [`ReactorCtx::stay_awake`] to keep polling.
//!
//! The mode can be switched per reactor at run time ([`ReactorsHandle::set_interrupt_idle`]).
//!
//! ```
//! use std::time::Duration;
//! use pmio_reactors::{CoreMask, PollerResult, Reactors, ReactorsOptions};
//!
//! assert_eq!(CoreMask::parse_unchecked("0x3")?.cores(), &[0, 1]); // SPDK's `-m 0x3`
//! assert_eq!(CoreMask::parse_unchecked("0-3,6")?.len(), 5);
//! // One reactor, on the first core this process may use (`[0]` on most machines).
//! let first = CoreMask::available()?.first();
//! let mask = CoreMask::parse(&format!("[{first}]"))?;
//! let opts = ReactorsOptions {
//!     interrupt_idle: Some(Duration::from_millis(1)), // sleep when idle
//!     ..ReactorsOptions::default()
//! };
//! let reactors = Reactors::start(mask, opts)?;
//!
//! // Set up per-reactor state and a poller on every reactor, and wait for it.
//! let cores = reactors.run_on_all(|ctx| {
//!     ctx.set_local(0u64);
//!     ctx.register_poller("count", |ctx| {
//!         let n = ctx.local::<u64>().unwrap();
//!         if *n < 100 {
//!             *n += 1;
//!             PollerResult::Busy
//!         } else {
//!             PollerResult::Idle
//!         }
//!     });
//!     ctx.core()
//! })?;
//! assert_eq!(cores, vec![first]);
//!
//! // A message from this (non-reactor) thread; a blocking round trip.
//! reactors.send(first, |ctx| log::info!("hello from core {}", ctx.core()))?;
//! while reactors.run_on(first, |ctx| *ctx.local::<u64>().unwrap())? < 100 {
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! let stats = reactors.stop()?;
//! assert!(stats[0].messages >= 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod coremask;
mod error;
mod exec;
mod fdwatch;
mod group;
mod inbox;
mod reactor;
#[cfg(feature = "rpc")]
pub mod rpc;
mod signals;
mod stats;
mod sys;

pub use coremask::{CoreMask, CoreMaskError};
pub use error::ReactorError;
pub use exec::{JoinHandle, Sleep, YieldNow, sleep, spawn_local, yield_now};
pub use fdwatch::{FdInterest, FdWatch};
pub use group::{Reactors, ReactorsHandle, ReactorsOptions, current_core};
pub use reactor::{Message, PollerId, PollerInfo, PollerResult, ReactorCtx};
pub use signals::{SHUTDOWN_SIGNALS, ShutdownSignals};
pub use stats::ReactorStats;
pub use sys::{MAX_CORES, clock_source, now_ns, thread_cpu_time_ns};

#[cfg(all(test, not(loom)))]
mod tests;
