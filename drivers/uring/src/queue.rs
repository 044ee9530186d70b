//! One io_uring per reactor queue: ring setup with flag fallbacks, SQE preparation, batched
//! submission and reaping in one `io_uring_enter` per reactor turn, and short-transfer
//! resubmission.
//!
//! `submit` only fills SQEs and records that a submission is owed; the next `poll` rings the
//! doorbell with one `io_uring_enter(to_submit, 0, flags)`, then reaps. The ring is set up
//! with TASKRUN_FLAG where the kernel has it: the kernel then flags in the SQ ring when
//! completions wait for task work (DEFER_TASKRUN), and only then does the enter carry
//! GETEVENTS to run it (buffered reads of cached pages complete inside the submitting call and
//! need none, as with t/io_uring's plain submit). A poll with nothing owed makes a system
//! call only for flagged task work, or to wait (`wait_us`); pure polling otherwise just reads
//! the rings (with a GETEVENTS enter every `IDLE_ENTER_EVERY` empty polls as a safety net).
//! A batch is therefore sent at the latest by the next `poll` of the queue, which the block
//! layer's callers always make while anything is outstanding (`outstanding` counts owed
//! requests). A poll with nothing owed and nothing in flight makes no system call.
//!
//! The tag rides in `user_data`. Per-tag progress (bytes already transferred) lives in an
//! array sized at open, so the I/O path allocates nothing.

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use pmio::prefetch::prefetch;
use pmio::{DriverQueue, IoStatus, Op, OpSet, PrioClass, ReqFlags, Request};

use crate::enter::{ENTER_GETEVENTS, KernelTimespec, RingFd};
use crate::error::UringError;
use crate::nvme::{self, DsmRange, NVME_URING_CMD_IO, NvmeUringCmd};

/// Largest ring (SQ entries) a queue opens; also the deepest queue it accepts.
pub(crate) const MAX_QUEUE_DEPTH: u32 = 4096;
/// Largest single transfer the kernel does in one read/write call.
pub(crate) const MAX_RW_BYTES: u32 = 0x7fff_f000;
/// Largest region one registered buffer may cover (a kernel limit).
const MAX_REG_BUF: usize = 1 << 30;
/// With the task-run flag and no wait, a poll that finds nothing to do makes no system call;
/// every this many such polls in a row it enters with GETEVENTS anyway (a safety net should a
/// kernel not flag some task work; counted as `idle` enters).
const IDLE_ENTER_EVERY: u32 = 1024;
/// CQEs taken (and their requests prefetched) at a time by `reap`.
const REAP_CHUNK: usize = 32;
/// SQEs `submit` builds in its staging buffer before copying them into the ring at once.
const STAGE_CHUNK: usize = 32;

/// What the queue's file descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A regular file or block device: read/write/fsync/fallocate opcodes.
    File,
    /// An NVMe generic character device: `IORING_OP_URING_CMD` with NVMe commands.
    Nvme { nsid: u32 },
    /// Any of the above in benchmark mode (`UringOptions::nop`): `IORING_OP_NOP` for every
    /// request; nothing reaches the file.
    Nop,
}

/// Everything a queue needs from its device, fixed at open.
pub(crate) struct QueueConfig {
    pub name: Arc<str>,
    /// Keeps the fd open for as long as the queue lives.
    pub file: Arc<File>,
    pub target: Target,
    pub block_shift: u32,
    pub num_blocks: u64,
    /// Offset/length alignment a resubmitted remainder must keep (block size with O_DIRECT,
    /// 1 for buffered I/O).
    pub direct_align: u32,
    pub supported: OpSet,
    /// Build an IOPOLL ring.
    pub iopoll: bool,
    /// Memory regions to register as fixed buffers (shared with the device).
    pub buffers: Arc<BufferSet>,
    /// Longest wait in the kernel for completions when a poll finds none (0: never wait).
    pub wait_us: u32,
}

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
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The calling thread's regions, the generation they were set at (0: never), and the
    /// set's current generation.
    fn snapshot(&self) -> (Vec<(usize, usize)>, u64, u64) {
        let me = std::thread::current().id();
        let t = self.per_thread.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.generation.load(Ordering::Acquire);
        match t.iter().find(|(id, _, _)| *id == me) {
            Some((_, g, r)) => (r.clone(), *g, now),
            None => (Vec::new(), 0, now),
        }
    }
}

/// The setup flags a ring was created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFlags {
    pub single_issuer: bool,
    pub defer_taskrun: bool,
    pub coop_taskrun: bool,
    pub submit_all: bool,
    /// No SQ index array (SQEs are consumed in ring order; Linux 6.6+).
    pub no_sqarray: bool,
    /// The kernel sets `IORING_SQ_TASKRUN` in the SQ flags while completions wait for task
    /// work (set with COOP_TASKRUN or DEFER_TASKRUN): a poll enters the kernel for them only
    /// when the flag says so.
    pub taskrun_flag: bool,
    pub iopoll: bool,
}

/// Setup-flag sets tried in order; the first the kernel accepts wins. EINVAL moves on.
/// (single_issuer, defer_taskrun, coop_taskrun, submit_all, no_sqarray)
const LADDER: [(bool, bool, bool, bool, bool); 7] = [
    (true, true, true, true, true),
    (true, true, true, true, false),
    (true, true, false, true, false),
    (true, false, true, true, false),
    (false, false, true, true, false),
    (false, false, false, true, false),
    (false, false, false, false, false),
];

