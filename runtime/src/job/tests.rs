//! The engine on real reactors with the null and malloc devices.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use pmio::bdev::QueueStats;
use pmio::{BlockDevice, DmaRegion, Op, PrioClass, Request};
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_null::{NullDevice, NullOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, now_ns};

use super::pattern::Mismatch;
use super::*;

/// What the tests' hooks saw.
#[derive(Default)]
struct Seen {
    opened: Mutex<Vec<(usize, String)>>,
    turns: AtomicU64,
    last_counts: Mutex<Counts>,
    shown: Mutex<Vec<String>>,
    abort: AtomicBool,
}

struct TestHooks {
    seen: Arc<Seen>,
    tx: mpsc::Sender<WorkerReport>,
}

impl Hooks for TestHooks {
    fn opened(&mut self, job: usize, q: &pmio::bdev::BdevQueue) {
        let mut o = self.seen.opened.lock().unwrap();
        o.push((job, q.name().to_string()));
    }

    fn abort(&self) -> bool {
        self.seen.abort.load(Ordering::Relaxed)
    }

    fn turn(&mut self, counts: &Counts) {
        self.seen.turns.fetch_add(1, Ordering::Relaxed);
        *self.seen.last_counts.lock().unwrap() = *counts;
    }

    fn io_failed(&mut self, bdev: &str, rq: &Request) {
        let mut s = self.seen.shown.lock().unwrap();
        s.push(format!("{bdev} {} LBA {} failed", rq.op.name(), rq.lba));
    }

    fn verify_mismatch(&mut self, bdev: &str, m: &Mismatch) {
        let mut s = self.seen.shown.lock().unwrap();
        s.push(format!("{bdev}: {m}"));
    }

    fn finished(&mut self, report: WorkerReport) {
        let _ = self.tx.send(report);
    }
}

/// One reactor on the first core this process may use.
fn reactor() -> (Reactors, u32) {
    let first = CoreMask::available().unwrap().first();
    let mask = CoreMask::parse(&format!("[{first}]")).unwrap();
    (
        Reactors::start(mask, ReactorsOptions::default()).unwrap(),
        first,
    )
}

/// Starts `specs` as one worker; returns the report channel and what the hooks see.
fn start(
    r: &Reactors,
    core: u32,
    phase: Phase,
    timing: Arc<Timing>,
    specs: Vec<JobSpec>,
) -> (mpsc::Receiver<WorkerReport>, Arc<Seen>) {
    let (tx, rx) = mpsc::channel();
    let seen = Arc::new(Seen::default());
    let hooks = TestHooks {
        seen: Arc::clone(&seen),
        tx,
    };
    r.run_on(core, move |ctx| {
        Worker::start(ctx, WorkerOptions::new(phase, timing), specs, hooks)
    })
    .unwrap()
    .unwrap();
    (rx, seen)
}

fn run_for(ms: u64) -> Arc<Timing> {
    let now = now_ns();
    Arc::new(Timing::started(now, now + ms * 1_000_000))
}

fn wait(rx: &mpsc::Receiver<WorkerReport>) -> WorkerReport {
    rx.recv_timeout(Duration::from_secs(30)).expect("report")
}

fn null(num_blocks: u64) -> Arc<dyn BlockDevice> {
    NullDevice::new(NullOptions {
        num_blocks,
        ..NullOptions::default()
    })
    .unwrap()
}

fn malloc(opts: MallocOptions) -> Arc<dyn BlockDevice> {
    MallocDevice::new(opts).unwrap()
}

fn reads(s: &QueueStats) -> u64 {
    s.op(Op::Read).ops
}

#[test]
fn prio_mix_shares_and_picks() {
    let m = PrioMix::from_shares([10, 90, 0]).unwrap();
    assert_eq!(m.share(PrioClass::Rt), 10);
    assert_eq!(m.share(PrioClass::Be), 90);
    assert_eq!(m.only(), None);
    assert_eq!(
        (m.pick(9), m.pick(10), m.pick(99)),
        (PrioClass::Rt, PrioClass::Be, PrioClass::Be)
    );
    assert_eq!(
        PrioMix::single(PrioClass::Idle).only(),
        Some(PrioClass::Idle)
    );
    assert_eq!(PrioMix::single(PrioClass::Rt).pick(99), PrioClass::Rt);
    assert_eq!(PrioMix::from_shares([50, 40, 0]), None, "must sum to 100");
    assert_eq!(PrioMix::from_shares([200, 200, 0]), None);
}

