//! Executor tests on real reactors. They take the crate's `serial()` lock: timing checks must
//! not compete with the other reactor tests on a two-core machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::future::{Future, pending, poll_fn};
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use crate::tests::{all_cores, interrupt_opts, one_core, serial, wait_until};
use crate::*;

const LONG: Duration = Duration::from_secs(10);

/// A counter tasks await (`reach(n)`), bumped from any thread or reactor.
#[derive(Default)]
struct Counter {
    value: AtomicU64,
    waiter: Mutex<Option<Waker>>,
}

impl Counter {
    fn bump(&self) {
        self.value.fetch_add(1, Ordering::SeqCst);
        let waiter = self.waiter.lock().unwrap().take();
        if let Some(w) = waiter {
            w.wake();
        }
    }

    fn reach(&self, n: u64) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            if self.value.load(Ordering::SeqCst) >= n {
                return Poll::Ready(());
            }
            *self.waiter.lock().unwrap() = Some(cx.waker().clone());
            // Re-check after publishing the waker: a bump in between took no waker.
            if self.value.load(Ordering::SeqCst) >= n {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// What was dropped where: (label, core).
type DropLog = Arc<Mutex<Vec<(&'static str, Option<u32>)>>>;

/// Records the core it is dropped on.
struct DropGuard(DropLog, &'static str);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.lock().unwrap().push((self.1, current_core()));
    }
}

fn stats(reactors: &Reactors, core: u32) -> ReactorStats {
    reactors.stats(core).unwrap()
}

#[test]
fn spawn_on_the_current_reactor_delivers_the_output() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let handle = reactors
        .run_on(core, |ctx| {
            let shared = Rc::new(Cell::new(1)); // !Send state in the task
            let h = ctx.spawn(async move {
                yield_now().await;
                shared.set(shared.get() + 41);
                (shared.get(), current_core())
            });
            assert_eq!(ctx.tasks(), 1);
            h
        })
        .unwrap();
    assert_eq!(handle.core(), core);
    assert_eq!(handle.join().unwrap(), (42, Some(core)));
    let st = reactors.stop().unwrap();
    assert!(st[0].task_polls >= 2, "{:?}", st[0]);
    assert_eq!(st[0].tasks, 0);
}

#[test]
fn spawn_on_another_core_is_awaited_from_a_task_here() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), ReactorsOptions::default()).unwrap();
    let (a, b) = (reactors.cores()[0], *reactors.cores().last().unwrap());
    let h = reactors.handle();
    let outer = reactors
        .spawn_on(a, move || async move {
            // Built on `b`; the output (a String) crosses back to `a`.
            let inner = h
                .spawn_on(b, || async {
                    let s = Rc::new(format!("from {:?}", current_core()));
                    yield_now().await;
                    (*s).clone()
                })
                .unwrap();
            (inner.await.unwrap(), current_core())
        })
        .unwrap();
    let (text, ran_on) = outer.join().unwrap();
    assert_eq!(text, format!("from {:?}", Some(b)));
    assert_eq!(ran_on, Some(a));
    reactors.stop().unwrap();
}

#[test]
fn a_task_is_woken_by_a_message_on_another_core() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), ReactorsOptions::default()).unwrap();
    let (a, b) = (reactors.cores()[0], *reactors.cores().last().unwrap());
    let counter = Arc::new(Counter::default());
    let c = counter.clone();
    let handle = reactors
        .spawn_on(a, move || async move {
            for n in 1..=100 {
                c.reach(n).await;
            }
            current_core()
        })
        .unwrap();
    assert!(wait_until(LONG, || stats(&reactors, a).task_polls >= 1));
    for _ in 0..100 {
        let c = counter.clone();
        // The wake happens on `b`'s reactor thread: the remote path when `a != b`.
        reactors.send(b, move |_| c.bump()).unwrap();
    }
    assert_eq!(handle.join().unwrap(), Some(a));
    reactors.stop().unwrap();
}

