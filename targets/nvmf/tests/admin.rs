//! The admin queue's timers and events end to end: keep-alive expiry tears a silent host's
//! controller down (its I/O queues with it) and spares a host that keeps talking;
//! Asynchronous Event Requests are held until a namespace is added or removed, the Changed
//! Namespace List says which, and I/O follows the change.

mod common;

use std::time::{Duration, Instant};

use common::{Host, NQN, TestTarget, add_malloc, admin_sqe, pattern};
use pmio_nvmf::ctrlr::AEN_NS_CHANGED;
use pmio_nvmf::pdu::Digests;
use pmio_nvmf::spec::{self, Status};

fn has_ctrlr(t: &TestTarget, cntlid: u16) -> bool {
    t.tgt
        .controllers(NQN)
        .unwrap()
        .iter()
        .any(|c| c.cntlid == cntlid)
}

#[test]
fn keep_alive_expiry_tears_down_only_the_silent_controller() {
    let t = TestTarget::new();
    // KATO 1000 ms for both; one never sends Keep Alive, the other every 300 ms.
    // Connections go to the reactors round robin, the first to the first reactor, which also
    // runs the acceptor's timer. Spacers put the silent admin queue on the second reactor
    // with only idle connections beside it: nothing wakes that reactor, it must notice the
    // expiry on its own; the chatty admin queue is on the first.
    let spacer = Host::connect(t.addr, Digests::NONE);
    let (mut silent, silent_id) = Host::admin_queue(t.addr, Digests::NONE, 1000);
    let mut silent_io = Host::io_queue(t.addr, Digests::NONE, silent_id, 1);
    let spacer2 = Host::connect(t.addr, Digests::NONE);
    let (mut chatty, chatty_id) = Host::admin_queue(t.addr, Digests::NONE, 1000);
    let mut chatty_io = Host::io_queue(t.addr, Digests::NONE, chatty_id, 1);
    let cores: Vec<u32> = t
        .tgt
        .controllers(NQN)
        .unwrap()
        .iter()
        .map(|c| c.core)
        .collect();
    if t.tgt.cores().len() > 1 {
        assert_eq!(
            cores,
            [t.tgt.cores()[1], t.tgt.cores()[0]],
            "admin queues' reactors"
        );
    }
    let start = Instant::now();
    let mut gone_after = None;
    // Until the silent one is gone and the chatty one has lived through 3 KATOs.
    while gone_after.is_none() || start.elapsed() < Duration::from_secs(3) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the silent controller was never torn down: {:?}",
            t.tgt.controllers(NQN).unwrap()
        );
        chatty.keep_alive();
        if gone_after.is_none() && !has_ctrlr(&t, silent_id) {
            gone_after = Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let gone_after = gone_after.unwrap();
    assert!(
        gone_after >= Duration::from_millis(1000),
        "torn down after {gone_after:?}, before KATO"
    );
    // Its queues were closed by the target.
    assert!(
        silent.closed_within(common::SETTLE_TIMEOUT),
        "admin queue left open"
    );
    assert!(
        silent_io.closed_within(common::SETTLE_TIMEOUT),
        "I/O queue left open"
    );
    // The chatty controller and its I/O queue are fine.
    assert!(has_ctrlr(&t, chatty_id));
    let data = pattern(4096, 1);
    assert!(chatty_io.write(0, &data).status().is_success());
    assert!(chatty_io.read(0, 8).data == data);
    chatty.keep_alive();
    drop((silent, silent_io, spacer, spacer2, chatty, chatty_io));
    t.assert_healthy();
}

