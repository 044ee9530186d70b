//! The status of a completion: its type (SCT) and code (SC), Do Not Retry and More, the names
//! of the codes, and which statuses a host may retry.

use std::fmt;

use pmio::request::NvmeStatus;

/// Status code types (status field bits 11:9 of CQE dword 3).
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

/// Status codes. Generic (SCT 0) first, then command specific (SCT 1).
pub mod sc {
    // SCT 0: generic command status.
    pub const SUCCESS: u8 = 0x00;
    pub const INVALID_OPCODE: u8 = 0x01;
    pub const INVALID_FIELD: u8 = 0x02;
    pub const COMMAND_ID_CONFLICT: u8 = 0x03;
    pub const DATA_TRANSFER_ERROR: u8 = 0x04;
    pub const INTERNAL_ERROR: u8 = 0x06;
    pub const ABORT_REQUESTED: u8 = 0x07;
    /// The command's submission queue was deleted (Delete I/O SQ) before it completed.
    pub const ABORTED_SQ_DELETION: u8 = 0x08;
    pub const INVALID_NAMESPACE: u8 = 0x0b;
    pub const COMMAND_SEQUENCE_ERROR: u8 = 0x0c;
    pub const DATA_SGL_LENGTH_INVALID: u8 = 0x0f;
    pub const SGL_DESCRIPTOR_TYPE_INVALID: u8 = 0x11;
    pub const INVALID_SGL_OFFSET: u8 = 0x16;
    pub const KEEP_ALIVE_EXPIRED: u8 = 0x19;
    pub const COMMAND_INTERRUPTED: u8 = 0x21;
    /// A transport error damaged this command only (an NVMe/TCP data digest mismatch).
    pub const TRANSIENT_TRANSPORT_ERROR: u8 = 0x22;
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
    pub const CAPACITY_EXCEEDED: u8 = 0x81;
    pub const NAMESPACE_NOT_READY: u8 = 0x82;
    pub const FORMAT_IN_PROGRESS: u8 = 0x84;

    // SCT 1: command specific status, admin commands.
    pub const INVALID_QUEUE_IDENTIFIER: u8 = 0x01;
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    pub const ABORT_COMMAND_LIMIT_EXCEEDED: u8 = 0x03;
    pub const ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED: u8 = 0x05;
    pub const INVALID_LOG_PAGE: u8 = 0x09;
    pub const FEATURE_NOT_SAVEABLE: u8 = 0x0d;
    pub const FEATURE_NOT_CHANGEABLE: u8 = 0x0e;
    pub const FEATURE_NOT_NS_SPECIFIC: u8 = 0x0f;
    pub const INVALID_CONTROLLER_ID: u8 = 0x1f;

    // SCT 1: command specific status, fabrics Connect (NVMe-oF 1.1, Figure "Connect status").
    pub const CONNECT_INCOMPATIBLE_FORMAT: u8 = 0x80;
    pub const CONNECT_CONTROLLER_BUSY: u8 = 0x81;
    pub const CONNECT_INVALID_PARAMETERS: u8 = 0x82;
    pub const CONNECT_RESTART_DISCOVERY: u8 = 0x83;
    pub const CONNECT_INVALID_HOST: u8 = 0x84;
    /// SCT 1, any command on a queue not yet authenticated in band (NVMe Base 2.0 §8.13).
    pub const AUTH_REQUIRED: u8 = 0x91;
    /// Path related (SCT 3): the namespace's ANA group is Inaccessible through this
    /// controller.
    pub const ANA_INACCESSIBLE: u8 = 0x02;
}

/// A completion status: the CQE status field without the phase tag, 15 bits: SC \[7:0\],
/// SCT \[10:8\], CRD \[12:11\], More \[13\], DNR \[14\].
///
/// In CQE dword 3 it sits one bit up, above the phase tag ([`crate::Cqe::status`]); fabrics
/// transports leave the phase tag 0.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Status(pub u16);

