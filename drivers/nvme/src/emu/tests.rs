//! The driver against the emulator: normal operation, then each fault (`fault_…`).

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

#[test]
fn fault_fatal_status_resets_and_resubmits_through_translated_iovas() {
    let emu = narrow_iommu_emu();
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    assert_eq!(emu.translated(), 3);
    w.run(&writes(64, 1));
    emu.inject(FaultRule::new(Fault::Fatal).nth(100));
    let st = w.run(&writes(64, 2));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    assert_eq!(w.q.stats().resets, 1);
    w.verify_by_reading();
    w.verify_in_emulator();
}

#[test]
fn fault_delay_within_timeout_completes_late() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut opts = fast_opts();
    opts.io_timeout = Duration::from_secs(5);
    let mut w = Workload::new(&emu, opts, 16);
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_millis(40))).nth(5));
    let t = Instant::now();
    let st = w.run(&writes(64, 1));
    assert!(t.elapsed() >= Duration::from_millis(40));
    assert!(st.iter().all(|s| s.is_success()));
    assert_eq!(emu.stats().delayed, 1);
    assert_eq!(w.q.stats().timeouts, 0);
    w.verify_by_reading();
}

#[test]
fn fault_delay_past_timeout_is_aborted_and_resubmitted() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_secs(10))).nth(7));
    let st = w.run(&writes(64, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.delayed, e.aborts, e.aborts_hit), (1, 1, 1));
    assert_eq!((s.timeouts, s.aborts, s.recovered, s.resets), (1, 1, 1, 0));
    w.verify_by_reading();
}

#[test]
fn fault_drop_is_aborted_and_resubmitted() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(
        FaultRule::new(Fault::Drop)
            .opcode(crate::spec::nvm_opc::WRITE)
            .nth(3),
    );
    emu.inject(FaultRule::new(Fault::Drop).lba(80..88));
    let st = w.run(&writes(64, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.dropped, e.aborts_hit), (2, 2));
    assert_eq!((s.timeouts, s.aborts, s.recovered, s.resets), (2, 2, 2, 0));
    w.verify_by_reading();
}

#[test]
fn fault_drop_every_attempt_fails_with_timeout_after_the_retry_budget() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    // Unit 10 (LBA 80) is dropped every time: aborted, resubmitted 3 times, then failed.
    emu.inject(FaultRule::new(Fault::Drop).lba(80..88).times(None));
    let st = w.run(&writes(32, 1));
    for (i, s) in st.iter().enumerate() {
        if i == 10 {
            assert_eq!(*s, IoStatus::Timeout);
        } else {
            assert_eq!(*s, IoStatus::Success, "I/O {i}");
        }
    }
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!(e.dropped, 4);
    assert_eq!((s.timeouts, s.aborts, s.recovered, s.errors), (4, 4, 3, 1));
    assert!(matches!(
        w.q.last_error(),
        Some(crate::IoError::TimedOut { retries: 3 })
    ));
    emu.clear_faults();
    w.verify_by_reading();
}

#[test]
fn fault_failed_abort_resets_the_controller() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let invalid = Status::new(sct::GENERIC, 0x02, true);
    emu.inject(FaultRule::new(Fault::Drop).nth(9));
    emu.inject(
        FaultRule::new(Fault::Status(invalid))
            .admin()
            .opcode(admin_opc::ABORT),
    );
    let st = w.run(&writes(64, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    // The reset deleted the queue first: the dropped write came back aborted, then was
    // resubmitted.
    assert_eq!((e.dropped, e.sq_deletions, e.disables), (1, 1, 1));
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (1, 1, 1, 1)
    );
    assert!(s.recovered >= 1);
    assert_eq!(emu.io_queues(), (1, 1), "queues recreated");
    w.verify_by_reading();
}

#[test]
fn fault_abort_that_times_out_resets_the_controller() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(FaultRule::new(Fault::Drop).nth(2));
    emu.inject(FaultRule::new(Fault::Drop).admin().opcode(admin_opc::ABORT));
    let st = w.run(&writes(48, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!(
        (e.dropped, e.aborts, e.disables),
        (2, 0, 1),
        "the Abort itself was dropped"
    );
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (1, 1, 1, 1)
    );
    w.verify_by_reading();
}

