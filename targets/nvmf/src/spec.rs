//! NVMe wire structures and constants the target speaks: the 64-byte submission queue entry,
//! the 16-byte completion, the status field, opcodes, and the byte offsets of the data
//! structures it returns (Identify Controller and Namespace, the discovery log).
//!
//! Sources: NVM Express Base 1.4 and 2.0 (figures of the SQE, CQE, status field, Identify data),
//! NVMe over Fabrics 1.1 (Connect, Property Get/Set, discovery log), checked against Linux's
//! `include/linux/nvme.h` and SPDK's `include/spdk/nvme_spec.h` / `nvmf_spec.h`. Every layout is
//! encoded in one place here; the rest of the crate uses names, never raw offsets.

/// Admin command opcodes (NVMe base, Figure "Opcodes for Admin Commands").
pub mod admin_opc {
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const KEEP_ALIVE: u8 = 0x18;
    /// The fabrics command opcode; the command type is [`super::Sqe::fctype`].
    pub const FABRICS: u8 = 0x7F;
}

/// NVM command set I/O opcodes.
pub mod nvm_opc {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// The fabrics command opcode (also valid on I/O queues: Connect).
    pub const FABRICS: u8 = 0x7F;
}

/// Fabrics command types (byte 4 of a fabrics SQE).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECV: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// Identify CNS values (CDW10 bits 7:0).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    pub const NS_ID_DESCRIPTORS: u8 = 0x03;
    /// I/O command set specific Identify Controller (CSI in CDW11 bits 31:24).
    pub const CTRLR_CSI: u8 = 0x06;
}

/// Log page identifiers (Get Log Page CDW10 bits 7:0).
pub mod lid {
    pub const ERROR: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FIRMWARE_SLOT: u8 = 0x03;
    pub const CHANGED_NS_LIST: u8 = 0x04;
    pub const COMMANDS_EFFECTS: u8 = 0x05;
    pub const DISCOVERY: u8 = 0x70;
}

/// Feature identifiers (Get/Set Features CDW10 bits 7:0).
pub mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MANAGEMENT: u8 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const INTERRUPT_COALESCING: u8 = 0x08;
    pub const INTERRUPT_VECTOR_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_IDENTIFIER: u8 = 0x81;
}

/// Status code types (status field bits 11:9).
pub mod sct {
    pub const GENERIC: u8 = 0x0;
    pub const COMMAND_SPECIFIC: u8 = 0x1;
    pub const MEDIA: u8 = 0x2;
    pub const PATH: u8 = 0x3;
}

/// Status codes (status field bits 8:1). Generic (SCT 0) first, then command specific (SCT 1).
pub mod sc {
    // SCT 0: generic command status.
    pub const SUCCESS: u8 = 0x00;
    pub const INVALID_OPCODE: u8 = 0x01;
    pub const INVALID_FIELD: u8 = 0x02;
    pub const COMMAND_ID_CONFLICT: u8 = 0x03;
    pub const DATA_TRANSFER_ERROR: u8 = 0x04;
    pub const INTERNAL_ERROR: u8 = 0x06;
    pub const ABORT_REQUESTED: u8 = 0x07;
    pub const INVALID_NAMESPACE: u8 = 0x0B;
    pub const COMMAND_SEQUENCE_ERROR: u8 = 0x0C;
    pub const DATA_SGL_LENGTH_INVALID: u8 = 0x0F;
    pub const SGL_DESCRIPTOR_TYPE_INVALID: u8 = 0x11;
    pub const INVALID_SGL_OFFSET: u8 = 0x16;
    pub const KEEP_ALIVE_EXPIRED: u8 = 0x19;
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
    pub const CAPACITY_EXCEEDED: u8 = 0x81;
    pub const NAMESPACE_NOT_READY: u8 = 0x82;

