//! DMA mapping: the interface between the driver and an IOMMU (or an emulator), and queue
//! memory that stays mapped as long as it exists.
//!
//! The driver always uses IOVA = virtual address: a buffer's address is what it puts in PRP
//! entries, so the I/O path never translates. A [`DmaMapper`] only has to make a range of the
//! process's memory reachable by the device at that same address.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use pmio::dma::DmaRegion;

use crate::error::NvmeError;

/// Makes process memory reachable by the device, with IOVA = virtual address.
///
/// VFIO implements it with `VFIO_IOMMU_MAP_DMA`; the test emulator records the ranges it may
/// touch.
pub trait DmaMapper: Send + Sync {
    /// Maps `len` bytes at `vaddr` (page aligned) so the device can read and write them at
    /// I/O virtual address `vaddr`.
    ///
    /// # Safety
    /// The range must be valid memory owned by the caller, and stay mapped in the process
    /// until [`DmaMapper::unmap`] has been called for it. While mapped, the device may read or
    /// write it at any time: the caller must not keep Rust references to memory the device
    /// writes.
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError>;

    /// Removes a mapping made by [`DmaMapper::map`] with the same `vaddr` and `len`.
    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError>;
}

/// A [`DmaRegion`] mapped for one device; unmapped (then freed) on drop.
///
/// Queue rings, PRP list pages and admin data buffers live in these. Whoever owns one must
/// make sure the device no longer uses it before dropping it (queues deleted, controller
/// disabled or shut down).
pub struct DmaMem {
    region: ManuallyDrop<DmaRegion>,
    mapper: Arc<dyn DmaMapper>,
}

impl DmaMem {
    /// Allocates at least `len` zeroed bytes and maps them for the device.
    pub fn new(mapper: Arc<dyn DmaMapper>, len: usize) -> Result<DmaMem, NvmeError> {
        let region = DmaRegion::new(len)?;
        // SAFETY: the region is a fresh mapping owned by the returned DmaMem, which unmaps it
        // from the device in Drop before the region itself is unmapped from the process.
        unsafe { mapper.map(region.as_ptr(), region.len())? };
        Ok(DmaMem {
            region: ManuallyDrop::new(region),
            mapper,
        })
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.region.as_ptr()
    }

    /// I/O virtual address of the first byte.
    pub fn iova(&self) -> u64 {
        self.region.iova()
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
    /// (address, length) of each registration.
    registered: std::sync::Mutex<Vec<(usize, usize)>>,
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

    /// Copies the registrations as `(start, end)` address ranges into `out`; returns the
    /// generation they belong to.
    pub fn snapshot(&self, out: &mut Vec<(u64, u64)>) -> u64 {
        let reg = self.lock();
        out.clear();
        out.extend(reg.iter().map(|&(a, l)| (a as u64, (a + l) as u64)));
        self.generation()
    }

    fn bump(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(usize, usize)>> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Unmaps and forgets the registrations overlapping `[a, a + len)`; returns how many.
    fn evict(
        &self,
        reg: &mut Vec<(usize, usize)>,
        a: usize,
        len: usize,
    ) -> Result<usize, NvmeError> {
        let mut evicted = 0;
        let mut i = 0;
        while i < reg.len() {
            let (ra, rl) = reg[i];
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
            unsafe { self.dev.map(addr, len)? };
            reg.push((addr as usize, len));
            self.bump();
        }
        Ok(())
    }

    /// Removes one registration made with exactly this address and length.
    pub fn unregister(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut reg = self.lock();
        if let Some(i) = reg.iter().position(|&r| r == (addr as usize, len)) {
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
        for (a, l) in all {
            if let Err(e) = self.dev.unmap(a as *mut u8, l) {
                log::error!("{e}");
            }
        }
    }
}

impl DmaMapper for Mappings {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
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
