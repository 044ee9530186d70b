//! A reactor's pool of equal DMA buffers handed out as owned values ([`PoolBuf`]) that go
//! back to the pool when dropped: the buffers an async app moves into its I/O futures.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::rc::Rc;

use super::buf::IoBufMut;
use crate::dma::{DmaError, DmaPool, DmaPoolOptions};

/// A [`DmaPool`] shared by the tasks of one thread; [`BufPool::get`] hands out owned buffers.
/// Cloning shares the pool. Not `Send`: a pool and its buffers stay on their reactor.
///
/// Everything is allocated at [`BufPool::new`]; `get` and a buffer's drop only pop and push an
/// index.
///
/// ```
/// use pmio::aio::{BufPool, IoBufMut};
/// use pmio::dma::DmaPoolOptions;
///
/// let pool = BufPool::new(DmaPoolOptions { count: 2, buf_size: 4096, ..Default::default() })?;
/// let mut buf = pool.get().expect("a free buffer");
/// buf[..5].copy_from_slice(b"hello");
/// assert_eq!(buf.bytes_total(), 4096);
/// assert_eq!(pool.available(), 1);
/// drop(buf); // back to the pool
/// assert_eq!(pool.available(), 2);
/// # Ok::<(), pmio::DmaError>(())
/// ```
#[derive(Clone, Debug)]
pub struct BufPool {
    pool: Rc<RefCell<DmaPool>>,
}

impl BufPool {
    /// Allocates `opts.count` buffers of `opts.buf_size` bytes (see [`DmaPool::new`]).
    pub fn new(opts: DmaPoolOptions) -> Result<BufPool, DmaError> {
        Ok(BufPool {
            pool: Rc::new(RefCell::new(DmaPool::new(opts)?)),
        })
    }

    /// A free buffer, or `None` when all are in use.
    #[inline]
    pub fn get(&self) -> Option<PoolBuf> {
        let mut pool = self.pool.borrow_mut();
        let index = pool.get()?;
        let ptr = NonNull::new(pool.ptr(index)).expect("a pool buffer is never at address 0");
        Some(PoolBuf {
            pool: Rc::clone(&self.pool),
            index,
            ptr,
            len: pool.buf_size(),
        })
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.pool.borrow().buf_size()
    }

    /// Buffers currently free.
    pub fn available(&self) -> u32 {
        self.pool.borrow().available()
    }

    /// The memory regions behind the pool, as `(address, length)`: for
    /// [`crate::BlockDevice::register_memory`].
    pub fn regions(&self) -> Vec<(*mut u8, usize)> {
        let pool = self.pool.borrow();
        pool.regions()
            .iter()
            .map(|r| (r.as_ptr(), r.len()))
            .collect()
    }
}

/// One buffer of a [`BufPool`], returned to it on drop. Reads and writes as a byte slice.
#[derive(Debug)]
pub struct PoolBuf {
    pool: Rc<RefCell<DmaPool>>,
    index: u32,
    ptr: NonNull<u8>,
    len: usize,
}

impl PoolBuf {
    /// The buffer's index in its pool.
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl Deref for PoolBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is this buffer's part of a region the pool (kept alive by
        // `self.pool`) owns; the pool handed the index to this value alone, and no device
        // holds it while a safe reference can be made (an I/O future owns the value then).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `deref`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        if let Err(e) = self.pool.borrow_mut().put(self.index) {
            log::error!("pool buffer {}: {e}", self.index);
        }
    }
}

// SAFETY: the buffer's bytes lie in a region of the pool, which `self.pool` keeps mapped; the
// index is handed to one `PoolBuf` at a time and reused only after this value's drop put it
// back; the address is computed once and never changes.
unsafe impl IoBufMut for PoolBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn bytes_total(&self) -> usize {
        self.len
    }
}
