//! A software NVMe controller with fault injection, for tests and benchmarks (not shipped in
//! apps: built under `cfg(test)` or the `emulator` feature).
//!
//! [`Emu`] implements the driver's [`RegisterIo`] and [`DmaMapper`] interfaces: controller
//! registers with enable / disable (controller reset) / shutdown behaviour, the admin commands
//! the driver uses (Identify controller / namespace / active namespace list, Set Features Number
//! of Queues, Create / Delete I/O SQ and CQ, Abort), NVM I/O (read, write, flush, write zeroes,
//! dataset management) against RAM with PRP lists, and SQ/CQ rings with doorbells and phase
//! tags. DMA reaches only memory the driver mapped, as through an IOMMU: at IOVA = VA, or,
//! after [`Emu::set_iova_ranges`], wherever [`crate::iova`] places it in those ranges (as
//! VFIO does on a narrow IOMMU), translated back on every access.
//!
//! CSTS.RDY follows CC.EN at once, or after a delay ([`EmuConfig::ready_delay`],
//! [`Emu::set_ready_delays`]) as a real controller's reset and initialisation take.
//!
//! Admin commands are processed when the admin SQ doorbell is written. I/O commands are
//! processed on their doorbell write ([`Emu::set_inline`], the default), or by [`Emu::step`]
//! (called by the test, or by the thread of [`Emu::spawn`]). Delayed completions are posted by
//! `step` once due.
//!
//! Faults ([`FaultRule`]) are matched per command (opcode, LBA range, n-th I/O command, admin or
//! I/O) or by rate (seeded, reproducible), and a matched command is delayed, dropped (held, never
//! completed unless aborted), completed twice, completed with a chosen status, or makes the
//! controller fatal (CSTS.CFS) or vanish (every register reads all ones, nothing completes).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::dma::DmaMapper;
use crate::error::NvmeError;
use crate::iova::IovaSpace;
use crate::regs::{RegisterIo, off};
use crate::spec::{
    Cqe, IdentifyController, IdentifyNamespace, LbaFormat, Sqe, Status, admin_opc, cns, fid,
    nvm_opc, sct,
};

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod lifecycle;
#[cfg(test)]
mod tests;

/// Emulated controller geometry.
#[derive(Clone, Debug)]
pub struct EmuConfig {
    /// Blocks of namespace 1.
    pub blocks: u64,
    /// log2 of the block size (9 = 512 bytes).
    pub block_shift: u8,
    /// MDTS (units of 4 KiB pages, power of two exponent).
    pub mdts: u8,
    /// CAP.MQES (0-based maximum queue entries).
    pub mqes: u16,
    /// I/O queue pairs granted by Set Features Number of Queues.
    pub max_io_queues: u16,
    /// CAP.TO (500 ms units).
    pub to: u8,
    /// How long CSTS.RDY takes to follow a change of CC.EN (a real controller resets and
    /// initialises meanwhile). Default zero: at once. See also [`Emu::set_ready_delays`].
    pub ready_delay: Duration,
    /// The VS register. Below 1.1 (`0x0001_0100`) the controller behaves as NVMe 1.0: it has no
    /// active namespace list (Identify CNS 02h is an invalid field).
    pub version: u32,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            blocks: 8192,
            block_shift: 9,
            mdts: 5,
            mqes: 1023,
            max_io_queues: 8,
            to: 1,
            ready_delay: Duration::ZERO,
            version: 0x0001_0400,
        }
    }
}

/// What happens to a command a [`FaultRule`] matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Executed now, completed after this long (posted by [`Emu::step`] once due).
    Delay(Duration),
    /// Not executed and never completed (held until aborted or the controller is reset).
    Drop,
    /// Executed, but its completion is lost: the controller forgets the command, so an Abort
    /// does not find it (only a controller reset recovers).
    Lose,
    /// Executed, and its completion posted twice.
    Duplicate,
    /// Not executed; completed with this status.
    Status(Status),
    /// The controller fails: CSTS.CFS set, no more commands processed until a reset.
    Fatal,
    /// The device vanishes: every register read returns all ones, nothing completes, ever.
    Vanish,
}

/// Which commands a rule applies to, and how often.
#[derive(Clone, Debug)]
pub struct FaultRule {
    /// The fault to inject.
    pub fault: Fault,
    /// Admin commands (true) or I/O commands (false, the default).
    pub admin: bool,
    /// Only this opcode.
    pub opcode: Option<u8>,
    /// Only I/O commands whose starting LBA is in this range.
    pub lba: Option<Range<u64>>,
    /// Only the n-th command of its kind (I/O or admin, 0-based, counting every command the
    /// emulator fetched, retries included).
    pub nth: Option<u64>,
    /// Probability (0..=1) that a matching command is hit; 1 by default.
    pub rate: f64,
    /// How many more commands the rule may hit (`None`: unlimited).
    pub times: Option<u64>,
}

