//! NVMe/TCP host against pmio's own target on 127.0.0.1: attach, Identify, namespaces, and
//! data written reading back through both write paths (in-capsule and R2T/H2CData) and the
//! read path (C2HData into the request's buffer), with and without digests.

mod tcp_common;

use pmio::BlockDevice;
use pmio::request::{IoStatus, Op};
use pmio_nvme::tcp::{self, TcpOptions};
use tcp_common::proxy::Proxy;
use tcp_common::*;

#[test]
fn attach_identifies_the_controller_and_its_namespace() {
    let t = Target::start();
    let ctrlr = tcp::connect("Nvme7", &t.addr(), TcpOptions::default()).unwrap();
    assert_eq!(ctrlr.transport(), "TCP");
    assert_eq!(ctrlr.tcp_target().unwrap().subnqn, NQN);
    assert!(
        ctrlr
            .hostnqn()
            .unwrap()
            .starts_with("nqn.2014-08.org.nvmexpress:uuid:")
    );
    assert!(ctrlr.connected());
    assert_eq!(ctrlr.identify().cntrltype, 1, "an I/O controller");
    assert!(ctrlr.io_queues() >= 1);
    assert_eq!(ctrlr.max_transfer_bytes(), 128 * 1024, "the target's MDTS");
    let bdevs = ctrlr.bdevs();
    assert_eq!(bdevs.len(), 1);
    let info = bdevs[0].info();
    assert_eq!(info.name, "Nvme7n1");
    assert_eq!((info.block_size, info.num_blocks), (512, NUM_BLOCKS));
    assert_eq!(info.max_queue_depth, 128);
    assert_eq!(t.controllers(), 1);
    drop(bdevs);
    ctrlr.detach().unwrap();
    let gone = (0..2000).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        t.controllers() == 0
    });
    assert!(gone, "detach disconnects the controller");
}

/// spdk_nvme_perf sends an empty HOSTNQN unless its `-r` names a `hostnqn:`; SPDK's target
/// admits it into a subsystem that allows any host (only the NUL terminator is required), and
/// refuses it with Connect Invalid Host where hosts are listed. pmio's host sends the same
/// Connect with `hostnqn: Some("")`.
#[test]
fn an_empty_host_nqn_is_admitted_where_any_host_is_allowed_and_refused_elsewhere() {
    let t = Target::start();
    let empty = TcpOptions {
        hostnqn: Some(String::new()),
        ..TcpOptions::default()
    };
    let ctrlr = tcp::connect("Nvme0", &t.addr(), empty.clone()).unwrap();
    assert_eq!(ctrlr.hostnqn(), Some(""));
    assert_eq!(t.hostnqns(), vec![String::new()]);
    // Its I/O queues connect with the same empty NQN and carry data.
    {
        let bdev = ctrlr.bdev(1).unwrap();
        let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
        let mut data = pattern(4096, 7);
        assert!(d.one(Op::Write, 64, &mut data).is_success());
        let mut back = vec![0u8; 4096];
        assert!(d.one(Op::Read, 64, &mut back).is_success());
        assert!(back == data, "read back");
    }
    ctrlr.detach().unwrap();

    t.admit(false, &["nqn.2014-08.org.nvmexpress:uuid:listed"]);
    let refused = tcp::connect("Nvme1", &t.addr(), empty)
        .map(|_| ())
        .unwrap_err();
    assert!(refused.to_string().contains("Connect refused"), "{refused}");
    // The listed host still gets in.
    let listed = TcpOptions {
        hostnqn: Some("nqn.2014-08.org.nvmexpress:uuid:listed".into()),
        ..TcpOptions::default()
    };
    let ctrlr = tcp::connect("Nvme2", &t.addr(), listed).unwrap();
    ctrlr.detach().unwrap();
}

/// Writes 4 KiB (in-capsule) and 128 KiB (R2T) at several places at once, reads them back.
fn read_back(opts: TcpOptions) {
    let t = Target::start();
    read_back_from(&t.addr(), opts);
}

