//! A reactor's executor: its tasks, run queue and timers, all on the reactor's thread.
//!
//! The executor owns its tasks through a [`Slab`] of references to them (a task is one
//! allocation, its header followed by its future); the run queue holds header pointers, so a wake and the poll after it touch the task alone. A
//! header on the run queue is always in the slab: a task that finishes while queued keeps its
//! entry until the queue hands it out. A task's future is polled in place with no `RefCell`
//! borrow held, so it may spawn, wake, abort and drop other tasks. Each turn ([`Executor::run`]) the
//! reactor fires the due timers, moves the tasks woken from other threads onto the run queue, and
//! polls at most `task_budget` queued tasks, each at most once: a task woken during the turn
//! (`yield_now`, an I/O completion reaped by a poller) runs on the next turn, after the pollers.
//! Queued tasks of one future type in a row are polled by one call of that type's task step
//! ([`Executor::run_same`] in it, their poll inlined in its loop): no indirect call, stack frame
//! and register saves per task.
//!
//! The executor is installed in a thread-local for the reactor thread's lifetime; that is how
//! wakers, [`crate::spawn_local`] and [`crate::sleep`] find it from inside a task.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::mem::ManuallyDrop;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;

use super::join::{self, JoinHandle};
use super::runqueue::RunQueue;
use super::slab::{Key, Slab};
use super::task::{ExecId, Header, NewTask, RunFn, TaskRef};
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
    /// `CURRENT`'s id ([`ExecId::NONE`] when none): a local wake compares it with its task's
    /// owner, one load and one compare.
    static CURRENT_ID: Cell<ExecId> = const { Cell::new(ExecId::NONE) };
}

/// Makes `exec` the executor of this (reactor) thread.
pub(crate) fn install(exec: Rc<Executor>) {
    CURRENT_PTR.set(Rc::as_ptr(&exec));
    CURRENT_ID.set(exec.id);
    CURRENT.with(|c| *c.borrow_mut() = Some(exec));
}