#[test]
fn fault_duplicate_completions_are_counted_and_ignored() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    emu.seed(7);
    // Room in the CQ for every duplicate: a duplicate posted after its tag was reused would
    // be indistinguishable from the new command's completion (CID reuse; no host can tell).
    let opts = NvmeOptions {
        io_queue_entries: 256,
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 16);
    emu.inject(FaultRule::new(Fault::Duplicate).rate(0.1, None));
    let mut ios = writes(200, 1);
    ios.extend((0..200).map(|u| (Op::Read, u, 0)));
    let st = w.run(&ios);
    assert!(st.iter().all(|s| s.is_success()));
    let dups = emu.stats().duplicated;
    assert!(dups > 10, "{dups}");
    assert_eq!(w.q.stats().duplicates, dups);
    assert_eq!(w.q.stats().completed, 400);
    assert_eq!(w.q.stats().unknown_completions, 0);
}

#[test]
fn fault_retryable_status_is_retried() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    emu.seed(11);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let not_ready = Status::new(sct::GENERIC, 0x82, false);
    emu.inject(FaultRule::new(Fault::Status(not_ready)).rate(0.05, Some(8)));
    let st = w.run(&writes(300, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    assert_eq!(emu.stats().status_injected, 8);
    assert_eq!(w.q.stats().retries, 8);
    w.verify_by_reading();
}

#[test]
fn fault_dnr_status_fails_the_io_and_is_reported() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let media = Status::new(sct::MEDIA, 0x81, true);
    let not_ready_dnr = Status::new(sct::GENERIC, 0x82, true);
    emu.inject(FaultRule::new(Fault::Status(media)).nth(4));
    emu.inject(FaultRule::new(Fault::Status(not_ready_dnr)).nth(20));
    let st = w.run(&writes(40, 1));
    for (i, s) in st.iter().enumerate() {
        match i {
            4 => assert_eq!(*s, IoStatus::Nvme(media.to_nvme_status())),
            20 => assert_eq!(*s, IoStatus::Nvme(not_ready_dnr.to_nvme_status())),
            _ => assert_eq!(*s, IoStatus::Success),
        }
    }
    assert_eq!(w.q.stats().retries, 0, "DNR is never retried");
    assert_eq!(w.q.stats().errors, 2);
    w.verify_by_reading();
}

#[test]
fn fault_fatal_status_resets_and_resubmits() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(64, 1));
    emu.inject(FaultRule::new(Fault::Fatal).nth(100));
    let st = w.run(&writes(64, 2));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.fatal, e.disables), (1, 1));
    assert_eq!(s.resets, 1);
    assert!(
        s.recovered >= 1,
        "the commands caught in the reset were resubmitted"
    );
    assert_eq!(s.timeouts, 0, "found by the CSTS check, not by timeouts");
    w.verify_by_reading();
}

#[test]
fn fault_reset_recreates_every_queue_pair() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut a = Workload::new(&emu, fast_opts(), 8);
    // B has I/O in flight when A resets the controller.
    let (mut qb, _bufb, mut rqb) = a.second_qpair_reading();
    assert_eq!(emu.io_queues(), (2, 2));
    emu.make_fatal();
    let st = a.run(&writes(32, 1));
    assert!(st.iter().all(|s| s.is_success()));
    assert_eq!(a.q.stats().resets, 1);
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while done.is_empty() {
        assert!(Instant::now() < deadline, "B hangs");
        emu.step();
        qb.poll(&mut rqb, &mut done, 8);
    }
    assert_eq!(done, vec![0]);
    assert_eq!(rqb[0].status, IoStatus::Success);
    assert_eq!(qb.stats().resets, 1);
    assert_eq!(qb.stats().recovered, 1);
    assert_eq!(emu.io_queues(), (2, 2));
    drop(qb);
    a.verify_by_reading();
}

#[test]
fn fault_vanished_device_fails_everything_promptly_and_detach_works() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(64, 1));
    emu.inject(FaultRule::new(Fault::Vanish).nth(80));
    let t = Instant::now();
    let st = w.run(&writes(64, 2));
    assert!(t.elapsed() < Duration::from_secs(2));
    let ok = st.iter().filter(|s| s.is_success()).count();
    let removed = st.iter().filter(|&&s| s == IoStatus::DeviceRemoved).count();
    assert_eq!(ok + removed, 64, "{st:?}");
    assert!(removed >= 48, "{removed}");
    assert!(w.q.stats().failed_dead >= removed as u64 - 16);
    // New I/O fails at once.
    let st = w.run(&writes(4, 3));
    assert_eq!(st, vec![IoStatus::DeviceRemoved; 4]);
    // Whatever was acknowledged is in the device's memory.
    w.verify_in_emulator();
    let t = Instant::now();
    let Workload { q, c, buf, .. } = w;
    drop(q);
    drop(buf);
    assert!(matches!(
        c.detach(),
        Err(crate::NvmeError::DeviceRemoved { .. })
    ));
    drop(c);
    assert!(t.elapsed() < Duration::from_secs(1), "detach hung");
    assert_eq!(emu.mapped(), 0, "every DMA mapping removed");
}

