//! Sending: PDUs queue up (head, a body borrowed from a command's buffer or owned, data digest)
//! and go out in one `writev` per poll; a command's slot is freed once its last PDU is sent.

use super::*;

/// Most iovecs per `writev` (a C2HData is two: at QD 128 a poll's responses fit in one call).
const MAX_IOV: usize = 256;

/// The body of an outgoing PDU.
pub(super) enum Body {
    None,
    /// `len` bytes of slot `slot`'s buffer.
    Slot {
        slot: u16,
        len: u32,
    },
    Owned(Vec<u8>),
}

/// A PDU to send: head, body, data digest; `release` frees that slot once all of it is sent.
pub(super) struct Out {
    head: pdu::HeadBuf,
    head_len: u16,
    body: Body,
    ddgst: [u8; 4],
    ddgst_len: u8,
    pub(super) release: Option<u16>,
}

impl Conn {
    /// Queues the CapsuleResp of command `slot` and frees the slot once it is sent.
    pub(super) fn respond(&mut self, slot: u16, qid: u16, status: Status, dw0: u32, dw1: u32) {
        let s = &mut self.slots[usize::from(slot)];
        s.state = CmdState::Responding;
        let cid = s.sqe.cid();
        let cqe = Cqe {
            sqid: qid,
            ..Cqe::new(cid, status, dw0, dw1)
        };
        let h = Header::CapsuleResp(pdu::CapsuleResp::new(&cqe));
        self.queue(&h, Body::None, Some(slot));
    }

    /// A CapsuleResp that belongs to no slot (Connect, or a refused first command).
    pub(super) fn send_cqe(&mut self, cid: u16, qid: u16, status: Status, dw0: u32, dw1: u32) {
        let cqe = Cqe {
            sqid: qid,
            ..Cqe::new(cid, status, dw0, dw1)
        };
        let h = Header::CapsuleResp(pdu::CapsuleResp::new(&cqe));
        self.queue(&h, Body::None, None);
    }

    pub(super) fn queue_head(&mut self, h: &Header) {
        self.queue(h, Body::None, None);
    }

    pub(super) fn queue_owned(&mut self, h: &Header, data: Vec<u8>) {
        self.queue(h, Body::Owned(data), None);
    }

    pub(super) fn queue_data(&mut self, h: &Header, slot: u16, len: u32, release: Option<u16>) {
        self.queue(h, Body::Slot { slot, len }, release);
    }

    pub(super) fn queue(&mut self, h: &Header, body: Body, release: Option<u16>) {
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

    pub(super) fn body_bytes<'a>(&'a self, b: &'a Body) -> &'a [u8] {
        body_bytes(&self.slots, b)
    }

    /// Writes what is queued, as much as the socket takes, in one `writev` per call (or a few
    /// while it takes everything). Returns whether anything was sent.
    pub fn send(&mut self, sh: &mut GroupShared) -> bool {
        let mut any = false;
        if self.sock.has_unsent() {
            match self.sock.flush() {
                Ok(()) => any = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) => {
                    self.close(&format!("write: {e}"));
                    self.drop_tx();
                    return true;
                }
            }
        }
        while !self.tx.is_empty() {
            let written = {
                let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                let mut n = 0;
                let mut skip = self.tx_sent;
                'items: for o in &self.tx {
                    let parts = [
                        &o.head[..usize::from(o.head_len)],
                        body_bytes(&self.slots, &o.body),
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
                match self.sock.write_vectored(&iov[..n]) {
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
    pub(super) fn advance(&mut self, n: usize, sh: &mut GroupShared) {
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

    pub(super) fn release(&mut self, slot: u16, sh: &mut GroupShared) {
        let s = &mut self.slots[usize::from(slot)];
        s.state = CmdState::Free;
        self.free.push(slot);
        if let Some(b) = s.buf.take() {
            sh.pool.put(b);
        }
    }
}

/// The bytes of an outgoing PDU's body (a free function: `send` borrows the slots while it
/// writes the socket).
fn body_bytes<'a>(slots: &'a [CmdSlot], b: &'a Body) -> &'a [u8] {
    match b {
        Body::None => &[],
        Body::Slot { slot, len } => slots[usize::from(*slot)]
            .buf
            .as_ref()
            .expect("a slot sending data has its buffer")
            .bytes(0, *len as usize),
        Body::Owned(v) => v,
    }
}
