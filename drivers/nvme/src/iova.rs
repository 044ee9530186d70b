//! I/O virtual addresses: where each DMA mapping sits in the IOMMU's address space.
//!
//! The driver prefers IOVA = virtual address: a buffer's address is then its DMA address. An
//! IOMMU translates only addresses below its width, though, and VFIO reports the ranges it
//! accepts (`VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`): 39 bits on QEMU's default virtual IOMMU
//! and on several real platforms, while a process's mappings sit near 2^47. [`IovaSpace`]
//! places each mapping:
//!
//! - at IOVA = VA when the whole range lies in one valid range and that IOVA is free;
//! - otherwise in a block allocated from the valid ranges, first fit from the bottom, in whole
//!   huge pages ([`IOVA_GRANULE`]) and with IOVA ≡ VA (mod 2 MiB). The congruence keeps huge
//!   pages mappable as huge IOMMU pages and keeps every byte's offset within its page, so the
//!   mapping is translated by one offset (`iova − va`, a multiple of 2 MiB) for all its bytes:
//!   the PRP builder adds it (`crate::prp`), no lookup per page.
//!
//! Two live mappings never share a virtual address (an overlap is `EEXIST`, as VFIO says for
//! IOVA = VA): a virtual address then names one mapping, and `release` finds it exactly.
//!
//! Pure bookkeeping, no system calls: VFIO (`crate::vfio`) and the emulator's IOMMU
//! (`crate::emu`) both place their mappings with it.

use std::collections::BTreeMap;

use crate::error::NvmeError;

/// Granule of allocated IOVA blocks: one 2 MiB huge page.
pub const IOVA_GRANULE: u64 = 2 << 20;

/// Allocated blocks start at or above this address, so no mapping gets IOVA 0 (a zero PRP
/// entry reads as "none" in a trace).
const IOVA_FLOOR: u64 = IOVA_GRANULE;

/// One live mapping.
#[derive(Clone, Copy, Debug)]
struct Placed {
    len: u64,
    iova: u64,
    /// Start of the IOVA interval it holds in `taken` (the block, for an allocated mapping).
    block: u64,
}

/// An IOVA interval in use: `[start, end)` (a block may be larger than the mapping in it).
#[derive(Clone, Copy, Debug)]
struct Taken {
    end: u64,
    iova: u64,
    len: u64,
    va: u64,
}

/// The IOVA space of one IOMMU domain (a VFIO container): its valid ranges and the mappings
/// placed in it.
#[derive(Debug, Default)]
pub struct IovaSpace {
    /// Valid IOVA ranges `(first, last)`, sorted; `None` when the IOMMU did not say (every
    /// mapping then gets IOVA = VA and the kernel decides).
    ranges: Option<Vec<(u64, u64)>>,
    /// Live mappings by virtual address (disjoint).
    by_va: BTreeMap<u64, Placed>,
    /// IOVA intervals in use by start (disjoint).
    taken: BTreeMap<u64, Taken>,
    /// Live mappings placed away from their virtual address.
    translated: usize,
}

impl IovaSpace {
    /// A space with the valid ranges `(first, last)` an IOMMU reported, or `None` when it
    /// reported none. Empty and inverted ranges are dropped.
    pub fn new(ranges: Option<Vec<(u64, u64)>>) -> IovaSpace {
        let ranges = ranges.map(|mut r| {
            r.retain(|&(s, e)| s <= e);
            r.sort_unstable();
            r
        });
        IovaSpace {
            ranges,
            ..IovaSpace::default()
        }
    }

    /// The valid ranges, when known.
    pub fn ranges(&self) -> Option<&[(u64, u64)]> {
        self.ranges.as_deref()
    }

    /// Live mappings.
    pub fn mappings(&self) -> usize {
        self.by_va.len()
    }

    /// Live mappings whose IOVA is not their virtual address.
    pub fn translated(&self) -> usize {
        self.translated
    }

    /// Chooses the IOVA of `len` bytes at virtual address `va` (both page aligned) and records
    /// the mapping until [`IovaSpace::release`].
    ///
    /// Fails with `EEXIST` when the range overlaps a live mapping's virtual addresses, and
    /// with [`NvmeError::IovaExhausted`] when it fits neither at IOVA = VA nor in any free
    /// block of the valid ranges.
    pub fn place(&mut self, va: u64, len: u64) -> Result<u64, NvmeError> {
        let last = va
            .checked_add(len.max(1) - 1)
            .ok_or_else(|| self.exhausted(va, len))?;
        if !self.va_free(va, last) {
            return Err(NvmeError::DmaMap {
                op: "map",
                iova: va,
                len: len as usize,
                source: std::io::Error::from_raw_os_error(libc::EEXIST),
            });
        }
        let (iova, block, end) = if self.identity_fits(va, last) {
            (va, va, last + 1)
        } else {
            let base = va & !(IOVA_GRANULE - 1);
            let span = (last + 1)
                .checked_next_multiple_of(IOVA_GRANULE)
                .ok_or_else(|| self.exhausted(va, len))?
                - base;
            let block = self.alloc(span).ok_or_else(|| self.exhausted(va, len))?;
            self.translated += 1;
            (block + (va - base), block, block + span)
        };
        self.by_va.insert(va, Placed { len, iova, block });
        self.taken.insert(block, Taken { end, iova, len, va });
        Ok(iova)
    }

