//! The descriptors packed into a metadata page's 4072-byte area. Each starts with a packed
//! header `{ uint8_t type; uint32_t length; }` (`struct spdk_blob_md_descriptor`), `length`
//! counting the body after the header. A header of type 0 (padding) and length 0 ends the
//! page; padding with a length is skipped, as are types this version does not know (SPDK
//! leaves it to a flag in `invalid_flags` to refuse a blob a newer feature changed).

use super::DESCRIPTOR_HEADER_SIZE;
use super::bytes::{Reader, Writer};
use crate::{Error, Result};

/// `SPDK_MD_DESCRIPTOR_TYPE_PADDING`.
pub const TYPE_PADDING: u8 = 0;
/// `SPDK_MD_DESCRIPTOR_TYPE_EXTENT_RLE`.
pub const TYPE_EXTENT_RLE: u8 = 1;
/// `SPDK_MD_DESCRIPTOR_TYPE_XATTR`.
pub const TYPE_XATTR: u8 = 2;
/// `SPDK_MD_DESCRIPTOR_TYPE_FLAGS`.
pub const TYPE_FLAGS: u8 = 3;
/// `SPDK_MD_DESCRIPTOR_TYPE_XATTR_INTERNAL`.
pub const TYPE_XATTR_INTERNAL: u8 = 4;
/// `SPDK_MD_DESCRIPTOR_TYPE_EXTENT_TABLE`.
pub const TYPE_EXTENT_TABLE: u8 = 5;
/// `SPDK_MD_DESCRIPTOR_TYPE_EXTENT_PAGE`.
pub const TYPE_EXTENT_PAGE: u8 = 6;

/// Body of the flags descriptor: three u64 (`struct spdk_blob_md_descriptor_flags`).
pub const FLAGS_BODY_LEN: u32 = 24;
/// Bytes of one extent-RLE entry `{ cluster_idx; length; }`.
pub const RLE_ENTRY_LEN: usize = 8;
/// Bytes of one extent-table entry `{ page_idx; num_pages; }`.
pub const ET_ENTRY_LEN: usize = 8;
/// Bytes of the extent table's `num_clusters` before its entries.
pub const ET_FIXED_LEN: usize = 8;
/// Bytes of the extent page's `start_cluster_idx` before its entries.
pub const EP_FIXED_LEN: usize = 4;
/// Bytes of the xattr's `name_length` and `value_length`.
pub const XATTR_FIXED_LEN: usize = 4;

/// The three flag words of a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags {
    /// A set bit this version does not know makes the blob unopenable.
    pub invalid: u64,
    /// A set bit this version does not know makes the blob read-only.
    pub data_ro: u64,
    /// A set bit this version does not know makes the metadata read-only.
    pub md_ro: u64,
}

/// One run of an extent RLE: `length` clusters from `cluster_idx` (0: unallocated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RleExtent {
    /// First cluster of the run on the device, 0 for a run of unallocated clusters.
    pub cluster_idx: u32,
    /// Clusters in the run.
    pub length: u32,
}

/// One extent-table entry: the metadata page of an extent page, or a run of `num_pages`
/// unallocated extent pages when `page_idx` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentTableEntry {
    /// Metadata page index of the extent page, 0 for unallocated.
    pub page_idx: u32,
    /// Extent pages this entry stands for (1 for an allocated one).
    pub num_pages: u32,
}

/// A decoded descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descriptor {
    /// A name/value pair, user-visible or internal (`XATTR`, `XATTR_INTERNAL`).
    Xattr {
        /// `XATTR_INTERNAL` rather than `XATTR`.
        internal: bool,
        /// The name's bytes (no terminator on disk).
        name: Vec<u8>,
        /// The value's bytes.
        value: Vec<u8>,
    },
    /// The flag words (`FLAGS`).
    Flags(Flags),
    /// A run-length list of the blob's clusters (`EXTENT_RLE`).
    ExtentRle(Vec<RleExtent>),
    /// The blob's size in clusters and where its extent pages are (`EXTENT_TABLE`).
    ExtentTable {
        /// Clusters in the blob.
        num_clusters: u64,
        /// Run-length list of extent pages.
        entries: Vec<ExtentTableEntry>,
    },
    /// Up to 512 clusters from `start_cluster_idx` (`EXTENT_PAGE`).
    ExtentPage {
        /// Blob cluster index of the first entry.
        start_cluster_idx: u32,
        /// Device cluster of each, 0 for unallocated.
        clusters: Vec<u32>,
    },
    /// A type this version does not know, kept as bytes.
    Unknown {
        /// The type byte.
        kind: u8,
        /// The body.
        body: Vec<u8>,
    },
}