    // SCT 1: command specific status, admin commands.
    pub const INVALID_QUEUE_IDENTIFIER: u8 = 0x01;
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    pub const ABORT_COMMAND_LIMIT_EXCEEDED: u8 = 0x03;
    pub const ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED: u8 = 0x05;
    pub const INVALID_LOG_PAGE: u8 = 0x09;
    pub const FEATURE_NOT_SAVEABLE: u8 = 0x0D;
    pub const FEATURE_NOT_CHANGEABLE: u8 = 0x0E;
    pub const FEATURE_NOT_NS_SPECIFIC: u8 = 0x0F;
    pub const INVALID_CONTROLLER_ID: u8 = 0x1F;

    // SCT 1: command specific status, fabrics Connect (NVMe-oF 1.1, Figure "Connect status").
    pub const CONNECT_INCOMPATIBLE_FORMAT: u8 = 0x80;
    pub const CONNECT_CONTROLLER_BUSY: u8 = 0x81;
    pub const CONNECT_INVALID_PARAMETERS: u8 = 0x82;
    pub const CONNECT_RESTART_DISCOVERY: u8 = 0x83;
    pub const CONNECT_INVALID_HOST: u8 = 0x84;
}

/// The 15-bit status of a completion: type, code, More and Do Not Retry.
///
/// In the CQE it sits in bits 15:1 of the upper half of dword 3; bit 0 is the phase tag, which
/// fabrics transports do not use (always 0 here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Status code type (3 bits).
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do Not Retry: the same command would fail again.
    pub dnr: bool,
    /// More: the error log has more on this command (never set here).
    pub more: bool,
}

impl Status {
    pub const SUCCESS: Status = Status::new(sct::GENERIC, sc::SUCCESS);
    pub const INVALID_OPCODE: Status = Status::new(sct::GENERIC, sc::INVALID_OPCODE).with_dnr();
    pub const INVALID_FIELD: Status = Status::new(sct::GENERIC, sc::INVALID_FIELD).with_dnr();
    pub const COMMAND_ID_CONFLICT: Status =
        Status::new(sct::GENERIC, sc::COMMAND_ID_CONFLICT).with_dnr();
    pub const DATA_TRANSFER_ERROR: Status = Status::new(sct::GENERIC, sc::DATA_TRANSFER_ERROR);
    pub const INTERNAL_ERROR: Status = Status::new(sct::GENERIC, sc::INTERNAL_ERROR);
    pub const ABORT_REQUESTED: Status = Status::new(sct::GENERIC, sc::ABORT_REQUESTED);
    pub const INVALID_NAMESPACE: Status =
        Status::new(sct::GENERIC, sc::INVALID_NAMESPACE).with_dnr();
    pub const COMMAND_SEQUENCE_ERROR: Status =
        Status::new(sct::GENERIC, sc::COMMAND_SEQUENCE_ERROR).with_dnr();
    pub const DATA_SGL_LENGTH_INVALID: Status =
        Status::new(sct::GENERIC, sc::DATA_SGL_LENGTH_INVALID).with_dnr();
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status =
        Status::new(sct::GENERIC, sc::SGL_DESCRIPTOR_TYPE_INVALID).with_dnr();
    pub const INVALID_SGL_OFFSET: Status =
        Status::new(sct::GENERIC, sc::INVALID_SGL_OFFSET).with_dnr();
    pub const LBA_OUT_OF_RANGE: Status = Status::new(sct::GENERIC, sc::LBA_OUT_OF_RANGE).with_dnr();
    pub const CAPACITY_EXCEEDED: Status =
        Status::new(sct::GENERIC, sc::CAPACITY_EXCEEDED).with_dnr();
    /// Transient (no DNR): the host may retry.
    pub const NAMESPACE_NOT_READY: Status = Status::new(sct::GENERIC, sc::NAMESPACE_NOT_READY);

