//! A fixed-size bit array: the in-memory form of the used-page, used-cluster and
//! used-blob-id masks (SPDK's `spdk_bit_array`).

use crate::format::{Mask, MaskType};

/// Bits `0..len`, all clear at first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BitArray {
    words: Vec<u64>,
    len: u32,
}

impl BitArray {
    pub(crate) fn new(len: u32) -> BitArray {
        BitArray {
            words: vec![0; (len as usize).div_ceil(64)],
            len,
        }
    }

    pub(crate) fn get(&self, i: u32) -> bool {
        i < self.len && self.words[i as usize / 64] & (1 << (i % 64)) != 0
    }

    pub(crate) fn set(&mut self, i: u32) {
        debug_assert!(i < self.len, "bit {i} of {}", self.len);
        self.words[i as usize / 64] |= 1 << (i % 64);
    }

    pub(crate) fn clear(&mut self, i: u32) {
        debug_assert!(i < self.len, "bit {i} of {}", self.len);
        self.words[i as usize / 64] &= !(1 << (i % 64));
    }

    /// The first clear bit at or after `from`.
    pub(crate) fn find_first_clear(&self, from: u32) -> Option<u32> {
        (from..self.len).find(|&i| self.words[i as usize / 64] & (1 << (i % 64)) == 0)
    }

    pub(crate) fn count_set(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    pub(crate) fn to_mask(&self, kind: MaskType) -> Mask {
        Mask {
            kind,
            bits: (0..self.len).map(|i| self.get(i)).collect(),
        }
    }

    pub(crate) fn from_bits(bits: &[bool]) -> BitArray {
        let mut a = BitArray::new(bits.len() as u32);
        for (i, _) in bits.iter().enumerate().filter(|(_, b)| **b) {
            a.set(i as u32);
        }
        a
    }

    /// Bits set here and clear in `other`.
    pub(crate) fn set_but_not_in(&self, other: &BitArray) -> Vec<u32> {
        (0..self.len)
            .filter(|&i| self.get(i) && !other.get(i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits() {
        let mut a = BitArray::new(130);
        a.set(0);
        a.set(129);
        assert!(a.get(0) && a.get(129) && !a.get(64) && !a.get(500));
        assert_eq!(a.find_first_clear(0), Some(1));
        assert_eq!(a.count_set(), 2);
        a.clear(0);
        assert_eq!(a.find_first_clear(0), Some(0));
        let m = a.to_mask(MaskType::UsedPages);
        assert_eq!(BitArray::from_bits(&m.bits), a);
    }
}
