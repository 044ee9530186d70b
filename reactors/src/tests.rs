//! Reactor group tests. They run one at a time (`serial()`): the machine may have only two
//! cores, and timing checks must not compete with each other.

use std::cell::Cell;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::*;

pub(crate) fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// All cores this process may use (2 on the project machines), and the first one alone.
pub(crate) fn all_cores() -> CoreMask {
    CoreMask::available().unwrap()
}

pub(crate) fn one_core() -> CoreMask {
    CoreMask::from_cores([all_cores().first()]).unwrap()
}

pub(crate) fn interrupt_opts(idle: Duration) -> ReactorsOptions {
    ReactorsOptions {
        interrupt_idle: Some(idle),
        ..ReactorsOptions::default()
    }
}

pub(crate) fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < timeout {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// What a receiving reactor records: (sender id, sequence number).
type Log = Vec<(u32, u32)>;

fn check_order(log: &Log, senders: &[u32], per_sender: u32) {
    for &s in senders {
        let seqs: Vec<u32> = log.iter().filter(|(id, _)| *id == s).map(|x| x.1).collect();
        assert_eq!(seqs.len(), per_sender as usize, "sender {s}: wrong count");
        assert!(
            seqs.iter().enumerate().all(|(i, &q)| i as u32 == q),
            "sender {s}: messages out of order"
        );
    }
}

fn order_under_load(mask: CoreMask, opts: ReactorsOptions) {
    const THREADS: u32 = 4;
    const PER_SENDER: u32 = 20_000;
    let reactors = Reactors::start(mask, opts).unwrap();
    let cores = reactors.cores().to_vec();
    reactors
        .run_on_all(|ctx| ctx.set_local(Log::new()))
        .unwrap();
    // Reactors send to every reactor (themselves included) while outside threads do too.
    let reactor_senders = {
        let cores = cores.clone();
        reactors.handle().run_on_all(move |ctx| {
            let me = 100 + ctx.core();
            let targets = cores.clone();
            // Send from a poller so that the reactor keeps draining its own inbox meanwhile.
            let mut seq = 0u32;
            ctx.register_poller("sender", move |ctx| {
                for _ in 0..256 {
                    if seq == PER_SENDER {
                        return PollerResult::Idle;
                    }
                    for &t in &targets {
                        let q = seq;
                        ctx.send(t, move |ctx| ctx.local::<Log>().unwrap().push((me, q)))
                            .unwrap();
                    }
                    seq += 1;
                }
                PollerResult::Busy
            });
            me
        })
    }
    .unwrap();
    let handles: Vec<_> = (0..THREADS)
        .map(|id| {
            let h = reactors.handle();
            let cores = cores.clone();
            thread::spawn(move || {
                for seq in 0..PER_SENDER {
                    for &c in &cores {
                        h.send(c, move |ctx| ctx.local::<Log>().unwrap().push((id, seq)))
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Wait for the reactor senders to finish, then collect.
    let expect = (THREADS + reactor_senders.len() as u32) * PER_SENDER;
    assert!(wait_until(Duration::from_secs(60), || {
        reactors
            .run_on_all(|ctx| ctx.local::<Log>().unwrap().len() as u32)
            .unwrap()
            .iter()
            .all(|&n| n == expect)
    }));
    let logs = reactors
        .run_on_all(|ctx| ctx.take_local::<Log>().unwrap())
        .unwrap();
    let mut senders: Vec<u32> = (0..THREADS).collect();
    senders.extend(&reactor_senders);
    for log in &logs {
        check_order(log, &senders, PER_SENDER);
    }
    let stats = reactors.stop().unwrap();
    for s in &stats {
        assert!(s.messages >= expect as u64, "{s:?}");
    }
}

#[test]
fn message_order_per_sender_under_load_all_cores() {
    let _s = serial();
    order_under_load(all_cores(), ReactorsOptions::default());
}

#[test]
fn message_order_per_sender_under_load_one_core_interrupt_mode() {
    let _s = serial();
    order_under_load(one_core(), interrupt_opts(Duration::from_micros(100)));
}

#[test]
fn threads_are_named_and_pinned() {
    let _s = serial();
    let mask = all_cores();
    let reactors = Reactors::start(mask.clone(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let seen = reactors
        .run_on_all(|ctx| {
            (
                ctx.core(),
                ctx.index(),
                thread::current().name().map(str::to_string),
                sys::current_thread_cores().unwrap(),
                CoreMask::available().unwrap(),
                current_core(),
            )
        })
        .unwrap();
    for (i, (core, index, name, affinity, process, current)) in seen.into_iter().enumerate() {
        assert_eq!(core, mask.cores()[i]);
        // A pinned reactor still sees the process's whole set when it parses masks.
        assert_eq!(process, mask);
        assert_eq!(index, i);
        assert_eq!(name, Some(format!("reactor_{core}")));
        assert_eq!(affinity, vec![core]);
        assert_eq!(current, Some(core));
    }
    assert_eq!(current_core(), None);
    reactors.stop().unwrap();
}

#[test]
fn poller_registration_from_inside_pollers() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let a_runs = Arc::new(AtomicU32::new(0));
    let c_runs = Arc::new(AtomicU32::new(0));
    let e_runs = Arc::new(AtomicU32::new(0));
    let second_unregister = Arc::new(AtomicBool::new(true));
    {
        let (a_runs, c_runs, e_runs) = (a_runs.clone(), c_runs.clone(), e_runs.clone());
        let second_unregister = second_unregister.clone();
        reactors
            .run_on(core, move |ctx| {
                // A: unregisters itself after 10 runs.
                let a_id: Rc<Cell<Option<PollerId>>> = Rc::default();
                let a_id2 = a_id.clone();
                let id = ctx.register_poller("a", move |ctx| {
                    if a_runs.fetch_add(1, Ordering::SeqCst) + 1 == 10 {
                        assert!(ctx.unregister_poller(a_id2.get().unwrap()));
                        // A second unregistration of the same id is refused.
                        second_unregister.store(
                            ctx.unregister_poller(a_id2.get().unwrap()),
                            Ordering::SeqCst,
                        );
                    }
                    true
                });
                a_id.set(Some(id));
                // B: on its first run unregisters C, which comes later in the same pass.
                let c_id: Rc<Cell<Option<PollerId>>> = Rc::default();
                let c_id2 = c_id.clone();
                ctx.register_poller("b", move |ctx| {
                    if let Some(id) = c_id2.take() {
                        assert!(ctx.unregister_poller(id));
                    }
                    PollerResult::Idle
                });
                let id = ctx.register_poller("c", move |_| {
                    c_runs.fetch_add(1, Ordering::SeqCst);
                    PollerResult::Idle
                });
                c_id.set(Some(id));
                // D: registers E from inside, then unregisters itself.
                let d_id: Rc<Cell<Option<PollerId>>> = Rc::default();
                let d_id2 = d_id.clone();
                let id = ctx.register_poller("d", move |ctx| {
                    let e_runs = e_runs.clone();
                    ctx.register_timed_poller("e", Duration::from_millis(1), move |_| {
                        e_runs.fetch_add(1, Ordering::SeqCst);
                        PollerResult::Busy
                    });
                    ctx.unregister_poller(d_id2.get().unwrap());
                    PollerResult::Busy
                });
                d_id.set(Some(id));
                assert_eq!(ctx.pollers().len(), 4);
            })
            .unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || e_runs
        .load(Ordering::SeqCst)
        >= 5));
    thread::sleep(Duration::from_millis(20));
    assert_eq!(a_runs.load(Ordering::SeqCst), 10);
    assert_eq!(c_runs.load(Ordering::SeqCst), 0);
    assert!(!second_unregister.load(Ordering::SeqCst));
    let names = reactors
        .run_on(core, |ctx| {
            let mut v: Vec<String> = ctx.pollers().iter().map(|p| p.name.clone()).collect();
            v.sort();
            v
        })
        .unwrap();
    assert_eq!(names, vec!["b".to_string(), "e".to_string()]);
    let infos = reactors.run_on(core, |ctx| ctx.pollers()).unwrap();
    let b = infos.iter().find(|p| p.name == "b").unwrap();
    let e = infos.iter().find(|p| p.name == "e").unwrap();
    assert!(
        b.runs > 0 && b.busy_runs == 0 && b.period.is_none(),
        "{b:?}"
    );
    assert!(e.runs >= 5 && e.busy_runs == e.runs, "{e:?}");
    assert_eq!(e.period, Some(Duration::from_millis(1)));
    let st = reactors.stats(core).unwrap();
    assert_eq!((st.active_pollers, st.timed_pollers), (1, 1));
    reactors.stop().unwrap();
}

#[test]
fn stop_runs_pending_messages() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (blocked_tx, blocked_rx) = mpsc::channel::<()>();
    reactors
        .send(core, move |_| {
            blocked_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        })
        .unwrap();
    blocked_rx.recv().unwrap();
    let ran = Arc::new(AtomicU32::new(0));
    let self_send_refused = Arc::new(AtomicU32::new(0));
    let saw_stopping = Arc::new(AtomicU32::new(0));
    for _ in 0..1000 {
        let ran = ran.clone();
        let refused = self_send_refused.clone();
        let saw_stopping = saw_stopping.clone();
        reactors
            .send(core, move |ctx| {
                ran.fetch_add(1, Ordering::SeqCst);
                if ctx.is_stopping() {
                    saw_stopping.fetch_add(1, Ordering::SeqCst);
                }
                // Sending during the final drain is refused, never queued and lost.
                if let Err(ReactorError::Stopped { .. }) = ctx.send(ctx.core(), |_| {}) {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap();
    }
    reactors.request_stop();
    assert!(reactors.is_stopping());
    assert!(matches!(
        reactors.send(core, |_| {}),
        Err(ReactorError::Stopped { .. })
    ));
    release_tx.send(()).unwrap();
    let stats = reactors.stop().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1000);
    assert_eq!(self_send_refused.load(Ordering::SeqCst), 1000);
    // The rest of the blocker's batch (msg_batch = 64) runs in its turn; all later messages
    // run in the final drain.
    assert!(saw_stopping.load(Ordering::SeqCst) >= 1000 - 64);
    assert_eq!(stats[0].messages, 1001);
    assert_eq!(stats[0].active_pollers, 0);
}

/// Every send that returned Ok runs, even when stop races with the senders.
#[test]
fn accepted_messages_run_when_stop_races_senders() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), ReactorsOptions::default()).unwrap();
    let ran = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = (0..3)
        .map(|i| {
            let h = reactors.handle();
            let (ran, accepted) = (ran.clone(), accepted.clone());
            thread::spawn(move || {
                let cores = h.cores().to_vec();
                let mut n = 0usize;
                loop {
                    let ran = ran.clone();
                    let core = cores[(n + i) % cores.len()];
                    match h.send(core, move |_| {
                        ran.fetch_add(1, Ordering::Relaxed);
                    }) {
                        Ok(()) => accepted.fetch_add(1, Ordering::Relaxed),
                        Err(ReactorError::Stopped { .. }) => break,
                        Err(e) => panic!("{e}"),
                    };
                    n += 1;
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(30));
    reactors.stop().unwrap();
    for s in senders {
        s.join().unwrap();
    }
    let accepted = accepted.load(Ordering::SeqCst);
    assert!(accepted > 0);
    assert_eq!(ran.load(Ordering::SeqCst), accepted);
}

#[test]
fn locals_and_pollers_drop_on_their_reactor_at_stop() {
    let _s = serial();
    struct OnDrop(Arc<Mutex<Vec<Option<u32>>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(current_core());
        }
    }
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let reactors = Reactors::start(all_cores(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let d = dropped.clone();
    reactors
        .run_on_all(move |ctx| {
            ctx.set_local(OnDrop(d.clone()));
            let guard = OnDrop(d.clone());
            ctx.register_poller("holder", move |_| {
                let _ = &guard;
                PollerResult::Idle
            });
        })
        .unwrap();
    let cores = reactors.cores().to_vec();
    reactors.stop().unwrap();
    let mut seen = dropped.lock().unwrap().clone();
    seen.sort();
    let mut expect: Vec<Option<u32>> = cores.iter().flat_map(|&c| [Some(c), Some(c)]).collect();
    expect.sort();
    assert_eq!(seen, expect);
}

#[test]
fn locals_are_typed() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let out = reactors
        .run_on(core, |ctx| {
            assert!(ctx.local::<u32>().is_none());
            assert_eq!(ctx.set_local(5u32), None);
            assert_eq!(ctx.set_local(6u32), Some(5));
            *ctx.local_or_insert_with(|| String::from("a")) += "b";
            *ctx.local_or_insert_with(|| String::from("x")) += "c";
            *ctx.local::<u32>().unwrap() += 1;
            (
                ctx.take_local::<u32>(),
                ctx.take_local::<String>(),
                ctx.take_local::<u32>(),
            )
        })
        .unwrap();
    assert_eq!(out, (Some(7), Some("abc".to_string()), None));
    reactors.stop().unwrap();
}

#[test]
fn interrupt_mode_sleeps_without_cpu_and_wakes_on_message() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(2))).unwrap();
    let core = reactors.cores()[0];
    assert!(wait_until(Duration::from_secs(5), || reactors.is_sleeping(core)));
    let cpu0 = reactors.run_on(core, |_| thread_cpu_time_ns()).unwrap();
    let st0 = reactors.stats(core).unwrap();
    thread::sleep(Duration::from_millis(200));
    // The round trip itself wakes the reactor: that is the wake-on-message check.
    let t = Instant::now();
    let cpu1 = reactors.run_on(core, |_| thread_cpu_time_ns()).unwrap();
    let wake_latency = t.elapsed();
    let st1 = reactors.stats(core).unwrap();
    let cpu_ms = (cpu1 - cpu0) as f64 / 1e6;
    assert!(
        cpu_ms < 20.0,
        "idle reactor burned {cpu_ms:.1} ms CPU in 200 ms"
    );
    assert!(wake_latency < Duration::from_secs(1), "{wake_latency:?}");
    let d = st1.since(&st0);
    assert!(d.wakeups >= 1, "{d:?}");
    assert!(d.busy_ns < 20_000_000, "{d:?}");
    // Stats are published before sleeping, so the sleep shows up once woken.
    assert!(d.sleep_ns >= 150_000_000, "{d:?}");
    // Goes back to sleep, and a message from another thread wakes it again.
    assert!(wait_until(Duration::from_secs(5), || reactors.is_sleeping(core)));
    let (tx, rx) = mpsc::channel();
    reactors
        .send(core, move |ctx| tx.send(ctx.core()).unwrap())
        .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(core));
    reactors.stop().unwrap();
}

#[test]
fn busy_polling_reactor_burns_cpu() {
    // The contrast to the interrupt-mode test: without interrupt mode the reactor spins.
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    let cpu0 = reactors.run_on(core, |_| thread_cpu_time_ns()).unwrap();
    thread::sleep(Duration::from_millis(100));
    let cpu1 = reactors.run_on(core, |_| thread_cpu_time_ns()).unwrap();
    assert!(!reactors.is_sleeping(core));
    assert!(cpu1 - cpu0 > 10_000_000, "{} ns", cpu1 - cpu0);
    let st = reactors.stop().unwrap();
    assert_eq!(st[0].wakeups, 0);
    assert_eq!(st[0].sleep_ns, 0);
    assert!(st[0].idle_ns > st[0].busy_ns, "{:?}", st[0]);
}

fn timed_poller_period(opts: ReactorsOptions) {
    let interrupt = opts.interrupt_idle.is_some();
    const PERIOD: Duration = Duration::from_millis(10);
    let reactors = Reactors::start(one_core(), opts).unwrap();
    let core = reactors.cores()[0];
    let runs = Arc::new(Mutex::new(Vec::<u64>::new()));
    let r = runs.clone();
    let started = reactors
        .run_on(core, move |ctx| {
            ctx.register_timed_poller("tick", PERIOD, move |ctx| {
                r.lock().unwrap().push(ctx.now_ns());
                PollerResult::Idle
            });
            ctx.now_ns()
        })
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    let elapsed = now_ns() - started;
    let stats = reactors.stop().unwrap();
    let runs = runs.lock().unwrap().clone();
    let expect = elapsed as f64 / PERIOD.as_nanos() as f64;
    assert!(
        runs.len() as f64 >= expect * 0.5 && runs.len() as f64 <= expect + 2.0,
        "{} runs in {elapsed} ns",
        runs.len()
    );
    assert!(runs[0] >= started + PERIOD.as_nanos() as u64);
    // Never early and no catch-up bursts: run k happens no earlier than k+1 periods after
    // registration (due times keep their phase; a late run does not add extra runs).
    for (k, &t) in runs.iter().enumerate() {
        assert!(
            t >= started + (k as u64 + 1) * PERIOD.as_nanos() as u64,
            "{runs:?}"
        );
    }
    if interrupt {
        // Slept between ticks: woken by the timer about once per period.
        assert!(stats[0].wakeups as usize >= runs.len() / 2, "{stats:?}");
    }
}

#[test]
fn timed_poller_fires_at_its_period_busy_polling() {
    let _s = serial();
    timed_poller_period(ReactorsOptions::default());
}

#[test]
fn timed_poller_fires_at_its_period_in_interrupt_mode() {
    let _s = serial();
    timed_poller_period(interrupt_opts(Duration::from_millis(1)));
}

#[test]
fn messages_between_reactors() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let cores = reactors.cores().to_vec();
    let (tx, rx) = mpsc::channel();
    // A ball passed 1000 times around all reactors.
    fn pass(ctx: &mut ReactorCtx, hops: u32, path: Vec<u32>, tx: mpsc::Sender<Vec<u32>>) {
        let mut path = path;
        path.push(ctx.core());
        if hops == 0 {
            tx.send(path).unwrap();
            return;
        }
        let cores = ctx.handle().cores();
        let next = cores[(ctx.index() + 1) % cores.len()];
        ctx.send(next, move |ctx| pass(ctx, hops - 1, path, tx))
            .unwrap();
    }
    reactors
        .send(cores[0], move |ctx| pass(ctx, 999, Vec::new(), tx))
        .unwrap();
    let path = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(path.len(), 1000);
    for (i, c) in path.iter().enumerate() {
        assert_eq!(*c, cores[i % cores.len()]);
    }
    reactors.stop().unwrap();
}

#[test]
fn busy_and_idle_time_are_accounted() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    thread::sleep(Duration::from_millis(50));
    let idle = reactors.stats(core).unwrap();
    assert!(idle.busy_pct() < 50.0, "{idle:?}");
    reactors
        .run_on(core, |ctx| {
            ctx.register_poller("spin", |_| {
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(20) {}
                true
            })
        })
        .unwrap();
    thread::sleep(Duration::from_millis(100));
    let busy = reactors.stats(core).unwrap().since(&idle);
    assert!(busy.busy_pct() > 80.0, "{busy:?}");
    assert_eq!(busy.active_pollers, 1);
    assert!(busy.turns > 0 && busy.messages >= 1);
    reactors.stop().unwrap();
}

#[test]
fn errors_are_typed() {
    let _s = serial();
    let avail = all_cores();
    // A core this machine does not have.
    let missing = CoreMask::from_cores([avail.last() + 1]).unwrap();
    match Reactors::start(missing, ReactorsOptions::default()) {
        Err(ReactorError::CoreMask(CoreMaskError::Unavailable { core, .. })) => {
            assert_eq!(core, avail.last() + 1)
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("started on a missing core"),
    }
    let bad = ReactorsOptions {
        msg_batch: 0,
        ..ReactorsOptions::default()
    };
    assert!(matches!(
        Reactors::start(one_core(), bad),
        Err(ReactorError::InvalidOption {
            name: "msg_batch",
            ..
        })
    ));
    let bad = ReactorsOptions {
        thread_name_prefix: "a-very-long-prefix".into(),
        ..ReactorsOptions::default()
    };
    assert!(matches!(
        Reactors::start(one_core(), bad),
        Err(ReactorError::InvalidOption { .. })
    ));

    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let other = avail.last() + 5;
    let e = reactors.send(other, |_| {}).unwrap_err();
    assert!(matches!(e, ReactorError::UnknownCore { core, .. } if core == other));
    assert!(
        e.to_string()
            .contains(&format!("core {other} has no reactor"))
    );
    assert!(reactors.stats(other).is_none());
    // Blocking on the group from one of its reactors is refused instead of deadlocking.
    let h = reactors.handle();
    let r = reactors
        .run_on(core, move |_| {
            h.run_on(core, |_| ()).map_err(|e| e.to_string())
        })
        .unwrap();
    assert!(r.unwrap_err().contains("would deadlock"));
    reactors.stop().unwrap();
}

#[test]
fn panicking_message_is_reported() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let r = reactors.run_on(core, |_| -> u32 { panic!("boom (expected by the test)") });
    assert!(matches!(r, Err(ReactorError::Panicked { .. })), "{r:?}");
    // The group is stopping: further sends are refused, not queued forever.
    assert!(wait_until(Duration::from_secs(5), || reactors.is_stopping()));
    assert!(reactors.send(core, |_| {}).is_err());
    let h = reactors.handle();
    assert!(matches!(
        reactors.stop(),
        Err(ReactorError::Panicked { core: c }) if c == core
    ));
    assert!(h.is_stopping());
}

#[test]
fn wait_returns_after_stop_requested_from_a_reactor() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let last = *reactors.cores().last().unwrap();
    reactors
        .send(last, |ctx| ctx.handle().request_stop())
        .unwrap();
    let stats = reactors.wait().unwrap();
    assert_eq!(stats.len(), all_cores().len());
}

/// With zero idle time the reactor tries to sleep after every idle turn. The sender spins on
/// the reply and sends again after a short random delay, so sends land all over the reactor's
/// way into sleep: a lost wake-up (message queued just as it decides to sleep, eventfd not
/// written) leaves a reply missing and fails here.
#[test]
fn interrupt_mode_never_loses_a_wakeup() {
    let _s = serial();
    let mask = one_core();
    let reactor_core = mask.first();
    let reactors = Reactors::start(mask, interrupt_opts(Duration::ZERO)).unwrap();
    let sender_core = all_cores()
        .cores()
        .iter()
        .copied()
        .find(|&c| c != reactor_core);
    let h = reactors.handle();
    let lost = thread::spawn(move || {
        if let Some(c) = sender_core {
            sys::pin_current_thread(c).unwrap();
        }
        let reply = Arc::new(AtomicU32::new(u32::MAX));
        let mut rng = 0x9e37_79b9_u32;
        for i in 0..20_000u32 {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            let spin_until = Instant::now() + Duration::from_nanos((rng % 4000) as u64);
            while Instant::now() < spin_until {
                std::hint::spin_loop();
            }
            let r = reply.clone();
            h.send(reactor_core, move |_| r.store(i, Ordering::Release))
                .unwrap();
            let t = Instant::now();
            while reply.load(Ordering::Acquire) != i {
                if t.elapsed() > Duration::from_secs(2) {
                    return Some(i);
                }
                std::hint::spin_loop();
            }
        }
        None
    })
    .join()
    .unwrap();
    assert_eq!(lost, None, "message not run: lost wake-up");
    let stats = reactors.stop().unwrap();
    assert!(stats[0].wakeups > 100, "{stats:?}");
}

#[test]
fn interrupt_mode_can_be_switched_at_run_time() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), ReactorsOptions::default()).unwrap();
    let core = reactors.cores()[0];
    assert_eq!(reactors.interrupt_idle(core), None);
    thread::sleep(Duration::from_millis(20));
    assert!(!reactors.is_sleeping(core));
    reactors
        .set_interrupt_idle(core, Some(Duration::from_millis(1)))
        .unwrap();
    assert_eq!(
        reactors.interrupt_idle(core),
        Some(Duration::from_millis(1))
    );
    // The first sleep can end at once (the switch's own wake-up is still pending), so a
    // single `is_sleeping` sample may be the brief pre-wait flag: wait for both views.
    assert!(wait_until(Duration::from_secs(5), || {
        reactors.is_sleeping(core) && reactors.stats(core).unwrap().sleeping
    }));
    reactors.set_interrupt_idle(core, None).unwrap();
    let woke = reactors.stats(core).unwrap();
    thread::sleep(Duration::from_millis(50));
    let d = reactors.stats(core).unwrap().since(&woke);
    assert!(!reactors.is_sleeping(core));
    assert!(d.wakeups <= 1 && d.turns > 100, "{d:?}");
    assert!(reactors.set_interrupt_idle(core + 100, None).is_err());
    reactors.stop().unwrap();
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Reactors>();
    send_sync::<ReactorsHandle>();
    send_sync::<ReactorStats>();
    send_sync::<ReactorError>();
    send_sync::<CoreMask>();
}

