//! TLS 1.3 with pre-shared keys between pmio's NVMe/TCP host and pmio's target on the
//! loopback: both suites (an `NVMeTLSkey-1:01:` and a `02:` key), data written reads back over
//! the admin and I/O queues' secure channels; a wrong key, a host without a PSK and a plain
//! TCP host refused while an admitted host keeps working; a reconnect redoes the handshake.

mod tcp_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio_keyring::{Key, PskHash, TlsPsk};
use pmio_nvme::tcp::{self, TcpOptions, TlsKey};
use tcp_common::*;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0b7e3a52-8d61-4f2c-a1e9-7c5d3b2f4e08";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:9c1d4e7a-2b3f-4a5c-8d6e-1f0a2b3c4d5e";

/// Key `name`: a TLS PSK in the interchange format, every byte `fill`.
fn add_psk(keys: &KeyFiles, name: &str, hash: PskHash, fill: u8) -> Arc<Key> {
    let len = if hash == PskHash::Sha384 { 48 } else { 32 };
    keys.add(name, &TlsPsk::new(hash, &vec![fill; len]).unwrap().encode())
}

fn opts(host: &str, psk: Option<&Arc<Key>>) -> TcpOptions {
    TcpOptions {
        hostnqn: Some(host.into()),
        psk: psk.map(|k| TlsKey(Arc::clone(k))),
        ..TcpOptions::default()
    }
}

/// 64 KiB written and read back through an I/O queue (R2T and C2HData over TLS records).
fn io_round_trip(ctrlr: &pmio_nvme::Controller, seed: u8) {
    tcp_common::io_round_trip(ctrlr, 256, 65536, seed);
}

#[test]
fn both_suites_carry_data_and_bad_peers_are_refused() {
    let keys = KeyFiles::new();
    let k256 = add_psk(&keys, "k256", PskHash::Sha256, 0x11);
    let k384 = add_psk(&keys, "k384", PskHash::Sha384, 0x22);
    let wrong = add_psk(&keys, "wrong", PskHash::Sha256, 0x12);
    let t = Target::with_tls(vec![
        (HOST.to_string(), k256.clone()),
        (OTHER.to_string(), k384.clone()),
    ]);
    let a = tcp::connect("Nvme0", &t.addr(), opts(HOST, Some(&k256))).unwrap();
    io_round_trip(&a, 1);
    let b = tcp::connect("Nvme1", &t.addr(), opts(OTHER, Some(&k384))).unwrap();
    io_round_trip(&b, 2);
    // A wrong key: the handshake fails (the binder does not verify); no controller is made.
    let e = tcp::connect("Bad", &t.addr(), opts(HOST, Some(&wrong)))
        .err()
        .expect("a wrong PSK is refused")
        .to_string();
    assert!(e.contains("TLS"), "{e}");
    // Another host's key (the identity names HOST, the key is OTHER's).
    assert!(tcp::connect("Bad", &t.addr(), opts(HOST, Some(&k384))).is_err());
    // No PSK at all on a secure channel: the target reads a ClientHello-less ICReq.
    assert!(tcp::connect("Bad", &t.addr(), opts(HOST, None)).is_err());
    // A host that is not admitted, with a key the target does not have for it.
    let stranger = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    assert!(tcp::connect("Bad", &t.addr(), opts(stranger, Some(&k256))).is_err());
    assert_eq!(
        t.controllers(),
        2,
        "only the two good hosts have controllers"
    );
    // The good ones kept working through all of it.
    io_round_trip(&a, 3);
    io_round_trip(&b, 4);
    a.detach().unwrap();
    b.detach().unwrap();
}

#[test]
fn a_reconnect_redoes_the_handshake() {
    let keys = KeyFiles::new();
    let k = add_psk(&keys, "k", PskHash::Sha384, 0x33);
    let mut t = Target::with_tls(vec![(HOST.to_string(), k.clone())]);
    let o = TcpOptions {
        ctrlr_loss_timeout_sec: 20,
        reconnect_delay_sec: 1,
        ..opts(HOST, Some(&k))
    };
    let ctrlr = tcp::connect("Nvme0", &t.addr(), o).unwrap();
    io_round_trip(&ctrlr, 1);
    t.down();
    let deadline = Instant::now() + IO_LIMIT;
    while ctrlr.connected() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!ctrlr.connected(), "the host noticed the target went");
    t.up();
    let deadline = Instant::now() + IO_LIMIT;
    while !ctrlr.connected() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ctrlr.connected(), "reconnected over TLS");
    io_round_trip(&ctrlr, 2);
    ctrlr.detach().unwrap();
}

#[test]
fn a_plain_host_is_refused_where_it_has_a_psk() {
    // The host has a PSK in the subsystem: over a plain listener its Connect is refused
    // (the key would protect nothing if the host could come in the clear).
    let keys = KeyFiles::new();
    let k = add_psk(&keys, "k", PskHash::Sha256, 0x44);
    let t = Target::start();
    t.admit(false, &[HOST]);
    t.set_psk(HOST, &k);
    let e = tcp::connect("Nvme0", &t.addr(), opts(HOST, None))
        .err()
        .expect("a host with a PSK came in over plain TCP")
        .to_string();
    assert!(e.contains("refused"), "{e}");
}
