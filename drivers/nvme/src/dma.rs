//! DMA mapping: the interface between the driver and an IOMMU (or an emulator), and queue
//! memory that stays mapped as long as it exists.
//!
//! A [`DmaMapper`] makes a range of the process's memory reachable by the device and says at
//! which I/O virtual address: the virtual address itself where the IOMMU can translate it,
//! else an address it allocated in the IOMMU's valid ranges ([`crate::iova`]). Either way one
//! mapping is translated by one offset, `iova − va`, for all its bytes: queue memory keeps its
//! IOVA ([`DmaMem::iova`]), and I/O memory registered with the controller is a table of
//! [`DmaWindow`]s that the queue pairs search once per command to add the offset.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use pmio::dma::DmaRegion;

use crate::error::NvmeError;

/// Makes process memory reachable by the device.
///
/// VFIO implements it with `VFIO_IOMMU_MAP_DMA`; the test emulator records the ranges it may
/// touch (and, given IOVA ranges, translates as an IOMMU would).
pub trait DmaMapper: Send + Sync {
    /// Maps `len` bytes at `vaddr` (page aligned) so the device can read and write them, and
    /// returns the I/O virtual address of the first byte: `vaddr` when the IOMMU translates
    /// it as it is, else an address congruent to `vaddr` modulo 2 MiB ([`crate::iova`]).
    /// Mapping a range that overlaps a live mapping fails with `EEXIST`.
    ///
    /// # Safety
    /// The range must be valid memory owned by the caller, and stay mapped in the process
    /// until [`DmaMapper::unmap`] has been called for it. While mapped, the device may read or
    /// write it at any time: the caller must not keep Rust references to memory the device
    /// writes.
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64, NvmeError>;

    /// Removes a mapping made by [`DmaMapper::map`] with the same `vaddr` and `len`.
    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError>;
}

/// Registered I/O memory as the hot path sees it: `[start, end)` in virtual addresses, and the
/// offset that turns them into I/O virtual addresses (`iova = va + offset`, wrapping; a
/// multiple of 2 MiB, 0 for IOVA = VA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaWindow {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
}

impl DmaWindow {
    /// The offset of the window holding all of `[addr, addr + len)`: one pass over a table of
    /// a few registrations (usually one).
    #[inline]
    pub fn find(windows: &[DmaWindow], addr: u64, len: u64) -> Option<u64> {
        windows
            .iter()
            .find(|w| w.start <= addr && addr.saturating_add(len) <= w.end)
            .map(|w| w.offset)
    }
}

/// A [`DmaRegion`] mapped for one device; unmapped (then freed) on drop.
///
/// Queue rings, PRP list pages and admin data buffers live in these. Whoever owns one must
/// make sure the device no longer uses it before dropping it (queues deleted, controller
/// disabled or shut down).
pub struct DmaMem {
    region: ManuallyDrop<DmaRegion>,
    iova: u64,
    mapper: Arc<dyn DmaMapper>,
}

