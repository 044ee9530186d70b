use super::super::{BdevQueue, BdevQueueOptions, SchedMode, SubmitError};
use super::*;
use crate::bdev::{BdevInfo, BlockDevice, DriverQueue, Uuid};
use crate::hctx::HctxQueues;
use crate::plug::Plug;
use crate::request::{Io, Op, OpSet, PrioClass, ReqFlags, Request};
use crate::sched::DeadlineOptions;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

const BS: u32 = 512;

/// A RAM disk that moves data at submit and completes in FIFO order at poll.
struct Ram {
    info: BdevInfo,
    data: Arc<Mutex<Vec<u8>>>,
    /// Largest number of requests one driver queue held at once.
    max_inflight: Arc<AtomicU64>,
}

struct RamQueue {
    data: Arc<Mutex<Vec<u8>>>,
    fifo: VecDeque<u16>,
    max_inflight: Arc<AtomicU64>,
    /// The device's limits, which no request may break.
    max: u32,
    boundary: u32,
}

impl BlockDevice for Ram {
    fn info(&self) -> &BdevInfo {
        &self.info
    }
    fn open_queue(
        &self,
        _ty: HctxType,
        _i: u16,
        _d: u32,
    ) -> Result<Box<dyn crate::bdev::DriverQueue>, BdevError> {
        Ok(Box::new(RamQueue {
            data: Arc::clone(&self.data),
            fifo: VecDeque::new(),
            max_inflight: Arc::clone(&self.max_inflight),
            max: self.info.max_transfer_blocks,
            boundary: self.info.boundary_blocks,
        }))
    }
}

impl DriverQueue for RamQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        let mut data = self.data.lock();
        for &t in tags {
            let rq = &rqs[usize::from(t)];
            assert!(!self.fifo.contains(&t), "driver tag {t} handed out twice");
            assert!(
                !crate::bdev::split::must_split(rq.lba, rq.nblocks, self.max, self.boundary),
                "{} blocks at {} break the device's limits",
                rq.nblocks,
                rq.lba
            );
            let off = rq.lba as usize * BS as usize;
            let len = rq.nblocks as usize * BS as usize;
            assert_eq!(rq.buf.len() as usize, len, "merged buffer length");
            // SAFETY: the tests keep every buffer alive until its I/O completes.
            let buf = unsafe { std::slice::from_raw_parts_mut(rq.buf.as_ptr(), len) };
            match rq.op {
                Op::Read => buf.copy_from_slice(&data[off..off + len]),
                Op::Write => data[off..off + len].copy_from_slice(buf),
                _ => {}
            }
            self.fifo.push_back(t);
        }
        self.max_inflight
            .fetch_max(self.fifo.len() as u64, Ordering::Relaxed);
    }
    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut n = 0;
        while n < max
            && let Some(t) = self.fifo.pop_front()
        {
            rqs[usize::from(t)].status = IoStatus::Success;
            done.push(t);
            n += 1;
        }
        n
    }
    fn outstanding(&self) -> usize {
        self.fifo.len()
    }
}

fn ram(blocks: u64) -> (Arc<dyn BlockDevice>, Arc<AtomicU64>) {
    ram_max(blocks, 256)
}

/// A RAM disk whose queues may be opened at most `max_depth` deep (below the scheduler
/// tags per owner, the scheduler path copies requests into driver requests).
fn ram_max(blocks: u64, max_depth: u32) -> (Arc<dyn BlockDevice>, Arc<AtomicU64>) {
    ram_limits(blocks, max_depth, 256, 0)
}

/// `ram_max` with a transfer limit and a boundary.
fn ram_limits(
    blocks: u64,
    max_depth: u32,
    max_transfer: u32,
    boundary: u32,
) -> (Arc<dyn BlockDevice>, Arc<AtomicU64>) {
    let max_inflight = Arc::new(AtomicU64::new(0));
    let d = Ram {
        info: BdevInfo {
            name: "R0".into(),
            uuid: Uuid::default(),
            product_name: "Ram".into(),
            block_size: BS,
            num_blocks: blocks,
            supported_ops: OpSet::READ_WRITE.with(Op::Flush),
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: max_depth,
            max_transfer_blocks: max_transfer,
            boundary_blocks: boundary,
        },
        data: Arc::new(Mutex::new(vec![0; (blocks * u64::from(BS)) as usize])),
        max_inflight: Arc::clone(&max_inflight),
    };
    (Arc::new(d), max_inflight)
}

fn sched(owners: u16, depth: u32) -> Arc<SharedDeadline> {
    Arc::new(SharedDeadline::new(DeadlineOptions::for_queues(depth, owners, 256, BS)).unwrap())
}