impl FaultRule {
    /// A rule hitting every I/O command once (`times` 1) with `fault`; narrow it with the
    /// builder methods.
    pub fn new(fault: Fault) -> FaultRule {
        FaultRule {
            fault,
            admin: false,
            opcode: None,
            lba: None,
            nth: None,
            rate: 1.0,
            times: Some(1),
        }
    }

    /// Applies to admin commands instead of I/O commands.
    pub fn admin(mut self) -> FaultRule {
        self.admin = true;
        self
    }

    /// Only commands with opcode `opc`.
    pub fn opcode(mut self, opc: u8) -> FaultRule {
        self.opcode = Some(opc);
        self
    }

    /// Only commands starting in `lba`.
    pub fn lba(mut self, lba: Range<u64>) -> FaultRule {
        self.lba = Some(lba);
        self
    }

    /// Only the `n`-th command (0-based).
    pub fn nth(mut self, n: u64) -> FaultRule {
        self.nth = Some(n);
        self
    }

    /// Hits matching commands with probability `rate`, at most `times` times (`None`:
    /// unlimited).
    pub fn rate(mut self, rate: f64, times: Option<u64>) -> FaultRule {
        self.rate = rate;
        self.times = times;
        self
    }

    /// Hits at most `times` commands (`None`: unlimited).
    pub fn times(mut self, times: Option<u64>) -> FaultRule {
        self.times = times;
        self
    }
}

/// What the emulator saw and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// I/O commands fetched (retries included).
    pub io_commands: u64,
    /// Admin commands fetched.
    pub admin_commands: u64,
    /// Commands delayed ([`Fault::Delay`]).
    pub delayed: u64,
    /// Commands dropped ([`Fault::Drop`]).
    pub dropped: u64,
    /// Completions lost ([`Fault::Lose`]).
    pub lost: u64,
    /// Completions posted twice ([`Fault::Duplicate`]).
    pub duplicated: u64,
    /// Commands completed with an injected status ([`Fault::Status`]).
    pub status_injected: u64,
    /// Times the controller went fatal (CSTS.CFS).
    pub fatal: u64,
    /// Times the device vanished.
    pub vanished: u64,
    /// Abort commands received.
    pub aborts: u64,
    /// Abort commands that found (and aborted) their command.
    pub aborts_hit: u64,
    /// Controller resets (CC.EN 1 → 0).
    pub disables: u64,
    /// Random completion entries written by [`Emu::scribble_cq`].
    pub scribbled: u64,
    /// Completions posted.
    pub posted: u64,
}

struct Sq {
    base: u64,
    entries: u32,
    head: u32,
    cqid: u16,
}

struct Cq {
    base: u64,
    entries: u32,
    tail: u32,
    phase: bool,
    /// Completions waiting for room in the ring.
    backlog: VecDeque<Post>,
}

#[derive(Clone, Copy)]
struct Post {
    sqid: u16,
    cid: u16,
    st: Status,
    dw0: u32,
}

struct Held {
    cqid: u16,
    post: Post,
    /// `None`: dropped (never completes); `Some(t)`: delayed until `t`.
    due: Option<Instant>,
}

struct State {
    cfg: EmuConfig,
    cap: u64,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    sqs: Vec<Option<Sq>>,
    cqs: Vec<Option<Cq>>,
    disk: Vec<u8>,
    /// The DMA mappings and their IOVAs.
    iommu: IovaSpace,
    rules: Vec<FaultRule>,
    rng: u64,
    held: Vec<Held>,
    stats: EmuStats,
    /// Delay of CSTS.RDY after CC.EN, indexed by the new RDY value (0: disable, 1: enable).
    ready_delay: [Duration; 2],
    /// A CSTS.RDY change not yet visible: the new value and when (`None`: never).
    ready_pending: Option<(bool, Option<Instant>)>,
}

/// The emulated controller: registers and DMA mapping in one (share it as `Arc<Emu>`).
pub struct Emu {
    st: Mutex<State>,
    /// Doorbell values: index 2·qid is the SQ tail, 2·qid + 1 the CQ head.
    doorbells: Box<[AtomicU32]>,
    vanished: AtomicBool,
    inline_io: AtomicBool,
}

fn xorshift(s: &mut u64) -> u64 {
    let mut x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    x
}