/// Creates a ring of `entries` SQEs with the best setup flags the kernel accepts.
pub(crate) fn build_ring<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
    name: &str,
    entries: u32,
    iopoll: bool,
) -> Result<(IoUring<S, C>, RingFlags), UringError> {
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for (si, dt, coop, all, nosqa) in LADDER {
        let mut b = IoUring::<S, C>::builder();
        b.setup_cqsize(entries * 2).setup_clamp();
        if si {
            b.setup_single_issuer();
        }
        if dt {
            b.setup_defer_taskrun();
        }
        if coop {
            b.setup_coop_taskrun();
        }
        // TASKRUN_FLAG (5.19) needs COOP_TASKRUN or DEFER_TASKRUN (6.1), and every kernel
        // with either knows it.
        let taskrun_flag = coop || dt;
        if taskrun_flag {
            b.setup_taskrun_flag();
        }
        if all {
            b.setup_submit_all();
        }
        if nosqa {
            b.setup_no_sqarray();
        }
        if iopoll {
            b.setup_iopoll();
        }
        match b.build(entries) {
            Ok(ring) => {
                let flags = RingFlags {
                    single_issuer: si,
                    defer_taskrun: dt,
                    coop_taskrun: coop,
                    submit_all: all,
                    no_sqarray: nosqa,
                    taskrun_flag,
                    iopoll,
                };
                log::debug!("uring bdev {name}: ring of {entries} entries, setup flags {flags:?}");
                return Ok((ring, flags));
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                log::debug!(
                    "uring bdev {name}: setup flags (single_issuer={si}, defer_taskrun={dt}, \
                     coop_taskrun={coop}, submit_all={all}, no_sqarray={nosqa}) refused with \
                     EINVAL; trying fewer"
                );
                last = e;
            }
            Err(e) => {
                return Err(UringError::Ring {
                    name: name.to_string(),
                    what: "io_uring_setup",
                    source: e,
                });
            }
        }
    }
    Err(UringError::Ring {
        name: name.to_string(),
        what: "io_uring_setup (every flag set refused)",
        source: last,
    })
}

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
pub(crate) struct RawSqe {
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
    fn into_entry(self) -> squeue::Entry {
        // SAFETY: `squeue::Entry` is a `#[repr(C)]` wrapper of the kernel's 64-byte
        // `io_uring_sqe` (io-uring 0.7; `transmute` checks the size), which `RawSqe` spells out
        // field by field in the kernel's ABI layout (checked against the crate's builder in
        // `raw_sqe_matches_the_builder`). An SQE is plain data: every bit pattern is a value.
        unsafe { std::mem::transmute::<RawSqe, squeue::Entry>(self) }
    }
}

/// What to do with a request after one completion of its SQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The request is finished with this status.
    Complete(IoStatus),
    /// Part was transferred; resubmit the remainder from this many bytes in.
    Resubmit(u32),
}

/// The completion rule for file I/O: errors end the request with their errno; a data transfer
/// that moved nothing (end of file) fails with EIO instead of spinning; a partial transfer
/// continues from where it stopped, unless the stop is not `align`ed (O_DIRECT at an
/// unaligned end of file), which is also end of file.
pub(crate) fn file_step(op: Op, res: i32, done: u32, total: u32, align: u32) -> Step {
    if res < 0 {
        return Step::Complete(IoStatus::Errno(-res));
    }
    if !op.has_data() {
        return Step::Complete(IoStatus::Success);
    }
    let done = done.saturating_add(res as u32);
    if done >= total {
        Step::Complete(IoStatus::Success)
    } else if res == 0 || !done.is_multiple_of(align) {
        Step::Complete(IoStatus::Errno(libc::EIO))
    } else {
        Step::Resubmit(done)
    }
}

