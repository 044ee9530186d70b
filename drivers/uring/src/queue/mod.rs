//! One io_uring per reactor queue. The files, one mechanism each:
//!
//! - `mod.rs`: the queue itself: what it needs from its device (`QueueConfig`), `open`, drop,
//!   and the `DriverQueue` impl (`submit`, `poll`) that drives the others.
//! - `ring.rs`: ring set-up, the setup flags tried best first and dropped on EINVAL.
//! - `buffers.rs`: the fixed-buffer registry: regions per thread, their registration with a
//!   ring, and which registered buffer covers a request's data.
//! - `sqe.rs`: SQE encoding: a request checked once and encoded in one place per target
//!   (file, NVMe passthrough, NOP).
//! - `progress.rs`: per-tag progress: what a completion means for its request (short
//!   transfers resume, end of file, NVMe status), and what a tag keeps between its SQEs.
//! - `engine.rs`: the submit/reap engine: staged pushes into the SQ, `io_uring_enter` and the
//!   rule for when a poll makes one, reaping CQEs in chunks.
//! - `tests.rs`: the queue's tests.
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

mod buffers;
mod engine;
mod progress;
mod ring;
mod sqe;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::marker::PhantomData;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::{IoUring, cqueue};
use pmio::{DriverQueue, OpSet, Request};

use crate::enter::{ENTER_GETEVENTS, KernelTimespec, RingFd};
use crate::error::UringError;
use buffers::register_regions;
use engine::{
    Enter, EnterCounts, IDLE_ENTER_EVERY, RingIo, STAGE_CHUNK, State, complete_failed, poll_enter,
};
use progress::PerTag;
use ring::build_ring;
use sqe::{Prep, Sqe};

pub(crate) use buffers::BufferSet;
pub use ring::RingFlags;

/// Largest ring (SQ entries) a queue opens; also the deepest queue it accepts.
pub(crate) const MAX_QUEUE_DEPTH: u32 = 4096;
/// Largest single transfer the kernel does in one read/write call.
pub(crate) const MAX_RW_BYTES: u32 = 0x7fff_f000;

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
        let fixed = register_regions(&ring, &cfg.name, &regions, false);
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
            prep: Prep { cfg, fixed },
            st: State {
                per_tag: PerTag::new(d),
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
        let enter = poll_enter(
            st.pending_sqes,
            in_kernel,
            io.cq.len(),
            n,
            max,
            wait.is_some(),
        );
        match (enter, wait) {
            (Enter::Skip, _) => {}
            (Enter::Wait { want }, Some(ts)) => io.enter_and_wait(st, &prep.cfg.name, want, ts),
            _ => {
                // GETEVENTS when the kernel flags completions waiting for task work (or
                // always, see `open`).
                let task_work = !taskrun_flag || io.sq.taskrun();
                if enter == Enter::Submit || task_work {
                    st.idle_polls = 0;
                    io.enter(st, &prep.cfg.name, task_work)
                } else {
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
