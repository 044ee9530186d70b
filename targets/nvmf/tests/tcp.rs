//! The target end to end over 127.0.0.1 against the test host (tests/common): connection set-up,
//! reads and writes in-capsule and through R2T, digests, and what the kernel's host never sends.

mod common;

use common::{Host, TestTarget, pattern};
use pmio_nvmf::TransportOpts;
use pmio_nvmf::pdu::Digests;
use pmio_nvmf::spec::{self, Sqe};

fn round_trip(digests: Digests) {
    let t = TestTarget::start(TransportOpts::default(), true);
    let (mut admin, cntlid) = Host::admin_queue(t.addr, digests, 0);
    let id = Sqe {
        cdw10: spec::cns::CONTROLLER,
        ..Sqe::new(spec::admin_opc::IDENTIFY, 0)
    };
    let r = admin.admin(id, 4096);
    assert!(r.status().is_success());
    assert_eq!(r.data.len(), 4096);
    assert_eq!(u16::from_le_bytes([r.data[78], r.data[79]]), cntlid);
    let mut io = Host::io_queue(t.addr, digests, cntlid, 1);
    for (i, &len) in [512usize, 4096, 8192, 65536, 131072].iter().enumerate() {
        let lba = 1000 * i as u64;
        let data = pattern(len, i as u64 + 1);
        let w = io.write(lba, &data);
        assert!(w.status().is_success(), "write {len}: {:?}", w.status());
        let r = io.read(lba, (len / 512) as u32);
        assert!(r.status().is_success(), "read {len}: {:?}", r.status());
        assert!(r.data == data, "{len} bytes read back differ");
    }
}

#[test]
fn writes_and_reads_round_trip() {
    round_trip(Digests::NONE);
}

#[test]
fn writes_and_reads_round_trip_with_digests() {
    round_trip(Digests {
        header: true,
        data: true,
    });
}

/// A bdev that completes later (a null device with 20 ms latency, like any real device) must
/// not leave a command hanging while the reactor sleeps in interrupt mode: a device completion
/// wakes no one, so the poll group keeps polling while bdev I/O is in flight. (The kernel's
/// host timed out after 30 s on a uring bdev before this was fixed.)
#[test]
fn a_bdev_that_completes_later_is_polled_while_the_reactor_could_sleep() {
    let t = TestTarget::start(TransportOpts::default(), true);
    let dev = pmio_null::NullDevice::new(pmio_null::NullOptions {
        name: "Null1".into(),
        num_blocks: 2048,
        latency_ns: 20_000_000,
        ..pmio_null::NullOptions::default()
    })
    .unwrap();
    t.registry.register(dev).unwrap();
    assert_eq!(
        t.tgt
            .add_ns(common::NQN, "Null1", 2, None, None, None, 0)
            .unwrap(),
        2
    );
    let (_admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    for _ in 0..5 {
        // Let the reactors fall asleep first.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let start = std::time::Instant::now();
        let r = io.read_ns(2, 0, 8);
        assert!(r.status().is_success(), "{:?}", r.status());
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "a 20 ms read took {:?}",
            start.elapsed()
        );
    }
}

/// A namespace removed while connected: its I/O fails with Invalid Namespace, and once the
/// bdev is deleted no poll group keeps it alive (their queues on it are closed).
#[test]
fn a_removed_namespace_lets_its_bdev_go() {
    let t = TestTarget::start(TransportOpts::default(), true);
    let dev = pmio_null::NullDevice::new(pmio_null::NullOptions {
        name: "Null2".into(),
        num_blocks: 2048,
        ..pmio_null::NullOptions::default()
    })
    .unwrap();
    let weak = std::sync::Arc::downgrade(&dev);
    t.registry.register(dev).unwrap();
    t.tgt
        .add_ns(common::NQN, "Null2", 2, None, None, None, 0)
        .unwrap();
    let (_admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut ios: Vec<Host> = (1..=2)
        .map(|qid| Host::io_queue(t.addr, Digests::NONE, cntlid, qid))
        .collect();
    for io in &mut ios {
        assert!(io.read_ns(2, 0, 8).status().is_success());
    }
    t.tgt.remove_ns(common::NQN, 2).unwrap();
    t.registry.unregister("Null2").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while weak.strong_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the deleted bdev is still held ({} references)",
            weak.strong_count()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for io in &mut ios {
        let r = io.read_ns(2, 0, 8);
        assert_eq!(r.status(), pmio_nvmf::spec::Status::INVALID_NAMESPACE);
        assert!(
            io.read(0, 8).status().is_success(),
            "namespace 1 unaffected"
        );
    }
}

/// An idle target sleeps: with a controller connected (admin and I/O queues) and no I/O, the
/// reactors spend most of their time asleep (sockets and a 100 ms tick wake them), and a
/// command still gets an answer promptly.
#[test]
fn an_idle_connected_target_sleeps() {
    let t = TestTarget::start(TransportOpts::default(), true);
    let (_admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    assert!(io.read(0, 8).status().is_success());
    let reactors = t.reactors.as_ref().unwrap().handle();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let before = reactors.all_stats();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = reactors.all_stats();
    for (a, b) in after.iter().zip(&before) {
        let d = a.since(b);
        let total = d.busy_ns + d.idle_ns + d.sleep_ns;
        assert!(
            d.sleep_ns * 10 > total * 8,
            "core {}: asleep {} of {} ns while idle",
            a.core,
            d.sleep_ns,
            total
        );
    }
    let start = std::time::Instant::now();
    assert!(io.read(0, 8).status().is_success());
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

/// A bdev whose largest transfer (64 KiB) is below the target's MDTS (128 KiB): the block layer
/// splits the host's 128 KiB commands, and the data round-trips.
#[test]
fn commands_above_the_bdevs_largest_transfer_are_split() {
    let t = TestTarget::start(TransportOpts::default(), true);
    let dev = pmio_malloc::MallocDevice::new(pmio_malloc::MallocOptions {
        name: "Malloc64k".into(),
        num_blocks: 4096,
        max_transfer_blocks: 128,
        ..pmio_malloc::MallocOptions::default()
    })
    .unwrap();
    t.registry.register(dev).unwrap();
    t.tgt
        .add_ns(common::NQN, "Malloc64k", 3, None, None, None, 0)
        .unwrap();
    let (_admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    let data = pattern(131072, 99);
    let w = io.write_ns(3, 256, &data);
    assert!(w.status().is_success(), "{:?}", w.status());
    let r = io.read_ns(3, 256, 256);
    assert!(r.status().is_success(), "{:?}", r.status());
    assert!(r.data == data, "a split 128 KiB write reads back");
}
