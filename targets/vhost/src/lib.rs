//! pmio's vhost-user-blk target: a virtual machine's virtio disk served from a bdev by pmio's
//! reactors, as SPDK's vhost target serves it.
//!
//! - [`spec`]: virtio-blk and split-ring facts (feature bits, layouts, statuses).
//! - [`chain`]: the descriptor-chain parser; every chain is hostile until proven otherwise.
//! - [`blk`]: what a parsed request asks of the bdev, or the status it gets without it.
//!
//! ```
//! use pmio_vhost::spec::{BlkStatus, ReqType};
//! // The legacy BARRIER bit is masked; an unknown type is UNSUPP.
//! assert_eq!(ReqType::from_raw(1 | 1 << 31), Some(ReqType::Out));
//! assert_eq!(ReqType::from_raw(3), None);
//! assert_eq!(BlkStatus::Unsupp as u8, 2);
//! ```

pub mod blk;
pub mod chain;
pub mod spec;