impl Status {
    pub const SUCCESS: Status = Status(0);
    pub const INVALID_OPCODE: Status = Status::new(sct::GENERIC, sc::INVALID_OPCODE, true);
    pub const INVALID_FIELD: Status = Status::new(sct::GENERIC, sc::INVALID_FIELD, true);
    pub const COMMAND_ID_CONFLICT: Status =
        Status::new(sct::GENERIC, sc::COMMAND_ID_CONFLICT, true);
    pub const DATA_TRANSFER_ERROR: Status =
        Status::new(sct::GENERIC, sc::DATA_TRANSFER_ERROR, false);
    pub const INTERNAL_ERROR: Status = Status::new(sct::GENERIC, sc::INTERNAL_ERROR, false);
    pub const ABORT_REQUESTED: Status = Status::new(sct::GENERIC, sc::ABORT_REQUESTED, false);
    pub const INVALID_NAMESPACE: Status = Status::new(sct::GENERIC, sc::INVALID_NAMESPACE, true);
    pub const COMMAND_SEQUENCE_ERROR: Status =
        Status::new(sct::GENERIC, sc::COMMAND_SEQUENCE_ERROR, true);
    pub const DATA_SGL_LENGTH_INVALID: Status =
        Status::new(sct::GENERIC, sc::DATA_SGL_LENGTH_INVALID, true);
    pub const SGL_DESCRIPTOR_TYPE_INVALID: Status =
        Status::new(sct::GENERIC, sc::SGL_DESCRIPTOR_TYPE_INVALID, true);
    pub const INVALID_SGL_OFFSET: Status = Status::new(sct::GENERIC, sc::INVALID_SGL_OFFSET, true);
    /// Transient (no DNR): the host may retry the command.
    pub const TRANSIENT_TRANSPORT_ERROR: Status =
        Status::new(sct::GENERIC, sc::TRANSIENT_TRANSPORT_ERROR, false);
    pub const LBA_OUT_OF_RANGE: Status = Status::new(sct::GENERIC, sc::LBA_OUT_OF_RANGE, true);
    pub const CAPACITY_EXCEEDED: Status = Status::new(sct::GENERIC, sc::CAPACITY_EXCEEDED, true);
    /// Transient (no DNR): the host may retry.
    pub const NAMESPACE_NOT_READY: Status =
        Status::new(sct::GENERIC, sc::NAMESPACE_NOT_READY, false);

