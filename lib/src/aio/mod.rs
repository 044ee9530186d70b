//! Async block I/O: a per-thread bdev handle whose futures own their buffers.
//!
//! | file | one job |
//! |---|---|
//! | `mod.rs` | [`AioBdev`]: open, staging a future's I/O, [`AioBdev::progress`], close |
//! | `future.rs` | the I/O futures ([`DataIo`], [`Cmd`]) and what dropping one in flight does |
//! | `slots.rs` | the in-flight table: a slot per I/O, its waker, status or orphaned buffer |
//! | `cell.rs` | the state's cell: the futures' quick steps, which store no borrow flag |
//! | `staged.rs` | the I/Os submitted since the last progress, handed to the queue in runs |
//! | `buf.rs` | [`IoBufMut`], the owned-buffer contract, and [`Slice`] |
//! | `pool.rs` | [`BufPool`] and its [`PoolBuf`]s, owned DMA buffers from a pool |
//! | `error.rs` | [`AioError`] and its [`AioErrorKind`] |
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
//! - **One plug, one doorbell per turn.** A future's first poll stages its I/O in the handle.
//!   [`AioBdev::progress`], called once per executor turn after the tasks ran, submits every
//!   staged I/O under one [`Plug`] (runs of one shape in one `submit_with` each), starts them
//!   with one driver submit per hardware queue (one doorbell), reaps completions and wakes
//!   their futures.
//! - **A full queue waits.** Staged I/O that finds no free request stays staged, first in line
//!   for the next `progress`; its future just waits. It never fails for it.
//! - **Errors are typed**: an [`AioError`] is [`AioErrorKind::Rejected`] (the block layer
//!   refused the I/O) or [`AioErrorKind::Failed`] (the device's [`IoStatus`](crate::IoStatus),
//!   with its errno).
//! - **No allocation per I/O**: the in-flight table, the staging list and the plug are sized
//!   at open (they grow only to the most futures ever waiting at once). A slot
//!   keeps the waker of the task that used it last, and the task that frees a slot usually
//!   takes it again: an I/O clones no waker in the steady state.
//! - **Wakes from inside `progress`.** A completed future's waker is called while the handle
//!   is held: it must only schedule the task (every executor's waker does), not poll it (a
//!   waker that uses the handle panics).
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
mod cell;
mod error;
mod future;
mod pool;
mod slots;
mod staged;

#[cfg(test)]
mod tests;

use std::any::Any;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

pub use buf::{IoBufMut, Slice};
pub use error::{AioError, AioErrorKind};
pub use future::{Cmd, DataIo};
pub use pool::{BufPool, PoolBuf};

use crate::bdev::{BdevError, BdevQueue, BdevQueueOptions, BlockDevice, Registry};
use crate::hctx::HctxType;
use crate::plug::{Plug, PlugOptions};
use crate::request::{IoBuf, Op};
use cell::StateCell;
use slots::{Orphan, Outcome, Slots};
use staged::Staged;

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
    /// I/Os completed, or refused by the block layer (their futures woken).
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
    /// log2 of the block size (a power of two): a buffer's block count is a shift, not a
    /// division (which cost 3 ns an I/O).
    block_shift: u32,
    num_blocks: u64,
    state: StateCell<State>,
}

