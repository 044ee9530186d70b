//! Memory a device can DMA into: page-backed regions and a fixed pool of I/O buffers.
//!
//! A [`DmaRegion`] is an anonymous private mapping, populated at creation so no page fault
//! happens on the I/O path. The allocator prefers, in order:
//!
//! 1. **2 MiB hugetlb pages** (`MAP_HUGETLB | MAP_HUGE_2MB | MAP_POPULATE`) — used when the
//!    administrator configured some (`vm.nr_hugepages`, `HugePages_Free` in `/proc/meminfo`);
//! 2. **transparent huge pages** — a 2 MiB-aligned anonymous mapping with
//!    `madvise(MADV_HUGEPAGE)`, when `/sys/kernel/mm/transparent_hugepage/enabled` is not
//!    `never` (the kernel backs it with huge pages as memory allows);
//! 3. **4 KiB pages** — always available.
//!
//! Falling back from hugetlb pages logs one warning per process ([`log::warn!`]), not one per
//! region. The memory is never swapped while a device uses it: VFIO pins the pages it maps, and
//! io_uring pins registered buffers.
//!
//! With VFIO and an IOMMU the I/O virtual address is the buffer's virtual address
//! ([`DmaRegion::iova`]); no physical address is ever needed.
//!
//! # Alignment
//! - A region starts on a boundary of its [`PageKind::page_size`]: 2 MiB for hugetlb and
//!   transparent huge pages, the system page size (4 KiB) otherwise. Its length is rounded up to
//!   a whole number of those pages.
//! - A [`DmaPool`] buffer starts on a multiple of the pool's alignment (at least 4 KiB), and
//!   never straddles a 2 MiB boundary when its stride divides 2 MiB.
//!
//! ```
//! use pmio::dma::{DmaPool, DmaPoolOptions};
//!
//! let mut pool = DmaPool::new(DmaPoolOptions { count: 8, buf_size: 4096, ..Default::default() })?;
//! let i = pool.get().expect("a free buffer");
//! pool.as_mut_slice(i)[0] = 0xab;
//! assert_eq!(pool.as_slice(i)[0], 0xab);
//! assert_eq!(pool.iova(i) % 4096, 0);
//! pool.put(i)?;
//! # Ok::<(), pmio::dma::DmaError>(())
//! ```

use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Size of a huge page (x86-64 and arm64 with 4 KiB base pages).
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Largest region a [`DmaPool`] carves buffers from (one VFIO mapping each).
const POOL_REGION_MAX: usize = 64 << 20;

/// Errors of DMA memory allocation.
#[derive(Debug, thiserror::Error)]
pub enum DmaError {
    /// A region or buffer of zero bytes, or a pool of zero buffers, was asked for.
    #[error("DMA memory: zero-sized {what} requested")]
    ZeroSize { what: &'static str },
    /// The size does not fit the address space (or a pool index).
    #[error("DMA memory: {what} of {size} bytes is too large")]
    TooLarge { what: &'static str, size: usize },
    /// A pool alignment that is not a power of two, or larger than a huge page.
    #[error("DMA pool: alignment {0} is not a power of two between 4096 and 2 MiB")]
    BadAlignment(usize),
    /// `mmap` failed for every page kind tried.
    #[error("DMA memory: mmap of {len} bytes failed (errno {errno}: {})", std::io::Error::from_raw_os_error(*errno))]
    Map { len: usize, errno: i32 },
    /// A buffer index that is out of range or not currently handed out was put back.
    #[error("DMA pool: buffer {index} is not in use (pool of {count})")]
    NotInUse { index: u32, count: u32 },
}

impl DmaError {
    /// Negative errno in SPDK's convention.
    pub fn errno(&self) -> i32 {
        match self {
            DmaError::ZeroSize { .. } | DmaError::BadAlignment(_) | DmaError::NotInUse { .. } => {
                -libc::EINVAL
            }
            DmaError::TooLarge { .. } => -libc::ENOMEM,
            DmaError::Map { errno, .. } => -errno.abs(),
        }
    }
}

/// The kind of pages backing a [`DmaRegion`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Preallocated 2 MiB hugetlb pages.
    HugeTlb,
    /// Transparent huge pages (2 MiB-aligned, `MADV_HUGEPAGE`; the kernel may still back parts
    /// with base pages when memory is fragmented).
    Transparent,
    /// Base pages (4 KiB).
    Base,
}

impl PageKind {
    /// Size (and alignment) of the pages of this kind.
    pub fn page_size(self) -> usize {
        match self {
            PageKind::HugeTlb | PageKind::Transparent => HUGE_PAGE_SIZE,
            PageKind::Base => base_page_size(),
        }
    }

