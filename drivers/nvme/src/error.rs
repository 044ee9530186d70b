//! Errors of the NVMe driver: attaching (VFIO, DMA, controller bring-up) and per-I/O failures.

use std::path::PathBuf;

use pmio::request::IoStatus;

use crate::spec::Status;

/// Errors attaching, configuring or detaching a controller.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    /// The PCI address is not well formed.
    #[error("invalid PCI address '{0}': expected DDDD:BB:DD.F (e.g. 0000:00:04.0)")]
    InvalidAddress(String),

    /// No PCI device at that address.
    #[error("{bdf}: no such PCI device ({path} does not exist)")]
    NoSuchDevice { bdf: String, path: PathBuf },

    /// The device is bound to another driver (or none).
    #[error(
        "{bdf}: not bound to vfio-pci (driver: {}); bind it first, e.g. `pmio-setup bind {bdf}`",
        driver.as_deref().unwrap_or("none")
    )]
    NotBoundToVfio { bdf: String, driver: Option<String> },

    /// The device has no IOMMU group: the IOMMU is off or not supported.
    #[error(
        "{bdf}: no IOMMU group; enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel command line)"
    )]
    NoIommuGroup { bdf: String },

    /// VFIO is not available (modules not loaded, no /dev/vfio/vfio).
    #[error("VFIO unavailable: {reason}")]
    VfioUnavailable { reason: String },

    /// Other devices in the IOMMU group are bound to host drivers.
    #[error(
        "{bdf}: IOMMU group {group} is not viable: every device in it must be bound to vfio-pci or to no driver (group members: {})",
        members.join(", ")
    )]
    GroupNotViable {
        bdf: String,
        group: u32,
        members: Vec<String>,
    },

    /// Opening a VFIO file was refused.
    #[error("{}: permission denied; run as root or give this user access to the VFIO group", path.display())]
    Permission { path: PathBuf },

    /// A VFIO operation failed for another reason.
    #[error("{bdf}: VFIO {op} failed: {source}")]
    Vfio {
        bdf: String,
        op: &'static str,
        #[source]
        source: vfio_ioctls::VfioError,
    },

    /// Pinning DMA memory hit the locked-memory limit.
    #[error(
        "cannot map {len} bytes for DMA: RLIMIT_MEMLOCK too low (soft {soft}, hard {hard} bytes); raise it (`ulimit -l unlimited`, or LimitMEMLOCK= for a service) or run with CAP_IPC_LOCK"
    )]
    MemlockTooLow { len: usize, soft: u64, hard: u64 },

    /// No room left in the IOMMU's valid IOVA ranges for a mapping whose virtual address the
    /// IOMMU cannot translate as it is (see `crate::iova`).
    #[error(
        "cannot map {len} bytes of DMA memory at {va:#x}: no free IOVA block left in the IOMMU's valid ranges ({ranges}); {mappings} mappings hold {bytes} bytes of it; unregister memory, or register fewer and larger regions"
    )]
    IovaExhausted {
        va: u64,
        len: u64,
        ranges: String,
        mappings: usize,
        bytes: u64,
    },

    /// VFIO's type1 IOMMU refused another mapping: the container has `limit` (the module's
    /// `dma_entry_limit` when the container was opened), the kernel answered ENOSPC.
    #[error(
        "cannot map {len} bytes of DMA memory: the VFIO type1 IOMMU's limit of {limit} DMA mappings per container is reached ({mapped} in use; /sys/module/vfio_iommu_type1/parameters/dma_entry_limit, read when a container is opened); register fewer and larger regions, or raise the limit"
    )]
    DmaEntryLimit {
        len: usize,
        limit: u32,
        mapped: usize,
    },

    /// VFIO_IOMMU_MAP_DMA or UNMAP_DMA failed.
    #[error("DMA {op} of {len} bytes at {iova:#x} failed: {source}")]
    DmaMap {
        op: &'static str,
        iova: u64,
        len: usize,
        #[source]
        source: std::io::Error,
    },

    /// Allocating DMA memory failed.
    #[error(transparent)]
    DmaAlloc(#[from] pmio::dma::DmaError),

    /// BAR0 cannot be memory-mapped.
    #[error("{bdf}: BAR0 not mappable: {reason}")]
    BarNotMappable { bdf: String, reason: String },

    /// Reading or writing PCI config space failed.
    #[error("{bdf}: PCI config space {op} failed: {source}")]
    ConfigSpace {
        bdf: String,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A controller state did not complete in time.
    #[error("{ctrlr}: timed out after {ms} ms {state}")]
    Timeout {
        ctrlr: String,
        state: &'static str,
        ms: u64,
    },

    /// The controller reported a fatal status (CSTS.CFS).
    #[error("{ctrlr}: controller fatal status (CSTS.CFS) {state}")]
    ControllerFatal { ctrlr: String, state: &'static str },

    /// Registers read as all ones: the device is gone.
    #[error("{ctrlr}: device removed (registers read all ones)")]
    DeviceRemoved { ctrlr: String },

    /// An admin command failed.
    #[error("{ctrlr}: {what} failed: {status}")]
    AdminCommand {
        ctrlr: String,
        what: &'static str,
        status: Status,
    },

    /// The controller cannot be driven by this driver.
    #[error("{ctrlr}: unsupported controller: {reason}")]
    Unsupported { ctrlr: String, reason: String },

    /// Every I/O queue the controller granted is in use.
    #[error("{ctrlr}: no I/O queue pair left ({granted} granted by the controller, all in use)")]
    NoQueues { ctrlr: String, granted: u16 },

    /// The controller has been detached.
    #[error("{ctrlr}: controller detached")]
    Detached { ctrlr: String },

    /// A controller reset is in progress: admin commands must wait until it ends.
    #[error("{ctrlr}: controller reset in progress")]
    Resetting { ctrlr: String },

    /// An NVMe/TCP controller's connection is down (lost, refused or timed out).
    #[error("{ctrlr}: disconnected: {reason}")]
    Disconnected { ctrlr: String, reason: String },

    /// An option is out of range.
    #[error("invalid NVMe option: {0}")]
    InvalidOption(String),
}

/// Why one I/O failed before or at the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    /// The transfer exceeds the controller's maximum (MDTS); requests are not split.
    #[error("transfer of {bytes} bytes exceeds the controller's maximum of {max} bytes (MDTS)")]
    TooLarge { bytes: u64, max: u64 },
    /// The buffer is shorter than the blocks it should carry.
    #[error("buffer of {len} bytes is shorter than the {bytes} bytes transferred")]
    BufferTooShort { len: u32, bytes: u64 },
    /// The buffer address is not dword aligned (PRP rule).
    #[error("buffer address {addr:#x} is not 4-byte aligned")]
    Misaligned { addr: u64 },
    /// The buffer is not in memory registered for the device (`register_memory`).
    #[error("buffer {addr:#x}+{len} is not in memory registered for DMA (register_memory)")]
    NotRegistered { addr: u64, len: u64 },
    /// The namespace does not support the operation.
    #[error("operation {0} not supported by the namespace")]
    Unsupported(&'static str),
    /// The request lies (partly) beyond the namespace.
    #[error("blocks {lba}+{nblocks} beyond the namespace end ({num_blocks} blocks)")]
    OutOfRange {
        lba: u64,
        nblocks: u32,
        num_blocks: u64,
    },
    /// The tag is outside the queue's depth.
    #[error("tag {tag} outside the queue's depth {depth}")]
    BadTag { tag: u16, depth: u32 },
    /// The controller completed the command with an error status.
    #[error("NVMe status: {0}")]
    Status(Status),
    /// The controller is gone or detached.
    #[error("device removed")]
    Removed,
    /// The command timed out, and the recovery (abort, controller reset, resubmission) did
    /// not complete it within its retry budget.
    #[error("command timed out; recovery gave up after {retries} resubmissions")]
    TimedOut { retries: u8 },
    /// A controller reset failed: the controller is unusable.
    #[error("controller failed and could not be reset")]
    ControllerFailed,
    /// NVMe/TCP: the controller is disconnected and I/O is not held for it (past
    /// `fast_io_fail_timeout_sec` while reconnecting, or the controller was lost after
    /// `ctrlr_loss_timeout_sec`): ENXIO, as SPDK's bdev_nvme fails I/O without a path.
    #[error("controller disconnected (no path to it)")]
    Disconnected,
}

impl IoError {
    /// The status reported in the request.
    pub fn to_io_status(self) -> IoStatus {
        match self {
            IoError::TooLarge { .. } => IoStatus::Errno(libc::EINVAL),
            IoError::BufferTooShort { .. } => IoStatus::Errno(libc::EINVAL),
            IoError::Misaligned { .. } => IoStatus::Errno(libc::EINVAL),
            IoError::NotRegistered { .. } => IoStatus::Errno(libc::EFAULT),
            IoError::Unsupported(_) => IoStatus::Errno(libc::EOPNOTSUPP),
            IoError::OutOfRange { .. } => IoStatus::Errno(libc::ERANGE),
            IoError::BadTag { .. } => IoStatus::Errno(libc::EINVAL),
            IoError::Status(s) => IoStatus::Nvme(s.to_nvme_status()),
            IoError::Removed => IoStatus::DeviceRemoved,
            IoError::TimedOut { .. } => IoStatus::Timeout,
            IoError::ControllerFailed => IoStatus::Errno(libc::EIO),
            IoError::Disconnected => IoStatus::Errno(libc::ENXIO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::sct;

    #[test]
    fn io_errors_map_to_statuses() {
        let st = Status::new(sct::MEDIA, 0x81, true);
        match IoError::Status(st).to_io_status() {
            IoStatus::Nvme(n) => assert_eq!((n.sct, n.sc, n.dnr), (2, 0x81, true)),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            IoError::TooLarge {
                bytes: 1 << 20,
                max: 512 << 10
            }
            .to_io_status(),
            IoStatus::Errno(libc::EINVAL)
        );
        assert_eq!(IoError::Removed.to_io_status(), IoStatus::DeviceRemoved);
        let msg = IoError::TooLarge {
            bytes: 1 << 20,
            max: 512 << 10,
        }
        .to_string();
        assert!(msg.contains("MDTS"), "{msg}");
    }

    #[test]
    fn attach_errors_say_what_to_do() {
        let e = NvmeError::NotBoundToVfio {
            bdf: "0000:00:04.0".into(),
            driver: Some("nvme".into()),
        };
        assert!(e.to_string().contains("driver: nvme"), "{e}");
        let e = NvmeError::MemlockTooLow {
            len: 4096,
            soft: 65536,
            hard: 65536,
        };
        assert!(e.to_string().contains("RLIMIT_MEMLOCK"), "{e}");
    }
}
