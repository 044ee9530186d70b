//! SQE encoding: a request is checked against the device once (`Prep::check`), then encoded
//! in one place per target: `Prep::file_entry` for files (reads and writes, the per-I/O path,
//! written field by field into a `RawSqe`; flush and fallocate through the io-uring crate's
//! builder), `Prep::nvme_sqe` for NVMe passthrough, `nop_entry` for benchmark NOPs.
//! `Prep::sqe` chooses among them by target. Every SQE carries its tag in `user_data`.

use io_uring::{opcode, squeue, types};
use pmio::{Op, PrioClass, ReqFlags, Request};

use super::buffers::FixedBuffers;
use super::{MAX_RW_BYTES, QueueConfig, Target};
use crate::nvme::{DsmRange, NVME_URING_CMD_IO, NvmeUringCmd};

/// An SQE type the queue can build: 64-byte for files, 128-byte for NVMe passthrough.
pub(crate) trait Sqe: squeue::EntryMarker {
    /// Converts a built passthrough command; `None` when this SQE size cannot carry one.
    fn from_cmd80(e: squeue::Entry128) -> Option<Self>;
}

impl Sqe for squeue::Entry {
    fn from_cmd80(_: squeue::Entry128) -> Option<Self> {
        None
    }
}

impl Sqe for squeue::Entry128 {
    fn from_cmd80(e: squeue::Entry128) -> Option<Self> {
        Some(e)
    }
}

/// The kernel's 64-byte `struct io_uring_sqe` as a read or write uses it, field by field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct RawSqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    rw_flags: u32,
    user_data: u64,
    buf_index: u16,
    personality: u16,
    file_index: u32,
    addr3: u64,
    pad: u64,
}

impl RawSqe {
    /// As the io-uring crate's entry.
    #[inline(always)]
    pub(super) fn into_entry(self) -> squeue::Entry {
        // SAFETY: `squeue::Entry` is a `#[repr(C)]` wrapper of the kernel's 64-byte
        // `io_uring_sqe` (io-uring 0.7; `transmute` checks the size), which `RawSqe` spells out
        // field by field in the kernel's ABI layout (checked against the crate's builder in
        // `raw_sqe_matches_the_builder`). An SQE is plain data: every bit pattern is a value.
        unsafe { std::mem::transmute::<RawSqe, squeue::Entry>(self) }
    }
}

/// Linux ioprio value for a request (0: the submitting thread's own priority).
pub(super) fn ioprio(rq: &Request) -> u16 {
    if rq.prio == pmio::IoPrio::default() {
        return 0;
    }
    let class: u16 = match rq.prio.class {
        PrioClass::Rt => 1,
        PrioClass::Be => 2,
        PrioClass::Idle => 3,
    };
    class << 13 | u16::from(rq.prio.level.min(7))
}

/// Sets `user_data` = tag.
#[inline]
fn sqe_with_tag<S: squeue::EntryMarker>(mut sqe: S, tag: u16) -> S {
    sqe.set_user_data(u64::from(tag));
    sqe
}

/// The tagged SQE of a request in benchmark mode (`Target::Nop`).
#[inline(always)]
pub(super) fn nop_entry<S: Sqe>(tag: u16) -> S {
    sqe_with_tag(S::from(opcode::Nop::new().build()), tag)
}

/// Immutable part of a queue, borrowed while the ring is split: what encoding a request
/// needs to know about the device and the ring.
pub(super) struct Prep {
    pub(super) cfg: QueueConfig,
    /// The buffers registered with this queue's ring.
    pub(super) fixed: FixedBuffers,
}

impl Prep {
    /// Checks a request against the device; returns its byte length (0 without data).
    #[inline(always)]
    pub(super) fn check(&self, rq: &Request) -> Result<u32, i32> {
        if !self.cfg.supported.contains(rq.op) {
            return Err(libc::EOPNOTSUPP);
        }
        if rq.op == Op::Flush {
            return Ok(0);
        }
        let end = rq.lba.checked_add(u64::from(rq.nblocks));
        if rq.nblocks == 0 || end.is_none_or(|e| e > self.cfg.num_blocks) {
            return Err(libc::EINVAL);
        }
        if !rq.op.has_data() {
            return Ok(0);
        }
        let bytes = u64::from(rq.nblocks) << self.cfg.block_shift;
        if bytes > u64::from(MAX_RW_BYTES) || u64::from(rq.buf.len()) < bytes {
            return Err(libc::EINVAL);
        }
        Ok(bytes as u32)
    }

    /// Checks `rq` and builds its tagged SQE, `done` bytes into its transfer. The submit
    /// loops of files and NOPs check and encode themselves (`file_entry`, `nop_entry`)
    /// without a test of the target per request.
    #[inline]
    pub(super) fn sqe<S: Sqe>(
        &self,
        rq: &Request,
        tag: u16,
        done: u32,
        dsm: &mut DsmRange,
    ) -> Result<S, i32> {
        let bytes = self.check(rq)?;
        let e = match self.cfg.target {
            Target::File => self.file_entry(rq, bytes, done, tag),
            Target::Nop => nop_entry(tag),
            Target::Nvme { nsid } => sqe_with_tag(
                S::from_cmd80(self.nvme_sqe(rq, nsid, bytes, dsm)).ok_or(libc::EOPNOTSUPP)?,
                tag,
            ),
        };
        Ok(e)
    }

