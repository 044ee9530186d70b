//! The driver against the emulator: normal operation, then each fault (`fault_…`).
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | helpers (DMA buffer, verify workload, call timer); plain I/O, IOVAs, NOIOB |
//! | `faults.rs` | one fault at a time, then random mixes, on the queue pair's commands |
//! | `reset.rs` | resets: never blocking a poller, queue deletion, other threads, closing |

mod faults;
mod reset;

use std::sync::Arc;

use pmio::bdev::DriverQueue;
use pmio::dma::DmaRegion;
use pmio::request::{Io, IoBuf, IoStatus, Op, Request};

use super::*;
use crate::ctrlr::{Controller, NvmeOptions};
use crate::error::NvmeError;
use crate::qpair::{NvmeQpair, QpairStats};
use crate::spec::{Status, admin_opc, nvm_opc, sct};

pub(super) fn attach(emu: &Arc<Emu>, opts: NvmeOptions) -> Controller {
    Controller::attach_with(emu.clone(), emu.clone(), opts).expect("attach")
}

pub(super) struct Buf {
    pub region: DmaRegion,
}

impl Buf {
    pub fn new(ctrlr: &Controller, len: usize) -> Buf {
        let region = DmaRegion::new(len).unwrap();
        // SAFETY: the region outlives the controller in every test (declared after it is
        // dropped... the controller unmaps it when it goes).
        unsafe { ctrlr.dma_register(region.as_ptr(), region.len()).unwrap() };
        Buf { region }
    }

    pub fn io(&self, off: usize, len: usize) -> IoBuf {
        assert!(off + len <= self.region.len());
        // SAFETY: in bounds; the test does not touch the bytes while the I/O runs.
        unsafe { IoBuf::from_raw_parts(self.region.as_ptr().add(off), len as u32) }
    }

    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: in bounds; called only when no I/O to the range is in flight.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(off), len) }
    }

    pub fn fill(&self, off: usize, data: &[u8]) {
        // SAFETY: in bounds; no I/O to the range is in flight.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.region.as_ptr().add(off), data.len())
        };
    }
}

#[test]
fn emu_attach_io_round_trip_and_detach() {
    let emu = Emu::new(EmuConfig::default());
    let c = attach(&emu, NvmeOptions::default());
    assert_eq!(c.io_queues(), 8);
    let b = c.bdev(1).unwrap();
    let mut q: NvmeQpair = b.open_qpair(16).unwrap();
    assert_eq!(emu.io_queues(), (1, 1));
    let buf = Buf::new(&c, 64 << 10);
    let pattern: Vec<u8> = (0..24 << 10).map(|i| (i * 13 + 5) as u8).collect();
    buf.fill(512, &pattern);
    let mut rqs = vec![Request::default(); 16];
    let ios = [
        Io {
            op: Op::Write,
            lba: 100,
            nblocks: 48,
            buf: buf.io(512, 24 << 10),
            ..Io::default()
        },
        Io {
            op: Op::Flush,
            ..Io::default()
        },
    ];
    for (i, io) in ios.iter().enumerate() {
        rqs[i].tag = i as u16;
        rqs[i].prepare(io, 0);
    }
    q.submit(&mut rqs, &[0, 1]);
    let mut done = Vec::new();
    while done.len() < 2 {
        q.poll(&mut rqs, &mut done, 16);
    }
    assert_eq!(rqs[0].status, IoStatus::Success);
    assert_eq!(rqs[1].status, IoStatus::Success);
    assert_eq!(emu.disk(100 * 512, 24 << 10), pattern);
    let read = Io {
        op: Op::Read,
        lba: 100,
        nblocks: 48,
        buf: buf.io(32 << 10, 24 << 10),
        ..Io::default()
    };
    rqs[2].tag = 2;
    rqs[2].prepare(&read, 0);
    // Stepped mode: nothing happens until the emulator steps.
    emu.set_inline(false);
    q.submit(&mut rqs, &[2]);
    done.clear();
    assert_eq!(q.poll(&mut rqs, &mut done, 16), 0);
    assert_eq!(emu.step(), 1);
    q.poll(&mut rqs, &mut done, 16);
    assert_eq!(done, vec![2]);
    assert_eq!(buf.bytes(32 << 10, 24 << 10), &pattern[..]);
    drop(q);
    assert_eq!(emu.io_queues(), (0, 0));
    c.detach().unwrap();
    assert_eq!(emu.shst(), 2);
}

