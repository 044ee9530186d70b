use super::*;
use crate::bdev::{BdevInfo, Uuid};
use crate::request::{IoBuf, IoStatus, Op, Request};
use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::rc::Rc;

/// What the test driver saw.
#[derive(Default)]
struct Log {
    submit_calls: Vec<(HctxType, usize)>,
    started: HashSet<(HctxType, u16)>,
    /// Every request the driver was given, as (lba, nblocks).
    extents: Vec<(u64, u32)>,
}

struct TestDev {
    info: BdevInfo,
    fail_lba: Option<u64>,
    log: Arc<parking_lot::Mutex<Log>>,
}

struct TestQueue {
    ty: HctxType,
    fifo: VecDeque<u16>,
    fail_lba: Option<u64>,
    log: Arc<parking_lot::Mutex<Log>>,
}

impl BlockDevice for TestDev {
    fn info(&self) -> &BdevInfo {
        &self.info
    }
    fn open_queue(
        &self,
        ty: HctxType,
        _i: u16,
        _d: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        Ok(Box::new(TestQueue {
            ty,
            fifo: VecDeque::new(),
            fail_lba: self.fail_lba,
            log: Arc::clone(&self.log),
        }))
    }
}

impl DriverQueue for TestQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        let mut log = self.log.lock();
        log.submit_calls.push((self.ty, tags.len()));
        for &t in tags {
            assert!(log.started.insert((self.ty, t)), "tag {t} handed out twice");
            assert_eq!(rqs[t as usize].hctx, self.ty);
            log.extents
                .push((rqs[t as usize].lba, rqs[t as usize].nblocks));
            self.fifo.push_back(t);
        }
    }
    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut log = self.log.lock();
        let mut n = 0;
        while n < max {
            let Some(t) = self.fifo.pop_front() else {
                break;
            };
            let rq = &mut rqs[t as usize];
            rq.status = if Some(rq.lba) == self.fail_lba {
                IoStatus::Errno(libc::EIO)
            } else {
                IoStatus::Success
            };
            log.started.remove(&(self.ty, t));
            done.push(t);
            n += 1;
        }
        n
    }
    fn outstanding(&self) -> usize {
        self.fifo.len()
    }
}

fn dev(
    queues: HctxQueues,
    fail_lba: Option<u64>,
) -> (Arc<dyn BlockDevice>, Arc<parking_lot::Mutex<Log>>) {
    let log = Arc::new(parking_lot::Mutex::new(Log::default()));
    let d = TestDev {
        info: BdevInfo {
            name: "T0".into(),
            uuid: Uuid::default(),
            product_name: "Test".into(),
            block_size: 512,
            num_blocks: 1024,
            supported_ops: OpSet::READ_WRITE.with(Op::Flush),
            queues,
            max_queue_depth: 256,
            max_transfer_blocks: 64,
            boundary_blocks: 0,
        },
        fail_lba,
        log: Arc::clone(&log),
    };
    (Arc::new(d), log)
}

fn read(lba: u64, buf: &mut [u8]) -> Io {
    Io {
        op: Op::Read,
        lba,
        nblocks: (buf.len() / 512) as u32,
        // SAFETY: the tests keep `buf` alive and untouched until the I/O completes.
        buf: unsafe { IoBuf::from_raw_parts(buf.as_mut_ptr(), buf.len() as u32) },
        token: lba,
        ..Io::default()
    }
}

/// A device with a default queue only, opened without a scheduler, `depth` deep.
fn open_default_only(depth: u32) -> (BdevQueue, Arc<parking_lot::Mutex<Log>>) {
    let (d, log) = dev(HctxQueues::DEFAULT_ONLY, None);
    (open_depth(d, depth), log)
}

