//! librados and librbd's C API: the few functions pmio-rbd calls, declared by hand from
//! `<rados/librados.h>` and `<rbd/librbd.h>` (Ceph 16.2, stable since Ceph 12), each wrapped
//! in a small function that states what makes its call sound. Everything unsafe in the crate
//! is here. Errors come back as librbd's negative errno, turned into positive [`Errno`]s.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;

/// `rados_t`.
pub type RadosT = *mut c_void;
/// `rados_ioctx_t`.
pub type IoctxT = *mut c_void;
/// `rbd_image_t`.
pub type ImageT = *mut c_void;
/// `rbd_completion_t`.
pub type CompletionT = *mut c_void;
type CallbackT = Option<unsafe extern "C" fn(CompletionT, *mut c_void)>;

/// `EVENT_TYPE_EVENTFD` of librbd.h: completions are queued on the image and the fd is
/// written once per completion.
const EVENT_TYPE_EVENTFD: c_int = 2;

/// A positive errno from librados/librbd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (errno {})",
            std::io::Error::from_raw_os_error(self.0),
            self.0
        )
    }
}

fn check(r: c_int) -> Result<c_int, Errno> {
    if r < 0 { Err(Errno(-r)) } else { Ok(r) }
}

/// `rbd_image_info_t`.
#[repr(C)]
struct ImageInfo {
    size: u64,
    obj_size: u64,
    num_objs: u64,
    order: c_int,
    block_name_prefix: [c_char; 24],
    parent_pool: i64,
    parent_name: [c_char; 96],
}

unsafe extern "C" {
    fn rados_create2(
        cluster: *mut RadosT,
        clustername: *const c_char,
        name: *const c_char,
        flags: u64,
    ) -> c_int;
    fn rados_conf_read_file(cluster: RadosT, path: *const c_char) -> c_int;
    fn rados_conf_set(cluster: RadosT, option: *const c_char, value: *const c_char) -> c_int;
    fn rados_connect(cluster: RadosT) -> c_int;
    fn rados_shutdown(cluster: RadosT);
    fn rados_ioctx_create(cluster: RadosT, pool: *const c_char, ioctx: *mut IoctxT) -> c_int;
    fn rados_ioctx_destroy(io: IoctxT);

    fn rbd_open(io: IoctxT, name: *const c_char, image: *mut ImageT, snap: *const c_char) -> c_int;
    fn rbd_open_read_only(
        io: IoctxT,
        name: *const c_char,
        image: *mut ImageT,
        snap: *const c_char,
    ) -> c_int;
    fn rbd_close(image: ImageT) -> c_int;
    fn rbd_stat(image: ImageT, info: *mut ImageInfo, infosize: usize) -> c_int;
    fn rbd_resize(image: ImageT, size: u64) -> c_int;
    fn rbd_set_image_notification(image: ImageT, fd: c_int, ty: c_int) -> c_int;
    fn rbd_poll_io_events(image: ImageT, comps: *mut CompletionT, numcomp: c_int) -> c_int;

    fn rbd_aio_create_completion(arg: *mut c_void, cb: CallbackT, c: *mut CompletionT) -> c_int;
    fn rbd_aio_get_return_value(c: CompletionT) -> isize;
    fn rbd_aio_get_arg(c: CompletionT) -> *mut c_void;
    fn rbd_aio_release(c: CompletionT);
    fn rbd_aio_read(image: ImageT, off: u64, len: usize, buf: *mut c_char, c: CompletionT)
    -> c_int;
    fn rbd_aio_write(
        image: ImageT,
        off: u64,
        len: usize,
        buf: *const c_char,
        c: CompletionT,
    ) -> c_int;
    fn rbd_aio_discard(image: ImageT, off: u64, len: u64, c: CompletionT) -> c_int;
    fn rbd_aio_write_zeroes(
        image: ImageT,
        off: u64,
        len: usize,
        c: CompletionT,
        zero_flags: c_int,
        op_flags: c_int,
    ) -> c_int;
    fn rbd_aio_flush(image: ImageT, c: CompletionT) -> c_int;
}