/// Opens `dev` with `depth` requests under `dd`'s mq-deadline, as `owner`.
fn open_sched(
    dev: Arc<dyn BlockDevice>,
    dd: &Arc<SharedDeadline>,
    depth: u32,
    owner: u16,
) -> Result<BdevQueue, BdevError> {
    BdevQueue::open(
        dev,
        BdevQueueOptions {
            depth,
            sched: SchedMode::MqDeadline {
                dd: Arc::clone(dd),
                owner,
            },
        },
    )
}

/// `buf` cut into I/O buffers of `size` bytes, all derived from one pointer to it, as a
/// submitter's DMA region is: the scheduler merges adjacent buffers into one, addressed through
/// the first one's pointer, which must therefore reach its neighbours (separate `&mut`
/// sub-slices would not, and Miri would rightly refuse the merged access).
fn split_bufs(buf: &mut [u8], size: usize) -> std::vec::IntoIter<IoBuf> {
    let base = buf.as_mut_ptr();
    (0..buf.len() / size)
        // SAFETY: each piece lies inside `buf`, which the tests keep alive and untouched until
        // the I/O using it completes.
        .map(|i| unsafe { IoBuf::from_raw_parts(base.add(i * size), size as u32) })
        .collect::<Vec<_>>()
        .into_iter()
}

fn io(op: Op, lba: u64, buf: IoBuf, token: u64, prio: PrioClass) -> Io {
    Io {
        op,
        lba,
        nblocks: buf.len() / BS,
        buf,
        prio: crate::IoPrio {
            class: prio,
            level: 0,
        },
        token,
        ..Io::default()
    }
}

/// Sequential writes from one contiguous buffer merge; every request completes exactly
/// once, the data lands where it should, and the scheduler tags (deeper than the driver
/// queue) all come back.
#[test]
fn merged_writes_complete_each_member_once_and_data_is_right() {
    // Shared pool (the driver opened with a command id per scheduler tag), then copies
    // (the device cannot be opened that deep).
    merged_writes_case(256);
    merged_writes_case(8);
}

fn merged_writes_case(max_depth: u32) {
    let (dev, max_inflight) = ram_max(1024, max_depth);
    let dd = sched(1, 8);
    let mut q = open_sched(dev, &dd, 8, 0).unwrap();
    assert_eq!(q.path.sched().unwrap().shared, max_depth >= 16);
    let mut plug = Plug::default();
    q.register_plug(&mut plug);
    // 16 scheduler tags over 8 driver tags.
    let mut wbuf: Vec<u8> = (0..16 * BS as usize).map(|i| (i / 7) as u8).collect();
    let mut seen = vec![0u32; 16];
    for (i, chunk) in split_bufs(&mut wbuf, BS as usize).enumerate() {
        q.submit(
            &mut plug,
            &io(Op::Write, 100 + i as u64, chunk, i as u64, PrioClass::Be),
        )
        .unwrap();
    }
    assert_eq!(q.sched_busy_tags(), 16);
    let mut extra = vec![0u8; BS as usize];
    let extra = split_bufs(&mut extra, BS as usize).next().unwrap();
    assert!(
        q.submit(&mut plug, &io(Op::Write, 0, extra, 99, PrioClass::Be))
            .unwrap_err()
            .is_busy(),
        "scheduler tags exhausted"
    );
    q.flush();
    while q.outstanding() > 0 {
        q.poll(4, |rq| {
            assert!(rq.status.is_success());
            seen[rq.token as usize] += 1;
        });
    }
    assert!(seen.iter().all(|&c| c == 1), "{seen:?}");
    assert!(
        dd.stats(PrioClass::Be).merged > 0,
        "sequential writes merge"
    );
    assert!(
        max_inflight.load(Ordering::Relaxed) <= 8,
        "driver depth respected"
    );
    assert_eq!(q.sched_busy_tags(), 0);
    assert_eq!(q.busy_tags(HctxType::Default), 0);
    // Read back (reads merge too, into one contiguous buffer).
    let mut rbuf = vec![0u8; 16 * BS as usize];
    for (i, chunk) in split_bufs(&mut rbuf, BS as usize).enumerate() {
        q.submit(
            &mut plug,
            &io(Op::Read, 100 + i as u64, chunk, i as u64, PrioClass::Rt),
        )
        .unwrap();
    }
    q.flush();
    let mut n = 0;
    while q.outstanding() > 0 {
        n += q.poll(32, |_| {});
    }
    assert_eq!(n, 16);
    assert_eq!(rbuf, wbuf);
    assert_eq!(q.stats().op(Op::Write).ops, 16);
    assert_eq!(q.stats().op(Op::Read).bytes, 16 * u64::from(BS));
    drop(q);
    dd.teardown_check().unwrap();
}