#[test]
fn specs_are_checked_before_anything_opens() {
    let dev = null(1024);
    let bad = |f: &dyn Fn(&mut JobSpec), needle: &str| {
        let mut s = JobSpec::new(Arc::clone(&dev), 8, 4096);
        f(&mut s);
        let e = s.validate().unwrap_err().to_string();
        assert!(e.starts_with("bdev Null0: ") && e.contains(needle), "{e}");
    };
    assert!(JobSpec::new(Arc::clone(&dev), 8, 4096).validate().is_ok());
    bad(&|s| s.depth = 0, "depth 0");
    bad(&|s| s.depth = 70_000, "depth 70000");
    bad(&|s| s.queue_depth = 9, "queue depth 9");
    bad(&|s| s.bs = 1000, "not a multiple");
    bad(&|s| s.read_pct = 101, "101%");
    bad(&|s| s.region_start = 128, "beyond the device");
    bad(&|s| s.submit_batch = 0, "batches");
    bad(&|s| s.verify = Some(vec![0; 8]), "verify table");
    bad(
        &|s| {
            (s.depth, s.queue_depth) = (4096, 4096);
            // Never registered: the spec is refused first.
            s.bufs = Some(DmaRegion::new(4096).unwrap());
        },
        "16777216 needed",
    );
}

#[test]
fn a_timed_run_counts_every_io_and_reports_once() {
    let (r, core) = reactor();
    let (rx, seen) = start(
        &r,
        core,
        Phase::Run,
        run_for(50),
        vec![JobSpec::new(null(1 << 16), 16, 4096)],
    );
    let rep = wait(&rx);
    let j = &rep.jobs[0];
    assert!(rep.error.is_none() && !rep.aborted);
    assert!(j.ios > 0 && j.errors == 0);
    assert_eq!(j.bytes, j.ios * 4096);
    assert_eq!(j.hist.len(), j.ios, "one latency per I/O");
    assert_eq!(reads(&j.queue_stats), j.ios, "measured from the start");
    assert!(rep.elapsed_ns() <= rep.elapsed_with_drain_ns());
    // The run measures from its worker's first turn to the timing's end: it lasted as long as
    // asked, less however late its reactor got to it (a loaded machine delays that turn).
    assert!(rep.drained_ns >= rep.end_ns, "the run was not cut short");
    assert_eq!(
        rep.elapsed_ns(),
        rep.end_ns.saturating_sub(rep.measure_start_ns).max(1)
    );
    assert_eq!(*seen.opened.lock().unwrap(), vec![(0, "Null0".to_string())]);
    assert!(seen.turns.load(Ordering::Relaxed) > 0);
    let c = *seen.last_counts.lock().unwrap();
    assert_eq!((c.ios, c.reaped, c.submitted), (j.ios, j.ios, j.ios));
    assert!(c.submit_calls > 0 && c.reap_calls > 0);
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "one report"
    );
    r.stop().unwrap();
}

