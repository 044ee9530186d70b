//! NVMe/TCP PDUs on the wire (NVMe over Fabrics TCP transport, TP 8000): both directions, so the
//! target and the host share one codec.
//!
//! Every PDU is laid out as
//!
//! ```text
//! | CH (8) + PSH | HDGST (4) | PAD     | DATA | DDGST (4) |
//! |<---- HLEN -->|  if HDGSTF| to PDO  |      | if DDGSTF |
//! |<------------------------ PLEN ------------------------>|
//! ```
//!
//! - Receiving: [`parse`] reads one PDU from the front of a receive buffer without copying its
//!   data. It answers `Ok(None)` until the whole PDU is there, but checks the common header as
//!   soon as its 8 bytes arrive, so an oversized or malformed PDU is refused before anyone waits
//!   for (or buffers) its body. A [`PduError`] says what the spec wants done about it
//!   ([`PduError::action`]): usually a TermReq with its Fatal Error Status and Field Error
//!   Information, then closing the connection.
//! - Sending: [`encode`] writes a header, its digest and the padding up to PDO into a
//!   [`HeadBuf`] on the stack. Data is never copied: the caller sends the head, the data where it
//!   lies and, when [`Encoded::data_digest`] says so, [`data_digest`] of it, in one `writev`.
//! - Setting up (`ic.rs`): a host sends [`IcReq::new`], a controller answers with
//!   [`IcResp::answer`], the host checks the answer ([`IcResp::check`]), and both ends go on
//!   with [`Link::after_ic`].
//! - Per command (`xfer.rs`): [`C2HData::check`] and [`R2T::check`] at a host,
//!   [`H2CData::check`] at a controller, hold a data PDU or R2T against the transfer its
//!   command expects.
//!
//! Each end is a [`Link`] of its [`Side`]: it parses only what its peer sends and encodes only
//! what it sends itself, so a host parses ICResp, CapsuleResp, C2HData, R2T and C2HTermReq and
//! encodes ICReq, CapsuleCmd, H2CData and H2CTermReq; a controller the other way round.
//!
//! Digests are CRC32C (Castagnoli), stored little endian: the header digest covers the HLEN
//! header bytes, the data digest covers DATA only (not the padding).

use crate::bytes::{array, le16, le32, put16, put32};
use crate::{Cqe, Sqe};
use field::*;

mod ic;
mod receive;
mod send;
#[cfg(test)]
mod tests;
mod xfer;

pub use ic::MIN_MAXH2CDATA;
pub use receive::{
    ErrorAction, FatalError, Fes, Head, Pdu, PduError, offending_header, parse, parse_head,
};
pub use send::{EncodeError, Encoded, data_digest, encode};

/// Bytes of the common header (CH) every PDU starts with.
pub const CH_LEN: usize = 8;

/// Bytes of a header or data digest.
pub const DIGEST_LEN: usize = 4;

/// The most bytes a PDU can carry before its data: header, header digest and padding up to PDO.
/// A CapsuleCmd's 72 + 4 bytes padded to a 72-byte PDA ((17 + 1) dwords) reach 144; ICReq and
/// ICResp are 128 bytes and carry no data.
pub const MAX_HEAD_LEN: usize = 144;

/// A stack buffer [`encode`] writes the head of one PDU into.
pub type HeadBuf = [u8; MAX_HEAD_LEN];

/// The most bytes of the offending PDU header a TermReq echoes: its PLEN may not exceed 152.
pub const TERM_REQ_MAX_DATA: usize = 128;

/// PLEN bounds of a TermReq; one outside them is not answered, the connection just closes.
const TERM_REQ_MIN_PLEN: u32 = 24;
const TERM_REQ_MAX_PLEN: u32 = TERM_REQ_MIN_PLEN + TERM_REQ_MAX_DATA as u32;

/// The largest PLEN a PDU with up to `max_data` bytes of data can have, whatever digests and
/// alignment are negotiated: the `max_plen` to give [`Link::new`].
pub const fn max_plen_for_data(max_data: u32) -> u32 {
    max_data.saturating_add((MAX_HEAD_LEN + DIGEST_LEN) as u32)
}

