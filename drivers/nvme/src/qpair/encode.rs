//! A request as an NVMe command: the range and size checks and the SQE ([`NsFacts`], shared
//! with the NVMe/TCP queue pair), and the data pointer: PRPs, with the list (or a Dataset
//! Management range) in the tag's own page, prepared at creation so nothing is allocated per
//! I/O (PCIe; the TCP queue pair describes data with SGLs instead).

use pmio::request::{Op, ReqFlags, Request};

use super::{NsFacts, NvmeQpair};
use crate::ctrlr::PAGE_SIZE;
use crate::dma::DmaWindow;
use crate::error::IoError;
use crate::prp;
use crate::spec::{DSM_ATTR_DEALLOCATE, DsmRange, Sqe, nvm_opc};

/// Largest block count of one read, write or write-zeroes command (NLB is 16 bits, 0-based).
pub(crate) const MAX_NLB: u32 = 1 << 16;

impl NsFacts {
    /// Checks that `rq`'s blocks lie inside the namespace (and are at least one).
    #[inline]
    pub(crate) fn check_range(&self, rq: &Request) -> Result<(), IoError> {
        let end = rq.lba.checked_add(u64::from(rq.nblocks));
        if rq.nblocks == 0 || end.is_none_or(|e| e > self.num_blocks) {
            return Err(IoError::OutOfRange {
                lba: rq.lba,
                nblocks: rq.nblocks,
                num_blocks: self.num_blocks,
            });
        }
        Ok(())
    }

    /// Checks a read's or write's range, size (`max_transfer`, 16-bit NLB) and buffer;
    /// returns its bytes.
    #[inline]
    pub(crate) fn check_rw(&self, rq: &Request, max_transfer: u64) -> Result<u64, IoError> {
        self.check_range(rq)?;
        let bytes = u64::from(rq.nblocks) << self.block_shift;
        if bytes > max_transfer || rq.nblocks > MAX_NLB {
            return Err(IoError::TooLarge {
                bytes,
                max: max_transfer.min(u64::from(MAX_NLB) << self.block_shift),
            });
        }
        if u64::from(rq.buf.len()) < bytes {
            return Err(IoError::BufferTooShort {
                len: rq.buf.len(),
                bytes,
            });
        }
        Ok(bytes)
    }

    /// The SQE of a read, write or write zeroes of `rq` (no data pointer), FUA as asked.
    #[inline]
    pub(crate) fn rw_sqe(&self, opc: u8, rq: &Request) -> Sqe {
        let mut sqe = Sqe::new(opc, rq.tag);
        sqe.nsid = self.nsid;
        sqe.set_slba(rq.lba);
        sqe.cdw12 = rq.nblocks - 1;
        if rq.flags.contains(ReqFlags::FUA) {
            sqe.cdw12 |= 1 << 30;
        }
        sqe
    }

    /// Checks a write zeroes of `rq`.
    pub(crate) fn check_write_zeroes(&self, rq: &Request) -> Result<(), IoError> {
        if !self.write_zeroes {
            return Err(IoError::Unsupported("write_zeroes"));
        }
        self.check_range(rq)?;
        if rq.nblocks > MAX_NLB {
            return Err(IoError::TooLarge {
                bytes: u64::from(rq.nblocks) << self.block_shift,
                max: u64::from(MAX_NLB) << self.block_shift,
            });
        }
        Ok(())
    }

    /// Checks a discard of `rq`; returns the one range it deallocates.
    pub(crate) fn dsm_range(&self, rq: &Request) -> Result<DsmRange, IoError> {
        if !self.dsm {
            return Err(IoError::Unsupported("unmap"));
        }
        self.check_range(rq)?;
        Ok(DsmRange {
            cattr: 0,
            nlb: rq.nblocks,
            slba: rq.lba,
        })
    }
}

impl NvmeQpair {
    /// The tag's PRP list page, as a slice of entries.
    ///
    /// # Safety
    /// `tag < depth`, and no command using the page is outstanding (the device reads it only
    /// while its tag's command is).
    unsafe fn prp_list(&mut self, tag: u16) -> &mut [u64] {
        let per_page = PAGE_SIZE as usize / 8;
        // SAFETY: per the contract the page is inside `mem` and not read by the device now.
        unsafe {
            std::slice::from_raw_parts_mut(self.prp_base.add(usize::from(tag) * per_page), per_page)
        }
    }

    fn list_iova(&self, tag: u16) -> u64 {
        self.prp_iova + u64::from(tag) * PAGE_SIZE
    }

    /// Builds the command for `rq` (tag checked by the caller).
    #[inline]
    pub(super) fn build(&mut self, rq: &Request) -> Result<Sqe, IoError> {
        let tag = rq.tag;
        let mut sqe = match rq.op {
            Op::Read | Op::Write => {
                let bytes = self.ns.check_rw(rq, self.max_transfer)?;
                let list_iova = self.list_iova(tag);
                let addr = rq.buf.as_ptr() as u64;
                let Some(iova_offset) = DmaWindow::find(&self.dma_ranges, addr, bytes) else {
                    return Err(IoError::NotRegistered { addr, len: bytes });
                };
                // SAFETY: tag < depth (checked by the caller) and the tag is not outstanding.
                let list = unsafe { self.prp_list(tag) };
                let prps = prp::build(addr, bytes, iova_offset, PAGE_SIZE, list, list_iova)?;
                let opc = if rq.op == Op::Read {
                    nvm_opc::READ
                } else {
                    nvm_opc::WRITE
                };
                let mut sqe = self.ns.rw_sqe(opc, rq);
                sqe.prp1 = prps.prp1;
                sqe.prp2 = prps.prp2;
                sqe
            }
            Op::Flush => Sqe::new(nvm_opc::FLUSH, tag),
            Op::WriteZeroes => {
                self.ns.check_write_zeroes(rq)?;
                self.ns.rw_sqe(nvm_opc::WRITE_ZEROES, rq)
            }
            Op::Discard => {
                let range = self.ns.dsm_range(rq)?;
                let page_iova = self.list_iova(tag);
                // SAFETY: tag < depth and not outstanding; the page holds the one range the
                // device reads while this command is outstanding.
                let list = unsafe { self.prp_list(tag) };
                list[0] = u64::from(range.nlb) << 32 | u64::from(range.cattr);
                list[1] = range.slba;
                let mut sqe = Sqe::new(nvm_opc::DSM, tag);
                sqe.prp1 = page_iova;
                sqe.cdw10 = 0; // one range
                sqe.cdw11 = DSM_ATTR_DEALLOCATE;
                sqe
            }
        };
        sqe.nsid = self.ns.nsid;
        Ok(sqe)
    }
}
