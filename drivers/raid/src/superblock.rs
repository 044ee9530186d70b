//! The superblock every member of an array carries at its block 0, in SPDK's layout
//! (`struct raid_bdev_superblock` and `struct raid_bdev_sb_base_bdev` in
//! `module/bdev/raid/bdev_raid.h`, version 1.0), so an array written by either is read by
//! the other:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | signature `SPDKRAID` |
//! | 8..12 | version major, minor (u16 each) |
//! | 12..16 | length: header plus member table, bytes |
//! | 16..20 | crc32c of `length` bytes, computed with this field zero |
//! | 20..24 | flags (0) |
//! | 24..40 | array uuid |
//! | 40..104 | array name, NUL-padded |
//! | 104..112 | array size, blocks |
//! | 112..116 | block size |
//! | 116..120 | level (SPDK's numbers: raid0 0, raid1 1, concat 99) |
//! | 120..124 | strip size, blocks |
//! | 124..128 | array state (online 0, configuring 1, offline 2) |
//! | 128..136 | sequence number, raised on every update |
//! | 136 | members the array has |
//! | 255 | entries in the member table |
//! | 256.. | member table, 64 bytes each: uuid, data offset and size (blocks), state, flags, slot |
//!
//! Integers are little-endian (SPDK writes its host's order, x86 or arm64). The crc is
//! SPDK's `spdk_crc32c_update(sb, length, 0)`: CRC-32C with no inversion before or after.

use pmio::Uuid;

use crate::layout::RaidLevel;

/// The signature at byte 0.
pub const SIGNATURE: &[u8; 8] = b"SPDKRAID";
/// The version written; a superblock of another major version is refused.
pub const VERSION_MAJOR: u16 = 1;
pub const VERSION_MINOR: u16 = 0;
/// Bytes of the fixed part.
pub const HEADER_LEN: usize = 256;
/// Bytes of one member table entry.
pub const MEMBER_LEN: usize = 64;
/// Longest superblock: 255 members (SPDK's `RAID_BDEV_SB_MAX_LENGTH`).
pub const MAX_LEN: usize = HEADER_LEN + 255 * MEMBER_LEN;
/// Bytes of the name field (the name is at most one less, NUL-terminated).
pub const NAME_LEN: usize = 64;
/// Where a member's data starts on an array with a superblock: 1 MiB in (SPDK's
/// `RAID_BDEV_MIN_DATA_OFFSET_SIZE`), leaving room for the superblock and the write-intent
/// bitmap behind it.
pub const DATA_OFFSET_BYTES: u64 = 1 << 20;

/// A member's state in the table (SPDK's `enum raid_bdev_sb_base_bdev_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// The slot has no member.
    Missing,
    /// The member holds current data.
    Configured,
    /// The member left the array on an error: its data is stale.
    Failed,
    /// Being rebuilt: not read from until the rebuild finishes.
    Spare,
}

impl MemberState {
    fn code(self) -> u32 {
        match self {
            MemberState::Missing => 0,
            MemberState::Configured => 1,
            MemberState::Failed => 2,
            MemberState::Spare => 3,
        }
    }

    fn from_code(c: u32) -> Option<MemberState> {
        Some(match c {
            0 => MemberState::Missing,
            1 => MemberState::Configured,
            2 => MemberState::Failed,
            3 => MemberState::Spare,
            _ => return None,
        })
    }
}

/// The array's state (SPDK's `enum raid_bdev_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayState {
    Online,
    Configuring,
    Offline,
}

impl ArrayState {
    fn code(self) -> u32 {
        match self {
            ArrayState::Online => 0,
            ArrayState::Configuring => 1,
            ArrayState::Offline => 2,
        }
    }

    fn from_code(c: u32) -> Option<ArrayState> {
        Some(match c {
            0 => ArrayState::Online,
            1 => ArrayState::Configuring,
            2 => ArrayState::Offline,
            _ => return None,
        })
    }
}

fn level_code(l: RaidLevel) -> u32 {
    match l {
        RaidLevel::Raid0 => 0,
        RaidLevel::Raid1 => 1,
        RaidLevel::Concat => 99,
    }
}

fn level_from_code(c: u32) -> Option<RaidLevel> {
    Some(match c {
        0 => RaidLevel::Raid0,
        1 => RaidLevel::Raid1,
        99 => RaidLevel::Concat,
        _ => return None,
    })
}

/// One entry of the member table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbMember {
    /// The member bdev's uuid.
    pub uuid: Uuid,
    /// First block of the array's data on the member.
    pub data_offset: u64,
    /// Blocks of the array's data on the member.
    pub data_size: u64,
    pub state: MemberState,
    /// The member's place in the array.
    pub slot: u8,
}

