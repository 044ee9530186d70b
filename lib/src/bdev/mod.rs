//! The block-device interface: what drivers implement and apps use.
//!
//! A driver registers a [`BlockDevice`] (static facts in [`BdevInfo`]). A reactor opens it into
//! per-hctx-type [`DriverQueue`]s that only that reactor uses. The block layer owns the request
//! pool and tags of each queue; a driver sees requests only between `submit` and the `poll`
//! that reports them done.

use std::fmt;

use crate::hctx::{HctxQueues, HctxType};
use crate::request::{OpSet, Request};
use crate::sched::DeadlineOptions;

pub mod histogram;
pub mod queue;
pub mod registry;
pub mod split;
pub mod stats;

pub use queue::{BdevQueue, BdevQueueOptions, SchedMode, SubmitError};
pub use registry::Registry;
pub use stats::{OpStats, QueueStats, QueueStatsCell, now_ns};

/// A 128-bit UUID, printed in the usual 8-4-4-4-12 form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The nil uuid (all zero bytes), SPDK's "no uuid".
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }

    /// A random (version 4) UUID from the kernel's random source.
    pub fn new_v4() -> Uuid {
        let mut b = [0u8; 16];
        // SAFETY: `b` is a valid writable buffer of `b.len()` bytes for the duration of the call.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        if n != b.len() as isize {
            // getrandom cannot fail for 16 bytes once the pool is initialised; fall back to time.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            b = t.to_le_bytes();
        }
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Uuid(b)
    }

    /// Parses the 8-4-4-4-12 hexadecimal form.
    pub fn parse(s: &str) -> Option<Uuid> {
        let hex: Vec<u8> = s.bytes().filter(|&c| c != b'-').collect();
        let dashes_ok = s.len() == 36 && [8, 13, 18, 23].iter().all(|&i| s.as_bytes()[i] == b'-');
        if hex.len() != 32 || !dashes_ok {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, pair) in hex.chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(s, 16).ok()?;
        }
        Some(Uuid(out))
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Static facts about a block device.
#[derive(Clone, Debug)]
pub struct BdevInfo {
    /// Unique name (`Null0`, `Malloc0`, `Nvme0n1`).
    pub name: String,
    pub uuid: Uuid,
    /// SPDK's `product_name` ("Null disk", "Malloc disk", "URING bdev", "NVMe disk").
    pub product_name: String,
    /// Logical block size in bytes.
    pub block_size: u32,
    pub num_blocks: u64,
    pub supported_ops: OpSet,
    /// Hardware queues of each type one reactor may open.
    pub queues: HctxQueues,
    /// Deepest queue the driver can open (entries per hardware queue).
    pub max_queue_depth: u32,
    /// Largest transfer one request may carry, in blocks (u32::MAX when unlimited). A larger
    /// I/O is split into child requests by the block layer ([`split`]).
    pub max_transfer_blocks: u32,
    /// No request may cross a multiple of this many blocks (0: no boundary): NVMe's NOIOB,
    /// SPDK's `optimal_io_boundary`, Linux's `chunk_sectors`. An I/O that crosses one is split
    /// there by the block layer ([`split`]).
    pub boundary_blocks: u32,
}