/// `d` opened without a scheduler, `depth` deep.
fn open_depth(d: Arc<dyn BlockDevice>, depth: u32) -> BdevQueue {
    BdevQueue::open(
        d,
        BdevQueueOptions {
            depth,
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn busy_when_full_nothing_dropped_each_completes_once() {
    let (mut q, log) = open_default_only(16);
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 512];
    let mut tags = HashSet::new();
    for i in 0..16 {
        let t = q.submit(&mut plug, &read(i, &mut buf)).unwrap();
        assert!(tags.insert(t), "tag {t} given twice");
    }
    assert_eq!(
        q.submit(&mut plug, &read(99, &mut buf)),
        Err(SubmitError::Busy)
    );
    assert_eq!(q.outstanding(), 16);
    assert_eq!(q.flush(), 16);
    assert_eq!(
        log.lock().submit_calls,
        vec![(HctxType::Default, 16)],
        "one doorbell"
    );
    let mut seen = Vec::new();
    let n = q.poll(10, |rq| seen.push(rq.token));
    assert_eq!(n, 10);
    // Freed tags are reusable right away.
    for i in 0..10 {
        q.submit(&mut plug, &read(100 + i, &mut buf)).unwrap();
    }
    assert!(
        q.submit(&mut plug, &read(0, &mut buf))
            .unwrap_err()
            .is_busy()
    );
    q.flush();
    while q.outstanding() > 0 {
        q.poll(7, |rq| seen.push(rq.token));
    }
    seen.sort_unstable();
    let mut want: Vec<u64> = (0..16).chain(100..110).collect();
    want.sort_unstable();
    assert_eq!(seen, want, "every I/O completed exactly once");
    assert_eq!(q.busy_tags(HctxType::Default), 0);
    assert!(log.lock().started.is_empty());
}

fn write(lba: u64, buf: &mut [u8]) -> Io {
    Io {
        op: Op::Write,
        ..read(lba, buf)
    }
}

/// A queue that always has `max` completions ready must not keep `poll` from visiting the
/// device's other queue.
#[test]
fn poll_visits_every_hctx_while_one_stays_busy() {
    let queues = HctxQueues {
        default: 1,
        read: 1,
        poll: 0,
    };
    let (d, _log) = dev(queues, None);
    let mut q = open_depth(d, 16);
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 512];
    for i in 0..16 {
        q.submit(&mut plug, &read(i, &mut buf)).unwrap();
    }
    let mut reads_reaped = 0;
    for _ in 0..4 {
        // Keep the default (write) queue full: it alone could answer every poll.
        while q.busy_tags(HctxType::Default) < 16 {
            q.submit(&mut plug, &write(500, &mut buf)).unwrap();
        }
        q.flush();
        q.poll(16, |rq| reads_reaped += usize::from(rq.op == Op::Read));
    }
    assert_eq!(reads_reaped, 16, "the read queue was never polled");
}

#[test]
fn submit_with_matches_single_submits_and_stops_at_busy_or_bad_io() {
    let (mut q, log) = open_default_only(16);
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 512];
    let shape = read(0, &mut buf);
    let mut calls = 0u64;
    plug.begin();
    q.expect_n(&mut plug, &shape, 10);
    let (n, err) = q.submit_with(&mut plug, &shape, 10, || {
        calls += 1;
        (calls, shape.buf, 100 + calls)
    });
    plug.finish();
    assert_eq!((n, err, calls), (10, None, 10));
    assert_eq!(q.outstanding(), 10);
    assert_eq!(plug.stats().cache_misses, 0, "one batch for the burst");
    // 6 tags left: the 7th I/O is refused as busy, after its `next()`.
    let (n, err) = q.submit_with(&mut plug, &shape, 8, || {
        calls += 1;
        (calls, shape.buf, 100 + calls)
    });
    assert_eq!((n, err, calls), (6, Some(SubmitError::Busy), 17));
    assert_eq!(q.outstanding(), 16);
    assert_eq!(q.flush(), 16);
    assert_eq!(log.lock().submit_calls, vec![(HctxType::Default, 16)]);
    let mut tokens = Vec::new();
    while q.outstanding() > 0 {
        q.poll(16, |rq| {
            assert_eq!(rq.lba + 100, rq.token);
            tokens.push(rq.token);
        });
    }
    tokens.sort_unstable();
    assert_eq!(tokens, (101..=116).collect::<Vec<u64>>());
    // An I/O past the end stops the burst with the error `submit` gives; the shape
    // itself (0 blocks) is refused before any `next()`.
    let (n, err) = q.submit_with(&mut plug, &shape, 4, || {
        calls += 1;
        let lba = if calls == 20 { 1024 } else { 0 };
        (lba, shape.buf, 0)
    });
    assert_eq!(n, 2);
    assert!(
        matches!(err, Some(SubmitError::OutOfRange { lba: 1024, .. })),
        "{err:?}"
    );
    assert_eq!(q.outstanding(), 2);
    let mut bad = vec![0u8; 1024];
    let mut wrong = read(0, &mut bad);
    wrong.nblocks = 1; // 1024 bytes for 1 block of 512
    assert!(matches!(
        q.submit_with(&mut plug, &wrong, 1, || (0, wrong.buf, 0)).1,
        Some(SubmitError::BadBuffer { .. })
    ));
    wrong.nblocks = 0;
    let before = calls;
    let (n, err) = q.submit_with(&mut plug, &wrong, 3, || {
        calls += 1;
        (0, shape.buf, 0)
    });
    assert_eq!((n, calls), (0, before));
    assert!(matches!(err, Some(SubmitError::Empty { .. })));
    q.flush();
    while q.outstanding() > 0 {
        q.poll(16, |_| {});
    }
    assert_eq!(
        q.busy_tags(HctxType::Default),
        0,
        "refused I/Os hold no tag"
    );
}

