//! `UringBdev`: a file, block device or NVMe generic device, checked at create time, opened
//! into one io_uring per reactor queue.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, squeue};
use pmio::dma::DmaOptions;
use pmio::{
    BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, IoBuf, IoStatus, Op,
    OpSet, Request, Uuid,
};

use crate::error::UringError;
use crate::nvme;
use crate::options::UringOptions;
use crate::queue::{BufferSet, MAX_QUEUE_DEPTH, MAX_RW_BYTES, QueueConfig, Target, UringQueue};
use crate::sys;

/// What kind of thing a uring bdev sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A regular file.
    File,
    /// A block device (`/dev/loop0`, `/dev/nvme0n1`).
    BlockDevice,
    /// An NVMe generic character device (`/dev/ngXnY`), driven by NVMe passthrough.
    NvmeGeneric { nsid: u32 },
}

/// A file or device driven through io_uring. Shared by every reactor that opens it; each
/// [`BlockDevice::open_queue`] creates a ring for the calling reactor.
pub struct UringBdev {
    info: BdevInfo,
    path: PathBuf,
    file: Arc<File>,
    kind: DeviceKind,
    direct: bool,
    read_only: bool,
    iopoll: bool,
    iopoll_fallback: Option<String>,
    buffers: Arc<BufferSet>,
    wait_us: u32,
    nop: bool,
    reads_use_io_wq: bool,
}

impl std::fmt::Debug for UringBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringBdev")
            .field("name", &self.info.name)
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("direct", &self.direct)
            .field("iopoll", &self.iopoll)
            .finish()
    }
}

/// Facts gathered while opening, before the bdev exists.
struct Opened {
    file: File,
    kind: DeviceKind,
    read_only: bool,
    natural_bs: u32,
    size: u64,
    max_transfer_bytes: u32,
    rdev: u64,
}

impl UringBdev {
    /// Checks `opts` against the file or device and opens it. Clear errors for a missing
    /// path, a directory, something that is not a file or block device, a file system without
    /// O_DIRECT (with `direct`), an unusable block size, and a file smaller than one block.
    ///
    /// Opening blocks on the file system: call it off the reactors (at configuration time).
    pub fn create(opts: &UringOptions) -> Result<UringBdev, UringError> {
        if opts.path.as_os_str().is_empty() {
            return Err(UringError::MissingPath);
        }
        let name = opts.bdev_name();
        let opened = open_checked(opts)?;
        let block_size = choose_block_size(opts, opened.natural_bs)?;
        let num_blocks = opened.size / u64::from(block_size);
        if num_blocks == 0 {
            return Err(UringError::TooSmall {
                path: opts.path.clone(),
                size: opened.size,
                block_size,
            });
        }
        let supported = supported_ops(&opened, block_size);
        let max_transfer_blocks = (opened.max_transfer_bytes / block_size).max(1);
        let mut bdev = UringBdev {
            info: BdevInfo {
                name: name.clone(),
                uuid: Uuid::new_v4(),
                product_name: "URING bdev".to_string(),
                block_size,
                num_blocks,
                supported_ops: supported,
                queues: HctxQueues::DEFAULT_ONLY,
                max_queue_depth: MAX_QUEUE_DEPTH,
                max_transfer_blocks,
                boundary_blocks: 0,
            },
            path: opts.path.clone(),
            file: Arc::new(opened.file),
            kind: opened.kind,
            direct: opts.direct || matches!(opened.kind, DeviceKind::NvmeGeneric { .. }),
            read_only: opened.read_only,
            iopoll: false,
            iopoll_fallback: None,
            buffers: Arc::default(),
            wait_us: opts.wait_us,
            nop: opts.nop,
            reads_use_io_wq: false,
        };
        bdev.reads_use_io_wq = bdev.kind == DeviceKind::File
            && !bdev.direct
            && !bdev.nop
            && sys::fs_magic(&bdev.file) == Some(sys::TMPFS_MAGIC);
        if opts.hipri {
            bdev.setup_iopoll(opened.rdev);
        }
        log::info!(
            "uring bdev {name}: {} ({:?}), {} blocks of {} bytes, direct={}, iopoll={}{}{}",
            bdev.path.display(),
            bdev.kind,
            num_blocks,
            block_size,
            bdev.direct,
            bdev.iopoll,
            if bdev.read_only { ", read-only" } else { "" },
            if bdev.nop {
                ", nop (no data moves: every request is an IORING_OP_NOP)"
            } else {
                ""
            }
        );
        Ok(bdev)
    }

