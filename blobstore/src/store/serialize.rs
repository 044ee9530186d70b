//! A blob to and from its metadata: the chain of pages (`blob_serialize`, `blob_parse`)
//! and its extent pages (`blob_serialize_extent_page`, `blob_parse_extent_page`).
//!
//! The first page holds the flags, then the xattrs, the internal xattrs, and the cluster
//! map: an extent table (the blob's size and where its extent pages are) or, for blobs made
//! without one, extent RLE. What does not fit a page continues on the next.

use super::blob::{Blob, Xattr};
use super::geometry::Geometry;
use crate::format::descriptor::{ET_ENTRY_LEN, ET_FIXED_LEN, RLE_ENTRY_LEN};
use crate::format::{
    BLOB_EXTENT_TABLE, BLOB_EXTERNAL_SNAPSHOT, BLOB_INVALID_FLAGS_MASK, DESCRIPTOR_HEADER_SIZE,
    DESCRIPTORS_SIZE, Descriptor, EXTENTS_PER_EP, ExtentTableEntry, Flags, MdPage, RleExtent,
};
use crate::{BlobId, Error, Result};

/// The largest blob this implementation maps in memory, in clusters: a bound on what a
/// corrupt descriptor can make it allocate (2^28 clusters = a 1 GiB map).
pub(crate) const MAX_BLOB_CLUSTERS: u64 = 1 << 28;

/// Packs descriptors into pages, starting a new page when one does not fit.
struct ChainBuilder {
    id: BlobId,
    pages: Vec<Vec<Descriptor>>,
    used: usize,
}

impl ChainBuilder {
    fn room(&self) -> usize {
        DESCRIPTORS_SIZE - self.used
    }

    fn new_page(&mut self) {
        self.pages.push(Vec::new());
        self.used = 0;
    }

    fn push(&mut self, d: Descriptor) {
        if d.encoded_len() > self.room() {
            self.new_page();
        }
        self.used += d.encoded_len();
        self.pages
            .last_mut()
            .expect("a chain has a first page")
            .push(d);
    }

    /// Pushes `items` as descriptors of `fixed` body bytes plus `entry` bytes an item, as
    /// many items to a descriptor as the page has room for, continuing on new pages
    /// (`blob_serialize_extent_table`, `blob_serialize_extents_rle`). With `at_least_one`,
    /// one descriptor is written even for no items.
    fn push_split<T>(
        &mut self,
        items: &[T],
        fixed: usize,
        entry: usize,
        at_least_one: bool,
        make: impl Fn(&[T]) -> Descriptor,
    ) {
        let fixed = DESCRIPTOR_HEADER_SIZE + fixed;
        let mut at = 0;
        while at < items.len() || (at_least_one && at == 0 && items.is_empty()) {
            let wanted = usize::from(at < items.len());
            if self.room() < fixed + wanted * entry {
                self.new_page();
            }
            let n = ((self.room() - fixed) / entry).min(items.len() - at);
            self.push(make(&items[at..at + n]));
            at += n;
            if items.is_empty() {
                break;
            }
        }
    }

    fn finish(self) -> Vec<MdPage> {
        let id = self.id;
        self.pages
            .iter()
            .enumerate()
            .map(|(i, descs)| MdPage::with_descriptors(id, i as u32, descs).expect("packed to fit"))
            .collect()
    }
}

/// The bytes an xattr descriptor takes.
pub(crate) fn xattr_len(name: &str, value: &[u8]) -> usize {
    DESCRIPTOR_HEADER_SIZE + 4 + name.len() + value.len()
}

/// Checks that an xattr fits one page, as SPDK requires.
pub(crate) fn check_xattr(name: &str, value: &[u8]) -> Result<()> {
    let len = xattr_len(name, value);
    if len > DESCRIPTORS_SIZE || name.len() > u16::MAX as usize || value.len() > u16::MAX as usize {
        return Err(Error::XattrTooLarge {
            name: name.to_string(),
            len: name.len() + value.len(),
        });
    }
    Ok(())
}