impl Emu {
    /// A controller with one namespace (NSID 1) of `cfg.blocks` zeroed blocks.
    pub fn new(cfg: EmuConfig) -> Arc<Emu> {
        let nq = usize::from(cfg.max_io_queues) + 1;
        let cap = u64::from(cfg.mqes) | 1 << 16 | u64::from(cfg.to) << 24 | 1 << 37 | 4 << 52;
        let disk = vec![0u8; (cfg.blocks << cfg.block_shift) as usize];
        let ready_delay = [cfg.ready_delay; 2];
        Arc::new(Emu {
            st: Mutex::new(State {
                cfg,
                cap,
                cc: 0,
                csts: 0,
                aqa: 0,
                asq: 0,
                acq: 0,
                sqs: (0..nq).map(|_| None).collect(),
                cqs: (0..nq).map(|_| None).collect(),
                disk,
                iommu: IovaSpace::new(None),
                rules: Vec::new(),
                rng: 0x9e37_79b9_7f4a_7c15,
                held: Vec::new(),
                stats: EmuStats::default(),
                ready_delay,
                ready_pending: None,
            }),
            doorbells: (0..2 * nq).map(|_| AtomicU32::new(0)).collect(),
            vanished: AtomicBool::new(false),
            inline_io: AtomicBool::new(true),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether I/O commands are processed when their doorbell is written (default true);
    /// when false they wait for [`Emu::step`].
    pub fn set_inline(&self, inline: bool) {
        self.inline_io.store(inline, Ordering::Release);
    }

    /// Adds a fault rule (rules are tried in order; the first that hits wins).
    pub fn inject(&self, rule: FaultRule) {
        self.lock().rules.push(rule);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.lock().rules.clear();
    }

    /// Seeds the generator used by rate-based rules and [`Emu::scribble_cq`].
    pub fn seed(&self, seed: u64) {
        self.lock().rng = seed | 1;
    }

    /// Counters.
    pub fn stats(&self) -> EmuStats {
        self.lock().stats.clone()
    }

    /// Commands currently held (dropped or delayed).
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// Makes the device vanish now.
    pub fn vanish(&self) {
        self.vanished.store(true, Ordering::Release);
        self.lock().stats.vanished += 1;
    }

    /// How long CSTS.RDY takes to become 0 after CC.EN is cleared (`disable`) and 1 after it
    /// is set (`enable`), from the next change of CC.EN on; `Duration::MAX`: never.
    pub fn set_ready_delays(&self, disable: Duration, enable: Duration) {
        self.lock().ready_delay = [disable, enable];
    }

    /// Sets CSTS.CFS now.
    pub fn make_fatal(&self) {
        let mut s = self.lock();
        s.csts |= 2;
        s.stats.fatal += 1;
    }

    /// `len` bytes of the namespace at byte `offset`.
    pub fn disk(&self, offset: usize, len: usize) -> Vec<u8> {
        self.lock().disk[offset..offset + len].to_vec()
    }

    /// Overwrites namespace bytes at `offset`.
    pub fn set_disk(&self, offset: usize, data: &[u8]) {
        self.lock().disk[offset..offset + data.len()].copy_from_slice(data);
    }

    /// I/O SQs and CQs currently created.
    pub fn io_queues(&self) -> (usize, usize) {
        let s = self.lock();
        (
            s.sqs.iter().skip(1).filter(|q| q.is_some()).count(),
            s.cqs.iter().skip(1).filter(|q| q.is_some()).count(),
        )
    }

    /// DMA ranges currently mapped.
    pub fn mapped(&self) -> usize {
        self.lock().iommu.mappings()
    }

    /// Makes the emulator an IOMMU whose valid IOVA ranges are `ranges` (`(first, last)`):
    /// memory outside them is mapped at allocated IOVAs, as VFIO does on a 39-bit IOMMU.
    /// Call it before anything is mapped (before attach).
    pub fn set_iova_ranges(&self, ranges: Vec<(u64, u64)>) {
        let mut s = self.lock();
        assert_eq!(s.iommu.mappings(), 0, "IOVA ranges set with DMA mapped");
        s.iommu = IovaSpace::new(Some(ranges));
    }

    /// DMA mappings at an IOVA other than their virtual address.
    pub fn translated(&self) -> usize {
        self.lock().iommu.translated()
    }

    /// CSTS.SHST.
    pub fn shst(&self) -> u32 {
        (self.lock().csts >> 2) & 3
    }

    /// Processes every I/O SQ up to its doorbell, posts due delayed completions and backlogs.
    /// Returns the number of commands processed.
    pub fn step(&self) -> usize {
        if self.vanished.load(Ordering::Acquire) {
            return 0;
        }
        let mut s = self.lock();
        let mut n = 0;
        for qid in 1..s.sqs.len() {
            n += self.process_sq(&mut s, qid as u16);
        }
        s.release_due(Instant::now());
        s.flush_backlogs(&self.doorbells);
        n
    }

    /// Posts a completion for command `cid` of I/O queue `qid` that the controller never
    /// received (as a confused device could), with status `st`.
    pub fn post_bogus(&self, qid: u16, cid: u16, st: Status) {
        let mut s = self.lock();
        s.post(qid, qid, cid, st, 0, &self.doorbells);
    }

    /// Writes `count` random completion entries (random CID, phase, status, SQ head) into I/O
    /// CQ `qid` at its tail, as a buggy or malicious device could; returns how many were
    /// written (fewer when the ring is full).
    pub fn scribble_cq(&self, qid: u16, count: usize) -> usize {
        let mut s = self.lock();
        let mut written = 0;
        for _ in 0..count {
            let r = xorshift(&mut s.rng);
            let r2 = xorshift(&mut s.rng);
            let head = self.doorbells[2 * usize::from(qid) + 1].load(Ordering::Acquire);
            let Some(cq) = s.cqs.get_mut(usize::from(qid)).and_then(|c| c.as_mut()) else {
                break;
            };
            if (cq.tail + 1) % cq.entries == head % cq.entries {
                break;
            }
            let cqe = Cqe {
                dw0: r as u32,
                dw1: 0,
                sqhd: (r >> 32) as u16,
                sqid: qid,
                // Mostly plausible CIDs (small), sometimes anything.
                cid: if r2 & 1 == 0 {
                    (r2 >> 8) as u16 % 64
                } else {
                    (r2 >> 8) as u16
                },
                // Mostly the expected phase (so the driver consumes the entry), sometimes
                // the stale one (so it stalls behind it until the queue is recovered).
                status: ((r2 >> 32) as u16 & !1) | u16::from(cq.phase ^ (r2 & 6 == 0)),
            };
            let addr = cq.base + u64::from(cq.tail) * 16;
            cq.tail += 1;
            if cq.tail == cq.entries {
                cq.tail = 0;
                cq.phase = !cq.phase;
            }
            s.write_cqe(addr, &cqe);
            s.stats.scribbled += 1;
            written += 1;
        }
        written
    }

    fn process_sq(&self, s: &mut State, qid: u16) -> usize {
        let tail = self.doorbells[2 * usize::from(qid)].load(Ordering::Acquire);
        let mut n = 0;
        loop {
            if s.csts & 2 != 0 || self.vanished.load(Ordering::Acquire) || s.csts & 1 == 0 {
                return n;
            }
            let Some(sq) = s.sqs.get_mut(usize::from(qid)).and_then(|q| q.as_mut()) else {
                return n;
            };
            if tail >= sq.entries || sq.head == tail {
                return n;
            }
            let addr = sq.base + u64::from(sq.head) * 64;
            sq.head = (sq.head + 1) % sq.entries;
            let cqid = sq.cqid;
            let mut raw = [0u8; 64];
            if !s.read_mem(addr, &mut raw) {
                return n;
            }
            // SAFETY: Sqe is 64 bytes of plain integers; any bytes are valid.
            let sqe: Sqe = unsafe { std::mem::transmute(raw) };
            n += 1;
            let fault = s.pick_fault(qid == 0, &sqe);
            if qid == 0 {
                s.stats.admin_commands += 1;
            } else {
                s.stats.io_commands += 1;
            }
            let cid = sqe.cid();
            let exec = |s: &mut State| {
                if qid == 0 {
                    s.admin(&sqe, &self.doorbells)
                } else {
                    s.io(&sqe)
                }
            };
            match fault {
                None => {
                    let (st, dw0) = exec(s);
                    s.post(cqid, qid, cid, st, dw0, &self.doorbells);
                }
                Some(Fault::Delay(d)) => {
                    let (st, dw0) = exec(s);
                    s.stats.delayed += 1;
                    s.held.push(Held {
                        cqid,
                        post: Post {
                            sqid: qid,
                            cid,
                            st,
                            dw0,
                        },
                        due: Some(Instant::now() + d),
                    });
                }
                Some(Fault::Drop) => {
                    s.stats.dropped += 1;
                    s.held.push(Held {
                        cqid,
                        post: Post {
                            sqid: qid,
                            cid,
                            st: Status::SUCCESS,
                            dw0: 0,
                        },
                        due: None,
                    });
                }
                Some(Fault::Lose) => {
                    let _ = exec(s);
                    s.stats.lost += 1;
                }
                Some(Fault::Duplicate) => {
                    let (st, dw0) = exec(s);
                    s.stats.duplicated += 1;
                    s.post(cqid, qid, cid, st, dw0, &self.doorbells);
                    s.post(cqid, qid, cid, st, dw0, &self.doorbells);
                }
                Some(Fault::Status(st)) => {
                    s.stats.status_injected += 1;
                    s.post(cqid, qid, cid, st, 0, &self.doorbells);
                }
                Some(Fault::Fatal) => {
                    s.stats.fatal += 1;
                    s.csts |= 2;
                    return n;
                }
                Some(Fault::Vanish) => {
                    s.stats.vanished += 1;
                    self.vanished.store(true, Ordering::Release);
                    return n;
                }
            }
        }
    }
}

impl State {
    fn pick_fault(&mut self, admin: bool, sqe: &Sqe) -> Option<Fault> {
        if self.rules.is_empty() {
            return None;
        }
        let seq = if admin {
            self.stats.admin_commands
        } else {
            self.stats.io_commands
        };
        let opc = sqe.opcode();
        let lba_cmd =
            !admin && matches!(opc, nvm_opc::READ | nvm_opc::WRITE | nvm_opc::WRITE_ZEROES);
        for i in 0..self.rules.len() {
            let r = &self.rules[i];
            if r.admin != admin
                || r.times == Some(0)
                || r.opcode.is_some_and(|o| o != opc)
                || r.nth.is_some_and(|n| n != seq)
                || r.lba
                    .as_ref()
                    .is_some_and(|l| !lba_cmd || !l.contains(&sqe.slba()))
            {
                continue;
            }
            let rate = r.rate;
            if rate < 1.0 {
                let x = (xorshift(&mut self.rng) >> 11) as f64 / (1u64 << 53) as f64;
                if x >= rate {
                    continue;
                }
            }
            let r = &mut self.rules[i];
            if let Some(t) = r.times.as_mut() {
                *t -= 1;
            }
            return Some(r.fault);
        }
        None
    }

    /// The process address of `len` mapped bytes at `iova` (`None`: not all mapped).
    fn host(&self, iova: u64, len: usize) -> Option<*mut u8> {
        self.iommu
            .translate(iova, len as u64)
            .map(|va| va as *mut u8)
    }

    fn read_mem(&self, iova: u64, out: &mut [u8]) -> bool {
        let Some(p) = self.host(iova, out.len()) else {
            return false;
        };
        // SAFETY: the range lies in memory the driver mapped for DMA and keeps alive while
        // mapped (the DmaMapper contract).
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        true
    }

    fn write_mem(&self, iova: u64, data: &[u8]) -> bool {
        let Some(p) = self.host(iova, data.len()) else {
            return false;
        };
        // SAFETY: as read_mem; the driver holds no Rust references to device-written memory.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        true
    }

    fn write_cqe(&self, addr: u64, cqe: &Cqe) {
        // SAFETY: Cqe is 16 bytes of plain integers.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(*cqe) };
        // The phase tag is in the last two bytes: write the body first, then the status word,
        // so a concurrent reader never sees a new phase with an old body.
        if self.write_mem(addr, &bytes[..14]) {
            std::sync::atomic::fence(Ordering::Release);
            self.write_mem(addr + 14, &bytes[14..]);
        }
    }

    /// Copies `len` bytes between the namespace at byte `start` and the memory a command's
    /// PRPs describe (`to_host`: a read). No allocation: PRP list entries are read in place.
    fn transfer(&mut self, sqe: &Sqe, start: usize, len: usize, to_host: bool) -> bool {
        let page = 4096u64;
        if sqe.prp1 & 3 != 0 {
            return false;
        }
        let first = ((page - (sqe.prp1 & (page - 1))) as usize).min(len);
        if !self.copy(sqe.prp1, start, first, to_host) {
            return false;
        }
        let mut left = len - first;
        let mut pos = start + first;
        if left == 0 {
            return true;
        }
        if left <= page as usize {
            return sqe.prp2 & (page - 1) == 0 && self.copy(sqe.prp2, pos, left, to_host);
        }
        let n = left.div_ceil(page as usize);
        if n > 512 || !sqe.prp2.is_multiple_of(8) {
            return false;
        }
        let Some(list) = self.host(sqe.prp2, n * 8) else {
            return false;
        };
        for i in 0..n {
            // SAFETY: the list lies in mapped memory (checked above), 8-byte aligned (IOVA
            // and address agree modulo the page size).
            let a = unsafe { list.cast::<u64>().add(i).read_volatile() };
            let l = left.min(page as usize);
            if a & (page - 1) != 0 || !self.copy(a, pos, l, to_host) {
                return false;
            }
            left -= l;
            pos += l;
        }
        true
    }

    /// Copies `len` bytes between namespace byte `pos` and mapped memory at `iova`.
    fn copy(&mut self, iova: u64, pos: usize, len: usize, to_host: bool) -> bool {
        let Some(host) = self.host(iova, len) else {
            return false;
        };
        if pos + len > self.disk.len() {
            return false;
        }
        let disk = self.disk[pos..pos + len].as_mut_ptr();
        // SAFETY: `host..+len` is memory the driver mapped for DMA (translated above), the
        // disk range is in bounds (checked); they never overlap (the disk is the emulator's
        // own Vec).
        unsafe {
            if to_host {
                std::ptr::copy_nonoverlapping(disk, host, len);
            } else {
                std::ptr::copy_nonoverlapping(host, disk, len);
            }
        }
        true
    }

    fn post(&mut self, cqid: u16, sqid: u16, cid: u16, st: Status, dw0: u32, db: &[AtomicU32]) {
        let Some(cq) = self.cqs.get_mut(usize::from(cqid)).and_then(|c| c.as_mut()) else {
            return;
        };
        cq.backlog.push_back(Post { sqid, cid, st, dw0 });
        self.flush_cq(cqid, db);
    }

    fn flush_backlogs(&mut self, db: &[AtomicU32]) {
        for q in 0..self.cqs.len() {
            if self.cqs[q].as_ref().is_some_and(|c| !c.backlog.is_empty()) {
                self.flush_cq(q as u16, db);
            }
        }
    }

    /// Posts backlogged completions of CQ `cqid` while the ring has room.
    fn flush_cq(&mut self, cqid: u16, db: &[AtomicU32]) {
        let head = db[2 * usize::from(cqid) + 1].load(Ordering::Acquire);
        loop {
            let Some(cq) = self.cqs.get_mut(usize::from(cqid)).and_then(|c| c.as_mut()) else {
                return;
            };
            if (cq.tail + 1) % cq.entries == head % cq.entries {
                return;
            }
            let Some(p) = cq.backlog.pop_front() else {
                return;
            };
            let addr = cq.base + u64::from(cq.tail) * 16;
            let phase = cq.phase;
            cq.tail += 1;
            if cq.tail == cq.entries {
                cq.tail = 0;
                cq.phase = !cq.phase;
            }
            let sqhd = self
                .sqs
                .get(usize::from(p.sqid))
                .and_then(|s| s.as_ref())
                .map_or(0, |s| s.head) as u16;
            let cqe = Cqe {
                dw0: p.dw0,
                dw1: 0,
                sqhd,
                sqid: p.sqid,
                cid: p.cid,
                status: p.st.0 << 1 | u16::from(phase),
            };
            self.write_cqe(addr, &cqe);
            self.stats.posted += 1;
        }
    }

    fn release_due(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].due.is_some_and(|d| d <= now) {
                let h = self.held.swap_remove(i);
                if let Some(cq) = self
                    .cqs
                    .get_mut(usize::from(h.cqid))
                    .and_then(|c| c.as_mut())
                {
                    cq.backlog.push_back(h.post);
                }
            } else {
                i += 1;
            }
        }
    }

    /// CC.EN changed to `en`: the controller enables or resets, and CSTS.RDY follows after
    /// the configured delay (at once without one).
    fn set_enabled(&mut self, en: bool, db: &[AtomicU32]) {
        let was_ready = self.csts & 1 != 0;
        self.ready_pending = None;
        if !en {
            // The controller stops at once; RDY stays 1 until its reset is "done".
            self.disable(db);
        }
        let delay = self.ready_delay[usize::from(en)];
        if delay.is_zero() {
            if en {
                self.enable();
            }
            return;
        }
        if !en && was_ready {
            self.csts |= 1;
        }
        self.ready_pending = Some((en, Instant::now().checked_add(delay)));
    }

    /// Makes a delayed CSTS.RDY change visible once due.
    fn settle_ready(&mut self) {
        let Some((en, due)) = self.ready_pending else {
            return;
        };
        if due.is_none_or(|d| Instant::now() < d) {
            return;
        }
        self.ready_pending = None;
        if en {
            self.enable();
        } else {
            self.csts &= !1;
        }
    }

    fn enable(&mut self) {
        for q in self.sqs.iter_mut() {
            *q = None;
        }
        for q in self.cqs.iter_mut() {
            *q = None;
        }
        self.sqs[0] = Some(Sq {
            base: self.asq,
            entries: (self.aqa & 0xfff) + 1,
            head: 0,
            cqid: 0,
        });
        self.cqs[0] = Some(Cq {
            base: self.acq,
            entries: ((self.aqa >> 16) & 0xfff) + 1,
            tail: 0,
            phase: true,
            backlog: VecDeque::new(),
        });
        self.csts = (self.csts & !2) | 1;
    }

    /// Controller reset (CC.EN 1 → 0): every queue and held command is gone.
    fn disable(&mut self, db: &[AtomicU32]) {
        self.stats.disables += 1;
        self.csts &= !(1 | 2 | 3 << 2);
        for q in self.sqs.iter_mut() {
            *q = None;
        }
        for q in self.cqs.iter_mut() {
            *q = None;
        }
        self.held.clear();
        for d in db {
            d.store(0, Ordering::Release);
        }
    }

    fn admin(&mut self, sqe: &Sqe, db: &[AtomicU32]) -> (Status, u32) {
        let invalid = (Status::new(sct::GENERIC, 0x02, true), 0);
        let xfer_err = (Status::new(sct::GENERIC, 0x04, true), 0);
        let bad_qid = (Status::new(sct::COMMAND_SPECIFIC, 0x01, true), 0);
        let nq = self.sqs.len();
        match sqe.opcode() {
            admin_opc::IDENTIFY => {
                let mut page = [0u8; 4096];
                match sqe.cdw10 & 0xff {
                    cns::CONTROLLER => {
                        let mut id = IdentifyController::zeroed();
                        id.mn[..3].copy_from_slice(b"EMU");
                        id.sn[..4].copy_from_slice(b"0001");
                        id.mdts = self.cfg.mdts;
                        id.nn = 1;
                        id.oncs =
                            IdentifyController::ONCS_DSM | IdentifyController::ONCS_WRITE_ZEROES;
                        // SAFETY: plain 4096-byte integer structure.
                        page = unsafe { std::mem::transmute::<IdentifyController, [u8; 4096]>(id) };
                    }
                    cns::ACTIVE_NS_LIST if self.cfg.version < 0x0001_0100 => return invalid,
                    cns::ACTIVE_NS_LIST => {
                        if sqe.nsid < 1 {
                            page[..4].copy_from_slice(&1u32.to_le_bytes());
                        }
                    }
                    cns::NAMESPACE if sqe.nsid == 1 => {
                        let mut ns = IdentifyNamespace::zeroed();
                        ns.nsze = self.cfg.blocks;
                        ns.ncap = ns.nsze;
                        ns.lbaf[0] = LbaFormat(u32::from(self.cfg.block_shift) << 16);
                        // SAFETY: plain 4096-byte integer structure.
                        page = unsafe { std::mem::transmute::<IdentifyNamespace, [u8; 4096]>(ns) };
                    }
                    _ => return invalid,
                }
                if self.write_mem(sqe.prp1, &page) {
                    (Status::SUCCESS, 0)
                } else {
                    xfer_err
                }
            }
            admin_opc::SET_FEATURES if sqe.cdw10 & 0xff == fid::NUMBER_OF_QUEUES => {
                let n = u32::from(self.cfg.max_io_queues - 1);
                (Status::SUCCESS, n << 16 | n)
            }
            admin_opc::CREATE_IO_CQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                let entries = (sqe.cdw10 >> 16) + 1;
                if qid == 0 || qid >= nq || self.cqs[qid].is_some() {
                    return bad_qid;
                }
                if entries < 2 || entries > u32::from(self.cfg.mqes) + 1 {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x02, true), 0);
                }
                db[2 * qid + 1].store(0, Ordering::Release);
                self.cqs[qid] = Some(Cq {
                    base: sqe.prp1,
                    entries,
                    tail: 0,
                    phase: true,
                    backlog: VecDeque::new(),
                });
                (Status::SUCCESS, 0)
            }
            admin_opc::CREATE_IO_SQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                let cqid = (sqe.cdw11 >> 16) as usize;
                let entries = (sqe.cdw10 >> 16) + 1;
                if qid == 0 || qid >= nq || self.sqs[qid].is_some() {
                    return bad_qid;
                }
                if cqid >= nq || self.cqs[cqid].is_none() {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x00, true), 0);
                }
                if entries < 2 || entries > u32::from(self.cfg.mqes) + 1 {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x02, true), 0);
                }
                db[2 * qid].store(0, Ordering::Release);
                self.sqs[qid] = Some(Sq {
                    base: sqe.prp1,
                    entries,
                    head: 0,
                    cqid: cqid as u16,
                });
                (Status::SUCCESS, 0)
            }
            admin_opc::DELETE_IO_SQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                if qid == 0 || qid >= nq || self.sqs[qid].take().is_none() {
                    return bad_qid;
                }
                // Commands of a deleted SQ are gone (the spec aborts them).
                self.held.retain(|h| usize::from(h.post.sqid) != qid);
                (Status::SUCCESS, 0)
            }
            admin_opc::DELETE_IO_CQ => {
                let qid = (sqe.cdw10 & 0xffff) as usize;
                if qid == 0 || qid >= nq {
                    return bad_qid;
                }
                if self
                    .sqs
                    .iter()
                    .skip(1)
                    .flatten()
                    .any(|s| usize::from(s.cqid) == qid)
                {
                    return (Status::new(sct::COMMAND_SPECIFIC, 0x0c, true), 0);
                }
                match self.cqs[qid].take() {
                    Some(_) => (Status::SUCCESS, 0),
                    None => bad_qid,
                }
            }
            admin_opc::ABORT => {
                self.stats.aborts += 1;
                let sqid = (sqe.cdw10 & 0xffff) as u16;
                let cid = (sqe.cdw10 >> 16) as u16;
                if let Some(i) = self
                    .held
                    .iter()
                    .position(|h| h.post.sqid == sqid && h.post.cid == cid)
                {
                    let h = self.held.swap_remove(i);
                    self.stats.aborts_hit += 1;
                    let aborted = Status::new(sct::GENERIC, 0x07, false);
                    self.post(h.cqid, sqid, cid, aborted, 0, db);
                    (Status::SUCCESS, 0)
                } else {
                    // Command not aborted (not found / already completed).
                    (Status::SUCCESS, 1)
                }
            }
            _ => (Status::new(sct::GENERIC, 0x01, true), 0),
        }
    }

    fn io(&mut self, sqe: &Sqe) -> (Status, u32) {
        let xfer_err = (Status::new(sct::GENERIC, 0x04, true), 0);
        let lba_range = (Status::new(sct::GENERIC, 0x80, true), 0);
        let bs = 1usize << self.cfg.block_shift;
        let blocks = self.cfg.blocks;
        if sqe.nsid != 1 && sqe.opcode() != nvm_opc::FLUSH {
            return (Status::new(sct::GENERIC, 0x0b, true), 0);
        }
        let nlb = u64::from(sqe.cdw12 & 0xffff) + 1;
        let slba = sqe.slba();
        match sqe.opcode() {
            nvm_opc::FLUSH => (Status::SUCCESS, 0),
            nvm_opc::READ | nvm_opc::WRITE | nvm_opc::WRITE_ZEROES => {
                if slba.checked_add(nlb).is_none_or(|e| e > blocks) {
                    return lba_range;
                }
                let (start, len) = (slba as usize * bs, nlb as usize * bs);
                if sqe.opcode() == nvm_opc::WRITE_ZEROES {
                    self.disk[start..start + len].fill(0);
                    return (Status::SUCCESS, 0);
                }
                if len > 4096 << self.cfg.mdts {
                    return (Status::new(sct::GENERIC, 0x02, true), 0);
                }
                if self.transfer(sqe, start, len, sqe.opcode() == nvm_opc::READ) {
                    (Status::SUCCESS, 0)
                } else {
                    xfer_err
                }
            }
            nvm_opc::DSM => {
                let n = (sqe.cdw10 & 0xff) as usize + 1;
                let mut raw = vec![0u8; n * 16];
                if !self.read_mem(sqe.prp1, &mut raw) {
                    return xfer_err;
                }
                for r in raw.chunks(16) {
                    let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
                    let mut s8 = [0u8; 8];
                    s8.copy_from_slice(&r[8..16]);
                    let s = u64::from_le_bytes(s8);
                    if s.checked_add(nlb).is_none_or(|e| e > blocks) {
                        return lba_range;
                    }
                    if sqe.cdw11 & crate::spec::DSM_ATTR_DEALLOCATE != 0 {
                        self.disk[s as usize * bs..(s + nlb) as usize * bs].fill(0);
                    }
                }
                (Status::SUCCESS, 0)
            }
            _ => (Status::new(sct::GENERIC, 0x01, true), 0),
        }
    }
}

