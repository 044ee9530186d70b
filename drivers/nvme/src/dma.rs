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
/// registered through `register_memory`, which stays mapped until unregistered or until the
/// controller goes.
///
/// A registration outlives the buffer when its owner frees the memory without unregistering
/// (the `register_memory` contract allows it once no queue of the device is open). Two rules
/// keep a stale registration from ever receiving DMA meant for new memory at its address:
/// - registering a range inside a registration made before the last time every queue pair
///   was closed (an older *epoch*) replaces it: it is unmapped and the new range mapped;
/// - mapping memory that overlaps a registration fails with `EEXIST`: the overlapping
///   registrations are removed and the mapping retried (live memory never shares an address
///   with a fresh allocation).
pub(crate) struct Mappings {
    dev: Arc<dyn DmaMapper>,
    /// (address, length, epoch registered in).
    registered: std::sync::Mutex<Vec<(usize, usize, u64)>>,
    epoch: std::sync::atomic::AtomicU64,
}

impl Mappings {
    pub fn new(dev: Arc<dyn DmaMapper>) -> Mappings {
        Mappings {
            dev,
            registered: std::sync::Mutex::new(Vec::new()),
            epoch: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Every queue pair is closed: registrations made so far may be freed by their owners.
    pub fn queues_idle(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(usize, usize, u64)>> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Maps through the device, evicting stale registrations on `EEXIST`.
    ///
    /// # Safety
    /// As [`DmaMapper::map`].
    unsafe fn map_evicting(
        &self,
        reg: &mut Vec<(usize, usize, u64)>,
        vaddr: *mut u8,
        len: usize,
    ) -> Result<(), NvmeError> {
        // SAFETY: forwarded to the caller.
        match unsafe { self.dev.map(vaddr, len) } {
            Err(NvmeError::DmaMap { source, .. })
                if source.raw_os_error() == Some(libc::EEXIST) =>
            {
                let (a, end) = (vaddr as usize, vaddr as usize + len);
                let mut evicted = 0;
                let mut i = 0;
                while i < reg.len() {
                    let (ra, rl, _) = reg[i];
                    if ra < end && a < ra + rl {
                        log::debug!(
                            "DMA registration {ra:#x}+{rl:#x} is stale (its address was reused): unmapping it"
                        );
                        self.dev.unmap(ra as *mut u8, rl)?;
                        reg.swap_remove(i);
                        evicted += 1;
                    } else {
                        i += 1;
                    }
                }
                if evicted == 0 {
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

    /// Maps I/O memory once per region (regions inside a registered one are skipped).
    ///
    /// # Safety
    /// As [`DmaMapper::map`]; the mapping lasts until [`Mappings::unregister`] or
    /// [`Mappings::unregister_all`].
    pub unsafe fn register(&self, regions: &[(*mut u8, usize)]) -> Result<(), NvmeError> {
        let mut reg = self.lock();
        let epoch = self.epoch.load(std::sync::atomic::Ordering::Acquire);
        for &(addr, len) in regions {
            let a = addr as usize;
            match reg
                .iter()
                .position(|&(ra, rl, _)| ra <= a && a + len <= ra + rl)
            {
                Some(i) if reg[i].2 == epoch => continue,
                Some(i) => {
                    // Registered before every queue was last closed: its memory may have been
                    // freed and this address reused, so map the caller's pages afresh.
                    let (ra, rl, _) = reg.swap_remove(i);
                    self.dev.unmap(ra as *mut u8, rl)?;
                }
                None => {}
            }
            // SAFETY: forwarded to the caller.
            unsafe { self.map_evicting(&mut reg, addr, len)? };
            reg.push((a, len, epoch));
        }
        Ok(())
    }

    /// Removes one registration made with exactly this address and length.
    pub fn unregister(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut reg = self.lock();
        if let Some(i) = reg
            .iter()
            .position(|&(ra, rl, _)| (ra, rl) == (addr as usize, len))
        {
            reg.swap_remove(i);
            self.dev.unmap(addr, len)?;
        }
        Ok(())
    }

    /// Removes every registration (the controller is going away).
    pub fn unregister_all(&self) {
        for (a, l, _) in std::mem::take(&mut *self.lock()) {
            if let Err(e) = self.dev.unmap(a as *mut u8, l) {
                log::error!("{e}");
            }
        }
    }
}

impl DmaMapper for Mappings {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut reg = self.lock();
        // SAFETY: forwarded to the caller.
        unsafe { self.map_evicting(&mut reg, vaddr, len) }
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        self.dev.unmap(vaddr, len)
    }
}
