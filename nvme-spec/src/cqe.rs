//! The completion queue entry: 16 bytes, a PCIe completion queue's entry and a fabrics response
//! capsule alike.

use std::mem::{offset_of, size_of};

use crate::bytes::{le16, le32, put16, put32};
use crate::status::Status;

/// Length of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// A completion queue entry (16 bytes). `#[repr(C)]` with no padding, as the PCIe driver reads
/// it from the completion queue; fabrics use [`Cqe::to_bytes`] and [`Cqe::from_bytes`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result (Connect: the controller ID; Property Get: the low half).
    pub dw0: u32,
    /// Command specific result (Property Get of 8 bytes: the high half).
    pub dw1: u32,
    /// Submission queue head pointer (Linux's fabrics host ignores it).
    pub sqhd: u16,
    /// Submission queue identifier.
    pub sqid: u16,
    /// The command's CID, echoed exactly.
    pub cid: u16,
    /// Phase tag \[0\] (always 0 on fabrics), then the [`Status`] in bits 15:1.
    pub status: u16,
}

const _: () = assert!(size_of::<Cqe>() == CQE_LEN);
const _: () = assert!(offset_of!(Cqe, sqhd) == 8);
const _: () = assert!(offset_of!(Cqe, cid) == 12);
const _: () = assert!(offset_of!(Cqe, status) == 14);

impl Cqe {
    /// The completion of command `cid` with `status` and result `dw0`/`dw1` (phase tag 0,
    /// SQHD and SQID 0: what a fabrics controller sends).
    pub const fn new(cid: u16, status: Status, dw0: u32, dw1: u32) -> Cqe {
        Cqe {
            dw0,
            dw1,
            sqhd: 0,
            sqid: 0,
            cid,
            status: status.0 << 1,
        }
    }

    /// Phase tag.
    #[inline]
    pub const fn phase(&self) -> bool {
        self.status & 1 != 0
    }

    /// The status field without the phase tag.
    #[inline]
    pub const fn status(&self) -> Status {
        Status(self.status >> 1)
    }

    /// Encodes the completion for a response capsule. Pairs with [`Cqe::from_bytes`].
    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        put32(&mut b, 0, self.dw0);
        put32(&mut b, 4, self.dw1);
        put16(&mut b, 8, self.sqhd);
        put16(&mut b, 10, self.sqid);
        put16(&mut b, 12, self.cid);
        put16(&mut b, 14, self.status);
        b
    }

    /// Decodes the 16 bytes of a response capsule.
    pub fn from_bytes(b: &[u8; CQE_LEN]) -> Cqe {
        Cqe {
            dw0: le32(b, 0),
            dw1: le32(b, 4),
            sqhd: le16(b, 8),
            sqid: le16(b, 10),
            cid: le16(b, 12),
            status: le16(b, 14),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::sct;

    #[test]
    fn status_decodes_from_dword_3() {
        // DW3 = CID 5, phase 1, SC 0x80 (LBA out of range), SCT 0, DNR 1.
        let dw3: u32 = 5 | 1 << 16 | 0x80 << 17 | 1 << 31;
        let mut raw = [0u8; CQE_LEN];
        raw[8..12].copy_from_slice(&0x0001_0003u32.to_le_bytes());
        raw[12..].copy_from_slice(&dw3.to_le_bytes());
        let c = Cqe::from_bytes(&raw);
        assert_eq!((c.cid, c.sqhd, c.sqid), (5, 3, 1));
        assert!(c.phase());
        let st = c.status();
        assert_eq!((st.sct(), st.sc(), st.dnr()), (sct::GENERIC, 0x80, true));
        assert_eq!(st, Status::LBA_OUT_OF_RANGE);
        assert_eq!(c.to_bytes(), raw);
    }

    #[test]
    fn new_round_trips_with_phase_0() {
        let cqe = Cqe::new(0xa123, Status::INVALID_FIELD, 0x1122_3344, 0x5566_7788);
        let b = cqe.to_bytes();
        assert_eq!(&b[12..14], &[0x23, 0xa1]);
        // SC 2 in bits 8:1, DNR in bit 15, phase tag 0.
        assert_eq!(u16::from_le_bytes([b[14], b[15]]), (2 << 1) | (1 << 15));
        assert!(!cqe.phase());
        assert_eq!(Cqe::from_bytes(&b), cqe);
        assert_eq!(cqe.status(), Status::INVALID_FIELD);
    }
}
