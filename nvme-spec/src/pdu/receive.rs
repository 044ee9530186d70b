//! Receiving: one PDU parsed in place, and what the spec wants done when it is refused.

use crc32c::crc32c;

use super::*;

/// One received PDU, borrowed from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pdu<'a> {
    pub header: Header,
    /// In-capsule data, H2C/C2H data or a TermReq's echoed header; empty for the other types.
    /// Padding and digests are not part of it.
    pub data: &'a [u8],
}

/// Fatal Error Status of a TermReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Fes {
    /// FEI: the byte offset of the field in the PDU header.
    InvalidHeaderField = 0x01,
    /// A PDU arrived that the connection's state does not allow. FEI reserved.
    PduSequenceError = 0x02,
    /// FEI: the header digest that was received.
    HeaderDigestError = 0x03,
    /// Data outside the command's buffer. FEI reserved.
    DataOutOfRange = 0x04,
    /// More data than the receiver accepts (MAXH2CDATA, in-capsule size), or more R2Ts than
    /// MAXR2T: the spec gives both one code. FEI reserved.
    DataLimitExceeded = 0x05,
    /// FEI: the byte offset of the field in the PDU header.
    UnsupportedParameter = 0x06,
}

impl Fes {
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0x01 => Self::InvalidHeaderField,
            0x02 => Self::PduSequenceError,
            0x03 => Self::HeaderDigestError,
            0x04 => Self::DataOutOfRange,
            0x05 => Self::DataLimitExceeded,
            0x06 => Self::UnsupportedParameter,
            _ => return None,
        })
    }
}

/// What a TermReq reporting an error carries besides the echoed header
/// ([`offending_header`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FatalError {
    pub fes: Fes,
    pub fei: u32,
}

impl FatalError {
    /// Invalid Header Field naming the field at byte `at` of the PDU ([`field`]).
    pub const fn invalid_field(at: usize) -> FatalError {
        FatalError {
            fes: Fes::InvalidHeaderField,
            fei: at as u32,
        }
    }

    /// The TermReq `local` sends to report this error.
    pub const fn term_req(self, local: Side) -> Header {
        let t = TermReq {
            fes: self.fes as u16,
            fei: self.fei,
        };
        match local {
            Side::Controller => Header::C2HTermReq(t),
            Side::Host => Header::H2CTermReq(t),
        }
    }
}

/// What to do about a [`PduError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorAction {
    /// Send a TermReq with this status (its data: [`offending_header`]), then close.
    Terminate(FatalError),
    /// Close without a TermReq: the bad PDU was itself a TermReq, which is never answered.
    Close,
    /// Not fatal: drop the `consumed` bytes of this PDU and fail command `cid` with Transient
    /// Transport Error (SCT 0h, SC 22h). A wrong data digest damages one command's data, not the
    /// stream: the header (and its digest) still said where the next PDU starts.
    FailCommand { cid: u16, consumed: usize },
}

/// Why [`parse`] refused a PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    #[error("unknown PDU type {pdu_type:#04x}")]
    UnknownType { pdu_type: u8 },

    #[error("{pdu_type:?} received from the wrong end of the connection")]
    WrongDirection { pdu_type: PduType },

    #[error("{pdu_type:?}: flags {flags:#04x} are not valid for this type")]
    InvalidFlags { pdu_type: PduType, flags: u8 },

    #[error("{pdu_type:?}: flags {flags:#04x} disagree with the negotiated digests {negotiated:?}")]
    DigestFlags {
        pdu_type: PduType,
        flags: u8,
        negotiated: Digests,
    },

    #[error("{pdu_type:?}: HLEN {hlen}, the spec requires {}", pdu_type.hlen())]
    BadHlen { pdu_type: PduType, hlen: u8 },

    #[error("{pdu_type:?}: PDO {pdo} outside the PDU (PLEN {plen}) or misaligned")]
    BadPdo {
        pdu_type: PduType,
        pdo: u8,
        plen: u32,
    },

    #[error("{pdu_type:?}: PLEN {plen} does not match its header, data and digests")]
    BadPlen { pdu_type: PduType, plen: u32 },

    #[error("{pdu_type:?}: PLEN {plen} exceeds the limit of {max} bytes")]
    TooLarge {
        pdu_type: PduType,
        plen: u32,
        max: u32,
    },

    #[error("{pdu_type:?}: PLEN {plen} outside 24..=152")]
    BadTermReq { pdu_type: PduType, plen: u32 },

    #[error("{pdu_type:?}: header digest {received:#010x}, computed {computed:#010x}")]
    HeaderDigest {
        pdu_type: PduType,
        computed: u32,
        received: u32,
    },

    #[error("{pdu_type:?}: invalid value {value:#x} in the field at byte {offset}")]
    InvalidField {
        pdu_type: PduType,
        offset: u8,
        value: u32,
    },

    #[error(
        "{pdu_type:?} of command {cid:#06x}: data digest {received:#010x}, \
         computed {computed:#010x}"
    )]
    DataDigest {
        pdu_type: PduType,
        cid: u16,
        plen: u32,
        computed: u32,
        received: u32,
    },
}

