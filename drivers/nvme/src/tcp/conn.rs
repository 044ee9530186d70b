//! One NVMe/TCP connection as a host drives it (SPDK's `nvme_tcp.c`): the ICReq/ICResp
//! exchange, commands by CID with their data buffers, the send queue flushed by one `writev`,
//! and the receive side that parses each PDU header and puts data where its command wants it.
//!
//! Sending: a command is one CapsuleCmd PDU, with its write data in-capsule when it fits
//! (IOCCSZ); a larger write waits for the target's R2T, answered by H2CData PDUs of at most
//! MAXH2CDATA bytes each. Heads are encoded into the queue; data is sent from the request's
//! buffer where it lies, digests computed as the PDU is queued.
//!
//! Receiving (as SPDK's receive pipe): one read into a large receive buffer ([`RX_BUF_LEN`])
//! brings the PDUs of many commands, parsed from there; a C2HData's payload goes to its
//! command's buffer: what arrived in the receive buffer is copied, and when a read ended inside
//! a payload, the next read puts the payload's rest straight into the command's buffer and what
//! follows it into the receive buffer (one `recvmsg` with two iovecs). A read that came back
//! short of its room drained the socket: the poll stops there instead of asking again for
//! nothing.
//!
//! Anything wrong from the target (a bad PDU, a digest mismatch, a response to a command not
//! sent, data past a buffer, a TermReq, the end of the stream) is a [`ConnError`]: the owner
//! drops the connection; nothing here panics on the peer's bytes.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;

use crate::spec::pdu::{
    self, C2HData, CapsuleCmd, Digests, H2CData, HeadBuf, Header, IcReq, Link, R2T, Side,
};
use crate::spec::{Cqe, SglDesc, Sqe, Status};

use super::sock;

/// The receive buffer: one read takes the PDUs of about 30 4 KiB reads, a poll's worth at
/// pmio-perf's batch of 32 (what costs per I/O is the system call, not the copy of a small
/// payload).
pub(crate) const RX_BUF_LEN: usize = 128 * 1024;

/// The most iovecs one `writev` takes (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

