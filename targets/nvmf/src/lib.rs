//! pmio's NVMe/TCP target: serves bdevs to NVMe over Fabrics hosts over TCP (TP 8000).
//!
//! - [`NvmfTarget`]: what RPC drives: the transport, subsystems, namespaces, hosts and
//!   listeners; connections are accepted on the first reactor and spread round robin over all
//!   of them, each owned by its reactor's poll group for its life.
//! - [`pdu`]: the NVMe/TCP wire format, from `pmio-nvme-spec` (shared with the NVMe/TCP host):
//!   PDUs parsed in place from a receive buffer, headers encoded into a small stack buffer.
//! - [`spec`]: SQE, CQE, status codes, Identify and discovery layouts: `pmio-nvme-spec`, shared
//!   with the NVMe driver.

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
pub mod stats;
pub mod subsystem;
mod tgt;

pub use error::NvmfError;
pub use pmio_nvme_spec::{self as spec, pdu};
pub use stats::GroupStats;
pub use subsystem::{
    AdrFam, DISCOVERY_NQN, ListenAddr, Namespace, SubType, Subsystem, SubsystemParams,
    TransportOpts,
};
pub use tgt::{Config, CtrlrRecord, NvmfTarget, QpairRecord};
