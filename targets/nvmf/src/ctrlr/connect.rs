//! Fabrics Connect: the command's fields, its 1024 bytes of data, the checks that do not need
//! a controller, and the refusal a failed check answers with.

use crate::spec::{Sqe, Status, connect_invalid_param_dw0};
use crate::subsystem::{NQN_MAX_LEN, Subsystem, TransportOpts};

/// Length of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;

/// Byte offsets of the Connect command's and data's fields, for the IPO of a refusal.
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

/// A Connect the target refuses: the response's status and dword 0 (IATTR/IPO for
/// Connect Invalid Parameters, else 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectReject {
    pub status: Status,
    pub dw0: u32,
}

impl ConnectReject {
    /// A refusal with `status` and nothing in dword 0.
    pub const fn new(status: Status) -> ConnectReject {
        ConnectReject { status, dw0: 0 }
    }

    /// Connect Invalid Parameters naming the command's field at byte `ipo`.
    pub const fn invalid_cmd_field(ipo: u16) -> ConnectReject {
        ConnectReject {
            status: Status::CONNECT_INVALID_PARAMETERS,
            dw0: connect_invalid_param_dw0(0, ipo),
        }
    }

    /// Connect Invalid Parameters naming the data's field at byte `ipo`.
    pub const fn invalid_data_field(ipo: u16) -> ConnectReject {
        ConnectReject {
            status: Status::CONNECT_INVALID_PARAMETERS,
            dw0: connect_invalid_param_dw0(1, ipo),
        }
    }
}

impl From<ConnectReject> for (Status, u32) {
    fn from(r: ConnectReject) -> (Status, u32) {
        (r.status, r.dw0)
    }
}

/// The Connect command's data (1024 bytes of in-capsule data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// The host identifier (a UUID).
    pub hostid: [u8; 16],
    /// 0xFFFF for the admin queue (dynamic controller), the controller's ID for an I/O queue.
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

impl ConnectData {
    /// Parses the data. Fewer than 1024 bytes is Data SGL Length Invalid; an NQN that is
    /// empty, not NUL-terminated within 224 bytes or not UTF-8 is Connect Invalid Parameters
    /// naming its field.
    pub fn parse(data: &[u8]) -> Result<ConnectData, ConnectReject> {
        if data.len() < CONNECT_DATA_LEN {
            return Err(ConnectReject::new(Status::DATA_SGL_LENGTH_INVALID));
        }
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&data[..16]);
        let at = usize::from(connect_field::CNTLID);
        Ok(ConnectData {
            hostid,
            cntlid: u16::from_le_bytes([data[at], data[at + 1]]),
            subnqn: parse_nqn(data, connect_field::SUBNQN)?,
            hostnqn: parse_nqn(data, connect_field::HOSTNQN)?,
        })
    }
}

fn parse_nqn(data: &[u8], at: u16) -> Result<String, ConnectReject> {
    let field = &data[usize::from(at)..usize::from(at) + connect_field::NQN_FIELD_LEN];
    let bad = || ConnectReject::invalid_data_field(at);
    let len = field[..=NQN_MAX_LEN]
        .iter()
        .position(|&b| b == 0)
        .filter(|&n| n > 0)
        .ok_or_else(bad)?;
    std::str::from_utf8(&field[..len])
        .map(str::to_string)
        .map_err(|_| bad())
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

    /// Checks the command against the transport's limits: RECFMT 0, and a queue of 2 up to
    /// `max_aq_depth` (admin) or `max_queue_depth` (I/O) entries, as SPDK checks.
    pub fn check(&self, opts: &TransportOpts) -> Result<(), ConnectReject> {
        if self.recfmt != 0 {
            return Err(ConnectReject::new(Status::CONNECT_INCOMPATIBLE_FORMAT));
        }
        let depth = if self.qid == 0 {
            opts.max_aq_depth
        } else {
            opts.max_queue_depth
        };
        if self.sqsize == 0 || self.sqsize >= depth {
            return Err(ConnectReject::invalid_cmd_field(connect_field::SQSIZE));
        }
        Ok(())
    }
}

/// Checks an admin-queue Connect against the subsystem its SUBNQN names (`None`: no such
/// subsystem): the host must be admitted (Connect Invalid Host) and ask for a dynamic
/// controller (CNTLID 0xFFFF), the only model this target offers.
pub fn admit_admin_connect(
    subsys: Option<&Subsystem>,
    data: &ConnectData,
) -> Result<(), ConnectReject> {
    let subsys = subsys.ok_or(ConnectReject::invalid_data_field(connect_field::SUBNQN))?;
    if !subsys.admits(&data.hostnqn) {
        return Err(ConnectReject::new(Status::CONNECT_INVALID_HOST));
    }
    if data.cntlid != 0xFFFF {
        return Err(ConnectReject::invalid_data_field(connect_field::CNTLID));
    }
    Ok(())
}