fn read_back_from(addr: &tcp::TcpTarget, opts: TcpOptions) {
    let ctrlr = tcp::connect("Nvme0", addr, opts).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let q = bdev.open_tcp_qpair(32).unwrap();
    assert!(q.connected());
    let mut d = Driver::new(q, 32);
    let sizes = [4096usize, 128 * 1024, 4096, 128 * 1024, 512, 8192];
    let mut data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u64 + 1))
        .collect();
    let lbas: Vec<u64> = (0..sizes.len() as u64).map(|i| i * 512).collect();
    let tags: Vec<u16> = (0..sizes.len() as u16).collect();
    for (i, buf) in data.iter_mut().enumerate() {
        let n = (buf.len() / 512) as u32;
        d.prep(i as u16, Op::Write, lbas[i], n, buf);
    }
    assert!(d.run(&tags).iter().all(|s| s.is_success()), "writes");
    let mut back: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    for (i, buf) in back.iter_mut().enumerate() {
        let n = (buf.len() / 512) as u32;
        d.prep(i as u16, Op::Read, lbas[i], n, buf);
    }
    assert!(d.run(&tags).iter().all(|s| s.is_success()), "reads");
    for i in 0..sizes.len() {
        assert!(
            back[i] == data[i],
            "{} bytes at LBA {} read back",
            sizes[i],
            lbas[i]
        );
    }
    let mut none = [0u8; 0];
    assert_eq!(d.one(Op::Flush, 0, &mut none), IoStatus::Success);
    let st = d.q.stats();
    assert_eq!(st.completed, 2 * sizes.len() as u64 + 1);
    assert_eq!(st.errors, 0);
    d.assert_no_double_completion();
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn data_reads_back_without_digests() {
    read_back(TcpOptions::default());
}

#[test]
fn data_reads_back_with_header_and_data_digests() {
    read_back(TcpOptions {
        hdgst: true,
        ddgst: true,
        ..TcpOptions::default()
    });
}

/// The target's bytes arrive in pieces cut anywhere (inside headers, digests, payloads, and
/// across PDUs): every read still lands whole and in its own buffer.
#[test]
fn data_reads_back_when_the_stream_arrives_in_odd_pieces() {
    let t = Target::start();
    let proxy = Proxy::start(t.port);
    proxy.split_to_host();
    for digests in [false, true] {
        let opts = TcpOptions {
            hdgst: digests,
            ddgst: digests,
            ..TcpOptions::default()
        };
        read_back_from(&proxy.addr(), opts);
    }
}

#[test]
fn a_full_queue_of_reads_and_writes() {
    let t = Target::start();
    let ctrlr = tcp::connect("Nvme0", &t.addr(), TcpOptions::default()).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let depth = bdev.info().max_queue_depth as usize;
    let q = bdev
        .open_queue(pmio::HctxType::Default, 0, depth as u32)
        .unwrap();
    let mut d = Driver::new(Dyn(q), depth);
    let mut data: Vec<Vec<u8>> = (0..depth).map(|i| pattern(4096, 100 + i as u64)).collect();
    let tags: Vec<u16> = (0..depth as u16).collect();
    for (i, buf) in data.iter_mut().enumerate() {
        d.prep(i as u16, Op::Write, i as u64 * 8, 8, buf);
    }
    assert!(d.run(&tags).iter().all(|s| s.is_success()));
    let mut back = vec![vec![0u8; 4096]; depth];
    for (i, buf) in back.iter_mut().enumerate() {
        d.prep(i as u16, Op::Read, i as u64 * 8, 8, buf);
    }
    assert!(d.run(&tags).iter().all(|s| s.is_success()));
    assert!(back == data);
    assert!(
        d.completions.iter().all(|&n| n == 2),
        "each tag completed once per I/O"
    );
    drop(d);
    ctrlr.detach().unwrap();
}

#[test]
fn requests_the_target_refuses_fail_alone() {
    let t = Target::start();
    let ctrlr = tcp::connect("Nvme0", &t.addr(), TcpOptions::default()).unwrap();
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
    // Beyond the namespace: refused before the wire.
    let mut buf = vec![0u8; 4096];
    assert_eq!(
        d.one(Op::Read, NUM_BLOCKS, &mut buf),
        IoStatus::Errno(libc::ERANGE)
    );
    // Larger than MDTS.
    let mut big = vec![0u8; 256 * 1024];
    assert_eq!(d.one(Op::Write, 0, &mut big), IoStatus::Errno(libc::EINVAL));
    // The queue still works.
    let mut ok = pattern(4096, 9);
    assert_eq!(d.one(Op::Write, 8, &mut ok), IoStatus::Success);
    drop(d);
    ctrlr.detach().unwrap();
}
