//! pmio's ublk target: any pmio bdev as a local kernel block device (`/dev/ublkbN`), served by
//! pmio's reactors through Linux's ublk driver (`ublk_drv`, Linux 6.0+), as SPDK's ublk target
//! serves its bdevs.
//!
//! - [`UblkTarget`]: what RPC drives — the target (`ublk_create_target`: the control device and
//!   the reactors that serve), disks started, stopped and recovered at run time (`tgt`).
//! - Control path ([`ctrl`]): `/dev/ublk-control`'s commands (ADD_DEV, SET_PARAMS, START_DEV,
//!   STOP_DEV, DEL_DEV, GET_DEV_INFO, the user-recovery pair), each an `IORING_OP_URING_CMD` on
//!   a small ring of its own, sent from the RPC thread: START_DEV and STOP_DEV block until the
//!   reactors have served what the kernel waits for.
//! - Data path (`group`, [`queue`]): each queue of a disk is owned by one reactor of the
//!   target's cpumask, which keeps its FETCH_REQ / COMMIT_AND_FETCH_REQ commands on the queue's
//!   ring and serves each request through its own bdev queue, data copied by the kernel
//!   through per-tag buffers.
//! - [`params`]: decisions as pure functions (what SET_PARAMS says of a bdev, what a request
//!   becomes on it), table-tested. [`sys`]: the uapi (`include/uapi/linux/ublk_cmd.h`), with
//!   layout asserts, and the few system calls.
//! - `rpc` (feature `rpc`): SPDK's `ublk_*` methods and the "ublk" section of `save_config`;
//!   `cli` (feature `cli`): pmio-rpc's `ublk_*` subcommands, from the same declarations.
//!
//! ```
//! use pmio_ublk::params::{Geometry, dev_params};
//! use pmio_ublk::sys::{PARAM_TYPE_BASIC, PARAMS_LEN};
//! let g = Geometry { block_shift: 12, num_blocks: 256, ops: pmio::OpSet::READ_WRITE, buf_bytes: 128 << 10 };
//! let p = dev_params(&g);
//! assert_eq!((p.len, p.types), (PARAMS_LEN, PARAM_TYPE_BASIC));
//! assert_eq!(p.basic.dev_sectors, 256 * 8); // 1 MiB in 512-byte sectors
//! ```

#[cfg(feature = "cli")]
pub mod cli;
pub mod ctrl;
pub mod error;
mod group;
pub mod params;
pub mod queue;
#[cfg(feature = "rpc")]
pub mod rpc;
pub mod sys;
mod tgt;

pub use error::UblkError;
pub use tgt::{
    DEFAULT_NUM_QUEUES, DEFAULT_QUEUE_DEPTH, DEFAULT_USER_COPY, DiskInfo, MAX_IO_BYTES,
    MAX_NUM_QUEUES, Reservation, StartDiskParams, UblkTarget,
};
