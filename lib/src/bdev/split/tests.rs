//! The split geometry, the parent table, and splitting through a [`BdevQueue`] (with and
//! without mq-deadline) on a RAM device that refuses any request beyond its limits.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use proptest::prelude::*;

use super::*;
use crate::bdev::{BdevError, BdevInfo, BdevQueue, BdevQueueOptions, BlockDevice, DriverQueue};
use crate::bdev::{SchedMode, SubmitError, Uuid};
use crate::hctx::HctxQueues;
use crate::plug::Plug;
use crate::request::{Op, OpSet};
use crate::sched::{DeadlineOptions, SharedDeadline};

const BS: u32 = 512;

// ---------------------------------------------------------------------------------------
// Geometry and the parent table alone.

fn limits() -> impl Strategy<Value = (u32, u32)> {
    (
        prop_oneof![1u32..=8, 1u32..=300, Just(128u32), Just(u32::MAX)],
        prop_oneof![Just(0u32), 1u32..=64, (0u32..10).prop_map(|s| 1 << s)],
    )
}

proptest! {
    /// Random sizes and offsets: the children cover the parent's blocks exactly, front to
    /// back with no gap or overlap, each within the transfer limit and the boundary, each as
    /// long as the limits allow (so none could be merged with the next one by the device's
    /// rules), and the table hands out each child's part of the buffer, advancing block by
    /// block; `must_split` is true exactly when there is more than one child.
    #[test]
    fn prop_children_cover_the_parent_exactly(
        lba in prop_oneof![0u64..5000, 0u64..(1 << 40)],
        nblocks in prop_oneof![1u32..40, 1u32..5000, 1u32..200_000],
        (max, boundary) in limits(),
        write in any::<bool>(),
    ) {
        let kids: Vec<(u64, u32)> = children(lba, nblocks, max, boundary).collect();
        let mut at = lba;
        for (i, &(start, n)) in kids.iter().enumerate() {
            prop_assert_eq!(start, at, "child {} starts after a gap or an overlap", i);
            prop_assert!(n >= 1 && n <= max, "child {} of {} blocks, max {}", i, n, max);
            prop_assert!(boundary == 0 || !crosses(start, n, boundary), "child {} crosses", i);
            let last = i + 1 == kids.len();
            let at_boundary = boundary != 0 && (start + u64::from(n)).is_multiple_of(u64::from(boundary));
            prop_assert!(last || n == max || at_boundary, "child {} could have been longer", i);
            at += u64::from(n);
        }
        prop_assert_eq!(at, lba + u64::from(nblocks), "the children end where the parent does");
        prop_assert_eq!(kids.len() > 1, must_split(lba, nblocks, max, boundary));
        if boundary == 0 {
            prop_assert_eq!(kids.len() as u32, expected_children(nblocks, max));
        }

        // The table: the same children, with the buffer cut to match.
        let mut region = vec![0u8; 16];
        let base = region.as_mut_ptr();
        let len = u64::from(nblocks) * u64::from(BS);
        prop_assume!(len <= u64::from(u32::MAX));
        // SAFETY: never dereferenced: the test only compares addresses and lengths.
        let buf = unsafe { IoBuf::from_raw_parts(base, len as u32) };
        let io = Io { op: if write { Op::Write } else { Op::Read }, lba, nblocks, buf, token: 77, ..Io::default() };
        let mut s = Splits::new(4, max, boundary, BS);
        let slot = s.start(&io, HctxType::Default, ReqFlags::NONE, 5).unwrap();
        let mut off = 0u64;
        for &(start, n) in &kids {
            let (child, flags) = s.next_child(slot).unwrap();
            prop_assert!(flags.contains(ReqFlags::CHILD));
            prop_assert_eq!((child.lba, child.nblocks, child.token), (start, n, u64::from(slot)));
            prop_assert_eq!(child.buf.as_ptr() as usize, base as usize + off as usize);
            prop_assert_eq!(u64::from(child.buf.len()), u64::from(n) * u64::from(BS));
            s.issued(slot, n);
            off += u64::from(child.buf.len());
        }
        prop_assert_eq!(off, len);
        prop_assert!(s.next_child(slot).is_none());
        drop(region);
    }
}

