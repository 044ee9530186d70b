//! Async block I/O: a per-thread bdev handle whose futures own their buffers.
//!
//! | file | one job |
//! |---|---|
//! | `mod.rs` | [`AioBdev`]: open, submission into the plug, [`AioBdev::progress`], close |
//! | `future.rs` | the I/O futures ([`DataIo`], [`Cmd`]) and what dropping one in flight does |
//! | `slots.rs` | the in-flight table: a slot per I/O, its waker, status or orphaned buffer |
//! | `buf.rs` | [`IoBufMut`], the owned-buffer contract, and [`Slice`] |
//! | `pool.rs` | [`BufPool`] and its [`PoolBuf`]s, owned DMA buffers from a pool |
//! | `error.rs` | [`AioError`] |
//!
//! Runtime-agnostic (only `std::task`): any executor that polls the futures on the thread that
//! opened the handle and calls [`AioBdev::progress`] there works. `pmio-runtime` runs it on
//! the reactors (a progress poller per handle).
//!
//! # Contract
//!
//! - **Buffers are owned.** [`AioBdev::read`] and [`AioBdev::write`] take the buffer by value
//!   and their futures hand it back with the result: `let (res, buf) = bdev.read(buf, lba).await`
//!   (tokio-uring's and glommio's rule). While the device may touch the memory no one else can
//!   reach it. Dropping a future whose I/O is in flight moves its buffer into the handle (the
//!   one heap allocation of that cancel path), which drops it once the device completes the
//!   I/O: memory is never freed under a device. Dropping the handle waits for those I/Os.
//! - **One plug, one doorbell per turn.** A future's first poll submits its I/O into the
//!   handle's [`Plug`] (opened by the first submission since the last `progress`, sized by the
//!   completions that `progress` reaped). [`AioBdev::progress`], called once per executor turn
//!   after the tasks ran, finishes the plug, starts every pending I/O with one driver submit
//!   per hardware queue (one doorbell), reaps completions and wakes their futures.
//! - **A full queue waits.** When no request is free, the future waits (its waker is kept) and
//!   tries again after a `progress` that reaped completions. It never fails for it.
//! - **Errors are typed**: [`AioError::Rejected`] (the block layer refused the I/O) or
//!   [`AioError::Failed`] (the device's [`IoStatus`], with its errno).
//! - **No allocation per I/O**: slots, wake list and plug are sized at open; a waker is
//!   cloned once per I/O (a reference count), not boxed.
//! - **One thread.** The handle is neither `Send` nor `Sync`: its queue belongs to the thread
//!   (reactor) that opened it, and so do its futures.
//!
//! ```
//! # use std::sync::Arc;
//! # use std::task::{Context, Poll, Waker};
//! use pmio::aio::{AioBdev, AioOptions};
//! use pmio::dma::DmaRegion;
//! # fn demo(dev: Arc<dyn pmio::BlockDevice>) -> Result<(), Box<dyn std::error::Error>> {
//! let bdev = AioBdev::open(dev, AioOptions::default())?;
//! let mut read = std::pin::pin!(bdev.read(DmaRegion::new(4096)?, 0));
//! let mut cx = Context::from_waker(Waker::noop());
//! // A hand-rolled executor: poll the future, then let the handle make progress.
//! let (res, buf) = loop {
//!     if let Poll::Ready(out) = read.as_mut().poll(&mut cx) {
//!         break out;
//!     }
//!     bdev.progress();
//! };
//! res?;
//! assert_eq!(buf.len(), 4096);
//! # Ok(()) }
//! ```

mod buf;
mod error;
mod future;
mod pool;
mod slots;

#[cfg(test)]
mod tests;

use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

pub use buf::{IoBufMut, Slice};
pub use error::AioError;
pub use future::{Cmd, DataIo};
pub use pool::{BufPool, PoolBuf};

use crate::bdev::{BdevError, BdevQueue, BdevQueueOptions, BlockDevice, Registry, SubmitError};
use crate::hctx::HctxType;
use crate::plug::{Plug, PlugOptions};
use crate::request::{Io, IoBuf, Op};
use slots::{Completed, Orphan, Slots};

/// Options of [`AioBdev::open`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AioOptions {
    /// The queue under the handle (default: 128 requests in flight, no scheduler).
    pub queue: BdevQueueOptions,
    /// The handle's plug (default: at most 64 requests taken in one batch).
    pub plug: PlugOptions,
}

/// What one [`AioBdev::progress`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// I/Os handed to the driver.
    pub started: usize,
    /// I/Os completed (their futures woken).
    pub completed: usize,
}

impl Progress {
    /// Whether anything happened (a poller reports busy).
    pub fn is_busy(&self) -> bool {
        self.started + self.completed > 0
    }
}

