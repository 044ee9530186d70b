//! Writing metadata so that a power cut at any point leaves the old state or the new one.
//!
//! The device writes a 4 KiB page atomically, and only flushed writes are sure to survive.
//! A blob's metadata is a chain whose first page sits where the blob id says; that page is
//! the commit point (`blob_persist`):
//!
//! 1. the store is marked dirty on disk first, flushed (`bs_mark_dirty`), so a crash from
//!    here on makes the next load rebuild the masks from the metadata;
//! 2. new and grown extent pages, and every chain page after the first, go to pages no
//!    committed metadata references, and are flushed;
//! 3. the first page is written in place and flushed: the commit;
//! 4. only then is what the old metadata referenced and the new does not — old chain pages,
//!    extent pages and clusters past a shrink — cleared and returned to the free maps, so
//!    nothing is reused while a durable page may still point at it.
//!
//! SPDK orders the same steps by completion alone; the flushes make the order hold on a
//! device with a volatile write cache. A blob's first write to a cluster rewrites its extent
//! page in place (one atomic page) without a flush: the cluster's data, copied from the
//! parent beforehand, was flushed before it.

use super::Blobstore;
use super::blob::{Blob, ClearMethod};
use super::serialize::{extent_page, serialize};
use crate::device::BlobDevice;
use crate::format::{INVALID_MD_PAGE, PAGE_SIZE, blobid_to_page};
use crate::{BlobId, Error, Result};

impl<D: BlobDevice> Blobstore<D> {
    /// Step 1: clears the super block's clean flag on disk before the first metadata change.
    pub(crate) fn mark_dirty(&mut self) -> Result<()> {
        if self.sb.clean == 0 {
            return Ok(());
        }
        self.sb.clean = 0;
        self.dev.write(0, &self.sb.encode())?;
        self.dev.flush()
    }

    pub(crate) fn write_md_page(&mut self, page: u32, bytes: &[u8; PAGE_SIZE]) -> Result<()> {
        let off = self.geo.md_page_offset(page);
        self.dev.write(off, bytes)
    }

    pub(crate) fn zero_md_page(&mut self, page: u32) -> Result<()> {
        let off = self.geo.md_page_offset(page);
        self.dev.write_zeroes(off, PAGE_SIZE as u64)
    }

    /// Claims the lowest free metadata page at or after `from`.
    pub(crate) fn claim_md_page(&mut self, from: u32) -> Result<u32> {
        let p = self
            .used_md_pages
            .find_first_clear(from)
            .ok_or(Error::NoSpace("metadata pages"))?;
        self.used_md_pages.set(p);
        Ok(p)
    }

    /// Writes a blob's metadata: steps 1 to 4 above.
    pub(crate) fn sync_md(&mut self, id: BlobId) -> Result<()> {
        let blob = self.blobs.get(&id).ok_or(Error::NoSuchBlob(id))?;
        let mut pages = serialize(blob)?;
        self.mark_dirty()?;

        // Place the chain: the first page where the id says, the rest on free pages.
        let mut placed = vec![blobid_to_page(id)];
        for _ in 1..pages.len() {
            match self.claim_md_page(0) {
                Ok(p) => placed.push(p),
                Err(e) => {
                    placed[1..]
                        .iter()
                        .for_each(|&p| self.used_md_pages.clear(p));
                    return Err(e);
                }
            }
        }
        for (i, page) in pages.iter_mut().enumerate() {
            page.next = placed.get(i + 1).copied().unwrap_or(INVALID_MD_PAGE);
        }

        // Step 2.
        let blob = &self.blobs[&id];
        let eps: Vec<(u32, [u8; PAGE_SIZE])> = blob
            .dirty_eps
            .iter()
            .filter_map(|&ep| {
                blob.extent_pages
                    .get(ep)
                    .filter(|&&p| p != 0)
                    .map(|&p| (p, extent_page(blob, ep).encode()))
            })
            .collect();
        let staged = !eps.is_empty() || pages.len() > 1;
        for (p, bytes) in &eps {
            self.write_md_page(*p, bytes)?;
        }
        for (p, page) in placed.iter().zip(&pages).skip(1) {
            self.write_md_page(*p, &page.encode())?;
        }
        if staged {
            self.dev.flush()?;
        }

        // Step 3: the commit.
        self.write_md_page(placed[0], &pages[0].encode())?;
        self.dev.flush()?;

        // Step 4.
        let blob = self.blobs.get_mut(&id).expect("looked up above");
        let old_chain = std::mem::replace(&mut blob.md_pages, placed);
        blob.dirty_eps.clear();
        let shrunk: Vec<usize> = std::mem::take(&mut blob.shrunk_eps).into_iter().collect();
        let clusters = std::mem::take(&mut blob.release_clusters);
        let released_eps = std::mem::take(&mut blob.release_eps);
        let clear = blob.clear_method();
        for ep in shrunk {
            let blob = &self.blobs[&id];
            if let Some(&p) = blob.extent_pages.get(ep).filter(|&&p| p != 0) {
                let bytes = extent_page(blob, ep).encode();
                self.write_md_page(p, &bytes)?;
            }
        }
        for p in old_chain.into_iter().skip(1) {
            self.release_md_page(p)?;
        }
        for p in released_eps {
            self.release_md_page(p)?;
        }
        for c in clusters {
            self.release_cluster(c, clear)?;
        }
        Ok(())
    }

    /// Zeroes a metadata page no durable metadata references and frees it (`bs_release_md_page`).
    pub(crate) fn release_md_page(&mut self, p: u32) -> Result<()> {
        self.zero_md_page(p)?;
        self.used_md_pages.clear(p);
        Ok(())
    }

    /// Clears a cluster by the blob's clear method and frees it (`bs_release_cluster`).
    pub(crate) fn release_cluster(&mut self, c: u32, clear: ClearMethod) -> Result<()> {
        let off = self.geo.cluster_offset(c);
        let len = u64::from(self.geo.cluster_size);
        match clear {
            ClearMethod::Default | ClearMethod::Unmap => self.dev.unmap(off, len)?,
            ClearMethod::WriteZeroes => self.dev.write_zeroes(off, len)?,
            ClearMethod::None => {}
        }
        self.used_clusters.clear(c);
        Ok(())
    }

    /// Deletes a blob's metadata: its first page is zeroed and flushed (the commit), then
    /// its other pages and its clusters are freed.
    pub(crate) fn persist_delete(&mut self, id: BlobId) -> Result<()> {
        self.mark_dirty()?;
        let root = blobid_to_page(id);
        self.zero_md_page(root)?;
        self.dev.flush()?;
        let blob: Blob = self.blobs.remove(&id).ok_or(Error::NoSuchBlob(id))?;
        let clear = blob.clear_method();
        for p in blob
            .owned_md_pages()
            .filter(|&p| p != root)
            .collect::<Vec<_>>()
        {
            self.release_md_page(p)?;
        }
        for c in blob
            .owned_clusters()
            .chain(blob.release_clusters.iter().copied())
        {
            self.release_cluster(c, clear)?;
        }
        for &p in &blob.release_eps {
            self.release_md_page(p)?;
        }
        self.used_md_pages.clear(root);
        self.used_blobids.clear(root);
        Ok(())
    }
}