#[test]
fn submit_with_splits_only_what_crosses_the_boundary() {
    // A power of two (masked) and not (divided): the burst's per-I/O check and the splitter
    // must agree on both.
    for boundary in [16u32, 24] {
        let (d, log) = dev(HctxQueues::DEFAULT_ONLY, None);
        let mut info = d.info().clone();
        info.boundary_blocks = boundary;
        let d: Arc<dyn BlockDevice> = Arc::new(TestDev {
            info,
            fail_lba: None,
            log: Arc::clone(&log),
        });
        let mut q = open_depth(d, 64);
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 8 * 512];
        let shape = read(0, &mut buf);
        let lbas: Vec<u64> = (0..24).map(|i| i * 4).collect();
        let mut next = lbas.iter();
        plug.begin();
        let (n, err) = q.submit_with(&mut plug, &shape, lbas.len() as u32, || {
            let lba = *next.next().unwrap();
            (lba, shape.buf, lba)
        });
        plug.finish();
        assert_eq!((n, err), (lbas.len() as u32, None));
        q.flush();
        let mut reported = Vec::new();
        while q.outstanding() > 0 {
            q.poll(64, |rq| {
                assert_eq!(rq.status, IoStatus::Success);
                reported.push((rq.lba, rq.nblocks, rq.token));
            });
        }
        reported.sort_unstable();
        let want: Vec<(u64, u32, u64)> = lbas.iter().map(|&l| (l, 8, l)).collect();
        assert_eq!(reported, want, "each I/O reported once, whole");
        let b = u64::from(boundary);
        let extents = std::mem::take(&mut log.lock().extents);
        for &(lba, nb) in &extents {
            assert!(
                lba / b == (lba + u64::from(nb) - 1) / b,
                "{lba}+{nb} crosses {boundary}"
            );
        }
        let crossing = lbas.iter().filter(|&&l| l / b != (l + 7) / b).count();
        assert!(crossing > 0);
        assert_eq!(
            extents.len(),
            lbas.len() + crossing,
            "only the crossing I/Os split, each in two"
        );
    }
}

