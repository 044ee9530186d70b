//! A blob in memory: its flags, xattrs, cluster map, extent pages and the metadata pages
//! its last committed chain occupies. Pure state; the store persists it.

use std::collections::BTreeSet;

use crate::BlobId;
use crate::format::{
    BLOB_CLEAR_METHOD, BLOB_DATA_RO_FLAGS_MASK, BLOB_EXTENT_TABLE, BLOB_INTERNAL_XATTR,
    BLOB_MD_RO_FLAGS_MASK, BLOB_READ_ONLY, BLOB_THIN_PROV, EXTENTS_PER_EP, Flags, XATTR_SNAPSHOT,
};

/// How a blob's clusters are cleared when they are freed (`enum blob_clear_method`; the
/// value is what SPDK stores in `md_ro_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClearMethod {
    /// The store's choice: unmap.
    #[default]
    Default = 0,
    /// Leave the data.
    None = 1,
    /// Unmap (deallocate) the clusters.
    Unmap = 2,
    /// Write zeroes over the clusters.
    WriteZeroes = 3,
}

impl ClearMethod {
    pub(crate) fn from_md_ro_flags(md_ro: u64) -> ClearMethod {
        match md_ro & BLOB_CLEAR_METHOD {
            1 => ClearMethod::None,
            2 => ClearMethod::Unmap,
            3 => ClearMethod::WriteZeroes,
            _ => ClearMethod::Default,
        }
    }
}

/// A name and its value.
pub type Xattr = (String, Vec<u8>);

/// One blob's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub(crate) id: BlobId,
    pub(crate) flags: Flags,
    pub(crate) xattrs: Vec<Xattr>,
    pub(crate) internal_xattrs: Vec<Xattr>,
    /// Device cluster of each blob cluster; 0 is unallocated (cluster 0 is metadata).
    pub(crate) clusters: Vec<u32>,
    /// Metadata page of each extent page (512 clusters each), 0 for none; empty for RLE blobs.
    pub(crate) extent_pages: Vec<u32>,
    /// Metadata pages of the committed chain, first page first; empty until first persisted.
    pub(crate) md_pages: Vec<u32>,
    /// Extent pages (indices into `extent_pages`) to write before the next commit.
    pub(crate) dirty_eps: BTreeSet<usize>,
    /// Extent pages to rewrite after the next commit (shrunk: entries beyond the new end).
    pub(crate) shrunk_eps: BTreeSet<usize>,
    /// Clusters and extent pages the next commit stops referencing, freed after it.
    pub(crate) release_clusters: Vec<u32>,
    pub(crate) release_eps: Vec<u32>,
}

impl Blob {
    pub(crate) fn new(id: BlobId, flags: Flags) -> Blob {
        Blob {
            id,
            flags,
            xattrs: Vec::new(),
            internal_xattrs: Vec::new(),
            clusters: Vec::new(),
            extent_pages: Vec::new(),
            md_pages: Vec::new(),
            dirty_eps: BTreeSet::new(),
            shrunk_eps: BTreeSet::new(),
            release_clusters: Vec::new(),
            release_eps: Vec::new(),
        }
    }

    /// The blob's id.
    pub fn id(&self) -> BlobId {
        self.id
    }

    /// Size in clusters.
    pub fn num_clusters(&self) -> u64 {
        self.clusters.len() as u64
    }

    /// Clusters with storage of their own.
    pub fn num_allocated_clusters(&self) -> u64 {
        self.clusters.iter().filter(|&&c| c != 0).count() as u64
    }

    /// The device cluster behind blob cluster `i`, if allocated.
    pub fn cluster(&self, i: u64) -> Option<u32> {
        self.clusters.get(i as usize).copied().filter(|&c| c != 0)
    }

    /// Clusters are allocated on first write.
    pub fn is_thin_provisioned(&self) -> bool {
        self.flags.invalid & BLOB_THIN_PROV != 0
    }

    /// Clusters are mapped by an extent table (SPDK's default) rather than extent RLE.
    pub fn uses_extent_table(&self) -> bool {
        self.flags.invalid & BLOB_EXTENT_TABLE != 0
    }

    /// The data cannot be written: the read-only flag, or a `data_ro_flags` bit this
    /// version does not know.
    pub fn is_read_only(&self) -> bool {
        self.flags.data_ro & BLOB_READ_ONLY != 0
            || self.flags.data_ro & !BLOB_DATA_RO_FLAGS_MASK != 0
    }

    /// The metadata cannot be changed (read-only data, or an unknown `md_ro_flags` bit).
    pub fn is_md_read_only(&self) -> bool {
        self.is_read_only() || self.flags.md_ro & !BLOB_MD_RO_FLAGS_MASK != 0
    }

    /// How freed clusters are cleared.
    pub fn clear_method(&self) -> ClearMethod {
        ClearMethod::from_md_ro_flags(self.flags.md_ro)
    }

    /// A user xattr's value.
    pub fn xattr(&self, name: &str) -> Option<&[u8]> {
        find(&self.xattrs, name)
    }

    /// The user xattrs' names.
    pub fn xattr_names(&self) -> impl Iterator<Item = &str> {
        self.xattrs.iter().map(|(n, _)| n.as_str())
    }

    /// An internal xattr's value.
    pub fn internal_xattr(&self, name: &str) -> Option<&[u8]> {
        find(&self.internal_xattrs, name)
    }

    /// The snapshot this blob is a clone of.
    pub fn parent(&self) -> Option<BlobId> {
        self.internal_xattr(XATTR_SNAPSHOT).and_then(id_from_xattr)
    }

    /// The flags as they go to disk: `SPDK_BLOB_INTERNAL_XATTR` set exactly when there are
    /// internal xattrs, as `blob_set_xattr` / `blob_remove_xattr` keep it.
    pub(crate) fn disk_flags(&self) -> Flags {
        let mut f = self.flags;
        if self.internal_xattrs.is_empty() {
            f.invalid &= !BLOB_INTERNAL_XATTR;
        } else {
            f.invalid |= BLOB_INTERNAL_XATTR;
        }
        f
    }

    pub(crate) fn set_xattr_in(list: &mut Vec<Xattr>, name: &str, value: &[u8]) {
        match list.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => *v = value.to_vec(),
            None => list.push((name.to_string(), value.to_vec())),
        }
    }

    pub(crate) fn remove_xattr_in(list: &mut Vec<Xattr>, name: &str) -> bool {
        let before = list.len();
        list.retain(|(n, _)| n != name);
        list.len() != before
    }

    /// Extent pages needed for the current size.
    pub(crate) fn extent_pages_needed(&self) -> usize {
        self.clusters.len().div_ceil(EXTENTS_PER_EP)
    }

    /// Device clusters this blob owns.
    pub(crate) fn owned_clusters(&self) -> impl Iterator<Item = u32> + '_ {
        self.clusters.iter().copied().filter(|&c| c != 0)
    }

    /// Metadata pages this blob's committed metadata occupies: chain and extent pages.
    pub(crate) fn owned_md_pages(&self) -> impl Iterator<Item = u32> + '_ {
        // A chain may start at page 0; an extent page never is page 0 (`bs_allocate_cluster`).
        let eps = self.extent_pages.iter().copied().filter(|&p| p != 0);
        self.md_pages.iter().copied().chain(eps)
    }
}

fn find<'a>(list: &'a [Xattr], name: &str) -> Option<&'a [u8]> {
    list.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

/// A blob id stored as an 8-byte little-endian xattr value.
pub(crate) fn id_from_xattr(v: &[u8]) -> Option<BlobId> {
    v.try_into().ok().map(u64::from_le_bytes)
}