    /// Short name for logs and reports.
    pub fn name(self) -> &'static str {
        match self {
            PageKind::HugeTlb => "hugetlb-2M",
            PageKind::Transparent => "thp-2M",
            PageKind::Base => "4K",
        }
    }
}

/// Which page kinds [`DmaRegion::with_options`] may try. Defaults: all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaOptions {
    /// Try 2 MiB hugetlb pages first (default `true`).
    pub hugetlb: bool,
    /// Try transparent huge pages before base pages (default `true`).
    pub transparent: bool,
}

impl Default for DmaOptions {
    fn default() -> Self {
        DmaOptions {
            hugetlb: true,
            transparent: true,
        }
    }
}

/// A populated, page-aligned anonymous mapping a device may DMA into. Unmapped on drop.
///
/// The owner must make sure no device still uses the memory when the region is dropped (with
/// VFIO: unmap it from the IOMMU first).
#[derive(Debug)]
pub struct DmaRegion {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: the region exclusively owns its mapping (like a `Box<[u8]>`); nothing in it is tied to
// the creating thread.
unsafe impl Send for DmaRegion {}
// SAFETY: shared access only reads (`as_slice`) or hands out the raw pointer, whose writes are
// the caller's `unsafe` responsibility; mutation through safe code needs `&mut self`.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Maps at least `len` bytes with the best page kind available (see the module docs).
    pub fn new(len: usize) -> Result<DmaRegion, DmaError> {
        DmaRegion::with_options(len, DmaOptions::default())
    }

    /// Maps at least `len` bytes, trying only the page kinds `opts` allows.
    pub fn with_options(len: usize, opts: DmaOptions) -> Result<DmaRegion, DmaError> {
        if len == 0 {
            return Err(DmaError::ZeroSize { what: "region" });
        }
        let huge_len = round_up(len, HUGE_PAGE_SIZE).ok_or(DmaError::TooLarge {
            what: "region",
            size: len,
        })?;
        if opts.hugetlb {
            match map_hugetlb(huge_len) {
                Ok(ptr) => {
                    return Ok(DmaRegion {
                        ptr,
                        len: huge_len,
                        kind: PageKind::HugeTlb,
                    });
                }
                Err(errno) => log::debug!("hugetlb mmap of {huge_len} bytes failed: errno {errno}"),
            }
        }
        let region = if opts.transparent && thp_enabled() {
            let ptr = map_thp(huge_len).map_err(|errno| DmaError::Map {
                len: huge_len,
                errno,
            })?;
            DmaRegion {
                ptr,
                len: huge_len,
                kind: PageKind::Transparent,
            }
        } else {
            let base_len = round_up(len, base_page_size()).ok_or(DmaError::TooLarge {
                what: "region",
                size: len,
            })?;
            let ptr = map_anon(base_len, 0).map_err(|errno| DmaError::Map {
                len: base_len,
                errno,
            })?;
            DmaRegion {
                ptr,
                len: base_len,
                kind: PageKind::Base,
            }
        };
        populate(region.ptr, region.len);
        if opts.hugetlb {
            warn_fallback_once(region.kind);
        }
        Ok(region)
    }

