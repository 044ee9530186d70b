//! The emulator as an IOMMU ([`DmaMapper`]): the driver's mappings, at IOVA = VA or (after
//! [`Emu::set_iova_ranges`]) where [`crate::iova`] places them; every device access is
//! translated and reaches only mapped memory.

use super::{Emu, State};
use crate::dma::DmaMapper;
use crate::error::NvmeError;
use crate::iova::IovaSpace;

impl DmaMapper for Emu {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64, NvmeError> {
        // As VFIO: an overlap with an existing mapping is EEXIST.
        self.lock().iommu.place(vaddr as u64, len as u64)
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut s = self.lock();
        match s.iommu.release(vaddr as u64, len as u64) {
            Some(_) => Ok(()),
            None => Err(NvmeError::DmaMap {
                op: "unmap",
                iova: vaddr as u64,
                len,
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            }),
        }
    }
}

impl Emu {
    /// DMA ranges currently mapped.
    pub fn mapped(&self) -> usize {
        self.lock().iommu.mappings()
    }

    /// Makes the emulator an IOMMU whose valid IOVA ranges are `ranges` (`(first, last)`):
    /// memory outside them is mapped at allocated IOVAs, as VFIO does on a 39-bit IOMMU.
    /// Call it before anything is mapped (before attach).
    pub fn set_iova_ranges(&self, ranges: Vec<(u64, u64)>) {
        let mut s = self.lock();
        assert_eq!(s.iommu.mappings(), 0, "IOVA ranges set with DMA mapped");
        s.iommu = IovaSpace::new(Some(ranges));
    }

    /// DMA mappings at an IOVA other than their virtual address.
    pub fn translated(&self) -> usize {
        self.lock().iommu.translated()
    }
}

impl State {
    /// The process address of `len` mapped bytes at `iova` (`None`: not all mapped).
    pub(super) fn host(&self, iova: u64, len: usize) -> Option<*mut u8> {
        self.iommu
            .translate(iova, len as u64)
            .map(|va| va as *mut u8)
    }

    /// A device read of `out.len()` bytes at `iova`; false (nothing read) unless all mapped.
    pub(super) fn read_mem(&self, iova: u64, out: &mut [u8]) -> bool {
        let Some(p) = self.host(iova, out.len()) else {
            return false;
        };
        // SAFETY: the range lies in memory the driver mapped for DMA and keeps alive while
        // mapped (the DmaMapper contract).
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        true
    }

    /// A device write of `data` at `iova`; false (nothing written) unless all mapped.
    pub(super) fn write_mem(&self, iova: u64, data: &[u8]) -> bool {
        let Some(p) = self.host(iova, data.len()) else {
            return false;
        };
        // SAFETY: as read_mem; the driver holds no Rust references to device-written memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        true
    }
}