#[test]
fn workers_wait_for_go_and_warm_up_is_not_counted() {
    let (r, core) = reactor();
    let timing = Arc::new(Timing::new());
    let (rx, seen) = start(
        &r,
        core,
        Phase::Run,
        Arc::clone(&timing),
        vec![JobSpec::new(null(1 << 16), 8, 4096)],
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(seen.turns.load(Ordering::Relaxed), 0, "no turn before go");
    let now = now_ns();
    timing.go(now + 20_000_000, now + 60_000_000);
    let rep = wait(&rx);
    let j = &rep.jobs[0];
    assert!(j.ios > 0);
    assert!(
        reads(&j.queue_stats) > j.ios,
        "the warm-up's I/Os are done but not counted"
    );
    assert!(rep.measure_start_ns >= now + 20_000_000);
    r.stop().unwrap();
}

#[test]
fn abort_stops_early_and_given_buffers_come_back() {
    let (r, core) = reactor();
    let region = DmaRegion::new(16 * 4096).unwrap();
    let ptr = region.as_ptr();
    // SAFETY: the region comes back in the report and is dropped after the reactor stops
    // (with the job's queue).
    let spec = unsafe { JobSpec::new(null(1 << 16), 8, 4096).with_buffers(region) };
    let (rx, seen) = start(&r, core, Phase::Run, run_for(60_000), vec![spec]);
    std::thread::sleep(Duration::from_millis(20));
    seen.abort.store(true, Ordering::Relaxed);
    let rep = wait(&rx);
    assert!(rep.aborted && rep.error.is_none());
    assert!(rep.elapsed_with_drain_ns() < 30_000_000_000);
    let b = rep.jobs[0].bufs.as_ref().expect("handed back");
    assert_eq!(b.as_ptr(), ptr);
    r.stop().unwrap();
    drop(rep);
}

#[test]
fn fill_then_mixed_verify_finds_no_mismatch_and_writes_every_unit() {
    let (r, core) = reactor();
    let dev = malloc(MallocOptions {
        num_blocks: 2048,
        ..MallocOptions::default()
    });
    // Two jobs on one device, each on its half, sharing the worker's plug.
    let specs = |tables: &mut Vec<Option<Vec<u32>>>| {
        (0..2u64)
            .map(|i| {
                let mut s = JobSpec::new(Arc::clone(&dev), 8, 4096);
                s.region_start = i * 64;
                s.region_units = 64;
                s.read_pct = 50;
                s.verify = tables[i as usize].take();
                s
            })
            .collect::<Vec<_>>()
    };
    let mut tables = vec![Some(vec![0u32; 64]), Some(vec![0u32; 64])];
    // The fill ignores the end: it stops when every unit was written once.
    let (rx, _) = start(
        &r,
        core,
        Phase::Fill,
        Arc::new(Timing::started(now_ns(), u64::MAX)),
        specs(&mut tables),
    );
    let mut rep = wait(&rx);
    for (t, j) in tables.iter_mut().zip(&mut rep.jobs) {
        assert_eq!(j.ios, 64);
        *t = j.verify.take();
        assert!(t.as_ref().unwrap().iter().all(|&s| s == 1));
    }
    let (rx, seen) = start(&r, core, Phase::Run, run_for(50), specs(&mut tables));
    let rep = wait(&rx);
    for j in &rep.jobs {
        assert!(j.ios > 0 && j.errors == 0);
        assert_eq!(j.verify_mismatches, 0);
        let st = &j.queue_stats;
        assert!(st.op(Op::Read).ops > 0 && st.op(Op::Write).ops > 0);
        // Each write raised its unit's sequence number by one.
        let v = j.verify.as_ref().unwrap();
        let seqs: u64 = v.iter().map(|&s| u64::from(s)).sum();
        assert_eq!(seqs, 64 + st.op(Op::Write).ops);
    }
    assert!(seen.shown.lock().unwrap().is_empty());
    r.stop().unwrap();
}

#[test]
fn bad_blocks_are_found_and_shown_at_most_max_shown_times() {
    let (r, core) = reactor();
    let dev = malloc(MallocOptions {
        num_blocks: 1024,
        ..MallocOptions::default()
    });
    let mut s = JobSpec::new(Arc::clone(&dev), 4, 4096);
    s.random = false;
    s.region_units = 64;
    s.verify = Some(vec![1; 64]);
    // Nothing was written: every block read mismatches (no pattern header). 300 ms, not 30:
    // the window is from now, and a loaded machine may start the worker late in it.
    let (rx, seen) = start(&r, core, Phase::Run, run_for(300), vec![s]);
    let rep = wait(&rx);
    let j = &rep.jobs[0];
    assert!(j.verify_mismatches >= 64, "{}", j.verify_mismatches);
    let shown = seen.shown.lock().unwrap();
    assert_eq!(shown.len() as u64, MAX_SHOWN);
    assert!(
        shown[0].starts_with("Malloc0: LBA 0: expected lba=0 seq=1"),
        "{}",
        shown[0]
    );
    r.stop().unwrap();
}

#[test]
fn priority_mixes_are_counted_per_class() {
    let (r, core) = reactor();
    let mut s = JobSpec::new(null(1 << 16), 16, 4096);
    s.prio = PrioMix::from_shares([30, 70, 0]);
    let (rx, _) = start(&r, core, Phase::Run, run_for(50), vec![s]);
    let rep = wait(&rx);
    let j = &rep.jobs[0];
    let c = j.classes.as_ref().expect("per-class latency");
    assert_eq!(c.iter().map(|(_, n)| n).sum::<u64>(), j.ios);
    assert!(c[PrioClass::Rt as usize].1 > 0 && c[PrioClass::Be as usize].1 > 0);
    assert_eq!(c[PrioClass::Idle as usize].1, 0);
    assert_eq!(
        c[PrioClass::Rt as usize].0.len(),
        c[PrioClass::Rt as usize].1
    );
    r.stop().unwrap();
}

#[test]
fn a_bad_spec_starts_nothing() {
    let (r, core) = reactor();
    let (tx, rx) = mpsc::channel();
    let hooks = TestHooks {
        seen: Arc::default(),
        tx,
    };
    let mut s = JobSpec::new(null(1024), 8, 4096);
    s.bs = 1000;
    let e = r
        .run_on(core, move |ctx| {
            Worker::start(
                ctx,
                WorkerOptions::new(Phase::Run, run_for(10)),
                vec![s],
                hooks,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        })
        .unwrap()
        .unwrap_err();
    assert!(e.contains("not a multiple"), "{e}");
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    let pollers = r.run_on(core, |ctx| ctx.pollers().len()).unwrap();
    assert_eq!(pollers, 0);
    r.stop().unwrap();
}

#[test]
fn a_device_failing_everything_for_long_is_unusable() {
    use super::complete::{ALL_FAILED_STOP_NS, unusable_reason};
    use pmio::IoStatus;
    let enxio = IoStatus::Errno(6); // ENXIO
    assert_eq!(unusable_reason(enxio, ALL_FAILED_STOP_NS - 1), None);
    assert_eq!(unusable_reason(IoStatus::Timeout, 0), None);
    let r = unusable_reason(enxio, ALL_FAILED_STOP_NS).unwrap();
    assert!(r.starts_with("every I/O failed for 5.0 s"), "{r}");
    assert!(r.contains("errno 6"), "{r}");
    let r = unusable_reason(IoStatus::DeviceRemoved, 0).unwrap();
    assert!(r.starts_with("the device is gone"), "{r}");
}
