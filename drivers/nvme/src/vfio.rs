//! A PCI NVMe controller through VFIO: container (type1 IOMMU), group and device from the
//! PCI address, BAR0 mapped for register access, config space through the device fd, DMA
//! mappings.
//!
//! [`VfioPci`] implements both [`RegisterIo`] (BAR0) and [`DmaMapper`] (the container). At
//! open it asks the container for its valid IOVA ranges and its DMA mapping limit
//! (`VFIO_IOMMU_GET_INFO` and its capability chain, which vfio-ioctls does not expose); each
//! mapping then goes to IOVA = VA where the IOMMU translates that address, else to a block
//! allocated in the valid ranges ([`crate::iova`]).

use std::fs::File;
use std::io;
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES, VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
    VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_TYPE, vfio_info_cap_header, vfio_iommu_type1_info,
    vfio_iommu_type1_info_cap_iova_range, vfio_iommu_type1_info_dma_avail, vfio_iova_range,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError, VfioOps};

use crate::ctrlr::{Controller, NvmeOptions};
use crate::dma::DmaMapper;
use crate::error::NvmeError;
use crate::iova::{IovaSpace, fmt_ranges};
use crate::regs::RegisterIo;

/// PCI command register bits: memory space, bus master, INTx disable.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;

/// `VFIO_IOMMU_GET_INFO`: `_IO(VFIO_TYPE, VFIO_BASE + 12)` (no size or direction bits).
const VFIO_IOMMU_GET_INFO: libc::c_ulong =
    (VFIO_TYPE as libc::c_ulong) << 8 | (VFIO_BASE + 12) as libc::c_ulong;
const _: () = assert!(VFIO_IOMMU_GET_INFO == 0x3b70);

/// The type1 IOMMU's mapping limit when the kernel does not report it: the module default
/// (`dma_entry_limit`, `U16_MAX` since Linux 5.1).
const DMA_ENTRY_LIMIT_DEFAULT: u32 = 65535;
const DMA_ENTRY_LIMIT_PATH: &str = "/sys/module/vfio_iommu_type1/parameters/dma_entry_limit";

/// Checks and normalises a PCI address (`DDDD:BB:DD.F`, or `BB:DD.F` meaning domain 0).
pub fn parse_bdf(s: &str) -> Result<String, NvmeError> {
    let bad = || NvmeError::InvalidAddress(s.to_string());
    let full = if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s.to_string()
    };
    let (dom, rest) = full.split_once(':').ok_or_else(bad)?;
    let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |t: &str, n: usize, max: u32| {
        t.len() == n
            && t.chars().all(|c| c.is_ascii_hexdigit())
            && u32::from_str_radix(t, 16).is_ok_and(|v| v <= max)
    };
    if !(hex(dom, 4, 0xffff) && hex(bus, 2, 0xff) && hex(dev, 2, 0x1f) && hex(func, 1, 7)) {
        return Err(bad());
    }
    Ok(full.to_ascii_lowercase())
}

/// An NVMe controller opened through VFIO.
pub struct VfioPci {
    bdf: String,
    bar: *mut u8,
    bar_len: usize,
    device: VfioDevice,
    container: Arc<VfioContainer>,
    /// Where each DMA mapping of the container sits; held across MAP/UNMAP_DMA so the
    /// bookkeeping and the IOMMU agree.
    iova: Mutex<IovaSpace>,
    /// DMA mappings the container may hold (type1's `dma_entry_limit` at open).
    dma_limit: u32,
}

/// How a container's DMA mappings are placed, for diagnostics ([`VfioPci::iova_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IovaStats {
    /// Live mappings.
    pub mappings: usize,
    /// Live mappings at an allocated IOVA (their virtual address is outside the IOMMU's
    /// ranges or taken).
    pub translated: usize,
    /// Mappings the container may hold (`dma_entry_limit`).
    pub limit: u32,
}

// SAFETY: `bar` points at an MMIO mapping owned by this object; register accesses are single
// volatile loads/stores, which are fine from any thread (the controller serialises them).
unsafe impl Send for VfioPci {}
// SAFETY: as above; no method mutates Rust-visible state through `&self`.
unsafe impl Sync for VfioPci {}