impl Descriptor {
    /// The type byte.
    pub fn kind(&self) -> u8 {
        match self {
            Descriptor::Xattr {
                internal: false, ..
            } => TYPE_XATTR,
            Descriptor::Xattr { internal: true, .. } => TYPE_XATTR_INTERNAL,
            Descriptor::Flags(_) => TYPE_FLAGS,
            Descriptor::ExtentRle(_) => TYPE_EXTENT_RLE,
            Descriptor::ExtentTable { .. } => TYPE_EXTENT_TABLE,
            Descriptor::ExtentPage { .. } => TYPE_EXTENT_PAGE,
            Descriptor::Unknown { kind, .. } => *kind,
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Descriptor::Xattr { name, value, .. } => XATTR_FIXED_LEN + name.len() + value.len(),
            Descriptor::Flags(_) => FLAGS_BODY_LEN as usize,
            Descriptor::ExtentRle(e) => e.len() * RLE_ENTRY_LEN,
            Descriptor::ExtentTable { entries, .. } => ET_FIXED_LEN + entries.len() * ET_ENTRY_LEN,
            Descriptor::ExtentPage { clusters, .. } => EP_FIXED_LEN + clusters.len() * 4,
            Descriptor::Unknown { body, .. } => body.len(),
        }
    }

    /// Bytes the descriptor takes, header included.
    pub fn encoded_len(&self) -> usize {
        DESCRIPTOR_HEADER_SIZE + self.body_len()
    }

    /// Writes the descriptor at the start of `out`, which must hold `encoded_len()` bytes.
    pub fn encode_into(&self, out: &mut [u8]) {
        let mut w = Writer::new(out);
        w.u8(self.kind());
        w.u32(self.body_len() as u32);
        match self {
            Descriptor::Xattr { name, value, .. } => {
                w.u16(name.len() as u16);
                w.u16(value.len() as u16);
                w.bytes(name);
                w.bytes(value);
            }
            Descriptor::Flags(f) => {
                w.u64(f.invalid);
                w.u64(f.data_ro);
                w.u64(f.md_ro);
            }
            Descriptor::ExtentRle(extents) => {
                for e in extents {
                    w.u32(e.cluster_idx);
                    w.u32(e.length);
                }
            }
            Descriptor::ExtentTable {
                num_clusters,
                entries,
            } => {
                w.u64(*num_clusters);
                for e in entries {
                    w.u32(e.page_idx);
                    w.u32(e.num_pages);
                }
            }
            Descriptor::ExtentPage {
                start_cluster_idx,
                clusters,
            } => {
                w.u32(*start_cluster_idx);
                for c in clusters {
                    w.u32(*c);
                }
            }
            Descriptor::Unknown { body, .. } => w.bytes(body),
        }
    }

    /// Decodes every descriptor of a descriptor area, in order, up to the terminator
    /// (`blob_parse_page`'s walk). A descriptor that runs past the area, or whose length is
    /// wrong for its type, is an error; nothing here panics.
    pub fn decode_all(area: &[u8]) -> Result<Vec<Descriptor>> {
        let mut out = Vec::new();
        let mut cur = 0usize;
        while cur + DESCRIPTOR_HEADER_SIZE <= area.len() {
            let kind = area[cur];
            let length =
                u32::from_le_bytes([area[cur + 1], area[cur + 2], area[cur + 3], area[cur + 4]]);
            if kind == TYPE_PADDING && length == 0 {
                break;
            }
            let start = cur + DESCRIPTOR_HEADER_SIZE;
            let end = start
                .checked_add(length as usize)
                .filter(|&e| e <= area.len())
                .ok_or(Error::DescriptorPastPage {
                    offset: cur,
                    kind,
                    length,
                })?;
            if kind != TYPE_PADDING {
                out.push(Self::decode_body(kind, &area[start..end])?);
            }
            cur = end;
        }
        Ok(out)
    }

