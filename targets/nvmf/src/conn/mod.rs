//! One NVMe/TCP connection (a queue pair), owned by one reactor's poll group: the socket, the
//! receive buffer PDUs are parsed from in place, the queue of PDUs to send, and one slot per
//! command the host may have outstanding (the queue's size), indexed by transfer tag.
//!
//! A command's life: CapsuleCmd → (for a write above the in-capsule size: R2T, H2CData until
//! all of it arrived) → bdev I/O(s) → C2HData (reads) and/or CapsuleResp → slot free once its
//! response went out. A write is acknowledged only after all of its data arrived and the bdev
//! completed it.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use pmio::{Io, IoStatus, Op};

use crate::buf::DataBuf;
use crate::ctrlr::{
    AdminOutcome, CcChange, ConnectCmd, ConnectData, ConnectReject, Controller,
    admit_admin_connect, connect_field,
};
use crate::group::{GroupShared, NsRef};
use crate::pdu::{self, Header, Link, Side};
use crate::spec::{self, Cqe, Sqe, Status};
use crate::tgt::{CtrlrRecord, NvmfTarget, QpairRecord};

/// The ICReq must come within this long of the connection (Linux's host waits 10 s for the
/// answer; a peer that sends nothing is not kept).
const ICREQ_TIMEOUT_NS: u64 = 10_000_000_000;
/// How long a closing connection tries to get its last PDUs (a TermReq) out.
const CLOSE_LINGER_NS: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the host's ICReq.
    AwaitIcReq,
    /// Initialized: commands flow.
    Ready,
    /// An I/O queue's Connect waits for its controller's verdict, asked of the reactor that
    /// owns the controller by message; nothing else is read meanwhile.
    Connecting(PendingConnect),
    /// No more input; the queued PDUs go out (bounded), then the socket closes once no bdev
    /// I/O of it is outstanding.
    Closing { since_ns: u64 },
}

/// An I/O-queue Connect between the question to the controller's reactor and its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingConnect {
    cid: u16,
    qid: u16,
    cntlid: u16,
    sqsize: u16,
}

/// An H2CData read straight into its command's buffer (see `Conn::start_direct`).
#[derive(Clone, Copy, Debug)]
struct Direct {
    ttag: u16,
    /// Where this PDU's data starts in the command's buffer.
    base: usize,
    len: usize,
    /// Bytes of it in place.
    placed: usize,
    /// A data digest follows the data (in the receive buffer).
    digest: bool,
}

