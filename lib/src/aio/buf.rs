//! Owned I/O buffers: what an I/O future holds while a device may touch the memory.
//!
//! An [`IoBufMut`] is moved into the future that reads into or writes from it and handed back
//! with the result, so no one else can reach the memory in between; its address must not
//! change when the value moves (heap or mapped memory, never inline bytes). [`Slice`] narrows a
//! buffer to the bytes one I/O transfers.

use std::ops::{Bound, RangeBounds};

use crate::dma::DmaRegion;

/// An owned buffer an I/O future may hand to a device (tokio-uring's and glommio's rule: the
/// future owns the buffer until the device is done with it).
///
/// The future transfers [`bytes_total`](IoBufMut::bytes_total) bytes from
/// [`stable_mut_ptr`](IoBufMut::stable_mut_ptr): narrow a larger buffer with
/// [`slice`](IoBufMut::slice). A buffer whose future is dropped while its I/O is in flight is
/// kept (moved to the handle) and dropped only after the device completed the I/O; hence
/// `'static`.
///
/// # Safety
///
/// An implementation promises that, for as long as the value lives:
/// - `stable_mut_ptr` returns the same address however often it is called and however the
///   value is moved (the bytes live on the heap or in a mapping, not inside the value);
/// - `stable_mut_ptr()..+bytes_total()` is valid for reads and writes, is not freed or reused
///   before the value is dropped, and is reachable by no one but the value's holder (no
///   other owner, no alias handed out).
///
/// Hold the memory by a raw pointer (as [`DmaRegion`] does), not in a `Box` or `Vec` field:
/// moving a `Box` asserts unique access to its bytes, which the pointer the device holds would
/// contradict under Rust's aliasing rules.
///
/// For devices that DMA (VFIO), the memory must also be DMA-able: use [`DmaRegion`] or a
/// [`super::BufPool`] buffer.
pub unsafe trait IoBufMut: Unpin + 'static {
    /// The first byte. Stable for the value's life (see the trait's safety contract).
    fn stable_mut_ptr(&mut self) -> *mut u8;

    /// Bytes an I/O on this buffer transfers.
    fn bytes_total(&self) -> usize;

    /// Bytes `range` of this buffer as a buffer of their own, owning this one (get it back
    /// with [`Slice::into_inner`]).
    ///
    /// # Panics
    ///
    /// When the range does not lie inside the buffer.
    ///
    /// ```
    /// use pmio::aio::IoBufMut;
    /// use pmio::dma::DmaRegion;
    ///
    /// let region = DmaRegion::new(4096)?;
    /// let first_block = region.slice(..512);
    /// assert_eq!(first_block.bytes_total(), 512);
    /// let region: DmaRegion = first_block.into_inner();
    /// # let _ = region;
    /// # Ok::<(), pmio::DmaError>(())
    /// ```
    fn slice(self, range: impl RangeBounds<usize>) -> Slice<Self>
    where
        Self: Sized,
    {
        let total = self.bytes_total();
        let begin = match range.start_bound() {
            Bound::Included(&b) => b,
            Bound::Excluded(&b) => b + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => total,
        };
        assert!(
            begin <= end && end <= total,
            "bytes {begin}..{end} outside a buffer of {total}"
        );
        Slice {
            buf: self,
            begin,
            end,
        }
    }
}

// SAFETY: a region owns its mapping exclusively (safe access needs `&mut self` or `&self`,
// which the future's ownership excludes), its address never changes, and it is unmapped only
// when dropped.
unsafe impl IoBufMut for DmaRegion {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.as_ptr()
    }

    fn bytes_total(&self) -> usize {
        self.len()
    }
}

/// A part of a buffer that owns the whole ([`IoBufMut::slice`]).
#[derive(Debug)]
pub struct Slice<B> {
    buf: B,
    begin: usize,
    end: usize,
}

impl<B: IoBufMut> Slice<B> {
    /// The whole buffer back.
    pub fn into_inner(self) -> B {
        self.buf
    }

    /// The whole buffer.
    pub fn get_ref(&self) -> &B {
        &self.buf
    }

    /// The whole buffer, mutably.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.buf
    }

    /// Where the part begins in the whole.
    pub fn begin(&self) -> usize {
        self.begin
    }

    /// Where the part ends (exclusive) in the whole.
    pub fn end(&self) -> usize {
        self.end
    }
}

// SAFETY: the part lies inside the whole (checked by `slice`), whose address is stable and
// memory owned by the slice through it.
unsafe impl<B: IoBufMut> IoBufMut for Slice<B> {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.buf.stable_mut_ptr().wrapping_add(self.begin)
    }

    fn bytes_total(&self) -> usize {
        self.end - self.begin
    }
}
