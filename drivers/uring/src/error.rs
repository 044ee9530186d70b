//! The driver's error type: one variant per failure a user can act on.

use std::io;
use std::path::PathBuf;

use pmio::BdevError;

/// Errors of the io_uring driver (creating a device, opening a queue, parsing a spec).
#[derive(Debug, thiserror::Error)]
pub enum UringError {
    /// The options name no file.
    #[error("uring bdev: no path given (path=FILE is required)")]
    MissingPath,
    /// The path does not exist.
    #[error("uring bdev: {path}: no such file or device")]
    NotFound { path: PathBuf },
    /// The path is a directory.
    #[error("uring bdev: {path} is a directory, not a file or block device")]
    IsDirectory { path: PathBuf },
    /// The path is something else (socket, FIFO, character device that is not an NVMe
    /// generic device).
    #[error("uring bdev: {path} is a {kind}, not a regular file or block device")]
    NotFileOrBlockDevice { path: PathBuf, kind: &'static str },
    /// Opening with O_DIRECT failed with EINVAL: the file system does not do direct I/O.
    #[error(
        "uring bdev: {path}: the {fs} file system does not support O_DIRECT \
         (open with O_DIRECT returned EINVAL); use direct=0 for buffered I/O"
    )]
    NoDirectIo { path: PathBuf, fs: String },
    /// The file or device holds less than one block.
    #[error("uring bdev: {path} is too small: {size} bytes, less than one {block_size}-byte block")]
    TooSmall {
        path: PathBuf,
        size: u64,
        block_size: u32,
    },
    /// The requested block size is not usable on this file or device.
    #[error("uring bdev: {path}: block size {block_size} is not usable: {reason}")]
    BadBlockSize {
        path: PathBuf,
        block_size: u32,
        reason: String,
    },
    /// A device spec (`path=FILE,direct=0,...`) could not be parsed.
    #[error("uring bdev spec {spec:?}: {reason}")]
    BadSpec { spec: String, reason: String },
    /// An operating-system call on the file or device failed.
    #[error("uring bdev: {path}: {what}: {source}")]
    Os {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The kernel refused to create or set up a ring.
    #[error("uring bdev {name}: io_uring setup failed: {what}: {source}")]
    Ring {
        name: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

impl UringError {
    /// Converts into the block layer's error for a device called `name`.
    pub fn into_bdev_error(self, name: &str) -> BdevError {
        match self {
            UringError::NotFound { .. } => BdevError::NotFound(name.to_string()),
            UringError::Os { source, .. } | UringError::Ring { source, .. } => BdevError::Io {
                name: name.to_string(),
                source,
            },
            other => BdevError::InvalidConfig {
                name: name.to_string(),
                reason: other.to_string(),
            },
        }
    }
}
