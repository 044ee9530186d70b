//! An I/O queue pair owned by one reactor: the NVMe hot path.
//!
//! CID = tag. Each tag owns one PRP list page, prepared at creation, so nothing is allocated
//! per I/O. `submit` writes one SQE per request and rings the SQ doorbell once; `poll` reaps
//! completions by phase tag, retries retryable statuses a bounded number of times, and rings
//! the CQ head doorbell once. A completion whose CID is not outstanding is counted, logged
//! and ignored.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use pmio::bdev::DriverQueue;
use pmio::request::{IoStatus, Op, ReqFlags, Request};

use crate::ctrlr::{CtrlrInner, Namespace, PAGE_SIZE};
use crate::dma::DmaMem;
use crate::error::{IoError, NvmeError};
use crate::prp;
use crate::regs::RegisterIo;
use crate::ring::{Rings, ring_bytes};
use crate::spec::{Cqe, DSM_ATTR_DEALLOCATE, DsmRange, IdentifyController, Sqe, nvm_opc};

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
}

#[derive(Clone, Copy, Default)]
struct Slot {
    outstanding: bool,
    retries: u8,
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
    /// Registered I/O memory as (start, end), refreshed when the controller's generation moves.
    dma_ranges: Vec<(u64, u64)>,
    dma_gen: u64,
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
                if !self
                    .dma_ranges
                    .iter()
                    .any(|&(s, e)| s <= addr && addr.saturating_add(bytes) <= e)
                {
                    return Err(IoError::NotRegistered { addr, len: bytes });
                }
                // SAFETY: tag < depth (checked by the caller) and the tag is not outstanding.
                let list = unsafe { self.prp_list(tag) };
                let prps = prp::build(addr, bytes, PAGE_SIZE, list, list_iova)?;
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
        } else if st.is_retryable() && self.slots[idx].retries < self.max_retries {
            self.slots[idx].retries += 1;
            self.stats.retries += 1;
            if self.resubmit(&rqs[idx]) {
                return false;
            }
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        } else {
            self.device_error(tag, st);
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        }
        self.slots[idx] = Slot::default();
        self.outstanding -= 1;
        done.push(tag);
        true
    }

    #[cold]
    fn unknown(&mut self, cqe: Cqe) {
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

impl DriverQueue for NvmeQpair {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        if self.ctrlr.mapper.generation() != self.dma_gen {
            self.refresh_dma_ranges();
        }
        let mut pushed = false;
        for &tag in tags {
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
                continue;
            }
            if self.slots[idx].outstanding {
                log::error!(
                    "{}: request {tag} submitted while outstanding; ignored",
                    self.ctrlr.name
                );
                continue;
            }
            match self.build(&rqs[idx]) {
                Ok(sqe) => {
                    if self.rings.push(&sqe) {
                        self.slots[idx] = Slot {
                            outstanding: true,
                            retries: 0,
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

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some(tag) = self.failed.pop() else { break };
            self.outstanding -= 1;
            self.stats.completed += 1;
            self.stats.errors += 1;
            done.push(tag);
            n += 1;
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
        if !self.ctrlr.detached.load(Ordering::Acquire)
            && let Err(e) = self.ctrlr.delete_io_queue(qid)
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
