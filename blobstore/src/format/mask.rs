//! `struct spdk_bs_md_mask`: `{ uint8_t type; uint32_t length; uint8_t mask[]; }` packed,
//! at the start of a mask region of whole pages. `length` counts bits; bit `i` is bit
//! `i % 8` of byte `i / 8` (`spdk_bit_array_store_mask`). Masks carry no CRC in SPDK's
//! format; the super block's `clean` flag says whether they are current.

use super::bytes::{Reader, Writer};
use crate::{Error, Result};

/// Bytes before the bits.
pub const MASK_HEADER_LEN: usize = 5;

/// Which mask a region holds (`SPDK_MD_MASK_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskType {
    /// Used metadata pages (0).
    UsedPages = 0,
    /// Used clusters (1).
    UsedClusters = 1,
    /// Used blob ids (2).
    UsedBlobIds = 2,
}

/// A decoded mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    /// The mask's type.
    pub kind: MaskType,
    /// One bool per bit, `length` of them.
    pub bits: Vec<bool>,
}

impl Mask {
    /// Bytes a mask of `bits` bits needs with its header.
    pub fn encoded_len(bits: usize) -> usize {
        MASK_HEADER_LEN + bits.div_ceil(8)
    }

    /// Decodes a mask region, checking its type and that its bits fit the region.
    pub fn decode(region: &[u8], kind: MaskType) -> Result<Mask> {
        let mut r = Reader::new(region);
        let (Some(t), Some(length)) = (r.u8(), r.u32()) else {
            return Err(Error::BadMask(format!(
                "region of {} bytes has no header",
                region.len()
            )));
        };
        if t != kind as u8 {
            return Err(Error::BadMask(format!("type {t}, expected {}", kind as u8)));
        }
        let bytes = r.bytes((length as usize).div_ceil(8)).ok_or_else(|| {
            Error::BadMask(format!(
                "{length} bits do not fit a region of {} bytes",
                region.len()
            ))
        })?;
        let bits = (0..length as usize)
            .map(|i| bytes[i / 8] & (1 << (i % 8)) != 0)
            .collect();
        Ok(Mask { kind, bits })
    }

    /// Encodes into `region`, which the caller zeroed and sized from `encoded_len`.
    pub fn encode_into(&self, region: &mut [u8]) {
        let mut w = Writer::new(region);
        w.u8(self.kind as u8);
        w.u32(self.bits.len() as u32);
        for chunk in self.bits.chunks(8) {
            w.u8(chunk
                .iter()
                .enumerate()
                .fold(0, |b, (i, &set)| b | (u8::from(set) << i)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_is_spdk_bs_md_mask() {
        let m = Mask {
            kind: MaskType::UsedClusters,
            bits: vec![true, false, true, false, false, false, false, false, true],
        };
        let mut r = vec![0u8; 4096];
        m.encode_into(&mut r);
        assert_eq!(&r[..7], &[1, 9, 0, 0, 0, 0b101, 0b1]);
        assert_eq!(Mask::decode(&r, MaskType::UsedClusters).unwrap(), m);
        assert!(matches!(
            Mask::decode(&r, MaskType::UsedPages),
            Err(Error::BadMask(_))
        ));
        r[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Mask::decode(&r, MaskType::UsedClusters),
            Err(Error::BadMask(_))
        ));
    }

    proptest! {
        #[test]
        fn prop_mask_round_trip(bits in proptest::collection::vec(any::<bool>(), 0..3000)) {
            let m = Mask { kind: MaskType::UsedBlobIds, bits };
            let mut r = vec![0u8; Mask::encoded_len(m.bits.len())];
            m.encode_into(&mut r);
            prop_assert_eq!(Mask::decode(&r, MaskType::UsedBlobIds).unwrap(), m);
        }

        #[test]
        fn prop_mask_arbitrary_bytes_never_panic(r in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Mask::decode(&r, MaskType::UsedPages);
        }
    }
}
