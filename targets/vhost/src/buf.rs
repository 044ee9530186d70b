//! Bounce buffers of one reactor's vhost group: DMA-capable memory carved into
//! [`BUF_SIZE`] buffers, one per chunk of a request's data. A write's data is copied in from
//! guest memory before the bdev sees it; a read's is copied out to the guest after the bdev
//! filled it. Chunks of memory are added when every buffer is in use and kept: no allocation
//! per I/O once the group has warmed up.
//!
//! Why bounce, not zero copy: guest memory is not DMA-mapped for VFIO devices nor registered
//! with io_uring, a virtio request's buffers are scattered guest pages while a bdev I/O takes
//! one buffer, and a new memory table may unmap a region while a request that named it is in
//! flight. A bounced request holds only guest addresses, copied through whatever table is
//! current, so none of these can bite.

use std::ptr::NonNull;

use pmio::dma::{DmaError, DmaRegion};
use pmio::{BlockDevice, IoBuf};

/// Bytes per buffer: the largest segment the guest is told it may use (`size_max`), and the
/// largest bdev I/O one request chunk becomes.
pub const BUF_SIZE: usize = 128 << 10;
/// Bytes per chunk of memory (one 2 MiB huge page where they are reserved).
const CHUNK: usize = 2 << 20;

/// One buffer, owned by one request chunk until it is given back.
#[derive(Debug)]
pub(crate) struct DataBuf {
    ptr: NonNull<u8>,
}

impl DataBuf {
    /// The first `len` bytes as the bdev's buffer.
    pub fn io(&self, len: u32) -> IoBuf {
        assert!(len as usize <= BUF_SIZE);
        // SAFETY: the buffer is this chunk's alone until it is given back to the pool, which
        // happens only after the I/O carrying it has completed.
        unsafe { IoBuf::from_raw_parts(self.ptr.as_ptr(), len) }
    }

    /// The buffer's bytes. Only while no I/O carries it (before submission, after
    /// completion): the owner of a `DataBuf` upholds that.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: BUF_SIZE bytes of a live chunk, owned by this `DataBuf` alone (the pool hands
        // each pointer out once), and no device uses it now (see above).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), BUF_SIZE) }
    }
}

/// The pool. Dropped only after every bdev queue that may still use its memory.
pub(crate) struct BufPool {
    chunks: Vec<DmaRegion>,
    free: Vec<NonNull<u8>>,
    out: usize,
}

impl BufPool {
    pub fn new() -> BufPool {
        BufPool {
            chunks: Vec::new(),
            free: Vec::new(),
            out: 0,
        }
    }

    /// A buffer, and whether memory was added for it (the caller then registers the pool with
    /// its devices).
    pub fn get(&mut self) -> Result<(DataBuf, bool), DmaError> {
        let mut grew = false;
        if self.free.is_empty() {
            self.grow()?;
            grew = true;
        }
        let ptr = self.free.pop().expect("grow adds buffers");
        self.out += 1;
        Ok((DataBuf { ptr }, grew))
    }

    pub fn put(&mut self, b: DataBuf) {
        self.out -= 1;
        self.free.push(b.ptr);
    }

    /// Buffers in use.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.out
    }

    /// Tells `dev` that I/O buffers come from this pool (io_uring fixed buffers, a VFIO
    /// device's DMA mappings), replacing what this reactor registered before.
    pub fn register_with(&self, dev: &dyn BlockDevice) {
        let regions: Vec<(*mut u8, usize)> =
            self.chunks.iter().map(|c| (c.as_ptr(), c.len())).collect();
        // SAFETY: the chunks stay mapped, same pages, until the pool is dropped, which the group
        // does only after its bdev queues (see `group::shut_down`); a pool whose buffers may
        // still be in a device's hands at shutdown is leaked instead.
        unsafe { dev.register_memory(&regions) };
    }

    #[cold]
    fn grow(&mut self) -> Result<(), DmaError> {
        let region = DmaRegion::new(CHUNK)?;
        let n = region.len() / BUF_SIZE;
        let base = region.as_ptr();
        for i in (0..n).rev() {
            // SAFETY: `i * BUF_SIZE + BUF_SIZE <= region.len()`: in bounds of the mapping.
            let p = unsafe { base.add(i * BUF_SIZE) };
            self.free
                .push(NonNull::new(p).expect("a mapping is never at address 0"));
        }
        self.chunks.push(region);
        log::debug!(
            "vhost: bounce pool grew to {} chunks ({} buffers)",
            self.chunks.len(),
            self.chunks.len() * n
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_distinct_and_reused() {
        let mut p = BufPool::new();
        let mut held = Vec::new();
        for i in 0..20u8 {
            let (mut b, _) = p.get().unwrap();
            b.bytes_mut()[..16].fill(i);
            held.push(b);
        }
        for (i, b) in held.iter_mut().enumerate() {
            assert_eq!(&b.bytes_mut()[..16], &[i as u8; 16]);
        }
        assert_eq!(p.in_use(), 20);
        let chunks = p.chunks.len();
        for b in held {
            p.put(b);
        }
        for _ in 0..20 {
            let (b, grew) = p.get().unwrap();
            assert!(!grew);
            p.put(b);
        }
        assert_eq!(p.chunks.len(), chunks);
        assert_eq!(p.in_use(), 0);
    }
}