/// Linux ioprio value for a request (0: the submitting thread's own priority).
fn ioprio(rq: &Request) -> u16 {
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

/// A registered buffer: `[start, end)` and its index.
#[derive(Clone, Copy, Debug)]
struct RegBuf {
    start: usize,
    end: usize,
    index: u16,
}

/// Immutable part of a queue, borrowed while the ring is split.
struct Prep {
    cfg: QueueConfig,
    bufs: Vec<RegBuf>,
}

impl Prep {
    /// The fixed-buffer index covering `[addr, addr + len)`, if any.
    #[inline(always)]
    fn fixed_index(&self, addr: usize, len: usize) -> Option<u16> {
        let end = addr + len;
        // Most devices have one region (a reactor's DMA pool): test it before looping.
        let first = self.bufs.first()?;
        if addr >= first.start && end <= first.end {
            return Some(first.index);
        }
        self.bufs[1..]
            .iter()
            .find(|b| addr >= b.start && end <= b.end)
            .map(|b| b.index)
    }

    /// Checks a request against the device; returns its byte length (0 without data).
    #[inline(always)]
    fn check(&self, rq: &Request) -> Result<u32, i32> {
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

    /// Builds the SQE for `rq`, `done` bytes into its transfer.
    #[inline]
    fn sqe<S: Sqe>(&self, rq: &Request, done: u32, dsm: &mut DsmRange) -> Result<S, i32> {
        let bytes = self.check(rq)?;
        let e = match self.cfg.target {
            Target::File => S::from(self.file_sqe(rq, bytes, done)),
            Target::Nop => S::from(opcode::Nop::new().build()),
            Target::Nvme { nsid } => {
                S::from_cmd80(self.nvme_sqe(rq, nsid, bytes, dsm)).ok_or(libc::EOPNOTSUPP)?
            }
        };
        Ok(e)
    }

    /// The SQE of a file read or write (`None` for other ops), written field by field: the
    /// per-I/O path of pmio-perf and every data transfer, without the builder's general path.
    #[inline(always)]
    fn rw_sqe(&self, rq: &Request, bytes: u32, done: u32, tag: u16) -> Option<RawSqe> {
        let write = match rq.op {
            Op::Read => false,
            Op::Write => true,
            _ => return None,
        };
        let ptr = rq.buf.as_ptr().wrapping_add(done as usize);
        let len = bytes - done;
        let (opcode, buf_index) = match (self.fixed_index(ptr as usize, len as usize), write) {
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

    /// The tagged SQE of a file request: reads and writes written field by field
    /// (`rw_sqe`), other ops through the builder (`file_sqe`).
    #[inline(always)]
    fn file_entry<S: Sqe>(&self, rq: &Request, bytes: u32, done: u32, tag: u16) -> S {
        match self.rw_sqe(rq, bytes, done, tag) {
            Some(raw) => S::from(raw.into_entry()),
            None => sqe_with_tag(S::from(self.file_sqe(rq, bytes, done)), tag),
        }
    }

    #[inline(always)]
    fn file_sqe(&self, rq: &Request, bytes: u32, done: u32) -> squeue::Entry {
        let fd = types::Fixed(0);
        let shift = self.cfg.block_shift;
        let off = (rq.lba << shift) + u64::from(done);
        let ptr = rq.buf.as_ptr().wrapping_add(done as usize);
        let len = bytes - done;
        let prio = ioprio(rq);
        match rq.op {
            Op::Read => match self.fixed_index(ptr as usize, len as usize) {
                Some(i) => opcode::ReadFixed::new(fd, ptr, len, i)
                    .offset(off)
                    .ioprio(prio)
                    .build(),
                None => opcode::Read::new(fd, ptr, len)
                    .offset(off)
                    .ioprio(prio)
                    .build(),
            },
            Op::Write => {
                let flags = if rq.flags.contains(ReqFlags::FUA) {
                    libc::RWF_DSYNC
                } else {
                    0
                };
                match self.fixed_index(ptr as usize, len as usize) {
                    Some(i) => opcode::WriteFixed::new(fd, ptr, len, i)
                        .offset(off)
                        .ioprio(prio)
                        .rw_flags(flags)
                        .build(),
                    None => opcode::Write::new(fd, ptr, len)
                        .offset(off)
                        .ioprio(prio)
                        .rw_flags(flags)
                        .build(),
                }
            }
            Op::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            Op::WriteZeroes => opcode::Fallocate::new(fd, u64::from(rq.nblocks) << shift)
                .offset(rq.lba << shift)
                .mode(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
            Op::Discard => opcode::Fallocate::new(fd, u64::from(rq.nblocks) << shift)
                .offset(rq.lba << shift)
                .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                .build(),
        }
    }

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
            && let Some(i) = self.fixed_index(addr as usize, bytes as usize)
        {
            b = b.buf_index(Some(i));
        }
        b.build()
    }
}

/// Per-queue mutable state, all preallocated at open.
struct State {
    /// Bytes transferred so far, per tag (short transfers resume from here). 0 except while
    /// a remainder is in flight, so a first submission need not write it.
    progress: Vec<u32>,
    /// One DSM range per tag (NVMe discard), alive while the command is.
    dsm: Vec<DsmRange>,
    /// Requests refused before reaching the kernel, completed at the next poll.
    failed: Vec<(u16, i32)>,
    /// Requests started and not yet reaped.
    outstanding: usize,
    /// SQEs pushed since the last enter.
    pending_sqes: u32,
    /// Whether an enter failure has been logged (once per queue).
    enter_error_logged: bool,
    /// Polls in a row that found nothing to submit, nothing in the CQ and no task work
    /// flagged (pure polling); every `IDLE_ENTER_EVERY`th enters the kernel anyway.
    idle_polls: u32,
    /// System calls made, by reason (logged at debug level when the queue is dropped).
    enters: EnterCounts,
}

/// Why a queue entered the kernel, counted per queue.
#[derive(Clone, Copy, Debug, Default)]
struct EnterCounts {
    /// To submit SQEs (with GETEVENTS when task work was flagged too).
    submit: u64,
    /// Only to run flagged task work (completions waiting to be posted).
    task_work: u64,
    /// To wait for completions (`wait_us`).
    wait: u64,
    /// The pure-polling safety net (`IDLE_ENTER_EVERY`).
    idle: u64,
}

impl State {
    /// `file_step` with this tag's progress; a completed request's progress goes back to 0.
    #[cold]
    #[inline(never)]
    fn file_step_slow(&mut self, op: Op, t: usize, res: i32, total: u32, align: u32) -> Step {
        let done = self.progress.get(t).copied().unwrap_or(0);
        let step = file_step(op, res, done, total, align);
        if done != 0 && matches!(step, Step::Complete(_)) {
            self.progress[t] = 0;
        }
        step
    }

    /// The DSM range of tag `t` (NVMe discard), growing the per-tag arrays if needed.
    #[inline]
    fn dsm_of(&mut self, t: usize) -> &mut DsmRange {
        if t >= self.dsm.len() {
            self.grow(t);
        }
        &mut self.dsm[t]
    }

    /// Grows the per-tag arrays for a tag beyond the opened depth (reserved tags). Cold: at
    /// most a few times per queue.
    #[cold]
    fn grow(&mut self, tag: usize) {
        let n = (tag + 1).next_power_of_two();
        self.progress.resize(n, 0);
        self.dsm.resize(n, DsmRange::default());
    }
}

/// The driver side of one hardware queue: one ring, used only by the reactor that opened it.
pub(crate) struct UringQueue<S: Sqe, C: cqueue::EntryMarker> {
    /// Declared before `ring`, so it is dropped (unregistered) while the ring is open.
    ring_fd: RingFd,
    ring: IoUring<S, C>,
    prep: Prep,
    st: State,
    /// File (or NOP) SQEs of a `submit` call are built here, then copied into the ring
    /// together (`RingIo::submit_staged`).
    staged: Vec<S>,
    enter_flags: u32,
    /// The ring reports pending task work in its SQ flags (`RingFlags::taskrun_flag`).
    taskrun_flag: bool,
    /// Generation of the buffer set last seen, and of this thread's registered regions.
    buffers_seen: u64,
    buffers_gen: u64,
    /// `cfg.wait_us` as the kernel's timespec, when waiting is on.
    wait: Option<KernelTimespec>,
    /// Not Send: the ring was created for (SINGLE_ISSUER) and belongs to one thread.
    _not_send: PhantomData<*const ()>,
}

impl<S: Sqe, C: cqueue::EntryMarker> UringQueue<S, C> {
    /// Creates the ring, registers the file and the buffers, and preallocates per-tag state.
    pub(crate) fn open(cfg: QueueConfig, depth: u32) -> Result<Self, UringError> {
        let entries = depth.clamp(1, MAX_QUEUE_DEPTH).next_power_of_two();
        let (ring, flags) = build_ring::<S, C>(&cfg.name, entries, cfg.iopoll)?;
        ring.submitter()
            .register_files(&[cfg.file.as_raw_fd()])
            .map_err(|e| UringError::Ring {
                name: cfg.name.to_string(),
                what: "register file",
                source: e,
            })?;
        let (regions, buffers_gen, buffers_seen) = cfg.buffers.snapshot();
        let bufs = register_regions(&ring, &cfg.name, &regions, false);
        // GETEVENTS runs deferred task work (DEFER_TASKRUN) and polls (IOPOLL), so completions
        // are flushed to the CQ by the same system call that submits. IOPOLL needs it on every
        // enter; with the task-run flag a ring asks for it only while the kernel flags work
        // (buffered reads of cached pages complete inside the submitting call and need none);
        // DEFER_TASKRUN without the flag (no such kernel is known) asks every time.
        let taskrun_flag = flags.taskrun_flag && !flags.iopoll;
        let enter_flags = if flags.iopoll || (flags.defer_taskrun && !taskrun_flag) {
            ENTER_GETEVENTS
        } else {
            0
        };
        let wait = (cfg.wait_us > 0).then(|| KernelTimespec::from_micros(cfg.wait_us));
        let ring_fd = RingFd::register(ring.as_raw_fd(), &cfg.name);
        let d = depth as usize;
        Ok(UringQueue {
            ring_fd,
            ring,
            prep: Prep { cfg, bufs },
            st: State {
                progress: vec![0; d],
                dsm: vec![DsmRange::default(); d],
                failed: Vec::with_capacity(d),
                outstanding: 0,
                pending_sqes: 0,
                enter_error_logged: false,
                idle_polls: 0,
                enters: EnterCounts::default(),
            },
            staged: Vec::with_capacity(STAGE_CHUNK),
            enter_flags,
            taskrun_flag,
            buffers_seen,
            buffers_gen,
            wait,
            _not_send: PhantomData,
        })
    }
}

impl<S: Sqe, C: cqueue::EntryMarker> Drop for UringQueue<S, C> {
    fn drop(&mut self) {
        let e = self.st.enters;
        log::debug!(
            "uring bdev {}: io_uring_enter calls: {} to submit, {} for task work, {} to wait, \
             {} idle",
            self.prep.cfg.name,
            e.submit,
            e.task_work,
            e.wait,
            e.idle
        );
    }
}

/// Registers `regions` as fixed buffers (split at the kernel's 1 GiB limit). On failure the
/// queue uses plain read/write opcodes and says so (a warning when `loud`: at open, regions
/// an earlier user of this thread registered and has since unmapped fail quietly).
fn register_regions<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
    ring: &IoUring<S, C>,
    name: &str,
    regions: &[(usize, usize)],
    loud: bool,
) -> Vec<RegBuf> {
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
        return bufs;
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
            bufs
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
            Vec::new()
        }
    }
}

impl<S: Sqe, C: cqueue::EntryMarker> UringQueue<S, C> {
    /// Registers this thread's current regions in place of the old ones, if they changed.
    /// Cold: runs once per registration on the device. Requests already in flight keep the
    /// buffers they were issued with (the kernel holds them until they complete).
    #[cold]
    fn refresh_buffers(&mut self) {
        let (regions, generation, now) = self.prep.cfg.buffers.snapshot();
        self.buffers_seen = now;
        if generation == self.buffers_gen {
            return;
        }
        if !self.prep.bufs.is_empty() {
            let _ = self.ring.submitter().unregister_buffers();
        }
        self.prep.bufs = register_regions(&self.ring, &self.prep.cfg.name, &regions, true);
        self.buffers_gen = generation;
    }
}

/// The ring's three halves for one `submit` or `poll` call: taken once per call, so the SQ
/// tail and CQ head are published once per batch rather than once per entry.
struct RingIo<'a, S: squeue::EntryMarker, C: cqueue::EntryMarker> {
    ring_fd: &'a RingFd,
    sq: io_uring::SubmissionQueue<'a, S>,
    cq: io_uring::CompletionQueue<'a, C>,
    staged: &'a mut Vec<S>,
    enter_flags: u32,
}

