//! SPDK v25.09's on-disk blobstore format (lib/blob/blobstore.h), pure: no I/O.
//!
//! | file | structure |
//! |---|---|
//! | `super_block.rs` | `struct spdk_bs_super_block`, page 0 of the device |
//! | `md_page.rs` | `struct spdk_blob_md_page`, the 4 KiB metadata page |
//! | `descriptor.rs` | the descriptors inside a metadata page |
//! | `mask.rs` | `struct spdk_bs_md_mask`, the used-page/cluster/blob-id masks |
//! | `bytes.rs` | little-endian cursors the codecs share |
//!
//! Each structure has one codec: `decode` checks the length, the CRC (where the structure
//! has one) and every field a later step would trust, and returns a typed error; `encode`
//! computes the CRC. No decoder panics on any input (the `prop_` tests feed arbitrary bytes).

pub(crate) mod bytes;
pub mod descriptor;
pub mod mask;
pub mod md_page;
pub mod super_block;

pub use descriptor::{Descriptor, ExtentTableEntry, Flags, RleExtent};
pub use mask::{Mask, MaskType};
pub use md_page::MdPage;
pub use super_block::SuperBlock;

/// Size of a metadata page and of the super block (`SPDK_BS_PAGE_SIZE`).
pub const PAGE_SIZE: usize = 0x1000;
/// Bytes of descriptors in a metadata page (`SPDK_BS_MAX_DESC_SIZE`).
pub const DESCRIPTORS_SIZE: usize = 4072;
/// Size of a descriptor header: `uint8_t type; uint32_t length;` packed.
pub const DESCRIPTOR_HEADER_SIZE: usize = 5;
/// Clusters one extent page maps (`SPDK_EXTENTS_PER_EP` for 4 KiB pages).
pub const EXTENTS_PER_EP: usize = 512;
/// "No next page" in `spdk_blob_md_page.next` (`SPDK_INVALID_MD_PAGE`).
pub const INVALID_MD_PAGE: u32 = u32::MAX;
/// The super block's signature (`SPDK_BS_SUPER_BLOCK_SIG`).
pub const SUPER_BLOCK_SIG: [u8; 8] = *b"SPDKBLOB";
/// The version this crate writes (`SPDK_BS_VERSION`).
pub const BS_VERSION: u32 = 3;
/// The oldest version SPDK reads (`SPDK_BS_INITIAL_VERSION`).
pub const BS_INITIAL_VERSION: u32 = 1;
/// Length of the blobstore type (`SPDK_BLOBSTORE_TYPE_LENGTH`).
pub const BSTYPE_LEN: usize = 16;
/// The high bit of every blob id: id = this | metadata page index (`SPDK_BLOB_BLOBID_HIGH_BIT`).
pub const BLOBID_HIGH_BIT: u64 = 1 << 32;
/// "No blob" (`SPDK_BLOBID_INVALID`).
pub const BLOBID_INVALID: u64 = u64::MAX;

/// `invalid_flags`: clusters are allocated on first write (`SPDK_BLOB_THIN_PROV`).
pub const BLOB_THIN_PROV: u64 = 1 << 0;
/// `invalid_flags`: the blob has internal xattrs (`SPDK_BLOB_INTERNAL_XATTR`).
pub const BLOB_INTERNAL_XATTR: u64 = 1 << 1;
/// `invalid_flags`: clusters are mapped by an extent table and extent pages (`SPDK_BLOB_EXTENT_TABLE`).
pub const BLOB_EXTENT_TABLE: u64 = 1 << 2;
/// `invalid_flags`: the blob is a clone of an external snapshot (`SPDK_BLOB_EXTERNAL_SNAPSHOT`).
pub const BLOB_EXTERNAL_SNAPSHOT: u64 = 1 << 3;
/// Every `invalid_flags` bit SPDK v25.09 knows (`SPDK_BLOB_INVALID_FLAGS_MASK`).
pub const BLOB_INVALID_FLAGS_MASK: u64 =
    BLOB_THIN_PROV | BLOB_INTERNAL_XATTR | BLOB_EXTENT_TABLE | BLOB_EXTERNAL_SNAPSHOT;
/// `data_ro_flags`: the blob is read-only (`SPDK_BLOB_READ_ONLY`).
pub const BLOB_READ_ONLY: u64 = 1 << 0;
/// Every `data_ro_flags` bit SPDK knows (`SPDK_BLOB_DATA_RO_FLAGS_MASK`).
pub const BLOB_DATA_RO_FLAGS_MASK: u64 = BLOB_READ_ONLY;
/// `md_ro_flags`: the clear method, two bits at shift 0 (`SPDK_BLOB_CLEAR_METHOD`).
pub const BLOB_CLEAR_METHOD: u64 = 3;
/// Every `md_ro_flags` bit SPDK knows (`SPDK_BLOB_MD_RO_FLAGS_MASK`).
pub const BLOB_MD_RO_FLAGS_MASK: u64 = BLOB_CLEAR_METHOD;

