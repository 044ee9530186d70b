//! Sending: a PDU's head into a stack buffer; its data stays where it is.

use crc32c::{crc32c, crc32c_append};

use super::*;

/// How to send a PDU whose head [`encode`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Encoded {
    /// Bytes of the head buffer to send first: header, header digest, padding.
    pub head_len: usize,
    /// The whole PDU's length, as its header says.
    pub plen: u32,
    /// Whether the data must be followed by [`data_digest`] of it.
    pub data_digest: bool,
}

/// Why [`encode`] refused a header: a mistake of the caller, never of the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("the {local:?} never sends {pdu_type:?}")]
    WrongDirection { pdu_type: PduType, local: Side },

    #[error("{pdu_type:?} carries no data, {data_len} bytes given")]
    DataNotAllowed { pdu_type: PduType, data_len: usize },

    #[error("{pdu_type:?} cannot carry {data_len} bytes of data")]
    TooLong { pdu_type: PduType, data_len: usize },

    #[error("C2HData with SUCCESS must be the LAST of its command")]
    SuccessWithoutLast,
}

/// Writes the head of a PDU (header, header digest, zeroed padding up to PDO) into `out`, for a
/// PDU followed by `data_len` bytes of data. The link's digests and the receiver's alignment
/// apply to every type but ICReq, ICResp and TermReq, which have neither. A TermReq's data is
/// the echoed header of the PDU in error.
pub fn encode(
    header: &Header,
    data_len: usize,
    link: &Link,
    out: &mut HeadBuf,
) -> Result<Encoded, EncodeError> {
    let ty = header.pdu_type();
    if ty.sender() != link.local {
        return Err(EncodeError::WrongDirection {
            pdu_type: ty,
            local: link.local,
        });
    }
    let too_long = EncodeError::TooLong {
        pdu_type: ty,
        data_len,
    };
    let digests = if ty.has_digests() {
        link.digests
    } else {
        Digests::NONE
    };
    let hlen = usize::from(ty.hlen());
    let header_end = hlen + if digests.header { DIGEST_LEN } else { 0 };

    let (pdo, head_len, data_digest) = if data_len == 0 {
        (0, header_end, false)
    } else if ty.carries_data() {
        let pdo = header_end.next_multiple_of(link.pda_for(ty).alignment());
        (pdo, pdo, digests.data)
    } else if ty.is_term_req() {
        if data_len > TERM_REQ_MAX_DATA {
            return Err(too_long);
        }
        (0, header_end, false)
    } else {
        return Err(EncodeError::DataNotAllowed {
            pdu_type: ty,
            data_len,
        });
    };
    let plen = head_len
        .checked_add(data_len)
        .and_then(|n| n.checked_add(if data_digest { DIGEST_LEN } else { 0 }))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(too_long)?;
    if let Header::C2HData(d) = header
        && d.success
        && !d.last
    {
        return Err(EncodeError::SuccessWithoutLast);
    }

    out[..head_len].fill(0);
    let mut fl = header.flags();
    if digests.header {
        fl |= flags::HDGSTF;
    }
    if data_digest {
        fl |= flags::DDGSTF;
    }
    out[0] = ty as u8;
    out[CH_FLAGS] = fl;
    out[CH_HLEN] = ty.hlen();
    // Below MAX_HEAD_LEN: a PDA's alignment is at most 128 bytes.
    out[CH_PDO] = pdo as u8;
    put32(out, CH_PLEN, plen);
    // data_len fits: plen does. Only H2CData and C2HData read it.
    header.write(&mut out[..hlen], data_len as u32);
    if digests.header {
        let digest = crc32c(&out[..hlen]);
        put32(out, hlen, digest);
    }
    Ok(Encoded {
        head_len,
        plen,
        data_digest,
    })
}

/// The data digest of data sent as one or several slices (a writev's iovecs), little endian,
/// ready to send after it.
pub fn data_digest<I>(parts: I) -> [u8; DIGEST_LEN]
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    parts
        .into_iter()
        .fold(0, |crc, part| crc32c_append(crc, part.as_ref()))
        .to_le_bytes()
}
