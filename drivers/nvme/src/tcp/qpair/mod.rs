//! An NVMe/TCP I/O queue pair: one connection owned by one reactor, a `pmio::DriverQueue`.
//!
//! CID = tag. `submit` queues one CapsuleCmd per request (write data in-capsule up to the
//! controller's IOCCSZ, else sent on R2T) and flushes them with one `writev`; `poll` reads
//! what arrived (read data straight into the requests' buffers), answers R2Ts with H2CData,
//! retries retryable statuses within `io_retries`, and flushes once more. What it tracks of
//! each request (tags, held submissions, counters, deadlines) is the PCIe queue pair's
//! `crate::qpair::tracker::Tracker`.
//!
//! Recovery follows the controller (`ctrlr.rs`), checked with one atomic load per call:
//! - this connection failing (end of stream, socket error, a bad PDU from the target) drops
//!   it, keeps what was in flight to resubmit, and asks the controller to reconnect;
//! - while the controller reconnects (odd generation) the queue pair has no connection and
//!   holds submissions, in order, counted by `outstanding()`;
//! - once it reconnected (a newer even generation) the queue pair connects anew without
//!   waiting (a non-blocking connect, ICReq, Connect with the new CNTLID, each looked at once
//!   per call) and resubmits what it held: each request completes once, from one connection;
//! - a command in flight when its connection failed is resubmitted at most
//!   `NvmeOptions::recovery_retries` times (as after a PCIe controller reset), then fails with
//!   `IoError::TimedOut`;
//! - fast I/O fail or a lost controller fail what is held with ENXIO
//!   (`IoError::Disconnected`); a detached controller with `IoError::Removed`.
//!
//! Commands past `NvmeOptions::io_timeout` (`timeout.rs`) get an Abort, sent by the
//! controller's thread; one still not complete at its next deadline fails the connection,
//! and the reconnect above resubmits it.
//!
//! # Files
//! - `mod.rs`: the queue pair, opening it, `DriverQueue` (submit, poll), closing it.
//! - `command.rs`: a request as a command on the connection, and its completion.
//! - `link.rs`: the connection: following the controller's generation, setting up a new one
//!   without waiting, losing it (what was in flight is held), failing everything.
//! - `timeout.rs`: commands past their deadline: Abort, then the connection failed.

mod command;
mod link;
mod timeout;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pmio::bdev::DriverQueue;
use pmio::request::Request;

use crate::ctrlr::{CtrlrInner, Namespace};
use crate::error::{IoError, NvmeError};
use crate::qpair::tracker::Tracker;
use crate::qpair::{NsFacts, QpairStats};
use crate::spec::Cqe;

use super::ctrlr::CONNECT_TIMEOUT;
use link::Link;

/// One NVMe/TCP I/O queue pair of a namespace.
pub struct TcpQpair {
    ctrlr: Arc<CtrlrInner>,
    qid: u16,
    depth: u32,
    sqsize: u16,
    ns: NsFacts,
    max_transfer: u64,
    in_capsule: u32,
    max_retries: u8,
    link: Link,
    /// The controller generation the link belongs to.
    reset_gen: u64,
    /// Its requests by tag (CID), held submissions, counters, the I/O deadlines' clock.
    trk: Tracker,
    scratch: Vec<u16>,
    /// Tags whose command completed on the connection, reported at the next poll (capacity
    /// `depth`).
    reap: VecDeque<u16>,
    /// Completions of one receive pass.
    cqes: Vec<(u16, Cqe)>,
    /// Per tag: the Dataset Management range a discard sends in-capsule.
    dsm: Vec<[u8; 16]>,
}

