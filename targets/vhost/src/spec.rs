//! Virtio 1.x facts a virtio-blk device needs: feature bits, the split ring's layouts, the
//! block request header, request types and status codes, and the configuration space. Pure
//! data: nothing here touches guest memory.
//!
//! Everything in guest memory is little-endian; layouts are decoded from bytes, never cast.

/// Virtio-blk feature bits (virtio 1.x §5.2.3).
pub mod feature {
    /// Maximum size of any single segment is in `size_max`.
    pub const SIZE_MAX: u32 = 1;
    /// Maximum number of segments in a request is in `seg_max`.
    pub const SEG_MAX: u32 = 2;
    /// Device is read-only.
    pub const RO: u32 = 5;
    /// Block size of disk is in `blk_size`.
    pub const BLK_SIZE: u32 = 6;
    /// Cache flush command support.
    pub const FLUSH: u32 = 9;
    /// Device exports information on optimal I/O alignment.
    pub const TOPOLOGY: u32 = 10;
    /// Device supports multiqueue (`num_queues`).
    pub const MQ: u32 = 12;
    /// Device can support discard.
    pub const DISCARD: u32 = 13;
    /// Device can support write zeroes.
    pub const WRITE_ZEROES: u32 = 14;
    /// Indirect descriptor tables.
    pub const INDIRECT_DESC: u32 = 28;
    /// Used/available event index.
    pub const EVENT_IDX: u32 = 29;
    /// Virtio 1.0 and later.
    pub const VERSION_1: u32 = 32;
    /// Packed virtqueue layout.
    pub const RING_PACKED: u32 = 34;
}

/// The bit of feature number `n`.
pub const fn bit(n: u32) -> u64 {
    1 << n
}

/// Request types (`virtio_blk_outhdr.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ReqType {
    In = 0,
    Out = 1,
    Flush = 4,
    GetId = 8,
    Discard = 11,
    WriteZeroes = 13,
}

impl ReqType {
    /// The request type of a header's `type` field; the legacy BARRIER bit (31) is masked, as
    /// Linux's and SPDK's devices do. `None`: a type the device does not know (UNSUPP).
    pub fn from_raw(raw: u32) -> Option<ReqType> {
        Some(match raw & !(1 << 31) {
            0 => ReqType::In,
            1 => ReqType::Out,
            4 => ReqType::Flush,
            8 => ReqType::GetId,
            11 => ReqType::Discard,
            13 => ReqType::WriteZeroes,
            _ => return None,
        })
    }
}

/// Status byte values (`virtio_blk_inhdr.status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlkStatus {
    Ok = 0,
    IoErr = 1,
    Unsupp = 2,
}

/// Capacity and sectors are in 512-byte units whatever the device's block size.
pub const SECTOR_SIZE: u64 = 512;
/// Bytes of the serial GET_ID returns.
pub const ID_BYTES: usize = 20;

/// `struct virtio_blk_outhdr`: the 16 bytes that open every request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqHeader {
    pub type_: u32,
    pub ioprio: u32,
    pub sector: u64,
}

impl ReqHeader {
    pub const SIZE: usize = 16;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> ReqHeader {
        ReqHeader {
            type_: u32::from_le_bytes(b[0..4].try_into().expect("4 bytes")),
            ioprio: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
            sector: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..4].copy_from_slice(&self.type_.to_le_bytes());
        b[4..8].copy_from_slice(&self.ioprio.to_le_bytes());
        b[8..16].copy_from_slice(&self.sector.to_le_bytes());
        b
    }
}

/// `struct virtio_blk_discard_write_zeroes`: one range of a DISCARD or WRITE_ZEROES request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DwzRange {
    pub sector: u64,
    pub num_sectors: u32,
    /// Bit 0: unmap (WRITE_ZEROES may deallocate).
    pub flags: u32,
}

impl DwzRange {
    pub const SIZE: usize = 16;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> DwzRange {
        DwzRange {
            sector: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            num_sectors: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            flags: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..8].copy_from_slice(&self.sector.to_le_bytes());
        b[8..12].copy_from_slice(&self.num_sectors.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
}

/// Split-ring descriptor flags.
pub mod desc_flags {
    /// The buffer continues in `next`.
    pub const NEXT: u16 = 1;
    /// Device-writable (otherwise device-readable).
    pub const WRITE: u16 = 2;
    /// The buffer holds a table of descriptors.
    pub const INDIRECT: u16 = 4;
}

/// `struct virtq_desc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
    pub next: u16,
}

impl Desc {
    pub const SIZE: usize = 16;

