//! The handle against a RAM disk whose completions the test releases by hand, and a buffer
//! type that records its drop: what a device touches after a future is dropped must still be
//! alive (Miri checks the accesses; the counters check the order).

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::Mutex;

use super::*;
use crate::bdev::{BdevInfo, DriverQueue, SubmitError, Uuid};
use crate::hctx::HctxQueues;
use crate::request::{IoStatus, OpSet, Request};

const BS: usize = 512;

/// What the test controls and sees of the device.
struct Ctl {
    data: Vec<u8>,
    /// Completions the device may still post (`usize::MAX`: all).
    allow: usize,
    /// Driver submit calls (doorbells) and requests started.
    doorbells: usize,
    started: usize,
    fail_lba: Option<u64>,
}

struct RamDev {
    info: BdevInfo,
    ctl: Arc<Mutex<Ctl>>,
}

struct RamQueue {
    fifo: VecDeque<u16>,
    ctl: Arc<Mutex<Ctl>>,
}

impl BlockDevice for RamDev {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        Ok(Box::new(RamQueue {
            fifo: VecDeque::with_capacity(depth as usize),
            ctl: Arc::clone(&self.ctl),
        }))
    }
}

impl DriverQueue for RamQueue {
    fn submit(&mut self, _rqs: &mut [Request], tags: &[u16]) {
        let mut ctl = self.ctl.lock();
        ctl.doorbells += 1;
        ctl.started += tags.len();
        self.fifo.extend(tags);
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut ctl = self.ctl.lock();
        let mut n = 0;
        while n < max && ctl.allow > 0 {
            let Some(tag) = self.fifo.pop_front() else {
                break;
            };
            ctl.allow = ctl
                .allow
                .saturating_sub(usize::from(ctl.allow != usize::MAX));
            let rq = &mut rqs[usize::from(tag)];
            rq.status = execute(&mut ctl, rq);
            done.push(tag);
            n += 1;
        }
        n
    }

    fn outstanding(&self) -> usize {
        self.fifo.len()
    }
}

/// Does `rq` on the RAM disk: the device's accesses to the I/O buffer happen here.
fn execute(ctl: &mut Ctl, rq: &Request) -> IoStatus {
    if ctl.fail_lba == Some(rq.lba) {
        return IoStatus::Errno(libc::EIO);
    }
    let at = rq.lba as usize * BS;
    let len = rq.nblocks as usize * BS;
    let disk = &mut ctl.data[at..at + len];
    match rq.op {
        // SAFETY: the block layer checked the buffer holds `len` bytes; the future (or the
        // handle, for a dropped future) keeps it alive and unaliased until this completion.
        Op::Read => unsafe { std::ptr::copy_nonoverlapping(disk.as_ptr(), rq.buf.as_ptr(), len) },
        // SAFETY: as above.
        Op::Write => unsafe {
            std::ptr::copy_nonoverlapping(rq.buf.as_ptr(), disk.as_mut_ptr(), len)
        },
        Op::WriteZeroes | Op::Discard => disk.fill(0),
        Op::Flush => {}
    }
    IoStatus::Success
}

/// A RAM disk of 64 blocks and a handle on it, `depth` requests deep.
fn open(depth: u32) -> (AioBdev, Arc<Mutex<Ctl>>) {
    let ctl = Arc::new(Mutex::new(Ctl {
        data: vec![0; 64 * BS],
        allow: usize::MAX,
        doorbells: 0,
        started: 0,
        fail_lba: None,
    }));
    let dev = RamDev {
        info: BdevInfo {
            name: "Ram0".into(),
            uuid: Uuid::default(),
            product_name: "test".into(),
            block_size: BS as u32,
            num_blocks: 64,
            supported_ops: OpSet::ALL,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 64,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        },
        ctl: Arc::clone(&ctl),
    };
    let opts = AioOptions {
        queue: BdevQueueOptions {
            depth,
            ..BdevQueueOptions::default()
        },
        ..AioOptions::default()
    };
    (AioBdev::open(Arc::new(dev), opts).unwrap(), ctl)
}

