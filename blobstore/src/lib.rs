//! pmio-blobstore: a blobstore in SPDK v25.09's on-disk format.
//!
//! A blobstore carves a device into clusters and hands them to blobs: thin or thick,
//! resizable, with xattrs, read-only, snapshots and clones. Its metadata is SPDK's, byte
//! for byte, so a store SPDK wrote opens here and the other way round.
//!
//! | module | job |
//! |---|---|
//! | [`format`](mod@format) | the on-disk structures and their codecs, pure |
//! | [`device`] | the small synchronous device the store runs on, and an in-memory one |
//! | [`store`] | the blobstore: init, load and recovery, blobs, I/O, snapshots, unload |
//! | [`lvol`] | lvstores and lvols on a blobstore, as SPDK's lib/lvol keeps them |
//! | [`error`] | the one error type |
//!
//! ```
//! use pmio_blobstore::{Blobstore, BlobstoreOptions, BlobOptions, MemDevice};
//!
//! let dev = MemDevice::new(4 << 20, 512);
//! let opts = BlobstoreOptions { cluster_size: 64 << 10, ..Default::default() };
//! let mut bs = Blobstore::init(dev, &opts).unwrap();
//! let id = bs.create_blob(&BlobOptions { num_clusters: 2, thin_provision: true, ..Default::default() }).unwrap();
//! bs.write(id, 4096, &[7u8; 4096]).unwrap();
//! let dev = bs.unload().unwrap();
//!
//! let mut bs = Blobstore::load(dev, &Default::default()).unwrap();
//! let mut buf = [0u8; 4096];
//! bs.read(id, 4096, &mut buf).unwrap();
//! assert_eq!(buf, [7u8; 4096]);
//! ```

pub mod device;
pub mod error;
pub mod format;
pub mod lvol;
pub mod store;

pub use device::{BlobDevice, MemDevice};
pub use error::{Error, Result};
pub use store::{BlobOptions, Blobstore, BlobstoreOptions, ClearMethod, DetachPlan, LoadOptions};

/// A blob's id: `(1 << 32) | index of its first metadata page`.
pub type BlobId = u64;