impl VfioPci {
    /// Opens the controller at PCI address `bdf`, which must be bound to vfio-pci, maps BAR0
    /// and enables memory space and bus mastering.
    pub fn open(bdf: &str) -> Result<VfioPci, NvmeError> {
        let bdf = parse_bdf(bdf)?;
        let sysfs = PathBuf::from(format!("/sys/bus/pci/devices/{bdf}"));
        precheck(&bdf, &sysfs)?;
        raise_memlock();
        let container = VfioContainer::new(None).map_err(|e| match e {
            VfioError::OpenContainer(io) => open_error(Path::new("/dev/vfio/vfio"), io),
            other => NvmeError::Vfio {
                bdf: bdf.clone(),
                op: "container setup",
                source: other,
            },
        })?;
        let container = Arc::new(container);
        let ops: Arc<dyn VfioOps> = container.clone();
        let device =
            VfioDevice::new(&sysfs, ops, false).map_err(|e| device_error(&bdf, &sysfs, e))?;

        let flags = device.get_region_flags(VFIO_PCI_BAR0_REGION_INDEX);
        let bar_len = device.get_region_size(VFIO_PCI_BAR0_REGION_INDEX) as usize;
        let bar_off = device.get_region_offset(VFIO_PCI_BAR0_REGION_INDEX);
        if flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
            return Err(NvmeError::BarNotMappable {
                bdf,
                reason: format!("VFIO does not allow mmap of BAR0 (region flags {flags:#x})"),
            });
        }
        if bar_len < 0x1008 {
            return Err(NvmeError::BarNotMappable {
                bdf,
                reason: format!("BAR0 is {bar_len} bytes, too small for NVMe registers"),
            });
        }
        // SAFETY: mapping a device region the kernel said is mmap-able, at its offset on the
        // device fd; the result is checked; the mapping is owned by the returned VfioPci.
        let bar = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bar_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                device.as_raw_fd(),
                bar_off as libc::off_t,
            )
        };
        if bar == libc::MAP_FAILED {
            return Err(NvmeError::BarNotMappable {
                bdf,
                reason: format!("mmap failed: {}", io::Error::last_os_error()),
            });
        }
        // The container has its IOMMU now (set when the device's group joined it).
        let info = iommu_info(container.as_raw_fd()).unwrap_or_default();
        let dma_limit = info
            .dma_avail
            .or_else(dma_entry_limit_sysfs)
            .unwrap_or(DMA_ENTRY_LIMIT_DEFAULT);
        match &info.ranges {
            Some(r) => log::debug!(
                "{bdf}: IOMMU IOVA ranges {}, smallest page {:#x}; up to {dma_limit} DMA mappings",
                fmt_ranges(r),
                info.pgsizes.map_or(0, |p| 1u64 << p.trailing_zeros())
            ),
            None => log::info!(
                "{bdf}: the IOMMU reports no IOVA ranges (Linux before 5.4): DMA uses IOVA = virtual address"
            ),
        }
        let pci = VfioPci {
            bdf,
            bar: bar.cast(),
            bar_len,
            device,
            container,
            iova: Mutex::new(IovaSpace::new(info.ranges)),
            dma_limit,
        };
        pci.enable_bus_master()?;
        Ok(pci)
    }

    /// The PCI address.
    pub fn bdf(&self) -> &str {
        &self.bdf
    }

    fn config_file(&self) -> std::mem::ManuallyDrop<File> {
        use std::os::fd::FromRawFd;
        // SAFETY: the device fd stays open as long as `self`; ManuallyDrop keeps the File
        // from closing it.
        std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(self.device.as_raw_fd()) })
    }

    /// Reads PCI config space (pread on the device fd: VFIO's region_read swallows errors).
    pub fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), NvmeError> {
        let base = self.device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX);
        self.config_file()
            .read_exact_at(buf, base + offset)
            .map_err(|source| NvmeError::ConfigSpace {
                bdf: self.bdf.clone(),
                op: "read",
                source,
            })
    }

    /// Writes PCI config space.
    pub fn config_write(&self, offset: u64, buf: &[u8]) -> Result<(), NvmeError> {
        let base = self.device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX);
        self.config_file()
            .write_all_at(buf, base + offset)
            .map_err(|source| NvmeError::ConfigSpace {
                bdf: self.bdf.clone(),
                op: "write",
                source,
            })
    }

    fn enable_bus_master(&self) -> Result<(), NvmeError> {
        let mut b = [0u8; 2];
        self.config_read(PCI_COMMAND, &mut b)?;
        let cmd = u16::from_le_bytes(b);
        let want = cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE;
        if want != cmd {
            self.config_write(PCI_COMMAND, &want.to_le_bytes())?;
        }
        Ok(())
    }

    /// Valid IOVA ranges of the container's IOMMU, as `(first, last)`, when the kernel
    /// reports them.
    pub fn iova_ranges(&self) -> Option<Vec<(u64, u64)>> {
        self.lock_iova().ranges().map(<[_]>::to_vec)
    }

    /// How the container's DMA mappings are placed now.
    pub fn iova_stats(&self) -> IovaStats {
        let space = self.lock_iova();
        IovaStats {
            mappings: space.mappings(),
            translated: space.translated(),
            limit: self.dma_limit,
        }
    }

    fn lock_iova(&self) -> MutexGuard<'_, IovaSpace> {
        self.iova.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[inline]
    fn reg(&self, off: usize, width: usize) -> Option<*mut u8> {
        (off + width <= self.bar_len && off.is_multiple_of(width)).then(|| {
            // SAFETY: in bounds of the BAR mapping (checked).
            unsafe { self.bar.add(off) }
        })
    }
}

