//! The data path without a front end: a fake driver writes chains into anonymous guest memory
//! and offers them; the ring runs against a malloc bdev on the test thread.

use std::sync::mpsc;

use pmio::BlockDevice;
use pmio::bdev::BdevQueueOptions;
use pmio_malloc::{MallocDevice, MallocOptions};
use vm_memory::Bytes;

use super::*;
use crate::spec::desc_flags::{NEXT, WRITE};
use crate::spec::{Desc, ReqHeader};

const QSIZE: u16 = 128;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;
/// Request buffers are carved from here on.
const HEAP: u64 = 0x10000;
const MEM: usize = 8 << 20;
const BS: u32 = 4096;

/// The driver side of one split ring.
struct Driver {
    mem: Arc<GuestMem>,
    avail: u16,
    used_seen: u16,
    next_desc: u16,
    heap: u64,
}

impl Driver {
    fn new() -> Driver {
        Driver {
            mem: Arc::new(GuestMem::anonymous(&[(0, MEM)]).unwrap()),
            avail: 0,
            used_seen: 0,
            next_desc: 0,
            heap: HEAP,
        }
    }

    fn m(&self) -> &GuestMemoryMmap {
        self.mem.mem()
    }

    fn alloc(&mut self, len: u64) -> u64 {
        let a = self.heap;
        self.heap += len.div_ceil(16) * 16;
        if self.heap > MEM as u64 - (1 << 20) {
            self.heap = HEAP;
            return self.alloc(len);
        }
        a
    }

    /// Writes a chain of (addr, len, writable) and makes it available. Returns its head.
    fn offer(&mut self, bufs: &[(u64, u32, bool)]) -> u16 {
        let head = self.next_desc;
        for (i, &(addr, len, w)) in bufs.iter().enumerate() {
            let idx = (head + i as u16) % QSIZE;
            let last = i + 1 == bufs.len();
            let d = Desc {
                addr,
                len,
                flags: if w { WRITE } else { 0 } | if last { 0 } else { NEXT },
                next: (idx + 1) % QSIZE,
            };
            self.m()
                .write_slice(&d.to_bytes(), GuestAddress(DESC + 16 * u64::from(idx)))
                .unwrap();
        }
        self.next_desc = (head + bufs.len() as u16) % QSIZE;
        self.offer_head(head);
        head
    }

    fn offer_head(&mut self, head: u16) {
        let slot = u64::from(self.avail % QSIZE);
        self.m()
            .write_obj(head, GuestAddress(AVAIL + 4 + 2 * slot))
            .unwrap();
        self.avail = self.avail.wrapping_add(1);
        self.m()
            .write_obj(self.avail, GuestAddress(AVAIL + 2))
            .unwrap();
    }

    /// A request: header, data segments, status. Returns (head, status address).
    fn request(&mut self, type_: u32, sector: u64, data: &[(u64, u32)], write: bool) -> (u16, u64) {
        let hdr = self.alloc(16);
        let h = ReqHeader {
            type_,
            ioprio: 0,
            sector,
        };
        self.m()
            .write_slice(&h.to_bytes(), GuestAddress(hdr))
            .unwrap();
        let status = self.alloc(1);
        self.m().write_obj(0xffu8, GuestAddress(status)).unwrap();
        let mut bufs = vec![(hdr, 16, false)];
        bufs.extend(data.iter().map(|&(a, l)| (a, l, write)));
        bufs.push((status, 1, true));
        (self.offer(&bufs), status)
    }

