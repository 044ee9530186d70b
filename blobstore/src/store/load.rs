//! Loading a store (`spdk_bs_load`). After a clean unload the masks are read and checked
//! against the metadata; otherwise (`clean` = 0, no blob-id mask, or `force_recover`) they are
//! rebuilt from it (`bs_recover`): every metadata page is read, a page with sequence number 0
//! at the index its blob id names starts a blob, and its chain and extent pages say which
//! pages and clusters are in use.
//!
//! Load never writes to a store it could not read: the super block, the masks and every
//! blob are checked first, and only then are interrupted snapshots repaired (`snapshot.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::bitarray::BitArray;
use super::blob::Blob;
use super::geometry::Geometry;
use super::maps::Maps;
use super::serialize::{apply_extent_page, check_clusters, parse_chain};
use super::snapshot::plan_fixups;
use super::{Blobstore, LoadOptions};
use crate::device::BlobDevice;
use crate::format::{BSTYPE_LEN, Mask, MaskType, MdPage, PAGE_SIZE, SuperBlock, page_to_blobid};
use crate::{Error, Result};

/// Metadata pages read at once while scanning for blobs.
const SCAN_BATCH: u32 = 256;

/// Reads one metadata page and checks its CRC.
fn read_md_page(dev: &mut impl BlobDevice, geo: &Geometry, page: u32) -> Result<MdPage> {
    if page >= geo.md_len {
        return Err(Error::BadSuperBlock(format!(
            "metadata page {page} is past the region ({})",
            geo.md_len
        )));
    }
    let mut buf = vec![0u8; PAGE_SIZE];
    dev.read(geo.md_page_offset(page), &mut buf)?;
    MdPage::decode(&buf).map_err(|e| e.at_page(page))
}

/// Reads a blob from its first page: the chain (ids, sequence numbers, no loop, all
/// inside the region), then its extent pages.
fn read_blob(dev: &mut impl BlobDevice, geo: &Geometry, root: u32) -> Result<Blob> {
    let id = page_to_blobid(root);
    let first = read_md_page(dev, geo, root)?;
    if first.sequence_num != 0 || first.id != id {
        return Err(Error::corrupt(
            id,
            format!(
                "page {root} is not its first page (id {:#x}, sequence {})",
                first.id, first.sequence_num
            ),
        ));
    }
    let mut seen = BTreeSet::from([root]);
    let mut chain = vec![(root, first)];
    loop {
        let next = chain.last().expect("has the first page").1.next;
        if next == crate::format::INVALID_MD_PAGE {
            break;
        }
        if !seen.insert(next) {
            return Err(Error::corrupt(
                id,
                format!("metadata chain loops back to page {next}"),
            ));
        }
        let page = read_md_page(dev, geo, next)?;
        let seq = chain.len() as u32;
        if page.id != id || page.sequence_num != seq {
            return Err(Error::corrupt(
                id,
                format!(
                    "chain page {next} has id {:#x} sequence {}, expected {id:#x} sequence {seq}",
                    page.id, page.sequence_num
                ),
            ));
        }
        chain.push((next, page));
    }
    let mut blob = parse_chain(id, &chain)?;
    for ep in 0..blob.extent_pages.len() {
        let p = blob.extent_pages[ep];
        if p != 0 {
            let page = read_md_page(dev, geo, p)?;
            apply_extent_page(&mut blob, ep, p, &page)?;
        }
    }
    check_clusters(&blob, geo)?;
    Ok(blob)
}

