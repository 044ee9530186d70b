//! The admin queue of a PCIe controller: rings in host memory, doorbells in BAR0, and a
//! one-page data buffer for Identify.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dma::{DmaMapper, DmaMem};
use crate::error::NvmeError;
use crate::regs::{RegisterIo, off};
use crate::ring::{Rings, ring_bytes};
use crate::spec::{Cqe, Sqe};

use super::{DATA_BYTES, check_alive};

/// Completions of other commands kept by [`PcieAdmin::poll_for`].
const STASH_MAX: usize = 64;

/// The admin queue pair and its data buffer.
pub(crate) struct PcieAdmin {
    rings: Rings,
    data_off: usize,
    next_cid: u16,
    /// Completions reaped while waiting for another command, kept for whoever polls for them
    /// later (asynchronous Aborts); the oldest are dropped beyond `STASH_MAX`.
    stash: Vec<Cqe>,
    // Last: the memory must outlive nothing but the rings above (plain pointers into it).
    mem: DmaMem,
}

impl PcieAdmin {
    /// Allocates and maps the admin rings (`entries` each) and data buffer.
    pub fn new(
        mapper: Arc<dyn DmaMapper>,
        entries: u32,
        dstrd: u8,
        page: usize,
    ) -> Result<PcieAdmin, NvmeError> {
        let (_, rings_len) = ring_bytes(entries, page);
        let mem = DmaMem::new(mapper, rings_len + DATA_BYTES.next_multiple_of(page))?;
        let rings = Rings::new(&mem, 0, 0, entries, dstrd, page);
        Ok(PcieAdmin {
            rings,
            data_off: rings_len,
            next_cid: 0,
            stash: Vec::new(),
            mem,
        })
    }

    /// Re-zeroes the rings and resets the host's indices (after a controller reset).
    pub fn reset(&mut self, dstrd: u8, page: usize) {
        self.rings = Rings::new(&self.mem, 0, 0, self.rings.entries, dstrd, page);
        self.stash.clear();
    }

    /// Programs AQA/ASQ/ACQ (the controller must be disabled).
    pub fn program(&self, regs: &dyn RegisterIo) {
        let n = self.rings.entries - 1;
        regs.write32(off::AQA, n << 16 | n);
        regs.write64(off::ASQ, self.rings.sq_iova);
        regs.write64(off::ACQ, self.rings.cq_iova);
    }

    /// I/O address of the data buffer.
    pub fn data_iova(&self) -> u64 {
        self.mem.iova() + self.data_off as u64
    }

    /// Fills the data buffer with `byte` (so stale data is never mistaken for a reply).
    pub fn fill_data(&self, byte: u8) {
        // SAFETY: the data buffer lies inside `mem`; no command using it is outstanding.
        unsafe { std::ptr::write_bytes(self.mem.as_ptr().add(self.data_off), byte, DATA_BYTES) };
    }

    /// Copies the data buffer out as a `T` (an Identify structure).
    pub fn read_data<T: Copy>(&self) -> T {
        const { assert!(size_of::<T>() <= DATA_BYTES) };
        // SAFETY: the buffer is DATA_BYTES long inside `mem` and page aligned; `T` is a plain
        // data structure for which any bytes are valid (Identify layouts are integers only);
        // the command that filled it has completed.
        unsafe {
            self.mem
                .as_ptr()
                .add(self.data_off)
                .cast::<T>()
                .read_volatile()
        }
    }

    /// Submits `sqe` with a fresh command identifier; returns the identifier.
    pub fn submit(&mut self, regs: &dyn RegisterIo, mut sqe: Sqe) -> Option<u16> {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        sqe.set_cid(cid);
        if !self.rings.push(&sqe) {
            return None;
        }
        self.rings.ring_sq(regs);
        Some(cid)
    }

    /// Reaps completions until the one for `cid`; completions of other commands (an Abort
    /// polled later, or stale timed-out ones) are kept in a small stash, the oldest dropped.
    pub fn poll_for(&mut self, regs: &dyn RegisterIo, cid: u16) -> Option<Cqe> {
        if let Some(i) = self.stash.iter().position(|c| c.cid == cid) {
            return Some(self.stash.swap_remove(i));
        }
        let mut found = None;
        let mut any = false;
        while let Some(cqe) = self.rings.pop() {
            any = true;
            if cqe.cid == cid {
                found = Some(cqe);
                break;
            }
            log::debug!(
                "admin completion for command {} kept (waiting for {cid})",
                cqe.cid
            );
            if self.stash.len() == STASH_MAX {
                let old = self.stash.remove(0);
                log::warn!("admin completion for command {} ignored", old.cid);
            }
            self.stash.push(cqe);
        }
        if any {
            self.rings.ring_cq(regs);
        }
        found
    }

    /// Submits `sqe` and waits for its completion (at most `timeout`). Fails on a timeout, a
    /// fatal controller status, a vanished device, or an error status.
    pub fn exec(
        &mut self,
        regs: &dyn RegisterIo,
        sqe: Sqe,
        timeout: Duration,
        ctrlr: &str,
        what: &'static str,
    ) -> Result<Cqe, NvmeError> {
        let cid = self.submit(regs, sqe).ok_or_else(|| NvmeError::Timeout {
            ctrlr: ctrlr.to_string(),
            state: "waiting for a free admin queue slot",
            ms: 0,
        })?;
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        loop {
            if let Some(cqe) = self.poll_for(regs, cid) {
                let st = cqe.status();
                if !st.is_success() {
                    return Err(NvmeError::AdminCommand {
                        ctrlr: ctrlr.to_string(),
                        what,
                        status: st,
                    });
                }
                return Ok(cqe);
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                check_alive(regs, ctrlr, what)?;
                if Instant::now() > deadline {
                    return Err(NvmeError::Timeout {
                        ctrlr: ctrlr.to_string(),
                        state: what,
                        ms: timeout.as_millis() as u64,
                    });
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
