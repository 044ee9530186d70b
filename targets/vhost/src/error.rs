//! The target's errors: one variant per failure a user (or the RPC layer) can act on.

use pmio_reactors::ReactorError;

/// Errors of the vhost target.
#[derive(Debug, thiserror::Error)]
pub enum VhostError {
    /// A controller of that name exists (SPDK's "File exists").
    #[error("controller {0} already exists")]
    Exists(String),
    /// No controller of that name (SPDK's "No such device").
    #[error("controller {0} does not exist")]
    NotFound(String),
    #[error("bdev {0} does not exist")]
    BdevNotFound(String),
    #[error("bdev {bdev} is already served by controller {ctrlr}")]
    BdevInUse { bdev: String, ctrlr: String },
    /// A front end is connected (SPDK refuses to delete such a controller).
    #[error("controller {0} has a connected front end (stop the VM or its driver first)")]
    Connected(String),
    #[error("invalid controller name {0:?}: {1}")]
    BadName(String, &'static str),
    #[error("cpumask {mask}: {reason}")]
    Cpumask { mask: String, reason: String },
    /// Packed virtqueues (VIRTIO_F_RING_PACKED) are not implemented.
    #[error("packed_ring is not supported: pmio serves split virtqueues only")]
    PackedRing,
    #[error("socket {path}: {source}")]
    Socket {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("memory table: {0}")]
    MemTable(String),
    #[error("in-flight log: {0}")]
    Inflight(String),
    #[error("virtqueue: {0}")]
    Ring(String),
    #[error(transparent)]
    Reactor(#[from] ReactorError),
    #[error("the target is shutting down")]
    ShuttingDown,
}

impl VhostError {
    /// Negative errno in SPDK's convention.
    pub fn errno(&self) -> i32 {
        match self {
            VhostError::Exists(_) => -libc::EEXIST,
            VhostError::NotFound(_) | VhostError::BdevNotFound(_) => -libc::ENODEV,
            VhostError::BdevInUse { .. } | VhostError::Connected(_) => -libc::EBUSY,
            VhostError::PackedRing => -libc::ENOTSUP,
            VhostError::Socket { source, .. } => -source.raw_os_error().unwrap_or(libc::EIO),
            VhostError::ShuttingDown => -libc::ESHUTDOWN,
            _ => -libc::EINVAL,
        }
    }
}
