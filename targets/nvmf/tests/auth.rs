//! In-band authentication on the wire, from a test host written here (the exchange driven by
//! `pmio-auth`'s host side, every other byte by hand): a queue whose host has keys gets
//! AUTHREQ.ATR and takes nothing but Authentication Send/Receive until it authenticated;
//! malformed Authentication commands are refused with Invalid Field; garbage messages are
//! answered with AUTH_Failure1 and the connection closes while the target keeps serving.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::*;
use pmio_auth::crypto::{DhGroup, Hash};
use pmio_auth::host::{HostAuth, HostConfig};
use pmio_auth::msg::{Message, controller_message_len};
use pmio_keyring::{DhchapSecret, Keyring, SecretHash};
use pmio_nvme_spec::{SglDesc, Sqe, Status};
use pmio_nvmf::HostKeys;
use pmio_nvmf::pdu::Digests;

fn secret() -> DhchapSecret {
    DhchapSecret::new(SecretHash::Sha256, &[0x5c; 32]).unwrap()
}

/// A target that admits [`HOSTNQN`] only with [`secret`].
fn target() -> (TestTarget, tempfile::TempDir) {
    let t = TestTarget::start(pmio_nvmf::TransportOpts::default(), false);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    std::fs::write(&path, &*secret().encode()).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ring = Keyring::new();
    ring.file_add_key("k", &path).unwrap();
    let keys = HostKeys {
        host: HOSTNQN.into(),
        dhchap_key: ring.get("k").unwrap(),
        dhchap_ctrlr_key: None,
    };
    t.tgt.add_host_with_keys(NQN, HOSTNQN, Some(keys)).unwrap();
    (t, dir)
}

fn auth_send(h: &mut Host, msg: &[u8]) -> Reply {
    let mut sqe = pmio_nvme_spec::auth_send_sqe(msg.len() as u32);
    sqe.set_cid(h.cid());
    let cid = sqe.cid();
    h.send_cmd(&mut sqe, msg);
    h.wait(cid, &[])
}

fn auth_recv(h: &mut Host, al: u32) -> Reply {
    let mut sqe = pmio_nvme_spec::auth_recv_sqe(al);
    sqe.set_sgl(SglDesc::transport(al));
    sqe.set_cid(h.cid());
    let cid = sqe.cid();
    h.send_cmd(&mut sqe, &[]);
    h.wait(cid, &[])
}

fn prop_get_status(h: &mut Host) -> Status {
    let mut sqe = Sqe {
        cdw10: 1,
        ..Sqe::new(pmio_nvme_spec::admin_opc::FABRICS, h.cid())
    };
    sqe.set_fctype(pmio_nvme_spec::fctype::PROPERTY_GET);
    let cid = sqe.cid();
    h.send_cmd(&mut sqe, &[]);
    h.wait(cid, &[]).status()
}

/// An admin queue Connect that must authenticate.
fn connect(t: &TestTarget) -> Host {
    let mut h = Host::connect(t.addr, Digests::default());
    let r = h.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, 0);
    assert!(r.status().is_success(), "{:?}", r.status());
    assert!(
        pmio_nvme_spec::connect_requires_auth(r.cqe.dw0),
        "ATR in {:#x}",
        r.cqe.dw0
    );
    h
}

/// The whole exchange (SHA-384, ffdhe2048) on `h`, by `pmio-auth`'s host side.
fn authenticate(h: &mut Host) {
    let mut host = HostAuth::new(
        HostConfig {
            key: secret(),
            ctrlr_key: None,
            hostnqn: HOSTNQN.into(),
            subnqn: NQN.into(),
            digests: vec![Hash::Sha384],
            dhgroups: vec![DhGroup::Ffdhe2048],
        },
        9,
        1,
    );
    assert!(auth_send(h, &host.negotiate()).status().is_success());
    let ch = auth_recv(h, 4096);
    let n = controller_message_len(&ch.data).unwrap();
    let reply = host.challenge(&ch.data[..n]).unwrap();
    assert!(auth_send(h, &reply).status().is_success());
    let s1 = auth_recv(h, 4096);
    let n = controller_message_len(&s1.data).unwrap();
    assert!(host.success1(&s1.data[..n]).result.is_ok());
}

#[test]
fn an_unauthenticated_queue_takes_only_authentication_commands() {
    let (t, _keys) = target();
    let mut h = connect(&t);
    assert_eq!(prop_get_status(&mut h), Status::AUTH_REQUIRED);
    // Malformed Authentication commands: no room, another SECP, a length not the data's.
    assert_eq!(auth_recv(&mut h, 0).status(), Status::INVALID_FIELD);
    let mut sqe = pmio_nvme_spec::auth_send_sqe(8);
    sqe.cdw10 = 0x01 << 24 | 1 << 16 | 1 << 8;
    sqe.set_cid(h.cid());
    let cid = sqe.cid();
    h.send_cmd(&mut sqe, &[0; 8]);
    assert_eq!(h.wait(cid, &[]).status(), Status::INVALID_FIELD);
    let mut sqe = pmio_nvme_spec::auth_send_sqe(9);
    sqe.set_cid(h.cid());
    let cid = sqe.cid();
    h.send_cmd(&mut sqe, &[0; 8]);
    assert_eq!(h.wait(cid, &[]).status(), Status::INVALID_FIELD);
    assert_eq!(
        prop_get_status(&mut h),
        Status::AUTH_REQUIRED,
        "the queue stays"
    );

    // The exchange, then the queue works.
    authenticate(&mut h);
    assert_eq!(prop_get_status(&mut h), Status::SUCCESS);
    assert_eq!(t.tgt.auth_failures(), 0);
}

#[test]
fn garbage_messages_get_failure1_and_the_connection_closes() {
    let (t, _keys) = target();
    for (i, garbage) in [
        vec![0u8; 3],                             // shorter than any header
        vec![0x01, 0x02, 0, 0, 0, 0, 0, 0, 0, 0], // a reply before anything was negotiated
        vec![0x07; 72],                           // no such message
    ]
    .into_iter()
    .enumerate()
    {
        let mut h = connect(&t);
        // The Send completes (the spec's way); the next Receive says why it failed.
        assert!(auth_send(&mut h, &garbage).status().is_success());
        let r = auth_recv(&mut h, 4096);
        let n = controller_message_len(&r.data).expect("AUTH_Failure1");
        assert!(
            matches!(
                Message::decode(&r.data[..n]).unwrap(),
                Message::Failure {
                    from_host: false,
                    rc: 1,
                    ..
                }
            ),
            "message {i}"
        );
        assert!(
            h.closed_within(Duration::from_secs(5)),
            "message {i}: closed"
        );
        assert_eq!(t.tgt.auth_failures(), i as u64 + 1);
    }
    // The target still serves the host that holds the key.
    let mut h = connect(&t);
    authenticate(&mut h);
    assert_eq!(prop_get_status(&mut h), Status::SUCCESS);
}