/// Internal xattr: the id of the blob's parent snapshot (`BLOB_SNAPSHOT`).
pub const XATTR_SNAPSHOT: &str = "SNAP";
/// Internal xattr: the snapshot is being created from this blob id (`SNAPSHOT_IN_PROGRESS`).
pub const XATTR_SNAPSHOT_IN_PROGRESS: &str = "SNAPTMP";
/// Internal xattr: the snapshot is being deleted into this clone (`SNAPSHOT_PENDING_REMOVAL`).
pub const XATTR_SNAPSHOT_PENDING_REMOVAL: &str = "SNAPRM";
/// Internal xattr: the external snapshot's id (`BLOB_EXTERNAL_SNAPSHOT_ID`).
pub const XATTR_EXTERNAL_SNAPSHOT_ID: &str = "EXTSNAP";

/// The CRC SPDK puts in the last four bytes of a metadata page and of the super block
/// (`blob_md_page_calc_crc`): CRC-32C seeded with `0xffffffff` over the first 4092 bytes,
/// finally inverted, which is the standard CRC-32C of those bytes.
pub fn page_crc(page: &[u8; PAGE_SIZE]) -> u32 {
    crc32c::crc32c(&page[..PAGE_SIZE - 4])
}

/// Blob id of the blob whose first metadata page is `page` (`bs_page_to_blobid`).
pub fn page_to_blobid(page: u32) -> u64 {
    BLOBID_HIGH_BIT | u64::from(page)
}

/// Metadata page index of a blob's first page (`bs_blobid_to_page`).
pub fn blobid_to_page(id: u64) -> u32 {
    (id & 0xFFFF_FFFF) as u32
}

/// The CRC field of a page, as stored.
pub(crate) fn stored_crc(page: &[u8; PAGE_SIZE]) -> u32 {
    u32::from_le_bytes([page[4092], page[4093], page[4094], page[4095]])
}

/// Checks a page's CRC, naming the page kind in the error.
pub(crate) fn check_crc(page: &[u8; PAGE_SIZE], what: &'static str) -> crate::Result<()> {
    let (stored, computed) = (stored_crc(page), page_crc(page));
    if stored == computed {
        Ok(())
    } else {
        Err(crate::Error::CrcMismatch {
            what,
            stored,
            computed,
        })
    }
}

/// Views a buffer as one page, or says how long it was.
pub(crate) fn as_page<'a>(buf: &'a [u8], what: &'static str) -> crate::Result<&'a [u8; PAGE_SIZE]> {
    buf.try_into().map_err(|_| crate::Error::BadLength {
        what,
        len: buf.len(),
        expected: PAGE_SIZE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spdk_constants() {
        // SPDK_EXTENTS_PER_EP = align64pow2(EXTENTS_PER_EP_MAX + 1) >> 1 with
        // EXTENTS_PER_EP_MAX = (4072 - sizeof(extent_page desc = 9)) / 4 = 1015.
        let max = (DESCRIPTORS_SIZE - 9) / 4;
        assert_eq!(max, 1015);
        assert_eq!(
            (max as u64 + 1).next_power_of_two() >> 1,
            EXTENTS_PER_EP as u64
        );
        assert_eq!(BLOB_INVALID_FLAGS_MASK, 0xf);
        assert_eq!(page_to_blobid(7), 0x1_0000_0007);
        assert_eq!(blobid_to_page(0x1_0000_0007), 7);
        assert_eq!(DESCRIPTORS_SIZE, PAGE_SIZE - 8 - 4 - 4 - 4 - 4);
    }

    #[test]
    fn crc_is_spdk_crc32c() {
        // The CRC-32C check value, and SPDK's seed-and-invert construction of it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        // SPDK: crc = 0xffffffff; crc = spdk_crc32c_update(page, 4092, crc); crc ^= 0xffffffff;
        // spdk_crc32c_update is the raw reflected Castagnoli update (poly 0x82F63B78).
        fn spdk_update(buf: &[u8], mut crc: u32) -> u32 {
            for &b in buf {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 != 0 {
                        (crc >> 1) ^ 0x82F6_3B78
                    } else {
                        crc >> 1
                    };
                }
            }
            crc
        }
        assert_eq!(
            spdk_update(b"123456789", 0xffff_ffff) ^ 0xffff_ffff,
            0xE306_9283
        );
        let mut sample = [0u8; PAGE_SIZE];
        for (i, b) in sample.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        assert_eq!(
            spdk_update(&sample[..4092], 0xffff_ffff) ^ 0xffff_ffff,
            page_crc(&sample)
        );
        // It covers bytes 0..4092: changing the CRC field does not change it.
        let mut page = [0u8; PAGE_SIZE];
        page[100] = 1;
        let a = page_crc(&page);
        page[4095] = 0xff;
        assert_eq!(page_crc(&page), a);
        page[4091] = 1;
        assert_ne!(page_crc(&page), a);
    }
}