/// Why a connection failed. Each is fatal for the connection (never for the process).
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("connection closed by the target")]
    Closed,
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("bad PDU from the target: {0}")]
    Pdu(#[from] pdu::PduError),
    #[error("the target terminated the connection (C2HTermReq FES {fes:#x}, FEI {fei:#x})")]
    TermReq { fes: u16, fei: u32 },
    #[error("{what} (command {cid:#06x})")]
    Protocol { what: &'static str, cid: u16 },
    #[error("data digest mismatch on command {cid:#06x}")]
    DataDigest { cid: u16 },
    #[error("ICResp refused: {0}")]
    IcResp(pdu::PduError),
    /// The TLS handshake failed, or its key could not be read (a wrong key, a target
    /// without the host's PSK, an alert).
    #[error("TLS: {0}")]
    Tls(String),
    /// In-band authentication failed (the controller's refusal names its reason).
    #[error("in-band authentication failed: {0}")]
    Auth(String),
    /// The subsystem asks for in-band authentication and no DH-HMAC-CHAP key was given.
    #[error("the subsystem requires DH-HMAC-CHAP authentication: attach with a --dhchap-key")]
    AuthRequired,
}

impl ConnError {
    fn protocol(what: &'static str, cid: u16) -> ConnError {
        ConnError::Protocol { what, cid }
    }
}

/// Where a command stands on this connection.
#[derive(Clone, Copy)]
struct Cmd {
    active: bool,
    /// Data flows to the host (C2HData), else to the controller.
    read: bool,
    /// A successful response must come with every byte of the data (I/O reads).
    exact: bool,
    buf: *mut u8,
    len: u32,
    /// Reads: bytes received; writes: bytes sent in-capsule or asked for by R2Ts.
    xfer: u32,
    /// PDUs of this command still in the send queue.
    queued: u16,
}

impl Cmd {
    const FREE: Cmd = Cmd {
        active: false,
        read: false,
        exact: false,
        buf: std::ptr::null_mut(),
        len: 0,
        xfer: 0,
        queued: 0,
    };
}

/// One PDU waiting to be sent: its head, then data from a command's buffer, then its data
/// digest.
struct TxPdu {
    head: HeadBuf,
    head_len: usize,
    data: *const u8,
    data_len: usize,
    ddgst: [u8; pdu::DIGEST_LEN],
    ddgst_len: usize,
    /// The command it belongs to (`None`: ICReq).
    cid: Option<u16>,
}

impl TxPdu {
    fn len(&self) -> usize {
        self.head_len + self.data_len + self.ddgst_len
    }
}

/// What the receive side is in the middle of.
#[derive(Clone, Copy)]
enum Rx {
    /// Looking for the next PDU header in the staging buffer.
    Head,
    /// A C2HData payload for `cid`: bytes `pos..end` of its buffer still to come.
    Data {
        cid: u16,
        start: u32,
        pos: u32,
        end: u32,
        digest: bool,
        success: bool,
    },
    /// The 4-byte data digest of that payload, `got` bytes of it in `bytes`.
    Digest {
        cid: u16,
        start: u32,
        end: u32,
        success: bool,
        bytes: [u8; pdu::DIGEST_LEN],
        got: usize,
    },
}

/// A host's NVMe/TCP connection.
pub(crate) struct Conn {
    sock: Transport,
    link: Link,
    /// The ICReq sent, until its ICResp arrives.
    ic: Option<IcReq>,
    maxh2cdata: u32,
    /// By CID.
    cmds: Vec<Cmd>,
    tx: VecDeque<TxPdu>,
    /// Bytes of the front PDU already sent.
    tx_sent: usize,
    iov: Vec<libc::iovec>,
    stage: Box<[u8]>,
    stage_at: usize,
    stage_end: usize,
    /// The last read in this poll came back short: the socket had no more.
    drained: bool,
    rx: Rx,
    /// The data of a Fabrics Connect in flight (in-capsule, sent from here).
    connect_data: Box<[u8; crate::spec::CONNECT_DATA_LEN]>,
    /// The message of an Authentication Send or Receive in flight (sent from, or received
    /// into, here).
    auth_data: Box<[u8; AUTH_DATA_LEN]>,
}

/// What a connection's bytes travel on.
enum Transport {
    /// Plain TCP: the system calls of `sock.rs`.
    Tcp(TcpStream),
    /// TLS 1.3 with a PSK: the handshake first (before the ICReq goes out), then records.
    Tls(Box<pmio_tls::TlsStream>),
}

impl Transport {
    fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Tcp(s) => s,
            Transport::Tls(t) => t.get_ref(),
        }
    }

    /// Advances a TLS handshake: whether PDUs may flow (at once for TCP).
    fn established(&mut self) -> Result<bool, ConnError> {
        match self {
            Transport::Tcp(_) => Ok(true),
            Transport::Tls(t) => t.handshake().map_err(|e| ConnError::Tls(e.to_string())),
        }
    }
}

/// Room for one in-band authentication message (the longest, a challenge or reply with an
/// ffdhe8192 value, is under 1.2 KiB); an Authentication Receive asks for this much.
pub(crate) const AUTH_DATA_LEN: usize = 4096;

// SAFETY: the raw pointers are request buffers handed over by the submitter for the life of
// their command (`pmio::IoBuf`'s contract) or into this connection's own boxes; the
// connection is used by one thread at a time (a reactor, or under the admin queue's lock).
unsafe impl Send for Conn {}

