//! Decisions made as pure functions: what the kernel is told about a bdev (SET_PARAMS), and
//! what one ublk request becomes on the bdev. Table-tested; no I/O.

use pmio::{BdevInfo, Io, IoBuf, Op, OpSet, ReqFlags};

use crate::sys::{
    ATTR_FUA, ATTR_VOLATILE_CACHE, IO_F_FUA, IO_OP_DISCARD, IO_OP_FLUSH, IO_OP_READ, IO_OP_WRITE,
    IO_OP_WRITE_ZEROES, IoDesc, PARAM_TYPE_BASIC, PARAM_TYPE_DISCARD, PARAMS_LEN, ParamBasic,
    ParamDiscard, Params,
};

/// Linux's sector.
pub const SECTOR_SHIFT: u32 = 9;

/// Largest discard or write-zeroes one request may carry, in sectors (16 MiB, as SPDK).
pub const MAX_DISCARD_SECTORS: u32 = 32768;

/// What the data path needs of a bdev, taken once when a queue starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// log2 of the block size (9..=12: the kernel's logical block sizes).
    pub block_shift: u32,
    pub num_blocks: u64,
    pub ops: OpSet,
    /// Bytes each tag's buffer holds (the disk's largest request).
    pub buf_bytes: u32,
}

impl Geometry {
    /// The geometry of `info` served with `buf_bytes` per tag, or why the kernel cannot
    /// have it as a disk.
    pub fn of(info: &BdevInfo, buf_bytes: u32) -> Result<Geometry, String> {
        let bs = info.block_size;
        if !bs.is_power_of_two() || !(512..=4096).contains(&bs) {
            return Err(format!(
                "block size {bs}: a ublk disk's logical block is 512 to 4096 bytes"
            ));
        }
        if u64::from(buf_bytes) < u64::from(bs) {
            return Err(format!(
                "I/O buffer of {buf_bytes} bytes is below one block"
            ));
        }
        Ok(Geometry {
            block_shift: bs.trailing_zeros(),
            num_blocks: info.num_blocks,
            ops: info.supported_ops,
            buf_bytes,
        })
    }

    fn sectors_per_block_shift(&self) -> u32 {
        self.block_shift - SECTOR_SHIFT
    }
}

/// SET_PARAMS for a disk of geometry `g`: the block size, size and largest request; a
/// volatile cache (so flushes come) and FUA where the bdev flushes; discard and write-zeroes
/// limits where it has those ops.
pub fn dev_params(g: &Geometry) -> Params {
    let shift = g.block_shift as u8;
    let mut p = Params {
        len: PARAMS_LEN,
        types: PARAM_TYPE_BASIC,
        basic: ParamBasic {
            attrs: 0,
            logical_bs_shift: shift,
            physical_bs_shift: shift,
            io_opt_shift: shift,
            io_min_shift: shift,
            max_sectors: g.buf_bytes >> SECTOR_SHIFT,
            chunk_sectors: 0,
            dev_sectors: g.num_blocks << g.sectors_per_block_shift(),
            virt_boundary_mask: 0,
        },
        discard: ParamDiscard::default(),
    };
    if g.ops.contains(Op::Flush) {
        p.basic.attrs |= ATTR_VOLATILE_CACHE | ATTR_FUA;
    }
    let discard = g.ops.contains(Op::Discard);
    let zeroes = g.ops.contains(Op::WriteZeroes);
    if discard || zeroes {
        p.types |= PARAM_TYPE_DISCARD;
        p.discard = ParamDiscard {
            discard_alignment: 0,
            discard_granularity: 1 << g.block_shift,
            max_discard_sectors: if discard { MAX_DISCARD_SECTORS } else { 0 },
            max_write_zeroes_sectors: if zeroes { MAX_DISCARD_SECTORS } else { 0 },
            max_discard_segments: 1,
            reserved0: 0,
        };
    }
    p
}

/// Whether a disk moves its data by user copy (`UBLK_F_USER_COPY`): as `asked`
/// (`ublk_start_disk`'s `user_copy`), else `default`, where the kernel offers it (`kernel`) and
/// the target was not created with `disable_user_copy` (`disabled`). `None`: user copy
/// asked of a kernel without it. `disabled` turns off only the default: a disk that asks
/// for user copy is the more precise word.
pub fn use_user_copy(
    asked: Option<bool>,
    default: bool,
    kernel: bool,
    disabled: bool,
) -> Option<bool> {
    match asked {
        Some(true) if !kernel => None,
        Some(on) => Some(on),
        None => Some(default && kernel && !disabled),
    }
}

