//! Blob metadata operations: create, resize, xattrs, read-only, delete. Each persists the
//! blob's metadata before it returns (`persist.rs`).

use super::blob::{Blob, Xattr};
use super::serialize::{MAX_BLOB_CLUSTERS, check_xattr};
use super::{BlobOptions, Blobstore};
use crate::device::BlobDevice;
use crate::format::{
    BLOB_EXTENT_TABLE, BLOB_READ_ONLY, BLOB_THIN_PROV, EXTENTS_PER_EP, Flags, page_to_blobid,
};
use crate::{BlobId, Error, Result};

impl<D: BlobDevice> Blobstore<D> {
    /// Creates a blob (`spdk_bs_create_blob_ext`). A thick blob gets its clusters now.
    pub fn create_blob(&mut self, opts: &BlobOptions) -> Result<BlobId> {
        self.create_blob_with(opts, &[])
    }

    /// Creates a blob with internal xattrs too (snapshots and clones use them).
    pub(crate) fn create_blob_with(
        &mut self,
        opts: &BlobOptions,
        internal: &[Xattr],
    ) -> Result<BlobId> {
        for (n, v) in opts.xattrs.iter().chain(internal) {
            check_xattr(n, v)?;
        }
        let page = self
            .used_md_pages
            .find_first_clear(0)
            .ok_or(Error::NoSpace("metadata pages"))?;
        let id = page_to_blobid(page);
        let mut invalid = 0;
        if opts.thin_provision {
            invalid |= BLOB_THIN_PROV;
        }
        if opts.use_extent_table {
            invalid |= BLOB_EXTENT_TABLE;
        }
        let mut blob = Blob::new(
            id,
            Flags {
                invalid,
                data_ro: 0,
                md_ro: opts.clear_method as u64,
            },
        );
        blob.xattrs = opts.xattrs.clone();
        blob.internal_xattrs = internal.to_vec();
        self.used_md_pages.set(page);
        self.used_blobids.set(page);
        self.blobs.insert(id, blob);
        let result = self
            .resize_clusters(id, opts.num_clusters)
            .and_then(|()| self.sync_md(id));
        if let Err(e) = result {
            self.forget_new_blob(id);
            return Err(e);
        }
        Ok(id)
    }

    /// Undoes the in-memory claims of a blob whose creation failed before its commit.
    fn forget_new_blob(&mut self, id: BlobId) {
        if let Some(b) = self.blobs.remove(&id) {
            b.owned_clusters().for_each(|c| self.used_clusters.clear(c));
            b.extent_pages
                .iter()
                .filter(|&&p| p != 0)
                .for_each(|&p| self.used_md_pages.clear(p));
            let page = crate::format::blobid_to_page(id);
            self.used_md_pages.clear(page);
            self.used_blobids.clear(page);
        }
    }

    fn blob_md_writable(&mut self, id: BlobId) -> Result<&mut Blob> {
        let b = self.blobs.get_mut(&id).ok_or(Error::NoSuchBlob(id))?;
        if b.is_md_read_only() {
            return Err(Error::MetadataReadOnly(id));
        }
        Ok(b)
    }

    /// Resizes a blob to `num_clusters` (`spdk_blob_resize` + sync). Growing a thick blob
    /// allocates; shrinking frees the clusters past the end once the new size is committed.
    pub fn resize(&mut self, id: BlobId, num_clusters: u64) -> Result<()> {
        self.blob_md_writable(id)?;
        self.resize_clusters(id, num_clusters)?;
        self.sync_md(id)
    }