impl RegisterIo for VfioPci {
    #[inline]
    fn read32(&self, off: usize) -> u32 {
        match self.reg(off, 4) {
            // SAFETY: an aligned, in-bounds address of the BAR mapping; MMIO needs volatile.
            Some(p) => unsafe { p.cast::<u32>().read_volatile() },
            None => {
                log::error!("{}: register read at {off:#x} outside BAR0", self.bdf);
                u32::MAX
            }
        }
    }

    #[inline]
    fn write32(&self, off: usize, val: u32) {
        match self.reg(off, 4) {
            // SAFETY: an aligned, in-bounds address of the BAR mapping; MMIO needs volatile.
            Some(p) => unsafe { p.cast::<u32>().write_volatile(val) },
            None => log::error!("{}: register write at {off:#x} outside BAR0", self.bdf),
        }
    }

    fn len(&self) -> usize {
        self.bar_len
    }
}

impl DmaMapper for VfioPci {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64, NvmeError> {
        let mut space = self.lock_iova();
        let iova = space.place(vaddr as u64, len as u64)?;
        // SAFETY: forwarded to our caller (memory valid and owned until unmap).
        let r = unsafe { self.container.vfio_dma_map(iova, len, vaddr) };
        if let Err(e) = r {
            space.release(vaddr as u64, len as u64);
            let errno = match &e {
                VfioError::IommuDmaMap(se) => se.errno(),
                _ => 0,
            };
            return Err(self.map_error(space.mappings(), iova, len, errno, e));
        }
        Ok(iova)
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut space = self.lock_iova();
        let Some(iova) = space.iova_of(vaddr as u64, len as u64) else {
            return Err(NvmeError::DmaMap {
                op: "unmap",
                iova: vaddr as u64,
                len,
                source: io::Error::from_raw_os_error(libc::EINVAL),
            });
        };
        self.container
            .vfio_dma_unmap(iova, len)
            .map_err(|e| NvmeError::DmaMap {
                op: "unmap",
                iova,
                len,
                source: io::Error::other(e),
            })?;
        space.release(vaddr as u64, len as u64);
        Ok(())
    }
}

impl Drop for VfioPci {
    fn drop(&mut self) {
        // SAFETY: unmapping the BAR mapping created in `open`; no register access can follow
        // (we are being dropped, and everything using us holds an Arc).
        unsafe { libc::munmap(self.bar.cast(), self.bar_len) };
    }
}