/// An array's superblock, as every member carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: Uuid,
    pub name: String,
    /// Blocks of the array.
    pub raid_size: u64,
    pub block_size: u32,
    pub level: RaidLevel,
    /// Strip in blocks (0 for raid1).
    pub strip_size: u32,
    pub state: ArrayState,
    /// Raised on every update: the copy with the highest one is the array's truth.
    pub seq_number: u64,
    /// Members the array has (slots `0..num_base_bdevs`).
    pub num_base_bdevs: u8,
    pub members: Vec<SbMember>,
}

/// Why bytes are not a superblock pmio can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbError {
    #[error("no SPDKRAID signature")]
    NoSignature,
    #[error(
        "superblock length {length} is outside {HEADER_LEN}..={MAX_LEN} or past the {have} bytes read"
    )]
    Length { length: usize, have: usize },
    #[error("superblock crc32c {stored:#010x} does not match its contents ({computed:#010x})")]
    Crc { stored: u32, computed: u32 },
    #[error("superblock version {major}.{minor} is not supported (major {VERSION_MAJOR} only)")]
    Version { major: u16, minor: u16 },
    #[error("superblock {what} {value} is not known")]
    Unknown { what: &'static str, value: u32 },
    #[error("superblock member table: {0}")]
    Table(String),
    #[error("superblock name is not UTF-8 or not NUL-terminated")]
    Name,
}