impl<S: Sqe, C: cqueue::EntryMarker> RingIo<'_, S, C> {
    /// One `io_uring_enter`: submits what is queued and, with GETEVENTS, flushes completions
    /// (deferred task work, IOPOLL) into the CQ.
    #[inline]
    fn enter(&mut self, st: &mut State, name: &str, force_getevents: bool) {
        self.sq.sync();
        let to_submit = self.sq.len() as u32;
        let mut flags = self.enter_flags;
        if force_getevents {
            flags |= ENTER_GETEVENTS;
        }
        if to_submit == 0 && flags == 0 {
            st.pending_sqes = 0;
            return;
        }
        if to_submit > 0 {
            st.enters.submit += 1;
        } else {
            st.enters.task_work += 1;
        }
        // SAFETY: the SQEs queued point at buffers their submitters keep valid until
        // completion (IoBuf's contract).
        let r = unsafe { self.ring_fd.enter(to_submit, 0, flags, None) };
        if let Err(e) = r {
            enter_failed(st, name, e);
        }
        self.sq.sync();
        // What the kernel did not consume (a failed enter) is still owed.
        st.pending_sqes = self.sq.len() as u32;
        self.cq.sync();
    }

    /// Submits what is queued and waits up to `ts` for `want` completions (fewer when the
    /// time runs out).
    #[cold]
    fn enter_and_wait(&mut self, st: &mut State, name: &str, want: usize, ts: &KernelTimespec) {
        self.sq.sync();
        st.enters.wait += 1;
        let to_submit = self.sq.len() as u32;
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        // SAFETY: as in `enter`.
        match unsafe {
            self.ring_fd
                .enter(to_submit, want, ENTER_GETEVENTS, Some(ts))
        } {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => enter_failed(st, name, e),
        }
        self.sq.sync();
        st.pending_sqes = self.sq.len() as u32;
        self.cq.sync();
    }

    /// Pushes one SQE; on a full SQ (only when an earlier enter failed), enters and retries.
    #[inline(always)]
    fn push(&mut self, st: &mut State, name: &str, sqe: &S) -> bool {
        // SAFETY: the SQE's buffer belongs to a request between submit and completion, which
        // its submitter keeps valid (IoBuf's contract); a DSM range lives in `st.dsm`.
        // `pending_sqes` is set from the SQ's length at the end of `submit`.
        if unsafe { self.sq.push(sqe) }.is_ok() {
            return true;
        }
        // SAFETY: as above.
        self.make_room(st, name) > 0 && unsafe { self.sq.push(sqe) }.is_ok()
    }

    /// `start` for a file target (a remainder's resubmission; first submissions go through
    /// `submit_staged`).
    fn start_file(&mut self, prep: &Prep, st: &mut State, rqs: &[Request], tag: u16, done: u32) {
        let rq = &rqs[tag as usize];
        let errno = match prep.check(rq) {
            Ok(bytes) => {
                let sqe: S = prep.file_entry(rq, bytes, done, tag);
                if self.push(st, &prep.cfg.name, &sqe) {
                    return;
                }
                libc::EBUSY
            }
            Err(errno) => errno,
        };
        st.failed.push((tag, errno));
    }

    /// Starts the first transfer of each of `tags` (a file target; NOPs with `NOP`): builds
    /// their SQEs in the staging buffer, `STAGE_CHUNK` at a time, and copies each chunk into
    /// the ring at once.
    ///
    /// Why not push each SQE as it is built: the builder's fields are stored to the stack piece
    /// by piece, and the 64-byte copy into the ring that follows at once reads them back in
    /// 16-byte loads that the CPU cannot forward from those narrower stores; each such load
    /// waits for the stores to reach the cache (about half of `submit`'s time in a buffered
    /// profile). Staged, the copy reads SQEs written a chunk earlier.
    #[inline]
    fn submit_staged<const NOP: bool>(
        &mut self,
        prep: &Prep,
        st: &mut State,
        rqs: &[Request],
        tags: &[u16],
    ) {
        let mut rest = tags;
        while !rest.is_empty() {
            let mut room = self.sq.capacity() - self.sq.len();
            if room == 0 {
                room = self.make_room(st, &prep.cfg.name);
                if room == 0 {
                    st.failed.extend(rest.iter().map(|&tag| (tag, libc::EBUSY)));
                    return;
                }
            }
            let (now, later) = rest.split_at(rest.len().min(room).min(STAGE_CHUNK));
            self.staged.clear();
            for &tag in now {
                let rq = &rqs[tag as usize];
                match prep.check(rq) {
                    Ok(_) if NOP => self
                        .staged
                        .push(sqe_with_tag(S::from(opcode::Nop::new().build()), tag)),
                    Ok(bytes) => self.staged.push(prep.file_entry(rq, bytes, 0, tag)),
                    Err(errno) => st.failed.push((tag, errno)),
                }
            }
            // SAFETY: as in `push`; `now` is no longer than the room left, so all fit.
            let pushed = unsafe { self.sq.push_multiple(self.staged) };
            debug_assert!(pushed.is_ok());
            rest = later;
        }
    }

    /// `submit_staged` of NOPs (benchmark mode), out of line: the file path's code stays as
    /// if this one did not exist.
    #[inline(never)]
    fn submit_nops(&mut self, prep: &Prep, st: &mut State, rqs: &[Request], tags: &[u16]) {
        self.submit_staged::<true>(prep, st, rqs, tags);
    }

    /// A full SQ (only when an earlier enter failed): enters the kernel, returns the room now.
    /// Kept out of line so the submit loops' registers are not spent on the system call's path.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, st: &mut State, name: &str) -> usize {
        self.enter(st, name, false);
        self.sq.capacity() - self.sq.len()
    }

    /// Prepares and pushes the SQE of `tag`, `done` bytes in; refusals go to `st.failed`.
    #[inline]
    fn start(&mut self, prep: &Prep, st: &mut State, rqs: &[Request], tag: u16, done: u32) {
        let t = tag as usize;
        let rq = &rqs[t];
        // NVMe passthrough and NOPs go through the general path.
        let errno = match prep.cfg.target {
            Target::File => return self.start_file(prep, st, rqs, tag, done),
            Target::Nvme { .. } | Target::Nop => match prep.sqe::<S>(rq, done, st.dsm_of(t)) {
                Ok(sqe) => {
                    if self.push(st, &prep.cfg.name, &sqe_with_tag(sqe, tag)) {
                        return;
                    }
                    libc::EBUSY
                }
                Err(errno) => errno,
            },
        };
        st.failed.push((tag, errno));
    }

    /// `start` for the remainder of a short transfer (rare; kept out of the reap loop).
    /// Records the progress, which stays until the request completes.
    #[cold]
    #[inline(never)]
    fn restart(&mut self, prep: &Prep, st: &mut State, rqs: &[Request], tag: u16, done: u32) {
        let t = tag as usize;
        if t >= st.progress.len() {
            st.grow(t);
        }
        st.progress[t] = done;
        self.start(prep, st, rqs, tag, done);
        // Owed: the next poll enters the kernel for it.
        st.pending_sqes = self.sq.len() as u32;
    }

    /// Reaps up to `max` CQEs; resubmits short transfers.
    ///
    /// CQEs are taken a chunk at a time and their requests prefetched before any is completed:
    /// after a wait in the kernel the requests' lines are cold, and touching them one CQE at a
    /// time would queue the misses one behind another.
    fn reap(
        &mut self,
        prep: &Prep,
        st: &mut State,
        rqs: &mut [Request],
        done: &mut Vec<u16>,
        max: usize,
    ) -> usize {
        let file = prep.cfg.target == Target::File;
        let nop = prep.cfg.target == Target::Nop;
        let shift = prep.cfg.block_shift;
        let mut n = 0;
        let mut chunk = [(0u16, 0i32); REAP_CHUNK];
        while n < max {
            let mut k = 0;
            while k < REAP_CHUNK.min(max - n) {
                let Some(cqe) = self.cq.next() else {
                    break;
                };
                let cqe: cqueue::Entry = cqe.into();
                let tag = cqe.user_data() as u16;
                if let Some(rq) = rqs.get(usize::from(tag)) {
                    prefetch(rq);
                }
                chunk[k] = (tag, cqe.result());
                k += 1;
            }
            if k == 0 {
                break;
            }
            for &(tag, res) in &chunk[..k] {
                // The usual case first: a file read or write that moved everything in one go
                // (a resumed remainder is shorter than the whole, so nothing was done before).
                if file
                    && let Some(rq) = rqs.get_mut(usize::from(tag))
                    && rq.op.has_data()
                    && res > 0
                    && u64::from(res as u32) == u64::from(rq.nblocks) << shift
                {
                    rq.status = IoStatus::Success;
                    done.push(tag);
                    n += 1;
                    continue;
                }
                // A NOP that succeeded (benchmark mode).
                if nop
                    && res == 0
                    && let Some(rq) = rqs.get_mut(usize::from(tag))
                {
                    rq.status = IoStatus::Success;
                    done.push(tag);
                    n += 1;
                    continue;
                }
                n += usize::from(self.complete_one(prep, st, rqs, done, tag, res));
            }
        }
        st.outstanding -= n;
        n
    }

    /// Any completion but a whole file transfer: errors, end of file, short transfers
    /// (resubmitted), flushes and the like, NVMe passthrough. Returns whether the request
    /// completed (rather than resubmitted or unknown).
    #[inline(never)]
    fn complete_one(
        &mut self,
        prep: &Prep,
        st: &mut State,
        rqs: &mut [Request],
        done: &mut Vec<u16>,
        tag: u16,
        res: i32,
    ) -> bool {
        {
            let t = tag as usize;
            let Some(rq) = rqs.get_mut(t) else {
                log::error!(
                    "uring bdev {}: completion for unknown tag {tag}",
                    prep.cfg.name
                );
                return false;
            };
            let step = match prep.cfg.target {
                Target::Nvme { .. } => Step::Complete(nvme::decode_status(res)),
                Target::Nop if res < 0 => Step::Complete(IoStatus::Errno(-res)),
                Target::Nop => Step::Complete(IoStatus::Success),
                Target::File => {
                    let total = if rq.op.has_data() {
                        (u64::from(rq.nblocks) << prep.cfg.block_shift) as u32
                    } else {
                        0
                    };
                    // The usual case first: the whole transfer in one go (a resumed remainder
                    // is shorter than `total`, so this implies nothing was done before).
                    if total != 0 && res as u32 == total {
                        Step::Complete(IoStatus::Success)
                    } else {
                        st.file_step_slow(rq.op, t, res, total, prep.cfg.direct_align)
                    }
                }
            };
            match step {
                Step::Complete(status) => {
                    rq.status = status;
                    done.push(tag);
                    true
                }
                Step::Resubmit(progress) => {
                    self.restart(prep, st, rqs, tag, progress);
                    false
                }
            }
        }
    }
}