#[test]
fn a_wake_from_a_plain_thread_wakes_a_sleeping_reactor() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let counter = Arc::new(Counter::default());
    let c = counter.clone();
    let handle = reactors
        .spawn_on(core, move || async move {
            c.reach(1).await;
            current_core()
        })
        .unwrap();
    assert!(wait_until(LONG, || {
        stats(&reactors, core).task_polls >= 1 && reactors.is_sleeping(core)
    }));
    let before = stats(&reactors, core);
    thread::sleep(Duration::from_millis(20));
    assert!(!handle.is_finished());
    let t = Instant::now();
    counter.bump();
    assert_eq!(handle.join().unwrap(), Some(core));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let d = stats(&reactors, core).since(&before);
    assert!(d.wakeups >= 1, "{d:?}");
    // Only the wake: no message ran.
    assert_eq!(d.messages, 0, "{d:?}");
    reactors.stop().unwrap();
}

#[test]
fn a_task_woken_by_an_idle_poller_keeps_the_reactor_awake() {
    let _s = serial();
    // Sleeps after any idle turn.
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::ZERO)).unwrap();
    let core = reactors.cores()[0];
    let handle = reactors
        .run_on(core, |ctx| {
            let parked: Rc<Cell<Option<Waker>>> = Rc::default();
            let fired = Rc::new(Cell::new(false));
            let (p, f) = (parked.clone(), fired.clone());
            // Wakes the task one run after it parked, reporting idle: the turn that queues
            // the task has done no work of its own.
            let mut due: Option<Waker> = None;
            ctx.register_poller("completions", move |_| {
                if let Some(w) = due.take() {
                    f.set(true);
                    w.wake();
                }
                due = p.take();
                PollerResult::Idle
            });
            ctx.spawn(async move {
                for _ in 0..1000 {
                    poll_fn(|cx| {
                        if fired.replace(false) {
                            Poll::Ready(())
                        } else {
                            parked.set(Some(cx.waker().clone()));
                            Poll::Pending
                        }
                    })
                    .await;
                }
            })
        })
        .unwrap();
    assert!(wait_until(LONG, || handle.is_finished()));
    handle.join().unwrap();
    reactors.stop().unwrap();
}

#[test]
fn sleep_fires_on_the_reactor_clock_and_lets_the_reactor_sleep() {
    let _s = serial();
    for opts in [
        ReactorsOptions::default(),
        interrupt_opts(Duration::from_millis(1)),
    ] {
        let interrupt = opts.interrupt_idle.is_some();
        let reactors = Reactors::start(one_core(), opts).unwrap();
        let core = reactors.cores()[0];
        let before = stats(&reactors, core);
        let handle = reactors
            .spawn_on(core, || async {
                let t = Instant::now();
                let s = sleep(Duration::from_millis(30));
                let deadline = s.deadline_ns();
                s.await;
                (t.elapsed(), now_ns() >= deadline)
            })
            .unwrap();
        let (slept, past_deadline) = handle.join().unwrap();
        assert!(past_deadline);
        assert!(slept >= Duration::from_millis(29), "{slept:?}");
        assert!(slept < Duration::from_secs(2), "{slept:?}");
        let d = stats(&reactors, core).since(&before);
        if interrupt {
            // The reactor slept until the timer instead of spinning.
            assert!(d.sleep_ns >= 15_000_000, "{d:?}");
        }
        reactors.stop().unwrap();
    }
}

#[test]
fn many_tasks_share_turns_fairly_beside_a_busy_poller() {
    const TASKS: usize = 500;
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    type Counts = Rc<RefCell<Vec<u64>>>;
    reactors
        .run_on(core, |ctx| {
            let counts: Counts = Rc::new(RefCell::new(vec![0; TASKS]));
            let poller_runs = Rc::new(Cell::new(0u64));
            let p = poller_runs.clone();
            ctx.register_poller("busy", move |_| {
                p.set(p.get() + 1);
                PollerResult::Busy
            });
            for i in 0..TASKS {
                let counts = counts.clone();
                let _detached = ctx.spawn(async move {
                    loop {
                        counts.borrow_mut()[i] += 1;
                        yield_now().await;
                    }
                });
            }
            ctx.set_local((counts, poller_runs));
        })
        .unwrap();
    thread::sleep(Duration::from_millis(100));
    // Messages still run promptly beside 500 runnable tasks and a busy poller.
    let t = Instant::now();
    let (min, max, total, poller_runs) = reactors
        .run_on(core, |ctx| {
            let (counts, runs) = ctx.local::<(Counts, Rc<Cell<u64>>)>().unwrap();
            let counts = counts.borrow();
            let min = *counts.iter().min().unwrap();
            let max = *counts.iter().max().unwrap();
            (min, max, counts.iter().sum::<u64>(), runs.get())
        })
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(min >= 5, "tasks barely ran: {min}");
    // Round robin: no task is ahead of another by more than one poll.
    assert!(max - min <= 1, "min {min} max {max}");
    // At most `task_budget` (64) polls a turn, and the poller runs every turn.
    assert!(
        poller_runs * 64 >= total,
        "{poller_runs} poller runs, {total} polls"
    );
    let st = reactors.stop().unwrap();
    assert!(st[0].task_polls >= total);
}