/// Heap bytes that count their drop in `drops`. The bytes are held by a raw pointer, not a
/// `Box`: moving a `Box` asserts unique access to its bytes, which the device's pointer to them
/// would contradict (Miri's aliasing model flags it).
struct TrackBuf {
    bytes: NonNull<[u8]>,
    drops: Rc<Cell<usize>>,
}

impl TrackBuf {
    fn new(len: usize, fill: u8, drops: &Rc<Cell<usize>>) -> TrackBuf {
        let bytes = Box::into_raw(vec![fill; len].into_boxed_slice());
        TrackBuf {
            bytes: NonNull::new(bytes).unwrap(),
            drops: Rc::clone(drops),
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the allocation is owned by `self` and no I/O holds it while the test reads.
        unsafe { self.bytes.as_ref() }
    }
}

impl Drop for TrackBuf {
    fn drop(&mut self) {
        self.drops.set(self.drops.get() + 1);
        // SAFETY: `bytes` came from `Box::into_raw` in `new` and is freed only here.
        drop(unsafe { Box::from_raw(self.bytes.as_ptr()) });
    }
}

// SAFETY: the bytes are a heap allocation owned by the value through a raw pointer: their
// address survives moves and they are freed only when the value drops.
unsafe impl IoBufMut for TrackBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_ptr().cast()
    }

    fn bytes_total(&self) -> usize {
        self.bytes.len()
    }
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountWake(AtomicUsize);

impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