    pub const INVALID_QUEUE_IDENTIFIER: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_QUEUE_IDENTIFIER).with_dnr();
    pub const INVALID_QUEUE_SIZE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_QUEUE_SIZE).with_dnr();
    pub const ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED: Status = Status::new(
        sct::COMMAND_SPECIFIC,
        sc::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED,
    )
    .with_dnr();
    pub const INVALID_LOG_PAGE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_LOG_PAGE).with_dnr();
    pub const FEATURE_NOT_SAVEABLE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::FEATURE_NOT_SAVEABLE).with_dnr();
    pub const FEATURE_NOT_CHANGEABLE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::FEATURE_NOT_CHANGEABLE).with_dnr();
    pub const INVALID_CONTROLLER_ID: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_CONTROLLER_ID).with_dnr();

    pub const CONNECT_INCOMPATIBLE_FORMAT: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_INCOMPATIBLE_FORMAT).with_dnr();
    /// Transient (no DNR): the host may try again later.
    pub const CONNECT_CONTROLLER_BUSY: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_CONTROLLER_BUSY);
    /// Goes with [`connect_invalid_param_dw0`] in the response's dword 0.
    pub const CONNECT_INVALID_PARAMETERS: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_INVALID_PARAMETERS).with_dnr();
    pub const CONNECT_RESTART_DISCOVERY: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_RESTART_DISCOVERY).with_dnr();
    pub const CONNECT_INVALID_HOST: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_INVALID_HOST).with_dnr();

    /// A status of type `sct` and code `sc`, retryable, no More.
    pub const fn new(sct: u8, sc: u8) -> Status {
        Status {
            sct,
            sc,
            dnr: false,
            more: false,
        }
    }

    /// The same status with Do Not Retry set.
    pub const fn with_dnr(self) -> Status {
        Status { dnr: true, ..self }
    }

    pub const fn is_success(self) -> bool {
        self.sct == sct::GENERIC && self.sc == sc::SUCCESS
    }

    /// The upper 16 bits of CQE dword 3: SC in bits 8:1, SCT in 11:9, More 14, DNR 15; the
    /// phase tag (bit 0) and CRD (13:12) are 0.
    pub const fn to_u16(self) -> u16 {
        ((self.sc as u16) << 1)
            | (((self.sct & 0x7) as u16) << 9)
            | ((self.more as u16) << 14)
            | ((self.dnr as u16) << 15)
    }

    /// Parses the status half of CQE dword 3 (the phase tag and CRD are ignored).
    pub const fn from_u16(v: u16) -> Status {
        Status {
            sc: (v >> 1) as u8,
            sct: ((v >> 9) & 0x7) as u8,
            more: v & (1 << 14) != 0,
            dnr: v & (1 << 15) != 0,
        }
    }
}

/// Connect response dword 0 for [`Status::CONNECT_INVALID_PARAMETERS`]: IPO (the byte offset
/// of the bad field) in bits 15:0, IATTR in bits 23:16 (0: in the command, 1: in the data).
pub const fn connect_invalid_param_dw0(iattr: u8, ipo: u16) -> u32 {
    (ipo as u32) | ((iattr as u32) << 16)
}

/// Connect response dword 0 on success: the controller ID in bits 15:0; bits 17:16 (AUTHREQ)
/// stay 0, since this target does no in-band authentication.
pub const fn connect_success_dw0(cntlid: u16) -> u32 {
    cntlid as u32
}

/// SGL descriptor type byte: descriptor type in bits 7:4, subtype in bits 3:0.
pub mod sgl_type {
    /// Data Block, subtype Offset: data inside the command capsule (in-capsule writes).
    pub const DATA_BLOCK_OFFSET: u8 = 0x01;
    /// Transport SGL Data Block, transport specific: data moved by the transport (R2T and
    /// H2CData for writes, C2HData for reads); also the null descriptor (length 0).
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5A;
}

/// An SGL descriptor (16 bytes; the command's DPTR on fabrics).
#[repr(C)]
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

const _: () = assert!(size_of::<SglDesc>() == 16);

/// A submission queue entry (64 bytes, the command of a command capsule).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    pub opcode: u8,
    /// FUSE in bits 1:0, PSDT in bits 7:6 (2 = SGL, the only mode fabrics use).
    pub flags: u8,
    /// Command identifier, echoed in the completion. Its top bits may be a host generation
    /// counter: never index a table by it.
    pub cid: u16,
    /// Namespace ID (for fabrics commands its low byte is the command type).
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub mptr: u64,
    pub dptr: SglDesc,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