/// An enter that failed (EAGAIN/EBUSY/EINTR): the SQEs stay queued and go with the next enter.
/// Logged once per queue.
#[cold]
fn enter_failed(st: &mut State, name: &str, e: io::Error) {
    if !st.enter_error_logged {
        st.enter_error_logged = true;
        log::warn!("uring bdev {name}: io_uring_enter failed ({e}); retrying on the next poll");
    }
}

/// Completes requests refused before reaching the kernel.
#[cold]
fn complete_failed(st: &mut State, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
    let mut n = 0;
    while n < max {
        let Some((tag, errno)) = st.failed.pop() else {
            break;
        };
        rqs[tag as usize].status = IoStatus::Errno(errno);
        // A remainder refused at resubmission leaves no progress behind.
        if let Some(p) = st.progress.get_mut(tag as usize) {
            *p = 0;
        }
        done.push(tag);
        st.outstanding -= 1;
        n += 1;
    }
    n
}

/// Sets `user_data` = tag.
#[inline]
fn sqe_with_tag<S: squeue::EntryMarker>(mut sqe: S, tag: u16) -> S {
    sqe.set_user_data(u64::from(tag));
    sqe
}

impl<S: Sqe, C: cqueue::EntryMarker> UringQueue<S, C> {
    /// The ring's halves for one call.
    #[inline]
    fn io(&mut self) -> (RingIo<'_, S, C>, &Prep, &mut State, Option<&KernelTimespec>) {
        let (_, sq, cq) = self.ring.split();
        (
            RingIo {
                ring_fd: &self.ring_fd,
                sq,
                cq,
                staged: &mut self.staged,
                enter_flags: self.enter_flags,
            },
            &self.prep,
            &mut self.st,
            self.wait.as_ref(),
        )
    }
}

