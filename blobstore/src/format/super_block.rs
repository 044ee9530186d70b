//! `struct spdk_bs_super_block`: page 0 of the device, 4096 bytes, packed, little-endian.
//!
//! | offset | field |
//! |---|---|
//! | 0 | `signature[8]` "SPDKBLOB" |
//! | 8 | `version` |
//! | 12 | `length` (= 4096) |
//! | 16 | `clean` (1 after a clean unload) |
//! | 20 | `super_blob` (u64) |
//! | 28 | `cluster_size` (bytes) |
//! | 32, 36 | `used_page_mask_start`, `_len` (pages) |
//! | 40, 44 | `used_cluster_mask_start`, `_len` |
//! | 48, 52 | `md_start`, `md_len` |
//! | 56 | `bstype[16]` |
//! | 72, 76 | `used_blobid_mask_start`, `_len` |
//! | 80 | `size` (u64, bytes) |
//! | 88 | `io_unit_size` |
//! | 92 | `md_page_size` |
//! | 96 | `reserved[3996]` |
//! | 4092 | `crc` |

use super::bytes::{Reader, Writer};
use super::{
    BS_INITIAL_VERSION, BS_VERSION, BSTYPE_LEN, PAGE_SIZE, SUPER_BLOCK_SIG, as_page, check_crc,
    page_crc,
};
use crate::{Error, Result};

/// Bytes from `reserved` to `crc`.
const RESERVED_LEN: usize = 3996;

/// The decoded super block. `decode` has checked the signature, version and CRC; the store
/// checks the geometry against the device (`store::geometry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuperBlock {
    /// On-disk version (1..=3).
    pub version: u32,
    /// `length` field: the structure's size, 4096.
    pub length: u32,
    /// 1 when the store was unloaded cleanly and the masks are current.
    pub clean: u32,
    /// The application's designated "super blob", or `BLOBID_INVALID`.
    pub super_blob: u64,
    /// Cluster size in bytes.
    pub cluster_size: u32,
    /// First page of the used-metadata-page mask.
    pub used_page_mask_start: u32,
    /// Pages of the used-metadata-page mask.
    pub used_page_mask_len: u32,
    /// First page of the used-cluster mask.
    pub used_cluster_mask_start: u32,
    /// Pages of the used-cluster mask.
    pub used_cluster_mask_len: u32,
    /// First page of the metadata region.
    pub md_start: u32,
    /// Pages in the metadata region.
    pub md_len: u32,
    /// Blobstore type, e.g. "LVOLSTORE" zero-padded.
    pub bstype: [u8; BSTYPE_LEN],
    /// First page of the used-blob-id mask (0 before version 3).
    pub used_blobid_mask_start: u32,
    /// Pages of the used-blob-id mask (0 before version 3).
    pub used_blobid_mask_len: u32,
    /// Size of the store in bytes (0 before version 3: the device size).
    pub size: u64,
    /// I/O unit size in bytes (0 in old stores: 4096).
    pub io_unit_size: u32,
    /// Metadata page size in bytes (0 in old stores: 4096).
    pub md_page_size: u32,
}

