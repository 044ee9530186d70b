//! The submit/reap engine: requests' SQEs pushed into the SQ (staged a chunk at a time),
//! `io_uring_enter` (and the pure rule for when a poll makes one, `poll_enter`), and CQEs
//! reaped a chunk at a time, whole transfers completed inline and everything else through the
//! completion rule (`progress.rs`), which may resubmit a remainder.

use std::io;

use io_uring::{cqueue, squeue};
use pmio::prefetch::prefetch;
use pmio::{IoStatus, Request};

use super::Target;
use super::progress::{PerTag, Step};
use super::sqe::{Prep, Sqe, nop_entry};
use crate::enter::{ENTER_GETEVENTS, KernelTimespec, RingFd};

/// With the task-run flag and no wait, a poll that finds nothing to do makes no system call;
/// every this many such polls in a row it enters with GETEVENTS anyway (a safety net should a
/// kernel not flag some task work; counted as `idle` enters).
pub(super) const IDLE_ENTER_EVERY: u32 = 1024;
/// CQEs taken (and their requests prefetched) at a time by `reap`.
const REAP_CHUNK: usize = 32;
/// SQEs `submit` builds in its staging buffer before copying them into the ring at once.
pub(super) const STAGE_CHUNK: usize = 32;

/// Per-queue mutable state, all preallocated at open.
pub(super) struct State {
    /// What each tag's request keeps between its SQEs (short transfers, NVMe discards).
    pub(super) per_tag: PerTag,
    /// Requests refused before reaching the kernel, completed at the next poll.
    pub(super) failed: Vec<(u16, i32)>,
    /// Requests started and not yet reaped.
    pub(super) outstanding: usize,
    /// SQEs pushed since the last enter.
    pub(super) pending_sqes: u32,
    /// Whether an enter failure has been logged (once per queue).
    pub(super) enter_error_logged: bool,
    /// Polls in a row that found nothing to submit, nothing in the CQ and no task work
    /// flagged (pure polling); every `IDLE_ENTER_EVERY`th enters the kernel anyway.
    pub(super) idle_polls: u32,
    /// System calls made, by reason (logged at debug level when the queue is dropped).
    pub(super) enters: EnterCounts,
}

/// Why a queue entered the kernel, counted per queue.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct EnterCounts {
    /// To submit SQEs (with GETEVENTS when task work was flagged too).
    pub(super) submit: u64,
    /// Only to run flagged task work (completions waiting to be posted).
    pub(super) task_work: u64,
    /// To wait for completions (`wait_us`).
    pub(super) wait: u64,
    /// The pure-polling safety net (`IDLE_ENTER_EVERY`).
    pub(super) idle: u64,
}

/// The ring's three halves for one `submit` or `poll` call: taken once per call, so the SQ
/// tail and CQ head are published once per batch rather than once per entry.
pub(super) struct RingIo<'a, S: squeue::EntryMarker, C: cqueue::EntryMarker> {
    pub(super) ring_fd: &'a RingFd,
    pub(super) sq: io_uring::SubmissionQueue<'a, S>,
    pub(super) cq: io_uring::CompletionQueue<'a, C>,
    pub(super) staged: &'a mut Vec<S>,
    pub(super) enter_flags: u32,
}