/// A device with a boundary (an NVMe namespace's NOIOB) takes mq-deadline with the options its
/// info gives; options that ignore the boundary are refused with an error that says why.
#[test]
fn deadline_options_from_the_device_info_keep_its_boundary() {
    let (dev, _) = ram_limits(1024, 256, 16, 8);
    let blind = Arc::new(SharedDeadline::new(DeadlineOptions::for_queues(8, 1, 16, BS)).unwrap());
    let err = open_sched(Arc::clone(&dev), &blind, 8, 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("8-block boundary"), "{err}");
    let dd = Arc::new(SharedDeadline::new(dev.info().deadline_options(8, 1)).unwrap());
    open_sched(dev, &dd, 8, 0).expect("the device's own limits open");
}

/// The children of a split I/O go through the scheduler like any request: a child merges with
/// a neighbouring I/O (a child of another split, or a whole one) where the device's limits
/// allow, never beyond them (the device asserts it), and every I/O completes once with its
/// data in place.
#[test]
fn split_children_merge_with_neighbours_within_the_device_limits() {
    // (boundary, second I/O's blocks): with no boundary the 4-block tail child of the first
    // I/O ([16, 20)) merges with the second ([20, 24)); with an 8-block boundary the second
    // (8 blocks) is itself split at 24, its first child merges with that tail, and its second
    // one ([24, 28)) may not join them across the boundary.
    for (boundary, second) in [(0u32, 4u32), (8, 8)] {
        let (dev, _) = ram_limits(1024, 256, 16, boundary);
        let dd = Arc::new(SharedDeadline::new(dev.info().deadline_options(8, 1)).unwrap());
        let mut q = open_sched(Arc::clone(&dev), &dd, 8, 0).unwrap();
        let mut plug = Plug::default();
        let total = 20 + second as usize;
        let mut wbuf: Vec<u8> = (0..total * BS as usize).map(|i| (i / 3) as u8).collect();
        let mut parts = split_bufs(&mut wbuf, BS as usize);
        let first = parts.next().unwrap();
        let base = first.as_ptr();
        // SAFETY: `wbuf` stays alive and untouched until both writes complete.
        let whole = unsafe { IoBuf::from_raw_parts(base, (total * BS as usize) as u32) };
        let a = io(Op::Write, 0, whole.range(0, 20 * BS), 1, PrioClass::Be);
        let b = io(
            Op::Write,
            20,
            whole.range(20 * BS, second * BS),
            2,
            PrioClass::Be,
        );
        plug.begin();
        q.expect(&mut plug, &a);
        q.expect(&mut plug, &b);
        q.submit(&mut plug, &a).unwrap();
        q.submit(&mut plug, &b).unwrap();
        plug.finish();
        assert_eq!(q.outstanding(), 2);
        q.flush();
        let mut seen = Vec::new();
        while q.outstanding() > 0 {
            q.poll(4, |rq| {
                assert!(rq.status.is_success());
                seen.push((rq.token, rq.lba, rq.nblocks));
            });
        }
        seen.sort_unstable();
        assert_eq!(
            seen,
            vec![(1, 0, 20), (2, 20, second)],
            "boundary {boundary}"
        );
        assert_eq!(
            dd.stats(PrioClass::Be).merged,
            1,
            "boundary {boundary}: the tail child merged once"
        );
        // Read the blocks back through the splits.
        let mut rbuf = vec![0u8; total * BS as usize];
        let rb = split_bufs(&mut rbuf, total * BS as usize).next().unwrap();
        q.submit(&mut plug, &io(Op::Read, 0, rb, 3, PrioClass::Be))
            .unwrap();
        q.flush();
        while q.outstanding() > 0 {
            q.poll(4, |rq| {
                assert_eq!((rq.token, rq.nblocks), (3, total as u32))
            });
        }
        assert_eq!(rbuf, wbuf);
        assert_eq!(q.sched_busy_tags(), 0);
        drop(q);
        dd.teardown_check().unwrap();
    }
}

/// A device whose boundary the scheduler does not respect is refused at open.
#[test]
fn open_refuses_a_scheduler_that_would_merge_across_the_boundary() {
    let (dev, _) = ram_limits(1024, 256, 256, 8);
    let dd = sched(1, 8);
    let e = open_sched(dev, &dd, 8, 0).unwrap_err();
    assert!(e.to_string().contains("boundary 0 blocks"), "{e}");
}