/// The blob's metadata chain, page `i` with sequence number `i`; `next` and the CRC are
/// filled when the pages are placed (`persist.rs`).
pub(crate) fn serialize(blob: &Blob) -> Result<Vec<MdPage>> {
    let mut b = ChainBuilder {
        id: blob.id,
        pages: vec![Vec::new()],
        used: 0,
    };
    b.push(Descriptor::Flags(blob.disk_flags()));
    for (list, internal) in [(&blob.xattrs, false), (&blob.internal_xattrs, true)] {
        for (name, value) in list {
            check_xattr(name, value)?;
            b.push(Descriptor::Xattr {
                internal,
                name: name.as_bytes().to_vec(),
                value: value.clone(),
            });
        }
    }
    if blob.uses_extent_table() {
        push_extent_table(&mut b, blob);
    } else {
        push_extent_rle(&mut b, blob);
    }
    Ok(b.finish())
}

/// Extent table entries: allocated extent pages one by one, unallocated ones as runs.
fn extent_table_entries(eps: &[u32]) -> Vec<ExtentTableEntry> {
    let mut out: Vec<ExtentTableEntry> = Vec::new();
    for &p in eps {
        match out.last_mut() {
            Some(e) if p == 0 && e.page_idx == 0 => e.num_pages += 1,
            _ => out.push(ExtentTableEntry {
                page_idx: p,
                num_pages: 1,
            }),
        }
    }
    out
}

fn push_extent_table(b: &mut ChainBuilder, blob: &Blob) {
    let entries = extent_table_entries(&blob.extent_pages);
    let num_clusters = blob.clusters.len() as u64;
    // At least one extent table descriptor is always written, even with no entries.
    b.push_split(&entries, ET_FIXED_LEN, ET_ENTRY_LEN, true, |part| {
        Descriptor::ExtentTable {
            num_clusters,
            entries: part.to_vec(),
        }
    });
}

/// Extent RLE runs: consecutive device clusters, and runs of unallocated clusters.
fn rle_runs(clusters: &[u32]) -> Vec<RleExtent> {
    let mut out: Vec<RleExtent> = Vec::new();
    for &c in clusters {
        match out.last_mut() {
            Some(e) if c == 0 && e.cluster_idx == 0 => e.length += 1,
            Some(e) if c != 0 && e.cluster_idx != 0 && e.cluster_idx + e.length == c => {
                e.length += 1
            }
            _ => out.push(RleExtent {
                cluster_idx: c,
                length: 1,
            }),
        }
    }
    out
}

fn push_extent_rle(b: &mut ChainBuilder, blob: &Blob) {
    let runs = rle_runs(&blob.clusters);
    b.push_split(&runs, 0, RLE_ENTRY_LEN, false, |part| {
        Descriptor::ExtentRle(part.to_vec())
    });
}

/// Extent page `ep` of a blob: sequence 0, no next, one `EXTENT_PAGE` descriptor with the
/// clusters from `ep * 512` to the end of the blob or of the page.
pub(crate) fn extent_page(blob: &Blob, ep: usize) -> MdPage {
    let start = ep * EXTENTS_PER_EP;
    let end = (start + EXTENTS_PER_EP).min(blob.clusters.len());
    let d = Descriptor::ExtentPage {
        start_cluster_idx: start as u32,
        clusters: blob.clusters[start..end].to_vec(),
    };
    MdPage::with_descriptors(blob.id, 0, &[d]).expect("512 extents fit a page")
}