impl RegisterIo for Emu {
    fn read32(&self, o: usize) -> u32 {
        if self.vanished.load(Ordering::Acquire) {
            return u32::MAX;
        }
        let mut s = self.lock();
        s.settle_ready();
        match o {
            off::CAP => s.cap as u32,
            0x04 => (s.cap >> 32) as u32,
            off::VS => s.cfg.version,
            off::CC => s.cc,
            off::CSTS => s.csts,
            off::AQA => s.aqa,
            off::ASQ => s.asq as u32,
            0x2c => (s.asq >> 32) as u32,
            off::ACQ => s.acq as u32,
            0x34 => (s.acq >> 32) as u32,
            _ => 0,
        }
    }

    fn write32(&self, o: usize, v: u32) {
        if self.vanished.load(Ordering::Acquire) {
            return;
        }
        if o >= off::DOORBELLS {
            let idx = (o - off::DOORBELLS) / 4;
            let Some(db) = self.doorbells.get(idx) else {
                return;
            };
            db.store(v, Ordering::Release);
            let qid = (idx / 2) as u16;
            // With I/O processed by `step` (the emulator thread), an I/O doorbell is only
            // recorded: `step` fetches commands and posts backlogged completions.
            if qid != 0 && !self.inline_io.load(Ordering::Acquire) {
                return;
            }
            let mut s = self.lock();
            if idx % 2 == 1 {
                // CQ head moved: room for backlogged completions.
                s.flush_cq(qid, &self.doorbells);
            } else {
                self.process_sq(&mut s, qid);
            }
            return;
        }
        let mut s = self.lock();
        match o {
            off::CC => {
                let was = s.cc & 1 != 0;
                s.cc = v;
                if (v & 1 != 0) != was {
                    s.set_enabled(v & 1 != 0, &self.doorbells);
                }
                if (v >> 14) & 3 != 0 {
                    s.csts = (s.csts & !(3 << 2)) | 2 << 2;
                }
            }
            off::AQA => s.aqa = v,
            off::ASQ => s.asq = (s.asq & !0xffff_ffff) | u64::from(v),
            0x2c => s.asq = (s.asq & 0xffff_ffff) | u64::from(v) << 32,
            off::ACQ => s.acq = (s.acq & !0xffff_ffff) | u64::from(v),
            0x34 => s.acq = (s.acq & 0xffff_ffff) | u64::from(v) << 32,
            _ => {}
        }
    }