impl<S: Sqe, C: cqueue::EntryMarker> RingIo<'_, S, C> {
    /// One `io_uring_enter`: submits what is queued and, with GETEVENTS, flushes completions
    /// (deferred task work, IOPOLL) into the CQ.
    #[inline]
    pub(super) fn enter(&mut self, st: &mut State, name: &str, force_getevents: bool) {
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
    pub(super) fn enter_and_wait(
        &mut self,
        st: &mut State,
        name: &str,
        want: usize,
        ts: &KernelTimespec,
    ) {
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
        // its submitter keeps valid (IoBuf's contract); a DSM range lives in `st.per_tag`.
        // `pending_sqes` is set from the SQ's length at the end of `submit`.
        if unsafe { self.sq.push(sqe) }.is_ok() {
            return true;
        }
        // SAFETY: as above.
        self.make_room(st, name) > 0 && unsafe { self.sq.push(sqe) }.is_ok()
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
    pub(super) fn submit_staged<const NOP: bool>(
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
                    Ok(_) if NOP => self.staged.push(nop_entry(tag)),
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
    pub(super) fn submit_nops(
        &mut self,
        prep: &Prep,
        st: &mut State,
        rqs: &[Request],
        tags: &[u16],
    ) {
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
    /// The path of NVMe passthrough and of resubmitted remainders (first submissions of files
    /// and NOPs go through `submit_staged`).
    #[inline]
    pub(super) fn start(
        &mut self,
        prep: &Prep,
        st: &mut State,
        rqs: &[Request],
        tag: u16,
        done: u32,
    ) {
        let t = tag as usize;
        let errno = match prep.sqe::<S>(&rqs[t], tag, done, st.per_tag.dsm_of(t)) {
            Ok(sqe) => {
                if self.push(st, &prep.cfg.name, &sqe) {
                    return;
                }
                libc::EBUSY
            }
            Err(errno) => errno,
        };
        st.failed.push((tag, errno));
    }

    /// `start` for the remainder of a short transfer (rare; kept out of the reap loop).
    /// Records the progress, which stays until the request completes.
    #[cold]
    #[inline(never)]
    fn restart(&mut self, prep: &Prep, st: &mut State, rqs: &[Request], tag: u16, done: u32) {
        st.per_tag.resume_at(tag as usize, done);
        self.start(prep, st, rqs, tag, done);
        // Owed: the next poll enters the kernel for it.
        st.pending_sqes = self.sq.len() as u32;
    }

    /// Reaps up to `max` CQEs; resubmits short transfers.
    ///
    /// CQEs are taken a chunk at a time and their requests prefetched before any is completed:
    /// after a wait in the kernel the requests' lines are cold, and touching them one CQE at a
    /// time would queue the misses one behind another.
    pub(super) fn reap(
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
                n += usize::from(self.complete_one(tag, res, prep, st, rqs, done));
            }
        }
        st.outstanding -= n;
        n
    }

    /// Completion `res` of `tag`, any but a whole file transfer or a NOP's success: errors,
    /// end of file, short transfers (resubmitted), flushes and the like, NVMe passthrough.
    /// Returns whether the request completed (rather than resubmitted or unknown).
    #[inline(never)]
    fn complete_one(
        &mut self,
        tag: u16,
        res: i32,
        prep: &Prep,
        st: &mut State,
        rqs: &mut [Request],
        done: &mut Vec<u16>,
    ) -> bool {
        let t = tag as usize;
        let Some(rq) = rqs.get_mut(t) else {
            log::error!(
                "uring bdev {}: completion for unknown tag {tag}",
                prep.cfg.name
            );
            return false;
        };
        match st.per_tag.step(&prep.cfg, rq, t, res) {
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

/// What a poll does about the kernel before it reaps. At most one system call per turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Enter {
    /// No system call: nothing is owed, and the CQ already holds completions or nothing is
    /// in the kernel.
    Skip,
    /// Submit what is owed and wait for `want` completions: a wait is configured, this poll
    /// has completed nothing yet, and the CQ holds less than a batch (as t/io_uring waits for
    /// its completion batch).
    Wait { want: usize },
    /// Submit the SQEs owed, with GETEVENTS when the kernel flags completions waiting for
    /// task work (or always, see `UringQueue::open`).
    Submit,
    /// Nothing owed, requests in the kernel, an empty CQ: enter only when the kernel flags
    /// task work; with nothing flagged the completions are still in the device, and the poll
    /// counts as idle (`IDLE_ENTER_EVERY`).
    IfTaskWork,
}

/// Whether a poll enters the kernel, from plain counts: `owed` SQEs not yet submitted,
/// `in_kernel` requests submitted and not reaped, `cq_len` CQEs waiting, `reaped` requests
/// this poll has already completed of the `max` it may, and whether a wait is configured.
/// Whether task work is flagged is left to the caller: it reads the SQ ring's flags, and only
/// when the answer is `Submit` or `IfTaskWork`.
#[inline]
pub(super) fn poll_enter(
    owed: u32,
    in_kernel: usize,
    cq_len: usize,
    reaped: usize,
    max: usize,
    waits: bool,
) -> Enter {
    // With a wait, a batch is `want` completions: fewer in the CQ means waiting for the rest.
    let want = in_kernel.min(max - reaped);
    let short = waits && reaped == 0 && cq_len < want;
    if !(owed > 0 || (in_kernel > 0 && cq_len == 0) || short) {
        Enter::Skip
    } else if short {
        Enter::Wait { want }
    } else if owed > 0 {
        Enter::Submit
    } else {
        Enter::IfTaskWork
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
pub(super) fn complete_failed(
    st: &mut State,
    rqs: &mut [Request],
    done: &mut Vec<u16>,
    max: usize,
) -> usize {
    let mut n = 0;
    while n < max {
        let Some((tag, errno)) = st.failed.pop() else {
            break;
        };
        rqs[tag as usize].status = IoStatus::Errno(errno);
        // A remainder refused at resubmission leaves no progress behind.
        st.per_tag.forget(tag as usize);
        done.push(tag);
        st.outstanding -= 1;
        n += 1;
    }
    n
}
