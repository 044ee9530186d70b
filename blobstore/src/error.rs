//! The crate's one error type: a variant per failure a caller can act on, with the page,
//! blob or cluster it concerns.

use crate::BlobId;

/// Everything the blobstore can refuse or fail with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The device failed or refused an I/O.
    #[error("device: {0}")]
    Device(String),
    /// A buffer handed to a decoder is not the size of the structure.
    #[error("{what}: {len} bytes, expected {expected}")]
    BadLength {
        /// Which structure.
        what: &'static str,
        /// Bytes given.
        len: usize,
        /// Bytes the structure occupies.
        expected: usize,
    },
    /// The super block does not start with "SPDKBLOB".
    #[error("super block: bad signature {found:?}, expected \"SPDKBLOB\"")]
    BadSignature {
        /// The eight bytes found.
        found: [u8; 8],
    },
    /// The super block's version is outside what SPDK v25.09 reads (1..=3).
    #[error("super block: version {0} is not supported (1..=3)")]
    UnsupportedVersion(u32),
    /// A page's stored CRC does not match its contents.
    #[error("{what}: CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    CrcMismatch {
        /// Which page.
        what: &'static str,
        /// CRC in the page.
        stored: u32,
        /// CRC of the page's contents.
        computed: u32,
    },
    /// The store's type (`bstype`) is not the one asked for.
    #[error("blobstore type {found:?} does not match the expected {expected:?}")]
    BstypeMismatch {
        /// Type on disk.
        found: [u8; 16],
        /// Type asked for.
        expected: [u8; 16],
    },
    /// A super block field is out of range or inconsistent.
    #[error("super block: {0}")]
    BadSuperBlock(String),
    /// A feature of SPDK's format this implementation does not read.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A descriptor runs past the end of its page's descriptor area.
    #[error("descriptor at offset {offset} (type {kind}, length {length}) runs past the page")]
    DescriptorPastPage {
        /// Offset in the descriptor area.
        offset: usize,
        /// Descriptor type byte.
        kind: u8,
        /// Descriptor body length.
        length: u32,
    },
    /// A descriptor's length is wrong for its type.
    #[error("descriptor type {kind} has invalid length {length}")]
    BadDescriptorLength {
        /// Descriptor type byte.
        kind: u8,
        /// Descriptor body length.
        length: u32,
    },
    /// A mask region's header is wrong.
    #[error("mask: {0}")]
    BadMask(String),
    /// A metadata page failed to decode; the inner error says why.
    #[error("metadata page {page}: {source}")]
    AtPage {
        /// Index of the page in the metadata region.
        page: u32,
        /// What is wrong with it.
        #[source]
        source: Box<Error>,
    },
    /// A blob's metadata is inconsistent.
    #[error("blob {id:#x}: {reason}")]
    CorruptBlob {
        /// The blob.
        id: BlobId,
        /// What is wrong.
        reason: String,
    },
    /// An extent names a cluster beyond the device or inside the metadata region.
    #[error(
        "blob {id:#x}: extent names cluster {cluster}, outside the data clusters {first}..{total}"
    )]
    ExtentPastDevice {
        /// The blob.
        id: BlobId,
        /// The cluster named.
        cluster: u32,
        /// First data cluster.
        first: u32,
        /// Clusters on the device.
        total: u32,
    },
    /// Two blobs' metadata claim the same cluster.
    #[error("cluster {cluster} is owned by blobs {first:#x} and {second:#x}")]
    ClusterOwnedTwice {
        /// The cluster.
        cluster: u32,
        /// One owner.
        first: BlobId,
        /// The other.
        second: BlobId,
    },
    /// A mask written at clean unload disagrees with the metadata.
    #[error("the {mask} mask disagrees with the metadata: {detail}")]
    MaskDisagrees {
        /// Which mask.
        mask: &'static str,
        /// What disagrees.
        detail: String,
    },
    /// No blob has this id.
    #[error("no blob {0:#x}")]
    NoSuchBlob(BlobId),
    /// The blob's data is read-only.
    #[error("blob {0:#x} is read-only")]
    ReadOnly(BlobId),
    /// The blob's metadata is read-only (unknown flags, or a snapshot).
    #[error("blob {0:#x} has read-only metadata")]
    MetadataReadOnly(BlobId),
    /// The blob has more than one clone and cannot be deleted.
    #[error("blob {0:#x} has more than one clone")]
    HasClones(BlobId),
    /// An inflate or decouple_parent of the blob is running (SPDK's
    /// `locked_operation_in_progress`, -EBUSY), or changed under it.
    #[error("blob {0:#x} is busy: an inflate or decouple_parent of it is running")]
    Busy(BlobId),
    /// An unmap does not give this blob's clusters back: it is thick, or reads through a
    /// parent where it holds nothing.
    #[error("blob {0:#x} keeps its clusters on unmap (thick, or a clone)")]
    KeepsClusters(BlobId),
    /// The blob has no parent to decouple from.
    #[error("blob {0:#x} has no parent")]
    NoParent(BlobId),
    /// A clone must be made of a read-only blob.
    #[error("blob {0:#x} is not read-only, so it cannot be cloned")]
    NotReadOnly(BlobId),
    /// An I/O range is outside the blob or not io-unit aligned.
    #[error("blob {id:#x}: range {offset}+{len} is outside the blob or not aligned to {io_unit}")]
    BadRange {
        /// The blob.
        id: BlobId,
        /// Byte offset.
        offset: u64,
        /// Byte length.
        len: u64,
        /// The io unit size.
        io_unit: u32,
    },
    /// No free cluster or metadata page is left.
    #[error("no space: {0}")]
    NoSpace(&'static str),
    /// An xattr does not fit one metadata page, or its name is too long.
    #[error("xattr {name:?} ({len} bytes) does not fit a metadata page")]
    XattrTooLarge {
        /// Name of the xattr.
        name: String,
        /// Name plus value length.
        len: usize,
    },
    /// The store is not an lvstore: no super blob, or its `uuid` / `name` xattrs are missing
    /// or malformed (SPDK's lvstore load fails the same way).
    #[error("not an lvstore: {0}")]
    NotAnLvstore(String),
    /// An lvstore or lvol name SPDK would refuse.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The lvstore already has an lvol of this name.
    #[error("lvol {0:?} already exists")]
    LvolExists(String),
    /// No lvol of this name (or `lvs/lvol` alias, or uuid) in the lvstore.
    #[error("no lvol {0:?}")]
    NoSuchLvol(String),
    /// A configuration value is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
}

impl Error {
    /// Wraps `self` with the metadata page it was found in.
    pub(crate) fn at_page(self, page: u32) -> Error {
        Error::AtPage {
            page,
            source: Box::new(self),
        }
    }

    /// A corrupt-blob error with its reason.
    pub(crate) fn corrupt(id: BlobId, reason: impl Into<String>) -> Error {
        Error::CorruptBlob {
            id,
            reason: reason.into(),
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
