//! The authentication messages carried by Fabrics Authentication Send and Receive (NVMe Base
//! 2.0 §5.21.1.4 and §8.13.5): one encoder and one decoder per message, lengths checked against
//! the fields that announce them. A decoder never trusts a length the peer sent without checking
//! it against the bytes that came.
//!
//! Every message starts with the same 6 bytes: AUTH-Type (0 common, 1 DH-HMAC-CHAP), AUTH-Id,
//! two reserved bytes, and the transaction identifier T_ID (little endian). All multi-byte
//! fields are little endian.

use crate::crypto::{DhGroup, Hash};

/// AUTH-Type of AUTH_Negotiate and the AUTH_Failure messages.
pub const TYPE_COMMON: u8 = 0x00;
/// AUTH-Type of the DH-HMAC-CHAP messages.
pub const TYPE_DHCHAP: u8 = 0x01;

/// AUTH-Id values.
pub mod id {
    /// AUTH_Negotiate (common).
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (host to controller).
    pub const FAILURE2: u8 = 0xf0;
    /// AUTH_Failure1 (controller to host).
    pub const FAILURE1: u8 = 0xf1;
}

/// The one reason code of AUTH_Failure1/2 ("authentication failure").
pub const RC_FAILURE: u8 = 0x01;

/// AUTH_Failure reason code explanations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reason {
    /// 01h: the response did not verify (a wrong key).
    Failed = 0x01,
    /// 02h: no authentication protocol both sides can use.
    ProtocolUnusable = 0x02,
    /// 03h: secure channel concatenation asked for where it is not offered.
    SccMismatch = 0x03,
    /// 04h: no hash function both sides can use.
    HashUnusable = 0x04,
    /// 05h: no DH group both sides can use.
    DhGroupUnusable = 0x05,
    /// 06h: a message whose fields or length are wrong.
    IncorrectPayload = 0x06,
    /// 07h: a message that is not the one expected now.
    IncorrectProtocolMessage = 0x07,
}

impl Reason {
    /// The explanation of code `v` (unknown ones read as [`Reason::Failed`]).
    pub fn from_u8(v: u8) -> Reason {
        match v {
            0x02 => Reason::ProtocolUnusable,
            0x03 => Reason::SccMismatch,
            0x04 => Reason::HashUnusable,
            0x05 => Reason::DhGroupUnusable,
            0x06 => Reason::IncorrectPayload,
            0x07 => Reason::IncorrectProtocolMessage,
            _ => Reason::Failed,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::Failed => "authentication failed",
            Reason::ProtocolUnusable => "authentication protocol not usable",
            Reason::SccMismatch => "secure channel concatenation mismatch",
            Reason::HashUnusable => "hash function not usable",
            Reason::DhGroupUnusable => "DH group not usable",
            Reason::IncorrectPayload => "incorrect payload",
            Reason::IncorrectProtocolMessage => "incorrect protocol message",
        })
    }
}

/// Bytes of an AUTH_Negotiate's fixed part, of one protocol descriptor, and of the fixed part of
/// the DH-HMAC-CHAP messages.
pub const NEGOTIATE_LEN: usize = 8;
/// Bytes of one authentication protocol descriptor.
pub const DESCRIPTOR_LEN: usize = 64;
/// Bytes of the DH-HMAC-CHAP messages' fixed parts (Challenge, Reply, Success1, Success2).
pub const DHCHAP_HEADER_LEN: usize = 16;
/// Bytes of an AUTH_Failure message.
pub const FAILURE_LEN: usize = 8;
/// Entries of a descriptor's hash and DH group lists.
const ID_LIST_LEN: usize = 30;

/// One decoded message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate: what the host offers.
    Negotiate(Negotiate),
    /// DH-HMAC-CHAP_Challenge: the controller's choice and challenge.
    Challenge(Challenge),
    /// DH-HMAC-CHAP_Reply: the host's response (and challenge, bidirectional).
    Reply(Reply),
    /// DH-HMAC-CHAP_Success1: the host is authenticated (and the controller's response).
    Success1(Success1),
    /// DH-HMAC-CHAP_Success2: the host accepted the controller's response.
    Success2 { tid: u16 },
    /// AUTH_Failure1 (`host == false`, from the controller) or AUTH_Failure2 (from the host).
    Failure {
        tid: u16,
        from_host: bool,
        rc: u8,
        rce: u8,
    },
}