    /// Used entries not seen yet: (head, len).
    fn reap(&mut self) -> Vec<(u16, u32)> {
        let idx: u16 = self.m().read_obj(GuestAddress(USED + 2)).unwrap();
        let mut out = Vec::new();
        while self.used_seen != idx {
            let at = USED + 4 + 8 * u64::from(self.used_seen % QSIZE);
            let id: u32 = self.m().read_obj(GuestAddress(at)).unwrap();
            let len: u32 = self.m().read_obj(GuestAddress(at + 4)).unwrap();
            out.push((id as u16, len));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        out
    }

    fn status(&self, at: u64) -> u8 {
        self.m().read_obj(GuestAddress(at)).unwrap()
    }
}

/// A ring on a malloc bdev, with what its group would own.
struct Rig {
    ring: RingTask,
    q: BdevQueue,
    plug: Plug,
    pool: BufPool,
    now: u64,
}

fn rig(drv: &Driver, readonly: bool, depth: u32) -> Rig {
    rig_with(drv, readonly, depth, None, 0)
}

fn rig_with(drv: &Driver, readonly: bool, depth: u32, log: Option<QueueLog>, base: u16) -> Rig {
    let dev = MallocDevice::new(MallocOptions {
        name: "Malloc0".into(),
        block_size: BS,
        num_blocks: 1024,
        ..MallocOptions::default()
    })
    .unwrap();
    let dev: Arc<dyn BlockDevice> = dev;
    let q = BdevQueue::open(
        dev,
        BdevQueueOptions {
            depth,
            ..BdevQueueOptions::default()
        },
    )
    .unwrap();
    let mut plug = Plug::default();
    q.register_plug(&mut plug);
    let setup = RingSetup {
        requests: Default::default(),
        key: RingKey { ctrlr: 1, queue: 0 },
        name: Arc::from("vhost.test"),
        size: QSIZE,
        addrs: VringAddrs {
            desc: DESC,
            avail: AVAIL,
            used: USED,
        },
        base,
        mem: Arc::clone(&drv.mem),
        kick: None,
        call: None,
        bdev: "Malloc0".into(),
        readonly,
        serial: *b"Malloc0\0\0\0\0\0\0\0\0\0\0\0\0\0",
        log,
    };
    let ring = RingTask::new(setup, &q, 0).unwrap();
    Rig {
        ring,
        q,
        plug,
        pool: BufPool::new(),
        now: 0,
    }
}

impl Rig {
    /// One group poll.
    fn poll(&mut self) {
        self.now += 1000;
        let mut grew = false;
        self.plug.begin();
        let mut io = IoCtx {
            q: Some(&mut self.q),
            plug: &mut self.plug,
            pool: &mut self.pool,
            pool_grew: &mut grew,
            token: 0,
        };
        self.ring.poll(&mut io, self.now);
        self.plug.finish();
        self.q.flush();
        let mut done = Vec::new();
        self.q
            .poll(128, |rq| done.push((rq.token as u16, rq.status)));
        for (head, st) in done {
            self.ring.io_done(head, st, &mut self.pool);
        }
        self.ring.publish();
    }

    fn run(&mut self, drv: &mut Driver, want: usize) -> Vec<(u16, u32)> {
        let mut got = Vec::new();
        for _ in 0..1000 {
            self.poll();
            got.extend(drv.reap());
            if got.len() >= want {
                break;
            }
        }
        assert_eq!(got.len(), want, "completions");
        got
    }
}

/// `n` pages of `fill`-derived bytes in guest memory: [(addr, 4096)].
fn pages(drv: &mut Driver, n: usize, fill: u8) -> Vec<(u64, u32)> {
    (0..n)
        .map(|i| {
            let a = drv.alloc(4096);
            let bytes: Vec<u8> = (0..4096).map(|j| fill ^ (i as u8) ^ (j as u8)).collect();
            drv.m().write_slice(&bytes, GuestAddress(a)).unwrap();
            (a, 4096)
        })
        .collect()
}

fn read_pages(drv: &Driver, segs: &[(u64, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(a, l) in segs {
        let mut b = vec![0u8; l as usize];
        drv.m().read_slice(&mut b, GuestAddress(a)).unwrap();
        out.extend(b);
    }
    out
}

#[test]
fn writes_and_reads_across_chunks_and_segments() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 64);
    // 48 pages = 192 KiB: two bounce chunks, 48 segments.
    let src = pages(&mut drv, 48, 0x5a);
    let (h, st) = drv.request(1, 8 * 16, &src, false);
    assert_eq!(r.run(&mut drv, 1), vec![(h, 1)]);
    assert_eq!(drv.status(st), 0);
    let dst = pages(&mut drv, 48, 0);
    let (h, st) = drv.request(0, 8 * 16, &dst, true);
    assert_eq!(r.run(&mut drv, 1), vec![(h, 48 * 4096 + 1)]);
    assert_eq!(drv.status(st), 0);
    assert_eq!(read_pages(&drv, &src), read_pages(&drv, &dst));
}

#[test]
fn a_full_bdev_queue_makes_requests_wait_not_fail() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 2);
    let mut stats = Vec::new();
    for i in 0..5u64 {
        let d = pages(&mut drv, 2, i as u8);
        // Three segments each: 15 descriptors of the 16.
        stats.push(drv.request(1, 16 * i, &d, false).1);
    }
    let done = r.run(&mut drv, 5);
    assert_eq!(done.len(), 5);
    assert!(stats.iter().all(|&s| drv.status(s) == 0));
}

