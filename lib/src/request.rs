//! The request: one I/O as the block layer, schedulers and drivers see it.
//!
//! Requests live in a fixed pool per hardware context, indexed by tag (the tag is also the NVMe
//! command identifier), so nothing is allocated per I/O. A request is plain data: who owns the
//! tag owns the request.

use crate::hctx::HctxType;

/// Operation a request performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Op {
    #[default]
    Read = 0,
    Write = 1,
    Flush = 2,
    WriteZeroes = 3,
    Discard = 4,
}

impl Op {
    /// All operations, in discriminant order.
    pub const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Flush, Op::WriteZeroes, Op::Discard];

    /// Whether the operation moves data from the device into the buffer.
    pub fn is_read(self) -> bool {
        self == Op::Read
    }

    /// Whether the operation carries a data buffer at all.
    pub fn has_data(self) -> bool {
        matches!(self, Op::Read | Op::Write)
    }

    /// SPDK's name for the operation (`bdev_get_bdevs` "supported_io_types", iostat keys).
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::WriteZeroes => "write_zeroes",
            Op::Discard => "unmap",
        }
    }
}

/// A set of operations a device supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OpSet(u8);

impl OpSet {
    pub const EMPTY: OpSet = OpSet(0);
    pub const ALL: OpSet = OpSet(0b1_1111);
    pub const READ_WRITE: OpSet = OpSet(0b11);

    pub const fn with(self, op: Op) -> OpSet {
        OpSet(self.0 | 1 << op as u8)
    }

    pub const fn contains(self, op: Op) -> bool {
        self.0 & (1 << op as u8) != 0
    }
}

/// I/O priority class, as Linux's ioprio classes (NONE maps to best effort).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum PrioClass {
    /// Real time: served before everything else.
    Rt = 0,
    /// Best effort: the default.
    #[default]
    Be = 1,
    /// Idle: served when nothing else waits (or after aging).
    Idle = 2,
}

impl PrioClass {
    pub const ALL: [PrioClass; 3] = [PrioClass::Rt, PrioClass::Be, PrioClass::Idle];

    pub fn name(self) -> &'static str {
        match self {
            PrioClass::Rt => "rt",
            PrioClass::Be => "be",
            PrioClass::Idle => "idle",
        }
    }
}

/// Priority class plus level (0 highest .. 7 lowest), as `ioprio`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoPrio {
    pub class: PrioClass,
    pub level: u8,
}

impl Default for IoPrio {
    fn default() -> Self {
        IoPrio {
            class: PrioClass::Be,
            level: 4,
        }
    }
}

/// Request flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReqFlags(u8);

impl ReqFlags {
    pub const NONE: ReqFlags = ReqFlags(0);
    /// Completion is reaped by polling a poll-type queue (REQ_POLLED).
    pub const POLLED: ReqFlags = ReqFlags(1);
    /// Force unit access.
    pub const FUA: ReqFlags = ReqFlags(1 << 1);
    /// Insert at the head of the scheduler's dispatch list (requeue, internal commands).
    pub const HEAD: ReqFlags = ReqFlags(1 << 2);
    /// Synchronous: the submitter waits for it (reads are treated as sync by schedulers).
    pub const SYNC: ReqFlags = ReqFlags(1 << 3);
    /// A child of a split I/O: the block layer completes its parent (`token` names the
    /// parent's slot; see [`crate::bdev::split`]). Set by the block layer only.
    pub(crate) const CHILD: ReqFlags = ReqFlags(1 << 4);

    pub const fn contains(self, other: ReqFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: ReqFlags) -> ReqFlags {
        ReqFlags(self.0 | other.0)
    }

    pub const fn without(self, other: ReqFlags) -> ReqFlags {
        ReqFlags(self.0 & !other.0)
    }
}

/// NVMe completion status fields, kept raw so the block layer need not know NVMe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmeStatus {
    /// Status code type.
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do not retry.
    pub dnr: bool,
}

/// Outcome of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IoStatus {
    /// Not completed yet.
    #[default]
    Pending,
    /// Completed successfully.
    Success,
    /// Failed with an OS error number (positive errno, e.g. `libc::EIO`).
    Errno(i32),
    /// Failed with an NVMe status.
    Nvme(NvmeStatus),
    /// The command did not complete in time and could not be recovered.
    Timeout,
    /// The device went away.
    DeviceRemoved,
}

impl IoStatus {
    pub fn is_success(self) -> bool {
        self == IoStatus::Success
    }

