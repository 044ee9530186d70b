//! The thin layer that asks the OS about a file or block device: ioctls, statx, statfs,
//! fallocate, sysfs. Everything above it is safe Rust.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)` (not exported by libc for every target).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

/// Logical block size of a block device (`BLKSSZGET`).
pub(crate) fn blk_logical_block_size(f: &File) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one c_int through the pointer, which points at `v`, alive for
    // the call; the fd is open for the call's duration (borrowed from `f`).
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), libc::BLKSSZGET, &mut v as *mut libc::c_int) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Size in bytes of a block device (`BLKGETSIZE64`).
pub(crate) fn blk_size_bytes(f: &File) -> io::Result<u64> {
    let mut v: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `v`, alive for
    // the call; the fd is open for the call's duration.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64 as _, &mut v as *mut u64) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Direct-I/O alignment of an open file: `(memory, file offset)` in bytes from statx
/// `STATX_DIOALIGN`, or `None` when the kernel or file system does not report it.
pub(crate) fn dio_align(f: &File) -> Option<(u32, u32)> {
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: an empty C string with AT_EMPTY_PATH makes statx describe the fd itself; the
    // kernel writes at most size_of::<statx>() bytes into `stx`, which is that large.
    let rc = unsafe {
        libc::statx(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return None;
    }
    // SAFETY: statx succeeded and filled the struct (it was zeroed before, so any field the
    // kernel did not write is 0, a valid u32).
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// `statfs` magic number of the file system an open file lives on.
pub(crate) fn fs_magic(f: &File) -> Option<u64> {
    let mut sfs = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs writes one `statfs` into the buffer, which is that large; the fd is open.
    let rc = unsafe { libc::fstatfs(f.as_raw_fd(), sfs.as_mut_ptr()) };
    if rc < 0 {
        return None;
    }
    // SAFETY: fstatfs succeeded and filled the struct.
    Some(unsafe { sfs.assume_init() }.f_type as u64)
}

/// Name of the file system an open file lives on (for error messages).
pub(crate) fn fs_type_name(f: &File) -> String {
    fs_magic(f).map_or_else(|| "unknown".to_string(), fs_magic_name)
}

/// `statfs` magic of tmpfs (`/dev/shm`, `/run`, most `/tmp`s).
pub(crate) const TMPFS_MAGIC: u64 = 0x0102_1994;

/// Human name for a statfs magic number.
pub(crate) fn fs_magic_name(magic: u64) -> String {
    let name = match magic {
        0xEF53 => "ext4",
        TMPFS_MAGIC => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x794c_7630 => "overlayfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x0102_1997 => "9p",
        0x4d44 => "vfat",
        _ => return format!("unknown (magic {magic:#x})"),
    };
    name.to_string()
}

/// `fallocate(2)` on an open file.
pub(crate) fn fallocate(f: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: fallocate takes only integers; the fd is open for the call's duration.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A numeric queue attribute of a block device from sysfs
/// (`/sys/dev/block/MAJ:MIN/queue/<attr>`, or the whole disk's for a partition), `None` when
/// unreadable.
pub(crate) fn blk_queue_attr(rdev: u64, attr: &str) -> Option<u64> {
    let dev = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
    [
        format!("{dev}/queue/{attr}"),
        format!("{dev}/../queue/{attr}"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())?
    .trim()
    .parse()
    .ok()
}

/// Kernel name of a block device (`loop0`, `vda`), for messages.
pub(crate) fn blk_kernel_name(rdev: u64) -> Option<String> {
    let link = std::fs::read_link(format!(
        "/sys/dev/block/{}:{}",
        libc::major(rdev),
        libc::minor(rdev)
    ))
    .ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// Memory aligned for O_DIRECT, freed on drop (used only at create time for probes).
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    /// `len` zeroed bytes aligned to 4096.
    pub(crate) fn new(len: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .expect("probe buffer layout is valid");
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, layout }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed(layout)` and is freed once, here.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_names() {
        assert_eq!(fs_magic_name(0xEF53), "ext4");
        assert_eq!(fs_magic_name(0x8584_58f6), "ramfs");
        assert!(fs_magic_name(0x1234).contains("0x1234"));
    }

    #[test]
    fn statx_dioalign_on_a_temp_file() {
        let f = tempfile::tempfile().unwrap();
        // Either the kernel reports an alignment that is a power of two, or nothing.
        if let Some((mem, off)) = dio_align(&f) {
            assert!(
                mem.is_power_of_two() && off.is_power_of_two(),
                "{mem} {off}"
            );
        }
        let mut b = AlignedBuf::new(8192);
        assert_eq!(b.as_mut_ptr() as usize % 4096, 0);
    }
}
