//! The kernel's side, as `include/uapi/linux/ublk_cmd.h` (Linux 6.12; every layout is
//! checked against the header by size and offset asserts) lays it out, and the
//! thin layer that talks to it: the command structs, their ioctl-encoded opcodes, the mmap of
//! a queue's request descriptors, an eventfd. Everything above this file is safe Rust.

use std::fs::File;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// The control device `ublk_drv` creates.
pub const CONTROL_PATH: &str = "/dev/ublk-control";
/// `/dev/ublkcN`: the server's side of disk N.
pub const CDEV_PREFIX: &str = "/dev/ublkc";
/// `/dev/ublkbN`: the block device.
pub const BDEV_PREFIX: &str = "/dev/ublkb";

// Control commands (the legacy numbers; [`ctrl_op`] encodes them as ioctls).
pub const CMD_GET_DEV_INFO: u8 = 0x02;
pub const CMD_ADD_DEV: u8 = 0x04;
pub const CMD_DEL_DEV: u8 = 0x05;
pub const CMD_START_DEV: u8 = 0x06;
pub const CMD_STOP_DEV: u8 = 0x07;
pub const CMD_SET_PARAMS: u8 = 0x08;
pub const CMD_START_USER_RECOVERY: u8 = 0x10;
pub const CMD_END_USER_RECOVERY: u8 = 0x11;
/// Only ever ioctl-encoded (Linux 6.5+).
pub const CMD_GET_FEATURES: u8 = 0x13;

// I/O commands.
pub const IO_FETCH_REQ: u8 = 0x20;
pub const IO_COMMIT_AND_FETCH_REQ: u8 = 0x21;

/// A fetch's result: a request is in the descriptor.
pub const IO_RES_OK: i32 = 0;
/// A fetch's result: the queue is going away; no re-fetch.
pub const IO_RES_ABORT: i32 = -libc::ENODEV;

/// Deepest queue the kernel takes.
pub const MAX_QUEUE_DEPTH: u32 = 4096;

// Device flags (`ublksrv_ctrl_dev_info.flags`, and GET_FEATURES' answer).
pub const F_USER_RECOVERY: u64 = 1 << 3;
pub const F_USER_RECOVERY_REISSUE: u64 = 1 << 4;
pub const F_CMD_IOCTL_ENCODE: u64 = 1 << 6;
pub const F_USER_COPY: u64 = 1 << 7;

// Device states.
pub const S_DEV_DEAD: u16 = 0;
pub const S_DEV_LIVE: u16 = 1;
pub const S_DEV_QUIESCED: u16 = 2;

// Request ops (`ublksrv_io_desc.op_flags & 0xff`).
pub const IO_OP_READ: u8 = 0;
pub const IO_OP_WRITE: u8 = 1;
pub const IO_OP_FLUSH: u8 = 2;
pub const IO_OP_DISCARD: u8 = 3;
pub const IO_OP_WRITE_ZEROES: u8 = 5;
/// Request flag: force unit access.
pub const IO_F_FUA: u32 = 1 << 13;

// Parameter types and attributes.
pub const PARAM_TYPE_BASIC: u32 = 1 << 0;
pub const PARAM_TYPE_DISCARD: u32 = 1 << 1;
pub const ATTR_VOLATILE_CACHE: u32 = 1 << 2;
pub const ATTR_FUA: u32 = 1 << 3;

/// `struct ublksrv_ctrl_cmd`: a control command, in the SQE's command area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CtrlCmd {
    pub dev_id: u32,
    /// `u16::MAX` for a command not about one queue.
    pub queue_id: u16,
    pub len: u16,
    pub addr: u64,
    pub data: [u64; 1],
    pub dev_path_len: u16,
    pub pad: u16,
    pub reserved: u32,
}
const _: () = {
    assert!(size_of::<CtrlCmd>() == 32);
    assert!(offset_of!(CtrlCmd, queue_id) == 4);
    assert!(offset_of!(CtrlCmd, len) == 6);
    assert!(offset_of!(CtrlCmd, addr) == 8);
    assert!(offset_of!(CtrlCmd, data) == 16);
    assert!(offset_of!(CtrlCmd, dev_path_len) == 24);
};

