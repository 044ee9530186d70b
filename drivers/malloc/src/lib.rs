//! The malloc block device: a RAM disk. Reads return what was written; any reactor's queue
//! may address any LBA, because the memory is shared by every queue of the device.
//!
//! Memory model: the disk is an array of `AtomicU64` words, shared by every queue, and only
//! ever accessed atomically or by the copy routines of `copy` (relaxed atomics, or on
//! x86-64 `rep movsb` in assembly, whose accesses are the hardware's). That keeps two
//! reactors writing the same block at the same time *defined* behaviour in Rust (no data
//! race on non-atomic memory): the block ends up with some mix of the two writes, exactly the
//! "torn write" a real disk may show. Ordering writes to the same block is the user's job, as
//! on any block device. The memory is a zero-filled [`pmio::dma::DmaRegion`] (2 MiB pages
//! where the machine has them), populated at creation.
//!
//! ```
//! use pmio::BlockDevice;
//! use pmio_malloc::{MallocDevice, MallocOptions};
//!
//! let dev = MallocDevice::new(MallocOptions { num_blocks: 2048, ..MallocOptions::default() }).unwrap();
//! assert_eq!(dev.info().size_bytes(), 2048 * 512);
//! ```

#[cfg(feature = "cli")]
pub mod cli;
mod copy;
#[cfg(feature = "rpc")]
pub mod rpc;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use pmio::dma::DmaRegion;
use pmio::{
    BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, IoStatus, Op, OpSet,
    Request, Uuid,
};

/// Options of a malloc device. Defaults: `Malloc0`, 64 MiB of 512-byte blocks (SPDK's
/// `bdev_malloc_create` default block size is 512), one default queue, up to 4096 deep.
#[derive(Clone, Debug)]
pub struct MallocOptions {
    /// Device name (unique in a registry).
    pub name: String,
    /// UUID; a random one when `None`.
    pub uuid: Option<Uuid>,
    /// Logical block size: a power of two from 512 to 65536.
    pub block_size: u32,
    /// Number of logical blocks (> 0).
    pub num_blocks: u64,
    /// Hardware queues one reactor may open per type.
    pub queues: HctxQueues,
    /// Deepest queue that may be opened (1..=65535).
    pub max_queue_depth: u32,
    /// Largest request in blocks (default unlimited). The block layer splits larger I/O; a
    /// request the device is handed beyond it (or across `boundary_blocks`) fails with
    /// `EINVAL`, as a real device refuses one above its MDTS. For tests of splitting.
    pub max_transfer_blocks: u32,
    /// No request may cross a multiple of this many blocks (default 0: none); see
    /// [`BdevInfo::boundary_blocks`].
    pub boundary_blocks: u32,
    /// TEST ONLY — fault injection. When set, the stored contents of this block are
    /// corrupted (one byte flipped in memory) the first time it is read after it was
    /// written, simulating a bit flip in the medium. Used by the end-to-end test that proves
    /// `pmio-perf --verify` detects corruption. Never set it for real data.
    pub corrupt_lba: Option<u64>,
}

impl Default for MallocOptions {
    fn default() -> Self {
        MallocOptions {
            name: "Malloc0".into(),
            uuid: None,
            block_size: 512,
            num_blocks: (64 << 20) / 512,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 4096,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
            corrupt_lba: None,
        }
    }
}

/// The disk's memory: a zero-filled [`DmaRegion`] (2 MiB pages where available, as SPDK's
/// malloc bdev takes hugepage memory) seen as 64-bit words, shared by every queue.
struct Memory {
    region: DmaRegion,
    words: usize,
}

impl Memory {
    fn new(bytes: u64) -> Result<Memory, String> {
        let len =
            usize::try_from(bytes).map_err(|_| format!("{bytes} bytes do not fit in memory"))?;
        let region = DmaRegion::new(len).map_err(|e| e.to_string())?;
        Ok(Memory {
            region,
            words: len / 8,
        })
    }

    /// The disk as words.
    #[inline]
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the region is a live mapping of at least `words * 8` bytes, page-aligned
        // (so 8-aligned), zero-filled by the kernel — and zero is a valid `AtomicU64`. It is
        // only ever accessed through these atomics or `copy`'s assembly (never through
        // `&mut [u8]`), and it lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().cast::<AtomicU64>(), self.words) }
    }
}

const CORRUPT_ARMED: u8 = 0;
const CORRUPT_WRITTEN: u8 = 1;
const CORRUPT_DONE: u8 = 2;