/// What the table test does next.
#[derive(Clone, Debug)]
enum Step {
    /// A new parent of `nblocks`.
    Start { nblocks: u32 },
    /// Issue up to `n` children, oldest waiting parent first (tags freed).
    Issue { n: u8 },
    /// Complete the `k`-th child in flight (modulo), failing it if `fail`.
    Complete { k: u16, fail: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (1u32..80).prop_map(|nblocks| Step::Start { nblocks }),
        2 => (0u8..6).prop_map(|n| Step::Issue { n }),
        4 => (any::<u16>(), prop::bool::weighted(0.1)).prop_map(|(k, fail)| Step::Complete { k, fail }),
    ]
}

proptest! {
    /// The parent table under random issue and completion orders, with random child errors:
    /// each parent completes exactly once, after its last issued child, with the first error
    /// any child completed with; no child is issued after an error; every other child is
    /// absorbed (reported to nobody).
    #[test]
    fn prop_parents_complete_once_with_the_first_error(
        steps in proptest::collection::vec(step(), 1..200),
        max in 1u32..16,
        boundary in prop_oneof![Just(0u32), 1u32..24],
    ) {
        let mut s = Splits::new(8, max, boundary, BS);
        // In flight: (slot, token of the parent, child request).
        let mut flight: Vec<(u16, Request)> = Vec::new();
        // Per parent token: (first error, children completed, blocks issued, error seen).
        let mut model: HashMap<u64, (IoStatus, u32, u32)> = HashMap::new();
        let mut completed: Vec<u64> = Vec::new();
        let mut children_done = 0usize;
        let mut next_token = 1000u64;
        let issue = |s: &mut Splits, slot: u16, flight: &mut Vec<(u16, Request)>, model: &mut HashMap<u64, (IoStatus, u32, u32)>, token: u64| -> bool {
            let Some((child, flags)) = s.next_child(slot) else { return false };
            let rq = Request { op: child.op, flags, lba: child.lba, nblocks: child.nblocks, token: child.token, ..Request::default() };
            s.issued(slot, child.nblocks);
            model.get_mut(&token).unwrap().2 += child.nblocks;
            flight.push((slot, rq));
            true
        };
        let mut tokens: HashMap<u16, u64> = HashMap::new();
        for st in steps {
            match st {
                Step::Start { nblocks } => {
                    let io = Io { op: Op::WriteZeroes, lba: u64::from(nblocks) * 7, nblocks, token: next_token, ..Io::default() };
                    let Some(slot) = s.start(&io, HctxType::Default, ReqFlags::NONE, 1) else {
                        prop_assert_eq!(s.in_progress(), 8);
                        continue;
                    };
                    tokens.insert(slot, next_token);
                    model.insert(next_token, (IoStatus::Success, 0, 0));
                    // The first child has a tag, as `submit_split` requires.
                    prop_assert!(issue(&mut s, slot, &mut flight, &mut model, next_token));
                    s.wait_if_unfinished(slot);
                    next_token += 1;
                }
                Step::Issue { n } => {
                    let mut left = n;
                    while left > 0 && let Some(slot) = s.first_waiting() {
                        let token = tokens[&slot];
                        while left > 0 && issue(&mut s, slot, &mut flight, &mut model, token) {
                            left -= 1;
                        }
                        if s.next_child(slot).is_none() {
                            s.pop_waiting();
                        }
                    }
                }
                Step::Complete { k, fail } => {
                    if flight.is_empty() {
                        continue;
                    }
                    let (slot, mut rq) = flight.remove(usize::from(k) % flight.len());
                    let token = tokens[&slot];
                    rq.status = if fail { IoStatus::Errno(libc::EIO) } else { IoStatus::Success };
                    rq.complete_ns = 9;
                    let m = model.get_mut(&token).unwrap();
                    if m.0.is_success() && fail {
                        m.0 = rq.status;
                    }
                    m.1 += 1;
                    children_done += 1;
                    if let Some(p) = s.child_done(&rq) {
                        let m = model[&token];
                        prop_assert_eq!(p.token, token);
                        prop_assert_eq!(p.status, m.0, "the first error");
                        prop_assert!(!p.flags.contains(ReqFlags::CHILD));
                        prop_assert_eq!((p.submit_ns, p.complete_ns), (1, 9));
                        prop_assert!(flight.iter().all(|(sl, _)| *sl != slot), "a child still in flight");
                        let whole = p.nblocks;
                        prop_assert!(m.2 == whole || !m.0.is_success(), "completed before all its blocks were issued");
                        prop_assert!(!completed.contains(&token), "completed twice");
                        completed.push(token);
                        tokens.remove(&slot);
                    }
                    // After an error nothing more is issued.
                    if !model[&token].0.is_success() && tokens.contains_key(&slot) {
                        prop_assert!(s.next_child(slot).is_none());
                    }
                }
            }
            prop_assert_eq!(s.in_progress(), tokens.len());
        }
        prop_assert_eq!(s.take_absorbed(), children_done - completed.len());
    }
}