#[test]
fn statuses_for_bad_requests_and_the_ring_goes_on() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, true, 16);
    let d = pages(&mut drv, 1, 1);
    // A write to a read-only controller: IOERR.
    let (_, st) = drv.request(1, 0, &d, false);
    r.run(&mut drv, 1);
    assert_eq!(drv.status(st), BlkStatus::IoErr as u8);
    // Unknown type: UNSUPP; past the end: IOERR; not whole sectors: UNSUPP.
    let (_, st1) = drv.request(3, 0, &[], false);
    let (_, st2) = drv.request(0, 8 * 1024, &d, true);
    let odd = [(d[0].0, 100)];
    let (_, st3) = drv.request(0, 0, &odd, true);
    r.run(&mut drv, 3);
    assert_eq!(drv.status(st1), BlkStatus::Unsupp as u8);
    assert_eq!(drv.status(st2), BlkStatus::IoErr as u8);
    assert_eq!(drv.status(st3), BlkStatus::Unsupp as u8);
    // A chain pointing outside guest memory: returned with len 0, status untouched.
    let hdr = drv.alloc(16);
    let status = drv.alloc(1);
    drv.m().write_obj(0xffu8, GuestAddress(status)).unwrap();
    let h = drv.offer(&[(hdr, 16, false), (1 << 40, 4096, true), (status, 1, true)]);
    assert_eq!(r.run(&mut drv, 1), vec![(h, 0)]);
    assert_eq!(drv.status(status), 0xff);
    // The ring still serves reads, and GET_ID.
    let (_, st) = drv.request(0, 0, &d, true);
    let id = [(drv.alloc(20), 20)];
    let (h, sid) = drv.request(8, 0, &id, true);
    let done = r.run(&mut drv, 2);
    assert_eq!(drv.status(st), 0);
    assert_eq!(drv.status(sid), 0);
    assert!(done.contains(&(h, 21)));
    assert_eq!(&read_pages(&drv, &id)[..8], b"Malloc0\0");
}

#[test]
fn discard_and_write_zeroes_read_back_zero() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 16);
    let d = pages(&mut drv, 4, 0x77);
    drv.request(1, 0, &d, false);
    r.run(&mut drv, 1);
    for (ty, sector) in [(13u32, 0u64), (11, 16)] {
        let range = crate::spec::DwzRange {
            sector,
            num_sectors: 16,
            flags: 0,
        };
        let a = drv.alloc(16);
        drv.m()
            .write_slice(&range.to_bytes(), GuestAddress(a))
            .unwrap();
        let (_, st) = drv.request(ty, 0, &[(a, 16)], false);
        r.run(&mut drv, 1);
        assert_eq!(drv.status(st), 0, "type {ty}");
    }
    let back = pages(&mut drv, 4, 0x11);
    drv.request(0, 0, &back, true);
    r.run(&mut drv, 1);
    assert!(read_pages(&drv, &back).iter().all(|&b| b == 0));
}

