//! The submission queue entry: 64 bytes, the same on PCIe and in a fabrics command capsule, but
//! for the data pointer: PRP entries on PCIe, one SGL descriptor on fabrics.

use std::mem::{offset_of, size_of};

use crate::bytes::{le32, le64, put32, put64};
use crate::opcode::admin_opc;

/// Length of a submission queue entry.
pub const SQE_LEN: usize = 64;

/// A submission queue entry (64 bytes). `#[repr(C)]` with no padding: the PCIe driver writes it
/// into the submission queue as it is; fabrics send [`Sqe::to_bytes`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    /// OPC \[7:0\], FUSE \[9:8\], PSDT \[15:14\], CID \[31:16\].
    pub cdw0: u32,
    /// Namespace ID (for fabrics commands its low byte is the command type, [`Sqe::fctype`]).
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    /// Metadata pointer.
    pub mptr: u64,
    /// Data pointer, bytes 24-31: PRP entry 1 on PCIe; SGL descriptor 1's address on fabrics
    /// ([`Sqe::sgl`]).
    pub prp1: u64,
    /// Data pointer, bytes 32-39: PRP entry 2 or a PRP list pointer on PCIe; SGL descriptor
    /// 1's length, reserved bytes and type on fabrics.
    pub prp2: u64,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

const _: () = assert!(size_of::<Sqe>() == SQE_LEN);
const _: () = assert!(offset_of!(Sqe, mptr) == 16);
const _: () = assert!(offset_of!(Sqe, prp1) == 24);
const _: () = assert!(offset_of!(Sqe, prp2) == 32);
const _: () = assert!(offset_of!(Sqe, cdw10) == 40);
const _: () = assert!(offset_of!(Sqe, cdw15) == 60);

impl Sqe {
    /// PSDT 01b: the data pointer is an SGL (metadata, if any, one contiguous buffer). What
    /// Linux's and SPDK's fabrics hosts set on every command.
    pub const PSDT_SGL: u8 = 0b01;

    /// A zeroed command with opcode `opc` and command identifier `cid` (PRPs, no fusing).
    #[inline]
    pub const fn new(opc: u8, cid: u16) -> Sqe {
        Sqe {
            cdw0: opc as u32 | (cid as u32) << 16,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            mptr: 0,
            prp1: 0,
            prp2: 0,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
        }
    }

    /// Opcode.
    pub const fn opcode(&self) -> u8 {
        self.cdw0 as u8
    }

    /// Command identifier, echoed in the completion. On fabrics its top bits may be a host's
    /// generation counter: never index a table by it.
    pub const fn cid(&self) -> u16 {
        (self.cdw0 >> 16) as u16
    }

    /// Sets the command identifier.
    pub fn set_cid(&mut self, cid: u16) {
        self.cdw0 = (self.cdw0 & 0xffff) | u32::from(cid) << 16;
    }

    /// FUSE (CDW0 bits 9:8).
    pub const fn fuse(&self) -> u8 {
        ((self.cdw0 >> 8) & 3) as u8
    }

    /// PSDT (CDW0 bits 15:14): 0 for PRPs, [`Sqe::PSDT_SGL`] for an SGL.
    pub const fn psdt(&self) -> u8 {
        ((self.cdw0 >> 14) & 3) as u8
    }

    /// Starting LBA (CDW10-11) of read/write/write-zeroes.
    pub const fn slba(&self) -> u64 {
        self.cdw10 as u64 | (self.cdw11 as u64) << 32
    }

    /// Sets the starting LBA (CDW10-11).
    pub fn set_slba(&mut self, lba: u64) {
        self.cdw10 = lba as u32;
        self.cdw11 = (lba >> 32) as u32;
    }

    /// Whether this is a fabrics command (opcode 7Fh).
    pub const fn is_fabrics(&self) -> bool {
        self.opcode() == admin_opc::FABRICS
    }

    /// The fabrics command type (byte 4; meaningful when [`Sqe::is_fabrics`]).
    pub const fn fctype(&self) -> u8 {
        self.nsid as u8
    }

