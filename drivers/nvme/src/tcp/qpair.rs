//! An NVMe/TCP I/O queue pair: one connection owned by one reactor, a `pmio::DriverQueue`.
//!
//! CID = tag. `submit` queues one CapsuleCmd per request (write data in-capsule up to the
//! controller's IOCCSZ, else sent on R2T) and flushes them with one `writev`; `poll` reads
//! what arrived (read data straight into the requests' buffers), answers R2Ts with H2CData,
//! retries retryable statuses within `io_retries`, and flushes once more.
//!
//! Recovery follows the controller (`ctrlr.rs`), checked with one atomic load per call:
//! - this connection failing (end of stream, socket error, a bad PDU from the target) drops
//!   it, keeps what was in flight to resubmit, and asks the controller to reconnect;
//! - while the controller reconnects (odd generation) the queue pair has no connection and
//!   holds submissions, in order, counted by `outstanding()`;
//! - once it reconnected (a newer even generation) the queue pair connects anew without
//!   waiting (a non-blocking connect, ICReq, Connect with the new CNTLID, each looked at once
//!   per call) and resubmits what it held: each request completes once, from one connection;
//! - fast I/O fail or a lost controller fail what is held with ENXIO
//!   (`IoError::Disconnected`); a detached controller with `IoError::Removed`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pmio::bdev::DriverQueue;
use pmio::request::{IoStatus, Op, Request};

use crate::ctrlr::{CtrlrInner, Namespace};
use crate::error::{IoError, NvmeError};
use crate::qpair::{NsFacts, QpairStats};
use crate::recovery::CtrlrLiveness;
use crate::spec::{ConnectCmd, Cqe, Sqe, nvm_opc};

use super::conn::{Conn, ConnError};
use super::ctrlr::CONNECT_TIMEOUT;
use super::sock::Connecting;

/// A connection being set up, one step looked at per call.
enum Setup {
    /// TCP connect in progress.
    Tcp(Connecting),
    /// ICReq sent, waiting for the ICResp.
    Ic(Conn),
    /// Fabrics Connect sent (CID = depth), waiting for its response.
    Connect(Conn),
}

/// The queue pair's connection.
enum Link {
    Up(Conn),
    Setup {
        step: Setup,
        deadline: Instant,
    },
    /// No connection: waiting for the controller to reconnect.
    Down,
    /// Every request fails with this, now and later.
    Dead(IoError),
}

