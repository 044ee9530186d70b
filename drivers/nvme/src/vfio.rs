//! A PCI NVMe controller through VFIO: container (type1 IOMMU), group and device from the
//! PCI address, BAR0 mapped for register access, config space through the device fd, DMA
//! mappings with IOVA = virtual address.
//!
//! [`VfioPci`] implements both [`RegisterIo`] (BAR0) and [`DmaMapper`] (the container).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{
    VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioError, VfioOps};

use crate::ctrlr::{Controller, NvmeOptions};
use crate::dma::DmaMapper;
use crate::error::NvmeError;
use crate::regs::RegisterIo;

/// PCI command register bits: memory space, bus master, INTx disable.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;

/// `VFIO_IOMMU_GET_INFO` (`_IO(';', 100 + 12)`).
const VFIO_IOMMU_GET_INFO: libc::c_ulong = 0x3b70;

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
        let pci = VfioPci {
            bdf,
            bar: bar.cast(),
            bar_len,
            device,
            container,
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

    /// Valid IOVA ranges of the container's IOMMU, as `(start, end)` inclusive, when the
    /// kernel reports them.
    pub fn iova_ranges(&self) -> Vec<(u64, u64)> {
        iova_ranges(self.container.as_raw_fd()).unwrap_or_default()
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
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        // SAFETY: forwarded to our caller (memory valid and owned until unmap).
        let r = unsafe { self.container.vfio_dma_map(vaddr as u64, len, vaddr) };
        r.map_err(|e| {
            let errno = match &e {
                VfioError::IommuDmaMap(se) => se.errno(),
                _ => 0,
            };
            map_error(self, vaddr as u64, len, errno, e)
        })
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        self.container
            .vfio_dma_unmap(vaddr as u64, len)
            .map_err(|e| NvmeError::DmaMap {
                op: "unmap",
                iova: vaddr as u64,
                len,
                source: io::Error::other(e),
            })
    }
}

impl Drop for VfioPci {
    fn drop(&mut self) {
        // SAFETY: unmapping the BAR mapping created in `open`; no register access can follow
        // (we are being dropped, and everything using us holds an Arc).
        unsafe { libc::munmap(self.bar.cast(), self.bar_len) };
    }
}

fn map_error(pci: &VfioPci, iova: u64, len: usize, errno: i32, e: VfioError) -> NvmeError {
    if errno == libc::ENOMEM || errno == libc::EPERM && memlock().0 != libc::RLIM_INFINITY {
        let (soft, hard) = memlock();
        return NvmeError::MemlockTooLow { len, soft, hard };
    }
    if errno == libc::EINVAL {
        let ranges = pci.iova_ranges();
        let end = iova + len as u64 - 1;
        if !ranges.is_empty() && !ranges.iter().any(|&(s, e)| s <= iova && end <= e) {
            let ranges = ranges
                .iter()
                .map(|(s, e)| format!("{s:#x}..={e:#x}"))
                .collect::<Vec<_>>()
                .join(", ");
            return NvmeError::IovaOutOfRange { va: iova, ranges };
        }
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

/// Reads the type1 IOMMU's valid IOVA ranges (VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE).
fn iova_ranges(container_fd: i32) -> Option<Vec<(u64, u64)>> {
    // struct vfio_iommu_type1_info { argsz u32, flags u32, iova_pgsizes u64, cap_offset u32,
    // pad u32 } followed by the capability chain.
    let mut buf = vec![0u64; 512];
    let argsz = (buf.len() * 8) as u32;
    buf[0] = u64::from(argsz);
    // SAFETY: `buf` is a writable buffer of `argsz` bytes, as the ioctl's argsz says.
    let rc = unsafe { libc::ioctl(container_fd, VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
    let u32_at = |o: usize| {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let u64_at = |o: usize| {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    };
    let flags = u32_at(4)?;
    if flags & 2 == 0 {
        return None; // no capability chain
    }
    let mut off = u32_at(16)? as usize;
    for _ in 0..16 {
        if off == 0 || off >= bytes.len() {
            break;
        }
        // struct vfio_info_cap_header { id u16, version u16, next u32 }
        let id = u32_at(off)? & 0xffff;
        let next = u32_at(off + 4)? as usize;
        if id == 1 {
            // { header, nr_iovas u32, reserved u32, { start u64, end u64 }[] }
            let n = u32_at(off + 8)? as usize;
            return (0..n.min(64))
                .map(|i| Some((u64_at(off + 16 + 16 * i)?, u64_at(off + 24 + 16 * i)?)))
                .collect();
        }
        off = next;
    }
    None
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

    #[test]
    fn missing_device_is_a_clear_error() {
        match VfioPci::open("0000:ff:1f.7") {
            Err(NvmeError::NoSuchDevice { bdf, .. }) => assert_eq!(bdf, "0000:ff:1f.7"),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => panic!("a device at ff:1f.7?"),
        }
    }
}