const _: () = assert!(size_of::<Sqe>() == 64);

/// Length of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Length of a completion queue entry.
pub const CQE_LEN: usize = 16;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | (u64::from(le32(b, at + 4)) << 32)
}

impl Sqe {
    /// Decodes the 64 bytes of a command as they arrive.
    pub fn from_bytes(b: &[u8; SQE_LEN]) -> Sqe {
        Sqe {
            opcode: b[0],
            flags: b[1],
            cid: le16(b, 2),
            nsid: le32(b, 4),
            cdw2: le32(b, 8),
            cdw3: le32(b, 12),
            mptr: le64(b, 16),
            dptr: SglDesc {
                addr: le64(b, 24),
                len: le32(b, 32),
                rsvd: [b[36], b[37], b[38]],
                sgl_type: b[39],
            },
            cdw10: le32(b, 40),
            cdw11: le32(b, 44),
            cdw12: le32(b, 48),
            cdw13: le32(b, 52),
            cdw14: le32(b, 56),
            cdw15: le32(b, 60),
        }
    }

    /// Encodes the command (for the host side and for tests).
    pub fn to_bytes(&self) -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.cid.to_le_bytes());
        b[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        b[8..12].copy_from_slice(&self.cdw2.to_le_bytes());
        b[12..16].copy_from_slice(&self.cdw3.to_le_bytes());
        b[16..24].copy_from_slice(&self.mptr.to_le_bytes());
        b[24..32].copy_from_slice(&self.dptr.addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.dptr.len.to_le_bytes());
        b[36..39].copy_from_slice(&self.dptr.rsvd);
        b[39] = self.dptr.sgl_type;
        let dws = [
            self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15,
        ];
        for (i, dw) in dws.iter().enumerate() {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&dw.to_le_bytes());
        }
        b
    }

    /// The fabrics command type (byte 4; meaningful when `opcode` is 7Fh).
    pub fn fctype(&self) -> u8 {
        self.nsid as u8
    }

    /// Sets the fabrics command type (byte 4), keeping nothing else of the NSID field, which
    /// fabrics commands reserve.
    pub fn set_fctype(&mut self, fctype: u8) {
        self.nsid = u32::from(fctype);
    }

    /// Whether this is a fabrics command.
    pub fn is_fabrics(&self) -> bool {
        self.opcode == admin_opc::FABRICS
    }

    /// The data SGL descriptor's type byte ([`sgl_type`]).
    pub fn sgl_type(&self) -> u8 {
        self.dptr.sgl_type
    }

    /// The data length the command moves (its SGL length): what the host reads back for a
    /// command that returns data, or what it sends for one that carries data.
    pub fn sgl_len(&self) -> u32 {
        self.dptr.len
    }

    /// The data SGL's address (the offset into the capsule for in-capsule data).
    pub fn sgl_addr(&self) -> u64 {
        self.dptr.addr
    }

    /// PSDT (flags bits 7:6): 2 for SGL, as fabrics commands must use.
    pub fn psdt(&self) -> u8 {
        self.flags >> 6
    }

    /// FUSE (flags bits 1:0).
    pub fn fuse(&self) -> u8 {
        self.flags & 0x3
    }
}

/// A completion queue entry (16 bytes, the response capsule).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result (Connect: the controller ID; Property Get: the low half).
    pub dw0: u32,
    /// Command specific result (Property Get of 8 bytes: the high half).
    pub dw1: u32,
    /// Submission queue head pointer (Linux's host ignores it).
    pub sqhd: u16,
    pub sqid: u16,
    /// The command's CID, echoed exactly.
    pub cid: u16,
    /// [`Status::to_u16`], phase tag (bit 0) 0.
    pub status: u16,
}

const _: () = assert!(size_of::<Cqe>() == 16);

impl Cqe {
    /// The completion of command `cid` with `status` and result `dw0`/`dw1`.
    pub fn new(cid: u16, status: Status, dw0: u32, dw1: u32) -> Cqe {
        Cqe {
            dw0,
            dw1,
            sqhd: 0,
            sqid: 0,
            cid,
            status: status.to_u16(),
        }
    }

