//! NVMe over Fabrics structures beside the command set: controller properties (Property
//! Get/Set commands and offsets), the Connect command, its 1024 bytes of data and its
//! response's dword 0 (one encoding for the host, one parser for the target), and the
//! discovery log page (NVMe-oF 1.1).

use crate::bytes::{le16, put16};
use crate::{Sqe, admin_opc, fctype};

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
/// stay 0: no in-band authentication.
pub const fn connect_success_dw0(cntlid: u16) -> u32 {
    cntlid as u32
}

/// AUTHREQ.ATR (Connect response dword 0 bit 17): the host must authenticate the queue in
/// band (DH-HMAC-CHAP) before it carries any other command.
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;

/// Connect response dword 0 on success for a queue that must be authenticated first.
pub const fn connect_success_auth_dw0(cntlid: u16) -> u32 {
    cntlid as u32 | CONNECT_AUTHREQ_ATR
}

/// Whether a successful Connect's dword 0 asks for in-band authentication.
pub const fn connect_requires_auth(dw0: u32) -> bool {
    dw0 & CONNECT_AUTHREQ_ATR != 0
}

/// SECP of NVMe in-band authentication (Authentication Send/Receive CDW10 bits 31:24), with
/// SPSP0 = SPSP1 = 1 (DH-HMAC-CHAP's security protocol specific fields).
pub const AUTH_SECP_NVME: u8 = 0xe9;

/// The Authentication Send/Receive CDW10 of NVMe in-band authentication: SPSP0 (bits 15:8),
/// SPSP1 (23:16), SECP (31:24).
const AUTH_CDW10: u32 = (AUTH_SECP_NVME as u32) << 24 | 1 << 16 | 1 << 8;

/// Authentication Send of `tl` bytes (the message travels as the command's data).
pub fn auth_send_sqe(tl: u32) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
    sqe.set_fctype(fctype::AUTH_SEND);
    sqe.cdw10 = AUTH_CDW10;
    sqe.cdw11 = tl;
    sqe
}

/// Authentication Receive of at most `al` bytes.
pub fn auth_recv_sqe(al: u32) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
    sqe.set_fctype(fctype::AUTH_RECV);
    sqe.cdw10 = AUTH_CDW10;
    sqe.cdw11 = al;
    sqe
}

/// An Authentication Send/Receive's (SECP, SPSP0, SPSP1, TL or AL).
pub fn auth_fields(sqe: &Sqe) -> (u8, u8, u8, u32) {
    let b = sqe.cdw10.to_le_bytes();
    (b[3], b[1], b[2], sqe.cdw11)
}

/// Property Get of the property at byte `offset`, 8 bytes wide when `size8` (CAP), else 4;
/// the value comes back in the response's dwords 0 and 1.
pub fn property_get_sqe(offset: u32, size8: bool) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
    sqe.set_fctype(fctype::PROPERTY_GET);
    sqe.cdw10 = u32::from(size8);
    sqe.cdw11 = offset;
    sqe
}

/// Property Set of the 4-byte property at byte `offset` (only CC is writable).
pub fn property_set_sqe(offset: u32, value: u32) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
    sqe.set_fctype(fctype::PROPERTY_SET);
    sqe.cdw11 = offset;
    sqe.cdw12 = value;
    sqe
}

/// Length of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;

/// The longest NQN the spec allows (223 bytes, the 256-byte field's limit for the text).
pub const NQN_MAX_LEN: usize = 223;

/// The CNTLID a host puts in the admin queue's Connect: any controller (the dynamic model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// Byte offsets of the Connect command's and data's fields (a refusal's IPO names them).
pub mod connect_field {
    /// In the command (IATTR 0).
    pub const RECFMT: u16 = 40;
    pub const QID: u16 = 42;
    pub const SQSIZE: u16 = 44;
    pub const CATTR: u16 = 46;
    pub const KATO: u16 = 48;
    /// In the data (IATTR 1).
    pub const HOSTID: u16 = 0;
    pub const CNTLID: u16 = 16;
    pub const SUBNQN: u16 = 256;
    pub const HOSTNQN: u16 = 512;
    /// Length of each NQN field.
    pub const NQN_FIELD_LEN: usize = 256;
}