/// Rebuilds a blob from its chain (pages already checked to be this blob's, in order).
/// Extent pages are applied afterwards with [`apply_extent_page`].
pub(crate) fn parse_chain(id: BlobId, chain: &[(u32, MdPage)]) -> Result<Blob> {
    let mut blob = Blob::new(id, Flags::default());
    blob.md_pages = chain.iter().map(|(p, _)| *p).collect();
    let mut table: Option<u64> = None;
    let mut rle = false;
    let mut flags_seen = false;
    for (page_idx, page) in chain {
        let descs = page.descriptors().map_err(|e| e.at_page(*page_idx))?;
        for d in descs {
            match d {
                Descriptor::Flags(f) => {
                    check_flags(id, f)?;
                    blob.flags = f;
                    flags_seen = true;
                }
                Descriptor::Xattr {
                    internal,
                    name,
                    value,
                } => {
                    let name = String::from_utf8(name)
                        .map_err(|_| Error::corrupt(id, "xattr name is not UTF-8"))?;
                    let list: &mut Vec<Xattr> = if internal {
                        &mut blob.internal_xattrs
                    } else {
                        &mut blob.xattrs
                    };
                    list.push((name, value));
                }
                Descriptor::ExtentRle(runs) => {
                    if table.is_some() {
                        return Err(Error::corrupt(id, "both extent RLE and an extent table"));
                    }
                    rle = true;
                    apply_rle(&mut blob, &runs)?;
                }
                Descriptor::ExtentTable {
                    num_clusters,
                    entries,
                } => {
                    if rle {
                        return Err(Error::corrupt(id, "both extent RLE and an extent table"));
                    }
                    if table.is_some_and(|n| n != num_clusters) {
                        return Err(Error::corrupt(
                            id,
                            "extent tables disagree on the blob's size",
                        ));
                    }
                    table = Some(num_clusters);
                    apply_extent_table(&mut blob, &entries)?;
                }
                // Extent pages are not part of a chain; SPDK's parser ignores them there too.
                Descriptor::ExtentPage { .. } | Descriptor::Unknown { .. } => {}
            }
        }
    }
    if !flags_seen {
        return Err(Error::corrupt(id, "no flags descriptor"));
    }
    if let Some(n) = table {
        finish_extent_table(&mut blob, n)?;
    } else {
        // Without an extent table the map is the RLE (or empty), whatever the flag says.
        blob.flags.invalid &= !BLOB_EXTENT_TABLE;
    }
    Ok(blob)
}

fn check_flags(id: BlobId, f: Flags) -> Result<()> {
    if f.invalid & !BLOB_INVALID_FLAGS_MASK != 0 {
        return Err(Error::Unsupported(format!(
            "blob {id:#x}: invalid_flags {:#x} has bits SPDK v25.09 does not know",
            f.invalid
        )));
    }
    if f.invalid & BLOB_EXTERNAL_SNAPSHOT != 0 {
        return Err(Error::Unsupported(format!(
            "blob {id:#x} is an external-snapshot clone"
        )));
    }
    Ok(())
}

fn apply_rle(blob: &mut Blob, runs: &[RleExtent]) -> Result<()> {
    let total: u64 = runs.iter().map(|r| u64::from(r.length)).sum();
    if total == 0 {
        return Err(Error::corrupt(
            blob.id,
            "extent RLE descriptor with no clusters",
        ));
    }
    if blob.clusters.len() as u64 + total > MAX_BLOB_CLUSTERS {
        return Err(Error::Unsupported(format!(
            "blob {:#x} larger than {MAX_BLOB_CLUSTERS} clusters",
            blob.id
        )));
    }
    for r in runs {
        if r.cluster_idx == 0 && !blob.is_thin_provisioned() {
            return Err(Error::corrupt(
                blob.id,
                "unallocated cluster in a thick blob",
            ));
        }
        for j in 0..r.length {
            let c = if r.cluster_idx == 0 {
                0
            } else {
                r.cluster_idx
                    .checked_add(j)
                    .ok_or_else(|| Error::corrupt(blob.id, "extent run wraps"))?
            };
            blob.clusters.push(c);
        }
    }
    Ok(())
}