    pub fn from_bytes(b: &[u8; Self::SIZE]) -> Desc {
        Desc {
            addr: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            flags: u16::from_le_bytes(b[12..14].try_into().expect("2 bytes")),
            next: u16::from_le_bytes(b[14..16].try_into().expect("2 bytes")),
        }
    }

    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
        b[14..16].copy_from_slice(&self.next.to_le_bytes());
        b
    }

    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// The split ring's layout (virtio 1.x §2.7): offsets within the avail and used rings.
pub mod ring {
    /// `virtq_avail.flags`, `virtq_used.flags`.
    pub const FLAGS: u64 = 0;
    /// `virtq_avail.idx`, `virtq_used.idx`.
    pub const IDX: u64 = 2;
    /// First entry of `virtq_avail.ring` / `virtq_used.ring`.
    pub const ENTRIES: u64 = 4;
    /// Bytes of one `virtq_used_elem` (`id: u32, len: u32`).
    pub const USED_ELEM: u64 = 8;
    /// `VIRTQ_USED_F_NO_NOTIFY`: the device asks the driver not to kick (it polls).
    pub const USED_F_NO_NOTIFY: u16 = 1;
    /// `VIRTQ_AVAIL_F_NO_INTERRUPT`: the driver asks the device not to interrupt.
    pub const AVAIL_F_NO_INTERRUPT: u16 = 1;
    /// Largest queue size of a split ring.
    pub const MAX_SIZE: u16 = 32768;
}

/// `struct virtio_blk_config` up to and including `write_zeroes_may_unmap` (QEMU 7.2 asks for
/// 60 bytes: up to `unused1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlkConfig {
    /// In 512-byte sectors.
    pub capacity: u64,
    pub size_max: u32,
    pub seg_max: u32,
    pub blk_size: u32,
    pub num_queues: u16,
    pub max_discard_sectors: u32,
    pub max_discard_seg: u32,
    pub discard_sector_alignment: u32,
    pub max_write_zeroes_sectors: u32,
    pub max_write_zeroes_seg: u32,
    pub write_zeroes_may_unmap: u8,
}

impl BlkConfig {
    /// Bytes of the layout [`BlkConfig::to_bytes`] encodes.
    pub const SIZE: usize = 60;

    /// The configuration space as the driver reads it.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[0..8].copy_from_slice(&self.capacity.to_le_bytes());
        b[8..12].copy_from_slice(&self.size_max.to_le_bytes());
        b[12..16].copy_from_slice(&self.seg_max.to_le_bytes());
        // geometry (cylinders u16, heads u8, sectors u8) at 16..20: zero.
        b[20..24].copy_from_slice(&self.blk_size.to_le_bytes());
        // topology (physical_block_exp u8, alignment_offset u8, min_io_size u16,
        // opt_io_size u32) at 24..32: zero. writeback u8 at 32, unused0 at 33.
        b[34..36].copy_from_slice(&self.num_queues.to_le_bytes());
        b[36..40].copy_from_slice(&self.max_discard_sectors.to_le_bytes());
        b[40..44].copy_from_slice(&self.max_discard_seg.to_le_bytes());
        b[44..48].copy_from_slice(&self.discard_sector_alignment.to_le_bytes());
        b[48..52].copy_from_slice(&self.max_write_zeroes_sectors.to_le_bytes());
        b[52..56].copy_from_slice(&self.max_write_zeroes_seg.to_le_bytes());
        b[56] = self.write_zeroes_may_unmap;
        // unused1[3] at 57..60.
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_round_trip() {
        let d = Desc {
            addr: 0x1122_3344_5566_7788,
            len: 0x99aa_bbcc,
            flags: desc_flags::NEXT | desc_flags::WRITE,
            next: 7,
        };
        assert_eq!(Desc::from_bytes(&d.to_bytes()), d);
        let h = ReqHeader {
            type_: 1,
            ioprio: 0,
            sector: 1 << 40,
        };
        assert_eq!(ReqHeader::from_bytes(&h.to_bytes()), h);
        let r = DwzRange {
            sector: 8,
            num_sectors: 16,
            flags: 1,
        };
        assert_eq!(DwzRange::from_bytes(&r.to_bytes()), r);
    }

    #[test]
    fn barrier_bit_is_masked_and_unknown_types_refused() {
        assert_eq!(ReqType::from_raw(1 | 1 << 31), Some(ReqType::Out));
        assert_eq!(ReqType::from_raw(13), Some(ReqType::WriteZeroes));
        assert_eq!(ReqType::from_raw(2), None);
        assert_eq!(ReqType::from_raw(u32::MAX), None);
    }

    #[test]
    fn config_offsets_are_virtio_blk_config() {
        let c = BlkConfig {
            capacity: 0x0102_0304_0506_0708,
            blk_size: 4096,
            num_queues: 2,
            max_discard_sectors: 32768,
            write_zeroes_may_unmap: 1,
            ..BlkConfig::default()
        };
        let b = c.to_bytes();
        assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[20..24], &4096u32.to_le_bytes());
        assert_eq!(&b[34..36], &2u16.to_le_bytes());
        assert_eq!(&b[36..40], &32768u32.to_le_bytes());
        assert_eq!(b[56], 1);
    }
}
