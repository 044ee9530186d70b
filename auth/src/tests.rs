//! Both sides against each other: every hash and group, one and both directions, wrong keys,
//! replays, truncations and what a hostile host can send.

use proptest::prelude::*;

use crate::controller::{ControllerAuth, ControllerConfig, State};
use crate::crypto::{DhGroup, Hash};
use crate::host::{HostAuth, HostAuthError, HostConfig};
use crate::msg::{Message, Reason};
use pmio_keyring::{DhchapSecret, SecretHash};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f8e0c1e-1f5b-4b8e-9d36-1d1c5a7e9a01";
const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn key(hash: SecretHash, fill: u8) -> DhchapSecret {
    let len = match hash {
        SecretHash::Sha384 => 48,
        SecretHash::Sha512 => 64,
        _ => 32,
    };
    DhchapSecret::new(hash, &vec![fill; len]).unwrap()
}

fn ctrlr(host_key: DhchapSecret, ctrlr_key: Option<DhchapSecret>) -> ControllerAuth {
    ControllerAuth::new(
        ControllerConfig {
            digests: Hash::STRONGEST_FIRST.to_vec(),
            dhgroups: DhGroup::STRONGEST_FIRST.to_vec(),
            host_key,
            ctrlr_key,
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
        },
        1000,
    )
}

fn host(k: DhchapSecret, ck: Option<DhchapSecret>, h: Hash, g: DhGroup) -> HostAuth {
    HostAuth::new(
        HostConfig {
            key: k,
            ctrlr_key: ck,
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
            digests: vec![h],
            dhgroups: vec![g],
        },
        0x1234,
        77,
    )
}

/// Runs the exchange; the host's result and the controller's final state.
fn run(c: &mut ControllerAuth, h: &mut HostAuth) -> (Result<(), HostAuthError>, State) {
    c.send(&h.negotiate());
    let reply = match h.challenge(&c.receive(4096)) {
        Ok(r) => r,
        Err(e) => return (Err(e), c.state()),
    };
    c.send(&reply);
    let fin = h.success1(&c.receive(4096));
    if let Some(m) = fin.send {
        c.send(&m);
    }
    (fin.result, c.state())
}

#[test]
fn every_hash_and_group_in_both_directions() {
    for hash in Hash::STRONGEST_FIRST {
        for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
            for (kh, bidi) in [(SecretHash::None, false), (SecretHash::Sha384, true)] {
                let ck = bidi.then(|| key(SecretHash::Sha512, 9));
                let mut c = ctrlr(key(kh, 3), ck.clone());
                let mut h = host(key(kh, 3), ck, hash, group);
                let (r, state) = run(&mut c, &mut h);
                let what = format!("{} {} bidi={bidi}", hash.name(), group.name());
                assert!(r.is_ok(), "{what}: {r:?}");
                assert_eq!(state, State::Completed, "{what}");
                assert_eq!(c.chosen(), (hash, group), "{what}");
            }
        }
    }
}

#[test]
fn the_strongest_common_choice_is_made() {
    let mut c = ctrlr(key(SecretHash::None, 1), None);
    let mut h = HostAuth::new(
        HostConfig {
            key: key(SecretHash::None, 1),
            ctrlr_key: None,
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
            digests: Hash::STRONGEST_FIRST.to_vec(),
            dhgroups: vec![DhGroup::Null, DhGroup::Ffdhe2048, DhGroup::Ffdhe3072],
        },
        1,
        1,
    );
    assert!(run(&mut c, &mut h).0.is_ok());
    assert_eq!(c.chosen(), (Hash::Sha512, DhGroup::Ffdhe3072));
}

#[test]
fn a_wrong_host_key_is_refused_with_failure1_authentication_failed() {
    for group in [DhGroup::Null, DhGroup::Ffdhe2048] {
        let mut c = ctrlr(key(SecretHash::Sha256, 1), None);
        let mut h = host(key(SecretHash::Sha256, 2), None, Hash::Sha256, group);
        let (r, state) = run(&mut c, &mut h);
        assert!(
            matches!(r, Err(HostAuthError::Refused { rc: 1, rce: 1 })),
            "{r:?}"
        );
        assert!(c.must_close());
        assert_eq!(state, State::Error);
    }
    // The same key bytes under another transformation are another key.
    let mut c = ctrlr(key(SecretHash::Sha256, 1), None);
    let mut h = host(key(SecretHash::None, 1), None, Hash::Sha256, DhGroup::Null);
    assert!(matches!(
        run(&mut c, &mut h).0,
        Err(HostAuthError::Refused { rce: 1, .. })
    ));
}

#[test]
fn a_controller_without_the_controller_key_is_refused_by_the_host() {
    // The host asks to authenticate the controller, which holds another controller key.
    let mut c = ctrlr(key(SecretHash::None, 1), Some(key(SecretHash::None, 5)));
    let mut h = host(
        key(SecretHash::None, 1),
        Some(key(SecretHash::None, 6)),
        Hash::Sha384,
        DhGroup::Ffdhe2048,
    );
    let (r, state) = run(&mut c, &mut h);
    assert!(matches!(r, Err(HostAuthError::ControllerMismatch)), "{r:?}");
    assert_eq!(state, State::Error);
    // One that has no controller key at all refuses the host's request.
    let mut c = ctrlr(key(SecretHash::None, 1), None);
    let mut h = host(
        key(SecretHash::None, 1),
        Some(key(SecretHash::None, 6)),
        Hash::Sha256,
        DhGroup::Null,
    );
    assert!(matches!(
        run(&mut c, &mut h).0,
        Err(HostAuthError::Refused { rce: 1, .. })
    ));
}