#[test]
fn kato_zero_never_expires() {
    let t = TestTarget::new();
    let (mut admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(has_ctrlr(&t, cntlid));
    admin.keep_alive();
    drop(admin);
    t.assert_healthy();
}

/// Get Log Page 04h (Changed Namespace List), 4 KiB: the NSIDs listed.
fn changed_ns(admin: &mut Host) -> Vec<u32> {
    let glp = admin_sqe(
        spec::admin_opc::GET_LOG_PAGE,
        spec::lid::CHANGED_NS_LIST | 1023 << 16,
    );
    let r = admin.admin(glp, 4096);
    assert!(r.status().is_success(), "{:?}", r.status());
    r.data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take_while(|&id| id != 0)
        .collect()
}

#[test]
fn namespace_changes_complete_the_held_aer() {
    let t = TestTarget::new();
    let (mut admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    let aer = admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    // Held: a Keep Alive behind it is answered, the AER is not.
    admin.keep_alive();
    let cid = io.submit_read(2, 0, 8);
    assert_eq!(io.wait(cid, &[]).status(), Status::INVALID_NAMESPACE);

    add_malloc(&t.registry, "Malloc1");
    assert_eq!(
        t.tgt
            .add_ns(NQN, "Malloc1", 0, None, None, None, 0)
            .unwrap(),
        2
    );
    let cqe = admin.expect_resp(aer);
    assert!(cqe.status().is_success(), "{:?}", cqe.status());
    assert_eq!(
        cqe.dw0, AEN_NS_CHANGED,
        "namespace attribute notice, log page 04h"
    );
    assert_eq!(changed_ns(&mut admin), vec![2]);
    // The new namespace serves I/O, apart from namespace 1.
    let d1 = pattern(4096, 2);
    let d2 = pattern(4096, 3);
    assert!(io.write(0, &d1).status().is_success());
    let mut w = common::rw_sqe(spec::nvm_opc::WRITE, 2, 0, 8);
    w.set_cid(io.cid());
    let wcid = w.cid();
    io.send_cmd(&mut w, &d2);
    assert!(io.expect_resp(wcid).status().is_success());
    assert!(io.read_ns(2, 0, 8).data == d2);
    assert!(io.read_ns(1, 0, 8).data == d1);

    // Removal: the next AER completes, the log lists it, its I/O fails.
    let aer = admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    admin.keep_alive();
    t.tgt.remove_ns(NQN, 2).unwrap();
    let cqe = admin.expect_resp(aer);
    assert!(cqe.status().is_success());
    assert_eq!(cqe.dw0, AEN_NS_CHANGED);
    assert_eq!(changed_ns(&mut admin), vec![2]);
    let r = io.read_ns(2, 0, 8);
    assert_eq!(r.status(), Status::INVALID_NAMESPACE);
    let cid = io.submit(common::rw_sqe(spec::nvm_opc::WRITE, 2, 0, 8), &d2);
    assert_eq!(io.expect_resp(cid).status(), Status::INVALID_NAMESPACE);
    assert!(io.read_ns(1, 0, 8).data == d1);
    // Read once, the log is empty.
    assert!(changed_ns(&mut admin).is_empty());

    // An AER still held when the host goes is dropped with the connection.
    admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    admin.keep_alive();
    drop((admin, io));
    t.assert_healthy();
}

#[test]
fn more_aers_than_aerl_are_refused() {
    let t = TestTarget::new();
    let (mut admin, _) = Host::admin_queue(t.addr, Digests::NONE, 0);
    // AERL 3: four are held, the fifth is refused at once.
    for _ in 0..4 {
        admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    }
    let fifth = admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    let st = admin.expect_resp(fifth).status();
    assert_eq!(st, Status::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED);
    admin.keep_alive();
    drop(admin);
    t.assert_healthy();
}

/// Identify Namespace `nsid`: NSZE (bytes 0..8).
fn nsze(admin: &mut Host, nsid: u32) -> u64 {
    let mut id = admin_sqe(spec::admin_opc::IDENTIFY, spec::cns::NAMESPACE);
    id.nsid = nsid;
    let r = admin.admin(id, 4096);
    assert!(r.status().is_success(), "{:?}", r.status());
    u64::from_le_bytes(r.data[..8].try_into().unwrap())
}

/// A bdev replaced by a larger one of the same name (what an lvol resize does) grows its
/// namespace while connected: the held AER completes with the namespace notice, the log lists
/// the NSID, Identify reports the new size and I/O past the old end is served.
#[test]
fn a_replaced_bdev_resizes_its_namespace_and_tells_the_host() {
    let t = TestTarget::new();
    let small = common::NUM_BLOCKS / 4;
    let grow = |blocks: u64| {
        pmio_malloc::MallocDevice::new(pmio_malloc::MallocOptions {
            name: "Grow0".into(),
            num_blocks: blocks,
            ..pmio_malloc::MallocOptions::default()
        })
        .unwrap()
    };
    t.registry.register(grow(small)).unwrap();
    assert_eq!(
        t.tgt.add_ns(NQN, "Grow0", 0, None, None, None, 0).unwrap(),
        2
    );
    let (mut admin, cntlid) = Host::admin_queue(t.addr, Digests::NONE, 0);
    let mut io = Host::io_queue(t.addr, Digests::NONE, cntlid, 1);
    assert_eq!(nsze(&mut admin, 2), small);
    let past = small + 8;
    assert_eq!(io.read_ns(2, past, 8).status(), Status::LBA_OUT_OF_RANGE);
    // A held read on the old object completes there, whatever happens meanwhile.
    let held = io.submit_read(2, 0, 8);

    let aer = admin.submit(admin_sqe(spec::admin_opc::ASYNC_EVENT_REQUEST, 0), &[]);
    admin.keep_alive();
    t.registry.unregister("Grow0").unwrap();
    let bigger: std::sync::Arc<dyn pmio::BlockDevice> = grow(small * 2);
    t.registry.register(bigger.clone()).unwrap();
    t.tgt.bdev_replaced(&bigger);

    assert!(io.wait(held, &[]).status().is_success());
    let cqe = admin.expect_resp(aer);
    assert!(cqe.status().is_success(), "{:?}", cqe.status());
    assert_eq!(cqe.dw0, AEN_NS_CHANGED);
    assert_eq!(changed_ns(&mut admin), vec![2]);
    assert_eq!(nsze(&mut admin, 2), small * 2);
    let d = pattern(8 * 512, 9);
    let mut w = common::rw_sqe(spec::nvm_opc::WRITE, 2, past, 8);
    w.set_cid(io.cid());
    let wcid = w.cid();
    io.send_cmd(&mut w, &d);
    assert!(io.expect_resp(wcid).status().is_success());
    assert!(io.read_ns(2, past, 8).data == d);
    // Namespace 1 is untouched: no notice for it.
    assert_eq!(nsze(&mut admin, 1), common::NUM_BLOCKS);
    assert!(changed_ns(&mut admin).is_empty());
    drop((admin, io));
    t.assert_healthy();
}
