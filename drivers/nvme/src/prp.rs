//! PRP (Physical Region Page) construction for one command.
//!
//! PRP1 may point anywhere (dword aligned) in a memory page; every later entry is page
//! aligned. Two pages or less fit in PRP1/PRP2; more need a PRP list, whose address goes in
//! PRP2. Each tag owns one list page prepared at queue creation, and lists are never chained,
//! so one command carries at most `page_size − offset + entries × page_size` bytes.
//!
//! The buffer comes as a virtual address and the offset of the registered region holding it
//! (`iova = va + offset`, see [`crate::dma::DmaWindow`]); every entry is translated by that one
//! offset. The offset is a multiple of the page size ([`crate::iova`] keeps IOVA ≡ VA modulo
//! 2 MiB), so page boundaries and offsets within pages are the same in both spaces.

use crate::error::IoError;

/// The data pointer of one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prps {
    pub prp1: u64,
    pub prp2: u64,
}

/// Largest transfer a command can carry with one unchained list of `list_entries` entries,
/// whatever the buffer's offset in its first page.
pub fn max_transfer(page_size: u64, list_entries: usize) -> u64 {
    page_size * list_entries as u64
}

/// Builds the PRPs of a `len`-byte transfer at virtual address `addr` in a region mapped at
/// `iova_offset` from its virtual addresses, writing list entries into `list` (the tag's list
/// page, at I/O address `list_iova`) when more than two pages are involved. `page_size` is the
/// controller's memory page size (a power of two) and divides `iova_offset`.
#[inline]
pub fn build(
    addr: u64,
    len: u64,
    iova_offset: u64,
    page_size: u64,
    list: &mut [u64],
    list_iova: u64,
) -> Result<Prps, IoError> {
    debug_assert_eq!(
        iova_offset & (page_size - 1),
        0,
        "IOVA offset not page aligned"
    );
    if addr & 3 != 0 {
        return Err(IoError::Misaligned { addr });
    }
    let offset = addr & (page_size - 1);
    let addr = addr.wrapping_add(iova_offset);
    let first = page_size - offset;
    if len <= first {
        return Ok(Prps {
            prp1: addr,
            prp2: 0,
        });
    }
    let next = addr - offset + page_size;
    let rest = len - first;
    if rest <= page_size {
        return Ok(Prps {
            prp1: addr,
            prp2: next,
        });
    }
    let pages = rest.div_ceil(page_size);
    if pages > list.len() as u64 {
        return Err(IoError::TooLarge {
            bytes: len,
            max: first + list.len() as u64 * page_size,
        });
    }
    for (i, entry) in list[..pages as usize].iter_mut().enumerate() {
        *entry = next + i as u64 * page_size;
    }
    Ok(Prps {
        prp1: addr,
        prp2: list_iova,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: u64 = 4096;
    const LIST: u64 = 0x7000_0000;

    #[test]
    fn one_page_uses_prp1_only() {
        let mut list = [0u64; 512];
        assert_eq!(
            build(0x10000, 4096, 0, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10000,
                prp2: 0
            })
        );
        assert_eq!(
            build(0x10200, 512, 0, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10200,
                prp2: 0
            })
        );
    }

    #[test]
    fn two_pages_use_prp2_directly() {
        let mut list = [0u64; 512];
        assert_eq!(
            build(0x10000, 8192, 0, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10000,
                prp2: 0x11000
            })
        );
        // Unaligned start: 3.5 KiB + 4 KiB.
        assert_eq!(
            build(0x10200, 4096 - 512 + 4096, 0, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10200,
                prp2: 0x11000
            })
        );
    }

    #[test]
    fn more_pages_use_the_list() {
        let mut list = [0u64; 512];
        let p = build(0x10000, 16384, 0, PAGE, &mut list, LIST).unwrap();
        assert_eq!(
            p,
            Prps {
                prp1: 0x10000,
                prp2: LIST
            }
        );
        assert_eq!(&list[..3], &[0x11000, 0x12000, 0x13000]);
    }

    #[test]
    fn too_large_and_misaligned_are_rejected() {
        let mut list = [0u64; 4];
        assert!(matches!(
            build(0x10000, 6 * 4096, 0, PAGE, &mut list, LIST),
            Err(IoError::TooLarge { .. })
        ));
        assert!(build(0x10000, 5 * 4096, 0, PAGE, &mut list, LIST).is_ok());
        assert_eq!(
            build(0x10002, 512, 0, PAGE, &mut list, LIST),
            Err(IoError::Misaligned { addr: 0x10002 })
        );
    }

    #[test]
    fn a_translated_buffer_gets_iova_entries() {
        // A region at a high virtual address, mapped at IOVA 2 MiB (a 39-bit IOMMU).
        let va_base = 0x7f12_3440_0000u64;
        let delta = 0x20_0000u64.wrapping_sub(va_base);
        let mut list = [0u64; 512];
        // 3.5 KiB in the first page, then 3 pages and 512 bytes: a list of 4 entries.
        let p = build(va_base + 0x1200, 16384, delta, PAGE, &mut list, LIST).unwrap();
        assert_eq!(
            p,
            Prps {
                prp1: 0x20_1200,
                prp2: LIST
            }
        );
        assert_eq!(&list[..4], &[0x20_2000, 0x20_3000, 0x20_4000, 0x20_5000]);
        // Two pages: PRP2 is the second page's IOVA.
        let p = build(va_base + 0x3000, 8192, delta, PAGE, &mut list, LIST).unwrap();
        assert_eq!(
            p,
            Prps {
                prp1: 0x20_3000,
                prp2: 0x20_4000
            }
        );
        // Alignment is checked and reported on the buffer's own address.
        assert_eq!(
            build(va_base + 2, 512, delta, PAGE, &mut list, LIST),
            Err(IoError::Misaligned { addr: va_base + 2 })
        );
    }

    proptest! {
        /// The entries describe exactly the buffer, page by page, in I/O virtual addresses, for
        /// any offset, length and translation (IOVA = VA, or a block elsewhere congruent
        /// modulo 2 MiB).
        #[test]
        fn prop_prps_cover_the_buffer(
            offset in (0u64..1024).prop_map(|d| d * 4),
            len in 1u64..(520 * 4096),
            va_page in 0u64..(1 << 35),
            block in prop_oneof![Just(None), (1u64..(1 << 18)).prop_map(Some)],
        ) {
            let mut list = [0u64; 512];
            let va_base = va_page * PAGE;
            let addr = va_base + offset;
            // The region's IOVA: its own address, or a 2 MiB block below 2^39 at the same
            // offset within its huge page.
            let huge = 2u64 << 20;
            let iova_base = block.map_or(va_base, |b| b * huge + va_base % huge);
            let delta = iova_base.wrapping_sub(va_base);
            match build(addr, len, delta, PAGE, &mut list, LIST) {
                Ok(p) => {
                    // Expand the PRPs back into the list of (address, length) segments.
                    let mut segs = vec![(p.prp1, (PAGE - offset).min(len))];
                    prop_assert_eq!(p.prp1, iova_base + offset);
                    let mut covered = segs[0].1;
                    let rest: Vec<u64> = if covered == len {
                        prop_assert_eq!(p.prp2, 0);
                        vec![]
                    } else if len - covered <= PAGE {
                        vec![p.prp2]
                    } else {
                        prop_assert_eq!(p.prp2, LIST);
                        list[..(len - covered).div_ceil(PAGE) as usize].to_vec()
                    };
                    for a in rest {
                        prop_assert_eq!(a % PAGE, 0);
                        let l = (len - covered).min(PAGE);
                        segs.push((a, l));
                        covered += l;
                    }
                    prop_assert_eq!(covered, len);
                    // Contiguous: each segment starts where the previous ended.
                    for w in segs.windows(2) {
                        prop_assert_eq!(w[0].0 + w[0].1, w[1].0);
                    }
                }
                Err(IoError::TooLarge { max, .. }) => {
                    prop_assert!(len > max);
                    prop_assert!(max >= max_transfer(PAGE, 512));
                }
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }
    }
}
