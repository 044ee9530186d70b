//! RAID bdevs over malloc bdevs, through the block layer's queue (splitting included): data
//! read back equals data written, it lands on the members where SPDK's layout puts it, and a
//! raid1 that loses a member keeps every acknowledged write.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::plug::Plug;
use pmio::{
    BdevError, BdevInfo, BlockDevice, DmaRegion, DriverQueue, HctxType, Io, IoBuf, IoStatus, Op,
    Request,
};
use pmio_malloc::{MallocDevice, MallocOptions};

use pmio_reactors::{CoreMask, Reactors, ReactorsHandle, ReactorsOptions};

use crate::assembly::{Decision, Found, Gathering};
use crate::keeper;
use crate::rebuild::{Process, ProcessOptions, Runner};
use crate::superblock::{MemberState, Superblock};
use crate::{RaidDevice, RaidLevel, RaidOptions, SlotState};

/// One reactor for every test's rebuilds (a daemon's first reactor): unpinned and sleeping
/// when idle, so tests running side by side do not spin a core each.
fn runner() -> Runner {
    static REACTORS: OnceLock<ReactorsHandle> = OnceLock::new();
    let handle = REACTORS.get_or_init(|| {
        let core = CoreMask::available().unwrap().first();
        let reactors = Reactors::start(
            CoreMask::from_cores([core]).unwrap(),
            ReactorsOptions {
                pin_threads: false,
                interrupt_idle: Some(Duration::from_millis(1)),
                ..Default::default()
            },
        )
        .unwrap();
        let handle = reactors.handle();
        // Runs until the test process exits.
        std::mem::forget(reactors);
        handle
    });
    Runner::first_core(handle)
}

/// Waits (10 s at most) until `p` has ended.
fn wait_finished(p: &Process) {
    let t0 = Instant::now();
    while !p.finished() {
        assert!(t0.elapsed() < Duration::from_secs(10), "rebuild hangs");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits (10 s at most) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}: never");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn malloc(name: &str, kib: u64) -> Arc<dyn BlockDevice> {
    MallocDevice::new(MallocOptions {
        name: name.into(),
        num_blocks: (kib << 10) / 512,
        ..Default::default()
    })
    .unwrap()
}

fn raid(level: RaidLevel, strip_kb: u32, members: Vec<Arc<dyn BlockDevice>>) -> Arc<RaidDevice> {
    RaidDevice::new(RaidOptions {
        name: "Raid0".into(),
        uuid: None,
        level,
        strip_size_kb: strip_kb,
        members,
        superblock: false,
    })
    .unwrap()
}

/// A queue and a buffer to do synchronous I/O with.
struct Q {
    q: BdevQueue,
    plug: Plug,
    buf: DmaRegion,
}

impl Q {
    fn open(dev: Arc<dyn BlockDevice>) -> Q {
        let q = BdevQueue::open(
            dev,
            BdevQueueOptions {
                depth: 16,
                ..Default::default()
            },
        )
        .unwrap();
        let mut plug = Plug::default();
        q.register_plug(&mut plug);
        Q {
            q,
            plug,
            buf: DmaRegion::new(1 << 20).unwrap(),
        }
    }

