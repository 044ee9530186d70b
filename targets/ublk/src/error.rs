//! The ublk target's errors: one variant per failure a user can act on.

/// Why a ublk operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UblkError {
    /// `/dev/ublk-control` is missing: the kernel has no ublk (or the module is not loaded).
    #[error(
        "{path} not found: the kernel's ublk driver is not loaded (modprobe ublk_drv; it needs \
         Linux 6.0 or newer built with CONFIG_BLK_DEV_UBLK)"
    )]
    NoDriver { path: String },
    #[error("opening {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ublk io_uring: {0}")]
    Ring(#[source] std::io::Error),
    /// The kernel refused a control command (negative errno).
    #[error("ublk {cmd} for disk {id}: the kernel answered {errno} ({text}){hint}")]
    Command {
        cmd: &'static str,
        id: u32,
        errno: i32,
        text: String,
        hint: &'static str,
    },
    #[error("the ublk target already exists")]
    TargetExists,
    #[error("no ublk target: ublk_create_target first")]
    NoTarget,
    #[error("ublk disk {0} already exists")]
    DiskExists(u32),
    #[error("no ublk disk {0}")]
    NoDisk(u32),
    #[error("ublk disk {0} is busy (being started, stopped or recovered)")]
    DiskBusy(u32),
    #[error("bdev {0}: no such device")]
    BdevNotFound(String),
    #[error("bdev {bdev} is already served by ublk disk {id}")]
    BdevInUse { bdev: String, id: u32 },
    #[error("bdev {bdev}: {reason}")]
    BadBdev { bdev: String, reason: String },
    #[error("cpumask {mask}: {reason}")]
    Cpumask { mask: String, reason: String },
    #[error("{0}")]
    Invalid(String),
    #[error(
        "ublk disk {id}: user_copy asked, but the kernel's ublk_drv has no UBLK_F_USER_COPY \
         (Linux 6.5+)"
    )]
    NoUserCopy { id: u32 },
    #[error("ublk disk {id}: user recovery is not possible: {reason}")]
    NoRecovery { id: u32, reason: String },
    #[error("ublk disk {id} queue {queue}: {reason}")]
    Queue { id: u32, queue: u16, reason: String },
    #[error("reactor: {0}")]
    Reactor(#[from] pmio_reactors::ReactorError),
}

impl UblkError {
    /// Negative errno in SPDK's convention, for RPC replies.
    pub fn errno(&self) -> i32 {
        match self {
            UblkError::NoDriver { .. } => -libc::ENOENT,
            UblkError::Open { source, .. } | UblkError::Ring(source) => {
                -source.raw_os_error().unwrap_or(libc::EIO)
            }
            UblkError::Command { errno, .. } => *errno,
            UblkError::TargetExists | UblkError::DiskBusy(_) | UblkError::BdevInUse { .. } => {
                -libc::EBUSY
            }
            UblkError::NoTarget | UblkError::NoDisk(_) | UblkError::BdevNotFound(_) => {
                -libc::ENODEV
            }
            UblkError::DiskExists(_) => -libc::EEXIST,
            UblkError::NoRecovery { .. } | UblkError::NoUserCopy { .. } => -libc::ENOTSUP,
            UblkError::BadBdev { .. } | UblkError::Cpumask { .. } | UblkError::Invalid(_) => {
                -libc::EINVAL
            }
            UblkError::Queue { .. } | UblkError::Reactor(_) => -libc::EIO,
        }
    }
}