    fn decode_body(kind: u8, body: &[u8]) -> Result<Descriptor> {
        let length = body.len() as u32;
        let bad = || Error::BadDescriptorLength { kind, length };
        let mut r = Reader::new(body);
        let d = match kind {
            TYPE_FLAGS => {
                if length != FLAGS_BODY_LEN {
                    return Err(bad());
                }
                Descriptor::Flags(Flags {
                    invalid: r.u64().ok_or_else(bad)?,
                    data_ro: r.u64().ok_or_else(bad)?,
                    md_ro: r.u64().ok_or_else(bad)?,
                })
            }
            TYPE_XATTR | TYPE_XATTR_INTERNAL => {
                let name_len = r.u16().ok_or_else(bad)? as usize;
                let value_len = r.u16().ok_or_else(bad)? as usize;
                if body.len() != XATTR_FIXED_LEN + name_len + value_len {
                    return Err(bad());
                }
                Descriptor::Xattr {
                    internal: kind == TYPE_XATTR_INTERNAL,
                    name: r.bytes(name_len).ok_or_else(bad)?.to_vec(),
                    value: r.bytes(value_len).ok_or_else(bad)?.to_vec(),
                }
            }
            TYPE_EXTENT_RLE => {
                if body.is_empty() || !body.len().is_multiple_of(RLE_ENTRY_LEN) {
                    return Err(bad());
                }
                let mut extents = Vec::with_capacity(body.len() / RLE_ENTRY_LEN);
                while let (Some(cluster_idx), Some(length)) = (r.u32(), r.u32()) {
                    extents.push(RleExtent {
                        cluster_idx,
                        length,
                    });
                }
                Descriptor::ExtentRle(extents)
            }
            TYPE_EXTENT_TABLE => {
                if body.len() < ET_FIXED_LEN
                    || !(body.len() - ET_FIXED_LEN).is_multiple_of(ET_ENTRY_LEN)
                {
                    return Err(bad());
                }
                let num_clusters = r.u64().ok_or_else(bad)?;
                let mut entries = Vec::new();
                while let (Some(page_idx), Some(num_pages)) = (r.u32(), r.u32()) {
                    entries.push(ExtentTableEntry {
                        page_idx,
                        num_pages,
                    });
                }
                Descriptor::ExtentTable {
                    num_clusters,
                    entries,
                }
            }
            TYPE_EXTENT_PAGE => {
                if body.len() <= EP_FIXED_LEN || !(body.len() - EP_FIXED_LEN).is_multiple_of(4) {
                    return Err(bad());
                }
                let start_cluster_idx = r.u32().ok_or_else(bad)?;
                let mut clusters = Vec::new();
                while let Some(c) = r.u32() {
                    clusters.push(c);
                }
                Descriptor::ExtentPage {
                    start_cluster_idx,
                    clusters,
                }
            }
            _ => Descriptor::Unknown {
                kind,
                body: body.to_vec(),
            },
        };
        Ok(d)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::DESCRIPTORS_SIZE;
    use proptest::prelude::*;

    #[test]
    fn layouts_are_spdk() {
        // struct spdk_blob_md_descriptor_flags: type@0, length@1, invalid@5, data_ro@13, md_ro@21.
        let d = Descriptor::Flags(Flags {
            invalid: 0x0102,
            data_ro: 0x03,
            md_ro: 0x04,
        });
        let mut b = [0u8; 29];
        d.encode_into(&mut b);
        assert_eq!(d.encoded_len(), 29);
        assert_eq!(b[0], 3);
        assert_eq!(u32::from_le_bytes(b[1..5].try_into().unwrap()), 24);
        assert_eq!(u64::from_le_bytes(b[5..13].try_into().unwrap()), 0x0102);
        assert_eq!(b[13], 3);
        assert_eq!(b[21], 4);

        // struct spdk_blob_md_descriptor_xattr: name_length@5, value_length@7, name@9.
        let d = Descriptor::Xattr {
            internal: true,
            name: b"name".to_vec(),
            value: vec![9; 3],
        };
        let mut b = vec![0u8; d.encoded_len()];
        d.encode_into(&mut b);
        assert_eq!(b[0], 4);
        assert_eq!(u32::from_le_bytes(b[1..5].try_into().unwrap()), 4 + 4 + 3);
        assert_eq!(u16::from_le_bytes([b[5], b[6]]), 4);
        assert_eq!(u16::from_le_bytes([b[7], b[8]]), 3);
        assert_eq!(&b[9..13], b"name");
        assert_eq!(&b[13..16], &[9, 9, 9]);

        // extent table: num_clusters@5 (u64), entries from 13.
        let d = Descriptor::ExtentTable {
            num_clusters: 1000,
            entries: vec![ExtentTableEntry {
                page_idx: 7,
                num_pages: 1,
            }],
        };
        let mut b = vec![0u8; d.encoded_len()];
        d.encode_into(&mut b);
        assert_eq!((b[0], b.len()), (5, 21));
        assert_eq!(u64::from_le_bytes(b[5..13].try_into().unwrap()), 1000);
        assert_eq!(u32::from_le_bytes(b[13..17].try_into().unwrap()), 7);

        // extent page: start_cluster_idx@5, cluster_idx[] from 9; 512 of them fit a page.
        let d = Descriptor::ExtentPage {
            start_cluster_idx: 512,
            clusters: vec![3; 512],
        };
        assert_eq!(d.encoded_len(), 9 + 2048);
        assert!(d.encoded_len() <= DESCRIPTORS_SIZE);
        let mut b = vec![0u8; d.encoded_len()];
        d.encode_into(&mut b);
        assert_eq!(b[0], 6);
        assert_eq!(u32::from_le_bytes(b[5..9].try_into().unwrap()), 512);

        // extent rle: entries from 5.
        let d = Descriptor::ExtentRle(vec![RleExtent {
            cluster_idx: 5,
            length: 2,
        }]);
        let mut b = vec![0u8; d.encoded_len()];
        d.encode_into(&mut b);
        assert_eq!(b, [1, 8, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0]);
    }

    #[test]
    fn bad_descriptors_are_named() {
        let mut area = [0u8; 64];
        area[0] = TYPE_XATTR;
        area[1..5].copy_from_slice(&100u32.to_le_bytes());
        assert!(matches!(
            Descriptor::decode_all(&area),
            Err(Error::DescriptorPastPage { offset: 0, .. })
        ));
        area[1..5].copy_from_slice(&10u32.to_le_bytes());
        area[5] = 200; // name_length larger than the body
        assert!(matches!(
            Descriptor::decode_all(&area),
            Err(Error::BadDescriptorLength { kind: 2, .. })
        ));
        let mut area = [0u8; 64];
        area[0] = TYPE_FLAGS;
        area[1] = 23;
        assert!(matches!(
            Descriptor::decode_all(&area),
            Err(Error::BadDescriptorLength {
                kind: 3,
                length: 23
            })
        ));
        let mut area = [0u8; 64];
        area[0] = TYPE_EXTENT_PAGE;
        area[1] = 4; // start only, no entries
        assert!(Descriptor::decode_all(&area).is_err());
        // Padding with a length is skipped; an unknown type is kept.
        let mut area = [0u8; 64];
        area[1] = 3;
        area[8] = 99;
        area[9] = 2;
        assert_eq!(
            Descriptor::decode_all(&area).unwrap(),
            vec![Descriptor::Unknown {
                kind: 99,
                body: vec![0, 0]
            }]
        );
    }

    pub(crate) fn arb_descriptor() -> impl Strategy<Value = Descriptor> {
        let bytes = |n| proptest::collection::vec(any::<u8>(), 0..n);
        prop_oneof![
            (any::<bool>(), bytes(40), bytes(80)).prop_map(|(internal, name, value)| {
                Descriptor::Xattr {
                    internal,
                    name,
                    value,
                }
            }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(invalid, data_ro, md_ro)| {
                Descriptor::Flags(Flags {
                    invalid,
                    data_ro,
                    md_ro,
                })
            }),
            proptest::collection::vec((any::<u32>(), any::<u32>()), 1..30).prop_map(|v| {
                Descriptor::ExtentRle(
                    v.into_iter()
                        .map(|(cluster_idx, length)| RleExtent {
                            cluster_idx,
                            length,
                        })
                        .collect(),
                )
            }),
            (
                any::<u64>(),
                proptest::collection::vec((any::<u32>(), any::<u32>()), 0..30)
            )
                .prop_map(|(n, v)| {
                    Descriptor::ExtentTable {
                        num_clusters: n,
                        entries: v
                            .into_iter()
                            .map(|(page_idx, num_pages)| ExtentTableEntry {
                                page_idx,
                                num_pages,
                            })
                            .collect(),
                    }
                }),
            (
                any::<u32>(),
                proptest::collection::vec(any::<u32>(), 1..100)
            )
                .prop_map(|(start_cluster_idx, clusters)| Descriptor::ExtentPage {
                    start_cluster_idx,
                    clusters
                }),
            (7u8..=255, bytes(30)).prop_map(|(kind, body)| Descriptor::Unknown { kind, body }),
        ]
    }

    proptest! {
        #[test]
        fn prop_descriptors_round_trip(descs in proptest::collection::vec(arb_descriptor(), 0..12)) {
            let mut area = [0u8; DESCRIPTORS_SIZE];
            let mut at = 0;
            let mut kept = Vec::new();
            for d in descs {
                if at + d.encoded_len() > area.len() { break; }
                d.encode_into(&mut area[at..]);
                at += d.encoded_len();
                kept.push(d);
            }
            prop_assert_eq!(Descriptor::decode_all(&area).unwrap(), kept);
        }

        #[test]
        fn prop_descriptor_area_never_panics(area in proptest::collection::vec(any::<u8>(), 0..DESCRIPTORS_SIZE)) {
            let _ = Descriptor::decode_all(&area);
        }
    }
}
