//! What a parsed virtio-blk request asks the bdev to do, or the status it gets without
//! reaching the bdev. SPDK's rules (`lib/vhost/vhost_blk.c`): a transfer that is not a whole
//! number of 512-byte sectors is UNSUPP; a write to a read-only device, a range beyond the
//! capacity, buffers of the wrong direction and a FLUSH with a sector are IOERR; an unknown
//! type, or an operation the bdev cannot do, is UNSUPP. Pure: no guest memory, no device.

use pmio::{Op, OpSet};

use crate::chain::{BlkParts, Segment};
use crate::spec::{BlkStatus, DwzRange, ReqType, SECTOR_SIZE};

/// Largest DISCARD / WRITE_ZEROES range, in sectors (SPDK's limit; advertised in the config).
pub const MAX_DWZ_SECTORS: u32 = 32768;
/// Ranges per DISCARD / WRITE_ZEROES request (advertised in the config).
pub const MAX_DWZ_SEGS: u32 = 1;

/// The device facts a request is checked against.
#[derive(Clone, Copy, Debug)]
pub struct DevFacts {
    pub block_size: u32,
    pub num_blocks: u64,
    pub ops: OpSet,
    pub readonly: bool,
}

impl DevFacts {
    fn capacity_sectors(&self) -> u64 {
        self.num_blocks * u64::from(self.block_size) / SECTOR_SIZE
    }

    /// Block range of `sectors` 512-byte sectors from `sector`, if it is block-aligned and
    /// inside the device.
    fn blocks(&self, sector: u64, sectors: u64) -> Option<(u64, u64)> {
        let per_block = u64::from(self.block_size) / SECTOR_SIZE;
        if !sector.is_multiple_of(per_block) || !sectors.is_multiple_of(per_block) {
            return None;
        }
        let end = sector.checked_add(sectors)?;
        if end > self.capacity_sectors() {
            return None;
        }
        Some((sector / per_block, sectors / per_block))
    }
}

/// What to do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read or write `nblocks` from `lba` through the data segments (`op` is Read or Write).
    Rw {
        op: Op,
        lba: u64,
        nblocks: u64,
    },
    Flush,
    /// Write the device's serial into the data segments.
    GetId,
    /// Discard or write zeroes over `nblocks` from `lba` (one range; `op` is Discard or
    /// WriteZeroes).
    Range {
        op: Op,
        lba: u64,
        nblocks: u64,
    },
}

