//! Malformed, truncated and oversized PDUs, wrong digests and PDUs out of sequence: the
//! connection that sent them gets the spec's answer (a C2HTermReq with the right Fatal Error
//! Status, then a close; a Transient Transport Error for damaged data), and the target keeps
//! serving everyone else with nothing left behind.

mod common;

use common::{
    DIGESTS, Host, TestTarget, assert_slots_free, icreq_header, is_transient_transport_error,
    pattern, rw_sqe, session,
};
use pmio_nvmf::pdu::{self, Digests, Fes, Header, Link, Side};
use pmio_nvmf::spec::{self, SglDesc};

/// A Read capsule's bytes (no data).
fn read_capsule(h: &mut Host) -> Vec<u8> {
    let mut sqe = rw_sqe(spec::nvm_opc::READ, 1, 0, 8);
    sqe.set_cid(h.cid());
    sqe.set_sgl(SglDesc::transport(4096));
    h.encode_cmd(&mut sqe, &[])
}

/// An in-capsule Write capsule's bytes.
fn write_capsule(h: &mut Host, lba: u64, data: &[u8]) -> (u16, Vec<u8>) {
    let mut sqe = rw_sqe(
        spec::nvm_opc::WRITE,
        1,
        lba,
        data.len().div_ceil(512) as u32,
    );
    sqe.set_cid(h.cid());
    (sqe.cid(), h.encode_cmd(&mut sqe, data))
}

#[test]
fn unknown_pdu_type_is_terminated() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let mut bad = vec![0u8; 24];
    bad[0] = 0x0B;
    bad[2] = 24;
    bad[4..8].copy_from_slice(&24u32.to_le_bytes());
    io.send_raw(&bad);
    let (term, echoed) = io.expect_term_req(Fes::InvalidHeaderField);
    assert_eq!(term.fei, 0, "FEI names PDU-TYPE");
    assert_eq!(echoed, bad, "the offending header is echoed");
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn a_pdu_only_the_controller_sends_is_terminated() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    // A C2HData, encoded as the controller would.
    let ctrl = Link::new(Side::Controller, pdu::max_plen_for_data(4096));
    let c2h = Header::C2HData(pdu::C2HData {
        cccid: 1,
        datao: 0,
        last: true,
        success: false,
    });
    let mut head = [0u8; pdu::MAX_HEAD_LEN];
    let enc = pdu::encode(&c2h, 512, &ctrl, &mut head).unwrap();
    let mut bytes = head[..enc.head_len].to_vec();
    bytes.extend_from_slice(&[0x5a; 512]);
    io.send_raw(&bytes);
    let (term, _) = io.expect_term_req(Fes::InvalidHeaderField);
    assert_eq!(term.fei, 0);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn wrong_hlen_is_terminated() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let mut bad = read_capsule(&mut io);
    bad[2] = 70;
    io.send_raw(&bad);
    let (term, echoed) = io.expect_term_req(Fes::InvalidHeaderField);
    assert_eq!(term.fei, 2, "FEI names HLEN");
    assert_eq!(echoed[..8], bad[..8]);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn pdo_beyond_plen_is_terminated() {
    let t = TestTarget::new();
    let (mut admin, mut io) = session(&t, Digests::NONE);
    // On the admin queue this time: a capsule with 64 bytes of data (PLEN 136) whose PDO
    // points past the end of the PDU.
    let (_, mut bad) = write_capsule(&mut admin, 0, &[1; 64]);
    assert_eq!(u32::from_le_bytes(bad[4..8].try_into().unwrap()), 136);
    bad[3] = 140;
    admin.send_raw(&bad);
    let (term, _) = admin.expect_term_req(Fes::InvalidHeaderField);
    assert_eq!(term.fei, 3, "FEI names PDO");
    // The admin queue takes its controller and I/O queue with it.
    assert!(
        io.closed_within(common::SETTLE_TIMEOUT),
        "the I/O queue outlived its admin queue"
    );
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn oversized_pdu_is_refused_before_its_data() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    // A capsule claiming 1 MiB of in-capsule data: only its header is ever sent, the target
    // must not wait for (or buffer) the rest.
    let mut bad = read_capsule(&mut io);
    bad[3] = 72;
    bad[4..8].copy_from_slice(&(72u32 + (1 << 20)).to_le_bytes());
    io.send_raw(&bad);
    io.expect_term_req(Fes::DataLimitExceeded);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn truncated_pdu_then_close_is_never_executed() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let old = pattern(4096, 11);
    assert!(io.write(100, &old).status().is_success());
    // Half of a write capsule, then the host vanishes.
    let (_, bytes) = write_capsule(&mut io, 100, &pattern(4096, 12));
    io.send_raw(&bytes[..bytes.len() / 2]);
    io.shutdown_write();
    io.expect_closed();
    drop(io);
    let mut io = Host::io_queue(t.addr, Digests::NONE, admin_cntlid(&t), 2);
    let r = io.read(100, 8);
    assert!(r.status().is_success());
    assert!(
        r.data == old,
        "a write whose capsule never fully arrived changed the data"
    );
    drop((admin, io));
    t.assert_healthy();
}

/// The one controller of the test target.
fn admin_cntlid(t: &TestTarget) -> u16 {
    let c = t.tgt.controllers(common::NQN).unwrap();
    assert_eq!(c.len(), 1, "{c:?}");
    c[0].cntlid
}