#[test]
fn stop_answers_after_in_flight_requests() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 16);
    let d = pages(&mut drv, 4, 3);
    drv.request(1, 0, &d, false);
    // Take the request and submit it, but do not reap yet.
    r.now += 1000;
    let mut grew = false;
    r.plug.begin();
    let mut io = IoCtx {
        q: Some(&mut r.q),
        plug: &mut r.plug,
        pool: &mut r.pool,
        pool_grew: &mut grew,
        token: 0,
    };
    assert!(r.ring.poll(&mut io, r.now));
    r.plug.finish();
    r.q.flush();
    let (tx, rx) = mpsc::channel();
    r.ring.stop(tx);
    assert!(!r.ring.is_drained(), "a request is in flight");
    // A request offered after the stop is not taken.
    drv.request(0, 0, &d, true);
    r.run(&mut drv, 1);
    assert!(r.ring.is_drained());
    let Rig { ring, .. } = r;
    ring.finish_stop();
    assert_eq!(
        rx.recv().unwrap(),
        1,
        "the next available index: the second request"
    );
}

#[test]
fn a_jumping_avail_index_stops_the_ring() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 16);
    drv.m()
        .write_obj(QSIZE + 1, GuestAddress(AVAIL + 2))
        .unwrap();
    r.poll();
    assert!(drv.reap().is_empty());
    assert!(matches!(r.ring.state, RingState::Broken));
    assert!(!r.ring.must_poll(), "a broken ring lets its reactor sleep");
    // The same head offered twice while in flight also stops it.
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 16);
    let d = pages(&mut drv, 1, 0);
    let (h, _) = drv.request(1, 0, &d, false);
    drv.offer_head(h);
    r.run(&mut drv, 1);
    assert!(matches!(r.ring.state, RingState::Broken));
}

#[test]
fn kicks_are_turned_back_on_when_idle() {
    let mut drv = Driver::new();
    let mut r = rig(&drv, false, 16);
    let flags = |drv: &Driver| drv.m().read_obj::<u16>(GuestAddress(USED)).unwrap();
    assert_eq!(flags(&drv), 1, "NO_NOTIFY while polled");
    r.now += KICKS_AFTER_IDLE_NS;
    r.poll();
    assert_eq!(flags(&drv), 0, "kicks back on after idling");
    assert!(!r.ring.must_poll(), "the reactor may sleep");
    let d = pages(&mut drv, 1, 0);
    drv.request(1, 0, &d, false);
    r.run(&mut drv, 1);
    assert_eq!(flags(&drv), 1, "polled again");
}

#[test]
fn a_new_backend_resubmits_what_was_in_flight_from_the_log() {
    use crate::inflight::InflightRegion;
    let mut drv = Driver::new();
    let region = InflightRegion::create(1, QSIZE).unwrap().region;
    let mut r = rig_with(&drv, false, 16, Some(region.queue(0, QSIZE).unwrap()), 0);
    let d1 = pages(&mut drv, 1, 1);
    let d2 = pages(&mut drv, 1, 2);
    drv.request(1, 0, &d1, false);
    drv.request(1, 8, &d2, false);
    r.run(&mut drv, 2);
    // A third write is taken and submitted; the backend dies before it completes.
    let d3 = pages(&mut drv, 1, 3);
    let (h3, st3) = drv.request(1, 16, &d3, false);
    let mut grew = false;
    r.plug.begin();
    let mut io = IoCtx {
        q: Some(&mut r.q),
        plug: &mut r.plug,
        pool: &mut r.pool,
        pool_grew: &mut grew,
        token: 0,
    };
    r.ring.poll(&mut io, 1);
    r.plug.finish();
    assert_eq!(r.ring.inflight, 1);
    std::mem::forget(r.ring);
    // The front end rewinds the ring to the used index (2) for the next backend.
    let mut r = rig_with(&drv, false, 16, Some(region.queue(0, QSIZE).unwrap()), 2);
    assert_eq!(r.ring.replay, vec![h3]);
    assert_eq!(
        r.ring.vring.last_avail(),
        3,
        "the third head is not taken twice"
    );
    assert_eq!(r.run(&mut drv, 1), vec![(h3, 1)]);
    assert_eq!(drv.status(st3), 0);
    // The data arrived, and new requests go on from there.
    let back = pages(&mut drv, 1, 0);
    drv.request(0, 16, &back, true);
    r.run(&mut drv, 1);
    assert_eq!(read_pages(&drv, &back), read_pages(&drv, &d3));
}