/// What the futures and `progress` share (held briefly, never across a future's poll).
struct State {
    q: BdevQueue,
    plug: Plug,
    slots: Slots,
    staged: Staged,
    /// Buffers of dropped futures whose I/O completed, dropped after the state is released.
    orphans: Vec<Box<dyn Any>>,
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
            block_shift: q.block_size().trailing_zeros(),
            num_blocks: q.num_blocks(),
            state: StateCell::new(State {
                q,
                plug,
                slots: Slots::new(inflight),
                staged: Staged::with_capacity(inflight as usize),
                orphans: Vec::new(),
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

    /// I/Os of futures not yet completed: staged ones and those in the queue (those of
    /// dropped futures included).
    pub fn outstanding(&self) -> u32 {
        let st = self.state.lock();
        st.q.outstanding() + st.staged.len() as u32
    }

    /// The queue's statistics so far (see [`BdevQueue::stats`]).
    pub fn stats(&self) -> crate::bdev::QueueStats {
        *self.state.lock().q.stats()
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

    /// One step of the handle, once per executor turn after the tasks ran: submits the I/O
    /// staged since the last call under one plug (what finds the queue full stays staged),
    /// starts it with one driver submit per hardware queue, reaps completions and wakes their
    /// futures (and those of refused I/O).
    #[inline]
    pub fn progress(&self) -> Progress {
        let mut guard = self.state.lock();
        let State {
            q,
            plug,
            slots,
            staged,
            orphans,
        } = &mut *guard;
        if staged.is_empty() && q.outstanding() == 0 {
            return Progress::default();
        }
        let mut rejected = 0;
        if !staged.is_empty() {
            rejected = staged.submit(q, plug, |slot, e| slots.reject(slot, e)).1;
        }
        let started = q.flush();
        // Completed futures' tasks are woken from inside the reap (a wake only queues them).
        let completed = q.poll(slots.capacity(), |rq| {
            if let Some(buf) = slots.complete(rq.token as u32, rq.status) {
                orphans.push(buf);
            }
        });
        if !orphans.is_empty() {
            let dead = std::mem::take(orphans);
            drop(guard);
            // With the state released: a buffer's destructor may come back to this handle.
            drop(dead);
        }
        Progress {
            started,
            completed: completed + rejected,
        }
    }

    /// A future's first poll: stages its I/O (token: a fresh slot, woken by `waker`) for the
    /// next `progress`, `buf` giving its buffer and block count. Returns the slot and the
    /// block count. `buf` (the buffer's methods: calls out) runs between taking the slot and
    /// pushing the entry, with the state let go: the values it gives go straight into the
    /// entry instead of waiting in stack spills across the slot's allocation.
    #[inline]
    pub(crate) fn stage(
        &self,
        op: Op,
        lba: u64,
        buf: impl FnOnce() -> (IoBuf, u32),
        waker: &Waker,
    ) -> (u32, u32) {
        // SAFETY: taking a slot calls nothing outside the module (its waker is compared with
        // `waker`, not cloned).
        let (slot, same_waker) = unsafe { self.state.quick(|st| st.slots.alloc(waker)) };
        let (buf, nblocks) = buf();
        if same_waker {
            // SAFETY: pushing the entry calls nothing outside the module (the list has room for
            // every slot, and grows, rarely, through the global allocator only).
            unsafe {
                self.state
                    .quick(|st| st.staged.push(op, lba, nblocks, buf, slot))
            };
        } else {
            self.stage_new_waker(slot, op, lba, buf, nblocks, waker);
        }
        (slot, nblocks)
    }

    /// `stage` for a slot that keeps another task's waker: stores a clone of `waker` first
    /// (the clone and the old one's drop are calls out, made with the state let go), then
    /// stages the I/O (which cannot complete before).
    #[cold]
    #[inline(never)]
    fn stage_new_waker(
        &self,
        slot: u32,
        op: Op,
        lba: u64,
        buf: IoBuf,
        nblocks: u32,
        waker: &Waker,
    ) {
        let new = waker.clone();
        let mut st = self.state.lock();
        let old = st.slots.replace_waker(slot, new);
        st.staged.push(op, lba, nblocks, buf, slot);
        drop(st);
        drop(old);
    }

    /// A later poll of the future in `slot`: its outcome once done or refused (on
    /// [`Outcome::PendingOtherWaker`] the caller stores its waker with
    /// [`AioBdev::new_waker`]).
    #[inline]
    fn poll_slot(&self, slot: u32, waker: &Waker) -> Outcome {
        // SAFETY: looking at and freeing a slot call nothing outside the module (the waker is
        // compared, not cloned).
        unsafe { self.state.quick(|st| st.slots.poll(slot, waker)) }
    }

    /// A pending future polled by another task than the slot's waker wakes: stores a clone of
    /// `waker` (calls out, with the state let go), and wakes it at once if the I/O completed
    /// meanwhile (the old waker had the wake).
    #[cold]
    #[inline(never)]
    fn new_waker(&self, slot: u32, waker: &Waker) {
        let new = waker.clone();
        let mut st = self.state.lock();
        let old = st.slots.replace_waker(slot, new);
        let waiting = st.slots.is_waiting(slot);
        drop(st);
        drop(old);
        if !waiting {
            waker.wake_by_ref();
        }
    }

    /// The future in `slot` is dropped: an I/O still staged is withdrawn (its buffer goes at
    /// once), a submitted one keeps its buffer in the slot until it completes.
    pub(crate) fn abandon(&self, slot: u32, buf: Orphan) {
        let mut st = self.state.lock();
        let now = if st.staged.cancel(slot) {
            st.slots.withdraw(slot);
            Some(buf)
        } else {
            st.slots.abandon(slot, buf)
        };
        drop(st);
        drop(now);
    }

    /// Whole blocks in `len` bytes.
    #[inline]
    pub(crate) fn blocks_in(&self, len: u32) -> u32 {
        len >> self.block_shift
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
    /// `CLOSE_DRAIN`, 10 s) for it, then leaks what is still in the device's hands.
    fn drop(&mut self) {
        let st = self.state.get_mut();
        if st.q.outstanding() == 0 {
            return;
        }
        st.q.flush();
        let deadline = Instant::now() + CLOSE_DRAIN;
        let State { q, slots, .. } = st;
        while q.outstanding() > 0 && Instant::now() < deadline {
            let n = q.poll(slots.capacity(), |rq| {
                drop(slots.complete(rq.token as u32, rq.status));
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
