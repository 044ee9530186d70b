//! A reactor's executor: its tasks, run queue and timers, all on the reactor's thread.
//!
//! Tasks sit in a [`Slab`] of boxed futures; the run queue holds their keys. A task is taken out
//! of its slot while it is polled, so its future may spawn, wake, abort and drop other tasks: no
//! `RefCell` borrow is held across a poll, a wake or a drop. Each turn ([`Executor::run`]) the
//! reactor fires the due timers, moves the tasks woken from other threads onto the run queue, and
//! polls at most `task_budget` queued tasks, each at most once: a task woken during the turn
//! (`yield_now`, an I/O completion reaped by a poller) runs on the next turn, after the pollers.
//!
//! The executor is installed in a thread-local for the reactor thread's lifetime; that is how
//! wakers, [`crate::spawn_local`] and [`crate::sleep`] find it from inside a task.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Waker};

use super::join::{self, JoinHandle};
use super::slab::{Key, Slab};
use super::task::{ExecId, Header, Task, TaskFuture};
use super::timer::Timers;
use crate::group::Shared;
use crate::inbox::Inbox;
use crate::reactor::Message;

thread_local! {
    /// The executor of the reactor running on this thread.
    static CURRENT: RefCell<Option<Rc<Executor>>> = const { RefCell::new(None) };
    /// `CURRENT`'s executor as a plain pointer (null when none), for the local wake path: a
    /// thread-local without a destructor is one load, with no registration check or borrow.
    static CURRENT_PTR: Cell<*const Executor> = const { Cell::new(std::ptr::null()) };
}

/// Makes `exec` the executor of this (reactor) thread.
pub(crate) fn install(exec: Rc<Executor>) {
    CURRENT_PTR.set(Rc::as_ptr(&exec));
    CURRENT.with(|c| *c.borrow_mut() = Some(exec));
}

/// Forgets this thread's executor (after [`Executor::shutdown`]).
pub(crate) fn uninstall() {
    CURRENT_PTR.set(std::ptr::null());
    let exec = CURRENT.try_with(|c| c.borrow_mut().take()).ok().flatten();
    drop(exec);
}

/// This thread's executor, if it is a reactor thread.
pub(crate) fn current() -> Option<Rc<Executor>> {
    CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
}

/// Runs `f` with this thread's executor, if it is a reactor thread.
pub(crate) fn with_current<R>(f: impl FnOnce(&Executor) -> R) -> Option<R> {
    CURRENT
        .try_with(|c| c.borrow().as_deref().map(f))
        .ok()
        .flatten()
}

/// The local wake path: queues `task` if this thread runs its executor; false otherwise.
#[inline]
pub(crate) fn schedule_if_owner(task: &Header) -> bool {
    let exec = CURRENT_PTR.get();
    if exec.is_null() {
        return false;
    }
    // SAFETY: a non-null `CURRENT_PTR` is the executor `CURRENT` holds an `Rc` of: `install`
    // sets both, `uninstall` clears the pointer before it drops the `Rc`; both thread-locals
    // belong to this thread, and the executor is only ever used through shared references.
    let exec = unsafe { &*exec };
    let mine = exec.id == task.owner();
    if mine {
        exec.schedule(task);
    }
    mine
}

/// One reactor's executor.
pub(crate) struct Executor {
    id: ExecId,
    shared: Arc<Shared>,
    index: usize,
    core: u32,
    /// Boxed, so a poll's take and put back move a pointer, not the 40-byte task (moved
    /// through the slab's entry enum, those copies stalled on store forwarding: 6 ns a poll).
    tasks: RefCell<Slab<Box<Task>>>,
    run_queue: RefCell<VecDeque<Key>>,
    timers: RefCell<Timers>,
    /// The reactor's clock at the start of the current turn.
    now: Cell<u64>,
    /// The earliest timer deadline (`u64::MAX`: none), possibly of a cancelled timer.
    next_timer: Cell<u64>,
}

impl Executor {
    pub(crate) fn new(shared: Arc<Shared>, index: usize, now: u64) -> Executor {
        Executor {
            id: ExecId::new(&shared, index),
            core: shared.slot(index).core,
            shared,
            index,
            tasks: RefCell::new(Slab::default()),
            run_queue: RefCell::new(VecDeque::new()),
            timers: RefCell::new(Timers::default()),
            now: Cell::new(now),
            next_timer: Cell::new(u64::MAX),
        }
    }

