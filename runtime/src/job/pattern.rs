//! The `--verify` data pattern: every logical block describes itself.
//!
//! Layout of a block (little-endian): bytes 0..8 magic `PMIOVRFY`, 8..16 the LBA, 16..24 the
//! write sequence number, 24..28 the crc32c of the whole block computed with this field
//! zero, 28..32 zero, then pseudo-random filler derived from (LBA, sequence). A read is
//! checked by recomputing the crc and comparing LBA and sequence with what the writer last
//! wrote there, so stale, misplaced and corrupted blocks are all told apart.

const MAGIC: u64 = u64::from_le_bytes(*b"PMIOVRFY");
const CRC_AT: usize = 24;
/// Smallest block that can carry the pattern.
pub const MIN_BLOCK: usize = 32;

fn crc_of(block: &[u8]) -> u32 {
    let c = crc32c::crc32c(&block[..CRC_AT]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &block[CRC_AT + 4..])
}

/// Fills `block` with the pattern of (`lba`, `seq`).
pub fn fill(block: &mut [u8], lba: u64, seq: u64) {
    debug_assert!(block.len() >= MIN_BLOCK && block.len().is_multiple_of(8));
    block[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    block[8..16].copy_from_slice(&lba.to_le_bytes());
    block[16..24].copy_from_slice(&seq.to_le_bytes());
    block[24..32].fill(0);
    let mut x =
        lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.rotate_left(32) ^ 0x2545_F491_4F6C_DD1D;
    for w in block[32..].chunks_exact_mut(8) {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let crc = crc_of(block);
    block[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// What a block held when it did not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub lba: u64,
    pub expected_seq: u64,
    pub found_lba: u64,
    pub found_seq: u64,
    pub stored_crc: u32,
    pub computed_crc: u32,
    pub magic_ok: bool,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if !self.magic_ok {
            "no pattern header"
        } else if self.found_lba != self.lba {
            "block from another LBA"
        } else if self.found_seq != self.expected_seq {
            "stale or unexpected write"
        } else {
            "data corrupted (crc mismatch)"
        };
        write!(
            f,
            "LBA {}: expected lba={} seq={} crc=valid, found lba={} seq={} crc={:#010x} (computed {:#010x}): {what}",
            self.lba,
            self.lba,
            self.expected_seq,
            self.found_lba,
            self.found_seq,
            self.stored_crc,
            self.computed_crc
        )
    }
}

/// Checks that `block` holds the pattern of (`lba`, `seq`).
pub fn check(block: &[u8], lba: u64, seq: u64) -> Result<(), Box<Mismatch>> {
    let word = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().unwrap_or([0; 8]));
    let stored_crc = u32::from_le_bytes(block[CRC_AT..CRC_AT + 4].try_into().unwrap_or([0; 4]));
    let computed_crc = crc_of(block);
    let (magic_ok, found_lba, found_seq) = (word(0) == MAGIC, word(8), word(16));
    if magic_ok && found_lba == lba && found_seq == seq && stored_crc == computed_crc {
        return Ok(());
    }
    Err(Box::new(Mismatch {
        lba,
        expected_seq: seq,
        found_lba,
        found_seq,
        stored_crc,
        computed_crc,
        magic_ok,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detection() {
        let mut b = vec![0u8; 512];
        fill(&mut b, 17, 3);
        assert!(check(&b, 17, 3).is_ok());
        let m = check(&b, 17, 4).unwrap_err();
        assert!(m.to_string().contains("stale"), "{m}");
        let m = check(&b, 18, 3).unwrap_err();
        assert!(m.to_string().contains("another LBA"), "{m}");
        let mut c = b.clone();
        c[300] ^= 1;
        let m = check(&c, 17, 3).unwrap_err();
        assert!(m.to_string().contains("crc mismatch"), "{m}");
        assert!(m.to_string().starts_with("LBA 17: expected lba=17 seq=3"));
        let z = vec![0u8; 512];
        assert!(
            check(&z, 0, 1)
                .unwrap_err()
                .to_string()
                .contains("no pattern")
        );
        // Different (lba, seq) give different filler.
        let mut d = vec![0u8; 512];
        fill(&mut d, 17, 4);
        assert_ne!(b[32..], d[32..]);
    }
}
