//! The device a blobstore runs on: synchronous byte-range I/O in whole blocks, and a flush
//! that makes every completed write durable. A write that has returned but was not flushed
//! may be lost or land in any order with other unflushed writes when power is cut; the store
//! orders its metadata with flushes accordingly (see `store/persist.rs`).

use crate::{Error, Result};

/// A block device for the blobstore. Offsets and lengths are bytes, multiples of
/// [`block_len`](BlobDevice::block_len); the store never asks otherwise.
pub trait BlobDevice {
    /// Bytes per block: the smallest unit of I/O (the store's io unit).
    fn block_len(&self) -> u32;
    /// Blocks on the device.
    fn block_count(&self) -> u64;
    /// Reads `buf.len()` bytes from `offset`.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes `data` at `offset`. Durable only after a later [`flush`](BlobDevice::flush).
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()>;
    /// Makes every write that completed before it durable.
    fn flush(&mut self) -> Result<()>;
    /// Writes `len` zero bytes at `offset`.
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        const CHUNK: u64 = 64 << 10;
        let zeros = vec![0u8; CHUNK.min(len) as usize];
        let mut at = 0;
        while at < len {
            let n = CHUNK.min(len - at);
            self.write(offset + at, &zeros[..n as usize])?;
            at += n;
        }
        Ok(())
    }
    /// Deallocates `len` bytes at `offset`; they read back as zeroes afterwards on devices
    /// that support it (this default writes zeroes).
    fn unmap(&mut self, offset: u64, len: u64) -> Result<()> {
        self.write_zeroes(offset, len)
    }
    /// Bytes on the device.
    fn size(&self) -> u64 {
        self.block_count() * u64::from(self.block_len())
    }
}

/// A RAM device for tests: writes are durable at once, flush does nothing.
#[derive(Debug, Clone)]
pub struct MemDevice {
    data: Vec<u8>,
    block_len: u32,
}

impl MemDevice {
    /// A zeroed device of `size` bytes (rounded down to whole blocks).
    pub fn new(size: u64, block_len: u32) -> MemDevice {
        let size = size - size % u64::from(block_len);
        MemDevice {
            data: vec![0; size as usize],
            block_len,
        }
    }

    /// The device's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The device's bytes, to corrupt or patch in tests.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    fn range(&self, offset: u64, len: u64) -> Result<std::ops::Range<usize>> {
        let bl = u64::from(self.block_len);
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.data.len() as u64);
        match end {
            Some(end) if offset.is_multiple_of(bl) && len.is_multiple_of(bl) => {
                Ok(offset as usize..end as usize)
            }
            _ => Err(Error::Device(format!(
                "I/O {offset}+{len} is past the end ({}) or not aligned to {bl}",
                self.data.len()
            ))),
        }
    }
}

impl BlobDevice for MemDevice {
    fn block_len(&self) -> u32 {
        self.block_len
    }

    fn block_count(&self) -> u64 {
        self.data.len() as u64 / u64::from(self.block_len)
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.range(offset, buf.len() as u64)?;
        buf.copy_from_slice(&self.data[r]);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len() as u64)?;
        self.data[r].copy_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        self.data[r].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_device_checks_ranges() {
        let mut d = MemDevice::new(8192, 512);
        assert_eq!(d.block_count(), 16);
        d.write(512, &[1; 512]).unwrap();
        let mut b = [0u8; 1024];
        d.read(0, &mut b).unwrap();
        assert_eq!((b[511], b[512], b[1023]), (0, 1, 1));
        assert!(d.write(8192, &[0; 512]).is_err());
        assert!(d.read(100, &mut [0; 512]).is_err());
        d.unmap(512, 512).unwrap();
        d.read(512, &mut b[..512]).unwrap();
        assert!(b[..512].iter().all(|&x| x == 0));
    }
}
