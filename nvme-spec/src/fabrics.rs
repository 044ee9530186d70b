//! NVMe over Fabrics structures beside the command set: controller properties (Property
//! Get/Set), the Connect response's dword 0, and the discovery log page (NVMe-oF 1.1).

/// Controller properties (the register map of NVMe over PCIe, read and written with Property
/// Get/Set): byte offsets and the fields of CC and CSTS.
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1c;
    /// NVM Subsystem Reset (4 bytes).
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

/// Connect response dword 0 for [`crate::Status::CONNECT_INVALID_PARAMETERS`]: IPO (the byte
/// offset of the bad field) in bits 15:0, IATTR in bits 23:16 (0: in the command, 1: in the
/// data).
pub const fn connect_invalid_param_dw0(iattr: u8, ipo: u16) -> u32 {
    (ipo as u32) | ((iattr as u32) << 16)
}

/// Connect response dword 0 on success: the controller ID in bits 15:0; bits 17:16 (AUTHREQ)
/// stay 0: no in-band authentication (Linux's host would start it, and fail without it).
pub const fn connect_success_dw0(cntlid: u16) -> u32 {
    cntlid as u32
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
    fn connect_dw0() {
        assert_eq!(connect_invalid_param_dw0(1, 512), 0x0001_0200);
        assert_eq!(connect_success_dw0(7), 7);
    }
}