    /// Sets the fabrics command type (byte 4), keeping nothing else of the NSID field, which
    /// fabrics commands reserve.
    pub fn set_fctype(&mut self, fctype: u8) {
        self.nsid = u32::from(fctype);
    }

    /// The data pointer read as SGL descriptor 1 (fabrics).
    pub const fn sgl(&self) -> SglDesc {
        let hi = self.prp2.to_le_bytes();
        SglDesc {
            addr: self.prp1,
            len: self.prp2 as u32,
            rsvd: [hi[4], hi[5], hi[6]],
            sgl_type: hi[7],
        }
    }

    /// Makes `sgl` the data pointer and sets PSDT to [`Sqe::PSDT_SGL`].
    pub fn set_sgl(&mut self, sgl: SglDesc) {
        let mut hi = [0u8; 8];
        hi[..4].copy_from_slice(&sgl.len.to_le_bytes());
        hi[4..7].copy_from_slice(&sgl.rsvd);
        hi[7] = sgl.sgl_type;
        self.prp1 = sgl.addr;
        self.prp2 = u64::from_le_bytes(hi);
        self.cdw0 = (self.cdw0 & !(3 << 14)) | u32::from(Sqe::PSDT_SGL) << 14;
    }

    /// Decodes the 64 bytes of a command as they arrive in a capsule.
    pub fn from_bytes(b: &[u8; SQE_LEN]) -> Sqe {
        let dw = |i: usize| le32(b, 4 * i);
        Sqe {
            cdw0: dw(0),
            nsid: dw(1),
            cdw2: dw(2),
            cdw3: dw(3),
            mptr: le64(b, 16),
            prp1: le64(b, 24),
            prp2: le64(b, 32),
            cdw10: dw(10),
            cdw11: dw(11),
            cdw12: dw(12),
            cdw13: dw(13),
            cdw14: dw(14),
            cdw15: dw(15),
        }
    }

    /// Encodes the command for a capsule. Pairs with [`Sqe::from_bytes`].
    pub fn to_bytes(&self) -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        let dws = [
            (0, self.cdw0),
            (1, self.nsid),
            (2, self.cdw2),
            (3, self.cdw3),
            (10, self.cdw10),
            (11, self.cdw11),
            (12, self.cdw12),
            (13, self.cdw13),
            (14, self.cdw14),
            (15, self.cdw15),
        ];
        for (i, dw) in dws {
            put32(&mut b, 4 * i, dw);
        }
        put64(&mut b, 16, self.mptr);
        put64(&mut b, 24, self.prp1);
        put64(&mut b, 32, self.prp2);
        b
    }
}

/// SGL descriptor type byte: descriptor type in bits 7:4, subtype in bits 3:0.
pub mod sgl_type {
    /// Data Block, subtype Offset: data inside the command capsule (in-capsule writes).
    pub const DATA_BLOCK_OFFSET: u8 = 0x01;
    /// Transport SGL Data Block, transport specific: data moved by the transport (R2T and
    /// H2CData for writes, C2HData for reads); also the null descriptor (length 0).
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5a;
}

/// An SGL descriptor (16 bytes; a fabrics command's data pointer, [`Sqe::sgl`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SglDesc {
    /// Address (an offset into the capsule for in-capsule data).
    pub addr: u64,
    /// Length of the data in bytes.
    pub len: u32,
    pub rsvd: [u8; 3],
    /// Descriptor type and subtype ([`sgl_type`]).
    pub sgl_type: u8,
}

impl SglDesc {
    /// `len` bytes of data in the command capsule, right after the SQE (ICDOFF 0): a write
    /// small enough to travel in-capsule.
    pub const fn in_capsule(len: u32) -> SglDesc {
        SglDesc {
            addr: 0,
            len,
            rsvd: [0; 3],
            sgl_type: sgl_type::DATA_BLOCK_OFFSET,
        }
    }