#[test]
fn a_new_memory_table_while_the_ring_runs() {
    use crate::mem::RegionDesc;
    // Guest memory in a file, as QEMU's memfd, at front-end address 0x7f00_0000_0000 (the
    // ring's addresses are front-end addresses). The second table (after, say, a hot-plugged
    // region) maps the file again, plus a second region: the ring must use the new mapping.
    let f = tempfile::tempfile().unwrap();
    f.set_len(MEM as u64).unwrap();
    let table = |va: u64, extra: bool| {
        let mut regions = vec![RegionDesc {
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            user_addr: va,
            mmap_offset: 0,
        }];
        let mut files = vec![f.try_clone().unwrap()];
        if extra {
            let g = tempfile::tempfile().unwrap();
            g.set_len(1 << 20).unwrap();
            regions.push(RegionDesc {
                guest_phys_addr: 1 << 32,
                memory_size: 1 << 20,
                user_addr: va + (1 << 32),
                mmap_offset: 0,
            });
            files.push(g);
        }
        Arc::new(GuestMem::map(&regions, files).unwrap())
    };
    let first = table(0x7f00_0000_0000, false);
    let mut drv = Driver::new();
    drv.mem = Arc::clone(&first);
    let dev: Arc<dyn BlockDevice> = MallocDevice::new(MallocOptions {
        block_size: BS,
        num_blocks: 1024,
        ..MallocOptions::default()
    })
    .unwrap();
    let q = BdevQueue::open(dev, BdevQueueOptions::default()).unwrap();
    let mut plug = Plug::default();
    q.register_plug(&mut plug);
    let va = |gpa: u64| 0x7f00_0000_0000 + gpa;
    let setup = RingSetup {
        requests: Default::default(),
        key: RingKey { ctrlr: 1, queue: 0 },
        name: Arc::from("vhost.test"),
        size: QSIZE,
        addrs: VringAddrs {
            desc: va(DESC),
            avail: va(AVAIL),
            used: va(USED),
        },
        base: 0,
        mem: Arc::clone(&first),
        kick: None,
        call: None,
        bdev: "Malloc0".into(),
        readonly: false,
        serial: [0; ID_BYTES],
        log: None,
    };
    let ring = RingTask::new(setup, &q, 0).unwrap();
    let mut r = Rig {
        ring,
        q,
        plug,
        pool: BufPool::new(),
        now: 0,
    };
    let d = pages(&mut drv, 2, 9);
    let (_, st) = drv.request(1, 0, &d, false);
    r.run(&mut drv, 1);
    assert_eq!(drv.status(st), 0);
    // The ring switches to the new mapping of the same memory; the driver still writes
    // through the first one.
    r.ring.set_mem(table(0x7f00_0000_0000, true));
    let back = pages(&mut drv, 2, 0);
    let (_, st) = drv.request(0, 0, &back, true);
    r.run(&mut drv, 1);
    assert_eq!(drv.status(st), 0);
    assert_eq!(read_pages(&drv, &back), read_pages(&drv, &d));
    // A table without the ring's memory stops the ring, and only it.
    r.ring.set_mem(table(0x1000_0000_0000, false));
    assert!(matches!(r.ring.state, RingState::Broken));
}

mod prop {
    use proptest::prelude::*;

    use super::*;
    use crate::spec::desc_flags::INDIRECT;

    /// Guest memory is 8 MiB; hostile addresses land inside, at the edges and outside.
    fn addr() -> impl Strategy<Value = u64> {
        prop_oneof![
            HEAP..HEAP + 0x4000,
            (MEM as u64 - 0x2000)..(MEM as u64 + 0x2000),
            Just(DESC),
            Just(USED),
            any::<u64>(),
        ]
    }

