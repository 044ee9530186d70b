//! The error of an async I/O: refused at submission, or failed by the device.

use std::sync::Arc;

use crate::bdev::SubmitError;
use crate::request::{IoStatus, Op};

/// Why an async I/O did not succeed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AioError {
    /// The block layer refused the I/O (unsupported op, out of range, wrong buffer size);
    /// never [`SubmitError::Busy`]: a full queue makes the future wait instead.
    #[error(transparent)]
    Rejected(#[from] SubmitError),
    /// The device completed the I/O with an error.
    #[error("bdev {bdev}: {} of blocks {lba}+{nblocks} failed: {status:?} (errno {})", op.name(), -status.to_errno())]
    Failed {
        /// The device's name.
        bdev: Arc<str>,
        op: Op,
        lba: u64,
        nblocks: u32,
        /// The device's status ([`IoStatus::to_errno`] gives the errno).
        status: IoStatus,
    },
}

impl AioError {
    /// Negative errno in SPDK's convention (`-EIO`, `-EINVAL`, ...).
    pub fn errno(&self) -> i32 {
        match self {
            AioError::Rejected(SubmitError::Busy) => -libc::EAGAIN,
            AioError::Rejected(SubmitError::Unsupported { .. }) => -libc::ENOTSUP,
            AioError::Rejected(_) => -libc::EINVAL,
            AioError::Failed { status, .. } => status.to_errno(),
        }
    }

    /// The device's status of a failed I/O (`None` when it was refused before reaching it).
    pub fn status(&self) -> Option<IoStatus> {
        match self {
            AioError::Rejected(_) => None,
            AioError::Failed { status, .. } => Some(*status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_follows_the_status_or_the_refusal() {
        let failed = AioError::Failed {
            bdev: Arc::from("Malloc0"),
            op: Op::Read,
            lba: 8,
            nblocks: 1,
            status: IoStatus::Errno(libc::EIO),
        };
        assert_eq!(failed.errno(), -libc::EIO);
        assert_eq!(failed.status(), Some(IoStatus::Errno(libc::EIO)));
        assert_eq!(
            failed.to_string(),
            "bdev Malloc0: read of blocks 8+1 failed: Errno(5) (errno 5)"
        );
        let refused = AioError::from(SubmitError::Empty {
            name: "Malloc0".into(),
            op: "read",
        });
        assert_eq!(refused.errno(), -libc::EINVAL);
        assert_eq!(refused.status(), None);
    }
}