impl TcpQpair {
    /// Creates queue pair for `ns` able to hold `depth` requests, and connects it (waiting:
    /// opening is off the I/O path), unless the controller is reconnecting: then it connects
    /// once that is done, holding I/O meanwhile.
    pub(crate) fn new(
        ctrlr: Arc<CtrlrInner>,
        ns: &Namespace,
        depth: u32,
    ) -> Result<TcpQpair, NvmeError> {
        ctrlr.check_attached()?;
        let entries = ctrlr.tcp_io_entries();
        if depth == 0 || depth > entries {
            return Err(NvmeError::InvalidOption(format!(
                "queue depth {depth} not in 1..={entries} (queue size)"
            )));
        }
        let qid = ctrlr.alloc_qid()?;
        ctrlr.open_qpairs.fetch_add(1, Ordering::AcqRel);
        let d = depth as usize;
        let mut q = TcpQpair {
            qid,
            depth,
            sqsize: (entries - 1) as u16,
            ns: NsFacts::new(ns, ctrlr.id.oncs),
            max_transfer: ctrlr.max_transfer,
            in_capsule: ctrlr.tcp_in_capsule(),
            max_retries: ctrlr.opts.io_retries,
            link: Link::Down,
            reset_gen: u64::MAX,
            trk: Tracker::new(&ctrlr, qid, depth),
            scratch: Vec::with_capacity(d),
            reap: VecDeque::with_capacity(d),
            cqes: Vec::with_capacity(d + 1),
            dsm: vec![[0; 16]; d],
            ctrlr,
        };
        let cur_gen = q.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen & 1 == 1 {
            return Ok(q);
        }
        let deadline = Instant::now() + CONNECT_TIMEOUT + Duration::from_secs(1);
        loop {
            q.sync_slow(&mut [], false);
            match q.link {
                Link::Up(_) => break,
                Link::Dead(e) => {
                    return Err(NvmeError::Disconnected {
                        ctrlr: q.ctrlr.name.clone(),
                        reason: e.to_string(),
                    });
                }
                Link::Down if q.reset_gen == q.ctrlr.reset_gen.load(Ordering::Acquire) => {
                    return Err(NvmeError::Disconnected {
                        ctrlr: q.ctrlr.name.clone(),
                        reason: format!("I/O queue {qid} could not connect"),
                    });
                }
                Link::Down if q.ctrlr.reset_gen.load(Ordering::Acquire) & 1 == 1 => break,
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(NvmeError::Timeout {
                    ctrlr: q.ctrlr.name.clone(),
                    state: "connecting an I/O queue",
                    ms: (CONNECT_TIMEOUT.as_millis() + 1000) as u64,
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        log::debug!(
            "{}: I/O queue pair {qid} for namespace {} (depth {depth}, {} entries)",
            q.ctrlr.name,
            q.ns.nsid,
            u32::from(q.sqsize) + 1
        );
        Ok(q)
    }

    /// Queue ID.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Counters.
    pub fn stats(&self) -> QpairStats {
        self.trk.stats
    }

    /// Whether the queue pair has a connection now.
    pub fn connected(&self) -> bool {
        matches!(self.link, Link::Up(_))
    }

    /// The most recent per-I/O error, for diagnostics.
    pub fn last_error(&self) -> Option<IoError> {
        self.trk.last_error
    }

    fn tcp(&self) -> &super::ctrlr::TcpCtrlr {
        self.ctrlr
            .tcp()
            .expect("a TCP queue pair has a TCP controller")
    }

    /// Whether commands are on the connection (not held, not waiting to be reported).
    #[inline]
    fn in_flight(&self) -> bool {
        let t = &self.trk;
        t.outstanding > t.failed.len() + t.held.len() + self.reap.len()
    }
}

impl DriverQueue for TcpQpair {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.sync(rqs);
        match self.link {
            Link::Up(_) => {
                self.trk.batch_clock();
                for &tag in tags {
                    self.start(rqs, tag);
                }
                self.flush(rqs);
            }
            Link::Dead(err) => self.trk.reject_all(rqs, tags, err),
            Link::Setup { .. } | Link::Down => {
                if self.tcp().fast_io_fail.load(Ordering::Acquire) {
                    self.trk.reject_all(rqs, tags, IoError::Disconnected);
                } else {
                    self.trk.hold(rqs, tags);
                }
            }
        }
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        self.sync(rqs);
        let mut n = self.trk.report_failed(rqs, done, max);
        // Nothing on the connection: nothing to read, no system call (a connection lost
        // meanwhile shows at the next command, or the controller's keep-alive finds it).
        if self.reap.len() < max - n
            && self.in_flight()
            && let Link::Up(conn) = &mut self.link
        {
            let cqes = &mut self.cqes;
            let r = conn.poll(|cid, cqe| cqes.push((cid, cqe)));
            let mut cqes = std::mem::take(&mut self.cqes);
            for &(cid, cqe) in &cqes {
                self.complete(rqs, cid, cqe);
            }
            cqes.clear();
            self.cqes = cqes;
            match r {
                // R2Ts answered and retries, in one writev.
                Ok(()) => self.flush(rqs),
                Err(e) => self.conn_lost(rqs, e, true),
            }
        }
        // Deadlines (when on): one clock read per poll while commands are on the connection;
        // the scan runs only when one may be due.
        if self.trk.next_scan != u64::MAX && self.in_flight() {
            let now = self.trk.now_ns();
            self.trk.last_now = now;
            if now >= self.trk.next_scan {
                self.check_deadlines(rqs, now);
            }
        }
        while n < max {
            let Some(tag) = self.reap.pop_front() else {
                break;
            };
            self.trk.outstanding -= 1;
            self.trk.stats.completed += 1;
            done.push(tag);
            n += 1;
        }
        n
    }

    fn outstanding(&self) -> usize {
        self.trk.outstanding
    }
}

impl Drop for TcpQpair {
    fn drop(&mut self) {
        if self.trk.outstanding > 0 {
            log::warn!(
                "{}: closing I/O queue {} with {} request(s) outstanding",
                self.ctrlr.name,
                self.qid,
                self.trk.outstanding
            );
        }
        // Dropping the connection closes it: the target frees the queue.
        self.link = Link::Down;
        self.ctrlr.free_qid(self.qid);
        self.ctrlr.open_qpairs.fetch_sub(1, Ordering::AcqRel);
    }
}