/// The seeds of the random-fault tests: `PMIO_FAULT_SEEDS` (comma-separated), else `default`.
/// A failure names its seed, so `PMIO_FAULT_SEEDS=N cargo test ... fault_` replays it.
fn fault_seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var("PMIO_FAULT_SEEDS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("PMIO_FAULT_SEEDS: comma-separated integers")
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

#[test]
fn fault_mixed_random_faults_on_the_emulator_thread() {
    for seed in fault_seeds(&[1234, 1, 2, 3]) {
        eprintln!("fault_mixed: seed {seed}");
        mixed_random_faults(seed);
    }
}

/// Four rounds, each writing every unit then reading it back (a read may overlap the write of
/// its unit), under dropped, delayed and failed commands; then everything acknowledged reads
/// back.
fn mixed_random_faults(seed: u64) {
    let emu = threaded_emu();
    emu.seed(seed);
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 32);
    let _thread = emu.spawn(None);
    w.threaded = true;
    let not_ready = Status::new(sct::GENERIC, 0x82, false);
    let media = Status::new(sct::MEDIA, 0x81, true);
    emu.inject(FaultRule::new(Fault::Drop).rate(0.01, Some(4)));
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_millis(5))).rate(0.02, None));
    emu.inject(FaultRule::new(Fault::Status(not_ready)).rate(0.02, None));
    emu.inject(FaultRule::new(Fault::Status(media)).rate(0.005, None));
    for round in 1..=4 {
        let mut ios = writes(512, round);
        ios.extend((0..512).map(|u| (Op::Read, u, 0)));
        w.run(&ios);
    }
    emu.clear_faults();
    let failed = w.statuses.iter().filter(|s| !s.is_success()).count() as u64;
    let s = w.q.stats();
    assert_eq!(s.completed, w.statuses.len() as u64);
    assert_eq!(s.errors, failed, "every failure reported and counted");
    // Every dropped command times out and is aborted. On a loaded machine (the emulator's thread
    // starved for longer than the 300 ms I/O or 50 ms abort timeout) slow commands time out
    // too, and an abort may itself time out and reset the controller: what holds whatever the
    // timing is that no timeout goes unanswered, and the data checks above and below.
    assert!(s.timeouts >= emu.stats().dropped, "{s:?}");
    assert!(s.aborts <= s.timeouts, "{s:?}");
    w.verify_by_reading();
}

/// The oracle of the fault tests must catch a lost write: a unit whose device copy is one
/// version older than the acknowledged one fails the read check, even when the read overlaps
/// a write of another unit.
#[test]
#[should_panic(expected = "block 24 reads back wrong: expected version [2]")]
fn emu_oracle_catches_an_older_version() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let v1 = w.run(&writes(8, 1));
    let v2 = w.run(&writes(8, 2));
    assert!(v1.iter().chain(&v2).all(|s| s.is_success()));
    // Unit 3 loses its second write behind the driver's back.
    let mut old = vec![0u8; IO_BYTES];
    for (b, chunk) in old.chunks_mut(512).enumerate() {
        block_pattern(24 + b as u64, 1, chunk);
    }
    emu.set_disk(3 * IO_BYTES, &old);
    w.run(&[(Op::Write, 4, 3), (Op::Read, 3, 0)]);
}

/// A read that overlaps a write of its unit may return the write's version: the emulator
/// executes a delayed write at once and completes it later, as a device may.
#[test]
fn emu_oracle_accepts_a_read_overlapping_a_write() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(8, 1));
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_millis(20))).opcode(nvm_opc::WRITE));
    let st = w.run(&[(Op::Write, 5, 2), (Op::Read, 5, 0)]);
    assert_eq!(st, vec![IoStatus::Success; 2]);
    assert_eq!(emu.stats().delayed, 1);
    // The read completed first and saw version 2, not yet acknowledged then.
    let got = u64::from_le_bytes(w.buf.bytes(IO_BYTES + 8, 8).try_into().unwrap());
    assert_eq!(got, 2);
    w.verify_by_reading();
}

#[test]
fn fault_lost_completion_is_not_found_by_abort_and_resets() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(FaultRule::new(Fault::Lose).nth(6));
    let st = w.run(&writes(48, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.lost, e.aborts, e.aborts_hit, e.disables), (1, 1, 0, 1));
    // First timeout → abort (not found); second timeout → reset → resubmitted.
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (2, 1, 0, 1)
    );
    assert!(s.recovered >= 1);
    w.verify_by_reading();
}