/// The Connect command's fields (SQE dwords 10 to 12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Record format: 0 is the only one defined.
    pub recfmt: u16,
    /// Queue ID: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Connect attributes (priority class, SQ flow control disable).
    pub cattr: u8,
    /// Keep Alive Timeout in milliseconds (admin queue only).
    pub kato_ms: u32,
}

impl ConnectCmd {
    /// Reads the fields out of a Connect SQE.
    pub fn parse(sqe: &Sqe) -> ConnectCmd {
        ConnectCmd {
            recfmt: sqe.cdw10 as u16,
            qid: (sqe.cdw10 >> 16) as u16,
            sqsize: sqe.cdw11 as u16,
            cattr: (sqe.cdw11 >> 16) as u8,
            kato_ms: sqe.cdw12,
        }
    }

    /// The Connect SQE carrying these fields (its data pointer is the caller's to set: the
    /// data travels in-capsule). Pairs with [`ConnectCmd::parse`].
    pub fn sqe(&self) -> Sqe {
        let mut sqe = Sqe::new(admin_opc::FABRICS, 0);
        sqe.set_fctype(fctype::CONNECT);
        sqe.cdw10 = u32::from(self.recfmt) | u32::from(self.qid) << 16;
        sqe.cdw11 = u32::from(self.sqsize) | u32::from(self.cattr) << 16;
        sqe.cdw12 = self.kato_ms;
        sqe
    }
}

/// Why Connect data was refused by [`ConnectData::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectDataError {
    /// Fewer than [`CONNECT_DATA_LEN`] bytes (Data SGL Length Invalid).
    #[error("Connect data of {0} bytes, 1024 expected")]
    Short(usize),
    /// An NQN not NUL-terminated within 224 bytes, or a SUBNQN that is empty or not UTF-8, at
    /// byte `at` of the data (Connect Invalid Parameters, IATTR 1, IPO `at`).
    #[error("Connect data: bad NQN at byte {at}")]
    BadNqn { at: u16 },
}

/// The Connect command's data (1024 bytes of in-capsule data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// The host identifier (a UUID).
    pub hostid: [u8; 16],
    /// [`CNTLID_DYNAMIC`] for the admin queue, the controller's ID for an I/O queue.
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

impl ConnectData {
    /// Parses the data.
    pub fn parse(data: &[u8]) -> Result<ConnectData, ConnectDataError> {
        if data.len() < CONNECT_DATA_LEN {
            return Err(ConnectDataError::Short(data.len()));
        }
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&data[..16]);
        Ok(ConnectData {
            hostid,
            cntlid: le16(data, usize::from(connect_field::CNTLID)),
            subnqn: parse_nqn(data, connect_field::SUBNQN)?,
            hostnqn: parse_hostnqn(data)?,
        })
    }

    /// The 1024 bytes a host sends. NQNs longer than [`NQN_MAX_LEN`] are cut there (the
    /// target then refuses them as unknown). Pairs with [`ConnectData::parse`].
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut d = [0u8; CONNECT_DATA_LEN];
        d[..16].copy_from_slice(&self.hostid);
        put16(&mut d, usize::from(connect_field::CNTLID), self.cntlid);
        for (at, nqn) in [
            (connect_field::SUBNQN, &self.subnqn),
            (connect_field::HOSTNQN, &self.hostnqn),
        ] {
            let n = nqn.len().min(NQN_MAX_LEN);
            let at = usize::from(at);
            d[at..at + n].copy_from_slice(&nqn.as_bytes()[..n]);
        }
        d
    }
}

