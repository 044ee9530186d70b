//! The NVM commands against RAM: read and write (data moved through PRP1 / PRP2 / a PRP
//! list, reading list entries in place, no allocation), write zeroes, flush, and dataset
//! management (deallocate zeroes the ranges).

use super::State;
use crate::spec::{DSM_ATTR_DEALLOCATE, Sqe, Status, nvm_opc, sct};

impl State {
    /// Executes NVM command `sqe` against namespace 1; returns its status and dword 0.
    pub(super) fn io(&mut self, sqe: &Sqe) -> (Status, u32) {
        let xfer_err = (Status::new(sct::GENERIC, 0x04, true), 0);
        let lba_range = (Status::new(sct::GENERIC, 0x80, true), 0);
        let bs = 1usize << self.cfg.block_shift;
        let blocks = self.cfg.blocks;
        if sqe.nsid != 1 && sqe.opcode() != nvm_opc::FLUSH {
            return (Status::new(sct::GENERIC, 0x0b, true), 0);
        }
        let nlb = u64::from(sqe.cdw12 & 0xffff) + 1;
        let slba = sqe.slba();
        match sqe.opcode() {
            nvm_opc::FLUSH => (Status::SUCCESS, 0),
            nvm_opc::READ | nvm_opc::WRITE | nvm_opc::WRITE_ZEROES => {
                if slba.checked_add(nlb).is_none_or(|e| e > blocks) {
                    return lba_range;
                }
                let (start, len) = (slba as usize * bs, nlb as usize * bs);
                if sqe.opcode() == nvm_opc::WRITE_ZEROES {
                    self.disk[start..start + len].fill(0);
                    return (Status::SUCCESS, 0);
                }
                if len > 4096 << self.cfg.mdts {
                    return (Status::new(sct::GENERIC, 0x02, true), 0);
                }
                if self.transfer(sqe, start, len, sqe.opcode() == nvm_opc::READ) {
                    (Status::SUCCESS, 0)
                } else {
                    xfer_err
                }
            }
            nvm_opc::DSM => {
                let n = (sqe.cdw10 & 0xff) as usize + 1;
                let mut raw = vec![0u8; n * 16];
                if !self.read_mem(sqe.prp1, &mut raw) {
                    return xfer_err;
                }
                for r in raw.chunks(16) {
                    let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
                    let mut s8 = [0u8; 8];
                    s8.copy_from_slice(&r[8..16]);
                    let s = u64::from_le_bytes(s8);
                    if s.checked_add(nlb).is_none_or(|e| e > blocks) {
                        return lba_range;
                    }
                    if sqe.cdw11 & DSM_ATTR_DEALLOCATE != 0 {
                        self.disk[s as usize * bs..(s + nlb) as usize * bs].fill(0);
                    }
                }
                (Status::SUCCESS, 0)
            }
            _ => (Status::new(sct::GENERIC, 0x01, true), 0),
        }
    }

    /// Copies `len` bytes between the namespace at byte `start` and the memory a command's
    /// PRPs describe (`to_host`: a read). No allocation: PRP list entries are read in place.
    fn transfer(&mut self, sqe: &Sqe, start: usize, len: usize, to_host: bool) -> bool {
        let page = 4096u64;
        if sqe.prp1 & 3 != 0 {
            return false;
        }
        let first = ((page - (sqe.prp1 & (page - 1))) as usize).min(len);
        if !self.copy(sqe.prp1, start, first, to_host) {
            return false;
        }
        let mut left = len - first;
        let mut pos = start + first;
        if left == 0 {
            return true;
        }
        if left <= page as usize {
            return sqe.prp2 & (page - 1) == 0 && self.copy(sqe.prp2, pos, left, to_host);
        }
        let n = left.div_ceil(page as usize);
        if n > 512 || !sqe.prp2.is_multiple_of(8) {
            return false;
        }
        let Some(list) = self.host(sqe.prp2, n * 8) else {
            return false;
        };
        for i in 0..n {
            // SAFETY: the list lies in mapped memory (checked above), 8-byte aligned (IOVA
            // and address agree modulo the page size).
            let a = unsafe { list.cast::<u64>().add(i).read_volatile() };
            let l = left.min(page as usize);
            if a & (page - 1) != 0 || !self.copy(a, pos, l, to_host) {
                return false;
            }
            left -= l;
            pos += l;
        }
        true
    }

    /// Copies `len` bytes between namespace byte `pos` and mapped memory at `iova`.
    fn copy(&mut self, iova: u64, pos: usize, len: usize, to_host: bool) -> bool {
        let Some(host) = self.host(iova, len) else {
            return false;
        };
        if pos + len > self.disk.len() {
            return false;
        }
        let disk = self.disk[pos..pos + len].as_mut_ptr();
        // SAFETY: `host..+len` is memory the driver mapped for DMA (translated above), the
        // disk range is in bounds (checked); they never overlap (the disk is the emulator's
        // own Vec).
        unsafe {
            if to_host {
                std::ptr::copy_nonoverlapping(disk, host, len);
            } else {
                std::ptr::copy_nonoverlapping(host, disk, len);
            }
        }
        true
    }
}
