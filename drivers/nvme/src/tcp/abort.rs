//! Aborts of NVMe/TCP I/O commands past their deadline. The admin connection belongs to the
//! controller's thread (`ctrlr.rs`), so a queue pair only leaves its request here
//! ([`TcpCtrlr::ask_abort`], a `try_lock` and a push: its reactor never waits), and the thread
//! sends the Aborts, at most ACL + 1 at once (Identify Controller), and looks for their
//! answers at each tick without waiting for them.
//!
//! An answered Abort leaves the command to its queue pair: completed as aborted, it is
//! resubmitted; still not complete at its next deadline, its connection is failed. An Abort
//! that fails, or is not answered within `NvmeOptions::abort_timeout`, makes the thread
//! reconnect the controller at once, as SPDK's bdev_nvme resets a controller whose Abort
//! failed. A request left in an older association (the controller reconnected since) is
//! dropped unsent: its command was resubmitted on a new connection, maybe under the same CID.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::ctrlr::{CtrlrInner, try_lock};
use crate::error::NvmeError;
use crate::spec::{Sqe, admin_opc};

use super::ctrlr::TcpCtrlr;

/// What [`TcpCtrlr::ask_abort`] did with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AbortAsk {
    /// The controller's thread will send the Abort.
    Queued,
    /// Another thread holds the requests right now: ask again later.
    Busy,
}

/// An Abort a queue pair asked for.
#[derive(Clone, Copy, Debug)]
struct Asked {
    /// The controller generation (association) the command was sent in.
    reset_gen: u64,
    sqid: u16,
    cid: u16,
}

/// The Aborts the queue pairs asked for and the controller's thread has not sent yet.
#[derive(Default)]
pub(crate) struct AbortAsks(Mutex<Vec<Asked>>);

impl AbortAsks {
    fn lock(&self) -> MutexGuard<'_, Vec<Asked>> {
        // A push or a drain leaves the vector consistent: a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl TcpCtrlr {
    /// Asks the controller's thread to abort command `cid` of I/O queue `sqid`, sent in
    /// controller generation `reset_gen`. Never waits: for a reactor.
    #[cold]
    pub(crate) fn ask_abort(&self, reset_gen: u64, sqid: u16, cid: u16) -> AbortAsk {
        let Some(mut asks) = try_lock(&self.abort_asks.0) else {
            return AbortAsk::Busy;
        };
        asks.push(Asked {
            reset_gen,
            sqid,
            cid,
        });
        drop(asks);
        self.wake();
        AbortAsk::Queued
    }
}

/// An Abort the controller's thread sent on the current admin connection.
#[derive(Clone, Copy)]
struct Sent {
    admin_cid: u16,
    sqid: u16,
    cid: u16,
    deadline: Instant,
}

/// The controller's thread's part: the Aborts it sent and waits for.
#[derive(Default)]
pub(super) struct SentAborts {
    sent: Vec<Sent>,
}

impl SentAborts {
    /// Sends the Aborts asked for in the current association (while fewer than ACL + 1 are
    /// in flight) and looks once for the answers of those sent. Fails when one failed or was
    /// not answered in time: the controller is to be reconnected.
    pub(super) fn step(
        &mut self,
        inner: &CtrlrInner,
        t: &TcpCtrlr,
        now: Instant,
    ) -> Result<(), NvmeError> {
        self.send_asked(inner, t, now)?;
        let mut i = 0;
        while i < self.sent.len() {
            let s = self.sent[i];
            match t.admin.poll_for(s.admin_cid) {
                Some(cqe) if cqe.status().is_success() => {
                    // Dword 0 bit 0 clear: the command was aborted (its completion follows
                    // on its I/O queue); set: it was not (not found, or completing).
                    let aborted = cqe.dw0 & 1 == 0;
                    log::info!(
                        "{}: Abort of command {} of I/O queue {}: {}",
                        inner.name,
                        s.cid,
                        s.sqid,
                        if aborted { "aborted" } else { "not aborted" }
                    );
                    self.sent.swap_remove(i);
                }
                Some(cqe) => {
                    return Err(NvmeError::AdminCommand {
                        ctrlr: inner.name.clone(),
                        what: "Abort",
                        status: cqe.status(),
                    });
                }
                None if now > s.deadline => {
                    return Err(NvmeError::Timeout {
                        ctrlr: inner.name.clone(),
                        state: "waiting for an Abort",
                        ms: inner.opts.abort_timeout.as_millis() as u64,
                    });
                }
                None => i += 1,
            }
        }
        Ok(())
    }

    /// Sends what was asked for in the current association, within the Abort Command Limit
    /// (the rest waits for the next tick); drops what was asked for in an older one.
    fn send_asked(
        &mut self,
        inner: &CtrlrInner,
        t: &TcpCtrlr,
        now: Instant,
    ) -> Result<(), NvmeError> {
        let room = (usize::from(inner.id.acl) + 1).saturating_sub(self.sent.len());
        if room == 0 {
            return Ok(());
        }
        let cur_gen = inner.reset_gen.load(std::sync::atomic::Ordering::Acquire);
        let to_send: Vec<Asked> = {
            let mut asks = t.abort_asks.lock();
            asks.retain(|a| a.reset_gen == cur_gen);
            let n = room.min(asks.len());
            asks.drain(..n).collect()
        };
        for a in to_send {
            let mut sqe = Sqe::new(admin_opc::ABORT, 0);
            sqe.cdw10 = u32::from(a.cid) << 16 | u32::from(a.sqid);
            let admin_cid = t.admin.send(sqe).ok_or_else(|| NvmeError::Disconnected {
                ctrlr: inner.name.clone(),
                reason: "no admin command slot or connection for an Abort".into(),
            })?;
            log::debug!(
                "{}: Abort of command {} of I/O queue {} sent",
                inner.name,
                a.cid,
                a.sqid
            );
            self.sent.push(Sent {
                admin_cid,
                sqid: a.sqid,
                cid: a.cid,
                deadline: now + inner.opts.abort_timeout,
            });
        }
        Ok(())
    }

    /// The admin connection is going: Aborts sent on it and asked for will not be answered
    /// (the reconnect resubmits their commands).
    pub(super) fn clear(&mut self, t: &TcpCtrlr) {
        self.sent.clear();
        t.abort_asks.lock().clear();
    }
}