// ---------------------------------------------------------------------------------------
// Through a BdevQueue.

/// What the RAM device saw.
#[derive(Default)]
struct Seen {
    /// Requests started, in order: (op, lba, nblocks).
    requests: Vec<(Op, u64, u32)>,
    /// Most requests in flight at once on one queue.
    max_inflight: usize,
}

/// A RAM disk with a transfer limit and a boundary: data moves at submit, completions come in
/// FIFO order at poll; a request beyond the limits (which the block layer must have split)
/// fails the test, and a request touching `fail_lba` completes with EIO.
struct Ram {
    info: BdevInfo,
    data: Arc<Mutex<Vec<u8>>>,
    seen: Arc<Mutex<Seen>>,
    fail_lba: Option<u64>,
}

struct RamQueue {
    data: Arc<Mutex<Vec<u8>>>,
    seen: Arc<Mutex<Seen>>,
    fifo: VecDeque<u16>,
    max: u32,
    boundary: u32,
    fail_lba: Option<u64>,
}

impl BlockDevice for Ram {
    fn info(&self) -> &BdevInfo {
        &self.info
    }
    fn open_queue(&self, _: HctxType, _: u16, _: u32) -> Result<Box<dyn DriverQueue>, BdevError> {
        Ok(Box::new(RamQueue {
            data: Arc::clone(&self.data),
            seen: Arc::clone(&self.seen),
            fifo: VecDeque::new(),
            max: self.info.max_transfer_blocks,
            boundary: self.info.boundary_blocks,
            fail_lba: self.fail_lba,
        }))
    }
}

impl DriverQueue for RamQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        let mut data = self.data.lock();
        let mut seen = self.seen.lock();
        for &t in tags {
            let rq = &mut rqs[usize::from(t)];
            assert!(
                !must_split(rq.lba, rq.nblocks, self.max, self.boundary),
                "the device got {} blocks at {} (max {}, boundary {})",
                rq.nblocks,
                rq.lba,
                self.max,
                self.boundary
            );
            seen.requests.push((rq.op, rq.lba, rq.nblocks));
            let off = rq.lba as usize * BS as usize;
            let len = rq.nblocks as usize * BS as usize;
            if rq.op.has_data() {
                assert_eq!(rq.buf.len() as usize, len, "buffer length");
                // SAFETY: the tests keep every buffer alive until its I/O completes.
                let buf = unsafe { std::slice::from_raw_parts_mut(rq.buf.as_ptr(), len) };
                match rq.op {
                    Op::Read => buf.copy_from_slice(&data[off..off + len]),
                    _ => data[off..off + len].copy_from_slice(buf),
                }
            }
            let hit = self
                .fail_lba
                .is_some_and(|l| (rq.lba..rq.lba + u64::from(rq.nblocks)).contains(&l));
            rq.status = if hit {
                IoStatus::Errno(libc::EIO)
            } else {
                IoStatus::Success
            };
            self.fifo.push_back(t);
        }
        seen.max_inflight = seen.max_inflight.max(self.fifo.len());
    }
    fn poll(&mut self, _rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut n = 0;
        while n < max
            && let Some(t) = self.fifo.pop_front()
        {
            done.push(t);
            n += 1;
        }
        n
    }
    fn outstanding(&self) -> usize {
        self.fifo.len()
    }
}