/// The scheduler-pool path: a regular burst (one class, nothing adjacent, no HEAD) on an
/// idle scheduler is handed out by count; irregular bursts and bursts behind busy
/// classes go through the scheduler; both kinds complete in the same driver batches,
/// each request once, with its own extent and clock, and the counters balance.
#[test]
fn counted_and_scheduled_requests_complete_once_with_their_own_extent() {
    let (dev, max_inflight) = ram(4096);
    let dd = sched(1, 16);
    let mut q = open_sched(dev, &dd, 16, 0).unwrap();
    let via = |q: &BdevQueue| {
        let sp = q.path.sched().unwrap();
        assert!(
            sp.shared,
            "the RAM disk takes a command id per scheduler tag"
        );
        sp.via.iter().filter(|&&v| v != Via::Counted).count()
    };
    let mut plug = Plug::default();
    let mut bufs = vec![0u8; 32 * 2 * BS as usize];
    let mut chunks = split_bufs(&mut bufs, 2 * BS as usize);
    let mut lba_of = std::collections::HashMap::new();
    let mut submit = |q: &mut BdevQueue, op, lba: u64, prio, token: u64| {
        lba_of.insert(token, lba);
        let io = io(op, lba, chunks.next().unwrap(), token, prio);
        q.submit(&mut plug, &io).unwrap();
    };
    // Regular BE burst: counted, no request through the scheduler.
    for (t, lba) in [(0u64, 400u64), (1, 100), (2, 900), (3, 40)] {
        submit(&mut q, Op::Read, lba, PrioClass::Be, t);
    }
    assert_eq!(q.flush(), 4);
    assert_eq!(via(&q), 0);
    assert_eq!(dd.stats(PrioClass::Be).dispatched, 4);
    // Mixed classes and a back-mergeable pair (contiguous buffers): the full path. RT
    // goes out (the two 2-block writes at 600 and 602 merge into one 4-block request);
    // IDLE waits behind the BE requests in flight.
    submit(&mut q, Op::Read, 2000, PrioClass::Idle, 10);
    submit(&mut q, Op::Write, 600, PrioClass::Rt, 11);
    submit(&mut q, Op::Write, 602, PrioClass::Rt, 12);
    assert_eq!(q.flush(), 1, "one merged RT write starts, IDLE waits");
    assert_eq!(via(&q), 1);
    assert_eq!(dd.stats(PrioClass::Rt).merged, 1);
    assert_eq!(q.busy_tags(HctxType::Default), 5);
    let mut seen = std::collections::HashMap::<u64, u32>::new();
    while q.outstanding() > 0 {
        q.poll(3, |rq| {
            assert!(rq.status.is_success());
            assert_eq!(rq.lba, lba_of[&rq.token], "own extent reported");
            assert_eq!(rq.nblocks, 2);
            assert!(rq.submit_ns <= rq.complete_ns);
            *seen.entry(rq.token).or_default() += 1;
        });
    }
    let mut tokens: Vec<u64> = seen.keys().copied().collect();
    tokens.sort_unstable();
    assert_eq!(tokens, [0, 1, 2, 3, 10, 11, 12]);
    assert!(seen.values().all(|&c| c == 1), "{seen:?}");
    assert_eq!(via(&q), 0, "every scheduled request restored");
    let sp = q.path.sched().unwrap();
    assert_eq!((sp.sched_inflight, sp.counted_inflight), (0, [0; 3]));
    assert_eq!(q.stats().op(Op::Read).bytes, 5 * 2 * u64::from(BS));
    assert!(max_inflight.load(Ordering::Relaxed) <= 16);
    assert_eq!(
        (q.sched_busy_tags(), q.busy_tags(HctxType::Default)),
        (0, 0)
    );
    drop(q);
    dd.teardown_check().unwrap();
}