/// A new cluster handle for `client.<user>` of cluster `cluster_name` (not connected).
pub fn create(cluster_name: &CStr, user: &CStr) -> Result<RadosT, Errno> {
    let mut h = ptr::null_mut();
    // SAFETY: `h` is a valid out-pointer; both strings are NUL-terminated and outlive the
    // call (librados copies them).
    check(unsafe { rados_create2(&mut h, cluster_name.as_ptr(), user.as_ptr(), 0) })?;
    Ok(h)
}

/// Reads a ceph.conf into an unconnected handle.
pub fn conf_read_file(h: RadosT, path: &CStr) -> Result<(), Errno> {
    // SAFETY: `h` is a live handle from `create`; `path` is NUL-terminated.
    check(unsafe { rados_conf_read_file(h, path.as_ptr()) }).map(drop)
}

/// Reads Ceph's default configuration files (`$CEPH_CONF`, `/etc/ceph/$cluster.conf`, ...).
pub fn conf_read_file_default(h: RadosT) -> Result<(), Errno> {
    // SAFETY: `h` is a live handle from `create`; a null path means the default search.
    check(unsafe { rados_conf_read_file(h, ptr::null()) }).map(drop)
}

/// Sets one configuration option of an unconnected handle.
pub fn conf_set(h: RadosT, key: &CStr, value: &CStr) -> Result<(), Errno> {
    // SAFETY: `h` is a live handle from `create`; both strings are NUL-terminated.
    check(unsafe { rados_conf_set(h, key.as_ptr(), value.as_ptr()) }).map(drop)
}

/// Connects (blocks up to `client_mount_timeout`).
pub fn connect(h: RadosT) -> Result<(), Errno> {
    // SAFETY: `h` is a live handle from `create`.
    check(unsafe { rados_connect(h) }).map(drop)
}

/// Destroys a cluster handle; every ioctx made from it must be destroyed first.
pub fn shutdown(h: RadosT) {
    // SAFETY: the caller (Cluster's Drop) owns `h` and nothing uses it afterwards.
    unsafe { rados_shutdown(h) }
}

/// An I/O context on `pool`.
pub fn ioctx_create(h: RadosT, pool: &CStr) -> Result<IoctxT, Errno> {
    let mut io = ptr::null_mut();
    // SAFETY: `h` is a connected handle; `io` is a valid out-pointer.
    check(unsafe { rados_ioctx_create(h, pool.as_ptr(), &mut io) })?;
    Ok(io)
}

/// Destroys an I/O context; every image opened on it must be closed first.
pub fn ioctx_destroy(io: IoctxT) {
    // SAFETY: the caller owns `io` and nothing uses it afterwards.
    unsafe { rados_ioctx_destroy(io) }
}

/// Opens image `name` (head, no snapshot).
pub fn open(io: IoctxT, name: &CStr, read_only: bool) -> Result<ImageT, Errno> {
    let mut img = ptr::null_mut();
    // SAFETY: `io` is a live ioctx; `img` a valid out-pointer; a null snapshot name means
    // the image's head.
    let r = unsafe {
        if read_only {
            rbd_open_read_only(io, name.as_ptr(), &mut img, ptr::null())
        } else {
            rbd_open(io, name.as_ptr(), &mut img, ptr::null())
        }
    };
    check(r)?;
    Ok(img)
}

/// Closes an image; none of its I/O may be in flight.
pub fn close(img: ImageT) {
    // SAFETY: the caller owns `img`, has reaped all its I/O, and never uses it again.
    let r = unsafe { rbd_close(img) };
    if r < 0 {
        log::warn!("rbd_close: {}", Errno(-r));
    }
}

/// The image's size in bytes and its object size.
pub fn stat(img: ImageT) -> Result<(u64, u64), Errno> {
    // SAFETY: an all-zero `rbd_image_info_t` is valid (integers and char arrays).
    let mut info: ImageInfo = unsafe { std::mem::zeroed() };
    // SAFETY: `img` is an open image; `info` is writable and of the size passed.
    check(unsafe { rbd_stat(img, &mut info, size_of::<ImageInfo>()) })?;
    Ok((info.size, info.obj_size))
}