    /// The tagged SQE of a file request of `bytes` (from `check`), `done` bytes in: reads and
    /// writes written field by field (`rw_sqe`), the rest through the builder.
    #[inline(always)]
    pub(super) fn file_entry<S: Sqe>(&self, rq: &Request, bytes: u32, done: u32, tag: u16) -> S {
        match self.rw_sqe(rq, bytes, done, tag) {
            Some(raw) => S::from(raw.into_entry()),
            None => self.no_data_entry(rq, tag),
        }
    }

    /// The tagged SQE of a file request that moves no data: a flush is `fdatasync`, write
    /// zeroes and discard are `fallocate` ZERO_RANGE and PUNCH_HOLE, the file's size kept.
    #[inline(always)]
    fn no_data_entry<S: Sqe>(&self, rq: &Request, tag: u16) -> S {
        debug_assert!(!rq.op.has_data(), "{:?} is encoded by rw_sqe", rq.op);
        let fd = types::Fixed(0);
        let shift = self.cfg.block_shift;
        let e = if rq.op == Op::Flush {
            opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build()
        } else {
            let mode = if rq.op == Op::Discard {
                libc::FALLOC_FL_PUNCH_HOLE
            } else {
                libc::FALLOC_FL_ZERO_RANGE
            };
            opcode::Fallocate::new(fd, u64::from(rq.nblocks) << shift)
                .offset(rq.lba << shift)
                .mode(mode | libc::FALLOC_FL_KEEP_SIZE)
                .build()
        };
        sqe_with_tag(S::from(e), tag)
    }

    /// The SQE of a file read or write (`None` for other ops), written field by field: the
    /// per-I/O path of pmio-perf and every data transfer, without the builder's general path.
    #[inline(always)]
    pub(super) fn rw_sqe(&self, rq: &Request, bytes: u32, done: u32, tag: u16) -> Option<RawSqe> {
        let write = match rq.op {
            Op::Read => false,
            Op::Write => true,
            _ => return None,
        };
        let ptr = rq.buf.as_ptr().wrapping_add(done as usize);
        let len = bytes - done;
        let (opcode, buf_index) = match (self.fixed.index_of(ptr as usize, len as usize), write) {
            (Some(i), false) => (opcode::ReadFixed::CODE, i),
            (Some(i), true) => (opcode::WriteFixed::CODE, i),
            (None, false) => (opcode::Read::CODE, 0),
            (None, true) => (opcode::Write::CODE, 0),
        };
        let rw_flags = if write && rq.flags.contains(ReqFlags::FUA) {
            libc::RWF_DSYNC as u32
        } else {
            0
        };
        Some(RawSqe {
            opcode,
            flags: squeue::Flags::FIXED_FILE.bits(),
            ioprio: ioprio(rq),
            fd: 0,
            off: (rq.lba << self.cfg.block_shift) + u64::from(done),
            addr: ptr as u64,
            len,
            rw_flags,
            user_data: u64::from(tag),
            buf_index,
            personality: 0,
            file_index: 0,
            addr3: 0,
            pad: 0,
        })
    }

    /// The (untagged) passthrough SQE of `rq` on namespace `nsid`; a discard's range goes in
    /// `dsm`, which lives as long as the command.
    #[inline]
    fn nvme_sqe(
        &self,
        rq: &Request,
        nsid: u32,
        bytes: u32,
        dsm: &mut DsmRange,
    ) -> squeue::Entry128 {
        let addr = rq.buf.as_ptr() as u64;
        let cmd = match rq.op {
            Op::Read => NvmeUringCmd::read(nsid, rq.lba, rq.nblocks, addr, bytes),
            Op::Write => NvmeUringCmd::write(
                nsid,
                rq.lba,
                rq.nblocks,
                addr,
                bytes,
                rq.flags.contains(ReqFlags::FUA),
            ),
            Op::Flush => NvmeUringCmd::flush(nsid),
            Op::WriteZeroes => NvmeUringCmd::write_zeroes(nsid, rq.lba, rq.nblocks),
            Op::Discard => {
                *dsm = DsmRange {
                    context_attributes: 0,
                    nlb: rq.nblocks,
                    slba: rq.lba,
                };
                NvmeUringCmd::dsm_deallocate(nsid, dsm as *mut DsmRange as u64, 1)
            }
        };
        let mut b =
            opcode::UringCmd80::new(types::Fixed(0), NVME_URING_CMD_IO).cmd(cmd.to_sqe_cmd());
        if rq.op.has_data()
            && let Some(i) = self.fixed.index_of(addr as usize, bytes as usize)
        {
            b = b.buf_index(Some(i));
        }
        b.build()
    }
}