/// SPDK's `spdk_crc32c_update(buf, len, 0)`: the CRC-32C register run from 0 with no final
/// inversion. The crate's `crc32c_append(c, ..)` inverts on entry and exit, so starting it
/// at !0 and inverting its answer gives the raw register.
fn spdk_crc32c(buf: &[u8]) -> u32 {
    !crc32c::crc32c_append(!0, buf)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn uuid_at(b: &[u8], at: usize) -> Uuid {
    Uuid(b[at..at + 16].try_into().expect("16 bytes"))
}

impl Superblock {
    /// Bytes the superblock occupies (header and member table).
    pub fn length(&self) -> usize {
        HEADER_LEN + MEMBER_LEN * self.members.len()
    }

    /// Blocks a member gives the superblock when written whole.
    pub fn blocks(&self) -> u64 {
        self.length().div_ceil(self.block_size as usize) as u64
    }

    /// The superblock's bytes, zero-padded to whole blocks, crc filled in.
    pub fn encode(&self) -> Vec<u8> {
        let len = self.length();
        let mut b = vec![0u8; len.next_multiple_of(self.block_size.max(1) as usize)];
        b[0..8].copy_from_slice(SIGNATURE);
        b[8..10].copy_from_slice(&VERSION_MAJOR.to_le_bytes());
        b[10..12].copy_from_slice(&VERSION_MINOR.to_le_bytes());
        b[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        b[24..40].copy_from_slice(&self.uuid.0);
        let name = self.name.as_bytes();
        let n = name.len().min(NAME_LEN - 1);
        b[40..40 + n].copy_from_slice(&name[..n]);
        b[104..112].copy_from_slice(&self.raid_size.to_le_bytes());
        b[112..116].copy_from_slice(&self.block_size.to_le_bytes());
        b[116..120].copy_from_slice(&level_code(self.level).to_le_bytes());
        b[120..124].copy_from_slice(&self.strip_size.to_le_bytes());
        b[124..128].copy_from_slice(&self.state.code().to_le_bytes());
        b[128..136].copy_from_slice(&self.seq_number.to_le_bytes());
        b[136] = self.num_base_bdevs;
        b[255] = self.members.len() as u8;
        for (i, m) in self.members.iter().enumerate() {
            let e = &mut b[HEADER_LEN + i * MEMBER_LEN..][..MEMBER_LEN];
            e[0..16].copy_from_slice(&m.uuid.0);
            e[16..24].copy_from_slice(&m.data_offset.to_le_bytes());
            e[24..32].copy_from_slice(&m.data_size.to_le_bytes());
            e[32..36].copy_from_slice(&m.state.code().to_le_bytes());
            e[40] = m.slot;
        }
        let crc = spdk_crc32c(&b[..len]);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Bytes `length` says the superblock in `head` (its first block at least) spans, to
    /// read the rest when it is longer than that block. `None` if `head` is no superblock.
    pub fn peek_length(head: &[u8]) -> Option<usize> {
        (head.len() >= 16 && &head[0..8] == SIGNATURE).then(|| u32_at(head, 12) as usize)
    }

    /// Reads a superblock from `b` (its first `length` bytes), checking signature, length,
    /// crc, version and every field a later step relies on.
    pub fn decode(b: &[u8]) -> Result<Superblock, SbError> {
        if b.len() < 16 || &b[0..8] != SIGNATURE {
            return Err(SbError::NoSignature);
        }
        let length = u32_at(b, 12) as usize;
        if !(HEADER_LEN..=MAX_LEN).contains(&length) || length > b.len() {
            return Err(SbError::Length {
                length,
                have: b.len(),
            });
        }
        let stored = u32_at(b, 16);
        let mut zeroed = b[..length].to_vec();
        zeroed[16..20].fill(0);
        let computed = spdk_crc32c(&zeroed);
        if stored != computed {
            return Err(SbError::Crc { stored, computed });
        }
        let (major, minor) = (u16_at(b, 8), u16_at(b, 10));
        if major != VERSION_MAJOR {
            return Err(SbError::Version { major, minor });
        }
        let name_field = &b[40..40 + NAME_LEN];
        let end = name_field
            .iter()
            .position(|&c| c == 0)
            .ok_or(SbError::Name)?;
        let name = std::str::from_utf8(&name_field[..end])
            .map_err(|_| SbError::Name)?
            .to_string();
        let unknown = |what, value| SbError::Unknown { what, value };
        let level = level_from_code(u32_at(b, 116)).ok_or(unknown("level", u32_at(b, 116)))?;
        let state =
            ArrayState::from_code(u32_at(b, 124)).ok_or(unknown("state", u32_at(b, 124)))?;
        let num_base_bdevs = b[136];
        let entries = b[255] as usize;
        if HEADER_LEN + entries * MEMBER_LEN != length {
            return Err(SbError::Table(format!(
                "{entries} entries do not fill length {length}"
            )));
        }
        let mut members = Vec::with_capacity(entries);
        for i in 0..entries {
            let e = &b[HEADER_LEN + i * MEMBER_LEN..][..MEMBER_LEN];
            let st = u32_at(e, 32);
            let m = SbMember {
                uuid: uuid_at(e, 0),
                data_offset: u64_at(e, 16),
                data_size: u64_at(e, 24),
                state: MemberState::from_code(st).ok_or(unknown("member state", st))?,
                slot: e[40],
            };
            if m.slot >= num_base_bdevs {
                return Err(SbError::Table(format!(
                    "slot {} of an array of {num_base_bdevs}",
                    m.slot
                )));
            }
            if members.iter().any(|o: &SbMember| o.slot == m.slot) {
                return Err(SbError::Table(format!("slot {} twice", m.slot)));
            }
            if m.data_offset.checked_add(m.data_size).is_none() {
                return Err(SbError::Table(format!("slot {} data past 2^64", m.slot)));
            }
            members.push(m);
        }
        Ok(Superblock {
            uuid: uuid_at(b, 24),
            name,
            raid_size: u64_at(b, 104),
            block_size: u32_at(b, 112),
            level,
            strip_size: u32_at(b, 120),
            state,
            seq_number: u64_at(b, 128),
            num_base_bdevs,
            members,
        })
    }

    /// The entry of the member whose bdev uuid is `uuid`.
    pub fn member(&self, uuid: &Uuid) -> Option<&SbMember> {
        self.members.iter().find(|m| &m.uuid == uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(n: u8) -> Superblock {
        Superblock {
            uuid: Uuid([7; 16]),
            name: "Raid1".into(),
            raid_size: 1 << 20,
            block_size: 512,
            level: RaidLevel::Raid1,
            strip_size: 0,
            state: ArrayState::Online,
            seq_number: 3,
            num_base_bdevs: n,
            members: (0..n)
                .map(|i| SbMember {
                    uuid: Uuid([i + 1; 16]),
                    data_offset: 2048,
                    data_size: 1 << 20,
                    state: MemberState::Configured,
                    slot: i,
                })
                .collect(),
        }
    }

    #[test]
    fn the_layout_is_spdks() {
        let b = sample(2).encode();
        assert_eq!(b.len(), 512);
        assert_eq!(&b[0..8], b"SPDKRAID");
        assert_eq!(u32_at(&b, 12), 256 + 2 * 64);
        assert_eq!(&b[40..46], b"Raid1\0");
        assert_eq!(u64_at(&b, 104), 1 << 20);
        assert_eq!(u32_at(&b, 116), 1);
        assert_eq!(u64_at(&b, 128), 3);
        assert_eq!((b[136], b[255]), (2, 2));
        // Second entry: uuid, data_offset, data_size, state, slot.
        let e = &b[256 + 64..];
        assert_eq!(e[0], 2);
        assert_eq!(u64_at(e, 16), 2048);
        assert_eq!(u32_at(e, 32), 1);
        assert_eq!(e[40], 1);
        // SPDK's crc: the raw CRC-32C register from 0 over the superblock, crc field zero.
        let mut z = b[..384].to_vec();
        z[16..20].fill(0);
        assert_eq!(u32_at(&b, 16), spdk_crc32c(&z));
        for data in [&b"123456789"[..], &b[..384], &[0xff; 37]] {
            assert_eq!(spdk_crc32c(data), crc32c_bitwise(data));
        }
    }

    /// CRC-32C one bit at a time (reflected polynomial 0x82F63B78), register from 0, no
    /// inversion: what SPDK's `spdk_crc32c_update(buf, len, 0)` computes.
    fn crc32c_bitwise(buf: &[u8]) -> u32 {
        let mut crc = 0u32;
        for &byte in buf {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }

    #[test]
    fn every_refusal_names_its_reason() {
        let good = sample(2).encode();
        assert_eq!(Superblock::decode(&[0u8; 512]), Err(SbError::NoSignature));
        let mut b = good.clone();
        b[104] ^= 1;
        assert!(matches!(Superblock::decode(&b), Err(SbError::Crc { .. })));
        assert!(matches!(
            Superblock::decode(&good[..300]),
            Err(SbError::Length { .. })
        ));
        let mut v = sample(2);
        v.members[1].slot = 5;
        assert!(matches!(
            Superblock::decode(&v.encode()),
            Err(SbError::Table(_))
        ));
        v.members[1].slot = 0;
        assert!(matches!(
            Superblock::decode(&v.encode()),
            Err(SbError::Table(_))
        ));
        let mut b = good;
        b[8] = 2;
        b[16..20].fill(0);
        let crc = spdk_crc32c(&b[..384]);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Superblock::decode(&b),
            Err(SbError::Version { major: 2, .. })
        ));
    }

    fn member_state() -> impl Strategy<Value = MemberState> {
        prop_oneof![
            Just(MemberState::Missing),
            Just(MemberState::Configured),
            Just(MemberState::Failed),
            Just(MemberState::Spare),
        ]
    }

    prop_compose! {
        fn any_sb()(
            n in 1u8..40,
            name in "[a-zA-Z0-9_]{1,63}",
            raid_size: u64,
            bs in prop_oneof![Just(512u32), Just(4096)],
            level in prop_oneof![Just(RaidLevel::Raid0), Just(RaidLevel::Raid1), Just(RaidLevel::Concat)],
            strip: u32,
            seq: u64,
            uuid: [u8; 16],
            states in prop::collection::vec(member_state(), 40),
            sizes in prop::collection::vec(0u64..1 << 40, 40),
        ) -> Superblock {
            Superblock {
                uuid: Uuid(uuid),
                name,
                raid_size,
                block_size: bs,
                level,
                strip_size: strip,
                state: ArrayState::Configuring,
                seq_number: seq,
                num_base_bdevs: n,
                members: (0..n).map(|i| SbMember {
                    uuid: Uuid([i; 16]),
                    data_offset: 2048,
                    data_size: sizes[i as usize],
                    state: states[i as usize],
                    slot: n - 1 - i,
                }).collect(),
            }
        }
    }

    proptest! {
        /// What is written reads back the same.
        #[test]
        fn prop_round_trip(sb in any_sb()) {
            let b = sb.encode();
            prop_assert_eq!(b.len() % sb.block_size as usize, 0);
            prop_assert_eq!(Superblock::peek_length(&b), Some(sb.length()));
            prop_assert_eq!(Superblock::decode(&b), Ok(sb));
        }

        /// Any one flipped bit inside the superblock is caught (the crc covers all of it).
        #[test]
        fn prop_a_flipped_bit_is_refused(sb in any_sb(), at: prop::sample::Index, bit in 0u8..8) {
            let mut b = sb.encode();
            let i = at.index(sb.length());
            b[i] ^= 1 << bit;
            prop_assert!(Superblock::decode(&b).is_err());
        }

        /// Bytes a device hands back, whatever they are, give a superblock or an error:
        /// never a panic.
        #[test]
        fn prop_any_bytes_decode_or_fail(mut b in prop::collection::vec(any::<u8>(), 0..2048), sig: bool) {
            if sig && b.len() >= 16 {
                b[..8].copy_from_slice(SIGNATURE);
            }
            let _ = Superblock::decode(&b);
        }
    }
}