    pub const INVALID_QUEUE_IDENTIFIER: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_QUEUE_IDENTIFIER, true);
    pub const INVALID_QUEUE_SIZE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_QUEUE_SIZE, true);
    pub const ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED: Status = Status::new(
        sct::COMMAND_SPECIFIC,
        sc::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED,
        true,
    );
    pub const INVALID_LOG_PAGE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_LOG_PAGE, true);
    pub const FEATURE_NOT_SAVEABLE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::FEATURE_NOT_SAVEABLE, true);
    pub const FEATURE_NOT_CHANGEABLE: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::FEATURE_NOT_CHANGEABLE, true);
    pub const INVALID_CONTROLLER_ID: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::INVALID_CONTROLLER_ID, true);

    pub const CONNECT_INCOMPATIBLE_FORMAT: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_INCOMPATIBLE_FORMAT, true);
    /// Transient (no DNR): the host may try again later.
    pub const CONNECT_CONTROLLER_BUSY: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_CONTROLLER_BUSY, false);
    /// Goes with [`crate::connect_invalid_param_dw0`] in the response's dword 0.
    pub const CONNECT_INVALID_PARAMETERS: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_INVALID_PARAMETERS, true);
    pub const CONNECT_RESTART_DISCOVERY: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_RESTART_DISCOVERY, true);
    pub const CONNECT_INVALID_HOST: Status =
        Status::new(sct::COMMAND_SPECIFIC, sc::CONNECT_INVALID_HOST, true);
    /// A command before the queue's in-band authentication completed (SPDK answers it so).
    pub const AUTH_REQUIRED: Status = Status::new(sct::COMMAND_SPECIFIC, sc::AUTH_REQUIRED, false);

    /// Path related: the namespace is not reachable through this controller's port now (its
    /// ANA group is Inaccessible); no DNR, so a multipath host retries on another path.
    pub const ANA_INACCESSIBLE: Status = Status::new(sct::PATH, sc::ANA_INACCESSIBLE, false);

    /// The status of type `sct` and code `sc`, with Do Not Retry as given; CRD and More 0.
    pub const fn new(sct: u8, sc: u8, dnr: bool) -> Status {
        Status(sc as u16 | ((sct as u16 & 7) << 8) | ((dnr as u16) << 14))
    }

    /// Status code.
    pub const fn sc(self) -> u8 {
        self.0 as u8
    }

    /// Status code type.
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }

    /// Command retry delay index.
    pub const fn crd(self) -> u8 {
        ((self.0 >> 11) & 3) as u8
    }

    /// More information in the error log.
    pub const fn more(self) -> bool {
        self.0 & (1 << 13) != 0
    }

    /// Do not retry: the same command would fail again.
    pub const fn dnr(self) -> bool {
        self.0 & (1 << 14) != 0
    }

    /// Whether the command succeeded.
    pub const fn is_success(self) -> bool {
        self.sct() == sct::GENERIC && self.sc() == sc::SUCCESS
    }

    /// Whether Delete I/O SQ aborted the command (generic status 08h).
    pub fn is_sq_deletion_abort(self) -> bool {
        self.sct() == sct::GENERIC && self.sc() == sc::ABORTED_SQ_DELETION
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
                sc::COMMAND_INTERRUPTED | sc::NAMESPACE_NOT_READY | sc::FORMAT_IN_PROGRESS
            ),
            sct::PATH => matches!(self.sc(), 0x00 /* internal path error */),
            _ => false,
        }
    }

    /// The block layer's view of the status.
    pub const fn to_nvme_status(self) -> NvmeStatus {
        NvmeStatus {
            sct: self.sct(),
            sc: self.sc(),
            dnr: self.dnr(),
        }
    }

    /// The status a block layer completion carries (a passthrough device's, or one that
    /// [`Status::to_nvme_status`] made).
    pub const fn from_nvme_status(n: NvmeStatus) -> Status {
        Status::new(n.sct, n.sc, n.dnr)
    }

    /// A short description of the status code (the spec's name) as the answer to an admin or
    /// NVM I/O command, "unknown" when not listed. A command-specific code's name depends on
    /// the command it answers: [`Status::describe_for`] names it for another.
    pub fn describe(self) -> &'static str {
        self.describe_for(Answering::Nvm)
    }

    /// The spec's name of the status as the answer to `cmd`: command-specific codes 80h and up
    /// mean one thing for an NVM command and another for a fabrics Connect.
    pub fn describe_for(self, cmd: Answering) -> &'static str {
        if cmd == Answering::Connect
            && self.sct() == sct::COMMAND_SPECIFIC
            && let Some(name) = connect_status_name(self.sc())
        {
            return name;
        }
        self.describe_nvm()
    }

    /// The status shown as the answer to `cmd` (name, then its fields, as [`fmt::Display`]).
    pub fn answering(self, cmd: Answering) -> StatusAnswering {
        StatusAnswering { status: self, cmd }
    }

    fn describe_nvm(self) -> &'static str {
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
            (sct::GENERIC, 0x0f) => "data SGL length invalid",
            (sct::GENERIC, 0x11) => "SGL descriptor type invalid",
            (sct::GENERIC, 0x13) => "invalid PRP offset",
            (sct::GENERIC, 0x15) => "operation denied",
            (sct::GENERIC, 0x16) => "invalid SGL offset",
            (sct::GENERIC, 0x19) => "keep alive timer expired",
            (sct::GENERIC, 0x1d) => "namespace is write protected",
            (sct::GENERIC, 0x21) => "command interrupted",
            (sct::GENERIC, 0x22) => "transient transport error",
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
            (sct::COMMAND_SPECIFIC, 0x09) => "invalid log page",
            (sct::COMMAND_SPECIFIC, 0x0c) => "invalid queue deletion",
            (sct::COMMAND_SPECIFIC, 0x0d) => "feature identifier not saveable",
            (sct::COMMAND_SPECIFIC, 0x0e) => "feature not changeable",
            (sct::COMMAND_SPECIFIC, 0x0f) => "feature not namespace specific",
            (sct::COMMAND_SPECIFIC, 0x1f) => "invalid controller identifier",
            // The NVM command set's meanings; a fabrics Connect gives 80h-84h its own
            // (connect_status_name), which only the caller, knowing the command, can tell
            // apart (Status::describe_for).
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
            (sct::PATH, 0x01) => "asymmetric access persistent loss",
            (sct::PATH, 0x02) => "asymmetric access inaccessible",
            (sct::PATH, 0x03) => "asymmetric access transition",
            (sct::PATH, 0x60) => "transport error",
            _ => "unknown status",
        }
    }
}

/// The command a status answers, where that changes its name: SCT 1 codes 80h and up are
/// defined per command (NVMe Base 2.0, Figure 103 onwards; NVMe-oF 1.1, Figure 21 for Connect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answering {
    /// An admin or NVM command set I/O command.
    Nvm,
    /// A fabrics Connect.
    Connect,
}

