//! Both sides of pmio-tls over a loopback TCP connection, driven by hand in one thread as a
//! reactor would (non-blocking, one step each in turn): TLS 1.3 PSK handshakes with each
//! suite and identity version, data both ways through partial writes, and the refusals.

use std::io::{self, IoSlice};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio_keyring::{PskHash, TlsPsk};
use pmio_tls::{ClientPsk, IdentityVersion, PskIdentity, PskLookup, RetainedPsk, TlsStream};
use zeroize::Zeroizing;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:5a4f7e5e-0c6b-4a4b-9b4c-2f4c0a9e3f11";
const SUB: &str = "nqn.2016-06.io.spdk:cnode1";

/// The server's keys: one configured PSK for (HOST, SUB), as a target holds it.
struct OneHost(TlsPsk);

impl PskLookup for OneHost {
    fn tls_psk(&self, id: &PskIdentity) -> Option<Zeroizing<Vec<u8>>> {
        if id.hostnqn != HOST || id.subnqn != SUB {
            return None;
        }
        let r = RetainedPsk::derive(&self.0, &id.hostnqn).ok()?;
        if !id.digest_matches(&r).ok()? {
            return None;
        }
        id.tls_psk(&r).ok()
    }
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let s = l.accept().unwrap().0;
    for x in [&c, &s] {
        x.set_nonblocking(true).unwrap();
    }
    (s, c)
}

fn key(hash: PskHash, byte: u8) -> TlsPsk {
    let len = if hash == PskHash::Sha384 { 48 } else { 32 };
    TlsPsk::new(hash, &vec![byte; len]).unwrap()
}

/// Steps both handshakes until both are done or one fails: (server, client) results.
fn handshake(s: &mut TlsStream, c: &mut TlsStream) -> (io::Result<()>, io::Result<()>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut rs, mut rc) = (None, None);
    while rs.is_none() || rc.is_none() {
        assert!(Instant::now() < deadline, "handshake stalled");
        if rc.is_none() {
            match c.handshake() {
                Ok(true) => rc = Some(Ok(())),
                Ok(false) => {}
                Err(e) => rc = Some(Err(e)),
            }
        }
        if rs.is_none() {
            match s.handshake() {
                Ok(true) => rs = Some(Ok(())),
                Ok(false) => {}
                Err(e) => rs = Some(Err(e)),
            }
        }
        // A side that failed sends its alert; the other learns it on its next step.
        if rs.as_ref().is_some_and(|r| r.is_err()) && rc.is_none() {
            std::thread::sleep(Duration::from_millis(1));
            rc = Some(match c.handshake() {
                Ok(_) => c.read(&mut [0u8; 16]).map(|_| ()),
                Err(e) => Err(e),
            });
        }
        if rc.as_ref().is_some_and(|r| r.is_err()) && rs.is_none() {
            std::thread::sleep(Duration::from_millis(1));
            rs = Some(s.handshake().map(|_| ()));
        }
    }
    (rs.unwrap(), rc.unwrap())
}

fn connect(
    hash: PskHash,
    version: IdentityVersion,
    server_key: u8,
    client_key: u8,
) -> (TlsStream, TlsStream, io::Result<()>, io::Result<()>) {
    let (s, c) = pair();
    let lookup = Arc::new(OneHost(key(hash, server_key)));
    let mut s = pmio_tls::accept(s, lookup).unwrap();
    let psk = ClientPsk::derive(&key(hash, client_key), HOST, SUB, version).unwrap();
    let mut c = pmio_tls::connect(c, psk).unwrap();
    let (rs, rc) = handshake(&mut s, &mut c);
    (s, c, rs, rc)
}

