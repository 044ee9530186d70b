//! A guest's memory as its memory table (SET_MEM_TABLE) describes it: each region's file
//! mapped shared into this process, addressed by guest physical address (vm-memory does the
//! bounds checks), plus the front end's own virtual address of each region, through which
//! SET_VRING_ADDR names the rings.
//!
//! A table is immutable once built and shared (`Arc`) by the rings that use it. A new table
//! replaces the old one on every reactor by message; the old mappings are unmapped when the
//! last ring lets go of them. Requests in flight keep only guest physical addresses (their
//! data is copied through bounce buffers), so nothing of theirs points into a mapping that
//! may go away.

use std::fs::File;

use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

use crate::error::VhostError;

/// Most regions a table may have without CONFIGURE_MEM_SLOTS (vhost-user's limit).
pub const MAX_REGIONS: usize = 8;

/// One region as the front end announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionDesc {
    pub guest_phys_addr: u64,
    pub memory_size: u64,
    /// The front end's virtual address of the region's start.
    pub user_addr: u64,
    /// Where the region starts in its file.
    pub mmap_offset: u64,
}

/// A guest's memory.
#[derive(Debug)]
pub struct GuestMem {
    mem: GuestMemoryMmap,
    regions: Vec<RegionDesc>,
}

impl GuestMem {
    /// Maps `files[i]` for `regions[i]`.
    pub fn map(regions: &[RegionDesc], files: Vec<File>) -> Result<GuestMem, VhostError> {
        if regions.len() != files.len() || regions.is_empty() || regions.len() > MAX_REGIONS {
            return Err(VhostError::MemTable(format!(
                "{} regions with {} files (1..={MAX_REGIONS} regions, one file each)",
                regions.len(),
                files.len()
            )));
        }
        let mut mapped = Vec::with_capacity(regions.len());
        for (r, f) in regions.iter().zip(files) {
            let size = usize::try_from(r.memory_size)
                .ok()
                .filter(|&s| s > 0)
                .ok_or_else(|| VhostError::MemTable(format!("region size {}", r.memory_size)))?;
            let mmap =
                MmapRegion::from_file(FileOffset::new(f, r.mmap_offset), size).map_err(|e| {
                    VhostError::MemTable(format!(
                        "mapping {size} bytes at offset {:#x}: {e}",
                        r.mmap_offset
                    ))
                })?;
            let region = GuestRegionMmap::new(mmap, GuestAddress(r.guest_phys_addr))
                .ok_or_else(|| VhostError::MemTable("a region past 2^64".into()))?;
            mapped.push(region);
        }
        Self::from_regions(regions, mapped)
    }

    /// Anonymous memory at the given ranges (tests and examples).
    pub fn anonymous(ranges: &[(u64, usize)]) -> Result<GuestMem, VhostError> {
        let descs: Vec<RegionDesc> = ranges
            .iter()
            .map(|&(gpa, size)| RegionDesc {
                guest_phys_addr: gpa,
                memory_size: size as u64,
                user_addr: gpa,
                mmap_offset: 0,
            })
            .collect();
        let mapped = ranges
            .iter()
            .map(|&(gpa, size)| {
                GuestRegionMmap::from_range(GuestAddress(gpa), size, None)
                    .map_err(|e| VhostError::MemTable(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_regions(&descs, mapped)
    }

    fn from_regions(
        descs: &[RegionDesc],
        mapped: Vec<GuestRegionMmap>,
    ) -> Result<GuestMem, VhostError> {
        let mem = GuestMemoryMmap::from_regions(mapped)
            .map_err(|e| VhostError::MemTable(format!("overlapping regions: {e}")))?;
        Ok(GuestMem {
            mem,
            regions: descs.to_vec(),
        })
    }

    /// The mapped memory, addressed by guest physical address.
    pub fn mem(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// The regions as announced.
    pub fn regions(&self) -> &[RegionDesc] {
        &self.regions
    }

    /// The guest physical address of the front end's virtual address `va`, where `len` bytes
    /// from it lie in one region.
    pub fn va_to_gpa(&self, va: u64, len: u64) -> Option<u64> {
        self.regions.iter().find_map(|r| {
            let off = va.checked_sub(r.user_addr)?;
            (off.checked_add(len)? <= r.memory_size).then(|| r.guest_phys_addr + off)
        })
    }

    /// Total bytes mapped.
    pub fn size(&self) -> u64 {
        self.regions.iter().map(|r| r.memory_size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn va_translation_stays_inside_one_region() {
        let mut m = GuestMem::anonymous(&[(0, 0x10000), (0x20000, 0x10000)]).unwrap();
        m.regions[0].user_addr = 0x7f00_0000_0000;
        m.regions[1].user_addr = 0x7f10_0000_0000;
        assert_eq!(m.va_to_gpa(0x7f00_0000_1000, 16), Some(0x1000));
        assert_eq!(m.va_to_gpa(0x7f10_0000_0010, 16), Some(0x20010));
        assert_eq!(m.va_to_gpa(0x7f00_0000_fff8, 16), None);
        assert_eq!(m.va_to_gpa(0x7eff_ffff_fff0, 16), None);
        assert_eq!(m.va_to_gpa(u64::MAX, 16), None);
        assert_eq!(m.size(), 0x20000);
    }

    #[test]
    fn bad_tables_are_refused() {
        assert!(GuestMem::map(&[], Vec::new()).is_err());
        let r = RegionDesc {
            guest_phys_addr: 0,
            memory_size: 4096,
            user_addr: 0,
            mmap_offset: 0,
        };
        assert!(GuestMem::map(&[r], Vec::new()).is_err());
        assert!(GuestMem::anonymous(&[(0, 0x2000), (0x1000, 0x2000)]).is_err());
    }

    #[test]
    fn a_memfd_region_is_shared_with_its_file() {
        use std::io::{Read, Seek, SeekFrom, Write};
        use vm_memory::Bytes;
        let mut f = tempfile::tempfile().unwrap();
        f.set_len(0x3000).unwrap();
        f.seek(SeekFrom::Start(0x1000)).unwrap();
        f.write_all(b"guest").unwrap();
        let r = RegionDesc {
            guest_phys_addr: 0x10_0000,
            memory_size: 0x2000,
            user_addr: 0x5000_0000,
            mmap_offset: 0x1000,
        };
        let m = GuestMem::map(&[r], vec![f.try_clone().unwrap()]).unwrap();
        let mut b = [0u8; 5];
        m.mem().read_slice(&mut b, GuestAddress(0x10_0000)).unwrap();
        assert_eq!(&b, b"guest");
        m.mem()
            .write_slice(b"device", GuestAddress(0x10_0010))
            .unwrap();
        let mut back = [0u8; 6];
        f.seek(SeekFrom::Start(0x1010)).unwrap();
        f.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"device");
    }
}
