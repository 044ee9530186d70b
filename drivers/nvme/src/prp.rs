//! PRP (Physical Region Page) construction for one command.
//!
//! PRP1 may point anywhere (dword aligned) in a memory page; every later entry is page
//! aligned. Two pages or less fit in PRP1/PRP2; more need a PRP list, whose address goes in
//! PRP2. Each tag owns one list page prepared at queue creation, and lists are never chained,
//! so one command carries at most `page_size − offset + entries × page_size` bytes. Addresses
//! are I/O virtual addresses (= virtual addresses, see [`crate::dma`]).

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

/// Builds the PRPs of a `len`-byte transfer at I/O address `addr`, writing list entries into
/// `list` (the tag's list page, at I/O address `list_iova`) when more than two pages are
/// involved. `page_size` is the controller's memory page size (a power of two).
#[inline]
pub fn build(
    addr: u64,
    len: u64,
    page_size: u64,
    list: &mut [u64],
    list_iova: u64,
) -> Result<Prps, IoError> {
    if addr & 3 != 0 {
        return Err(IoError::Misaligned { addr });
    }
    let offset = addr & (page_size - 1);
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
            build(0x10000, 4096, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10000,
                prp2: 0
            })
        );
        assert_eq!(
            build(0x10200, 512, PAGE, &mut list, LIST),
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
            build(0x10000, 8192, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10000,
                prp2: 0x11000
            })
        );
        // Unaligned start: 3.5 KiB + 4 KiB.
        assert_eq!(
            build(0x10200, 4096 - 512 + 4096, PAGE, &mut list, LIST),
            Ok(Prps {
                prp1: 0x10200,
                prp2: 0x11000
            })
        );
    }

    #[test]
    fn more_pages_use_the_list() {
        let mut list = [0u64; 512];
        let p = build(0x10000, 16384, PAGE, &mut list, LIST).unwrap();
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
            build(0x10000, 6 * 4096, PAGE, &mut list, LIST),
            Err(IoError::TooLarge { .. })
        ));
        assert!(build(0x10000, 5 * 4096, PAGE, &mut list, LIST).is_ok());
        assert_eq!(
            build(0x10002, 512, PAGE, &mut list, LIST),
            Err(IoError::Misaligned { addr: 0x10002 })
        );
    }

    proptest! {
        /// The entries describe exactly the buffer, page by page, for any offset and length.
        #[test]
        fn prop_prps_cover_the_buffer(offset in (0u64..1024).prop_map(|d| d * 4), len in 1u64..(520 * 4096)) {
            let mut list = [0u64; 512];
            let addr = 0x4000_0000 + offset;
            match build(addr, len, PAGE, &mut list, LIST) {
                Ok(p) => {
                    // Expand the PRPs back into the list of (address, length) segments.
                    let mut segs = vec![(p.prp1, (PAGE - offset).min(len))];
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
