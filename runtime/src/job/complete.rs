//! A job's completion side: reap one batch, and per completion its latency (one histogram
//! record per run of equal latencies), its class, failures, the verify check, and its buffer
//! slot back. I/O and byte counts are kept per batch, not per I/O.
//!
//! Failures and mismatches are queued and shown through the hooks after the batch: the
//! completion callback carries only the job's state (a hooks pointer in it cost about one
//! instruction per I/O on the null device).

use pmio::{IoStatus, Op, Request};

use super::error::JobError;
use super::hooks::{Hooks, MAX_SHOWN};
use super::pattern::{self, Mismatch};
use super::state::{Job, JobState};
use super::stats::Counts;

/// How long a job goes on while every I/O it completes fails. Failed I/O is counted and the
/// run goes on, but a device that fails everything this long will not serve the rest of it:
/// an NVMe/TCP controller whose reconnect gave up (`ctrlr_loss_timeout_sec`) fails every I/O
/// with ENXIO from then on (as one reconnecting past `fast_io_fail_timeout_sec` does for a
/// while).
pub(crate) const ALL_FAILED_STOP_NS: u64 = 5_000_000_000;

/// Why a device is unusable, given a failed I/O's `status` after `failing_ns` of nothing but
/// failures: it was removed, or everything failed for [`ALL_FAILED_STOP_NS`].
#[cold]
pub(crate) fn unusable_reason(status: IoStatus, failing_ns: u64) -> Option<String> {
    if status == IoStatus::DeviceRemoved {
        return Some(format!("the device is gone ({status:?})"));
    }
    (failing_ns >= ALL_FAILED_STOP_NS).then(|| {
        format!(
            "every I/O failed for {:.1} s (last: {status:?}, errno {}): the device is unusable",
            failing_ns as f64 / 1e9,
            -status.to_errno()
        )
    })
}

/// A failure or mismatch waiting to be shown through the hooks.
pub(crate) enum Shown {
    Failed(Request),
    Mismatch(Box<Mismatch>),
}

impl Job {
    /// Reaps one completion batch.
    #[inline]
    pub(crate) fn reap<H: Hooks>(&mut self, counts: &mut Counts, hooks: &mut H) -> usize {
        if self.q.outstanding() == 0 {
            return 0;
        }
        let st = &mut self.st;
        let n = self.q.poll(
            self.complete_batch,
            #[inline(always)]
            |rq| st.complete(rq),
        );
        st.lat.flush();
        if st.cold {
            self.after_batch(hooks);
        }
        let st = &mut self.st;
        if st.measuring {
            st.ios += n as u64;
        }
        if n > 0 {
            counts.reap_calls += 1;
            counts.reaped += n as u64;
            counts.ios += n as u64;
        }
        n
    }
}

impl Job {
    /// A batch's cold work: shows its failures and mismatches, and follows the failure
    /// streak. A streak begins at a failure with no failure before it, or with some I/O of the
    /// queue succeeded since the last (its statistics count every completion and failure);
    /// it makes the device unusable once it lasts [`ALL_FAILED_STOP_NS`].
    #[cold]
    #[inline(never)]
    fn after_batch<H: Hooks>(&mut self, hooks: &mut H) {
        let st = &mut self.st;
        st.cold = false;
        if !st.to_show.is_empty() {
            st.show(hooks);
        }
        if let Some((at, status)) = st.last_failure.take()
            && st.unusable.is_none()
        {
            let t = self.q.stats().total();
            let ok = t.ops - t.errors;
            if st.failing_since == 0 || ok != st.ok_at_failing {
                st.failing_since = at.max(1);
                st.ok_at_failing = ok;
            }
            st.unusable = unusable_reason(status, at.saturating_sub(st.failing_since));
        }
    }

    /// The error that stops the job's worker once its device is unusable.
    #[cold]
    #[inline(never)]
    pub(crate) fn take_unusable(&mut self) -> Option<JobError> {
        let reason = self.st.unusable.take()?;
        Some(JobError::Unusable {
            bdev: self.st.name.clone(),
            reason,
        })
    }
}

impl JobState {
    /// One completion (see the module doc).
    #[inline(always)]
    fn complete(&mut self, rq: &Request) {
        if self.measuring {
            let lat = rq.complete_ns.saturating_sub(rq.submit_ns).max(1);
            self.lat.record(lat);
            if let Some(c) = &mut self.classes {
                let (h, n) = &mut c[rq.prio.class as usize];
                h.saturating_record(lat);
                *n += 1;
            }
        }
        if !rq.status.is_success() {
            self.failed(rq);
        }
        if self.verify.is_some() {
            self.verify_done(rq);
        }
        self.push_slot(rq.token as u16);
    }

    #[cold]
    #[inline(never)]
    fn failed(&mut self, rq: &Request) {
        self.errors += 1;
        self.cold = true;
        self.last_failure = Some((rq.complete_ns, rq.status));
        self.queue_shown(|| Shown::Failed(*rq));
    }

    /// Queues one of the first [`MAX_SHOWN`] failures and mismatches (`to_show` holds that
    /// many from the start: it never grows).
    #[cold]
    fn queue_shown(&mut self, what: impl FnOnce() -> Shown) {
        if self.shown < MAX_SHOWN {
            self.shown += 1;
            self.cold = true;
            self.to_show.push(what());
        }
    }

    /// Shows the queued failures and mismatches.
    #[cold]
    #[inline(never)]
    fn show<H: Hooks>(&mut self, hooks: &mut H) {
        for s in self.to_show.drain(..) {
            match s {
                Shown::Failed(rq) => hooks.io_failed(&self.name, &rq),
                Shown::Mismatch(m) => hooks.verify_mismatch(&self.name, &m),
            }
        }
    }

    /// Verify: the unit is free again; a successful read is checked.
    #[inline(never)]
    fn verify_done(&mut self, rq: &Request) {
        let unit = rq.lba / u64::from(self.nblocks) - self.region_start;
        if let Some(v) = &mut self.verify {
            v.inflight[unit as usize] = false;
        }
        if rq.op == Op::Read && rq.status.is_success() {
            self.check(rq, unit);
        }
    }

    /// Takes a free buffer slot. The caller asks for at most as many slots as are free
    /// (`refill` bounds a burst by the free slots).
    #[inline]
    pub(crate) fn pop_slot(&mut self) -> u16 {
        self.nfree -= 1;
        self.slots[self.nfree]
    }

    /// Returns a buffer slot.
    #[inline]
    pub(crate) fn push_slot(&mut self, slot: u16) {
        self.slots[self.nfree] = slot;
        self.nfree += 1;
    }

    #[cold]
    fn check(&mut self, rq: &Request, unit: u64) {
        let seq = u64::from(self.verify.as_ref().map_or(0, |v| v.seqs[unit as usize]));
        // SAFETY: the read completed, so its buffer slot is ours again and holds `bs` bytes
        // inside the job's buffers.
        let buf = unsafe { std::slice::from_raw_parts(rq.buf.as_ptr(), rq.buf.len() as usize) };
        for (b, block) in buf.chunks_exact(self.block_size as usize).enumerate() {
            if let Err(m) = pattern::check(block, rq.lba + b as u64, seq) {
                self.mismatches += 1;
                self.queue_shown(|| Shown::Mismatch(m));
            }
        }
    }
}