    /// The path the bdev was created from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the bdev sits on.
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// Whether I/O bypasses the page cache (O_DIRECT, or NVMe passthrough).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether the file could only be opened read-only (writes are then unsupported).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether polled completions are in use (`hipri=1` and the device has poll queues):
    /// the device then offers one `Poll` hardware queue, served by an IOPOLL ring.
    pub fn iopoll(&self) -> bool {
        self.iopoll
    }

    /// Whether reads are served by io_uring's io-wq worker threads rather than inside the
    /// submitting call: buffered reads of a tmpfs file (tmpfs cannot try a read without
    /// blocking, so io_uring hands each one to a worker). The worker inherits the submitting
    /// reactor's CPU affinity: a pure-polling reactor (`wait_us` = 0) then shares its core with
    /// the thread that produces its completions, and a wait (`UringOptions::wait_us`) leaves
    /// the worker the core instead.
    pub fn reads_use_io_wq(&self) -> bool {
        self.reads_use_io_wq
    }

    /// Whether every request goes to the kernel as a NOP (`UringOptions::nop`).
    pub fn is_nop(&self) -> bool {
        self.nop
    }

    /// Why `hipri=1` fell back to interrupt-driven rings, if it did.
    pub fn iopoll_fallback_reason(&self) -> Option<&str> {
        self.iopoll_fallback.as_deref()
    }

    /// Registers memory regions `(address, length)` as io_uring fixed buffers for the queues
    /// of this device that the **calling thread** (a reactor) opened or opens: a read or
    /// write whose buffer lies wholly inside a region uses `READ_FIXED`/`WRITE_FIXED` (no
    /// per-I/O page pinning); other buffers use plain opcodes. An open queue picks the regions
    /// up at its next `submit`. A later call on the same thread replaces that thread's
    /// regions (an empty slice clears them). Regions of more than 1 GiB are split. Typically
    /// the whole of a `pmio::dma::DmaRegion` (`as_ptr()`, `len()`).
    ///
    /// # Safety
    /// Each region must be mapped, with the same pages, until the calling thread's queues of
    /// this device are dropped or the regions are replaced, or at least until no I/O of those
    /// queues uses an address in it again (the kernel keeps the pages registered, and I/O to
    /// a registered address reaches those pages even if the address is remapped).
    pub unsafe fn register_buffers(&self, regions: &[(*mut u8, usize)]) {
        self.buffers.set_for_current_thread(
            regions
                .iter()
                .filter(|(_, len)| *len > 0)
                .map(|&(p, len)| (p as usize, len))
                .collect(),
        );
    }

    fn queue_config(&self, iopoll: bool) -> QueueConfig {
        let target = match self.kind {
            _ if self.nop => Target::Nop,
            DeviceKind::NvmeGeneric { nsid } => Target::Nvme { nsid },
            _ => Target::File,
        };
        QueueConfig {
            name: Arc::from(self.info.name.as_str()),
            file: Arc::clone(&self.file),
            target,
            block_shift: self.info.block_size.trailing_zeros(),
            num_blocks: self.info.num_blocks,
            direct_align: if self.direct { self.info.block_size } else { 1 },
            supported: self.info.supported_ops,
            iopoll,
            buffers: Arc::clone(&self.buffers),
            wait_us: self.wait_us,
        }
    }

