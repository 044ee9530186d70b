//! pmio's io_uring driver: regular files, block devices and NVMe generic devices as pmio block
//! devices, through the kernel's io_uring.
//!
//! - [`UringOptions`]: path, O_DIRECT (default on), hipri/IOPOLL, name, block size; also parsed
//!   from `path=FILE[,direct=0|1][,hipri=1][,nop=1]` (pmio-perf's `--dev uring:...`).
//! - [`UringBdev`]: checked at create time (missing path, directory, not a file or block
//!   device, no O_DIRECT on the file system, smaller than one block: each a typed
//!   [`UringError`]). Block size from the device (`BLKSSZGET`) or the file system (statx
//!   `STATX_DIOALIGN`, else `st_blksize`; 512 bytes for buffered files); block count from the
//!   size (`BLKGETSIZE64` for block devices).
//! - One ring per [`pmio::BlockDevice::open_queue`] call, created on and used only by the
//!   calling reactor: SINGLE_ISSUER + DEFER_TASKRUN + COOP_TASKRUN + TASKRUN_FLAG + SUBMIT_ALL
//!   where the kernel accepts them (falling back flag by flag on EINVAL), the file registered,
//!   buffers registered through [`UringBdev::register_buffers`] used with
//!   READ_FIXED/WRITE_FIXED, and the ring itself registered with its thread so every
//!   `io_uring_enter` names it by index (no file-table lookup per call).
//! - `submit` pushes one SQE per request; the next `poll` enters the kernel once (submitting
//!   them, with GETEVENTS only when the kernel flags task work), reaps CQEs in a batch (the
//!   tag rides in `user_data`), resubmits the rest of short transfers, and turns errors into
//!   `IoStatus::Errno`; a read at end of file fails with EIO rather than spinning.
//! - Flush is `fdatasync`; write zeroes and discard are `fallocate` ZERO_RANGE / PUNCH_HOLE
//!   (with KEEP_SIZE) where the file system or device supports them.
//! - [`nvme`]: NVMe passthrough (`IORING_OP_URING_CMD`, 128-byte SQEs) on `/dev/ngXnY`.
//! - `nop=1` ([`UringOptions::nop`]): a benchmark mode that sends every request as
//!   `IORING_OP_NOP`, measuring pmio's I/O path over the ring alone (t/io_uring's `-N1`).
//!
//! ```no_run
//! use pmio::{BlockDevice, HctxType};
//! use pmio_uring::{UringBdev, UringOptions};
//!
//! let opts = UringOptions::parse("path=/var/tmp/disk.img,direct=1")?;
//! let bdev = UringBdev::create(&opts)?;
//! println!("{} blocks of {} bytes", bdev.info().num_blocks, bdev.info().block_size);
//! // On the reactor that will use it:
//! let queue = bdev.open_queue(HctxType::Default, 0, 128)?;
//! assert_eq!(queue.outstanding(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "cli")]
pub mod cli;
mod device;
mod enter;
mod error;
pub mod nvme;
mod options;
mod queue;
#[cfg(feature = "rpc")]
pub mod rpc;
mod sys;

pub use device::{DeviceKind, UringBdev};
pub use error::UringError;
pub use options::UringOptions;
pub use queue::RingFlags;