    fn io(&mut self, op: Op, lba: u64, nblocks: u32) -> IoStatus {
        let len = if op.has_data() { nblocks * 512 } else { 0 };
        // SAFETY: the buffer is ours and outlives the I/O, which completes before we return.
        let buf = unsafe { IoBuf::from_raw_parts(self.buf.as_ptr(), len) };
        let io = Io {
            op,
            lba,
            nblocks,
            buf,
            ..Io::default()
        };
        self.plug.begin();
        self.q.expect(&mut self.plug, &io);
        self.q.submit(&mut self.plug, &io).unwrap();
        self.plug.finish();
        self.q.flush();
        let mut status = IoStatus::Pending;
        let t0 = Instant::now();
        while self.q.outstanding() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "I/O hangs");
            self.q.poll(8, |rq| status = rq.status);
        }
        status
    }

    fn write(&mut self, lba: u64, data: &[u8]) {
        self.buf.as_mut_slice()[..data.len()].copy_from_slice(data);
        let s = self.io(Op::Write, lba, (data.len() / 512) as u32);
        assert_eq!(s, IoStatus::Success, "write at {lba}");
    }

    fn read(&mut self, lba: u64, len: usize) -> Vec<u8> {
        let s = self.io(Op::Read, lba, (len / 512) as u32);
        assert_eq!(s, IoStatus::Success, "read at {lba}");
        self.buf.as_slice()[..len].to_vec()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn raid0_stripes_as_spdk_lays_it_out_and_reads_back_across_strips() {
    let m: Vec<_> = (0..3).map(|i| malloc(&format!("M{i}"), 1024)).collect();
    let r = raid(RaidLevel::Raid0, 64, m.clone());
    assert_eq!(r.info().num_blocks, 3 * 2048);
    assert_eq!(r.info().boundary_blocks, 128);
    let mut q = Q::open(r);
    // 1 MiB from block 100: crosses 8 strips on all three members.
    let data = pattern(7, 1 << 20);
    q.write(100, &data);
    assert_eq!(q.read(100, data.len()), data);
    // Array strip 4 (blocks 512..640) is strip 1 of member 1 (its blocks 128..256).
    let mut m1 = Q::open(Arc::clone(&m[1]));
    let from = (512 - 100) * 512;
    assert_eq!(m1.read(128, 64 << 10), data[from..from + (64 << 10)]);
    assert_eq!(q.io(Op::Flush, 0, 0), IoStatus::Success);
}

#[test]
fn concat_puts_members_one_after_the_other() {
    let m = vec![malloc("A", 200), malloc("B", 512)];
    let r = raid(RaidLevel::Concat, 64, m.clone());
    // 200 KiB holds 3 whole 64 KiB strips: B starts at array block 384.
    assert_eq!(r.info().num_blocks, 384 + 1024);
    let mut q = Q::open(r);
    let data = pattern(3, 128 << 10);
    q.write(320, &data);
    assert_eq!(q.read(320, data.len()), data);
    let mut b = Q::open(Arc::clone(&m[1]));
    assert_eq!(b.read(0, 96 << 10), data[32 << 10..]);
}

#[test]
fn refused_arrays_say_why() {
    let err = |level, kb, members: Vec<Arc<dyn BlockDevice>>| {
        RaidDevice::new(RaidOptions {
            name: "R".into(),
            uuid: None,
            level,
            strip_size_kb: kb,
            members,
            superblock: false,
        })
        .err()
        .unwrap()
        .to_string()
    };
    assert!(err(RaidLevel::Raid1, 0, vec![malloc("A", 64)]).contains("at least 2"));
    assert!(err(RaidLevel::Raid0, 48, vec![malloc("A", 64)]).contains("power of two"));
    assert!(err(RaidLevel::Raid1, 64, vec![malloc("A", 64), malloc("B", 64)]).contains("no strip"));
    let a = malloc("A", 64);
    assert!(err(RaidLevel::Raid0, 4, vec![Arc::clone(&a), a]).contains("twice"));
    assert!(err(RaidLevel::Raid0, 128, vec![malloc("A", 64)]).contains("smaller than one strip"));
}

/// A member that fails I/O on demand: while `fail` is above 0, each request of `op` (of any
/// op if `None`) at or past block `from` fails with `status` and counts it down, as a
/// replica's do while its connection drops and comes back; [`VANISHED`] fails every one for
/// good, as a device that went away.
struct Flaky {
    inner: Arc<dyn BlockDevice>,
    op: Option<Op>,
    from: u64,
    status: IoStatus,
    fail: Arc<AtomicU32>,
}

/// `Flaky::fail` for a device that is gone.
const VANISHED: u32 = u32::MAX;

/// A member that fails every I/O once `broken` is [`VANISHED`].
fn breakable(inner: Arc<dyn BlockDevice>, broken: &Arc<AtomicU32>) -> Arc<dyn BlockDevice> {
    Arc::new(Flaky {
        inner,
        op: None,
        from: 0,
        status: IoStatus::DeviceRemoved,
        fail: Arc::clone(broken),
    })
}

struct FlakyQueue {
    inner: Box<dyn DriverQueue>,
    op: Option<Op>,
    from: u64,
    status: IoStatus,
    fail: Arc<AtomicU32>,
    failed: Vec<u16>,
    pass: Vec<u16>,
}

impl BlockDevice for Flaky {
    fn info(&self) -> &BdevInfo {
        self.inner.info()
    }
    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        Ok(Box::new(FlakyQueue {
            inner: self.inner.open_queue(ty, index, depth)?,
            op: self.op,
            from: self.from,
            status: self.status,
            fail: Arc::clone(&self.fail),
            failed: Vec::new(),
            pass: Vec::new(),
        }))
    }
}