impl VfioPci {
    /// The error of a failed `VFIO_IOMMU_MAP_DMA` with `mapped` mappings live.
    #[cold]
    fn map_error(
        &self,
        mapped: usize,
        iova: u64,
        len: usize,
        errno: i32,
        e: VfioError,
    ) -> NvmeError {
        if errno == libc::ENOMEM || errno == libc::EPERM && memlock().0 != libc::RLIM_INFINITY {
            let (soft, hard) = memlock();
            return NvmeError::MemlockTooLow { len, soft, hard };
        }
        // type1 answers ENOSPC for one reason only: the container's mappings reached
        // dma_entry_limit (vfio_dma_do_map, `if (!iommu->dma_avail)`).
        if errno == libc::ENOSPC {
            return NvmeError::DmaEntryLimit {
                len,
                limit: self.dma_limit,
                mapped,
            };
        }
        NvmeError::DmaMap {
            op: "map",
            iova,
            len,
            source: if errno != 0 {
                io::Error::from_raw_os_error(errno)
            } else {
                io::Error::other(e)
            },
        }
    }
}

/// The soft and hard RLIMIT_MEMLOCK.
fn memlock() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid out-parameter.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    (r.rlim_cur, r.rlim_max)
}

/// Raises the soft RLIMIT_MEMLOCK to the hard limit (VFIO pins DMA memory against it).
fn raise_memlock() {
    let (soft, hard) = memlock();
    if soft < hard {
        let r = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: `r` is a valid in-parameter.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) } != 0 {
            log::warn!(
                "cannot raise RLIMIT_MEMLOCK from {soft} to {hard}: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// The sysfs checks that turn VFIO's generic failures into actionable errors.
fn precheck(bdf: &str, sysfs: &Path) -> Result<(), NvmeError> {
    if !sysfs.exists() {
        return Err(NvmeError::NoSuchDevice {
            bdf: bdf.to_string(),
            path: sysfs.to_path_buf(),
        });
    }
    let driver = std::fs::read_link(sysfs.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if driver.as_deref() != Some("vfio-pci") {
        return Err(NvmeError::NotBoundToVfio {
            bdf: bdf.to_string(),
            driver,
        });
    }
    if std::fs::read_link(sysfs.join("iommu_group")).is_err() {
        return Err(NvmeError::NoIommuGroup {
            bdf: bdf.to_string(),
        });
    }
    if !Path::new("/dev/vfio/vfio").exists() {
        return Err(NvmeError::VfioUnavailable {
            reason: "/dev/vfio/vfio is missing: load the vfio and vfio_iommu_type1 modules".into(),
        });
    }
    Ok(())
}

fn group_of(sysfs: &Path) -> Option<u32> {
    std::fs::read_link(sysfs.join("iommu_group"))
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
}

fn open_error(path: &Path, e: io::Error) -> NvmeError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => NvmeError::Permission {
            path: path.to_path_buf(),
        },
        _ => NvmeError::VfioUnavailable {
            reason: format!("cannot open {}: {e}", path.display()),
        },
    }
}

fn device_error(bdf: &str, sysfs: &Path, e: VfioError) -> NvmeError {
    let group = group_of(sysfs).unwrap_or(0);
    match e {
        VfioError::OpenGroup(io, _) => {
            let path = PathBuf::from(format!("/dev/vfio/{group}"));
            if io.raw_os_error() == Some(libc::EBUSY) {
                NvmeError::VfioUnavailable {
                    reason: format!(
                        "{}: busy: the IOMMU group is already open (another process uses {bdf}?)",
                        path.display()
                    ),
                }
            } else {
                open_error(&path, io)
            }
        }
        VfioError::GroupViable => {
            let members = std::fs::read_dir(format!("/sys/kernel/iommu_groups/{group}/devices"))
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .map(|e| {
                            let name = e.file_name().to_string_lossy().into_owned();
                            let drv = std::fs::read_link(e.path().join("driver"))
                                .ok()
                                .and_then(|p| {
                                    p.file_name().map(|n| n.to_string_lossy().into_owned())
                                })
                                .unwrap_or_else(|| "no driver".into());
                            format!("{name} ({drv})")
                        })
                        .collect()
                })
                .unwrap_or_default();
            NvmeError::GroupNotViable {
                bdf: bdf.to_string(),
                group,
                members,
            }
        }
        other => NvmeError::Vfio {
            bdf: bdf.to_string(),
            op: "device open",
            source: other,
        },
    }
}