// ---------------------------------------------------------------------------------------
// Verify workload under faults.

/// 8 blocks (4 KiB) per I/O.
const NB: u32 = 8;
const IO_BYTES: usize = NB as usize * 512;

fn block_pattern(lba: u64, version: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(&lba.to_le_bytes());
    out[8..16].copy_from_slice(&version.to_le_bytes());
    let mut x = lba.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_add(1);
    for b in out[16..].iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

/// An emulator for the tests that run it on its own thread: CAP.TO of 5 s, so that a thread
/// starved for a while on a loaded 2-core machine (CI beside a guest) does not look like a
/// controller that never gets ready and make the driver reset it again.
fn threaded_emu() -> Arc<Emu> {
    Emu::new(EmuConfig {
        to: 10,
        ..EmuConfig::default()
    })
}

fn fast_opts() -> NvmeOptions {
    NvmeOptions {
        // Long enough that a loaded machine (parallel tests on 2 cores) does not time out
        // commands the emulator completes normally.
        io_timeout: Duration::from_millis(100),
        abort_timeout: Duration::from_millis(50),
        health_check_interval: Duration::from_millis(1),
        ..NvmeOptions::default()
    }
}

/// A queue pair, a buffer of one 4 KiB slot per tag, and the blocks acknowledged as written.
struct Workload {
    emu: Arc<Emu>,
    q: NvmeQpair,
    buf: Buf,
    rqs: Vec<Request>,
    depth: usize,
    /// Version last acknowledged as written per I/O unit (LBA / 8); `None`: unknown (a failed
    /// write) or never written.
    acked: Vec<Option<u64>>,
    /// Per tag, for a read in flight: the versions it may return. NVMe orders no two commands
    /// in flight, and a device may execute a write long before it completes it (the
    /// emulator's `Fault::Delay` does), so a read overlapping a write of its unit may see
    /// either version: the one acknowledged when the read was submitted, or that of any write
    /// to the unit in flight at some time during the read. Anything older is a lost write.
    /// `None`: nothing is known (the unit was never written, or a write of it failed).
    may_read: Vec<Option<Vec<u64>>>,
    /// Every I/O's final status, in submission order.
    statuses: Vec<IoStatus>,
    /// Set when the emulator runs on its own thread (no stepping from here).
    threaded: bool,
    // Last: the controller goes after the queue pair and the buffer registration.
    c: Controller,
}

impl Workload {
    fn new(emu: &Arc<Emu>, opts: NvmeOptions, depth: usize) -> Workload {
        Workload::on(emu, attach(emu, opts), depth)
    }

    /// A workload on its own queue pair of controller `c` (an attached one, or another
    /// handle of one that other workloads use too).
    fn on(emu: &Arc<Emu>, c: Controller, depth: usize) -> Workload {
        let q = c.bdev(1).unwrap().open_qpair(depth as u32).unwrap();
        let buf = Buf::new(&c, depth * IO_BYTES);
        let units = (EmuConfig::default().blocks / u64::from(NB)) as usize;
        Workload {
            emu: emu.clone(),
            q,
            buf,
            rqs: (0..depth)
                .map(|t| Request {
                    tag: t as u16,
                    ..Request::default()
                })
                .collect(),
            depth,
            acked: vec![None; units],
            may_read: vec![None; depth],
            statuses: Vec::new(),
            threaded: false,
            c,
        }
    }

    /// Runs `ios` (op, unit, version) with up to `depth` in flight, until every one has
    /// completed exactly once (panics on a hang or a double completion). Writes carry the
    /// block pattern; reads are verified against `acked`. Returns the statuses.
    fn run(&mut self, ios: &[(Op, usize, u64)]) -> Vec<IoStatus> {
        let mut statuses = vec![IoStatus::Pending; ios.len()];
        let mut owner: Vec<Option<usize>> = vec![None; self.depth];
        let mut next = 0;
        let mut done_count = 0;
        let mut done = Vec::with_capacity(self.depth);
        let deadline = Instant::now() + Duration::from_secs(20);
        while done_count < ios.len() {
            assert!(
                Instant::now() < deadline,
                "I/O hang: {done_count}/{} done, stats {:?}, emu {:?}",
                ios.len(),
                self.q.stats(),
                self.emu.stats()
            );
            // Submit into free tags, one batch.
            let mut tags = Vec::new();
            for t in 0..self.depth {
                if next == ios.len() {
                    break;
                }
                if owner[t].is_some() {
                    continue;
                }
                let (op, unit, version) = ios[next];
                self.prepare(t, op, unit, version);
                self.note_overlaps(&owner, ios, t, next);
                owner[t] = Some(next);
                tags.push(t as u16);
                next += 1;
            }
            if !tags.is_empty() {
                self.q.submit(&mut self.rqs, &tags);
            }
            if !self.threaded {
                self.emu.step();
            }
            done.clear();
            self.q.poll(&mut self.rqs, &mut done, 4 * self.depth);
            for &tag in &done {
                let t = usize::from(tag);
                let i = owner[t]
                    .take()
                    .unwrap_or_else(|| panic!("tag {t} completed twice or never submitted"));
                let st = self.rqs[t].status;
                assert_ne!(st, IoStatus::Pending, "completed without a status");
                statuses[i] = st;
                done_count += 1;
                let (op, unit, version) = ios[i];
                match op {
                    Op::Write if st == IoStatus::Success => self.acked[unit] = Some(version),
                    Op::Write => self.acked[unit] = None,
                    Op::Read if st == IoStatus::Success => {
                        if let Some(may) = self.may_read[t].take() {
                            self.check_unit(self.buf.bytes(t * IO_BYTES, IO_BYTES), unit, &may);
                        }
                    }
                    _ => {}
                }
            }
            if done.is_empty() && self.threaded {
                std::thread::yield_now();
            }
        }
        assert_eq!(self.q.outstanding(), 0);
        self.statuses.extend_from_slice(&statuses);
        statuses
    }

    /// Prepares request `t` (its own 4 KiB of the buffer) for `op` on `unit`; a write carries
    /// the block pattern of `version`.
    fn prepare(&mut self, t: usize, op: Op, unit: usize, version: u64) {
        let lba = unit as u64 * u64::from(NB);
        if op == Op::Write {
            let mut data = vec![0u8; IO_BYTES];
            for (b, chunk) in data.chunks_mut(512).enumerate() {
                block_pattern(lba + b as u64, version, chunk);
            }
            self.buf.fill(t * IO_BYTES, &data);
        } else {
            self.buf.fill(t * IO_BYTES, &[0xee; IO_BYTES]);
        }
        let io = Io {
            op,
            lba,
            nblocks: if op == Op::Flush { 0 } else { NB },
            buf: if op == Op::Flush {
                IoBuf::EMPTY
            } else {
                self.buf.io(t * IO_BYTES, IO_BYTES)
            },
            ..Io::default()
        };
        self.rqs[t].prepare(&io, 0);
    }

    /// Records what request `t` (I/O `i` of `ios`, about to be submitted) overlaps among the
    /// requests in flight (`owner`): a read may return its unit's acknowledged version or that
    /// of a write in flight; a write adds its version to the reads of its unit in flight.
    fn note_overlaps(
        &mut self,
        owner: &[Option<usize>],
        ios: &[(Op, usize, u64)],
        t: usize,
        i: usize,
    ) {
        let (op, unit, version) = ios[i];
        self.may_read[t] = None;
        let in_flight = owner
            .iter()
            .enumerate()
            .filter_map(|(u, j)| j.map(|j| (u, ios[j])))
            .filter(|&(_, (_, other, _))| other == unit);
        match op {
            Op::Read => {
                self.may_read[t] = self.acked[unit].map(|acked| {
                    let writes = in_flight.filter(|(_, (o, ..))| *o == Op::Write);
                    std::iter::once(acked)
                        .chain(writes.map(|(_, (.., v))| v))
                        .collect()
                });
            }
            Op::Write => {
                for (u, _) in in_flight.filter(|(_, (o, ..))| *o == Op::Read) {
                    if let Some(may) = &mut self.may_read[u] {
                        may.push(version);
                    }
                }
            }
            _ => {}
        }
    }

    /// Every block of `unit` in `data` holds one of the versions in `may`.
    fn check_unit(&self, data: &[u8], unit: usize, may: &[u64]) {
        let mut want = [0u8; 512];
        for (b, chunk) in data.chunks(512).enumerate() {
            let lba = unit as u64 * u64::from(NB) + b as u64;
            let matches = |&v: &u64| {
                block_pattern(lba, v, &mut want);
                chunk == &want[..]
            };
            assert!(
                may.iter().any(matches),
                "block {lba} reads back wrong: expected version {may:?}, header says lba {} \
                 version {}",
                u64::from_le_bytes(chunk[..8].try_into().unwrap()),
                u64::from_le_bytes(chunk[8..16].try_into().unwrap()),
            );
        }
    }

    /// Every acknowledged unit, read through the driver (no faults left).
    fn verify_by_reading(&mut self) {
        let ios: Vec<_> = (0..self.acked.len())
            .filter(|&u| self.acked[u].is_some())
            .map(|u| (Op::Read, u, 0))
            .collect();
        assert!(!ios.is_empty());
        let st = self.run(&ios);
        assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    }

    /// A second queue pair of the controller (depth 8) with a read of unit 0 in flight
    /// (tag 0), its buffer and its requests.
    fn second_qpair_reading(&self) -> (NvmeQpair, Buf, Vec<Request>) {
        let mut qb = self.c.bdev(1).unwrap().open_qpair(8).unwrap();
        let bufb = Buf::new(&self.c, 4096);
        let mut rqb = vec![Request::default(); 8];
        let read = Io {
            op: Op::Read,
            lba: 0,
            nblocks: 8,
            buf: bufb.io(0, 4096),
            ..Io::default()
        };
        rqb[0].prepare(&read, 0);
        qb.submit(&mut rqb, &[0]);
        (qb, bufb, rqb)
    }

    /// Closes the queue pair and detaches the controller (whatever its state): quickly.
    fn detach_promptly(self) {
        let Workload { q, c, buf, .. } = self;
        drop(q);
        drop(buf);
        let t = Instant::now();
        let _ = c.detach();
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    /// Every acknowledged unit, read from the emulator's RAM.
    fn verify_in_emulator(&self) {
        for (u, v) in self.acked.iter().enumerate() {
            if let Some(v) = v {
                let data = self.emu.disk(u * IO_BYTES, IO_BYTES);
                self.check_unit(&data, u, &[*v]);
            }
        }
    }
}

/// `n` writes to units 0..n with `version`.
fn writes(n: usize, version: u64) -> Vec<(Op, usize, u64)> {
    (0..n).map(|u| (Op::Write, u, version)).collect()
}

use std::time::{Duration, Instant};

#[test]
fn emu_verify_workload_without_faults() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let st = w.run(&writes(200, 1));
    assert!(st.iter().all(|s| s.is_success()));
    w.verify_by_reading();
    let s = w.q.stats();
    assert_eq!(
        (
            s.timeouts,
            s.aborts,
            s.resets,
            s.duplicates,
            s.unknown_completions
        ),
        (0, 0, 0, 0, 0)
    );
}

/// An IOMMU whose valid IOVAs (below 1 GiB) hold none of the process's mappings, as a 39-bit
/// one holds none of a process's mmap area: the driver's rings, PRP lists and buffers all get
/// allocated IOVAs.
fn narrow_iommu_emu() -> Arc<Emu> {
    let emu = Emu::new(EmuConfig::default());
    emu.set_iova_ranges(vec![(0, (1 << 30) - 1)]);
    emu
}

#[test]
fn emu_io_through_translated_iovas() {
    let emu = narrow_iommu_emu();
    let c = attach(&emu, NvmeOptions::default());
    let mut q = c.bdev(1).unwrap().open_qpair(4).unwrap();
    let buf = Buf::new(&c, 64 << 10);
    assert_eq!(emu.mapped(), 3, "admin queue, queue pair, buffer");
    assert_eq!(emu.translated(), 3, "all at allocated IOVAs");
    // 24 KiB at offset 512: a PRP list of 6 entries after PRP1, all translated.
    let pattern: Vec<u8> = (0..24 << 10).map(|i| (i * 7 + 3) as u8).collect();
    buf.fill(512, &pattern);
    let mut rqs = vec![Request::default(); 4];
    let ios = [
        Io {
            op: Op::Write,
            lba: 100,
            nblocks: 48,
            buf: buf.io(512, 24 << 10),
            ..Io::default()
        },
        Io {
            op: Op::Read,
            lba: 100,
            nblocks: 48,
            buf: buf.io(32 << 10, 24 << 10),
            ..Io::default()
        },
    ];
    let mut done = Vec::new();
    for (i, io) in ios.iter().enumerate() {
        rqs[i].tag = i as u16;
        rqs[i].prepare(io, 0);
        q.submit(&mut rqs, &[i as u16]);
        done.clear();
        q.poll(&mut rqs, &mut done, 4);
        assert_eq!(done, vec![i as u16]);
        assert_eq!(rqs[i].status, IoStatus::Success, "{:?}", q.last_error());
    }
    assert_eq!(
        emu.disk(100 * 512, 24 << 10),
        pattern,
        "the device read the buffer"
    );
    assert_eq!(
        buf.bytes(32 << 10, 24 << 10),
        &pattern[..],
        "and wrote it back"
    );
    drop(q);
    drop(buf);
    c.detach().unwrap();
    drop(c);
    assert_eq!((emu.mapped(), emu.translated()), (0, 0));
}

/// Times every submit and poll of a queue pair (the longest call is what a reactor would
/// have stalled for).
#[derive(Default)]
struct CallTimer {
    max: Duration,
    calls: u32,
}

impl CallTimer {
    fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.max = self.max.max(t.elapsed());
        self.calls += 1;
        r
    }
}