impl PduError {
    pub const fn pdu_type(&self) -> Option<PduType> {
        match *self {
            Self::UnknownType { .. } => None,
            Self::WrongDirection { pdu_type }
            | Self::InvalidFlags { pdu_type, .. }
            | Self::DigestFlags { pdu_type, .. }
            | Self::BadHlen { pdu_type, .. }
            | Self::BadPdo { pdu_type, .. }
            | Self::BadPlen { pdu_type, .. }
            | Self::TooLarge { pdu_type, .. }
            | Self::BadTermReq { pdu_type, .. }
            | Self::HeaderDigest { pdu_type, .. }
            | Self::InvalidField { pdu_type, .. }
            | Self::DataDigest { pdu_type, .. } => Some(pdu_type),
        }
    }

    /// The spec's answer to this error. Header fields are reported by their byte offset, in
    /// the order of the header (PDU-TYPE, FLAGS, HLEN, PDO, PLEN), as [`parse`] checks them.
    pub const fn action(&self) -> ErrorAction {
        use Fes::*;
        if let Some(ty) = self.pdu_type()
            && ty.is_term_req()
        {
            return ErrorAction::Close;
        }
        let (fes, fei) = match *self {
            Self::UnknownType { .. } | Self::WrongDirection { .. } => (InvalidHeaderField, 0),
            Self::InvalidFlags { .. } | Self::DigestFlags { .. } => {
                (InvalidHeaderField, CH_FLAGS as u32)
            }
            Self::BadHlen { .. } => (InvalidHeaderField, CH_HLEN as u32),
            Self::BadPdo { .. } => (InvalidHeaderField, CH_PDO as u32),
            Self::BadPlen { .. } => (InvalidHeaderField, CH_PLEN as u32),
            Self::TooLarge { .. } => (DataLimitExceeded, 0),
            Self::HeaderDigest { received, .. } => (HeaderDigestError, received),
            Self::InvalidField { offset, .. } => (InvalidHeaderField, offset as u32),
            Self::BadTermReq { .. } => return ErrorAction::Close,
            Self::DataDigest { cid, plen, .. } => {
                return ErrorAction::FailCommand {
                    cid,
                    consumed: plen as usize,
                };
            }
        };
        ErrorAction::Terminate(FatalError { fes, fei })
    }
}

/// The bytes of a refused PDU a TermReq echoes as its data: its header, from the front of the
/// receive buffer `buf` that [`parse`] refused. Only the common header when HLEN is not
/// believable, never more than [`TERM_REQ_MAX_DATA`] or than has arrived.
pub fn offending_header(buf: &[u8]) -> &[u8] {
    let Some(ch) = buf.first_chunk::<CH_LEN>() else {
        return buf;
    };
    let hlen = usize::from(ch[CH_HLEN]);
    let plen = le32(ch, CH_PLEN) as usize;
    let n = if hlen < CH_LEN || hlen > plen {
        CH_LEN
    } else {
        hlen.min(TERM_REQ_MAX_DATA)
    };
    &buf[..n.min(buf.len())]
}

