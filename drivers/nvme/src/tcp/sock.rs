//! The system calls of the NVMe/TCP transport, in one place: a non-blocking connect that a
//! reactor can poll, reads into a request's buffer (and the receive buffer behind it), and one `writev` for many PDUs.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A connect in progress on a non-blocking socket.
pub(crate) struct Connecting {
    fd: OwnedFd,
}

impl Connecting {
    /// Starts connecting to `addr` without waiting.
    pub(crate) fn start(addr: SocketAddr) -> io::Result<Connecting> {
        let (family, storage, len) = sockaddr(addr);
        // SAFETY: plain system call; the descriptor is owned below.
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `storage` holds a valid sockaddr of `len` bytes for the call.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&raw const storage).cast::<libc::sockaddr>(),
                len,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        Ok(Connecting { fd })
    }

    /// The connected stream once the connect finished (`None` while in progress), with
    /// TCP_NODELAY set: each PDU batch goes out at once.
    pub(crate) fn poll(&self) -> io::Result<Option<()>> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(None);
        }
        let mut err: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `err` and `len` are valid for the option's size.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&raw mut err).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        if err != 0 {
            return Err(io::Error::from_raw_os_error(err));
        }
        Ok(Some(()))
    }

    /// The connected stream (after [`Connecting::poll`] said so).
    pub(crate) fn into_stream(self) -> io::Result<TcpStream> {
        let s = TcpStream::from(self.fd);
        s.set_nodelay(true)?;
        Ok(s)
    }
}

fn sockaddr(addr: SocketAddr) -> (libc::c_int, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
            (
                libc::AF_INET,
                storage,
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
            (
                libc::AF_INET6,
                storage,
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// Reads what is there (at most `len` bytes) into `ptr` without waiting: `Ok(0)` is the end
/// of the stream, `WouldBlock` nothing to read now.
///
/// # Safety
/// `ptr..ptr + len` must be valid for writes and not referenced elsewhere for the call.
pub(crate) unsafe fn read_into(sock: &TcpStream, ptr: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: per the contract.
    let n = unsafe { libc::recv(sock.as_raw_fd(), ptr.cast(), len, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `readv` into `iov` without waiting (as [`read_into`], over several buffers).
///
/// # Safety
/// Every iovec must point to `iov_len` bytes valid for writes and not referenced elsewhere
/// for the call.
pub(crate) unsafe fn readv(sock: &TcpStream, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: all-zero bytes are a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: per the contract.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `writev` of `iov` without waiting: the bytes written (`WouldBlock` when none).
///
/// # Safety
/// Every iovec must point to `iov_len` readable bytes for the call.
pub(crate) unsafe fn writev(sock: &TcpStream, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: all-zero bytes are a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: per the contract; MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE.
    let n = unsafe {
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Waits up to `ms` for the socket to become readable (blocking callers only: attach, the
/// controller's own thread).
pub(crate) fn wait_readable(sock: &TcpStream, ms: i32) {
    let mut pfd = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}