impl Workload {
    /// Records that units `tags` (unit = tag) now hold `version`, then reads every unit back.
    fn verify_acked(&mut self, tags: std::ops::Range<usize>, version: u64) {
        for t in tags {
            self.acked[t] = Some(version);
        }
        self.verify_by_reading();
    }

    /// Writes of `version` to units `tags` (unit = tag), submitted in one batch.
    fn submit_writes(&mut self, tags: std::ops::Range<usize>, version: u64, timer: &mut CallTimer) {
        let list: Vec<u16> = tags.clone().map(|t| t as u16).collect();
        for t in tags {
            self.prepare(t, Op::Write, t, version);
        }
        timer.time(|| self.q.submit(&mut self.rqs, &list));
    }

    /// Steps the emulator and polls (timed) until the queue pair is down for a reset.
    fn poll_until_resetting(&mut self, timer: &mut CallTimer, done: &mut Vec<u16>) {
        let t0 = Instant::now();
        while !self.q.resetting() {
            assert!(t0.elapsed() < Duration::from_secs(2), "no reset started");
            self.emu.step();
            timer.time(|| self.q.poll(&mut self.rqs, done, 64));
            assert!(timer.max < MAX_CALL, "a poll took {:?}", timer.max);
        }
    }

    /// Steps the emulator and polls (timed) until `n` requests are done in all.
    fn poll_until_done(&mut self, n: usize, timer: &mut CallTimer, done: &mut Vec<u16>) {
        let t0 = Instant::now();
        while done.len() < n {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "hang: {done:?}, {:?}",
                self.q.stats()
            );
            self.emu.step();
            timer.time(|| self.q.poll(&mut self.rqs, done, 64));
        }
        assert_eq!(self.q.outstanding(), 0);
    }
}