/// How long dropping a handle waits for the I/O of dropped futures before it leaks their
/// buffers (a device that never completes must not get freed memory).
const CLOSE_DRAIN: Duration = if cfg!(test) {
    Duration::from_millis(50)
} else {
    Duration::from_secs(10)
};

/// A thread's async handle on one block device: a [`BdevQueue`] with its [`Plug`], and the
/// futures' in-flight table. See the module docs for the contract.
pub struct AioBdev {
    name: Arc<str>,
    block_size: u32,
    num_blocks: u64,
    state: RefCell<State>,
}

/// What the futures and `progress` share (borrowed briefly, never across a wake).
struct State {
    q: BdevQueue,
    plug: Plug,
    slots: Slots,
    /// Futures that found the queue full, woken after the next completions.
    busy: Vec<Waker>,
    /// The wakers a `progress` collected, woken after the state is released (kept here for
    /// their capacity).
    wake: Vec<Waker>,
    /// Buffers of dropped futures whose I/O completed, dropped after the state is released.
    orphans: Vec<Box<dyn Any>>,
    /// Completions the last `progress` reaped: the plug's next batch (those futures' tasks
    /// usually submit again in the next turn).
    expect: u32,
}

/// Where a first poll left its I/O.
pub(crate) enum Start {
    /// Queued in slot `n`.
    Queued(u32),
    /// No request free: the future waits for completions.
    Busy,
    /// Refused by the block layer.
    Refused(SubmitError),
}

impl std::fmt::Debug for AioBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AioBdev")
            .field("bdev", &self.name)
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

impl AioBdev {
    /// Opens `dev` on the calling thread (see [`BdevQueue::open`]).
    pub fn open(dev: Arc<dyn BlockDevice>, opts: AioOptions) -> Result<AioBdev, BdevError> {
        let depth = opts.queue.depth;
        let q = BdevQueue::open(dev, opts.queue)?;
        Ok(AioBdev::with_queue(q, depth, opts.plug))
    }

    /// Opens the registered device `name` on the calling thread; its I/O counts in the
    /// registry's totals ([`BdevQueue::open_in`]).
    pub fn open_in(
        registry: &Registry,
        name: &str,
        opts: AioOptions,
    ) -> Result<AioBdev, BdevError> {
        let depth = opts.queue.depth;
        let q = BdevQueue::open_in(registry, name, opts.queue)?;
        Ok(AioBdev::with_queue(q, depth, opts.plug))
    }

    fn with_queue(q: BdevQueue, depth: u32, plug: PlugOptions) -> AioBdev {
        let info = q.device().info();
        let hctxs = HctxType::ALL
            .iter()
            .filter(|&&ty| info.queues.count(ty) > 0)
            .count() as u32;
        // One slot per request the queue can hold; a scheduler's deeper tags grow the table.
        let inflight = depth * hctxs;
        let mut plug = Plug::new(plug);
        q.register_plug(&mut plug);
        AioBdev {
            name: Arc::from(q.name()),
            block_size: q.block_size(),
            num_blocks: q.num_blocks(),
            state: RefCell::new(State {
                q,
                plug,
                slots: Slots::new(inflight),
                busy: Vec::new(),
                wake: Vec::with_capacity(inflight as usize),
                orphans: Vec::new(),
                expect: 0,
            }),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Number of logical blocks.
    pub fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    /// I/Os submitted and not yet completed (those of dropped futures included).
    pub fn outstanding(&self) -> u32 {
        self.state.borrow().q.outstanding()
    }

    /// The queue's statistics so far (see [`BdevQueue::stats`]).
    pub fn stats(&self) -> crate::bdev::QueueStats {
        *self.state.borrow().q.stats()
    }

    /// Reads `buf.bytes_total()` bytes (whole blocks) from block `lba` into `buf`; the future
    /// resolves to the result and the buffer.
    pub fn read<B: IoBufMut>(&self, buf: B, lba: u64) -> DataIo<'_, B> {
        DataIo::new(self, Op::Read, buf, lba)
    }

    /// Writes `buf.bytes_total()` bytes (whole blocks) from `buf` at block `lba`; the future
    /// resolves to the result and the buffer.
    pub fn write<B: IoBufMut>(&self, buf: B, lba: u64) -> DataIo<'_, B> {
        DataIo::new(self, Op::Write, buf, lba)
    }