impl FlakyQueue {
    /// Whether `rq` fails here (counted).
    fn fails(&self, rq: &Request) -> bool {
        self.op.is_none_or(|op| rq.op == op)
            && rq.lba >= self.from
            && self
                .fail
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match n {
                    0 => None,
                    VANISHED => Some(VANISHED),
                    n => Some(n - 1),
                })
                .is_ok()
    }
}

impl DriverQueue for FlakyQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.pass.clear();
        for &t in tags {
            if self.fails(&rqs[t as usize]) {
                rqs[t as usize].status = self.status;
                self.failed.push(t);
            } else {
                self.pass.push(t);
            }
        }
        let pass = std::mem::take(&mut self.pass);
        self.inner.submit(rqs, &pass);
        self.pass = pass;
    }
    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let n = self.failed.len().min(max);
        done.extend(self.failed.drain(..n));
        n + self.inner.poll(rqs, done, max - n)
    }
    fn outstanding(&self) -> usize {
        self.failed.len() + self.inner.outstanding()
    }
}

#[test]
fn raid1_mirrors_and_survives_losing_a_member_with_nothing_lost() {
    let a = malloc("A", 1024);
    let b = malloc("B", 1024);
    let broken = Arc::new(AtomicU32::new(0));
    let flaky = breakable(Arc::clone(&b), &broken);
    let r = raid(RaidLevel::Raid1, 0, vec![Arc::clone(&a), flaky]);
    assert_eq!(r.info().num_blocks, 2048);
    assert_eq!(r.info().boundary_blocks, 0);
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    let first = pattern(1, 256 << 10);
    q.write(0, &first);
    // Both copies hold it.
    assert_eq!(Q::open(Arc::clone(&a)).read(0, first.len()), first);
    assert_eq!(Q::open(Arc::clone(&b)).read(0, first.len()), first);
    // Reads balance over both members: every one reads back right.
    for lba in (0..512).step_by(64) {
        assert_eq!(
            q.read(lba, 32 << 10),
            first[lba as usize * 512..][..32 << 10]
        );
    }
    // Member B vanishes: the next write still succeeds on A, B leaves the array.
    broken.store(VANISHED, Ordering::Relaxed);
    let second = pattern(2, 64 << 10);
    q.write(1024, &second);
    assert_eq!(r.health().operational_count(), 1);
    assert!(!r.health().operational(1));
    assert_eq!(r.state(), "online");
    // Everything acknowledged reads back, from A only now.
    assert_eq!(q.read(0, first.len()), first);
    assert_eq!(q.read(1024, second.len()), second);
}

#[test]
fn a_raid1_read_that_fails_is_retried_on_the_other_copy() {
    let a = malloc("A", 512);
    let b = malloc("B", 512);
    let broken = Arc::new(AtomicU32::new(0));
    let flaky = breakable(Arc::clone(&a), &broken);
    // The flaky member first: with nothing outstanding it is the first pick for a read.
    let r = raid(RaidLevel::Raid1, 0, vec![flaky, b]);
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    let data = pattern(9, 8 << 10);
    q.write(8, &data);
    broken.store(VANISHED, Ordering::Relaxed);
    assert_eq!(q.read(8, data.len()), data);
    assert_eq!(r.health().operational_count(), 1);
    // With no copy left, I/O fails rather than returning anything.
    let r2 = raid(RaidLevel::Raid1, 0, {
        let dead = Arc::new(AtomicU32::new(VANISHED));
        (0..2)
            .map(|i| breakable(malloc(&format!("D{i}"), 64), &dead))
            .collect()
    });
    let mut q2 = Q::open(Arc::clone(&r2) as Arc<dyn BlockDevice>);
    assert_ne!(q2.io(Op::Read, 0, 8), IoStatus::Success);
    assert_ne!(q2.io(Op::Write, 0, 8), IoStatus::Success);
    assert_eq!(r2.state(), "offline");
}

/// A member that cannot be opened, as a replica whose machine is gone.
struct Unreachable(Arc<dyn BlockDevice>);

