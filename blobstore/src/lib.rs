//! pmio-blobstore: a blobstore in SPDK v25.09's on-disk format.
//!
//! | module | job |
//! |---|---|
//! | [`format`] | the on-disk structures and their codecs, pure |
//! | [`error`] | the one error type |

pub mod error;
pub mod format;

pub use error::{Error, Result};

/// A blob's id: `(1 << 32) | index of its first metadata page`.
pub type BlobId = u64;