/// Bits of the common header's FLAGS byte.
pub mod flags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 1 << 0;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 1 << 1;
    /// H2CData / C2HData: the last PDU of this command's transfer (or of this R2T's).
    pub const LAST_PDU: u8 = 1 << 2;
    /// C2HData: the command succeeded and no CapsuleResp follows; only together with LAST_PDU.
    pub const SUCCESS: u8 = 1 << 3;
}

/// Byte offsets of the header fields, from the PDU's start: where [`parse`] and [`encode`] read
/// and write them, and the Field Error Information a TermReq names a bad field by.
pub mod field {
    /// Common header: FLAGS (u8), HLEN (u8), PDO (u8), PLEN (u32); PDU-TYPE is byte 0.
    pub const CH_FLAGS: usize = 1;
    pub const CH_HLEN: usize = 2;
    pub const CH_PDO: usize = 3;
    pub const CH_PLEN: usize = 4;
    /// ICReq / ICResp: PFV (u16), HPDA or CPDA, DGST, MAXR2T or MAXH2CDATA (u32).
    pub const IC_PFV: usize = 8;
    pub const IC_PDA: usize = 10;
    pub const IC_DGST: usize = 11;
    pub const IC_MAX: usize = 12;
    /// TermReq: FES (u16), FEI (u32).
    pub const TERM_FES: usize = 8;
    pub const TERM_FEI: usize = 10;
    /// CapsuleCmd: the 64-byte SQE; CapsuleResp: the 16-byte CQE.
    pub const CAPSULE: usize = 8;
    /// H2CData, C2HData and R2T: CCCID (u16), TTAG (u16), DATAO or R2TO (u32), DATAL or
    /// R2TL (u32).
    pub const CCCID: usize = 8;
    pub const TTAG: usize = 10;
    pub const XFER_OFFSET: usize = 12;
    pub const XFER_LEN: usize = 16;
}

/// The end of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Host,
    Controller,
}

/// PDU-TYPE. Bit 0 is the direction: clear for host to controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PduType {
    IcReq = 0x00,
    IcResp = 0x01,
    H2CTermReq = 0x02,
    C2HTermReq = 0x03,
    CapsuleCmd = 0x04,
    CapsuleResp = 0x05,
    H2CData = 0x06,
    C2HData = 0x07,
    R2T = 0x09,
}

impl PduType {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::IcReq,
            0x01 => Self::IcResp,
            0x02 => Self::H2CTermReq,
            0x03 => Self::C2HTermReq,
            0x04 => Self::CapsuleCmd,
            0x05 => Self::CapsuleResp,
            0x06 => Self::H2CData,
            0x07 => Self::C2HData,
            0x09 => Self::R2T,
            _ => return None,
        })
    }

    /// The HLEN the spec fixes for this type.
    pub const fn hlen(self) -> u8 {
        match self {
            Self::IcReq | Self::IcResp => 128,
            Self::CapsuleCmd => 72,
            _ => 24,
        }
    }

    pub const fn sender(self) -> Side {
        if self as u8 & 1 == 0 {
            Side::Host
        } else {
            Side::Controller
        }
    }

    const fn is_term_req(self) -> bool {
        matches!(self, Self::H2CTermReq | Self::C2HTermReq)
    }

    /// Types whose data is placed by PDO, aligned by a PDA and covered by the data digest.
    const fn carries_data(self) -> bool {
        matches!(self, Self::CapsuleCmd | Self::H2CData | Self::C2HData)
    }

    /// ICReq, ICResp and TermReq never carry digests: they are exchanged before digests are
    /// negotiated, or when the connection is already beyond trusting them.
    const fn has_digests(self) -> bool {
        !matches!(
            self,
            Self::IcReq | Self::IcResp | Self::H2CTermReq | Self::C2HTermReq
        )
    }

    const fn valid_flags(self) -> u8 {
        use flags::*;
        match self {
            Self::IcReq | Self::IcResp | Self::H2CTermReq | Self::C2HTermReq => 0,
            Self::CapsuleResp | Self::R2T => HDGSTF,
            Self::CapsuleCmd => HDGSTF | DDGSTF,
            Self::H2CData => HDGSTF | DDGSTF | LAST_PDU,
            Self::C2HData => HDGSTF | DDGSTF | LAST_PDU | SUCCESS,
        }
    }
}

/// Which digests a connection uses: requested in the ICReq's DGST byte, echoed in the ICResp's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

