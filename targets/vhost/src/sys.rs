//! The few system calls the target makes itself: eventfds (the controller's stop signal, a
//! ring's kick and call eventfds), `poll` on the control thread, and O_NONBLOCK.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd this process created (non-blocking, close-on-exec).
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd has no memory arguments; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn notify(&self) {
        signal(self.0.as_raw_fd());
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Adds 1 to eventfd `fd`. EAGAIN (the counter is full) means a signal is pending anyway.
pub fn signal(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a local buffer; `fd` is an eventfd the caller keeps open.
    unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
}

/// Empties eventfd `fd` (non-blocking: nothing to read is fine).
pub fn drain(fd: RawFd) {
    let mut v = [0u8; 8];
    // SAFETY: reads 8 bytes into a local buffer; `fd` is an eventfd the caller keeps open.
    unsafe { libc::read(fd, v.as_mut_ptr().cast(), v.len()) };
}

/// Sets O_NONBLOCK on `fd` (an eventfd received from the front end: a read of an empty one
/// must not block a reactor).
pub fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on an fd the caller keeps open; only the file status flags change.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// What [`wait_readable`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// `fd` is readable (or hung up: the next read says which).
    Fd,
    /// `stop` is readable.
    Stop,
}

/// Blocks until `fd` or `stop` is readable; `stop` wins when both are.
pub fn wait_readable(fd: RawFd, stop: RawFd) -> Ready {
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a valid array of two pollfds for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Ready::Stop;
        }
        if fds[1].revents != 0 {
            return Ready::Stop;
        }
        if fds[0].revents != 0 {
            return Ready::Fd;
        }
    }
}

/// A new memfd of `size` zero bytes (the in-flight log the front end keeps across restarts).
pub fn memfd(name: &str, size: u64) -> io::Result<std::fs::File> {
    let cname = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call; a
    // non-negative result is a new fd we own.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(size)?;
    Ok(f)
}
