//! The local executor each reactor runs beside its pollers: futures spawned on a reactor stay on
//! it (they may be `!Send`), are polled from the reactor's own loop, and are woken without
//! crossing cores unless the waker is on another core.
//!
//! | file | one job |
//! |---|---|
//! | `mod.rs` | the public API (`ReactorCtx::spawn`, `ReactorsHandle::spawn_on`, [`spawn_local`], [`yield_now`]) and its contract |
//! | `executor.rs` | a reactor's tasks, run queue and timers; the task step of a turn; stop |
//! | `runqueue.rs` | the run queue of task headers (two vectors swapped per batch: a push and a pop touch no borrow flag) |
//! | `task.rs` | a task's one allocation: the header wakers share (owner, key, queued flags), the future after it; the reference to it and the waker |
//! | `wakelist.rs` | the intrusive lock-free list of tasks woken from other threads |
//! | `join.rs` | [`JoinHandle`], the completer a task carries (its body), blocking join |
//! | `timer.rs` | [`sleep`] and the per-reactor timer heap |
//! | `slab.rs` | the generation-checked slab that holds tasks and timers |
//!
//! # Contract
//!
//! - **Spawn** on the current reactor with [`crate::ReactorCtx::spawn`] (from a message or a
//!   poller) or [`spawn_local`] (from inside a task, which cannot hold the context across an
//!   await); on another reactor with [`crate::ReactorsHandle::spawn_on`], which sends a closure
//!   that builds the future there. A task never moves: it is polled and dropped on its reactor.
//! - **A turn** runs messages, then the task step — due timers fire, tasks woken from other
//!   threads join the run queue, and up to [`crate::ReactorsOptions::task_budget`] queued tasks
//!   are polled, each at most once — then active pollers, then due timed pollers. A task woken
//!   during the step (by [`yield_now`], or by a poller reaping its I/O) runs on the next turn, so
//!   tasks cannot starve pollers and I/O submitted by tasks is flushed by the pollers of the same
//!   turn. A reactor with queued tasks does not sleep.
//! - **Wakers** point at the task's header (which its future follows, in one allocation), a
//!   reference counted the `Arc` way; a poll lends one built in place. On the task's own reactor a wake pushes the
//!   header on the local run queue (a thread-local lookup, plain loads and stores, no reference
//!   count traffic). From any other thread it claims the header's remote flag and links the
//!   header onto the reactor's inbox wake list (one CAS), waking the reactor if it sleeps in
//!   interrupt mode. Neither path allocates; a task is queued at most once however often it is
//!   woken.
//! - **Cancellation**: dropping a [`JoinHandle`] detaches the task (tokio's rule);
//!   [`JoinHandle::abort`] cancels it: the task is dropped on its reactor at its next await
//!   point instead of being polled, and the handle yields [`crate::ReactorError::TaskAborted`].
//! - **Stop**: once a reactor has run its last messages it drops every unfinished task on its
//!   own thread (before its pollers and reactor-local values, so task destructors may still use
//!   them), and their handles yield [`crate::ReactorError::TaskStopped`]; a task spawned by
//!   one of those destructors is dropped unpolled. Tasks are not polled
//!   while the reactor stops, so a future must be safe to drop at any await point: an I/O future
//!   must then keep its buffer away from the device (the I/O layer's contract).
//! - **Panics**: a panicking task panics its reactor, as a panicking poller does: the group
//!   stops, the reactor's tasks are dropped while it unwinds, and their handles yield
//!   [`crate::ReactorError::Panicked`].
//! - **Costs**: spawning allocates twice (the task — header and future — and the handle's
//!   cell); polling,
//!   waking and timers do not once the reactor's slab, run queue and timer heap have grown to
//!   their peak size.

mod executor;
mod join;
mod runqueue;
mod slab;
mod task;
mod timer;
mod wakelist;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

pub(crate) use executor::{Executor, install, uninstall};
pub use join::JoinHandle;
use task::NewTask;
pub(crate) use task::TaskRef;
pub use timer::{Sleep, sleep};
pub(crate) use wakelist::{WakeList, Wakes};

use crate::error::ReactorError;
use crate::group::ReactorsHandle;
use crate::reactor::ReactorCtx;

impl ReactorCtx {
    /// Spawns `future` as a task on this reactor and returns its [`JoinHandle`]. The future
    /// may be `!Send` (it never leaves this reactor); it is first polled in this turn's task
    /// step when spawned from a message, else on the next turn. Spawned during the reactor's
    /// final drain (see [`ReactorCtx::is_stopping`]), it is dropped unpolled.
    ///
    /// ```
    /// use std::rc::Rc;
    /// use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
    ///
    /// let mask = CoreMask::from_cores([CoreMask::available()?.first()])?;
    /// let reactors = Reactors::start(mask, ReactorsOptions::default())?;
    /// let handle = reactors.run_on(reactors.cores()[0], |ctx| {
    ///     let local = Rc::new(20); // !Send: fine, the task stays here
    ///     ctx.spawn(async move { *local + 1 })
    /// })?;
    /// assert_eq!(handle.join()?, 21);
    /// reactors.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn<F>(&mut self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.executor().spawn(future)
    }

    /// Tasks alive on this reactor (spawned, not yet finished or dropped).
    pub fn tasks(&self) -> usize {
        self.executor().task_count()
    }
}

