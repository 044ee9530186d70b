//! Commands past `NvmeOptions::io_timeout`, the same policy as a PCIe queue pair's over
//! what this transport offers: a command past its deadline gets an Abort, which the
//! controller's thread sends on the admin connection it owns (the reactor only leaves the
//! request, `crate::tcp::abort`), and one more `io_timeout` to complete; a command still not
//! complete then fails the connection (SPDK's fabrics behaviour when an abort does not help):
//! the controller reconnects and the command is resubmitted within its recovery budget. A
//! failed or unanswered Abort makes the controller's thread reconnect at once.

use pmio::request::Request;

use super::TcpQpair;
use crate::tcp::abort::AbortAsk;
use crate::tcp::conn::ConnError;

impl TcpQpair {
    /// Looks for commands past their deadline at `now` (due: `now >= next_scan`).
    #[cold]
    pub(super) fn check_deadlines(&mut self, rqs: &mut [Request], now: u64) {
        let mut next = u64::MAX;
        let mut from = 0;
        while let Some(idx) = self.trk.overdue(from, now, &mut next) {
            from = idx + 1;
            self.trk.stats.timeouts += 1;
            let cid = idx as u16;
            if self.trk.slots[idx].aborted {
                log::error!(
                    "{}: I/O queue {}: command {cid} still not complete after an abort",
                    self.ctrlr.name,
                    self.qid
                );
                let e = ConnError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("command {cid} not complete after an Abort (I/O timeout)"),
                ));
                return self.conn_lost(rqs, e, true);
            }
            match self.tcp().ask_abort(self.reset_gen, self.qid, cid) {
                AbortAsk::Queued => {
                    log::warn!(
                        "{}: I/O queue {}: command {cid} timed out; aborting it",
                        self.ctrlr.name,
                        self.qid
                    );
                    self.trk.aborting(idx, now, &mut next);
                }
                AbortAsk::Busy => {
                    // Another thread holds the requests for a moment, or the controller is
                    // reconnecting (the next call follows it): look again at the next poll.
                    next = now;
                    break;
                }
            }
        }
        self.trk.next_scan = next;
    }
}