impl BlockDevice for Unreachable {
    fn info(&self) -> &BdevInfo {
        self.0.info()
    }
    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        _: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        Err(BdevError::QueueOpen {
            name: self.0.info().name.clone(),
            ty,
            index,
            reason: "disconnected".into(),
        })
    }
}

#[test]
fn a_raid1_queue_opens_without_a_member_it_cannot_reach_and_a_raid0_one_does_not() {
    let gone: Arc<dyn BlockDevice> = Arc::new(Unreachable(malloc("G", 256)));
    let r = raid(
        RaidLevel::Raid1,
        0,
        vec![malloc("A", 256), Arc::clone(&gone)],
    );
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    assert_eq!(r.health().state(1), SlotState::Failed);
    let data = pattern(4, 8 << 10);
    q.write(0, &data);
    assert_eq!(q.read(0, data.len()), data);
    let r0 = raid(RaidLevel::Raid0, 4, vec![malloc("B", 256), gone]);
    assert!(r0.open_queue(HctxType::Default, 0, 4).is_err());
}

/// Runs `rqs[tags]` on an array's own driver queue to completion.
fn run_driver(q: &mut dyn DriverQueue, rqs: &mut [Request], tags: &[u16]) {
    q.submit(rqs, tags);
    let mut done = Vec::with_capacity(rqs.len());
    let t0 = Instant::now();
    while done.len() < tags.len() {
        assert!(t0.elapsed() < Duration::from_secs(10), "I/O hangs");
        q.poll(rqs, &mut done, rqs.len());
    }
}

#[test]
fn forwarded_requests_complete_with_the_arrays_extent() {
    // raid0 forwards in place (the member's block is written into the caller's request while
    // it is out), raid1 through copies: either way the caller gets its own request back.
    for (level, kb) in [
        (RaidLevel::Raid0, 4),
        (RaidLevel::Concat, 4),
        (RaidLevel::Raid1, 0),
    ] {
        let r = raid(level, kb, vec![malloc("A", 64), malloc("B", 64)]);
        let mut q = r.open_queue(HctxType::Default, 0, 4).unwrap();
        let buf = DmaRegion::new(4 << 10).unwrap();
        let mut rqs = vec![Request::default(); 4];
        for (t, lba) in [(0u16, 8u64), (1, 24), (2, 100)] {
            let rq = &mut rqs[t as usize];
            rq.op = if t == 2 { Op::Read } else { Op::Write };
            rq.tag = t;
            rq.lba = lba;
            rq.nblocks = 8;
            // SAFETY: the buffer outlives the requests, which complete before it is dropped.
            rq.buf = unsafe { IoBuf::from_raw_parts(buf.as_ptr(), 4096) };
        }
        run_driver(q.as_mut(), &mut rqs, &[0, 1, 2]);
        for (t, lba) in [(0usize, 8u64), (1, 24), (2, 100)] {
            assert_eq!(rqs[t].status, IoStatus::Success, "{level} tag {t}");
            assert_eq!((rqs[t].lba, rqs[t].nblocks), (lba, 8), "{level} tag {t}");
        }
    }
}

fn raid_sb(level: RaidLevel, strip_kb: u32, members: Vec<Arc<dyn BlockDevice>>) -> Arc<RaidDevice> {
    RaidDevice::new(RaidOptions {
        name: "RaidSb".into(),
        uuid: None,
        level,
        strip_size_kb: strip_kb,
        members,
        superblock: true,
    })
    .unwrap()
}

fn member_sb(dev: &Arc<dyn BlockDevice>) -> Superblock {
    keeper::read_superblock(dev).unwrap().expect("a superblock")
}

#[test]
fn a_superblock_array_keeps_its_data_past_the_first_mib_and_its_superblock_on_every_member() {
    let m: Vec<_> = (0..2).map(|i| malloc(&format!("S{i}"), 4096)).collect();
    let r = raid_sb(RaidLevel::Raid0, 64, m.clone());
    // 4 MiB members, 1 MiB each for the superblock: 3 MiB of data each.
    assert_eq!(r.info().num_blocks, 2 * 3 * 2048);
    let sb = r.superblock().unwrap();
    assert_eq!(sb.seq_number, 1);
    for d in &m {
        assert_eq!(member_sb(d), sb);
        assert_eq!(sb.member(&d.info().uuid).unwrap().data_offset, 2048);
    }
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    let data = pattern(5, 256 << 10);
    q.write(0, &data);
    // Array strip 1 is member 1's first strip, at its block 2048.
    assert_eq!(
        Q::open(Arc::clone(&m[1])).read(2048, 64 << 10),
        data[64 << 10..128 << 10]
    );
    assert_eq!(q.read(0, data.len()), data);
}