    fn open_ring_queue(
        &self,
        iopoll: bool,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, UringError> {
        let cfg = self.queue_config(iopoll);
        Ok(match self.kind {
            DeviceKind::NvmeGeneric { .. } => Box::new(UringQueue::<
                squeue::Entry128,
                cqueue::Entry32,
            >::open(cfg, depth)?),
            _ => Box::new(UringQueue::<squeue::Entry, cqueue::Entry>::open(
                cfg, depth,
            )?),
        })
    }

    /// `hipri=1`: probe one read of block 0 on an IOPOLL ring. Success enables a Poll queue;
    /// anything else (EOPNOTSUPP on devices without poll queues) logs a warning naming the
    /// device and keeps interrupt-driven rings.
    fn setup_iopoll(&mut self, rdev: u64) {
        let name = self.info.name.clone();
        let device = describe_device(&self.path, self.kind, rdev);
        let io_poll = match self.kind {
            DeviceKind::NvmeGeneric { .. } => None,
            _ => sys::blk_queue_attr(rdev, "io_poll"),
        };
        let reason = if !self.direct {
            Some("polled completions need O_DIRECT (direct=1)".to_string())
        } else if io_poll == Some(0) {
            Some(format!(
                "{device} has no poll queues (sysfs queue/io_poll is 0; an O_DIRECT read on an \
                 IOPOLL ring would fail with EOPNOTSUPP)"
            ))
        } else {
            // sysfs says yes or cannot tell (a file system without a block device): try one
            // read.
            match self.probe_iopoll() {
                Ok(()) => None,
                Err(e) if e == libc::EOPNOTSUPP => Some(format!(
                    "{device} has no poll queues (a read on an IOPOLL ring returned EOPNOTSUPP)"
                )),
                Err(e) => Some(format!(
                    "a read of {device} on an IOPOLL ring failed: {}",
                    io::Error::from_raw_os_error(e)
                )),
            }
        };
        match reason {
            None => {
                self.iopoll = true;
                self.info.queues = HctxQueues {
                    default: 1,
                    read: 0,
                    poll: 1,
                };
                log::info!("uring bdev {name}: polled completions (IOPOLL) on {device}");
            }
            Some(why) => {
                log::warn!(
                    "uring bdev {name}: hipri=1 asked for polled completions, but {why}; \
                     falling back to interrupt-driven rings"
                );
                self.iopoll_fallback = Some(why);
            }
        }
    }

    /// One read of block 0 through an IOPOLL queue; `Err(errno)` on failure or a 2 s timeout.
    fn probe_iopoll(&self) -> Result<(), i32> {
        let bs = self.info.block_size;
        let mut q = self.open_ring_queue(true, 1).map_err(|e| match e {
            UringError::Ring { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        })?;
        let mut buf = sys::AlignedBuf::new(bs as usize);
        let mut rqs = [Request {
            op: Op::Read,
            lba: 0,
            nblocks: 1,
            // SAFETY: `buf` is `bs` bytes, owned here, and outlives the request: the loop
            // below waits for its completion (or, on timeout, leaks the buffer).
            buf: unsafe { IoBuf::from_raw_parts(buf.as_mut_ptr(), bs) },
            ..Request::default()
        }];
        q.submit(&mut rqs, &[0]);
        let mut done = Vec::with_capacity(1);
        let deadline = Instant::now() + Duration::from_secs(2);
        while q.poll(&mut rqs, &mut done, 1) == 0 {
            if Instant::now() > deadline {
                // The kernel may still write into the buffer: leak it rather than free it.
                std::mem::forget(buf);
                std::mem::forget(q);
                return Err(libc::ETIMEDOUT);
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        match rqs[0].status {
            IoStatus::Success => Ok(()),
            IoStatus::Errno(e) => Err(e),
            _ => Err(libc::EIO),
        }
    }
}

impl BlockDevice for UringBdev {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        self.open_ring_queue(ty == HctxType::Poll && self.iopoll, depth)
            .map_err(|e| BdevError::QueueOpen {
                name: self.info.name.clone(),
                ty,
                index,
                reason: e.to_string(),
            })
    }

    /// Registers the regions as fixed buffers ([`UringBdev::register_buffers`]).
    unsafe fn register_memory(&self, regions: &[(*mut u8, usize)]) {
        // SAFETY: the trait's contract is `register_buffers`' contract.
        unsafe { self.register_buffers(regions) }
    }

    /// Base pages. The kernel registers a buffer backed by huge pages as one bvec per 2 MiB
    /// folio, and an O_DIRECT bio cut from such a bvec (at an offset inside the folio) misses
    /// the block layer's single-page fast path: every I/O then goes through `bio_split_rw`
    /// only to find it needs no split (1.6 % of the CPU time per 4 KiB O_DIRECT read in a
    /// kernel profile here; see BENCHMARKS.md). With base pages each bvec is one page.
    fn dma_options(&self) -> DmaOptions {
        DmaOptions {
            hugetlb: false,
            transparent: false,
        }
    }
}

/// Opens the path with the checks `create` promises.
fn open_checked(opts: &UringOptions) -> Result<Opened, UringError> {
    let path = &opts.path;
    let os = |what: &'static str| {
        move |source: io::Error| UringError::Os {
            path: path.clone(),
            what,
            source,
        }
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(UringError::NotFound { path: path.clone() });
        }
        Err(e) => return Err(os("stat")(e)),
    };
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        return Err(UringError::IsDirectory { path: path.clone() });
    } else if ft.is_file() {
        DeviceKind::File
    } else if ft.is_block_device() {
        DeviceKind::BlockDevice
    } else if ft.is_char_device() && nvme::is_generic_device_name(path) {
        DeviceKind::NvmeGeneric { nsid: 0 }
    } else {
        let kind = if ft.is_char_device() {
            "character device (only NVMe generic devices /dev/ngXnY are supported)"
        } else if ft.is_fifo() {
            "FIFO"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_symlink() {
            "dangling symbolic link"
        } else {
            "special file"
        };
        return Err(UringError::NotFileOrBlockDevice {
            path: path.clone(),
            kind,
        });
    };

    let direct = opts.direct && kind != (DeviceKind::NvmeGeneric { nsid: 0 });
    let (file, read_only) = open_file(path, direct)?;
    let mut opened = Opened {
        file,
        kind,
        read_only,
        natural_bs: 512,
        size: meta.len(),
        max_transfer_bytes: MAX_RW_BYTES,
        rdev: meta.dev(),
    };
    match kind {
        DeviceKind::File => {
            if direct {
                opened.natural_bs = match sys::dio_align(&opened.file) {
                    Some((_mem, off)) => off,
                    None => u32::try_from(meta.blksize()).unwrap_or(4096),
                };
            }
        }
        DeviceKind::BlockDevice => {
            opened.natural_bs =
                sys::blk_logical_block_size(&opened.file).map_err(os("BLKSSZGET"))?;
            opened.size = sys::blk_size_bytes(&opened.file).map_err(os("BLKGETSIZE64"))?;
            opened.rdev = meta.rdev();
        }
        DeviceKind::NvmeGeneric { .. } => {
            let nsid = nvme::ns_id(&opened.file).map_err(os("NVME_IOCTL_ID"))?;
            let geo = nvme::identify_ns(&opened.file, nsid).map_err(os("identify namespace"))?;
            if geo.metadata_size != 0 {
                return Err(UringError::BadBlockSize {
                    path: path.clone(),
                    block_size: geo.lba_size,
                    reason: format!(
                        "the namespace is formatted with {} metadata bytes per block, which \
                         passthrough I/O here does not carry",
                        geo.metadata_size
                    ),
                });
            }
            opened.kind = DeviceKind::NvmeGeneric { nsid };
            opened.natural_bs = geo.lba_size;
            opened.size = geo.nsze * u64::from(geo.lba_size);
            // One command moves at most 64 Ki blocks; the controller's MDTS may be lower.
            opened.max_transfer_bytes = nvme_max_transfer(path)
                .unwrap_or(128 * 1024)
                .min(MAX_RW_BYTES);
        }
    }
    Ok(opened)
}

/// Opens read-write (read-only when that is refused), with O_DIRECT if asked and O_NOATIME
/// where allowed; EINVAL on the
/// O_DIRECT open means the file system has no direct I/O.
fn open_file(path: &Path, direct: bool) -> Result<(File, bool), UringError> {
    let flags = libc::O_CLOEXEC | if direct { libc::O_DIRECT } else { 0 };
    // O_NOATIME spares every read an atime check (as t/io_uring opens); only the owner (or
    // CAP_FOWNER) may ask for it, so EPERM retries without.
    let open = |write: bool| {
        let with = |extra: libc::c_int| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .custom_flags(flags | extra)
                .open(path)
        };
        match with(libc::O_NOATIME) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => with(0),
            r => r,
        }
    };
    let no_direct = |f: Option<&File>| UringError::NoDirectIo {
        path: path.to_path_buf(),
        fs: match f {
            Some(f) => sys::fs_type_name(f),
            None => File::open(path)
                .map(|f| sys::fs_type_name(&f))
                .unwrap_or_else(|_| "unknown".to_string()),
        },
    };
    let os = |source: io::Error| UringError::Os {
        path: path.to_path_buf(),
        what: "open",
        source,
    };
    match open(true) {
        Ok(f) => Ok((f, false)),
        Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => Err(no_direct(None)),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EROFS | libc::EPERM)
            ) =>
        {
            match open(false) {
                Ok(f) => {
                    log::warn!(
                        "uring bdev: {}: opened read-only ({e}); writes are unsupported",
                        path.display()
                    );
                    Ok((f, true))
                }
                Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => Err(no_direct(None)),
                Err(e) => Err(os(e)),
            }
        }
        Err(e) => Err(os(e)),
    }
}