#[test]
fn fault_unknown_completions_are_counted_and_ignored() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let qid = w.q.qid();
    w.run(&writes(8, 1));
    // A CID beyond the queue's depth, and one that is free (tag 15 never used).
    emu.post_bogus(qid, 1000, Status::SUCCESS);
    emu.post_bogus(qid, 15, Status::SUCCESS);
    let st = w.run(&writes(8, 2));
    assert!(st.iter().all(|s| s.is_success()));
    // The workload used tags 0..8 only: both are unknown, neither a duplicate.
    assert_eq!(w.q.stats().unknown_completions, 2, "{:?}", w.q.stats());
    assert_eq!(w.q.stats().duplicates, 0);
    assert_eq!(w.q.stats().completed, 16);
    w.verify_by_reading();
}

#[test]
fn fault_fatal_and_drops_on_the_emulator_thread() {
    let emu = threaded_emu();
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 32);
    let _thread = emu.spawn(None);
    w.threaded = true;
    emu.inject(FaultRule::new(Fault::Drop).nth(300));
    let mut ios = writes(512, 1);
    ios.extend((0..512).map(|u| (Op::Read, u, 0)));
    let st = w.run(&ios);
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    emu.inject(FaultRule::new(Fault::Fatal).nth(1500));
    let st = w.run(&ios);
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.fatal, e.dropped, e.aborts_hit, e.disables), (1, 1, 1, 1));
    assert_eq!((s.timeouts, s.aborts, s.resets), (1, 1, 1));
    w.verify_by_reading();
}

#[test]
fn fault_pending_abort_does_not_block_the_poller() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(400),
        abort_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 4);
    // Command 0 is dropped and so is its Abort: the reset comes after the abort timeout.
    emu.inject(FaultRule::new(Fault::Drop).nth(0));
    emu.inject(FaultRule::new(Fault::Drop).admin().opcode(admin_opc::ABORT));
    let read = |w: &Workload, t: usize| Io {
        op: Op::Read,
        lba: t as u64 * 8,
        nblocks: 8,
        buf: w.buf.io(t * IO_BYTES, IO_BYTES),
        ..Io::default()
    };
    let io0 = read(&w, 0);
    w.rqs[0].prepare(&io0, 0);
    w.q.submit(&mut w.rqs, &[0]);
    let (mut other_done, mut max_poll) = (0u32, Duration::ZERO);
    let mut in_flight = false;
    let mut done = Vec::new();
    let t0 = Instant::now();
    let elapsed = loop {
        assert!(t0.elapsed() < Duration::from_secs(5), "hang");
        if !in_flight {
            let io1 = read(&w, 1);
            w.rqs[1].prepare(&io1, 0);
            w.q.submit(&mut w.rqs, &[1]);
            in_flight = true;
        }
        emu.step();
        done.clear();
        let t = Instant::now();
        w.q.poll(&mut w.rqs, &mut done, 8);
        max_poll = max_poll.max(t.elapsed());
        if done.contains(&1) {
            assert_eq!(w.rqs[1].status, IoStatus::Success);
            other_done += 1;
            in_flight = false;
        }
        if done.contains(&0) {
            break t0.elapsed();
        }
    };
    assert_eq!(
        w.rqs[0].status,
        IoStatus::Success,
        "resubmitted after the reset"
    );
    // Timeout at 400 ms, Abort given up at 700 ms, then the reset.
    assert!(elapsed >= Duration::from_millis(700), "{elapsed:?}");
    assert!(
        max_poll < Duration::from_millis(200),
        "a poll waited {max_poll:?} (the Abort timeout is 300 ms)"
    );
    assert!(other_done > 10, "{other_done}");
    let s = w.q.stats();
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (1, 1, 1, 1)
    );
    // Tag 1 may have been in flight during the reset too.
    assert!(s.recovered >= 1);
}