/// What a request becomes: a bdev I/O (without its token), or a result to commit at once (a
/// negative errno).
#[derive(Clone, Copy, Debug)]
pub enum Plan {
    Bdev(Io),
    Fail(i32),
}

/// The bdev I/O for request `iod`, whose data goes through `buf` (the tag's buffer), on a
/// disk of geometry `g`. Bad requests (an op the bdev lacks, blocks past its end, a length
/// that is not whole blocks or larger than the buffer) fail with an errno instead.
pub fn plan(iod: &IoDesc, g: &Geometry, buf: IoBuf) -> Plan {
    let op = match iod.op() {
        IO_OP_READ => Op::Read,
        IO_OP_WRITE => Op::Write,
        IO_OP_FLUSH => Op::Flush,
        IO_OP_DISCARD => Op::Discard,
        IO_OP_WRITE_ZEROES => Op::WriteZeroes,
        _ => return Plan::Fail(-libc::EOPNOTSUPP),
    };
    if !g.ops.contains(op) {
        return Plan::Fail(-libc::EOPNOTSUPP);
    }
    let flags = if iod.op_flags & IO_F_FUA != 0 {
        ReqFlags::FUA
    } else {
        ReqFlags::NONE
    };
    if op == Op::Flush {
        return Plan::Bdev(Io {
            op,
            flags,
            ..Io::default()
        });
    }
    let spb = g.sectors_per_block_shift();
    let mask = (1u64 << spb) - 1;
    let (start, n) = (iod.start_sector, u64::from(iod.nr_sectors));
    if n == 0 || start & mask != 0 || n & mask != 0 {
        return Plan::Fail(-libc::EINVAL);
    }
    let (lba, nblocks) = (start >> spb, n >> spb);
    if lba
        .checked_add(nblocks)
        .is_none_or(|end| end > g.num_blocks)
    {
        return Plan::Fail(-libc::EIO);
    }
    let buf = if op.has_data() {
        let bytes = n << SECTOR_SHIFT;
        if bytes > u64::from(g.buf_bytes) || bytes > u64::from(buf.len()) {
            return Plan::Fail(-libc::EIO);
        }
        buf.range(0, bytes as u32)
    } else {
        IoBuf::EMPTY
    };
    Plan::Bdev(Io {
        op,
        lba,
        nblocks: nblocks as u32,
        buf,
        flags,
        ..Io::default()
    })
}