/// `struct ublksrv_ctrl_dev_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevInfo {
    pub nr_hw_queues: u16,
    pub queue_depth: u16,
    pub state: u16,
    pub pad0: u16,
    pub max_io_buf_bytes: u32,
    pub dev_id: u32,
    pub ublksrv_pid: i32,
    pub pad1: u32,
    pub flags: u64,
    pub ublksrv_flags: u64,
    pub owner_uid: u32,
    pub owner_gid: u32,
    pub reserved1: u64,
    pub reserved2: u64,
}
const _: () = {
    assert!(size_of::<DevInfo>() == 64);
    assert!(offset_of!(DevInfo, max_io_buf_bytes) == 8);
    assert!(offset_of!(DevInfo, dev_id) == 12);
    assert!(offset_of!(DevInfo, ublksrv_pid) == 16);
    assert!(offset_of!(DevInfo, flags) == 24);
    assert!(offset_of!(DevInfo, ublksrv_flags) == 32);
    assert!(offset_of!(DevInfo, owner_uid) == 40);
    assert!(offset_of!(DevInfo, reserved1) == 48);
};

/// `struct ublksrv_io_desc`: one request, as the kernel writes it for a tag.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoDesc {
    /// Op in bits 0..8, flags above.
    pub op_flags: u32,
    pub nr_sectors: u32,
    pub start_sector: u64,
    pub addr: u64,
}
const _: () = {
    assert!(size_of::<IoDesc>() == 24);
    assert!(offset_of!(IoDesc, nr_sectors) == 4);
    assert!(offset_of!(IoDesc, start_sector) == 8);
    assert!(offset_of!(IoDesc, addr) == 16);
};

impl IoDesc {
    pub fn op(&self) -> u8 {
        self.op_flags as u8
    }
}

/// `struct ublksrv_io_cmd`: a fetch or commit, in the SQE's command area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IoCmd {
    pub q_id: u16,
    pub tag: u16,
    /// A commit's result: bytes done, or a negative errno.
    pub result: i32,
    /// The buffer the kernel copies a request's data through.
    pub addr: u64,
}
const _: () = {
    assert!(size_of::<IoCmd>() == 16);
    assert!(offset_of!(IoCmd, tag) == 2);
    assert!(offset_of!(IoCmd, result) == 4);
    assert!(offset_of!(IoCmd, addr) == 8);
};

/// `struct ublk_param_basic`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamBasic {
    pub attrs: u32,
    pub logical_bs_shift: u8,
    pub physical_bs_shift: u8,
    pub io_opt_shift: u8,
    pub io_min_shift: u8,
    pub max_sectors: u32,
    pub chunk_sectors: u32,
    pub dev_sectors: u64,
    pub virt_boundary_mask: u64,
}
const _: () = {
    assert!(size_of::<ParamBasic>() == 32);
    assert!(offset_of!(ParamBasic, logical_bs_shift) == 4);
    assert!(offset_of!(ParamBasic, io_min_shift) == 7);
    assert!(offset_of!(ParamBasic, max_sectors) == 8);
    assert!(offset_of!(ParamBasic, chunk_sectors) == 12);
    assert!(offset_of!(ParamBasic, dev_sectors) == 16);
    assert!(offset_of!(ParamBasic, virt_boundary_mask) == 24);
};

/// `struct ublk_param_discard`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamDiscard {
    pub discard_alignment: u32,
    pub discard_granularity: u32,
    pub max_discard_sectors: u32,
    pub max_write_zeroes_sectors: u32,
    pub max_discard_segments: u16,
    pub reserved0: u16,
}
const _: () = {
    assert!(size_of::<ParamDiscard>() == 20);
    assert!(offset_of!(ParamDiscard, discard_granularity) == 4);
    assert!(offset_of!(ParamDiscard, max_discard_sectors) == 8);
    assert!(offset_of!(ParamDiscard, max_write_zeroes_sectors) == 12);
    assert!(offset_of!(ParamDiscard, max_discard_segments) == 16);
};

/// The head of `struct ublk_params` with the two parts pmio sets. The kernel takes a shorter
/// struct than its own: `len` ([`PARAMS_LEN`]) says how much there is, so the 4 bytes of
/// alignment padding at the end (where the kernel's read-only `devt` part begins) are not sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params {
    pub len: u32,
    pub types: u32,
    pub basic: ParamBasic,
    pub discard: ParamDiscard,
}
const _: () = {
    assert!(size_of::<Params>() == 64);
    assert!(offset_of!(Params, types) == 4);
    assert!(offset_of!(Params, basic) == 8);
    assert!(offset_of!(Params, discard) == 40);
};