#[test]
fn fault_failed_reset_fails_every_io_with_a_clear_error() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(16, 1));
    // The controller goes fatal, and the reset fails (Set Features refused afterwards).
    emu.inject(FaultRule::new(Fault::Fatal).nth(20));
    emu.inject(
        FaultRule::new(Fault::Status(Status::new(sct::GENERIC, 0x06, true)))
            .admin()
            .opcode(admin_opc::SET_FEATURES),
    );
    let st = w.run(&writes(32, 2));
    let ok = st.iter().filter(|s| s.is_success()).count();
    assert!(ok >= 4, "before the fatal status: {st:?}");
    assert!(
        st.iter()
            .all(|&s| s == IoStatus::Success || s == IoStatus::Errno(libc::EIO)),
        "{st:?}"
    );
    assert_eq!(w.q.last_error(), Some(crate::IoError::ControllerFailed));
    // New I/O fails at once with the same error.
    assert_eq!(w.run(&writes(3, 3)), vec![IoStatus::Errno(libc::EIO); 3]);
    assert_eq!(emu.stats().disables, 1);
    w.verify_in_emulator();
    w.detach_promptly();
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
fn fault_reset_does_not_block_the_poller() {
    // RUST_LOG=info shows the reset's steps and the longest call.
    let _ = env_logger::builder().is_test(true).try_init();
    let ready_delay = Duration::from_millis(200);
    let emu = stepped_emu_with_ready_delay(ready_delay);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(16, 1));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    // Writes of version 2 to units 0..8 are in the device when it fails.
    w.submit_writes(0..8, 2, &mut timer);
    emu.make_fatal();
    let t0 = Instant::now();
    w.poll_until_resetting(&mut timer, &mut done);
    assert!(done.is_empty(), "nothing completes before the reset");
    assert_eq!(emu.stats().disables, 1, "the reset disabled the controller");
    // Writes of version 2 to units 8..16, submitted during the reset: held, still counted.
    w.submit_writes(8..16, 2, &mut timer);
    assert!(w.q.resetting());
    assert_eq!(w.q.outstanding(), 16);
    let polls_before = timer.calls;
    w.poll_until_done(16, &mut timer, &mut done);
    let elapsed = t0.elapsed();
    done.sort_unstable();
    assert_eq!(done, (0..16).collect::<Vec<u16>>(), "each completed once");
    for t in 0..16 {
        assert_eq!(w.rqs[t].status, IoStatus::Success, "tag {t}");
        w.acked[t] = Some(2);
    }
    // RDY took 200 ms to clear, then 200 ms to set: the reset waited for both, the calls
    // for neither.
    assert!(elapsed >= 2 * ready_delay, "{elapsed:?}");
    assert!(
        timer.max < MAX_CALL,
        "a call took {:?} ({} calls)",
        timer.max,
        timer.calls
    );
    assert!(
        timer.calls - polls_before > 10,
        "the reset was polled, not waited for"
    );
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.fatal, e.disables), (1, 1));
    assert_eq!(s.resets, 1);
    assert_eq!(
        s.recovered, 8,
        "the writes caught in the reset were resubmitted"
    );
    assert_eq!(s.completed, 16 + 16);
    assert_eq!(emu.io_queues(), (1, 1), "queues recreated");
    log::info!(
        "reset over {elapsed:?}: {} calls, the longest {:?}",
        timer.calls,
        timer.max
    );
    w.verify_by_reading();
    w.verify_in_emulator();
}

#[test]
fn fault_reset_that_never_gets_ready_fails_every_io_without_blocking() {
    // RUST_LOG=error shows why each reset failed.
    let _ = env_logger::builder().is_test(true).try_init();
    // CSTS.RDY never clears after CC.EN=0, or never sets after CC.EN=1.
    for (disable, enable) in [
        (Duration::MAX, Duration::ZERO),
        (Duration::ZERO, Duration::MAX),
    ] {
        let emu = Emu::new(EmuConfig::default());
        emu.set_inline(false);
        let mut w = Workload::new(&emu, fast_opts(), 16);
        w.run(&writes(16, 1));
        emu.set_ready_delays(disable, enable);
        let (timer, elapsed) = w.writes_across_a_reset();
        log::info!(
            "reset failed after {elapsed:?}: {} calls, the longest {:?}",
            timer.calls,
            timer.max
        );
        // CAP.TO is 1 (500 ms): the reset gives up then, and fails everything at once.
        assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
        for t in 0..8 {
            assert_eq!(w.rqs[t].status, IoStatus::Errno(libc::EIO), "tag {t}");
        }
        assert_eq!(w.q.last_error(), Some(crate::IoError::ControllerFailed));
        assert_eq!(w.q.stats().failed_dead, 8);
        // New I/O fails at once with the same error.
        let t = Instant::now();
        assert_eq!(w.run(&writes(3, 3)), vec![IoStatus::Errno(libc::EIO); 3]);
        assert!(t.elapsed() < MAX_CALL);
        assert_eq!(emu.stats().disables, 1);
        // Every write of version 1 is intact: the failed ones never reached the device.
        w.verify_in_emulator();
        w.detach_promptly();
    }
}

