//! Per-tag progress: what one completion means for its request, and what a request keeps
//! between its SQEs. A file transfer the kernel did in part resumes from the bytes done
//! (kept per tag), end of file and errors complete it with an errno; an NVMe passthrough
//! completion carries the command's status; a NOP only succeeds or fails. The per-tag arrays
//! are sized at open, so the I/O path allocates nothing.

use pmio::{IoStatus, Op, Request};

use super::{QueueConfig, Target};
use crate::nvme::{self, DsmRange};

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

/// What each tag's request keeps between its SQEs.
pub(super) struct PerTag {
    /// Bytes transferred so far, per tag (short transfers resume from here). 0 except while
    /// a remainder is in flight, so a first submission need not write it.
    progress: Vec<u32>,
    /// One DSM range per tag (NVMe discard), alive while the command is.
    dsm: Vec<DsmRange>,
}

impl PerTag {
    /// Arrays for tags `0..depth`.
    pub(super) fn new(depth: usize) -> PerTag {
        PerTag {
            progress: vec![0; depth],
            dsm: vec![DsmRange::default(); depth],
        }
    }

    /// What one completion with result `res` means for tag `t`'s request `rq`.
    #[inline(always)]
    pub(super) fn step(&mut self, cfg: &QueueConfig, rq: &Request, t: usize, res: i32) -> Step {
        match cfg.target {
            Target::Nvme { .. } => Step::Complete(nvme::decode_status(res)),
            Target::Nop if res < 0 => Step::Complete(IoStatus::Errno(-res)),
            Target::Nop => Step::Complete(IoStatus::Success),
            Target::File => {
                let total = if rq.op.has_data() {
                    (u64::from(rq.nblocks) << cfg.block_shift) as u32
                } else {
                    0
                };
                // The usual case first: the whole transfer in one go (a resumed remainder
                // is shorter than `total`, so this implies nothing was done before).
                if total != 0 && res as u32 == total {
                    Step::Complete(IoStatus::Success)
                } else {
                    self.file_step_slow(rq.op, t, res, total, cfg.direct_align)
                }
            }
        }
    }

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

    /// Records that tag `t`'s remainder starts `done` bytes in; it stays until the request
    /// completes.
    pub(super) fn resume_at(&mut self, t: usize, done: u32) {
        if t >= self.progress.len() {
            self.grow(t);
        }
        self.progress[t] = done;
    }

    /// Forgets tag `t`'s progress (its request ended before reaching the kernel).
    pub(super) fn forget(&mut self, t: usize) {
        if let Some(p) = self.progress.get_mut(t) {
            *p = 0;
        }
    }

    /// The DSM range of tag `t` (NVMe discard), growing the per-tag arrays if needed.
    #[inline]
    pub(super) fn dsm_of(&mut self, t: usize) -> &mut DsmRange {
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
