//! Bad input from the target: a proxy in front of pmio's target rewrites one PDU on an I/O
//! connection (garbage, a TermReq, a response to a command never sent, C2HData past the
//! buffer, a wrong data digest). The host fails that connection, reconnects, resubmits, and
//! the I/O completes once with the right data; another controller is not disturbed.

mod tcp_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pmio::request::Op;
use pmio_nvme::tcp::{self, TcpOptions, TcpTarget};
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

/// A TCP proxy to the target that forwards whole PDUs and applies an armed fault once.
struct Proxy {
    port: u16,
    fault: Arc<Mutex<Option<Fault>>>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(None));
        let armed = Arc::clone(&fault);
        let count = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for host in listener.incoming() {
                let Ok(host) = host else { return };
                let Ok(target) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                // The first connection is the admin queue: faults hit I/O queues only.
                let io = count.fetch_add(1, Ordering::AcqRel) > 0;
                let (h2, t2) = (host.try_clone().unwrap(), target.try_clone().unwrap());
                std::thread::spawn(move || {
                    let (mut h, mut t) = (h2, t2);
                    let _ = std::io::copy(&mut h, &mut t);
                    let _ = t.shutdown(Shutdown::Both);
                });
                let armed = Arc::clone(&armed);
                std::thread::spawn(move || forward_pdus(target, host, io, &armed));
            }
        });
        Proxy { port, fault }
    }

    fn arm(&self, f: Fault) {
        *self.fault.lock().unwrap() = Some(f);
    }

    fn armed(&self) -> bool {
        self.fault.lock().unwrap().is_some()
    }

    fn addr(&self) -> TcpTarget {
        TcpTarget {
            traddr: "127.0.0.1".into(),
            trsvcid: self.port.to_string(),
            subnqn: NQN.into(),
        }
    }
}

fn forward_pdus(mut from: TcpStream, mut to: TcpStream, io: bool, fault: &Mutex<Option<Fault>>) {
    loop {
        let mut pdu = vec![0u8; 8];
        if from.read_exact(&mut pdu).is_err() {
            break;
        }
        let plen = u32::from_le_bytes(pdu[4..8].try_into().unwrap()) as usize;
        pdu.resize(plen.max(8), 0);
        if from.read_exact(&mut pdu[8..]).is_err() {
            break;
        }
        if io {
            let mut f = fault.lock().unwrap();
            if let Some(kind) = *f
                && kind.apply(&mut pdu)
            {
                *f = None;
            }
        }
        if to.write_all(&pdu).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
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

    proxy.arm(fault);
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