/// Where a PDU's parts are, from its common header alone.
#[derive(Clone, Copy, Debug)]
struct Frame {
    ty: PduType,
    flags: u8,
    hlen: usize,
    plen: usize,
    hdgst: bool,
    ddgst: bool,
    data_start: usize,
    data_end: usize,
}

/// Parses the PDU at the front of `buf`.
///
/// Returns `Ok(None)` while more bytes are needed, else the PDU (its data borrowed from `buf`)
/// and the bytes it took, which the caller drops from the buffer before the next call. The
/// common header is checked as soon as its 8 bytes are in, so an error never waits for the rest
/// of a PDU. On `Err`, see [`PduError::action`]; nothing is consumed.
pub fn parse<'a>(buf: &'a [u8], link: &Link) -> Result<Option<(Pdu<'a>, usize)>, PduError> {
    parse_pdu(buf, link).inspect_err(|e| log::debug!("nvmf: refusing a PDU: {e}"))
}

fn parse_pdu<'a>(buf: &'a [u8], link: &Link) -> Result<Option<(Pdu<'a>, usize)>, PduError> {
    let Some(ch) = buf.first_chunk::<CH_LEN>() else {
        return Ok(None);
    };
    let f = check_common(ch, link)?;
    let Some(pdu) = buf.get(..f.plen) else {
        return Ok(None);
    };
    if f.hdgst {
        check_header_digest(pdu, &f)?;
    }
    let data = &pdu[f.data_start..f.data_end];
    let header = Header::read(f.ty, f.flags, &pdu[..f.hlen], data.len())?;
    if f.ddgst {
        check_data_digest(pdu, data, &header, &f)?;
    }
    Ok(Some((Pdu { header, data }, f.plen)))
}

/// A PDU whose header (and header digest) arrived and checked out, with where its data lies:
/// what a receiver needs to read the data straight into its final buffer instead of waiting
/// for the whole PDU in its receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub header: Header,
    /// Offsets of the data from the PDU's start (past the header, its digest and padding).
    pub data_start: usize,
    pub data_end: usize,
    /// The whole PDU's length (a data digest, if any, is its last 4 bytes).
    pub plen: usize,
    /// Whether a data digest follows the data.
    pub data_digest: bool,
}

/// Parses the header of the PDU at the front of `buf` once the header and its digest are
/// there, whatever of the data has arrived: `Ok(None)` while the header is incomplete. The
/// checks are [`parse`]'s, but the data digest, which the caller checks over the data where it
/// put it ([`data_digest`]).
pub fn parse_head(buf: &[u8], link: &Link) -> Result<Option<Head>, PduError> {
    let Some(ch) = buf.first_chunk::<CH_LEN>() else {
        return Ok(None);
    };
    let f = check_common(ch, link)?;
    let Some(head) = buf.get(..f.data_start) else {
        return Ok(None);
    };
    if f.hdgst {
        check_header_digest(head, &f)?;
    }
    let header = Header::read(f.ty, f.flags, &head[..f.hlen], f.data_end - f.data_start)?;
    Ok(Some(Head {
        header,
        data_start: f.data_start,
        data_end: f.data_end,
        plen: f.plen,
        data_digest: f.ddgst,
    }))
}

