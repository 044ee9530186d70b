//! The socket options of the target's connections: SPDK's `posix` sock implementation options
//! (`sock_impl_set_options -i posix`), the ones that mean something for pmio's sockets, with
//! SPDK's defaults, applied to each connection as it is accepted.
//!
//! What they do here, and why the defaults are SPDK's:
//! - `recv_buf_size` / `send_buf_size`: SO_RCVBUF / SO_SNDBUF (the kernel doubles the value
//!   and turns its autotuning off for that buffer). SPDK sets 2 MiB on every socket; left to
//!   autotuning, a send buffer starts at `tcp_wmem`'s 16 KiB default and a poll's worth of
//!   128 KiB C2HData (16 MiB at QD 128) goes out in many short writes while it grows.
//! - `enable_quickack`: TCP_QUICKACK after accept, as SPDK's `posix_sock_init` (off by default).
//! - TCP_NODELAY is always set, as SPDK's sock layer always sets it: a response must not wait
//!   for the ACK of the one before.
//!
//! Zero-copy send (MSG_ZEROCOPY) is not implemented: pmio's sockets copy on send, and the
//! options report `false` for it. SPDK itself never uses it on loopback connections.

use std::io;
use std::net::TcpStream;

use socket2::SockRef;

/// SPDK's DEFAULT_SO_RCVBUF_SIZE and DEFAULT_SO_SNDBUF_SIZE.
pub const DEFAULT_BUF_SIZE: u32 = 2 << 20;
/// SPDK's MIN_SO_RCVBUF_SIZE / MIN_SO_SNDBUF_SIZE: a smaller value is raised to it.
pub const MIN_BUF_SIZE: u32 = 4 << 10;

/// The options in effect for new connections (existing ones keep theirs, as in SPDK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockOptions {
    /// SO_RCVBUF of each connection, bytes (at least [`MIN_BUF_SIZE`]).
    pub recv_buf_size: u32,
    /// SO_SNDBUF of each connection, bytes (at least [`MIN_BUF_SIZE`]).
    pub send_buf_size: u32,
    /// TCP_QUICKACK on each connection.
    pub enable_quickack: bool,
}

impl Default for SockOptions {
    fn default() -> SockOptions {
        SockOptions {
            recv_buf_size: DEFAULT_BUF_SIZE,
            send_buf_size: DEFAULT_BUF_SIZE,
            enable_quickack: false,
        }
    }
}

impl SockOptions {
    /// The options with buffer sizes raised to [`MIN_BUF_SIZE`] where smaller (SPDK's
    /// `posix_sock_set_recvbuf` / `_sendbuf` rule).
    pub fn clamped(self) -> SockOptions {
        SockOptions {
            recv_buf_size: self.recv_buf_size.max(MIN_BUF_SIZE),
            send_buf_size: self.send_buf_size.max(MIN_BUF_SIZE),
            ..self
        }
    }

    /// Sets them, and TCP_NODELAY, on an accepted connection.
    pub fn apply(&self, sock: &TcpStream) -> io::Result<()> {
        let s = SockRef::from(sock);
        s.set_tcp_nodelay(true)?;
        s.set_recv_buffer_size(self.recv_buf_size as usize)?;
        s.set_send_buffer_size(self.send_buf_size as usize)?;
        if self.enable_quickack {
            s.set_tcp_quickack(true)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (l.accept().unwrap().0, c)
    }

    #[test]
    fn applied_options_are_what_the_socket_reports() {
        let (s, _c) = pair();
        let o = SockOptions {
            recv_buf_size: 1 << 20,
            send_buf_size: 512 << 10,
            enable_quickack: true,
        };
        o.apply(&s).unwrap();
        let r = SockRef::from(&s);
        assert!(r.tcp_nodelay().unwrap());
        assert!(r.tcp_quickack().unwrap());
        // The kernel doubles SO_RCVBUF/SO_SNDBUF for its bookkeeping (socket(7)), up to
        // net.core.[rw]mem_max times two.
        let (rcv, snd) = (r.recv_buffer_size().unwrap(), r.send_buffer_size().unwrap());
        let max = |f: &str| {
            std::fs::read_to_string(f)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(usize::MAX)
        };
        assert_eq!(rcv, (2 << 20).min(2 * max("/proc/sys/net/core/rmem_max")));
        assert_eq!(snd, (1 << 20).min(2 * max("/proc/sys/net/core/wmem_max")));
    }

    #[test]
    fn small_buffers_are_raised_to_spdks_minimum() {
        let o = SockOptions {
            recv_buf_size: 0,
            send_buf_size: 100,
            enable_quickack: false,
        }
        .clamped();
        assert_eq!((o.recv_buf_size, o.send_buf_size), (4096, 4096));
        assert_eq!(SockOptions::default().clamped(), SockOptions::default());
    }
}
