//! Measures the reactor's own costs on this machine:
//! `cargo run --release -p pmio-reactors --example reactor_overhead [-- CORE_MASK]`.
//!
//! - loop turn cost with one busy active poller (ns per turn),
//! - message throughput from an outside thread to a busy-polling reactor,
//! - interrupt-mode wake-up latency (send → run while the reactor sleeps), and its CPU use idle,
//! - task poll cost: 64 tasks that only `yield_now` (a poll, a local wake, a run-queue push).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use pmio_reactors::{
    CoreMask, PollerResult, ReactorError, ReactorStats, Reactors, ReactorsOptions, now_ns,
    thread_cpu_time_ns, yield_now,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mask = match std::env::args().nth(1) {
        Some(m) => CoreMask::parse(&m)?,
        None => CoreMask::from_cores([CoreMask::available()?.first()])?,
    };
    let core = mask.first();

    // 1. Turn cost: one active poller that only counts, reporting busy.
    let reactors = Reactors::start(mask.clone(), ReactorsOptions::default())?;
    reactors.run_on(core, |ctx| {
        let mut n = 0u64;
        ctx.register_poller("count", move |_| {
            n += 1;
            std::hint::black_box(n);
            PollerResult::Busy
        });
    })?;
    let (d, cpu) = steady_second(&reactors, core)?;
    println!(
        "loop: {} turns in {} ms of reactor CPU = {:.1} ns/turn (busy {:.1}%)",
        d.turns,
        cpu / 1_000_000,
        cpu as f64 / d.turns as f64,
        d.busy_pct()
    );
    reactors.stop()?;

    // 2. Message throughput from one outside thread to a busy-polling reactor.
    let reactors = Reactors::start(mask.clone(), ReactorsOptions::default())?;
    let done = Arc::new(AtomicU64::new(0));
    const N: u64 = 2_000_000;
    let t = Instant::now();
    for _ in 0..N {
        let done = done.clone();
        reactors.send(core, move |_| {
            done.fetch_add(1, Ordering::Relaxed);
        })?;
    }
    while done.load(Ordering::Relaxed) < N {
        std::hint::spin_loop();
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "messages: {N} from one outside thread in {:.3} s = {:.2} M msgs/s",
        secs,
        N as f64 / secs / 1e6
    );
    reactors.stop()?;

    // 3. Interrupt mode: wake-up latency and idle CPU.
    let opts = ReactorsOptions {
        interrupt_idle: Some(Duration::from_millis(1)),
        ..ReactorsOptions::default()
    };
    let reactors = Reactors::start(mask.clone(), opts)?;
    let mut lat = Vec::new();
    for _ in 0..200 {
        while !reactors.is_sleeping(core) {
            thread::sleep(Duration::from_millis(1));
        }
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        let sent = now_ns();
        reactors.send(core, move |_| r.store(now_ns(), Ordering::Release))?;
        while ran.load(Ordering::Acquire) == 0 {
            std::hint::spin_loop();
        }
        lat.push(ran.load(Ordering::Acquire) - sent);
    }
    lat.sort_unstable();
    println!(
        "interrupt mode wake-up (send -> run): p50 {} us, p99 {} us, max {} us",
        lat[lat.len() / 2] / 1000,
        lat[lat.len() * 99 / 100] / 1000,
        lat[lat.len() - 1] / 1000
    );
    let c0 = reactors.run_on(core, |_| thread_cpu_time_ns())?;
    thread::sleep(Duration::from_secs(1));
    let c1 = reactors.run_on(core, |_| thread_cpu_time_ns())?;
    println!(
        "interrupt mode idle: {:.3} ms CPU in 1 s",
        (c1 - c0) as f64 / 1e6
    );
    reactors.stop()?;

    // 4. Task poll cost: 64 tasks yielding forever, a full task budget every turn.
    let reactors = Reactors::start(mask, ReactorsOptions::default())?;
    reactors.run_on(core, |ctx| {
        for _ in 0..64 {
            drop(ctx.spawn(async {
                loop {
                    yield_now().await;
                }
            }));
        }
    })?;
    let (d, cpu) = steady_second(&reactors, core)?;
    println!(
        "tasks: {} polls in {} ms of reactor CPU = {:.1} ns/poll (yield_now: poll + local wake)",
        d.task_polls,
        cpu / 1_000_000,
        cpu as f64 / d.task_polls as f64
    );
    reactors.stop()?;
    Ok(())
}

/// After 100 ms of warm-up, the reactor's counters and CPU time (ns) over one second.
fn steady_second(reactors: &Reactors, core: u32) -> Result<(ReactorStats, u64), ReactorError> {
    thread::sleep(Duration::from_millis(100));
    let a = reactors.stats(core).unwrap_or_default();
    let cpu_a = reactors.run_on(core, |_| thread_cpu_time_ns())?;
    thread::sleep(Duration::from_secs(1));
    let b = reactors.stats(core).unwrap_or_default();
    let cpu_b = reactors.run_on(core, |_| thread_cpu_time_ns())?;
    Ok((b.since(&a), cpu_b - cpu_a))
}
