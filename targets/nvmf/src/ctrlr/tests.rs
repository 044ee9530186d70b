use pmio::OpSet;

use super::*;
use crate::identify::testutil::{bdev, nvm_subsys};
use crate::spec::{SglDesc, admin_opc, fctype};
use crate::subsystem::{DISCOVERY_NQN, ListenAddr};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f01fb42-9f7f-4856-b0b3-51e60b8de349";
const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";
const SEC: u64 = 1_000_000_000;

fn connect_data(subnqn: &str, hostnqn: &str, cntlid: u16) -> Vec<u8> {
    let mut d = vec![0u8; CONNECT_DATA_LEN];
    d[..16].copy_from_slice(&[0xab; 16]);
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    d[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    d[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    d
}

fn host() -> ConnectData {
    ConnectData::parse(&connect_data(SUBNQN, HOSTNQN, 0xFFFF)).unwrap()
}

/// A command with an SGL of `len` bytes for the data it returns.
fn cmd(opcode: u8, nsid: u32, cdw10: u32, cdw11: u32, len: u32) -> Sqe {
    let mut sqe = Sqe {
        nsid,
        cdw10,
        cdw11,
        ..Sqe::new(opcode, 0x1000 | u16::from(opcode))
    };
    sqe.set_sgl(SglDesc::transport(len));
    sqe
}

fn identify(cns: u32, nsid: u32) -> Sqe {
    cmd(admin_opc::IDENTIFY, nsid, cns, 0, 4096)
}

/// Get Log Page `lid` of `len` bytes (a multiple of 4) at `offset`.
fn get_log(lid: u32, offset: u64, len: u32) -> Sqe {
    let numd = len / 4 - 1;
    let mut s = cmd(
        admin_opc::GET_LOG_PAGE,
        u32::MAX,
        lid | ((numd & 0xFFFF) << 16),
        numd >> 16,
        len,
    );
    s.cdw12 = offset as u32;
    s.cdw13 = (offset >> 32) as u32;
    s
}

fn set_features(fid: u32, cdw11: u32) -> Sqe {
    cmd(admin_opc::SET_FEATURES, 0, fid, cdw11, 0)
}

fn get_features(fid: u32, cdw11: u32, len: u32) -> Sqe {
    cmd(admin_opc::GET_FEATURES, 0, fid, cdw11, len)
}

/// Runs `sqe` on `c` and returns (status, dw0, data); panics on Held.
fn run(c: &mut Controller, s: &Subsystem, sqe: &Sqe) -> (Status, u32, Vec<u8>) {
    match c.admin(sqe, &[], s, [s], 0) {
        AdminOutcome::Done {
            status, dw0, data, ..
        } => (status, dw0, data),
        AdminOutcome::Held => panic!("held"),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// CC as Linux's host writes it: IOSQES 6, IOCQES 4, and `en`.
fn cc(en: bool) -> u64 {
    (6 << 16) | (4 << 20) | u64::from(en)
}

/// An enabled controller of `s`, connected with KATO 5 s at time 0.
fn enabled(s: &Subsystem) -> Controller {
    let mut c = Controller::new(1, s, &host(), 5000, &TransportOpts::default(), 0);
    assert_eq!(
        c.property_set(prop::CC, false, cc(true)),
        Ok(CcChange::Enabled)
    );
    c
}

#[test]
fn host_connect_sequence() {
    let s = nvm_subsys(SUBNQN);
    let opts = TransportOpts::default();
    let mut c = Controller::new(7, &s, &host(), 5000, &opts, 0);
    assert_eq!(c.cntlid(), 7);
    assert!(!c.is_discovery() && !c.is_enabled());

    // Get CAP (8 bytes).
    let cap = c.property_get(prop::CAP, true).unwrap();
    assert_eq!(cap & 0xFFFF, 127, "MQES = max_queue_depth - 1");
    assert_ne!(cap & (1 << 16), 0, "CQR");
    assert_eq!((cap >> 24) & 0xFF, 30, "TO");
    assert_eq!((cap >> 37) & 0xFF, 1, "CSS: NVM only");
    assert_eq!((cap >> 48) & 0xFF, 0, "MPSMIN, MPSMAX");
    assert_eq!(c.property_get(prop::CAP, false), Ok(cap & 0xFFFF_FFFF));
    assert_eq!(c.property_get(prop::CAP + 4, false), Ok(cap >> 32));

    // Set CC with EN 0, read it back, get CAP again.
    assert_eq!(
        c.property_set(prop::CC, false, cc(false)),
        Ok(CcChange::None)
    );
    assert_eq!(c.property_get(prop::CC, false), Ok(cc(false)));
    assert_eq!(c.property_get(prop::CSTS, false), Ok(0));
    // Enable, poll RDY, read VS.
    assert_eq!(
        c.property_set(prop::CC, false, cc(true)),
        Ok(CcChange::Enabled)
    );
    assert!(c.is_enabled());
    assert_eq!(c.property_get(prop::CSTS, false), Ok(1), "RDY");
    assert_eq!(c.property_get(prop::VS, false), Ok(0x0001_0300));

    // Delete: SHN 01b, poll SHST == 2.
    let shn = cc(true) | (1 << 14);
    assert_eq!(c.property_set(prop::CC, false, shn), Ok(CcChange::Shutdown));
    assert!(c.is_shut_down() && !c.is_enabled());
    let csts = c.property_get(prop::CSTS, false).unwrap();
    assert_eq!((csts >> 2) & 3, 2, "SHST complete");
    assert!(
        !c.keep_alive_expired(3600 * SEC),
        "no keep-alive after shutdown"
    );
    // A reset afterwards clears it.
    assert_eq!(
        c.property_set(prop::CC, false, cc(false)),
        Ok(CcChange::Reset)
    );
    assert_eq!(c.property_get(prop::CSTS, false), Ok(0));
}

#[test]
fn properties_refused() {
    let s = nvm_subsys(SUBNQN);
    let mut c = Controller::new(1, &s, &host(), 0, &TransportOpts::default(), 0);
    assert_eq!(c.property_get(prop::VS, true), Err(Status::INVALID_FIELD));
    assert_eq!(
        c.property_get(0x24, false),
        Err(Status::INVALID_FIELD),
        "AQA"
    );
    assert_eq!(
        c.property_set(prop::CAP, true, 0),
        Err(Status::INVALID_FIELD)
    );
    assert_eq!(
        c.property_set(prop::CC, true, cc(true)),
        Err(Status::INVALID_FIELD)
    );
    // MPS 8 KiB, AMS weighted round robin, CSS 1, SHN 11b.
    for bad in [1 << 7, 1 << 11, 1 << 4, 3 << 14] {
        assert_eq!(
            c.property_set(prop::CC, false, cc(true) | bad),
            Err(Status::INVALID_FIELD)
        );
    }
    assert!(!c.is_enabled(), "a refused write changes nothing");
    // Admin commands wait for CC.EN.
    assert_eq!(
        run(&mut c, &s, &identify(cns::CONTROLLER, 0)).0,
        Status::COMMAND_SEQUENCE_ERROR
    );
}

#[test]
fn identify_controller_via_admin() {
    let mut s = nvm_subsys(SUBNQN);
    s.add_ns(
        bdev("Malloc0", 512, 2048, OpSet::ALL),
        0,
        None,
        None,
        None,
        0,
    )
    .unwrap();
    let mut c = enabled(&s);
    let (st, _, d) = run(&mut c, &s, &identify(cns::CONTROLLER, 0));
    assert_eq!(st, Status::SUCCESS);
    assert_eq!(d.len(), 4096);
    assert_eq!(u16::from_le_bytes([d[78], d[79]]), 1, "CNTLID");
    assert_eq!(u16::from_le_bytes([d[520], d[521]]), 0x0c, "ONCS");

    // A short buffer is refused; unknown CNS too.
    let mut short = identify(cns::CONTROLLER, 0);
    short.set_sgl(SglDesc::transport(512));
    assert_eq!(run(&mut c, &s, &short).0, Status::INVALID_FIELD);
    assert_eq!(run(&mut c, &s, &identify(0x10, 0)).0, Status::INVALID_FIELD);
    // CNS 06h for the NVM command set: zeros; for another command set: refused.
    let (st, _, d) = run(&mut c, &s, &identify(cns::CTRLR_CSI, 0));
    assert!(st.is_success() && d.iter().all(|&b| b == 0));
    let mut zns = identify(cns::CTRLR_CSI, 0);
    zns.cdw11 = 2 << 24;
    assert_eq!(run(&mut c, &s, &zns).0, Status::INVALID_FIELD);
}

#[test]
fn identify_namespaces_via_admin() {
    let mut s = nvm_subsys(SUBNQN);
    s.add_ns(bdev("M", 4096, 256, OpSet::ALL), 2, None, None, None, 0)
        .unwrap();
    let mut c = enabled(&s);

    let (st, _, d) = run(&mut c, &s, &identify(cns::NAMESPACE, 2));
    assert!(st.is_success());
    assert_eq!(u64::from_le_bytes(d[0..8].try_into().unwrap()), 256, "NSZE");
    assert_eq!(d[130], 12, "LBADS");
    // Inactive but valid: zeros. Out of range: Invalid Namespace.
    let (st, _, d) = run(&mut c, &s, &identify(cns::NAMESPACE, 1));
    assert!(st.is_success() && d.iter().all(|&b| b == 0));
    for nsid in [0, 33, u32::MAX] {
        assert_eq!(
            run(&mut c, &s, &identify(cns::NAMESPACE, nsid)).0,
            Status::INVALID_NAMESPACE
        );
    }

    // Active list.
    let (_, _, d) = run(&mut c, &s, &identify(cns::ACTIVE_NS_LIST, 0));
    assert_eq!((u32_at(&d, 0), u32_at(&d, 4)), (2, 0));
    let (_, _, d) = run(&mut c, &s, &identify(cns::ACTIVE_NS_LIST, 2));
    assert_eq!(u32_at(&d, 0), 0);
    assert_eq!(
        run(&mut c, &s, &identify(cns::ACTIVE_NS_LIST, 0xFFFF_FFFE)).0,
        Status::INVALID_NAMESPACE
    );

    // Descriptors: the active one has NGUID and UUID; an inactive one is refused.
    let (st, _, d) = run(&mut c, &s, &identify(cns::NS_ID_DESCRIPTORS, 2));
    assert!(st.is_success());
    assert_eq!(&d[0..2], &[2, 16]);
    assert_eq!(&d[20..22], &[3, 16]);
    assert_eq!(
        run(&mut c, &s, &identify(cns::NS_ID_DESCRIPTORS, 1)).0,
        Status::INVALID_NAMESPACE
    );
}

#[test]
fn number_of_queues() {
    let s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    assert_eq!(
        c.io_queues_granted(),
        127,
        "before Set Features: the transport's limit"
    );
    // Linux asks for nr_io_queues 2: NSQR = NCQR = 1 (0-based).
    let (st, dw0, _) = run(
        &mut c,
        &s,
        &set_features(fid::NUMBER_OF_QUEUES, 1 | (1 << 16)),
    );
    assert!(st.is_success());
    assert_eq!(dw0, 1 | (1 << 16));
    assert_eq!(c.io_queues_granted(), 2);
    let (_, dw0, _) = run(&mut c, &s, &get_features(fid::NUMBER_OF_QUEUES, 0, 0));
    assert_eq!(dw0, 1 | (1 << 16));
    // More than the transport allows: capped at 127 (0-based 126).
    let (_, dw0, _) = run(
        &mut c,
        &s,
        &set_features(fid::NUMBER_OF_QUEUES, 999 | (999 << 16)),
    );
    assert_eq!(dw0, 126 | (126 << 16));
    assert_eq!(
        run(&mut c, &s, &set_features(fid::NUMBER_OF_QUEUES, 0xFFFF)).0,
        Status::INVALID_FIELD
    );
    // Saving is refused.
    let mut sv = set_features(fid::NUMBER_OF_QUEUES, 0);
    sv.cdw10 |= 1 << 31;
    assert_eq!(run(&mut c, &s, &sv).0, Status::FEATURE_NOT_SAVEABLE);
}

#[test]
fn other_features() {
    let s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    let ok = |r: (Status, u32, Vec<u8>)| {
        assert!(r.0.is_success(), "{:?}", r.0);
        r.1
    };
    assert_eq!(
        ok(run(&mut c, &s, &get_features(fid::KEEP_ALIVE_TIMER, 0, 0))),
        5000
    );
    ok(run(&mut c, &s, &set_features(fid::KEEP_ALIVE_TIMER, 1500)));
    assert_eq!(c.kato_ms(), 2000, "rounded up to whole seconds");
    assert_eq!(
        ok(run(
            &mut c,
            &s,
            &get_features(fid::ASYNC_EVENT_CONFIG, 0, 0)
        )),
        1 << 8,
        "namespace notices on from the start"
    );
    assert_eq!(
        ok(run(
            &mut c,
            &s,
            &get_features(fid::VOLATILE_WRITE_CACHE, 0, 0)
        )),
        1
    );
    assert_eq!(
        run(&mut c, &s, &set_features(fid::VOLATILE_WRITE_CACHE, 0)).0,
        Status::FEATURE_NOT_CHANGEABLE
    );
    ok(run(
        &mut c,
        &s,
        &set_features(fid::ARBITRATION, 0xFFFF_FFFF),
    ));
    assert_eq!(
        ok(run(&mut c, &s, &get_features(fid::ARBITRATION, 0, 0))),
        0xFFFF_FF07
    );
    assert_eq!(
        run(&mut c, &s, &set_features(fid::POWER_MANAGEMENT, 1)).0,
        Status::INVALID_FIELD
    );
    assert_eq!(
        ok(run(
            &mut c,
            &s,
            &get_features(fid::INTERRUPT_VECTOR_CONFIG, 3, 0)
        )),
        3 | (1 << 16)
    );
    assert_eq!(
        run(&mut c, &s, &get_features(0x7E, 0, 0)).0,
        Status::INVALID_FIELD
    );
    // The host identifier, as 16 bytes of data.
    let (st, _, d) = run(&mut c, &s, &get_features(fid::HOST_IDENTIFIER, 1, 16));
    assert!(st.is_success());
    assert_eq!(d, [0xab; 16]);
    assert_eq!(
        run(&mut c, &s, &get_features(fid::HOST_IDENTIFIER, 0, 16)).0,
        Status::INVALID_FIELD
    );
    assert_eq!(
        run(&mut c, &s, &set_features(fid::HOST_IDENTIFIER, 1)).0,
        Status::COMMAND_SEQUENCE_ERROR
    );
    let mut bad_ns = get_features(fid::ARBITRATION, 0, 0);
    bad_ns.nsid = 1000;
    assert_eq!(run(&mut c, &s, &bad_ns).0, Status::INVALID_NAMESPACE);
}

#[test]
fn log_pages() {
    let s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    let (st, _, d) = run(&mut c, &s, &get_log(lid::SMART, 0, 512));
    assert!(st.is_success());
    assert_eq!(d.len(), 512);
    let (st, _, d) = run(&mut c, &s, &get_log(lid::ERROR, 0, 64 * 4));
    assert!(st.is_success() && d.len() == 256 && d.iter().all(|&b| b == 0));
    let (_, _, d) = run(&mut c, &s, &get_log(lid::COMMANDS_EFFECTS, 0, 4096));
    assert_eq!(u32_at(&d, 4 * usize::from(admin_opc::KEEP_ALIVE)), 1);
    let (_, _, d) = run(&mut c, &s, &get_log(lid::FIRMWARE_SLOT, 0, 512));
    assert_eq!(d[0], 1);
    assert_eq!(&d[8..12], b"pmio");
    // A window of the effects log, past the first 1 KiB.
    let (_, _, d) = run(&mut c, &s, &get_log(lid::COMMANDS_EFFECTS, 1024, 16));
    assert_eq!(u32_at(&d, 4 * 2), 1, "Read");

    assert_eq!(
        run(&mut c, &s, &get_log(0x42, 0, 512)).0,
        Status::INVALID_LOG_PAGE
    );
    assert_eq!(
        run(&mut c, &s, &get_log(lid::DISCOVERY, 0, 1024)).0,
        Status::INVALID_LOG_PAGE
    );
    assert_eq!(
        run(&mut c, &s, &get_log(lid::SMART, 2, 512)).0,
        Status::INVALID_FIELD
    );
    let mut short = get_log(lid::SMART, 0, 512);
    short.set_sgl(SglDesc::transport(256));
    assert_eq!(
        run(&mut c, &s, &short).0,
        Status::INVALID_FIELD,
        "NUMD beyond the buffer"
    );
    assert_eq!(
        run(&mut c, &s, &get_log(lid::SMART, 4096, 4)).0,
        Status::INVALID_FIELD
    );
}

#[test]
fn aer_held_then_completed_by_a_namespace_change() {
    let mut s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    // The host enables namespace notices and posts one AER.
    run(&mut c, &s, &set_features(fid::ASYNC_EVENT_CONFIG, 1 << 8));
    let mut aer = cmd(admin_opc::ASYNC_EVENT_REQUEST, 0, 0, 0, 0);
    aer.set_cid(0x7001);
    assert_eq!(c.admin(&aer, &[], &s, [&s], 0), AdminOutcome::Held);
    assert_eq!(c.held_aers(), [0x7001]);
    assert_eq!(c.poll_events(&s), None, "nothing happened yet");

    s.add_ns(bdev("M", 512, 64, OpSet::ALL), 0, None, None, None, 0)
        .unwrap();
    assert_eq!(c.poll_events(&s), Some((0x7001, 0x0004_0002)));
    assert!(c.held_aers().is_empty());

    // The host reads the changed namespace list: NSID 1, then the log is empty.
    let (_, _, d) = run(&mut c, &s, &get_log(lid::CHANGED_NS_LIST, 0, 4096));
    assert_eq!((u32_at(&d, 0), u32_at(&d, 4)), (1, 0));
    let (_, _, d) = run(&mut c, &s, &get_log(lid::CHANGED_NS_LIST, 0, 4096));
    assert!(d.iter().all(|&b| b == 0));

    // A removal while the next AER waits.
    aer.set_cid(0x7002);
    assert_eq!(c.admin(&aer, &[], &s, [&s], 0), AdminOutcome::Held);
    s.remove_ns(1).unwrap();
    assert_eq!(c.poll_events(&s), Some((0x7002, 0x0004_0002)));

    // Until the host reads the log, further changes are only logged (the AEN is masked).
    aer.set_cid(0x7003);
    assert_eq!(c.admin(&aer, &[], &s, [&s], 0), AdminOutcome::Held);
    s.add_ns(bdev("N", 512, 64, OpSet::ALL), 3, None, None, None, 0)
        .unwrap();
    assert_eq!(c.poll_events(&s), None);
    let (_, _, d) = run(&mut c, &s, &get_log(lid::CHANGED_NS_LIST, 0, 4096));
    assert_eq!((u32_at(&d, 0), u32_at(&d, 4), u32_at(&d, 8)), (1, 3, 0));
    // Read and unmasked: the next change is announced to the AER still held.
    s.remove_ns(3).unwrap();
    assert_eq!(c.poll_events(&s), Some((0x7003, 0x0004_0002)));
}

#[test]
fn aer_answered_at_once_when_news_is_pending_and_limited() {
    let mut s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    s.add_ns(bdev("M", 512, 64, OpSet::ALL), 0, None, None, None, 0)
        .unwrap();
    let aer = cmd(admin_opc::ASYNC_EVENT_REQUEST, 0, 0, 0, 0);
    match c.admin(&aer, &[], &s, [&s], 0) {
        AdminOutcome::Done { status, dw0, .. } => {
            assert!(status.is_success());
            assert_eq!(dw0, AEN_NS_CHANGED);
        }
        AdminOutcome::Held => panic!("a pending notice answers at once"),
    }
    // AERL + 1 = 4 held at most.
    for _ in 0..4 {
        assert_eq!(c.admin(&aer, &[], &s, [&s], 0), AdminOutcome::Held);
    }
    assert_eq!(
        c.admin(&aer, &[], &s, [&s], 0).status(),
        Some(Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED)
    );
}

#[test]
fn notices_disabled_by_the_host_stay_in_the_log() {
    let mut s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    run(&mut c, &s, &set_features(fid::ASYNC_EVENT_CONFIG, 0));
    let aer = cmd(admin_opc::ASYNC_EVENT_REQUEST, 0, 0, 0, 0);
    assert_eq!(c.admin(&aer, &[], &s, [&s], 0), AdminOutcome::Held);
    s.add_ns(bdev("M", 512, 64, OpSet::ALL), 5, None, None, None, 0)
        .unwrap();
    assert_eq!(c.poll_events(&s), None);
    let (_, _, d) = run(&mut c, &s, &get_log(lid::CHANGED_NS_LIST, 0, 8));
    assert_eq!(u32_at(&d, 0), 5);
}

#[test]
fn keep_alive_expiry() {
    let s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    assert_eq!(c.kato_ms(), 5000);
    assert!(!c.keep_alive_expired(6 * SEC), "KATO 5 s plus 1 s of grace");
    assert!(c.keep_alive_expired(6 * SEC + 1));
    // A Keep Alive at 4 s moves the deadline.
    let ka = cmd(admin_opc::KEEP_ALIVE, 0, 0, 0, 0);
    match c.admin(&ka, &[], &s, [&s], 4 * SEC) {
        AdminOutcome::Done { status, data, .. } => assert!(status.is_success() && data.is_empty()),
        AdminOutcome::Held => panic!(),
    }
    assert!(!c.keep_alive_expired(10 * SEC));
    assert!(c.keep_alive_expired(10 * SEC + 1));
    c.touch(9 * SEC);
    assert!(!c.keep_alive_expired(15 * SEC));

    // The largest KATO a host can send neither overflows nor expires early.
    let huge = Controller::new(2, &s, &host(), u32::MAX, &TransportOpts::default(), 0);
    assert!(!huge.keep_alive_expired(4_000_000 * SEC));
    assert!(huge.keep_alive_expired(5_000_000 * SEC));

    // KATO 0 never expires on an I/O controller.
    let c0 = Controller::new(2, &s, &host(), 0, &TransportOpts::default(), 0);
    assert!(!c0.keep_alive_expired(u64::MAX));
    // A discovery controller connected with KATO 0 gets 2 minutes.
    let d = Subsystem::discovery();
    let cd = Controller::new(3, &d, &host(), 0, &TransportOpts::default(), 0);
    assert_eq!(cd.kato_ms(), DISCOVERY_KATO_MS);
    assert!(cd.keep_alive_expired(122 * SEC));
}

#[test]
fn invalid_opcode_and_abort() {
    let s = nvm_subsys(SUBNQN);
    let mut c = enabled(&s);
    for opc in [0x01, 0x05, 0x10, 0x80, admin_opc::FABRICS] {
        let (st, _, _) = run(&mut c, &s, &cmd(opc, 0, 0, 0, 0));
        assert_eq!(st, Status::INVALID_OPCODE);
        assert!(st.dnr());
        assert_eq!(st.0, 1 | (1 << 14));
    }
    let (st, dw0, _) = run(&mut c, &s, &cmd(admin_opc::ABORT, 0, 0x0001_0005, 0, 0));
    assert!(st.is_success());
    assert_eq!(dw0 & 1, 1, "not aborted");
    // An SGL over max_io_size.
    assert_eq!(
        run(&mut c, &s, &cmd(admin_opc::IDENTIFY, 0, 1, 0, 1 << 30)).0,
        Status::DATA_SGL_LENGTH_INVALID
    );
}

#[test]
fn discovery_controller() {
    let mut d = Subsystem::discovery();
    d.listeners
        .push(ListenAddr::new("127.0.0.1", "4420", None).unwrap());
    let open = nvm_subsys(SUBNQN);
    let mut closed = nvm_subsys("nqn.2016-06.io.spdk:cnode2");
    closed.allow_any_host = false;
    let mut c = Controller::new(9, &d, &host(), 0, &TransportOpts::default(), 0);
    assert!(c.is_discovery());
    c.property_set(prop::CC, false, cc(true)).unwrap();
    let all = [&d, &open, &closed];
    let mut run_d = |sqe: &Sqe| match c.admin(sqe, &[], &d, all, 0) {
        AdminOutcome::Done { status, data, .. } => (status, data),
        AdminOutcome::Held => panic!(),
    };

    let (st, id) = run_d(&identify(cns::CONTROLLER, 0));
    assert!(st.is_success());
    assert_eq!(id[111], 2, "CNTRLTYPE discovery");
    assert_eq!(run_d(&identify(cns::NAMESPACE, 1)).0, Status::INVALID_FIELD);
    assert_eq!(
        run_d(&set_features(fid::NUMBER_OF_QUEUES, 0)).0,
        Status::INVALID_FIELD
    );
    assert_eq!(
        run_d(&get_log(lid::SMART, 0, 512)).0,
        Status::INVALID_LOG_PAGE
    );

    // nvme discover: the header first, then the whole page, in 1 KiB windows here.
    let (st, hdr) = run_d(&get_log(lid::DISCOVERY, 0, 1024));
    assert!(st.is_success());
    let numrec = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
    assert_eq!(numrec, 2, "the discovery subsystem's own entry and cnode1");
    let (_, e1) = run_d(&get_log(lid::DISCOVERY, 1024, 1024));
    assert_eq!(e1[2], 3, "SUBTYPE: this discovery subsystem");
    let (_, e2) = run_d(&get_log(lid::DISCOVERY, 2048, 1024));
    assert_eq!(e2[2], 2);
    assert_eq!(&e2[256..256 + SUBNQN.len()], SUBNQN.as_bytes());
    let (_, again) = run_d(&get_log(lid::DISCOVERY, 0, 16));
    assert_eq!(&again[..8], &hdr[..8], "GENCTR unchanged");
    assert_eq!(
        run_d(&get_log(lid::DISCOVERY, 8192, 16)).0,
        Status::INVALID_FIELD
    );
    assert_eq!(c.poll_events(&d), None);
}

#[test]
fn discovery_log_without_the_discovery_subsystem_in_the_list() {
    let mut d = Subsystem::discovery();
    d.listeners
        .push(ListenAddr::new("127.0.0.1", "8009", None).unwrap());
    let open = nvm_subsys(SUBNQN);
    let mut c = Controller::new(9, &d, &host(), 0, &TransportOpts::default(), 0);
    c.property_set(prop::CC, false, cc(true)).unwrap();
    match c.admin(&get_log(lid::DISCOVERY, 0, 1024), &[], &d, [&open], 0) {
        AdminOutcome::Done { data, .. } => {
            assert_eq!(u64::from_le_bytes(data[8..16].try_into().unwrap()), 2)
        }
        AdminOutcome::Held => panic!(),
    }
}

#[test]
fn connect_data_parsing() {
    let d = ConnectData::parse(&connect_data(SUBNQN, HOSTNQN, 0xFFFF)).unwrap();
    assert_eq!(d.hostid, [0xab; 16]);
    assert_eq!(d.cntlid, 0xFFFF);
    assert_eq!(d.subnqn, SUBNQN);
    assert_eq!(d.hostnqn, HOSTNQN);
    // The discovery NQN parses like any other.
    let d = ConnectData::parse(&connect_data(DISCOVERY_NQN, HOSTNQN, 0xFFFF)).unwrap();
    assert_eq!(d.subnqn, DISCOVERY_NQN);

    // Short data.
    let r = ConnectReject::from(ConnectData::parse(&[0; 512]).unwrap_err());
    assert_eq!(r.status, Status::DATA_SGL_LENGTH_INVALID);
    // A host NQN without its NUL in the first 224 bytes: IATTR 1, IPO 512.
    let mut raw = connect_data(SUBNQN, HOSTNQN, 0xFFFF);
    raw[512..768].fill(b'a');
    let r = ConnectReject::from(ConnectData::parse(&raw).unwrap_err());
    assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(r.dw0, (1 << 16) | 512);
    // 223 bytes and a NUL is the longest that parses.
    raw[512 + 223] = 0;
    assert_eq!(ConnectData::parse(&raw).unwrap().hostnqn.len(), 223);
    // An empty host NQN parses (spdk_nvme_perf sends one); one that is not UTF-8 too, its
    // bytes kept as U+FFFD.
    let d = ConnectData::parse(&connect_data(SUBNQN, "", 0xFFFF)).unwrap();
    assert_eq!(d.hostnqn, "");
    let mut raw = connect_data(SUBNQN, "nqn.x", 0xFFFF);
    raw[512 + 3] = 0xFF;
    assert_eq!(ConnectData::parse(&raw).unwrap().hostnqn, "nqn\u{FFFD}x");
    // An empty subsystem NQN, and one that is not UTF-8: IPO 256.
    let mut raw = connect_data(SUBNQN, HOSTNQN, 0xFFFF);
    raw[256] = 0;
    assert_eq!(
        ConnectReject::from(ConnectData::parse(&raw).unwrap_err()).dw0,
        (1 << 16) | 256
    );
    raw[256] = 0xFF;
    assert_eq!(
        ConnectReject::from(ConnectData::parse(&raw).unwrap_err()).dw0,
        (1 << 16) | 256
    );
}

#[test]
fn connect_command_checks() {
    let opts = TransportOpts::default();
    let mut sqe = Sqe {
        cdw10: 0,    // RECFMT 0, QID 0
        cdw11: 31,   // SQSIZE 31
        cdw12: 5000, // KATO
        ..Sqe::new(admin_opc::FABRICS, 1)
    };
    sqe.set_fctype(fctype::CONNECT);
    assert_eq!(sqe.fctype(), fctype::CONNECT);
    let c = ConnectCmd::parse(&sqe);
    assert_eq!(
        c,
        ConnectCmd {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato_ms: 5000
        }
    );
    assert_eq!(c.check(&opts), Ok(()));

    let io = ConnectCmd {
        qid: 3,
        sqsize: 127,
        ..c
    };
    assert_eq!(io.check(&opts), Ok(()));
    let too_deep = ConnectCmd { sqsize: 128, ..io };
    assert_eq!(
        too_deep.check(&opts),
        Err(ConnectReject::invalid_cmd_field(44))
    );
    assert_eq!(
        ConnectCmd { sqsize: 0, ..c }.check(&opts).unwrap_err().dw0,
        44,
        "IATTR 0, IPO 44"
    );
    assert_eq!(
        ConnectCmd { recfmt: 1, ..c }
            .check(&opts)
            .unwrap_err()
            .status,
        Status::CONNECT_INCOMPATIBLE_FORMAT
    );
}

#[test]
fn connect_admission() {
    let mut s = nvm_subsys(SUBNQN);
    let h = host();
    assert_eq!(admit_admin_connect(Some(&s), &h), Ok(()));
    assert_eq!(
        admit_admin_connect(None, &h),
        Err(ConnectReject::invalid_data_field(256))
    );
    let static_ctrlr = ConnectData {
        cntlid: 1,
        ..h.clone()
    };
    assert_eq!(
        admit_admin_connect(Some(&s), &static_ctrlr),
        Err(ConnectReject::invalid_data_field(16))
    );
    s.allow_any_host = false;
    let refused = admit_admin_connect(Some(&s), &h).unwrap_err();
    assert_eq!(refused.status, Status::CONNECT_INVALID_HOST);
    assert_eq!(refused.status.0, 0x84 | (1 << 8) | (1 << 14));
    s.hosts.push(HOSTNQN.to_string());
    assert_eq!(admit_admin_connect(Some(&s), &h), Ok(()));
}

/// SPDK's rule (`spdk_nvmf_subsystem_host_allowed`): under allow_any_host every host NQN the
/// data carries is admitted, an empty one too; otherwise only the listed ones, any other
/// refused with Connect Invalid Host.
#[test]
fn connect_admission_of_empty_and_unlisted_host_nqns() {
    let mut s = nvm_subsys(SUBNQN);
    let empty = ConnectData::parse(&connect_data(SUBNQN, "", 0xFFFF)).unwrap();
    let mut raw = connect_data(SUBNQN, HOSTNQN, 0xFFFF);
    raw[512 + 4] = 0xC0;
    let not_utf8 = ConnectData::parse(&raw).unwrap();
    for h in [&empty, &not_utf8, &host()] {
        assert_eq!(admit_admin_connect(Some(&s), h), Ok(()), "{:?}", h.hostnqn);
    }
    s.allow_any_host = false;
    s.hosts.push(HOSTNQN.to_string());
    for h in [&empty, &not_utf8] {
        let r = admit_admin_connect(Some(&s), h).unwrap_err();
        assert_eq!(r, ConnectReject::new(Status::CONNECT_INVALID_HOST));
    }
    assert_eq!(admit_admin_connect(Some(&s), &host()), Ok(()));
    // Nor can an empty NQN be listed (SPDK's nvmf_subsystem_add_host wants a valid NQN).
    assert!(crate::subsystem::check_nqn("").is_err());
}

#[test]
fn io_queue_connect_checks() {
    let s = nvm_subsys(SUBNQN);
    let opts = TransportOpts::default();
    let mut c = Controller::new(4, &s, &host(), 5000, &opts, 0);
    let io = ConnectCmd {
        recfmt: 0,
        qid: 1,
        sqsize: 127,
        cattr: 0,
        kato_ms: 0,
    };
    let data = ConnectData {
        cntlid: 4,
        ..host()
    };
    assert_eq!(
        c.check_io_connect(&io, &data),
        Err(ConnectReject::invalid_cmd_field(42)),
        "before CC.EN"
    );
    c.property_set(prop::CC, false, cc(true)).unwrap();
    run(
        &mut c,
        &s,
        &set_features(fid::NUMBER_OF_QUEUES, 1 | (1 << 16)),
    );
    assert_eq!(c.check_io_connect(&io, &data), Ok(()));
    assert_eq!(
        c.check_io_connect(&ConnectCmd { qid: 2, ..io }, &data),
        Ok(())
    );
    assert_eq!(
        c.check_io_connect(&ConnectCmd { qid: 3, ..io }, &data),
        Err(ConnectReject::new(Status::INVALID_QUEUE_IDENTIFIER))
    );
    let other = ConnectData {
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:other".into(),
        ..data.clone()
    };
    assert_eq!(
        c.check_io_connect(&io, &other),
        Err(ConnectReject::invalid_data_field(512))
    );
    // Queue entry sizes other than 64/16 bytes.
    c.property_set(prop::CC, false, 1 | (7 << 16) | (4 << 20))
        .unwrap();
    assert!(c.check_io_connect(&io, &data).is_err());
}