/// A malloc (RAM) block device.
pub struct MallocDevice {
    info: BdevInfo,
    mem: Arc<Memory>,
    corrupt_lba: Option<u64>,
    corrupt_state: Arc<AtomicU8>,
}

impl std::fmt::Debug for MallocDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MallocDevice")
            .field("info", &self.info)
            .finish()
    }
}

impl MallocDevice {
    /// Validates `opts` and allocates the (zeroed, lazily committed) memory.
    pub fn new(opts: MallocOptions) -> Result<Arc<MallocDevice>, BdevError> {
        let info = BdevInfo {
            name: opts.name.clone(),
            uuid: opts.uuid.unwrap_or_else(Uuid::new_v4),
            product_name: "Malloc disk".into(),
            block_size: opts.block_size,
            num_blocks: opts.num_blocks,
            supported_ops: OpSet::ALL,
            queues: opts.queues,
            max_queue_depth: opts.max_queue_depth,
            max_transfer_blocks: opts.max_transfer_blocks,
            boundary_blocks: opts.boundary_blocks,
        };
        info.validate()?;
        if let Some(l) = opts.corrupt_lba
            && l >= opts.num_blocks
        {
            return Err(info.invalid(format!("corrupt_lba {l} is beyond the device")));
        }
        let bytes = info.size_bytes();
        let mem = Memory::new(bytes)
            .map_err(|e| info.invalid(format!("cannot allocate {bytes} bytes: {e}")))?;
        if opts.corrupt_lba.is_some() {
            log::warn!(
                "bdev {}: test-only corruption of one block is enabled",
                info.name
            );
        }
        Ok(Arc::new(MallocDevice {
            info,
            mem: Arc::new(mem),
            corrupt_lba: opts.corrupt_lba,
            corrupt_state: Arc::new(AtomicU8::new(CORRUPT_ARMED)),
        }))
    }
}

impl BlockDevice for MallocDevice {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        let cap = (depth as usize).next_power_of_two();
        Ok(Box::new(MallocQueue {
            mem: Arc::clone(&self.mem),
            block_size: self.info.block_size,
            num_blocks: self.info.num_blocks,
            max_transfer: self.info.max_transfer_blocks,
            boundary: self.info.boundary_blocks,
            corrupt_lba: self.corrupt_lba,
            corrupt_state: Arc::clone(&self.corrupt_state),
            ring: vec![0u16; cap].into_boxed_slice(),
            mask: cap - 1,
            head: 0,
            tail: 0,
        }))
    }
}

/// One reactor's queue of a malloc device. Data moves at `submit`; completions are reported
/// at the next `poll`, in submission order.
pub struct MallocQueue {
    mem: Arc<Memory>,
    block_size: u32,
    num_blocks: u64,
    /// The device's limits (`BdevInfo`): a request beyond them is refused.
    max_transfer: u32,
    boundary: u32,
    corrupt_lba: Option<u64>,
    corrupt_state: Arc<AtomicU8>,
    ring: Box<[u16]>,
    mask: usize,
    head: usize,
    tail: usize,
}