impl<S: Sqe, C: cqueue::EntryMarker> DriverQueue for UringQueue<S, C> {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        if self.prep.cfg.buffers.generation() != self.buffers_seen {
            self.refresh_buffers();
        }
        let (mut io, prep, st, _) = self.io();
        st.outstanding += tags.len();
        // One loop per target, so the per-request path has no target test.
        match prep.cfg.target {
            Target::File => io.submit_staged::<false>(prep, st, rqs, tags),
            Target::Nop => io.submit_nops(prep, st, rqs, tags),
            Target::Nvme { .. } => {
                for &tag in tags {
                    io.start(prep, st, rqs, tag, 0);
                }
            }
        }
        // No system call here: the SQ tail is published when `io` drops, and the next `poll`
        // submits what is owed together with reaping (see the module documentation).
        st.pending_sqes = io.sq.len() as u32;
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let taskrun_flag = self.taskrun_flag;
        let (mut io, prep, st, wait) = self.io();
        let mut n = 0;
        if !st.failed.is_empty() {
            n += complete_failed(st, rqs, done, max);
        }
        let in_kernel = st.outstanding - st.failed.len();
        let cq_len = io.cq.len();
        let cq_empty = cq_len == 0;
        // With a wait, a batch is `want` completions: fewer in the CQ means waiting for the rest.
        let want = in_kernel.min(max - n);
        let short = wait.is_some() && n == 0 && cq_len < want;
        if st.pending_sqes > 0 || (in_kernel > 0 && cq_empty) || short {
            // At most one system call per turn: with a wait configured and less than a batch
            // (`want`) in the CQ, submit what is owed and wait for the batch (as t/io_uring
            // waits for its completion batch); otherwise submit what is owed, with GETEVENTS
            // when the kernel flags completions waiting for task work (or always, see `open`).
            // None when nothing is owed and the CQ already has entries, or (pure polling)
            // nothing is flagged yet.
            let task_work = !taskrun_flag || io.sq.taskrun();
            match wait {
                Some(ts) if short => io.enter_and_wait(st, &prep.cfg.name, want, ts),
                _ if st.pending_sqes > 0 || task_work => {
                    st.idle_polls = 0;
                    io.enter(st, &prep.cfg.name, task_work)
                }
                _ => {
                    // Nothing flagged: completions are still in the device. A kernel that
                    // failed to flag task work would still be entered now and then.
                    st.idle_polls += 1;
                    if st.idle_polls >= IDLE_ENTER_EVERY {
                        st.idle_polls = 0;
                        st.enters.idle += 1;
                        io.enter(st, &prep.cfg.name, true);
                    }
                }
            }
        }
        n += io.reap(prep, st, rqs, done, max - n);
        // Short transfers `reap` resubmitted are owed and go with the next poll's enter
        // (`outstanding` still counts them, so the caller polls again).
        n
    }

    fn outstanding(&self) -> usize {
        self.st.outstanding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_transfers_resume_and_eof_fails() {
        // Full transfer.
        assert_eq!(
            file_step(Op::Read, 4096, 0, 4096, 512),
            Step::Complete(IoStatus::Success)
        );
        // Short read: resume from 1024 bytes, then finish.
        assert_eq!(
            file_step(Op::Read, 1024, 0, 4096, 512),
            Step::Resubmit(1024)
        );
        assert_eq!(
            file_step(Op::Read, 3072, 1024, 4096, 512),
            Step::Complete(IoStatus::Success)
        );
        // End of file: nothing moved.
        assert_eq!(
            file_step(Op::Read, 0, 1024, 4096, 512),
            Step::Complete(IoStatus::Errno(libc::EIO))
        );
        // O_DIRECT stopping at an unaligned end of file cannot resume.
        assert_eq!(
            file_step(Op::Read, 100, 0, 4096, 512),
            Step::Complete(IoStatus::Errno(libc::EIO))
        );
        // Buffered (align 1) can.
        assert_eq!(file_step(Op::Write, 100, 0, 4096, 1), Step::Resubmit(100));
        // Errors carry their errno.
        assert_eq!(
            file_step(Op::Write, -libc::ENOSPC, 0, 4096, 1),
            Step::Complete(IoStatus::Errno(libc::ENOSPC))
        );
        // Flush and friends return 0 on success.
        assert_eq!(
            file_step(Op::Flush, 0, 0, 0, 512),
            Step::Complete(IoStatus::Success)
        );
    }

    /// The SQE bytes of a crate-built entry.
    fn bytes_of(e: squeue::Entry) -> [u8; 64] {
        // SAFETY: `squeue::Entry` is 64 bytes of plain data (see `RawSqe::into_entry`).
        unsafe { std::mem::transmute::<squeue::Entry, [u8; 64]>(e) }
    }

    #[test]
    fn raw_sqe_matches_the_builder() {
        let cfg = QueueConfig {
            name: Arc::from("t"),
            file: Arc::new(tempfile::tempfile().unwrap()),
            target: Target::File,
            block_shift: 9,
            num_blocks: 1 << 20,
            direct_align: 512,
            supported: OpSet::READ_WRITE,
            iopoll: false,
            buffers: Arc::default(),
            wait_us: 0,
        };
        let mut buf = vec![0u8; 8192];
        let base = buf.as_mut_ptr() as usize;
        let fixed = Prep {
            cfg,
            bufs: vec![RegBuf {
                start: base,
                end: base + 8192,
                index: 3,
            }],
        };
        for (op, fua, prio, in_fixed, done) in [
            (Op::Read, false, pmio::IoPrio::default(), true, 0),
            (Op::Write, true, pmio::IoPrio::default(), true, 512),
            (
                Op::Read,
                false,
                pmio::IoPrio {
                    class: PrioClass::Rt,
                    level: 3,
                },
                false,
                1024,
            ),
            (Op::Write, false, pmio::IoPrio::default(), false, 0),
        ] {
            let mut rq = Request {
                op,
                lba: 77,
                nblocks: 8,
                prio,
                ..Request::default()
            };
            if fua {
                rq.flags = ReqFlags::FUA;
            }
            let mut other = [0u8; 4096];
            let ptr = if in_fixed {
                buf.as_mut_ptr()
            } else {
                other.as_mut_ptr()
            };
            // SAFETY: the buffer outlives `rq`, and nothing is submitted.
            rq.buf = unsafe { pmio::IoBuf::from_raw_parts(ptr, 4096) };
            let bytes = fixed.check(&rq).unwrap();
            let raw = fixed.rw_sqe(&rq, bytes, done, 42).unwrap();
            let built = sqe_with_tag(fixed.file_sqe(&rq, bytes, done), 42);
            assert_eq!(
                bytes_of(raw.into_entry()),
                bytes_of(built),
                "{op:?} fua={fua} fixed={in_fixed}"
            );
        }
        let flush = Request {
            op: Op::Flush,
            ..Request::default()
        };
        assert!(fixed.rw_sqe(&flush, 0, 0, 1).is_none());
    }

    /// A temporary file of 128 sectors, sector `i` filled with the byte `i`.
    fn sector_file() -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i / 512) as u8).collect();
        std::io::Write::write_all(&mut f, &data).unwrap();
        f
    }

    /// One-sector reads, tag `t` reading sector `t * 3 % 128` into `bufs[t]`.
    ///
    /// # Safety
    /// `bufs` must stay alive and untouched until every read has completed.
    unsafe fn sector_reads(bufs: &mut [[u8; 512]]) -> Vec<Request> {
        let mut rqs = Vec::with_capacity(bufs.len());
        for (t, b) in bufs.iter_mut().enumerate() {
            rqs.push(Request {
                tag: t as u16,
                op: Op::Read,
                lba: (t as u64 * 3) % 128,
                nblocks: 1,
                // SAFETY: the caller's contract (above).
                buf: unsafe { pmio::IoBuf::from_raw_parts(b.as_mut_ptr(), 512) },
                ..Request::default()
            });
        }
        rqs
    }

    /// Every read of `sector_reads` succeeded with its sector's bytes.
    fn assert_sectors_read(rqs: &[Request], bufs: &[[u8; 512]]) {
        for (t, b) in bufs.iter().enumerate() {
            assert!(rqs[t].status.is_success(), "tag {t}: {:?}", rqs[t].status);
            let want = ((t * 3) % 128) as u8;
            assert!(b.iter().all(|&x| x == want), "tag {t}'s data");
        }
    }

    /// With `wait_us`, a poll that finds less than a batch in the CQ submits and waits for the
    /// batch in one enter; every request completes, with its data.
    #[test]
    fn waiting_poll_collects_whole_batches() {
        use pmio::BlockDevice;
        let f = sector_file();
        let mut opts = crate::UringOptions::new(f.path());
        opts.direct = false;
        opts.wait_us = 200_000;
        let bdev = crate::UringBdev::create(&opts).unwrap();
        let mut q = bdev
            .open_queue(pmio::HctxType::Default, 0, 16)
            .expect("queue");
        let mut bufs = vec![[0u8; 512]; 16];
        // SAFETY: `bufs` outlives the queue's I/O and is read only after every completion.
        let mut rqs = unsafe { sector_reads(&mut bufs) };
        let tags: Vec<u16> = (0..16).collect();
        q.submit(&mut rqs, &tags);
        let mut done = Vec::with_capacity(16);
        let start = std::time::Instant::now();
        let mut got = 0;
        while got < 16 {
            got += q.poll(&mut rqs, &mut done, 16);
        }
        assert!(
            start.elapsed() < std::time::Duration::from_millis(150),
            "a full batch ends the wait before the timeout"
        );
        assert_eq!(q.outstanding(), 0);
        done.sort_unstable();
        assert_eq!(done, tags);
        assert_sectors_read(&rqs, &bufs);
        // Nothing in flight: no wait at all.
        let start = std::time::Instant::now();
        assert_eq!(q.poll(&mut rqs, &mut done, 16), 0);
        assert!(start.elapsed() < std::time::Duration::from_millis(100));
    }

    /// One `submit` of more requests than the SQ holds (and than one staging chunk): the SQ is
    /// emptied into the kernel as it fills, and every request completes with its data.
    #[test]
    fn submit_beyond_the_sq_enters_to_make_room() {
        use pmio::BlockDevice;
        let f = sector_file();
        let mut opts = crate::UringOptions::new(f.path());
        opts.direct = false;
        let bdev = crate::UringBdev::create(&opts).unwrap();
        let mut q = bdev
            .open_queue(pmio::HctxType::Default, 0, 4)
            .expect("queue");
        let n = STAGE_CHUNK + 9;
        let mut bufs = vec![[0u8; 512]; n];
        // SAFETY: `bufs` outlives the queue's I/O and is read only after every completion.
        let mut rqs = unsafe { sector_reads(&mut bufs) };
        let tags: Vec<u16> = (0..n as u16).collect();
        q.submit(&mut rqs, &tags);
        let mut done = Vec::with_capacity(n);
        let mut polls = 0;
        while done.len() < n {
            q.poll(&mut rqs, &mut done, n);
            polls += 1;
            assert!(polls < 100_000, "{} of {n} completed", done.len());
        }
        assert_eq!(q.outstanding(), 0);
        done.sort_unstable();
        assert_eq!(done, tags);
        assert_sectors_read(&rqs, &bufs);
    }

    #[test]
    fn ioprio_encoding() {
        let mut rq = Request::default();
        assert_eq!(ioprio(&rq), 0, "default priority leaves the thread's");
        rq.prio = pmio::IoPrio {
            class: PrioClass::Rt,
            level: 2,
        };
        assert_eq!(ioprio(&rq), 1 << 13 | 2);
        rq.prio = pmio::IoPrio {
            class: PrioClass::Idle,
            level: 9,
        };
        assert_eq!(ioprio(&rq), 3 << 13 | 7);
    }

    #[test]
    fn ring_builds_with_some_flags() {
        let (_ring, flags) = build_ring::<squeue::Entry, cqueue::Entry>("t", 64, false).unwrap();
        assert!(!flags.iopoll);
        // A second ring in the same thread also builds (SINGLE_ISSUER is per ring).
        let (_r2, f2) = build_ring::<squeue::Entry128, cqueue::Entry32>("t", 8, false).unwrap();
        assert_eq!(flags, f2);
    }
}