/// What the queue pair knows of each tag.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// Sent on the current connection.
    sent: bool,
    /// Waiting in `held` for a connection.
    held: bool,
    retries: u8,
}

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
    slots: Vec<Slot>,
    /// Tags waiting for a connection, in submission order (capacity `depth`).
    held: Vec<u16>,
    scratch: Vec<u16>,
    /// Tags whose status is set, reported at the next poll (capacity `depth`).
    reap: VecDeque<u16>,
    /// Completions of one receive pass.
    cqes: Vec<(u16, Cqe)>,
    /// Per tag: the Dataset Management range a discard sends in-capsule.
    dsm: Vec<[u8; 16]>,
    outstanding: usize,
    stats: QpairStats,
    last_error: Option<IoError>,
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
        if ctrlr.detached.load(Ordering::Acquire) {
            return Err(NvmeError::Detached {
                ctrlr: ctrlr.name.clone(),
            });
        }
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
            slots: vec![Slot::default(); d],
            held: Vec::with_capacity(d),
            scratch: Vec::with_capacity(d),
            reap: VecDeque::with_capacity(d),
            cqes: Vec::with_capacity(d + 1),
            dsm: vec![[0; 16]; d],
            outstanding: 0,
            stats: QpairStats::default(),
            last_error: None,
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
        self.stats
    }

    /// Whether the queue pair has a connection now.
    pub fn connected(&self) -> bool {
        matches!(self.link, Link::Up(_))
    }

    /// The most recent per-I/O error, for diagnostics.
    pub fn last_error(&self) -> Option<IoError> {
        self.last_error
    }

    /// Follows the controller: one atomic load when nothing changed.
    #[inline]
    fn sync(&mut self, rqs: &mut [Request]) {
        let cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen != self.reset_gen || !matches!(self.link, Link::Up(_)) {
            self.sync_slow(rqs, true);
        }
    }

    /// The controller's generation moved, or there is no connection: goes down, connects
    /// anew, or fails everything, as the controller's state says; advances a connection set
    /// up one step. `reconnect`: a failed set-up asks the controller to reconnect (not while
    /// opening).
    #[cold]
    fn sync_slow(&mut self, rqs: &mut [Request], reconnect: bool) {
        if matches!(self.link, Link::Dead(_)) {
            return;
        }
        if self.ctrlr.detached.load(Ordering::Acquire) {
            return self.go_dead(rqs, IoError::Removed);
        }
        if self.ctrlr.liveness() != CtrlrLiveness::Alive {
            return self.go_dead(rqs, IoError::Disconnected);
        }
        let cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen != self.reset_gen {
            self.take_down();
            if cur_gen & 1 == 0 {
                self.reset_gen = cur_gen;
                self.start_setup(rqs, reconnect);
            }
        }
        if matches!(self.link, Link::Setup { .. }) {
            self.drive_setup(rqs, reconnect);
        }
        if !matches!(self.link, Link::Up(_))
            && !self.held.is_empty()
            && self.tcp().fast_io_fail.load(Ordering::Acquire)
        {
            self.fail_held(rqs, IoError::Disconnected);
        }
    }

    fn tcp(&self) -> &super::ctrlr::TcpCtrlr {
        self.ctrlr
            .tcp()
            .expect("a TCP queue pair has a TCP controller")
    }

    /// Starts connecting to the controller's current association.
    fn start_setup(&mut self, rqs: &mut [Request], reconnect: bool) {
        match Connecting::start(self.tcp().addr) {
            Ok(c) => {
                self.link = Link::Setup {
                    step: Setup::Tcp(c),
                    deadline: Instant::now() + CONNECT_TIMEOUT,
                };
            }
            Err(e) => self.conn_lost(rqs, ConnError::Io(e), reconnect),
        }
    }

    /// Advances the connection set-up by what happened since the last call.
    fn drive_setup(&mut self, rqs: &mut [Request], reconnect: bool) {
        let Link::Setup { step, deadline } = std::mem::replace(&mut self.link, Link::Down) else {
            return;
        };
        match self.setup_step(step) {
            Ok(Ok(conn)) => {
                log::debug!(
                    "{}: I/O queue {} connected (controller {})",
                    self.ctrlr.name,
                    self.qid,
                    self.tcp().cntlid.load(Ordering::Acquire)
                );
                self.link = Link::Up(conn);
                self.resubmit_held(rqs);
            }
            Ok(Err(_)) if Instant::now() > deadline => {
                let e = ConnError::Io(std::io::ErrorKind::TimedOut.into());
                self.conn_lost(rqs, e, reconnect);
            }
            Ok(Err(step)) => self.link = Link::Setup { step, deadline },
            Err(e) => self.conn_lost(rqs, e, reconnect),
        }
    }

    /// One look at a set-up step: the connection once up, else the step to look at next.
    fn setup_step(&mut self, step: Setup) -> Result<Result<Conn, Setup>, ConnError> {
        Ok(Err(match step {
            Setup::Tcp(c) => match c.poll()? {
                None => Setup::Tcp(c),
                Some(()) => {
                    let max = self.max_transfer.min(u64::from(u32::MAX)) as u32;
                    let conn = Conn::new(
                        c.into_stream()?,
                        self.depth as usize + 1,
                        self.tcp().digests(),
                        max,
                    );
                    Setup::Ic(conn)
                }
            },
            Setup::Ic(mut conn) => {
                conn.flush()?;
                conn.poll(|_, _| {})?;
                if conn.ready() {
                    let data = self.tcp().connect_data();
                    let cmd = ConnectCmd {
                        recfmt: 0,
                        qid: self.qid,
                        sqsize: self.sqsize,
                        cattr: 0,
                        kato_ms: 0,
                    };
                    conn.submit_connect(self.depth as u16, cmd.sqe(), &data.encode());
                    conn.flush()?;
                    Setup::Connect(conn)
                } else {
                    Setup::Ic(conn)
                }
            }
            Setup::Connect(mut conn) => {
                let cid = self.depth as u16;
                let mut resp = None;
                conn.flush()?;
                conn.poll(|c, cqe| {
                    if c == cid {
                        resp = Some(cqe);
                    }
                })?;
                match resp {
                    Some(cqe) if cqe.status().is_success() => return Ok(Ok(conn)),
                    Some(cqe) => {
                        log::error!(
                            "{}: I/O queue {} Connect refused: {}",
                            self.ctrlr.name,
                            self.qid,
                            cqe.status()
                        );
                        return Err(ConnError::Protocol {
                            what: "Fabrics Connect refused",
                            cid,
                        });
                    }
                    None => Setup::Connect(conn),
                }
            }
        }))
    }

    /// Drops the connection (if any); what was in flight waits for the next one, ahead of
    /// what was held already.
    fn take_down(&mut self) {
        if !matches!(self.link, Link::Up(_) | Link::Setup { .. }) {
            return;
        }
        self.link = Link::Down;
        self.scratch.clear();
        for (tag, slot) in self.slots.iter_mut().enumerate() {
            if slot.sent {
                slot.sent = false;
                slot.held = true;
                self.scratch.push(tag as u16);
            }
        }
        self.scratch.extend_from_slice(&self.held);
        std::mem::swap(&mut self.held, &mut self.scratch);
    }

    /// This connection failed: drop it and (unless opening) ask the controller to reconnect,
    /// when it is still the controller's current association.
    #[cold]
    fn conn_lost(&mut self, _rqs: &mut [Request], e: ConnError, reconnect: bool) {
        log::warn!(
            "{}: I/O queue {} connection failed: {e}",
            self.ctrlr.name,
            self.qid
        );
        self.take_down();
        self.link = Link::Down;
        if reconnect && self.ctrlr.reset_gen.load(Ordering::Acquire) == self.reset_gen {
            self.tcp().request_reset();
        }
    }

    /// Fails everything, now and later, with `err`.
    #[cold]
    fn go_dead(&mut self, rqs: &mut [Request], err: IoError) {
        log::debug!(
            "{}: I/O queue {}: failing every request ({err})",
            self.ctrlr.name,
            self.qid
        );
        self.take_down();
        self.link = Link::Dead(err);
        self.fail_held(rqs, err);
    }

    /// Fails every held request with `err` (their tags reported at the next poll).
    #[cold]
    fn fail_held(&mut self, rqs: &mut [Request], err: IoError) {
        let held = std::mem::take(&mut self.held);
        for &tag in &held {
            self.slots[usize::from(tag)] = Slot::default();
            if let Some(rq) = rqs.get_mut(usize::from(tag)) {
                rq.status = err.to_io_status();
            }
            self.stats.failed_dead += 1;
            self.stats.errors += 1;
            self.reap.push_back(tag);
        }
        self.last_error = Some(err);
        self.held = held;
        self.held.clear();
    }

    /// Sends what was held, in order, on the new connection.
    #[cold]
    fn resubmit_held(&mut self, rqs: &mut [Request]) {
        let held = std::mem::take(&mut self.held);
        for &tag in &held {
            self.slots[usize::from(tag)].held = false;
            self.outstanding -= 1;
            self.stats.recovered += 1;
            self.start(rqs, tag);
        }
        self.held = held;
        self.held.clear();
        self.flush(rqs);
    }

    /// Sends what is queued; a failure drops the connection.
    fn flush(&mut self, rqs: &mut [Request]) {
        if let Link::Up(conn) = &mut self.link
            && let Err(e) = conn.flush()
        {
            self.conn_lost(rqs, e, true);
        }
    }

    /// The slot index of `tag` when it can be submitted; otherwise the request is rejected
    /// (a tag beyond the depth) or ignored (already outstanding), and `None`.
    fn free_tag(&mut self, rqs: &mut [Request], tag: u16) -> Option<usize> {
        let idx = usize::from(tag);
        if idx >= self.slots.len() || idx >= rqs.len() {
            let depth = self.depth;
            self.reject(rqs, tag, IoError::BadTag { tag, depth });
            return None;
        }
        let s = self.slots[idx];
        if s.sent || s.held {
            log::error!(
                "{}: request {tag} submitted while outstanding; ignored",
                self.ctrlr.name
            );
            return None;
        }
        Some(idx)
    }

    /// Queues the command of `tag` on the connection (counted as outstanding).
    #[inline]
    fn start(&mut self, rqs: &mut [Request], tag: u16) {
        let Some(idx) = self.free_tag(rqs, tag) else {
            return;
        };
        let rq = &rqs[idx];
        let built = self.build(rq);
        let Link::Up(conn) = &mut self.link else {
            unreachable!("commands start only on a connection");
        };
        match built {
            Ok((sqe, buf, len, read)) => {
                // SAFETY: the request's buffer (checked to hold `len` bytes) belongs to it
                // until it completes (`IoBuf`'s contract); a discard's range lives in
                // `self.dsm[idx]`, untouched while the tag is in flight.
                unsafe { conn.submit(tag, sqe, buf, len, read, true, self.in_capsule) };
                self.slots[idx].sent = true;
                self.outstanding += 1;
                self.stats.submitted += 1;
            }
            Err(e) => self.reject(rqs, tag, e),
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

    /// Completes `tag` with `err` at the next poll (counted as outstanding until then).
    #[cold]
    fn reject(&mut self, rqs: &mut [Request], tag: u16, err: IoError) {
        log::debug!("{}: request {tag} rejected: {err}", self.ctrlr.name);
        self.last_error = Some(err);
        self.stats.rejected += 1;
        self.stats.errors += 1;
        if let Some(rq) = rqs.get_mut(usize::from(tag)) {
            rq.status = err.to_io_status();
        }
        self.reap.push_back(tag);
        self.outstanding += 1;
    }

    /// Holds a batch while there is no connection (fails it once I/O may not wait).
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

    /// The completion of command `cid`: the request's status, or a retry.
    #[inline]
    fn complete(&mut self, rqs: &mut [Request], cid: u16, cqe: Cqe) {
        let idx = usize::from(cid);
        if idx >= self.slots.len() || !self.slots[idx].sent || idx >= rqs.len() {
            // The connection completes only commands it was given.
            return;
        }
        let st = cqe.status();
        self.slots[idx].sent = false;
        if st.is_success() {
            rqs[idx].status = IoStatus::Success;
        } else if st.is_retryable() && self.slots[idx].retries < self.max_retries {
            self.slots[idx].retries += 1;
            self.stats.retries += 1;
            self.outstanding -= 1;
            self.start(rqs, cid);
            return;
        } else {
            self.stats.errors += 1;
            self.last_error = Some(IoError::Status(st));
            rqs[idx].status = IoStatus::Nvme(st.to_nvme_status());
        }
        self.slots[idx] = Slot::default();
        self.reap.push_back(cid);
    }
}

impl DriverQueue for TcpQpair {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.sync(rqs);
        match self.link {
            Link::Up(_) => {
                for &tag in tags {
                    self.start(rqs, tag);
                }
                self.flush(rqs);
            }
            Link::Dead(err) => {
                for &tag in tags {
                    self.stats.failed_dead += 1;
                    self.reject(rqs, tag, err);
                }
            }
            Link::Setup { .. } | Link::Down => {
                if self.tcp().fast_io_fail.load(Ordering::Acquire) {
                    for &tag in tags {
                        self.reject(rqs, tag, IoError::Disconnected);
                    }
                } else {
                    self.hold(rqs, tags);
                }
            }
        }
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        self.sync(rqs);
        if self.reap.len() < max
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
        let mut n = 0;
        while n < max {
            let Some(tag) = self.reap.pop_front() else {
                break;
            };
            self.outstanding -= 1;
            self.stats.completed += 1;
            done.push(tag);
            n += 1;
        }
        n
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}

impl Drop for TcpQpair {
    fn drop(&mut self) {
        if self.outstanding > 0 {
            log::warn!(
                "{}: closing I/O queue {} with {} request(s) outstanding",
                self.ctrlr.name,
                self.qid,
                self.outstanding
            );
        }
        // Dropping the connection closes it: the target frees the queue.
        self.link = Link::Down;
        self.ctrlr.free_qid(self.qid);
        self.ctrlr.open_qpairs.fetch_sub(1, Ordering::AcqRel);
    }
}
