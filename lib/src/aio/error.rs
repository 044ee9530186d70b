//! The error of an async I/O: refused at submission, or failed by the device.

use std::sync::Arc;

use crate::bdev::SubmitError;
use crate::request::{IoStatus, Op};

/// Why an async I/O did not succeed: [`AioError::kind`] tells which way.
///
/// One pointer wide (the details are boxed): an I/O future's output moves the result through
/// each poll and the caller's match, and the error path is the rare one, so the success path
/// moves a null pointer rather than a 48-byte enum (about 20 instructions an I/O).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct AioError(Box<AioErrorKind>);

/// What went wrong, with its context (see [`AioError::kind`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AioErrorKind {
    /// The block layer refused the I/O (unsupported op, out of range, wrong buffer size);
    /// never [`SubmitError::Busy`]: a full queue makes the future wait instead.
    #[error(transparent)]
    Rejected(SubmitError),
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
    /// What went wrong.
    pub fn kind(&self) -> &AioErrorKind {
        &self.0
    }

    /// What went wrong, by value.
    pub fn into_kind(self) -> AioErrorKind {
        *self.0
    }

    /// Negative errno in SPDK's convention (`-EIO`, `-EINVAL`, ...).
    pub fn errno(&self) -> i32 {
        match self.kind() {
            AioErrorKind::Rejected(SubmitError::Busy) => -libc::EAGAIN,
            AioErrorKind::Rejected(SubmitError::Unsupported { .. }) => -libc::ENOTSUP,
            AioErrorKind::Rejected(_) => -libc::EINVAL,
            AioErrorKind::Failed { status, .. } => status.to_errno(),
        }
    }

    /// The device's status of a failed I/O (`None` when it was refused before reaching it).
    pub fn status(&self) -> Option<IoStatus> {
        match self.kind() {
            AioErrorKind::Rejected(_) => None,
            AioErrorKind::Failed { status, .. } => Some(*status),
        }
    }
}

impl From<AioErrorKind> for AioError {
    #[cold]
    fn from(kind: AioErrorKind) -> AioError {
        AioError(Box::new(kind))
    }
}

impl From<SubmitError> for AioError {
    #[cold]
    fn from(e: SubmitError) -> AioError {
        AioErrorKind::Rejected(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_follows_the_status_or_the_refusal() {
        let failed = AioError::from(AioErrorKind::Failed {
            bdev: Arc::from("Malloc0"),
            op: Op::Read,
            lba: 8,
            nblocks: 1,
            status: IoStatus::Errno(libc::EIO),
        });
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
        assert!(matches!(
            refused.into_kind(),
            AioErrorKind::Rejected(SubmitError::Empty { .. })
        ));
    }

    #[test]
    fn an_error_is_one_pointer_and_success_is_null() {
        assert_eq!(size_of::<AioError>(), size_of::<usize>());
        assert_eq!(size_of::<Result<(), AioError>>(), size_of::<usize>());
    }
}
