//! The blobstore's device for the metadata owner: synchronous I/O on the owner's own queue of
//! the base bdev, through a DMA bounce buffer (so any driver's memory rules hold). The owner is
//! a plain thread, so it may wait for its I/O; a reactor never runs this.

use std::sync::Arc;

use pmio::{BdevInfo, BlockDevice, DmaRegion, DriverQueue, HctxType, IoBuf, IoStatus, Op, Request};
use pmio_blobstore::{BlobDevice, Error, Result};

/// Bytes the bounce buffer holds: the largest piece one request moves.
const BOUNCE: usize = 1 << 20;

/// A [`BlobDevice`] over one queue of a base bdev.
pub struct BaseDevice {
    dev: Arc<dyn BlockDevice>,
    queue: Box<dyn DriverQueue>,
    rqs: Vec<Request>,
    done: Vec<u16>,
    bounce: DmaRegion,
    /// Largest piece in bytes: the bounce buffer and the device's transfer limit.
    max_bytes: u64,
    /// The device's boundary in bytes (0: none).
    boundary: u64,
}

impl std::fmt::Debug for BaseDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaseDevice")
            .field("dev", &self.dev.info().name)
            .finish()
    }
}

fn dev_err(info: &BdevInfo, what: impl std::fmt::Display) -> Error {
    Error::Device(format!("bdev {}: {what}", info.name))
}

impl BaseDevice {
    /// Opens a queue of `dev` for the calling thread.
    pub fn open(dev: Arc<dyn BlockDevice>) -> Result<BaseDevice> {
        let info = dev.info().clone();
        let queue = dev
            .open_queue(HctxType::Default, 0, info.max_queue_depth.min(4))
            .map_err(|e| dev_err(&info, e))?;
        let bounce =
            DmaRegion::with_options(BOUNCE, dev.dma_options()).map_err(|e| dev_err(&info, e))?;
        let bs = u64::from(info.block_size);
        let max_bytes = (BOUNCE as u64).min(u64::from(info.max_transfer_blocks).saturating_mul(bs));
        Ok(BaseDevice {
            queue,
            rqs: vec![Request::default(); 4],
            done: Vec::with_capacity(4),
            bounce,
            max_bytes,
            boundary: u64::from(info.boundary_blocks) * bs,
            dev,
        })
    }

    /// The base bdev.
    pub fn bdev(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// Runs one request to completion.
    fn run(&mut self, op: Op, offset: u64, len: u64) -> Result<()> {
        let info = self.dev.info();
        let bs = u64::from(info.block_size);
        let rq = &mut self.rqs[0];
        *rq = Request::default();
        rq.op = op;
        rq.lba = offset / bs;
        rq.nblocks = u32::try_from(len / bs).map_err(|_| dev_err(info, "request too large"))?;
        rq.buf = if op.has_data() {
            // SAFETY: the bounce buffer is ours, at least `len` bytes (callers cut pieces of
            // at most `max_bytes` <= BOUNCE), and untouched until the request completes below.
            unsafe { IoBuf::from_raw_parts(self.bounce.as_ptr(), len as u32) }
        } else {
            IoBuf::EMPTY
        };
        self.queue.submit(&mut self.rqs, &[0]);
        self.done.clear();
        let mut spins = 0u32;
        while self.queue.poll(&mut self.rqs, &mut self.done, 1) == 0 {
            spins += 1;
            if spins > 64 {
                std::thread::sleep(std::time::Duration::from_micros(20));
            } else {
                std::hint::spin_loop();
            }
        }
        match self.rqs[0].status {
            IoStatus::Success => Ok(()),
            s => Err(dev_err(
                info,
                format!(
                    "{} of {len} bytes at {offset} failed (errno {})",
                    op.name(),
                    s.to_errno()
                ),
            )),
        }
    }

    /// The pieces of `offset..offset+len` one request each may carry.
    fn pieces(&self, offset: u64, len: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < len {
            let off = offset + at;
            let mut n = (len - at).min(self.max_bytes);
            if self.boundary != 0 {
                n = n.min(self.boundary - off % self.boundary);
            }
            out.push((off, n));
            at += n;
        }
        out
    }
}

impl BlobDevice for BaseDevice {
    fn block_len(&self) -> u32 {
        self.dev.info().block_size
    }

    fn block_count(&self) -> u64 {
        self.dev.info().num_blocks
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut at = 0usize;
        for (off, n) in self.pieces(offset, buf.len() as u64) {
            self.run(Op::Read, off, n)?;
            buf[at..at + n as usize].copy_from_slice(&self.bounce.as_slice()[..n as usize]);
            at += n as usize;
        }
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let mut at = 0usize;
        for (off, n) in self.pieces(offset, data.len() as u64) {
            self.bounce.as_mut_slice()[..n as usize].copy_from_slice(&data[at..at + n as usize]);
            self.run(Op::Write, off, n)?;
            at += n as usize;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.dev.info().supported_ops.contains(Op::Flush) {
            self.run(Op::Flush, 0, 0)?;
        }
        Ok(())
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        if self.dev.info().supported_ops.contains(Op::WriteZeroes) {
            // Without a transfer limit on data-less ops, pieces are still bounded so that a
            // driver's block count (u32) never overflows.
            for (off, n) in self.pieces(offset, len) {
                self.run(Op::WriteZeroes, off, n)?;
            }
            return Ok(());
        }
        self.bounce.as_mut_slice().fill(0);
        for (off, n) in self.pieces(offset, len) {
            self.run(Op::Write, off, n)?;
        }
        Ok(())
    }

    fn unmap(&mut self, offset: u64, len: u64) -> Result<()> {
        if self.dev.info().supported_ops.contains(Op::Discard) {
            for (off, n) in self.pieces(offset, len) {
                self.run(Op::Discard, off, n)?;
            }
            return Ok(());
        }
        self.write_zeroes(offset, len)
    }
}