#[test]
fn group_dropped_on_its_own_reactor_does_not_deadlock() {
    let _s = serial();
    let reactors = Reactors::start(all_cores(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let h = reactors.handle();
    let core = h.cores()[0];
    let holder = Arc::new(Mutex::new(Some(reactors)));
    let (tx, rx) = mpsc::channel();
    let hold = holder.clone();
    h.send(core, move |_| {
        let r = hold.lock().unwrap().take().unwrap();
        tx.send(r.stop().is_ok()).unwrap();
    })
    .unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
    assert!(h.is_stopping());
    assert!(wait_until(Duration::from_secs(5), || {
        h.send(core, |_| {}).is_err()
    }));
}

/// A poller on a reactor that reads one end of a socket pair: counts its runs (to tell that
/// the reactor slept: an asleep reactor runs no poller) and the bytes it read.
struct SocketReader {
    runs: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    watch: Option<FdWatch>,
}

fn start_socket_reader(
    reactors: &Reactors,
    core: u32,
    mut rx: UnixStream,
    watch: bool,
) -> SocketReader {
    rx.set_nonblocking(true).unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let (r, b) = (runs.clone(), bytes.clone());
    let watch = reactors
        .run_on(core, move |ctx| {
            let id = watch.then(|| ctx.watch_fd(rx.as_raw_fd(), FdInterest::Read));
            ctx.register_poller("socket_reader", move |_| {
                r.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 64];
                let mut busy = false;
                // Read until WouldBlock: a watched fd left readable wakes the reactor again.
                while let Ok(n @ 1..) = rx.read(&mut buf) {
                    b.fetch_add(n as u64, Ordering::SeqCst);
                    busy = true;
                }
                PollerResult::from(busy)
            });
            id
        })
        .unwrap();
    SocketReader { runs, bytes, watch }
}

/// Waits (10 s at most) until the reactor sleeps, then checks that it stays asleep for
/// `quiet`: no poller run, still sleeping. Returns false if it did not.
fn stays_asleep(reactors: &Reactors, core: u32, runs: &AtomicU64, quiet: Duration) -> bool {
    if !wait_until(Duration::from_secs(10), || reactors.is_sleeping(core)) {
        return false;
    }
    let before = runs.load(Ordering::SeqCst);
    thread::sleep(quiet);
    runs.load(Ordering::SeqCst) == before && reactors.is_sleeping(core)
}

#[test]
fn watched_socket_wakes_a_sleeping_reactor() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let (mut tx, rx) = UnixStream::pair().unwrap();
    let reader = start_socket_reader(&reactors, core, rx, true);
    assert!(reader.watch.is_some());
    assert_eq!(reactors.run_on(core, |ctx| ctx.watched_fds()).unwrap(), 1);
    let st0 = reactors.stats(core).unwrap();
    // Three rounds: each byte wakes the reactor, the poller reads it, and the reactor goes
    // back to sleep (the fd is no longer readable, so it does not spin).
    for round in 1..=3u64 {
        assert!(
            stays_asleep(&reactors, core, &reader.runs, Duration::from_millis(100)),
            "round {round}: reactor not asleep"
        );
        let t = Instant::now();
        tx.write_all(b"x").unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || reader
                .bytes
                .load(Ordering::SeqCst)
                == round),
            "round {round}: byte not read"
        );
        let latency = t.elapsed();
        assert!(
            latency < Duration::from_secs(1),
            "round {round}: {latency:?}"
        );
    }
    assert!(stays_asleep(
        &reactors,
        core,
        &reader.runs,
        Duration::from_millis(50)
    ));
    let d = reactors.stats(core).unwrap().since(&st0);
    assert!(d.fd_wakeups >= 3 && d.wakeups >= d.fd_wakeups, "{d:?}");
    let stats = reactors.stop().unwrap();
    assert!(stats[0].fd_wakeups >= 3, "{stats:?}");
}