impl BdevInfo {
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks * u64::from(self.block_size)
    }

    /// mq-deadline's defaults for this device opened by `owners` queues of `queue_depth`
    /// ([`DeadlineOptions::for_queues`]) within its limits: its transfer limit, its block size
    /// and its boundary (merges must not cross what the split respected), which opening a
    /// queue under the scheduler checks.
    pub fn deadline_options(&self, queue_depth: u32, owners: u16) -> DeadlineOptions {
        DeadlineOptions {
            boundary_blocks: self.boundary_blocks,
            ..DeadlineOptions::for_queues(
                queue_depth,
                owners,
                self.max_transfer_blocks,
                self.block_size,
            )
        }
    }

    /// Checks the geometry and queue facts every driver must get right: a power-of-two block
    /// size from 512 to 65536, at least one block, a size that fits 64 bits, a queue depth of
    /// 1..=65535, at least one default queue and a transfer limit of at least one block.
    /// Drivers call it once, at create time.
    pub fn validate(&self) -> Result<(), BdevError> {
        let bs = self.block_size;
        if !(512..=65536).contains(&bs) || !bs.is_power_of_two() {
            return Err(self.invalid(format!(
                "block size {bs} is not a power of two from 512 to 65536"
            )));
        }
        if self.num_blocks == 0 {
            return Err(self.invalid("size must be at least one block"));
        }
        if self.num_blocks.checked_mul(u64::from(bs)).is_none() {
            return Err(self.invalid("size overflows 64 bits"));
        }
        if self.max_queue_depth == 0 || self.max_queue_depth > 65535 {
            return Err(self.invalid("max queue depth must be 1..=65535"));
        }
        if self.queues.default == 0 {
            return Err(self.invalid("a device needs at least one default queue"));
        }
        if self.max_transfer_blocks == 0 {
            return Err(self.invalid("max transfer must be at least one block"));
        }
        Ok(())
    }

    /// An [`BdevError::InvalidConfig`] naming this device.
    pub fn invalid(&self, reason: impl Into<String>) -> BdevError {
        BdevError::InvalidConfig {
            name: self.name.clone(),
            reason: reason.into(),
        }
    }

    /// The error a driver's `open_queue` returns for a queue the device does not have or a
    /// depth outside `1..=max_queue_depth`.
    pub fn check_queue(&self, ty: HctxType, index: u16, depth: u32) -> Result<(), BdevError> {
        let refuse = |reason: String| BdevError::QueueOpen {
            name: self.name.clone(),
            ty,
            index,
            reason,
        };
        let count = self.queues.count(ty);
        if index >= count {
            return Err(refuse(format!(
                "the device has {count} {} queue(s)",
                ty.name()
            )));
        }
        if depth == 0 || depth > self.max_queue_depth {
            return Err(refuse(format!(
                "depth {depth} outside 1..={}",
                self.max_queue_depth
            )));
        }
        Ok(())
    }
}

/// A block device a driver provides. Shared by every reactor that opens it.
pub trait BlockDevice: Send + Sync + 'static {
    fn info(&self) -> &BdevInfo;

    /// Opens the driver side of hardware queue `index` of type `ty`, able to hold `depth`
    /// requests at once, for the calling reactor. The returned queue is used only on that
    /// reactor and dropped there.
    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError>;

    /// Tells the driver that I/O buffers will come from `regions` (`(address, length)`, e.g.
    /// a whole [`crate::dma::DmaRegion`]), so it may pre-register them with the kernel or
    /// device (io_uring fixed buffers). Call it on the reactor that does the I/O: a driver may
    /// apply the regions to that reactor's queues only (open ones included), and a later call
    /// from the same reactor may replace them. Default: nothing.
    ///
    /// # Safety
    /// Each region must stay mapped, with the same pages, until every queue of the device
    /// has been dropped, or at least until no I/O of the device uses an address in it again
    /// (a driver may keep the pages pinned and I/O to a registered address reaches them).
    unsafe fn register_memory(&self, regions: &[(*mut u8, usize)]) {
        let _ = regions;
    }

    /// The page kinds this device's I/O buffers are best allocated from (for
    /// [`crate::dma::DmaRegion::with_options`]). Default: any, huge pages first.
    fn dma_options(&self) -> crate::dma::DmaOptions {
        crate::dma::DmaOptions::default()
    }
}

/// The driver side of one hardware queue, owned by one reactor.
///
/// The block layer never has more than `depth` (as opened) requests outstanding, so `submit`
/// always accepts what it is given. Requests are indexed by tag in `rqs`.
pub trait DriverQueue {
    /// Starts the requests `tags` (indices into `rqs`). At most one doorbell / one system
    /// call per call; a driver may instead defer the doorbell to the next `poll` (io_uring
    /// submits and reaps in one system call that way), so a caller must keep calling `poll`
    /// while `outstanding` is non-zero. A request the driver cannot start is completed with
    /// an error status at the next `poll`, never dropped.
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]);

    /// Rings any doorbell `submit` deferred, then reaps up to `max` completions: sets each
    /// request's `status` and pushes its tag onto `done` (which has capacity for `max`
    /// more). Returns how many were reaped.
    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize;

    /// Requests started and not yet reaped.
    fn outstanding(&self) -> usize;
}

