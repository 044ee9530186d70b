//! A request as a command on the connection (its SQE and where its data is), and what its
//! completion does: the request's status, a retry of a retryable status within
//! `io_retries`, or, for a command aborted after a timeout, a resubmission within the
//! recovery budget.

use pmio::request::{IoStatus, Op, Request};

use super::TcpQpair;
use super::link::Link;
use crate::error::IoError;
use crate::qpair::tracker::CmdSlot;
use crate::spec::{Cqe, Sqe, nvm_opc};

impl TcpQpair {
    /// Queues the command of `tag` on the connection (counted as outstanding), stamped with
    /// the latest clock read.
    #[inline]
    pub(super) fn start(&mut self, rqs: &mut [Request], tag: u16) {
        let Some(idx) = self.trk.claim(rqs, tag, self.trk.last_now) else {
            return;
        };
        match self.build(&rqs[idx]) {
            Ok((sqe, buf, len, read)) => {
                let Link::Up(conn) = &mut self.link else {
                    unreachable!("commands start only on a connection");
                };
                // SAFETY: the request's buffer (checked to hold `len` bytes) belongs to it
                // until it completes (`IoBuf`'s contract); a discard's range lives in
                // `self.dsm[idx]`, untouched while the tag is in flight.
                unsafe { conn.submit(tag, sqe, buf, len, read, true, self.in_capsule) };
            }
            Err(e) => self.trk.unclaim(rqs, idx, e),
        }
    }

    /// The command of `rq`: its SQE (no data pointer yet) and data (buffer, length, read).
    #[inline]
    fn build(&mut self, rq: &Request) -> Result<(Sqe, *mut u8, u32, bool), IoError> {
        let none = std::ptr::null_mut();
        Ok(match rq.op {
            Op::Read | Op::Write => {
                let bytes = self.ns.check_rw(rq, self.max_transfer)?;
                let (opc, read) = if rq.op == Op::Read {
                    (nvm_opc::READ, true)
                } else {
                    (nvm_opc::WRITE, false)
                };
                let sqe = self.ns.rw_sqe(opc, rq);
                (sqe, rq.buf.as_ptr(), bytes as u32, read)
            }
            Op::Flush => {
                let mut sqe = Sqe::new(nvm_opc::FLUSH, rq.tag);
                sqe.nsid = self.ns.nsid;
                (sqe, none, 0, false)
            }
            Op::WriteZeroes => {
                self.ns.check_write_zeroes(rq)?;
                (self.ns.rw_sqe(nvm_opc::WRITE_ZEROES, rq), none, 0, false)
            }
            Op::Discard => {
                let range = self.ns.dsm_range(rq)?;
                let d = &mut self.dsm[usize::from(rq.tag)];
                d[..4].copy_from_slice(&range.cattr.to_le_bytes());
                d[4..8].copy_from_slice(&range.nlb.to_le_bytes());
                d[8..].copy_from_slice(&range.slba.to_le_bytes());
                let mut sqe = Sqe::new(nvm_opc::DSM, rq.tag);
                sqe.nsid = self.ns.nsid;
                sqe.cdw10 = 0; // one range
                sqe.cdw11 = crate::spec::DSM_ATTR_DEALLOCATE;
                (sqe, d.as_mut_ptr(), 16, false)
            }
        })
    }

    /// The completion of command `cid`: the request's status, or a retry.
    #[inline]
    pub(super) fn complete(&mut self, rqs: &mut [Request], cid: u16, cqe: Cqe) {
        let idx = usize::from(cid);
        if idx >= rqs.len() || !self.trk.slots.get(idx).is_some_and(|s| s.outstanding) {
            // The connection completes only commands it was given.
            return;
        }
        let st = cqe.status();
        let slot = &mut self.trk.slots[idx];
        slot.outstanding = false;
        if st.is_success() {
            rqs[idx].status = IoStatus::Success;
        } else if slot.aborted {
            // Aborted after a timeout: resubmitted within the recovery budget.
            if self.trk.may_recover(idx) {
                self.restart(rqs, cid, true);
                return;
            }
            self.trk.give_up(rqs, idx);
        } else if st.is_retryable() && slot.retries < self.max_retries {
            slot.retries += 1;
            self.trk.stats.retries += 1;
            self.restart(rqs, cid, false);
            return;
        } else {
            self.trk.stats.errors += 1;
            self.trk.last_error = Some(IoError::Status(st));
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        }
        self.trk.slots[idx] = CmdSlot {
            done_once: true,
            ..CmdSlot::default()
        };
        self.reap.push_back(cid);
    }

    /// Sends the command of `tag` again (it stays outstanding): a retry, or (`recovery`) a
    /// resubmission after a timeout or a lost connection.
    #[cold]
    pub(super) fn restart(&mut self, rqs: &mut [Request], tag: u16, recovery: bool) {
        if recovery {
            self.trk.slots[usize::from(tag)].recoveries += 1;
            self.trk.stats.recovered += 1;
        }
        self.trk.outstanding -= 1;
        self.start(rqs, tag);
    }
}