#[test]
fn unwatched_socket_does_not_wake_the_reactor() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let (mut tx, rx) = UnixStream::pair().unwrap();
    let reader = start_socket_reader(&reactors, core, rx, true);
    let watch = reader.watch.unwrap();
    let (unwatched, again, count) = reactors
        .run_on(core, move |ctx| {
            (
                ctx.unwatch_fd(watch),
                ctx.unwatch_fd(watch),
                ctx.watched_fds(),
            )
        })
        .unwrap();
    assert_eq!((unwatched, again, count), (true, false, 0));
    assert!(stays_asleep(
        &reactors,
        core,
        &reader.runs,
        Duration::from_millis(50)
    ));
    let st0 = reactors.stats(core).unwrap();
    // Data waits on the socket, but nothing watches it: the reactor sleeps on.
    tx.write_all(b"x").unwrap();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(reader.bytes.load(Ordering::SeqCst), 0);
    assert!(reactors.is_sleeping(core));
    let d = reactors.stats(core).unwrap().since(&st0);
    assert_eq!((d.wakeups, d.fd_wakeups), (0, 0), "{d:?}");
    // A message wakes it; the poller runs after it and finds the byte.
    reactors.send(core, |_| {}).unwrap();
    assert!(wait_until(Duration::from_secs(10), || reader
        .bytes
        .load(Ordering::SeqCst)
        == 1));
    let stats = reactors.stop().unwrap();
    assert_eq!(stats[0].fd_wakeups, 0, "{stats:?}");
}

