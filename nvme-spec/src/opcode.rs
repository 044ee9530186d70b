//! The numbers a command carries: opcodes, fabrics command types, and the CDW10 selectors of
//! Identify (CNS), Get Log Page (LID) and Get/Set Features (FID). Selectors are `u32`, the type
//! of the dword they are compared with and written into.

/// Admin command opcodes (NVMe base, Figure "Opcodes for Admin Commands").
pub mod admin_opc {
    /// Delete I/O Submission Queue (PCIe only).
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue (PCIe only).
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue (PCIe only).
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue (PCIe only).
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0a;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0c;
    pub const KEEP_ALIVE: u8 = 0x18;
    /// The fabrics command opcode; the command type is [`crate::Sqe::fctype`].
    pub const FABRICS: u8 = 0x7f;
}

/// NVM command set I/O opcodes.
pub mod nvm_opc {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management: ranges in [`crate::DsmRange`]s.
    pub const DSM: u8 = 0x09;
    /// The fabrics command opcode (also valid on I/O queues: Connect).
    pub const FABRICS: u8 = 0x7f;
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
    /// Identify Namespace (NSID in the command).
    pub const NAMESPACE: u32 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u32 = 0x01;
    /// Active namespace ID list (NSIDs greater than the command's NSID).
    pub const ACTIVE_NS_LIST: u32 = 0x02;
    /// Namespace identification descriptors ([`crate::nidt`]).
    pub const NS_ID_DESCRIPTORS: u32 = 0x03;
    /// I/O command set specific Identify Controller (CSI in CDW11 bits 31:24).
    pub const CTRLR_CSI: u32 = 0x06;
}

/// Log page identifiers (Get Log Page CDW10 bits 7:0).
pub mod lid {
    pub const ERROR: u32 = 0x01;
    pub const SMART: u32 = 0x02;
    pub const FIRMWARE_SLOT: u32 = 0x03;
    pub const CHANGED_NS_LIST: u32 = 0x04;
    pub const COMMANDS_EFFECTS: u32 = 0x05;
    /// Asymmetric Namespace Access: a 16-byte header, then one descriptor per ANA group.
    pub const ANA: u32 = 0x0C;
    /// The discovery log ([`crate::disc`]).
    pub const DISCOVERY: u32 = 0x70;
}

/// Feature identifiers (Get/Set Features CDW10 bits 7:0).
pub mod fid {
    pub const ARBITRATION: u32 = 0x01;
    pub const POWER_MANAGEMENT: u32 = 0x02;
    pub const TEMPERATURE_THRESHOLD: u32 = 0x04;
    pub const ERROR_RECOVERY: u32 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u32 = 0x06;
    /// Number of Queues: NSQR in CDW11 bits 15:0, NCQR in 31:16, both 0-based; the
    /// completion's dword 0 says how many were granted, the same way.
    pub const NUMBER_OF_QUEUES: u32 = 0x07;
    pub const INTERRUPT_COALESCING: u32 = 0x08;
    pub const INTERRUPT_VECTOR_CONFIG: u32 = 0x09;
    pub const WRITE_ATOMICITY: u32 = 0x0a;
    pub const ASYNC_EVENT_CONFIG: u32 = 0x0b;
    pub const KEEP_ALIVE_TIMER: u32 = 0x0f;
    pub const HOST_IDENTIFIER: u32 = 0x81;
}