/// The NQN field at `at`: NUL-terminated within [`NQN_MAX_LEN`] + 1 bytes; `None` where it
/// is not.
fn nqn_field(data: &[u8], at: u16) -> Option<&[u8]> {
    let field = &data[usize::from(at)..usize::from(at) + connect_field::NQN_FIELD_LEN];
    let len = field[..=NQN_MAX_LEN].iter().position(|&b| b == 0)?;
    Some(&field[..len])
}

/// SUBNQN: a subsystem's name, so never empty and UTF-8 (no subsystem has another).
fn parse_nqn(data: &[u8], at: u16) -> Result<String, ConnectDataError> {
    let bad = || ConnectDataError::BadNqn { at };
    let nqn = nqn_field(data, at)
        .filter(|n| !n.is_empty())
        .ok_or_else(bad)?;
    std::str::from_utf8(nqn)
        .map(str::to_string)
        .map_err(|_| bad())
}

/// HOSTNQN: only its NUL terminator is required, as SPDK's target requires it
/// (`nvmf_ctrlr_cmd_connect`). spdk_nvme_perf sends an empty one unless its `-r` names a
/// `hostnqn:`, and a target that allows any host admits that. Bytes that are not UTF-8 are
/// kept as U+FFFD (the same bytes give the same string, which names no listed host).
fn parse_hostnqn(data: &[u8]) -> Result<String, ConnectDataError> {
    let at = connect_field::HOSTNQN;
    let nqn = nqn_field(data, at).ok_or(ConnectDataError::BadNqn { at })?;
    Ok(String::from_utf8_lossy(nqn).into_owned())
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
    /// TREQ bits 1:0 = 01b: a secure channel is required.
    pub const TREQ_SECURE_CHANNEL_REQUIRED: u8 = 0x1;
    /// TSAS SECTYPE 1: TLS 1.3 (NVMe/TCP TP 8011).
    pub const SECTYPE_TLS13: u8 = 1;
    /// EFLAGS bit 0: every listener of this subsystem returns the same information.
    pub const EFLAGS_DUPLICATE_RETURNED_INFO: u16 = 1 << 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_round_trips() {
        let cmd = ConnectCmd {
            recfmt: 0,
            qid: 3,
            sqsize: 127,
            cattr: 0,
            kato_ms: 10_000,
        };
        let sqe = cmd.sqe();
        assert!(sqe.is_fabrics());
        assert_eq!(sqe.fctype(), fctype::CONNECT);
        assert_eq!(ConnectCmd::parse(&sqe), cmd);
        let data = ConnectData {
            hostid: [9; 16],
            cntlid: 7,
            subnqn: "nqn.2016-06.io.spdk:cnode1".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:1".into(),
        };
        let bytes = data.encode();
        assert_eq!(ConnectData::parse(&bytes), Ok(data));
        assert_eq!(
            ConnectData::parse(&bytes[..512]),
            Err(ConnectDataError::Short(512))
        );
        let mut bad = bytes;
        bad[256] = 0;
        assert_eq!(
            ConnectData::parse(&bad),
            Err(ConnectDataError::BadNqn { at: 256 })
        );
    }

    #[test]
    fn property_commands() {
        let get = property_get_sqe(prop::CAP, true);
        assert_eq!(
            (get.fctype(), get.cdw10, get.cdw11),
            (fctype::PROPERTY_GET, 1, 0)
        );
        let set = property_set_sqe(prop::CC, 0x46_0001);
        assert_eq!(
            (set.fctype(), set.cdw10, set.cdw11, set.cdw12),
            (fctype::PROPERTY_SET, 0, prop::CC, 0x46_0001)
        );
    }

    #[test]
    fn connect_dw0() {
        assert_eq!(connect_invalid_param_dw0(1, 512), 0x0001_0200);
        assert_eq!(connect_success_dw0(7), 7);
    }
}
