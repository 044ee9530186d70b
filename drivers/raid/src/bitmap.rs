//! The write-intent bitmap (Linux md's bitmap, Mayastor's rebuild map): while a raid1
//! member is away, every region of the array written meanwhile is marked, so a member that
//! comes back is brought up to date by copying only those regions.
//!
//! Tracking starts before the member is taken out of the write set (so no write can miss
//! both the member and the map), and records `since`: the superblock sequence number the
//! departing member last had. A returning member whose own superblock is at `since` or later
//! missed exactly the marked regions; any other needs a full rebuild.
//!
//! A write that marks a new region is acknowledged only once the bitmap with that bit is
//! durable on the members ([`DirtyMap::durable`]), so a restart never forgets a region an
//! acknowledged write changed. The bitmap lives in the superblock area (block
//! [`BITMAP_OFFSET_BYTES`] on, one codec, crc checked) and is written by the superblock
//! writer thread.
//!
//! On-disk layout (little-endian): `PMIOWIBM`, version u32, crc32c u32 (of the whole encoding
//! with this field zero), array uuid (16), `since` u64, region size in blocks u64, bits u64,
//! active u8, then the bits, a u64 word at a time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pmio::Uuid;

/// Where the bitmap starts on each member: 64 KiB in, behind the longest superblock.
pub const BITMAP_OFFSET_BYTES: u64 = 64 << 10;
/// The most bits kept (64 KiB of them), so the bitmap is written in one small I/O.
pub const MAX_BITS: u64 = 64 << 13;
/// Smallest region: 64 KiB (Mayastor's segment).
pub const MIN_REGION_BYTES: u64 = 64 << 10;

const MAGIC: &[u8; 8] = b"PMIOWIBM";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 64;

/// The bitmap of an array (see the module docs).
#[derive(Debug)]
pub struct DirtyMap {
    region_blocks: u64,
    words: Vec<AtomicU64>,
    active: AtomicBool,
    since: AtomicU64,
    /// Raised whenever the bitmap changes (a new bit, started, cleared).
    generation: AtomicU64,
    /// The generation last made durable on the members.
    durable: AtomicU64,
    /// Whether the map is kept on the members (arrays with a superblock); a map kept in
    /// memory only is durable as soon as it is marked.
    persistent: bool,
}

/// Why bytes are not a bitmap of this array.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitmapError {
    #[error("no write-intent bitmap (signature)")]
    NoMagic,
    #[error("write-intent bitmap truncated ({have} of {want} bytes)")]
    Short { have: usize, want: usize },
    #[error("write-intent bitmap crc32c does not match")]
    Crc,
    #[error("write-intent bitmap of another array or geometry")]
    Foreign,
}