    /// Forgets the mapping of exactly `len` bytes at `va`; returns its IOVA (`None`: no such
    /// mapping).
    pub fn release(&mut self, va: u64, len: u64) -> Option<u64> {
        let p = *self.by_va.get(&va).filter(|p| p.len == len)?;
        self.by_va.remove(&va);
        self.taken.remove(&p.block);
        if p.iova != va {
            self.translated -= 1;
        }
        Some(p.iova)
    }

    /// The IOVA of the live mapping of exactly `len` bytes at `va`.
    pub fn iova_of(&self, va: u64, len: u64) -> Option<u64> {
        self.by_va.get(&va).filter(|p| p.len == len).map(|p| p.iova)
    }

    /// The virtual address behind `len` bytes at `iova`, when they lie in one live mapping
    /// (what an IOMMU does on each DMA access; the emulator's device side uses it).
    pub fn translate(&self, iova: u64, len: u64) -> Option<u64> {
        let (_, t) = self.taken.range(..=iova).next_back()?;
        let off = iova.checked_sub(t.iova)?;
        (off.checked_add(len)? <= t.len).then_some(t.va + off)
    }

    /// Whether no live mapping uses a virtual address in `[va, last]`.
    fn va_free(&self, va: u64, last: u64) -> bool {
        self.by_va
            .range(..=last)
            .next_back()
            .is_none_or(|(&a, p)| a + p.len <= va)
    }

    /// Whether no IOVA in `[first, last]` is taken.
    fn iova_free(&self, first: u64, last: u64) -> bool {
        self.taken
            .range(..=last)
            .next_back()
            .is_none_or(|(_, t)| t.end <= first)
    }

    /// Whether `[va, last]` may be mapped at IOVA = VA: inside one valid range (any address
    /// when the IOMMU reported none), and free.
    fn identity_fits(&self, va: u64, last: u64) -> bool {
        match &self.ranges {
            None => true,
            Some(r) => r.iter().any(|&(s, e)| s <= va && last <= e) && self.iova_free(va, last),
        }
    }

    /// First fit: the lowest granule-aligned free block of `span` bytes inside one valid range.
    fn alloc(&self, span: u64) -> Option<u64> {
        for &(first, last) in self.ranges.as_deref().unwrap_or(&[]) {
            let mut cand = first
                .max(IOVA_FLOOR)
                .checked_next_multiple_of(IOVA_GRANULE)?;
            loop {
                let end = cand.checked_add(span - 1)?;
                if end > last {
                    break;
                }
                // Taken intervals are disjoint: only the last one starting at or before `end`
                // can reach into the candidate.
                match self.taken.range(..=end).next_back() {
                    Some((_, t)) if t.end > cand => {
                        cand = t.end.checked_next_multiple_of(IOVA_GRANULE)?;
                    }
                    _ => return Some(cand),
                }
            }
        }
        None
    }

    #[cold]
    fn exhausted(&self, va: u64, len: u64) -> NvmeError {
        let ranges = match &self.ranges {
            Some(r) => fmt_ranges(r),
            None => "not reported".into(),
        };
        NvmeError::IovaExhausted {
            va,
            len,
            ranges,
            mappings: self.mappings(),
            bytes: self.taken.iter().map(|(s, t)| t.end - s).sum(),
        }
    }
}