/// Decides `parts` (data in `data`) against `dev`. `range` is the DISCARD / WRITE_ZEROES
/// payload when the request carries one (read by the caller from the data segments, which
/// must then be exactly one 16-byte range).
pub fn classify(
    parts: &BlkParts,
    data: &[Segment],
    range: Option<DwzRange>,
    dev: &DevFacts,
) -> Result<Action, BlkStatus> {
    let Some(ty) = ReqType::from_raw(parts.header.type_) else {
        return Err(BlkStatus::Unsupp);
    };
    match ty {
        ReqType::In | ReqType::Out => {
            let write = ty == ReqType::Out;
            if !parts.data_len.is_multiple_of(SECTOR_SIZE) {
                return Err(BlkStatus::Unsupp);
            }
            if parts.data_len == 0 || (write && dev.readonly) {
                return Err(BlkStatus::IoErr);
            }
            // IN fills every data buffer; OUT only reads them.
            if data.iter().any(|s| s.writable == write) {
                return Err(BlkStatus::IoErr);
            }
            let (lba, nblocks) = dev
                .blocks(parts.header.sector, parts.data_len / SECTOR_SIZE)
                .ok_or(BlkStatus::IoErr)?;
            let op = if write { Op::Write } else { Op::Read };
            Ok(Action::Rw { op, lba, nblocks })
        }
        ReqType::Flush => {
            if parts.header.sector != 0 {
                return Err(BlkStatus::IoErr);
            }
            if !dev.ops.contains(Op::Flush) {
                return Err(BlkStatus::Unsupp);
            }
            Ok(Action::Flush)
        }
        ReqType::GetId => {
            if parts.data_len == 0 || data.iter().any(|s| !s.writable) {
                return Err(BlkStatus::IoErr);
            }
            Ok(Action::GetId)
        }
        ReqType::Discard | ReqType::WriteZeroes => {
            let op = if ty == ReqType::Discard {
                Op::Discard
            } else {
                Op::WriteZeroes
            };
            if !dev.ops.contains(op) {
                return Err(BlkStatus::Unsupp);
            }
            if dev.readonly {
                return Err(BlkStatus::IoErr);
            }
            if data.iter().any(|s| s.writable)
                || parts.data_len != (MAX_DWZ_SEGS as usize * DwzRange::SIZE) as u64
            {
                return Err(BlkStatus::Unsupp);
            }
            let r = range.ok_or(BlkStatus::IoErr)?;
            if r.num_sectors == 0 || r.num_sectors > MAX_DWZ_SECTORS {
                return Err(BlkStatus::IoErr);
            }
            // Discard's only flag bit is reserved; write zeroes may carry "unmap" (bit 0).
            let allowed = if op == Op::Discard { 0 } else { 1 };
            if r.flags & !allowed != 0 {
                return Err(BlkStatus::Unsupp);
            }
            let (lba, nblocks) = dev
                .blocks(r.sector, u64::from(r.num_sectors))
                .ok_or(BlkStatus::IoErr)?;
            Ok(Action::Range { op, lba, nblocks })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ReqHeader;

    const DEV: DevFacts = DevFacts {
        block_size: 4096,
        num_blocks: 256,
        ops: OpSet::ALL,
        readonly: false,
    };

    fn parts(type_: u32, sector: u64, data_len: u64) -> BlkParts {
        BlkParts {
            header: ReqHeader {
                type_,
                ioprio: 0,
                sector,
            },
            status: 0x1000,
            data_len,
        }
    }

    fn seg(len: u32, writable: bool) -> Segment {
        Segment {
            addr: 0x2000,
            len,
            writable,
        }
    }

    #[test]
    fn reads_and_writes_map_sectors_to_blocks() {
        let a = classify(&parts(0, 16, 8192), &[seg(8192, true)], None, &DEV);
        assert_eq!(
            a,
            Ok(Action::Rw {
                op: Op::Read,
                lba: 2,
                nblocks: 2
            })
        );
        let a = classify(&parts(1, 0, 4096), &[seg(4096, false)], None, &DEV);
        assert_eq!(
            a,
            Ok(Action::Rw {
                op: Op::Write,
                lba: 0,
                nblocks: 1
            })
        );
    }

    #[test]
    fn bad_reads_and_writes_get_spdks_statuses() {
        let c = |p: BlkParts, d: &[Segment]| classify(&p, d, None, &DEV);
        // Not whole sectors: UNSUPP.
        assert_eq!(
            c(parts(0, 0, 100), &[seg(100, true)]),
            Err(BlkStatus::Unsupp)
        );
        // Whole sectors but not whole 4 KiB blocks, or misaligned: IOERR.
        assert_eq!(
            c(parts(0, 0, 512), &[seg(512, true)]),
            Err(BlkStatus::IoErr)
        );
        assert_eq!(
            c(parts(0, 1, 4096), &[seg(4096, true)]),
            Err(BlkStatus::IoErr)
        );
        // Past the end, and an end that overflows.
        assert_eq!(
            c(parts(0, 2048, 4096), &[seg(4096, true)]),
            Err(BlkStatus::IoErr)
        );
        assert_eq!(
            c(parts(0, u64::MAX - 7, 4096), &[seg(4096, true)]),
            Err(BlkStatus::IoErr)
        );
        // Wrong direction of buffers.
        assert_eq!(
            c(parts(0, 0, 4096), &[seg(4096, false)]),
            Err(BlkStatus::IoErr)
        );
        assert_eq!(
            c(parts(1, 0, 4096), &[seg(4096, true)]),
            Err(BlkStatus::IoErr)
        );
        // No data.
        assert_eq!(c(parts(0, 0, 0), &[]), Err(BlkStatus::IoErr));
        // Unknown type.
        assert_eq!(c(parts(2, 0, 0), &[]), Err(BlkStatus::Unsupp));
    }

    #[test]
    fn readonly_refuses_writes_discards_and_write_zeroes() {
        let ro = DevFacts {
            readonly: true,
            ..DEV
        };
        let w = classify(&parts(1, 0, 4096), &[seg(4096, false)], None, &ro);
        assert_eq!(w, Err(BlkStatus::IoErr));
        let r = Some(DwzRange {
            sector: 0,
            num_sectors: 8,
            flags: 0,
        });
        let d = classify(&parts(11, 0, 16), &[seg(16, false)], r, &ro);
        assert_eq!(d, Err(BlkStatus::IoErr));
        let rd = classify(&parts(0, 0, 4096), &[seg(4096, true)], None, &ro);
        assert!(rd.is_ok());
    }

    #[test]
    fn flush_get_id_and_ranges() {
        assert_eq!(
            classify(&parts(4, 0, 0), &[], None, &DEV),
            Ok(Action::Flush)
        );
        assert_eq!(
            classify(&parts(4, 8, 0), &[], None, &DEV),
            Err(BlkStatus::IoErr)
        );
        let no_flush = DevFacts {
            ops: OpSet::READ_WRITE,
            ..DEV
        };
        assert_eq!(
            classify(&parts(4, 0, 0), &[], None, &no_flush),
            Err(BlkStatus::Unsupp)
        );
        assert_eq!(
            classify(&parts(8, 0, 20), &[seg(20, true)], None, &DEV),
            Ok(Action::GetId)
        );
        let r = |sector, num_sectors, flags| {
            Some(DwzRange {
                sector,
                num_sectors,
                flags,
            })
        };
        let dz = |ty, range| classify(&parts(ty, 0, 16), &[seg(16, false)], range, &DEV);
        assert_eq!(
            dz(13, r(8, 16, 1)),
            Ok(Action::Range {
                op: Op::WriteZeroes,
                lba: 1,
                nblocks: 2
            })
        );
        assert_eq!(dz(11, r(8, 16, 1)), Err(BlkStatus::Unsupp));
        assert_eq!(dz(11, r(8, 0, 0)), Err(BlkStatus::IoErr));
        assert_eq!(dz(11, r(8, MAX_DWZ_SECTORS + 8, 0)), Err(BlkStatus::IoErr));
        assert_eq!(dz(11, r(4, 8, 0)), Err(BlkStatus::IoErr));
        assert_eq!(dz(11, r(2040, 16, 0)), Err(BlkStatus::IoErr));
        // Two ranges (more than max_discard_seg).
        let two = classify(&parts(11, 0, 32), &[seg(32, false)], r(0, 8, 0), &DEV);
        assert_eq!(two, Err(BlkStatus::Unsupp));
        let rw_only = DevFacts {
            ops: OpSet::READ_WRITE,
            ..DEV
        };
        let unsupported = classify(&parts(11, 0, 16), &[seg(16, false)], r(0, 8, 0), &rw_only);
        assert_eq!(unsupported, Err(BlkStatus::Unsupp));
    }
}