/// Checks the common header, field by field in header order, so the first wrong field is the
/// one reported. When it passes, PLEN covers the header, its digest, PDO and the data digest.
fn check_common(ch: &[u8; CH_LEN], link: &Link) -> Result<Frame, PduError> {
    let (fl, hlen, pdo) = (ch[1], ch[2], ch[3]);
    let plen = le32(ch, CH_PLEN);

    let ty = PduType::from_u8(ch[0]).ok_or(PduError::UnknownType { pdu_type: ch[0] })?;
    if ty.sender() == link.local {
        return Err(PduError::WrongDirection { pdu_type: ty });
    }
    if ty.is_term_req() {
        return check_term_req(ty, hlen, plen);
    }

    if fl & !ty.valid_flags() != 0 || fl & (flags::LAST_PDU | flags::SUCCESS) == flags::SUCCESS {
        return Err(PduError::InvalidFlags {
            pdu_type: ty,
            flags: fl,
        });
    }
    let (hdgst, ddgst) = (fl & flags::HDGSTF != 0, fl & flags::DDGSTF != 0);
    let digest_flags = PduError::DigestFlags {
        pdu_type: ty,
        flags: fl,
        negotiated: link.digests,
    };
    if ty.has_digests() && (hdgst != link.digests.header || ddgst && !link.digests.data) {
        return Err(digest_flags);
    }

    if hlen != ty.hlen() {
        return Err(PduError::BadHlen { pdu_type: ty, hlen });
    }
    let header_end = usize::from(hlen) + if hdgst { DIGEST_LEN } else { 0 };
    let (plen, pdo_at) = (plen as usize, usize::from(pdo));
    let bad_pdo = PduError::BadPdo {
        pdu_type: ty,
        pdo,
        plen: plen as u32,
    };
    let bad_plen = PduError::BadPlen {
        pdu_type: ty,
        plen: plen as u32,
    };
    let mut f = Frame {
        ty,
        flags: fl,
        hlen: hlen.into(),
        plen,
        hdgst,
        ddgst,
        data_start: header_end,
        data_end: header_end,
    };

    if !ty.carries_data() {
        if pdo != 0 {
            return Err(bad_pdo);
        }
        if plen != header_end {
            return Err(bad_plen);
        }
        return Ok(f);
    }

    // PDO 0 means no data; otherwise data starts past the header digest, at the receiver's
    // alignment, inside the PDU.
    if pdo == 0 {
        if plen < header_end {
            return Err(bad_plen);
        }
        if plen > header_end {
            return Err(bad_pdo);
        }
    } else if pdo_at < header_end || pdo_at > plen || pdo_at % link.pda_for(ty).alignment() != 0 {
        return Err(bad_pdo);
    }
    if plen > link.max_plen as usize {
        return Err(PduError::TooLarge {
            pdu_type: ty,
            plen: plen as u32,
            max: link.max_plen,
        });
    }
    f.data_start = if pdo == 0 { header_end } else { pdo_at };
    f.data_end = plen;
    if ddgst {
        if plen - f.data_start <= DIGEST_LEN {
            return Err(bad_plen);
        }
        f.data_end -= DIGEST_LEN;
    } else if link.digests.data && plen > f.data_start {
        // Data digests are on and this PDU has data: it must carry its digest.
        return Err(digest_flags);
    }
    Ok(f)
}

/// A TermReq's flags and PDO are not checked: its sender is leaving, and refusing the PDU would
/// only lose the reason it gives.
#[cold]
fn check_term_req(ty: PduType, hlen: u8, plen: u32) -> Result<Frame, PduError> {
    if !(TERM_REQ_MIN_PLEN..=TERM_REQ_MAX_PLEN).contains(&plen) {
        return Err(PduError::BadTermReq { pdu_type: ty, plen });
    }
    if hlen != ty.hlen() {
        return Err(PduError::BadHlen { pdu_type: ty, hlen });
    }
    Ok(Frame {
        ty,
        flags: 0,
        hlen: hlen.into(),
        plen: plen as usize,
        hdgst: false,
        ddgst: false,
        data_start: hlen.into(),
        data_end: plen as usize,
    })
}

fn check_header_digest(pdu: &[u8], f: &Frame) -> Result<(), PduError> {
    let computed = crc32c(&pdu[..f.hlen]);
    let received = le32(pdu, f.hlen);
    if computed != received {
        return Err(PduError::HeaderDigest {
            pdu_type: f.ty,
            computed,
            received,
        });
    }
    Ok(())
}

fn check_data_digest(pdu: &[u8], data: &[u8], header: &Header, f: &Frame) -> Result<(), PduError> {
    let computed = crc32c(data);
    let received = le32(pdu, f.data_end);
    if computed != received {
        let cid = match header {
            Header::CapsuleCmd(c) => c.cid(),
            Header::H2CData(d) => d.cccid,
            Header::C2HData(d) => d.cccid,
            _ => unreachable!("only capsules and data PDUs carry a data digest"),
        };
        return Err(PduError::DataDigest {
            pdu_type: f.ty,
            cid,
            plen: f.plen as u32,
            computed,
            received,
        });
    }
    Ok(())
}