impl MallocQueue {
    /// Executes one request against memory and returns its status.
    fn execute(&self, rq: &Request) -> IoStatus {
        let nblocks = u64::from(rq.nblocks);
        if rq.op == Op::Flush {
            return IoStatus::Success;
        }
        let Some(end) = rq.lba.checked_add(nblocks) else {
            return IoStatus::Errno(libc::EINVAL);
        };
        if end > self.num_blocks {
            return IoStatus::Errno(libc::EINVAL);
        }
        if pmio::bdev::split::must_split(rq.lba, rq.nblocks, self.max_transfer, self.boundary) {
            return self.beyond_limits(rq);
        }
        let bs_words = (self.block_size / 8) as usize;
        let first = rq.lba as usize * bs_words;
        let count = rq.nblocks as usize * bs_words;
        let words = &self.mem.words()[first..first + count];
        match rq.op {
            Op::Read | Op::Write => {
                if u64::from(rq.buf.len()) < nblocks * u64::from(self.block_size) {
                    return IoStatus::Errno(libc::EINVAL);
                }
                let p = rq.buf.as_ptr();
                if rq.op == Op::Read {
                    if let Some(l) = self.corrupt_lba
                        && (rq.lba..end).contains(&l)
                    {
                        self.maybe_corrupt_on_read(l, bs_words);
                    }
                    // SAFETY: the submitter guarantees (IoBuf::from_raw_parts) that the
                    // buffer is valid and exclusively ours until completion; its length was
                    // checked above to cover `count` words.
                    unsafe { copy::disk_to_buf(words, p) };
                } else {
                    // SAFETY: as above, for reads of the submitter's buffer.
                    unsafe { copy::buf_to_disk(p, words) };
                    if let Some(l) = self.corrupt_lba
                        && (rq.lba..end).contains(&l)
                    {
                        let _ = self.corrupt_state.compare_exchange(
                            CORRUPT_ARMED,
                            CORRUPT_WRITTEN,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                }
            }
            Op::WriteZeroes | Op::Discard => copy::zero_disk(words),
            Op::Flush => {}
        }
        IoStatus::Success
    }

    /// A request larger than the device takes, or across its boundary: the block layer
    /// should have split it.
    #[cold]
    fn beyond_limits(&self, rq: &Request) -> IoStatus {
        log::error!(
            "malloc: {} blocks at {} exceed the largest transfer ({} blocks) or cross a {}-block boundary",
            rq.nblocks,
            rq.lba,
            self.max_transfer,
            self.boundary
        );
        IoStatus::Errno(libc::EINVAL)
    }

    /// TEST ONLY fault injection: flips one byte of block `lba` in memory the first time it
    /// is read after a write.
    #[cold]
    fn maybe_corrupt_on_read(&self, lba: u64, bs_words: usize) {
        if self
            .corrupt_state
            .compare_exchange(
                CORRUPT_WRITTEN,
                CORRUPT_DONE,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            // A byte in the middle of the block: past any header a pattern may keep.
            let w = lba as usize * bs_words + bs_words / 2;
            self.mem.words()[w].fetch_xor(0xff, Ordering::Relaxed);
            log::warn!("test-only corruption: flipped a byte of block {lba}");
        }
    }
}

impl DriverQueue for MallocQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        for &t in tags {
            let rq = &mut rqs[t as usize];
            rq.status = self.execute(rq);
            self.ring[self.tail & self.mask] = t;
            self.tail = self.tail.wrapping_add(1);
        }
    }

    fn poll(&mut self, _rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let n = self.outstanding().min(max);
        for i in 0..n {
            done.push(self.ring[(self.head + i) & self.mask]);
        }
        self.head = self.head.wrapping_add(n);
        n
    }

