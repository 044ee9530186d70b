//! NVMe data structures as the device sees them: submission and completion queue entries,
//! Identify data, Dataset Management ranges, opcodes and status codes (NVMe base spec 2.0,
//! NVM command set spec 1.0). Layouts are `#[repr(C)]` with size and offset asserts; nothing
//! here touches hardware.

use std::fmt;
use std::mem::{offset_of, size_of};

use pmio::request::NvmeStatus;

/// Admin command opcodes the driver uses.
pub mod admin_opc {
    /// Delete I/O Submission Queue.
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue.
    pub const CREATE_IO_SQ: u8 = 0x01;
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue.
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue.
    pub const CREATE_IO_CQ: u8 = 0x05;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
}

/// NVM command set opcodes the driver uses.
pub mod nvm_opc {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace (NSID in the command).
    pub const NAMESPACE: u32 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u32 = 0x01;
    /// Active namespace ID list (NSIDs greater than the command's NSID).
    pub const ACTIVE_NS_LIST: u32 = 0x02;
}

/// Feature identifiers.
pub mod fid {
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u32 = 0x07;
}

/// A submission queue entry (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    /// OPC [7:0], FUSE [9:8], PSDT [15:14], CID [31:16].
    pub cdw0: u32,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    /// Metadata pointer.
    pub mptr: u64,
    /// Data pointer: PRP entry 1.
    pub prp1: u64,
    /// Data pointer: PRP entry 2 or PRP list pointer.
    pub prp2: u64,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

const _: () = assert!(size_of::<Sqe>() == 64);
const _: () = assert!(offset_of!(Sqe, mptr) == 16);
const _: () = assert!(offset_of!(Sqe, prp1) == 24);
const _: () = assert!(offset_of!(Sqe, prp2) == 32);
const _: () = assert!(offset_of!(Sqe, cdw10) == 40);
const _: () = assert!(offset_of!(Sqe, cdw15) == 60);

impl Sqe {
    /// A zeroed command with opcode `opc` and command identifier `cid` (PRPs, no fusing).
    #[inline]
    pub fn new(opc: u8, cid: u16) -> Sqe {
        Sqe {
            cdw0: u32::from(opc) | u32::from(cid) << 16,
            ..Sqe::default()
        }
    }

    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.cdw0 as u8
    }

    /// Command identifier.
    pub fn cid(&self) -> u16 {
        (self.cdw0 >> 16) as u16
    }

    /// Sets the command identifier.
    pub fn set_cid(&mut self, cid: u16) {
        self.cdw0 = (self.cdw0 & 0xffff) | u32::from(cid) << 16;
    }

    /// Starting LBA (CDW10-11) of read/write/write-zeroes.
    pub fn slba(&self) -> u64 {
        u64::from(self.cdw10) | u64::from(self.cdw11) << 32
    }

    /// Sets the starting LBA (CDW10-11).
    pub fn set_slba(&mut self, lba: u64) {
        self.cdw10 = lba as u32;
        self.cdw11 = (lba >> 32) as u32;
    }
}

/// A completion queue entry (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result.
    pub dw0: u32,
    pub dw1: u32,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue identifier.
    pub sqid: u16,
    /// Command identifier.
    pub cid: u16,
    /// P [0], SC [8:1], SCT [11:9], CRD [13:12], M [14], DNR [15].
    pub status: u16,
}

const _: () = assert!(size_of::<Cqe>() == 16);
const _: () = assert!(offset_of!(Cqe, sqhd) == 8);
const _: () = assert!(offset_of!(Cqe, cid) == 12);
const _: () = assert!(offset_of!(Cqe, status) == 14);

impl Cqe {
    /// Phase tag.
    #[inline]
    pub fn phase(&self) -> bool {
        self.status & 1 != 0
    }

    /// The status field without the phase tag.
    #[inline]
    pub fn status(&self) -> Status {
        Status(self.status >> 1)
    }
}

