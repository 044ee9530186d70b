//! Where a block of a RAID bdev lives on its members, as SPDK's `module/bdev/raid/` lays it
//! out. Every member's data starts at the same block, `data_offset`: 0 without a superblock,
//! 1 MiB in with one (the superblock and the write-intent bitmap live before it):
//!
//! - **raid0**: strip `s` of the array is strip `s / n` of member `s % n`; every member
//!   contributes the same number of whole strips (the smallest member's, rounded down).
//! - **concat**: members one after the other, each contributing its own size rounded down to
//!   whole strips.
//! - **raid1**: every member holds every block; the array is as large as its smallest member.
//!
//! The array's `boundary_blocks` is the strip for raid0 and concat, so the block layer's
//! splitter never hands the array a request that spans two members.

use std::fmt;

/// A RAID level SPDK's `bdev_raid_create` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaidLevel {
    Raid0,
    Concat,
    Raid1,
}

impl RaidLevel {
    /// SPDK's `raid_bdev_str_to_level`: `raid0`/`0`, `raid1`/`1`, `concat` (any case).
    pub fn parse(s: &str) -> Option<RaidLevel> {
        match s.to_ascii_lowercase().as_str() {
            "raid0" | "0" => Some(RaidLevel::Raid0),
            "raid1" | "1" => Some(RaidLevel::Raid1),
            "concat" => Some(RaidLevel::Concat),
            _ => None,
        }
    }

    /// SPDK's name for the level (`raid_bdev_level_to_str`).
    pub fn name(self) -> &'static str {
        match self {
            RaidLevel::Raid0 => "raid0",
            RaidLevel::Concat => "concat",
            RaidLevel::Raid1 => "raid1",
        }
    }

    /// Whether the level stripes (and so needs a strip size).
    pub fn has_strips(self) -> bool {
        self != RaidLevel::Raid1
    }

    /// Fewest members SPDK accepts: raid1 needs two copies to be a mirror.
    pub fn min_members(self) -> usize {
        match self {
            RaidLevel::Raid1 => 2,
            RaidLevel::Raid0 | RaidLevel::Concat => 1,
        }
    }
}

impl fmt::Display for RaidLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The array's geometry: how many blocks it has and where each lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub level: RaidLevel,
    /// Strip in blocks (a power of two; 0 for raid1).
    pub strip_blocks: u64,
    /// Blocks each member contributes (what of it the array uses).
    pub member_blocks: Vec<u64>,
    /// First array block of each member (concat); 0 elsewhere.
    pub member_start: Vec<u64>,
    /// Blocks of the array.
    pub num_blocks: u64,
    /// First block of the array's data on every member.
    pub data_offset: u64,
}

impl Layout {
    /// The geometry of `level` over members of `sizes` blocks each. `None` when the array
    /// would have no block (a member smaller than one strip, or no member).
    pub fn new(level: RaidLevel, strip_blocks: u64, sizes: &[u64]) -> Option<Layout> {
        if sizes.is_empty() || (level.has_strips() && !strip_blocks.is_power_of_two()) {
            return None;
        }
        let n = sizes.len() as u64;
        let down = |b: u64| b - b % strip_blocks;
        let (member_blocks, member_start, num_blocks) = match level {
            RaidLevel::Raid0 => {
                let each = down(*sizes.iter().min()?);
                (
                    vec![each; sizes.len()],
                    vec![0; sizes.len()],
                    each.checked_mul(n)?,
                )
            }
            RaidLevel::Concat => {
                let each: Vec<u64> = sizes.iter().map(|&b| down(b)).collect();
                let mut start = Vec::with_capacity(each.len());
                let mut at = 0u64;
                for &b in &each {
                    start.push(at);
                    at = at.checked_add(b)?;
                }
                (each, start, at)
            }
            RaidLevel::Raid1 => {
                let each = *sizes.iter().min()?;
                (vec![each; sizes.len()], vec![0; sizes.len()], each)
            }
        };
        (num_blocks > 0 && member_blocks.iter().all(|&b| b > 0)).then_some(Layout {
            level,
            strip_blocks: if level.has_strips() { strip_blocks } else { 0 },
            member_blocks,
            member_start,
            num_blocks,
            data_offset: 0,
        })
    }

    /// The same geometry with every member's data starting at block `data_offset`.
    pub fn with_data_offset(mut self, data_offset: u64) -> Layout {
        self.data_offset = data_offset;
        self
    }

    /// Members of the array.
    pub fn members(&self) -> usize {
        self.member_blocks.len()
    }

