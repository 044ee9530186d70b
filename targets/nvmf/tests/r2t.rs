//! Writes through R2T/H2CData that go wrong, queues overrun, and a host that sends faster than
//! it reads: the connection at fault is answered as the spec says and closed; a write whose
//! data did not all arrive is never acknowledged nor executed; everyone else is served.

mod common;

use std::collections::HashSet;

use common::{DIGESTS, Host, TestTarget, pattern, session};
use pmio_nvmf::pdu::{Digests, Fes, Header};

/// Sends an R2T write of `nblocks` at `lba` and returns its CID and R2T.
fn start_write(io: &mut Host, lba: u64, nblocks: u32) -> (u16, pmio_nvmf::pdu::R2T) {
    let cid = io.submit_r2t_write(lba, nblocks);
    let r2t = io.expect_r2t(cid);
    assert_eq!(
        (r2t.r2to, r2t.r2tl),
        (0, nblocks * 512),
        "one R2T for all of it"
    );
    (cid, r2t)
}

/// Runs `bad` on an I/O queue with a write waiting for its 8 KiB of data, expects the
/// C2HTermReq `fes` (and `fei` when given), then checks the write was not executed and the
/// target is healthy.
fn h2c_refused(
    digests: Digests,
    fes: Fes,
    fei: Option<u32>,
    bad: impl FnOnce(&mut Host, u16, u16),
) {
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, digests);
    let old = pattern(8192, 1);
    assert!(io.write(500, &old).status().is_success());
    let (cid, r2t) = start_write(&mut io, 500, 16);
    bad(&mut io, cid, r2t.ttag);
    let (term, echoed) = io.expect_term_req(fes);
    if let Some(fei) = fei {
        assert_eq!(term.fei, fei, "{term:?}");
    }
    assert!(echoed.len() >= 8, "the offending header is echoed");
    assert_eq!(echoed[0], 0x06, "the echoed header is the H2CData's");
    drop(io);
    let cntlid = t.tgt.controllers(common::NQN).unwrap()[0].cntlid;
    let mut io = Host::io_queue(t.addr, digests, cntlid, 2);
    let r = io.read(500, 16);
    assert!(r.status().is_success());
    assert!(r.data == old, "a refused write changed the data");
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn h2c_data_with_a_wrong_ttag_is_terminated() {
    // The tag of a slot that awaits nothing.
    h2c_refused(
        Digests::NONE,
        Fes::InvalidHeaderField,
        Some(10),
        |io, cid, ttag| {
            io.h2c(cid, ttag ^ 1, 0, true, &pattern(8192, 2));
        },
    );
    // A tag beyond the queue.
    h2c_refused(DIGESTS, Fes::InvalidHeaderField, Some(10), |io, cid, _| {
        io.h2c(cid, 0xFFFF, 0, true, &pattern(8192, 2));
    });
}

#[test]
fn h2c_data_with_a_wrong_cccid_is_terminated() {
    h2c_refused(
        Digests::NONE,
        Fes::InvalidHeaderField,
        Some(8),
        |io, cid, ttag| {
            io.h2c(cid.wrapping_add(7), ttag, 0, true, &pattern(8192, 2));
        },
    );
}

#[test]
fn h2c_data_at_an_unexpected_offset_is_terminated() {
    // Not starting at 0.
    h2c_refused(Digests::NONE, Fes::DataOutOfRange, None, |io, cid, ttag| {
        io.h2c(cid, ttag, 512, true, &pattern(7680, 2));
    });
    // A gap between two pieces.
    h2c_refused(Digests::NONE, Fes::DataOutOfRange, None, |io, cid, ttag| {
        let d = pattern(8192, 2);
        io.h2c(cid, ttag, 0, false, &d[..2048]);
        io.h2c(cid, ttag, 4096, true, &d[4096..]);
    });
    // A piece sent twice.
    h2c_refused(DIGESTS, Fes::DataOutOfRange, None, |io, cid, ttag| {
        let d = pattern(8192, 2);
        io.h2c(cid, ttag, 0, false, &d[..4096]);
        io.h2c(cid, ttag, 0, false, &d[..4096]);
    });
}

#[test]
fn h2c_data_beyond_what_was_asked_is_terminated() {
    h2c_refused(Digests::NONE, Fes::DataOutOfRange, None, |io, cid, ttag| {
        io.h2c(cid, ttag, 0, true, &pattern(8704, 2));
    });
    h2c_refused(Digests::NONE, Fes::DataOutOfRange, None, |io, cid, ttag| {
        let d = pattern(12288, 2);
        io.h2c(cid, ttag, 0, false, &d[..8192]);
        io.h2c(cid, ttag, 8192, true, &d[8192..]);
    });
}

#[test]
fn h2c_data_with_last_missing_or_early_is_terminated() {
    // All the data, LAST never set.
    h2c_refused(Digests::NONE, Fes::DataOutOfRange, None, |io, cid, ttag| {
        io.h2c(cid, ttag, 0, false, &pattern(8192, 2));
    });
    // LAST on the first of two pieces.
    h2c_refused(Digests::NONE, Fes::DataOutOfRange, None, |io, cid, ttag| {
        io.h2c(cid, ttag, 0, true, &pattern(4096, 2));
    });
}