impl DmaMem {
    /// Allocates at least `len` zeroed bytes and maps them for the device.
    pub fn new(mapper: Arc<dyn DmaMapper>, len: usize) -> Result<DmaMem, NvmeError> {
        let region = DmaRegion::new(len)?;
        // SAFETY: the region is a fresh mapping owned by the returned DmaMem, which unmaps it
        // from the device in Drop before the region itself is unmapped from the process.
        let iova = unsafe { mapper.map(region.as_ptr(), region.len())? };
        Ok(DmaMem {
            region: ManuallyDrop::new(region),
            iova,
            mapper,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.region.as_ptr()
    }

    /// I/O virtual address of the first byte (what the mapper chose).
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Mapped length.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// Zeroes `len` bytes at `offset` (the caller knows the device does not use them now).
    pub fn zero(&self, offset: usize, len: usize) {
        assert!(offset + len <= self.len(), "zero beyond the DMA region");
        // SAFETY: in bounds (checked above); plain bytes; the caller guarantees the device is
        // not accessing this range.
        unsafe { std::ptr::write_bytes(self.as_ptr().add(offset), 0, len) };
    }
}

impl Drop for DmaMem {
    fn drop(&mut self) {
        match self.mapper.unmap(self.region.as_ptr(), self.region.len()) {
            // SAFETY: the device can no longer reach the region, and it is dropped once, here.
            Ok(()) => unsafe { ManuallyDrop::drop(&mut self.region) },
            // The IOMMU mapping still pins the pages: leaking the region keeps the device from
            // ever writing into memory the process reuses.
            Err(e) => log::error!("{e}; leaking the DMA region"),
        }
    }
}

/// A controller's mapper: forwards to the device's [`DmaMapper`] and keeps the I/O memory
/// registered through `register_memory`, which stays mapped until unregistered, replaced, or
/// the controller goes.
///
/// A registration can outlive its memory: the `register_memory` contract lets the owner free
/// it once no I/O uses it, without telling the driver. A later allocation may then get the
/// same address, and DMA through the old mapping would reach the old, still pinned pages. Two
/// rules keep that from happening:
/// - registering a range that overlaps registrations *replaces* them (they are unmapped and
///   the new range mapped), so the device always reaches the pages the caller has now. The
///   cost: do not register memory again while I/O to it is in flight (the unmap/map window
///   would fail that I/O with a translation fault, never reach other memory);
/// - mapping driver memory (queue rings) that overlaps a registration evicts it on `EEXIST`
///   and retries (live memory never shares an address with a fresh allocation).
pub(crate) struct Mappings {
    dev: Arc<dyn DmaMapper>,
    /// Each registration.
    registered: std::sync::Mutex<Vec<Registration>>,
    /// Bumped on every change of `registered`, so queue pairs refresh their copy.
    generation: std::sync::atomic::AtomicU64,
}

impl Mappings {
    pub fn new(dev: Arc<dyn DmaMapper>) -> Mappings {
        Mappings {
            dev,
            registered: std::sync::Mutex::new(Vec::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Changes whenever the set of registrations changes.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Copies the registrations as windows into `out`; returns the generation they belong
    /// to.
    pub fn snapshot(&self, out: &mut Vec<DmaWindow>) -> u64 {
        let reg = self.lock();
        out.clear();
        out.extend(reg.iter().map(|r| DmaWindow {
            start: r.addr as u64,
            end: (r.addr + r.len) as u64,
            offset: r.iova.wrapping_sub(r.addr as u64),
        }));
        self.generation()
    }

    fn bump(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Registration>> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Unmaps and forgets the registrations overlapping `[a, a + len)`; returns how many.
    fn evict(&self, reg: &mut Vec<Registration>, a: usize, len: usize) -> Result<usize, NvmeError> {
        let mut evicted = 0;
        let mut i = 0;
        while i < reg.len() {
            let Registration {
                addr: ra, len: rl, ..
            } = reg[i];
            if ra < a + len && a < ra + rl {
                log::debug!("DMA registration {ra:#x}+{rl:#x} replaced by {a:#x}+{len:#x}");
                self.dev.unmap(ra as *mut u8, rl)?;
                reg.swap_remove(i);
                self.bump();
                evicted += 1;
            } else {
                i += 1;
            }
        }
        Ok(evicted)
    }

    /// Maps I/O memory, replacing overlapping registrations.
    ///
    /// # Safety
    /// As [`DmaMapper::map`]; the mapping lasts until [`Mappings::unregister`],
    /// [`Mappings::unregister_all`], or a later overlapping registration.
    pub unsafe fn register(&self, regions: &[(*mut u8, usize)]) -> Result<(), NvmeError> {
        let mut reg = self.lock();
        for &(addr, len) in regions {
            self.evict(&mut reg, addr as usize, len)?;
            // SAFETY: forwarded to the caller.
            let iova = unsafe { self.dev.map(addr, len)? };
            reg.push(Registration {
                addr: addr as usize,
                len,
                iova,
            });
            self.bump();
        }
        Ok(())
    }

    /// Removes one registration made with exactly this address and length.
    pub fn unregister(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut reg = self.lock();
        if let Some(i) = reg
            .iter()
            .position(|r| (r.addr, r.len) == (addr as usize, len))
        {
            reg.swap_remove(i);
            self.bump();
            self.dev.unmap(addr, len)?;
        }
        Ok(())
    }

    /// Removes every registration (the controller is going away).
    pub fn unregister_all(&self) {
        let all = std::mem::take(&mut *self.lock());
        self.bump();
        for r in all {
            if let Err(e) = self.dev.unmap(r.addr as *mut u8, r.len) {
                log::error!("{e}");
            }
        }
    }
}

/// One registration of I/O memory and where the mapper put it.
#[derive(Clone, Copy, Debug)]
struct Registration {
    addr: usize,
    len: usize,
    iova: u64,
}

impl DmaMapper for Mappings {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64, NvmeError> {
        // SAFETY: forwarded to the caller.
        match unsafe { self.dev.map(vaddr, len) } {
            Err(NvmeError::DmaMap { source, .. })
                if source.raw_os_error() == Some(libc::EEXIST) =>
            {
                let mut reg = self.lock();
                if self.evict(&mut reg, vaddr as usize, len)? == 0 {
                    return Err(NvmeError::DmaMap {
                        op: "map",
                        iova: vaddr as u64,
                        len,
                        source,
                    });
                }
                // SAFETY: forwarded to the caller.
                unsafe { self.dev.map(vaddr, len) }
            }
            r => r,
        }
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        self.dev.unmap(vaddr, len)
    }
}
