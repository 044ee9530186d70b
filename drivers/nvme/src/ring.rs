//! A submission/completion ring pair in DMA memory: slot arithmetic, phase tracking and
//! doorbells. Used by the admin queue and by I/O queue pairs; knows nothing of commands.

use std::sync::atomic::{Ordering, fence};

use crate::dma::DmaMem;
use crate::regs::{self, RegisterIo};
use crate::spec::{Cqe, Sqe};

/// Ring memory layout inside one [`DmaMem`]: SQ at offset 0, CQ at `cq_offset`.
pub(crate) struct Rings {
    pub qid: u16,
    /// Entries per ring (SQ and CQ have the same size).
    pub entries: u32,
    sq: *mut Sqe,
    cq: *const Cqe,
    pub sq_iova: u64,
    pub cq_iova: u64,
    sq_tail: u32,
    /// Last SQ head the controller reported (CQE.SQHD).
    sq_head: u32,
    cq_head: u32,
    phase: bool,
    sq_db: usize,
    cq_db: usize,
}

// SAFETY: the ring pointers point into DMA memory owned by whoever owns the `Rings` (kept
// alive alongside it); a `Rings` is used by one thread at a time (`&mut self` for all
// mutation), so moving it between threads is sound.
unsafe impl Send for Rings {}

/// Bytes of ring memory for `entries` entries: SQ rounded up to `page`, then the CQ.
pub(crate) fn ring_bytes(entries: u32, page: usize) -> (usize, usize) {
    let sq = (entries as usize * size_of::<Sqe>()).next_multiple_of(page);
    let cq = (entries as usize * size_of::<Cqe>()).next_multiple_of(page);
    (sq, sq + cq)
}

impl Rings {
    /// Lays rings of `entries` entries at `offset` in `mem` (zeroing them) for queue `qid`.
    pub fn new(
        mem: &DmaMem,
        offset: usize,
        qid: u16,
        entries: u32,
        dstrd: u8,
        page: usize,
    ) -> Rings {
        let (cq_off, total) = ring_bytes(entries, page);
        assert!(offset + total <= mem.len(), "rings beyond their DMA memory");
        mem.zero(offset, total);
        // SAFETY: offsets are inside `mem` (asserted above) and page aligned.
        let (sq, cq) = unsafe {
            let base = mem.as_ptr().add(offset);
            (
                base.cast::<Sqe>(),
                base.add(cq_off).cast::<Cqe>().cast_const(),
            )
        };
        Rings {
            qid,
            entries,
            sq,
            cq,
            sq_iova: mem.iova() + offset as u64,
            cq_iova: mem.iova() + (offset + cq_off) as u64,
            sq_tail: 0,
            sq_head: 0,
            cq_head: 0,
            phase: true,
            sq_db: regs::sq_tail_doorbell(qid, dstrd),
            cq_db: regs::cq_head_doorbell(qid, dstrd),
        }
    }

    /// Whether the SQ has no free slot (one slot always stays empty).
    #[inline]
    pub fn sq_full(&self) -> bool {
        (self.sq_tail + 1) % self.entries == self.sq_head
    }

    /// Copies `sqe` into the next SQ slot. The controller sees it after [`Rings::ring_sq`].
    /// Returns false when the SQ is full.
    #[inline]
    pub fn push(&mut self, sqe: &Sqe) -> bool {
        if self.sq_full() {
            return false;
        }
        // SAFETY: `sq_tail < entries`, so the slot is inside the SQ ring; the controller does
        // not read slots between its head and our tail until the doorbell says so.
        unsafe { self.sq.add(self.sq_tail as usize).write_volatile(*sqe) };
        self.sq_tail = (self.sq_tail + 1) % self.entries;
        true
    }

    /// Tells the controller about every SQE pushed so far (one MMIO write).
    #[inline]
    pub fn ring_sq(&self, regs: &dyn RegisterIo) {
        // The SQEs must be visible in memory before the controller hears of them.
        fence(Ordering::SeqCst);
        regs.write32(self.sq_db, self.sq_tail);
    }

    /// The next completion, if the controller has posted it (phase tag matches); consumes it.
    #[inline]
    pub fn pop(&mut self) -> Option<Cqe> {
        // SAFETY: `cq_head < entries`, so the slot is inside the CQ ring; the controller writes
        // it with DMA, so it is read with volatile loads and never through a reference.
        let slot = unsafe { self.cq.add(self.cq_head as usize) };
        // SAFETY: as above; `status` is the last 2 bytes of the 16-byte entry.
        let status = unsafe { std::ptr::addr_of!((*slot).status).read_volatile() };
        if (status & 1 != 0) != self.phase {
            return None;
        }
        // The rest of the entry must not be read before the phase tag said it is complete.
        fence(Ordering::Acquire);
        // SAFETY: as above.
        let cqe = unsafe { slot.read_volatile() };
        self.cq_head += 1;
        if self.cq_head == self.entries {
            self.cq_head = 0;
            self.phase = !self.phase;
        }
        if u32::from(cqe.sqhd) < self.entries {
            self.sq_head = u32::from(cqe.sqhd);
        }
        Some(cqe)
    }

    /// Tells the controller which CQ entries the host consumed (one MMIO write).
    #[inline]
    pub fn ring_cq(&self, regs: &dyn RegisterIo) {
        regs.write32(self.cq_db, self.cq_head);
    }
}
