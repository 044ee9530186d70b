//! I/O queues: how many the controller grants (Set Features Number of Queues, at bring-up
//! and again after a reset), which queue IDs are in use, and creating and deleting a queue
//! pair's SQ and CQ with admin commands (PCIe: a fabrics queue pair is created by Connect).

use super::{CtrlrInner, Init, InitState};
use crate::error::NvmeError;
use crate::spec::{Cqe, Sqe, admin_opc, fid};

impl Init {
    /// Set Features Number of Queues: the controller is ready once it answers.
    pub(super) fn set_num_queues(&mut self) -> Result<Option<InitState>, NvmeError> {
        let sqe = set_num_queues_sqe(self.opts.max_io_queues);
        if let Some(cqe) = self.admin_cmd(Some(sqe), SET_NUM_QUEUES)? {
            self.io_queues = granted_queues(&cqe).min(self.opts.max_io_queues);
            log::debug!("{}: {} I/O queue pairs granted", self.name, self.io_queues);
            return Ok(Some(InitState::Ready));
        }
        Ok(None)
    }
}

/// What Set Features Number of Queues is called in errors.
pub(crate) const SET_NUM_QUEUES: &str = "Set Features Number of Queues";

/// Set Features Number of Queues asking for `count` I/O submission and completion queues.
pub(crate) fn set_num_queues_sqe(count: u16) -> Sqe {
    let n = u32::from(count.saturating_sub(1));
    let mut sqe = Sqe::new(admin_opc::SET_FEATURES, 0);
    sqe.cdw10 = fid::NUMBER_OF_QUEUES;
    sqe.cdw11 = n << 16 | n;
    sqe
}

/// What Create I/O Completion / Submission Queue are called in errors.
pub(crate) const CREATE_CQ: &str = "Create I/O Completion Queue";
pub(crate) const CREATE_SQ: &str = "Create I/O Submission Queue";

/// What Delete I/O Submission / Completion Queue are called in errors.
pub(crate) const DELETE_SQ: &str = "Delete I/O Submission Queue";
pub(crate) const DELETE_CQ: &str = "Delete I/O Completion Queue";

/// Delete I/O SQ or CQ `qid` (`opc` says which).
pub(crate) fn delete_queue_sqe(opc: u8, qid: u16) -> Sqe {
    let mut sqe = Sqe::new(opc, 0);
    sqe.cdw10 = u32::from(qid);
    sqe
}

/// Create I/O Completion Queue `qid` of `entries` on the ring at `cq_iova` (physically
/// contiguous, polled: interrupts disabled).
pub(crate) fn create_cq_sqe(qid: u16, entries: u32, cq_iova: u64) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::CREATE_IO_CQ, 0);
    sqe.prp1 = cq_iova;
    sqe.cdw10 = (entries - 1) << 16 | u32::from(qid);
    sqe.cdw11 = 1;
    sqe
}

/// Create I/O Submission Queue `qid` of `entries` on the ring at `sq_iova`, completing on
/// CQ `qid` (physically contiguous).
pub(crate) fn create_sq_sqe(qid: u16, entries: u32, sq_iova: u64) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::CREATE_IO_SQ, 0);
    sqe.prp1 = sq_iova;
    sqe.cdw10 = (entries - 1) << 16 | u32::from(qid);
    sqe.cdw11 = u32::from(qid) << 16 | 1;
    sqe
}

/// I/O queue pairs a Set Features Number of Queues completion grants (the fewer of SQs and
/// CQs; the fields are 0-based).
pub(crate) fn granted_queues(cqe: &Cqe) -> u16 {
    let nsqa = (cqe.dw0 & 0xffff) as u16;
    let ncqa = (cqe.dw0 >> 16) as u16;
    nsqa.min(ncqa).saturating_add(1)
}

/// The I/O queue IDs in use, handed out round robin rather than lowest first: a controller
/// may still be tearing down the queue an ID was just freed from. Linux's nvmet frees a
/// fabrics queue after its connection closes, asynchronously, and until then refuses a
/// Connect for the same ID ("qid 1 has already been created"): pmio-perf `--verify` closes its
/// fill queue and opens the run's queue at once.
pub(crate) struct QidMap {
    /// `used[qid]`; index 0, the admin queue, is never handed out.
    used: Vec<bool>,
    /// Where the next search starts: after the ID handed out last.
    next: usize,
}