#[test]
fn plug_burst_allocates_in_a_batch() {
    let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
    let mut q = BdevQueue::open(d, BdevQueueOptions::default()).unwrap();
    let mut plug = Plug::default();
    q.register_plug(&mut plug);
    let mut buf = vec![0u8; 512];
    for _round in 0..50 {
        plug.begin();
        let io = read(1, &mut buf);
        q.expect_n(&mut plug, &io, 32);
        let mut got = HashSet::new();
        for _ in 0..32 {
            assert!(got.insert(q.submit(&mut plug, &io).unwrap()));
        }
        plug.finish();
        q.flush();
        let mut n = 0;
        while n < 32 {
            n += q.poll(32, |_| {});
        }
    }
    let s = plug.stats();
    assert_eq!(s.cache_misses, 0, "{s:?}");
    assert!(s.batches_obtained >= 50, "{s:?}");
    assert_eq!(q.busy_tags(HctxType::Default), 0);
}

#[test]
fn invalid_ios_are_rejected_with_clear_errors() {
    let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
    let mut q = BdevQueue::open(d, BdevQueueOptions::default()).unwrap();
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 1024];
    let mut io = read(1023, &mut buf);
    assert!(matches!(
        q.submit(&mut plug, &io),
        Err(SubmitError::OutOfRange { .. })
    ));
    io.lba = u64::MAX;
    assert!(matches!(
        q.submit(&mut plug, &io),
        Err(SubmitError::OutOfRange { .. })
    ));
    io.lba = 0;
    io.nblocks = 3;
    let e = q.submit(&mut plug, &io).unwrap_err();
    assert!(matches!(e, SubmitError::BadBuffer { .. }));
    assert!(e.to_string().contains("1024 bytes for 3 blocks"), "{e}");
    io.nblocks = 0;
    assert!(matches!(
        q.submit(&mut plug, &io),
        Err(SubmitError::Empty { .. })
    ));
    // More than the largest transfer (64 blocks) is split, not refused: only the buffer
    // is wrong here.
    io.nblocks = 65;
    assert!(matches!(
        q.submit(&mut plug, &io),
        Err(SubmitError::BadBuffer { .. })
    ));
    io.op = Op::Discard;
    io.nblocks = 1;
    let e = q.submit(&mut plug, &io).unwrap_err();
    assert_eq!(e.to_string(), "bdev T0: operation unmap not supported");
    let flush = Io {
        op: Op::Flush,
        ..Io::default()
    };
    assert!(q.submit(&mut plug, &flush).is_ok());
    assert_eq!(q.outstanding(), 1, "rejected I/Os took no request");
    q.flush();
    assert_eq!(q.poll(8, |_| {}), 1);
}

#[test]
fn stats_count_ops_bytes_errors_and_latency() {
    let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, Some(5));
    let mut q = BdevQueue::open(d, BdevQueueOptions::default()).unwrap();
    let cell = q.stats_cell();
    let mut plug = Plug::default();
    let mut rbuf = vec![0u8; 2048];
    let mut wbuf = vec![0u8; 512];
    q.submit(&mut plug, &read(0, &mut rbuf)).unwrap();
    q.submit(&mut plug, &read(5, &mut rbuf)).unwrap();
    let mut w = read(7, &mut wbuf);
    w.op = Op::Write;
    q.submit(&mut plug, &w).unwrap();
    q.flush();
    let statuses = Rc::new(RefCell::new(Vec::new()));
    let s2 = Rc::clone(&statuses);
    while q.outstanding() > 0 {
        q.poll(32, |rq| {
            assert!(rq.complete_ns >= rq.submit_ns && rq.submit_ns > 0);
            s2.borrow_mut().push((rq.lba, rq.status));
        });
    }
    assert!(statuses.borrow().contains(&(5, IoStatus::Errno(libc::EIO))));
    let s = q.stats();
    let r = s.op(Op::Read);
    assert_eq!((r.ops, r.bytes, r.errors), (2, 2048, 1));
    let wr = s.op(Op::Write);
    assert_eq!((wr.ops, wr.bytes, wr.errors), (1, 512, 0));
    assert!(r.lat_min_ns <= r.lat_max_ns && r.lat_sum_ns >= r.lat_max_ns);
    assert_eq!(cell.load(), *s, "published to the shared cell");
}