    /// `len` bytes moved by the transport: C2HData for a read, R2T and H2CData for a write.
    pub const fn transport(len: u32) -> SglDesc {
        SglDesc {
            addr: 0,
            len,
            rsvd: [0; 3],
            sgl_type: sgl_type::TRANSPORT_DATA_BLOCK,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvm_opc;

    #[test]
    fn fields_round_trip() {
        let mut s = Sqe::new(nvm_opc::WRITE, 0x1234);
        assert_eq!(s.opcode(), nvm_opc::WRITE);
        assert_eq!(s.cid(), 0x1234);
        s.set_cid(7);
        assert_eq!(s.cid(), 7);
        assert_eq!(s.opcode(), nvm_opc::WRITE);
        s.set_slba(0x1_2345_6789);
        assert_eq!(s.cdw10, 0x2345_6789);
        assert_eq!(s.cdw11, 1);
        assert_eq!(s.slba(), 0x1_2345_6789);
    }

    #[test]
    fn bytes_match_the_spec_layout() {
        let mut s = Sqe::new(0x02, 0xbeef);
        s.nsid = 1;
        s.prp1 = 0x1122_3344_5566_7788;
        s.cdw12 = 0xabcd;
        let b = s.to_bytes();
        assert_eq!(&b[0..4], &[0x02, 0, 0xef, 0xbe]);
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[24..32], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[48..52], &0xabcdu32.to_le_bytes());
    }

    #[test]
    fn from_bytes_reads_every_field_in_place() {
        let raw: [u8; SQE_LEN] = std::array::from_fn(|i| i as u8);
        let sqe = Sqe::from_bytes(&raw);
        assert_eq!(sqe.opcode(), 0);
        assert_eq!((sqe.fuse(), sqe.psdt()), (1, 0));
        assert_eq!(sqe.cid(), 0x0302);
        assert_eq!(sqe.nsid, 0x0706_0504);
        assert_eq!(sqe.fctype(), 4);
        assert_eq!(sqe.mptr, 0x1716_1514_1312_1110);
        let sgl = sqe.sgl();
        assert_eq!(sgl.addr, 0x1f1e_1d1c_1b1a_1918);
        assert_eq!(sgl.len, 0x2322_2120);
        assert_eq!(sgl.rsvd, [0x24, 0x25, 0x26]);
        assert_eq!(sgl.sgl_type, 0x27);
        assert_eq!(sqe.cdw10, 0x2b2a_2928);
        assert_eq!(sqe.cdw15, 0x3f3e_3d3c);
        assert_eq!(sqe.to_bytes(), raw);
    }

    #[test]
    fn sgl_takes_the_data_pointer_and_psdt() {
        let mut sqe = Sqe::new(admin_opc::FABRICS, 9);
        sqe.set_fctype(crate::fctype::CONNECT);
        assert!(sqe.is_fabrics());
        let sgl = SglDesc {
            addr: 0x0102_0304_0506_0708,
            len: 1024,
            rsvd: [7, 8, 9],
            sgl_type: sgl_type::DATA_BLOCK_OFFSET,
        };
        sqe.set_sgl(sgl);
        assert_eq!(sqe.sgl(), sgl);
        assert_eq!(sqe.psdt(), Sqe::PSDT_SGL);
        assert_eq!((sqe.opcode(), sqe.cid()), (admin_opc::FABRICS, 9));
        let b = sqe.to_bytes();
        // Linux's `nvme_sgl_desc`: address, length, 3 reserved bytes, type.
        assert_eq!(&b[24..32], &sgl.addr.to_le_bytes());
        assert_eq!(&b[32..40], &[0, 4, 0, 0, 7, 8, 9, 0x01]);
        assert_eq!(b[1], 0x40, "PSDT 01b in bits 7:6 of byte 1");
        assert_eq!(b[4], crate::fctype::CONNECT);
        assert_eq!(
            SglDesc::transport(8).sgl_type,
            sgl_type::TRANSPORT_DATA_BLOCK
        );
        assert_eq!(SglDesc::in_capsule(8).len, 8);
    }
}
