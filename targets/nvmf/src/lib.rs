//! pmio's NVMe/TCP target: serves bdevs to NVMe over Fabrics hosts over TCP (TP 8000).
//!
//! - [`NvmfTarget`]: what RPC drives: the transport, subsystems, namespaces, hosts and
//!   listeners; connections are accepted on the first reactor and spread round robin over all
//!   of them, each owned by its reactor's poll group for its life.
//! - [`pdu`]: the NVMe/TCP wire format, from `pmio-nvme-spec` (shared with the NVMe/TCP host):
//!   PDUs parsed in place from a receive buffer, headers encoded into a small stack buffer.
//! - `rpc` (feature `rpc`): SPDK's `nvmf_*` and `sock_*` methods on the target, with the
//!   "nvmf" and "sock" sections of `save_config`.
//! - `cli` (feature `cli`): pmio-rpc's `nvmf_*` and `sock_*` subcommands, built from the
//!   methods' declarations.
//! - [`spec`]: SQE, CQE, status codes, Identify and discovery layouts: `pmio-nvme-spec`, shared
//!   with the NVMe driver.
//!
//! ```
//! use pmio_nvmf::identify::{NsCaps, identify_ctrlr};
//! use pmio_nvmf::spec::{IdentifyController, id_ctrl};
//! use pmio_nvmf::{Subsystem, SubsystemParams, TransportOpts};
//!
//! // What `nvmf_create_subsystem nqn.2016-06.io.spdk:cnode1 -a` makes...
//! let params = SubsystemParams {
//!     nqn: "nqn.2016-06.io.spdk:cnode1".to_string(),
//!     allow_any_host: true,
//!     ..SubsystemParams::default()
//! };
//! let subsys = Subsystem::new(&params)?;
//! assert!(subsys.admits("nqn.2014-08.org.nvmexpress:uuid:0f01fb42-9f7f-4856-b0b3-51e60b8de349"));
//!
//! // ...and what its controller 1 answers to Identify Controller.
//! let id = identify_ctrlr(1, &subsys, &TransportOpts::default(), NsCaps::default());
//! assert_eq!(id[id_ctrl::CNTRLTYPE], IdentifyController::CNTRLTYPE_IO);
//! assert_eq!(&id[id_ctrl::CNTLID..id_ctrl::CNTLID + 2], &1u16.to_le_bytes());
//! # Ok::<(), pmio_nvmf::NvmfError>(())
//! ```

// Unsafe code lives only in `buf` (command data buffers a device may DMA into) and `ready`
// (the poll group's epoll set).
#![deny(unsafe_code)]

pub mod ana;
#[allow(unsafe_code)]
mod buf;
#[cfg(feature = "cli")]
pub mod cli;
mod conn;
pub mod ctrlr;
pub mod error;
mod group;
pub mod identify;
mod listener;
mod psk;
#[allow(unsafe_code)]
mod ready;
#[cfg(feature = "rpc")]
pub mod rpc;
pub mod sock;
pub mod stats;
pub mod subsystem;
mod tgt;

pub use ana::AnaState;
pub use error::NvmfError;
pub use pmio_nvme_spec::{self as spec, pdu};
pub use sock::SockOptions;
pub use stats::GroupStats;
pub use subsystem::{
    AdrFam, DISCOVERY_NQN, HostKeys, HostPsk, ListenAddr, Namespace, SubType, Subsystem,
    SubsystemParams, TransportOpts,
};
pub use tgt::{Config, CtrlrRecord, DhchapPolicy, NvmfTarget, QpairRecord};