/// The block size: the override if usable, else the device's.
fn choose_block_size(opts: &UringOptions, natural: u32) -> Result<u32, UringError> {
    let Some(bs) = opts.block_size else {
        return Ok(natural);
    };
    let bad = |reason: String| UringError::BadBlockSize {
        path: opts.path.clone(),
        block_size: bs,
        reason,
    };
    if !bs.is_power_of_two() || bs < 512 {
        return Err(bad("it must be a power of two of at least 512".to_string()));
    }
    if opts.direct && bs % natural != 0 {
        return Err(bad(format!(
            "O_DIRECT needs a multiple of the device's {natural}-byte logical block"
        )));
    }
    Ok(bs)
}

/// Operations the file or device can do: flush always; writes unless read-only; write zeroes
/// and discard when fallocate supports ZERO_RANGE / PUNCH_HOLE there.
fn supported_ops(o: &Opened, block_size: u32) -> OpSet {
    let mut ops = OpSet::EMPTY.with(Op::Read).with(Op::Flush);
    if o.read_only {
        return ops;
    }
    ops = ops.with(Op::Write);
    let (zero, punch) = match o.kind {
        DeviceKind::NvmeGeneric { .. } => (true, true),
        // The kernel writes zeroes itself when the device cannot; PUNCH_HOLE
        // (zero without fallback) needs device write-zeroes support.
        DeviceKind::BlockDevice => (
            true,
            sys::blk_queue_attr(o.rdev, "write_zeroes_max_bytes").is_some_and(|v| v > 0),
        ),
        DeviceKind::File => probe_fallocate(&o.file, o.size, block_size),
    };
    if zero {
        ops = ops.with(Op::WriteZeroes);
    }
    if punch {
        ops = ops.with(Op::Discard);
    }
    ops
}