/// Status code types.
pub mod sct {
    /// Generic command status.
    pub const GENERIC: u8 = 0;
    /// Command specific status.
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and data integrity errors.
    pub const MEDIA: u8 = 2;
    /// Path related status.
    pub const PATH: u8 = 3;
    /// Vendor specific.
    pub const VENDOR: u8 = 7;
}

/// A completion status (the CQE status field without the phase tag, 15 bits).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Status(pub u16);

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status(0);

    /// Builds a status from its fields (for tests and emulators).
    pub const fn new(sct: u8, sc: u8, dnr: bool) -> Status {
        Status(sc as u16 | ((sct as u16 & 7) << 8) | ((dnr as u16) << 14))
    }

    /// Status code.
    pub fn sc(self) -> u8 {
        self.0 as u8
    }

    /// Status code type.
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }

    /// Command retry delay index.
    pub fn crd(self) -> u8 {
        ((self.0 >> 11) & 3) as u8
    }

    /// More information in the error log.
    pub fn more(self) -> bool {
        self.0 & (1 << 13) != 0
    }

    /// Do not retry.
    pub fn dnr(self) -> bool {
        self.0 & (1 << 14) != 0
    }

    /// Whether the command succeeded.
    pub fn is_success(self) -> bool {
        self.sct() == sct::GENERIC && self.sc() == 0
    }

    /// Whether the host may retry the command (SPDK's `nvme_completion_is_retry`): only
    /// transient statuses, and never with DNR set.
    pub fn is_retryable(self) -> bool {
        if self.dnr() {
            return false;
        }
        match self.sct() {
            sct::GENERIC => matches!(
                self.sc(),
                0x21 /* command interrupted */
                    | 0x82 /* namespace not ready */
                    | 0x84 /* format in progress */
            ),
            sct::PATH => matches!(self.sc(), 0x00 /* internal path error */),
            _ => false,
        }
    }

    /// The block layer's view of the status.
    pub fn to_nvme_status(self) -> NvmeStatus {
        NvmeStatus {
            sct: self.sct(),
            sc: self.sc(),
            dnr: self.dnr(),
        }
    }

    /// A short description of the status code (the spec's name), "unknown" when not listed.
    pub fn describe(self) -> &'static str {
        match (self.sct(), self.sc()) {
            (sct::GENERIC, 0x00) => "successful completion",
            (sct::GENERIC, 0x01) => "invalid command opcode",
            (sct::GENERIC, 0x02) => "invalid field in command",
            (sct::GENERIC, 0x03) => "command ID conflict",
            (sct::GENERIC, 0x04) => "data transfer error",
            (sct::GENERIC, 0x05) => "commands aborted due to power loss notification",
            (sct::GENERIC, 0x06) => "internal error",
            (sct::GENERIC, 0x07) => "command abort requested",
            (sct::GENERIC, 0x08) => "command aborted due to SQ deletion",
            (sct::GENERIC, 0x09) => "command aborted due to failed fused command",
            (sct::GENERIC, 0x0a) => "command aborted due to missing fused command",
            (sct::GENERIC, 0x0b) => "invalid namespace or format",
            (sct::GENERIC, 0x0c) => "command sequence error",
            (sct::GENERIC, 0x0d) => "invalid SGL segment descriptor",
            (sct::GENERIC, 0x0f) => "invalid SGL data block descriptor",
            (sct::GENERIC, 0x13) => "invalid PRP offset",
            (sct::GENERIC, 0x15) => "operation denied",
            (sct::GENERIC, 0x1d) => "namespace is write protected",
            (sct::GENERIC, 0x21) => "command interrupted",
            (sct::GENERIC, 0x80) => "LBA out of range",
            (sct::GENERIC, 0x81) => "capacity exceeded",
            (sct::GENERIC, 0x82) => "namespace not ready",
            (sct::GENERIC, 0x83) => "reservation conflict",
            (sct::GENERIC, 0x84) => "format in progress",
            (sct::COMMAND_SPECIFIC, 0x00) => "completion queue invalid",
            (sct::COMMAND_SPECIFIC, 0x01) => "invalid queue identifier",
            (sct::COMMAND_SPECIFIC, 0x02) => "invalid queue size",
            (sct::COMMAND_SPECIFIC, 0x03) => "abort command limit exceeded",
            (sct::COMMAND_SPECIFIC, 0x05) => "asynchronous event request limit exceeded",
            (sct::COMMAND_SPECIFIC, 0x0c) => "invalid queue deletion",
            (sct::COMMAND_SPECIFIC, 0x0d) => "feature identifier not saveable",
            (sct::COMMAND_SPECIFIC, 0x0e) => "feature not changeable",
            (sct::COMMAND_SPECIFIC, 0x80) => "conflicting attributes",
            (sct::COMMAND_SPECIFIC, 0x81) => "invalid protection information",
            (sct::COMMAND_SPECIFIC, 0x82) => "attempted write to read only range",
            (sct::MEDIA, 0x80) => "write fault",
            (sct::MEDIA, 0x81) => "unrecovered read error",
            (sct::MEDIA, 0x82) => "end-to-end guard check error",
            (sct::MEDIA, 0x83) => "end-to-end application tag check error",
            (sct::MEDIA, 0x84) => "end-to-end reference tag check error",
            (sct::MEDIA, 0x85) => "compare failure",
            (sct::MEDIA, 0x86) => "access denied",
            (sct::MEDIA, 0x87) => "deallocated or unwritten logical block",
            (sct::PATH, 0x00) => "internal path error",
            (sct::PATH, 0x60) => "transport error",
            _ => "unknown status",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (sct {:#x}, sc {:#04x}{})",
            self.describe(),
            self.sct(),
            self.sc(),
            if self.dnr() { ", dnr" } else { "" }
        )
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Identify Controller data (CNS 01h, 4096 bytes); fields the driver uses, the rest reserved.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdentifyController {
    pub vid: u16,
    pub ssvid: u16,
    /// Serial number (ASCII, space padded).
    pub sn: [u8; 20],
    /// Model number (ASCII, space padded).
    pub mn: [u8; 40],
    /// Firmware revision (ASCII, space padded).
    pub fr: [u8; 8],
    pub rab: u8,
    pub ieee: [u8; 3],
    pub cmic: u8,
    /// Maximum data transfer size: 2^MDTS units of CAP.MPSMIN; 0 = no limit.
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: u32,
    pub rtd3r: u32,
    /// RTD3 entry latency (µs): bounds the shutdown wait.
    pub rtd3e: u32,
    pub oaes: u32,
    pub ctratt: u32,
    _rsvd100: [u8; 412],
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    /// Number of namespaces (highest NSID).
    pub nn: u32,
    /// Optional NVM command support: bit 2 DSM, bit 3 Write Zeroes.
    pub oncs: u16,
    pub fuses: u16,
    pub fna: u8,
    /// Volatile write cache: bit 0 present.
    pub vwc: u8,
    pub awun: u16,
    pub awupf: u16,
    pub nvscc: u8,
    pub nwpc: u8,
    pub acwu: u16,
    _rsvd534: u16,
    pub sgls: u32,
    pub mnan: u32,
    _rsvd544: [u8; 224],
    pub subnqn: [u8; 256],
    _rsvd1024: [u8; 3072],
}

const _: () = assert!(size_of::<IdentifyController>() == 4096);
const _: () = assert!(offset_of!(IdentifyController, mdts) == 77);
const _: () = assert!(offset_of!(IdentifyController, rtd3e) == 88);
const _: () = assert!(offset_of!(IdentifyController, sqes) == 512);
const _: () = assert!(offset_of!(IdentifyController, nn) == 516);
const _: () = assert!(offset_of!(IdentifyController, oncs) == 520);
const _: () = assert!(offset_of!(IdentifyController, vwc) == 525);
const _: () = assert!(offset_of!(IdentifyController, sgls) == 536);
const _: () = assert!(offset_of!(IdentifyController, subnqn) == 768);

impl IdentifyController {
    /// ONCS bit: Dataset Management supported.
    pub const ONCS_DSM: u16 = 1 << 2;
    /// ONCS bit: Write Zeroes supported.
    pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;

    /// An all-zero structure (what a buffer holds before Identify fills it).
    pub fn zeroed() -> IdentifyController {
        // SAFETY: every field is an integer or an array of integers; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }

    /// Serial number, trimmed.
    pub fn serial(&self) -> String {
        ascii_field(&self.sn)
    }

    /// Model number, trimmed.
    pub fn model(&self) -> String {
        ascii_field(&self.mn)
    }

    /// Firmware revision, trimmed.
    pub fn firmware(&self) -> String {
        ascii_field(&self.fr)
    }
}

/// An LBA format descriptor of Identify Namespace.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbaFormat(pub u32);

impl LbaFormat {
    /// Metadata bytes per block.
    pub fn ms(self) -> u16 {
        self.0 as u16
    }

    /// log2 of the data block size (0 = format not available).
    pub fn lbads(self) -> u8 {
        (self.0 >> 16) as u8
    }
}

/// Identify Namespace data (CNS 00h, 4096 bytes); fields the driver uses, the rest reserved.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IdentifyNamespace {
    /// Namespace size in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    pub nuse: u64,
    pub nsfeat: u8,
    /// Number of LBA formats, 0-based.
    pub nlbaf: u8,
    /// Formatted LBA size: index bits [3:0] and (NVMe 2.0, more than 16 formats) [6:5].
    pub flbas: u8,
    pub mc: u8,
    pub dpc: u8,
    pub dps: u8,
    pub nmic: u8,
    pub rescap: u8,
    pub fpi: u8,
    pub dlfeat: u8,
    pub nawun: u16,
    pub nawupf: u16,
    pub nacwu: u16,
    pub nabsn: u16,
    pub nabo: u16,
    pub nabspf: u16,
    pub noiob: u16,
    pub nvmcap: [u8; 16],
    _rsvd64: [u8; 40],
    /// Namespace globally unique identifier (0 when not reported).
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier (0 when not reported).
    pub eui64: [u8; 8],
    /// LBA formats.
    pub lbaf: [LbaFormat; 64],
    _rsvd384: [u8; 3712],
}

const _: () = assert!(size_of::<IdentifyNamespace>() == 4096);
const _: () = assert!(offset_of!(IdentifyNamespace, flbas) == 26);
const _: () = assert!(offset_of!(IdentifyNamespace, nvmcap) == 48);
const _: () = assert!(offset_of!(IdentifyNamespace, nguid) == 104);
const _: () = assert!(offset_of!(IdentifyNamespace, eui64) == 120);
const _: () = assert!(offset_of!(IdentifyNamespace, lbaf) == 128);

impl IdentifyNamespace {
    /// An all-zero structure.
    pub fn zeroed() -> IdentifyNamespace {
        // SAFETY: every field is an integer or an array of integers; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }

    /// Index of the format in use.
    pub fn format_index(&self) -> usize {
        let low = self.flbas & 0xf;
        let high = if self.nlbaf >= 16 {
            (self.flbas >> 5) & 3
        } else {
            0
        };
        usize::from(high << 4 | low)
    }

    /// The LBA format in use.
    pub fn format(&self) -> LbaFormat {
        self.lbaf[self.format_index() & 63]
    }
}

/// A Dataset Management range (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DsmRange {
    /// Context attributes.
    pub cattr: u32,
    /// Length in logical blocks.
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

const _: () = assert!(size_of::<DsmRange>() == 16);

/// DSM attribute (CDW11): deallocate.
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;

fn ascii_field(b: &[u8]) -> String {
    let s: String = b
        .iter()
        .map(|&c| {
            if c.is_ascii_graphic() || c == b' ' {
                c as char
            } else {
                ' '
            }
        })
        .collect();
    s.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqe_fields_round_trip() {
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
    fn sqe_bytes_match_spec_layout() {
        let mut s = Sqe::new(0x02, 0xbeef);
        s.nsid = 1;
        s.prp1 = 0x1122_3344_5566_7788;
        s.cdw12 = 0xabcd;
        // SAFETY: Sqe is repr(C), 64 bytes of plain integers with no padding.
        let b: [u8; 64] = unsafe { std::mem::transmute(s) };
        assert_eq!(&b[0..4], &[0x02, 0, 0xef, 0xbe]);
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[24..32], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[48..52], &0xabcdu32.to_le_bytes());
    }

    #[test]
    fn cqe_status_decodes() {
        // DW3 = CID 5, phase 1, SC 0x80 (LBA out of range), SCT 0, DNR 1.
        let dw3: u32 = 5 | 1 << 16 | 0x80 << 17 | 1 << 31;
        // SAFETY: Cqe is repr(C), 16 bytes of plain integers with no padding.
        let c: Cqe = unsafe { std::mem::transmute([0u32, 0, 0x0001_0003, dw3]) };
        assert_eq!(c.cid, 5);
        assert_eq!(c.sqhd, 3);
        assert_eq!(c.sqid, 1);
        assert!(c.phase());
        let st = c.status();
        assert_eq!((st.sct(), st.sc(), st.dnr()), (0, 0x80, true));
        assert!(!st.is_success());
        assert!(!st.is_retryable());
        assert_eq!(st.describe(), "LBA out of range");
        assert_eq!(
            st.to_string(),
            "LBA out of range (sct 0x0, sc 0x80, dnr)".to_string()
        );
        assert_eq!(
            st.to_nvme_status(),
            NvmeStatus {
                sct: 0,
                sc: 0x80,
                dnr: true
            }
        );
    }

    #[test]
    fn retryable_statuses_respect_dnr() {
        assert!(Status::new(sct::GENERIC, 0x82, false).is_retryable());
        assert!(!Status::new(sct::GENERIC, 0x82, true).is_retryable());
        assert!(Status::new(sct::PATH, 0x00, false).is_retryable());
        assert!(!Status::new(sct::MEDIA, 0x81, false).is_retryable());
        assert!(!Status::new(sct::GENERIC, 0x02, false).is_retryable());
        assert!(Status::SUCCESS.is_success());
        let s = Status::new(sct::MEDIA, 0x81, true);
        assert_eq!(
            (s.sct(), s.sc(), s.dnr(), s.crd(), s.more()),
            (2, 0x81, true, 0, false)
        );
    }

    #[test]
    fn identify_namespace_format_index() {
        let mut ns = IdentifyNamespace::zeroed();
        ns.nlbaf = 1;
        ns.flbas = 1;
        ns.lbaf[1] = LbaFormat(12 << 16);
        assert_eq!(ns.format().lbads(), 12);
        ns.nlbaf = 20;
        ns.flbas = 0x21; // index 0x11
        ns.lbaf[17] = LbaFormat(9 << 16 | 8);
        assert_eq!(ns.format_index(), 17);
        assert_eq!(ns.format().lbads(), 9);
        assert_eq!(ns.format().ms(), 8);
    }

    #[test]
    fn identify_controller_strings_trim() {
        let mut id = IdentifyController::zeroed();
        id.sn[..8].copy_from_slice(b"deadbeef");
        id.sn[8..].fill(b' ');
        id.mn[..4].copy_from_slice(b"QEMU");
        assert_eq!(id.serial(), "deadbeef");
        assert_eq!(id.model(), "QEMU");
        assert_eq!(id.firmware(), "");
    }
}