/// What a queue pair is, once its Fabrics Connect succeeded.
struct Qpair {
    qid: u16,
    cntlid: u16,
    subnqn: String,
    /// The admin queue holds its controller's admin state.
    ctrlr: Option<Box<Controller>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmdState {
    Free,
    /// Waiting for H2CData (`got` of `len` bytes arrived).
    AwaitData,
    /// Waiting for a free bdev request (the bdev queue was full).
    Waiting,
    /// Bdev I/O in flight (`pending` of them).
    Executing,
    /// Held by the controller (an Asynchronous Event Request).
    Held,
    /// Its response is queued; freed when it has been sent.
    Responding,
}

/// One command of the queue.
struct CmdSlot {
    state: CmdState,
    sqe: Sqe,
    ns: Option<NsRef>,
    /// Bytes of data the command moves.
    len: u32,
    /// Bytes of write data received.
    got: u32,
    buf: Option<DataBuf>,
    /// Bdev I/Os outstanding.
    pending: u16,
    /// The first error of its bdev I/Os.
    status: Status,
}

impl CmdSlot {
    fn free() -> CmdSlot {
        CmdSlot {
            state: CmdState::Free,
            sqe: Sqe::default(),
            ns: None,
            len: 0,
            got: 0,
            buf: None,
            pending: 0,
            status: Status::SUCCESS,
        }
    }
}

mod admin;
mod auth;
mod connect;
mod io_cmd;
mod receive;
mod send;
mod stream;

use send::Out;
use stream::Stream;

/// A protocol error that ends the connection.
#[derive(Debug)]
struct Fatal(String);

pub(crate) struct Conn {
    /// Unique in its poll group (ids are reused, serials are not): a late message for a
    /// closed connection cannot reach its successor.
    pub serial: u64,
    /// The I/O-queue Connect waiting for its controller's verdict, with its subsystem: the
    /// queue is reserved in the controller's record until then.
    connecting: Option<(String, PendingConnect)>,
    /// The queue's in-band authentication (its host has DH-HMAC-CHAP keys): until it is done
    /// the queue carries nothing but Authentication Send/Receive.
    auth: Option<Box<pmio_auth::controller::ControllerAuth>>,
    /// The exchange an I/O-queue Connect waiting for its controller's verdict will start.
    pending_auth: Option<Box<pmio_auth::controller::ControllerAuth>>,
    /// The host NQN of the Connect (for re-authentication).
    hostnqn: Option<String>,
    /// This queue's namespaces sorted by NSID with the status their commands get through
    /// this queue's listener (ANA), as of the group's snapshot `ns_generation`.
    ns_table: Vec<(u32, NsRef, Option<Status>)>,
    /// The subsystem listener this queue came in on (set at Connect).
    listener: Option<crate::ListenAddr>,
    /// The H2CData being read straight into its command's buffer.
    direct: Option<Direct>,
    ns_generation: u64,
    /// The reactor's watch of the socket (set once the group registered it).
    pub watch: Option<pmio_reactors::FdWatch>,
    /// Whether the watch includes writability.
    pub watching_write: bool,
    id: usize,
    sock: Stream,
    peer: SocketAddr,
    local: SocketAddr,
    link: Link,
    phase: Phase,
    accepted_ns: u64,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    tx: VecDeque<Out>,
    /// Bytes of `tx.front()` already sent.
    tx_sent: usize,
    qp: Option<Qpair>,
    slots: Vec<CmdSlot>,
    free: Vec<u16>,
    /// Slots waiting for a bdev request, oldest first.
    waiting: VecDeque<u16>,
    /// Bdev I/Os outstanding (the connection is not dropped before they complete).
    inflight: u32,
    in_capsule: u32,
    max_io: u32,
    c2h_success: bool,
}

impl Conn {
    pub fn new(
        id: usize,
        serial: u64,
        sock: TcpStream,
        sh: &GroupShared,
        now_ns: u64,
        secure: bool,
    ) -> io::Result<Conn> {
        sock.set_nonblocking(true)?;
        sh.tgt.sock_options().apply(&sock)?;
        let peer = sock.peer_addr()?;
        let local = sock.local_addr()?;
        let sock = if secure {
            let lookup = crate::psk::TargetPsks {
                tgt: Arc::downgrade(&sh.tgt),
                local,
                peer,
            };
            let tls = pmio_tls::accept(sock, Arc::new(lookup)).map_err(io::Error::other)?;
            Stream::Tls(Box::new(tls))
        } else {
            Stream::Plain(sock)
        };
        let t = sh.tgt.transport().unwrap_or_default();
        let max_plen = pdu::max_plen_for_data(t.max_io_size.max(t.in_capsule_data_size));
        log::info!(
            "nvmf: core {}: connection from {peer} to {local}{}",
            sh.core,
            if secure { " (TLS)" } else { "" }
        );
        Ok(Conn {
            serial,
            connecting: None,
            auth: None,
            pending_auth: None,
            hostnqn: None,
            ns_table: Vec::new(),
            listener: None,
            direct: None,
            ns_generation: 0,
            watch: None,
            watching_write: false,
            id,
            sock,
            peer,
            local,
            link: Link::new(Side::Controller, max_plen),
            phase: Phase::AwaitIcReq,
            accepted_ns: now_ns,
            rx: vec![0; max_plen as usize + 4096],
            rx_start: 0,
            rx_end: 0,
            tx: VecDeque::new(),
            tx_sent: 0,
            qp: None,
            slots: Vec::new(),
            free: Vec::new(),
            waiting: VecDeque::new(),
            inflight: 0,
            in_capsule: t.in_capsule_data_size,
            max_io: t.max_io_size,
            c2h_success: t.c2h_success,
        })
    }

    /// The socket's descriptor (for the reactor's watch).
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.sock.fd()
    }

    /// Whether this connection needs polling although its socket is quiet: commands wait for
    /// a bdev request, decrypted input waits, or it is closing.
    pub fn must_poll(&self) -> bool {
        !self.waiting.is_empty()
            || matches!(self.phase, Phase::Closing { .. })
            || self.has_buffered_input()
    }

    /// Whether TLS holds decrypted input that the socket no longer reports (read it without
    /// waiting for readiness).
    pub fn has_buffered_input(&self) -> bool {
        matches!(self.phase, Phase::AwaitIcReq | Phase::Ready) && self.sock.buffered() > 0
    }

    /// Whether output waits for room in the socket.
    pub fn wants_write(&self) -> bool {
        !self.tx.is_empty() || self.sock.has_unsent()
    }

    /// The controller (`nqn`, `cntlid`) if this is its admin queue.
    pub fn controller(&self, nqn: &str, cntlid: u16) -> Option<&Controller> {
        let qp = self.qp.as_ref()?;
        if qp.cntlid == cntlid && qp.subnqn == nqn {
            qp.ctrlr.as_deref()
        } else {
            None
        }
    }