    fn len(&self) -> usize {
        off::DOORBELLS + self.doorbells.len() * 4
    }
}

impl DmaMapper for Emu {
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64, NvmeError> {
        // As VFIO: an overlap with an existing mapping is EEXIST.
        self.lock().iommu.place(vaddr as u64, len as u64)
    }

    fn unmap(&self, vaddr: *mut u8, len: usize) -> Result<(), NvmeError> {
        let mut s = self.lock();
        match s.iommu.release(vaddr as u64, len as u64) {
            Some(_) => Ok(()),
            None => Err(NvmeError::DmaMap {
                op: "unmap",
                iova: vaddr as u64,
                len,
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            }),
        }
    }
}

/// The emulator running on its own thread (stopped and joined on drop).
pub struct EmuThread {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Emu {
    /// Runs [`Emu::step`] in a loop on a new thread (pinned to `core` when given) and turns
    /// inline I/O processing off.
    pub fn spawn(self: &Arc<Emu>, core: Option<usize>) -> EmuThread {
        self.set_inline(false);
        let emu = self.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("nvme-emu".into())
            .spawn(move || {
                if let Some(c) = core {
                    pin_to_core(c);
                }
                let mut idle = 0u32;
                while !stop2.load(Ordering::Acquire) {
                    if emu.step() == 0 {
                        idle += 1;
                        if idle > 1024 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    } else {
                        idle = 0;
                    }
                }
            })
            .expect("spawn the emulator thread");
        EmuThread {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for EmuThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Pins the calling thread to `core` (best effort: a failure is logged).
pub fn pin_to_core(core: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it;
    // sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            log::warn!(
                "cannot pin to core {core}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}