/// AUTH_Negotiate's DH-HMAC-CHAP descriptor (the one protocol there is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiate {
    pub tid: u16,
    /// Secure channel concatenation (0: none).
    pub sc_c: u8,
    /// The hash identifiers offered (raw: unknown ones are the controller's to skip).
    pub hashes: Vec<u8>,
    /// The DH group identifiers offered.
    pub dhgroups: Vec<u8>,
    /// Whether a DH-HMAC-CHAP descriptor was in the message at all.
    pub has_dhchap: bool,
}

/// DH-HMAC-CHAP_Challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub tid: u16,
    pub hash: u8,
    pub dhgroup: u8,
    pub seqnum: u32,
    /// The challenge C1 (hash length bytes).
    pub cval: Vec<u8>,
    /// The controller's DH public value (empty with the null group).
    pub dhv: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub tid: u16,
    /// The host's response R1.
    pub rval: Vec<u8>,
    /// The host's challenge C2 when it authenticates the controller too.
    pub cval: Option<Vec<u8>>,
    /// S2: the host's sequence number (0 when `cval` is none).
    pub seqnum: u32,
    /// The host's DH public value.
    pub dhv: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success1 {
    pub tid: u16,
    /// Hash length (set even without a response: Linux's host expects it).
    pub hl: u8,
    /// The controller's response R2 (bidirectional).
    pub rval: Option<Vec<u8>>,
}

/// Why bytes are not a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// Shorter than the message's fixed part, or not the length its fields announce.
    #[error("{what}: {got} bytes, expected {want}")]
    Length {
        what: &'static str,
        got: usize,
        want: usize,
    },
    /// A field with a value the message does not allow.
    #[error("{0}")]
    Field(&'static str),
    /// An AUTH-Type/AUTH-Id pair that is no message.
    #[error("unknown message type {0:#04x}/{1:#04x}")]
    Unknown(u8, u8),
}