impl Conn {
    /// A connection on `sock` (connected, non-blocking) with room for commands `0..cids`;
    /// queues the ICReq asking for `digests`, sent once the TLS handshake with `tls` is done
    /// (at once without). PDUs carrying more than `max_data` bytes are refused.
    pub(crate) fn new(
        sock: TcpStream,
        cids: usize,
        digests: Digests,
        max_data: u32,
        tls: Option<pmio_tls::ClientPsk>,
    ) -> Result<Conn, ConnError> {
        let sock = match tls {
            Some(psk) => {
                log::debug!("nvme-tcp: TLS with identity {}", psk.identity);
                let t = pmio_tls::connect(sock, psk).map_err(|e| ConnError::Tls(e.to_string()))?;
                Transport::Tls(Box::new(t))
            }
            None => Transport::Tcp(sock),
        };
        let link = Link::new(Side::Host, pdu::max_plen_for_data(max_data));
        let ic = IcReq::new(digests);
        let mut conn = Conn {
            sock,
            link,
            ic: Some(ic),
            maxh2cdata: pdu::MIN_MAXH2CDATA,
            cmds: vec![Cmd::FREE; cids],
            tx: VecDeque::with_capacity(2 * cids + 1),
            tx_sent: 0,
            iov: Vec::with_capacity(IOV_MAX),
            stage: vec![0; RX_BUF_LEN].into_boxed_slice(),
            stage_at: 0,
            stage_end: 0,
            drained: false,
            rx: Rx::Head,
            connect_data: Box::new([0; crate::spec::CONNECT_DATA_LEN]),
            auth_data: Box::new([0; AUTH_DATA_LEN]),
        };
        conn.queue_head(&Header::IcReq(ic), None, std::ptr::null(), 0);
        Ok(conn)
    }

    /// Whether the ICResp arrived and was accepted: commands may be sent.
    pub(crate) fn ready(&self) -> bool {
        self.ic.is_none()
    }

    /// Whether command `cid` is in flight.
    pub(crate) fn active(&self, cid: u16) -> bool {
        self.cmds.get(usize::from(cid)).is_some_and(|c| c.active)
    }

