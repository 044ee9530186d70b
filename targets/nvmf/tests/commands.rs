//! Commands the target refuses: the spec's status for the command and the connection goes on,
//! or (data where none belongs, a command before Connect) the connection is closed; Connect
//! refusals. Every test ends by proving the target serves another controller and kept nothing.

mod common;

use common::{
    HOSTNQN, Host, NQN, NUM_BLOCKS, Reply, TestTarget, admin_sqe, pattern, rw_sqe, session,
};
use pmio_nvmf::TransportOpts;
use pmio_nvmf::pdu::Digests;
use pmio_nvmf::spec::{self, SglDesc, Sqe, Status};

/// An I/O command with no data, answered with a CapsuleResp.
fn no_data(io: &mut Host, sqe: Sqe) -> Status {
    let cid = io.submit(sqe, &[]);
    io.expect_resp(cid).status()
}

/// The connection still works: a write and a read back.
fn still_works(io: &mut Host, lba: u64) {
    let data = pattern(4096, lba);
    let w = io.write(lba, &data);
    assert!(w.status().is_success(), "{:?}", w.status());
    let r = io.read(lba, 8);
    assert!(r.status().is_success() && r.data == data);
}

#[test]
fn flush_with_in_capsule_data_closes_the_connection() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let flush = Sqe {
        nsid: 1,
        ..Sqe::new(spec::nvm_opc::FLUSH, 0)
    };
    io.submit(flush, &[0xAA; 512]);
    io.expect_closed();
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn read_with_in_capsule_data_closes_the_connection() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    io.submit(rw_sqe(spec::nvm_opc::READ, 1, 0, 1), &[0xAA; 512]);
    io.expect_closed();
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn a_flush_without_data_succeeds() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let flush = Sqe {
        nsid: 1,
        ..Sqe::new(spec::nvm_opc::FLUSH, 0)
    };
    assert_eq!(no_data(&mut io, flush), Status::SUCCESS);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn unknown_opcodes_are_invalid_opcode() {
    let t = TestTarget::new();
    let (mut admin, mut io) = session(&t, Digests::NONE);
    // I/O: a vendor opcode, Compare, and a fabrics command on an I/O queue.
    for opcode in [0x85u8, 0x05, 0x7F] {
        let sqe = Sqe {
            nsid: 1,
            ..Sqe::new(opcode, 0)
        };
        assert_eq!(no_data(&mut io, sqe), Status::INVALID_OPCODE, "{opcode:#x}");
    }
    // Admin: a vendor opcode and Format NVM.
    for opcode in [0xC1u8, 0x80] {
        let r = admin.admin(admin_sqe(opcode, 0), 0);
        assert_eq!(r.status(), Status::INVALID_OPCODE, "{opcode:#x}");
    }
    // An unknown fabrics command type.
    let mut fab = admin_sqe(spec::admin_opc::FABRICS, 0);
    fab.set_fctype(0x10);
    let r = admin.admin(fab, 0);
    assert_eq!(r.status(), Status::INVALID_OPCODE);
    still_works(&mut io, 10);
    admin.keep_alive();
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn lba_ranges_past_the_end_are_out_of_range() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let past = [
        (NUM_BLOCKS - 4, 8),
        (NUM_BLOCKS, 1),
        (u64::MAX, 1),
        (u64::MAX - 2, 8),
    ];
    for (lba, n) in past {
        let cid = io.submit_read(1, lba, n);
        let r = io.wait(cid, &[]);
        assert_eq!(r.status(), Status::LBA_OUT_OF_RANGE, "read {lba}+{n}");
        assert!(r.data.is_empty());
        // In-capsule write.
        let cid = io.submit(
            rw_sqe(spec::nvm_opc::WRITE, 1, lba, n),
            &vec![1; n as usize * 512],
        );
        assert_eq!(
            io.expect_resp(cid).status(),
            Status::LBA_OUT_OF_RANGE,
            "write {lba}+{n}"
        );
        // A write through R2T is refused before any R2T.
        let cid = io.submit_r2t_write(lba, n.max(16));
        assert_eq!(io.expect_resp(cid).status(), Status::LBA_OUT_OF_RANGE);
        // Write Zeroes.
        let wz = rw_sqe(spec::nvm_opc::WRITE_ZEROES, 1, lba, n);
        assert_eq!(no_data(&mut io, wz), Status::LBA_OUT_OF_RANGE);
    }
    // The last block itself is fine.
    still_works(&mut io, NUM_BLOCKS - 8);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn unknown_namespaces_are_invalid_namespace() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    for nsid in [0u32, 2, 0xFFFF_FFFF] {
        let cid = io.submit_read(nsid, 0, 8);
        assert_eq!(io.wait(cid, &[]).status(), Status::INVALID_NAMESPACE);
        let cid = io.submit(rw_sqe(spec::nvm_opc::WRITE, nsid, 0, 1), &[1; 512]);
        assert_eq!(io.expect_resp(cid).status(), Status::INVALID_NAMESPACE);
        let flush = Sqe {
            nsid,
            ..Sqe::new(spec::nvm_opc::FLUSH, 0)
        };
        assert_eq!(no_data(&mut io, flush), Status::INVALID_NAMESPACE);
    }
    still_works(&mut io, 20);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn wrong_data_lengths_are_refused() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    // SGL length other than NLB × 512.
    let mut sqe = rw_sqe(spec::nvm_opc::READ, 1, 0, 8);
    sqe.set_sgl(SglDesc::transport(512));
    let cid = io.submit(sqe, &[]);
    assert_eq!(io.wait(cid, &[]).status(), Status::DATA_SGL_LENGTH_INVALID);
    // In-capsule data larger than the in-capsule size (8 KiB > 4 KiB).
    let cid = io.submit(rw_sqe(spec::nvm_opc::WRITE, 1, 0, 16), &[1; 8192]);
    assert_eq!(
        io.expect_resp(cid).status(),
        Status::DATA_SGL_LENGTH_INVALID
    );
    // More than the transport's max_io_size (128 KiB).
    let cid = io.submit_read(1, 0, 512);
    assert_eq!(io.wait(cid, &[]).status(), Status::INVALID_FIELD);
    still_works(&mut io, 30);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn a_command_before_connect_is_a_sequence_error_and_closes() {
    let t = TestTarget::new();
    let mut h = Host::connect(t.addr, Digests::NONE);
    let id = admin_sqe(spec::admin_opc::IDENTIFY, spec::cns::CONTROLLER);
    let r = h.admin(id, 4096);
    assert_eq!(r.status(), Status::COMMAND_SEQUENCE_ERROR);
    h.expect_closed();
    // An I/O command first, the same.
    let mut h = Host::connect(t.addr, Digests::NONE);
    let cid = h.submit_read(1, 0, 8);
    assert_eq!(h.expect_resp(cid).status(), Status::COMMAND_SEQUENCE_ERROR);
    h.expect_closed();
    drop(h);
    t.assert_healthy();
}

#[test]
fn admin_commands_before_cc_en_are_sequence_errors() {
    let t = TestTarget::new();
    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, 0);
    assert!(r.status().is_success());
    let id = admin_sqe(spec::admin_opc::IDENTIFY, spec::cns::CONTROLLER);
    let r = h.admin(id, 4096);
    assert_eq!(r.status(), Status::COMMAND_SEQUENCE_ERROR);
    h.enable();
    let r = h.admin(id, 4096);
    assert!(r.status().is_success());
    drop(h);
    t.assert_healthy();
}