#[test]
fn a_raid1_failure_is_in_the_superblock_before_the_write_it_failed_is_acknowledged() {
    let a = malloc("A", 4096);
    let b = malloc("B", 4096);
    let broken = Arc::new(AtomicU32::new(0));
    let flaky = breakable(Arc::clone(&b), &broken);
    let r = raid_sb(RaidLevel::Raid1, 0, vec![Arc::clone(&a), flaky]);
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    let first = pattern(1, 64 << 10);
    q.write(0, &first);
    broken.store(VANISHED, Ordering::Relaxed);
    let second = pattern(2, 64 << 10);
    q.write(128, &second);
    // The write is acknowledged: A's superblock already says B failed, one number later.
    let on_a = member_sb(&a);
    assert_eq!(on_a.seq_number, 2);
    assert_eq!(on_a.members[1].state, MemberState::Failed);
    let on_b = member_sb(&b);
    assert_eq!(on_b.seq_number, 1, "B took no update");
    drop(q);
    drop(r);

    // Restart: both members come back; B's older superblock is refused, the array runs on
    // A and every acknowledged write reads back.
    let mut g = Gathering::default();
    let offer = |g: &mut Gathering<Arc<dyn BlockDevice>>, d: &Arc<dyn BlockDevice>| {
        g.offer(Found {
            sb: member_sb(d),
            uuid: d.info().uuid,
            dev: Arc::clone(d),
        })
    };
    let (sb, slots) = match offer(&mut g, &a) {
        Decision::Assemble { sb, slots } => (sb, slots),
        d => panic!("{:?}", std::mem::discriminant(&d)),
    };
    assert!(slots[1].is_none());
    let r = RaidDevice::assemble(sb, slots).unwrap();
    assert_eq!(r.health().operational_count(), 1);
    assert_eq!(r.health().state(1), crate::SlotState::Missing);
    assert!(matches!(offer(&mut g, &b), Decision::Wait));
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    assert_eq!(q.read(0, first.len()), first);
    assert_eq!(q.read(128, second.len()), second);
}

#[test]
fn a_write_into_the_rebuild_window_waits_for_it_to_move_and_nothing_else_does() {
    let r = raid(
        RaidLevel::Raid1,
        0,
        vec![malloc("A", 256), malloc("B", 256)],
    );
    let mut q = r.open_queue(HctxType::Default, 0, 4).unwrap();
    let buf = DmaRegion::new(4 << 10).unwrap();
    let mut rqs = vec![Request::default(); 4];
    for (t, (op, lba)) in [(Op::Write, 64u64), (Op::Write, 256), (Op::Read, 64)]
        .into_iter()
        .enumerate()
    {
        let rq = &mut rqs[t];
        rq.op = op;
        rq.tag = t as u16;
        rq.lba = lba;
        rq.nblocks = 8;
        // SAFETY: the buffer outlives the requests, which complete before it is dropped.
        rq.buf = unsafe { IoBuf::from_raw_parts(buf.as_ptr(), 4096) };
    }
    r.shared.window.publish(0, 128);
    q.submit(&mut rqs, &[0, 1, 2]);
    let mut done = Vec::with_capacity(4);
    for _ in 0..50 {
        q.poll(&mut rqs, &mut done, 4);
    }
    // The write outside the window and the read went; the write inside waits.
    done.sort_unstable();
    assert_eq!(done, [1, 2]);
    assert_eq!(q.outstanding(), 1);
    r.shared.window.publish(0, 0);
    run_driver(q.as_mut(), &mut rqs, &[]);
    while q.outstanding() > 0 {
        q.poll(&mut rqs, &mut done, 4);
    }
    assert!(done.contains(&0));
    assert_eq!(rqs[0].status, IoStatus::Success);
}

/// A member whose reads complete `delay` after the device has done them, as a far replica's
/// do: a rebuild's read of a window then spans the front-end writes made meanwhile.
struct SlowReads {
    inner: Arc<dyn BlockDevice>,
    delay: Duration,
}

struct SlowReadsQueue {
    inner: Box<dyn DriverQueue>,
    delay: Duration,
    reaped: Vec<u16>,
    waiting: Vec<(u16, Instant)>,
}