    /// Queues command `sqe` as `cid` (its CID is set here). `buf`/`len` is its data: read
    /// into (`read`) or written from; writes of up to `in_capsule` bytes travel in the
    /// capsule, larger ones wait for R2Ts. `exact`: a successful read must have received all
    /// `len` bytes.
    ///
    /// # Safety
    /// `buf..buf + len` must stay valid (for writes by the connection when `read`) and
    /// untouched by anyone else until the command completes or the connection is dropped.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn submit(
        &mut self,
        cid: u16,
        mut sqe: Sqe,
        buf: *mut u8,
        len: u32,
        read: bool,
        exact: bool,
        in_capsule: u32,
    ) {
        let capsule = !read && len > 0 && len <= in_capsule;
        sqe.set_cid(cid);
        sqe.set_sgl(if capsule {
            SglDesc::in_capsule(len)
        } else {
            SglDesc::transport(len)
        });
        self.cmds[usize::from(cid)] = Cmd {
            active: true,
            read,
            exact,
            buf,
            len,
            xfer: if capsule { len } else { 0 },
            queued: 0,
        };
        let h = Header::CapsuleCmd(CapsuleCmd::new(&sqe));
        let data_len = if capsule { len as usize } else { 0 };
        self.queue_head(&h, Some(cid), buf, data_len);
    }

    /// Queues Fabrics Connect `sqe` as `cid` with its 1024 bytes of data in-capsule.
    pub(crate) fn submit_connect(
        &mut self,
        cid: u16,
        sqe: Sqe,
        data: &[u8; crate::spec::CONNECT_DATA_LEN],
    ) {
        *self.connect_data = *data;
        let ptr = self.connect_data.as_mut_ptr();
        // SAFETY: the data lives in this connection's own box, untouched until the next
        // Connect; 1024 bytes always travel in-capsule (fabrics commands do).
        unsafe { self.submit(cid, sqe, ptr, data.len() as u32, false, false, u32::MAX) };
    }

    /// Queues an Authentication Send of `msg` as `cid` (in-capsule, as fabrics commands go).
    pub(crate) fn submit_auth_send(&mut self, cid: u16, msg: &[u8]) {
        let len = msg.len().min(AUTH_DATA_LEN);
        self.auth_data[..len].copy_from_slice(&msg[..len]);
        let ptr = self.auth_data.as_mut_ptr();
        let sqe = crate::spec::auth_send_sqe(len as u32);
        // SAFETY: the message lives in this connection's own box, untouched until the next
        // authentication command, which is sent only after this one completed.
        unsafe { self.submit(cid, sqe, ptr, len as u32, false, false, u32::MAX) };
    }

    /// Queues an Authentication Receive as `cid`, into this connection's message room
    /// (cleared first: [`Conn::auth_data`] then holds the message and zeros).
    pub(crate) fn submit_auth_recv(&mut self, cid: u16) {
        self.auth_data.fill(0);
        let ptr = self.auth_data.as_mut_ptr();
        let sqe = crate::spec::auth_recv_sqe(AUTH_DATA_LEN as u32);
        // SAFETY: as for `submit_auth_send`: the box outlives the command, nobody else
        // touches it meanwhile.
        unsafe { self.submit(cid, sqe, ptr, AUTH_DATA_LEN as u32, true, false, 0) };
    }

    /// What the last Authentication Receive brought.
    pub(crate) fn auth_data(&self) -> &[u8] {
        &self.auth_data[..]
    }

    /// Encodes `h` into the send queue, followed by `data_len` bytes at `data` and its
    /// digest when negotiated.
    fn queue_head(&mut self, h: &Header, cid: Option<u16>, data: *const u8, data_len: usize) {
        let mut head = [0u8; pdu::MAX_HEAD_LEN];
        let enc = match pdu::encode(h, data_len, &self.link, &mut head) {
            Ok(e) => e,
            Err(e) => unreachable!("a host PDU the codec refuses: {e}"),
        };
        let (ddgst, ddgst_len) = if enc.data_digest {
            // SAFETY: the caller's contract: `data_len` readable bytes at `data`.
            let d = unsafe { std::slice::from_raw_parts(data, data_len) };
            (pdu::data_digest([d]), pdu::DIGEST_LEN)
        } else {
            ([0; pdu::DIGEST_LEN], 0)
        };
        if let Some(cid) = cid {
            self.cmds[usize::from(cid)].queued += 1;
        }
        self.tx.push_back(TxPdu {
            head,
            head_len: enc.head_len,
            data,
            data_len,
            ddgst,
            ddgst_len,
            cid,
        });
    }

    /// Sends what is queued with one `writev` (more only past [`IOV_MAX`] iovecs); what the
    /// socket does not take now stays queued for the next flush.
    pub(crate) fn flush(&mut self) -> Result<(), ConnError> {
        if !self.sock.established()? {
            return Ok(());
        }
        if let Transport::Tls(t) = &mut self.sock
            && t.has_unsent()
        {
            match t.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(ConnError::Tls(e.to_string())),
            }
        }
        while !self.tx.is_empty() {
            self.iov.clear();
            let mut total = 0;
            let mut skip = self.tx_sent;
            for p in &self.tx {
                if self.iov.len() + 3 > IOV_MAX {
                    break;
                }
                let parts = [
                    (p.head.as_ptr(), p.head_len),
                    (p.data, p.data_len),
                    (p.ddgst.as_ptr(), p.ddgst_len),
                ];
                for (ptr, len) in parts {
                    let cut = skip.min(len);
                    skip -= cut;
                    if len > cut {
                        self.iov.push(libc::iovec {
                            iov_base: ptr.wrapping_add(cut).cast_mut().cast(),
                            iov_len: len - cut,
                        });
                        total += len - cut;
                    }
                }
            }
            // SAFETY: heads and digests live in the queue, unchanged during the call; data
            // pointers are command buffers valid until their command completes.
            let n = match self.write_iov() {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            self.advance(n);
            if n < total {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One write of `self.iov`: a `writev`, or the TLS stream taking the bytes.
    fn write_iov(&mut self) -> io::Result<usize> {
        match &mut self.sock {
            // SAFETY: heads and digests live in the queue, unchanged during the call; data
            // pointers are command buffers valid until their command completes.
            Transport::Tcp(s) => unsafe { sock::writev(s, &self.iov) },
            Transport::Tls(t) => {
                let parts = self.iov.iter().map(|v| {
                    // SAFETY: as above, each iovec is `iov_len` readable bytes for the call.
                    unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) }
                });
                match t.write_parts(parts) {
                    // The stream still sends an earlier batch: as a full socket.
                    Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
                    other => other,
                }
            }
        }
    }

    /// `n` more bytes went out: drops the PDUs fully sent.
    fn advance(&mut self, mut n: usize) {
        while let Some(front) = self.tx.front() {
            let left = front.len() - self.tx_sent;
            if n < left {
                self.tx_sent += n;
                return;
            }
            n -= left;
            self.tx_sent = 0;
            if let Some(cid) = front.cid {
                self.cmds[usize::from(cid)].queued -= 1;
            }
            self.tx.pop_front();
        }
    }

    /// Whether PDUs wait in the send queue.
    pub(crate) fn tx_pending(&self) -> bool {
        !self.tx.is_empty() || matches!(&self.sock, Transport::Tls(t) if t.has_unsent())
    }

    /// Receives what the socket has, calling `done(cid, cqe)` for each completed command
    /// (a CapsuleResp, or a C2HData with SUCCESS: then the CQE is a plain success). R2Ts
    /// queue H2CData: flush afterwards.
    pub(crate) fn poll(&mut self, mut done: impl FnMut(u16, Cqe)) -> Result<(), ConnError> {
        if !self.sock.established()? {
            return Ok(());
        }
        self.drained = false;
        loop {
            let more = match self.rx {
                Rx::Head => self.rx_head(&mut done)?,
                Rx::Data { .. } => self.rx_data(&mut done)?,
                Rx::Digest { .. } => self.rx_digest(&mut done)?,
            };
            if !more {
                return Ok(());
            }
        }
    }

    /// Moves what is left in the receive buffer to its front: part of a header or of a data
    /// digest (payloads leave it as they arrive), a few hundred bytes at most.
    fn compact_stage(&mut self) {
        if self.stage_at > 0 {
            self.stage.copy_within(self.stage_at..self.stage_end, 0);
            self.stage_end -= self.stage_at;
            self.stage_at = 0;
        }
    }

    /// Reads more into the receive buffer; false when nothing is there now.
    fn fill_stage(&mut self) -> Result<bool, ConnError> {
        if self.drained {
            return Ok(false);
        }
        self.compact_stage();
        let room = &mut self.stage[self.stage_end..];
        let want = room.len();
        let read = match &mut self.sock {
            // SAFETY: `room` is this connection's own buffer.
            Transport::Tcp(s) => unsafe { sock::read_into(s, room.as_mut_ptr(), want) },
            Transport::Tls(t) => t.read(room),
        };
        match read {
            Ok(0) => Err(ConnError::Closed),
            Ok(n) => {
                self.stage_end += n;
                self.drained = n < want;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads the rest of a payload, `want` bytes, straight to `dst`, and what follows it into
    /// the (empty) receive buffer, in one call: the payload bytes that arrived.
    ///
    /// # Safety
    /// `dst..dst + want` must be valid for writes and not referenced elsewhere for the call.
    unsafe fn read_payload(
        &mut self,
        dst: *mut u8,
        want: usize,
    ) -> Result<Option<usize>, ConnError> {
        if self.drained {
            return Ok(None);
        }
        debug_assert_eq!(self.stage_at, self.stage_end);
        self.stage_at = 0;
        self.stage_end = 0;
        let iov = [
            libc::iovec {
                iov_base: dst.cast(),
                iov_len: want,
            },
            libc::iovec {
                iov_base: self.stage.as_mut_ptr().cast(),
                iov_len: self.stage.len(),
            },
        ];
        let read = match &mut self.sock {
            // SAFETY: `dst` per the contract; the second iovec is this connection's own buffer.
            Transport::Tcp(s) => unsafe { sock::readv(s, &iov) },
            Transport::Tls(t) => {
                // SAFETY: as above: both iovecs are valid for writes and referenced by
                // nothing else for the call.
                let (a, b) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(dst, want),
                        std::slice::from_raw_parts_mut(self.stage.as_mut_ptr(), self.stage.len()),
                    )
                };
                t.read_vectored(&mut [a, b])
            }
        };
        match read {
            Ok(0) => Err(ConnError::Closed),
            Ok(n) => {
                self.drained = n < want + self.stage.len();
                self.stage_end = n.saturating_sub(want);
                Ok(Some(n.min(want)))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Some(0)),
            Err(e) => Err(e.into()),
        }
    }

    fn staged(&self) -> &[u8] {
        &self.stage[self.stage_at..self.stage_end]
    }

    /// Parses the next PDU header (reading more when needed) and acts on it.
    fn rx_head(&mut self, done: &mut impl FnMut(u16, Cqe)) -> Result<bool, ConnError> {
        let head = match pdu::parse_head(self.staged(), &self.link)? {
            Some(h) => h,
            None => return self.fill_stage(),
        };
        // Every PDU but C2HData is whole once its header is (no data, or a TermReq's, which
        // is not needed).
        match head.header {
            Header::IcResp(resp) => {
                let Some(req) = self.ic.take() else {
                    return Err(ConnError::protocol("ICResp after set-up", 0));
                };
                resp.check(&req).map_err(ConnError::IcResp)?;
                self.link = self.link.after_ic(&req, &resp);
                self.maxh2cdata = resp.maxh2cdata;
                self.stage_at += head.plen;
            }
            _ if self.ic.is_some() => {
                return Err(ConnError::protocol("a PDU before the ICResp", 0));
            }
            Header::CapsuleResp(r) => {
                let cqe = r.completion();
                self.stage_at += head.plen;
                self.complete(cqe.cid, cqe, done)?;
            }
            Header::R2T(r) => {
                self.stage_at += head.plen;
                self.answer_r2t(&r)?;
            }
            Header::C2HData(d) => {
                let n = (head.data_end - head.data_start) as u32;
                self.check_c2h(&d, n)?;
                self.stage_at += head.data_start;
                self.rx = Rx::Data {
                    cid: d.cccid,
                    start: d.datao,
                    pos: d.datao,
                    end: d.datao + n,
                    digest: head.data_digest,
                    success: d.success,
                };
            }
            Header::C2HTermReq(t) => {
                return Err(ConnError::TermReq {
                    fes: t.fes,
                    fei: t.fei,
                });
            }
            // `parse_head` takes only what a controller sends.
            _ => return Err(ConnError::protocol("a PDU a host never receives", 0)),
        }
        Ok(true)
    }

    /// A C2HData header against its command: a read in flight, data in order and inside.
    fn check_c2h(&self, d: &C2HData, n: u32) -> Result<(), ConnError> {
        let cid = d.cccid;
        let cmd = match self.cmds.get(usize::from(cid)) {
            Some(c) if c.active && c.read => c,
            _ => return Err(ConnError::protocol("C2HData for a read not sent", cid)),
        };
        d.check(n, cmd.xfer, cmd.len)
            .map_err(|_| ConnError::protocol("C2HData past the buffer or out of order", cid))
    }

    /// Moves payload bytes into the command's buffer: those staged first, then straight from
    /// the socket.
    fn rx_data(&mut self, done: &mut impl FnMut(u16, Cqe)) -> Result<bool, ConnError> {
        let Rx::Data {
            cid,
            start,
            mut pos,
            end,
            digest,
            success,
        } = self.rx
        else {
            return Ok(false);
        };
        let buf = self.cmds[usize::from(cid)].buf;
        let staged = self.stage_end - self.stage_at;
        let want = (end - pos) as usize;
        let more = if want == 0 {
            true
        } else if staged > 0 {
            let n = staged.min(want);
            // SAFETY: `pos + n <= end <= len` (checked against the command), and the buffer
            // is the command's, valid for writes while it is in flight.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.stage.as_ptr().add(self.stage_at),
                    buf.add(pos as usize),
                    n,
                );
            }
            self.stage_at += n;
            pos += n as u32;
            true
        } else {
            // SAFETY: as above: `want` bytes from `pos` lie inside the command's buffer.
            match unsafe { self.read_payload(buf.add(pos as usize), want)? } {
                Some(n) => {
                    pos += n as u32;
                    true
                }
                None => false,
            }
        };
        if pos < end {
            self.rx = Rx::Data {
                cid,
                start,
                pos,
                end,
                digest,
                success,
            };
            return Ok(more);
        }
        self.cmds[usize::from(cid)].xfer = end;
        if digest {
            self.rx = Rx::Digest {
                cid,
                start,
                end,
                success,
                bytes: [0; pdu::DIGEST_LEN],
                got: 0,
            };
            return Ok(true);
        }
        self.rx = Rx::Head;
        if success {
            self.complete(cid, Cqe::new(cid, Status::SUCCESS, 0, 0), done)?;
        }
        Ok(true)
    }

    /// Collects a payload's data digest and checks it over the bytes where they landed.
    fn rx_digest(&mut self, done: &mut impl FnMut(u16, Cqe)) -> Result<bool, ConnError> {
        let Rx::Digest {
            cid,
            start,
            end,
            success,
            mut bytes,
            mut got,
        } = self.rx
        else {
            return Ok(false);
        };
        let staged = self.stage_end - self.stage_at;
        if staged == 0 {
            return self.fill_stage();
        }
        let n = staged.min(pdu::DIGEST_LEN - got);
        bytes[got..got + n].copy_from_slice(&self.stage[self.stage_at..self.stage_at + n]);
        self.stage_at += n;
        got += n;
        if got < pdu::DIGEST_LEN {
            self.rx = Rx::Digest {
                cid,
                start,
                end,
                success,
                bytes,
                got,
            };
            return Ok(true);
        }
        self.rx = Rx::Head;
        let buf = self.cmds[usize::from(cid)].buf;
        // SAFETY: `start..end` of the command's buffer was just written by this connection.
        let data =
            unsafe { std::slice::from_raw_parts(buf.add(start as usize), (end - start) as usize) };
        if pdu::data_digest([data]) != bytes {
            return Err(ConnError::DataDigest { cid });
        }
        if success {
            let cqe = Cqe::new(cid, Status::SUCCESS, 0, 0);
            self.complete(cid, cqe, done)?;
        }
        Ok(true)
    }

    /// Ends command `cid` with `cqe` (after checking it may end now) and reports it.
    fn complete(
        &mut self,
        cid: u16,
        cqe: Cqe,
        done: &mut impl FnMut(u16, Cqe),
    ) -> Result<(), ConnError> {
        let cmd = match self.cmds.get(usize::from(cid)) {
            Some(c) if c.active => *c,
            _ => return Err(ConnError::protocol("a response to a command not sent", cid)),
        };
        if cmd.queued > 0 {
            return Err(ConnError::protocol(
                "a response before the data was sent",
                cid,
            ));
        }
        if cmd.read && cmd.exact && cqe.status().is_success() && cmd.xfer != cmd.len {
            return Err(ConnError::protocol(
                "a read that succeeded short of its data",
                cid,
            ));
        }
        self.cmds[usize::from(cid)] = Cmd::FREE;
        done(cid, cqe);
        Ok(())
    }

    /// Queues the H2CData PDUs an R2T asks for (MAXH2CDATA bytes at most each).
    fn answer_r2t(&mut self, r: &R2T) -> Result<(), ConnError> {
        let cid = r.cccid;
        let cmd = match self.cmds.get(usize::from(cid)) {
            Some(c) if c.active && !c.read => *c,
            _ => return Err(ConnError::protocol("R2T for a write not sent", cid)),
        };
        r.check(cmd.xfer, cmd.len)
            .map_err(|_| ConnError::protocol("R2T outside its write", cid))?;
        let end = r.r2to + r.r2tl;
        let mut at = r.r2to;
        while at < end {
            let n = (end - at).min(self.maxh2cdata);
            let h = Header::H2CData(H2CData {
                cccid: cid,
                ttag: r.ttag,
                datao: at,
                last: at + n == end,
            });
            // Inside the buffer: checked against the command above.
            let data = cmd.buf.wrapping_add(at as usize);
            self.queue_head(&h, Some(cid), data, n as usize);
            at += n;
        }
        self.cmds[usize::from(cid)].xfer = end;
        Ok(())
    }

    /// Drives the connection until `cond` holds or `deadline` passes, sleeping in `poll(2)`
    /// between reads: for blocking callers only (attach, the controller's thread).
    pub(crate) fn wait(
        &mut self,
        deadline: std::time::Instant,
        mut done: impl FnMut(u16, Cqe),
        mut cond: impl FnMut(&Conn) -> bool,
    ) -> Result<bool, ConnError> {
        loop {
            self.flush()?;
            self.poll(&mut done)?;
            self.flush()?;
            if cond(self) {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let ms = if self.tx_pending() {
                1
            } else {
                left.as_millis().clamp(1, 10) as i32
            };
            sock::wait_readable(self.sock.tcp(), ms);
        }
    }
}