    /// The status field decoded.
    pub fn status(&self) -> Status {
        Status::from_u16(self.status)
    }

    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status.to_le_bytes());
        b
    }

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

/// Controller properties (the register map of NVMe over PCIe, read and written with Property
/// Get/Set): byte offsets.
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes; reads 0, writes refused: CAP.NSSRS is 0).
    pub const NSSR: u32 = 0x20;

    /// CC.EN (bit 0).
    pub const CC_EN: u32 = 1 << 0;
    /// CC.CSS (bits 6:4): 0 = NVM command set, 7 = admin command set only.
    pub const CC_CSS_SHIFT: u32 = 4;
    /// CC.MPS (bits 10:7): memory page size 2^(12+MPS).
    pub const CC_MPS_SHIFT: u32 = 7;
    /// CC.AMS (bits 13:11): arbitration mechanism.
    pub const CC_AMS_SHIFT: u32 = 11;
    /// CC.SHN (bits 15:14): 01b normal, 10b abrupt shutdown.
    pub const CC_SHN_SHIFT: u32 = 14;
    /// CC.IOSQES (bits 19:16): I/O SQ entry size 2^n (6 = 64 bytes).
    pub const CC_IOSQES_SHIFT: u32 = 16;
    /// CC.IOCQES (bits 23:20): I/O CQ entry size 2^n (4 = 16 bytes).
    pub const CC_IOCQES_SHIFT: u32 = 20;

    /// CSTS.RDY (bit 0).
    pub const CSTS_RDY: u32 = 1 << 0;
    /// CSTS.SHST (bits 3:2): 2 = shutdown processing complete.
    pub const CSTS_SHST_SHIFT: u32 = 2;
    pub const CSTS_SHST_COMPLETE: u32 = 2;

    /// VS 1.3.0 (MJR 31:16, MNR 15:8, TER 7:0).
    pub const VS_1_3: u32 = 0x0001_0300;
}

/// Identify Controller data structure (4096 bytes): byte offsets of the fields this target
/// fills. Checked against Linux's `struct nvme_id_ctrl` and SPDK's `spdk_nvme_ctrlr_data`.
pub mod id_ctrl {
    pub const VID: usize = 0;
    pub const SSVID: usize = 2;
    pub const SN: usize = 4;
    pub const SN_LEN: usize = 20;
    pub const MN: usize = 24;
    pub const MN_LEN: usize = 40;
    pub const FR: usize = 64;
    pub const FR_LEN: usize = 8;
    pub const RAB: usize = 72;
    pub const IEEE: usize = 73;
    pub const CMIC: usize = 76;
    pub const MDTS: usize = 77;
    pub const CNTLID: usize = 78;
    pub const VER: usize = 80;
    pub const OAES: usize = 92;
    pub const CTRATT: usize = 96;
    pub const CNTRLTYPE: usize = 111;
    pub const OACS: usize = 256;
    pub const ACL: usize = 258;
    pub const AERL: usize = 259;
    pub const FRMW: usize = 260;
    pub const LPA: usize = 261;
    pub const ELPE: usize = 262;
    pub const NPSS: usize = 263;
    pub const WCTEMP: usize = 266;
    pub const CCTEMP: usize = 268;
    pub const KAS: usize = 320;
    pub const SQES: usize = 512;
    pub const CQES: usize = 513;
    pub const MAXCMD: usize = 514;
    pub const NN: usize = 516;
    pub const ONCS: usize = 520;
    pub const FUSES: usize = 522;
    pub const FNA: usize = 524;
    pub const VWC: usize = 525;
    pub const AWUN: usize = 526;
    pub const AWUPF: usize = 528;
    pub const SGLS: usize = 536;
    pub const SUBNQN: usize = 768;
    pub const SUBNQN_LEN: usize = 256;
    // NVMe over Fabrics attributes (bytes 1792..2047).
    pub const IOCCSZ: usize = 1792;
    pub const IORCSZ: usize = 1796;
    pub const ICDOFF: usize = 1800;
    pub const FCATT: usize = 1802;
    pub const MSDBD: usize = 1803;
    pub const OFCS: usize = 1804;