impl BlockDevice for SlowReads {
    fn info(&self) -> &BdevInfo {
        self.inner.info()
    }
    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        Ok(Box::new(SlowReadsQueue {
            inner: self.inner.open_queue(ty, index, depth)?,
            delay: self.delay,
            reaped: Vec::new(),
            waiting: Vec::new(),
        }))
    }
}

impl DriverQueue for SlowReadsQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.inner.submit(rqs, tags);
    }
    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        self.reaped.clear();
        self.inner.poll(rqs, &mut self.reaped, usize::MAX);
        let now = Instant::now();
        for &t in &self.reaped {
            let at = if rqs[t as usize].op == Op::Read {
                now + self.delay
            } else {
                now
            };
            self.waiting.push((t, at));
        }
        let mut n = 0;
        let mut i = 0;
        while i < self.waiting.len() && n < max {
            if self.waiting[i].1 <= now {
                done.push(self.waiting.swap_remove(i).0);
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }
    fn outstanding(&self) -> usize {
        self.inner.outstanding() + self.waiting.len()
    }
}

#[test]
fn a_rebuild_copies_every_block_and_loses_no_write_made_while_it_runs() {
    // The source's reads take 2 ms: without the window, writes made while a window's copy
    // is read would be overwritten on the new member by the older data.
    let a: Arc<dyn BlockDevice> = Arc::new(SlowReads {
        inner: malloc("A", 4096),
        delay: Duration::from_millis(2),
    });
    let b = malloc("B", 4096);
    let c = malloc("C", 4096);
    let r = raid_sb(RaidLevel::Raid1, 0, vec![Arc::clone(&a), Arc::clone(&b)]);
    let size = r.info().num_blocks as usize * 512;
    let mut model = pattern(1, size);
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    for at in (0..size).step_by(1 << 20) {
        let n = (1 << 20).min(size - at);
        q.write((at / 512) as u64, &model[at..at + n]);
    }
    r.remove_member("B").unwrap();
    assert_eq!(r.health().operational_count(), 1);
    // Slow enough (8 MiB/s over 3 MiB, 256 KiB windows) that the writes below meet it,
    // many inside the window being copied.
    let opts = ProcessOptions {
        window_size_kb: 256,
        max_bandwidth_mb_sec: 8,
    };
    let slot = r.add_member(Arc::clone(&c), opts, &runner()).unwrap();
    assert_eq!(slot, 1);
    assert_eq!(r.health().state(1), crate::SlotState::Rebuilding);
    let mut seed = 7u8;
    let mut writes = 0;
    let mut x = 12345u64;
    while r.process().is_some() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lba = (x >> 33) % (r.info().num_blocks - 16);
        seed = seed.wrapping_add(1);
        let data = pattern(seed, 8 << 10);
        q.write(lba, &data);
        model[lba as usize * 512..][..data.len()].copy_from_slice(&data);
        writes += 1;
    }
    assert!(writes > 20, "only {writes} writes met the rebuild");
    assert_eq!(r.health().state(1), crate::SlotState::Operational);
    // The superblock writer records it.
    wait_until("C configured in its superblock", || {
        member_sb(&c).members[1].state == MemberState::Configured
    });
    // The new member holds every block as the array does, from its data offset.
    let mut cq = Q::open(Arc::clone(&c));
    for at in (0..size).step_by(1 << 20) {
        let n = (1 << 20).min(size - at);
        let got = cq.read((2048 + at / 512) as u64, n);
        let first = got.iter().zip(&model[at..at + n]).position(|(a, b)| a != b);
        if let Some(f) = first {
            let on_a = Q::open(Arc::clone(&a)).read((2048 + at / 512) as u64, n);
            panic!(
                "member C differs at byte {} (writes {writes}): C {:?} model {:?} A {:?}",
                at + f,
                &got[f..f + 8],
                &model[at + f..at + f + 8],
                &on_a[f..f + 8]
            );
        }
    }
}