/// Resizes the image to `size` bytes (blocks while librbd does it).
pub fn resize(img: ImageT, size: u64) -> Result<(), Errno> {
    // SAFETY: `img` is an open image.
    check(unsafe { rbd_resize(img, size) }).map(drop)
}

/// Has librbd queue the image's completions for [`poll_io_events`] and write `fd` (an
/// eventfd) for each.
pub fn set_image_notification(img: ImageT, fd: c_int) -> Result<(), Errno> {
    // SAFETY: `img` is an open image; `fd` is an eventfd that outlives it (the queue closes
    // the image before the fd).
    check(unsafe { rbd_set_image_notification(img, fd, EVENT_TYPE_EVENTFD) }).map(drop)
}

/// Completed I/O of the image, up to `out.len()`.
pub fn poll_io_events(img: ImageT, out: &mut [CompletionT]) -> usize {
    let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
    // SAFETY: `img` is an open image with notification set; `out` has room for `n`.
    let r = unsafe { rbd_poll_io_events(img, out.as_mut_ptr(), n) };
    usize::try_from(r).unwrap_or(0)
}

/// A completion carrying `arg` and no callback: it is reaped by [`poll_io_events`].
pub fn completion(arg: usize) -> Result<CompletionT, Errno> {
    let mut c = ptr::null_mut();
    // SAFETY: `c` is a valid out-pointer; `arg` is an integer librbd only hands back.
    check(unsafe { rbd_aio_create_completion(arg as *mut c_void, None, &mut c) })?;
    Ok(c)
}

/// A reaped completion's argument and return value; releases it.
pub fn take_completion(c: CompletionT) -> (usize, isize) {
    // SAFETY: `c` came from `poll_io_events`, so it is complete and ours to release once.
    unsafe {
        let arg = rbd_aio_get_arg(c) as usize;
        let ret = rbd_aio_get_return_value(c);
        rbd_aio_release(c);
        (arg, ret)
    }
}

/// Releases a completion librbd refused to start.
pub fn release(c: CompletionT) {
    // SAFETY: `c` was never handed to librbd successfully, so only we hold it.
    unsafe { rbd_aio_release(c) }
}

/// One operation to start.
#[derive(Clone, Copy, Debug)]
pub enum Aio {
    Read {
        off: u64,
        len: usize,
        buf: *mut u8,
    },
    Write {
        off: u64,
        len: usize,
        buf: *const u8,
    },
    Discard {
        off: u64,
        len: u64,
    },
    WriteZeroes {
        off: u64,
        len: usize,
    },
    Flush,
}

/// Starts `op` on `img`, completing through `c`.
///
/// # Safety
/// A read's or write's buffer must be valid for `len` bytes and untouched by anyone else
/// until `c` is reaped (the submitter's contract on [`pmio::IoBuf`]).
pub unsafe fn aio(img: ImageT, op: Aio, c: CompletionT) -> Result<(), Errno> {
    // SAFETY: `img` is open, `c` a fresh completion; buffers as the caller guarantees.
    let r = unsafe {
        match op {
            Aio::Read { off, len, buf } => rbd_aio_read(img, off, len, buf.cast(), c),
            Aio::Write { off, len, buf } => rbd_aio_write(img, off, len, buf.cast(), c),
            Aio::Discard { off, len } => rbd_aio_discard(img, off, len, c),
            Aio::WriteZeroes { off, len } => rbd_aio_write_zeroes(img, off, len, c, 0, 0),
            Aio::Flush => rbd_aio_flush(img, c),
        }
    };
    check(r).map(drop)
}

/// A non-blocking eventfd for [`set_image_notification`].
pub fn eventfd() -> Result<std::os::fd::OwnedFd, Errno> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain system call with constant flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Clears an eventfd's counter (EAGAIN when nothing was written is fine: nothing to clear).
pub fn eventfd_clear(fd: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    let mut v = 0u64;
    // SAFETY: `fd` is a live eventfd; `v` is 8 writable bytes, as eventfd reads need.
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&raw mut v).cast(), 8) };
}
