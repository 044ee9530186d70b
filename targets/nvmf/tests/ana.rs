//! Asymmetric Namespace Access on the wire: a subsystem with ANA reporting and two listeners
//! (two ports of one gateway, as two gateways would be). Identify Controller and Namespace
//! carry the ANA fields Linux's host checks; the ANA log page (with and without RGO) is the
//! state of the listener a controller connected through; a state change completes a held
//! AER with the ANA change notice; I/O through an Inaccessible path gets the path status
//! (and is served again once Optimized); an I/O queue on another listener than its admin
//! queue's is refused.

mod common;

use common::{HOSTNQN, Host, NQN, TestTarget, admin_sqe, pattern};
use pmio_nvmf::ctrlr::AEN_ANA_CHANGED;
use pmio_nvmf::pdu::Digests;
use pmio_nvmf::spec::{self, Sqe, Status, id_ctrl, id_ns};
use pmio_nvmf::{AnaState, ListenAddr, SubsystemParams, TransportOpts};

const MAX_NS: u32 = 4;

/// The target with ANA reporting and a second listener, on `b`.
fn ana_target() -> (TestTarget, std::net::SocketAddr) {
    let t = TestTarget::with_subsystem(
        TransportOpts::default(),
        SubsystemParams {
            nqn: NQN.into(),
            allow_any_host: true,
            max_namespaces: MAX_NS,
            ana_reporting: true,
            ..SubsystemParams::default()
        },
    );
    let port = common::free_port();
    let b = ListenAddr::new("127.0.0.1", &port.to_string(), None).unwrap();
    t.tgt
        .add_listener_with(NQN, b, false, AnaState::NonOptimized)
        .unwrap();
    (t, std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

fn listen_addr(a: std::net::SocketAddr) -> ListenAddr {
    ListenAddr::new("127.0.0.1", &a.port().to_string(), None).unwrap()
}

fn identify(h: &mut Host, cns: u32, nsid: u32) -> Vec<u8> {
    let r = h.admin(
        Sqe {
            nsid,
            ..admin_sqe(spec::admin_opc::IDENTIFY, cns)
        },
        4096,
    );
    assert!(r.status().is_success(), "Identify {cns}: {:?}", r.status());
    r.data
}

/// The ANA log page, `len` bytes; `rgo`: Return Groups Only; `rae`: Retain Asynchronous
/// Event.
fn ana_log(h: &mut Host, len: u32, rgo: bool, rae: bool) -> Vec<u8> {
    let numd = len / 4 - 1;
    let cdw10 = spec::lid::ANA | u32::from(rgo) << 8 | u32::from(rae) << 15 | (numd & 0xFFFF) << 16;
    let r = h.admin(
        Sqe {
            nsid: u32::MAX,
            ..admin_sqe(spec::admin_opc::GET_LOG_PAGE, cdw10)
        },
        len,
    );
    assert!(r.status().is_success(), "ANA log: {:?}", r.status());
    r.data
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn identify_and_log_page_per_listener() {
    let (t, b) = ana_target();
    let (mut a_admin, _) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let (mut b_admin, _) = Host::admin_queue(b, Digests::NONE, 0);

    let id = identify(&mut a_admin, spec::cns::CONTROLLER, 0);
    assert_eq!(
        id[id_ctrl::CMIC] & 0b1011,
        0b1011,
        "multi-port, -controller, ANA"
    );
    assert_ne!(
        u32_at(&id, id_ctrl::OAES) & (1 << 11),
        0,
        "ANA change notices"
    );
    assert_eq!(id[id_ctrl::ANATT], 10);
    assert_eq!(id[id_ctrl::ANACAP], 0x47);
    assert_eq!(u32_at(&id, id_ctrl::ANAGRPMAX), MAX_NS);
    assert_eq!(u32_at(&id, id_ctrl::NANAGRPID), MAX_NS);
    // Linux: MNAN non-zero and at most NN, or no multipath.
    assert_eq!(u32_at(&id, id_ctrl::MNAN), MAX_NS);
    assert_eq!(u32_at(&id, id_ctrl::NN), MAX_NS);

    let ns = identify(&mut a_admin, spec::cns::NAMESPACE, 1);
    assert_eq!(u32_at(&ns, id_ns::ANAGRPID), 1, "the NSID's group");
    assert_eq!(ns[id_ns::NMIC] & 1, 1, "shared");

    // One group (the one with a namespace): NSID 1 in group 1, in each listener's state.
    for (h, state) in [(&mut a_admin, 1u8), (&mut b_admin, 2u8)] {
        let p = ana_log(h, 4096, false, true);
        assert_eq!(u16::from_le_bytes([p[8], p[9]]), 1, "descriptors");
        assert_eq!(u32_at(&p, 16), 1, "ANAGRPID");
        assert_eq!(u32_at(&p, 20), 1, "NNSID");
        assert_eq!(p[16 + 16], state, "ANA state");
        assert_eq!(u32_at(&p, 48), 1, "NSID");
        assert!(p[52..].iter().all(|&b| b == 0), "nothing after the page");
        let rgo = ana_log(h, 64, true, true);
        assert_eq!(u32_at(&rgo, 20), 0, "RGO: no NSIDs");
        assert_eq!(rgo[32], state);
        assert!(rgo[48..].iter().all(|&b| b == 0));
    }
    drop((a_admin, b_admin));
    t.assert_no_leaks();
}

#[test]
fn state_change_notice_and_io_on_an_inaccessible_path() {
    let (t, b) = ana_target();
    let (mut admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    let data = pattern(4096, 7);
    assert!(io.write(0, &data).status().is_success());

    // Another listener's change is not this controller's news; its own is.
    let aer = admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    t.tgt
        .set_ana_state(NQN, &listen_addr(b), AnaState::Optimized, 0)
        .unwrap();
    admin.keep_alive();
    t.tgt
        .set_ana_state(NQN, &listen_addr(t.addr), AnaState::Inaccessible, 1)
        .unwrap();
    let cqe = admin.expect_resp(aer);
    assert!(cqe.status().is_success(), "{:?}", cqe.status());
    assert_eq!(cqe.dw0, AEN_ANA_CHANGED, "ANA change notice, log page 0Ch");

    // I/O through this path: the path status, no DNR (a multipath host retries elsewhere).
    let r = io.read(0, 8);
    assert_eq!(r.status(), Status::ANA_INACCESSIBLE);
    assert_eq!((r.status().sct(), r.status().sc()), (3, 2));
    assert!(!r.status().dnr());
    assert_eq!(io.write(8, &data).status(), Status::ANA_INACCESSIBLE);
    // Admin: Identify Namespace says no capacity is in use here; the log says why.
    let ns = identify(&mut admin, spec::cns::NAMESPACE, 1);
    assert_eq!(&ns[id_ns::NUSE..id_ns::NUSE + 8], &[0; 8]);
    let p = ana_log(&mut admin, 4096, false, false);
    assert_eq!(p[32], 3, "inaccessible");
    // The namespace-specific feature is refused with the path status too.
    let gf = admin.admin(
        Sqe {
            nsid: 1,
            ..admin_sqe(spec::admin_opc::GET_FEATURES, spec::fid::ERROR_RECOVERY)
        },
        0,
    );
    assert_eq!(gf.status(), Status::ANA_INACCESSIBLE);

    // Optimized again: the notice (the log was read without RAE), then I/O is served.
    let aer = admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    t.tgt
        .set_ana_state(NQN, &listen_addr(t.addr), AnaState::Optimized, 0)
        .unwrap();
    assert_eq!(admin.expect_resp(aer).dw0, AEN_ANA_CHANGED);
    let r = io.read(0, 8);
    assert!(r.status().is_success(), "{:?}", r.status());
    assert!(r.data == data, "the data written before");
    drop((admin, io));
    t.assert_no_leaks();
}

#[test]
fn io_queue_must_come_in_on_its_admin_queue_listener() {
    let (t, b) = ana_target();
    let (_admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut h = Host::connect(b, Digests::NONE);
    let r = h.fabrics_connect(1, 31, NQN, HOSTNQN, cntlid, 0);
    assert!(
        !r.status().is_success(),
        "I/O queue on another port admitted"
    );
    // On its own listener it is admitted.
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    assert!(io.read(0, 8).status().is_success());
}
