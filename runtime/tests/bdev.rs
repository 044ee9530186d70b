//! `Bdev` on real reactors: opening, sharing, the progress poller's life, interrupt mode, and
//! stopping with I/O in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use pmio::Op;
use pmio::aio::BufPool;
use pmio::dma::{DmaPoolOptions, DmaRegion};
use pmio_null::{NullDevice, NullOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, yield_now};
use pmio_runtime::{Bdev, OpenError, registry};

/// One reactor on the first core this process may use, with `opts`.
fn start(opts: ReactorsOptions) -> (Reactors, u32) {
    let core = CoreMask::available().unwrap().first();
    let reactors = Reactors::start(CoreMask::from_cores([core]).unwrap(), opts).unwrap();
    (reactors, core)
}

/// Registers a null device `name` with a completion latency.
fn null(name: &str, latency: Duration) {
    let dev = NullDevice::new(NullOptions {
        name: name.into(),
        latency_ns: latency.as_nanos() as u64,
        ..NullOptions::default()
    })
    .unwrap();
    registry().register(dev).unwrap();
}

fn pollers(reactors: &Reactors, core: u32) -> Vec<String> {
    reactors
        .run_on(core, |ctx| {
            ctx.pollers()
                .into_iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
        })
        .unwrap()
}

#[test]
fn open_off_a_reactor_or_of_an_unknown_device_fails_with_its_reason() {
    null("OffReactor0", Duration::ZERO);
    assert!(matches!(
        Bdev::open("OffReactor0"),
        Err(OpenError::NotOnReactor(n)) if n == "OffReactor0"
    ));
    let (reactors, core) = start(ReactorsOptions::default());
    let err = reactors
        .spawn_on(core, || async { Bdev::open("Nope0").map(drop) })
        .unwrap()
        .join()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, OpenError::Bdev(pmio::BdevError::NotFound(_))),
        "{err}"
    );
    reactors.stop().unwrap();
}

#[test]
fn one_handle_and_one_poller_per_reactor_and_device_gone_with_the_last_clone() {
    null("Shared0", Duration::ZERO);
    let (reactors, core) = start(ReactorsOptions::default());
    let (tx, rx) = mpsc::channel();
    let (close_tx, close_rx) = mpsc::channel::<()>();
    let task = reactors
        .spawn_on(core, move || async move {
            let a = Bdev::open("Shared0").unwrap();
            let b = Bdev::open("Shared0").unwrap();
            let same = std::ptr::eq(a.aio(), b.aio());
            let (res, _) = a.read(DmaRegion::new(4096).unwrap(), 0).await;
            res.unwrap();
            tx.send(same).unwrap();
            // Hold the handles until told to close them.
            while close_rx.try_recv().is_err() {
                yield_now().await;
            }
            drop((a, b));
        })
        .unwrap();
    assert!(
        rx.recv().unwrap(),
        "the second open shares the first handle"
    );
    assert_eq!(pollers(&reactors, core), ["bdev_queue:Shared0"]);
    close_tx.send(()).unwrap();
    task.join().unwrap();
    // The poller notices the close on its next run and unregisters itself.
    for _ in 0..1000 {
        if pollers(&reactors, core).is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(pollers(&reactors, core).is_empty());
    reactors.stop().unwrap();
}

#[test]
fn the_poller_keeps_an_interrupt_mode_reactor_awake_while_io_is_in_flight() {
    // Completions after 20 ms, sleep after 0.1 ms idle: without `stay_awake` the reactor
    // would sleep with the I/O in flight and nothing would ever wake it.
    null("Idle0", Duration::from_millis(20));
    let (reactors, core) = start(ReactorsOptions {
        interrupt_idle: Some(Duration::from_micros(100)),
        ..ReactorsOptions::default()
    });
    let (tx, rx) = mpsc::channel();
    let _detached = reactors
        .spawn_on(core, move || async move {
            let bdev = Bdev::open("Idle0").unwrap();
            for lba in 0..3 {
                let (res, _) = bdev.read(DmaRegion::new(512).unwrap(), lba).await;
                res.unwrap();
            }
            tx.send(()).unwrap();
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the reactor slept with I/O in flight");
    // Idle again, it sleeps: the poller does not keep it awake without I/O.
    let slept = (0..2000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        reactors.is_sleeping(core)
    });
    assert!(slept, "the poller kept an idle reactor awake");
    reactors.stop().unwrap();
}

#[test]
fn stopping_with_io_in_flight_completes_it_before_the_buffers_go() {
    null("Stop0", Duration::from_millis(50));
    let (reactors, core) = start(ReactorsOptions::default());
    let submitted = Arc::new(AtomicUsize::new(0));
    for _ in 0..8 {
        let submitted = Arc::clone(&submitted);
        let _detached = reactors
            .spawn_on(core, move || async move {
                let bdev = Bdev::open("Stop0").unwrap();
                let pool = BufPool::new(DmaPoolOptions {
                    count: 1,
                    buf_size: 4096,
                    ..Default::default()
                })
                .unwrap();
                let read = bdev.read(pool.get().unwrap(), 0);
                submitted.fetch_add(1, Ordering::Relaxed);
                let _ = read.await;
                unreachable!("the reactor stops first");
            })
            .unwrap();
    }
    while submitted.load(Ordering::Relaxed) < 8 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(5));
    reactors.stop().unwrap();
    let reads = registry().device_stats("Stop0").unwrap().op(Op::Read).ops;
    assert_eq!(reads, 8, "every read completed while the handle closed");
}