    fn desc() -> impl Strategy<Value = Desc> {
        (
            addr(),
            prop_oneof![1u32..64, 0u32..0x3000, any::<u32>()],
            prop_oneof![0u16..8, Just(NEXT | WRITE), Just(INDIRECT)],
            prop_oneof![0u16..8, any::<u16>()],
        )
            .prop_map(|(addr, len, flags, next)| Desc {
                addr,
                len,
                flags,
                next,
            })
    }

    /// Whether byte `a` may be written by the device: the used ring, or a buffer some
    /// descriptor (in the queue's table or in a table it points to) marks device-writable.
    fn writable(mem: &GuestMemoryMmap, a: u64) -> bool {
        if (USED..USED + 4 + 8 * u64::from(QSIZE) + 2).contains(&a) {
            return true;
        }
        let covers = |d: &Desc| d.has(WRITE) && a >= d.addr && a - d.addr < u64::from(d.len);
        let read = |at: u64| {
            let mut b = [0u8; 16];
            mem.read_slice(&mut b, GuestAddress(at)).ok()?;
            Some(Desc::from_bytes(&b))
        };
        (0..u64::from(QSIZE)).any(|i| {
            let Some(d) = read(DESC + 16 * i) else {
                return false;
            };
            if covers(&d) {
                return true;
            }
            d.has(INDIRECT)
                && (0..u64::from(d.len / 16).min(64))
                    .any(|j| read(d.addr + 16 * j).is_some_and(|x| covers(&x)))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever the guest puts in its rings and tables, the ring neither panics nor writes
        /// a byte outside the used ring and the buffers the guest marked device-writable.
        #[test]
        fn prop_hostile_rings_write_only_where_allowed(
            table in proptest::collection::vec(desc(), 8),
            heads in proptest::collection::vec(prop_oneof![0u16..8, any::<u16>()], 1..6),
            headers in proptest::collection::vec((0u32..16, 0u64..4096), 4),
            seed in any::<u8>(),
        ) {
            let mut drv = Driver::new();
            // A recognisable background, with request headers at the heap's start.
            let bg: Vec<u8> = (0..0x8000u32).map(|i| (i as u8) ^ seed).collect();
            drv.m().write_slice(&bg, GuestAddress(HEAP)).unwrap();
            for (i, &(t, sector)) in headers.iter().enumerate() {
                let h = ReqHeader { type_: t, ioprio: 0, sector };
                drv.m()
                    .write_slice(&h.to_bytes(), GuestAddress(HEAP + 0x1000 * i as u64))
                    .unwrap();
            }
            for (i, d) in table.iter().enumerate() {
                drv.m()
                    .write_slice(&d.to_bytes(), GuestAddress(DESC + 16 * i as u64))
                    .unwrap();
            }
            let mut r = rig(&drv, false, 4);
            for &h in &heads {
                drv.offer_head(h);
            }
            // The windows hostile addresses reach (and the rings): the rest of memory is
            // only reachable through a random 64-bit address that happens to land in it.
            let windows = [(0u64, (HEAP + 0x10000) as usize), (MEM as u64 - 0x4000, 0x4000)];
            let snap = |drv: &Driver| -> Vec<Vec<u8>> {
                windows
                    .iter()
                    .map(|&(at, len)| {
                        let mut b = vec![0u8; len];
                        drv.m().read_slice(&mut b, GuestAddress(at)).unwrap();
                        b
                    })
                    .collect()
            };
            let before = snap(&drv);
            for _ in 0..20 {
                r.poll();
            }
            let after = snap(&drv);
            for (w, (b, a)) in windows.iter().zip(before.iter().zip(&after)) {
                for (i, (x, y)) in b.iter().zip(a).enumerate() {
                    let at = w.0 + i as u64;
                    if x != y {
                        prop_assert!(
                            writable(drv.m(), at),
                            "byte {at:#x} changed ({x:#x} -> {y:#x})"
                        );
                    }
                }
            }
            prop_assert_eq!(r.ring.inflight, 0, "everything taken completed");
        }
    }
}