    fn outstanding(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio::IoBuf;

    fn dev(num_blocks: u64, corrupt_lba: Option<u64>) -> Arc<MallocDevice> {
        MallocDevice::new(MallocOptions {
            num_blocks,
            corrupt_lba,
            ..Default::default()
        })
        .unwrap()
    }

    /// Runs one request through a queue and returns its status.
    fn run(
        q: &mut Box<dyn DriverQueue>,
        op: Op,
        lba: u64,
        nblocks: u32,
        buf: &mut [u8],
    ) -> IoStatus {
        let mut rqs = vec![Request::default()];
        rqs[0].op = op;
        rqs[0].lba = lba;
        rqs[0].nblocks = nblocks;
        // SAFETY: `buf` outlives the request, which completes before this function returns.
        rqs[0].buf = unsafe { IoBuf::from_raw_parts(buf.as_mut_ptr(), buf.len() as u32) };
        q.submit(&mut rqs, &[0]);
        let mut done = Vec::with_capacity(1);
        assert_eq!(q.poll(&mut rqs, &mut done, 1), 1);
        assert_eq!(done, vec![0]);
        rqs[0].status
    }

    #[test]
    fn reads_return_what_was_written_across_queues() {
        let d = dev(64, None);
        let mut q0 = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut q1 = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut w: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(run(&mut q0, Op::Write, 10, 2, &mut w), IoStatus::Success);
        let mut r = vec![0u8; 1024];
        assert_eq!(run(&mut q1, Op::Read, 10, 2, &mut r), IoStatus::Success);
        assert_eq!(r, w);
        // Unaligned user buffers work too.
        let mut big = vec![0u8; 513];
        assert_eq!(
            run(&mut q1, Op::Read, 11, 1, &mut big[1..]),
            IoStatus::Success
        );
        assert_eq!(&big[1..], &w[512..]);
        // Never-written blocks read zero.
        assert_eq!(
            run(&mut q1, Op::Read, 0, 1, &mut r[..512]),
            IoStatus::Success
        );
        assert!(r[..512].iter().all(|&b| b == 0));
    }

    #[test]
    fn write_zeroes_and_discard_zero_and_flush_succeeds() {
        let d = dev(8, None);
        let mut q = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut w = vec![0xabu8; 512 * 4];
        assert_eq!(run(&mut q, Op::Write, 0, 4, &mut w), IoStatus::Success);
        assert_eq!(
            run(&mut q, Op::WriteZeroes, 1, 1, &mut []),
            IoStatus::Success
        );
        assert_eq!(run(&mut q, Op::Discard, 3, 1, &mut []), IoStatus::Success);
        assert_eq!(run(&mut q, Op::Flush, 0, 0, &mut []), IoStatus::Success);
        let mut r = vec![0u8; 512 * 4];
        assert_eq!(run(&mut q, Op::Read, 0, 4, &mut r), IoStatus::Success);
        for (blk, chunk) in r.chunks(512).enumerate() {
            let want = if blk == 1 || blk == 3 { 0 } else { 0xab };
            assert!(chunk.iter().all(|&b| b == want), "block {blk}");
        }
    }

    #[test]
    fn out_of_range_and_short_buffers_fail_with_einval() {
        let d = dev(8, None);
        let mut q = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut b = vec![0u8; 1024];
        assert_eq!(
            run(&mut q, Op::Read, 7, 2, &mut b),
            IoStatus::Errno(libc::EINVAL)
        );
        assert_eq!(
            run(&mut q, Op::Read, u64::MAX, 1, &mut b),
            IoStatus::Errno(libc::EINVAL)
        );
        assert_eq!(
            run(&mut q, Op::Write, 0, 3, &mut b),
            IoStatus::Errno(libc::EINVAL)
        );
    }

    /// A request beyond the device's limits (the block layer splits such I/O) is refused.
    #[test]
    fn requests_beyond_the_limits_fail_with_einval() {
        let d = MallocDevice::new(MallocOptions {
            num_blocks: 64,
            max_transfer_blocks: 4,
            boundary_blocks: 6,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            (d.info().max_transfer_blocks, d.info().boundary_blocks),
            (4, 6)
        );
        let mut q = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut b = vec![0u8; 5 * 512];
        for (lba, n, ok) in [(0, 4, true), (0, 5, false), (4, 2, true), (5, 2, false)] {
            let want = if ok {
                IoStatus::Success
            } else {
                IoStatus::Errno(libc::EINVAL)
            };
            assert_eq!(run(&mut q, Op::Write, lba, n, &mut b), want, "{n} at {lba}");
        }
    }

    #[test]
    fn options_are_validated() {
        for o in [
            MallocOptions {
                block_size: 100,
                ..Default::default()
            },
            MallocOptions {
                num_blocks: 0,
                ..Default::default()
            },
            MallocOptions {
                corrupt_lba: Some(1 << 40),
                ..Default::default()
            },
            MallocOptions {
                max_queue_depth: 0,
                ..Default::default()
            },
        ] {
            assert!(matches!(
                MallocDevice::new(o),
                Err(BdevError::InvalidConfig { .. })
            ));
        }
        let d = dev(8, None);
        assert!(d.open_queue(HctxType::Read, 0, 4).is_err());
        assert!(d.open_queue(HctxType::Default, 0, 5000).is_err());
    }

    #[test]
    fn fault_corrupt_lba_flips_one_byte_once_after_a_write() {
        let d = dev(8, Some(2));
        let mut q = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut r = vec![0u8; 512];
        // Read before any write: untouched.
        assert_eq!(run(&mut q, Op::Read, 2, 1, &mut r), IoStatus::Success);
        assert!(r.iter().all(|&b| b == 0));
        let mut w = vec![0x11u8; 512];
        assert_eq!(run(&mut q, Op::Write, 2, 1, &mut w), IoStatus::Success);
        assert_eq!(run(&mut q, Op::Read, 2, 1, &mut r), IoStatus::Success);
        let diff: Vec<usize> = (0..512).filter(|&i| r[i] != w[i]).collect();
        assert_eq!(diff, vec![256], "exactly one byte flipped, mid-block");
        assert_eq!(r[256], 0x11 ^ 0xff);
        // The corruption is in the medium: it persists, and happens only once.
        let mut r2 = vec![0u8; 512];
        assert_eq!(run(&mut q, Op::Read, 2, 1, &mut r2), IoStatus::Success);
        assert_eq!(r2, r);
    }
}