impl MsgError {
    /// The AUTH_Failure explanation a controller answers this with.
    pub fn reason(&self) -> Reason {
        match self {
            MsgError::Unknown(..) => Reason::IncorrectProtocolMessage,
            _ => Reason::IncorrectPayload,
        }
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn exact(what: &'static str, got: usize, want: usize) -> Result<(), MsgError> {
    if got == want {
        Ok(())
    } else {
        Err(MsgError::Length { what, got, want })
    }
}

fn at_least(what: &'static str, got: usize, want: usize) -> Result<(), MsgError> {
    if got >= want {
        Ok(())
    } else {
        Err(MsgError::Length { what, got, want })
    }
}

/// The common 6 bytes.
fn header(out: &mut Vec<u8>, auth_type: u8, auth_id: u8, tid: u16) {
    out.extend_from_slice(&[auth_type, auth_id, 0, 0]);
    out.extend_from_slice(&tid.to_le_bytes());
}

impl Message {
    /// Decodes one message: `b` is exactly the command's transfer.
    pub fn decode(b: &[u8]) -> Result<Message, MsgError> {
        at_least("message", b.len(), 6)?;
        let tid = le16(b, 4);
        match (b[0], b[1]) {
            (TYPE_COMMON, id::NEGOTIATE) => decode_negotiate(b, tid).map(Message::Negotiate),
            (TYPE_COMMON, id @ (id::FAILURE1 | id::FAILURE2)) => {
                exact("AUTH_Failure", b.len(), FAILURE_LEN)?;
                Ok(Message::Failure {
                    tid,
                    from_host: id == id::FAILURE2,
                    rc: b[6],
                    rce: b[7],
                })
            }
            (TYPE_DHCHAP, id::CHALLENGE) => decode_challenge(b, tid).map(Message::Challenge),
            (TYPE_DHCHAP, id::REPLY) => decode_reply(b, tid).map(Message::Reply),
            (TYPE_DHCHAP, id::SUCCESS1) => decode_success1(b, tid).map(Message::Success1),
            (TYPE_DHCHAP, id::SUCCESS2) => {
                exact("DH-HMAC-CHAP_Success2", b.len(), DHCHAP_HEADER_LEN)?;
                Ok(Message::Success2 { tid })
            }
            (t, i) => Err(MsgError::Unknown(t, i)),
        }
    }

    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Message::Negotiate(n) => {
                header(&mut out, TYPE_COMMON, id::NEGOTIATE, n.tid);
                out.extend_from_slice(&[n.sc_c, n.has_dhchap as u8]);
                if !n.has_dhchap {
                    return out;
                }
                let mut d = [0u8; DESCRIPTOR_LEN];
                d[0] = TYPE_DHCHAP;
                d[2] = n.hashes.len().min(ID_LIST_LEN) as u8;
                d[3] = n.dhgroups.len().min(ID_LIST_LEN) as u8;
                for (slot, h) in d[4..4 + ID_LIST_LEN].iter_mut().zip(&n.hashes) {
                    *slot = *h;
                }
                for (slot, g) in d[34..34 + ID_LIST_LEN].iter_mut().zip(&n.dhgroups) {
                    *slot = *g;
                }
                out.extend_from_slice(&d);
            }
            Message::Challenge(c) => {
                header(&mut out, TYPE_DHCHAP, id::CHALLENGE, c.tid);
                out.extend_from_slice(&[c.cval.len() as u8, 0, c.hash, c.dhgroup]);
                out.extend_from_slice(&(c.dhv.len() as u16).to_le_bytes());
                out.extend_from_slice(&c.seqnum.to_le_bytes());
                out.extend_from_slice(&c.cval);
                out.extend_from_slice(&c.dhv);
            }
            Message::Reply(r) => {
                header(&mut out, TYPE_DHCHAP, id::REPLY, r.tid);
                let hl = r.rval.len();
                out.extend_from_slice(&[hl as u8, 0, r.cval.is_some() as u8, 0]);
                out.extend_from_slice(&(r.dhv.len() as u16).to_le_bytes());
                out.extend_from_slice(&r.seqnum.to_le_bytes());
                out.extend_from_slice(&r.rval);
                match &r.cval {
                    Some(c) => out.extend_from_slice(c),
                    // The challenge field is there either way (SPDK and Linux size it so).
                    None => out.resize(out.len() + hl, 0),
                }
                out.extend_from_slice(&r.dhv);
            }
            Message::Success1(s) => {
                header(&mut out, TYPE_DHCHAP, id::SUCCESS1, s.tid);
                out.extend_from_slice(&[s.hl, 0, s.rval.is_some() as u8]);
                out.resize(DHCHAP_HEADER_LEN, 0);
                if let Some(r) = &s.rval {
                    out.extend_from_slice(r);
                }
            }
            Message::Success2 { tid } => {
                header(&mut out, TYPE_DHCHAP, id::SUCCESS2, *tid);
                out.resize(DHCHAP_HEADER_LEN, 0);
            }
            Message::Failure {
                tid,
                from_host,
                rc,
                rce,
            } => {
                let id = if *from_host {
                    id::FAILURE2
                } else {
                    id::FAILURE1
                };
                header(&mut out, TYPE_COMMON, id, *tid);
                out.extend_from_slice(&[*rc, *rce]);
            }
        }
        out
    }

    /// The message's transaction identifier.
    pub fn tid(&self) -> u16 {
        match self {
            Message::Negotiate(n) => n.tid,
            Message::Challenge(c) => c.tid,
            Message::Reply(r) => r.tid,
            Message::Success1(s) => s.tid,
            Message::Success2 { tid } | Message::Failure { tid, .. } => *tid,
        }
    }

    /// Its name in the specification (for logs).
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate(_) => "AUTH_Negotiate",
            Message::Challenge(_) => "DH-HMAC-CHAP_Challenge",
            Message::Reply(_) => "DH-HMAC-CHAP_Reply",
            Message::Success1(_) => "DH-HMAC-CHAP_Success1",
            Message::Success2 { .. } => "DH-HMAC-CHAP_Success2",
            Message::Failure {
                from_host: false, ..
            } => "AUTH_Failure1",
            Message::Failure { .. } => "AUTH_Failure2",
        }
    }
}

