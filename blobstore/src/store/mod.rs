//! The blobstore: a device carved into clusters owned by blobs, with SPDK's metadata.
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the store, its options and what it tells about itself |
//! | `geometry.rs` | the layout at init, and the checks on a loaded super block |
//! | `bitarray.rs` | the in-memory masks |
//! | `blob.rs` | one blob's state |
//! | `serialize.rs` | a blob to and from its metadata pages |
//! | `persist.rs` | writing metadata crash-consistently (the ordering lives here) |
//! | `lifecycle.rs` | init and clean unload |
//! | `maps.rs` | the used maps the metadata implies, compared with those held |
//! | `load.rs` | load, and the recovery of a store that was not unloaded cleanly |
//! | `ops.rs` | create, resize, xattrs, read-only, delete |
//! | `io.rs` | reading and writing a blob's data; allocation and copy-on-write |
//! | `snapshot.rs` | snapshots, clones, and repairing a snapshot a crash interrupted |
//! | `lineage.rs` | inflate, decouple from the parent, delete a snapshot into its clone |
//!
//! Every call that changes metadata has persisted it when it returns; a call that only
//! writes data has handed the data to the device, durable after [`Blobstore::flush`].

mod bitarray;
mod blob;
mod geometry;
mod io;
mod lifecycle;
mod lineage;
mod load;
mod maps;
mod ops;
mod persist;
mod serialize;
mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use blob::{Blob, ClearMethod, Xattr};
pub use lineage::DetachPlan;

use crate::device::BlobDevice;
use crate::format::{BSTYPE_LEN, SuperBlock};
use crate::{BlobId, Error, Result};
use bitarray::BitArray;
use geometry::Geometry;
use maps::Maps;

/// How `Blobstore::init` lays out a store (`struct spdk_bs_opts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobstoreOptions {
    /// Cluster size in bytes, a multiple of 4 KiB. Default 1 MiB (`SPDK_BLOB_OPTS_CLUSTER_SZ`).
    pub cluster_size: u32,
    /// Metadata pages; `None` is SPDK's default of one per cluster.
    pub num_md_pages: Option<u32>,
    /// The store's type, zero-padded ("LVOLSTORE" for an lvstore). Default all zero.
    pub bstype: [u8; BSTYPE_LEN],
    /// How the data clusters are cleared at init: unmap (default), write zeroes or none.
    pub clear_method: ClearMethod,
}

impl Default for BlobstoreOptions {
    fn default() -> Self {
        BlobstoreOptions {
            cluster_size: 1 << 20,
            num_md_pages: None,
            bstype: [0; BSTYPE_LEN],
            clear_method: ClearMethod::Unmap,
        }
    }
}

/// How `Blobstore::load` opens a store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The type expected; all zero loads any type (SPDK's wildcard).
    pub bstype: [u8; BSTYPE_LEN],
    /// Rebuild the masks from the metadata even after a clean unload (`force_recover`).
    pub force_recover: bool,
}

/// How a blob is created (`struct spdk_blob_opts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// Size in clusters.
    pub num_clusters: u64,
    /// Allocate clusters on first write instead of now.
    pub thin_provision: bool,
    /// How the clusters are cleared when freed.
    pub clear_method: ClearMethod,
    /// Map clusters with an extent table and extent pages (SPDK's default) rather than
    /// extent RLE in the chain.
    pub use_extent_table: bool,
    /// User xattrs to create the blob with.
    pub xattrs: Vec<Xattr>,
}

impl Default for BlobOptions {
    fn default() -> Self {
        BlobOptions {
            num_clusters: 0,
            thin_provision: false,
            clear_method: ClearMethod::Default,
            use_extent_table: true,
            xattrs: Vec::new(),
        }
    }
}

/// A blobstore on a device `D`. One owner drives it; every call runs to completion.
#[derive(Debug)]
pub struct Blobstore<D: BlobDevice> {
    dev: D,
    geo: Geometry,
    /// The super block as last written; `clean` is what the disk says.
    sb: SuperBlock,
    used_md_pages: BitArray,
    used_blobids: BitArray,
    used_clusters: BitArray,
    blobs: BTreeMap<BlobId, Blob>,
}

impl<D: BlobDevice> Blobstore<D> {
    /// A blob's state (`spdk_bs_open_blob`: every blob is read at load).
    pub fn open_blob(&self, id: BlobId) -> Result<&Blob> {
        self.blobs.get(&id).ok_or(Error::NoSuchBlob(id))
    }

    /// The ids of all blobs, in order.
    pub fn blob_ids(&self) -> Vec<BlobId> {
        self.blobs.keys().copied().collect()
    }

    /// The blobs that are clones of `id`.
    pub fn clones(&self, id: BlobId) -> Vec<BlobId> {
        self.blobs
            .values()
            .filter(|b| b.parent() == Some(id))
            .map(|b| b.id)
            .collect()
    }

    /// Cluster size in bytes.
    pub fn cluster_size(&self) -> u32 {
        self.geo.cluster_size
    }

    /// I/O unit size in bytes: reads and writes are multiples of it.
    pub fn io_unit_size(&self) -> u32 {
        self.geo.io_unit
    }

    /// Clusters blobs can have.
    pub fn total_data_clusters(&self) -> u32 {
        self.geo.total_clusters - self.geo.md_clusters
    }

    /// Clusters not owned by any blob.
    pub fn free_clusters(&self) -> u32 {
        self.geo.total_clusters - self.used_clusters.count_set()
    }

    /// The super block as last written.
    pub fn super_block(&self) -> &SuperBlock {
        &self.sb
    }

    /// Makes every write so far durable.
    pub fn flush(&mut self) -> Result<()> {
        self.dev.flush()
    }

    /// The device, for inspection.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// Drops the store without unloading it, as a crash would, and returns the device.
    pub fn into_device(self) -> D {
        self.dev
    }

    /// Checks the store's invariants against its own maps: no cluster or metadata page is
    /// owned twice, and the used maps hold exactly what the blobs own (plus the metadata
    /// clusters). The crash tests run it after every load.
    pub fn verify(&self) -> Result<()> {
        let held = Maps {
            pages: self.used_md_pages.clone(),
            blobids: self.used_blobids.clone(),
            clusters: self.used_clusters.clone(),
        };
        Maps::owned(&self.geo, &self.blobs)?.equal_to(&held)
    }
}