impl Digests {
    pub const NONE: Self = Self {
        header: false,
        data: false,
    };

    /// From a DGST byte; its reserved bits are ignored.
    pub const fn from_dgst(dgst: u8) -> Self {
        Self {
            header: dgst & 1 != 0,
            data: dgst & 2 != 0,
        }
    }

    pub const fn dgst(self) -> u8 {
        self.header as u8 | (self.data as u8) << 1
    }
}

/// A PDU data alignment (HPDA or CPDA): 0's based, in dwords, at most 31.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pda(u8);

impl Pda {
    /// No alignment beyond a dword: what Linux's host and target use.
    pub const ZERO: Self = Self(0);
    pub const MAX: u8 = 31;

    pub const fn new(v: u8) -> Option<Self> {
        if v <= Self::MAX { Some(Self(v)) } else { None }
    }

    pub const fn get(self) -> u8 {
        self.0
    }

    /// The alignment in bytes: PDO of a PDU with data is a multiple of it.
    pub const fn alignment(self) -> usize {
        (self.0 as usize + 1) * 4
    }
}

/// What [`parse`] and [`encode`] need to know about one connection.
///
/// Start with [`Link::new`] (no digests, dword alignment: what holds for ICReq and ICResp) and
/// switch to [`Link::negotiated`] once the ICResp is sent (target) or received (host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    local: Side,
    digests: Digests,
    hpda: Pda,
    cpda: Pda,
    max_plen: u32,
}

impl Link {
    /// `local` is the end this side plays: PDUs only its peer sends are accepted, and only PDUs
    /// it sends are encoded. `max_plen` bounds the PLEN of a received CapsuleCmd, H2CData or
    /// C2HData (the other types have fixed or small lengths); see [`max_plen_for_data`].
    pub const fn new(local: Side, max_plen: u32) -> Self {
        Self {
            local,
            digests: Digests::NONE,
            hpda: Pda::ZERO,
            cpda: Pda::ZERO,
            max_plen,
        }
    }

    /// The link after ICReq/ICResp: the digests the ICResp enabled, the host's HPDA from the
    /// ICReq and the controller's CPDA from the ICResp.
    pub const fn negotiated(self, digests: Digests, hpda: Pda, cpda: Pda) -> Self {
        Self {
            digests,
            hpda,
            cpda,
            ..self
        }
    }

    pub const fn local(&self) -> Side {
        self.local
    }

    pub const fn digests(&self) -> Digests {
        self.digests
    }

    pub const fn hpda(&self) -> Pda {
        self.hpda
    }

    pub const fn cpda(&self) -> Pda {
        self.cpda
    }

    pub const fn max_plen(&self) -> u32 {
        self.max_plen
    }

    /// The receiver of data sets its alignment: CPDA for data going to the controller, HPDA for
    /// data going to the host.
    const fn pda_for(&self, ty: PduType) -> Pda {
        match ty.sender() {
            Side::Host => self.cpda,
            Side::Controller => self.hpda,
        }
    }
}

/// ICReq: the host opens the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcReq {
    /// PDU format version; only 0 exists.
    pub pfv: u16,
    /// The alignment the host wants for data it receives.
    pub hpda: Pda,
    /// The digests the host asks for.
    pub digests: Digests,
    /// Outstanding R2Ts per command the host can take, 0's based.
    pub maxr2t: u32,
}

/// ICResp: the controller accepts the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcResp {
    pub pfv: u16,
    /// The alignment the controller wants for data it receives.
    pub cpda: Pda,
    /// The digests enabled: the host's request, echoed exactly (Linux fails the connect on any
    /// difference).
    pub digests: Digests,
    /// The most data bytes one H2CData PDU may carry; a non-zero multiple of 4.
    pub maxh2cdata: u32,
}

/// H2CTermReq / C2HTermReq: the sender found a fatal error and closes the connection. Its data
/// is the header of the PDU in error (at most [`TERM_REQ_MAX_DATA`] bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TermReq {
    /// Fatal Error Status, as received: see [`Fes::from_u16`].
    pub fes: u16,
    /// Field Error Information: what it holds depends on `fes` (see [`Fes`]).
    pub fei: u32,
}

/// CapsuleCmd: a submission queue entry, as bytes ([`CapsuleCmd::command`] decodes it);
/// in-capsule data, if any, is the PDU's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapsuleCmd {
    pub sqe: [u8; 64],
}