/// The length of the controller's message at the start of `b`, as its own fields give it:
/// an Authentication Receive's data is the message followed by whatever the room held.
/// `None` when `b` is too short to tell or is no controller message.
pub fn controller_message_len(b: &[u8]) -> Option<usize> {
    if b.len() < 6 {
        return None;
    }
    let len = match (b[0], b[1]) {
        (TYPE_COMMON, id::FAILURE1) => FAILURE_LEN,
        (TYPE_DHCHAP, id::CHALLENGE) if b.len() >= DHCHAP_HEADER_LEN => {
            DHCHAP_HEADER_LEN + usize::from(b[6]) + usize::from(le16(b, 10))
        }
        (TYPE_DHCHAP, id::SUCCESS1) if b.len() >= DHCHAP_HEADER_LEN => {
            DHCHAP_HEADER_LEN + if b[8] == 1 { usize::from(b[6]) } else { 0 }
        }
        _ => return None,
    };
    (len <= b.len()).then_some(len)
}

fn decode_negotiate(b: &[u8], tid: u16) -> Result<Negotiate, MsgError> {
    at_least("AUTH_Negotiate", b.len(), NEGOTIATE_LEN)?;
    let napd = usize::from(b[7]);
    exact(
        "AUTH_Negotiate",
        b.len(),
        NEGOTIATE_LEN + napd * DESCRIPTOR_LEN,
    )?;
    let mut n = Negotiate {
        tid,
        sc_c: b[6],
        hashes: Vec::new(),
        dhgroups: Vec::new(),
        has_dhchap: false,
    };
    for d in b[NEGOTIATE_LEN..].chunks_exact(DESCRIPTOR_LEN) {
        if d[0] != TYPE_DHCHAP {
            continue;
        }
        let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
        if halen > ID_LIST_LEN || dhlen > ID_LIST_LEN {
            return Err(MsgError::Field(
                "a descriptor's list is longer than 30 entries",
            ));
        }
        n.hashes = d[4..4 + halen].to_vec();
        n.dhgroups = d[34..34 + dhlen].to_vec();
        n.has_dhchap = true;
        break;
    }
    Ok(n)
}

fn decode_challenge(b: &[u8], tid: u16) -> Result<Challenge, MsgError> {
    at_least("DH-HMAC-CHAP_Challenge", b.len(), DHCHAP_HEADER_LEN)?;
    let hl = usize::from(b[6]);
    let dhvlen = usize::from(le16(b, 10));
    exact(
        "DH-HMAC-CHAP_Challenge",
        b.len(),
        DHCHAP_HEADER_LEN + hl + dhvlen,
    )?;
    let hash = b[8];
    if Hash::from_id(hash).map(Hash::len) != Some(hl) {
        return Err(MsgError::Field("the hash length is not the hash's"));
    }
    let dhgroup = b[9];
    if DhGroup::from_id(dhgroup).is_some_and(|g| g.public_len() != dhvlen) {
        return Err(MsgError::Field("the DH value's length is not the group's"));
    }
    let body = &b[DHCHAP_HEADER_LEN..];
    Ok(Challenge {
        tid,
        hash,
        dhgroup,
        seqnum: le32(b, 12),
        cval: body[..hl].to_vec(),
        dhv: body[hl..].to_vec(),
    })
}

fn decode_reply(b: &[u8], tid: u16) -> Result<Reply, MsgError> {
    at_least("DH-HMAC-CHAP_Reply", b.len(), DHCHAP_HEADER_LEN)?;
    let hl = usize::from(b[6]);
    let dhvlen = usize::from(le16(b, 10));
    exact(
        "DH-HMAC-CHAP_Reply",
        b.len(),
        DHCHAP_HEADER_LEN + 2 * hl + dhvlen,
    )?;
    if dhvlen % 4 != 0 {
        return Err(MsgError::Field(
            "the DH value's length is not a multiple of 4",
        ));
    }
    let cvalid = b[8];
    let seqnum = le32(b, 12);
    let cval = match cvalid {
        0 => None,
        1 if seqnum == 0 => {
            return Err(MsgError::Field("a host challenge with sequence number 0"));
        }
        1 => Some(b[DHCHAP_HEADER_LEN + hl..DHCHAP_HEADER_LEN + 2 * hl].to_vec()),
        _ => return Err(MsgError::Field("CVALID is neither 0 nor 1")),
    };
    Ok(Reply {
        tid,
        rval: b[DHCHAP_HEADER_LEN..DHCHAP_HEADER_LEN + hl].to_vec(),
        cval,
        seqnum,
        dhv: b[DHCHAP_HEADER_LEN + 2 * hl..].to_vec(),
    })
}