/// The fabrics Connect's command-specific statuses (NVMe-oF 1.1, Figure 21).
fn connect_status_name(sc: u8) -> Option<&'static str> {
    Some(match sc {
        sc::CONNECT_INCOMPATIBLE_FORMAT => "connect incompatible format",
        sc::CONNECT_CONTROLLER_BUSY => "connect controller busy",
        sc::CONNECT_INVALID_PARAMETERS => "connect invalid parameters",
        sc::CONNECT_RESTART_DISCOVERY => "connect restart discovery",
        sc::CONNECT_INVALID_HOST => "connect invalid host",
        _ => return None,
    })
}

/// A status shown with the name it has as the answer to one command ([`Status::answering`]).
#[derive(Clone, Copy)]
pub struct StatusAnswering {
    status: Status,
    cmd: Answering,
}

impl fmt::Display for StatusAnswering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.status;
        write!(
            f,
            "{} (sct {:#x}, sc {:#04x}{})",
            s.describe_for(self.cmd),
            s.sct(),
            s.sc(),
            if s.dnr() { ", dnr" } else { "" }
        )
    }
}

impl fmt::Debug for StatusAnswering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.answering(Answering::Nvm), f)
    }
}

/// The name and fields, as [`fmt::Display`]: a raw `Status(16386)` in a failed assertion or a
/// log says nothing.
impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_the_spec_puts_them() {
        // Invalid Opcode with DNR: SC 1 in bits 7:0, DNR bit 14.
        assert_eq!(Status::INVALID_OPCODE.0, 1 | (1 << 14));
        // Connect Invalid Host: SCT 1 (bits 10:8), SC 84h.
        assert_eq!(Status::CONNECT_INVALID_HOST.0, 0x84 | (1 << 8) | (1 << 14));
        assert_eq!(Status::SUCCESS.0, 0);
        let s = Status(0x81 | 2 << 8 | 1 << 11 | 1 << 13 | 1 << 14);
        assert_eq!(
            (s.sct(), s.sc(), s.crd(), s.more(), s.dnr()),
            (sct::MEDIA, 0x81, 1, true, true)
        );
        assert_eq!(
            Status::new(sct::MEDIA, 0x81, true),
            Status(s.0 & !(1 << 11 | 1 << 13))
        );
    }

    #[test]
    fn retryable_statuses_respect_dnr() {
        assert!(Status::new(sct::GENERIC, 0x82, false).is_retryable());
        assert!(!Status::new(sct::GENERIC, 0x82, true).is_retryable());
        assert!(Status::new(sct::PATH, 0x00, false).is_retryable());
        assert!(!Status::new(sct::MEDIA, 0x81, false).is_retryable());
        assert!(!Status::new(sct::GENERIC, 0x02, false).is_retryable());
        assert!(!Status::TRANSIENT_TRANSPORT_ERROR.dnr());
        assert!(Status::SUCCESS.is_success());
        assert!(Status::default().is_success());
    }

    #[test]
    fn block_layer_status_round_trips() {
        let s = Status::new(sct::GENERIC, 0x80, true);
        let n = s.to_nvme_status();
        assert_eq!(
            n,
            NvmeStatus {
                sct: 0,
                sc: 0x80,
                dnr: true
            }
        );
        assert_eq!(Status::from_nvme_status(n), s);
    }

    #[test]
    fn display_names_the_status() {
        let st = Status::LBA_OUT_OF_RANGE;
        assert_eq!(st.describe(), "LBA out of range");
        assert_eq!(st.to_string(), "LBA out of range (sct 0x0, sc 0x80, dnr)");
        assert_eq!(format!("{st:?}"), st.to_string());
        assert_eq!(Status(0x7f).describe(), "unknown status");
    }

    #[test]
    fn command_specific_names_come_from_the_command_answered() {
        let st = Status::CONNECT_INVALID_PARAMETERS;
        assert_eq!(
            st.answering(Answering::Connect).to_string(),
            "connect invalid parameters (sct 0x1, sc 0x82, dnr)"
        );
        assert_eq!(st.describe(), "attempted write to read only range");
        assert_eq!(
            Status::CONNECT_INVALID_HOST.describe_for(Answering::Connect),
            "connect invalid host"
        );
        // Generic and shared command-specific codes keep their names for a Connect.
        assert_eq!(
            Status::INTERNAL_ERROR.describe_for(Answering::Connect),
            "internal error"
        );
        assert_eq!(
            Status::INVALID_QUEUE_IDENTIFIER.describe_for(Answering::Connect),
            "invalid queue identifier"
        );
        // Generic 82h is not the Connect's command-specific 82h.
        assert_eq!(
            Status::NAMESPACE_NOT_READY.describe_for(Answering::Connect),
            "namespace not ready"
        );
    }
}