/// `submit_with` on the scheduler path: the burst is checked and noted once, each I/O
/// is queued as `submit` would; it stops at the first refused I/O with its reason, and a
/// regular burst still goes out by count.
#[test]
fn submit_with_on_a_scheduler_queues_a_shaped_burst() {
    let (dev, _) = ram(64);
    let dd = sched(1, 4);
    let mut q = open_sched(dev, &dd, 4, 0).unwrap();
    let mut plug = Plug::default();
    let mut bufs = vec![0u8; 8 * 2 * BS as usize];
    let base = bufs.as_mut_ptr();
    let buf = |i: usize| {
        // SAFETY: `bufs` outlives every I/O of the test and slot `i` is used by one I/O.
        unsafe { IoBuf::from_raw_parts(base.add(i * 2 * BS as usize), 2 * BS) }
    };
    let shape = Io {
        op: Op::Read,
        nblocks: 2,
        prio: crate::IoPrio {
            class: PrioClass::Idle,
            level: 0,
        },
        ..Io::default()
    };
    let lbas = [40u64, 8, 30, 63, 20];
    let mut k = 0;
    let (n, e) = q.submit_with(&mut plug, &shape, 5, || {
        k += 1;
        (lbas[k - 1], buf(k - 1), k as u64)
    });
    assert_eq!((n, k), (3, 4), "stops at LBA 63 + 2 blocks > 64");
    assert!(
        matches!(e, Some(SubmitError::OutOfRange { lba: 63, .. })),
        "{e:?}"
    );
    assert_eq!(q.outstanding(), 3);
    assert_eq!(q.flush(), 3);
    let sp = q.path.sched().unwrap();
    assert!(
        sp.via.iter().all(|&v| v == Via::Counted),
        "a regular burst goes out by count"
    );
    assert_eq!(dd.stats(PrioClass::Idle).dispatched, 3);
    let (n, e) = q.submit_with(&mut plug, &shape, 8, || (50, buf(5), 9));
    assert_eq!((n, e), (5, Some(SubmitError::Busy)), "8 scheduler tags");
    assert_eq!(q.flush(), 1, "the driver queue (4) is full but for one");
    let mut toks = Vec::new();
    while q.outstanding() > 0 {
        q.poll(8, |rq| {
            assert_eq!(rq.prio.class, PrioClass::Idle);
            toks.push(rq.token);
        });
    }
    toks.sort_unstable();
    assert_eq!(toks, [1, 2, 3, 9, 9, 9, 9, 9]);
    let bad = Io {
        nblocks: 0,
        ..shape
    };
    let (n, e) = q.submit_with(&mut plug, &bad, 2, || unreachable!());
    assert_eq!(n, 0);
    assert!(matches!(e, Some(SubmitError::Empty { .. })), "{e:?}");
    drop(q);
    dd.teardown_check().unwrap();
}

