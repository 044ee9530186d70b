//! A connection's byte stream: plain TCP, or TLS 1.3 with a PSK over it on a secure-channel
//! listener (`pmio-tls`), whose handshake comes before the ICReq. Both are non-blocking and
//! driven by the poll group's polls; `WouldBlock` means the same for both.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

use pmio_tls::{PskIdentity, TlsStream};

pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    pub fn fd(&self) -> RawFd {
        match self {
            Stream::Plain(s) => s.as_raw_fd(),
            Stream::Tls(t) => t.get_ref().as_raw_fd(),
        }
    }

    /// Advances the TLS handshake: true once the stream carries PDUs (at once for TCP).
    pub fn handshake(&mut self) -> io::Result<bool> {
        match self {
            Stream::Plain(_) => Ok(true),
            Stream::Tls(t) => t.handshake(),
        }
    }

    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf),
        }
    }

    /// Sends (TCP) or takes to send (TLS) what it can of `iov`: the bytes the caller may
    /// consider gone.
    pub fn write_vectored(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(iov),
            Stream::Tls(t) => t.write_vectored(iov),
        }
    }

    /// Sends what TLS staged earlier; `WouldBlock` while the socket has no room.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.flush(),
        }
    }

    /// Whether bytes taken earlier still wait for the socket.
    pub fn has_unsent(&self) -> bool {
        matches!(self, Stream::Tls(t) if t.has_unsent())
    }

    /// Forgets bytes that wait for the socket (a closing connection gave up on them).
    pub fn discard_unsent(&mut self) {
        if let Stream::Tls(t) = self {
            t.discard_unsent();
        }
    }

    /// Decrypted input no read took yet: the socket does not report it as readable.
    pub fn buffered(&self) -> usize {
        match self {
            Stream::Plain(_) => 0,
            Stream::Tls(t) => t.buffered(),
        }
    }

    /// The PSK identity the host's handshake proved (a secure channel), `None` for TCP.
    pub fn psk_identity(&self) -> Option<&PskIdentity> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(t) => t.peer_identity(),
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// close_notify (TLS, if the socket takes it), then both directions shut.
    pub fn shutdown(&mut self) {
        let tcp = match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => {
                t.close_notify();
                t.get_ref()
            }
        };
        let _ = tcp.shutdown(std::net::Shutdown::Both);
    }
}