#[test]
fn fault_reset_never_waits_for_the_admin_queue_lock() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    // B has a read in flight when A resets the controller.
    let (mut qb, _bufb, mut rqb) = w.second_qpair_reading();
    w.submit_writes(0..4, 2, &mut timer);
    emu.make_fatal();
    // Another thread holds the admin queue (the test thread itself: a blocking lock on the
    // poll path would deadlock here): A wants a reset but does not start it.
    let inner = w.c.inner.clone();
    let admin = inner.admin();
    w.poll_until_resetting(&mut timer, &mut done);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(30) {
        emu.step();
        timer.time(|| w.q.poll(&mut w.rqs, &mut done, 64));
    }
    assert_eq!(
        emu.stats().disables,
        0,
        "not started while the admin queue is busy"
    );
    assert!(w.q.resetting() && done.is_empty());
    drop(admin);
    w.poll_until_done(4, &mut timer, &mut done);
    assert_eq!(emu.stats().disables, 1);
    assert!((0..4).all(|t| w.rqs[t].status == IoStatus::Success));
    // B recreates its queues only when it gets the admin queue, without waiting for it.
    let admin = inner.admin();
    let mut done_b = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(30) {
        emu.step();
        timer.time(|| qb.poll(&mut rqb, &mut done_b, 8));
    }
    assert!(qb.resetting() && done_b.is_empty());
    assert_eq!(qb.outstanding(), 1);
    drop(admin);
    let t0 = Instant::now();
    while done_b.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "B hangs");
        emu.step();
        timer.time(|| qb.poll(&mut rqb, &mut done_b, 8));
    }
    assert_eq!(rqb[0].status, IoStatus::Success);
    assert_eq!((qb.stats().resets, qb.stats().recovered), (1, 1));
    assert_eq!(emu.io_queues(), (2, 2));
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    drop(qb);
    w.verify_acked(0..4, 2);
}

/// Writes of version 2 to units 0..8 on a controller that fails while the first four are in
/// the device (the last four are submitted during the reset), with `fault` hitting the
/// queue pair's Create I/O CQ and SQ after the reset. Returns the workload, the timings of
/// its calls and how long the reset took until every write completed.
fn reset_with_slow_queue_creation(
    fault: Fault,
    opts: NvmeOptions,
) -> (Workload, CallTimer, Duration) {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, opts, 8);
    w.run(&writes(8, 1));
    for opc in [admin_opc::CREATE_IO_CQ, admin_opc::CREATE_IO_SQ] {
        emu.inject(FaultRule::new(fault).admin().opcode(opc));
    }
    let (timer, elapsed) = w.writes_across_a_reset();
    (w, timer, elapsed)
}

#[test]
fn fault_slow_queue_creation_after_a_reset_does_not_block_the_poller() {
    let delay = Duration::from_millis(100);
    let (mut w, timer, elapsed) = reset_with_slow_queue_creation(Fault::Delay(delay), fast_opts());
    assert!(elapsed >= 2 * delay, "{elapsed:?}");
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    assert!((0..8).all(|t| w.rqs[t].status == IoStatus::Success));
    let s = w.q.stats();
    assert_eq!((s.resets, s.recovered), (1, 4));
    assert_eq!(w.emu.stats().delayed, 2);
    w.verify_acked(0..8, 2);
}

#[test]
fn fault_queue_creation_that_never_completes_fails_every_io_without_blocking() {
    let opts = NvmeOptions {
        admin_timeout: Duration::from_millis(200),
        ..fast_opts()
    };
    let (mut w, timer, elapsed) = reset_with_slow_queue_creation(Fault::Drop, opts);
    // The Create I/O CQ times out after the admin timeout.
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    assert!((0..8).all(|t| w.rqs[t].status == IoStatus::Errno(libc::EIO)));
    assert_eq!(w.q.last_error(), Some(crate::IoError::ControllerFailed));
    assert_eq!(w.run(&writes(2, 3)), vec![IoStatus::Errno(libc::EIO); 2]);
    w.verify_in_emulator();
    w.detach_promptly();
}

