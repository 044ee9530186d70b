//! I/O timeouts on NVMe/TCP queue pairs (`NvmeOptions::io_timeout`, as on PCIe): a target
//! that answers Keep Alive but swallows a read (a proxy in front of pmio's target drops the
//! command). Past its deadline the read gets an Abort (pmio's target answers "not aborted");
//! still not complete at its next deadline, its connection is failed, the controller
//! reconnects, and the read is resubmitted and completes once, with its data, in a bounded
//! time. A read swallowed every time fails with `IoStatus::Timeout` once its recovery budget
//! is spent, and the queue pair goes on working.

mod tcp_common;

use std::time::{Duration, Instant};

use pmio::request::{IoStatus, Op};
use pmio_nvme::spec::nvm_opc;
use pmio_nvme::tcp::{self, TcpOptions, TcpQpair};
use pmio_nvme::{Controller, NvmeOptions};
use tcp_common::proxy::{Dir, Proxy};
use tcp_common::*;

/// PDU type of a CapsuleCmd; its SQE (opcode first) follows the 8-byte common header.
const CAPSULE_CMD: u8 = 0x04;

/// Drops a read command on its way to the target.
fn swallow_read(pdu: &mut Vec<u8>) -> bool {
    if pdu[0] == CAPSULE_CMD && pdu[8] == nvm_opc::READ {
        pdu.clear();
        return true;
    }
    false
}

/// pmio's target behind a proxy, a controller attached through the proxy with `io_timeout`
/// and `recovery_retries`, and a queue pair of depth 4 on its namespace 1.
struct Setup {
    t: Target,
    proxy: Proxy,
    ctrlr: Controller,
    d: Driver<TcpQpair>,
}

fn setup(opts: TcpOptions, io_timeout: Duration, recovery_retries: u8) -> Setup {
    let t = Target::start();
    let proxy = Proxy::start(t.port);
    let nvme = NvmeOptions {
        name: "Nvme0".into(),
        io_timeout,
        recovery_retries,
        ..NvmeOptions::default()
    };
    let ctrlr = tcp::connect_with(&proxy.addr(), opts, nvme).unwrap();
    let d = Driver::new(ctrlr.bdev(1).unwrap().open_tcp_qpair(4).unwrap(), 4);
    Setup { t, proxy, ctrlr, d }
}

#[test]
fn a_swallowed_read_is_aborted_then_reconnected_and_completes_once() {
    let io_timeout = Duration::from_millis(1000);
    // SPDK's defaults otherwise: one immediate reconnect when the connection fails.
    let Setup {
        t,
        proxy,
        ctrlr,
        mut d,
    } = setup(TcpOptions::default(), io_timeout, 3);
    let mut data = pattern(8192, 21);
    assert!(d.one(Op::Write, 64, &mut data).is_success());
    let before = t.cntlids();

    proxy.arm_once(Dir::ToTarget, swallow_read);
    let start = Instant::now();
    let mut back = vec![0u8; 8192];
    let st = d.one(Op::Read, 64, &mut back);
    let took = start.elapsed();
    assert_eq!(proxy.hits(), 1, "the read was swallowed");
    assert_eq!(st, IoStatus::Success);
    assert!(back == data, "the resubmitted read brought the data");
    // One deadline for the Abort, one more before the connection is failed; then a
    // reconnect, well within the bound.
    assert!(
        took >= 2 * io_timeout,
        "completed after two deadlines: {took:?}"
    );
    assert!(took < 5 * io_timeout, "bounded: {took:?}");
    let s = d.q.stats();
    assert_eq!(s.aborts, 1, "one Abort, sent by the controller's thread");
    assert!(s.timeouts >= 2, "{s:?}");
    assert!(s.recovered >= 1, "{s:?}");
    assert_eq!(s.errors, 0);
    assert_eq!(d.completions[0], 2, "the write and the read, each once");
    assert!(ctrlr.connected());
    assert_ne!(t.cntlids(), before, "reconnected: a new controller");

    // The queue pair goes on working, with no timeout on its way.
    let mut again = vec![0u8; 8192];
    assert!(d.one(Op::Read, 64, &mut again).is_success());
    assert!(again == data);
    assert_eq!(d.q.stats().aborts, 1);
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn a_read_swallowed_every_time_fails_with_timeout_after_its_recovery_budget() {
    let io_timeout = Duration::from_millis(300);
    let Setup {
        t: _t,
        proxy,
        ctrlr,
        mut d,
    } = setup(reconnecting(10, 0), io_timeout, 1);
    let mut data = pattern(4096, 22);
    assert!(d.one(Op::Write, 8, &mut data).is_success());

    proxy.arm(Dir::ToTarget, swallow_read);
    let start = Instant::now();
    let mut back = vec![0u8; 4096];
    let st = d.one(Op::Read, 8, &mut back);
    let took = start.elapsed();
    assert_eq!(st, IoStatus::Timeout, "the documented status");
    assert_eq!(
        proxy.hits(),
        2,
        "sent, then resubmitted once (recovery_retries 1)"
    );
    assert!(
        took >= 4 * io_timeout,
        "two rounds of two deadlines: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "bounded: {took:?}");
    let s = d.q.stats();
    assert_eq!(s.aborts, 2, "{s:?}");
    assert_eq!(s.errors, 1, "{s:?}");
    assert!(matches!(
        d.q.last_error(),
        Some(pmio_nvme::IoError::TimedOut { retries: 1 })
    ));

    proxy.disarm();
    let mut again = vec![0u8; 4096];
    assert!(d.one(Op::Read, 8, &mut again).is_success());
    assert!(again == data);
    d.assert_no_double_completion();
    assert_eq!(d.completions[0], 3, "write, failed read, read: each once");
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn a_request_failed_while_held_leaves_no_recovery_spent_behind() {
    let io_timeout = Duration::from_millis(1000);
    // Fast I/O fail after 1 s; reconnecting never gives up.
    let Setup {
        mut t,
        proxy,
        ctrlr,
        mut d,
    } = setup(reconnecting(-1, 1), io_timeout, 1);
    let mut data = pattern(4096, 23);
    assert!(d.one(Op::Write, 16, &mut data).is_success());

    // A read in flight when the target goes: held for a resubmission (one of its one
    // recovery), then failed by fast I/O fail.
    proxy.arm_once(Dir::ToTarget, swallow_read);
    let mut back = vec![0u8; 4096];
    d.prep(0, Op::Read, 16, 8, &mut back);
    d.submit(&[0]);
    while proxy.armed() {
        std::thread::sleep(Duration::from_millis(1));
    }
    t.down();
    assert_eq!(d.reap(1, IO_LIMIT).len(), 1);
    assert_eq!(d.rqs[0].status, IoStatus::Errno(libc::ENXIO));

    // The same tag, fresh: its whole budget again. Swallowed once, it is aborted, its
    // connection failed and it is resubmitted (a spent budget would fail it instead). Tag 1
    // looks for the controller's return, so tag 0's next command is that read.
    t.up();
    let deadline = Instant::now() + IO_LIMIT;
    let mut probe = vec![0u8; 512];
    loop {
        d.prep(1, Op::Read, 0, 1, &mut probe);
        if d.run(&[1])[0].is_success() {
            break;
        }
        assert!(Instant::now() < deadline, "the controller came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.arm_once(Dir::ToTarget, swallow_read);
    back.fill(0);
    assert_eq!(d.one(Op::Read, 16, &mut back), IoStatus::Success);
    assert_eq!(proxy.hits(), 2);
    assert!(back == data);
    drop(d);
    ctrlr.detach().unwrap();
}