    /// The in-memory half of a resize (`blob_resize`).
    fn resize_clusters(&mut self, id: BlobId, n: u64) -> Result<()> {
        if n > MAX_BLOB_CLUSTERS {
            return Err(Error::InvalidOption(format!(
                "{n} clusters is more than {MAX_BLOB_CLUSTERS}"
            )));
        }
        let n = n as usize;
        let b = &self.blobs[&id];
        let old = b.clusters.len();
        let (thin, et) = (b.is_thin_provisioned(), b.uses_extent_table());
        if n > old && !thin && (n - old) as u64 > u64::from(self.free_clusters()) {
            return Err(Error::NoSpace("clusters"));
        }
        let b = self.blobs.get_mut(&id).expect("checked");
        if n < old {
            let freed: Vec<u32> = b.clusters.drain(n..).filter(|&c| c != 0).collect();
            b.release_clusters.extend(freed);
            if et {
                let keep = b.extent_pages_needed();
                let gone: Vec<u32> = b.extent_pages.drain(keep..).filter(|&p| p != 0).collect();
                b.release_eps.extend(gone);
                b.dirty_eps.retain(|&ep| ep < keep);
                if !n.is_multiple_of(EXTENTS_PER_EP) && keep > 0 {
                    b.shrunk_eps.insert(keep - 1);
                }
            }
            return Ok(());
        }
        b.clusters.resize(n, 0);
        if et {
            let need = b.extent_pages_needed();
            b.extent_pages.resize(need, 0);
        }
        if !thin {
            for i in old..n {
                self.allocate_cluster_in_map(id, i)?;
            }
        }
        Ok(())
    }

    /// Claims a free data cluster for blob cluster `i`, and an extent page for it if its
    /// range has none yet (`bs_allocate_cluster`). The extent page is marked for writing.
    pub(crate) fn allocate_cluster_in_map(&mut self, id: BlobId, i: usize) -> Result<u32> {
        let c = self
            .used_clusters
            .find_first_clear(self.geo.md_clusters)
            .ok_or(Error::NoSpace("clusters"))?;
        let b = &self.blobs[&id];
        if b.uses_extent_table() {
            let ep = i / EXTENTS_PER_EP;
            if b.extent_pages[ep] == 0 {
                // An extent page is never page 0 (SPDK starts the search at 1).
                let p = self.claim_md_page(1)?;
                self.blobs.get_mut(&id).expect("checked").extent_pages[ep] = p;
            }
            self.blobs
                .get_mut(&id)
                .expect("checked")
                .dirty_eps
                .insert(ep);
        }
        self.used_clusters.set(c);
        self.blobs.get_mut(&id).expect("checked").clusters[i] = c;
        Ok(c)
    }

    /// Sets a user xattr (`spdk_blob_set_xattr` + sync).
    pub fn set_xattr(&mut self, id: BlobId, name: &str, value: &[u8]) -> Result<()> {
        check_xattr(name, value)?;
        let b = self.blob_md_writable(id)?;
        Blob::set_xattr_in(&mut b.xattrs, name, value);
        self.sync_md(id)
    }

    /// Removes a user xattr; false if it was not there (`spdk_blob_remove_xattr` + sync).
    pub fn remove_xattr(&mut self, id: BlobId, name: &str) -> Result<bool> {
        let b = self.blob_md_writable(id)?;
        if !Blob::remove_xattr_in(&mut b.xattrs, name) {
            return Ok(false);
        }
        self.sync_md(id)?;
        Ok(true)
    }

    /// Makes the blob read-only for good (`spdk_blob_set_read_only` + sync).
    pub fn set_read_only(&mut self, id: BlobId) -> Result<()> {
        let b = self.blobs.get_mut(&id).ok_or(Error::NoSuchBlob(id))?;
        if b.flags.data_ro & BLOB_READ_ONLY != 0 {
            return Ok(());
        }
        b.flags.data_ro |= BLOB_READ_ONLY;
        self.sync_md(id)
    }

    /// Names `id` the store's super blob (`spdk_bs_set_super`): the application's root, found
    /// again at load in [`SuperBlock::super_blob`](crate::format::SuperBlock). Written to the
    /// super block at once, with the clean flag as it is on disk.
    pub fn set_super_blob(&mut self, id: BlobId) -> Result<()> {
        if !self.blobs.contains_key(&id) {
            return Err(Error::NoSuchBlob(id));
        }
        self.sb.super_blob = id;
        self.dev.write(0, &self.sb.encode())?;
        self.dev.flush()
    }

    /// Deletes a blob and frees its clusters (`spdk_bs_delete_blob`). A snapshot with one
    /// clone is merged into it (the clone takes its clusters and its parent: `lineage.rs`);
    /// one with more clones is refused.
    pub fn delete_blob(&mut self, id: BlobId) -> Result<()> {
        if !self.blobs.contains_key(&id) {
            return Err(Error::NoSuchBlob(id));
        }
        match self.clones(id)[..] {
            [] => self.persist_delete(id),
            [clone] => self.delete_into_clone(id, clone),
            _ => Err(Error::HasClones(id)),
        }
    }
}