fn apply_extent_table(blob: &mut Blob, entries: &[ExtentTableEntry]) -> Result<()> {
    for e in entries {
        if e.page_idx != 0 {
            if e.num_pages != 1 {
                return Err(Error::corrupt(
                    blob.id,
                    "extent table entry for an allocated page with num_pages != 1",
                ));
            }
            blob.extent_pages.push(e.page_idx);
        } else {
            if !blob.is_thin_provisioned() {
                return Err(Error::corrupt(
                    blob.id,
                    "unallocated extent page in a thick blob",
                ));
            }
            if blob.extent_pages.len() as u64 + u64::from(e.num_pages) > MAX_BLOB_CLUSTERS {
                return Err(Error::corrupt(blob.id, "extent table too long"));
            }
            blob.extent_pages
                .extend(std::iter::repeat_n(0, e.num_pages as usize));
        }
    }
    Ok(())
}

fn finish_extent_table(blob: &mut Blob, num_clusters: u64) -> Result<()> {
    if num_clusters > MAX_BLOB_CLUSTERS {
        return Err(Error::Unsupported(format!(
            "blob {:#x} larger than {MAX_BLOB_CLUSTERS} clusters",
            blob.id
        )));
    }
    blob.flags.invalid |= BLOB_EXTENT_TABLE;
    blob.clusters = vec![0; num_clusters as usize];
    if blob.extent_pages.len() != blob.extent_pages_needed() {
        return Err(Error::corrupt(
            blob.id,
            format!(
                "{} extent pages for {num_clusters} clusters",
                blob.extent_pages.len()
            ),
        ));
    }
    Ok(())
}

/// Fills the clusters extent page `ep` maps. The extent table's size is authoritative:
/// entries past the blob's end (left by a shrink whose page rewrite a crash cut off) are
/// ignored.
pub(crate) fn apply_extent_page(
    blob: &mut Blob,
    ep: usize,
    page_idx: u32,
    page: &MdPage,
) -> Result<()> {
    if !page.is_extent_page() {
        return Err(Error::corrupt(
            blob.id,
            format!("metadata page {page_idx} is not an extent page"),
        ));
    }
    let Some(Descriptor::ExtentPage {
        start_cluster_idx,
        clusters,
    }) = page
        .descriptors()
        .map_err(|e| e.at_page(page_idx))?
        .into_iter()
        .next()
    else {
        return Err(Error::corrupt(
            blob.id,
            format!("metadata page {page_idx} is not an extent page"),
        ));
    };
    let start = ep * EXTENTS_PER_EP;
    if start_cluster_idx as usize != start || clusters.len() > EXTENTS_PER_EP {
        return Err(Error::corrupt(
            blob.id,
            format!(
                "extent page {page_idx} starts at cluster {start_cluster_idx}, expected {start}"
            ),
        ));
    }
    let end = (start + clusters.len()).min(blob.clusters.len());
    blob.clusters[start..end].copy_from_slice(&clusters[..end - start]);
    Ok(())
}

