//! Changing a blob's ancestry: inflating it (`spdk_bs_inflate_blob`), decoupling it from its
//! parent (`spdk_bs_blob_decouple_parent`), and deleting a snapshot into its one clone (SPDK's
//! `bs_delete_snapshot`, which merges instead of refusing).
//!
//! Inflate and decouple give the blob storage of its own for the clusters it inherits (all of
//! them, or those its parent itself holds), one allocation at a time exactly as a first write
//! does (`io.rs`: data copied and flushed before the metadata maps it), and then commit the
//! new parent in one metadata sync. A crash in between leaves the blob with some clusters of
//! its own and the old parent: it reads the same either way.
//!
//! Deleting snapshot S into its clone C moves S's clusters to C without copying them:
//!
//! 1. S names C in the internal xattr `SNAPRM` (synced);
//! 2. C takes every cluster of S where it has none, and S's parent as its own; C's extent
//!    pages for those ranges are written afresh on free pages (never rewritten in place: until
//!    the commit, the old ones must still say the clusters are S's alone); C's sync is the
//!    commit;
//! 3. S gives up the moved clusters and is deleted, freeing only what C did not take.
//!
//! At load, `snapshot.rs` finishes or undoes it: a blob with `SNAPRM` whose clone still names
//! it as its parent is kept (step 2 did not commit), otherwise it is deleted with its map
//! emptied (its clusters are the clone's, or free).

use std::collections::BTreeSet;

use super::Blobstore;
use super::blob::Blob;
use crate::device::BlobDevice;
use crate::format::{
    BLOB_THIN_PROV, EXTENTS_PER_EP, XATTR_SNAPSHOT, XATTR_SNAPSHOT_PENDING_REMOVAL,
};
use crate::{BlobId, Error, Result};

/// An inflate or decouple_parent in progress, one cluster at a time
/// ([`Blobstore::detach_plan`]).
#[derive(Clone, Debug)]
pub struct DetachPlan {
    /// The blob.
    pub id: BlobId,
    /// Inflate (every cluster, no parent after) rather than decouple.
    pub all: bool,
    parent: Option<BlobId>,
    grandparent: Option<BlobId>,
    /// The blob clusters to copy in, in order (as of the plan).
    pub clusters: Vec<u64>,
}

impl<D: BlobDevice> Blobstore<D> {
    /// Inflates blob `id`: every cluster it does not hold gets storage of its own with the
    /// data it reads now (zeroes where it reads zeroes), then it drops its parent and is
    /// thick. `allocated(i, c)` is called for each blob cluster `i` given device cluster `c`,
    /// once its metadata is written (an lvol publishes it to its queues). Refused for a
    /// read-only blob.
    pub fn inflate(&mut self, id: BlobId, allocated: impl FnMut(u64, u32)) -> Result<()> {
        self.detach(id, true, allocated)
    }

    /// Decouples blob `id` from its parent: the clusters the parent itself holds are copied
    /// into storage of the blob's own, then the blob's parent is the parent's parent (or
    /// none); it stays thin. `allocated` as for [`Blobstore::inflate`]. Refused for a blob
    /// without a parent, or a read-only one.
    pub fn decouple_parent(&mut self, id: BlobId, allocated: impl FnMut(u64, u32)) -> Result<()> {
        self.detach(id, false, allocated)
    }

    fn detach(&mut self, id: BlobId, all: bool, mut allocated: impl FnMut(u64, u32)) -> Result<()> {
        let Some(plan) = self.detach_plan(id, all)? else {
            return Ok(());
        };
        for &i in &plan.clusters {
            if let Some(c) = self.detach_cluster(&plan, i)? {
                allocated(i, c);
            }
        }
        self.detach_finish(&plan, allocated)
    }

    /// The first step of an inflate (`all`) or a decouple_parent of blob `id` taken one
    /// cluster at a time, so that its owner can run other work between clusters (SPDK copies
    /// cluster by cluster too): the checks, and the clusters to copy in, in order. `None`
    /// when there is nothing to do (a thick blob without a parent). Then
    /// [`Blobstore::detach_cluster`] for each of `clusters`, and
    /// [`Blobstore::detach_finish`]. Meanwhile the caller must not change the blob's
    /// ancestry, size or flags (SPDK's `locked_operation_in_progress`): first writes and
    /// frees of its clusters may go on.
    pub fn detach_plan(&mut self, id: BlobId, all: bool) -> Result<Option<DetachPlan>> {
        let b = self.open_blob(id)?;
        if b.is_read_only() {
            return Err(Error::ReadOnly(id));
        }
        if b.is_md_read_only() {
            return Err(Error::MetadataReadOnly(id));
        }
        let parent = b.parent();
        if !all && parent.is_none() {
            return Err(Error::NoParent(id));
        }
        if parent.is_none() && !b.is_thin_provisioned() {
            return Ok(None); // thick and alone: it holds every cluster already
        }
        let grandparent = match parent {
            Some(p) => self.open_blob(p)?.parent(),
            None => None,
        };
        let mut plan = DetachPlan {
            id,
            all,
            parent,
            grandparent,
            clusters: Vec::new(),
        };
        for i in 0..b.num_clusters() {
            if self.detach_wants(&plan, i)? {
                plan.clusters.push(i);
            }
        }
        Ok(Some(plan))
    }