    /// First byte of the region; aligned to [`PageKind::page_size`] of [`Self::page_kind`].
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped length in bytes: the requested length rounded up to whole pages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The I/O virtual address of the first byte (VFIO maps IOVA = VA).
    pub fn iova(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The pages backing the region.
    pub fn page_kind(&self) -> PageKind {
        self.kind
    }

    /// The region's bytes. Do not read memory a device may be writing.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is a live, readable mapping owned by `self` (initialised: the
        // kernel zero-fills anonymous memory) for as long as the borrow of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The region's bytes, mutably. Do not write memory a device may be reading.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, and `&mut self` makes this the only safe reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is exactly the mapping this region created and still owns; no
        // reference into it outlives `self`.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            log::error!(
                "munmap of DMA region {:p} ({} bytes) failed: {}",
                self.ptr,
                self.len,
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Whether the one "no hugetlb pages" warning was emitted in this process.
static FALLBACK_WARNED: AtomicBool = AtomicBool::new(false);

/// Fallback warnings actually emitted (tests check there is exactly one).
#[cfg(test)]
static WARNINGS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[cold]
fn warn_fallback_once(kind: PageKind) {
    if kind == PageKind::HugeTlb || FALLBACK_WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    #[cfg(test)]
    WARNINGS.fetch_add(1, Ordering::Relaxed);
    log::warn!(
        "no free 2 MiB hugetlb pages (configure vm.nr_hugepages); DMA memory uses {} pages \
         instead (this warning is printed once)",
        match kind {
            PageKind::Transparent => "transparent huge",
            _ => "4 KiB",
        }
    );
}

fn base_page_size() -> usize {
    static SIZE: OnceLock<usize> = OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 { n as usize } else { 4096 }
    })
}

/// Whether transparent huge pages can be used at all (`enabled` is `always` or `madvise`).
fn thp_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| !s.contains("[never]"))
            .unwrap_or(false)
    })
}

fn round_up(len: usize, align: usize) -> Option<usize> {
    Some(len.checked_add(align - 1)? & !(align - 1))
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOMEM)
}

/// Anonymous private read-write mapping of `len` bytes with extra `flags`.
fn map_anon(len: usize, flags: libc::c_int) -> Result<NonNull<u8>, i32> {
    // SAFETY: an anonymous mapping at a kernel-chosen address touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(last_errno());
    }
    NonNull::new(p.cast()).ok_or(libc::ENOMEM)
}

/// `len` (a multiple of 2 MiB) bytes of populated hugetlb memory; fails (ENOMEM) when not
/// enough huge pages are free.
fn map_hugetlb(len: usize) -> Result<NonNull<u8>, i32> {
    map_anon(
        len,
        libc::MAP_HUGETLB | libc::MAP_HUGE_2MB | libc::MAP_POPULATE,
    )
}

/// `len` (a multiple of 2 MiB) bytes at a 2 MiB-aligned address, advised for transparent huge
/// pages. Over-maps by 2 MiB and trims, so the kernel can use huge pages for every 2 MiB.
fn map_thp(len: usize) -> Result<NonNull<u8>, i32> {
    let over = len.checked_add(HUGE_PAGE_SIZE).ok_or(libc::ENOMEM)?;
    let raw = map_anon(over, 0)?.as_ptr() as usize;
    let start = (raw + HUGE_PAGE_SIZE - 1) & !(HUGE_PAGE_SIZE - 1);
    let head = start - raw;
    let tail = over - head - len;
    // SAFETY: `raw..raw+head` and `start+len..start+len+tail` lie inside the mapping just created
    // and nothing refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(raw as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    // SAFETY: `start..start+len` is a mapping we own; advice does not invalidate it.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    if rc != 0 {
        log::debug!("madvise(MADV_HUGEPAGE) failed: errno {}", last_errno());
    }
    NonNull::new(start as *mut u8).ok_or(libc::ENOMEM)
}

/// Faults every page of a fresh mapping in, so the I/O path never takes a page fault.
fn populate(ptr: NonNull<u8>, len: usize) {
    // SAFETY: `ptr..ptr+len` is a mapping we own; populating does not change its contents.
    let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        return;
    }
    // Kernels before 5.14 lack MADV_POPULATE_WRITE: touch each page instead.
    let step = base_page_size();
    for off in (0..len).step_by(step) {
        // SAFETY: `off < len`, so the byte lies in our writable mapping; writing the zero the
        // kernel put there does not change the contents.
        unsafe { ptr.as_ptr().add(off).write_volatile(0) };
    }
}

