//! An I/O queue pair owned by one reactor: the NVMe hot path.
//!
//! CID = tag. Each tag owns one PRP list page, prepared at creation, so nothing is allocated
//! per I/O. `submit` writes one SQE per request and rings the SQ doorbell once; `poll` reaps
//! completions by phase tag, retries retryable statuses a bounded number of times, and rings
//! the CQ head doorbell once. A completion whose CID is not outstanding is counted (as a
//! duplicate when its command already completed, else as unknown), logged and ignored.
//!
//! Recovery (cold paths, see also `recovery.rs`): each command is stamped with the
//! submit batch's clock read; `poll` reads the clock once while commands are in the device
//! and, when something may be due, aborts commands past `NvmeOptions::io_timeout`. A command
//! still not complete after its abort, a failed abort, or CSTS.CFS (read every
//! `health_check_interval`) resets the controller: every queue pair recreates its queues and
//! resubmits what was outstanding, up to `recovery_retries` times per command, then fails it
//! with `IoStatus::Timeout`. Registers reading all ones fail every request with
//! `IoStatus::DeviceRemoved`, now and later.
//!
//! A controller reset never blocks the poller (`recovery.rs`): while one is in progress, every
//! submit or poll advances it one non-blocking step and otherwise leaves the hardware queues
//! alone; new submissions are held in software (in order, still counted by `outstanding()`)
//! and submitted once the queues are recreated, or failed if the reset fails.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use pmio::bdev::DriverQueue;
use pmio::request::{IoStatus, Op, ReqFlags, Request};

use crate::ctrlr::{
    CREATE_CQ, CREATE_SQ, CtrlrInner, Namespace, PAGE_SIZE, create_cq_sqe, create_sq_sqe,
};
use crate::dma::{DmaMem, DmaWindow};
use crate::error::{IoError, NvmeError};
use crate::prp;
use crate::recovery::{ALIVE, FAILED, PendingAdmin, REMOVED};
use crate::regs::{Csts, RegisterIo, off};
use crate::ring::{Rings, ring_bytes};
use crate::spec::{
    Cqe, DSM_ATTR_DEALLOCATE, DsmRange, IdentifyController, Sqe, admin_opc, nvm_opc,
};

/// Queue-pair-local liveness: a controller reset is in progress (or wanted and not yet
/// started); the hardware queues are not touched and new submissions are held.
const RESETTING: u8 = 3;

/// Largest block count of one read, write or write-zeroes command (NLB is 16 bits, 0-based).
const MAX_NLB: u32 = 1 << 16;

/// Counters of one queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpairStats {
    /// Commands written to the SQ (retries included).
    pub submitted: u64,
    /// Requests reported done (any status).
    pub completed: u64,
    /// Requests that completed with an error (device status or rejected before the device).
    pub errors: u64,
    /// Resubmissions after a retryable status.
    pub retries: u64,
    /// Completions ignored because their CID was not outstanding.
    pub unknown_completions: u64,
    /// Requests rejected before reaching the device (too large, out of range, ...).
    pub rejected: u64,
    /// Completions ignored because their command had already completed (a duplicate).
    pub duplicates: u64,
    /// Commands found past their deadline (`NvmeOptions::io_timeout`).
    pub timeouts: u64,
    /// Abort commands sent for timed-out commands (asynchronously: the poller never waits).
    pub aborts: u64,
    /// Of those, Aborts that failed or timed out (each leads to a controller reset).
    pub aborts_failed: u64,
    /// Controller resets this queue pair went through (its queues recreated each time).
    pub resets: u64,
    /// Commands resubmitted after a timeout, abort or reset.
    pub recovered: u64,
    /// Requests failed because the device was removed or the controller failed.
    pub failed_dead: u64,
}

/// A queue pair recreating its I/O queues after the controller reset that made generation
/// `reset_gen`: Create I/O CQ, then (`sq`) SQ, each run across polls in `cmd`.
#[derive(Clone, Copy)]
struct Recreating {
    reset_gen: u64,
    sq: bool,
    cmd: PendingAdmin,
}

/// An Abort in flight on the admin queue.
#[derive(Clone, Copy)]
struct PendingAbort {
    /// The Abort's command identifier on the admin queue.
    abort_cid: u16,
    /// The I/O command it aborts.
    tag: u16,
    /// When it counts as failed (ns since `epoch`).
    deadline: u64,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    outstanding: bool,
    retries: u8,
    /// Resubmissions after timeouts and resets.
    recoveries: u8,
    /// An Abort was sent for it (a second timeout resets the controller).
    aborted: bool,
    /// Completed since its last submission (a later completion is a duplicate).
    done_once: bool,
    /// Submitted during a controller reset and held in software (not in the device).
    held: bool,
    /// Submission time (ns since `epoch`), one clock read per submit batch.
    ts: u64,
}

/// Namespace facts the hot path needs, copied at creation.
#[derive(Clone, Copy)]
struct NsFacts {
    nsid: u32,
    block_shift: u8,
    num_blocks: u64,
    write_zeroes: bool,
    dsm: bool,
}