    /// Whether `plan`'s blob still needs storage of its own for cluster `i`.
    fn detach_wants(&self, plan: &DetachPlan, i: u64) -> Result<bool> {
        let b = self.open_blob(plan.id)?;
        if b.cluster(i).is_some_and(|c| c != 0) {
            return Ok(false);
        }
        Ok(match plan.parent {
            _ if plan.all => true,
            Some(p) => self.open_blob(p)?.cluster(i).is_some_and(|c| c != 0),
            None => false,
        })
    }

    /// Gives `plan`'s blob cluster `i` storage of its own, with the data it reads now, if it
    /// still has none (a first write may have allocated it since the plan); returns the
    /// device cluster it was given. The allocation is a first write's (`io.rs`): the data
    /// is copied and flushed before the metadata maps it.
    pub fn detach_cluster(&mut self, plan: &DetachPlan, i: u64) -> Result<Option<u32>> {
        if !self.detach_wants(plan, i)? {
            return Ok(None);
        }
        self.allocate_on_write(plan.id, i as usize, true).map(Some)
    }

    /// The last step of [`Blobstore::detach_plan`]: any cluster still without storage (one
    /// freed by an unmap meanwhile) gets it, then every allocation is made durable and the
    /// new parent (none for an inflate, which also makes the blob thick; the grandparent for
    /// a decouple) is committed in one metadata sync. Refused if the blob's parent is no
    /// longer the plan's.
    pub fn detach_finish(
        &mut self,
        plan: &DetachPlan,
        mut allocated: impl FnMut(u64, u32),
    ) -> Result<()> {
        let id = plan.id;
        if self.open_blob(id)?.parent() != plan.parent {
            return Err(Error::Busy(id));
        }
        for i in 0..self.open_blob(id)?.num_clusters() {
            if let Some(c) = self.detach_cluster(plan, i)? {
                allocated(i, c);
            }
        }
        // An allocation rewrites its extent page in place without a flush (`io.rs`); the
        // commit below says the blob no longer needs the parent (or is thick), so every one
        // of those pages must be durable before it.
        self.dev.flush()?;
        let b = self.blobs.get_mut(&id).ok_or(Error::NoSuchBlob(id))?;
        let new_parent = if plan.all { None } else { plan.grandparent };
        match new_parent {
            Some(g) => Blob::set_xattr_in(&mut b.internal_xattrs, XATTR_SNAPSHOT, &g.to_le_bytes()),
            None => {
                Blob::remove_xattr_in(&mut b.internal_xattrs, XATTR_SNAPSHOT);
            }
        }
        if plan.all {
            b.flags.invalid &= !BLOB_THIN_PROV;
        }
        self.sync_md(id)
    }

    /// Steps 1 to 3 of the module docs: deletes snapshot `snap` into its only clone `clone`.
    pub(crate) fn delete_into_clone(&mut self, snap: BlobId, clone: BlobId) -> Result<()> {
        // Step 1.
        let s = self.blobs.get_mut(&snap).ok_or(Error::NoSuchBlob(snap))?;
        Blob::set_xattr_in(
            &mut s.internal_xattrs,
            XATTR_SNAPSHOT_PENDING_REMOVAL,
            &clone.to_le_bytes(),
        );
        let grandparent = s.parent();
        self.sync_md(snap)?;

        // Step 2.
        let s_clusters = self.blobs[&snap].clusters.clone();
        let c = self.blobs.get(&clone).ok_or(Error::NoSuchBlob(clone))?;
        let moved: Vec<usize> = (0..c.clusters.len().min(s_clusters.len()))
            .filter(|&i| c.clusters[i] == 0 && s_clusters[i] != 0)
            .collect();
        if c.uses_extent_table() {
            let eps: BTreeSet<usize> = moved.iter().map(|i| i / EXTENTS_PER_EP).collect();
            for ep in eps {
                let fresh = self.claim_md_page(1)?;
                let c = self.blobs.get_mut(&clone).expect("looked up above");
                let old = std::mem::replace(&mut c.extent_pages[ep], fresh);
                if old != 0 {
                    c.release_eps.push(old);
                }
                c.dirty_eps.insert(ep);
            }
        }
        let c = self.blobs.get_mut(&clone).expect("looked up above");
        for &i in &moved {
            c.clusters[i] = s_clusters[i];
        }
        match grandparent {
            Some(g) => Blob::set_xattr_in(&mut c.internal_xattrs, XATTR_SNAPSHOT, &g.to_le_bytes()),
            None => {
                Blob::remove_xattr_in(&mut c.internal_xattrs, XATTR_SNAPSHOT);
            }
        }
        self.sync_md(clone)?;

        // Step 3.
        let s = self.blobs.get_mut(&snap).expect("synced above");
        for &i in &moved {
            s.clusters[i] = 0;
        }
        self.persist_delete(snap)
    }
}