/// A connection's pattern: watch for `Write` while output is queued, back to `Read` once sent.
#[test]
fn write_interest_wakes_when_the_socket_becomes_writable() {
    let _s = serial();
    let reactors = Reactors::start(one_core(), interrupt_opts(Duration::from_millis(1))).unwrap();
    let core = reactors.cores()[0];
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    tx.set_nonblocking(true).unwrap();
    rx.set_nonblocking(true).unwrap();
    // Fill the socket so that it is not writable.
    let chunk = [0u8; 4096];
    let mut filled = 0usize;
    loop {
        match tx.write(&chunk) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    let runs = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicBool::new(false));
    let (r, s) = (runs.clone(), sent.clone());
    reactors
        .run_on(core, move |ctx| {
            let watch = ctx.watch_fd(tx.as_raw_fd(), FdInterest::Write);
            ctx.register_poller("socket_writer", move |ctx| {
                r.fetch_add(1, Ordering::SeqCst);
                if s.load(Ordering::SeqCst) {
                    return PollerResult::Idle;
                }
                match tx.write(b"y") {
                    Ok(1) => {
                        s.store(true, Ordering::SeqCst);
                        // Output sent: a writable socket must not keep waking the reactor.
                        assert!(ctx.set_fd_interest(watch, FdInterest::Read));
                        PollerResult::Busy
                    }
                    _ => PollerResult::Idle,
                }
            });
        })
        .unwrap();
    // Full socket, Write interest: the reactor sleeps.
    assert!(
        stays_asleep(&reactors, core, &runs, Duration::from_millis(100)),
        "reactor not asleep on a full socket"
    );
    assert!(!sent.load(Ordering::SeqCst));
    let st0 = reactors.stats(core).unwrap();
    // Drain the peer: the socket becomes writable and wakes the reactor.
    let t = Instant::now();
    let mut buf = vec![0u8; 64 * 1024];
    let mut drained = 0usize;
    while drained < filled {
        match rx.read(&mut buf) {
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(wait_until(Duration::from_secs(10), || sent.load(Ordering::SeqCst)));
    let latency = t.elapsed();
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    let d = reactors.stats(core).unwrap().since(&st0);
    assert!(d.fd_wakeups >= 1, "{d:?}");
    // Interest back to Read: the reactor sleeps again though the socket stays writable.
    assert!(stays_asleep(
        &reactors,
        core,
        &runs,
        Duration::from_millis(100)
    ));
    let mut y = [0u8; 1];
    assert!(wait_until(Duration::from_secs(10), || rx
        .read(&mut y)
        .is_ok()));
    assert_eq!(&y, b"y");
    reactors.stop().unwrap();
}