    /// Flushes the device's volatile cache.
    pub fn flush(&self) -> Cmd<'_> {
        Cmd::new(self, Op::Flush, 0, 0)
    }

    /// Writes zeroes to blocks `lba..lba + nblocks`.
    pub fn write_zeroes(&self, lba: u64, nblocks: u32) -> Cmd<'_> {
        Cmd::new(self, Op::WriteZeroes, lba, nblocks)
    }

    /// Deallocates (unmaps, trims) blocks `lba..lba + nblocks`.
    pub fn deallocate(&self, lba: u64, nblocks: u32) -> Cmd<'_> {
        Cmd::new(self, Op::Discard, lba, nblocks)
    }

    /// One step of the handle, once per executor turn after the tasks ran: finishes the plug,
    /// starts every I/O submitted since the last call (one driver submit per hardware queue),
    /// reaps completions and wakes their futures, and wakes the futures that found the queue
    /// full once requests were freed.
    #[inline]
    pub fn progress(&self) -> Progress {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        if !st.plug.is_active() && st.q.outstanding() == 0 {
            return Progress::default();
        }
        st.plug.finish();
        let started = st.q.flush();
        let mut wake = std::mem::take(&mut st.wake);
        let State {
            q, slots, orphans, ..
        } = st;
        let completed = q.poll(slots.capacity(), |rq| {
            match slots.complete(rq.token as u32, rq.status) {
                Completed::Wake(Some(w)) => wake.push(w),
                Completed::Wake(None) => {}
                Completed::Orphan(buf) => orphans.extend(buf),
            }
        });
        st.expect = completed as u32;
        if !st.busy.is_empty() && (completed > 0 || st.q.outstanding() == 0) {
            wake.append(&mut st.busy);
        }
        let dead = (!st.orphans.is_empty()).then(|| std::mem::take(&mut st.orphans));
        drop(guard);
        // Wakes and drops run with the state released: a waker or a buffer's destructor may
        // come back to this handle.
        for w in wake.drain(..) {
            w.wake();
        }
        drop(dead);
        self.state.borrow_mut().wake = wake;
        Progress { started, completed }
    }

    /// A future's first poll: submits `io` (its token set to a fresh slot) into the plug.
    #[inline]
    pub(crate) fn start(&self, io: &mut Io, waker: &Waker) -> Start {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        if !st.plug.is_active() {
            st.plug.begin();
            if st.expect > 0 {
                st.q.expect_n(&mut st.plug, io, st.expect);
            }
        }
        let slot = st.slots.alloc(waker);
        io.token = u64::from(slot);
        match st.q.submit(&mut st.plug, io) {
            Ok(_) => Start::Queued(slot),
            Err(e) => {
                st.slots.release(slot);
                if e.is_busy() {
                    st.busy.push(waker.clone());
                    Start::Busy
                } else {
                    Start::Refused(e)
                }
            }
        }
    }

    /// A later poll of the future in `slot`: its status once done.
    #[inline]
    pub(crate) fn poll_slot(&self, slot: u32, waker: &Waker) -> Option<crate::IoStatus> {
        self.state.borrow_mut().slots.poll(slot, waker)
    }

    /// The future in `slot` is dropped: its buffer stays until the I/O completes.
    pub(crate) fn abandon(&self, slot: u32, buf: Orphan) {
        let now = self.state.borrow_mut().slots.abandon(slot, buf);
        drop(now);
    }

    /// The name shared by this handle's errors.
    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The buffer descriptor of `len` bytes at `ptr` (a length beyond `u32` is clamped, and
    /// then refused by the block layer as not matching whole blocks).
    pub(crate) fn io_buf(ptr: *mut u8, len: usize) -> IoBuf {
        let len = u32::try_from(len).unwrap_or(u32::MAX);
        // SAFETY: the future that builds this owns the buffer (an `IoBufMut`: stable, valid,
        // unaliased memory of at least `len` bytes) until the I/O completes, or moves it into
        // the in-flight table, which keeps it until then.
        unsafe { IoBuf::from_raw_parts(ptr, len) }
    }
}

impl Drop for AioBdev {
    /// Futures borrow the handle, so none is left; I/O of dropped futures may be. Waits (up to
    /// [`CLOSE_DRAIN`]) for it, then leaks what is still in the device's hands.
    fn drop(&mut self) {
        let st = self.state.get_mut();
        if st.q.outstanding() == 0 {
            return;
        }
        st.plug.finish();
        st.q.flush();
        let deadline = Instant::now() + CLOSE_DRAIN;
        let State { q, slots, .. } = st;
        while q.outstanding() > 0 && Instant::now() < deadline {
            let n = q.poll(slots.capacity(), |rq| {
                if let Completed::Orphan(buf) = slots.complete(rq.token as u32, rq.status) {
                    drop(buf);
                }
            });
            if n == 0 {
                std::thread::yield_now();
            }
        }
        if q.outstanding() > 0 {
            let leaked = slots.take_orphans();
            log::error!(
                "bdev {}: closed with {} I/O the device never completed; leaking their {} buffer(s)",
                self.name,
                q.outstanding(),
                leaked.len()
            );
            std::mem::forget(leaked);
        }
    }
}
