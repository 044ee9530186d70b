//! Where things are on the device: the layout `spdk_bs_init` chooses, and the checks a
//! loaded super block must pass before anything trusts its numbers.
//!
//! Page 0 is the super block; then the used-page mask, the used-cluster mask (sized for the
//! largest store the metadata region could describe, so the store can grow), the
//! used-blob-id mask, and the metadata region of `md_len` pages. The clusters these pages
//! cover are never handed to blobs.

use crate::device::BlobDevice;
use crate::format::{BLOBID_INVALID, BS_VERSION, BSTYPE_LEN, Mask, PAGE_SIZE, SuperBlock};
use crate::{Error, Result};

/// The numbers every store operation uses, validated once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) cluster_size: u32,
    pub(crate) io_unit: u32,
    pub(crate) md_start: u32,
    pub(crate) md_len: u32,
    pub(crate) total_clusters: u32,
    /// Clusters 0..md_clusters hold the super block, masks and metadata region.
    pub(crate) md_clusters: u32,
}

impl Geometry {
    /// Byte offset of metadata page `page`.
    pub(crate) fn md_page_offset(&self, page: u32) -> u64 {
        (u64::from(self.md_start) + u64::from(page)) * PAGE_SIZE as u64
    }

    /// Byte offset of cluster `c`.
    pub(crate) fn cluster_offset(&self, c: u32) -> u64 {
        u64::from(c) * u64::from(self.cluster_size)
    }

    /// Clusters a byte count of pages covers.
    fn clusters_for_pages(pages: u64, cluster_size: u32) -> u64 {
        (pages * PAGE_SIZE as u64).div_ceil(u64::from(cluster_size))
    }

    /// The layout `spdk_bs_init` writes for a device, as a super block (clean = 0).
    pub(crate) fn for_init(
        dev: &impl BlobDevice,
        cluster_size: u32,
        num_md_pages: Option<u32>,
        bstype: [u8; BSTYPE_LEN],
    ) -> Result<(Geometry, SuperBlock)> {
        let size = dev.size();
        let bl = dev.block_len();
        if cluster_size == 0 || !(cluster_size as usize).is_multiple_of(PAGE_SIZE) {
            return Err(Error::InvalidOption(format!(
                "cluster size {cluster_size} is not a multiple of {PAGE_SIZE}"
            )));
        }
        if bl == 0 || !(PAGE_SIZE as u32).is_multiple_of(bl) {
            return Err(Error::InvalidOption(format!(
                "device block length {bl} does not divide {PAGE_SIZE}"
            )));
        }
        if size < u64::from(cluster_size) {
            return Err(Error::NoSpace("device smaller than one cluster"));
        }
        let total_clusters = u32::try_from(size / u64::from(cluster_size))
            .map_err(|_| Error::InvalidOption("more than 2^32 clusters".into()))?;
        let md_len = num_md_pages.unwrap_or(total_clusters);
        let mask_pages = |bits: u32| Mask::encoded_len(bits as usize).div_ceil(PAGE_SIZE) as u32;
        let page_mask_len = mask_pages(md_len);
        let cluster_mask_len = mask_pages(total_clusters);
        let cluster_mask_room = cluster_mask_len.max(mask_pages(md_len));
        let blobid_mask_len = mask_pages(md_len);
        let page_mask_start = 1;
        let cluster_mask_start = page_mask_start + page_mask_len;
        let blobid_mask_start = cluster_mask_start + cluster_mask_room;
        let md_start = blobid_mask_start + blobid_mask_len;
        let md_clusters =
            Self::clusters_for_pages(u64::from(md_start) + u64::from(md_len), cluster_size);
        if md_clusters > u64::from(total_clusters) {
            return Err(Error::NoSpace(
                "metadata needs more clusters than the device has",
            ));
        }
        let sb = SuperBlock {
            version: BS_VERSION,
            length: PAGE_SIZE as u32,
            clean: 0,
            super_blob: BLOBID_INVALID,
            cluster_size,
            used_page_mask_start: page_mask_start,
            used_page_mask_len: page_mask_len,
            used_cluster_mask_start: cluster_mask_start,
            used_cluster_mask_len: cluster_mask_len,
            md_start,
            md_len,
            bstype,
            used_blobid_mask_start: blobid_mask_start,
            used_blobid_mask_len: blobid_mask_len,
            size,
            io_unit_size: bl,
            md_page_size: PAGE_SIZE as u32,
        };
        let geo = Geometry::from_super(&sb, dev)?;
        Ok((geo, sb))
    }

