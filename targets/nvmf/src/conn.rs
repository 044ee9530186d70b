//! One NVMe/TCP connection (a queue pair), owned by one reactor's poll group: the socket, the
//! receive buffer PDUs are parsed from in place, the queue of PDUs to send, and one slot per
//! command the host may have outstanding (the queue's size), indexed by transfer tag.
//!
//! A command's life: CapsuleCmd → (for a write above the in-capsule size: R2T, H2CData until
//! all of it arrived) → bdev I/O(s) → C2HData (reads) and/or CapsuleResp → slot free once its
//! response went out. A write is acknowledged only after all of its data arrived and the bdev
//! completed it.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};

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
/// Most iovecs per `writev` (a C2HData is two: at QD 128 a poll's responses fit in one call).
const MAX_IOV: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the host's ICReq.
    AwaitIcReq,
    /// Initialized: commands flow.
    Ready,
    /// No more input; the queued PDUs go out (bounded), then the socket closes once no bdev
    /// I/O of it is outstanding.
    Closing { since_ns: u64 },
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
enum SlotState {
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
struct Slot {
    state: SlotState,
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

impl Slot {
    fn free() -> Slot {
        Slot {
            state: SlotState::Free,
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

/// The body of an outgoing PDU.
enum Body {
    None,
    /// `len` bytes of slot `slot`'s buffer.
    Slot {
        slot: u16,
        len: u32,
    },
    Owned(Vec<u8>),
}

/// A PDU to send: head, body, data digest; `release` frees that slot once all of it is sent.
struct Out {
    head: pdu::HeadBuf,
    head_len: u16,
    body: Body,
    ddgst: [u8; 4],
    ddgst_len: u8,
    release: Option<u16>,
}

/// A protocol error that ends the connection.
#[derive(Debug)]
struct Fatal(String);

pub(crate) struct Conn {
    /// The reactor's watch of the socket (set once the group registered it).
    pub watch: Option<pmio_reactors::FdWatch>,
    /// Whether the watch includes writability.
    pub watching_write: bool,
    id: usize,
    sock: TcpStream,
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
    slots: Vec<Slot>,
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
    pub fn new(id: usize, sock: TcpStream, sh: &GroupShared, now_ns: u64) -> io::Result<Conn> {
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        let peer = sock.peer_addr()?;
        let local = sock.local_addr()?;
        let t = sh.tgt.transport().unwrap_or_default();
        let max_plen = pdu::max_plen_for_data(t.max_io_size.max(t.in_capsule_data_size));
        log::info!("nvmf: core {}: connection from {peer} to {local}", sh.core);
        Ok(Conn {
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
        use std::os::fd::AsRawFd;
        self.sock.as_raw_fd()
    }

    /// Whether this connection needs polling although its socket is quiet: commands wait for
    /// a bdev request, or it is closing.
    pub fn must_poll(&self) -> bool {
        !self.waiting.is_empty() || matches!(self.phase, Phase::Closing { .. })
    }

    /// Whether output waits for room in the socket.
    pub fn wants_write(&self) -> bool {
        !self.tx.is_empty()
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
        matches!(self.phase, Phase::Closing { .. }) && self.inflight == 0 && self.tx.is_empty()
    }

    /// Gives everything back (buffers, the target's records). Call once `is_finished`.
    pub fn finish(mut self, sh: &mut GroupShared) {
        for s in &mut self.slots {
            if let Some(b) = s.buf.take() {
                sh.pool.put(b);
            }
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
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
                self.close("no ICReq in time");
                return;
            }
            Phase::Closing { since_ns } if now_ns.saturating_sub(since_ns) > CLOSE_LINGER_NS => {
                // Whatever could not be sent is dropped; buffers of slots wait for their I/O.
                self.drop_tx();
                return;
            }
            Phase::Closing { .. } | Phase::AwaitIcReq => return,
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
                .position(|s| s.state == SlotState::Held && s.sqe.cid == cid);
            match held {
                Some(slot) => self.respond(slot as u16, 0, Status::SUCCESS, dw0, 0),
                None => log::error!("nvmf: AER {cid} completed by the controller but not held"),
            }
        }
    }

    fn drop_tx(&mut self) {
        while let Some(o) = self.tx.pop_front() {
            if let Some(s) = o.release {
                self.slots[usize::from(s)].state = SlotState::Free;
            }
        }
        self.tx_sent = 0;
    }

    // ---------------------------------------------------------------------------------------
    // Receiving.

    /// Reads what the socket has and handles every whole PDU in it. Returns whether anything
    /// arrived.
    pub fn receive(&mut self, sh: &mut GroupShared, now_ns: u64) -> bool {
        if matches!(self.phase, Phase::Closing { .. }) {
            return false;
        }
        let _ = now_ns;
        let mut busy = false;
        // At most two reads a poll: a connection that streams cannot starve the others.
        for _ in 0..2 {
            if self.rx_start == self.rx_end {
                self.rx_start = 0;
                self.rx_end = 0;
            } else if self.rx_end == self.rx.len() {
                self.rx.copy_within(self.rx_start..self.rx_end, 0);
                self.rx_end -= self.rx_start;
                self.rx_start = 0;
            }
            let n = match self.sock.read(&mut self.rx[self.rx_end..]) {
                Ok(0) => {
                    self.close("the host closed the connection");
                    return true;
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close(&format!("read: {e}"));
                    return true;
                }
            };
            busy = true;
            self.rx_end += n;
            if let Err(Fatal(why)) = self.handle_pdus(sh) {
                self.close(&why);
                return true;
            }
            if matches!(self.phase, Phase::Closing { .. }) || n < self.rx.len() / 2 {
                break;
            }
        }
        busy
    }

    /// Handles every whole PDU in the receive buffer.
    fn handle_pdus(&mut self, sh: &mut GroupShared) -> Result<(), Fatal> {
        while !matches!(self.phase, Phase::Closing { .. }) {
            let buf = &self.rx[self.rx_start..self.rx_end];
            let parsed = pdu::parse(buf, &self.link);
            let (header, data_range, used) = match parsed {
                Ok(None) => return Ok(()),
                Ok(Some((p, used))) => {
                    let off = p.data.as_ptr() as usize - buf.as_ptr() as usize;
                    (p.header, off..off + p.data.len(), used)
                }
                Err(e) => {
                    // A damaged data digest costs one command, not the stream: go on with
                    // the PDUs behind it.
                    self.pdu_error(sh, &e)?;
                    continue;
                }
            };
            let start = self.rx_start;
            self.rx_start += used;
            let data = start + data_range.start..start + data_range.end;
            self.handle_pdu(sh, header, data, start)?;
        }
        Ok(())
    }

    /// Answers a PDU the codec refused, as the spec says.
    fn pdu_error(&mut self, sh: &mut GroupShared, e: &pdu::PduError) -> Result<(), Fatal> {
        match e.action() {
            pdu::ErrorAction::Terminate(fatal) => {
                let echoed = pdu::offending_header(&self.rx[self.rx_start..self.rx_end]).to_vec();
                self.queue_owned(&fatal.term_req(Side::Controller), echoed);
                Err(Fatal(format!("bad PDU from the host: {e}")))
            }
            pdu::ErrorAction::Close => Err(Fatal(format!("bad PDU from the host: {e}"))),
            pdu::ErrorAction::FailCommand { cid, consumed } => {
                log::warn!("nvmf: connection {} ({}): {e}", self.id, self.peer);
                let start = self.rx_start;
                self.rx_start += consumed;
                let pdu = start..start + consumed;
                match e.pdu_type() {
                    Some(pdu::PduType::CapsuleCmd) => self.damaged_capsule(cid, pdu),
                    Some(pdu::PduType::H2CData) => self.damaged_h2c_data(sh, pdu),
                    _ => Err(Fatal(format!("bad PDU from the host: {e}"))),
                }
            }
        }
    }

    /// A command capsule whose in-capsule data failed its digest: the command is answered
    /// with Transient Transport Error and never executed. It takes a slot like any command (the
    /// host counts it outstanding until its response), so a host over its queue size is still
    /// caught.
    #[cold]
    fn damaged_capsule(&mut self, cid: u16, pdu: std::ops::Range<usize>) -> Result<(), Fatal> {
        // The codec checked the header (and its digest): the SQE is sound.
        let at = pdu.start + pdu::CH_LEN;
        let sqe_bytes: &[u8; spec::SQE_LEN] = self.rx[at..at + spec::SQE_LEN]
            .try_into()
            .expect("a capsule's header holds its SQE");
        let sqe = Sqe::from_bytes(sqe_bytes);
        debug_assert_eq!(sqe.cid, cid);
        if self.qp.is_none() {
            // A Connect: the host may send it again.
            self.send_cqe(cid, 0, TRANSIENT_TRANSPORT_ERROR, 0, 0);
            return Ok(());
        }
        let Some(slot) = self.free.pop() else {
            return Err(Fatal(format!(
                "the host sent more than the {} commands its queue holds",
                self.slots.len()
            )));
        };
        self.slots[usize::from(slot)] = Slot {
            state: SlotState::Executing,
            sqe,
            ..Slot::free()
        };
        let qid = self.qid();
        self.respond(slot, qid, TRANSIENT_TRANSPORT_ERROR, 0, 0);
        Ok(())
    }

    /// H2CData whose data failed its digest: taken like good data (offsets, LAST), but its
    /// command is then answered with Transient Transport Error instead of being executed
    /// (SPDK's rule): answering at once would leave the host's further H2CData for it without
    /// a command.
    #[cold]
    fn damaged_h2c_data(
        &mut self,
        sh: &mut GroupShared,
        pdu: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        // The codec checked everything but the data digest (header, header digest, DATAL
        // against PLEN), so the fields are read as they stand (TP 8000's H2CData layout).
        let b = &self.rx[pdu.clone()];
        let le16 = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let le32 = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let d = pdu::H2CData {
            cccid: le16(H2C_CCCID),
            ttag: le16(H2C_TTAG),
            datao: le32(H2C_DATAO),
            last: b[1] & pdu::flags::LAST_PDU != 0,
        };
        let datal = le32(H2C_DATAL) as usize;
        let data_end = pdu.end - pdu::DIGEST_LEN;
        let data = data_end - datal..data_end;
        self.h2c_data(sh, &d, data, pdu.start, true)
    }

    fn handle_pdu(
        &mut self,
        sh: &mut GroupShared,
        header: Header,
        data: std::ops::Range<usize>,
        pdu_start: usize,
    ) -> Result<(), Fatal> {
        match (self.phase, header) {
            (Phase::AwaitIcReq, Header::IcReq(req)) => self.icreq(&req),
            (Phase::Ready, Header::CapsuleCmd(cmd)) => {
                let sqe = Sqe::from_bytes(&cmd.sqe);
                self.command(sh, sqe, data)
            }
            (Phase::Ready, Header::H2CData(d)) => self.h2c_data(sh, &d, data, pdu_start, false),
            (_, Header::H2CTermReq(t)) => Err(Fatal(format!(
                "the host terminated the connection (FES {:#x}, FEI {:#x})",
                t.fes, t.fei
            ))),
            (_, h) => {
                let fatal = pdu::FatalError {
                    fes: pdu::Fes::PduSequenceError,
                    fei: 0,
                };
                let echoed = pdu::offending_header(&self.rx[pdu_start..self.rx_end]).to_vec();
                self.queue_owned(&fatal.term_req(Side::Controller), echoed);
                Err(Fatal(format!(
                    "{:?} not allowed in state {:?}",
                    h.pdu_type(),
                    self.phase
                )))
            }
        }
    }

    fn icreq(&mut self, req: &pdu::IcReq) -> Result<(), Fatal> {
        if req.pfv != 0 {
            let fatal = pdu::FatalError {
                fes: pdu::Fes::InvalidHeaderField,
                fei: 8,
            };
            self.queue_owned(&fatal.term_req(Side::Controller), Vec::new());
            return Err(Fatal(format!("ICReq PFV {} (only 0 exists)", req.pfv)));
        }
        self.link = self.link.negotiated(req.digests, req.hpda, pdu::Pda::ZERO);
        let resp = Header::IcResp(pdu::IcResp {
            pfv: 0,
            cpda: pdu::Pda::ZERO,
            digests: req.digests,
            maxh2cdata: self.max_io,
        });
        self.queue_owned(&resp, Vec::new());
        self.phase = Phase::Ready;
        log::debug!(
            "nvmf: connection {}: ICReq: header digest {}, data digest {}",
            self.id,
            req.digests.header,
            req.digests.data
        );
        Ok(())
    }

    fn qid(&self) -> u16 {
        self.qp.as_ref().map_or(0, |q| q.qid)
    }

    /// A new command capsule.
    fn command(
        &mut self,
        sh: &mut GroupShared,
        sqe: Sqe,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        if self.qp.is_none() {
            return self.connect(sh, sqe, data);
        }
        let Some(slot) = self.free.pop() else {
            return Err(Fatal(format!(
                "the host sent more than the {} commands its queue holds",
                self.slots.len()
            )));
        };
        let s = &mut self.slots[usize::from(slot)];
        *s = Slot {
            state: SlotState::Executing,
            sqe,
            ..Slot::free()
        };
        let qid = self.qid();
        if qid == 0 {
            self.admin_command(sh, slot, data);
            return Ok(());
        }
        self.io_command(sh, slot, data)
    }

    /// Fabrics Connect: the first command of every queue pair.
    fn connect(
        &mut self,
        sh: &mut GroupShared,
        sqe: Sqe,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        if sqe.opcode != spec::admin_opc::FABRICS || sqe.fctype() != spec::fctype::CONNECT {
            // One slot-less answer, then the connection goes: nothing else is allowed first.
            self.send_cqe(sqe.cid, 0, Status::COMMAND_SEQUENCE_ERROR, 0, 0);
            return Err(Fatal("a command before Fabrics Connect".into()));
        }
        let cmd = ConnectCmd::parse(&sqe);
        let answer = ConnectData::parse(&self.rx[data]).and_then(|d| self.admit(sh, &cmd, &d));
        match answer.map_err(<(Status, u32)>::from) {
            Ok(cntlid) => {
                let dw0 = spec::connect_success_dw0(cntlid);
                self.send_cqe(sqe.cid, cmd.qid, Status::SUCCESS, dw0, 0);
                Ok(())
            }
            Err((st, dw0)) => {
                log::warn!(
                    "nvmf: connection {} ({}): Connect refused: {st:?}",
                    self.id,
                    self.peer
                );
                self.send_cqe(sqe.cid, cmd.qid, st, dw0, 0);
                Ok(())
            }
        }
    }

    /// Checks a Connect and sets the queue pair up; the controller ID or the refusal.
    fn admit(
        &mut self,
        sh: &mut GroupShared,
        cmd: &ConnectCmd,
        d: &ConnectData,
    ) -> Result<u16, ConnectReject> {
        let tgt: &NvmfTarget = &sh.tgt;
        let mut g = tgt.lock();
        let opts = g.config.transport.clone().unwrap_or_default();
        cmd.check(&opts)?;
        let subsys = g.config.subsystem(&d.subnqn).cloned();
        let listening = subsys.as_ref().is_some_and(|s| {
            s.listeners.iter().any(|l| {
                let a = l.socket_addr();
                a.port() == self.local.port()
                    && (a.ip().is_unspecified() || a.ip() == self.local.ip())
            })
        });
        if subsys.is_some() && !listening {
            // The subsystem exists but not on this address: as if it did not.
            return Err(ConnectReject::invalid_data_field(connect_field::SUBNQN));
        }
        let entries = u32::from(cmd.sqsize) + 1;
        let cntlid = if cmd.qid == 0 {
            admit_admin_connect(subsys.as_ref(), d)?;
            let s = subsys.expect("admitted");
            let Some(cntlid) = NvmfTarget::alloc_cntlid(&mut g, &s) else {
                return Err(ConnectReject::new(Status::CONNECT_CONTROLLER_BUSY));
            };
            let now = pmio_reactors::now_ns();
            let ctrlr = Controller::new(cntlid, &s, d, cmd.kato_ms, &opts, now);
            g.ctrlrs.push(CtrlrRecord {
                subnqn: s.nqn.clone(),
                cntlid,
                hostnqn: d.hostnqn.clone(),
                hostid: d.hostid,
                core: sh.core,
                io_queues: ctrlr.io_queues_granted(),
                kato_ms: ctrlr.kato_ms(),
                qpairs: vec![QpairRecord {
                    qid: 0,
                    core: sh.core,
                    peer: self.peer,
                    local: self.local,
                }],
            });
            self.qp = Some(Qpair {
                qid: 0,
                cntlid,
                subnqn: s.nqn.clone(),
                ctrlr: Some(Box::new(ctrlr)),
            });
            sh.stats.admin_qpairs += 1;
            sh.stats.current_admin_qpairs += 1;
            cntlid
        } else {
            let s = subsys.ok_or(ConnectReject::invalid_data_field(connect_field::SUBNQN))?;
            let Some(rec) = g
                .ctrlrs
                .iter_mut()
                .find(|c| c.subnqn == s.nqn && c.cntlid == d.cntlid)
            else {
                return Err(ConnectReject::invalid_data_field(connect_field::CNTLID));
            };
            if rec.hostnqn != d.hostnqn {
                return Err(ConnectReject::invalid_data_field(connect_field::HOSTNQN));
            }
            if cmd.qid > rec.io_queues || rec.qpairs.iter().any(|q| q.qid == cmd.qid) {
                return Err(ConnectReject::new(Status::INVALID_QUEUE_IDENTIFIER));
            }
            rec.qpairs.push(QpairRecord {
                qid: cmd.qid,
                core: sh.core,
                peer: self.peer,
                local: self.local,
            });
            self.qp = Some(Qpair {
                qid: cmd.qid,
                cntlid: d.cntlid,
                subnqn: s.nqn.clone(),
                ctrlr: None,
            });
            sh.stats.io_qpairs += 1;
            sh.stats.current_io_qpairs += 1;
            d.cntlid
        };
        drop(g);
        self.slots = (0..entries).map(|_| Slot::free()).collect();
        self.free = (0..entries as u16).rev().collect();
        log::info!(
            "nvmf: connection {} ({}): {} queue {} of controller {cntlid} on {} for {} ({entries} entries)",
            self.id,
            self.peer,
            if cmd.qid == 0 { "admin" } else { "I/O" },
            cmd.qid,
            d.subnqn,
            d.hostnqn
        );
        Ok(cntlid)
    }

    /// An admin command (admin queue): fabrics Property Get/Set, or the controller's.
    fn admin_command(&mut self, sh: &mut GroupShared, slot: u16, data: std::ops::Range<usize>) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let qp = self.qp.as_mut().expect("connected");
        let ctrlr = qp
            .ctrlr
            .as_mut()
            .expect("the admin queue has the controller");
        let now = pmio_reactors::now_ns();
        let mut cc_change = CcChange::None;
        let outcome = if sqe.opcode == spec::admin_opc::FABRICS {
            ctrlr.touch(now);
            let size8 = sqe.cdw10 & 7 == 1;
            let (status, v) = match sqe.fctype() {
                spec::fctype::PROPERTY_GET => match ctrlr.property_get(sqe.cdw11, size8) {
                    Ok(v) => (Status::SUCCESS, v),
                    Err(st) => (st, 0),
                },
                spec::fctype::PROPERTY_SET => {
                    let v = u64::from(sqe.cdw12) | u64::from(sqe.cdw13) << 32;
                    match ctrlr.property_set(sqe.cdw11, size8, v) {
                        Ok(change) => {
                            cc_change = change;
                            (Status::SUCCESS, 0)
                        }
                        Err(st) => (st, 0),
                    }
                }
                _ => (Status::INVALID_OPCODE, 0),
            };
            Some(AdminOutcome::Done {
                status,
                dw0: v as u32,
                dw1: (v >> 32) as u32,
                data: Vec::new(),
            })
        } else {
            let cfg = sh.tgt.config();
            cfg.subsystem(&qp.subnqn).map(|subsys| {
                let out = ctrlr.admin(&sqe, &self.rx[data], subsys, &cfg.subsystems, now);
                if sqe.opcode == spec::admin_opc::SET_FEATURES {
                    sh.tgt
                        .set_io_queues(&qp.subnqn, qp.cntlid, ctrlr.io_queues_granted());
                }
                out
            })
        };
        if matches!(cc_change, CcChange::Reset | CcChange::Shutdown) {
            // The host's I/O queues end with a controller reset or shutdown (SPDK does the
            // same); the admin queue stays.
            let (nqn, cntlid) = (qp.subnqn.clone(), qp.cntlid);
            sh.tgt.disconnect_io_queues(&nqn, cntlid);
        }
        let (status, dw0, dw1, out) = match outcome {
            None => {
                self.respond(slot, 0, Status::INTERNAL_ERROR, 0, 0);
                self.close("its subsystem was deleted");
                return;
            }
            Some(AdminOutcome::Held) => {
                self.slots[usize::from(slot)].state = SlotState::Held;
                return;
            }
            Some(AdminOutcome::Done {
                status,
                dw0,
                dw1,
                data,
            }) => (status, dw0, dw1, data),
        };
        if !out.is_empty() && status.is_success() {
            let mut out = out;
            out.truncate(sqe.sgl_len() as usize);
            let c2h = Header::C2HData(pdu::C2HData {
                cccid: sqe.cid,
                datao: 0,
                last: true,
                success: false,
            });
            self.queue_owned(&c2h, out);
        }
        self.respond(slot, 0, status, dw0, dw1);
    }

    /// An I/O command: checked against its namespace, then its data fetched (R2T) or its
    /// bdev I/O started.
    fn io_command(
        &mut self,
        sh: &mut GroupShared,
        slot: u16,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        let qid = self.qid();
        let sqe = self.slots[usize::from(slot)].sqe;
        let subnqn = &self.qp.as_ref().expect("connected").subnqn;
        let Some(ns) = sh.ns.get(subnqn).and_then(|m| m.get(&sqe.nsid)).copied() else {
            self.respond(slot, qid, Status::INVALID_NAMESPACE, 0, 0);
            return Ok(());
        };
        let len = match io_shape(&sqe, &ns, self.max_io) {
            Ok(len) => len,
            Err(st) => {
                self.respond(slot, qid, st, 0, 0);
                return Ok(());
            }
        };
        let in_capsule = data.end - data.start;
        let s = &mut self.slots[usize::from(slot)];
        s.ns = Some(ns);
        s.len = len;
        let host_to_ctrlr = matches!(
            sqe.opcode,
            spec::nvm_opc::WRITE | spec::nvm_opc::DATASET_MANAGEMENT
        );
        if len == 0 {
            if in_capsule != 0 {
                return Err(Fatal("data for a command that carries none".into()));
            }
            self.start(sh, slot);
            return Ok(());
        }
        let (buf, grew) = sh
            .pool
            .get()
            .map_err(|e| Fatal(format!("no buffer memory: {e}")))?;
        if grew {
            sh.register_pool();
        }
        let s = &mut self.slots[usize::from(slot)];
        s.buf = Some(buf);
        if !host_to_ctrlr {
            if in_capsule != 0 {
                return Err(Fatal("data in the capsule of a read".into()));
            }
            self.start(sh, slot);
            return Ok(());
        }
        if sqe.sgl_type() == spec::sgl_type::DATA_BLOCK_OFFSET {
            if in_capsule != len as usize || len > self.in_capsule {
                self.respond(slot, qid, Status::DATA_SGL_LENGTH_INVALID, 0, 0);
                return Ok(());
            }
            let bytes = &self.rx[data];
            s.buf.as_mut().expect("set").fill(0, bytes);
            s.got = len;
            self.start(sh, slot);
            return Ok(());
        }
        if in_capsule != 0 {
            return Err(Fatal("in-capsule data with a transport SGL".into()));
        }
        // Ask for all of it at once: Linux's host allows one R2T per command.
        s.state = SlotState::AwaitData;
        let r2t = Header::R2T(pdu::R2T {
            cccid: sqe.cid,
            ttag: slot,
            r2to: 0,
            r2tl: len,
        });
        self.queue_head(&r2t);
        Ok(())
    }

    /// Write data for an R2T; `damaged` data (a wrong data digest) is counted but not kept,
    /// and fails its command once all of it arrived. H2CData that names no command awaiting
    /// data, or data outside what the R2T asked for, ends the connection with a C2HTermReq
    /// (Invalid Header Field naming TTAG or CCCID, as SPDK; Data Transfer Out of Range).
    fn h2c_data(
        &mut self,
        sh: &mut GroupShared,
        d: &pdu::H2CData,
        data: std::ops::Range<usize>,
        pdu_start: usize,
        damaged: bool,
    ) -> Result<(), Fatal> {
        let n = (data.end - data.start) as u32;
        let refusal = match self.slots.get(usize::from(d.ttag)) {
            Some(s) if s.state == SlotState::AwaitData && s.sqe.cid == d.cccid => {
                if d.datao != s.got || s.got + n > s.len || (d.last != (s.got + n == s.len)) {
                    Some((
                        pdu::Fes::DataOutOfRange,
                        0,
                        format!(
                            "H2CData offset {} length {n} (last {}) for command {} with {} of \
                             {} bytes",
                            d.datao, d.last, d.cccid, s.got, s.len
                        ),
                    ))
                } else {
                    None
                }
            }
            Some(s) if s.state == SlotState::AwaitData => Some((
                pdu::Fes::InvalidHeaderField,
                H2C_CCCID as u32,
                format!(
                    "H2CData for command {} with the tag {} of command {}",
                    d.cccid, d.ttag, s.sqe.cid
                ),
            )),
            _ => Some((
                pdu::Fes::InvalidHeaderField,
                H2C_TTAG as u32,
                format!(
                    "H2CData for command {} with tag {}, which awaits no data",
                    d.cccid, d.ttag
                ),
            )),
        };
        if let Some((fes, fei, why)) = refusal {
            let echoed = pdu::offending_header(&self.rx[pdu_start..self.rx_end]).to_vec();
            let fatal = pdu::FatalError { fes, fei };
            self.queue_owned(&fatal.term_req(Side::Controller), echoed);
            return Err(Fatal(why));
        }
        let qid = self.qid();
        let s = &mut self.slots[usize::from(d.ttag)];
        if damaged {
            s.status = TRANSIENT_TRANSPORT_ERROR;
        } else {
            let off = s.got as usize;
            s.buf
                .as_mut()
                .expect("a write awaiting data has its buffer")
                .fill(off, &self.rx[data]);
        }
        s.got += n;
        if s.got == s.len {
            s.state = SlotState::Executing;
            if s.status.is_success() {
                self.start(sh, d.ttag);
            } else {
                let st = s.status;
                self.respond(d.ttag, qid, st, 0, 0);
            }
        }
        Ok(())
    }

    /// Starts the bdev I/O of command `slot` (all its data is here), or answers it.
    fn start(&mut self, sh: &mut GroupShared, slot: u16) {
        let qid = self.qid();
        let s = &mut self.slots[usize::from(slot)];
        let ns = s.ns.expect("checked");
        let sqe = s.sqe;
        let token = (self.id as u64) << 16 | u64::from(slot);
        let mut ios: [Io; 1] = [Io::default()];
        let mut dsm: Vec<Io> = Vec::new();
        let todo: &[Io] = match sqe.opcode {
            spec::nvm_opc::READ | spec::nvm_opc::WRITE => {
                let op = if sqe.opcode == spec::nvm_opc::READ {
                    Op::Read
                } else {
                    Op::Write
                };
                ios[0] = Io {
                    op,
                    lba: slba(&sqe),
                    nblocks: nlb(&sqe),
                    buf: s.buf.as_ref().expect("data command").io(s.len),
                    token,
                    ..Io::default()
                };
                &ios
            }
            spec::nvm_opc::FLUSH => {
                if !ns.ops.contains(Op::Flush) {
                    // Nothing volatile to write back.
                    self.respond(slot, qid, Status::SUCCESS, 0, 0);
                    return;
                }
                ios[0] = Io {
                    op: Op::Flush,
                    token,
                    ..Io::default()
                };
                &ios
            }
            spec::nvm_opc::WRITE_ZEROES => {
                ios[0] = Io {
                    op: Op::WriteZeroes,
                    lba: slba(&sqe),
                    nblocks: nlb(&sqe),
                    token,
                    ..Io::default()
                };
                &ios
            }
            spec::nvm_opc::DATASET_MANAGEMENT => {
                if sqe.cdw11 & (1 << 2) == 0 {
                    // Only hints (no deallocate): nothing to do.
                    self.respond(slot, qid, Status::SUCCESS, 0, 0);
                    return;
                }
                let ranges = s
                    .buf
                    .as_ref()
                    .expect("DSM has data")
                    .bytes(0, s.len as usize);
                for r in ranges.chunks_exact(16) {
                    let nlb = u32::from_le_bytes(r[4..8].try_into().expect("16-byte range"));
                    let slba = u64::from_le_bytes(r[8..16].try_into().expect("16-byte range"));
                    if nlb == 0 {
                        continue;
                    }
                    if slba
                        .checked_add(u64::from(nlb))
                        .is_none_or(|e| e > ns.num_blocks)
                    {
                        self.respond(slot, qid, Status::LBA_OUT_OF_RANGE, 0, 0);
                        return;
                    }
                    dsm.push(Io {
                        op: Op::Discard,
                        lba: slba,
                        nblocks: nlb,
                        token,
                        ..Io::default()
                    });
                }
                if dsm.is_empty() {
                    self.respond(slot, qid, Status::SUCCESS, 0, 0);
                    return;
                }
                &dsm
            }
            _ => unreachable!("io_shape refuses other opcodes"),
        };
        let s = &mut self.slots[usize::from(slot)];
        s.state = SlotState::Executing;
        let q = &mut sh.queues[ns.queue].q;
        for io in todo {
            match q.submit(&mut sh.plug, io) {
                Ok(_) => {
                    s.pending += 1;
                    self.inflight += 1;
                    sh.stats.pending_bdev_io += 1;
                }
                Err(e) if e.is_busy() && s.pending == 0 && todo.len() == 1 => {
                    s.state = SlotState::Waiting;
                    self.waiting.push_back(slot);
                    return;
                }
                Err(e) => {
                    log::warn!("nvmf: connection {}: command {}: {e}", self.id, sqe.cid);
                    if s.status.is_success() {
                        s.status = Status::INTERNAL_ERROR;
                    }
                }
            }
        }
        if s.pending == 0 {
            let st = s.status;
            self.respond(slot, qid, st, 0, 0);
        }
    }

    /// Starts the commands that found their bdev queue full. Returns whether any started.
    pub fn retry_waiting(&mut self, sh: &mut GroupShared) -> bool {
        let mut any = false;
        for _ in 0..self.waiting.len() {
            let Some(slot) = self.waiting.pop_front() else {
                break;
            };
            self.start(sh, slot);
            if self.slots[usize::from(slot)].state == SlotState::Waiting {
                // Still full: keep the order, try again next poll.
                let last = self.waiting.pop_back().expect("just pushed");
                self.waiting.push_front(last);
                break;
            }
            any = true;
        }
        any
    }

    /// A bdev I/O of command `slot` completed.
    pub fn io_done(&mut self, slot: u16, st: IoStatus, sh: &mut GroupShared) {
        sh.stats.completed_nvme_io += 1;
        self.inflight -= 1;
        let qid = self.qid();
        let Some(s) = self.slots.get_mut(usize::from(slot)) else {
            log::error!("nvmf: completion for slot {slot} of connection {}", self.id);
            return;
        };
        s.pending -= 1;
        if !st.is_success() && s.status.is_success() {
            s.status = nvme_status(st);
        }
        if s.pending > 0 {
            return;
        }
        if matches!(self.phase, Phase::Closing { .. }) {
            if let Some(b) = s.buf.take() {
                sh.pool.put(b);
            }
            s.state = SlotState::Free;
            return;
        }
        let status = s.status;
        if status.is_success() && s.sqe.opcode == spec::nvm_opc::READ {
            let c2h = Header::C2HData(pdu::C2HData {
                cccid: s.sqe.cid,
                datao: 0,
                last: true,
                success: self.c2h_success,
            });
            let len = s.len;
            if self.c2h_success {
                s.state = SlotState::Responding;
                self.queue_data(&c2h, slot, len, Some(slot));
                return;
            }
            self.queue_data(&c2h, slot, len, None);
        } else if let Some(b) = s.buf.take() {
            // A write's data is no longer needed.
            sh.pool.put(b);
        }
        self.respond(slot, qid, status, 0, 0);
    }

    // ---------------------------------------------------------------------------------------
    // Sending.

    /// Queues the CapsuleResp of command `slot` and frees the slot once it is sent.
    fn respond(&mut self, slot: u16, qid: u16, status: Status, dw0: u32, dw1: u32) {
        let s = &mut self.slots[usize::from(slot)];
        s.state = SlotState::Responding;
        let cid = s.sqe.cid;
        let cqe = Cqe {
            sqid: qid,
            ..Cqe::new(cid, status, dw0, dw1)
        };
        let h = Header::CapsuleResp(pdu::CapsuleResp {
            cqe: cqe.to_bytes(),
        });
        self.queue(&h, Body::None, Some(slot));
    }

    /// A CapsuleResp that belongs to no slot (Connect, or a refused first command).
    fn send_cqe(&mut self, cid: u16, qid: u16, status: Status, dw0: u32, dw1: u32) {
        let cqe = Cqe {
            sqid: qid,
            ..Cqe::new(cid, status, dw0, dw1)
        };
        let h = Header::CapsuleResp(pdu::CapsuleResp {
            cqe: cqe.to_bytes(),
        });
        self.queue(&h, Body::None, None);
    }

    fn queue_head(&mut self, h: &Header) {
        self.queue(h, Body::None, None);
    }

    fn queue_owned(&mut self, h: &Header, data: Vec<u8>) {
        self.queue(h, Body::Owned(data), None);
    }

    fn queue_data(&mut self, h: &Header, slot: u16, len: u32, release: Option<u16>) {
        self.queue(h, Body::Slot { slot, len }, release);
    }

    fn queue(&mut self, h: &Header, body: Body, release: Option<u16>) {
        let data_len = match &body {
            Body::None => 0,
            Body::Slot { len, .. } => *len as usize,
            Body::Owned(v) => v.len(),
        };
        let mut head = [0u8; pdu::MAX_HEAD_LEN];
        let enc = match pdu::encode(h, data_len, &self.link, &mut head) {
            Ok(e) => e,
            Err(e) => {
                // Our own mistake: say so loudly, and end the connection rather than send junk.
                log::error!("nvmf: connection {}: cannot encode {h:?}: {e}", self.id);
                self.close("internal error encoding a PDU");
                return;
            }
        };
        let mut out = Out {
            head,
            head_len: enc.head_len as u16,
            body,
            ddgst: [0; 4],
            ddgst_len: 0,
            release,
        };
        if enc.data_digest {
            out.ddgst = pdu::data_digest([self.body_bytes(&out.body)]);
            out.ddgst_len = 4;
        }
        self.tx.push_back(out);
    }

    fn body_bytes<'a>(&'a self, b: &'a Body) -> &'a [u8] {
        match b {
            Body::None => &[],
            Body::Slot { slot, len } => self.slots[usize::from(*slot)]
                .buf
                .as_ref()
                .expect("a slot sending data has its buffer")
                .bytes(0, *len as usize),
            Body::Owned(v) => v,
        }
    }

    /// Writes what is queued, as much as the socket takes, in one `writev` per call (or a few
    /// while it takes everything). Returns whether anything was sent.
    pub fn send(&mut self, sh: &mut GroupShared) -> bool {
        let mut any = false;
        while !self.tx.is_empty() {
            let written = {
                let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                let mut skip = self.tx_sent;
                'items: for o in &self.tx {
                    let parts = [
                        &o.head[..usize::from(o.head_len)],
                        self.body_bytes(&o.body),
                        &o.ddgst[..usize::from(o.ddgst_len)],
                    ];
                    for p in parts {
                        if p.len() <= skip {
                            skip -= p.len();
                            continue;
                        }
                        iov[n] = IoSlice::new(&p[skip..]);
                        skip = 0;
                        n += 1;
                        if n == MAX_IOV {
                            break 'items;
                        }
                    }
                }
                let mut sock = &self.sock;
                match sock.write_vectored(&iov[..n]) {
                    Ok(w) => w,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.close(&format!("write: {e}"));
                        self.drop_tx();
                        return true;
                    }
                }
            };
            if written == 0 {
                break;
            }
            any = true;
            self.advance(written, sh);
        }
        any
    }

    /// Drops the PDUs `n` more bytes completed, freeing their slots.
    fn advance(&mut self, n: usize, sh: &mut GroupShared) {
        self.tx_sent += n;
        while let Some(o) = self.tx.front() {
            let len =
                usize::from(o.head_len) + self.body_bytes(&o.body).len() + usize::from(o.ddgst_len);
            if self.tx_sent < len {
                break;
            }
            self.tx_sent -= len;
            let o = self.tx.pop_front().expect("front exists");
            if let Some(slot) = o.release {
                self.release(slot, sh);
            }
        }
    }

    fn release(&mut self, slot: u16, sh: &mut GroupShared) {
        let s = &mut self.slots[usize::from(slot)];
        s.state = SlotState::Free;
        self.free.push(slot);
        if let Some(b) = s.buf.take() {
            sh.pool.put(b);
        }
    }
}

/// The data length of an I/O command and whether it is acceptable for namespace `ns`.
fn io_shape(sqe: &Sqe, ns: &NsRef, max_io: u32) -> Result<u32, Status> {
    let in_range = || {
        let end = slba(sqe).checked_add(u64::from(nlb(sqe)));
        if end.is_none_or(|end| end > ns.num_blocks) {
            Err(Status::LBA_OUT_OF_RANGE)
        } else {
            Ok(0)
        }
    };
    match sqe.opcode {
        spec::nvm_opc::READ | spec::nvm_opc::WRITE => {
            in_range()?;
            let bytes = u64::from(nlb(sqe)) * u64::from(ns.block_size);
            if bytes > u64::from(max_io) || nlb(sqe) > ns.max_transfer_blocks {
                return Err(Status::INVALID_FIELD);
            }
            if u64::from(sqe.sgl_len()) != bytes {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            Ok(bytes as u32)
        }
        spec::nvm_opc::FLUSH => Ok(0),
        spec::nvm_opc::WRITE_ZEROES if ns.ops.contains(Op::WriteZeroes) => in_range(),
        spec::nvm_opc::DATASET_MANAGEMENT if ns.ops.contains(Op::Discard) => {
            let bytes = ((sqe.cdw10 & 0xff) + 1) * 16;
            if sqe.sgl_len() != bytes {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            Ok(bytes)
        }
        _ => Err(Status::INVALID_OPCODE),
    }
}

/// Byte offsets in an H2CData PDU (TP 8000): the Field Error Information of a TermReq about
/// them, and where a damaged PDU's fields are read.
const H2C_CCCID: usize = 8;
const H2C_TTAG: usize = 10;
const H2C_DATAO: usize = 12;
const H2C_DATAL: usize = 16;

/// Transient Transport Error: a command whose data arrived damaged (data digest) may be
/// retried.
const TRANSIENT_TRANSPORT_ERROR: Status = Status::new(spec::sct::GENERIC, 0x22);

/// The first logical block of a Read, Write or Write Zeroes.
fn slba(sqe: &Sqe) -> u64 {
    u64::from(sqe.cdw10) | u64::from(sqe.cdw11) << 32
}

/// The number of logical blocks of a Read, Write or Write Zeroes (NLB is 0-based).
fn nlb(sqe: &Sqe) -> u32 {
    (sqe.cdw12 & 0xffff) + 1
}

/// The NVMe status a failed bdev I/O is answered with.
fn nvme_status(st: IoStatus) -> Status {
    match st {
        IoStatus::Nvme(n) if n.dnr => Status::new(n.sct, n.sc).with_dnr(),
        IoStatus::Nvme(n) => Status::new(n.sct, n.sc),
        _ => Status::INTERNAL_ERROR,
    }
}
