//! mq-deadline vs pass-through: insert + dispatch + complete of batches of 32.
//!
//! Steady state at a queue depth of 128: 96 requests stay queued in the scheduler while each
//! iteration inserts a batch of 32 random 4 KiB reads, dispatches 32 and completes those 32
//! (their ids are reused by the next batch), as a reactor at QD128 with batches of 32 would.
//!
//! - `sched/none_32`: the pass-through queue of the `none` scheduler.
//! - `sched/mq-deadline_32`: `SharedDeadline` (one lock per insert batch and per dispatch
//!   batch, completion lock-free).
//! - `sched/mq-deadline_32_bufs`: the same with buffer addresses, so every insert also
//!   looks up its back and front merge candidates (they never fit: not contiguous).
//! - `sched/mq-deadline_32_2threads`: two threads (owners 0 and 1) doing the same against
//!   one shared instance; reported time is wall time per batch of each thread.
//!
//! Divide the reported time by 32 for ns per request (criterion also prints elements/s).
//! Before criterion runs, `sched/interleaved_min` prints each single-thread variant's best
//! ns/request over interleaved slices, which is what BENCHMARKS.md quotes (the bench machine
//! is shared, so means drift with the load; the best slice does not).

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use pmio::sched::{DeadlineOptions, Dispatched, SchedKind, SchedQueue, SchedRq, Scheduler};
use pmio::{IoStatus, Op, PrioClass, ReqFlags};

const BATCH: usize = 32;
const QD: usize = 128;

/// One submitter's state: its ids, a random sector stream, buffers for the batch.
struct Submitter {
    q: SchedQueue,
    owner: u16,
    free: Vec<u32>,
    rqs: Vec<SchedRq>,
    out: Vec<Dispatched>,
    seed: u64,
    now: u64,
    /// Give each request a buffer address (4 KiB apart per id, so never contiguous with its
    /// sector neighbours): every insert then looks for merge candidates.
    bufs: bool,
}

impl Submitter {
    fn new(sched: &Scheduler, owner: u16, ids: std::ops::Range<u32>, bufs: bool) -> Submitter {
        let mut s = Submitter {
            q: sched.queue(owner),
            owner,
            free: ids.collect(),
            rqs: Vec::with_capacity(BATCH),
            out: Vec::with_capacity(BATCH),
            seed: 0x9e37_79b9_7f4a_7c15 ^ u64::from(owner),
            now: 0,
            bufs,
        };
        // Fill to QD − BATCH so each batch brings the depth to QD.
        for _ in 0..(QD - BATCH) / BATCH {
            s.fill();
            s.q.insert_batch(&s.rqs, s.now).expect("insert");
        }
        s
    }

    fn sector(&mut self) -> u64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed % (1 << 28)) * 8
    }

    fn fill(&mut self) {
        self.rqs.clear();
        for _ in 0..BATCH {
            let id = self.free.pop().expect("free id");
            let sector = self.sector();
            self.rqs.push(SchedRq {
                id,
                owner: self.owner,
                op: Op::Read,
                prio: PrioClass::Be,
                flags: ReqFlags::NONE,
                sector,
                nblocks: 8,
                addr: if self.bufs {
                    0x1000_0000 + u64::from(id) * 2 * 4096
                } else {
                    0
                },
            });
        }
    }

    /// One batch: insert 32 and dispatch 32 (one call, one lock), complete them.
    #[inline]
    fn batch(&mut self) {
        self.now += 1_000; // 1 µs per batch: a batched clock read
        self.fill();
        self.out.clear();
        let (_, mut got) = self
            .q
            .insert_dispatch_batch(&self.rqs, self.now, BATCH, &mut self.out)
            .expect("insert");
        while got < BATCH {
            got += self.q.dispatch_batch(self.now, BATCH - got, &mut self.out);
        }
        let free = &mut self.free;
        self.q
            .complete_batch(
                self.out.iter().map(|d| (d.id, IoStatus::Success)),
                |id, _| free.push(id),
            )
            .expect("complete");
        black_box(&self.out);
    }
}