#[test]
fn a_member_back_after_a_restart_gets_only_the_regions_written_while_it_was_away() {
    let a = malloc("A", 4096);
    let b = malloc("B", 4096);
    let r = raid_sb(RaidLevel::Raid1, 0, vec![Arc::clone(&a), Arc::clone(&b)]);
    let size = r.info().num_blocks as usize * 512;
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    let base = pattern(1, 1 << 20);
    for at in (0..size).step_by(1 << 20) {
        q.write((at / 512) as u64, &base[..(1 << 20).min(size - at)]);
    }
    r.remove_member("B").unwrap();
    // Three writes while B is away: two in one 64 KiB region, one crossing into a third.
    let new = pattern(9, 8 << 10);
    for lba in [300u64, 320, 1020] {
        q.write(lba, &new);
    }
    drop(q);
    drop(r);

    // Restart: the array assembles from A and its bitmap; B comes back.
    let sb = member_sb(&a);
    let mut slots: Vec<Option<Arc<dyn BlockDevice>>> = vec![None, None];
    slots[0] = Some(Arc::clone(&a));
    let r = RaidDevice::assemble(sb, slots).unwrap();
    assert!(r.shared.map.active());
    r.add_member(Arc::clone(&b), Default::default(), &runner())
        .unwrap();
    let p = r.last_process().expect("a rebuild");
    // Regions 2 (256..384), 7 and 8 (896..1152): 384 blocks, not the array's 6144.
    assert_eq!(p.total_blocks, 384);
    wait_finished(&p);
    assert_eq!(p.copied_blocks(), 384);
    assert_eq!(r.health().operational_count(), 2);
    assert!(
        !r.shared.map.active(),
        "cleared once both copies are current"
    );
    let mut qa = Q::open(Arc::clone(&a));
    let mut qb = Q::open(Arc::clone(&b));
    for at in (0..size).step_by(1 << 20) {
        let n = (1 << 20).min(size - at);
        let lba = (2048 + at / 512) as u64;
        assert!(
            qa.read(lba, n) == qb.read(lba, n),
            "copies differ in the MiB at {at}"
        );
    }
}

#[test]
fn a_member_that_missed_more_than_the_bitmap_knows_gets_a_full_rebuild() {
    let a = malloc("A", 4096);
    let b = malloc("B", 4096);
    let c = malloc("C", 4096);
    let r = raid_sb(RaidLevel::Raid1, 0, vec![Arc::clone(&a), Arc::clone(&b)]);
    r.remove_member("B").unwrap();
    // C has no superblock of this array: everything is copied.
    r.add_member(Arc::clone(&c), Default::default(), &runner())
        .unwrap();
    let p = r.last_process().unwrap();
    assert_eq!(p.total_blocks, r.info().num_blocks);
    wait_finished(&p);
}

/// Both members' data areas are the same.
fn same_data(x: &Arc<dyn BlockDevice>, y: &Arc<dyn BlockDevice>, data_blocks: u64) {
    let (mut qx, mut qy) = (Q::open(Arc::clone(x)), Q::open(Arc::clone(y)));
    for lba in (0..data_blocks).step_by(2048) {
        let n = (2048.min(data_blocks - lba) * 512) as usize;
        assert!(
            qx.read(2048 + lba, n) == qy.read(2048 + lba, n),
            "{} and {} differ in the MiB at array block {lba}",
            x.info().name,
            y.info().name
        );
    }
}

/// The superblocks of `members` offered to a new gathering, as a restarted daemon's examine
/// does: the array they build.
fn reassemble(members: &[&Arc<dyn BlockDevice>]) -> Arc<RaidDevice> {
    let mut g = Gathering::default();
    for d in members {
        if let Decision::Assemble { sb, slots } = g.offer(Found {
            sb: member_sb(d),
            uuid: d.info().uuid,
            dev: Arc::clone(d),
        }) {
            return RaidDevice::assemble(sb, slots).unwrap();
        }
    }
    panic!("the members did not assemble");
}