    /// Whether this is an admin queue.
    pub fn is_admin(&self) -> bool {
        self.qp.as_ref().is_some_and(|q| q.ctrlr.is_some())
    }

    /// Whether this is a queue pair of controller (`nqn`, `cntlid`).
    pub fn belongs_to(&self, nqn: &str, cntlid: u16) -> bool {
        self.qp
            .as_ref()
            .is_some_and(|q| q.cntlid == cntlid && q.subnqn == nqn)
    }

    /// Stops taking input; what is queued goes out, then the socket closes.
    pub fn close(&mut self, why: &str) {
        if !matches!(self.phase, Phase::Closing { .. }) {
            log::info!(
                "nvmf: connection {} ({}): closing: {why}",
                self.id,
                self.peer
            );
            self.phase = Phase::Closing {
                since_ns: pmio_reactors::now_ns(),
            };
        }
    }

    /// Whether the connection is closed and nothing of it is outstanding any more.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Closing { .. })
            && self.inflight == 0
            && self.tx.is_empty()
            && !self.sock.has_unsent()
    }

    /// Gives everything back (buffers, the target's records). Call once `is_finished`.
    pub fn finish(mut self, sh: &mut GroupShared) {
        for s in &mut self.slots {
            if let Some(b) = s.buf.take() {
                sh.pool.put(b);
            }
        }
        self.sock.shutdown();
        if let Some((nqn, p)) = self.connecting.take() {
            sh.tgt.remove_qpair(&nqn, p.cntlid, p.qid);
        }
        if let Some(qp) = self.qp.take() {
            if qp.ctrlr.is_some() {
                sh.stats.current_admin_qpairs -= 1;
                // The host's I/O queues go with the admin queue: found through the
                // controller's record, so before the record goes.
                sh.tgt.disconnect_io_queues(&qp.subnqn, qp.cntlid);
                sh.tgt.remove_ctrlr(&qp.subnqn, qp.cntlid);
            } else {
                sh.stats.current_io_qpairs -= 1;
                sh.tgt.remove_qpair(&qp.subnqn, qp.cntlid, qp.qid);
            }
        }
        log::info!("nvmf: connection {} ({}) closed", self.id, self.peer);
    }

    /// Periodic checks: the ICReq deadline, keep-alive, namespace news for the admin queue,
    /// and the close linger.
    pub fn housekeeping(&mut self, sh: &mut GroupShared, now_ns: u64) {
        match self.phase {
            Phase::AwaitIcReq if now_ns.saturating_sub(self.accepted_ns) > ICREQ_TIMEOUT_NS => {
                self.close("no ICReq in time (or no TLS handshake)");
                return;
            }
            Phase::Closing { since_ns } if now_ns.saturating_sub(since_ns) > CLOSE_LINGER_NS => {
                // Whatever could not be sent is dropped; buffers of slots wait for their I/O.
                self.drop_tx();
                return;
            }
            Phase::Closing { .. } | Phase::AwaitIcReq | Phase::Connecting(_) => return,
            Phase::Ready => {}
        }
        let Some(qp) = &mut self.qp else { return };
        let Some(ctrlr) = &mut qp.ctrlr else { return };
        if ctrlr.keep_alive_expired(now_ns) {
            log::warn!(
                "nvmf: controller {} of {}: keep-alive timeout expired",
                qp.cntlid,
                qp.subnqn
            );
            self.close("keep-alive timeout");
            return;
        }
        if !sh.config_changed {
            return;
        }
        let Some(subsys) = sh.tgt.config().subsystem(&qp.subnqn).cloned() else {
            self.close("its subsystem was deleted");
            return;
        };
        let mut events = Vec::new();
        while let Some(ev) = ctrlr.poll_events(&subsys) {
            events.push(ev);
        }
        for (cid, dw0) in events {
            let held = self
                .slots
                .iter()
                .position(|s| s.state == CmdState::Held && s.sqe.cid() == cid);
            match held {
                Some(slot) => self.respond(slot as u16, 0, Status::SUCCESS, dw0, 0),
                None => log::error!("nvmf: AER {cid} completed by the controller but not held"),
            }
        }
    }

    fn drop_tx(&mut self) {
        while let Some(o) = self.tx.pop_front() {
            if let Some(s) = o.release {
                self.slots[usize::from(s)].state = CmdState::Free;
            }
        }
        self.tx_sent = 0;
        self.sock.discard_unsent();
    }

    // ---------------------------------------------------------------------------------------
    // Receiving.

    fn qid(&self) -> u16 {
        self.qp.as_ref().map_or(0, |q| q.qid)
    }
}
