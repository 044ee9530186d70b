//! Command data buffers of one poll group: DMA-capable memory carved into fixed-size buffers
//! (the transport's `max_io_size`), handed to a command for its data and straight to the bdev,
//! and back to the free list when the command's response has gone out. Chunks are added when
//! every buffer is in use and kept: no allocation per I/O once the group has warmed up.

use std::ptr::NonNull;

use pmio::dma::{DmaError, DmaRegion};
use pmio::{BlockDevice, IoBuf};

/// Bytes per chunk at least (one 2 MiB huge page where they are reserved).
const CHUNK: usize = 2 << 20;

/// One command's buffer: `len` bytes at `ptr`, owned by the command until it is given back.
#[derive(Debug)]
pub(crate) struct DataBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl DataBuf {
    /// The first `len` bytes as the bdev's buffer.
    pub fn io(&self, len: u32) -> IoBuf {
        assert!(len as usize <= self.len);
        // SAFETY: the buffer is this command's alone until it is given back to the pool,
        // which happens only after the I/O carrying it has completed.
        unsafe { IoBuf::from_raw_parts(self.ptr.as_ptr(), len) }
    }

    /// Bytes `off..off+len` for reading (data the host sends back).
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds of a live chunk; no device writes into the buffer while its data is
        // being sent (the I/O that filled it has completed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Bytes `off..off+len` for writing (data the host sends, read from the socket).
    pub fn bytes_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        assert!(off.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds of a live chunk; `&mut self` is the only handle to this buffer and
        // no I/O uses it while its data arrives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) }
    }

    /// Copies `data` in at `off` (data the host sent).
    pub fn fill(&mut self, off: usize, data: &[u8]) {
        assert!(
            off.checked_add(data.len())
                .is_some_and(|end| end <= self.len)
        );
        // SAFETY: in bounds of a live chunk; no I/O uses the buffer while its data arrives.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        };
    }
}

/// The pool. Dropped only after every bdev queue that may still use its memory.
pub(crate) struct BufPool {
    buf_size: usize,
    chunks: Vec<DmaRegion>,
    free: Vec<NonNull<u8>>,
    /// Buffers handed out and not given back.
    out: usize,
}

impl BufPool {
    /// An empty pool of `buf_size`-byte buffers.
    pub fn new(buf_size: usize) -> BufPool {
        BufPool {
            buf_size: buf_size.max(4096),
            chunks: Vec::new(),
            free: Vec::new(),
            out: 0,
        }
    }

    /// A buffer; `Ok(None)` never: a new chunk is mapped when all are in use. The flag says
    /// whether a chunk was added (the caller registers the pool's memory with its devices).
    pub fn get(&mut self) -> Result<(DataBuf, bool), DmaError> {
        let mut grew = false;
        if self.free.is_empty() {
            self.grow()?;
            grew = true;
        }
        let ptr = self.free.pop().expect("grow adds buffers");
        self.out += 1;
        Ok((
            DataBuf {
                ptr,
                len: self.buf_size,
            },
            grew,
        ))
    }

    /// Gives `b` back.
    pub fn put(&mut self, b: DataBuf) {
        debug_assert_eq!(b.len, self.buf_size);
        self.out -= 1;
        self.free.push(b.ptr);
    }

    /// Buffers in use.
    pub fn in_use(&self) -> usize {
        self.out
    }

    /// Every chunk, as `(address, length)` for `BlockDevice::register_memory`.
    pub fn regions(&self) -> Vec<(*mut u8, usize)> {
        self.chunks.iter().map(|c| (c.as_ptr(), c.len())).collect()
    }

    /// Tells `dev` that I/O buffers come from this pool's chunks (io_uring fixed buffers, a
    /// VFIO device's DMA mappings), replacing what this reactor registered before.
    pub fn register_with(&self, dev: &dyn BlockDevice) {
        // SAFETY: the chunks stay mapped, same pages, until the pool is dropped, which the poll
        // group does only after its bdev queues (see `group::shut_down`); a pool whose buffers
        // may still be in a device's hands at shutdown is leaked instead.
        unsafe { dev.register_memory(&self.regions()) };
    }

    #[cold]
    fn grow(&mut self) -> Result<(), DmaError> {
        let region = DmaRegion::new(CHUNK.max(self.buf_size))?;
        let n = region.len() / self.buf_size;
        let base = region.as_ptr();
        for i in (0..n).rev() {
            // SAFETY: `i * buf_size + buf_size <= region.len()`: in bounds of the mapping.
            let p = unsafe { base.add(i * self.buf_size) };
            self.free
                .push(NonNull::new(p).expect("a mapping is never at address 0"));
        }
        self.chunks.push(region);
        log::debug!(
            "nvmf: buffer pool grew to {} chunks ({} buffers of {} bytes)",
            self.chunks.len(),
            self.chunks.len() * n,
            self.buf_size
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_distinct_and_reused() {
        let mut p = BufPool::new(128 << 10);
        let mut held = Vec::new();
        let mut grew = 0;
        for i in 0..40u8 {
            let (mut b, g) = p.get().unwrap();
            grew += usize::from(g);
            b.fill(0, &[i; 16]);
            held.push(b);
        }
        assert!(
            grew >= 2,
            "40 buffers of 128 KiB need more than one 2 MiB chunk"
        );
        for (i, b) in held.iter().enumerate() {
            assert_eq!(b.bytes(0, 16), &[i as u8; 16]);
        }
        assert_eq!(p.in_use(), 40);
        let chunks = p.regions().len();
        for b in held {
            p.put(b);
        }
        for _ in 0..40 {
            let (b, g) = p.get().unwrap();
            assert!(!g);
            p.put(b);
        }
        assert_eq!(p.regions().len(), chunks);
        assert_eq!(p.in_use(), 0);
    }
}