/// The result a commit carries for a request of `iod` that completed with `status`: its
/// bytes (what the kernel then copies, for a read), or a negative errno.
pub fn commit_result(iod: &IoDesc, status: pmio::IoStatus) -> i32 {
    if status.is_success() {
        (u64::from(iod.nr_sectors) << SECTOR_SHIFT).min(i32::MAX as u64) as i32
    } else {
        match status.to_errno() {
            0 => -libc::EIO,
            e => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio::IoStatus;

    /// (asked, default, kernel has it, target disabled it) -> the disk's mode.
    #[test]
    fn user_copy_as_asked_else_the_default_where_the_kernel_has_it() {
        let rows = [
            (Some(true), false, true, false, Some(true)),
            (Some(true), false, true, true, Some(true)),
            (Some(true), true, false, false, None),
            (Some(false), true, true, false, Some(false)),
            (Some(false), true, false, false, Some(false)),
            (None, true, true, false, Some(true)),
            (None, true, true, true, Some(false)),
            (None, true, false, false, Some(false)),
            (None, false, true, false, Some(false)),
        ];
        for (asked, default, kernel, disabled, want) in rows {
            assert_eq!(
                use_user_copy(asked, default, kernel, disabled),
                want,
                "{asked:?} {default} {kernel} {disabled}"
            );
        }
    }

    fn geo(bs_shift: u32, blocks: u64, ops: OpSet) -> Geometry {
        Geometry {
            block_shift: bs_shift,
            num_blocks: blocks,
            ops,
            buf_bytes: 128 << 10,
        }
    }

    /// What a row expects: (op, lba, nblocks, buffer bytes), or the failure.
    type Expect = Result<(Op, u64, u32, u32), Plan>;

    fn iod(op: u8, start: u64, n: u32) -> IoDesc {
        IoDesc {
            op_flags: u32::from(op),
            nr_sectors: n,
            start_sector: start,
            addr: 0,
        }
    }

    #[test]
    fn requests_become_bdev_io_or_fail() {
        let mut mem = vec![0u8; 128 << 10];
        // SAFETY: `mem` outlives every use of `buf` in this test and nothing else touches it.
        let buf = unsafe { IoBuf::from_raw_parts(mem.as_mut_ptr(), mem.len() as u32) };
        let all = OpSet::ALL;
        let rw = OpSet::READ_WRITE;
        let eio = Plan::Fail(-libc::EIO);
        let einval = Plan::Fail(-libc::EINVAL);
        let nosup = Plan::Fail(-libc::EOPNOTSUPP);
        // (geometry, request, expected (op, lba, nblocks, bytes) or failure)
        let rows: Vec<(Geometry, IoDesc, Expect)> = vec![
            (
                geo(9, 100, all),
                iod(IO_OP_READ, 0, 8),
                Ok((Op::Read, 0, 8, 4096)),
            ),
            (
                geo(12, 100, all),
                iod(IO_OP_WRITE, 16, 8),
                Ok((Op::Write, 2, 1, 4096)),
            ),
            (geo(12, 100, all), iod(IO_OP_WRITE, 4, 8), Err(einval)),
            (geo(12, 100, all), iod(IO_OP_READ, 0, 4), Err(einval)),
            (
                geo(9, 100, all),
                iod(IO_OP_READ, 99, 1),
                Ok((Op::Read, 99, 1, 512)),
            ),
            (geo(9, 100, all), iod(IO_OP_READ, 99, 2), Err(eio)),
            (geo(9, 100, all), iod(IO_OP_READ, u64::MAX, 2), Err(eio)),
            // 512 sectors = 256 KiB: more than the 128 KiB buffer.
            (geo(9, 1 << 20, all), iod(IO_OP_READ, 0, 512), Err(eio)),
            (geo(9, 100, all), iod(IO_OP_READ, 0, 0), Err(einval)),
            (
                geo(9, 100, all),
                iod(IO_OP_FLUSH, 0, 0),
                Ok((Op::Flush, 0, 0, 0)),
            ),
            (geo(9, 100, rw), iod(IO_OP_FLUSH, 0, 0), Err(nosup)),
            (
                geo(9, 100, all),
                iod(IO_OP_DISCARD, 8, 16),
                Ok((Op::Discard, 8, 16, 0)),
            ),
            (geo(9, 100, rw), iod(IO_OP_DISCARD, 8, 16), Err(nosup)),
            (
                geo(9, 100, all),
                iod(IO_OP_WRITE_ZEROES, 0, 100),
                Ok((Op::WriteZeroes, 0, 100, 0)),
            ),
            (geo(9, 100, all), iod(4, 0, 8), Err(nosup)),
            (geo(9, 100, all), iod(99, 0, 8), Err(nosup)),
        ];
        for (i, (g, d, want)) in rows.into_iter().enumerate() {
            let got = plan(&d, &g, buf);
            match (want, got) {
                (Ok((op, lba, n, bytes)), Plan::Bdev(io)) => {
                    assert_eq!(
                        (io.op, io.lba, io.nblocks, io.buf.len()),
                        (op, lba, n, bytes),
                        "row {i}"
                    );
                    if bytes > 0 {
                        assert_eq!(io.buf.as_ptr(), mem.as_mut_ptr(), "row {i}");
                    }
                }
                (Err(Plan::Fail(want)), Plan::Fail(got)) => assert_eq!(got, want, "row {i}"),
                (want, got) => panic!("row {i}: want {want:?}, got {got:?}"),
            }
        }
    }

    proptest::proptest! {
        /// Whatever the kernel writes in a descriptor, a request becomes either a failure
        /// with a negative errno or one bdev I/O inside the device and inside the tag's
        /// buffer, of exactly the request's bytes. Half the cases are built to sit at the
        /// device's end (ending up to a block before or after it), block-aligned, with an op
        /// there is.
        #[test]
        fn prop_any_descriptor_is_refused_or_fits(
            op_flags in proptest::prelude::any::<u32>(),
            nr_sectors in proptest::prelude::any::<u32>(),
            start_sector in proptest::prelude::any::<u64>(),
            near_end in proptest::prelude::any::<bool>(),
            op in 0u32..6,
            nblocks in 1u32..40,
            past in 0u64..3,
            bs_shift in 9u32..=12,
            blocks in 1u64..4096,
        ) {
            let mut mem = vec![0u8; 128 << 10];
            // SAFETY: `mem` outlives every use of `buf` in this case.
            let buf = unsafe { IoBuf::from_raw_parts(mem.as_mut_ptr(), mem.len() as u32) };
            let spb = bs_shift - SECTOR_SHIFT;
            let d = if near_end {
                let n = nblocks << spb;
                IoDesc {
                    op_flags: (op_flags & !0xff) | op,
                    nr_sectors: n,
                    start_sector: ((blocks + past).saturating_sub(1 + u64::from(nblocks))) << spb,
                    addr: 0,
                }
            } else {
                IoDesc { op_flags, nr_sectors, start_sector, addr: 0 }
            };
            let g = geo(bs_shift, blocks, OpSet::ALL);
            match plan(&d, &g, buf) {
                Plan::Fail(e) => proptest::prop_assert!(e < 0),
                Plan::Bdev(io) if io.op == Op::Flush => proptest::prop_assert_eq!(io.nblocks, 0),
                Plan::Bdev(io) => {
                    proptest::prop_assert!(io.nblocks > 0);
                    proptest::prop_assert!(io.lba + u64::from(io.nblocks) <= blocks);
                    proptest::prop_assert_eq!(
                        u64::from(io.nblocks) << bs_shift,
                        u64::from(d.nr_sectors) << SECTOR_SHIFT
                    );
                    if io.op.has_data() {
                        proptest::prop_assert_eq!(
                            u64::from(io.buf.len()),
                            u64::from(d.nr_sectors) << SECTOR_SHIFT
                        );
                        proptest::prop_assert!(io.buf.len() <= g.buf_bytes);
                    } else {
                        proptest::prop_assert_eq!(io.buf.len(), 0);
                    }
                }
            }
        }
    }

    #[test]
    fn fua_is_passed_on() {
        let mut d = iod(IO_OP_WRITE, 0, 8);
        d.op_flags |= IO_F_FUA;
        let mut mem = vec![0u8; 4096];
        // SAFETY: `mem` outlives `buf`'s use here.
        let buf = unsafe { IoBuf::from_raw_parts(mem.as_mut_ptr(), 4096) };
        let Plan::Bdev(io) = plan(&d, &geo(9, 100, OpSet::ALL), buf) else {
            panic!()
        };
        assert!(io.flags.contains(ReqFlags::FUA));
    }

    #[test]
    fn params_follow_the_bdev() {
        let g = geo(12, 1000, OpSet::ALL);
        let p = dev_params(&g);
        assert_eq!(p.basic.logical_bs_shift, 12);
        assert_eq!(p.basic.dev_sectors, 8000);
        assert_eq!(p.basic.max_sectors, 256);
        assert_eq!(p.types, PARAM_TYPE_BASIC | PARAM_TYPE_DISCARD);
        assert_eq!(p.basic.attrs, ATTR_VOLATILE_CACHE | ATTR_FUA);
        assert_eq!(p.discard.discard_granularity, 4096);
        assert_eq!(p.discard.max_discard_segments, 1);
        assert_eq!(p.discard.max_write_zeroes_sectors, MAX_DISCARD_SECTORS);
        let rw = dev_params(&geo(9, 10, OpSet::READ_WRITE));
        assert_eq!(rw.types, PARAM_TYPE_BASIC);
        assert_eq!(rw.basic.attrs, 0);
        let zeroes_only = dev_params(&geo(9, 10, OpSet::READ_WRITE.with(Op::WriteZeroes)));
        assert_eq!(zeroes_only.discard.max_discard_sectors, 0);
        assert_eq!(
            zeroes_only.discard.max_write_zeroes_sectors,
            MAX_DISCARD_SECTORS
        );
    }

    #[test]
    fn geometry_refuses_blocks_the_kernel_cannot_have() {
        let mut info = BdevInfo {
            name: "X".into(),
            uuid: pmio::Uuid::default(),
            product_name: "t".into(),
            block_size: 8192,
            num_blocks: 10,
            supported_ops: OpSet::ALL,
            queues: pmio::HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 128,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        };
        assert!(Geometry::of(&info, 128 << 10).unwrap_err().contains("8192"));
        info.block_size = 4096;
        assert_eq!(Geometry::of(&info, 128 << 10).unwrap().block_shift, 12);
    }

    #[test]
    fn commits_carry_bytes_or_errno() {
        let d = iod(IO_OP_READ, 0, 8);
        assert_eq!(commit_result(&d, IoStatus::Success), 4096);
        assert_eq!(
            commit_result(&d, IoStatus::Errno(libc::ENOSPC)),
            -libc::ENOSPC
        );
        assert_eq!(commit_result(&d, IoStatus::Timeout), -libc::ETIMEDOUT);
        assert_eq!(commit_result(&d, IoStatus::Pending), -libc::EIO);
    }
}