#[test]
fn abort_cancels_and_dropping_the_handle_detaches() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), ReactorsOptions::default()).unwrap();
    let (a, b) = (reactors.cores()[0], *reactors.cores().last().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));

    // Abort from a plain thread: the task is dropped on its core.
    let l = log.clone();
    let stuck = reactors
        .spawn_on(b, move || {
            let guard = DropGuard(l, "aborted");
            async move {
                let _guard = guard;
                pending::<()>().await;
            }
        })
        .unwrap();
    assert!(wait_until(LONG, || stats(&reactors, b).task_polls >= 1));
    stuck.abort();
    assert!(matches!(
        stuck.join(),
        Err(ReactorError::TaskAborted { core }) if core == b
    ));
    assert_eq!(log.lock().unwrap().as_slice(), &[("aborted", Some(b))]);

    // Aborting a finished task leaves its output.
    let done = reactors.spawn_on(a, || async { 5 }).unwrap();
    assert!(wait_until(LONG, || done.is_finished()));
    done.abort();
    assert_eq!(done.join().unwrap(), 5);

    // Dropping the handle detaches: the task runs on.
    let counter = Arc::new(Counter::default());
    let ran = Arc::new(AtomicBool::new(false));
    let (c, r) = (counter.clone(), ran.clone());
    drop(
        reactors
            .spawn_on(a, move || async move {
                c.reach(1).await;
                r.store(true, Ordering::SeqCst);
            })
            .unwrap(),
    );
    counter.bump();
    assert!(wait_until(LONG, || ran.load(Ordering::SeqCst)));

    // Aborted before the spawn message ran: the task is built but never polled.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    reactors
        .send(b, move |_| {
            let _ = rx.recv_timeout(LONG);
        })
        .unwrap();
    let polled = Arc::new(AtomicBool::new(false));
    let p = polled.clone();
    let early = reactors
        .spawn_on(b, move || async move { p.store(true, Ordering::SeqCst) })
        .unwrap();
    early.abort();
    tx.send(()).unwrap();
    assert!(matches!(
        early.join(),
        Err(ReactorError::TaskAborted { .. })
    ));
    assert!(!polled.load(Ordering::SeqCst));

    // Abort on the task's own core, from another task (the local wake path).
    let local = reactors
        .spawn_on(a, || async {
            let child = spawn_local(pending::<()>());
            yield_now().await;
            child.abort();
            child.await
        })
        .unwrap();
    assert!(matches!(
        local.join().unwrap(),
        Err(ReactorError::TaskAborted { .. })
    ));
    reactors.stop().unwrap();
}

