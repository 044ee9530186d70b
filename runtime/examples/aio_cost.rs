//! CPU per I/O of the async path against the poller path (issue 17, part 5): one reactor, a
//! null bdev, 4 KiB random reads, QD 128. Async: 128 tasks each looping `bdev.read().await`.
//! Poller: one poller over a `BdevQueue` that reaps a batch and resubmits it under one plug,
//! I/O by I/O (`submit`), or the whole batch in one `submit_with` (pmio-perf's path).
//! Wakes: no I/O, the same 128 tasks each waiting for a wake a poller gives every turn — the
//! executor's share of the async path (a task woken and polled once per I/O).
//! Rounds alternate; each measures the reactor thread's CPU time over the I/Os (wakes) done.
//!
//! `cargo run --release -p pmio-runtime --example aio_cost -- [--rounds 5] [--secs 2] [--core N] [--qd 128]`

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use pmio::aio::BufPool;
use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::dma::{DmaPool, DmaPoolOptions};
use pmio::plug::Plug;
use pmio::{Io, IoBuf, Op};
use pmio_reactors::{
    CoreMask, PollerId, PollerResult, ReactorCtx, Reactors, ReactorsOptions, spawn_local,
    thread_cpu_time_ns,
};
use pmio_runtime::{Bdev, registry};

mod common;

/// I/Os in flight (`--qd`, default 128: the figure).
fn qd() -> u32 {
    static QD: std::sync::LazyLock<u32> =
        std::sync::LazyLock::new(|| common::number("--qd", 128) as u32);
    *QD
}
const BS: usize = 4096;
const DEV: &str = "CostNull0";

/// The reactor-local state of a round: I/Os done, and the flag that ends the round.
#[derive(Clone, Default)]
struct Round {
    ios: Rc<Cell<u64>>,
    stop: Rc<Cell<bool>>,
    /// Set once the round's I/O has drained and its handles are closed.
    closed: Rc<Cell<bool>>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    Async,
    Poller,
    PollerBatch,
    Wakes,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds = common::number("--rounds", 5);
    let secs = common::number("--secs", 2);
    // `--only async|poller|pollerbatch|wakes`: one path (for a profiler).
    let only = common::value("--only");
    let core = common::number("--core", u64::from(CoreMask::available()?.first())) as u32;

    registry().register(pmio_null::NullDevice::new(pmio_null::NullOptions {
        name: DEV.into(),
        ..Default::default()
    })?)?;
    // Every task of a turn in one poll pass (so both paths reap and resubmit 128 per turn).
    let opts = ReactorsOptions {
        task_budget: 2 * qd() as usize,
        ..ReactorsOptions::default()
    };
    let reactors = Reactors::start(CoreMask::from_cores([core])?, opts)?;
    println!(
        "null bdev, 4 KiB random reads, QD {}, one reactor on core {core}, {secs} s per round",
        qd()
    );
    let mut results: Vec<(Path, f64)> = Vec::new();
    for round in 0..rounds {
        for path in [Path::Async, Path::Poller, Path::PollerBatch, Path::Wakes] {
            if only
                .as_ref()
                .is_some_and(|o| !format!("{path:?}").eq_ignore_ascii_case(o))
            {
                continue;
            }
            let ns = measure(&reactors, core, path, Duration::from_secs(secs))?;
            println!("round {round}: {path:?}: {ns:.1} ns CPU/IO");
            results.push((path, ns));
        }
    }
    if only.is_some() {
        reactors.stop()?;
        return Ok(());
    }
    let median = |p: Path| {
        let mut v: Vec<f64> = results.iter().filter(|r| r.0 == p).map(|r| r.1).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, p, b) = (
        median(Path::Async),
        median(Path::Poller),
        median(Path::PollerBatch),
    );
    println!(
        "median ns CPU/IO: async {a:.1}, poller {p:.1}, poller submit_with {b:.1}, wakes only {:.1}; async/poller {:.2}x, async/submit_with {:.2}x",
        median(Path::Wakes),
        a / p,
        a / b
    );
    reactors.stop()?;
    Ok(())
}