fn ram(
    blocks: u64,
    max: u32,
    boundary: u32,
    fail_lba: Option<u64>,
) -> (Arc<dyn BlockDevice>, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let d = Ram {
        info: BdevInfo {
            name: "S0".into(),
            uuid: Uuid::default(),
            product_name: "Ram".into(),
            block_size: BS,
            num_blocks: blocks,
            supported_ops: OpSet::READ_WRITE.with(Op::Flush).with(Op::WriteZeroes),
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 256,
            max_transfer_blocks: max,
            boundary_blocks: boundary,
        },
        data: Arc::new(Mutex::new(vec![0; (blocks * u64::from(BS)) as usize])),
        seen: Arc::clone(&seen),
        fail_lba,
    };
    (Arc::new(d), seen)
}

/// Opens `dev` `depth` deep, with mq-deadline (the device's limits) when `sched`.
fn open(dev: Arc<dyn BlockDevice>, depth: u32, sched: bool) -> BdevQueue {
    let info = dev.info().clone();
    let sched = if sched {
        let opts = DeadlineOptions {
            boundary_blocks: info.boundary_blocks,
            ..DeadlineOptions::for_queues(depth, 1, info.max_transfer_blocks, BS)
        };
        SchedMode::MqDeadline {
            dd: Arc::new(SharedDeadline::new(opts).unwrap()),
            owner: 0,
        }
    } else {
        SchedMode::None
    };
    BdevQueue::open(dev, BdevQueueOptions { depth, sched }).unwrap()
}

/// A buffer of `len` bytes at `off` in `region`, cut from one pointer to it (the scheduler may
/// merge neighbours into one request addressed through one member's pointer).
fn part(region: &mut [u8], off: usize, len: usize) -> IoBuf {
    assert!(off + len <= region.len());
    // SAFETY: inside `region`, which the tests keep alive and untouched while I/O runs.
    unsafe { IoBuf::from_raw_parts(region.as_mut_ptr().add(off), len as u32) }
}

fn pattern(lba: u64, salt: u8) -> impl Iterator<Item = u8> {
    (0..BS as usize).map(move |i| (lba as usize * 31 + i * 7 + salt as usize) as u8)
}

/// Polls until nothing is outstanding (no submit, no flush: `poll` alone must finish every
/// split), collecting the completions; panics if that takes unreasonably many polls.
fn drain(q: &mut BdevQueue, max: usize, done: &mut Vec<Request>) {
    for _ in 0..100_000 {
        if q.outstanding() == 0 {
            return;
        }
        let n = q.poll(max, |rq| done.push(*rq));
        assert!(n <= max);
    }
    panic!("{} I/O never completed", q.outstanding());
}

