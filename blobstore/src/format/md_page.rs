//! `struct spdk_blob_md_page`: 4096 bytes, packed, little-endian.
//!
//! | offset | field |
//! |---|---|
//! | 0 | `id` (u64 blob id) |
//! | 8 | `sequence_num` (0 for a blob's first page and for extent pages) |
//! | 12 | `reserved0` |
//! | 16 | `descriptors[4072]` |
//! | 4088 | `next` (metadata page index, `SPDK_INVALID_MD_PAGE` at the end of a chain) |
//! | 4092 | `crc` over bytes 0..4092 |

use super::bytes::{Reader, Writer};
use super::descriptor::{Descriptor, TYPE_EXTENT_PAGE};
use super::{
    DESCRIPTOR_HEADER_SIZE, DESCRIPTORS_SIZE, INVALID_MD_PAGE, PAGE_SIZE, as_page, check_crc,
    page_crc,
};
use crate::{Error, Result};

/// Offset of the descriptor area.
pub const DESCRIPTORS_OFFSET: usize = 16;

/// A decoded metadata page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdPage {
    /// The blob the page belongs to.
    pub id: u64,
    /// Position in the blob's chain; 0 for the first page and for extent pages.
    pub sequence_num: u32,
    /// `reserved0`, kept as read.
    pub reserved0: u32,
    /// The descriptor area.
    pub descriptors: Box<[u8; DESCRIPTORS_SIZE]>,
    /// Next page of the chain, or `INVALID_MD_PAGE`.
    pub next: u32,
}

impl MdPage {
    /// A page with no descriptors yet.
    pub fn new(id: u64, sequence_num: u32) -> MdPage {
        MdPage {
            id,
            sequence_num,
            reserved0: 0,
            descriptors: Box::new([0; DESCRIPTORS_SIZE]),
            next: INVALID_MD_PAGE,
        }
    }

    /// A page holding `descs` packed from the start, or `None` if they do not fit.
    pub fn with_descriptors(id: u64, sequence_num: u32, descs: &[Descriptor]) -> Option<MdPage> {
        let mut page = MdPage::new(id, sequence_num);
        let mut at = 0;
        for d in descs {
            let end = at + d.encoded_len();
            if end > DESCRIPTORS_SIZE {
                return None;
            }
            d.encode_into(&mut page.descriptors[at..end]);
            at = end;
        }
        Some(page)
    }

    /// Decodes a page, checking its length and CRC. The descriptors stay bytes until
    /// `descriptors()` is asked for them.
    pub fn decode(buf: &[u8]) -> Result<MdPage> {
        let page = as_page(buf, "metadata page")?;
        check_crc(page, "metadata page")?;
        let mut r = Reader::new(page);
        let short = || Error::BadLength {
            what: "metadata page",
            len: buf.len(),
            expected: PAGE_SIZE,
        };
        Ok(MdPage {
            id: r.u64().ok_or_else(short)?,
            sequence_num: r.u32().ok_or_else(short)?,
            reserved0: r.u32().ok_or_else(short)?,
            descriptors: Box::new(r.array().ok_or_else(short)?),
            next: r.u32().ok_or_else(short)?,
        })
    }

    /// Encodes the page with its CRC.
    pub fn encode(&self) -> [u8; PAGE_SIZE] {
        let mut page = [0u8; PAGE_SIZE];
        let mut w = Writer::new(&mut page);
        w.u64(self.id);
        w.u32(self.sequence_num);
        w.u32(self.reserved0);
        w.bytes(&self.descriptors[..]);
        w.u32(self.next);
        debug_assert_eq!(w.pos(), PAGE_SIZE - 4);
        let crc = page_crc(&page);
        page[PAGE_SIZE - 4..].copy_from_slice(&crc.to_le_bytes());
        page
    }

    /// The page's descriptors in order.
    pub fn descriptors(&self) -> Result<Vec<Descriptor>> {
        Descriptor::decode_all(&self.descriptors[..])
    }

