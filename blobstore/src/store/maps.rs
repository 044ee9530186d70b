//! The used maps the blobs' metadata implies, and their comparison with the maps a store
//! holds: built at load (recovery takes them as they are; a clean load checks the masks
//! against them) and by `Blobstore::verify`.

use std::collections::BTreeMap;

use super::bitarray::BitArray;
use super::blob::Blob;
use super::geometry::Geometry;
use crate::format::blobid_to_page;
use crate::{BlobId, Error, Result};

/// Used metadata pages, blob ids and clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Maps {
    pub(crate) pages: BitArray,
    pub(crate) blobids: BitArray,
    pub(crate) clusters: BitArray,
}

impl Maps {
    /// What `blobs` own, plus the metadata clusters; two owners of a cluster is an error.
    pub(crate) fn owned(geo: &Geometry, blobs: &BTreeMap<BlobId, Blob>) -> Result<Maps> {
        let mut m = Maps {
            pages: BitArray::new(geo.md_len),
            blobids: BitArray::new(geo.md_len),
            clusters: BitArray::new(geo.total_clusters),
        };
        (0..geo.md_clusters).for_each(|c| m.clusters.set(c));
        let mut owner: BTreeMap<u32, BlobId> = BTreeMap::new();
        for b in blobs.values() {
            m.blobids.set(blobid_to_page(b.id));
            b.owned_md_pages().for_each(|p| m.pages.set(p));
            for c in b.owned_clusters() {
                if let Some(first) = owner.insert(c, b.id) {
                    return Err(Error::ClusterOwnedTwice {
                        cluster: c,
                        first,
                        second: b.id,
                    });
                }
                m.clusters.set(c);
            }
        }
        Ok(m)
    }

    /// Fails if something in use in `self` is marked free in `held`.
    pub(crate) fn covered_by(&self, held: &Maps) -> Result<()> {
        for (mask, own, have) in self.named(held) {
            let missing = own.set_but_not_in(have);
            if !missing.is_empty() {
                return Err(Error::MaskDisagrees {
                    mask,
                    detail: format!("in use but marked free: {missing:?}"),
                });
            }
        }
        Ok(())
    }

    /// Fails unless `held` is exactly `self`.
    pub(crate) fn equal_to(&self, held: &Maps) -> Result<()> {
        self.covered_by(held)?;
        held.covered_by(self).map_err(|e| match e {
            Error::MaskDisagrees { mask, detail } => Error::MaskDisagrees {
                mask,
                detail: detail.replace("in use but marked free", "marked used but unowned"),
            },
            e => e,
        })
    }

    fn named<'a>(&'a self, other: &'a Maps) -> [(&'static str, &'a BitArray, &'a BitArray); 3] {
        [
            ("used-page", &self.pages, &other.pages),
            ("used-blob-id", &self.blobids, &other.blobids),
            ("used-cluster", &self.clusters, &other.clusters),
        ]
    }
}