#[test]
fn split_io_completes_once_with_its_own_extent_and_data() {
    for sched in [false, true] {
        // 8-block transfers, a boundary every 12 blocks, a queue 4 deep.
        let (dev, seen) = ram(4096, 8, 12, None);
        let mut q = open(dev, 4, sched);
        let mut plug = Plug::default();
        let mut region = vec![0u8; 100 * BS as usize];
        for (b, chunk) in region.chunks_mut(BS as usize).enumerate() {
            for (d, v) in chunk.iter_mut().zip(pattern(5 + b as u64, 1)) {
                *d = v;
            }
        }
        // 100 blocks at 5: children 5..12, 12..20, 20..24, 24..32, ... — more than 4 at once.
        let w = Io {
            op: Op::Write,
            lba: 5,
            nblocks: 100,
            buf: part(&mut region, 0, 100 * BS as usize),
            token: 42,
            ..Io::default()
        };
        plug.begin();
        q.expect(&mut plug, &w);
        q.submit(&mut plug, &w).unwrap();
        plug.finish();
        assert_eq!(q.outstanding(), 1, "one I/O for the submitter");
        q.flush();
        let mut done = Vec::new();
        drain(&mut q, 3, &mut done);
        assert_eq!(done.len(), 1, "the parent completes once");
        let p = done[0];
        assert_eq!((p.op, p.lba, p.nblocks, p.token), (Op::Write, 5, 100, 42));
        assert_eq!(p.buf, w.buf);
        assert!(p.status.is_success());
        assert!(!p.flags.contains(ReqFlags::CHILD));
        assert!(p.complete_ns >= p.submit_ns && p.submit_ns > 0);
        let st = q.stats().op(Op::Write);
        assert_eq!(
            (st.ops, st.bytes),
            (1, 100 * u64::from(BS)),
            "stats count the parent"
        );
        {
            let s = seen.lock();
            let want: Vec<(Op, u64, u32)> = children(5, 100, 8, 12)
                .map(|(l, n)| (Op::Write, l, n))
                .collect();
            if !sched {
                assert_eq!(s.requests, want, "in order, as cut");
            }
            assert!(s.max_inflight <= 4, "never more than the depth");
        }
        // Read it back into a fresh buffer, through the split again.
        let mut back = vec![0u8; 100 * BS as usize];
        let r = Io {
            op: Op::Read,
            token: 43,
            buf: part(&mut back, 0, 100 * BS as usize),
            ..w
        };
        q.submit(&mut plug, &r).unwrap();
        q.flush();
        done.clear();
        drain(&mut q, 64, &mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].token, 43);
        assert_eq!(back, region, "sched {sched}: the data made the round trip");
        assert_eq!(q.busy_tags(HctxType::Default), 0);
        assert_eq!(q.sched_busy_tags(), 0);
    }
}

/// A full queue: a large I/O is refused with nothing queued, accepted once one tag frees, and
/// then finishes with `poll` alone, however many children it needs (more than the depth).
#[test]
fn split_on_a_full_queue_gets_busy_then_finishes_without_hanging() {
    for sched in [false, true] {
        let (dev, seen) = ram(4096, 4, 0, None);
        let depth = 2;
        let mut q = open(dev, depth, sched);
        let tags = if sched { 4 } else { depth };
        let mut plug = Plug::default();
        let mut region = vec![0u8; 64 * BS as usize];
        let small = |region: &mut Vec<u8>, i: u64| Io {
            op: Op::Read,
            lba: 1000 + i,
            nblocks: 1,
            buf: part(region, (48 + i as usize) * BS as usize, BS as usize),
            token: 1000 + i,
            ..Io::default()
        };
        for i in 0..u64::from(tags) {
            q.submit(&mut plug, &small(&mut region, i)).unwrap();
        }
        // 64 blocks in 4-block transfers: 16 children, 8 times the queue's depth.
        let big = Io {
            op: Op::Read,
            lba: 0,
            nblocks: 32,
            buf: part(&mut region, 0, 32 * BS as usize),
            token: 7,
            ..Io::default()
        };
        assert_eq!(q.submit(&mut plug, &big), Err(SubmitError::Busy));
        assert_eq!(q.outstanding(), tags, "nothing queued for the refused I/O");
        q.flush();
        let mut done = Vec::new();
        while done.is_empty() {
            q.poll(1, |rq| done.push(*rq));
        }
        q.submit(&mut plug, &big)
            .expect("accepted once a tag is free");
        q.flush();
        drain(&mut q, 2, &mut done);
        let tokens: Vec<u64> = done.iter().map(|r| r.token).collect();
        assert_eq!(tokens.iter().filter(|&&t| t == 7).count(), 1, "{tokens:?}");
        assert_eq!(done.len(), tags as usize + 1);
        let s = seen.lock();
        assert_eq!(s.requests.iter().filter(|r| r.1 < 1000).count(), 8);
        assert!(s.max_inflight <= depth as usize);
    }
}