impl CapsuleCmd {
    /// The capsule of `sqe`.
    pub fn new(sqe: &Sqe) -> CapsuleCmd {
        CapsuleCmd {
            sqe: sqe.to_bytes(),
        }
    }

    /// The command, decoded.
    pub fn command(&self) -> Sqe {
        Sqe::from_bytes(&self.sqe)
    }

    /// The command identifier (CDW0 bits 31:16). Its top bits may be the host's generation
    /// counter: echo it, do not index tables by it.
    pub fn cid(&self) -> u16 {
        le16(&self.sqe, 2)
    }
}

/// CapsuleResp: a completion queue entry, as bytes ([`CapsuleResp::completion`] decodes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CapsuleResp {
    pub cqe: [u8; 16],
}

impl CapsuleResp {
    /// The capsule of `cqe`.
    pub fn new(cqe: &Cqe) -> CapsuleResp {
        CapsuleResp {
            cqe: cqe.to_bytes(),
        }
    }

    /// The completion, decoded.
    pub fn completion(&self) -> Cqe {
        Cqe::from_bytes(&self.cqe)
    }

    /// The command identifier (DW3 bits 15:0).
    pub fn cid(&self) -> u16 {
        le16(&self.cqe, 12)
    }
}

/// H2CData: write data the host sends in answer to an R2T. DATAL is the PDU's data length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct H2CData {
    /// The command's CID.
    pub cccid: u16,
    /// The R2T's transfer tag.
    pub ttag: u16,
    /// Offset of this data in the command's whole transfer.
    pub datao: u32,
    pub last: bool,
}

/// C2HData: read data the controller sends. DATAL is the PDU's data length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct C2HData {
    pub cccid: u16,
    pub datao: u32,
    pub last: bool,
    /// The command succeeded and no CapsuleResp follows; only valid with `last`.
    pub success: bool,
}

/// R2T: the controller asks for `r2tl` bytes of a write's data from offset `r2to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct R2T {
    pub cccid: u16,
    pub ttag: u16,
    pub r2to: u32,
    pub r2tl: u32,
}

/// A PDU header without its data: what [`parse`] returns and [`encode`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Header {
    IcReq(IcReq),
    IcResp(IcResp),
    H2CTermReq(TermReq),
    C2HTermReq(TermReq),
    CapsuleCmd(CapsuleCmd),
    CapsuleResp(CapsuleResp),
    H2CData(H2CData),
    C2HData(C2HData),
    R2T(R2T),
}

impl Header {
    pub const fn pdu_type(&self) -> PduType {
        match self {
            Self::IcReq(_) => PduType::IcReq,
            Self::IcResp(_) => PduType::IcResp,
            Self::H2CTermReq(_) => PduType::H2CTermReq,
            Self::C2HTermReq(_) => PduType::C2HTermReq,
            Self::CapsuleCmd(_) => PduType::CapsuleCmd,
            Self::CapsuleResp(_) => PduType::CapsuleResp,
            Self::H2CData(_) => PduType::H2CData,
            Self::C2HData(_) => PduType::C2HData,
            Self::R2T(_) => PduType::R2T,
        }
    }

    /// The type-specific flags; the digest flags are the link's business.
    const fn flags(&self) -> u8 {
        let (last, success) = match self {
            Self::H2CData(d) => (d.last, false),
            Self::C2HData(d) => (d.last, d.success),
            _ => (false, false),
        };
        (if last { flags::LAST_PDU } else { 0 }) | (if success { flags::SUCCESS } else { 0 })
    }

    /// Writes the PDU-specific header (after the CH) into `h`, which is HLEN bytes, zeroed.
    /// `data_len` is the DATAL of H2CData and C2HData. Pairs with [`Header::read`].
    fn write(&self, h: &mut [u8], data_len: u32) {
        match self {
            Self::IcReq(ic) => write_ic(h, ic.pfv, ic.hpda, ic.digests, ic.maxr2t),
            Self::IcResp(ic) => write_ic(h, ic.pfv, ic.cpda, ic.digests, ic.maxh2cdata),
            Self::H2CTermReq(t) | Self::C2HTermReq(t) => {
                put16(h, TERM_FES, t.fes);
                put32(h, TERM_FEI, t.fei);
            }
            Self::CapsuleCmd(c) => h[CAPSULE..CAPSULE + 64].copy_from_slice(&c.sqe),
            Self::CapsuleResp(r) => h[CAPSULE..CAPSULE + 16].copy_from_slice(&r.cqe),
            Self::H2CData(d) => write_xfer(h, d.cccid, d.ttag, d.datao, data_len),
            Self::C2HData(d) => write_xfer(h, d.cccid, 0, d.datao, data_len),
            Self::R2T(r) => write_xfer(h, r.cccid, r.ttag, r.r2to, r.r2tl),
        }
    }

