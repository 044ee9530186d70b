//! Creating a store on a device (`spdk_bs_init`) and unloading it cleanly (`spdk_bs_unload`).

use std::collections::BTreeMap;

use super::bitarray::BitArray;
use super::geometry::Geometry;
use super::{Blobstore, BlobstoreOptions, ClearMethod};
use crate::Result;
use crate::device::BlobDevice;
use crate::format::{Mask, MaskType, PAGE_SIZE};

impl<D: BlobDevice> Blobstore<D> {
    /// Formats `dev`: zeroes the metadata pages, clears the data clusters by
    /// `opts.clear_method`, and writes the super block (not clean: a crash before the first
    /// unload makes the next load rebuild the masks, as in SPDK).
    pub fn init(mut dev: D, opts: &BlobstoreOptions) -> Result<Blobstore<D>> {
        let (geo, sb) =
            Geometry::for_init(&dev, opts.cluster_size, opts.num_md_pages, opts.bstype)?;
        let md_bytes = geo.md_page_offset(geo.md_len);
        dev.write_zeroes(0, md_bytes)?;
        let data = md_bytes.next_multiple_of(u64::from(dev.block_len()));
        let end = u64::from(geo.total_clusters) * u64::from(geo.cluster_size);
        if end > data {
            match opts.clear_method {
                ClearMethod::Default | ClearMethod::Unmap => dev.unmap(data, end - data)?,
                ClearMethod::WriteZeroes => dev.write_zeroes(data, end - data)?,
                ClearMethod::None => {}
            }
        }
        dev.write(0, &sb.encode())?;
        dev.flush()?;
        let mut used_clusters = BitArray::new(geo.total_clusters);
        (0..geo.md_clusters).for_each(|c| used_clusters.set(c));
        Ok(Blobstore {
            dev,
            geo,
            sb,
            used_md_pages: BitArray::new(geo.md_len),
            used_blobids: BitArray::new(geo.md_len),
            used_clusters,
            blobs: BTreeMap::new(),
        })
    }

    /// Writes the three masks, then the super block with `clean` = 1, and returns the device.
    /// The masks are flushed before the flag that says they are current.
    pub fn unload(mut self) -> Result<D> {
        let sb = self.sb.clone();
        self.write_mask(
            sb.used_page_mask_start,
            sb.used_page_mask_len,
            &self.used_md_pages.to_mask(MaskType::UsedPages),
        )?;
        if sb.used_blobid_mask_len != 0 {
            let m = self.used_blobids.to_mask(MaskType::UsedBlobIds);
            self.write_mask(sb.used_blobid_mask_start, sb.used_blobid_mask_len, &m)?;
        }
        let m = self.used_clusters.to_mask(MaskType::UsedClusters);
        self.write_mask(sb.used_cluster_mask_start, sb.used_cluster_mask_len, &m)?;
        self.dev.flush()?;
        self.sb.clean = 1;
        self.dev.write(0, &self.sb.encode())?;
        self.dev.flush()?;
        Ok(self.dev)
    }

    fn write_mask(&mut self, start: u32, len: u32, mask: &Mask) -> Result<()> {
        let mut region = vec![0u8; len as usize * PAGE_SIZE];
        mask.encode_into(&mut region);
        self.dev.write(u64::from(start) * PAGE_SIZE as u64, &region)
    }
}
