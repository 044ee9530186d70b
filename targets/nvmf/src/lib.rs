//! pmio's NVMe/TCP target: serves bdevs to NVMe over Fabrics hosts over TCP (TP 8000).
//!
//! - [`NvmfTarget`]: what RPC drives: the transport, subsystems, namespaces, hosts and
//!   listeners; connections are accepted on the first reactor and spread round robin over all
//!   of them, each owned by its reactor's poll group for its life.
//! - [`pdu`]: the wire format. PDUs are parsed in place from a receive buffer and their headers
//!   encoded into a small stack buffer; there is no socket and no reactor here, so an NVMe/TCP
//!   host reuses the same codec.
//!
//! ```
//! use pmio_nvmf::pdu::{self, Header, Link, R2T, Side};
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

// Unsafe code lives only in `buf` (command data buffers a device may DMA into).
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod buf;
mod conn;
pub mod ctrlr;
pub mod error;
mod group;
pub mod identify;
mod listener;
pub mod pdu;
pub mod spec;
pub mod stats;
pub mod subsystem;
mod tgt;

pub use error::NvmfError;
pub use stats::GroupStats;
pub use subsystem::{
    AdrFam, DISCOVERY_NQN, ListenAddr, Namespace, SubType, Subsystem, SubsystemParams,
    TransportOpts,
};
pub use tgt::{Config, CtrlrRecord, NvmfTarget, QpairRecord};