    /// CMIC bit 0: the NVM subsystem may have more than one port.
    pub const CMIC_MULTI_PORT: u8 = 1 << 0;
    /// CMIC bit 1: the NVM subsystem may have more than one controller.
    pub const CMIC_MULTI_CTRLR: u8 = 1 << 1;
    /// OAES bit 8: Namespace Attribute Notices.
    pub const OAES_NS_ATTR: u32 = 1 << 8;
    /// CTRATT bit 0: 128-bit host identifier.
    pub const CTRATT_HOST_ID_128: u32 = 1 << 0;
    /// CNTRLTYPE: I/O controller.
    pub const CNTRLTYPE_IO: u8 = 1;
    /// CNTRLTYPE: discovery controller.
    pub const CNTRLTYPE_DISCOVERY: u8 = 2;
    /// LPA bit 1: Commands Supported and Effects log page.
    pub const LPA_EFFECTS: u8 = 1 << 1;
    /// LPA bit 2: extended data for Get Log Page (NUMDU, LPOL/LPOU).
    pub const LPA_EXTENDED: u8 = 1 << 2;
    /// ONCS bit 2: Dataset Management.
    pub const ONCS_DSM: u16 = 1 << 2;
    /// ONCS bit 3: Write Zeroes.
    pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
    /// VWC bit 0: a volatile write cache is present (the host then sends Flush).
    pub const VWC_PRESENT: u8 = 1 << 0;
    /// SGLS bits 1:0 = 01b: SGLs supported, no alignment requirement.
    pub const SGLS_SUPPORTED: u32 = 1 << 0;
    /// SGLS bit 20: the Offset subtype of the SGL Data Block descriptor (in-capsule data).
    pub const SGLS_OFFSET: u32 = 1 << 20;
}

/// Identify Namespace data structure (4096 bytes): byte offsets.
pub mod id_ns {
    pub const NSZE: usize = 0;
    pub const NCAP: usize = 8;
    pub const NUSE: usize = 16;
    pub const NSFEAT: usize = 24;
    pub const NLBAF: usize = 25;
    pub const FLBAS: usize = 26;
    pub const NMIC: usize = 30;
    pub const DLFEAT: usize = 33;
    pub const NAWUPF: usize = 36;
    pub const NPWG: usize = 64;
    pub const NPWA: usize = 66;
    pub const NPDG: usize = 68;
    pub const NPDA: usize = 70;
    pub const NOWS: usize = 72;
    pub const NGUID: usize = 104;
    pub const EUI64: usize = 120;
    /// LBA Format 0 (4 bytes: MS 15:0, LBADS 23:16, RP 25:24).
    pub const LBAF0: usize = 128;
    /// LBADS within LBAF0 (byte 2 of the format).
    pub const LBAF0_LBADS: usize = LBAF0 + 2;

    /// NSFEAT bit 4: NPWG, NPWA, NPDG, NPDA and NOWS are valid.
    pub const NSFEAT_OPTPERF: u8 = 1 << 4;
    /// NMIC bit 0: the namespace may be reached through more than one controller.
    pub const NMIC_SHARED: u8 = 1 << 0;
}

/// Namespace Identification Descriptor types (Identify CNS 03h).
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

/// Discovery log page (log 70h): header and entry offsets (NVMe-oF 1.1, Figure "Discovery Log
/// Page").
pub mod disc {
    /// Header length; entries follow.
    pub const HEADER_LEN: usize = 1024;
    /// Length of one entry.
    pub const ENTRY_LEN: usize = 1024;
    // Header.
    pub const GENCTR: usize = 0;
    pub const NUMREC: usize = 8;
    pub const RECFMT: usize = 16;
    // Entry.
    pub const TRTYPE: usize = 0;
    pub const ADRFAM: usize = 1;
    pub const SUBTYPE: usize = 2;
    pub const TREQ: usize = 3;
    pub const PORTID: usize = 4;
    pub const CNTLID: usize = 6;
    pub const ASQSZ: usize = 8;
    pub const EFLAGS: usize = 10;
    pub const TRSVCID: usize = 32;
    pub const TRSVCID_LEN: usize = 32;
    pub const SUBNQN: usize = 256;
    pub const SUBNQN_LEN: usize = 256;
    pub const TRADDR: usize = 512;
    pub const TRADDR_LEN: usize = 256;
    /// Transport specific address subtype (TCP: SECTYPE in byte 0, 0 = no security).
    pub const TSAS: usize = 768;