fn failure_reason(c: &mut ControllerAuth) -> u8 {
    match Message::decode(&c.receive(4096)).unwrap() {
        Message::Failure {
            from_host: false,
            rce,
            ..
        } => rce,
        m => panic!("{} instead of AUTH_Failure1", m.name()),
    }
}

#[test]
fn unusable_offers_are_refused_with_their_reasons() {
    let mut c = ControllerAuth::new(
        ControllerConfig {
            digests: vec![Hash::Sha512],
            dhgroups: vec![DhGroup::Ffdhe4096],
            host_key: key(SecretHash::None, 1),
            ctrlr_key: None,
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
        },
        1,
    );
    let h = host(
        key(SecretHash::None, 1),
        None,
        Hash::Sha256,
        DhGroup::Ffdhe4096,
    );
    c.send(&h.negotiate());
    assert_eq!(failure_reason(&mut c), Reason::HashUnusable as u8);
    assert!(c.must_close());

    let mut c = ctrlr(key(SecretHash::None, 1), None);
    let mut n = host(key(SecretHash::None, 1), None, Hash::Sha256, DhGroup::Null).negotiate();
    n[6] = 1; // secure channel concatenation
    c.send(&n);
    assert_eq!(failure_reason(&mut c), Reason::SccMismatch as u8);

    let mut c = ctrlr(key(SecretHash::None, 1), None);
    let mut g = host(key(SecretHash::None, 1), None, Hash::Sha256, DhGroup::Null).negotiate();
    g[8 + 3] = 0; // no DH group offered
    c.send(&g);
    assert_eq!(failure_reason(&mut c), Reason::DhGroupUnusable as u8);
}

#[test]
fn replayed_truncated_and_out_of_order_messages_fail_the_exchange() {
    let k = || key(SecretHash::None, 4);
    // A reply replayed from an earlier exchange answers another challenge.
    let mut c1 = ctrlr(k(), None);
    let mut h1 = host(k(), None, Hash::Sha256, DhGroup::Null);
    c1.send(&h1.negotiate());
    let old_reply = h1.challenge(&c1.receive(4096)).unwrap();
    let mut c2 = ctrlr(k(), None);
    c2.send(&h1.negotiate());
    let _ = c2.receive(4096);
    c2.send(&old_reply);
    assert_eq!(failure_reason(&mut c2), Reason::Failed as u8);

    // The same reply twice: the second is out of order.
    c1.send(&old_reply);
    assert_eq!(c1.state(), State::Success1);
    c1.send(&old_reply);
    assert_eq!(
        failure_reason(&mut c1),
        Reason::IncorrectProtocolMessage as u8
    );

    // A truncated reply.
    let mut c = ctrlr(k(), None);
    let mut h = host(k(), None, Hash::Sha256, DhGroup::Null);
    c.send(&h.negotiate());
    let reply = h.challenge(&c.receive(4096)).unwrap();
    c.send(&reply[..reply.len() - 1]);
    assert_eq!(failure_reason(&mut c), Reason::IncorrectPayload as u8);

    // A reply of another transaction.
    let mut c = ctrlr(k(), None);
    let mut h = host(k(), None, Hash::Sha256, DhGroup::Null);
    c.send(&h.negotiate());
    let mut reply = h.challenge(&c.receive(4096)).unwrap();
    reply[4] ^= 1;
    c.send(&reply);
    assert_eq!(failure_reason(&mut c), Reason::IncorrectPayload as u8);

    // A Receive before anything was negotiated.
    let mut c = ctrlr(k(), None);
    assert_eq!(
        failure_reason(&mut c),
        Reason::IncorrectProtocolMessage as u8
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A host that sends anything at all, in any order, with receives in between, never
    /// panics the controller and never gets authenticated without the key: it would need a
    /// response that verifies.
    #[test]
    fn prop_fuzzed_exchanges_never_authenticate(
        steps in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..200), 0usize..4, any::<bool>()), 1..8)
    ) {
        let mut c = ctrlr(key(SecretHash::Sha256, 8), Some(key(SecretHash::None, 9)));
        let good = host(key(SecretHash::Sha256, 8), None, Hash::Sha256, DhGroup::Null).negotiate();
        let heads = [(0u8, 0u8), (1, 2), (1, 4), (0, 0xf0)];
        for (mut bytes, kind, receive) in steps {
            if kind == 0 && bytes.len() < good.len() {
                bytes = good.clone();
            }
            if bytes.len() >= 2 {
                (bytes[0], bytes[1]) = heads[kind];
            }
            c.send(&bytes);
            if receive {
                let out = c.receive(4096);
                prop_assert!(Message::decode(&out).is_ok());
            }
            prop_assert!(!c.is_done());
        }
    }
}