/// Recovery's scan: the first page of every blob.
fn scan_roots(dev: &mut impl BlobDevice, geo: &Geometry) -> Result<Vec<u32>> {
    let mut roots = Vec::new();
    let mut buf = vec![0u8; SCAN_BATCH as usize * PAGE_SIZE];
    for batch in (0..geo.md_len).step_by(SCAN_BATCH as usize) {
        let n = SCAN_BATCH.min(geo.md_len - batch);
        let bytes = &mut buf[..n as usize * PAGE_SIZE];
        dev.read(geo.md_page_offset(batch), bytes)?;
        for (i, raw) in bytes.chunks(PAGE_SIZE).enumerate() {
            let idx = batch + i as u32;
            // A page that fails its CRC is free or torn: not a committed first page.
            if let Ok(p) = MdPage::decode(raw)
                && p.sequence_num == 0
                && p.id == page_to_blobid(idx)
                && !p.is_extent_page()
            {
                roots.push(idx);
            }
        }
    }
    Ok(roots)
}

fn read_mask(
    dev: &mut impl BlobDevice,
    start: u32,
    len: u32,
    kind: MaskType,
    bits: u32,
    exact: bool,
) -> Result<BitArray> {
    let mut region = vec![0u8; len as usize * PAGE_SIZE];
    dev.read(u64::from(start) * PAGE_SIZE as u64, &mut region)?;
    let m = Mask::decode(&region, kind)?;
    let n = m.bits.len() as u32;
    if n < bits || (exact && n != bits) {
        return Err(Error::BadMask(format!(
            "{kind:?} mask has {n} bits, expected {bits}"
        )));
    }
    // A used-cluster mask longer than the store (an interrupted grow) is cut to it, as SPDK does.
    Ok(BitArray::from_bits(&m.bits[..bits as usize]))
}

fn read_masks(dev: &mut impl BlobDevice, sb: &SuperBlock, geo: &Geometry) -> Result<Maps> {
    Ok(Maps {
        pages: read_mask(
            dev,
            sb.used_page_mask_start,
            sb.used_page_mask_len,
            MaskType::UsedPages,
            geo.md_len,
            true,
        )?,
        blobids: read_mask(
            dev,
            sb.used_blobid_mask_start,
            sb.used_blobid_mask_len,
            MaskType::UsedBlobIds,
            geo.md_len,
            true,
        )?,
        clusters: read_mask(
            dev,
            sb.used_cluster_mask_start,
            sb.used_cluster_mask_len,
            MaskType::UsedClusters,
            geo.total_clusters,
            false,
        )?,
    })
}

impl<D: BlobDevice> Blobstore<D> {
    /// Opens the store on `dev`, recovering it if it was not unloaded cleanly.
    pub fn load(mut dev: D, opts: &LoadOptions) -> Result<Blobstore<D>> {
        let mut buf = vec![0u8; PAGE_SIZE];
        dev.read(0, &mut buf)?;
        let sb = SuperBlock::decode(&buf)?;
        if opts.bstype != [0; BSTYPE_LEN] && opts.bstype != sb.bstype {
            return Err(Error::BstypeMismatch {
                found: sb.bstype,
                expected: opts.bstype,
            });
        }
        let geo = Geometry::from_super(&sb, &dev)?;
        let recover = sb.clean == 0 || sb.used_blobid_mask_len == 0 || opts.force_recover;
        let masks = if recover {
            None
        } else {
            Some(read_masks(&mut dev, &sb, &geo)?)
        };
        let roots: Vec<u32> = match &masks {
            None => scan_roots(&mut dev, &geo)?,
            Some(m) => (0..geo.md_len).filter(|&p| m.blobids.get(p)).collect(),
        };
        let mut blobs = BTreeMap::new();
        for root in roots {
            let blob = read_blob(&mut dev, &geo, root)?;
            blobs.insert(blob.id, blob);
        }
        let fixups = plan_fixups(&mut blobs);
        let owned = Maps::owned(&geo, &blobs)?;
        let maps = match masks {
            Some(m) => {
                owned.covered_by(&m)?;
                m
            }
            None => owned,
        };
        let mut bs = Blobstore {
            dev,
            geo,
            sb,
            used_md_pages: maps.pages,
            used_blobids: maps.blobids,
            used_clusters: maps.clusters,
            blobs,
        };
        bs.apply_fixups(fixups)?;
        Ok(bs)
    }
}