/// Forgets this thread's executor (after [`Executor::shutdown`]).
pub(crate) fn uninstall() {
    CURRENT_ID.set(ExecId::NONE);
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

/// Runs `f` with this thread's executor if it owns `task`; false otherwise.
#[inline]
fn if_owner(task: &Header, f: impl FnOnce(&Executor)) -> bool {
    if CURRENT_ID.get() != task.owner() {
        return false;
    }
    // SAFETY: `CURRENT_ID` is an executor's id (a task's owner is never `NONE`) only while
    // `CURRENT_PTR` is that executor, which `CURRENT` holds an `Rc` of: `install` sets the
    // pointer first, `uninstall` clears the id first and drops the `Rc` last; the thread-locals
    // belong to this thread, and the executor is only ever used through shared references.
    f(unsafe { &*CURRENT_PTR.get() });
    true
}

/// The local wake path: queues `task` if this thread runs its executor; false otherwise.
#[inline]
pub(crate) fn schedule_if_owner(task: &TaskRef) -> bool {
    if_owner(task, |exec| exec.schedule(task))
}

/// [`crate::JoinHandle::abort`] on the task's own thread: queues it to be dropped; false on
/// any other thread.
pub(crate) fn abort_if_owner(task: &TaskRef) -> bool {
    if_owner(task, |exec| exec.schedule_abort(task))
}

/// One reactor's executor.
pub(crate) struct Executor {
    id: ExecId,
    shared: Arc<Shared>,
    index: usize,
    core: u32,
    /// One reference to each task inserted here, until it finished and left the run queue.
    tasks: RefCell<Slab<TaskRef>>,
    /// Tasks to poll, each at most once (`Header::claim_local`), each alive (in `tasks`).
    run_queue: RunQueue,
    /// Tasks not finished (`tasks` may still hold finished ones waiting on the run queue).
    live: Cell<usize>,
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
            run_queue: RunQueue::default(),
            live: Cell::new(0),
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
        let task = NewTask::new(Arc::clone(&self.shared), self.index);
        let (handle, completer) = join::pair(self.core, task.task().clone());
        self.insert(task, completer.run(future));
        handle
    }

    /// Adds a task made for this executor (here or by `spawn_on`) with its future and queues its
    /// first poll, or its drop if it was aborted meanwhile.
    pub(crate) fn insert<F: Future<Output = ()>>(&self, task: NewTask<F>, future: F) {
        assert_eq!(
            task.task().owner(),
            self.id,
            "a task inserted on another executor"
        );
        // SAFETY: `&self` is on this executor's thread (it is `!Sync`), the task's owner
        // (asserted).
        let header = unsafe { task.put_future(future) };
        self.insert_task(header);
    }

    /// `insert`'s part that does not depend on the future's type.
    fn insert_task(&self, header: TaskRef) {
        let key = self.tasks.borrow_mut().insert(header.clone());
        header.set_inserted(key);
        self.live.set(self.live.get() + 1);
        if header.is_aborted() {
            self.schedule_abort(&header);
        } else {
            self.schedule(&header);
        }
    }

    /// The local wake path: queues `task` unless it is queued already, not inserted yet (its
    /// first poll is queued at insert) or finished. `task` must be one of this executor's.
    #[inline]
    pub(crate) fn schedule(&self, task: &TaskRef) {
        if task.claim_local() {
            // The `TaskRef`'s pointer: it keeps the provenance of the whole allocation (see
            // `run`).
            self.run_queue.push(task.as_ptr());
        }
    }

    /// The owner saw `task`'s abort: queues it (unless queued) to be dropped, not polled.
    fn schedule_abort(&self, task: &TaskRef) {
        if task.claim_aborted() {
            self.run_queue.push(task.as_ptr());
        }
    }

    /// Whether the task step has anything to do this turn (checked every turn: cheap).
    #[inline]
    pub(crate) fn has_work(&self, inbox: &Inbox<Message>, now: u64) -> bool {
        !self.run_queue.is_empty() || now >= self.next_timer.get() || inbox.has_wakes()
    }

    /// Whether tasks are queued to run (the reactor must not sleep).
    #[inline]
    pub(crate) fn has_runnable(&self) -> bool {
        !self.run_queue.is_empty()
    }

    /// The group this executor's reactor belongs to.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Tasks alive on this reactor.
    pub(crate) fn task_count(&self) -> usize {
        self.live.get()
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
            self.take_remote_wakes(inbox);
        }
        let queued = self.run_queue.len().min(budget);
        // Counted the rare way: tasks handed out but not polled.
        let mut dropped = 0;
        let handed = self.run_queue.pop_each(queued, |tasks| {
            // SAFETY: a header on the run queue is alive (see `run_same`), and its run function
            // is its own future type's; this is the executor that owns the queued tasks.
            unsafe { ((*tasks[0]).run_fn())(self, tasks, &mut dropped) }
        });
        (handed - dropped) as u64
    }

    /// A future type's task step ([`RunFn`], the body of each type's): takes the tasks at the
    /// front of `batch` whose run function is `run` (at least the first), polls each that is
    /// to be polled with `poll`, inlined here, and finishes those that are done; counts in
    /// `dropped` those handed out unpolled. Returns how many it took.
    ///
    /// # Safety
    ///
    /// `batch` is a run of this executor's run queue (headers of its tasks, alive: each is
    /// the pointer of a `TaskRef` in `tasks`, which holds that reference until the queue hands
    /// it out, see `finish`), on its thread; its first task's run function is `run`, and `poll`
    /// polls the cells of `run`'s future type.
    #[inline(always)]
    pub(crate) unsafe fn run_same(
        &self,
        batch: &[*const Header],
        run: RunFn,
        dropped: &mut usize,
        poll: impl Fn(*const Header, &mut std::task::Context<'_>) -> std::task::Poll<()>,
    ) -> usize {
        let mut taken = 0;
        for &ptr in batch {
            // SAFETY: alive (the caller's); the `ManuallyDrop` leaves its count alone.
            let task = ManuallyDrop::new(unsafe { TaskRef::from_raw(ptr) });
            if taken > 0 && !std::ptr::fn_addr_eq(task.run_fn(), run) {
                break;
            }
            taken += 1;
            if !task.release_local() {
                self.drop_dequeued(&task);
                *dropped += 1;
                continue;
            }
            // SAFETY: this is the task's owner thread (only this executor's tasks are queued
            // here), and no poll of the task is running: polls happen only in `run`, which no
            // poll can reach (it is the reactor's, not a task's); `release_local` returned
            // true; `poll` is its type's (the run function is).
            if unsafe { task.poll_with(&poll) }.is_ready() {
                self.finish(&task);
            }
        }
        taken
    }

    /// Queues the tasks woken from other threads (an abort among them is seen here).
    #[cold]
    fn take_remote_wakes(&self, inbox: &Inbox<Message>) {
        for task in inbox.take_wakes() {
            task.release_remote();
            if task.is_aborted() {
                self.schedule_abort(&task);
            } else {
                self.schedule(&task);
            }
        }
    }

    /// A task the run queue handed out that is not to be polled: aborted (its future is
    /// dropped now) or finished while queued (the queue's hold on it ends here).
    #[cold]
    #[inline(never)]
    fn drop_dequeued(&self, task: &TaskRef) {
        if task.release_dead() {
            self.finish(task);
        } else {
            self.free(task.key());
        }
    }

    /// Drops the task's future (its destructors may use the executor) and, unless the task is
    /// on the run queue, frees its slab entry. `task` is borrowed as a `TaskRef`, not as the
    /// header: freeing the entry may free the task, which a `&Header` argument must outlive.
    /// Out of line: once per task, not per poll.
    #[inline(never)]
    fn finish(&self, task: &TaskRef) {
        let key = task.key();
        let free = task.set_done();
        self.live.set(self.live.get() - 1);
        // SAFETY: as in `poll`: the owner thread, outside any poll of this task. No borrow of
        // the executor is held; the slab keeps the task alive.
        unsafe { task.drop_future() };
        if free {
            self.free(key);
        }
    }

    /// Drops the executor's reference to a finished task (outside the slab's borrow).
    fn free(&self, key: Key) {
        let header = self.tasks.borrow_mut().remove(key);
        drop(header);
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
            for task in &tasks {
                task.set_done();
                // SAFETY: the owner thread (`tasks` are this executor's), and no poll is
                // running: the reactor shuts down between turns, or while unwinding from a
                // panicking poll whose frame is gone.
                if unsafe { task.drop_future() } {
                    dropped += 1;
                    self.live.set(self.live.get() - 1);
                }
            }
            // The run queue may point at these: it is cleared below and never read again.
            drop(tasks);
        }
        self.run_queue.clear();
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

impl Drop for Executor {
    /// Futures are `!Send`: they must be dropped here, on the executor's thread, not by
    /// whichever thread drops a task's header last.
    fn drop(&mut self) {
        self.shutdown();
    }
}