impl CountWake {
    fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Polls `f` once with `waker`.
fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

/// `n` futures made by `make(i)`, each polled once (pending: staged) with a waker that counts
/// its wakes.
fn start<F: Future + Unpin>(n: u64, make: impl FnMut(u64) -> F) -> (Vec<F>, Arc<CountWake>) {
    let wakes = Arc::new(CountWake::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut futs: Vec<F> = (0..n).map(make).collect();
    for f in &mut futs {
        assert!(poll_once(f, &waker).is_pending());
    }
    (futs, wakes)
}

/// Runs `futs` to completion, calling `progress` between rounds of polls (a minimal executor
/// that polls everything each turn).
fn run_all<F: Future + Unpin>(bdev: &AioBdev, mut futs: Vec<F>) -> Vec<F::Output> {
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    for _turn in 0..1000 {
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none()
                && let Poll::Ready(v) = poll_once(f, Waker::noop())
            {
                *o = Some(v);
            }
        }
        if out.iter().all(Option::is_some) {
            return out.into_iter().map(Option::unwrap).collect();
        }
        bdev.progress();
    }
    panic!("I/O did not finish in 1000 turns");
}

#[test]
fn written_blocks_read_back_and_buffers_come_home() {
    let (bdev, _ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    let w = run_all(
        &bdev,
        vec![bdev.write(TrackBuf::new(2 * BS, 0xab, &drops), 4)],
    );
    let (res, buf) = w.into_iter().next().unwrap();
    res.unwrap();
    assert_eq!(buf.bytes().len(), 2 * BS, "the buffer is handed back");
    drop(buf);
    let r = run_all(&bdev, vec![bdev.read(TrackBuf::new(3 * BS, 0, &drops), 3)]);
    let (res, buf) = r.into_iter().next().unwrap();
    res.unwrap();
    assert!(buf.bytes()[..BS].iter().all(|&b| b == 0));
    assert!(buf.bytes()[BS..].iter().all(|&b| b == 0xab));
    assert_eq!(
        drops.get(),
        1,
        "only the write's buffer, dropped by the test"
    );
    assert_eq!(bdev.stats().op(Op::Read).bytes, 3 * BS as u64);
}

#[test]
fn ios_started_in_one_turn_share_one_doorbell_and_each_waker_is_woken() {
    let (bdev, ctl) = open(32);
    let drops = Rc::new(Cell::new(0));
    let (mut futs, wakes) = start(10, |i| bdev.read(TrackBuf::new(BS, 0, &drops), i));
    assert_eq!(ctl.lock().doorbells, 0, "submissions wait for progress");
    let p = bdev.progress();
    assert_eq!((p.started, p.completed), (10, 10));
    let c = ctl.lock();
    assert_eq!((c.doorbells, c.started), (1, 10));
    drop(c);
    assert_eq!(wakes.count(), 10);
    for f in &mut futs {
        let Poll::Ready((res, _buf)) = poll_once(f, Waker::noop()) else {
            panic!("woken future not ready");
        };
        res.unwrap();
    }
    assert_eq!(bdev.outstanding(), 0);
}

#[test]
fn a_future_polled_by_another_task_is_woken_through_that_tasks_waker() {
    let (bdev, _ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    let (first, second) = (
        Arc::new(CountWake::default()),
        Arc::new(CountWake::default()),
    );
    let mut io = bdev.read(TrackBuf::new(BS, 0, &drops), 0);
    assert!(poll_once(&mut io, &Waker::from(Arc::clone(&first))).is_pending());
    assert!(poll_once(&mut io, &Waker::from(Arc::clone(&second))).is_pending());
    assert_eq!(bdev.progress().completed, 1);
    assert_eq!(
        (first.count(), second.count()),
        (0, 1),
        "the last poll's waker is woken"
    );
    let Poll::Ready((res, _buf)) = poll_once(&mut io, Waker::noop()) else {
        panic!("woken future not ready");
    };
    res.unwrap();
}

#[test]
fn dropping_futures_in_flight_frees_their_buffers_only_after_completion() {
    let (bdev, ctl) = open(8);
    ctl.lock().data.fill(0x5a);
    let drops = Rc::new(Cell::new(0));
    let mut futs: Vec<_> = (0..4)
        .map(|i| bdev.read(TrackBuf::new(BS, 0, &drops), i))
        .collect();
    for f in &mut futs {
        assert!(poll_once(f, Waker::noop()).is_pending());
    }
    // Submitted and started; none completes yet.
    ctl.lock().allow = 0;
    assert_eq!(bdev.progress().started, 4);
    drop(futs);
    assert_eq!(drops.get(), 0, "buffers freed while the device holds them");
    assert_eq!(bdev.outstanding(), 4);
    // The device writes into the orphaned buffers now (a use after free if they were gone).
    ctl.lock().allow = 3;
    assert_eq!(bdev.progress().completed, 3);
    assert_eq!(drops.get(), 3, "each buffer is dropped at its completion");
    ctl.lock().allow = usize::MAX;
    bdev.progress();
    assert_eq!(drops.get(), 4);
    assert_eq!(bdev.outstanding(), 0);
    // The slots are free again: new I/O runs normally.
    let out = run_all(&bdev, vec![bdev.read(TrackBuf::new(BS, 0, &drops), 0)]);
    assert!(out[0].0.is_ok() && out[0].1.bytes().iter().all(|&b| b == 0x5a));
}

#[test]
fn a_future_dropped_before_its_io_was_submitted_withdraws_it() {
    let (bdev, ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    let mut keep = bdev.write(TrackBuf::new(BS, 1, &drops), 1);
    let mut gone = bdev.write(TrackBuf::new(BS, 2, &drops), 2);
    assert!(poll_once(&mut keep, Waker::noop()).is_pending());
    assert!(poll_once(&mut gone, Waker::noop()).is_pending());
    assert_eq!(bdev.outstanding(), 2, "both staged");
    drop(gone);
    assert_eq!(drops.get(), 1, "never seen by the device: freed at once");
    assert_eq!(bdev.outstanding(), 1);
    let out = run_all(&bdev, vec![keep]);
    assert!(out[0].0.is_ok());
    let c = ctl.lock();
    assert_eq!((c.started, c.data[BS], c.data[2 * BS]), (1, 1, 0));
}

#[test]
fn a_future_never_polled_drops_its_buffer_and_a_finished_one_not_again() {
    let (bdev, _ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    drop(bdev.read(TrackBuf::new(BS, 0, &drops), 0));
    assert_eq!(drops.get(), 1, "never polled: its buffer goes with it");
    assert_eq!(bdev.outstanding(), 0);
    let mut done = bdev.read(TrackBuf::new(BS, 0, &drops), 0);
    assert!(poll_once(&mut done, Waker::noop()).is_pending());
    bdev.progress();
    let Poll::Ready((res, buf)) = poll_once(&mut done, Waker::noop()) else {
        panic!("completed at the progress");
    };
    res.unwrap();
    drop(done);
    assert_eq!(
        drops.get(),
        1,
        "the buffer was handed back, not dropped with the future"
    );
    drop(buf);
    assert_eq!(drops.get(), 2);
}

#[test]
fn a_completed_future_dropped_before_its_last_poll_frees_its_buffer_at_once() {
    let (bdev, _ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    let mut f = bdev.write(TrackBuf::new(BS, 1, &drops), 0);
    assert!(poll_once(&mut f, Waker::noop()).is_pending());
    assert_eq!(bdev.progress().completed, 1);
    drop(f);
    assert_eq!(drops.get(), 1);
    assert_eq!(bdev.outstanding(), 0);
}

/// A handle with one read of a dropped future in the device's hands (`allow` completions
/// allowed from then on), and the drop counter of its buffer.
fn orphaned_read(allow: usize) -> (AioBdev, Arc<Mutex<Ctl>>, Rc<Cell<usize>>) {
    let (bdev, ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    let mut f = bdev.read(TrackBuf::new(BS, 0, &drops), 0);
    assert!(poll_once(&mut f, Waker::noop()).is_pending());
    ctl.lock().allow = 0;
    assert_eq!(bdev.progress().started, 1);
    drop(f);
    assert_eq!(drops.get(), 0);
    ctl.lock().allow = allow;
    (bdev, ctl, drops)
}

#[test]
fn closing_the_handle_waits_for_the_io_of_dropped_futures() {
    let (bdev, _ctl, drops) = orphaned_read(usize::MAX);
    drop(bdev);
    assert_eq!(drops.get(), 1, "dropped once the device completed it");
}

#[test]
#[cfg_attr(miri, ignore = "the leak is the point")]
fn a_device_that_never_completes_gets_its_buffers_leaked_not_freed() {
    let (bdev, _ctl, drops) = orphaned_read(0);
    drop(bdev);
    assert_eq!(drops.get(), 0, "leaked, never freed");
}

#[test]
fn a_full_queue_makes_futures_wait_not_fail() {
    let (bdev, ctl) = open(2);
    let drops = Rc::new(Cell::new(0));
    // More I/O than requests: all pending (staged), none an error.
    let (futs, wakes) = start(5, |i| bdev.write(TrackBuf::new(BS, i as u8, &drops), i));
    ctl.lock().allow = 0;
    let p = bdev.progress();
    assert_eq!(
        (p.started, bdev.outstanding()),
        (2, 5),
        "2 in the queue, 3 still staged"
    );
    ctl.lock().allow = usize::MAX;
    let p = bdev.progress();
    assert_eq!(
        (p.started, p.completed),
        (0, 2),
        "the queue was full until this reap"
    );
    assert_eq!(wakes.count(), 2);
    let p = bdev.progress();
    assert_eq!(
        (p.started, p.completed),
        (2, 2),
        "the staged I/O went next, in order"
    );
    let out = run_all(&bdev, futs);
    assert!(out.iter().all(|(r, _)| r.is_ok()));
    let data = &ctl.lock().data;
    assert!((0..5).all(|i| data[i * BS] == i as u8));
}

#[test]
fn errors_are_typed_with_the_errno() {
    let (bdev, ctl) = open(8);
    let drops = Rc::new(Cell::new(0));
    ctl.lock().fail_lba = Some(7);
    let out = run_all(
        &bdev,
        vec![
            bdev.read(TrackBuf::new(BS, 0, &drops), 7),
            bdev.read(TrackBuf::new(BS, 0, &drops), 64),
            bdev.read(TrackBuf::new(BS + 1, 0, &drops), 0),
            bdev.read(TrackBuf::new(BS, 0, &drops), 1),
        ],
    );
    // The refusals came in the middle of one run of staged reads: the run went on after them.
    let mut results: Vec<_> = out.into_iter().map(|(r, _)| r).collect();
    assert!(results.pop().unwrap().is_ok());
    let errs: Vec<AioError> = results.into_iter().map(Result::unwrap_err).collect();
    assert!(
        matches!(errs[0].kind(), AioErrorKind::Failed { status: IoStatus::Errno(e), lba: 7, .. } if *e == libc::EIO)
    );
    assert_eq!(errs[0].errno(), -libc::EIO);
    assert!(matches!(
        errs[1].kind(),
        AioErrorKind::Rejected(SubmitError::OutOfRange { lba: 64, .. })
    ));
    assert!(matches!(
        errs[2].kind(),
        AioErrorKind::Rejected(SubmitError::BadBuffer { .. })
    ));
    assert_eq!(
        drops.get(),
        4,
        "refused and failed I/O hand their buffers back"
    );
}

#[test]
fn flush_write_zeroes_and_deallocate_reach_the_device() {
    let (bdev, ctl) = open(8);
    ctl.lock().data.fill(0xff);
    let out = run_all(
        &bdev,
        vec![
            bdev.write_zeroes(0, 2),
            bdev.deallocate(10, 1),
            bdev.flush(),
        ],
    );
    assert!(out.iter().all(Result::is_ok));
    let c = ctl.lock();
    assert!(c.data[..2 * BS].iter().all(|&b| b == 0));
    assert!(c.data[2 * BS..10 * BS].iter().all(|&b| b == 0xff));
    assert!(c.data[10 * BS..11 * BS].iter().all(|&b| b == 0));
    drop(c);
    let out = run_all(&bdev, vec![bdev.write_zeroes(63, 2)]);
    assert!(matches!(
        out[0].as_ref().map_err(AioError::kind),
        Err(AioErrorKind::Rejected(SubmitError::OutOfRange { .. }))
    ));
}

#[test]
#[cfg_attr(miri, ignore = "DMA pools are mmap'ed")]
fn slices_and_pool_buffers_move_the_right_bytes() {
    let (bdev, ctl) = open(8);
    for (i, b) in ctl.lock().data.iter_mut().enumerate() {
        *b = (i / BS) as u8;
    }
    let pool = BufPool::new(crate::dma::DmaPoolOptions {
        count: 2,
        buf_size: 4096,
        ..Default::default()
    })
    .unwrap();
    let buf = pool.get().unwrap().slice(BS..3 * BS);
    let out = run_all(&bdev, vec![bdev.read(buf, 5)]);
    let (res, slice) = out.into_iter().next().unwrap();
    res.unwrap();
    let buf = slice.into_inner();
    assert!(buf[..BS].iter().all(|&b| b == 0));
    assert!(buf[BS..2 * BS].iter().all(|&b| b == 5));
    assert!(buf[2 * BS..3 * BS].iter().all(|&b| b == 6));
    assert_eq!(pool.available(), 1);
    drop(buf);
    assert_eq!(pool.available(), 2);
}

#[test]
#[should_panic(expected = "polled after it completed")]
fn polling_a_finished_future_panics() {
    let (bdev, _ctl) = open(8);
    let mut f = bdev.flush();
    assert!(poll_once(&mut f, Waker::noop()).is_pending());
    bdev.progress();
    assert!(poll_once(&mut f, Waker::noop()).is_ready());
    let _ = poll_once(&mut f, Waker::noop());
}
