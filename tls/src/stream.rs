//! A TLS 1.3 connection over a non-blocking TCP socket, driven by its owner's polls: no
//! thread, no blocking call. OpenSSL reads and writes the socket itself; `WANT_READ` and
//! `WANT_WRITE` come back as [`io::ErrorKind::WouldBlock`], so the owner's poll loop stays as
//! it is for plain TCP.
//!
//! - The handshake advances at each [`TlsStream::handshake`] until it is done.
//! - [`TlsStream::read`] decrypts records into the caller's buffer until it is full or the
//!   socket has no more. Decrypted bytes that did not fit stay inside OpenSSL
//!   ([`TlsStream::buffered`]): the socket no longer reports them, so the owner must read
//!   again without waiting for readiness.
//! - [`TlsStream::write_vectored`] copies what it takes into one staging buffer (a PDU's
//!   header, data and digest become one record, not three), then encrypts and sends as much
//!   as the socket takes. What it took is the stream's to send: the owner may reuse those
//!   buffers at once, and calls [`TlsStream::flush`] while [`TlsStream::has_unsent`].

use std::io::{self, IoSlice};
use std::net::TcpStream;

use openssl::ssl::{ErrorCode, SslStream};

/// Bytes staged for encryption at most: eight full records, a poll's worth of 4 KiB reads at
/// a queue depth of 32 (a larger batch waits for the next call).
const STAGE_MAX: usize = 128 << 10;

/// One TLS connection.
pub struct TlsStream {
    ssl: SslStream<TcpStream>,
    established: bool,
    /// Staged plaintext; bytes before `stage_at` went out.
    stage: Vec<u8>,
    stage_at: usize,
}

fn would_block(e: &openssl::ssl::Error) -> bool {
    matches!(e.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE)
}

/// An OpenSSL failure as an I/O error that says what happened (an alert, a bad record, the
/// socket's own error).
fn io_error(what: &str, e: openssl::ssl::Error) -> io::Error {
    if let Some(ioe) = e.io_error() {
        return io::Error::new(ioe.kind(), format!("TLS {what}: {ioe}"));
    }
    if e.code() == ErrorCode::SYSCALL {
        return io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("TLS {what}: the peer closed the connection"),
        );
    }
    let why = match e.ssl_error() {
        Some(stack) => stack
            .errors()
            .iter()
            .map(|x| x.reason().unwrap_or("unknown").to_string())
            .collect::<Vec<_>>()
            .join("; "),
        None => format!("{e}"),
    };
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS {what}: {why}"))
}

impl TlsStream {
    pub(crate) fn new(ssl: SslStream<TcpStream>) -> TlsStream {
        TlsStream {
            ssl,
            established: false,
            stage: Vec::new(),
            stage_at: 0,
        }
    }

    /// Advances the handshake: `Ok(true)` once it is done, `Ok(false)` while it waits for the
    /// peer; an error (a wrong key, no PSK offered, an alert) ends the connection.
    pub fn handshake(&mut self) -> io::Result<bool> {
        if self.established {
            return Ok(true);
        }
        match self.ssl.do_handshake() {
            Ok(()) => {
                self.established = true;
                log::debug!(
                    "tls: handshake done: {} {}",
                    self.ssl.ssl().version_str(),
                    self.ssl.ssl().current_cipher().map_or("?", |c| c.name())
                );
                Ok(true)
            }
            Err(e) if would_block(&e) => Ok(false),
            Err(e) => Err(io_error("handshake", e)),
        }
    }

    /// Whether the handshake is done.
    pub fn is_established(&self) -> bool {
        self.established
    }

    /// The cipher suite agreed on (after the handshake).
    pub fn cipher(&self) -> Option<&'static str> {
        self.ssl.ssl().current_cipher().map(|c| c.name())
    }

    /// Decrypts into `buf` until it is full or nothing more is there: the bytes read, `Ok(0)`
    /// at the peer's close_notify or end of stream, `WouldBlock` when nothing was there.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.ssl.ssl_read(&mut buf[n..]) {
                Ok(k) => n += k,
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(n),
                Err(e) if would_block(&e) && n > 0 => return Ok(n),
                Err(e) if would_block(&e) => return Err(io::ErrorKind::WouldBlock.into()),
                // What arrived before the failure is delivered; the next read reports it.
                Err(_) if n > 0 => return Ok(n),
                Err(e) => return Err(io_error("read", e)),
            }
        }
        Ok(n)
    }

    /// [`TlsStream::read`] over several buffers in order.
    pub fn read_vectored(&mut self, bufs: &mut [&mut [u8]]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs.iter_mut() {
            let want = b.len();
            match self.read(b) {
                Ok(k) => {
                    n += k;
                    if k < want {
                        break;
                    }
                }
                Err(e) if n > 0 && e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Decrypted bytes OpenSSL holds that no read took yet (the socket does not report them).
    pub fn buffered(&self) -> usize {
        self.ssl.ssl().pending()
    }

    /// Takes bytes from `bufs` (as many as the staging buffer holds) and sends what the socket
    /// takes: the bytes taken, 0 while an earlier batch still waits for the socket.
    pub fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_parts(bufs.iter().map(|b| &**b))
    }

    /// [`TlsStream::write_vectored`] over any sequence of byte slices (no iovec array to
    /// build).
    pub fn write_parts<'a>(
        &mut self,
        parts: impl IntoIterator<Item = &'a [u8]>,
    ) -> io::Result<usize> {
        match self.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        }
        self.stage.clear();
        self.stage_at = 0;
        let mut taken = 0;
        for b in parts {
            let k = b.len().min(STAGE_MAX - self.stage.len());
            self.stage.extend_from_slice(&b[..k]);
            taken += k;
            if self.stage.len() == STAGE_MAX {
                break;
            }
        }
        match self.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(taken)
    }

    /// Sends what is staged: `WouldBlock` while the socket has no room for all of it.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.stage_at < self.stage.len() {
            // A retry after WANT_WRITE passes the same bytes again, as OpenSSL requires.
            match self.ssl.ssl_write(&self.stage[self.stage_at..]) {
                Ok(k) => self.stage_at += k,
                Err(e) if would_block(&e) => return Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => return Err(io_error("write", e)),
            }
        }
        Ok(())
    }

    /// Whether staged bytes wait for room in the socket.
    pub fn has_unsent(&self) -> bool {
        self.stage_at < self.stage.len()
    }

    /// Forgets what is staged (a closing owner that gave up waiting for the socket).
    pub fn discard_unsent(&mut self) {
        self.stage.clear();
        self.stage_at = 0;
    }

    /// The TCP socket under it.
    pub fn get_ref(&self) -> &TcpStream {
        self.ssl.get_ref()
    }

    /// Sends close_notify if the socket takes it now (best effort, never waits).
    pub fn close_notify(&mut self) {
        if self.established {
            let _ = self.ssl.shutdown();
        }
    }

    pub(crate) fn ssl(&self) -> &openssl::ssl::SslRef {
        self.ssl.ssl()
    }
}