#[derive(Clone, Debug)]
enum Step {
    /// `n` I/Os one by one: class, write or read, sequential (LBAs follow each other)
    /// or spread, a HEAD insertion among them.
    Submit {
        n: u8,
        prio: u8,
        write: bool,
        seq: bool,
        head: bool,
    },
    /// `n` reads of one class through `submit_with`.
    SubmitWith {
        n: u8,
        prio: u8,
        seq: bool,
    },
    Flush,
    Poll {
        max: u8,
    },
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        3 => (1u8..10, 0u8..3, any::<bool>(), any::<bool>(), proptest::bool::weighted(0.1))
            .prop_map(|(n, prio, write, seq, head)| Step::Submit { n, prio, write, seq, head }),
        3 => (1u8..10, 0u8..3, any::<bool>())
            .prop_map(|(n, prio, seq)| Step::SubmitWith { n, prio, seq }),
        2 => Just(Step::Flush),
        3 => (1u8..12).prop_map(|max| Step::Poll { max }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, ..Default::default() })]

    /// Any mix of regular and irregular bursts, flushes and polls on the scheduler-pool
    /// path: every I/O completes exactly once with its own LBA, the driver depth holds,
    /// the per-class counters balance and the path's in-flight counts return to zero.
    #[test]
    fn prop_sched_path_every_io_once(
        steps in proptest::collection::vec(step(), 1..60),
        deep in proptest::bool::ANY,
    ) {
        const SLOTS: usize = 16;
        let (dev, max_inflight) = ram_max(256, if deep { 256 } else { 8 });
        let dd = sched(1, 8);
        let mut q = open_sched(dev, &dd, 8, 0)
        .unwrap();
        proptest::prop_assert_eq!(q.path.sched().unwrap().shared, deep);
        let mut plug = Plug::default();
        let mut bufs = vec![0u8; SLOTS * 2 * BS as usize];
        let base = bufs.as_mut_ptr();
        // SAFETY: `bufs` outlives every I/O; a slot serves one I/O at a time.
        let buf = |slot: usize| unsafe { IoBuf::from_raw_parts(base.add(slot * 2 * BS as usize), 2 * BS) };
        // Ascending pops: consecutive submits get contiguous buffers (merges happen).
        let mut free: Vec<usize> = (0..SLOTS).rev().collect();
        let mut lba_of = std::collections::HashMap::new();
        let mut slot_of = std::collections::HashMap::new();
        let mut done = std::collections::HashMap::<u64, u32>::new();
        let (mut token, mut next_lba, mut seed) = (0u64, 0u64, 0x2545_f491u64);
        let complete = |rq: &Request, done: &mut std::collections::HashMap<u64, u32>,
                            free: &mut Vec<usize>, slot_of: &std::collections::HashMap<u64, usize>,
                            lba_of: &std::collections::HashMap<u64, u64>| {
            assert!(rq.status.is_success());
            assert_eq!(rq.lba, lba_of[&rq.token], "own LBA reported");
            assert_eq!(rq.nblocks, 2);
            *done.entry(rq.token).or_default() += 1;
            free.push(slot_of[&rq.token]);
        };
        let mut lba = |seq: bool| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            next_lba = if seq { (next_lba + 2) % 254 } else { seed % 127 * 2 };
            next_lba
        };
        for st in steps {
            match st {
                Step::Submit { n, prio, write, seq, head } => {
                    for i in 0..n {
                        let Some(&slot) = free.last() else { break };
                        let io = Io {
                            op: if write { Op::Write } else { Op::Read },
                            lba: lba(seq),
                            nblocks: 2,
                            buf: buf(slot),
                            prio: crate::IoPrio { class: PrioClass::ALL[prio as usize], level: 0 },
                            flags: if head && i == 0 { ReqFlags::HEAD } else { ReqFlags::NONE },
                            token,
                        };
                        match q.submit(&mut plug, &io) {
                            Ok(_) => {
                                free.pop();
                                lba_of.insert(token, io.lba);
                                slot_of.insert(token, slot);
                                token += 1;
                            }
                            Err(e) => proptest::prop_assert!(e.is_busy()),
                        }
                    }
                }
                Step::SubmitWith { n, prio, seq } => {
                    let shape = Io {
                        op: Op::Read,
                        nblocks: 2,
                        prio: crate::IoPrio { class: PrioClass::ALL[prio as usize], level: 0 },
                        ..Io::default()
                    };
                    let want = u32::from(n).min(free.len() as u32);
                    let mut given = Vec::new();
                    let (k, e) = q.submit_with(&mut plug, &shape, want, || {
                        let slot = free.pop().unwrap();
                        let l = lba(seq);
                        given.push((token + given.len() as u64, l, slot));
                        (l, buf(slot), token + given.len() as u64 - 1)
                    });
                    proptest::prop_assert!(e.is_none_or(|e| e.is_busy()));
                    for (i, &(t, l, slot)) in given.iter().enumerate() {
                        if (i as u32) < k {
                            lba_of.insert(t, l);
                            slot_of.insert(t, slot);
                        } else {
                            free.push(slot);
                        }
                    }
                    token += u64::from(k);
                }
                Step::Flush => {
                    q.flush();
                }
                Step::Poll { max } => {
                    q.poll(usize::from(max), |rq| complete(rq, &mut done, &mut free, &slot_of, &lba_of));
                }
            }
            proptest::prop_assert!(q.busy_tags(HctxType::Default) <= 8);
        }
        q.flush();
        let mut rounds = 0;
        while q.outstanding() > 0 {
            q.poll(16, |rq| complete(rq, &mut done, &mut free, &slot_of, &lba_of));
            rounds += 1;
            proptest::prop_assert!(rounds < 10_000, "drain does not progress");
        }
        proptest::prop_assert_eq!(done.len() as u64, token, "no I/O lost");
        proptest::prop_assert!(done.values().all(|&c| c == 1), "an I/O completed twice");
        proptest::prop_assert!(max_inflight.load(Ordering::Relaxed) <= 8);
        let sp = q.path.sched().unwrap();
        proptest::prop_assert_eq!((sp.sched_inflight, sp.counted_inflight), (0, [0; 3]));
        proptest::prop_assert_eq!(sp.deferred, [0; 3], "every completion reported");
        proptest::prop_assert!(sp.via.iter().all(|&v| v == Via::Counted));
        proptest::prop_assert_eq!((q.sched_busy_tags(), q.busy_tags(HctxType::Default)), (0, 0));
        for p in PrioClass::ALL {
            let s = dd.stats(p);
            proptest::prop_assert_eq!(s.queued, 0);
            proptest::prop_assert_eq!(s.inserted, s.completed);
            proptest::prop_assert_eq!(s.dispatched + s.merged, s.inserted);
        }
        drop(q);
        proptest::prop_assert!(dd.teardown_check().is_ok());
    }
}

/// Writes get the scheduler's shallow depth (no batching); reads are not limited.
#[test]
fn limit_depth_applies_to_writes_only() {
    let (dev, _) = ram(1024);
    let dd = sched(1, 16);
    dd.set_param("async_depth", 4).unwrap();
    let mut q = open_sched(dev, &dd, 16, 0).unwrap();
    let mut plug = Plug::default();
    let mut bufs = vec![0u8; 64 * BS as usize];
    let mut chunks = split_bufs(&mut bufs, BS as usize);
    let mut writes = 0;
    while q
        .submit(
            &mut plug,
            &io(
                Op::Write,
                2 * writes,
                chunks.next().unwrap(),
                0,
                PrioClass::Be,
            ),
        )
        .is_ok()
    {
        writes += 1;
    }
    assert!((1..=4).contains(&writes), "shallow depth 4, got {writes}");
    let mut reads = 0;
    while q
        .submit(
            &mut plug,
            &io(
                Op::Read,
                2 * reads + 1,
                chunks.next().unwrap(),
                0,
                PrioClass::Be,
            ),
        )
        .is_ok()
    {
        reads += 1;
    }
    assert_eq!(writes + reads, 32, "reads use every scheduler tag");
    q.flush();
    while q.outstanding() > 0 {
        q.poll(32, |_| {});
    }
}