/// The bytes of [`Params`] the kernel reads: its basic and discard parts.
pub const PARAMS_LEN: u32 = (offset_of!(Params, discard) + size_of::<ParamDiscard>()) as u32;
const _: () = assert!(PARAMS_LEN == 60);

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `_IOC(dir, 'u', nr, size)`.
const fn ioc(dir: u32, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((b'u' as u32) << 8) | nr as u32
}

/// A control command's opcode: `_IOR` for the queries, `_IOWR` for the rest (as the header's
/// `UBLK_U_CMD_*`), or the bare number for a kernel without `UBLK_F_CMD_IOCTL_ENCODE`.
pub const fn ctrl_op(cmd: u8, ioctl_encode: bool) -> u32 {
    if !ioctl_encode {
        return cmd as u32;
    }
    let dir = match cmd {
        CMD_GET_DEV_INFO | CMD_GET_FEATURES => IOC_READ,
        _ => IOC_READ | IOC_WRITE,
    };
    ioc(dir, cmd, size_of::<CtrlCmd>())
}

/// An I/O command's opcode (`UBLK_U_IO_*`, `_IOWR`), or the bare number.
pub const fn io_op(cmd: u8, ioctl_encode: bool) -> u32 {
    if !ioctl_encode {
        return cmd as u32;
    }
    ioc(IOC_READ | IOC_WRITE, cmd, size_of::<IoCmd>())
}

/// The 80-byte command area of a 128-byte SQE holding `v` (zero after it).
pub fn cmd_bytes<T: Copy>(v: &T) -> [u8; 80] {
    const { assert!(size_of::<T>() <= 80) };
    let mut out = [0u8; 80];
    // SAFETY: `T` is one of this file's `#[repr(C)]` plain-data structs (no padding holes
    // that matter: the kernel ignores them), at most 80 bytes (checked above); the source is
    // a valid `T` and the destination 80 writable bytes; the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (v as *const T).cast::<u8>(),
            out.as_mut_ptr(),
            size_of::<T>(),
        )
    };
    out
}

/// Offset of queue `q`'s descriptors in the character device (the kernel's
/// `UBLKSRV_CMD_BUF_OFFSET + q * UBLK_MAX_QUEUE_DEPTH * sizeof(iod)`).
pub fn iod_offset(q: u16) -> i64 {
    i64::from(q) * i64::from(MAX_QUEUE_DEPTH) * size_of::<IoDesc>() as i64
}

/// A queue's request descriptors, mapped read-only from `/dev/ublkcN`: the kernel writes tag
/// `t`'s request at index `t` before it completes the tag's fetch.
pub struct IodMap {
    ptr: NonNull<IoDesc>,
    len: usize,
    depth: u16,
}

impl IodMap {
    /// Maps the descriptors of queue `q` (`depth` tags) of the device open as `cdev`.
    pub fn map(cdev: &File, q: u16, depth: u16) -> io::Result<IodMap> {
        let page = page_size();
        let bytes = usize::from(depth) * size_of::<IoDesc>();
        let len = bytes.div_ceil(page) * page;
        // SAFETY: a new shared read-only mapping of `len` bytes at the kernel's offset for the
        // queue's descriptors; no existing memory is touched. The result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                cdev.as_raw_fd(),
                iod_offset(q),
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<IoDesc>()).ok_or_else(|| io::Error::other("mmap at 0"))?;
        Ok(IodMap { ptr, len, depth })
    }

    /// Tag `tag`'s descriptor, read now (the kernel wrote it before completing the fetch
    /// whose CQE the caller holds, and does not change it until the tag is committed).
    pub fn get(&self, tag: u16) -> IoDesc {
        assert!(tag < self.depth, "tag {tag} beyond depth {}", self.depth);
        // SAFETY: `tag < depth`, so the descriptor lies inside the mapping, which lives as long
        // as `self`; IoDesc is plain data of any bit pattern; a volatile read because the
        // kernel writes this memory behind the compiler's back.
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(usize::from(tag))) }
    }
}