/// A child's error completes the parent with that error, once; children not issued yet are
/// never issued.
#[test]
fn a_failed_child_fails_the_parent_once_and_stops_the_split() {
    for sched in [false, true] {
        // 4-block transfers on a 1-deep queue: one child at a time; block 9 fails.
        let (dev, seen) = ram(4096, 4, 0, Some(9));
        let mut q = open(dev, 1, sched);
        let mut plug = Plug::default();
        let mut region = vec![0u8; 40 * BS as usize];
        let io = Io {
            op: Op::Write,
            lba: 0,
            nblocks: 40,
            buf: part(&mut region, 0, 40 * BS as usize),
            token: 5,
            ..Io::default()
        };
        q.submit(&mut plug, &io).unwrap();
        q.flush();
        let mut done = Vec::new();
        drain(&mut q, 8, &mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].status, IoStatus::Errno(libc::EIO));
        assert_eq!(done[0].token, 5);
        let s = seen.lock();
        if !sched {
            // 0..4, 4..8, 8..12 (fails): nothing after it.
            assert_eq!(s.requests.len(), 3, "{:?}", s.requests);
        }
        assert!(s.requests.iter().all(|r| r.1 < 16), "{:?}", s.requests);
        assert_eq!(q.stats().op(Op::Write).errors, 1);
    }
}

/// `submit_with` on a device that splits: each I/O through `submit` inside the burst, same
/// contract (with mq-deadline: twice the depth in scheduler tags, the same 16 tags).
#[test]
fn submit_with_splits_each_io() {
    for (sched, depth) in [(false, 16), (true, 8)] {
        let (dev, seen) = ram(4096, 4, 6, None);
        let mut q = open(dev, depth, sched);
        let mut plug = Plug::default();
        let mut region = vec![0u8; 64 * BS as usize];
        let base = part(&mut region, 0, 64 * BS as usize);
        let shape = Io {
            op: Op::Write,
            nblocks: 8,
            ..Io::default()
        };
        let mut i = 0u64;
        plug.begin();
        q.expect_n(&mut plug, &shape, 8);
        let (n, err) = q.submit_with(&mut plug, &shape, 8, || {
            i += 1;
            let off = (i - 1) as u32 * 8 * BS;
            (i * 10, base.range(off, 8 * BS), i)
        });
        plug.finish();
        // 16 tags, 2 or 3 children each: six I/Os take all 16, the seventh is refused.
        assert_eq!(
            (n, err.clone()),
            (6, Some(SubmitError::Busy)),
            "sched {sched}"
        );
        assert_eq!(i, u64::from(n) + 1);
        q.flush();
        let mut done = Vec::new();
        drain(&mut q, 4, &mut done);
        let mut tokens: Vec<u64> = done.iter().map(|r| r.token).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (1..=u64::from(n)).collect::<Vec<_>>());
        assert_eq!(seen.lock().requests.len(), 16);
        // Invalid I/Os in the burst stop it with their error, after the valid ones.
        let mut i = 0u64;
        let (n, err) = q.submit_with(&mut plug, &shape, 4, || {
            i += 1;
            let lba = if i == 3 { 4095 } else { i * 10 };
            (lba, base.range(0, 8 * BS), i)
        });
        assert_eq!(n, 2);
        assert!(
            matches!(err, Some(SubmitError::OutOfRange { lba: 4095, .. })),
            "{err:?}"
        );
        q.flush();
        drain(&mut q, 4, &mut done);
        // The shape's checks still come first.
        let empty = Io {
            nblocks: 0,
            ..shape
        };
        assert!(matches!(
            q.submit_with(&mut plug, &empty, 1, || unreachable!()),
            (0, Some(SubmitError::Empty { .. }))
        ));
    }
}

