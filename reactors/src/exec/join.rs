//! A task's output on its way to whoever waits for it: the [`JoinHandle`] (awaited by a task on
//! any reactor, or blocked on from a plain thread) and the completer the task carries.
//!
//! The output goes through a small mutex-guarded cell, touched once when the task ends and once
//! per poll of the handle: never on the I/O path. The completer is a drop guard, so a task that
//! never finishes — aborted, dropped at stop, or lost to a reactor panic — still resolves its
//! handle, with the reason.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use super::task::TaskRef;
use crate::error::ReactorError;

enum State<T> {
    /// Not finished; the waker of whoever awaits the handle.
    Running(Option<Waker>),
    Done(Result<T, ReactorError>),
    /// The handle returned the output.
    Taken,
}

/// Shared by a handle and its task's completer.
struct JoinCell<T> {
    core: u32,
    state: Mutex<State<T>>,
}

impl<T> JoinCell<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while holding it; a poisoned lock still holds a valid state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores the result and wakes the waiter (outside the lock).
    fn finish(&self, result: Result<T, ReactorError>) {
        let waiter = match std::mem::replace(&mut *self.lock(), State::Done(result)) {
            State::Running(waiter) => waiter,
            State::Done(_) | State::Taken => unreachable!("a task finishes once"),
        };
        if let Some(waker) = waiter {
            waker.wake();
        }
    }
}

/// A handle and the completer of a task that will run on `core`.
pub(crate) fn pair<T>(core: u32, header: TaskRef) -> (JoinHandle<T>, Completer<T>) {
    let cell = Arc::new(JoinCell {
        core,
        state: Mutex::new(State::Running(None)),
    });
    let completer = Completer {
        cell: Some(Arc::clone(&cell)),
        header: header.clone(),
    };
    (JoinHandle { cell, header }, completer)
}

/// Carried by a task: stores its output, or on drop the reason it has none.
pub(crate) struct Completer<T> {
    cell: Option<Arc<JoinCell<T>>>,
    header: TaskRef,
}

impl<T> Completer<T> {
    /// The task's body: `future`, then its output into the handle.
    pub(crate) fn run<F: Future<Output = T>>(self, future: F) -> Run<F> {
        Run {
            future,
            completer: self,
        }
    }
}

/// A task's body ([`Completer::run`]). Written out rather than an `async fn`: that one holds
/// the user's future twice (argument and awaited local) and adds a state of its own, so every
/// poll touched one more cache line of a twice larger task.
///
/// The user's future first (`repr(C)`): it follows the task header's hot fields on their line
/// (see `task::Header`), and the completer, touched once at the end, comes after it.
#[repr(C)]
pub(crate) struct Run<F: Future> {
    /// Pinned with the `Run` (structural pinning: see `poll`).
    future: F,
    completer: Completer<F::Output>,
}

impl<F: Future> Future for Run<F> {
    type Output = ();

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: `future` is never moved out of a pinned `Run` (nothing takes it by value, and
        // `Run` has no `Drop` of its own), so pinning the field is sound; `completer` is not
        // pinned and only used through `&mut`.
        let (future, completer) = unsafe {
            let this = self.get_unchecked_mut();
            (Pin::new_unchecked(&mut this.future), &mut this.completer)
        };
        let Poll::Ready(output) = future.poll(cx) else {
            return Poll::Pending;
        };
        if let Some(cell) = completer.cell.take() {
            cell.finish(Ok(output));
        }
        Poll::Ready(())
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        let Some(cell) = self.cell.take() else {
            return;
        };
        let core = cell.core;
        cell.finish(Err(if thread::panicking() {
            ReactorError::Panicked { core }
        } else if self.header.is_aborted() {
            ReactorError::TaskAborted { core }
        } else {
            ReactorError::TaskStopped { core }
        }));
    }
}

/// The output of a task spawned with [`crate::ReactorCtx::spawn`], [`crate::spawn_local`] or
/// [`crate::ReactorsHandle::spawn_on`].
///
/// - **Await it** from a task on any reactor: `Ok(output)`, or why there is none:
///   [`ReactorError::TaskAborted`] ([`JoinHandle::abort`]), [`ReactorError::TaskStopped`] (the
///   reactor stopped first), [`ReactorError::Panicked`] (its reactor panicked).
/// - **Block on it** from a thread that is not one of the group's reactors with
///   [`JoinHandle::join`].
/// - **Drop it** to detach: the task keeps running and its output is dropped (as tokio's
///   `JoinHandle`; glommio's detaches too). Cancel with [`JoinHandle::abort`].
///
/// `Send` when the output is: the handle of a [`crate::ReactorsHandle::spawn_on`] task can go
/// anywhere, the task itself never leaves its core.
#[must_use = "dropping a JoinHandle detaches the task; await it, join it or abort it"]
pub struct JoinHandle<T> {
    cell: Arc<JoinCell<T>>,
    header: TaskRef,
}

impl<T> JoinHandle<T> {
    /// The core the task runs on.
    pub fn core(&self) -> u32 {
        self.cell.core
    }

    /// Whether the task has ended (finished, aborted or dropped); the handle is then ready.
    pub fn is_finished(&self) -> bool {
        !matches!(*self.cell.lock(), State::Running(_))
    }

    /// Cancels the task: it is dropped on its own reactor instead of being polled again (at
    /// its next await point; a task being polled right now finishes that poll), and the handle
    /// yields [`ReactorError::TaskAborted`]. A task that already finished keeps its output. Works
    /// from any thread; never blocks.
    ///
    /// Dropping a future cancels what it was doing: an I/O future dropped mid-flight must keep
    /// its buffers away from the device until the device is done with them (the I/O layer's
    /// contract, not the executor's).
    pub fn abort(&self) {
        self.header.abort();
    }

    /// Blocks the calling thread until the task ends and returns its output (as awaiting the
    /// handle). For threads outside the group — the main thread, an RPC thread. On a reactor of
    /// the same group it returns [`ReactorError::WouldDeadlock`] at once (a reactor must not
    /// block; await the handle in a task instead).
    pub fn join(self) -> Result<T, ReactorError> {
        self.header.check_not_own_reactor()?;
        block_on(self)
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, ReactorError>;

    /// # Panics
    ///
    /// If polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.cell.lock();
        match std::mem::replace(&mut *state, State::Taken) {
            State::Running(mut waiter) => {
                if !waiter.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    waiter = Some(cx.waker().clone());
                }
                *state = State::Running(waiter);
                Poll::Pending
            }
            State::Done(result) => Poll::Ready(result),
            State::Taken => panic!("JoinHandle polled after it returned the output"),
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("core", &self.core())
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Wakes a thread parked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread, parking between polls.
fn block_on<F: Future + Unpin>(mut future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = Pin::new(&mut future).poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}
