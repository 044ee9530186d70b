//! Why a job could not start or stopped early.

use pmio::bdev::SubmitError;
use pmio::{BdevError, DmaError};

/// A job's failure. A worker stops submitting on the first one, drains and reports it.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The job's description cannot run ([`super::JobSpec::validate`]).
    #[error("bdev {bdev}: {reason}")]
    Invalid { bdev: String, reason: String },
    /// The queue did not open.
    #[error(transparent)]
    Open(#[from] BdevError),
    /// No DMA memory for the job's buffers.
    #[error("bdev {bdev}: I/O buffers: {source}")]
    Buffers {
        bdev: String,
        #[source]
        source: DmaError,
    },
    /// The device will not serve the rest of the run: removed, or every I/O failed for 5 s
    /// (an NVMe/TCP controller whose reconnect gave up fails every I/O from then on).
    #[error("bdev {bdev}: {reason}; I/O stopped")]
    Unusable { bdev: String, reason: String },
    /// The queue refused an I/O for a reason other than being busy.
    #[error("submit: {0}")]
    Submit(#[source] SubmitError),
}
