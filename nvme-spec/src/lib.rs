//! NVMe and NVMe/TCP wire formats, shared by pmio's NVMe driver (and its NVMe/TCP host) and its
//! NVMe/TCP target. Pure: no I/O, no sockets, no threads, no unsafe code. Everything is
//! re-exported at the root.
//!
//! - `sqe.rs`: [`Sqe`], the 64-byte command, with its PRP or SGL data pointer ([`SglDesc`]).
//! - `cqe.rs`: [`Cqe`], the 16-byte completion.
//! - `status.rs`: [`Status`], its type and code constants ([`sct`], [`sc`]), names, retry rule.
//! - `opcode.rs`: [`admin_opc`], [`nvm_opc`], [`fctype`]; the CNS, LID and FID selectors.
//! - `identify.rs`: [`IdentifyController`], [`IdentifyNamespace`] and their byte offsets
//!   ([`id_ctrl`], [`id_ns`]); namespace identification descriptor types ([`nidt`]).
//! - `dsm.rs`: [`DsmRange`], what a Dataset Management command points to.
//! - `fabrics.rs`: controller properties ([`prop`], Property Get/Set), Connect's command,
//!   data ([`ConnectCmd`], [`ConnectData`]) and dword 0, the discovery log ([`disc`]).
//! - [`pdu`]: NVMe/TCP PDUs (TP 8000) parsed in place and encoded into a stack buffer, for
//!   both ends of a connection; `pdu/receive.rs` parses and says what to do about a bad PDU,
//!   `pdu/send.rs` encodes heads and data digests, `pdu/ic.rs` sets a connection up
//!   (ICReq/ICResp), `pdu/xfer.rs` holds data PDUs and R2Ts against their command.
//! - `bytes.rs`: little-endian reads and writes at byte offsets (crate-private).
//!
//! ```
//! use pmio_nvme_spec::pdu::{self, Header, Link, R2T, Side};
//!
//! // The target asks the host for 8 KiB of command 7's data.
//! let target = Link::new(Side::Controller, pdu::max_plen_for_data(128 * 1024));
//! let host = Link::new(Side::Host, pdu::max_plen_for_data(128 * 1024));
//! let r2t = Header::R2T(R2T { cccid: 7, ttag: 1, r2to: 0, r2tl: 8192 });
//! let mut head = [0u8; pdu::MAX_HEAD_LEN];
//! let enc = pdu::encode(&r2t, 0, &target, &mut head)?;
//!
//! // What the host read from its socket: one whole PDU, borrowed, not copied.
//! let (got, used) = pdu::parse(&head[..enc.head_len], &host)?.expect("a whole PDU");
//! assert_eq!(got.header, r2t);
//! assert_eq!(used, enc.head_len);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod bytes;
mod cqe;
mod dsm;
mod fabrics;
mod identify;
mod opcode;
pub mod pdu;
mod sqe;
mod status;

pub use cqe::{CQE_LEN, Cqe};
pub use dsm::{DSM_ATTR_DEALLOCATE, DsmRange};
pub use fabrics::{
    AUTH_SECP_NVME, CNTLID_DYNAMIC, CONNECT_AUTHREQ_ATR, CONNECT_DATA_LEN, ConnectCmd, ConnectData,
    ConnectDataError, NQN_MAX_LEN, auth_fields, auth_recv_sqe, auth_send_sqe, connect_field,
    connect_invalid_param_dw0, connect_requires_auth, connect_success_auth_dw0,
    connect_success_dw0, disc, prop, property_get_sqe, property_set_sqe,
};
pub use identify::{
    IDENTIFY_LEN, IdentifyController, IdentifyNamespace, LbaFormat, id_ctrl, id_ns, nidt,
};
pub use opcode::{admin_opc, cns, fctype, fid, lid, nvm_opc};
pub use sqe::{SQE_LEN, SglDesc, Sqe, sgl_type};
pub use status::{Answering, Status, StatusAnswering, sc, sct};