/// One I/O queue pair of a namespace.
pub struct NvmeQpair {
    regs: Arc<dyn RegisterIo>,
    rings: Rings,
    ns: NsFacts,
    max_transfer: u64,
    max_retries: u8,
    depth: u32,
    prp_base: *mut u64,
    prp_iova: u64,
    slots: Vec<Slot>,
    /// Tags failed at submit, reported at the next poll.
    failed: Vec<u16>,
    outstanding: usize,
    stats: QpairStats,
    last_error: Option<IoError>,
    /// Registered I/O memory and its IOVA offsets, refreshed when the controller's
    /// registration generation moves.
    dma_ranges: Vec<DmaWindow>,
    dma_gen: u64,
    /// Clock origin of `Slot::ts`.
    epoch: Instant,
    /// I/O timeout in ns (0: off) and the CSTS check interval.
    timeout_ns: u64,
    health_ns: u64,
    /// When the poller next scans for timed-out commands / reads CSTS (ns since `epoch`).
    next_scan: u64,
    next_health: u64,
    /// The latest clock read (ns since `epoch`): the timestamp of retried commands.
    last_now: u64,
    /// Aborts submitted and not yet answered (at most one per tag).
    aborts_pending: Vec<PendingAbort>,
    /// Abort deadline, ns.
    abort_ns: u64,
    max_recoveries: u8,
    /// The controller's reset generation this queue pair's queues belong to (always even).
    reset_gen: u64,
    /// `ALIVE`; `RESETTING` while the queues are down for a controller reset; or why every
    /// request fails (`REMOVED`, `FAILED`).
    liveness: u8,
    /// This queue pair needs a controller reset it could not start yet (the reset or admin
    /// lock was busy): it tries again at its next submit or poll.
    want_reset: bool,
    /// Tags submitted during a controller reset, in submission order (capacity `depth`).
    held: Vec<u16>,
    /// The queues being recreated after a reset (`RESETTING` until they are).
    recreating: Option<Recreating>,
    ctrlr: Arc<CtrlrInner>,
    // Freed (unmapped) in Drop once the queues are deleted, leaked if they could not be.
    mem: std::mem::ManuallyDrop<DmaMem>,
}

impl NvmeQpair {
    /// Creates queue pair for `ns` able to hold `depth` requests (tags 0..depth).
    pub(crate) fn new(
        ctrlr: Arc<CtrlrInner>,
        ns: &Namespace,
        depth: u32,
    ) -> Result<NvmeQpair, NvmeError> {
        if ctrlr.detached.load(Ordering::Acquire) {
            return Err(NvmeError::Detached {
                ctrlr: ctrlr.name.clone(),
            });
        }
        let max_entries = ctrlr.cap.max_queue_entries().min(65536);
        if depth == 0 || depth + 1 > max_entries {
            return Err(NvmeError::InvalidOption(format!(
                "queue depth {depth} not in 1..={} (CAP.MQES)",
                max_entries - 1
            )));
        }
        let entries = ctrlr.opts.io_queue_entries.max(depth + 1).min(max_entries);
        let page = PAGE_SIZE as usize;
        let (_, rings_len) = ring_bytes(entries, page);
        let mem = DmaMem::new(ctrlr.mapper.clone(), rings_len + depth as usize * page)?;
        // Opening a queue pair is not on the I/O path: it may wait for a reset to end.
        ctrlr.reset_wait();
        let reset_gen = ctrlr.reset_gen.load(Ordering::Acquire);
        let qid = ctrlr.alloc_qid()?;
        let rings = Rings::new(&mem, 0, qid, entries, ctrlr.cap.dstrd(), page);
        if let Err(e) = ctrlr.create_io_queue(qid, entries, rings.sq_iova, rings.cq_iova) {
            ctrlr.free_qid(qid);
            return Err(e);
        }
        ctrlr.open_qpairs.fetch_add(1, Ordering::AcqRel);
        let oncs = ctrlr.id.oncs;
        log::debug!(
            "{}: I/O queue pair {qid} for namespace {} ({entries} entries, depth {depth})",
            ctrlr.name,
            ns.nsid
        );
        Ok(NvmeQpair {
            regs: ctrlr.regs.clone(),
            rings,
            ns: NsFacts {
                nsid: ns.nsid,
                block_shift: ns.block_shift,
                num_blocks: ns.num_blocks,
                write_zeroes: oncs & IdentifyController::ONCS_WRITE_ZEROES != 0,
                dsm: oncs & IdentifyController::ONCS_DSM != 0,
            },
            max_transfer: ctrlr.max_transfer,
            max_retries: ctrlr.opts.io_retries,
            depth,
            // SAFETY: the PRP pages follow the rings inside `mem` (sized above).
            prp_base: unsafe { mem.as_ptr().add(rings_len).cast::<u64>() },
            prp_iova: mem.iova() + rings_len as u64,
            slots: vec![Slot::default(); depth as usize],
            failed: Vec::with_capacity(depth as usize),
            outstanding: 0,
            stats: QpairStats::default(),
            last_error: None,
            dma_ranges: Vec::new(),
            dma_gen: u64::MAX,
            epoch: ctrlr.epoch,
            timeout_ns: ctrlr
                .opts
                .io_timeout
                .as_nanos()
                .min(u128::from(u64::MAX / 2)) as u64,
            health_ns: ctrlr
                .opts
                .health_check_interval
                .as_nanos()
                .min(u128::from(u64::MAX / 2)) as u64,
            next_scan: u64::MAX,
            next_health: 0,
            last_now: 0,
            aborts_pending: Vec::with_capacity(depth as usize),
            abort_ns: ctrlr
                .opts
                .abort_timeout
                .as_nanos()
                .min(u128::from(u64::MAX / 2)) as u64,
            max_recoveries: ctrlr.opts.recovery_retries,
            reset_gen,
            liveness: ALIVE,
            want_reset: false,
            held: Vec::with_capacity(depth as usize),
            recreating: None,
            ctrlr,
            mem: std::mem::ManuallyDrop::new(mem),
        })
    }