#[test]
fn truncated_header_then_close() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    // Five bytes of a common header, then nothing.
    let bytes = read_capsule(&mut io);
    io.send_raw(&bytes[..5]);
    io.shutdown_write();
    io.expect_closed();
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn wrong_header_digest_is_terminated() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, DIGESTS);
    let mut bad = read_capsule(&mut io);
    bad[72] ^= 0xff;
    let received = u32::from_le_bytes(bad[72..76].try_into().unwrap());
    io.send_raw(&bad);
    let (term, _) = io.expect_term_req(Fes::HeaderDigestError);
    assert_eq!(term.fei, received, "FEI holds the digest received");
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn wrong_data_digest_of_a_write_capsule_fails_only_that_command() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, DIGESTS, 0);
    // A small queue (4 entries), so that a slot the failed commands kept would show.
    let mut io = Host::io_queue_sized(t.addr, DIGESTS, cntlid, 1, 3);
    let old = pattern(4096, 21);
    assert!(io.write(200, &old).status().is_success());
    for round in 0..6 {
        let (cid, mut bad) = write_capsule(&mut io, 200, &pattern(4096, 22 + round));
        let n = bad.len();
        bad[n - 1] ^= 0x01;
        // A good command right behind it, in the same segment: the stream goes on.
        let mut read = rw_sqe(spec::nvm_opc::READ, 1, 200, 8);
        read.set_cid(io.cid());
        read.set_sgl(SglDesc::transport(4096));
        bad.extend_from_slice(&io.encode_cmd(&mut read, &[]));
        io.send_raw(&bad);
        let cqe = io.expect_resp(cid);
        assert!(
            is_transient_transport_error(cqe.status()),
            "round {round}: {:?}",
            cqe.status()
        );
        let r = io.wait(read.cid(), &[]);
        assert!(r.status().is_success());
        assert!(
            r.data == old,
            "a write with a damaged data digest was executed"
        );
    }
    // The connection goes on, the damaged writes were not executed, no slot was lost.
    let r = io.read(200, 8);
    assert!(r.status().is_success());
    assert!(
        r.data == old,
        "a write with a damaged data digest was executed"
    );
    assert_slots_free(&mut io, 4, 1000);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn wrong_data_digest_of_h2c_data_fails_only_that_command() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, DIGESTS, 0);
    let mut io = Host::io_queue_sized(t.addr, DIGESTS, cntlid, 1, 3);
    let old = pattern(16384, 31);
    assert!(io.write(300, &old).status().is_success());
    let new = pattern(16384, 32);
    for pieces in [1usize, 2, 4] {
        for bad_piece in 0..pieces {
            let cid = io.submit_r2t_write(300, 32);
            let r2t = io.expect_r2t(cid);
            assert_eq!(r2t.r2tl, 16384);
            let step = 16384 / pieces;
            for i in 0..pieces {
                let h = Header::H2CData(pdu::H2CData {
                    cccid: cid,
                    ttag: r2t.ttag,
                    datao: (i * step) as u32,
                    last: i + 1 == pieces,
                });
                let mut bytes = io.encode(&h, &new[i * step..(i + 1) * step]);
                if i == bad_piece {
                    let n = bytes.len();
                    bytes[n - 2] ^= 0x40;
                }
                io.send_raw(&bytes);
            }
            let cqe = io.expect_resp(cid);
            assert!(
                is_transient_transport_error(cqe.status()),
                "{pieces} pieces, piece {bad_piece} damaged: {:?}",
                cqe.status()
            );
        }
    }
    let r = io.read(300, 32);
    assert!(r.status().is_success());
    assert!(r.data == old, "a write with damaged data was executed");
    assert_slots_free(&mut io, 4, 2000);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn second_icreq_is_a_sequence_error() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    io.send(&icreq_header(Digests::NONE), &[]);
    io.expect_term_req(Fes::PduSequenceError);
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn a_capsule_before_icreq_is_a_sequence_error() {
    let t = TestTarget::new();
    let mut h = Host::tcp(t.addr);
    let bytes = read_capsule(&mut h);
    h.send_raw(&bytes);
    h.expect_term_req(Fes::PduSequenceError);
    drop(h);
    t.assert_healthy();
}

#[test]
fn icreq_with_another_pfv_is_refused() {
    let t = TestTarget::new();
    let mut h = Host::tcp(t.addr);
    let mut bytes = h.encode(&icreq_header(Digests::NONE), &[]);
    bytes[8] = 1;
    h.send_raw(&bytes);
    let (term, _) = h.expect_term_req(Fes::InvalidHeaderField);
    assert_eq!(term.fei, 8, "FEI names PFV");
    drop(h);
    t.assert_healthy();
}

#[test]
fn host_term_req_closes_without_an_answer() {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let term = Header::H2CTermReq(pdu::TermReq {
        fes: Fes::PduSequenceError as u16,
        fei: 0,
    });
    io.send(&term, &[0; 24]);
    io.expect_closed();
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn a_silent_connection_does_not_hold_up_others() {
    let t = TestTarget::new();
    // Connected, never says anything (the ICReq deadline is long: it just sits there).
    let idle = Host::tcp(t.addr);
    let half = {
        let mut h = Host::tcp(t.addr);
        h.send_raw(&[0u8; 3]);
        h
    };
    t.assert_serving();
    drop((idle, half));
    t.assert_no_leaks();
}