/// Runs one round of `path` on the reactor: warm-up, then `secs` measured; returns ns of the
/// reactor thread's CPU per I/O.
fn measure(
    reactors: &Reactors,
    core: u32,
    path: Path,
    secs: Duration,
) -> Result<f64, Box<dyn std::error::Error>> {
    reactors.run_on(core, move |ctx| {
        let round = Round::default();
        ctx.set_local(round.clone());
        match path {
            Path::Async => start_tasks(ctx, round),
            Path::Poller | Path::PollerBatch => start_poller(ctx, round, path == Path::PollerBatch),
            Path::Wakes => start_wakes(ctx, round),
        }
    })?;
    let sample = || {
        reactors.run_on(core, |ctx| {
            let ios = ctx.local::<Round>().expect("a round").ios.get();
            (thread_cpu_time_ns(), ios)
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (cpu0, ios0) = sample()?;
    std::thread::sleep(secs);
    let (cpu1, ios1) = sample()?;
    reactors.run_on(core, |ctx| {
        ctx.local::<Round>().expect("a round").stop.set(true)
    })?;
    while !reactors.run_on(core, |ctx| {
        ctx.local::<Round>().expect("a round").closed.get()
    })? {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((cpu1 - cpu0) as f64 / (ios1 - ios0) as f64)
}

/// A xorshift step: the random 4 KiB-aligned block, below `8 * (mask + 1)` (`lba_mask`).
#[inline]
fn next_lba(rng: &mut u64, mask: u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    (*rng & mask) * 8
}

/// The mask `next_lba` takes for a device of `num_blocks` 512-byte blocks: its 4 KiB chunks
/// are a power of two (the null device's 1 GiB), so both paths draw a block with a mask, not a
/// division (which cost each path about 1 ns an I/O).
fn lba_mask(num_blocks: u64) -> u64 {
    let chunks = num_blocks / 8;
    assert!(
        chunks.is_power_of_two(),
        "{num_blocks} blocks: not a power of two of 4 KiB"
    );
    chunks - 1
}

/// The async path: `qd()` tasks, each looping over `read().await` with its own buffer.
fn start_tasks(ctx: &mut ReactorCtx, round: Round) {
    let _parent = ctx.spawn(async move {
        let bdev = Bdev::open(DEV).expect("open");
        let pool = BufPool::new(DmaPoolOptions {
            count: qd(),
            buf_size: BS,
            ..Default::default()
        })
        .expect("buffers");
        let tasks: Vec<_> = (0..qd())
            .map(|t| {
                let (bdev, round) = (bdev.clone(), round.clone());
                let mut buf = pool.get().expect("a buffer");
                spawn_local(async move {
                    let mask = lba_mask(bdev.num_blocks());
                    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(t + 1);
                    while !round.stop.get() {
                        let (res, back) = bdev.read(buf, next_lba(&mut rng, mask)).await;
                        res.expect("read");
                        buf = back;
                        round.ios.set(round.ios.get() + 1);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        drop(bdev);
        round.closed.set(true);
    });
}

/// The poller path: reap a batch, resubmit it under one plug, flush (one doorbell).
fn start_poller(ctx: &mut ReactorCtx, round: Round, batch: bool) {
    let mut q = BdevQueue::open_in(registry(), DEV, BdevQueueOptions::default()).expect("open");
    let bufs = DmaPool::new(DmaPoolOptions {
        count: qd(),
        buf_size: BS,
        ..Default::default()
    })
    .expect("buffers");
    let buf = move |i: u32| {
        // SAFETY: buffer `i` of the pool is used by one I/O at a time (its token is `i`), and
        // the pool outlives the queue (both are owned by the poller, which drains first).
        unsafe { IoBuf::from_raw_parts(bufs.ptr(i), BS as u32) }
    };
    let mut plug = Plug::default();
    q.register_plug(&mut plug);
    let shape = Io {
        op: Op::Read,
        nblocks: (BS / 512) as u32,
        ..Io::default()
    };
    let mask = lba_mask(q.num_blocks());
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut done: Vec<u32> = (0..qd()).collect();
    let id: Rc<Cell<Option<PollerId>>> = Rc::default();
    let own_id = Rc::clone(&id);
    let pid = ctx.register_poller("aio_cost_poller", move |ctx| {
        if !round.stop.get() && !done.is_empty() {
            let n = done.len() as u32;
            plug.begin();
            q.expect_n(&mut plug, &shape, n);
            if batch {
                let mut next = done.iter();
                q.submit_with(&mut plug, &shape, n, || {
                    let t = *next.next().expect("one token per I/O");
                    (next_lba(&mut rng, mask), buf(t), u64::from(t))
                });
            } else {
                for &t in &done {
                    let io = Io {
                        lba: next_lba(&mut rng, mask),
                        buf: buf(t),
                        token: u64::from(t),
                        ..shape
                    };
                    q.submit(&mut plug, &io).expect("a free request");
                }
            }
            plug.finish();
            done.clear();
        }
        q.flush();
        let reaped = q.poll(qd() as usize, |rq| done.push(rq.token as u32));
        round.ios.set(round.ios.get() + reaped as u64);
        if round.stop.get() && q.outstanding() == 0 && !round.closed.get() {
            round.closed.set(true);
            if let Some(id) = own_id.take() {
                ctx.unregister_poller(id);
            }
        }
        PollerResult::from(reaped > 0)
    });
    id.set(Some(pid));
}

/// No I/O: `qd()` tasks, each waking once per turn from a poller that wakes them all (by
/// reference, each task's waker kept in its own place, as the I/O path does).
fn start_wakes(ctx: &mut ReactorCtx, round: Round) {
    let turn = Rc::new(Cell::new(0u64));
    let wakers: Rc<RefCell<Vec<Option<Waker>>>> = Rc::new(RefCell::new(vec![None; qd() as usize]));
    let (t, w) = (Rc::clone(&turn), Rc::clone(&wakers));
    let id: Rc<Cell<Option<PollerId>>> = Rc::default();
    let own_id = Rc::clone(&id);
    let poller_round = round.clone();
    let pid = ctx.register_poller("aio_cost_wakes", move |ctx| {
        t.set(t.get() + 1);
        for waker in w.borrow().iter().flatten() {
            waker.wake_by_ref();
        }
        if poller_round.closed.get()
            && let Some(id) = own_id.take()
        {
            ctx.unregister_poller(id);
        }
        PollerResult::Busy
    });
    id.set(Some(pid));
    let _parent = ctx.spawn(async move {
        let tasks: Vec<_> = (0..qd() as usize)
            .map(|i| {
                let (turn, wakers, round) = (Rc::clone(&turn), Rc::clone(&wakers), round.clone());
                spawn_local(async move {
                    while !round.stop.get() {
                        let seen = turn.get();
                        poll_fn(|cx| {
                            if turn.get() > seen {
                                return Poll::Ready(());
                            }
                            let mut w = wakers.borrow_mut();
                            if !w[i].as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                                w[i] = Some(cx.waker().clone());
                            }
                            Poll::Pending
                        })
                        .await;
                        round.ios.set(round.ios.get() + 1);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        round.closed.set(true);
    });
}