impl DirtyMap {
    /// An inactive map for an array of `num_blocks` blocks of `block_size` bytes, kept on
    /// the members if `persistent`.
    pub fn new(num_blocks: u64, block_size: u32, persistent: bool) -> DirtyMap {
        let min = (MIN_REGION_BYTES / u64::from(block_size)).max(1);
        let region_blocks = num_blocks.div_ceil(MAX_BITS).max(min).next_power_of_two();
        let bits = num_blocks.div_ceil(region_blocks);
        DirtyMap {
            region_blocks,
            words: (0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            active: AtomicBool::new(false),
            since: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            persistent,
        }
    }

    /// Blocks per bit.
    pub fn region_blocks(&self) -> u64 {
        self.region_blocks
    }

    /// Whether writes are being tracked.
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The superblock number a returning member must have for a partial rebuild.
    pub fn since(&self) -> u64 {
        self.since.load(Ordering::Acquire)
    }

    /// Starts tracking (if not already) for a member that last had superblock `since`.
    pub fn start(&self, since: u64) {
        if !self.active.load(Ordering::Acquire) {
            self.since.store(since, Ordering::Release);
            // Pairs with the acquire in `active`: a queue that sees tracking on marks.
            self.active.store(true, Ordering::Release);
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Stops tracking and forgets every bit (every member is current again).
    pub fn clear(&self) {
        self.active.store(false, Ordering::Release);
        for w in &self.words {
            w.store(0, Ordering::Release);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Marks blocks `lba..lba + n`; returns the generation the caller must see durable
    /// before acknowledging, or `None` if every region was marked already.
    #[inline]
    pub fn mark(&self, lba: u64, n: u64) -> Option<u64> {
        let first = lba / self.region_blocks;
        let last = (lba + n.max(1) - 1) / self.region_blocks;
        let mut new = false;
        for bit in first..=last {
            let (w, b) = ((bit / 64) as usize, bit % 64);
            let Some(word) = self.words.get(w) else { break };
            if word.load(Ordering::Relaxed) & (1 << b) == 0 {
                new |= word.fetch_or(1 << b, Ordering::AcqRel) & (1 << b) == 0;
            }
        }
        new.then(|| self.generation.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// The generation now.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether generation `g` is durable.
    #[inline]
    pub fn durable(&self, g: u64) -> bool {
        !self.persistent || self.durable.load(Ordering::Acquire) >= g
    }

    /// Records that generation `g` is durable on the members.
    pub fn set_durable(&self, g: u64) {
        self.durable.fetch_max(g, Ordering::AcqRel);
    }

    /// The marked regions as array block ranges, adjacent ones merged, clipped to
    /// `num_blocks`.
    pub fn dirty_ranges(&self, num_blocks: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (w, word) in self.words.iter().enumerate() {
            let mut bits = word.load(Ordering::Acquire);
            while bits != 0 {
                let b = bits.trailing_zeros() as u64;
                bits &= bits - 1;
                let start = (w as u64 * 64 + b) * self.region_blocks;
                let end = (start + self.region_blocks).min(num_blocks);
                match out.last_mut() {
                    Some(last) if last.1 == start => last.1 = end,
                    _ => out.push((start, end)),
                }
            }
        }
        out
    }

    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.words.len() * 8
    }

    /// The bitmap's bytes for array `uuid`.
    pub fn encode(&self, uuid: &Uuid) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len()];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..32].copy_from_slice(&uuid.0);
        b[32..40].copy_from_slice(&self.since().to_le_bytes());
        b[40..48].copy_from_slice(&self.region_blocks.to_le_bytes());
        b[48..56].copy_from_slice(&(self.words.len() as u64 * 64).to_le_bytes());
        b[56] = u8::from(self.active());
        for (i, w) in self.words.iter().enumerate() {
            let at = HEADER_LEN + i * 8;
            b[at..at + 8].copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Loads `b` (written by [`DirtyMap::encode`] for array `uuid` of the same geometry)
    /// into this map.
    pub fn load(&self, uuid: &Uuid, b: &[u8]) -> Result<(), BitmapError> {
        if b.len() < HEADER_LEN || &b[0..8] != MAGIC {
            return Err(BitmapError::NoMagic);
        }
        let want = self.encoded_len();
        if b.len() < want {
            return Err(BitmapError::Short {
                have: b.len(),
                want,
            });
        }
        let mut z = b[..want].to_vec();
        z[12..16].fill(0);
        if crc32c::crc32c(&z) != u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")) {
            return Err(BitmapError::Crc);
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if b[16..32] != uuid.0
            || u64_at(40) != self.region_blocks
            || u64_at(48) != self.words.len() as u64 * 64
        {
            return Err(BitmapError::Foreign);
        }
        for (i, w) in self.words.iter().enumerate() {
            w.store(u64_at(HEADER_LEN + i * 8), Ordering::Release);
        }
        self.since.store(u64_at(32), Ordering::Release);
        self.active.store(b[56] != 0, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_region_is_marked_once_and_needs_durability_once() {
        // 7 MiB of 512-byte blocks: 64 KiB regions, 112 bits.
        let m = DirtyMap::new(14336, 512, true);
        assert_eq!(m.region_blocks(), 128);
        m.start(4);
        let g = m.mark(130, 8).expect("a new region");
        assert!(!m.durable(g));
        assert_eq!(m.mark(200, 8), None, "same region");
        m.set_durable(g);
        assert!(m.durable(g));
        // A write across two regions marks both.
        assert!(m.mark(255, 2).is_some());
        assert_eq!(m.dirty_ranges(14336), [(128, 384)]);
        m.clear();
        assert!(!m.active());
        assert!(m.dirty_ranges(14336).is_empty());
    }

    #[test]
    fn a_large_array_keeps_the_map_within_its_bound() {
        let m = DirtyMap::new(1 << 40, 512, true);
        assert!(m.encoded_len() as u64 <= HEADER_LEN as u64 + MAX_BITS / 8);
        assert!(m.region_blocks().is_power_of_two());
    }

    proptest! {
        /// Every written block lies in a dirty range, and the map reads back as written.
        #[test]
        fn prop_every_write_is_covered_and_survives_encoding(
            writes in prop::collection::vec((0u64..100_000, 1u64..300), 0..50),
            since: u64,
        ) {
            let n = 100_300;
            let m = DirtyMap::new(n, 512, true);
            m.start(since);
            for &(lba, k) in &writes {
                m.mark(lba, k);
            }
            let ranges = m.dirty_ranges(n);
            for &(lba, k) in &writes {
                for b in [lba, lba + k - 1] {
                    prop_assert!(ranges.iter().any(|&(s, e)| s <= b && b < e));
                }
            }
            let uuid = Uuid([3; 16]);
            let bytes = m.encode(&uuid);
            let back = DirtyMap::new(n, 512, true);
            back.load(&uuid, &bytes).unwrap();
            prop_assert_eq!(back.dirty_ranges(n), ranges);
            prop_assert_eq!(back.since(), since);
            prop_assert!(back.active());
            prop_assert_eq!(back.load(&Uuid([4; 16]), &bytes), Err(BitmapError::Foreign));
        }

        /// A flipped bit anywhere is refused.
        #[test]
        fn prop_a_flipped_bit_is_refused(at: prop::sample::Index, bit in 0u8..8) {
            let m = DirtyMap::new(50_000, 512, true);
            m.start(1);
            m.mark(777, 10);
            let uuid = Uuid([1; 16]);
            let mut b = m.encode(&uuid);
            let i = at.index(b.len());
            b[i] ^= 1 << bit;
            prop_assert!(DirtyMap::new(50_000, 512, true).load(&uuid, &b).is_err());
        }
    }
}