    /// Queue ID.
    pub fn qid(&self) -> u16 {
        self.rings.qid
    }

    /// Counters.
    pub fn stats(&self) -> QpairStats {
        self.stats
    }

    /// Whether the queues are down for a controller reset in progress (submissions are held
    /// until it is done); for diagnostics.
    pub fn resetting(&self) -> bool {
        self.liveness == RESETTING
    }

    /// The most recent per-I/O error (rejections and device statuses), for diagnostics.
    pub fn last_error(&self) -> Option<IoError> {
        self.last_error
    }

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

    fn check_range(&self, rq: &Request) -> Result<(), IoError> {
        let end = rq.lba.checked_add(u64::from(rq.nblocks));
        if rq.nblocks == 0 || end.is_none_or(|e| e > self.ns.num_blocks) {
            return Err(IoError::OutOfRange {
                lba: rq.lba,
                nblocks: rq.nblocks,
                num_blocks: self.ns.num_blocks,
            });
        }
        Ok(())
    }

    /// Builds the command for `rq` (tag checked by the caller).
    #[inline]
    fn build(&mut self, rq: &Request) -> Result<Sqe, IoError> {
        let tag = rq.tag;
        let mut sqe = match rq.op {
            Op::Read | Op::Write => {
                self.check_range(rq)?;
                let bytes = u64::from(rq.nblocks) << self.ns.block_shift;
                if bytes > self.max_transfer || rq.nblocks > MAX_NLB {
                    return Err(IoError::TooLarge {
                        bytes,
                        max: self
                            .max_transfer
                            .min(u64::from(MAX_NLB) << self.ns.block_shift),
                    });
                }
                if u64::from(rq.buf.len()) < bytes {
                    return Err(IoError::BufferTooShort {
                        len: rq.buf.len(),
                        bytes,
                    });
                }
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
                let mut sqe = Sqe::new(opc, tag);
                sqe.prp1 = prps.prp1;
                sqe.prp2 = prps.prp2;
                sqe.set_slba(rq.lba);
                sqe.cdw12 = rq.nblocks - 1;
                if rq.flags.contains(ReqFlags::FUA) {
                    sqe.cdw12 |= 1 << 30;
                }
                sqe
            }
            Op::Flush => Sqe::new(nvm_opc::FLUSH, tag),
            Op::WriteZeroes => {
                if !self.ns.write_zeroes {
                    return Err(IoError::Unsupported("write_zeroes"));
                }
                self.check_range(rq)?;
                if rq.nblocks > MAX_NLB {
                    return Err(IoError::TooLarge {
                        bytes: u64::from(rq.nblocks) << self.ns.block_shift,
                        max: u64::from(MAX_NLB) << self.ns.block_shift,
                    });
                }
                let mut sqe = Sqe::new(nvm_opc::WRITE_ZEROES, tag);
                sqe.set_slba(rq.lba);
                sqe.cdw12 = rq.nblocks - 1;
                sqe
            }
            Op::Discard => {
                if !self.ns.dsm {
                    return Err(IoError::Unsupported("unmap"));
                }
                self.check_range(rq)?;
                let range = DsmRange {
                    cattr: 0,
                    nlb: rq.nblocks,
                    slba: rq.lba,
                };
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

    #[cold]
    fn refresh_dma_ranges(&mut self) {
        self.dma_gen = self.ctrlr.mapper.snapshot(&mut self.dma_ranges);
    }

    #[cold]
    fn reject(&mut self, rqs: &mut [Request], tag: u16, err: IoError) {
        log::debug!("{}: request {tag} rejected: {err}", self.ctrlr.name);
        self.last_error = Some(err);
        self.stats.rejected += 1;
        if let Some(rq) = rqs.get_mut(usize::from(tag)) {
            rq.status = err.to_io_status();
        }
        if self.failed.len() < self.failed.capacity() {
            self.failed.push(tag);
            self.outstanding += 1;
        } else {
            log::error!(
                "{}: more failed requests than tags; request {tag} dropped",
                self.ctrlr.name
            );
        }
    }

    /// Handles one completion; returns whether a request is done (its tag pushed on `done`).
    #[inline]
    fn complete(&mut self, rqs: &mut [Request], cqe: Cqe, done: &mut Vec<u16>) -> bool {
        let tag = cqe.cid;
        let live = self
            .slots
            .get(usize::from(tag))
            .is_some_and(|s| s.outstanding)
            && usize::from(tag) < rqs.len();
        if !live {
            self.unknown(cqe);
            return false;
        }
        let st = cqe.status();
        let idx = usize::from(tag);
        if st.is_success() {
            rqs[idx].status = IoStatus::Success;
        } else if self.slots[idx].aborted {
            // The completion of a command aborted after a timeout: resubmit within budget.
            if self.requeue(rqs, idx) {
                return false;
            }
            self.give_up(rqs, idx);
        } else if st.is_retryable() && self.slots[idx].retries < self.max_retries {
            self.slots[idx].retries += 1;
            self.slots[idx].ts = self.last_now;
            self.stats.retries += 1;
            if self.resubmit(&rqs[idx]) {
                return false;
            }
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        } else {
            self.device_error(tag, st);
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        }
        self.slots[idx] = Slot {
            done_once: true,
            ..Slot::default()
        };
        self.outstanding -= 1;
        done.push(tag);
        true
    }

    /// Writes one SQE per request and rings the SQ doorbell once.
    #[inline]
    fn submit_batch(&mut self, rqs: &mut [Request], tags: &[u16]) {
        // One clock read per batch, only when timeouts are on.
        let now = if self.timeout_ns != 0 {
            self.last_now = self.now_ns();
            self.last_now
        } else {
            0
        };
        if self.timeout_ns != 0 && self.next_scan == u64::MAX {
            self.next_scan = now + self.timeout_ns;
        }
        let mut pushed = false;
        for &tag in tags {
            let Some(idx) = self.free_tag(rqs, tag) else {
                continue;
            };
            match self.build(&rqs[idx]) {
                Ok(sqe) => {
                    if self.rings.push(&sqe) {
                        self.slots[idx] = Slot {
                            outstanding: true,
                            ts: now,
                            ..Slot::default()
                        };
                        self.outstanding += 1;
                        self.stats.submitted += 1;
                        pushed = true;
                    } else {
                        self.reject(rqs, tag, IoError::Removed);
                    }
                }
                Err(e) => self.reject(rqs, tag, e),
            }
        }
        if pushed {
            self.rings.ring_sq(&*self.regs);
        }
    }

    /// The slot index of `tag` when it can be submitted; otherwise the request is rejected
    /// (a tag beyond the depth) or ignored (already outstanding or held), and `None`.
    #[inline]
    fn free_tag(&mut self, rqs: &mut [Request], tag: u16) -> Option<usize> {
        let idx = usize::from(tag);
        if idx >= self.slots.len() || idx >= rqs.len() {
            self.reject(
                rqs,
                tag,
                IoError::BadTag {
                    tag,
                    depth: self.depth,
                },
            );
            return None;
        }
        let slot = self.slots[idx];
        if slot.outstanding || slot.held {
            log::error!(
                "{}: request {tag} submitted while outstanding; ignored",
                self.ctrlr.name
            );
            return None;
        }
        Some(idx)
    }

    #[cold]
    fn unknown(&mut self, cqe: Cqe) {
        if self
            .slots
            .get(usize::from(cqe.cid))
            .is_some_and(|s| s.done_once)
        {
            self.stats.duplicates += 1;
            log::warn!(
                "{}: qpair {}: duplicate completion for command {} ignored",
                self.ctrlr.name,
                self.rings.qid,
                cqe.cid
            );
            return;
        }
        self.stats.unknown_completions += 1;
        log::warn!(
            "{}: qpair {}: completion for command {} that is not outstanding ignored (status {})",
            self.ctrlr.name,
            self.rings.qid,
            cqe.cid,
            cqe.status()
        );
    }

    #[cold]
    fn device_error(&mut self, tag: u16, st: crate::spec::Status) {
        self.stats.errors += 1;
        self.last_error = Some(IoError::Status(st));
        log::debug!("{}: request {tag} failed: {st}", self.ctrlr.name);
    }

    #[cold]
    fn resubmit(&mut self, rq: &Request) -> bool {
        match self.build(rq) {
            Ok(sqe) if self.rings.push(&sqe) => {
                self.stats.submitted += 1;
                true
            }
            _ => false,
        }
    }
}

/// Recovery: timeouts, aborts, controller resets, removal (all cold).
impl NvmeQpair {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Fails the request of outstanding slot `idx` with `err` (reported at the next poll).
    #[cold]
    fn fail_slot(&mut self, rqs: &mut [Request], idx: usize, err: IoError) {
        self.slots[idx] = Slot {
            done_once: true,
            ..Slot::default()
        };
        if let Some(rq) = rqs.get_mut(idx) {
            rq.status = err.to_io_status();
        }
        self.last_error = Some(err);
        // Still counted in `outstanding` until the poll reports it.
        self.failed.push(idx as u16);
    }

    /// An aborted or reset command exhausted its resubmissions.
    #[cold]
    fn give_up(&mut self, rqs: &mut [Request], idx: usize) {
        let retries = self.slots[idx].recoveries;
        log::error!(
            "{}: qpair {}: command {idx} timed out; failed after {retries} resubmissions",
            self.ctrlr.name,
            self.rings.qid
        );
        let err = IoError::TimedOut { retries };
        self.last_error = Some(err);
        self.stats.errors += 1;
        rqs[idx].status = err.to_io_status();
    }

    /// Resubmits the command of slot `idx` after a timeout, abort or reset, unless its
    /// budget is spent. Returns whether it was resubmitted.
    #[cold]
    fn requeue(&mut self, rqs: &[Request], idx: usize) -> bool {
        let slot = self.slots[idx];
        if slot.recoveries >= self.max_recoveries || idx >= rqs.len() {
            return false;
        }
        let now = self.now_ns();
        match self.build(&rqs[idx]) {
            Ok(sqe) if self.rings.push(&sqe) => {
                self.slots[idx] = Slot {
                    outstanding: true,
                    retries: slot.retries,
                    recoveries: slot.recoveries + 1,
                    aborted: false,
                    done_once: false,
                    held: false,
                    ts: now,
                };
                self.stats.submitted += 1;
                self.stats.recovered += 1;
                if self.timeout_ns != 0 {
                    self.next_scan = self.next_scan.min(now + self.timeout_ns);
                }
                true
            }
            _ => false,
        }
    }

    /// Rejects a batch: the controller is removed or failed.
    #[cold]
    fn reject_dead(&mut self, rqs: &mut [Request], tags: &[u16]) {
        let err = if self.liveness == REMOVED {
            IoError::Removed
        } else {
            IoError::ControllerFailed
        };
        for &tag in tags {
            if self
                .slots
                .get(usize::from(tag))
                .is_some_and(|s| s.outstanding)
            {
                continue;
            }
            self.stats.failed_dead += 1;
            self.reject(rqs, tag, err);
        }
    }

    /// Fails every command in the device, and every held submission, with `err`.
    #[cold]
    fn fail_all(&mut self, rqs: &mut [Request], err: IoError) {
        for idx in 0..self.slots.len() {
            if self.slots[idx].outstanding {
                self.stats.failed_dead += 1;
                self.fail_slot(rqs, idx, err);
            }
        }
        let held = self.take_held();
        for &tag in &held {
            self.stats.failed_dead += 1;
            self.reject(rqs, tag, err);
        }
        self.restore_held(held);
        self.next_scan = u64::MAX;
    }

    /// Holds submissions in software while a controller reset is in progress (in order;
    /// counted as outstanding).
    #[cold]
    fn hold(&mut self, rqs: &mut [Request], tags: &[u16]) {
        for &tag in tags {
            let Some(idx) = self.free_tag(rqs, tag) else {
                continue;
            };
            self.slots[idx].held = true;
            self.held.push(tag);
            self.outstanding += 1;
        }
    }

    /// After a controller reset: submits what was held, in order.
    #[cold]
    fn submit_held(&mut self, rqs: &mut [Request]) {
        let held = self.take_held();
        if !held.is_empty() {
            self.submit_batch(rqs, &held);
        }
        self.restore_held(held);
    }

    /// Takes the held tags out (no longer held nor counted); give the vector back with
    /// [`NvmeQpair::restore_held`] so its capacity is kept (no allocation).
    fn take_held(&mut self) -> Vec<u16> {
        let held = std::mem::take(&mut self.held);
        self.outstanding -= held.len();
        for &tag in &held {
            self.slots[usize::from(tag)].held = false;
        }
        held
    }

    fn restore_held(&mut self, mut held: Vec<u16>) {
        held.clear();
        self.held = held;
    }

    /// The controller's reset generation moved, or this queue pair waits for a reset: starts
    /// the reset it wants or advances the one in progress by one non-blocking step, then
    /// follows the controller: queues down (`RESETTING`) while the reset is in progress,
    /// recreated once it is done, every request failed if the controller is removed or failed.
    #[cold]
    fn sync_ctrlr(&mut self, rqs: &mut [Request]) {
        let now = self.now_ns();
        if self.want_reset && !self.start_reset(rqs, now) {
            return;
        }
        let mut cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen & 1 == 1 {
            self.ctrlr.reset_poll(now);
            cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        }
        match self.ctrlr.liveness() {
            REMOVED => {
                self.reset_gen = cur_gen;
                self.liveness = REMOVED;
                self.aborts_pending.clear();
                self.fail_all(rqs, IoError::Removed);
            }
            FAILED => {
                self.reset_gen = cur_gen;
                self.liveness = FAILED;
                self.aborts_pending.clear();
                self.fail_all(rqs, IoError::ControllerFailed);
            }
            _ if cur_gen & 1 == 1 || self.want_reset => {
                if self.liveness != RESETTING {
                    log::debug!(
                        "{}: qpair {}: queues down for a controller reset",
                        self.ctrlr.name,
                        self.rings.qid
                    );
                    self.liveness = RESETTING;
                    // Aborts submitted before a reset never complete (the admin queue is
                    // reset too); the reset recovers their commands.
                    self.aborts_pending.clear();
                }
            }
            _ if cur_gen == self.reset_gen => {
                // No reset happened after all: the queues are intact.
                self.liveness = ALIVE;
                self.submit_held(rqs);
            }
            _ => self.recreate(rqs, cur_gen, now),
        }
    }

    /// Starts the controller reset this queue pair wants, unless another queue pair's already
    /// did (it stays wanted when the reset cannot start without waiting). Returns false when
    /// it cannot be reset at all and this queue pair failed everything instead.
    #[cold]
    fn start_reset(&mut self, rqs: &mut [Request], now: u64) -> bool {
        match self.ctrlr.reset_start(self.reset_gen, now) {
            Ok(started) => self.want_reset = !started,
            Err(e) => {
                self.want_reset = false;
                log::error!("{e}");
                // Removed or failed: followed like any other queue pair. Detached: no
                // controller to reset.
                if self.ctrlr.liveness() == ALIVE {
                    self.liveness = FAILED;
                    self.aborts_pending.clear();
                    self.fail_all(rqs, IoError::ControllerFailed);
                    return false;
                }
            }
        }
        true
    }

    /// The command that recreates the CQ (`sq` false) or the SQ after a reset.
    fn create_sqe(&self, sq: bool) -> (Sqe, &'static str) {
        let (qid, entries) = (self.rings.qid, self.rings.entries);
        if sq {
            (create_sq_sqe(qid, entries, self.rings.sq_iova), CREATE_SQ)
        } else {
            (create_cq_sqe(qid, entries, self.rings.cq_iova), CREATE_CQ)
        }
    }

    /// Closing while the queues are being recreated after a reset: lets a Create command
    /// already sent finish (closing is off the I/O path, so it may wait), then deletes what
    /// exists of the queues, SQ before CQ. Deleting a queue never created would fail, and a
    /// failed delete leaks the rings (and with them the device's DMA mapping).
    #[cold]
    fn delete_recreated(&mut self, mut r: Recreating) -> Result<(), NvmeError> {
        // The CQ exists once its SQ is being created.
        let (mut cq, mut sq) = (r.sq, false);
        if r.cmd.submitted() {
            let (sqe, what) = self.create_sqe(r.sq);
            loop {
                if self.ctrlr.reset_gen.load(Ordering::Acquire) != r.reset_gen {
                    // Another reset began: it deletes every I/O queue.
                    return Ok(());
                }
                match self.ctrlr.admin_try(&mut r.cmd, sqe, what, self.now_ns()) {
                    Ok(Some(_)) => {
                        (cq, sq) = (true, r.sq);
                        break;
                    }
                    Ok(None) => std::thread::sleep(std::time::Duration::from_micros(100)),
                    // Refused by the controller: nothing was created.
                    Err(NvmeError::AdminCommand { .. }) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        let qid = self.rings.qid;
        if sq {
            self.ctrlr
                .delete_queue(admin_opc::DELETE_IO_SQ, qid, "Delete I/O Submission Queue")?;
        }
        if cq {
            self.ctrlr
                .delete_queue(admin_opc::DELETE_IO_CQ, qid, "Delete I/O Completion Queue")?;
        }
        Ok(())
    }

    /// After the controller reset that made generation `cur_gen`: reaps what completed before
    /// it, recreates the queues on the same rings (Create I/O CQ, then SQ, each advanced
    /// without waiting: the queues stay down until both exist), then resubmits (or fails)
    /// every command that was outstanding and submits what was held.
    #[cold]
    fn recreate(&mut self, rqs: &mut [Request], cur_gen: u64, now: u64) {
        let mut r = match self.recreating {
            Some(r) if r.reset_gen == cur_gen => r,
            _ => {
                self.stats.resets += 1;
                self.reap_before_reset(rqs);
                Recreating {
                    reset_gen: cur_gen,
                    sq: false,
                    cmd: PendingAdmin::default(),
                }
            }
        };
        loop {
            let (sqe, what) = self.create_sqe(r.sq);
            match self.ctrlr.admin_try(&mut r.cmd, sqe, what, now) {
                Ok(None) => {
                    self.recreating = Some(r);
                    self.liveness = RESETTING;
                    return;
                }
                Ok(Some(_)) if !r.sq => {
                    r.sq = true;
                    r.cmd = PendingAdmin::default();
                }
                Ok(Some(_)) => break,
                Err(e) => {
                    self.recreating = None;
                    self.recreate_failed(rqs, e);
                    return;
                }
            }
        }
        self.recreating = None;
        // A queue pair that could not recreate its queues after an earlier reset gets
        // another chance with this one.
        self.reset_gen = cur_gen;
        self.liveness = ALIVE;
        self.aborts_pending.clear();
        let mut pushed = false;
        for idx in 0..self.slots.len() {
            if !self.slots[idx].outstanding {
                continue;
            }
            if self.requeue(rqs, idx) {
                pushed = true;
            } else {
                let retries = self.slots[idx].recoveries;
                self.fail_slot(rqs, idx, IoError::TimedOut { retries });
            }
        }
        if pushed {
            self.rings.ring_sq(&*self.regs);
        }
        self.submit_held(rqs);
        if self.timeout_ns != 0 {
            self.next_scan = self.now_ns() + self.timeout_ns;
        }
    }

    /// Before recreating the queues: reaps what the controller completed before the reset
    /// (it is disabled: entries already posted are final), then empties the rings.
    #[cold]
    fn reap_before_reset(&mut self, rqs: &mut [Request]) {
        let mut reaped = 0u32;
        while reaped < self.rings.entries {
            let Some(cqe) = self.rings.pop() else { break };
            reaped += 1;
            let idx = usize::from(cqe.cid);
            let live = self.slots.get(idx).is_some_and(|s| s.outstanding) && idx < rqs.len();
            if !live {
                self.unknown(cqe);
            } else if cqe.status().is_success() && !self.slots[idx].aborted {
                self.slots[idx] = Slot {
                    done_once: true,
                    ..Slot::default()
                };
                rqs[idx].status = IoStatus::Success;
                self.failed.push(idx as u16);
            }
            // Other statuses: resubmitted after the reset like everything still outstanding.
        }
        self.rings = Rings::new(
            &self.mem,
            0,
            self.rings.qid,
            self.rings.entries,
            self.ctrlr.cap.dstrd(),
            PAGE_SIZE as usize,
        );
    }

    /// The queues could not be recreated: every request fails, now and later (until another
    /// reset gives this queue pair another chance).
    #[cold]
    fn recreate_failed(&mut self, rqs: &mut [Request], e: NvmeError) {
        log::error!(
            "{}: qpair {}: cannot recreate the queues after a reset: {e}",
            self.ctrlr.name,
            self.rings.qid
        );
        let (state, err) = if matches!(e, NvmeError::DeviceRemoved { .. }) {
            self.ctrlr.mark_removed();
            (REMOVED, IoError::Removed)
        } else {
            (FAILED, IoError::ControllerFailed)
        };
        self.liveness = state;
        self.reset_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        self.aborts_pending.clear();
        self.fail_all(rqs, err);
    }

    /// Reads CSTS when due (fatal status → reset; all ones → removed) and looks for
    /// timed-out commands when due (abort; a second timeout or a failed abort → reset).
    #[cold]
    fn check(&mut self, rqs: &mut [Request], now: u64) {
        if !self.aborts_pending.is_empty() && !self.poll_aborts(rqs, now) {
            return;
        }
        if now >= self.next_health {
            self.next_health = now.saturating_add(self.health_ns);
            let csts = Csts(self.regs.read32(off::CSTS));
            if csts.is_all_ones() {
                self.ctrlr.mark_removed();
                self.sync_ctrlr(rqs);
                return;
            }
            if csts.cfs() {
                log::error!(
                    "{}: controller fatal status (CSTS.CFS) seen by qpair {}",
                    self.ctrlr.name,
                    self.rings.qid
                );
                self.reset_controller(rqs);
                return;
            }
        }
        if self.timeout_ns == 0 || now < self.next_scan {
            return;
        }
        let mut next = u64::MAX;
        let mut reset = false;
        for idx in 0..self.slots.len() {
            let slot = self.slots[idx];
            if !slot.outstanding {
                continue;
            }
            if now.saturating_sub(slot.ts) < self.timeout_ns {
                next = next.min(slot.ts + self.timeout_ns);
                continue;
            }
            self.stats.timeouts += 1;
            if slot.aborted {
                log::error!(
                    "{}: qpair {}: command {idx} still not complete after an abort",
                    self.ctrlr.name,
                    self.rings.qid
                );
                reset = true;
                break;
            }
            log::warn!(
                "{}: qpair {}: command {idx} timed out; aborting it",
                self.ctrlr.name,
                self.rings.qid
            );
            match self.ctrlr.abort_submit(self.rings.qid, idx as u16) {
                Ok(None) => {
                    // The admin queue is busy, or a controller reset is in progress (the
                    // next poll follows it): scan again at the next poll.
                    next = now;
                    break;
                }
                Ok(Some(abort_cid)) => {
                    self.stats.aborts += 1;
                    self.aborts_pending.push(PendingAbort {
                        abort_cid,
                        tag: idx as u16,
                        deadline: now.saturating_add(self.abort_ns),
                    });
                    self.slots[idx].aborted = true;
                    self.slots[idx].ts = now;
                    next = next.min(now + self.timeout_ns);
                }
                Err(NvmeError::DeviceRemoved { .. }) => {
                    self.ctrlr.mark_removed();
                    self.sync_ctrlr(rqs);
                    return;
                }
                Err(e) => {
                    log::error!(
                        "{}: qpair {}: abort of command {idx} failed: {e}",
                        self.ctrlr.name,
                        self.rings.qid
                    );
                    self.stats.aborts_failed += 1;
                    reset = true;
                    break;
                }
            }
        }
        self.next_scan = next;
        if reset {
            self.reset_controller(rqs);
        }
    }

    /// Looks for the outcome of pending Aborts (the reactor never waits for one). Returns
    /// false when the queue pair was reset or failed meanwhile (the caller stops).
    #[cold]
    fn poll_aborts(&mut self, rqs: &mut [Request], now: u64) -> bool {
        let mut i = 0;
        while i < self.aborts_pending.len() {
            let p = self.aborts_pending[i];
            let failed = match self.ctrlr.abort_poll(p.abort_cid) {
                Ok(Some(found)) => {
                    if !found {
                        log::warn!(
                            "{}: qpair {}: abort of command {}: not aborted by the controller",
                            self.ctrlr.name,
                            self.rings.qid,
                            p.tag
                        );
                    }
                    self.aborts_pending.swap_remove(i);
                    continue;
                }
                Ok(None) if now < p.deadline => {
                    i += 1;
                    continue;
                }
                Ok(None) => NvmeError::Timeout {
                    ctrlr: self.ctrlr.name.clone(),
                    state: "waiting for an Abort",
                    ms: self.abort_ns / 1_000_000,
                },
                Err(NvmeError::DeviceRemoved { .. }) => {
                    self.ctrlr.mark_removed();
                    self.sync_ctrlr(rqs);
                    return false;
                }
                Err(e) => e,
            };
            log::error!(
                "{}: qpair {}: abort of command {} failed: {failed}",
                self.ctrlr.name,
                self.rings.qid,
                p.tag
            );
            self.stats.aborts_failed += 1;
            self.reset_controller(rqs);
            return false;
        }
        true
    }

    /// Resets the controller (unless another queue pair already did): starts the reset and
    /// takes this queue pair's queues down until it is done, without waiting for it.
    #[cold]
    fn reset_controller(&mut self, rqs: &mut [Request]) {
        self.want_reset = true;
        self.sync_ctrlr(rqs);
    }
}

impl DriverQueue for NvmeQpair {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        if self.ctrlr.mapper.generation() != self.dma_gen {
            self.refresh_dma_ranges();
        }
        if self.ctrlr.reset_gen.load(Ordering::Relaxed) != self.reset_gen
            || self.liveness == RESETTING
        {
            self.sync_ctrlr(rqs);
        }
        match self.liveness {
            ALIVE => self.submit_batch(rqs, tags),
            RESETTING => self.hold(rqs, tags),
            _ => self.reject_dead(rqs, tags),
        }
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        if self.ctrlr.reset_gen.load(Ordering::Relaxed) != self.reset_gen
            || self.liveness == RESETTING
        {
            self.sync_ctrlr(rqs);
        }
        let mut n = 0;
        while n < max {
            let Some(tag) = self.failed.pop() else { break };
            self.outstanding -= 1;
            self.stats.completed += 1;
            if rqs
                .get(usize::from(tag))
                .is_none_or(|r| !r.status.is_success())
            {
                self.stats.errors += 1;
            }
            done.push(tag);
            n += 1;
        }
        if self.liveness == RESETTING {
            // The queues are down until the controller reset is done.
            return n;
        }
        let sq_before = self.stats.submitted;
        let mut consumed = 0u32;
        while n < max && consumed < self.rings.entries {
            let Some(cqe) = self.rings.pop() else { break };
            consumed += 1;
            if self.complete(rqs, cqe, done) {
                n += 1;
                self.stats.completed += 1;
            }
        }
        if consumed > 0 {
            self.rings.ring_cq(&*self.regs);
        }
        if self.stats.submitted != sq_before {
            self.rings.ring_sq(&*self.regs);
        }
        // Timeouts and controller health: one clock read per poll while commands are in the
        // device; the scan itself runs only when something may be due.
        if self.outstanding > self.failed.len() {
            let now = self.now_ns();
            self.last_now = now;
            if now >= self.next_scan.min(self.next_health) || !self.aborts_pending.is_empty() {
                self.check(rqs, now);
            }
        }
        n
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}

impl Drop for NvmeQpair {
    fn drop(&mut self) {
        let qid = self.rings.qid;
        if self.outstanding > 0 {
            log::warn!(
                "{}: closing qpair {qid} with {} request(s) outstanding",
                self.ctrlr.name,
                self.outstanding
            );
        }
        let mut device_may_use_rings = false;
        // A removed or failed controller has no queues to delete (and may never answer), nor
        // has one reset since the queues were created (the reset deleted them) unless they
        // were being recreated; the ring memory is unmapped from the device before it is
        // freed either way.
        let ctrlr_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        let deleted =
            if self.ctrlr.detached.load(Ordering::Acquire) || self.ctrlr.liveness() != ALIVE {
                Ok(())
            } else if ctrlr_gen == self.reset_gen {
                self.ctrlr.delete_io_queue(qid)
            } else if let Some(r) = self.recreating.filter(|r| r.reset_gen == ctrlr_gen) {
                self.delete_recreated(r)
            } else {
                Ok(())
            };
        if let Err(e) = deleted
            && !matches!(e, NvmeError::Resetting { .. })
        {
            // The controller may still write completions into the rings: never give their
            // memory back to the process.
            log::error!("{e}; leaking the rings of qpair {qid}");
            device_may_use_rings = true;
        }
        if !device_may_use_rings {
            // SAFETY: dropped once, here; the queues are deleted (or the controller shut down).
            unsafe { std::mem::ManuallyDrop::drop(&mut self.mem) };
        }
        self.ctrlr.free_qid(qid);
        self.ctrlr.open_qpairs.fetch_sub(1, Ordering::AcqRel);
    }
}