/// Dword 0 of a Connect Invalid Parameters response: IATTR (1: in the data) and IPO.
fn invalid_param(iattr: u32, ipo: u32) -> u32 {
    iattr << 16 | ipo
}

#[test]
fn connect_to_an_unknown_subsystem_is_refused() {
    let t = TestTarget::new();
    let r = refused(&t, 0, 31, "nqn.2016-06.io.pmio:nope", HOSTNQN, 0xFFFF);
    assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(r.cqe.dw0, invalid_param(1, 256), "IPO names SUBNQN");
    // A new connection may try again.
    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, 0);
    assert!(r.status().is_success(), "{:?}", r.status());
    drop(h);
    t.assert_healthy();
}

/// A Connect on a new connection that the target refuses: its answer, after which the target
/// closes the connection (a host cannot pile up refusals).
fn refused(t: &TestTarget, qid: u16, sqsize: u16, nqn: &str, host: &str, cntlid: u16) -> Reply {
    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(qid, sqsize, nqn, host, cntlid, 0);
    assert!(!r.status().is_success(), "refused");
    assert!(
        h.try_recv().is_none(),
        "the connection is closed after a refused Connect"
    );
    r
}

#[test]
fn a_host_not_on_the_list_is_refused_until_added() {
    let t = TestTarget::start(TransportOpts::default(), false);
    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, 0);
    let st = r.status();
    assert_eq!(st, Status::CONNECT_INVALID_HOST);
    assert_eq!((st.sct(), st.sc()), (1, 0x84));
    assert!(t.tgt.controllers(NQN).unwrap().is_empty());
    drop(h);
    t.tgt.add_host(NQN, HOSTNQN).unwrap();
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    still_works(&mut io, 40);
    // Another host is still refused.
    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(0, 31, NQN, "nqn.2014-08.org.example:other", 0xFFFF, 0);
    assert_eq!(r.status(), Status::CONNECT_INVALID_HOST);
    drop((admin, io, h));
    t.assert_healthy();
}