#[test]
fn an_abort_on_the_owner_drops_a_queued_or_running_task_unpolled() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let log: DropLog = Arc::default();
    let l = log.clone();
    // A task's result once a few turns passed (an abort takes one), `None` if unfinished.
    async fn settled<T>(handle: JoinHandle<T>) -> Option<Result<T, ReactorError>> {
        for _ in 0..3 {
            yield_now().await;
        }
        match handle.is_finished() {
            true => Some(handle.await),
            false => None,
        }
    }
    let outcome = reactors
        .spawn_on(core, move || async move {
            // Woken (on the run queue), then aborted before its turn: never polled again.
            let polls = Rc::new(Cell::new(0u32));
            let kept: Rc<RefCell<Option<Waker>>> = Rc::default();
            let (p, k, guard) = (polls.clone(), kept.clone(), DropGuard(l, "queued"));
            let queued = spawn_local(poll_fn(move |cx| {
                let _ = &guard;
                p.set(p.get() + 1);
                *k.borrow_mut() = Some(cx.waker().clone());
                Poll::<()>::Pending
            }));
            yield_now().await;
            kept.borrow_mut().take().unwrap().wake();
            queued.abort();
            let queued = (settled(queued).await, polls.get());

            // Aborts itself in a poll that stays pending: dropped instead of polled again.
            let mine: Rc<RefCell<Option<JoinHandle<()>>>> = Rc::default();
            let (m, polls) = (mine.clone(), Rc::new(Cell::new(0u32)));
            let p = polls.clone();
            let handle = spawn_local(poll_fn(move |_| {
                p.set(p.get() + 1);
                m.borrow().as_ref().unwrap().abort();
                Poll::<()>::Pending
            }));
            *mine.borrow_mut() = Some(handle);
            yield_now().await;
            let handle = mine.borrow_mut().take().unwrap();
            let pending_self = (settled(handle).await, polls.get());

            // Aborts itself, then finishes in the same poll: the output stands.
            let mine: Rc<RefCell<Option<JoinHandle<u32>>>> = Rc::default();
            let m = mine.clone();
            let handle = spawn_local(async move {
                m.borrow().as_ref().unwrap().abort();
                9
            });
            *mine.borrow_mut() = Some(handle);
            yield_now().await;
            let handle = mine.borrow_mut().take().unwrap();
            let finished = settled(handle).await;

            // The same, detached (it drops its own handle): the run queue's entry is what keeps
            // it until handed out (under Miri, freeing it at finish is a use after free there).
            let mine: Rc<RefCell<Option<JoinHandle<()>>>> = Rc::default();
            let m = mine.clone();
            *mine.borrow_mut() = Some(spawn_local(async move {
                let me = m.borrow_mut().take().unwrap();
                me.abort();
            }));
            for _ in 0..3 {
                yield_now().await;
            }
            (queued, pending_self, finished)
        })
        .unwrap()
        .join()
        .unwrap();
    let ((queued, queued_polls), (pending_self, self_polls), finished) = outcome;
    assert!(matches!(
        queued,
        Some(Err(ReactorError::TaskAborted { .. }))
    ));
    assert_eq!(queued_polls, 1);
    assert_eq!(log.lock().unwrap().as_slice(), &[("queued", Some(core))]);
    assert!(matches!(
        pending_self,
        Some(Err(ReactorError::TaskAborted { .. }))
    ));
    assert_eq!(self_polls, 1);
    assert!(matches!(finished, Some(Ok(9))));
    assert_eq!(reactors.run_on(core, |ctx| ctx.tasks()).unwrap(), 0);
    reactors.stop().unwrap();
}

#[test]
fn unfinished_tasks_are_dropped_on_their_own_core_at_stop() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for &core in reactors.cores() {
        let (l, l2) = (log.clone(), log.clone());
        reactors
            .run_on(core, move |ctx| ctx.set_local(DropGuard(l2, "local")))
            .unwrap();
        handles.push(
            reactors
                .spawn_on(core, move || {
                    let guard = DropGuard(l, "task");
                    async move {
                        let _guard = guard;
                        sleep(Duration::from_secs(3600)).await;
                    }
                })
                .unwrap(),
        );
    }
    let cores = reactors.cores().to_vec();
    assert!(wait_until(LONG, || cores.iter().all(|&c| stats(
        &reactors, c
    )
    .tasks
        == 1)));
    reactors.stop().unwrap();
    let log = log.lock().unwrap().clone();
    for &core in &cores {
        let here: Vec<&str> = log
            .iter()
            .filter(|(_, c)| *c == Some(core))
            .map(|(what, _)| *what)
            .collect();
        // Dropped on its own core, before the reactor's locals.
        assert_eq!(here, ["task", "local"], "core {core}: {log:?}");
    }
    assert_eq!(log.len(), 2 * cores.len(), "{log:?}");
    for (h, &core) in handles.into_iter().zip(&cores) {
        assert!(matches!(h.join(), Err(ReactorError::TaskStopped { core: c }) if c == core));
    }
}