impl QidMap {
    /// IDs `1..=io_queues`, all free.
    pub(crate) fn new(io_queues: u16) -> QidMap {
        QidMap {
            used: vec![false; usize::from(io_queues) + 1],
            next: 1,
        }
    }

    fn alloc(&mut self) -> Option<u16> {
        let ids = self.used.len() - 1;
        let qid = (0..ids)
            .map(|i| 1 + (self.next - 1 + i) % ids)
            .find(|&q| !self.used[q])?;
        self.used[qid] = true;
        self.next = 1 + qid % ids;
        u16::try_from(qid).ok()
    }

    /// The first ID in use after `qid`.
    fn in_use_after(&self, qid: u16) -> Option<u16> {
        let from = usize::from(qid) + 1;
        let i = self.used.get(from..)?.iter().position(|&u| u)?;
        u16::try_from(from + i).ok()
    }

    fn free(&mut self, qid: u16) {
        if let Some(used) = self.used.get_mut(usize::from(qid)).filter(|_| qid != 0) {
            *used = false;
        }
    }
}

impl CtrlrInner {
    /// Takes a free I/O queue ID.
    pub fn alloc_qid(&self) -> Result<u16, NvmeError> {
        let mut q = self.qids.lock().unwrap_or_else(|p| p.into_inner());
        q.alloc().ok_or_else(|| NvmeError::NoQueues {
            ctrlr: self.name.clone(),
            granted: self.io_queues,
        })
    }

    /// The first I/O queue ID in use after `qid` (0: the first of all).
    pub(crate) fn next_qid_in_use(&self, qid: u16) -> Option<u16> {
        let q = self.qids.lock().unwrap_or_else(|p| p.into_inner());
        q.in_use_after(qid)
    }

    /// Returns an I/O queue ID.
    pub fn free_qid(&self, qid: u16) {
        let mut q = self.qids.lock().unwrap_or_else(|p| p.into_inner());
        q.free(qid);
    }

    /// Creates I/O CQ then SQ `qid` on rings at `cq_iova`/`sq_iova` (polled, no interrupts).
    pub fn create_io_queue(
        &self,
        qid: u16,
        entries: u32,
        sq_iova: u64,
        cq_iova: u64,
    ) -> Result<(), NvmeError> {
        self.admin_exec(create_cq_sqe(qid, entries, cq_iova), CREATE_CQ)?;
        if let Err(e) = self.admin_exec(create_sq_sqe(qid, entries, sq_iova), CREATE_SQ) {
            let _ = self.delete_cq(qid);
            return Err(e);
        }
        Ok(())
    }

    /// Deletes I/O SQ then CQ `qid`.
    pub fn delete_io_queue(&self, qid: u16) -> Result<(), NvmeError> {
        let sq = self.delete_sq(qid);
        let cq = self.delete_cq(qid);
        sq.and(cq)
    }

    /// Deletes I/O SQ `qid` (before its CQ).
    pub(crate) fn delete_sq(&self, qid: u16) -> Result<(), NvmeError> {
        self.delete_queue(admin_opc::DELETE_IO_SQ, qid, DELETE_SQ)
    }

    /// Deletes I/O CQ `qid` (after its SQ).
    pub(crate) fn delete_cq(&self, qid: u16) -> Result<(), NvmeError> {
        self.delete_queue(admin_opc::DELETE_IO_CQ, qid, DELETE_CQ)
    }

    /// Deletes one I/O queue: `opc` is Delete I/O SQ or CQ.
    fn delete_queue(&self, opc: u8, qid: u16, what: &'static str) -> Result<(), NvmeError> {
        self.admin_exec(delete_queue_sqe(opc, qid), what)
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::QidMap;

    #[test]
    fn queue_ids_come_round_robin_and_never_twice() {
        let mut q = QidMap::new(3);
        assert_eq!(q.alloc(), Some(1));
        q.free(1);
        assert_eq!(
            q.alloc(),
            Some(2),
            "a just-freed ID is not the next one handed out"
        );
        assert_eq!(q.alloc(), Some(3));
        assert_eq!(q.alloc(), Some(1), "the search wraps past the last ID");
        assert_eq!(q.alloc(), None, "1, 2 and 3 are in use");
        q.free(2);
        q.free(0);
        assert_eq!(q.alloc(), Some(2));
        assert_eq!(q.alloc(), None);
    }

    #[test]
    fn no_io_queues_means_no_ids() {
        let mut q = QidMap::new(0);
        assert_eq!(q.alloc(), None);
    }
}