fn decode_success1(b: &[u8], tid: u16) -> Result<Success1, MsgError> {
    at_least("DH-HMAC-CHAP_Success1", b.len(), DHCHAP_HEADER_LEN)?;
    let hl = b[6];
    let rval = match b[8] {
        0 => None,
        1 => {
            let want = DHCHAP_HEADER_LEN + usize::from(hl);
            at_least("DH-HMAC-CHAP_Success1", b.len(), want)?;
            Some(b[DHCHAP_HEADER_LEN..want].to_vec())
        }
        _ => return Err(MsgError::Field("RVALID is neither 0 nor 1")),
    };
    Ok(Success1 { tid, hl, rval })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Message> {
        vec![
            Message::Negotiate(Negotiate {
                tid: 7,
                sc_c: 0,
                hashes: vec![1, 2, 3],
                dhgroups: vec![0, 1, 2, 3, 4, 5],
                has_dhchap: true,
            }),
            Message::Challenge(Challenge {
                tid: 7,
                hash: 1,
                dhgroup: 1,
                seqnum: 42,
                cval: vec![9; 32],
                dhv: vec![3; 256],
            }),
            Message::Reply(Reply {
                tid: 7,
                rval: vec![1; 48],
                cval: Some(vec![2; 48]),
                seqnum: 5,
                dhv: vec![],
            }),
            Message::Reply(Reply {
                tid: 8,
                rval: vec![1; 64],
                cval: None,
                seqnum: 0,
                dhv: vec![4; 256],
            }),
            Message::Success1(Success1 {
                tid: 7,
                hl: 32,
                rval: None,
            }),
            Message::Success1(Success1 {
                tid: 7,
                hl: 32,
                rval: Some(vec![5; 32]),
            }),
            Message::Success2 { tid: 9 },
            Message::Failure {
                tid: 9,
                from_host: false,
                rc: RC_FAILURE,
                rce: Reason::Failed as u8,
            },
            Message::Failure {
                tid: 9,
                from_host: true,
                rc: RC_FAILURE,
                rce: Reason::IncorrectPayload as u8,
            },
        ]
    }

    #[test]
    fn every_message_round_trips_with_the_spec_lengths() {
        let lens = [72, 16 + 32 + 256, 16 + 96, 16 + 128 + 256, 16, 48, 16, 8, 8];
        for (m, len) in samples().into_iter().zip(lens) {
            let b = m.encode();
            assert_eq!(b.len(), len, "{}", m.name());
            assert_eq!(Message::decode(&b).unwrap(), m);
        }
    }

    #[test]
    fn controller_messages_are_found_in_a_larger_room() {
        for m in samples() {
            let from_ctrlr = matches!(
                m,
                Message::Challenge(_)
                    | Message::Success1(_)
                    | Message::Failure {
                        from_host: false,
                        ..
                    }
            );
            let b = m.encode();
            let mut room = b.clone();
            room.resize(4096, 0);
            let found = controller_message_len(&room);
            assert_eq!(found, from_ctrlr.then_some(b.len()), "{}", m.name());
            if from_ctrlr {
                assert_eq!(controller_message_len(&b[..b.len() - 1]), None);
            }
        }
    }

    #[test]
    fn truncated_and_padded_messages_are_refused() {
        for m in samples() {
            let b = m.encode();
            for cut in 0..b.len() {
                // A Success1 without its response is a Success1 claiming one it lacks.
                assert!(
                    Message::decode(&b[..cut]).is_err(),
                    "{} cut at {cut}",
                    m.name()
                );
            }
            if !matches!(m, Message::Success1(_)) {
                let mut long = b.clone();
                long.push(0);
                assert!(Message::decode(&long).is_err(), "{} + 1 byte", m.name());
            }
        }
    }

    proptest! {
        /// Whatever a peer sends, decoding returns a message or an error, never panics, and a
        /// decoded message encodes back to bytes that decode to itself.
        #[test]
        fn prop_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400),
                                    kind in 0usize..7) {
            let mut b = b;
            // Aim most inputs at a real message type, so the length checks are reached.
            let heads = [(0, 0), (1, 1), (1, 2), (1, 3), (1, 4), (0, 0xf0), (0, 0xf1)];
            if b.len() >= 2 {
                (b[0], b[1]) = heads[kind];
            }
            if let Ok(m) = Message::decode(&b) {
                prop_assert_eq!(Message::decode(&m.encode()).unwrap(), m);
            }
        }
    }
}
