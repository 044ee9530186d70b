//! Snapshots and clones (`spdk_bs_create_snapshot`, `spdk_bs_create_clone`), and the repair
//! of a snapshot a crash interrupted (`bs_load_iter` / `bs_examine_clone`).
//!
//! A snapshot of blob B is made in three commits:
//!
//! 1. create S, thin, B's size, internal xattr `SNAPTMP` = B;
//! 2. S takes B's cluster map and extent pages (and B's parent as its own): S and B now
//!    both map the clusters on disk;
//! 3. B becomes a thin clone of S: empty map, `SNAP` = S. This is the snapshot's commit;
//! 4. S drops `SNAPTMP` and becomes read-only.
//!
//! At load, a blob X with `SNAPTMP` (or SPDK's `SNAPRM`, a snapshot being deleted) naming B
//! is kept if B's parent is X — B's commit happened — and finished (step 4); otherwise X is
//! deleted without freeing its clusters, which are still B's.

use std::collections::BTreeMap;

use super::blob::{Blob, Xattr, id_from_xattr};
use super::{BlobOptions, Blobstore};
use crate::device::BlobDevice;
use crate::format::{
    BLOB_READ_ONLY, BLOB_THIN_PROV, XATTR_SNAPSHOT, XATTR_SNAPSHOT_IN_PROGRESS,
    XATTR_SNAPSHOT_PENDING_REMOVAL,
};
use crate::{BlobId, Error, Result};

/// What load does about a blob an interrupted snapshot left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fixup {
    /// Finish it: drop the in-progress xattr, make it read-only.
    Keep(BlobId),
    /// Delete it; its map was already emptied (the clusters are the clone's).
    Delete(BlobId),
}

/// Decides each interrupted snapshot's fate, and empties the maps of those to delete so
/// that the used maps built next count each cluster once.
pub(crate) fn plan_fixups(blobs: &mut BTreeMap<BlobId, Blob>) -> Vec<Fixup> {
    let pending: Vec<(BlobId, Option<BlobId>)> = blobs
        .values()
        .filter_map(|b| {
            let v = b
                .internal_xattr(XATTR_SNAPSHOT_PENDING_REMOVAL)
                .or(b.internal_xattr(XATTR_SNAPSHOT_IN_PROGRESS))?;
            Some((b.id, id_from_xattr(v)))
        })
        .collect();
    let mut out = Vec::new();
    for (x, clone) in pending {
        let committed = clone
            .and_then(|c| blobs.get(&c))
            .is_some_and(|c| c.parent() == Some(x));
        if committed {
            out.push(Fixup::Keep(x));
        } else {
            let b = blobs.get_mut(&x).expect("listed above");
            b.clusters.iter_mut().for_each(|c| *c = 0);
            b.extent_pages.iter_mut().for_each(|p| *p = 0);
            b.flags.invalid |= BLOB_THIN_PROV;
            out.push(Fixup::Delete(x));
        }
    }
    out
}

impl<D: BlobDevice> Blobstore<D> {
    pub(crate) fn apply_fixups(&mut self, fixups: Vec<Fixup>) -> Result<()> {
        for f in fixups {
            match f {
                Fixup::Keep(x) => self.finish_snapshot(x)?,
                Fixup::Delete(x) => {
                    // Its clones, if any, made it their parent; only a committed snapshot has them.
                    if self.clones(x).is_empty() {
                        self.persist_delete(x)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Step 4.
    fn finish_snapshot(&mut self, s: BlobId) -> Result<()> {
        let b = self.blobs.get_mut(&s).ok_or(Error::NoSuchBlob(s))?;
        Blob::remove_xattr_in(&mut b.internal_xattrs, XATTR_SNAPSHOT_IN_PROGRESS);
        Blob::remove_xattr_in(&mut b.internal_xattrs, XATTR_SNAPSHOT_PENDING_REMOVAL);
        b.flags.data_ro |= BLOB_READ_ONLY;
        self.sync_md(s)
    }

    /// Snapshots `id`: returns the new read-only snapshot, with the user `xattrs` given
    /// (`snapshot_xattrs`), and `id` becomes its thin clone, copying a cluster from it on
    /// first write.
    pub fn create_snapshot(&mut self, id: BlobId, xattrs: &[Xattr]) -> Result<BlobId> {
        let b = self.open_blob(id)?;
        if b.is_md_read_only() {
            return Err(Error::MetadataReadOnly(id));
        }
        let opts = BlobOptions {
            num_clusters: b.num_clusters(),
            thin_provision: true,
            clear_method: b.clear_method(),
            use_extent_table: b.uses_extent_table(),
            xattrs: xattrs.to_vec(),
        };
        let parent = b.parent();
        let invalid = b.flags.invalid;
        // Step 1.
        let s = self.create_blob_with(
            &opts,
            &[(XATTR_SNAPSHOT_IN_PROGRESS.into(), id.to_le_bytes().to_vec())],
        )?;

        // Step 2.
        let (clusters, eps) = {
            let b = self.blobs.get_mut(&id).expect("checked");
            let n = b.clusters.len();
            let neps = b.extent_pages.len();
            (
                std::mem::replace(&mut b.clusters, vec![0; n]),
                std::mem::replace(&mut b.extent_pages, vec![0; neps]),
            )
        };
        let snap = self.blobs.get_mut(&s).expect("just created");
        snap.clusters = clusters;
        snap.extent_pages = eps;
        snap.flags.invalid = invalid;
        if let Some(p) = parent {
            Blob::set_xattr_in(&mut snap.internal_xattrs, XATTR_SNAPSHOT, &p.to_le_bytes());
        }
        self.sync_md(s)?;

        // Step 3.
        let b = self.blobs.get_mut(&id).expect("checked");
        Blob::set_xattr_in(&mut b.internal_xattrs, XATTR_SNAPSHOT, &s.to_le_bytes());
        b.flags.invalid |= BLOB_THIN_PROV;
        self.sync_md(id)?;

        // Step 4.
        self.finish_snapshot(s)?;
        Ok(s)
    }

    /// Clones the read-only blob `snapshot`: a thin blob of its size reading through to it.
    pub fn create_clone(&mut self, snapshot: BlobId, xattrs: &[Xattr]) -> Result<BlobId> {
        let s = self.open_blob(snapshot)?;
        if !s.is_read_only() {
            return Err(Error::NotReadOnly(snapshot));
        }
        let opts = BlobOptions {
            num_clusters: s.num_clusters(),
            thin_provision: true,
            use_extent_table: s.uses_extent_table(),
            xattrs: xattrs.to_vec(),
            ..BlobOptions::default()
        };
        self.create_blob_with(
            &opts,
            &[(XATTR_SNAPSHOT.into(), snapshot.to_le_bytes().to_vec())],
        )
    }
}