#[test]
fn emu_start_reset_is_driven_by_the_queue_pairs() {
    let emu = stepped_emu_with_ready_delay(Duration::from_millis(50));
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    w.submit_writes(0..4, 2, &mut timer);
    w.c.start_reset().unwrap();
    assert!(w.c.inner.reset_in_progress(), "started at once");
    // The queues are deleted before the controller is disabled, by the queue pairs' polls.
    assert_eq!(
        (emu.stats().sq_deletions, emu.stats().disables),
        (0, 0),
        "nothing waited for"
    );
    // Asking again while it is in progress does nothing.
    w.c.start_reset().unwrap();
    w.poll_until_resetting(&mut timer, &mut done);
    w.submit_writes(4..8, 2, &mut timer);
    w.poll_until_done(8, &mut timer, &mut done);
    assert!((0..8).all(|t| w.rqs[t].status == IoStatus::Success));
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    let e = emu.stats();
    assert_eq!((e.sq_deletions, e.disables, w.q.stats().resets), (1, 1, 1));
    w.verify_acked(0..8, 2);
}

#[test]
fn emu_reset_aborts_commands_in_the_device_by_deleting_their_queue() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    // Four writes of version 2 the device holds (fetched, never executed), then a reset.
    emu.inject(FaultRule::new(Fault::Drop).times(Some(4)));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    w.submit_writes(0..4, 2, &mut timer);
    emu.step();
    assert_eq!(emu.held(), 4);
    w.c.start_reset().unwrap();
    w.poll_until_done(4, &mut timer, &mut done);
    // Delete I/O SQ completed them as aborted; the queue pair resubmitted each once.
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((emu.held(), e.sq_deletions, e.disables), (0, 1, 1));
    assert_eq!((s.resets, s.recovered, s.errors), (1, 4, 0), "{s:?}");
    assert!((0..4).all(|t| w.rqs[t].status == IoStatus::Success));
    w.verify_acked(0..4, 2);
}

#[test]
fn fault_reset_disables_a_controller_that_does_not_delete_its_queues() {
    let emu = stepped_emu_with_ready_delay(Duration::ZERO);
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    emu.inject(
        FaultRule::new(Fault::Drop)
            .admin()
            .opcode(admin_opc::DELETE_IO_SQ),
    );
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    w.submit_writes(0..4, 2, &mut timer);
    let t0 = Instant::now();
    w.c.start_reset().unwrap();
    w.poll_until_resetting(&mut timer, &mut done);
    // Waits out the deletion budget (1 s), polled, never waited for, then resets anyway.
    w.poll_until_done(4, &mut timer, &mut done);
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    let e = emu.stats();
    assert_eq!((e.sq_deletions, e.disables, w.q.stats().resets), (0, 1, 1));
    assert!((0..4).all(|t| w.rqs[t].status == IoStatus::Success));
    w.verify_acked(0..4, 2);
}

#[test]
fn fault_reset_with_queue_pairs_on_two_threads() {
    let emu = Emu::new(EmuConfig {
        ready_delay: Duration::from_millis(20),
        to: 10,
        ..EmuConfig::default()
    });
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let c = attach(&emu, opts);
    let _thread = emu.spawn(None);
    // The controller fails while both threads have I/O in flight (about a third of the way).
    emu.inject(FaultRule::new(Fault::Fatal).nth(1000));
    let stats: Vec<QpairStats> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2usize)
            .map(|i| {
                let (emu, c) = (
                    emu.clone(),
                    Controller {
                        inner: c.inner.clone(),
                    },
                );
                s.spawn(move || {
                    let mut w = Workload::on(&emu, c, 16);
                    w.threaded = true;
                    let units = i * 256..(i + 1) * 256;
                    for round in 1..=3 {
                        let mut ios: Vec<_> =
                            units.clone().map(|u| (Op::Write, u, round)).collect();
                        ios.extend(units.clone().map(|u| (Op::Read, u, 0)));
                        let st = w.run(&ios);
                        assert!(st.iter().all(|s| s.is_success()), "thread {i}: {st:?}");
                    }
                    w.verify_by_reading();
                    w.q.stats()
                })
            })
            .collect();
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let e = emu.stats();
    assert_eq!(
        (e.fatal, e.disables),
        (1, 1),
        "one reset for both queue pairs"
    );
    for (i, s) in stats.iter().enumerate() {
        assert_eq!(s.resets, 1, "queue pair {i}: {s:?}");
        assert_eq!((s.errors, s.duplicates), (0, 0), "queue pair {i}: {s:?}");
    }
}