fn opts() -> DeadlineOptions {
    DeadlineOptions {
        owners: 2,
        nr_requests: 2 * QD as u32,
        ..DeadlineOptions::for_device(QD as u32, 256, 4096)
    }
}

fn bench_sched(c: &mut Criterion) {
    let mut g = c.benchmark_group("sched");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(3));

    for kind in [SchedKind::None, SchedKind::MqDeadline] {
        let sched = Scheduler::new(kind, opts()).expect("scheduler");
        let mut s = Submitter::new(&sched, 0, 0..QD as u32, false);
        g.bench_function(format!("{}_32", kind.name()), |b| b.iter(|| s.batch()));
    }
    let sched = Scheduler::new(SchedKind::MqDeadline, opts()).expect("scheduler");
    let mut s = Submitter::new(&sched, 0, 0..QD as u32, true);
    g.bench_function("mq-deadline_32_bufs", |b| b.iter(|| s.batch()));

    // Two submitters on one instance, each on its own thread.
    let sched = Scheduler::new(SchedKind::MqDeadline, opts()).expect("scheduler");
    g.bench_function("mq-deadline_32_2threads", |b| {
        b.iter_custom(|iters| {
            let barrier = Arc::new(Barrier::new(2));
            let run = |owner: u16| {
                let sched = sched.clone();
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let base = u32::from(owner) * QD as u32;
                    let mut s = Submitter::new(&sched, owner, base..base + QD as u32, false);
                    barrier.wait();
                    let t = Instant::now();
                    for _ in 0..iters {
                        s.batch();
                    }
                    let el = t.elapsed();
                    // Drain this owner's requests so the next sample starts empty (the other
                    // thread collects its own, including any this one parked for it).
                    let mut out = Vec::with_capacity(QD);
                    while s.free.len() < QD {
                        out.clear();
                        s.q.dispatch_batch(s.now, QD, &mut out);
                        let free = &mut s.free;
                        s.q.complete_batch(
                            out.iter().map(|d| (d.id, IoStatus::Success)),
                            |id, _| free.push(id),
                        )
                        .expect("complete");
                    }
                    el
                })
            };
            let a = run(0);
            let b = run(1);
            let ta = a.join().expect("thread");
            let tb = b.join().expect("thread");
            ta.max(tb)
        })
    });
    g.finish();
    sched.teardown_check().expect("everything completed");
}

/// Interleaved slices of each variant on one thread, keeping each variant's fastest slice:
/// on a shared, loaded machine the minimum is far steadier than a mean. Prints ns/request.
fn interleaved_min() {
    const SLICE_BATCHES: u32 = 2000;
    const ROUNDS: usize = 25;
    let variants: [(&str, SchedKind, bool); 3] = [
        ("none", SchedKind::None, false),
        ("mq-deadline_bufs", SchedKind::MqDeadline, true),
        ("mq-deadline", SchedKind::MqDeadline, false),
    ];
    let mut subs: Vec<Submitter> = variants
        .iter()
        .map(|&(_, kind, bufs)| {
            let sched = Scheduler::new(kind, opts()).expect("scheduler");
            Submitter::new(&sched, 0, 0..QD as u32, bufs)
        })
        .collect();
    let mut best = [f64::MAX; 3];
    for _ in 0..ROUNDS {
        for (i, s) in subs.iter_mut().enumerate() {
            let t = Instant::now();
            for _ in 0..SLICE_BATCHES {
                s.batch();
            }
            let ns = t.elapsed().as_nanos() as f64 / f64::from(SLICE_BATCHES * BATCH as u32);
            best[i] = best[i].min(ns);
        }
    }
    for (i, (name, _, _)) in variants.iter().enumerate() {
        eprintln!(
            "sched/interleaved_min {name}: {:.1} ns/request ({:.2}x none)",
            best[i],
            best[i] / best[0]
        );
    }
}

criterion_group!(benches, bench_sched);

fn main() {
    interleaved_min();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