#[test]
fn reads_use_read_queues_when_the_device_has_them() {
    let (d, log) = dev(
        HctxQueues {
            default: 1,
            read: 1,
            poll: 0,
        },
        None,
    );
    let mut q = open_depth(d, 4);
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 512];
    for i in 0..4 {
        q.submit(&mut plug, &read(i, &mut buf)).unwrap();
    }
    assert!(
        q.submit(&mut plug, &read(9, &mut buf))
            .unwrap_err()
            .is_busy()
    );
    let mut w = read(9, &mut buf);
    w.op = Op::Write;
    q.submit(&mut plug, &w).expect("writes have their own hctx");
    q.flush();
    let calls = log.lock().submit_calls.clone();
    assert_eq!(calls, vec![(HctxType::Default, 1), (HctxType::Read, 4)]);
    assert_eq!(q.busy_tags(HctxType::Read), 4);
    let mut n = 0;
    while q.outstanding() > 0 {
        n += q.poll(2, |_| {});
    }
    assert_eq!(n, 5);
}

#[test]
fn open_in_feeds_the_registry_totals() {
    let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
    let reg = Registry::new();
    reg.register(d).unwrap();
    assert!(matches!(
        BdevQueue::open_in(&reg, "nope", BdevQueueOptions::default()),
        Err(BdevError::NotFound(_))
    ));
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 512];
    for _ in 0..2 {
        let mut q = BdevQueue::open_in(&reg, "T0", BdevQueueOptions::default()).unwrap();
        q.submit(&mut plug, &read(3, &mut buf)).unwrap();
        q.flush();
        while q.poll(8, |_| {}) == 0 {}
    }
    let t = reg.device_stats("T0").unwrap();
    assert_eq!(t.op(Op::Read).ops, 2, "closed queues keep counting");
    assert_eq!(t.op(Op::Read).bytes, 1024);
}

/// A queue opened through the registry counts, while the device's histogram is on, the
/// latency of every completion of the chosen operation, and only then.
#[test]
fn open_in_follows_the_histogram_switch() {
    use crate::bdev::histogram::{HistogramConfig, HistogramShape};
    let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
    let reg = Registry::new();
    reg.register(d).unwrap();
    let sw = reg.histogram("T0").unwrap();
    let mut q = BdevQueue::open_in(&reg, "T0", BdevQueueOptions::default()).unwrap();
    let mut plug = Plug::default();
    let mut buf = vec![0u8; 512];
    let mut one = |q: &mut BdevQueue, io: Io| {
        q.submit(&mut plug, &io).unwrap();
        q.flush();
        let mut lat = 0;
        while q.poll(8, |rq| lat = rq.complete_ns - rq.submit_ns) == 0 {}
        lat
    };
    one(&mut q, read(1, &mut buf));
    assert!(sw.merged().is_none(), "off: nothing counted");
    sw.enable(HistogramConfig {
        shape: HistogramShape::default(),
        ops: crate::request::OpSet::EMPTY.with(Op::Read),
    });
    let mut lats = Vec::new();
    for lba in 0..5 {
        lats.push(one(&mut q, read(lba, &mut buf)));
        one(&mut q, write(lba, &mut buf));
    }
    let h = sw.merged().unwrap();
    assert_eq!(h.total(), 5, "reads only");
    let max = *lats.iter().max().unwrap();
    assert!(
        h.percentile(100.0) >= max,
        "{} < {max}",
        h.percentile(100.0)
    );
    drop(q);
    assert_eq!(
        sw.merged().unwrap().total(),
        5,
        "a closed queue's counts stay"
    );
    sw.disable();
    assert!(sw.merged().is_none());
    reg.unregister("T0").unwrap();
    assert!(reg.histogram("T0").is_none());
}

#[derive(Clone, Debug)]
enum Action {
    /// A burst of `n` I/Os (reads if `read`), under a plug or not.
    Submit {
        n: u8,
        read: bool,
        plug: bool,
    },
    Flush,
    Poll {
        max: u8,
    },
}