/// Resets from another thread, one after another, while a queue pair on this one keeps I/O
/// in flight (some of it held by the controller): each reset deletes the queue under the
/// polling queue pair, whose poll may be reaping when the aborts land. Every I/O succeeds once,
/// the data is each unit's last version, and no completion is an error or a duplicate.
#[test]
fn fault_resets_from_another_thread_under_io() {
    // RUST_LOG=warn shows each reset and what a failed one met.
    let _ = env_logger::builder().is_test(true).try_init();
    let emu = Emu::new(EmuConfig::default());
    let opts = NvmeOptions {
        // A command may be caught by several resets in a row here; the budget is not what
        // this test is about.
        recovery_retries: u8::MAX,
        ..fast_opts()
    };
    let c = attach(&emu, opts);
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_micros(300))).rate(0.1, None));
    // The queue pair exists before the first reset: creating one during a reset is refused
    // (`Resetting`), as SPDK's qpair allocation is.
    let (created, queue_pair_ready) = std::sync::mpsc::channel();
    let stats = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            // Owned here: a panic before the send drops it, which ends the wait below.
            let created = created;
            let ctrlr = Controller {
                inner: c.inner.clone(),
            };
            let mut w = Workload::on(&emu, ctrlr, 16);
            created.send(()).unwrap();
            w.threaded = true;
            for round in 1..=20 {
                let mut ios: Vec<_> = (0..128).map(|u| (Op::Write, u, round)).collect();
                ios.extend((0..128).map(|u| (Op::Read, u, 0)));
                let st = w.run(&ios);
                assert!(st.iter().all(|s| s.is_success()), "round {round}: {st:?}");
            }
            w.verify_by_reading();
            w.q.stats()
        });
        // A worker that failed before (its sender gone) is reported by `join` below.
        let _ = queue_pair_ready.recv();
        let mut resets = 0u64;
        while !worker.is_finished() {
            c.reset().unwrap();
            resets += 1;
            std::thread::sleep(Duration::from_micros(500));
        }
        let st = worker.join().unwrap();
        assert!(resets >= 2, "{resets} resets");
        st
    });
    let e = emu.stats();
    assert!(stats.resets >= 1, "{stats:?}");
    assert_eq!((stats.errors, stats.duplicates), (0, 0), "{stats:?}");
    // A reset that found the queues not yet recreated after the one before deleted nothing.
    assert!(e.sq_deletions >= 1, "{e:?}");
}

/// Closing a queue pair while it recreates its queues after a reset (its Create I/O CQ or SQ
/// still pending) deletes what the controller has of them and leaks nothing: the controller
/// is left without I/O queues, and the rings' DMA mapping goes with the queue pair (a leaked
/// one would keep the device open after detach).
#[test]
fn fault_close_while_recreating_queues_leaves_nothing_behind() {
    for opc in [admin_opc::CREATE_IO_CQ, admin_opc::CREATE_IO_SQ] {
        let emu = Emu::new(EmuConfig::default());
        emu.set_inline(false);
        let mut w = Workload::new(&emu, fast_opts(), 8);
        w.run(&writes(8, 1));
        let mapped = emu.mapped();
        emu.inject(
            FaultRule::new(Fault::Delay(Duration::from_millis(50)))
                .admin()
                .opcode(opc),
        );
        let mut done = Vec::new();
        w.c.start_reset().unwrap();
        let t0 = Instant::now();
        while emu.stats().delayed == 0 {
            assert!(t0.elapsed() < Duration::from_secs(2), "no queue creation");
            w.emu.step();
            w.q.poll(&mut w.rqs, &mut done, 64);
        }
        assert!(w.q.resetting(), "the queues are still being recreated");
        let _thread = emu.spawn(None);
        let Workload { q, c, buf, .. } = w;
        drop(q);
        assert_eq!(
            emu.io_queues(),
            (0, 0),
            "opcode {opc:#x}: queues left behind"
        );
        assert!(
            emu.mapped() < mapped,
            "opcode {opc:#x}: the rings stay mapped ({} of {mapped})",
            emu.mapped()
        );
        drop(buf);
        c.detach().unwrap();
    }
}

/// `Controller::reset` (an RPC's reset) drives the reset itself and returns when it is over;
/// the queue pair then recreates its queues at its next use and I/O goes on. A reset that
/// cannot finish is reported as the controller's failure.
#[test]
fn emu_blocking_reset_returns_when_done_and_io_goes_on() {
    let emu = Emu::new(EmuConfig {
        ready_delay: Duration::from_millis(20),
        ..EmuConfig::default()
    });
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    let t0 = Instant::now();
    w.c.reset().unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(emu.stats().disables, 1);
    assert_eq!(w.run(&writes(8, 2)), vec![IoStatus::Success; 8]);
    assert_eq!(w.q.stats().resets, 1);
    w.verify_acked(0..8, 2);
    emu.set_ready_delays(Duration::MAX, Duration::MAX);
    let e = w.c.reset().unwrap_err();
    assert!(matches!(e, NvmeError::ControllerFatal { .. }), "{e}");
}

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