/// Two reactors (threads, each with its own queue and owner number) share one
/// mq-deadline device with mixed reads and writes in a small range (merges and
/// cross-owner dispatch): every I/O completes exactly once, nothing stays queued.
#[test]
fn two_owners_every_completion_exactly_once() {
    // Miri interprets every instruction: fewer rounds keep it to seconds.
    const ROUNDS: u64 = if cfg!(miri) { 20 } else { 400 };
    let (dev, _) = ram(256);
    let dd = sched(2, 16);
    let threads: Vec<_> = (0..2u16)
        .map(|owner| {
            let dev = Arc::clone(&dev);
            let dd = Arc::clone(&dd);
            std::thread::spawn(move || {
                let mut q = open_sched(dev, &dd, 16, owner).unwrap();
                let mut plug = Plug::default();
                q.register_plug(&mut plug);
                // One buffer slot per scheduler tag (32), each two blocks long.
                let mut bufs = vec![0u8; 32 * 2 * BS as usize];
                let slots: Vec<IoBuf> = split_bufs(&mut bufs, 2 * BS as usize).collect();
                let mut free: Vec<usize> = (0..32).collect();
                let mut slot_of = std::collections::HashMap::new();
                let mut counts = std::collections::HashMap::<u64, u32>::new();
                let mut seed = 0x9e37_79b9u32 ^ u32::from(owner);
                let mut token = u64::from(owner) << 32;
                let mut accepted = 0u64;
                for _ in 0..ROUNDS {
                    plug.begin();
                    for _ in 0..8 {
                        let Some(&s) = free.last() else { break };
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        let op = if seed & 1 == 0 { Op::Read } else { Op::Write };
                        let prio = PrioClass::ALL[(seed >> 1) as usize % 3];
                        let lba = u64::from(seed >> 8) % 64 * 2;
                        match q.submit(&mut plug, &io(op, lba, slots[s], token, prio)) {
                            Ok(_) => {
                                free.pop();
                                slot_of.insert(token, s);
                                accepted += 1;
                                token += 1;
                            }
                            Err(e) => assert!(e.is_busy()),
                        }
                    }
                    plug.finish();
                    q.flush();
                    q.poll(8, |rq| {
                        *counts.entry(rq.token).or_default() += 1;
                        free.push(slot_of[&rq.token]);
                    });
                }
                while q.outstanding() > 0 {
                    q.poll(32, |rq| {
                        *counts.entry(rq.token).or_default() += 1;
                    });
                    std::thread::yield_now();
                }
                assert_eq!(counts.len() as u64, accepted, "no I/O lost");
                assert!(counts.values().all(|&c| c == 1), "no I/O completed twice");
                assert_eq!(q.sched_busy_tags(), 0);
                accepted
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let inserted: u64 = PrioClass::ALL.iter().map(|&p| dd.stats(p).inserted).sum();
    assert_eq!(inserted, total);
    dd.teardown_check().unwrap();
}

#[test]
fn open_checks_the_scheduler() {
    let (dev, _) = ram(64);
    let dd = sched(1, 8);
    let e = open_sched(Arc::clone(&dev), &dd, 8, 1).unwrap_err();
    assert!(e.to_string().contains("owner 1"), "{e}");
    let dd = Arc::new(SharedDeadline::new(DeadlineOptions::for_queues(8, 1, 256, 4096)).unwrap());
    let e = open_sched(dev, &dd, 8, 0).unwrap_err();
    assert!(e.to_string().contains("block size"), "{e}");
}

/// The direct-dispatch fast path of an idle scheduler: taken only when mq-deadline would
/// hand the whole burst out at once, with the same counters as insert + dispatch.
#[test]
fn direct_dispatch_only_when_equivalent() {
    use crate::sched::Deadline;
    let rq = |id: u32, prio: PrioClass, sector: u64| SchedRq {
        id,
        owner: 0,
        op: Op::Read,
        prio,
        flags: ReqFlags::NONE,
        sector,
        nblocks: 8,
        addr: 0,
    };
    let mut dd = Deadline::new(DeadlineOptions::default()).unwrap();
    let mut out = Vec::with_capacity(64);
    let burst = [
        rq(0, PrioClass::Be, 800),
        rq(1, PrioClass::Be, 80),
        rq(2, PrioClass::Be, 8000),
    ];
    assert!(
        !dd.insert_dispatch_direct(&burst, 0, 1, 2, &mut out),
        "burst larger than max"
    );
    assert!(dd.insert_dispatch_direct(&burst, 0, 1, 32, &mut out));
    assert_eq!(out.iter().map(|d| d.id).collect::<Vec<_>>(), [0, 1, 2]);
    let s = dd.stats(PrioClass::Be);
    assert_eq!((s.inserted, s.dispatched, s.queued), (3, 3, 3));
    // BE in flight does not hold RT back; RT in flight holds BE back.
    out.clear();
    assert!(dd.insert_dispatch_direct(&[rq(3, PrioClass::Rt, 16)], 0, 2, 32, &mut out));
    out.clear();
    assert!(!dd.insert_dispatch_direct(&[rq(4, PrioClass::Be, 24)], 0, 3, 32, &mut out));
    // Adjacent requests (would merge) and requests still out take the full path.
    let adjacent = [rq(5, PrioClass::Rt, 100), rq(6, PrioClass::Rt, 108)];
    assert!(!dd.insert_dispatch_direct(&adjacent, 0, 3, 32, &mut out));
    assert!(!dd.insert_dispatch_direct(&[rq(0, PrioClass::Rt, 500)], 0, 3, 32, &mut out));
    // Another owner's request, a HEAD insertion: full path.
    let mut other = rq(7, PrioClass::Rt, 900);
    other.owner = 1;
    assert!(!dd.insert_dispatch_direct(&[other], 0, 3, 32, &mut out));
    let mut head = rq(7, PrioClass::Rt, 900);
    head.flags = ReqFlags::HEAD;
    assert!(!dd.insert_dispatch_direct(&[head], 0, 3, 32, &mut out));
    assert!(out.is_empty(), "refusals change nothing");
    // Complete everything: counters balance, the scheduler is idle again.
    let mut done = Vec::new();
    dd.complete_batch([0, 1, 2, 3].map(|id| (id, IoStatus::Success)), |m, _| {
        done.push(m)
    })
    .unwrap();
    done.sort_unstable();
    assert_eq!(done, [0, 1, 2, 3]);
    // Something queued: the full path (deadline and order decisions are pending).
    dd.insert(&rq(8, PrioClass::Be, 4000), 4).unwrap();
    assert!(!dd.insert_dispatch_direct(&[rq(9, PrioClass::Be, 64)], 0, 5, 32, &mut out));
    dd.dispatch_batch(0, 6, 32, &mut out);
    dd.complete_batch(out.iter().map(|d| (d.id, IoStatus::Success)), |_, _| {})
        .unwrap();
    crate::sched::deadline::assert_drained(|p| dd.stats(p));
    dd.teardown_check().unwrap();
}

/// Requests another reactor's dispatch takes for this owner wait on this owner's ready
/// list and start at its next poll or flush, on its own driver queue.
#[test]
fn ready_list_requests_start_on_their_owner() {
    let (dev, _) = ram(1024);
    let dd = sched(2, 2);
    let open = |owner| open_sched(Arc::clone(&dev), &dd, 2, owner).unwrap();
    let (mut a, mut b) = (open(0), open(1));
    let mut plug = Plug::default();
    let mut bufs = vec![0u8; 8 * BS as usize];
    let mut chunks = split_bufs(&mut bufs, BS as usize);
    // B: 4 scheduler tags, 2 driver tags: two start, two (low sectors) stay queued.
    for lba in [10u64, 20, 2, 4] {
        let io = io(
            Op::Read,
            lba,
            chunks.next().unwrap(),
            100 + lba,
            PrioClass::Be,
        );
        b.submit(&mut plug, &io).unwrap();
    }
    assert_eq!(b.flush(), 2);
    // A's dispatch runs the elevator: B's queued requests (lower sectors) come first and
    // go to B's ready list; A starts only its own.
    for lba in [500u64, 600] {
        let io = io(Op::Read, lba, chunks.next().unwrap(), lba, PrioClass::Be);
        a.submit(&mut plug, &io).unwrap();
    }
    // B's flush took the two lowest sectors (2, 4); A's elevator continues at 10, 20:
    // B's, parked on B's ready list (they use A's budget), so A starts nothing yet.
    assert_eq!(a.flush(), 0);
    assert_eq!(
        dd.stats(PrioClass::Be).dispatched,
        4,
        "B's 10 and 20 left the trees"
    );
    let mut got_a = Vec::new();
    while a.outstanding() > 0 {
        a.poll(8, |rq| got_a.push(rq.token));
    }
    got_a.sort_unstable();
    assert_eq!(got_a, [500, 600], "A ran only its own requests");
    let mut got_b = Vec::new();
    for _ in 0..10 {
        b.poll(8, |rq| got_b.push(rq.token));
    }
    got_b.sort_unstable();
    assert_eq!(got_b, [102, 104, 110, 120], "B ran its parked requests");
    assert!(!dd.has_pending());
    drop((a, b));
    dd.teardown_check().unwrap();
}