/// What `VFIO_IOMMU_GET_INFO` says of a type1 container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct IommuInfo {
    /// Supported IOMMU page sizes (a bitmap of sizes).
    pgsizes: Option<u64>,
    /// Valid IOVA ranges `(first, last)`: the IOVA_RANGE capability (Linux 5.4+).
    ranges: Option<Vec<(u64, u64)>>,
    /// Mappings the container may still make: the DMA_AVAIL capability (Linux 5.10+).
    dma_avail: Option<u32>,
}

/// Asks the container for its IOMMU info, capability chain included.
fn iommu_info(container_fd: i32) -> Option<IommuInfo> {
    // u64 words: the info struct and the capabilities are 8-byte aligned.
    let mut buf = vec![0u64; 512];
    for _ in 0..2 {
        let argsz = (buf.len() * 8) as u32;
        // argsz, then flags = 0.
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&argsz.to_ne_bytes());
        buf[0] = u64::from_ne_bytes(head);
        // SAFETY: `buf` is writable for `argsz` bytes, as the ioctl's argsz says, and lives
        // across the call; the kernel writes no more than argsz.
        let rc = unsafe { libc::ioctl(container_fd, VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) };
        if rc != 0 {
            log::debug!("VFIO_IOMMU_GET_INFO: {}", io::Error::last_os_error());
            return None;
        }
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let need = read_u32(&bytes, offset_of!(vfio_iommu_type1_info, argsz))?;
        if need as usize <= bytes.len() {
            return parse_type1_info(&bytes);
        }
        // The capabilities did not fit: the kernel said how much room they need.
        buf = vec![0u64; (need as usize).div_ceil(8)];
    }
    None
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses `struct vfio_iommu_type1_info` and its capability chain (offsets from the start of
/// the buffer, each capability naming the next; 0 ends the chain).
fn parse_type1_info(b: &[u8]) -> Option<IommuInfo> {
    let flags = read_u32(b, offset_of!(vfio_iommu_type1_info, flags))?;
    let mut info = IommuInfo::default();
    if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
        info.pgsizes = read_u64(b, offset_of!(vfio_iommu_type1_info, iova_pgsizes));
    }
    if flags & VFIO_IOMMU_INFO_CAPS == 0 {
        return Some(info);
    }
    let mut off = read_u32(b, offset_of!(vfio_iommu_type1_info, cap_offset))? as usize;
    // A chain longer than the buffer has room for is corrupt: stop rather than loop.
    for _ in 0..b.len() / size_of::<vfio_info_cap_header>() {
        if off == 0 {
            break;
        }
        let id = read_u32(b, off + offset_of!(vfio_info_cap_header, id))? & 0xffff;
        match id {
            VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE => {
                let n = read_u32(
                    b,
                    off + offset_of!(vfio_iommu_type1_info_cap_iova_range, nr_iovas),
                )? as usize;
                let first = off + offset_of!(vfio_iommu_type1_info_cap_iova_range, iova_ranges);
                let ranges = (0..n)
                    .map(|i| {
                        let at = first + i * size_of::<vfio_iova_range>();
                        Some((
                            read_u64(b, at + offset_of!(vfio_iova_range, start))?,
                            read_u64(b, at + offset_of!(vfio_iova_range, end))?,
                        ))
                    })
                    .collect::<Option<Vec<_>>>()?;
                info.ranges = Some(ranges);
            }
            VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL => {
                info.dma_avail =
                    read_u32(b, off + offset_of!(vfio_iommu_type1_info_dma_avail, avail));
            }
            _ => {}
        }
        off = read_u32(b, off + offset_of!(vfio_info_cap_header, next))? as usize;
    }
    Some(info)
}