/// Shape of a [`DmaPool`]. Defaults: 256 buffers of 4 KiB, 4 KiB aligned, best page kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaPoolOptions {
    /// Number of buffers.
    pub count: u32,
    /// Usable bytes per buffer.
    pub buf_size: usize,
    /// Alignment of every buffer (power of two, 4 KiB ..= 2 MiB). The stride between buffers
    /// is `buf_size` rounded up to it.
    pub align: usize,
    /// Page kinds the regions may use.
    pub dma: DmaOptions,
}

impl Default for DmaPoolOptions {
    fn default() -> Self {
        DmaPoolOptions {
            count: 256,
            buf_size: 4096,
            align: 4096,
            dma: DmaOptions::default(),
        }
    }
}

/// A fixed set of equal DMA buffers carved from a few [`DmaRegion`]s, handed out by index.
///
/// Everything is allocated at construction: `get` pops an index from a preallocated free stack
/// and `put` pushes it back, so the I/O path never allocates. A pool belongs to one owner
/// (a reactor); it is `Send` but its get/put need `&mut self`.
#[derive(Debug)]
pub struct DmaPool {
    regions: Vec<DmaRegion>,
    /// Buffers per region (the last region may hold fewer).
    per_region: u32,
    stride: usize,
    buf_size: usize,
    count: u32,
    /// Free buffer indices (a stack: the most recently freed buffer is reused first, warm in
    /// cache).
    free: Vec<u32>,
    /// One bit per buffer: set while handed out.
    in_use: Vec<u64>,
}

impl DmaPool {
    /// Allocates `opts.count` buffers of `opts.buf_size` bytes.
    pub fn new(opts: DmaPoolOptions) -> Result<DmaPool, DmaError> {
        if opts.count == 0 {
            return Err(DmaError::ZeroSize { what: "pool" });
        }
        if opts.buf_size == 0 {
            return Err(DmaError::ZeroSize { what: "buffer" });
        }
        if !opts.align.is_power_of_two() || !(4096..=HUGE_PAGE_SIZE).contains(&opts.align) {
            return Err(DmaError::BadAlignment(opts.align));
        }
        let too_large = DmaError::TooLarge {
            what: "buffer",
            size: opts.buf_size,
        };
        let stride = round_up(opts.buf_size, opts.align).ok_or(too_large)?;
        let per_region = (POOL_REGION_MAX / stride).clamp(1, opts.count as usize) as u32;
        let nregions = opts.count.div_ceil(per_region);
        let mut regions = Vec::with_capacity(nregions as usize);
        for r in 0..nregions {
            let bufs = per_region.min(opts.count - r * per_region) as usize;
            let len = bufs.checked_mul(stride).ok_or(DmaError::TooLarge {
                what: "pool",
                size: usize::MAX,
            })?;
            regions.push(DmaRegion::with_options(len, opts.dma)?);
        }
        Ok(DmaPool {
            regions,
            per_region,
            stride,
            buf_size: opts.buf_size,
            count: opts.count,
            free: (0..opts.count).rev().collect(),
            in_use: vec![0; opts.count.div_ceil(64) as usize],
        })
    }

    /// Takes a free buffer; `None` when all are in use.
    #[inline]
    pub fn get(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        self.in_use[(i / 64) as usize] |= 1 << (i % 64);
        Some(i)
    }

    /// Returns buffer `index`. Putting a buffer that is not handed out is refused.
    #[inline]
    pub fn put(&mut self, index: u32) -> Result<(), DmaError> {
        let bit = 1u64 << (index % 64);
        match self.in_use.get_mut((index / 64) as usize) {
            Some(w) if index < self.count && *w & bit != 0 => {
                *w &= !bit;
                self.free.push(index);
                Ok(())
            }
            _ => Err(DmaError::NotInUse {
                index,
                count: self.count,
            }),
        }
    }

    /// Address of buffer `index` (aligned to the pool's alignment). Panics if out of range.
    #[inline]
    pub fn ptr(&self, index: u32) -> *mut u8 {
        assert!(index < self.count, "DMA buffer {index} out of range");
        let region = &self.regions[(index / self.per_region) as usize];
        let off = (index % self.per_region) as usize * self.stride;
        // SAFETY: `off + stride <= region.len()` by construction of the regions, so the
        // result stays inside the region's mapping.
        unsafe { region.as_ptr().add(off) }
    }

