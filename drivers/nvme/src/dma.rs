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