    /// The member and its block holding array block `lba` (raid0 and concat; raid1's every
    /// member holds it at [`Layout::mirror_lba`]). A request never crosses a strip, so its
    /// first block names its member and the rest follow contiguously there.
    #[inline]
    pub fn locate(&self, lba: u64) -> (usize, u64) {
        let (m, b) = self.locate_data(lba);
        (m, b + self.data_offset)
    }

    /// Where every raid1 member holds array block `lba`.
    #[inline]
    pub fn mirror_lba(&self, lba: u64) -> u64 {
        lba + self.data_offset
    }

    #[inline]
    fn locate_data(&self, lba: u64) -> (usize, u64) {
        match self.level {
            RaidLevel::Raid0 => {
                let n = self.members() as u64;
                let strip = lba / self.strip_blocks;
                let within = lba % self.strip_blocks;
                (
                    (strip % n) as usize,
                    (strip / n) * self.strip_blocks + within,
                )
            }
            RaidLevel::Concat => {
                // The first member starting past `lba`, less one: a search that allocates nothing.
                let i = self.member_start.partition_point(|&s| s <= lba) - 1;
                (i, lba - self.member_start[i])
            }
            RaidLevel::Raid1 => (0, lba),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn levels_parse_as_spdk_names_them() {
        assert_eq!(RaidLevel::parse("0"), Some(RaidLevel::Raid0));
        assert_eq!(RaidLevel::parse("RAID1"), Some(RaidLevel::Raid1));
        assert_eq!(RaidLevel::parse("concat"), Some(RaidLevel::Concat));
        assert_eq!(RaidLevel::parse("raid5f"), None);
        assert_eq!(RaidLevel::Raid0.to_string(), "raid0");
    }

    #[test]
    fn raid0_round_robins_strips() {
        // 3 members of 100 blocks, strip 8: 12 whole strips each, 288 blocks.
        let l = Layout::new(RaidLevel::Raid0, 8, &[100, 120, 100]).unwrap();
        assert_eq!(l.num_blocks, 288);
        assert_eq!(l.locate(0), (0, 0));
        assert_eq!(l.locate(8), (1, 0));
        assert_eq!(l.locate(17), (2, 1));
        assert_eq!(l.locate(24), (0, 8));
        assert_eq!(l.locate(287), (2, 95));
    }

    #[test]
    fn concat_appends_members_in_whole_strips() {
        let l = Layout::new(RaidLevel::Concat, 8, &[20, 8, 35]).unwrap();
        assert_eq!(l.member_blocks, [16, 8, 32]);
        assert_eq!(l.num_blocks, 56);
        assert_eq!(l.locate(15), (0, 15));
        assert_eq!(l.locate(16), (1, 0));
        assert_eq!(l.locate(24), (2, 0));
        assert_eq!(l.locate(55), (2, 31));
    }

    #[test]
    fn raid1_is_its_smallest_member_and_degenerate_arrays_are_refused() {
        assert_eq!(
            Layout::new(RaidLevel::Raid1, 0, &[50, 40])
                .unwrap()
                .num_blocks,
            40
        );
        assert!(Layout::new(RaidLevel::Raid0, 8, &[4, 100]).is_none());
        assert!(Layout::new(RaidLevel::Raid0, 6, &[64]).is_none());
        assert!(Layout::new(RaidLevel::Concat, 8, &[]).is_none());
    }

    proptest! {
        /// Every array block maps to exactly one (member, block) inside what the member
        /// contributes, and no two array blocks map to the same one.
        #[test]
        fn every_block_has_one_home(
            level in prop_oneof![Just(RaidLevel::Raid0), Just(RaidLevel::Concat)],
            shift in 0u32..5,
            sizes in prop::collection::vec(1u64..200, 1..5),
        ) {
            let strip = 1u64 << shift;
            let Some(l) = Layout::new(level, strip, &sizes) else { return Ok(()) };
            let mut seen = std::collections::HashSet::new();
            for lba in 0..l.num_blocks {
                let (m, b) = l.locate(lba);
                prop_assert!(b < l.member_blocks[m]);
                prop_assert!(seen.insert((m, b)));
                // A strip stays on one member, contiguously.
                if lba % strip != 0 {
                    let (pm, pb) = l.locate(lba - 1);
                    prop_assert_eq!((pm, pb + 1), (m, b));
                }
            }
            prop_assert_eq!(seen.len() as u64, l.member_blocks.iter().sum::<u64>());
            // A data offset moves every block by it, on every member.
            let off = l.clone().with_data_offset(2048);
            for lba in 0..l.num_blocks {
                let (m, b) = l.locate(lba);
                prop_assert_eq!(off.locate(lba), (m, b + 2048));
            }
        }
    }
}
