//! Random input after a valid ICReq and Connect never hurts the target: whatever a connection
//! sends, the target answers or closes it, closes it once the host goes, keeps serving other
//! connections on both reactors and gives back every queue pair, bdev I/O and buffer.
//!
//! The input is a few chunks: raw bytes, well-formed Reads and Writes (in-capsule or through
//! R2T) and H2CData following them, well-framed PDUs with random fields (command capsules,
//! H2CData; digests right when negotiated) and valid PDUs with one byte changed: weighted
//! towards what gets past the codec, so that command handling, R2T and bdev I/O are reached.
//! 64 cases (`PROPTEST_CASES` for more; 10,000 pass in release in about 30 s).

mod common;

use std::cell::{Cell, RefCell};

use common::{DIGESTS, Host, SETTLE_TIMEOUT, TestTarget, wait_until};
use pmio_nvmf::pdu::{self, Digests, Header};
use pmio_nvmf::spec::{SglDesc, Sqe};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// One piece of what the fuzzed connection sends.
#[derive(Clone, Debug)]
enum Chunk {
    Raw(Vec<u8>),
    Capsule {
        sqe: Sqe,
        data: Vec<u8>,
    },
    H2C {
        h: pdu::H2CData,
        data: Vec<u8>,
    },
    /// A well-formed Read or Write of namespace 1 (in-capsule data when `in_capsule` and it
    /// fits, else through R2T), so that bdev I/O happens.
    Io {
        write: bool,
        lba: u64,
        nblocks: u32,
        in_capsule: bool,
        cid: u16,
    },
    /// H2CData for the last capsule sent (its CID; the first slots' tags): data for an R2T.
    FollowUp {
        ttag: u16,
        datao: u32,
        last: bool,
        data: Vec<u8>,
    },
    /// A valid PDU (a capsule with `data`, or H2CData when `h2c`) with byte `at` (modulo its
    /// length) replaced by `val`.
    Mutated {
        h2c: bool,
        data: Vec<u8>,
        at: usize,
        val: u8,
    },
}

#[derive(Clone, Debug)]
struct Case {
    digests: bool,
    /// An I/O queue of the long-lived controller, else the admin queue of a new one.
    io_queue: bool,
    chunks: Vec<Chunk>,
}

fn small_or_any_u32(small: u32) -> impl Strategy<Value = u32> {
    prop_oneof![0..=small, any::<u32>()]
}

fn sqe() -> impl Strategy<Value = Sqe> {
    let opcode = prop_oneof![
        // Flush, Write, Read, Write Zeroes, DSM / Set Features, Identify, AER, Keep Alive,
        // Get Log Page, fabrics, anything.
        prop::sample::select(vec![
            0x00u8, 0x01, 0x02, 0x08, 0x09, 0x06, 0x0C, 0x18, 0x02, 0x7F
        ]),
        any::<u8>(),
    ];
    let nsid = prop_oneof![0..=3u32, Just(u32::MAX), any::<u32>()];
    let sgl_type = prop_oneof![prop::sample::select(vec![0x01u8, 0x5A, 0x00]), any::<u8>()];
    (
        opcode,
        nsid,
        any::<u16>(),
        sgl_type,
        small_or_any_u32(140_000),
        small_or_any_u32(40_000),
        small_or_any_u32(16),
        small_or_any_u32(300),
        any::<u32>(),
    )
        .prop_map(
            |(opcode, nsid, cid, sgl_type, len, cdw10, cdw11, cdw12, cdw13)| {
                let mut s = Sqe {
                    nsid,
                    cdw10,
                    cdw11,
                    cdw12,
                    cdw13,
                    ..Sqe::new(opcode, cid)
                };
                s.set_sgl(SglDesc {
                    len,
                    sgl_type,
                    ..SglDesc::default()
                });
                s
            },
        )
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(any::<u8>(), 0..1100),
    ]
}

fn chunk() -> impl Strategy<Value = Chunk> {
    let h2c = (
        0..8u16,
        0..8u16,
        small_or_any_u32(9000),
        any::<bool>(),
        data(),
    )
        .prop_map(|(cccid, ttag, datao, last, data)| Chunk::H2C {
            h: pdu::H2CData {
                cccid,
                ttag,
                datao,
                last,
            },
            data,
        });
    let io = (
        any::<bool>(),
        0..common::NUM_BLOCKS,
        1..=256u32,
        any::<bool>(),
        any::<u16>(),
    )
        .prop_map(|(write, lba, nblocks, in_capsule, cid)| Chunk::Io {
            write,
            lba,
            nblocks,
            in_capsule,
            cid,
        });
    let datao = prop_oneof![
        prop::sample::select(vec![0u32, 512, 4096, 8192]),
        any::<u32>()
    ];
    let follow_up =
        (0..3u16, datao, any::<bool>(), data()).prop_map(|(ttag, datao, last, data)| {
            Chunk::FollowUp {
                ttag,
                datao,
                last,
                data,
            }
        });
    let mutated = (any::<bool>(), data(), any::<usize>(), any::<u8>())
        .prop_map(|(h2c, data, at, val)| Chunk::Mutated { h2c, data, at, val });
    // Mostly well-framed commands: most other chunks end the connection at once.
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Chunk::Raw),
        6 => io,
        4 => (sqe(), data()).prop_map(|(sqe, data)| Chunk::Capsule { sqe, data }),
        1 => h2c,
        3 => follow_up,
        2 => mutated,
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(chunk(), 1..8),
    )
        .prop_map(|(digests, io_queue, chunks)| Case {
            digests,
            io_queue,
            chunks,
        })
}