#[test]
fn tasks_spawned_by_destructors_at_stop_are_dropped_unpolled() {
    let _s = serial();
    /// A reactor-local that spawns a task when dropped (at stop, after the tasks were dropped).
    struct SpawnOnDrop(DropLog, Arc<AtomicBool>);
    impl Drop for SpawnOnDrop {
        fn drop(&mut self) {
            let guard = DropGuard(self.0.clone(), "late");
            let polled = self.1.clone();
            drop(spawn_local(async move {
                let _guard = guard;
                polled.store(true, Ordering::SeqCst);
            }));
        }
    }
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let log = DropLog::default();
    let polled = Arc::new(AtomicBool::new(false));
    let (l, p) = (log.clone(), polled.clone());
    reactors
        .run_on(core, move |ctx| ctx.set_local(SpawnOnDrop(l, p)))
        .unwrap();
    reactors.stop().unwrap();
    assert_eq!(log.lock().unwrap().as_slice(), &[("late", Some(core))]);
    assert!(!polled.load(Ordering::SeqCst));
}

#[test]
fn tasks_spawn_tasks_from_inside() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    fn tree(depth: u32) -> std::pin::Pin<Box<dyn Future<Output = (u32, bool)>>> {
        Box::pin(async move {
            if depth == 0 {
                return (1, true);
            }
            let here = current_core();
            let left = spawn_local(tree(depth - 1));
            let right = spawn_local(tree(depth - 1));
            let (l, r) = (left.await.unwrap(), right.await.unwrap());
            (l.0 + r.0 + 1, l.1 && r.1 && current_core() == here)
        })
    }
    let root = reactors.spawn_on(core, || tree(6)).unwrap();
    assert_eq!(root.join().unwrap(), (127, true));
    // Published at the end of the turn the root finished in.
    assert!(wait_until(LONG, || stats(&reactors, core).tasks == 0));
    reactors.stop().unwrap();
}

#[test]
fn a_finished_task_is_never_polled_again_however_it_is_woken() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let polls = Arc::new(AtomicU64::new(0));
    // A few turns later: `n` polls in all, no task left, and a new task runs normally.
    let settled = |n: u64| {
        let next = reactors.spawn_on(core, yield_now).unwrap();
        next.join().unwrap();
        assert_eq!(reactors.run_on(core, |ctx| ctx.tasks()).unwrap(), 0);
        assert_eq!(polls.load(Ordering::SeqCst), n);
    };
    let kept: Arc<Mutex<Option<Waker>>> = Arc::default();
    let (p, k) = (polls.clone(), kept.clone());
    // It wakes itself in its last poll: it finishes while on the run queue.
    let handle = reactors
        .spawn_on(core, move || {
            poll_fn(move |cx| {
                p.fetch_add(1, Ordering::SeqCst);
                *k.lock().unwrap() = Some(cx.waker().clone());
                cx.waker().wake_by_ref();
                Poll::Ready(7)
            })
        })
        .unwrap();
    assert_eq!(handle.join().unwrap(), 7);
    let waker = kept.lock().unwrap().take().unwrap();
    // Woken again after it finished: from its own reactor and from this thread.
    let w = waker.clone();
    reactors.run_on(core, move |_| w.wake()).unwrap();
    waker.wake_by_ref();
    settled(1);
    // Detached and holding no waker: the run queue's entry is what keeps it until handed out
    // (under Miri, freeing it at finish is a use after free there).
    let p = polls.clone();
    reactors
        .run_on(core, move |ctx| {
            drop(ctx.spawn(poll_fn(move |cx| {
                p.fetch_add(1, Ordering::SeqCst);
                cx.waker().wake_by_ref();
                Poll::Ready(())
            })))
        })
        .unwrap();
    settled(2);
    reactors.stop().unwrap();
    // The last reference to the first task, dropped off its reactor after the reactor stopped.
    drop(waker);
}

#[test]
fn join_handles_block_plain_threads_and_refuse_reactors() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), ReactorsOptions::default()).unwrap();
    let core = *reactors.cores().last().unwrap();
    let counter = Arc::new(Counter::default());
    let c = counter.clone();
    let handle = reactors
        .spawn_on(core, move || async move {
            c.reach(1).await;
            vec![1u8, 2, 3]
        })
        .unwrap();
    let joiner = thread::spawn(move || handle.join());
    thread::sleep(Duration::from_millis(10));
    assert!(!joiner.is_finished());
    counter.bump();
    assert_eq!(joiner.join().unwrap().unwrap(), vec![1, 2, 3]);
    // On a reactor of the group, blocking would deadlock.
    let refused = reactors
        .run_on(core, |ctx| {
            matches!(
                ctx.spawn(async {}).join(),
                Err(ReactorError::WouldDeadlock { .. })
            )
        })
        .unwrap();
    assert!(refused);
    reactors.stop().unwrap();
}

