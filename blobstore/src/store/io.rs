//! A blob's data: reads through the parent chain where a thin blob has no cluster, and
//! the first write to such a cluster allocates it (`bs_allocate_and_copy_cluster`):
//!
//! 1. claim a free cluster (and an extent page if its range has none);
//! 2. a clone copies the parent's whole cluster into it, flushed, so the metadata never
//!    points at a cluster whose inherited data could still be lost;
//! 3. the metadata maps it: the extent page rewritten in place, or for a new extent page
//!    (and for RLE blobs) a metadata sync (`persist.rs`);
//! 4. the write goes to the new cluster.

use super::Blobstore;
use crate::device::BlobDevice;
use crate::format::EXTENTS_PER_EP;
use crate::format::PAGE_SIZE;
use crate::{BlobId, Error, Result};

/// One piece of an I/O that stays inside one cluster.
struct Segment {
    cluster: usize,
    within: u64,
    len: usize,
    at: usize,
}

impl<D: BlobDevice> Blobstore<D> {
    fn segments(&self, id: BlobId, offset: u64, len: usize) -> Result<Vec<Segment>> {
        let b = self.open_blob(id)?;
        let cs = u64::from(self.geo.cluster_size);
        let io = u64::from(self.geo.io_unit);
        let size = b.num_clusters() * cs;
        let end = offset.checked_add(len as u64);
        if !offset.is_multiple_of(io)
            || !(len as u64).is_multiple_of(io)
            || end.is_none_or(|e| e > size)
        {
            return Err(Error::BadRange {
                id,
                offset,
                len: len as u64,
                io_unit: self.geo.io_unit,
            });
        }
        let mut out = Vec::new();
        let mut at = 0usize;
        while at < len {
            let off = offset + at as u64;
            let within = off % cs;
            let n = ((cs - within) as usize).min(len - at);
            out.push(Segment {
                cluster: (off / cs) as usize,
                within,
                len: n,
                at,
            });
            at += n;
        }
        Ok(out)
    }

    /// Reads `buf.len()` bytes at byte `offset` of the blob; both multiples of the io unit.
    pub fn read(&mut self, id: BlobId, offset: u64, buf: &mut [u8]) -> Result<()> {
        for s in self.segments(id, offset, buf.len())? {
            self.read_through(Some(id), s.cluster, s.within, &mut buf[s.at..s.at + s.len])?;
        }
        Ok(())
    }

    /// Reads part of blob cluster `cluster` of `blob`, or of the first ancestor that has it;
    /// zeroes where none does or past an ancestor's end.
    fn read_through(
        &mut self,
        mut blob: Option<BlobId>,
        cluster: usize,
        within: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        while let Some(id) = blob {
            let b = self.open_blob(id)?;
            match b.clusters.get(cluster) {
                None => break,
                Some(&0) => blob = b.parent(),
                Some(&c) => {
                    let off = self.geo.cluster_offset(c) + within;
                    return self.dev.read(off, buf);
                }
            }
        }
        buf.fill(0);
        Ok(())
    }

    /// Writes `data` at byte `offset` of the blob; both multiples of the io unit.
    pub fn write(&mut self, id: BlobId, offset: u64, data: &[u8]) -> Result<()> {
        if self.open_blob(id)?.is_read_only() {
            return Err(Error::ReadOnly(id));
        }
        for s in self.segments(id, offset, data.len())? {
            let c = match self.blobs[&id].clusters[s.cluster] {
                0 => self.allocate_on_write(id, s.cluster, false)?,
                c => c,
            };
            let off = self.geo.cluster_offset(c) + s.within;
            self.dev.write(off, &data[s.at..s.at + s.len])?;
        }
        Ok(())
    }

    /// Gives blob cluster `i` storage of its own if it has none (steps 1 to 3), and returns
    /// its device cluster: what a write to it needs first. The caller writes the data itself
    /// (the lvol bdev's reactors do, on their own queues). Refused for a read-only blob or a
    /// cluster past the blob's end.
    pub fn allocate_cluster(&mut self, id: BlobId, i: u64) -> Result<u32> {
        let b = self.open_blob(id)?;
        if b.is_read_only() {
            return Err(Error::ReadOnly(id));
        }
        let cs = u64::from(self.geo.cluster_size);
        match b.clusters.get(i as usize) {
            None => Err(Error::BadRange {
                id,
                offset: i.saturating_mul(cs),
                len: cs,
                io_unit: self.geo.io_unit,
            }),
            Some(&0) => self.allocate_on_write(id, i as usize, false),
            Some(&c) => Ok(c),
        }
    }