impl Drop for IodMap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `map` made, unmapped once; nothing borrows into it (reads
        // copy descriptors out).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// A non-blocking eventfd (the ring signals it for each CQE; the reactor watches it).
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Reads the counter back to zero (nothing to read is fine: it is non-blocking).
    pub fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`, which is 8 bytes and alive for the call.
        let _ = unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Where user copy (`UBLK_F_USER_COPY`) reaches a request's data in `/dev/ublkcN`: above the
/// descriptors, queue id and tag in the offset's high bits, the byte within the request in
/// its low 25 (`UBLKSRV_IO_BUF_OFFSET`, `UBLK_TAG_OFF`, `UBLK_QID_OFF`).
pub const IO_BUF_OFFSET: u64 = 0x8000_0000;
const IO_BUF_BITS: u32 = 25;
const TAG_BITS: u32 = 16;
const QID_OFF: u32 = IO_BUF_BITS + TAG_BITS;

/// The offset in `/dev/ublkcN` of request (`q`, `tag`)'s first byte, for user copy.
pub fn user_copy_offset(q: u16, tag: u16) -> u64 {
    IO_BUF_OFFSET + (u64::from(q) << QID_OFF) + (u64::from(tag) << IO_BUF_BITS)
}

/// User copy in: a write request's data (`len` bytes) read from `cdev` at `off` into `buf`.
/// A short read is an error: the request is `len` bytes (the kernel answers less only for a
/// request that is not the one the caller holds).
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes, touched by nobody else for the call.
pub unsafe fn user_copy_in(cdev: &File, off: u64, buf: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller gives `len` writable bytes at `buf`; pread writes at most `len`.
    let n = unsafe { libc::pread(cdev.as_raw_fd(), buf.cast(), len, off as libc::off_t) };
    whole(n, len)
}

/// User copy out: a read request's data (`len` bytes of `buf`) written to `cdev` at `off`.
///
/// # Safety
/// `buf` must be valid for reads of `len` bytes for the call.
pub unsafe fn user_copy_out(cdev: &File, off: u64, buf: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller gives `len` readable bytes at `buf`; pwrite reads at most `len`.
    let n = unsafe { libc::pwrite(cdev.as_raw_fd(), buf.cast(), len, off as libc::off_t) };
    whole(n, len)
}

/// A pread/pwrite's return: all of `len`, or the error.
fn whole(n: isize, len: usize) -> io::Result<()> {
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize == len => Ok(()),
        n => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{n} of {len} bytes"),
        )),
    }
}

/// This process's id, as START_DEV and END_USER_RECOVERY record it.
pub fn pid() -> i32 {
    std::process::id() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcodes are the header's `UBLK_U_*` values (computed by hand from `_IOR`/`_IOWR`).
    #[test]
    fn opcodes_match_the_header() {
        assert_eq!(ctrl_op(CMD_ADD_DEV, true), 0xc020_7504);
        assert_eq!(ctrl_op(CMD_GET_DEV_INFO, true), 0x8020_7502);
        assert_eq!(ctrl_op(CMD_GET_FEATURES, true), 0x8020_7513);
        assert_eq!(ctrl_op(CMD_STOP_DEV, true), 0xc020_7507);
        assert_eq!(io_op(IO_FETCH_REQ, true), 0xc010_7520);
        assert_eq!(io_op(IO_COMMIT_AND_FETCH_REQ, true), 0xc010_7521);
        assert_eq!(ctrl_op(CMD_ADD_DEV, false), 0x04);
        assert_eq!(io_op(IO_FETCH_REQ, false), 0x20);
    }

    /// `ublk_pos_to_tag`/`ublk_pos_to_hwq` of the kernel read these back.
    #[test]
    fn user_copy_offsets_carry_queue_and_tag() {
        assert_eq!(user_copy_offset(0, 0), 0x8000_0000);
        assert_eq!(user_copy_offset(0, 1), 0x8000_0000 + (1 << 25));
        assert_eq!(user_copy_offset(1, 0), 0x8000_0000 + (1 << 41));
        let off = user_copy_offset(31, 4095) - IO_BUF_OFFSET;
        assert_eq!(
            (off >> 41, (off >> 25) & 0xffff, off & ((1 << 25) - 1)),
            (31, 4095, 0)
        );
        // Above every queue's descriptors (queue 31 of depth 4096 ends far below).
        assert!(iod_offset(31) as u64 + 4096 * 24 < IO_BUF_OFFSET);
    }

    #[test]
    fn queue_descriptors_start_where_the_kernel_puts_them() {
        assert_eq!(iod_offset(0), 0);
        assert_eq!(iod_offset(1), 4096 * 24);
    }

    #[test]
    fn command_bytes_are_the_struct_then_zeros() {
        let c = IoCmd {
            q_id: 1,
            tag: 2,
            result: -5,
            addr: 0x1122_3344_5566_7788,
        };
        let b = cmd_bytes(&c);
        assert_eq!(&b[..4], &[1, 0, 2, 0]);
        assert_eq!(i32::from_le_bytes(b[4..8].try_into().unwrap()), -5);
        assert_eq!(
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert!(b[16..].iter().all(|&x| x == 0));
    }
}