/// `first..=last, …` in hex, for messages.
pub(crate) fn fmt_ranges(r: &[(u64, u64)]) -> String {
    r.iter()
        .map(|(s, e)| format!("{s:#x}..={e:#x}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = IOVA_GRANULE;
    /// A process address above a 39-bit IOMMU's reach.
    const HIGH: u64 = 0x7f12_3440_0000;
    /// QEMU's 39-bit virtual IOMMU: everything below 2^39 but the interrupt window.
    fn qemu39() -> IovaSpace {
        IovaSpace::new(Some(vec![(0xfef0_0000, (1 << 39) - 1), (0, 0xfedf_ffff)]))
    }

    #[test]
    fn a_region_inside_the_ranges_keeps_iova_equal_to_va() {
        let mut s = qemu39();
        assert_eq!(s.place(0x40_0000, 0x1_0000).unwrap(), 0x40_0000);
        assert_eq!(s.place(0x10_0000_0000, 4096).unwrap(), 0x10_0000_0000);
        assert_eq!(s.translated(), 0);
        assert_eq!(s.mappings(), 2);
        // With no ranges reported every mapping is identity, wherever it is.
        let mut s = IovaSpace::new(None);
        assert_eq!(s.place(HIGH, 4096).unwrap(), HIGH);
    }

    #[test]
    fn a_region_outside_the_ranges_gets_a_block_congruent_mod_2_mib() {
        let mut s = qemu39();
        // Page aligned, not 2 MiB aligned, crossing a 2 MiB boundary: two granules.
        let va = HIGH + G - 8192;
        let iova = s.place(va, 16384).unwrap();
        assert_eq!(iova % G, va % G, "same offset in its huge page");
        assert_eq!(iova, G + (G - 8192), "first fit above the floor");
        assert_eq!(s.translated(), 1);
        // The next block starts after both granules.
        let iova2 = s.place(HIGH + 16 * G, G).unwrap();
        assert_eq!(iova2, 3 * G);
        assert_eq!(s.translate(iova + 100, 8), Some(va + 100));
        assert_eq!(s.translate(iova2, G), Some(HIGH + 16 * G));
        assert_eq!(
            s.translate(iova + 16384 - 4, 8),
            None,
            "past the mapping's end"
        );
        assert_eq!(
            s.translate(G, 8),
            None,
            "padding of the block is not mapped"
        );
    }

    #[test]
    fn allocation_skips_holes_and_honours_range_edges() {
        // Ranges with holes, edges not 2 MiB aligned.
        let mut s = IovaSpace::new(Some(vec![
            (0x10_0000, 0x2f_ffff),   // 1 MiB..3 MiB: one granule (2..4 MiB) does not fit
            (0x50_0000, 0x9f_ffff),   // 5..10 MiB: granules at 6 and 8 MiB
            (0x100_0000, 0x1ff_ffff), // 16..32 MiB
        ]));
        assert_eq!(s.place(HIGH, G).unwrap(), 0x60_0000);
        assert_eq!(s.place(HIGH + 4 * G, G).unwrap(), 0x80_0000);
        // A 4 MiB region does not fit in what is left of the second range.
        assert_eq!(s.place(HIGH + 8 * G, 2 * G).unwrap(), 0x100_0000);
        // An identity mapping inside a range blocks the allocator there.
        assert_eq!(s.place(0x140_0000, 4096).unwrap(), 0x140_0000);
        assert_eq!(s.place(HIGH + 16 * G, G).unwrap(), 0x160_0000);
    }

    #[test]
    fn an_identity_candidate_taken_by_an_allocated_block_is_allocated_too() {
        let mut s = IovaSpace::new(Some(vec![(0, (1 << 30) - 1)]));
        assert_eq!(s.place(HIGH, G).unwrap(), G);
        // VA G would be identity, but IOVA G is taken.
        let iova = s.place(G, 4096).unwrap();
        assert_eq!(iova, 2 * G);
        assert_eq!(s.translated(), 2);
    }

    #[test]
    fn exhaustion_is_a_typed_error_and_free_allows_reuse() {
        let mut s = IovaSpace::new(Some(vec![(0, 4 * G - 1)]));
        // Granules 1..4 are available (IOVA 0 never is).
        assert_eq!(s.place(HIGH, 2 * G).unwrap(), G);
        assert_eq!(s.place(HIGH + 8 * G, G).unwrap(), 3 * G);
        match s.place(HIGH + 16 * G, 4096) {
            Err(NvmeError::IovaExhausted {
                len,
                mappings,
                bytes,
                ranges,
                ..
            }) => {
                assert_eq!((len, mappings, bytes), (4096, 2, 3 * G));
                assert_eq!(ranges, "0x0..=0x7fffff");
            }
            other => panic!("expected IovaExhausted, got {other:?}"),
        }
        assert_eq!(s.mappings(), 2, "a failed placement records nothing");
        // Freeing the first block makes room, at the same place.
        assert_eq!(s.release(HIGH, 2 * G), Some(G));
        assert_eq!(s.place(HIGH + 16 * G, 4096).unwrap(), G);
        assert_eq!(s.place(HIGH + 32 * G, 4096).unwrap(), 2 * G);
        assert!(matches!(
            s.place(HIGH + 40 * G, 4096),
            Err(NvmeError::IovaExhausted { .. })
        ));
        // Nothing valid at all: an IOMMU that reported empty ranges.
        let mut s = IovaSpace::new(Some(vec![]));
        assert!(matches!(
            s.place(HIGH, 4096),
            Err(NvmeError::IovaExhausted { .. })
        ));
    }

    #[test]
    fn overlapping_virtual_ranges_are_eexist_and_release_is_exact() {
        for mut s in [qemu39(), IovaSpace::new(None)] {
            let iova = s.place(HIGH, 8192).unwrap();
            let e = s.place(HIGH + 4096, 8192).unwrap_err();
            assert!(e.to_string().contains("File exists"), "{e}");
            assert_eq!(s.release(HIGH, 4096), None, "length must match");
            assert_eq!(s.release(HIGH + 4096, 8192), None);
            assert_eq!(s.iova_of(HIGH, 8192), Some(iova));
            assert_eq!(s.release(HIGH, 8192), Some(iova));
            assert_eq!((s.mappings(), s.translated()), (0, 0));
            // Adjacent ranges do not overlap.
            s.place(HIGH, 4096).unwrap();
            s.place(HIGH + 4096, 4096).unwrap();
            assert_eq!(s.mappings(), 2);
        }
    }
}