impl SuperBlock {
    /// Decodes page 0, checking length, signature, version and CRC (`bs_super_validate`).
    pub fn decode(buf: &[u8]) -> Result<SuperBlock> {
        let page = as_page(buf, "super block")?;
        let mut r = Reader::new(page);
        // A 4096-byte page holds every field, so the reads below cannot run out.
        let short = || Error::BadLength {
            what: "super block",
            len: buf.len(),
            expected: PAGE_SIZE,
        };
        let signature: [u8; 8] = r.array().ok_or_else(short)?;
        if signature != SUPER_BLOCK_SIG {
            return Err(Error::BadSignature { found: signature });
        }
        let version = r.u32().ok_or_else(short)?;
        if !(BS_INITIAL_VERSION..=BS_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion(version));
        }
        check_crc(page, "super block")?;
        let sb = SuperBlock {
            version,
            length: r.u32().ok_or_else(short)?,
            clean: r.u32().ok_or_else(short)?,
            super_blob: r.u64().ok_or_else(short)?,
            cluster_size: r.u32().ok_or_else(short)?,
            used_page_mask_start: r.u32().ok_or_else(short)?,
            used_page_mask_len: r.u32().ok_or_else(short)?,
            used_cluster_mask_start: r.u32().ok_or_else(short)?,
            used_cluster_mask_len: r.u32().ok_or_else(short)?,
            md_start: r.u32().ok_or_else(short)?,
            md_len: r.u32().ok_or_else(short)?,
            bstype: r.array().ok_or_else(short)?,
            used_blobid_mask_start: r.u32().ok_or_else(short)?,
            used_blobid_mask_len: r.u32().ok_or_else(short)?,
            size: r.u64().ok_or_else(short)?,
            io_unit_size: r.u32().ok_or_else(short)?,
            md_page_size: r.u32().ok_or_else(short)?,
        };
        Ok(sb)
    }

    /// Encodes the page with its CRC (`bs_write_super`).
    pub fn encode(&self) -> [u8; PAGE_SIZE] {
        let mut page = [0u8; PAGE_SIZE];
        let mut w = Writer::new(&mut page);
        w.bytes(&SUPER_BLOCK_SIG);
        w.u32(self.version);
        w.u32(self.length);
        w.u32(self.clean);
        w.u64(self.super_blob);
        w.u32(self.cluster_size);
        w.u32(self.used_page_mask_start);
        w.u32(self.used_page_mask_len);
        w.u32(self.used_cluster_mask_start);
        w.u32(self.used_cluster_mask_len);
        w.u32(self.md_start);
        w.u32(self.md_len);
        w.bytes(&self.bstype);
        w.u32(self.used_blobid_mask_start);
        w.u32(self.used_blobid_mask_len);
        w.u64(self.size);
        w.u32(self.io_unit_size);
        w.u32(self.md_page_size);
        w.skip(RESERVED_LEN);
        debug_assert_eq!(w.pos(), PAGE_SIZE - 4);
        let crc = page_crc(&page);
        page[PAGE_SIZE - 4..].copy_from_slice(&crc.to_le_bytes());
        page
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> SuperBlock {
        SuperBlock {
            version: 3,
            length: 4096,
            clean: 1,
            super_blob: 0x1_0000_0004,
            cluster_size: 1 << 20,
            used_page_mask_start: 1,
            used_page_mask_len: 2,
            used_cluster_mask_start: 3,
            used_cluster_mask_len: 4,
            md_start: 5,
            md_len: 6,
            bstype: *b"LVOLSTORE\0\0\0\0\0\0\0",
            used_blobid_mask_start: 7,
            used_blobid_mask_len: 8,
            size: 0x1122_3344_5566_7788,
            io_unit_size: 512,
            md_page_size: 4096,
        }
    }

    fn u32_at(p: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(p[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn layout_is_spdk_bs_super_block() {
        let sb = sample();
        let p = sb.encode();
        assert_eq!(p.len(), 0x1000);
        assert_eq!(&p[0..8], b"SPDKBLOB");
        assert_eq!(u32_at(&p, 8), 3);
        assert_eq!(u32_at(&p, 12), 4096);
        assert_eq!(u32_at(&p, 16), 1);
        assert_eq!(
            u64::from_le_bytes(p[20..28].try_into().unwrap()),
            0x1_0000_0004
        );
        assert_eq!(u32_at(&p, 28), 1 << 20);
        for (off, v) in [
            (32, 1),
            (36, 2),
            (40, 3),
            (44, 4),
            (48, 5),
            (52, 6),
            (72, 7),
            (76, 8),
        ] {
            assert_eq!(u32_at(&p, off), v, "offset {off}");
        }
        assert_eq!(&p[56..65], b"LVOLSTORE");
        assert_eq!(
            u64::from_le_bytes(p[80..88].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(u32_at(&p, 88), 512);
        assert_eq!(u32_at(&p, 92), 4096);
        assert!(p[96..4092].iter().all(|&b| b == 0), "reserved[3996]");
        assert_eq!(u32_at(&p, 4092), page_crc(&p));
        assert_eq!(SuperBlock::decode(&p).unwrap(), sb);
    }

    #[test]
    fn bad_input_is_named() {
        let mut p = sample().encode();
        p[100] ^= 1;
        assert!(matches!(
            SuperBlock::decode(&p),
            Err(Error::CrcMismatch {
                what: "super block",
                ..
            })
        ));
        let mut p = sample().encode();
        p[0] = b'X';
        assert!(matches!(
            SuperBlock::decode(&p),
            Err(Error::BadSignature { .. })
        ));
        let mut p = sample().encode();
        p[8] = 4;
        assert_eq!(SuperBlock::decode(&p), Err(Error::UnsupportedVersion(4)));
        assert!(matches!(
            SuperBlock::decode(&p[..100]),
            Err(Error::BadLength { .. })
        ));
    }

    proptest! {
        #[test]
        fn prop_super_round_trip(clean in 0u32..2, cs in any::<u32>(), md in any::<u32>(),
                                 size in any::<u64>(), io in any::<u32>(), bst in any::<[u8; 16]>()) {
            let sb = SuperBlock { clean, cluster_size: cs, md_len: md, size, io_unit_size: io,
                                  bstype: bst, ..sample() };
            prop_assert_eq!(SuperBlock::decode(&sb.encode()).unwrap(), sb);
        }

        #[test]
        fn prop_super_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = SuperBlock::decode(&bytes);
        }

        #[test]
        fn prop_super_signed_garbage_never_panics(body in proptest::collection::vec(any::<u8>(), 4084)) {
            let mut p = [0u8; PAGE_SIZE];
            p[..8].copy_from_slice(&SUPER_BLOCK_SIG);
            p[8..4092].copy_from_slice(&body);
            p[8] = 3; p[9] = 0; p[10] = 0; p[11] = 0;
            let crc = page_crc(&p);
            p[4092..].copy_from_slice(&crc.to_le_bytes());
            prop_assert!(SuperBlock::decode(&p).is_ok());
        }
    }
}