#[test]
fn h2c_data_for_a_command_that_awaits_none_is_terminated() {
    // A read's CID with a tag of its own choosing: nothing awaits data.
    let t = TestTarget::new();
    let (admin, mut io) = session(&t, Digests::NONE);
    let cid = io.submit_read(1, 0, 8);
    let r = io.wait(cid, &[]);
    assert!(r.status().is_success());
    io.h2c(cid, 0, 0, true, &pattern(4096, 3));
    let (term, _) = io.expect_term_req(Fes::InvalidHeaderField);
    assert_eq!(term.fei, 10);
    drop((admin, io));
    t.assert_healthy();
}

/// A write whose data stops short, then the host goes: no response ever, no change on disk.
fn write_cut_short(send_part: impl FnOnce(&mut Host, u16, u16, &[u8])) {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    let old = pattern(65536, 4);
    assert!(io.write(1000, &old).status().is_success());
    let new = pattern(65536, 5);
    let (cid, r2t) = start_write(&mut io, 1000, 128);
    send_part(&mut io, cid, r2t.ttag, &new);
    // A read behind it on the same queue is answered, the write is not.
    let rcid = io.submit_read(1, 4000, 8);
    let r = io.wait(rcid, &[]);
    assert!(r.status().is_success(), "{:?}", r.status());
    io.shutdown_write();
    // Nothing more comes: no CapsuleResp for the write, ever.
    io.expect_closed();
    drop(io);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 2);
    let r = io.read(1000, 128);
    assert!(r.status().is_success());
    assert!(
        r.data == old,
        "a write whose data never all arrived changed the data"
    );
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn a_write_whose_data_never_all_arrives_is_never_acknowledged() {
    // Half of the data in whole PDUs.
    write_cut_short(|io, cid, ttag, d| {
        io.h2c(cid, ttag, 0, false, &d[..32768]);
    });
    // No data at all.
    write_cut_short(|_, _, _, _| {});
}

#[test]
fn a_host_that_vanishes_mid_h2c_data_pdu() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, DIGESTS, 0);
    let mut io = Host::io_queue(t.addr, DIGESTS, cntlid, 1);
    let old = pattern(65536, 6);
    assert!(io.write(2000, &old).status().is_success());
    let (cid, r2t) = start_write(&mut io, 2000, 128);
    let h = Header::H2CData(pmio_nvmf::pdu::H2CData {
        cccid: cid,
        ttag: r2t.ttag,
        datao: 0,
        last: true,
    });
    let bytes = io.encode(&h, &pattern(65536, 7));
    io.send_raw(&bytes[..bytes.len() - 1000]);
    io.shutdown_write();
    io.expect_closed();
    drop(io);
    let mut io = Host::io_queue(t.addr, DIGESTS, cntlid, 2);
    let r = io.read(2000, 128);
    assert!(
        r.data == old,
        "a write whose last PDU was cut changed the data"
    );
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn more_commands_than_the_queue_holds_end_the_connection() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    // SQSIZE 3: 4 entries. Writes waiting for their data hold their entries.
    let mut io = Host::io_queue_sized(t.addr, Digests::NONE, cntlid, 1, 3);
    let cids: Vec<u16> = (0..5).map(|i| io.submit_r2t_write(100 * i, 8)).collect();
    for &cid in &cids[..4] {
        io.expect_r2t(cid);
    }
    io.expect_closed();
    // The controller's other queue is fine.
    let mut io2 = Host::io_queue(t.addr, Digests::NONE, cntlid, 2);
    let data = pattern(4096, 8);
    assert!(io2.write(3000, &data).status().is_success());
    assert!(io2.read(3000, 8).data == data);
    drop((admin, io, io2));
    t.assert_healthy();
}

#[test]
fn a_full_queue_within_its_size_is_fine() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue_sized(t.addr, Digests::NONE, cntlid, 1, 3);
    for round in 0..3 {
        common::assert_slots_free(&mut io, 4, 4000 + 100 * round);
    }
    drop((admin, io));
    t.assert_healthy();
}

/// A host sends a queue's worth of 128 KiB reads and reads nothing back for a while: the
/// target's output backs up in its socket, yet it serves other connections meanwhile, and
/// every read completes once the host reads.
#[test]
fn a_host_that_writes_faster_than_it_reads() {
    let t = TestTarget::new();
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    let data: Vec<Vec<u8>> = (0..4).map(|i| pattern(131072, 100 + i)).collect();
    for (i, d) in data.iter().enumerate() {
        assert!(io.write(256 * i as u64, d).status().is_success());
    }
    // 128 reads of 128 KiB (16 MiB), nothing read back yet.
    let mut cids = Vec::new();
    for i in 0..128u64 {
        cids.push((io.submit_read(1, 256 * (i % 4), 256), (i % 4) as usize));
    }
    assert_eq!(cids.iter().map(|c| c.0).collect::<HashSet<_>>().len(), 128);
    // Meanwhile: other controllers, on both reactors, are served.
    t.assert_serving();
    t.assert_serving();
    let replies = io.collect(128);
    for (cid, i) in cids {
        let r = &replies[&cid];
        assert!(r.status().is_success(), "read {cid}: {:?}", r.status());
        assert!(r.data == data[i], "read {cid} returned other data");
    }
    drop((admin, io));
    t.assert_no_leaks();
}
