//! The admin commands the driver uses: Identify (controller, active namespace list,
//! namespace 1), Set Features Number of Queues, Create / Delete I/O SQ and CQ, and Abort
//! (which finds a command a fault holds and completes it as aborted).

use std::sync::atomic::{AtomicU32, Ordering};

use super::State;
use super::queues::{Cq, Sq};
use crate::spec::{
    IdentifyController, IdentifyNamespace, LbaFormat, Sqe, Status, admin_opc, cns, fid, sc, sct,
};

impl State {
    /// Executes admin command `sqe`; returns its status and completion dword 0.
    pub(super) fn admin(&mut self, sqe: &Sqe, db: &[AtomicU32]) -> (Status, u32) {
        let invalid = (Status::new(sct::GENERIC, 0x02, true), 0);
        let xfer_err = (Status::new(sct::GENERIC, 0x04, true), 0);
        let bad_qid = (Status::new(sct::COMMAND_SPECIFIC, 0x01, true), 0);
        let nq = self.sqs.len();
        match sqe.opcode() {
            admin_opc::IDENTIFY => {
                let mut page = [0u8; 4096];
                match sqe.cdw10 & 0xff {
                    cns::CONTROLLER => {
                        let mut id = IdentifyController::zeroed();
                        id.mn[..3].copy_from_slice(b"EMU");
                        id.sn[..4].copy_from_slice(b"0001");
                        id.mdts = self.cfg.mdts;
                        id.nn = 1;
                        id.oncs =
                            IdentifyController::ONCS_DSM | IdentifyController::ONCS_WRITE_ZEROES;
                        // SAFETY: plain 4096-byte integer structure.
                        page = unsafe { std::mem::transmute::<IdentifyController, [u8; 4096]>(id) };
                    }
                    cns::ACTIVE_NS_LIST if self.cfg.version < 0x0001_0100 => return invalid,
                    cns::ACTIVE_NS_LIST => {
                        if sqe.nsid < 1 {
                            page[..4].copy_from_slice(&1u32.to_le_bytes());
                        }
                    }
                    cns::NAMESPACE if sqe.nsid == 1 => {
                        let mut ns = IdentifyNamespace::zeroed();
                        ns.nsze = self.cfg.blocks;
                        ns.ncap = ns.nsze;
                        ns.noiob = self.cfg.noiob;
                        ns.lbaf[0] = LbaFormat(u32::from(self.cfg.block_shift) << 16);
                        // SAFETY: plain 4096-byte integer structure.
                        page = unsafe { std::mem::transmute::<IdentifyNamespace, [u8; 4096]>(ns) };
                    }
                    _ => return invalid,
                }
                if self.write_mem(sqe.prp1, &page) {
                    (Status::SUCCESS, 0)
                } else {
                    xfer_err
                }
            }
            admin_opc::SET_FEATURES if sqe.cdw10 & 0xff == fid::NUMBER_OF_QUEUES => {
                let n = u32::from(self.cfg.max_io_queues - 1);
                (Status::SUCCESS, n << 16 | n)
            }
            admin_opc::CREATE_IO_CQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                let entries = (sqe.cdw10 >> 16) + 1;
                if qid == 0 || qid >= nq || self.cqs[qid].is_some() {
                    return bad_qid;
                }
                if entries < 2 || entries > u32::from(self.cfg.mqes) + 1 {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x02, true), 0);
                }
                db[2 * qid + 1].store(0, Ordering::Release);
                self.cqs[qid] = Some(Cq::new(sqe.prp1, entries));
                (Status::SUCCESS, 0)
            }
            admin_opc::CREATE_IO_SQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                let cqid = (sqe.cdw11 >> 16) as usize;
                let entries = (sqe.cdw10 >> 16) + 1;
                if qid == 0 || qid >= nq || self.sqs[qid].is_some() {
                    return bad_qid;
                }
                if cqid >= nq || self.cqs[cqid].is_none() {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x00, true), 0);
                }
                if entries < 2 || entries > u32::from(self.cfg.mqes) + 1 {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x02, true), 0);
                }
                db[2 * qid].store(0, Ordering::Release);
                self.sqs[qid] = Some(Sq::new(sqe.prp1, entries, cqid as u16));
                (Status::SUCCESS, 0)
            }
            admin_opc::DELETE_IO_SQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                if qid == 0 || qid >= nq || self.sqs[qid].take().is_none() {
                    return bad_qid;
                }
                self.stats.sq_deletions += 1;
                // Commands of a deleted SQ that a fault holds complete as aborted (as QEMU's
                // controller cancels what it still runs); those never fetched are gone.
                let sqid = qid as u16;
                let aborted: Vec<_> = self.held.extract_if(.., |h| h.post.sqid == sqid).collect();
                let status = Status::new(sct::GENERIC, sc::ABORTED_SQ_DELETION, false);
                for h in aborted {
                    self.post(h.cqid, sqid, h.post.cid, status, 0, db);
                }
                (Status::SUCCESS, 0)
            }
            admin_opc::DELETE_IO_CQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                if qid == 0 || qid >= nq {
                    return bad_qid;
                }
                if self
                    .sqs
                    .iter()
                    .skip(1)
                    .flatten()
                    .any(|s| usize::from(s.cqid) == qid)
                {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x0c, true), 0);
                }
                match self.cqs[qid].take() {
                    Some(_) => (Status::SUCCESS, 0),
                    None => bad_qid,
                }
            }
            admin_opc::ABORT => {
                self.stats.aborts += 1;
                let sqid = (sqe.cdw10 & 0xffff) as u16;
                let cid = (sqe.cdw10 >> 16) as u16;
                if let Some(i) = self
                    .held
                    .iter()
                    .position(|h| h.post.sqid == sqid && h.post.cid == cid)
                {
                    let h = self.held.swap_remove(i);
                    self.stats.aborts_hit += 1;
                    let aborted = Status::new(sct::GENERIC, 0x07, false);
                    self.post(h.cqid, sqid, cid, aborted, 0, db);
                    (Status::SUCCESS, 0)
                } else {
                    // Command not aborted (not found / already completed).
                    (Status::SUCCESS, 1)
                }
            }
            _ => (Status::new(sct::GENERIC, 0x01, true), 0),
        }
    }
}