    /// Spawns `future` here; it is first polled on this reactor's next task step.
    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let header = Arc::new(Header::new(Arc::clone(&self.shared), self.index));
        let (handle, completer) = join::pair(self.core, Arc::clone(&header));
        self.insert(header, Box::pin(completer.run(future)));
        handle
    }

    /// Adds a task whose header was made for this executor (here or by `spawn_on`) and queues
    /// its first poll (which drops it unpolled if it was aborted meanwhile).
    pub(crate) fn insert(&self, header: Arc<Header>, future: TaskFuture) {
        debug_assert_eq!(header.owner(), self.id);
        let task = Box::new(Task::new(Arc::clone(&header), future));
        let key = self.tasks.borrow_mut().insert(task);
        header.set_key(key);
        self.schedule(&header);
    }

    /// The local wake path: queues `task`'s key unless it is queued already or not inserted
    /// yet (its first poll is queued at insert).
    #[inline]
    pub(crate) fn schedule(&self, task: &Header) {
        let key = task.key();
        if key != Key::NONE && task.claim_local() {
            self.run_queue.borrow_mut().push_back(key);
        }
    }

    /// Whether the task step has anything to do this turn (checked every turn: cheap).
    #[inline]
    pub(crate) fn has_work(&self, inbox: &Inbox<Message>, now: u64) -> bool {
        !self.run_queue.borrow().is_empty() || now >= self.next_timer.get() || inbox.has_wakes()
    }

    /// Whether tasks are queued to run (the reactor must not sleep).
    #[inline]
    pub(crate) fn has_runnable(&self) -> bool {
        !self.run_queue.borrow().is_empty()
    }

    /// The group this executor's reactor belongs to.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Tasks alive on this reactor.
    pub(crate) fn task_count(&self) -> usize {
        self.tasks.borrow().len()
    }

    /// The earliest timer deadline, ns (`u64::MAX`: none): an interrupt-mode sleep ends there.
    pub(crate) fn next_timer(&self) -> u64 {
        self.next_timer.get()
    }

    /// The task step of a reactor turn: fires due timers, queues the tasks woken from other
    /// threads, polls up to `budget` queued tasks. Returns how many tasks were polled.
    pub(crate) fn run(&self, inbox: &Inbox<Message>, now: u64, budget: usize) -> u64 {
        self.now.set(now);
        if now >= self.next_timer.get() {
            self.fire_timers(now);
        }
        if inbox.has_wakes() {
            for task in inbox.take_wakes() {
                task.release_remote();
                self.schedule(&task);
            }
        }
        let queued = self.run_queue.borrow().len().min(budget);
        let mut polls = 0;
        for _ in 0..queued {
            let Some(key) = self.run_queue.borrow_mut().pop_front() else {
                break;
            };
            polls += u64::from(self.poll(key));
        }
        polls
    }

    /// Polls the task under `key` (nothing if the key is stale); returns whether it was polled.
    fn poll(&self, key: Key) -> bool {
        let task = self.tasks.borrow_mut().take(key);
        let Some(mut task) = task else {
            return false;
        };
        task.header.release_local();
        if task.header.is_aborted() {
            self.finish(key, task);
            return false;
        }
        let mut cx = Context::from_waker(&task.waker);
        if task.future.as_mut().poll(&mut cx).is_ready() {
            self.finish(key, task);
        } else {
            self.tasks.borrow_mut().put_back(key, task);
        }
        true
    }

    /// Frees the task's slot, then drops it (its destructors may use the executor).
    fn finish(&self, key: Key, task: Box<Task>) {
        self.tasks.borrow_mut().remove(key);
        drop(task);
    }

    /// Drops every task on this thread (destructors may spawn: those are dropped too, unpolled),
    /// then the run queue and the timers. The reactor calls it once its inbox is drained.
    pub(crate) fn shutdown(&self) {
        let mut dropped = 0;
        loop {
            let tasks = self.tasks.borrow_mut().drain();
            if tasks.is_empty() {
                break;
            }
            dropped += tasks.len();
            drop(tasks);
        }
        self.run_queue.borrow_mut().clear();
        let timers = std::mem::take(&mut *self.timers.borrow_mut());
        drop(timers);
        self.next_timer.set(u64::MAX);
        if dropped > 0 {
            log::debug!(
                "reactor on core {}: {dropped} unfinished task(s) dropped at stop",
                self.core
            );
        }
    }

    /// `Sleep::poll`: whether the timer for `deadline` fired; arms it (waking `waker`) on the
    /// first poll, re-targets it on later ones.
    pub(crate) fn poll_timer(&self, timer: &mut Option<Key>, deadline: u64, waker: &Waker) -> bool {
        let Some(key) = *timer else {
            if self.now.get() >= deadline {
                return true;
            }
            let key = self.timers.borrow_mut().arm(deadline, waker.clone());
            *timer = Some(key);
            self.next_timer.set(self.next_timer.get().min(deadline));
            return false;
        };
        let fired = self.timers.borrow_mut().poll(key, waker);
        if fired {
            *timer = None;
            self.cancel_timer(key);
        }
        fired
    }

    /// Forgets a timer (fired or not).
    pub(crate) fn cancel_timer(&self, key: Key) {
        let waker = self.timers.borrow_mut().release(key);
        drop(waker);
    }

    /// Wakes the tasks whose timers are due (one at a time: a wake may touch the timers).
    #[cold]
    fn fire_timers(&self, now: u64) {
        loop {
            let due = self.timers.borrow_mut().pop_due(now);
            match due {
                Some(waker) => waker.wake(),
                None => break,
            }
        }
        self.next_timer.set(self.timers.borrow().next_due());
    }
}
