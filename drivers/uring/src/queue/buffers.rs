//! The fixed-buffer registry: the memory regions a device's queues register with their rings
//! (kept per thread, shared by the device's queues), their registration with one ring, and the
//! lookup of the registered buffer that covers a request's data.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

use io_uring::{IoUring, cqueue, squeue};

use super::UringQueue;
use super::sqe::Sqe;

/// Largest region one registered buffer may cover (a kernel limit).
const MAX_REG_BUF: usize = 1 << 30;

/// One thread's regions `(address, length)` and the generation they were set at.
type ThreadRegions = (ThreadId, u64, Vec<(usize, usize)>);

/// Memory regions `(address, length)` the device's queues register as fixed buffers, kept per
/// thread: a queue registers the regions of the thread that opened it (its reactor), and a
/// new registration on that thread replaces the old one, so regions a reactor let go of are
/// never registered again. A generation number that changes on every registration lets open
/// queues notice with one relaxed load per submitted batch.
#[derive(Debug, Default)]
pub(crate) struct BufferSet {
    per_thread: Mutex<Vec<ThreadRegions>>,
    generation: AtomicU64,
}

impl BufferSet {
    /// Sets the calling thread's regions.
    pub(crate) fn set_for_current_thread(&self, regions: Vec<(usize, usize)>) {
        let me = std::thread::current().id();
        let mut t = self.per_thread.lock().unwrap_or_else(|e| e.into_inner());
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        match t.iter_mut().find(|(id, _, _)| *id == me) {
            Some(e) => *e = (me, generation, regions),
            None => t.push((me, generation, regions)),
        }
    }

    /// The current generation (changes on every registration by any thread).
    #[inline]
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The calling thread's regions, the generation they were set at (0: never), and the
    /// set's current generation.
    pub(super) fn snapshot(&self) -> (Vec<(usize, usize)>, u64, u64) {
        let me = std::thread::current().id();
        let t = self.per_thread.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.generation.load(Ordering::Acquire);
        match t.iter().find(|(id, _, _)| *id == me) {
            Some((_, g, r)) => (r.clone(), *g, now),
            None => (Vec::new(), 0, now),
        }
    }
}

/// A registered buffer: `[start, end)` and its index.
#[derive(Clone, Copy, Debug)]
struct RegBuf {
    start: usize,
    end: usize,
    index: u16,
}

/// The buffers registered with one ring (empty: none, or registration failed).
#[derive(Debug, Default)]
pub(super) struct FixedBuffers(Vec<RegBuf>);

impl FixedBuffers {
    /// The fixed-buffer index covering `[addr, addr + len)`, if any.
    #[inline(always)]
    pub(super) fn index_of(&self, addr: usize, len: usize) -> Option<u16> {
        let end = addr + len;
        // Most devices have one region (a reactor's DMA pool): test it before looping.
        let first = self.0.first()?;
        if addr >= first.start && end <= first.end {
            return Some(first.index);
        }
        self.0[1..]
            .iter()
            .find(|b| addr >= b.start && end <= b.end)
            .map(|b| b.index)
    }

    /// One buffer of `len` bytes at `start` registered at `index`, without a ring.
    #[cfg(test)]
    pub(super) fn one(start: usize, len: usize, index: u16) -> FixedBuffers {
        FixedBuffers(vec![RegBuf {
            start,
            end: start + len,
            index,
        }])
    }
}

/// Registers `regions` as fixed buffers (split at the kernel's 1 GiB limit). On failure the
/// queue uses plain read/write opcodes and says so (a warning when `loud`: at open, regions
/// an earlier user of this thread registered and has since unmapped fail quietly).
pub(super) fn register_regions<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
    ring: &IoUring<S, C>,
    name: &str,
    regions: &[(usize, usize)],
    loud: bool,
) -> FixedBuffers {
    let mut iov = Vec::new();
    let mut bufs = Vec::new();
    for &(start, len) in regions {
        let mut off = 0;
        while off < len {
            let chunk = (len - off).min(MAX_REG_BUF);
            bufs.push(RegBuf {
                start: start + off,
                end: start + off + chunk,
                index: iov.len() as u16,
            });
            iov.push(libc::iovec {
                iov_base: (start + off) as *mut libc::c_void,
                iov_len: chunk,
            });
            off += chunk;
        }
    }
    if iov.is_empty() {
        return FixedBuffers(bufs);
    }
    // SAFETY: the device's `register_buffers` contract (an unsafe fn) makes its caller keep
    // every region mapped while this thread's queues may use it; the kernel pins the pages
    // for as long as they are registered.
    match unsafe { ring.submitter().register_buffers(&iov) } {
        Ok(()) => {
            log::debug!(
                "uring bdev {name}: {} fixed buffer(s) registered",
                iov.len()
            );
            FixedBuffers(bufs)
        }
        Err(e) => {
            let level = if loud {
                log::Level::Warn
            } else {
                log::Level::Debug
            };
            log::log!(
                level,
                "uring bdev {name}: registering {} buffer(s) failed ({e}); using plain \
                 read/write opcodes",
                iov.len()
            );
            FixedBuffers::default()
        }
    }
}

impl<S: Sqe, C: cqueue::EntryMarker> UringQueue<S, C> {
    /// Registers this thread's current regions in place of the old ones, if they changed.
    /// Cold: runs once per registration on the device. Requests already in flight keep the
    /// buffers they were issued with (the kernel holds them until they complete).
    #[cold]
    pub(super) fn refresh_buffers(&mut self) {
        let (regions, generation, now) = self.prep.cfg.buffers.snapshot();
        self.buffers_seen = now;
        if generation == self.buffers_gen {
            return;
        }
        if !self.prep.fixed.0.is_empty() {
            let _ = self.ring.submitter().unregister_buffers();
        }
        self.prep.fixed = register_regions(&self.ring, &self.prep.cfg.name, &regions, true);
        self.buffers_gen = generation;
    }
}
