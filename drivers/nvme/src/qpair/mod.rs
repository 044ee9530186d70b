//! An I/O queue pair owned by one reactor: the NVMe hot path, and its recovery.
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
//!
//! # Files
//! The hot path first, then recovery; (PCIe) marks what is particular to queues in host
//! memory with doorbells, (both) what the NVMe/TCP queue pair (`crate::tcp`) shares; the rest
//! is this queue pair's own logic.
//! - `mod.rs`: the queue pair and its counters; opening it (Create I/O CQ/SQ) and closing it
//!   (Delete, or leak the rings if the device may still write them) (PCIe).
//! - `io.rs`: the hot path: `DriverQueue` (submit, poll), the SQ batch and its doorbell, the
//!   completion walk by phase tag, retries of retryable statuses.
//! - `tracker.rs`: what the queue pair tracks of its requests: a `CmdSlot` per tag, tag
//!   checks, rejections, held submissions, counters, the I/O deadlines' clock and scan (both).
//! - `encode.rs`: a request as an NVMe command: range and size checks, the SQE (both); PRPs
//!   in the tag's list page (PCIe).
//! - `state.rs`: `QpairState` (may the queues be used?) and its one setter.
//! - `timeout.rs`: commands past their deadline (Abort), the CSTS health check, Aborts in
//!   flight.
//! - `reset.rs`: following a controller reset (start it, advance it, take the queues down);
//!   resubmission within the recovery budget; failing requests when the device is gone;
//!   submitting what was held once the queues are back.
//! - `recreate.rs`: the queues recreated on the same rings after a reset, without waiting;
//!   closing while that is under way (PCIe).

pub(crate) mod encode;
mod io;
mod recreate;
mod reset;
mod state;
mod timeout;
pub(crate) mod tracker;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::ctrlr::{CtrlrInner, Namespace, PAGE_SIZE};
use crate::dma::{DmaMem, DmaWindow};
use crate::error::{IoError, NvmeError};
use crate::recovery::{CtrlrLiveness, clamp_ns};
use crate::regs::RegisterIo;
use crate::ring::{Rings, ring_bytes};
use crate::spec::IdentifyController;

use recreate::Recreating;
use state::QpairState;
use timeout::PendingAbort;
use tracker::Tracker;

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
    /// Abort commands sent for timed-out commands (asynchronously: the poller never waits;
    /// NVMe/TCP: asked of the controller's thread, which sends them).
    pub aborts: u64,
    /// Of those, Aborts that failed or timed out (each leads to a controller reset). PCIe
    /// only: an NVMe/TCP controller's thread reconnects the controller itself then.
    pub aborts_failed: u64,
    /// Controller resets this queue pair went through (its queues recreated each time).
    pub resets: u64,
    /// Commands resubmitted after a timeout, abort or reset.
    pub recovered: u64,
    /// Requests failed because the device was removed or the controller failed.
    pub failed_dead: u64,
}

/// Namespace facts the hot path needs, copied at creation (both transports).
#[derive(Clone, Copy)]
pub(crate) struct NsFacts {
    pub(crate) nsid: u32,
    pub(crate) block_shift: u8,
    pub(crate) num_blocks: u64,
    pub(crate) write_zeroes: bool,
    pub(crate) dsm: bool,
}

impl NsFacts {
    /// The facts of `ns` on a controller supporting the optional commands `oncs`.
    pub(crate) fn new(ns: &Namespace, oncs: u16) -> NsFacts {
        NsFacts {
            nsid: ns.nsid,
            block_shift: ns.block_shift,
            num_blocks: ns.num_blocks,
            write_zeroes: oncs & IdentifyController::ONCS_WRITE_ZEROES != 0,
            dsm: oncs & IdentifyController::ONCS_DSM != 0,
        }
    }
}

/// One I/O queue pair of a namespace.
pub struct NvmeQpair {
    regs: Arc<dyn RegisterIo>,
    rings: Rings,
    ns: NsFacts,
    max_transfer: u64,
    max_retries: u8,
    prp_base: *mut u64,
    prp_iova: u64,
    /// Its requests by tag (CID), held submissions, counters, the I/O deadlines' clock.
    trk: Tracker,
    /// Registered I/O memory and its IOVA offsets, refreshed when the controller's
    /// registration generation moves.
    dma_ranges: Vec<DmaWindow>,
    dma_gen: u64,
    /// The CSTS check interval, ns.
    health_ns: u64,
    /// When the poller next reads CSTS (ns since the controller's epoch).
    next_health: u64,
    /// Aborts submitted and not yet answered (at most one per tag).
    aborts_pending: Vec<PendingAbort>,
    /// Abort deadline, ns.
    abort_ns: u64,
    /// The controller's reset generation this queue pair's queues belong to (always even).
    reset_gen: u64,
    /// Whether the queues may be used (changed only by `set_state`).
    state: QpairState,
    /// This queue pair needs a controller reset it could not start yet (the reset or admin
    /// lock was busy): it tries again at its next submit or poll.
    want_reset: bool,
    /// The queues being recreated after a reset (`Resetting` until they are).
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
        ctrlr.check_attached()?;
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
            ns: NsFacts::new(ns, oncs),
            max_transfer: ctrlr.max_transfer,
            max_retries: ctrlr.opts.io_retries,
            // SAFETY: the PRP pages follow the rings inside `mem` (sized above).
            prp_base: unsafe { mem.as_ptr().add(rings_len).cast::<u64>() },
            prp_iova: mem.iova() + rings_len as u64,
            trk: Tracker::new(&ctrlr, qid, depth),
            dma_ranges: Vec::new(),
            dma_gen: u64::MAX,
            health_ns: clamp_ns(ctrlr.opts.health_check_interval),
            next_health: 0,
            aborts_pending: Vec::with_capacity(depth as usize),
            abort_ns: clamp_ns(ctrlr.opts.abort_timeout),
            reset_gen,
            state: QpairState::Alive,
            want_reset: false,
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
        self.trk.stats
    }

    /// Whether the queues are down for a controller reset in progress (submissions are held
    /// until it is done); for diagnostics.
    pub fn resetting(&self) -> bool {
        self.state == QpairState::Resetting
    }

    /// The most recent per-I/O error (rejections and device statuses), for diagnostics.
    pub fn last_error(&self) -> Option<IoError> {
        self.trk.last_error
    }
}

impl Drop for NvmeQpair {
    fn drop(&mut self) {
        let qid = self.rings.qid;
        if self.trk.outstanding > 0 {
            log::warn!(
                "{}: closing qpair {qid} with {} request(s) outstanding",
                self.ctrlr.name,
                self.trk.outstanding
            );
        }
        let mut device_may_use_rings = false;
        // A removed or failed controller has no queues to delete (and may never answer), nor
        // has one reset since the queues were created (the reset deleted them) unless they
        // were being recreated; the ring memory is unmapped from the device before it is
        // freed either way.
        let ctrlr_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        let deleted = if self.ctrlr.detached.load(Ordering::Acquire)
            || self.ctrlr.liveness() != CtrlrLiveness::Alive
        {
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