/// Write zeroes (no buffer) splits too.
#[test]
fn dataless_ops_split_without_a_buffer() {
    let (dev, seen) = ram(4096, 16, 0, None);
    let mut q = open(dev, 4, false);
    let mut plug = Plug::default();
    let io = Io {
        op: Op::WriteZeroes,
        lba: 3,
        nblocks: 40,
        token: 1,
        ..Io::default()
    };
    q.submit(&mut plug, &io).unwrap();
    q.flush();
    let mut done = Vec::new();
    drain(&mut q, 8, &mut done);
    assert_eq!(done.len(), 1);
    assert_eq!(
        seen.lock().requests,
        vec![
            (Op::WriteZeroes, 3, 16),
            (Op::WriteZeroes, 19, 16),
            (Op::WriteZeroes, 35, 8)
        ]
    );
}

/// What the queue test does next.
#[derive(Clone, Debug)]
enum Act {
    /// Submit a burst of I/Os: (write, lba, blocks).
    Burst(Vec<(bool, u64, u32)>),
    Flush,
    Poll {
        max: u8,
    },
}

fn act(blocks: u64) -> impl Strategy<Value = Act> {
    prop_oneof![
        3 => proptest::collection::vec((any::<bool>(), 0..blocks - 64, 1u32..64), 1..6).prop_map(Act::Burst),
        1 => Just(Act::Flush),
        3 => (1u8..10).prop_map(|max| Act::Poll { max }),
    ]
}

/// Each I/O's buffer: 64 blocks per token in one region.
const SLOT_BLOCKS: usize = 64;

/// What the queue test knows of the disk and the I/O in flight.
struct Model {
    region: Vec<u8>,
    /// Accepted, not completed: the I/O and, per block, the write epoch and whether no other
    /// write was in flight when it was accepted.
    inflight: HashMap<u64, (Io, Vec<(u32, bool)>)>,
    free: Vec<u64>,
    /// Per block: writes accepted so far, writes in flight, and the salt of the data on disk
    /// when known (the last write completed with no other write to the block beside it).
    epoch: Vec<u32>,
    writing: Vec<u32>,
    content: Vec<Option<u8>>,
}

impl Model {
    fn new(blocks: usize, slots: usize) -> Model {
        Model {
            region: vec![0u8; slots * SLOT_BLOCKS * BS as usize],
            inflight: HashMap::new(),
            free: (0..slots as u64).collect(),
            epoch: vec![0; blocks],
            writing: vec![0; blocks],
            content: vec![None; blocks],
        }
    }

    /// The I/O `token` would be (a write's buffer filled with its pattern).
    fn io(&mut self, token: u64, write: bool, lba: u64, n: u32) -> Io {
        let off = token as usize * SLOT_BLOCKS * BS as usize;
        if write {
            for b in 0..n as usize {
                let dst = &mut self.region[off + b * BS as usize..][..BS as usize];
                for (d, v) in dst.iter_mut().zip(pattern(lba + b as u64, token as u8)) {
                    *d = v;
                }
            }
        }
        Io {
            op: if write { Op::Write } else { Op::Read },
            lba,
            nblocks: n,
            buf: part(&mut self.region, off, n as usize * BS as usize),
            token,
            ..Io::default()
        }
    }

    fn accepted(&mut self, io: Io) {
        let blocks = io.lba as usize..(io.lba + u64::from(io.nblocks)) as usize;
        let write = io.op == Op::Write;
        let mut snap = Vec::with_capacity(blocks.len());
        for b in blocks {
            // A read: no write in flight. A write: no other write in flight (two overlapping
            // writes in flight may reach the device in either order: a split's later children
            // can be issued after a newer I/O's, as any two I/Os in flight may be reordered).
            let quiet = if write {
                self.epoch[b] += 1;
                self.writing[b] += 1;
                self.writing[b] == 1
            } else {
                self.writing[b] == 0
            };
            snap.push((self.epoch[b], quiet));
        }
        self.inflight.insert(io.token, (io, snap));
    }