/// type1's `dma_entry_limit` module parameter (kernels without the DMA_AVAIL capability).
fn dma_entry_limit_sysfs() -> Option<u32> {
    std::fs::read_to_string(DMA_ENTRY_LIMIT_PATH)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Attaches the controller at PCI address `bdf` through VFIO and brings it up.
pub fn attach(bdf: &str, opts: NvmeOptions) -> Result<Controller, NvmeError> {
    let pci = Arc::new(VfioPci::open(bdf)?);
    log::debug!(
        "{}: opened through VFIO, BAR0 {} bytes",
        pci.bdf(),
        pci.bar_len
    );
    Controller::attach_with(pci.clone(), pci, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_parsing() {
        assert_eq!(parse_bdf("0000:00:04.0").unwrap(), "0000:00:04.0");
        assert_eq!(parse_bdf("00:04.0").unwrap(), "0000:00:04.0");
        assert_eq!(parse_bdf("0000:AF:1f.7").unwrap(), "0000:af:1f.7");
        for bad in [
            "",
            "0000:00:04",
            "0000:00:20.0",
            "0000:00:04.8",
            "x000:00:04.0",
            "0:0:4.0",
            "0000:00:04.0.1",
        ] {
            assert!(
                matches!(parse_bdf(bad), Err(NvmeError::InvalidAddress(_))),
                "{bad}"
            );
        }
    }

    /// Builds `vfio_iommu_type1_info` with a DMA_AVAIL and an IOVA_RANGE capability, as Linux
    /// 6.x returns it for QEMU's 39-bit virtual IOMMU.
    fn info_bytes(next_of_last: u32) -> Vec<u8> {
        let mut b = Vec::new();
        let u32s = |b: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| b.extend(x.to_ne_bytes()));
        let u64s = |b: &mut Vec<u8>, v: &[u64]| v.iter().for_each(|x| b.extend(x.to_ne_bytes()));
        u32s(
            &mut b,
            &[88, VFIO_IOMMU_INFO_PGSIZES | VFIO_IOMMU_INFO_CAPS],
        );
        u64s(&mut b, &[0x4020_1000]);
        u32s(&mut b, &[24, 0]);
        // DMA_AVAIL at 24: header { id 3, version 1, next 40 }, avail, padding.
        u32s(
            &mut b,
            &[VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL | 1 << 16, 40, 65535, 0],
        );
        // IOVA_RANGE at 40: header, nr_iovas 2, reserved, 2 ranges.
        u32s(
            &mut b,
            &[
                VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE | 1 << 16,
                next_of_last,
                2,
                0,
            ],
        );
        u64s(&mut b, &[0, 0xfedf_ffff, 0xfef0_0000, 0x7f_ffff_ffff]);
        assert_eq!(b.len(), 88);
        b
    }

    #[test]
    fn type1_info_capability_chain_is_parsed() {
        let info = parse_type1_info(&info_bytes(0)).unwrap();
        assert_eq!(
            info,
            IommuInfo {
                pgsizes: Some(0x4020_1000),
                ranges: Some(vec![(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)]),
                dma_avail: Some(65535),
            }
        );
        // A chain that loops back ends; a truncated one gives up, without panicking.
        let looped = parse_type1_info(&info_bytes(24)).unwrap();
        assert_eq!(looped.dma_avail, Some(65535));
        assert_eq!(parse_type1_info(&info_bytes(0)[..60]), None);
        // No capabilities (an old kernel): nothing but the page sizes.
        let mut old = info_bytes(0);
        old[4..8].copy_from_slice(&VFIO_IOMMU_INFO_PGSIZES.to_ne_bytes());
        let info = parse_type1_info(&old).unwrap();
        assert_eq!((info.ranges, info.dma_avail), (None, None));
    }

    #[test]
    fn missing_device_is_a_clear_error() {
        match VfioPci::open("0000:ff:1f.7") {
            Err(NvmeError::NoSuchDevice { bdf, .. }) => assert_eq!(bdf, "0000:ff:1f.7"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a device at ff:1f.7?"),
        }
    }
}