impl Workload {
    /// Writes of version 2 to units 0..8 (unit = tag): the first four are in the device when
    /// it fails (fatal status), the last four are submitted once the queue pair is down for
    /// the reset. Returns the timings of every call and how long until all eight completed.
    fn writes_across_a_reset(&mut self) -> (CallTimer, Duration) {
        let (mut timer, mut done) = (CallTimer::default(), Vec::new());
        self.submit_writes(0..4, 2, &mut timer);
        self.emu.make_fatal();
        let t0 = Instant::now();
        self.poll_until_resetting(&mut timer, &mut done);
        self.submit_writes(4..8, 2, &mut timer);
        assert_eq!(self.q.outstanding(), 8, "held submissions are outstanding");
        self.poll_until_done(8, &mut timer, &mut done);
        let elapsed = t0.elapsed();
        done.sort_unstable();
        assert_eq!(done, (0..8).collect::<Vec<u16>>(), "each completed once");
        (timer, elapsed)
    }
}

/// An emulator stepped by the test whose CSTS.RDY follows CC.EN after `ready_delay`.
fn stepped_emu_with_ready_delay(ready_delay: Duration) -> Arc<Emu> {
    let emu = Emu::new(EmuConfig {
        ready_delay,
        ..EmuConfig::default()
    });
    emu.set_inline(false);
    emu
}

