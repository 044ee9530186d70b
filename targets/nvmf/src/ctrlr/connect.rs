//! Fabrics Connect at the target: the checks that do not need a controller, and the refusal a
//! failed check answers with. The command's fields and its 1024 bytes of data are
//! `pmio-nvme-spec`'s ([`ConnectCmd`], [`ConnectData`]), shared with the host.

pub use crate::spec::{CONNECT_DATA_LEN, ConnectCmd, ConnectData, connect_field};
use crate::spec::{ConnectDataError, Status, connect_invalid_param_dw0};
use crate::subsystem::{Subsystem, TransportOpts};

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

impl From<ConnectDataError> for ConnectReject {
    /// Short data is Data SGL Length Invalid; a bad NQN is Connect Invalid Parameters naming
    /// its field.
    fn from(e: ConnectDataError) -> ConnectReject {
        match e {
            ConnectDataError::Short(_) => ConnectReject::new(Status::DATA_SGL_LENGTH_INVALID),
            ConnectDataError::BadNqn { at } => ConnectReject::invalid_data_field(at),
        }
    }
}

/// Checks of a Connect command against the transport's limits.
pub trait ConnectCheck {
    /// RECFMT 0, and a queue of 2 up to `max_aq_depth` (admin) or `max_queue_depth` (I/O)
    /// entries, as SPDK checks.
    fn check(&self, opts: &TransportOpts) -> Result<(), ConnectReject>;
}

impl ConnectCheck for ConnectCmd {
    fn check(&self, opts: &TransportOpts) -> Result<(), ConnectReject> {
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