impl ReactorsHandle {
    /// The group of the reactor running the caller, or `None` off reactor threads. Code inside
    /// a task, which cannot hold [`ReactorCtx`] across an await, reaches its reactor's context
    /// with a message through it (e.g. to register a poller).
    ///
    /// ```
    /// use pmio_reactors::{CoreMask, Reactors, ReactorsHandle, ReactorsOptions, current_core};
    ///
    /// let mask = CoreMask::from_cores([CoreMask::available()?.first()])?;
    /// let reactors = Reactors::start(mask, ReactorsOptions::default())?;
    /// let core = reactors.cores()[0];
    /// assert!(ReactorsHandle::current().is_none()); // not a reactor thread
    /// let task = reactors.spawn_on(core, || async {
    ///     let group = ReactorsHandle::current().expect("a task runs on a reactor");
    ///     let here = current_core().unwrap();
    ///     group.send(here, |ctx| {
    ///         ctx.register_poller("registered_by_a_task", |_| false);
    ///     })
    /// })?;
    /// task.join()??;
    /// let names = reactors.run_on(core, |ctx| ctx.pollers().into_iter().map(|p| p.name).collect::<Vec<_>>())?;
    /// assert_eq!(names, ["registered_by_a_task"]);
    /// reactors.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn current() -> Option<ReactorsHandle> {
        executor::with_current(|exec| ReactorsHandle::from_shared(Arc::clone(exec.shared())))
    }

    /// Spawns a task on the reactor of `core`: `make` is sent there as a message and builds the
    /// future on that core, so the future itself may be `!Send` (only `make` and the output
    /// cross cores). Returns at once with a [`JoinHandle`] that is `Send`: await it from a task
    /// on any reactor, or [`JoinHandle::join`] it from a plain thread.
    ///
    /// Fails like [`ReactorsHandle::send`] (unknown core, stopping): then `make` never runs.
    /// Accepted while the target stops, the task is built in its final drain and dropped
    /// unpolled ([`ReactorError::TaskStopped`]).
    ///
    /// ```
    /// use std::cell::Cell;
    /// use std::rc::Rc;
    /// use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, current_core, yield_now};
    ///
    /// let reactors = Reactors::start(CoreMask::available()?, ReactorsOptions::default())?;
    /// let last = *reactors.cores().last().unwrap();
    /// let handle = reactors.spawn_on(last, || async {
    ///     let turns = Rc::new(Cell::new(0)); // built on `last`, never sent
    ///     for _ in 0..3 {
    ///         yield_now().await;
    ///         turns.set(turns.get() + 1);
    ///     }
    ///     (current_core(), turns.get())
    /// })?;
    /// assert_eq!(handle.join()?, (Some(last), 3));
    /// reactors.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_on<M, F>(&self, core: u32, make: M) -> Result<JoinHandle<F::Output>, ReactorError>
    where
        M: FnOnce() -> F + Send + 'static,
        F: Future + 'static,
        F::Output: Send + 'static,
    {
        let index = self.shared().index(core)?;
        let task = NewTask::new(Arc::clone(self.shared()), index);
        let (handle, completer) = join::pair(core, task.task().clone());
        self.send(core, move |ctx| {
            let future = make();
            ctx.executor().insert(task, completer.run(future));
        })?;
        Ok(handle)
    }
}

/// Spawns `future` as a task on the reactor running the caller: from inside a task (which
/// cannot hold [`ReactorCtx`] across an await), or any code on a reactor thread.
///
/// # Panics
///
/// Off a reactor thread.
///
/// ```
/// use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, spawn_local};
///
/// let mask = CoreMask::from_cores([CoreMask::available()?.first()])?;
/// let reactors = Reactors::start(mask, ReactorsOptions::default())?;
/// let parent = reactors.spawn_on(reactors.cores()[0], || async {
///     let children: Vec<_> = (0..4).map(|i| spawn_local(async move { i * 10 })).collect();
///     let mut sum = 0;
///     for child in children {
///         sum += child.await.unwrap();
///     }
///     sum
/// })?;
/// assert_eq!(parent.join()?, 60);
/// reactors.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn spawn_local<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    match executor::current() {
        Some(exec) => exec.spawn(future),
        None => panic!("pmio_reactors::spawn_local called outside a reactor thread"),
    }
}

/// Gives the reactor back for one turn: the task is queued behind the others and polled again
/// on the next turn, after this turn's pollers ran. Works under any executor (it only wakes
/// itself once).
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use pmio_reactors::{CoreMask, PollerResult, Reactors, ReactorsOptions, yield_now};
///
/// let mask = CoreMask::from_cores([CoreMask::available()?.first()])?;
/// let reactors = Reactors::start(mask, ReactorsOptions::default())?;
/// let runs = reactors.run_on(reactors.cores()[0], |ctx| {
///     let polled = Rc::new(Cell::new(0u32));
///     let p = polled.clone();
///     ctx.register_poller("count", move |_| {
///         p.set(p.get() + 1);
///         PollerResult::Idle
///     });
///     ctx.spawn(async move {
///         let before = polled.get();
///         yield_now().await;
///         polled.get() - before // the poller ran in between
///     })
/// })?;
/// assert!(runs.join()? >= 1);
/// reactors.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future of [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
