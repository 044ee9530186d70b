//! Bad input from the target: a proxy in front of pmio's target rewrites one PDU on an I/O
//! connection (garbage, a TermReq, a response to a command never sent, C2HData past the
//! buffer, a wrong data digest). The host fails that connection, reconnects, resubmits, and
//! the I/O completes once with the right data; another controller is not disturbed.

mod tcp_common;

use pmio::DriverQueue;
use pmio::request::Op;
use pmio_nvme::tcp::{self, TcpOptions};
use tcp_common::proxy::{Dir, Proxy};
use tcp_common::*;

/// What the proxy does to the first PDU of its kind on an I/O connection once armed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// Any PDU replaced by one of an unknown type.
    Garbage,
    /// Any PDU replaced by a C2HTermReq.
    TermReq,
    /// A CapsuleResp's CID changed to one never sent.
    UnknownCid,
    /// A C2HData made 4 KiB longer than its read's buffer.
    PastBuffer,
    /// A C2HData's first data byte flipped (data digests on).
    BadDigest,
}

impl Fault {
    /// Rewrites `pdu` if it is the kind this fault hits.
    fn apply(self, pdu: &mut Vec<u8>) -> bool {
        let ty = pdu[0];
        match self {
            Fault::Garbage => *pdu = [&[0xee, 0, 24, 0, 24, 0, 0, 0][..], &[0; 16]].concat(),
            Fault::TermReq => {
                let mut t = vec![0u8; 24];
                t[..8].copy_from_slice(&[0x03, 0, 24, 0, 24, 0, 0, 0]);
                t[8] = 0x01;
                *pdu = t;
            }
            Fault::UnknownCid if ty == 0x05 => {
                pdu[20..22].copy_from_slice(&0x0fffu16.to_le_bytes())
            }
            Fault::PastBuffer if ty == 0x07 => {
                let datal = u32::from_le_bytes(pdu[16..20].try_into().unwrap()) + 4096;
                let plen = u32::from_le_bytes(pdu[4..8].try_into().unwrap()) + 4096;
                pdu[16..20].copy_from_slice(&datal.to_le_bytes());
                pdu[4..8].copy_from_slice(&plen.to_le_bytes());
                pdu.extend_from_slice(&[0u8; 4096]);
            }
            Fault::BadDigest if ty == 0x07 => pdu[24] ^= 0xff,
            _ => return false,
        }
        true
    }
}

fn survives(fault: Fault) {
    let t = Target::start();
    let proxy = Proxy::start(t.port);
    let opts = TcpOptions {
        // No admin traffic: the armed fault hits the I/O connection.
        keep_alive_timeout_ms: 0,
        ddgst: fault == Fault::BadDigest,
        ..reconnecting(10, 0)
    };
    let ctrlr = tcp::connect("Bad0", &proxy.addr(), opts).unwrap();
    let other = tcp::connect("Good0", &t.addr(), TcpOptions::default()).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
    let mut data = pattern(8192, fault as u64);
    assert!(d.one(Op::Write, 64, &mut data).is_success());

    proxy.arm_once(Dir::ToHost, move |pdu| fault.apply(pdu));
    let op = if fault == Fault::UnknownCid {
        Op::Write
    } else {
        Op::Read
    };
    let mut buf = if op == Op::Write {
        data.clone()
    } else {
        vec![0u8; 8192]
    };
    let st = d.one(op, 64, &mut buf);
    assert!(!proxy.armed(), "{fault:?} was injected");
    assert!(st.is_success(), "{fault:?}: {st:?}");
    assert!(buf == data, "{fault:?}: the data read back");
    assert!(
        d.q.stats().recovered >= 1,
        "{fault:?}: resubmitted after a reconnect"
    );
    assert_eq!(d.completions[0], 2, "{fault:?}: each I/O completed once");
    assert_eq!(d.q.outstanding(), 0, "{fault:?}: nothing left in flight");
    full_depth_round_trip(&mut d, fault);

    // The other controller never noticed.
    let good = other.bdev(1).unwrap();
    let mut g = Driver::new(good.open_tcp_qpair(2).unwrap(), 2);
    let mut back = vec![0u8; 8192];
    assert!(g.one(Op::Read, 64, &mut back).is_success());
    assert!(back == data);
    drop((d, g));
    ctrlr.detach().unwrap();
    other.detach().unwrap();
}

/// Every tag of the queue pair in flight at once, writes then reads of distinct blocks: after
/// the failed connection no tag is left taken, stuck or answered twice, and the new
/// connection carries a full queue's worth of data (its receive buffer included).
fn full_depth_round_trip(d: &mut Driver<pmio_nvme::tcp::TcpQpair>, fault: Fault) {
    let depth = d.rqs.len() as u16;
    let tags: Vec<u16> = (0..depth).collect();
    let before = d.completions.clone();
    let mut written: Vec<Vec<u8>> = tags
        .iter()
        .map(|&t| pattern(8192, 0x100 * (fault as u64 + 1) + u64::from(t)))
        .collect();
    for (&t, buf) in tags.iter().zip(written.iter_mut()) {
        d.prep(t, Op::Write, 128 + 16 * u64::from(t), 16, buf);
    }
    let st = d.run(&tags);
    assert!(
        st.iter().all(|s| s.is_success()),
        "{fault:?}: writes {st:?}"
    );
    let mut back = vec![vec![0u8; 8192]; usize::from(depth)];
    for (&t, buf) in tags.iter().zip(back.iter_mut()) {
        d.prep(t, Op::Read, 128 + 16 * u64::from(t), 16, buf);
    }
    let st = d.run(&tags);
    assert!(st.iter().all(|s| s.is_success()), "{fault:?}: reads {st:?}");
    assert!(back == written, "{fault:?}: a full queue's data read back");
    for &t in &tags {
        let t = usize::from(t);
        assert_eq!(
            d.completions[t] - before[t],
            2,
            "{fault:?}: tag {t} completed once per command"
        );
    }
    assert_eq!(d.q.outstanding(), 0, "{fault:?}: every tag free again");
}

#[test]
fn fault_garbage_pdu() {
    survives(Fault::Garbage);
}

#[test]
fn fault_c2h_term_req() {
    survives(Fault::TermReq);
}

#[test]
fn fault_response_to_a_command_never_sent() {
    survives(Fault::UnknownCid);
}

#[test]
fn fault_c2h_data_past_the_buffer() {
    survives(Fault::PastBuffer);
}

#[test]
fn fault_wrong_data_digest() {
    survives(Fault::BadDigest);
}