/// Checks that every cluster the blob maps is a data cluster of the device, and that a
/// thick blob has all of its clusters.
pub(crate) fn check_clusters(blob: &Blob, geo: &Geometry) -> Result<()> {
    for &c in &blob.clusters {
        if c == 0 {
            if !blob.is_thin_provisioned() {
                return Err(Error::corrupt(
                    blob.id,
                    "unallocated cluster in a thick blob",
                ));
            }
        } else if c < geo.md_clusters || c >= geo.total_clusters {
            return Err(Error::ExtentPastDevice {
                id: blob.id,
                cluster: c,
                first: geo.md_clusters,
                total: geo.total_clusters,
            });
        }
    }
    for &p in blob.md_pages.iter().chain(&blob.extent_pages) {
        if p >= geo.md_len {
            return Err(Error::corrupt(
                blob.id,
                format!("metadata page {p} is past the region ({})", geo.md_len),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BLOB_THIN_PROV, page_to_blobid};

    fn blob(clusters: Vec<u32>, et: bool) -> Blob {
        let mut invalid = BLOB_THIN_PROV;
        if et {
            invalid |= BLOB_EXTENT_TABLE;
        }
        let mut b = Blob::new(
            page_to_blobid(3),
            Flags {
                invalid,
                ..Flags::default()
            },
        );
        b.clusters = clusters;
        if et {
            b.extent_pages = vec![0; b.extent_pages_needed()];
        }
        b
    }

    fn round_trip(b: &Blob) -> Blob {
        let pages = serialize(b).unwrap();
        let chain: Vec<(u32, MdPage)> = pages
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i as u32 + 10, p))
            .collect();
        let mut out = parse_chain(b.id, &chain).unwrap();
        out.md_pages.clear();
        out
    }

    #[test]
    fn rle_round_trip_and_runs() {
        let b = blob(vec![5, 6, 7, 0, 0, 9, 0], false);
        assert_eq!(
            rle_runs(&b.clusters),
            vec![
                RleExtent {
                    cluster_idx: 5,
                    length: 3
                },
                RleExtent {
                    cluster_idx: 0,
                    length: 2
                },
                RleExtent {
                    cluster_idx: 9,
                    length: 1
                },
                RleExtent {
                    cluster_idx: 0,
                    length: 1
                },
            ]
        );
        assert_eq!(round_trip(&b), b);
    }

    #[test]
    fn long_maps_and_xattrs_spill_onto_more_pages() {
        // 2000 alternating runs need 16000 bytes of RLE: four or five pages.
        let clusters: Vec<u32> = (0..2000)
            .map(|i| if i % 2 == 0 { 100 + i * 2 } else { 0 })
            .collect();
        let mut b = blob(clusters, false);
        for i in 0..5 {
            b.xattrs.push((format!("x{i}"), vec![i as u8; 1500]));
        }
        let pages = serialize(&b).unwrap();
        assert!(pages.len() >= 6, "{} pages", pages.len());
        assert!(
            pages
                .iter()
                .enumerate()
                .all(|(i, p)| p.sequence_num == i as u32)
        );
        assert_eq!(round_trip(&b), b);
        // An extent table of 3000 extent pages spills too.
        let mut b = blob(vec![0; 3000 * EXTENTS_PER_EP], true);
        for (i, p) in b.extent_pages.iter_mut().enumerate() {
            *p = if i % 2 == 0 { i as u32 + 1 } else { 0 };
        }
        let pages = serialize(&b).unwrap();
        assert!(pages.len() >= 3);
        let back = round_trip(&b);
        assert_eq!(back.extent_pages, b.extent_pages);
        assert_eq!(back.clusters.len(), b.clusters.len());
    }

    #[test]
    fn extent_page_round_trip() {
        let mut b = blob(
            (0..600)
                .map(|i| if i % 3 == 0 { 0 } else { i + 10 })
                .collect(),
            true,
        );
        b.extent_pages = vec![7, 8];
        let mut back = round_trip(&b);
        for ep in 0..2 {
            apply_extent_page(&mut back, ep, b.extent_pages[ep], &extent_page(&b, ep)).unwrap();
        }
        assert_eq!(back.clusters, b.clusters);
        // An extent page placed at the wrong index is refused.
        assert!(apply_extent_page(&mut back, 1, 7, &extent_page(&b, 0)).is_err());
    }

    #[test]
    fn unknown_and_external_flags_are_refused() {
        let mut b = blob(vec![], true);
        b.flags.invalid |= 1 << 10;
        let chain = vec![(3, serialize(&b).unwrap().remove(0))];
        assert!(matches!(
            parse_chain(b.id, &chain),
            Err(Error::Unsupported(_))
        ));
        b.flags.invalid = BLOB_EXTERNAL_SNAPSHOT | BLOB_THIN_PROV;
        let chain = vec![(3, serialize(&b).unwrap().remove(0))];
        assert!(matches!(
            parse_chain(b.id, &chain),
            Err(Error::Unsupported(_))
        ));
    }
}