#[test]
fn io_queue_connect_refusals() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    // A controller that does not exist.
    let r = refused(&t, 1, 127, NQN, HOSTNQN, cntlid + 100);
    assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(r.cqe.dw0, invalid_param(1, 16), "IPO names CNTLID");
    // Another host NQN than the admin queue's.
    let r = refused(&t, 1, 127, NQN, "nqn.2014-08.org.example:other", cntlid);
    assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(r.cqe.dw0, invalid_param(1, 512), "IPO names HOSTNQN");
    // QID beyond the 4 queues granted.
    let r = refused(&t, 5, 127, NQN, HOSTNQN, cntlid);
    assert_eq!(r.status(), Status::INVALID_QUEUE_IDENTIFIER);
    // SQSIZE too large (MQES 127) or 0.
    for sqsize in [128u16, 0xFFFF, 0] {
        let r = refused(&t, 1, sqsize, NQN, HOSTNQN, cntlid);
        assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS, "{sqsize}");
        assert_eq!(r.cqe.dw0, invalid_param(0, 44), "IPO names SQSIZE");
    }
    // After all that, queue 1 connects; a second queue 1 is refused.
    let mut h = Host::connect(t.addr, Digests::NONE);
    let r = h.fabrics_connect(1, 127, NQN, HOSTNQN, cntlid, 0);
    assert!(r.status().is_success(), "{:?}", r.status());
    still_works(&mut h, 50);
    let mut h2 = Host::connect(t.addr, Digests::NONE);
    let r = h2.fabrics_connect(1, 127, NQN, HOSTNQN, cntlid, 0);
    assert_eq!(r.status(), Status::INVALID_QUEUE_IDENTIFIER);
    drop((admin, h, h2));
    t.assert_healthy();
}