/// The longest submit or poll allowed while a reset waits for the controller (whose ready
/// bit takes 200 ms or more): anything close to that means a call waited for it. Half of it,
/// so that a thread preempted on a loaded 2-core machine does not look like one that waited.
const MAX_CALL: Duration = Duration::from_millis(100);

#[test]
fn emu_noiob_is_the_bdevs_boundary_and_the_block_layer_splits_at_it() {
    use pmio::bdev::{BdevQueue, BdevQueueOptions, BlockDevice};
    use pmio::plug::Plug;

    let emu = Emu::new(EmuConfig {
        noiob: 8,
        ..EmuConfig::default()
    });
    let c = attach(&emu, fast_opts());
    let dev: Arc<dyn BlockDevice> = c.bdev(1).unwrap();
    assert_eq!(dev.info().boundary_blocks, 8, "NOIOB");
    let buf = Buf::new(&c, 16 << 10);
    let pattern: Vec<u8> = (0..8 << 10).map(|i| (i * 11 + 1) as u8).collect();
    buf.fill(0, &pattern);
    let mut q = BdevQueue::open(
        dev,
        BdevQueueOptions {
            depth: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let mut plug = Plug::default();
    q.register_plug(&mut plug);
    // 16 blocks at LBA 4 cross blocks 8 and 16: three commands of 4, 8 and 4 blocks, then
    // the same read back in three.
    for (op, off) in [(Op::Write, 0), (Op::Read, 8 << 10)] {
        let io = Io {
            op,
            lba: 4,
            nblocks: 16,
            buf: buf.io(off, 8 << 10),
            ..Io::default()
        };
        let before = emu.stats().io_commands;
        plug.begin();
        q.expect(&mut plug, &io);
        q.submit(&mut plug, &io).unwrap();
        plug.finish();
        q.flush();
        let mut done = Vec::new();
        let t0 = Instant::now();
        while q.outstanding() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(5), "hang");
            q.poll(8, |rq| done.push((rq.lba, rq.nblocks, rq.status)));
        }
        assert_eq!(
            done,
            vec![(4, 16, IoStatus::Success)],
            "{op:?}: one completion"
        );
        assert_eq!(
            emu.stats().io_commands - before,
            3,
            "{op:?}: split at NOIOB"
        );
    }
    assert_eq!(emu.disk(4 * 512, 8 << 10), pattern);
    assert_eq!(buf.bytes(8 << 10, 8 << 10), &pattern[..]);
}