    /// Negative errno in SPDK's convention, for reporting.
    pub fn to_errno(self) -> i32 {
        match self {
            IoStatus::Pending | IoStatus::Success => 0,
            IoStatus::Errno(e) => -e.abs(),
            IoStatus::Nvme(_) => -libc::EIO,
            IoStatus::Timeout => -libc::ETIMEDOUT,
            IoStatus::DeviceRemoved => -libc::ENODEV,
        }
    }
}

/// A data buffer an I/O reads into or writes from.
///
/// It is a raw pointer and length: the block layer and the drivers never own I/O memory, the
/// submitter does, and must keep it valid (and not touch it) until the request completes.
/// For VFIO devices the buffer must lie in DMA-mapped memory (see [`crate::dma`]).
///
/// The mq-deadline scheduler merges I/Os to adjacent blocks whose buffers are adjacent in
/// memory into one, addressed through one member's pointer: cut a region's buffers from one
/// pointer to it (as a DMA region is used), not from separate `&mut` sub-slices, whose
/// pointers may each reach only their own piece.
///
/// Laid out in 12 bytes (4-byte aligned, no tail padding) so that a [`Request`] fits in one
/// 64-byte cache line. The fields are private and only ever read by value, so no reference to
/// a field with less than its natural alignment is ever made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct IoBuf {
    ptr: *mut u8,
    len: u32,
}

impl Default for IoBuf {
    fn default() -> Self {
        IoBuf::EMPTY
    }
}

impl IoBuf {
    /// No buffer (flush, discard, write zeroes).
    pub const EMPTY: IoBuf = IoBuf {
        ptr: std::ptr::null_mut(),
        len: 0,
    };

    /// Wraps memory the caller owns.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and stay so, untouched by anyone
    /// else, from submission until the request that carries it has completed.
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: u32) -> IoBuf {
        IoBuf { ptr, len }
    }

    pub fn as_ptr(self) -> *mut u8 {
        self.ptr
    }

    pub fn len(self) -> u32 {
        self.len
    }

    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Bytes `off..off + len` of this buffer, addressed through its pointer (so the part keeps
    /// the provenance of the whole, and the whole's contract). Panics when the part is not
    /// inside the buffer.
    pub fn range(self, off: u32, len: u32) -> IoBuf {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "bytes {off}+{len} outside a buffer of {}",
            self.len
        );
        IoBuf {
            ptr: self.ptr.wrapping_add(off as usize),
            len,
        }
    }
}

/// One I/O as a submitter describes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Io {
    pub op: Op,
    /// First logical block.
    pub lba: u64,
    /// Number of logical blocks (0 for flush).
    pub nblocks: u32,
    pub buf: IoBuf,
    pub prio: IoPrio,
    pub flags: ReqFlags,
    /// Opaque to pmio; handed back at completion.
    pub token: u64,
}

/// A request in a hardware context's pool. Indexed by `tag`.
///
/// Exactly one 64-byte cache line, aligned to one (a pool of requests is an array of lines):
/// submit, driver and completion touch one line per request.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
pub struct Request {
    pub op: Op,
    pub flags: ReqFlags,
    pub prio: IoPrio,
    /// Hardware context type the request was allocated from.
    pub hctx: HctxType,
    /// Index in the pool; also the driver's command identifier.
    pub tag: u16,
    pub lba: u64,
    pub nblocks: u32,
    pub buf: IoBuf,
    pub status: IoStatus,
    /// When the request was submitted (ns, from the submitter's batched clock).
    pub submit_ns: u64,
    /// When its completion was reaped (ns); 0 while pending.
    pub complete_ns: u64,
    /// The submitter's token.
    pub token: u64,
}

const _: () = assert!(std::mem::size_of::<Request>() == 64);
const _: () = assert!(std::mem::size_of::<IoBuf>() == 12);

impl Request {
    /// Fills the request from a submitter's description, keeping `tag` and `hctx`.
    #[inline]
    pub fn prepare(&mut self, io: &Io, now_ns: u64) {
        self.op = io.op;
        self.flags = io.flags;
        self.prio = io.prio;
        self.lba = io.lba;
        self.nblocks = io.nblocks;
        self.buf = io.buf;
        self.token = io.token;
        self.status = IoStatus::Pending;
        self.submit_ns = now_ns;
        self.complete_ns = 0;
    }

    /// Bytes the request transfers (0 for ops without data).
    pub fn bytes(&self, block_size: u32) -> u64 {
        u64::from(self.nblocks) * u64::from(block_size)
    }
}