    /// Whether this page has the shape of an extent page (`bs_load_cur_extent_page_valid`):
    /// sequence 0 and exactly one descriptor, of type `EXTENT_PAGE`, that fits the page.
    pub fn is_extent_page(&self) -> bool {
        let d = &self.descriptors;
        if self.sequence_num != 0 || d[0] != TYPE_EXTENT_PAGE {
            return false;
        }
        let len = u32::from_le_bytes([d[1], d[2], d[3], d[4]]) as usize;
        let end = DESCRIPTOR_HEADER_SIZE.saturating_add(len);
        if end > DESCRIPTORS_SIZE {
            return false;
        }
        // It has to be the only descriptor: the next header, if there is room, is empty.
        end + DESCRIPTOR_HEADER_SIZE > DESCRIPTORS_SIZE
            || u32::from_le_bytes([d[end + 1], d[end + 2], d[end + 3], d[end + 4]]) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::descriptor::Flags;
    use crate::format::descriptor::tests::arb_descriptor;
    use proptest::prelude::*;

    #[test]
    fn layout_is_spdk_blob_md_page() {
        let mut p = MdPage::new(0x1_0000_0003, 2);
        p.next = 9;
        p.descriptors[0] = 0xAB;
        p.descriptors[DESCRIPTORS_SIZE - 1] = 0xCD;
        let b = p.encode();
        assert_eq!(
            u64::from_le_bytes(b[0..8].try_into().unwrap()),
            0x1_0000_0003
        );
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(b[DESCRIPTORS_OFFSET], 0xAB);
        assert_eq!(b[4087], 0xCD);
        assert_eq!(u32::from_le_bytes(b[4088..4092].try_into().unwrap()), 9);
        assert_eq!(
            u32::from_le_bytes(b[4092..4096].try_into().unwrap()),
            page_crc(&b)
        );
        assert_eq!(MdPage::decode(&b).unwrap(), p);
    }

    #[test]
    fn crc_mismatch_is_named() {
        let mut b = MdPage::new(1, 0).encode();
        b[4000] ^= 0x10;
        assert!(matches!(
            MdPage::decode(&b),
            Err(Error::CrcMismatch {
                what: "metadata page",
                ..
            })
        ));
        assert!(matches!(
            MdPage::decode(&b[..4095]),
            Err(Error::BadLength { len: 4095, .. })
        ));
    }

    #[test]
    fn extent_page_shape() {
        let ep = Descriptor::ExtentPage {
            start_cluster_idx: 0,
            clusters: vec![1, 2],
        };
        assert!(
            MdPage::with_descriptors(1, 0, std::slice::from_ref(&ep))
                .unwrap()
                .is_extent_page()
        );
        assert!(
            !MdPage::with_descriptors(1, 1, std::slice::from_ref(&ep))
                .unwrap()
                .is_extent_page()
        );
        let two = [ep, Descriptor::Flags(Flags::default())];
        assert!(
            !MdPage::with_descriptors(1, 0, &two)
                .unwrap()
                .is_extent_page()
        );
    }

    proptest! {
        #[test]
        fn prop_md_page_round_trip(id in any::<u64>(), seq in any::<u32>(), next in any::<u32>(),
                                   descs in proptest::collection::vec(arb_descriptor(), 0..8)) {
            if let Some(mut p) = MdPage::with_descriptors(id, seq, &descs) {
                p.next = next;
                let back = MdPage::decode(&p.encode()).unwrap();
                prop_assert_eq!(&back, &p);
                prop_assert_eq!(back.descriptors().unwrap(), descs);
            }
        }

        #[test]
        fn prop_md_page_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 4096)) {
            prop_assert!(MdPage::decode(&bytes).is_err() || MdPage::decode(&bytes).is_ok());
        }

        #[test]
        fn prop_md_page_with_good_crc_never_panics(body in proptest::collection::vec(any::<u8>(), 4092)) {
            let mut b = [0u8; PAGE_SIZE];
            b[..4092].copy_from_slice(&body);
            let crc = page_crc(&b);
            b[4092..].copy_from_slice(&crc.to_le_bytes());
            let p = MdPage::decode(&b).unwrap();
            let _ = p.descriptors();
            let _ = p.is_extent_page();
        }
    }
}
