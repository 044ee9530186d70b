//! What can go wrong when preparing a device, in the words a user can act on.

use std::io;

/// A failure of a pmio-setup command.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0:?} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:00:04.0)")]
    BadAddress(String),
    #[error("no PCI device {0}")]
    NoDevice(String),
    #[error("{bdf} is not an NVMe controller (class {class})")]
    NotNvme { bdf: String, class: String },
    #[error("{0} needs root (run it with sudo)")]
    NotRoot(&'static str),
    #[error(
        "IOMMU is off: {0} has no IOMMU group (boot with intel_iommu=on or amd_iommu=on, and enable VT-d/AMD-Vi in firmware)"
    )]
    IommuOff(String),
    #[error("kernel module {0} is missing and could not be loaded (modprobe {0})")]
    ModuleMissing(&'static str),
    #[error(
        "IOMMU group {group} of {bdf} is not viable: it also holds {others} (bind them to vfio-pci or unbind them first)"
    )]
    GroupNotViable {
        bdf: String,
        group: String,
        others: String,
    },
    #[error("{bdf} is in use: {what}; unmount or stop using it before binding to vfio-pci")]
    InUse { bdf: String, what: String },
    #[error(
        "RLIMIT_MEMLOCK is {limit} bytes, below the {need} bytes pmio needs to pin DMA memory (raise it: ulimit -l unlimited, or run as root)"
    )]
    MemlockTooLow { limit: u64, need: u64 },
    #[error("hugepage size {0} is not supported here (have: {1})")]
    HugepageSize(String, String),
    #[error(
        "asked for {want} hugepages of {size}, the kernel gave {got} (memory too fragmented or too small)"
    )]
    HugepagesShort { size: String, want: u64, got: u64 },
    #[error("{bdf}: expected driver {want} after the change, found {found}")]
    BindFailed {
        bdf: String,
        want: &'static str,
        found: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Adds the path to an I/O error.
pub fn io_at(path: &str) -> impl FnOnce(io::Error) -> SetupError + '_ {
    move |source| SetupError::Io {
        path: path.to_string(),
        source,
    }
}
