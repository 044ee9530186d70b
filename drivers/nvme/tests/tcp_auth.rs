//! DH-HMAC-CHAP between pmio's NVMe/TCP host and pmio's target on the loopback: every hash
//! with the null group and ffdhe2048, host-only and bidirectional, every queue authenticated
//! before it carries I/O (data written reads back); a wrong host key refused with
//! AUTH_Failure1 "authentication failed" and counted; a controller without the controller key
//! refused by the host; a host without a key told what is missing; a reconnect
//! authenticates again.

mod tcp_common;

use std::sync::Arc;

use pmio_auth::crypto::{DhGroup, Hash};
use pmio_keyring::{DhchapSecret, Key, SecretHash};
use pmio_nvme::tcp::{self, DhchapKeys, TcpOptions};
use pmio_nvmf::{DhchapPolicy, HostKeys};
use tcp_common::*;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6d0e2b8c-5a3f-4c1e-9b7d-2f4a8e6c1d30";

/// Key `name`: a DH-HMAC-CHAP secret of `len` bytes `fill`.
fn add_secret(keys: &KeyFiles, name: &str, hash: SecretHash, fill: u8, len: usize) -> Arc<Key> {
    keys.add(
        name,
        &DhchapSecret::new(hash, &vec![fill; len]).unwrap().encode(),
    )
}

fn host_opts(key: &Arc<Key>, ctrlr_key: Option<&Arc<Key>>) -> TcpOptions {
    TcpOptions {
        hostnqn: Some(HOSTNQN.into()),
        dhchap: Some(DhchapKeys {
            key: key.clone(),
            ctrlr_key: ctrlr_key.cloned(),
        }),
        ..TcpOptions::default()
    }
}

/// 8 KiB written and read back through an I/O queue (which authenticated first).
fn io_round_trip(ctrlr: &pmio_nvme::Controller, seed: u8) {
    tcp_common::io_round_trip(ctrlr, 64, 8192, seed);
}

#[test]
fn every_hash_with_null_and_ffdhe2048_one_and_both_ways() {
    let keys = KeyFiles::new();
    let host = add_secret(&keys, "host", SecretHash::Sha256, 0x11, 32);
    let ctrl = add_secret(&keys, "ctrlr", SecretHash::Sha512, 0x22, 64);
    let mut t = Target::start();
    t.require_auth(
        HOSTNQN,
        HostKeys {
            host: HOSTNQN.into(),
            dhchap_key: host.clone(),
            dhchap_ctrlr_key: Some(ctrl.clone()),
        },
    );
    let mut seed = 0;
    for hash in [Hash::Sha256, Hash::Sha384, Hash::Sha512] {
        for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
            t.dhchap_policy(DhchapPolicy {
                digests: vec![hash],
                dhgroups: vec![group],
            });
            for bidi in [false, true] {
                let what = format!("{} {} bidirectional={bidi}", hash.name(), group.name());
                let opts = host_opts(&host, bidi.then_some(&ctrl));
                let ctrlr = tcp::connect("Nvme0", &t.addr(), opts)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                seed += 1;
                io_round_trip(&ctrlr, seed);
                ctrlr.detach().unwrap();
            }
        }
    }
    assert_eq!(t.auth_failures(), 0);
}

#[test]
fn a_wrong_key_is_refused_with_the_specs_failure_and_others_keep_working() {
    let keys = KeyFiles::new();
    let host = add_secret(&keys, "host", SecretHash::None, 0x33, 48);
    let wrong = add_secret(&keys, "wrong", SecretHash::None, 0x34, 48);
    let mut t = Target::start();
    t.require_auth(
        HOSTNQN,
        HostKeys {
            host: HOSTNQN.into(),
            dhchap_key: host.clone(),
            dhchap_ctrlr_key: None,
        },
    );
    let e = tcp::connect("Bad", &t.addr(), host_opts(&wrong, None))
        .err()
        .expect("a wrong key is refused")
        .to_string();
    assert!(
        e.contains("AUTH_Failure1 reason 0x01, explanation 0x01 (authentication failed)"),
        "{e}"
    );
    assert_eq!(t.auth_failures(), 1);
    // The target closes the refused connection (after its AUTH_Failure1 went out): the
    // controller it made at Connect goes with it.
    let deadline = std::time::Instant::now() + IO_LIMIT;
    while t.controllers() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(t.controllers(), 0, "the refused host's controller is gone");

    // No key at all: the host says what is missing.
    let e = tcp::connect(
        "NoKey",
        &t.addr(),
        TcpOptions {
            hostnqn: Some(HOSTNQN.into()),
            ..TcpOptions::default()
        },
    )
    .err()
    .expect("no key, no controller")
    .to_string();
    assert!(e.contains("requires DH-HMAC-CHAP"), "{e}");

    // The right key still gets in.
    let ctrlr = tcp::connect("Good", &t.addr(), host_opts(&host, None)).unwrap();
    io_round_trip(&ctrlr, 7);
    ctrlr.detach().unwrap();
}

#[test]
fn a_controller_without_the_controller_key_is_refused_by_the_host() {
    let keys = KeyFiles::new();
    let host = add_secret(&keys, "host", SecretHash::Sha384, 0x44, 48);
    let ctrl = add_secret(&keys, "ctrlr", SecretHash::None, 0x55, 32);
    let other = add_secret(&keys, "other", SecretHash::None, 0x56, 32);
    let mut t = Target::start();
    t.require_auth(
        HOSTNQN,
        HostKeys {
            host: HOSTNQN.into(),
            dhchap_key: host.clone(),
            dhchap_ctrlr_key: Some(other),
        },
    );
    let e = tcp::connect("Nvme0", &t.addr(), host_opts(&host, Some(&ctrl)))
        .err()
        .expect("the host refuses a controller it cannot verify")
        .to_string();
    assert!(e.contains("controller's response does not match"), "{e}");
}

#[test]
fn a_reconnect_authenticates_again() {
    let keys = KeyFiles::new();
    let host = add_secret(&keys, "host", SecretHash::Sha256, 0x66, 32);
    let mut t = Target::start();
    t.require_auth(
        HOSTNQN,
        HostKeys {
            host: HOSTNQN.into(),
            dhchap_key: host.clone(),
            dhchap_ctrlr_key: None,
        },
    );
    t.dhchap_policy(DhchapPolicy {
        digests: vec![Hash::Sha256],
        dhgroups: vec![DhGroup::Ffdhe2048],
    });
    let opts = TcpOptions {
        ctrlr_loss_timeout_sec: 20,
        reconnect_delay_sec: 1,
        ..host_opts(&host, None)
    };
    let ctrlr = tcp::connect("Nvme0", &t.addr(), opts).unwrap();
    io_round_trip(&ctrlr, 1);
    t.down();
    // Up again once the host noticed (else a queue opened now would ask the new target for
    // the old controller).
    let deadline = std::time::Instant::now() + IO_LIMIT;
    while ctrlr.connected() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!ctrlr.connected(), "the host noticed the target went");
    t.up();
    // The new target admits the host only once it authenticated again (admin and I/O
    // queues): I/O through it then works.
    let deadline = std::time::Instant::now() + IO_LIMIT;
    while !ctrlr.connected() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(ctrlr.connected(), "reconnected");
    io_round_trip(&ctrlr, 2);
    assert_eq!(t.auth_failures(), 0);
    ctrlr.detach().unwrap();
}
