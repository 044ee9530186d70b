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
#[derive(Clone)]
pub struct BufPool {
    shared: Rc<Shared>,
}

/// What a pool and its buffers share.
struct Shared {
    pool: RefCell<DmaPool>,
    /// One entry per buffer, at a fixed address: a [`PoolBuf`] is a pointer to its entry.
    bufs: Box<[Entry]>,
}

/// Where buffer `index` is, and the pool it goes back to.
struct Entry {
    ptr: NonNull<u8>,
    len: usize,
    index: u32,
    /// The `Shared` this entry lies in (`Rc::as_ptr` of the pool's `Rc`).
    shared: *const Shared,
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufPool")
            .field("buffers", &self.shared.bufs.len())
            .field("available", &self.available())
            .finish()
    }
}

impl BufPool {
    /// Allocates `opts.count` buffers of `opts.buf_size` bytes (see [`DmaPool::new`]).
    pub fn new(opts: DmaPoolOptions) -> Result<BufPool, DmaError> {
        let pool = DmaPool::new(opts)?;
        let bufs = (0..pool.count())
            .map(|index| Entry {
                ptr: NonNull::new(pool.ptr(index)).expect("a pool buffer is never at 0"),
                len: pool.buf_size(),
                index,
                shared: std::ptr::null(),
            })
            .collect();
        let mut shared = Rc::new(Shared {
            pool: RefCell::new(pool),
            bufs,
        });
        let me = Rc::as_ptr(&shared);
        for e in &mut Rc::get_mut(&mut shared).expect("not shared yet").bufs {
            e.shared = me;
        }
        Ok(BufPool { shared })
    }

    /// A free buffer, or `None` when all are in use.
    #[inline]
    pub fn get(&self) -> Option<PoolBuf> {
        let index = self.shared.pool.borrow_mut().get()?;
        let entry = NonNull::from(&self.shared.bufs[index as usize]);
        // The buffer holds a count on the pool (released in its drop), so its entry, its
        // memory and the pool stay while it lives. (`into_raw` gives `as_ptr`: `Entry::shared`.)
        let _ = Rc::into_raw(Rc::clone(&self.shared));
        Some(PoolBuf { entry })
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.shared.pool.borrow().buf_size()
    }

    /// Buffers currently free.
    pub fn available(&self) -> u32 {
        self.shared.pool.borrow().available()
    }

    /// The memory regions behind the pool, as `(address, length)`: for
    /// [`crate::BlockDevice::register_memory`].
    pub fn regions(&self) -> Vec<(*mut u8, usize)> {
        let pool = self.shared.pool.borrow();
        pool.regions()
            .iter()
            .map(|r| (r.as_ptr(), r.len()))
            .collect()
    }
}

/// One buffer of a [`BufPool`], returned to it on drop. Reads and writes as a byte slice.
///
/// One pointer wide, so moving it in and out of I/O futures is one store and one load (a
/// wider buffer written field by field and read back whole stalls store forwarding).
pub struct PoolBuf {
    entry: NonNull<Entry>,
}

impl PoolBuf {
    fn entry(&self) -> &Entry {
        // SAFETY: the entry lies in the pool's `Shared`, which this buffer keeps alive (it
        // holds a count on the pool's `Rc` from `get` until its drop).
        unsafe { self.entry.as_ref() }
    }

    /// The buffer's index in its pool.
    pub fn index(&self) -> u32 {
        self.entry().index
    }
}

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.entry();
        f.debug_struct("PoolBuf")
            .field("index", &e.index)
            .field("ptr", &e.ptr)
            .field("len", &e.len)
            .finish()
    }
}

impl Deref for PoolBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        let e = self.entry();
        // SAFETY: `ptr..ptr+len` is this buffer's part of a region the pool (kept alive by
        // this buffer) owns; the pool handed the index to this value alone, and no device
        // holds it while a safe reference can be made (an I/O future owns the value then).
        unsafe { std::slice::from_raw_parts(e.ptr.as_ptr(), e.len) }
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let e = self.entry();
        // SAFETY: as `deref`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(e.ptr.as_ptr(), e.len) }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        let (index, shared) = (self.entry().index, self.entry().shared);
        // SAFETY: `shared` is the pointer `get` leaked a count of with `Rc::into_raw` (the
        // entry records `Rc::as_ptr` of that same `Rc`); this takes that count back, once.
        let shared = unsafe { Rc::from_raw(shared) };
        if let Err(e) = shared.pool.borrow_mut().put(index) {
            log::error!("pool buffer {index}: {e}");
        }
    }
}

// SAFETY: the buffer's bytes lie in a region of the pool, which this value keeps mapped (a
// count on the pool); the index is handed to one `PoolBuf` at a time and reused only after
// this value's drop put it back; the address is fixed in the entry.
unsafe impl IoBufMut for PoolBuf {
    #[inline]
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.entry().ptr.as_ptr()
    }

    #[inline]
    fn bytes_total(&self) -> usize {
        self.entry().len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(count: u32) -> BufPool {
        BufPool::new(DmaPoolOptions {
            count,
            buf_size: 4096,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    #[cfg_attr(miri, ignore = "DMA pools are mmap'ed")]
    fn buffers_come_and_go_and_keep_their_pool_alive() {
        let p = pool(2);
        let (mut a, b) = (p.get().unwrap(), p.get().unwrap());
        assert!(p.get().is_none(), "two buffers, both out");
        assert_ne!(a.index(), b.index());
        assert_ne!(a.stable_mut_ptr(), b.as_ptr().cast_mut());
        drop(b);
        assert_eq!(p.available(), 1);
        // The last handle on the pool goes; the buffer still out keeps the memory.
        drop(p);
        a.fill(0xee);
        assert!(a.iter().all(|&x| x == 0xee));
        assert_eq!(a.bytes_total(), 4096);
        drop(a);
    }
}