#[test]
fn a_rebuild_cut_short_by_a_restart_resumes_and_copies_only_what_was_left() {
    let a = malloc("A", 4096);
    let b = malloc("B", 4096);
    let c = malloc("C", 4096);
    let r = raid_sb(RaidLevel::Raid1, 0, vec![Arc::clone(&a), Arc::clone(&b)]);
    let total = r.info().num_blocks;
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    for lba in (0..total).step_by(2048) {
        q.write(lba, &pattern(lba as u8, 1 << 20));
    }
    drop(q);
    r.remove_member("B").unwrap();
    // 3 MiB at 2 MiB/s in 64 KiB windows: cut short a few checkpoints in.
    let slow = ProcessOptions {
        window_size_kb: 64,
        max_bandwidth_mb_sec: 2,
    };
    r.add_member(Arc::clone(&c), slow, &runner()).unwrap();
    let p = r.last_process().unwrap();
    wait_until("a checkpoint", || p.checkpointed() > 0);
    // The daemon dies: the copy stops with the array, C's superblock still says spare.
    drop(r);
    wait_finished(&p);
    let done = p.checkpointed();
    assert!(done > 0 && done < total, "cut at {done} of {total}");
    assert_eq!(
        member_sb(&c).member(&c.info().uuid).unwrap().state,
        MemberState::Spare
    );

    // Restart: A and C assemble, C resumes from its checkpoint.
    let r = reassemble(&[&c, &a]);
    assert_eq!(r.health().state(1), SlotState::Rebuilding);
    assert_eq!(r.health().operational_count(), 1);
    let slot = r.resume(ProcessOptions::default(), &runner()).unwrap();
    assert_eq!(slot, Some(1));
    let p = r.last_process().unwrap();
    wait_finished(&p);
    assert_eq!(p.error(), None);
    assert_eq!(p.total_blocks, total - done, "only what was left");
    assert_eq!(p.copied_blocks(), total - done);
    assert_eq!(r.health().operational_count(), 2);
    same_data(&a, &c, total);
    wait_until("C configured in its superblock", || {
        member_sb(&c).member(&c.info().uuid).unwrap().state == MemberState::Configured
    });
}

#[test]
fn a_rebuild_retries_transient_errors_and_gives_up_on_lasting_ones_leaving_the_array_degraded() {
    let a = malloc("A", 2048);
    let b = malloc("B", 2048);
    let read_fails = Arc::new(AtomicU32::new(0));
    let src: Arc<dyn BlockDevice> = Arc::new(Flaky {
        inner: Arc::clone(&a),
        op: Some(Op::Read),
        from: 2048,
        status: IoStatus::Errno(libc::EIO),
        fail: Arc::clone(&read_fails),
    });
    let r = raid_sb(RaidLevel::Raid1, 0, vec![src, Arc::clone(&b)]);
    let total = r.info().num_blocks;
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    let data = pattern(3, (total * 512) as usize);
    q.write(0, &data);
    drop(q);
    r.remove_member("B").unwrap();
    let opts = ProcessOptions {
        window_size_kb: 128,
        max_bandwidth_mb_sec: 0,
    };

    // Transient: reads of the source fail 3 times, writes of the target 3 times; the copy
    // retries each and completes.
    let write_fails = Arc::new(AtomicU32::new(0));
    let c: Arc<dyn BlockDevice> = Arc::new(Flaky {
        inner: malloc("C", 2048),
        op: Some(Op::Write),
        from: 2048,
        status: IoStatus::Errno(libc::EIO),
        fail: Arc::clone(&write_fails),
    });
    read_fails.store(crate::rebuild::IO_ATTEMPTS - 1, Ordering::Release);
    write_fails.store(crate::rebuild::IO_ATTEMPTS - 1, Ordering::Release);
    r.add_member(Arc::clone(&c), opts, &runner()).unwrap();
    let p = r.last_process().unwrap();
    wait_finished(&p);
    assert_eq!(p.error(), None);
    assert_eq!(
        (
            read_fails.load(Ordering::Acquire),
            write_fails.load(Ordering::Acquire)
        ),
        (0, 0)
    );
    assert_eq!(r.health().operational_count(), 2);
    same_data(&a, &c, total);

    // Lasting: the source's reads keep failing. The copy gives up with the reason, the
    // target is failed out, and the source, the one good copy, stays in and serves.
    r.remove_member(&c.info().name).unwrap();
    let d = malloc("D", 2048);
    read_fails.store(1000, Ordering::Release);
    r.add_member(Arc::clone(&d), opts, &runner()).unwrap();
    let p = r.last_process().unwrap();
    wait_finished(&p);
    let why = p.error().expect("the rebuild gave up");
    assert!(why.contains("reading the source failed 4 times"), "{why}");
    assert_eq!(r.health().state(p.target), SlotState::Failed);
    assert!(r.health().operational(0));
    assert_eq!(r.state(), "online");
    read_fails.store(0, Ordering::Release);
    let mut q = Q::open(Arc::clone(&r) as Arc<dyn BlockDevice>);
    assert_eq!(q.read(0, data.len()), data);
}