    pub const TRTYPE_TCP: u8 = 3;
    pub const ADRFAM_IPV4: u8 = 1;
    pub const ADRFAM_IPV6: u8 = 2;
    /// An NVM subsystem.
    pub const SUBTYPE_NVME: u8 = 2;
    /// The discovery subsystem answering this log (current discovery subsystem).
    pub const SUBTYPE_CURRENT_DISCOVERY: u8 = 3;
    /// TREQ bits 1:0 = 10b: a secure channel is not required.
    pub const TREQ_SECURE_CHANNEL_NOT_REQUIRED: u8 = 0x2;
    /// EFLAGS bit 0: every listener of this subsystem returns the same information.
    pub const EFLAGS_DUPLICATE_RETURNED_INFO: u16 = 1 << 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bit_layout() {
        // Invalid Opcode with DNR: SC 1 in bits 8:1, DNR bit 15.
        assert_eq!(Status::INVALID_OPCODE.to_u16(), (1 << 1) | (1 << 15));
        // Connect Invalid Host: SCT 1 (bits 11:9), SC 84h.
        let s = Status::CONNECT_INVALID_HOST;
        assert_eq!(s.to_u16(), (0x84 << 1) | (1 << 9) | (1 << 15));
        assert_eq!(Status::from_u16(s.to_u16()), s);
        assert_eq!(Status::SUCCESS.to_u16(), 0);
        assert!(
            Status::from_u16(1).is_success(),
            "the phase tag is not part of the status"
        );
        let m = Status {
            more: true,
            ..Status::NAMESPACE_NOT_READY
        };
        assert_eq!(m.to_u16(), (0x82 << 1) | (1 << 14));
        assert_eq!(Status::from_u16(m.to_u16()), m);
    }

    #[test]
    fn sqe_round_trip_and_field_offsets() {
        let mut raw = [0u8; SQE_LEN];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = i as u8;
        }
        let sqe = Sqe::from_bytes(&raw);
        assert_eq!(sqe.opcode, 0);
        assert_eq!(sqe.flags, 1);
        assert_eq!(sqe.cid, 0x0302);
        assert_eq!(sqe.nsid, 0x0706_0504);
        assert_eq!(sqe.fctype(), 4);
        assert_eq!(sqe.mptr, 0x1716_1514_1312_1110);
        assert_eq!(sqe.sgl_addr(), 0x1f1e_1d1c_1b1a_1918);
        assert_eq!(sqe.sgl_len(), 0x2322_2120);
        assert_eq!(sqe.sgl_type(), 39);
        assert_eq!(sqe.cdw10, 0x2b2a_2928);
        assert_eq!(sqe.cdw15, 0x3f3e_3d3c);
        assert_eq!(sqe.to_bytes(), raw);
    }

    #[test]
    fn cqe_round_trip() {
        let cqe = Cqe::new(0xa123, Status::INVALID_FIELD, 0x1122_3344, 0x5566_7788);
        let b = cqe.to_bytes();
        assert_eq!(&b[12..14], &[0x23, 0xa1]);
        assert_eq!(u16::from_le_bytes([b[14], b[15]]) & 1, 0, "phase tag 0");
        assert_eq!(Cqe::from_bytes(&b), cqe);
        assert_eq!(cqe.status(), Status::INVALID_FIELD);
    }

    #[test]
    fn connect_dw0() {
        assert_eq!(connect_invalid_param_dw0(1, 512), 0x0001_0200);
        assert_eq!(connect_success_dw0(7), 7);
    }
}