/// Sends `data` from `a` to `b` through both sides' non-blocking steps; returns what arrived.
fn transfer(a: &mut TlsStream, b: &mut TlsStream, data: &[u8]) -> Vec<u8> {
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 7000];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < data.len() {
        assert!(
            Instant::now() < deadline,
            "transfer stalled at {}",
            got.len()
        );
        if sent < data.len() {
            // Three slices a call, as a PDU's header, data and digest.
            let rest = &data[sent..];
            let (x, y) = rest.split_at(rest.len().min(24));
            let (y, z) = y.split_at(y.len().min(5000));
            sent += a
                .write_vectored(&[IoSlice::new(x), IoSlice::new(y), IoSlice::new(z)])
                .unwrap();
        } else if a.has_unsent() {
            match a.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        loop {
            match b.read(&mut buf) {
                Ok(0) => panic!("closed"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
            if b.buffered() == 0 {
                break;
            }
        }
    }
    got
}

#[test]
fn every_suite_and_identity_version_handshakes_and_carries_data() {
    for (hash, suite) in [
        (PskHash::Sha256, "TLS_AES_128_GCM_SHA256"),
        (PskHash::Sha384, "TLS_AES_256_GCM_SHA384"),
        (PskHash::None, "TLS_AES_128_GCM_SHA256"),
    ] {
        for version in [IdentityVersion::V0, IdentityVersion::V1] {
            let (mut s, mut c, rs, rc) = connect(hash, version, 7, 7);
            rs.unwrap();
            rc.unwrap();
            assert_eq!(s.cipher(), Some(suite));
            assert_eq!(c.cipher(), Some(suite));
            let id = s.peer_identity().expect("the server knows who connected");
            assert_eq!(
                (id.hostnqn.as_str(), id.subnqn.as_str(), id.version),
                (HOST, SUB, version)
            );
            // Larger than the socket buffers and the staging buffer: partial writes.
            let data: Vec<u8> = (0..3_000_000u32)
                .map(|i| (i * 7 + i / 4096) as u8)
                .collect();
            assert!(transfer(&mut c, &mut s, &data) == data, "client to server");
            assert!(
                transfer(&mut s, &mut c, &data[..100_000]) == data[..100_000],
                "back"
            );
        }
    }
}

#[test]
fn a_wrong_key_fails_the_handshake_on_both_sides() {
    let (s, _c, rs, rc) = connect(PskHash::Sha256, IdentityVersion::V0, 7, 8);
    assert!(rs.is_err(), "server accepted a wrong binder");
    assert!(rc.is_err(), "client went on after the server's alert");
    assert!(s.peer_identity().is_none());
    // Version 1: the digest already names another key: refused at lookup.
    let (_s, _c, rs, rc) = connect(PskHash::Sha384, IdentityVersion::V1, 7, 8);
    assert!(rs.is_err() && rc.is_err());
}

#[test]
fn a_client_without_a_psk_is_refused() {
    let (s, c) = pair();
    let mut s = pmio_tls::accept(s, Arc::new(OneHost(key(PskHash::Sha256, 1)))).unwrap();
    // A plain TLS 1.3 client: a ClientHello with no pre_shared_key.
    let ctx = openssl::ssl::SslContext::builder(openssl::ssl::SslMethod::tls_client())
        .unwrap()
        .build();
    let mut ssl = openssl::ssl::Ssl::new(&ctx).unwrap();
    ssl.set_connect_state();
    let mut plain = openssl::ssl::SslStream::new(ssl, c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let server = loop {
        assert!(Instant::now() < deadline);
        let _ = plain.do_handshake();
        match s.handshake() {
            Ok(false) => continue,
            other => break other,
        }
    };
    let e = server.expect_err("a ClientHello without a PSK was accepted");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

#[test]
fn an_unknown_host_and_garbage_are_refused() {
    // An identity for another subsystem.
    let (s, c) = pair();
    let mut s = pmio_tls::accept(s, Arc::new(OneHost(key(PskHash::Sha256, 7)))).unwrap();
    let psk = ClientPsk::derive(
        &key(PskHash::Sha256, 7),
        HOST,
        "nqn.2016-06.io.spdk:other",
        IdentityVersion::V0,
    )
    .unwrap();
    let mut c = pmio_tls::connect(c, psk).unwrap();
    let (rs, _) = handshake(&mut s, &mut c);
    assert!(rs.is_err());
    // Bytes that are no TLS at all.
    let (s, c) = pair();
    let mut s = pmio_tls::accept(s, Arc::new(OneHost(key(PskHash::Sha256, 7)))).unwrap();
    use std::io::Write;
    (&c).write_all(&[0x04, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00])
        .unwrap();
    std::thread::sleep(Duration::from_millis(10));
    assert!(s.handshake().is_err());
}

/// Reads until something other than WouldBlock comes; that must be an error.
fn read_error(s: &mut TlsStream) -> io::Error {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match s.read(&mut [0u8; 64]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return e,
            Ok(n) => panic!("{n} bytes read from a forged record"),
        }
        assert!(Instant::now() < deadline, "no error");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn an_alert_mid_stream_ends_the_connection() {
    let (mut s, mut c, rs, rc) = connect(PskHash::Sha256, IdentityVersion::V0, 3, 3);
    rs.unwrap();
    rc.unwrap();
    assert_eq!(transfer(&mut c, &mut s, b"hello"), b"hello");
    c.close_notify();
    // close_notify: the end of the stream.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match s.read(&mut [0u8; 64]) {
            Ok(0) => break,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            other => panic!("{other:?} after close_notify"),
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    // A record of garbage after the handshake: a bad record MAC.
    let (mut s, c, rs, rc) = connect(PskHash::Sha256, IdentityVersion::V0, 3, 3);
    rs.unwrap();
    rc.unwrap();
    use std::io::Write;
    c.get_ref()
        .write_all(&[0x17, 0x03, 0x03, 0x00, 0x20])
        .unwrap();
    c.get_ref().write_all(&[0x55; 32]).unwrap();
    let e = read_error(&mut s);
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}