    /// Frees blob cluster `i` on an unmap of the whole cluster (SPDK's rule: only a thin blob
    /// that reads zeroes where it holds nothing, i.e. without a parent, gives clusters back).
    /// In SPDK's order: the data is unmapped on the device, then the metadata stops mapping
    /// the cluster, durably, and only then is it free for another blob. Returns the device
    /// cluster freed, or `None` if the blob held none there.
    pub fn release_unmapped(&mut self, id: BlobId, i: u64) -> Result<Option<u32>> {
        let b = self.open_blob(id)?;
        if b.is_read_only() {
            return Err(Error::ReadOnly(id));
        }
        if !b.is_thin_provisioned() || b.parent().is_some() {
            return Err(Error::KeepsClusters(id));
        }
        let cs = u64::from(self.geo.cluster_size);
        let c = match b.clusters.get(i as usize) {
            None => {
                return Err(Error::BadRange {
                    id,
                    offset: i.saturating_mul(cs),
                    len: cs,
                    io_unit: self.geo.io_unit,
                });
            }
            Some(&0) => return Ok(None),
            Some(&c) => c,
        };
        let rle = !b.uses_extent_table();
        self.mark_dirty()?;
        self.dev.unmap(self.geo.cluster_offset(c), cs)?;
        self.blobs.get_mut(&id).expect("opened above").clusters[i as usize] = 0;
        if rle {
            self.sync_md(id)?;
        } else {
            let ep = i as usize / EXTENTS_PER_EP;
            let b = &self.blobs[&id];
            let page = b.extent_pages[ep];
            let bytes: [u8; PAGE_SIZE] = super::serialize::extent_page(b, ep).encode();
            self.write_md_page(page, &bytes)?;
            self.dev.flush()?;
        }
        self.used_clusters.clear(c);
        Ok(Some(c))
    }

    /// Byte offset of device cluster `c` on the device.
    pub fn cluster_offset(&self, c: u32) -> u64 {
        self.geo.cluster_offset(c)
    }

    /// Steps 1 to 3 of the module's list for blob cluster `i`. With `zero_unbacked`, a
    /// cluster of a blob without a parent is zeroed (and flushed) before it is mapped, so
    /// that it reads the zeroes it read before (inflate); a first write leaves it as SPDK
    /// does, since the write itself is what the cluster is for.
    pub(crate) fn allocate_on_write(
        &mut self,
        id: BlobId,
        i: usize,
        zero_unbacked: bool,
    ) -> Result<u32> {
        let b = &self.blobs[&id];
        if !b.is_thin_provisioned() {
            return Err(Error::corrupt(
                id,
                format!("thick blob without cluster {i}"),
            ));
        }
        let parent = b.parent();
        let ep = i / EXTENTS_PER_EP;
        let new_ep = b.uses_extent_table() && b.extent_pages[ep] == 0;
        let rle = !b.uses_extent_table();
        let c = self.allocate_cluster_in_map(id, i)?;
        if parent.is_some() {
            let mut copy = vec![0u8; self.geo.cluster_size as usize];
            self.read_through(parent, i, 0, &mut copy)?;
            self.dev.write(self.geo.cluster_offset(c), &copy)?;
            self.dev.flush()?;
        } else if zero_unbacked {
            let len = u64::from(self.geo.cluster_size);
            self.dev.write_zeroes(self.geo.cluster_offset(c), len)?;
            self.dev.flush()?;
        }
        if new_ep || rle {
            self.sync_md(id)?;
        } else {
            self.mark_dirty()?;
            let b = self.blobs.get_mut(&id).expect("checked");
            b.dirty_eps.remove(&ep);
            let page = b.extent_pages[ep];
            let bytes: [u8; PAGE_SIZE] = super::serialize::extent_page(b, ep).encode();
            self.write_md_page(page, &bytes)?;
        }
        Ok(c)
    }
}