    /// Checks a completion: accepted and not completed before, its own extent and buffer,
    /// and a read's blocks as the last write left them (when nothing wrote them meanwhile).
    fn completed(&mut self, rq: &Request) {
        let (io, snap) = self
            .inflight
            .remove(&rq.token)
            .expect("completed once, and only what was accepted");
        assert_eq!(
            (rq.op, rq.lba, rq.nblocks, rq.buf),
            (io.op, io.lba, io.nblocks, io.buf)
        );
        assert!(rq.status.is_success());
        let off = rq.token as usize * SLOT_BLOCKS * BS as usize;
        for (i, &(epoch, clean)) in snap.iter().enumerate() {
            let b = io.lba as usize + i;
            if io.op == Op::Write {
                self.writing[b] -= 1;
                // Known only if this write had the block to itself from acceptance to completion.
                self.content[b] = (clean && self.writing[b] == 0 && self.epoch[b] == epoch)
                    .then_some(rq.token as u8);
            } else if clean
                && self.epoch[b] == epoch
                && let Some(salt) = self.content[b]
            {
                let got = &self.region[off + i * BS as usize..][..BS as usize];
                assert!(
                    got.iter().copied().eq(pattern(b as u64, salt)),
                    "block {b} reads back wrong"
                );
            }
        }
        self.free.push(rq.token);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random I/Os of random sizes and offsets through a queue of random depth, with and
    /// without mq-deadline, on a device with random limits: the device never sees a request
    /// beyond them, never more than the depth at once; every accepted I/O completes exactly
    /// once with its own extent, buffer and token; `Busy` leaves nothing behind; a read of
    /// blocks no write touched meanwhile returns what the last write put there.
    #[test]
    fn prop_split_ios_through_the_queue_reassemble_exactly(
        acts in proptest::collection::vec(act(512), 1..40),
        depth in 1u32..6,
        (max, boundary) in (1u32..20, prop_oneof![Just(0u32), 1u32..24]),
        sched in any::<bool>(),
    ) {
        let blocks = 512u64;
        let (dev, seen) = ram(blocks, max, boundary, None);
        let mut q = open(dev, depth, sched);
        let mut plug = Plug::default();
        let mut m = Model::new(blocks as usize, 48);
        let (mut accepted, mut completed) = (0u64, 0u64);
        for a in acts {
            match a {
                Act::Burst(ios) => {
                    plug.begin();
                    for (write, lba, n) in ios {
                        let Some(token) = m.free.pop() else { break };
                        let io = m.io(token, write, lba, n);
                        q.expect(&mut plug, &io);
                        let before = q.outstanding();
                        match q.submit(&mut plug, &io) {
                            Ok(_) => {
                                accepted += 1;
                                m.accepted(io);
                            }
                            Err(e) => {
                                prop_assert!(e.is_busy(), "{e}");
                                prop_assert_eq!(q.outstanding(), before);
                                m.free.push(token);
                                break;
                            }
                        }
                    }
                    plug.finish();
                }
                Act::Flush => {
                    q.flush();
                }
                Act::Poll { max } => {
                    let mut got = Vec::new();
                    let n = q.poll(usize::from(max), |rq| got.push(*rq));
                    prop_assert_eq!(n, got.len());
                    for rq in &got {
                        completed += 1;
                        m.completed(rq);
                    }
                }
            }
            prop_assert_eq!(u64::from(q.outstanding()), accepted - completed);
            prop_assert!(seen.lock().max_inflight <= depth as usize);
        }
        q.flush();
        let mut got = Vec::new();
        drain(&mut q, 7, &mut got);
        for rq in &got {
            completed += 1;
            m.completed(rq);
        }
        prop_assert!(m.inflight.is_empty());
        prop_assert_eq!(accepted, completed);
        prop_assert_eq!(q.busy_tags(HctxType::Default), 0);
        prop_assert_eq!(q.sched_busy_tags(), 0);
        prop_assert_eq!(q.split_parents(), 0);
    }
}