/// Errors of the block-device layer.
#[derive(Debug, thiserror::Error)]
pub enum BdevError {
    #[error("bdev {0}: no such device")]
    NotFound(String),
    #[error("bdev name {0} is already in use")]
    Exists(String),
    #[error("bdev {name}: {reason}")]
    InvalidConfig { name: String, reason: String },
    #[error("bdev {name}: cannot open {ty:?} queue {index}: {reason}")]
    QueueOpen {
        name: String,
        ty: HctxType,
        index: u16,
        reason: String,
    },
    #[error("bdev {name}: {source}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("bdev {0}: device removed")]
    Removed(String),
}

impl BdevError {
    /// Negative errno in SPDK's convention (for RPC error replies).
    pub fn errno(&self) -> i32 {
        match self {
            BdevError::NotFound(_) => -libc::ENODEV,
            BdevError::Exists(_) => -libc::EEXIST,
            BdevError::InvalidConfig { .. } => -libc::EINVAL,
            BdevError::QueueOpen { .. } => -libc::ENOMEM,
            BdevError::Io { source, .. } => -source.raw_os_error().unwrap_or(libc::EIO),
            BdevError::Removed(_) => -libc::ENODEV,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> BdevInfo {
        BdevInfo {
            name: "Dev0".into(),
            uuid: Uuid::default(),
            product_name: "test".into(),
            block_size: 512,
            num_blocks: 8,
            supported_ops: OpSet::ALL,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 64,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        }
    }

    #[test]
    fn validate_names_each_bad_fact() {
        assert!(info().validate().is_ok());
        type Spoil = fn(&mut BdevInfo);
        let cases: [(Spoil, &str); 7] = [
            (
                |i| i.block_size = 1000,
                "block size 1000 is not a power of two",
            ),
            (|i| i.block_size = 256, "block size 256"),
            (|i| i.num_blocks = 0, "at least one block"),
            (|i| i.num_blocks = u64::MAX, "overflows 64 bits"),
            (|i| i.max_queue_depth = 0, "max queue depth"),
            (|i| i.queues.default = 0, "at least one default queue"),
            (|i| i.max_transfer_blocks = 0, "max transfer"),
        ];
        for (spoil, want) in cases {
            let mut i = info();
            spoil(&mut i);
            let e = i.validate().unwrap_err();
            assert!(e.to_string().contains(want), "{e} lacks {want:?}");
            assert!(e.to_string().starts_with("bdev Dev0: "), "{e}");
        }
    }

    #[test]
    fn check_queue_refuses_missing_queues_and_bad_depths() {
        let info = BdevInfo {
            name: "Dev0".into(),
            uuid: Uuid::default(),
            product_name: "test".into(),
            block_size: 512,
            num_blocks: 8,
            supported_ops: OpSet::ALL,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 64,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        };
        assert!(info.check_queue(HctxType::Default, 0, 64).is_ok());
        let e = info.check_queue(HctxType::Default, 1, 8).unwrap_err();
        assert!(e.to_string().contains("has 1 default queue(s)"), "{e}");
        let e = info.check_queue(HctxType::Poll, 0, 8).unwrap_err();
        assert!(e.to_string().contains("has 0 poll queue(s)"), "{e}");
        for depth in [0, 65] {
            let e = info.check_queue(HctxType::Default, 0, depth).unwrap_err();
            assert!(e.to_string().contains("outside 1..=64"), "{e}");
        }
    }

    #[test]
    fn uuid_round_trips() {
        let u = Uuid::new_v4();
        let s = u.to_string();
        assert_eq!(s.len(), 36);
        assert_eq!(Uuid::parse(&s), Some(u));
        assert_eq!(Uuid::parse("not-a-uuid"), None);
    }
}
