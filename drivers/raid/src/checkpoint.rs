//! A rebuild's progress, kept on its target member so that a restart resumes the copy where
//! it stood instead of starting it again (SPDK's raid process starts over; Mayastor's rebuild
//! keeps no progress either).
//!
//! The rebuild copies its plan's ranges in ascending order and every front-end write reaches
//! the target meanwhile, so "every planned block below `offset` is on the target" is one
//! number. It is written (after a flush of what was copied) every few windows and once at the
//! end, in the superblock area of the target, where nothing else is kept:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | `PMIORBCK` |
//! | 8..12 | version (1) |
//! | 12..16 | crc32c of the 64 bytes, computed with this field zero |
//! | 16..32 | array uuid |
//! | 32..48 | target member's uuid |
//! | 48..56 | offset: first array block of the plan not yet copied |
//! | 56 | plan: 1 the whole array, 0 the write-intent bitmap's regions |
//!
//! Integers little-endian. A record is trusted only for a member whose own superblock lists
//! it as being rebuilt (`spare`): a new rebuild writes offset 0 before its superblock says so.

use pmio::Uuid;

/// Where the record is on the target: 512 KiB in, behind the write-intent bitmap (which
/// ends below 132 KiB) and before the data (1 MiB).
pub const CHECKPOINT_OFFSET_BYTES: u64 = 512 << 10;
/// Bytes of the record.
pub const CHECKPOINT_LEN: usize = 64;

const MAGIC: &[u8; 8] = b"PMIORBCK";
const VERSION: u32 = 1;

/// How far a rebuild has copied its plan to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The array's uuid.
    pub array: Uuid,
    /// The target member's own uuid.
    pub member: Uuid,
    /// The first array block of the plan not yet copied.
    pub offset: u64,
    /// Whether the plan is the whole array (else the write-intent bitmap's regions).
    pub full: bool,
}

/// Why bytes are not a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("no rebuild checkpoint (signature)")]
    NoMagic,
    #[error("rebuild checkpoint of version {0}")]
    Version(u32),
    #[error("rebuild checkpoint crc32c does not match")]
    Crc,
}

impl Checkpoint {
    /// The record's bytes.
    pub fn encode(&self) -> [u8; CHECKPOINT_LEN] {
        let mut b = [0u8; CHECKPOINT_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..32].copy_from_slice(&self.array.0);
        b[32..48].copy_from_slice(&self.member.0);
        b[48..56].copy_from_slice(&self.offset.to_le_bytes());
        b[56] = u8::from(self.full);
        let crc = crc32c::crc32c(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a record written by [`Checkpoint::encode`] from the start of `b`.
    pub fn decode(b: &[u8]) -> Result<Checkpoint, CheckpointError> {
        if b.len() < CHECKPOINT_LEN || &b[0..8] != MAGIC {
            return Err(CheckpointError::NoMagic);
        }
        let mut z = [0u8; CHECKPOINT_LEN];
        z.copy_from_slice(&b[..CHECKPOINT_LEN]);
        let version = u32::from_le_bytes(z[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(CheckpointError::Version(version));
        }
        let crc = u32::from_le_bytes(z[12..16].try_into().expect("4 bytes"));
        z[12..16].fill(0);
        if crc32c::crc32c(&z) != crc {
            return Err(CheckpointError::Crc);
        }
        let uuid_at = |at: usize| Uuid(z[at..at + 16].try_into().expect("16 bytes"));
        Ok(Checkpoint {
            array: uuid_at(16),
            member: uuid_at(32),
            offset: u64::from_le_bytes(z[48..56].try_into().expect("8 bytes")),
            full: z[56] != 0,
        })
    }
}

/// `ranges` (ascending, disjoint) from block `from` on.
pub fn ranges_from(ranges: &[(u64, u64)], from: u64) -> Vec<(u64, u64)> {
    ranges
        .iter()
        .filter(|&&(_, e)| e > from)
        .map(|&(s, e)| (s.max(from), e))
        .collect()
}

/// The union of two ascending lists of disjoint ranges, ascending, overlapping and adjacent
/// ranges merged.
pub fn union(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = a.iter().chain(b).copied().filter(|(s, e)| s < e).collect();
    all.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn what_is_left_of_a_plan_and_a_union_of_plans() {
        let plan = [(0, 10), (20, 30), (40, 50)];
        assert_eq!(ranges_from(&plan, 25), [(25, 30), (40, 50)]);
        assert_eq!(ranges_from(&plan, 30), [(40, 50)]);
        assert_eq!(ranges_from(&plan, 0), plan);
        assert!(ranges_from(&plan, 50).is_empty());
        assert_eq!(
            union(&[(25, 30), (40, 50)], &[(0, 5), (28, 41), (50, 60)]),
            [(0, 5), (25, 60)]
        );
    }

    proptest! {
        /// A record reads back as written, and any flipped bit is refused.
        #[test]
        fn prop_a_checkpoint_round_trips_and_a_flipped_bit_is_refused(
            array: [u8; 16], member: [u8; 16], offset: u64, full: bool,
            at in 0usize..CHECKPOINT_LEN, bit in 0u8..8,
        ) {
            let c = Checkpoint { array: Uuid(array), member: Uuid(member), offset, full };
            let mut b = c.encode();
            prop_assert_eq!(Checkpoint::decode(&b), Ok(c));
            b[at] ^= 1 << bit;
            prop_assert!(Checkpoint::decode(&b).is_err());
        }

        /// Every block of the union is in one of its inputs and every block of an input in
        /// the union; a plan cut at `from` keeps exactly its blocks at or above it.
        #[test]
        fn prop_union_and_cut_keep_exactly_their_blocks(
            a in prop::collection::vec((0u64..200, 1u64..20), 0..8),
            b in prop::collection::vec((0u64..200, 1u64..20), 0..8),
            from in 0u64..230,
        ) {
            let norm = |v: &[(u64, u64)]| union(&v.iter().map(|&(s, n)| (s, s + n)).collect::<Vec<_>>(), &[]);
            let (a, b) = (norm(&a), norm(&b));
            let u = union(&a, &b);
            let has = |v: &[(u64, u64)], x: u64| v.iter().any(|&(s, e)| s <= x && x < e);
            for x in 0..230 {
                prop_assert_eq!(has(&u, x), has(&a, x) || has(&b, x));
                prop_assert_eq!(has(&ranges_from(&a, from), x), has(&a, x) && x >= from);
            }
            prop_assert!(u.windows(2).all(|w| w[0].1 < w[1].0));
        }
    }
}