/// Probes fallocate modes on a regular file past its end (KEEP_SIZE: the size and data stay
/// untouched): `(zero_range, punch_hole)`.
fn probe_fallocate(f: &File, size: u64, block_size: u32) -> (bool, bool) {
    let off = size.next_multiple_of(u64::from(block_size).max(4096));
    let len = u64::from(block_size).max(4096);
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    let punch = sys::fallocate(f, libc::FALLOC_FL_PUNCH_HOLE | keep, off, len).is_ok();
    let zero = sys::fallocate(f, libc::FALLOC_FL_ZERO_RANGE | keep, off, len).is_ok();
    if zero && punch {
        // Give back the block ZERO_RANGE allocated past the end.
        let _ = sys::fallocate(f, libc::FALLOC_FL_PUNCH_HOLE | keep, off, len);
    }
    (zero, punch)
}

/// Largest transfer of an NVMe namespace from sysfs (`max_hw_sectors_kb` of the matching
/// block device), if readable.
fn nvme_max_transfer(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?.strip_prefix("ng")?;
    let kb: u32 = std::fs::read_to_string(format!("/sys/block/nvme{name}/queue/max_hw_sectors_kb"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// "file /x on ext4 (block device vda)", "block device loop0", for messages.
fn describe_device(path: &Path, kind: DeviceKind, rdev: u64) -> String {
    match kind {
        DeviceKind::File => {
            let fs = File::open(path)
                .map(|f| sys::fs_type_name(&f))
                .unwrap_or_else(|_| "unknown".to_string());
            match sys::blk_kernel_name(rdev) {
                Some(dev) => format!("{} (on {fs}, block device {dev})", path.display()),
                None => format!("{} (on {fs})", path.display()),
            }
        }
        DeviceKind::BlockDevice => match sys::blk_kernel_name(rdev) {
            Some(dev) => format!("{} (block device {dev})", path.display()),
            None => path.display().to_string(),
        },
        DeviceKind::NvmeGeneric { .. } => format!("{} (NVMe generic device)", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_override_rules() {
        let mut o = UringOptions::new("/x");
        assert_eq!(choose_block_size(&o, 512).unwrap(), 512);
        o.block_size = Some(4096);
        assert_eq!(choose_block_size(&o, 512).unwrap(), 4096);
        o.block_size = Some(1000);
        assert!(choose_block_size(&o, 512).is_err());
        o.block_size = Some(512);
        let e = choose_block_size(&o, 4096).unwrap_err();
        assert!(
            e.to_string().contains("multiple of the device's 4096"),
            "{e}"
        );
        o.direct = false;
        assert_eq!(choose_block_size(&o, 4096).unwrap(), 512);
    }
}