/// The bytes of `c`, framed and digested as the connection negotiated; `last_cid` is the CID
/// of the last capsule sent.
fn bytes(h: &Host, c: &Chunk, last_cid: &mut u16) -> Vec<u8> {
    let capsule =
        |sqe: &Sqe, data: &[u8]| h.encode(&Header::CapsuleCmd(pdu::CapsuleCmd::new(sqe)), data);
    match c {
        Chunk::Raw(b) => b.clone(),
        Chunk::Capsule { sqe, data } => {
            *last_cid = sqe.cid();
            capsule(sqe, data)
        }
        Chunk::H2C { h: d, data } => h.encode(&Header::H2CData(*d), data),
        &Chunk::Io {
            write,
            lba,
            nblocks,
            in_capsule,
            cid,
        } => {
            use pmio_nvmf::spec::nvm_opc;
            let opcode = if write { nvm_opc::WRITE } else { nvm_opc::READ };
            let mut sqe = common::rw_sqe(opcode, 1, lba, nblocks);
            sqe.set_cid(cid);
            *last_cid = cid;
            let len = nblocks * 512;
            if write && in_capsule && len <= 4096 {
                sqe.set_sgl(SglDesc::in_capsule(len));
                capsule(&sqe, &common::pattern(len as usize, lba))
            } else {
                sqe.set_sgl(SglDesc::transport(len));
                capsule(&sqe, &[])
            }
        }
        Chunk::FollowUp {
            ttag,
            datao,
            last,
            data,
        } => {
            let d = pdu::H2CData {
                cccid: *last_cid,
                ttag: *ttag,
                datao: *datao,
                last: *last,
            };
            h.encode(&Header::H2CData(d), data)
        }
        Chunk::Mutated { h2c, data, at, val } => {
            let mut b = if *h2c {
                let d = pdu::H2CData {
                    cccid: 1,
                    ttag: 0,
                    datao: 0,
                    last: true,
                };
                h.encode(&Header::H2CData(d), data)
            } else {
                let mut sqe = common::rw_sqe(pmio_nvmf::spec::nvm_opc::WRITE, 1, 0, 1);
                sqe.set_sgl(SglDesc::in_capsule(data.len() as u32));
                capsule(&sqe, data)
            };
            let i = at % b.len();
            b[i] = *val;
            b
        }
    }
}

#[test]
fn prop_random_input_after_connect_never_hurts_the_target() {
    let t = TestTarget::new();
    // A long-lived controller: its admin queue on the first reactor, its I/O queue on the
    // second. Both must keep working through every case.
    let (admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    let data = common::pattern(4096, 9);
    assert!(io.write(8000, &data).status().is_success());
    let (admin, io) = (RefCell::new(admin), RefCell::new(io));
    let next_qid = Cell::new(2u16);

    // 64 cases by default (a few milliseconds each); PROPTEST_CASES asks for more.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| {
        let digests = if case.digests { DIGESTS } else { Digests::NONE };
        let mut fuzzed = if case.io_queue {
            // QIDs 2..=4 in turn: the previous case's queue is gone by now (checked below).
            let qid = next_qid.get();
            next_qid.set(if qid == 4 { 2 } else { qid + 1 });
            Host::io_queue(t.addr, digests, cntlid, qid)
        } else {
            Host::admin_queue(t.addr, digests, 0).0
        };
        let mut last_cid = 0;
        for c in &case.chunks {
            let b = bytes(&fuzzed, c, &mut last_cid);
            fuzzed.send_raw_lossy(&b);
        }
        // The host goes: the target must close its end.
        fuzzed.shutdown_write();
        if !fuzzed.closed_within(SETTLE_TIMEOUT) {
            return Err(TestCaseError::fail("the target kept the connection open"));
        }
        drop(fuzzed);
        // Both reactors still serve the long-lived controller.
        admin.borrow_mut().keep_alive();
        let r = io.borrow_mut().read(8000, 8);
        if !r.status().is_success() || r.data != data {
            return Err(TestCaseError::fail(format!("read back: {:?}", r.status())));
        }
        // Everything of the fuzzed connection is given back.
        let settled = wait_until(SETTLE_TIMEOUT, || {
            let s = t.stats();
            let ctrlrs = t.tgt.controllers(common::NQN).unwrap();
            s.current_admin_qpairs == 1
                && s.current_io_qpairs == 1
                && s.pending_bdev_io == 0
                && s.buffers_in_use == 0
                && ctrlrs.len() == 1
                && ctrlrs[0].qpairs.len() == 2
        });
        if !settled {
            return Err(TestCaseError::fail(format!(
                "left behind: {:?} {:?}",
                t.stats(),
                t.tgt.controllers(common::NQN).unwrap()
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    drop((admin, io));
    t.assert_healthy();
}
