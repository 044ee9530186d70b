//! Fault injection: [`Fault`] and the [`FaultRule`]s that pick which commands get one (tried
//! in order at each fetched command, rate-based ones from a seeded generator so a run is
//! reproducible), and the faults a test injects directly: a vanished device, a fatal status,
//! a completion for a command never sent, random completion entries.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Emu, State};
use crate::spec::{Cqe, Sqe, Status, nvm_opc};

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

/// The emulator's generator (xorshift64): cheap, seeded, reproducible.
pub(super) fn xorshift(s: &mut u64) -> u64 {
    let mut x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    x
}

impl Emu {
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

    /// Commands currently held (dropped or delayed).
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// Makes the device vanish now.
    pub fn vanish(&self) {
        self.vanished.store(true, Ordering::Release);
        self.lock().stats.vanished += 1;
    }

    /// Sets CSTS.CFS now.
    pub fn make_fatal(&self) {
        let mut s = self.lock();
        s.csts |= 2;
        s.stats.fatal += 1;
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
            if cq.full(head) {
                break;
            }
            let (addr, phase) = cq.advance();
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
                status: ((r2 >> 32) as u16 & !1) | u16::from(phase ^ (r2 & 6 == 0)),
            };
            s.write_cqe(addr, &cqe);
            s.stats.scribbled += 1;
            written += 1;
        }
        written
    }
}

impl State {
    /// The fault for command `sqe` (the first rule that matches and hits), if any; counts the
    /// hit against the rule's `times`.
    pub(super) fn pick_fault(&mut self, admin: bool, sqe: &Sqe) -> Option<Fault> {
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
}
