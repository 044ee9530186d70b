//! pmio's vhost-user-blk target: a virtual machine's virtio disk served from a bdev by pmio's
//! reactors, as SPDK's vhost target serves it.
//!
//! - [`VhostTarget`]: what RPC drives: controllers (a bdev on a unix socket in the socket
//!   directory), created and deleted at run time.
//! - Control path (`ctrlr`, `session`): one thread per controller answers the front end's
//!   vhost-user messages (rust-vmm's `vhost` crate decodes them) and reaches the reactors by
//!   message only: rings start, stop (after their in-flight I/O), and switch memory tables
//!   there.
//! - Data path (`group`, `ring`, [`vring`]): each virtqueue is polled by one reactor of the
//!   controller's cpumask, which owns it; the guest is told not to kick while the ring is
//!   polled, requests become bdev I/O through bounce buffers, and completions signal the
//!   guest through its call eventfd once per poll.
//! - `rpc` (feature `rpc`): SPDK's `vhost_*` methods on the target and the "vhost_blk"
//!   section of `save_config`; `cli` (feature `cli`): pmio-rpc's `vhost_*` subcommands, built
//!   from the same declarations.
//! - [`chain`] and [`blk`]: the descriptor-chain parser and the request rules; every chain is
//!   hostile until proven otherwise. [`spec`]: virtio facts. [`mem`]: guest memory.
//!
//! ```
//! use pmio_vhost::spec::{BlkStatus, ReqType};
//! // The legacy BARRIER bit is masked; an unknown type is UNSUPP.
//! assert_eq!(ReqType::from_raw(1 | 1 << 31), Some(ReqType::Out));
//! assert_eq!(ReqType::from_raw(3), None);
//! assert_eq!(BlkStatus::Unsupp as u8, 2);
//! ```

pub mod blk;
mod buf;
pub mod chain;
#[cfg(feature = "cli")]
pub mod cli;
mod ctrlr;
pub mod error;
mod group;
pub mod inflight;
pub mod mem;
mod ring;
#[cfg(feature = "rpc")]
pub mod rpc;
mod session;
pub mod spec;
mod sys;
mod tgt;
pub mod vring;

pub use ctrlr::CtrlrInfo;
pub use error::VhostError;
pub use session::MAX_QUEUES;
pub use tgt::{BlkCtrlrParams, VhostTarget};