    /// Checks a decoded super block against the device (`bs_super_validate`, `bs_parse_super`)
    /// and returns the geometry it describes. Fields SPDK leaves 0 in older versions take
    /// SPDK's defaults.
    pub(crate) fn from_super(sb: &SuperBlock, dev: &impl BlobDevice) -> Result<Geometry> {
        fn bad<T>(m: String) -> Result<T> {
            Err(Error::BadSuperBlock(m))
        }
        let dev_size = dev.size();
        let size = if sb.size == 0 { dev_size } else { sb.size };
        if size > dev_size {
            return bad(format!(
                "store size {size} is larger than the device ({dev_size})"
            ));
        }
        let md_page_size = if sb.md_page_size == 0 {
            PAGE_SIZE as u32
        } else {
            sb.md_page_size
        };
        if md_page_size as usize != PAGE_SIZE {
            return Err(Error::Unsupported(format!(
                "metadata page size {md_page_size}"
            )));
        }
        let io_unit = if sb.io_unit_size == 0 {
            PAGE_SIZE as u32
        } else {
            sb.io_unit_size
        };
        if !io_unit.is_power_of_two()
            || !(PAGE_SIZE as u32).is_multiple_of(io_unit)
            || io_unit < dev.block_len()
        {
            return bad(format!(
                "io unit size {io_unit} is not a power of two between the device block ({}) and {PAGE_SIZE}",
                dev.block_len()
            ));
        }
        if sb.cluster_size == 0 || !(sb.cluster_size as usize).is_multiple_of(PAGE_SIZE) {
            return bad(format!(
                "cluster size {} is not a multiple of {PAGE_SIZE}",
                sb.cluster_size
            ));
        }
        let total_clusters = u32::try_from(size / u64::from(sb.cluster_size))
            .map_err(|_| Error::BadSuperBlock("more than 2^32 clusters".into()))?;
        let total_pages = size / PAGE_SIZE as u64;
        let region = |name: &str, start: u32, len: u32, bits: u64| -> Result<()> {
            if u64::from(start) + u64::from(len) > total_pages || (len == 0 && bits > 0) {
                return bad(format!(
                    "{name} region {start}+{len} pages is past the store ({total_pages} pages)"
                ));
            }
            if (len as usize * PAGE_SIZE) < Mask::encoded_len(bits as usize) && bits > 0 {
                return bad(format!(
                    "{name} region of {len} pages cannot hold {bits} bits"
                ));
            }
            Ok(())
        };
        region("metadata", sb.md_start, sb.md_len, 0)?;
        if sb.md_start == 0 || sb.md_len == 0 {
            return bad("empty metadata region".into());
        }
        region(
            "used-page mask",
            sb.used_page_mask_start,
            sb.used_page_mask_len,
            u64::from(sb.md_len),
        )?;
        region(
            "used-cluster mask",
            sb.used_cluster_mask_start,
            sb.used_cluster_mask_len,
            u64::from(total_clusters),
        )?;
        if sb.used_blobid_mask_len != 0 {
            region(
                "used-blob-id mask",
                sb.used_blobid_mask_start,
                sb.used_blobid_mask_len,
                u64::from(sb.md_len),
            )?;
        }
        let md_clusters = Self::clusters_for_pages(
            u64::from(sb.md_start) + u64::from(sb.md_len),
            sb.cluster_size,
        );
        if md_clusters > u64::from(total_clusters) {
            return bad("metadata region is larger than the store".into());
        }
        Ok(Geometry {
            cluster_size: sb.cluster_size,
            io_unit,
            md_start: sb.md_start,
            md_len: sb.md_len,
            total_clusters,
            md_clusters: md_clusters as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    #[test]
    fn init_layout_matches_spdk_bs_init() {
        // 1 GiB, 1 MiB clusters, default md_len = one page per cluster = 1024 pages:
        // super 1 page, page mask 1, cluster mask 1, blob-id mask 1, md_start = 4.
        let dev = MemDevice::new(1 << 30, 512);
        let (g, sb) = Geometry::for_init(&dev, 1 << 20, None, [0; 16]).unwrap();
        assert_eq!((sb.used_page_mask_start, sb.used_page_mask_len), (1, 1));
        assert_eq!(
            (sb.used_cluster_mask_start, sb.used_cluster_mask_len),
            (2, 1)
        );
        assert_eq!((sb.used_blobid_mask_start, sb.used_blobid_mask_len), (3, 1));
        assert_eq!((sb.md_start, sb.md_len), (4, 1024));
        assert_eq!(g.total_clusters, 1024);
        assert_eq!(g.md_clusters, 5); // (4 + 1024) pages * 4 KiB / 1 MiB, rounded up
        assert_eq!(sb.io_unit_size, 512);
        assert_eq!(sb.size, 1 << 30);
    }

    #[test]
    fn bad_geometry_is_refused() {
        let dev = MemDevice::new(1 << 20, 512);
        let (_, sb) = Geometry::for_init(&dev, 16 << 10, Some(16), [0; 16]).unwrap();
        let big = SuperBlock {
            size: 2 << 20,
            ..sb.clone()
        };
        assert!(matches!(
            Geometry::from_super(&big, &dev),
            Err(Error::BadSuperBlock(_))
        ));
        let odd = SuperBlock {
            cluster_size: 1000,
            ..sb.clone()
        };
        assert!(matches!(
            Geometry::from_super(&odd, &dev),
            Err(Error::BadSuperBlock(_))
        ));
        let md = SuperBlock {
            md_len: 1 << 30,
            ..sb.clone()
        };
        assert!(matches!(
            Geometry::from_super(&md, &dev),
            Err(Error::BadSuperBlock(_))
        ));
        let page = SuperBlock {
            md_page_size: 8192,
            ..sb
        };
        assert!(matches!(
            Geometry::from_super(&page, &dev),
            Err(Error::Unsupported(_))
        ));
    }
}
