//! The reconnect policy against pmio's target taken down and brought back (same port, same
//! bdev and data): I/O held and resubmitted, data written before the loss reads back, no
//! request completes twice; fast I/O fail and controller loss fail I/O with ENXIO, no hang.

mod tcp_common;

use std::time::{Duration, Instant};

use pmio::bdev::DriverQueue;
use pmio::request::{IoStatus, Op};
use pmio_nvme::CtrlrState;
use pmio_nvme::tcp::{self, TcpOptions};
use tcp_common::*;

const ENXIO: IoStatus = IoStatus::Errno(libc::ENXIO);

#[test]
fn target_restarted_under_io_then_data_reads_back() {
    let mut t = Target::start();
    let ctrlr = tcp::connect("Nvme0", &t.addr(), reconnecting(20, 0)).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(8).unwrap(), 8);

    // Before the loss: 4 KiB and 128 KiB written and acknowledged.
    let mut before = [pattern(4096, 1), pattern(128 * 1024, 2)];
    let [a, b] = &mut before;
    d.prep(0, Op::Write, 0, 8, a);
    d.prep(1, Op::Write, 1024, 256, b);
    assert!(d.run(&[0, 1]).iter().all(|s| s.is_success()));

    t.down();
    // Submitted while the target is gone: held, not failed.
    let mut during: Vec<Vec<u8>> = (0..4).map(|i| pattern(8192, 10 + i)).collect();
    for (i, buf) in during.iter_mut().enumerate() {
        d.prep(i as u16, Op::Write, 4096 + 64 * i as u64, 16, buf);
    }
    d.submit(&[0, 1, 2, 3]);
    assert!(
        d.reap(1, Duration::from_millis(300)).is_empty(),
        "held while down"
    );
    assert_eq!(d.q.outstanding(), 4);
    assert!(!ctrlr.connected());
    assert_eq!(ctrlr.state(), CtrlrState::Resetting, "still trying");

    t.up();
    let got = d.reap(4, IO_LIMIT);
    assert_eq!(got.len(), 4, "resubmitted after the reconnect");
    assert!((0..4).all(|i| d.rqs[i].status.is_success()));
    assert!(ctrlr.connected());
    assert_eq!(ctrlr.state(), CtrlrState::Enabled);
    assert!(d.q.stats().recovered >= 4);

    // Everything written reads back, before and during the loss.
    let mut back = [vec![0u8; 4096], vec![0u8; 128 * 1024]];
    let [x, y] = &mut back;
    d.prep(0, Op::Read, 0, 8, x);
    d.prep(1, Op::Read, 1024, 256, y);
    assert!(d.run(&[0, 1]).iter().all(|s| s.is_success()));
    assert!(back[0] == before[0] && back[1] == before[1]);
    for (i, want) in during.iter().enumerate() {
        let mut got = vec![0u8; 8192];
        assert!(d.one(Op::Read, 4096 + 64 * i as u64, &mut got).is_success());
        assert!(&got == want, "write {i} made while down reads back");
    }
    // Tags 0 and 1 did four I/Os each above (two runs, the held write, one read) plus the
    // read-back; none was reported twice for one submission.
    assert_eq!(d.completions[2], 1);
    assert_eq!(d.completions[3], 1);
    assert_eq!(
        d.q.stats().completed,
        d.completions.iter().map(|&n| u64::from(n)).sum::<u64>()
    );
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn target_gone_for_good_fails_io_after_the_loss_timeout() {
    let mut t = Target::start();
    let ctrlr = tcp::connect("Nvme0", &t.addr(), reconnecting(2, 0)).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
    let mut buf = pattern(4096, 3);
    assert!(d.one(Op::Write, 0, &mut buf).is_success());

    t.down();
    let start = Instant::now();
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; 4096]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        d.prep(i as u16, Op::Read, 8 * i as u64, 8, b);
    }
    d.submit(&[0, 1, 2, 3]);
    let got = d.reap(4, IO_LIMIT);
    assert_eq!(got.len(), 4, "held I/O fails once the controller is lost");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "held until the loss: {waited:?}"
    );
    assert!((0..4).all(|i| d.rqs[i].status == ENXIO));
    // Later I/O fails at once.
    let t0 = Instant::now();
    assert_eq!(d.one(Op::Read, 0, &mut bufs[0]), ENXIO);
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert!(!ctrlr.connected());
    assert_eq!(
        ctrlr.state(),
        CtrlrState::Failed,
        "lost for good, not reconnecting"
    );
    d.assert_no_double_completion();
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn no_reconnect_by_default_fails_io_at_once() {
    let mut t = Target::start();
    let ctrlr = tcp::connect("Nvme0", &t.addr(), TcpOptions::default()).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
    t.down();
    let start = Instant::now();
    let mut buf = vec![0u8; 4096];
    assert_eq!(d.one(Op::Read, 0, &mut buf), ENXIO);
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn fast_io_fail_fails_held_io_then_the_controller_comes_back() {
    let mut t = Target::start();
    let ctrlr = tcp::connect("Nvme0", &t.addr(), reconnecting(-1, 1)).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
    t.down();
    let mut buf = vec![0u8; 4096];
    d.prep(0, Op::Read, 0, 8, &mut buf);
    d.submit(&[0]);
    assert_eq!(
        d.reap(1, IO_LIMIT).len(),
        1,
        "failed after fast_io_fail_timeout_sec"
    );
    assert_eq!(d.rqs[0].status, ENXIO);

    t.up();
    // Reconnecting goes on (ctrlr_loss_timeout_sec -1): I/O works again once it is back.
    let deadline = Instant::now() + IO_LIMIT;
    let mut data = pattern(4096, 4);
    loop {
        let st = d.one(Op::Write, 16, &mut data);
        if st.is_success() {
            break;
        }
        assert_eq!(st, ENXIO);
        assert!(Instant::now() < deadline, "the controller never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut back = vec![0u8; 4096];
    assert!(d.one(Op::Read, 16, &mut back).is_success());
    assert!(back == data);
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn keep_alive_keeps_an_idle_controller() {
    let t = Target::start();
    let opts = TcpOptions {
        keep_alive_timeout_ms: 1000,
        ..TcpOptions::default()
    };
    let ctrlr = tcp::connect("Nvme0", &t.addr(), opts).unwrap();
    let first = t.cntlids();
    assert_eq!(first.len(), 1);
    // The target drops a controller silent for KATO + 1 s: Keep Alive every 500 ms keeps the
    // same one (a dropped one would come back reconnected, under another ID).
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(t.cntlids(), first);
    assert!(ctrlr.connected());
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(1).unwrap(), 1);
    let mut buf = vec![0u8; 512];
    assert!(d.one(Op::Read, 0, &mut buf).is_success());
    drop(d);
    ctrlr.detach().unwrap();
}
