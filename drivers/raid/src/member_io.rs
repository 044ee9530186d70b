//! Synchronous I/O on one member, for the array's metadata (superblock, write-intent bitmap)
//! from a plain thread: the RPC thread at create and examine, the superblock writer after a
//! member fails. It opens its own queue of the member and waits for each request, through a
//! DMA bounce buffer so every driver's memory rules hold. A reactor never runs this.

use std::sync::Arc;
use std::time::Duration;

use pmio::{BlockDevice, DmaRegion, DriverQueue, HctxType, IoBuf, IoStatus, Op, Request};

use crate::superblock::MAX_LEN;

/// Bytes the bounce buffer holds at least: the longest superblock, whole blocks of any size.
const BOUNCE: usize = MAX_LEN.next_multiple_of(4096);

/// What a synchronous member I/O failed with.
#[derive(Debug, thiserror::Error)]
pub enum MemberIoError {
    #[error("bdev {name}: cannot open a queue: {reason}")]
    Open { name: String, reason: String },
    #[error("bdev {name}: {op} of {nblocks} blocks at {lba} failed (errno {errno})")]
    Failed {
        name: String,
        op: &'static str,
        lba: u64,
        nblocks: u32,
        errno: i32,
    },
    #[error("bdev {name}: {len} bytes at once is more than the {cap} this queue moves")]
    TooLong {
        name: String,
        len: usize,
        cap: usize,
    },
}

/// One member's queue for metadata I/O.
pub struct MemberIo {
    dev: Arc<dyn BlockDevice>,
    queue: Box<dyn DriverQueue>,
    rqs: [Request; 1],
    done: Vec<u16>,
    bounce: DmaRegion,
    /// Blocks one request carries at most: the device's transfer limit.
    max_blocks: u64,
    /// The device's boundary in blocks (0: none).
    boundary: u64,
}

impl MemberIo {
    /// Opens a queue of `dev` for the calling thread, for metadata.
    pub fn open(dev: Arc<dyn BlockDevice>) -> Result<MemberIo, MemberIoError> {
        MemberIo::with_capacity(dev, BOUNCE)
    }

    /// Opens a queue of `dev` that moves up to `bytes` per call (a rebuild window).
    pub fn with_capacity(
        dev: Arc<dyn BlockDevice>,
        bytes: usize,
    ) -> Result<MemberIo, MemberIoError> {
        let open = |e: &dyn std::fmt::Display| MemberIoError::Open {
            name: dev.info().name.clone(),
            reason: e.to_string(),
        };
        let queue = dev
            .open_queue(HctxType::Default, 0, 1)
            .map_err(|e| open(&e))?;
        let bounce =
            DmaRegion::with_options(bytes.max(BOUNCE), dev.dma_options()).map_err(|e| open(&e))?;
        let info = dev.info();
        let max_blocks = u64::from(info.max_transfer_blocks.max(1));
        let boundary = u64::from(info.boundary_blocks);
        Ok(MemberIo {
            max_blocks,
            boundary,
            dev,
            queue,
            rqs: [Request::default()],
            done: Vec::with_capacity(1),
            bounce,
        })
    }

    /// The member bdev.
    pub fn bdev(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// Bytes one call moves at most.
    pub fn capacity(&self) -> usize {
        self.bounce.len()
    }

    fn block_size(&self) -> usize {
        self.dev.info().block_size as usize
    }

    /// Runs `nblocks` at `lba` through the bounce buffer (from its start) to completion, in
    /// as many requests as the device's transfer limit and boundary ask.
    fn run(&mut self, op: Op, lba: u64, nblocks: u32) -> Result<(), MemberIoError> {
        let mut at = 0u64;
        let total = u64::from(nblocks);
        loop {
            let here = lba + at;
            let mut n = (total - at).min(self.max_blocks);
            if self.boundary != 0 {
                n = n.min(self.boundary - here % self.boundary);
            }
            self.run_one(op, here, n as u32, at as usize * self.block_size())?;
            at += n;
            if at >= total {
                return Ok(());
            }
        }
    }

    /// Runs one request of `nblocks` at `lba`, its data at byte `buf_at` of the bounce buffer.
    fn run_one(
        &mut self,
        op: Op,
        lba: u64,
        nblocks: u32,
        buf_at: usize,
    ) -> Result<(), MemberIoError> {
        let len = nblocks as usize * self.block_size();
        let rq = &mut self.rqs[0];
        *rq = Request::default();
        rq.op = op;
        rq.lba = lba;
        rq.nblocks = nblocks;
        rq.buf = if op.has_data() {
            // SAFETY: the bounce buffer is ours, `buf_at + len` is within it (the callers check
            // the whole transfer against its length), and nothing else touches it until the
            // request completes below.
            unsafe { IoBuf::from_raw_parts(self.bounce.as_ptr().add(buf_at), len as u32) }
        } else {
            IoBuf::EMPTY
        };
        self.queue.submit(&mut self.rqs, &[0]);
        self.done.clear();
        let mut spins = 0u32;
        while self.queue.poll(&mut self.rqs, &mut self.done, 1) == 0 {
            spins += 1;
            if spins > 64 {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::hint::spin_loop();
            }
        }
        match self.rqs[0].status {
            IoStatus::Success => Ok(()),
            s => Err(MemberIoError::Failed {
                name: self.dev.info().name.clone(),
                op: op.name(),
                lba,
                nblocks,
                errno: s.to_errno(),
            }),
        }
    }

    fn blocks_of(&self, len: usize) -> Result<u32, MemberIoError> {
        let cap = self.bounce.len();
        if len.next_multiple_of(self.block_size()) > cap {
            return Err(MemberIoError::TooLong {
                name: self.dev.info().name.clone(),
                len,
                cap,
            });
        }
        Ok(len.div_ceil(self.block_size()) as u32)
    }

    /// Reads `len` bytes (rounded up to whole blocks) from block `lba`.
    pub fn read(&mut self, lba: u64, len: usize) -> Result<Vec<u8>, MemberIoError> {
        let n = self.blocks_of(len)?;
        self.run(Op::Read, lba, n)?;
        Ok(self.bounce.as_slice()[..len].to_vec())
    }

    /// Writes `data` (zero-padded to whole blocks) at block `lba`, then flushes it durable.
    pub fn write_durable(&mut self, lba: u64, data: &[u8]) -> Result<(), MemberIoError> {
        self.write(lba, data)?;
        self.flush()
    }

    /// Writes `data` (zero-padded to whole blocks) at block `lba`.
    pub fn write(&mut self, lba: u64, data: &[u8]) -> Result<(), MemberIoError> {
        let n = self.blocks_of(data.len())?;
        let whole = n as usize * self.block_size();
        let b = &mut self.bounce.as_mut_slice()[..whole];
        b[..data.len()].copy_from_slice(data);
        b[data.len()..].fill(0);
        self.run(Op::Write, lba, n)
    }

    /// Makes every completed write durable (where the device has a volatile cache).
    pub fn flush(&mut self) -> Result<(), MemberIoError> {
        if self.dev.info().supported_ops.contains(Op::Flush) {
            self.run_one(Op::Flush, 0, 0, 0)?;
        }
        Ok(())
    }
}