fn action() -> impl proptest::strategy::Strategy<Value = Action> {
    use proptest::prelude::*;
    prop_oneof![
        (1u8..12, any::<bool>(), any::<bool>()).prop_map(|(n, read, plug)| Action::Submit {
            n,
            read,
            plug
        }),
        Just(Action::Flush),
        (1u8..12).prop_map(|max| Action::Poll { max }),
    ]
}

proptest::proptest! {
    /// Any interleaving of bursts, flushes and polls: a tag is never handed out twice
    /// while in flight, Busy comes only when the I/O's hctx is full, and every accepted
    /// I/O completes exactly once.
    #[test]
    fn prop_submit_flush_poll_keeps_every_invariant(
        actions in proptest::collection::vec(action(), 1..80),
        read_queue in proptest::bool::ANY,
    ) {
        let queues = HctxQueues { default: 1, read: u16::from(read_queue), poll: 0 };
        let (d, log) = dev(queues, None);
        let depth = 8u32;
        let mut q = BdevQueue::open(d, BdevQueueOptions { depth, ..Default::default() }).unwrap();
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 512];
        let mut inflight: HashSet<(HctxType, u16)> = HashSet::new();
        let mut per_type = [0u32; HCTX_MAX_TYPES];
        let mut accepted = 0u64;
        let mut completed: Vec<u64> = Vec::new();
        let mut next_token = 0u64;
        for a in actions {
            match a {
                Action::Submit { n, read: is_read, plug: use_plug } => {
                    let mut io = read(0, &mut buf);
                    io.op = if is_read { Op::Read } else { Op::Write };
                    let ty = queues.map(io.op, io.flags).0;
                    if use_plug {
                        plug.begin();
                        q.expect_n(&mut plug, &io, u32::from(n));
                    }
                    for _ in 0..n {
                        io.token = next_token;
                        match q.submit(&mut plug, &io) {
                            Ok(tag) => {
                                proptest::prop_assert!(inflight.insert((ty, tag)), "tag {} twice", tag);
                                per_type[ty.index()] += 1;
                                accepted += 1;
                                next_token += 1;
                            }
                            Err(e) => {
                                proptest::prop_assert!(e.is_busy());
                                proptest::prop_assert_eq!(per_type[ty.index()], depth, "busy only when full");
                            }
                        }
                    }
                    if use_plug {
                        plug.finish();
                    }
                    proptest::prop_assert_eq!(q.busy_tags(ty), per_type[ty.index()], "no tag leaked by the plug");
                }
                Action::Flush => {
                    q.flush();
                }
                Action::Poll { max } => {
                    let n = q.poll(usize::from(max), |rq| {
                        completed.push(rq.token);
                        assert!(inflight.remove(&(rq.hctx, rq.tag)), "completed a tag not in flight");
                        per_type[rq.hctx.index()] -= 1;
                    });
                    proptest::prop_assert!(n <= usize::from(max));
                }
            }
            proptest::prop_assert_eq!(u64::from(q.outstanding()), accepted - completed.len() as u64);
        }
        q.flush();
        while q.outstanding() > 0 {
            q.poll(64, |rq| {
                completed.push(rq.token);
                assert!(inflight.remove(&(rq.hctx, rq.tag)));
            });
        }
        completed.sort_unstable();
        proptest::prop_assert_eq!(completed, (0..accepted).collect::<Vec<u64>>());
        proptest::prop_assert!(log.lock().started.is_empty());
        let total = q.stats().total();
        proptest::prop_assert_eq!(total.ops, accepted);
    }
}

#[test]
fn open_checks_depth() {
    let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
    assert!(
        BdevQueue::open(
            Arc::clone(&d),
            BdevQueueOptions {
                depth: 0,
                ..Default::default()
            }
        )
        .is_err()
    );
    assert!(
        BdevQueue::open(
            d,
            BdevQueueOptions {
                depth: 257,
                ..Default::default()
            }
        )
        .is_err()
    );
}