#[test]
fn a_panicking_task_stops_the_group_and_resolves_its_neighbours() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let neighbour = reactors.spawn_on(core, pending::<()>).unwrap();
    let boom = reactors
        .spawn_on(core, || async {
            yield_now().await;
            panic!("task panics on purpose");
        })
        .unwrap();
    assert!(matches!(
        reactors.wait(),
        Err(ReactorError::Panicked { core: c }) if c == core
    ));
    assert!(matches!(
        neighbour.join(),
        Err(ReactorError::Panicked { .. })
    ));
    assert!(matches!(boom.join(), Err(ReactorError::Panicked { .. })));
}

#[test]
#[should_panic(expected = "outside a reactor thread")]
fn spawn_local_off_a_reactor_panics() {
    drop(spawn_local(async {}));
}

#[test]
#[should_panic(expected = "outside a reactor thread")]
fn sleep_polled_off_a_reactor_panics() {
    let mut s = pin!(sleep(Duration::from_millis(1)));
    let _ = s.as_mut().poll(&mut Context::from_waker(Waker::noop()));
}

/// Counts heap allocations per thread (this test binary only).
struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn count_alloc() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: both methods forward to `System` with the caller's arguments unchanged; counting
// touches a const-initialised thread-local that never allocates. `realloc` and `alloc_zeroed`
// keep their default bodies, which go through `alloc` (and so are counted).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_alloc();
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Runs `round(n)` for n = 1, 2, ...; returns the allocations on this thread after warm-up.
async fn allocations_after_warmup(mut round: impl AsyncFnMut(u64)) -> u64 {
    const WARM: u64 = 200;
    const ROUNDS: u64 = 2000;
    let mut start = 0;
    for n in 1..=WARM + ROUNDS {
        if n == WARM {
            start = allocs();
        }
        round(n).await;
    }
    allocs() - start
}

#[test]
fn steady_state_wakes_polls_and_timers_do_not_allocate() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), ReactorsOptions::default()).unwrap();
    let (a, b) = (reactors.cores()[0], *reactors.cores().last().unwrap());
    let (ping, pong) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
    // Ping-pong across cores (a local wake on a one-core machine), with a yield and a timer
    // each round; each side counts its reactor thread's allocations.
    let (pi, po) = (ping.clone(), pong.clone());
    let ponger = reactors
        .spawn_on(b, move || async move {
            allocations_after_warmup(async |n| {
                pi.reach(n).await;
                po.bump();
            })
            .await
        })
        .unwrap();
    let pinger = reactors
        .spawn_on(a, move || async move {
            allocations_after_warmup(async |n| {
                ping.bump();
                pong.reach(n).await;
                yield_now().await;
                sleep(Duration::ZERO).await;
            })
            .await
        })
        .unwrap();
    assert_eq!(
        pinger.join().unwrap(),
        0,
        "allocations on the pinging reactor"
    );
    assert_eq!(
        ponger.join().unwrap(),
        0,
        "allocations on the ponging reactor"
    );
    reactors.stop().unwrap();
}

#[test]
fn spawning_allocates_the_task_and_its_handles_cell_only() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let spawned = reactors
        .spawn_on(reactors.cores()[0], || async {
            // Warm-up: the slab and the run queue grow to what the counted spawn needs.
            for _ in 0..2 {
                let warm: Vec<_> = (0..4).map(|i| spawn_local(async move { i })).collect();
                for handle in warm {
                    handle.await.unwrap();
                }
            }
            // A future larger than a line, holding a value that needs dropping.
            let payload = [7u8; 100];
            let held = Rc::new(3);
            let before = allocs();
            let handle = spawn_local(async move { payload[99] as u32 + *held });
            let allocations = allocs() - before;
            (allocations, handle.await.unwrap())
        })
        .unwrap();
    // One for the task (header and future together), one for the handle's cell.
    assert_eq!(spawned.join().unwrap(), (2, 10));
    reactors.stop().unwrap();
}