#[test]
fn admin_connect_refusals() {
    let t = TestTarget::new();
    // SQSIZE beyond max_aq_depth.
    let r = refused(&t, 0, 128, NQN, HOSTNQN, 0xFFFF);
    assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(r.cqe.dw0, invalid_param(0, 44));
    // A static controller ID.
    let r = refused(&t, 0, 31, NQN, HOSTNQN, 1);
    assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(r.cqe.dw0, invalid_param(1, 16));
    // Connect data short of 1024 bytes.
    let mut h = Host::connect(t.addr, Digests::NONE);
    let mut sqe = Sqe {
        cdw11: 31,
        ..Sqe::new(spec::admin_opc::FABRICS, 0)
    };
    sqe.set_fctype(spec::fctype::CONNECT);
    let data = common::connect_data(NQN, HOSTNQN, 0xFFFF);
    let cid = h.submit(sqe, &data[..512]);
    assert_eq!(h.expect_resp(cid).status(), Status::DATA_SGL_LENGTH_INVALID);
    assert!(h.try_recv().is_none(), "closed after the refusal");
    assert!(t.tgt.controllers(NQN).unwrap().is_empty());
    drop(h);
    t.assert_healthy();
}

#[test]
fn controller_ids_go_round_robin_and_run_out() {
    let t = TestTarget::new();
    // A second subsystem with room for two controllers, on the same address.
    let nqn2 = "nqn.2016-06.io.pmio:two";
    t.tgt
        .create_subsystem(&pmio_nvmf::SubsystemParams {
            nqn: nqn2.into(),
            allow_any_host: true,
            min_cntlid: Some(5),
            max_cntlid: Some(6),
            ..pmio_nvmf::SubsystemParams::default()
        })
        .unwrap();
    let la = pmio_nvmf::ListenAddr::new("127.0.0.1", &t.addr.port().to_string(), None).unwrap();
    t.tgt.add_listener(nqn2, la).unwrap();
    let connect = || {
        let mut h = Host::connect(t.addr, Digests::NONE);
        let r = h.fabrics_connect(0, 31, nqn2, HOSTNQN, 0xFFFF, 0);
        (h, r)
    };
    let gone = |n: usize| {
        assert!(common::wait_until(common::SETTLE_TIMEOUT, || {
            t.tgt.controllers(nqn2).unwrap().len() == n
        }));
    };
    let (a, ra) = connect();
    assert_eq!(ra.cqe.dw0, 5);
    drop(a);
    gone(0);
    // Not 5 again at once, though it is free.
    let (b, rb) = connect();
    assert_eq!(rb.cqe.dw0, 6);
    let (c, rc) = connect();
    assert_eq!(rc.cqe.dw0, 5, "round robin wraps within the range");
    // Both IDs in use: the next host is told to come back later.
    let (d, rd) = connect();
    assert_eq!(rd.status(), Status::CONNECT_CONTROLLER_BUSY);
    drop((b, c, d));
    gone(0);
    // The first subsystem counts on its own range.
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    assert!((1..=0xFFEF).contains(&cntlid));
    drop(admin);
    t.assert_healthy();
}

/// The controller, on the reactor that owns it, decides on an I/O queue: not before the host
/// enabled it (CC.EN with the queue entry sizes), then only up to the queues it granted.
#[test]
fn io_queues_wait_for_the_controller_to_be_enabled() {
    let t = TestTarget::new();
    let mut admin = Host::connect(t.addr, Digests::NONE);
    let r = admin.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, 0);
    assert!(r.status().is_success(), "{:?}", r.status());
    let cntlid = r.cqe.dw0 as u16;
    let r = refused(&t, 1, 127, NQN, HOSTNQN, cntlid);
    assert_eq!(r.status(), Status::CONNECT_INVALID_PARAMETERS);
    admin.prop_set(0x14, 6 << 16 | 4 << 20 | 1);
    assert_eq!(admin.prop_get(0x1c, false) & 1, 1, "CSTS.RDY");
    // Queues on both reactors (connections go round robin), each asking the controller.
    let mut ios: Vec<Host> = (1..=2)
        .map(|qid| Host::io_queue(t.addr, Digests::NONE, cntlid, qid))
        .collect();
    for (i, io) in ios.iter_mut().enumerate() {
        let data = pattern(4096, 70 + i as u64);
        assert!(io.write(8 * i as u64, &data).status().is_success());
        assert_eq!(io.read(8 * i as u64, 8).data, data);
    }
    drop((admin, ios));
    t.assert_healthy();
}