    /// I/O virtual address of buffer `index` (= its virtual address).
    #[inline]
    pub fn iova(&self, index: u32) -> u64 {
        self.ptr(index) as u64
    }

    /// Buffer `index`'s bytes. Do not read memory a device may be writing.
    pub fn as_slice(&self, index: u32) -> &[u8] {
        // SAFETY: `ptr(index)..+buf_size` lies in a live region owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr(index), self.buf_size) }
    }

    /// Buffer `index`'s bytes, mutably. Do not write memory a device may be reading.
    pub fn as_mut_slice(&mut self, index: u32) -> &mut [u8] {
        // SAFETY: as `as_slice`; buffers do not overlap and `&mut self` excludes other safe
        // references into the pool.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(index), self.buf_size) }
    }

    /// Usable bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Number of buffers.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Buffers currently free.
    pub fn available(&self) -> u32 {
        self.free.len() as u32
    }

    /// The regions backing the pool (to map each into an IOMMU).
    pub fn regions(&self) -> &[DmaRegion] {
        &self.regions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meminfo(key: &str) -> Option<u64> {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        text.lines()
            .find(|l| l.starts_with(key))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    }

    #[test]
    fn region_write_read_and_alignment() {
        let mut r = DmaRegion::new(10_000).unwrap();
        assert!(r.len() >= 10_000);
        assert_eq!(r.len() % r.page_kind().page_size(), 0);
        assert_eq!(r.as_ptr() as usize % r.page_kind().page_size(), 0);
        assert_eq!(r.iova(), r.as_ptr() as u64);
        assert!(
            r.as_slice().iter().all(|&b| b == 0),
            "fresh memory is zeroed"
        );
        let len = r.len();
        for (i, b) in r.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        assert!(
            r.as_slice()
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 251) as u8)
        );
        assert_eq!(r.as_slice().len(), len);
    }

    #[test]
    fn falls_back_when_no_hugetlb_pages() {
        let r = DmaRegion::new(4 << 20).unwrap();
        let more: Vec<_> = (0..3).map(|_| DmaRegion::new(1 << 20).unwrap()).collect();
        if meminfo("HugePages_Free:") == Some(0) {
            assert_ne!(r.page_kind(), PageKind::HugeTlb);
            assert!(more.iter().all(|m| m.page_kind() == r.page_kind()));
            assert!(FALLBACK_WARNED.load(Ordering::Relaxed), "fallback warned");
            assert_eq!(WARNINGS.load(Ordering::Relaxed), 1, "warned exactly once");
        }
        let expect_thp = meminfo("HugePages_Free:") == Some(0) && thp_enabled();
        if expect_thp {
            assert_eq!(r.page_kind(), PageKind::Transparent);
            assert_eq!(r.as_ptr() as usize % HUGE_PAGE_SIZE, 0);
        }
    }

    #[test]
    fn base_pages_when_huge_pages_disallowed() {
        let opts = DmaOptions {
            hugetlb: false,
            transparent: false,
        };
        let mut r = DmaRegion::with_options(5000, opts).unwrap();
        assert_eq!(r.page_kind(), PageKind::Base);
        assert_eq!(r.len(), round_up(5000, base_page_size()).unwrap());
        r.as_mut_slice()[4999] = 7;
        assert_eq!(r.as_slice()[4999], 7);
    }

    #[test]
    fn zero_and_huge_sizes_are_errors() {
        assert!(matches!(DmaRegion::new(0), Err(DmaError::ZeroSize { .. })));
        let e = DmaRegion::new(usize::MAX - 10).unwrap_err();
        assert!(matches!(e, DmaError::TooLarge { .. }));
        assert_eq!(e.errno(), -libc::ENOMEM);
        // Larger than any address space the kernel grants: mmap itself fails.
        let e = DmaRegion::with_options(
            1 << 62,
            DmaOptions {
                hugetlb: false,
                transparent: false,
            },
        )
        .unwrap_err();
        assert!(matches!(e, DmaError::Map { .. }), "{e}");
        assert!(e.errno() < 0);
    }

    #[test]
    fn region_is_send_and_unmapped_on_drop() {
        fn assert_send<T: Send>() {}
        assert_send::<DmaRegion>();
        assert_send::<DmaPool>();
        let mut r = DmaRegion::new(1 << 20).unwrap();
        let marker = 0x706d_696f_d0a5_u64.to_le_bytes();
        r.as_mut_slice()[..8].copy_from_slice(&marker);
        let addr = r.as_ptr();
        let h = std::thread::spawn(move || r.len());
        assert!(h.join().unwrap() >= 1 << 20);
        // After the drop in the other thread the memory is gone. Probe it without faulting:
        // process_vm_readv on ourselves fails with EFAULT on an unmapped address. A parallel
        // test may have mapped fresh memory there meanwhile; then the marker must be gone.
        let mut back = [0u8; 8];
        let local = libc::iovec {
            iov_base: back.as_mut_ptr().cast(),
            iov_len: back.len(),
        };
        let remote = libc::iovec {
            iov_base: addr.cast(),
            iov_len: back.len(),
        };
        // SAFETY: `local` describes our own writable buffer; the kernel validates `remote` and
        // reports EFAULT instead of faulting.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n < 0 {
            assert_eq!(last_errno(), libc::EFAULT);
        } else {
            assert_ne!(back, marker, "region still mapped after drop");
        }
    }

    #[test]
    fn pool_get_put_by_index() {
        let opts = DmaPoolOptions {
            count: 10,
            buf_size: 3000,
            align: 4096,
            dma: DmaOptions::default(),
        };
        let mut pool = DmaPool::new(opts).unwrap();
        assert_eq!(pool.count(), 10);
        let mut got = Vec::new();
        while let Some(i) = pool.get() {
            got.push(i);
        }
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!(pool.available(), 0);
        for &i in &got {
            assert_eq!(pool.ptr(i) as usize % 4096, 0);
            assert_eq!(pool.iova(i), pool.ptr(i) as u64);
            pool.as_mut_slice(i).fill(i as u8 + 1);
        }
        // Buffers do not overlap.
        for &i in &got {
            assert!(pool.as_slice(i).iter().all(|&b| b == i as u8 + 1));
        }
        pool.put(3).unwrap();
        assert!(matches!(
            pool.put(3),
            Err(DmaError::NotInUse { index: 3, .. })
        ));
        assert!(matches!(pool.put(10), Err(DmaError::NotInUse { .. })));
        assert_eq!(pool.get(), Some(3));
    }

    #[test]
    fn pool_spans_several_regions() {
        // 2 MiB buffers: 32 fit in one 64 MiB region, so 40 need two.
        let opts = DmaPoolOptions {
            count: 40,
            buf_size: HUGE_PAGE_SIZE,
            align: HUGE_PAGE_SIZE,
            dma: DmaOptions {
                hugetlb: false,
                transparent: false,
            },
        };
        let mut pool = DmaPool::new(opts).unwrap();
        assert_eq!(pool.regions().len(), 2);
        let last = 39;
        pool.as_mut_slice(last)[HUGE_PAGE_SIZE - 1] = 9;
        assert_eq!(pool.as_slice(last)[HUGE_PAGE_SIZE - 1], 9);
        let r1 = &pool.regions()[1];
        let p = pool.ptr(last) as usize;
        assert!(p >= r1.as_ptr() as usize && p + HUGE_PAGE_SIZE <= r1.as_ptr() as usize + r1.len());
    }

    #[test]
    fn pool_rejects_bad_options() {
        let bad = |o: DmaPoolOptions| DmaPool::new(o).unwrap_err();
        let d = DmaPoolOptions::default();
        assert!(matches!(
            bad(DmaPoolOptions { count: 0, ..d }),
            DmaError::ZeroSize { .. }
        ));
        assert!(matches!(
            bad(DmaPoolOptions { buf_size: 0, ..d }),
            DmaError::ZeroSize { .. }
        ));
        assert!(matches!(
            bad(DmaPoolOptions { align: 3000, ..d }),
            DmaError::BadAlignment(3000)
        ));
        assert!(matches!(
            bad(DmaPoolOptions { align: 512, ..d }),
            DmaError::BadAlignment(512)
        ));
    }
}