    /// Reads the PDU-specific header of a PDU whose common header was checked (`check_common`);
    /// `h` is its HLEN bytes and `data_len` the length of its data.
    fn read(ty: PduType, fl: u8, h: &[u8], data_len: usize) -> Result<Self, PduError> {
        let invalid = |offset: usize, value: u32| PduError::InvalidField {
            pdu_type: ty,
            offset: offset as u8,
            value,
        };
        Ok(match ty {
            PduType::IcReq | PduType::IcResp => {
                // Only PFV 0 exists; SPDK reports it, and a PDA over 31, as invalid header fields.
                let pfv = le16(h, IC_PFV);
                if pfv != 0 {
                    return Err(invalid(IC_PFV, pfv.into()));
                }
                let Some(pda) = Pda::new(h[IC_PDA]) else {
                    return Err(invalid(IC_PDA, h[IC_PDA].into()));
                };
                let digests = Digests::from_dgst(h[IC_DGST]);
                let max = le32(h, IC_MAX);
                if ty == PduType::IcReq {
                    Self::IcReq(IcReq {
                        pfv,
                        hpda: pda,
                        digests,
                        maxr2t: max,
                    })
                } else {
                    // The spec: a multiple of dwords. Zero would stall every R2T-driven write.
                    if max == 0 || !max.is_multiple_of(4) {
                        return Err(invalid(IC_MAX, max));
                    }
                    Self::IcResp(IcResp {
                        pfv,
                        cpda: pda,
                        digests,
                        maxh2cdata: max,
                    })
                }
            }
            PduType::H2CTermReq | PduType::C2HTermReq => {
                let t = TermReq {
                    fes: le16(h, TERM_FES),
                    fei: le32(h, TERM_FEI),
                };
                if ty == PduType::H2CTermReq {
                    Self::H2CTermReq(t)
                } else {
                    Self::C2HTermReq(t)
                }
            }
            PduType::CapsuleCmd => Self::CapsuleCmd(CapsuleCmd {
                sqe: array(h, CAPSULE),
            }),
            PduType::CapsuleResp => Self::CapsuleResp(CapsuleResp {
                cqe: array(h, CAPSULE),
            }),
            PduType::H2CData | PduType::C2HData => {
                let datal = le32(h, XFER_LEN);
                if datal as usize != data_len {
                    return Err(invalid(XFER_LEN, datal));
                }
                let (cccid, datao) = (le16(h, CCCID), le32(h, XFER_OFFSET));
                let last = fl & flags::LAST_PDU != 0;
                if ty == PduType::H2CData {
                    Self::H2CData(H2CData {
                        cccid,
                        ttag: le16(h, TTAG),
                        datao,
                        last,
                    })
                } else {
                    Self::C2HData(C2HData {
                        cccid,
                        datao,
                        last,
                        success: fl & flags::SUCCESS != 0,
                    })
                }
            }
            PduType::R2T => Self::R2T(R2T {
                cccid: le16(h, CCCID),
                ttag: le16(h, TTAG),
                r2to: le32(h, XFER_OFFSET),
                r2tl: le32(h, XFER_LEN),
            }),
        })
    }
}

fn write_ic(h: &mut [u8], pfv: u16, pda: Pda, digests: Digests, max: u32) {
    put16(h, IC_PFV, pfv);
    h[IC_PDA] = pda.get();
    h[IC_DGST] = digests.dgst();
    put32(h, IC_MAX, max);
}

fn write_xfer(h: &mut [u8], cccid: u16, ttag: u16, offset: u32, len: u32) {
    put16(h, CCCID, cccid);
    put16(h, TTAG, ttag);
    put32(h, XFER_OFFSET, offset);
    put32(h, XFER_LEN, len);
}
