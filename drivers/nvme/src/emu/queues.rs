//! The queues: SQs and CQs in host memory, the fetch loop (read the SQE, pick a fault,
//! execute, complete), and completion posting: a CQ entry is written only where the host's
//! head leaves room (the rest waits in a backlog), with the phase tag written last.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use super::{Emu, Fault, State};
use crate::spec::{Cqe, Sqe, Status};

/// A submission queue: where it is, its size, how far the controller fetched, its CQ.
pub(super) struct Sq {
    base: u64,
    entries: u32,
    head: u32,
    pub(super) cqid: u16,
}

/// A completion queue: where it is, its size, where the next entry goes and its phase tag.
pub(super) struct Cq {
    base: u64,
    entries: u32,
    tail: u32,
    phase: bool,
    /// Completions waiting for room in the ring.
    backlog: VecDeque<Post>,
}

/// A completion to post.
#[derive(Clone, Copy)]
pub(super) struct Post {
    pub(super) sqid: u16,
    pub(super) cid: u16,
    st: Status,
    dw0: u32,
}

/// A command kept from completing by a fault.
pub(super) struct Held {
    pub(super) cqid: u16,
    pub(super) post: Post,
    /// `None`: dropped (never completes); `Some(t)`: delayed until `t`.
    due: Option<Instant>,
}

impl Sq {
    pub(super) fn new(base: u64, entries: u32, cqid: u16) -> Sq {
        Sq {
            base,
            entries,
            head: 0,
            cqid,
        }
    }
}

impl Cq {
    pub(super) fn new(base: u64, entries: u32) -> Cq {
        Cq {
            base,
            entries,
            tail: 0,
            phase: true,
            backlog: VecDeque::new(),
        }
    }

    /// Whether the ring has no free entry, the host's head being `head` (one entry always
    /// stays empty).
    pub(super) fn full(&self, head: u32) -> bool {
        (self.tail + 1) % self.entries == head % self.entries
    }

    /// Takes the entry at the tail: returns its address and the phase tag to write in it.
    pub(super) fn advance(&mut self) -> (u64, bool) {
        let addr = self.base + u64::from(self.tail) * 16;
        let phase = self.phase;
        self.tail += 1;
        if self.tail == self.entries {
            self.tail = 0;
            self.phase = !self.phase;
        }
        (addr, phase)
    }
}

impl Emu {
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

    /// Fetches the commands of SQ `qid` up to its doorbell, each with the fault a rule picks
    /// for it, and executes and completes them; stops when the controller is disabled, fatal
    /// or gone. Returns how many it fetched.
    pub(super) fn process_sq(&self, s: &mut State, qid: u16) -> usize {
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
            let post = |st: Status, dw0: u32| Post {
                sqid: qid,
                cid,
                st,
                dw0,
            };
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
                    s.hold(cqid, post(st, dw0), Some(Instant::now() + d));
                }
                Some(Fault::Drop) => {
                    s.stats.dropped += 1;
                    s.hold(cqid, post(Status::SUCCESS, 0), None);
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
    /// Writes a completion entry into host memory at `addr`, the phase tag last.
    pub(super) fn write_cqe(&self, addr: u64, cqe: &Cqe) {
        // SAFETY: Cqe is 16 bytes of plain integers.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(*cqe) };
        // The phase tag is in the last two bytes: write the body first, then the status word,
        // so a concurrent reader never sees a new phase with an old body.
        if self.write_mem(addr, &bytes[..14]) {
            std::sync::atomic::fence(Ordering::Release);
            self.write_mem(addr + 14, &bytes[14..]);
        }
    }

    /// Queues a completion on CQ `cqid` and posts what fits.
    pub(super) fn post(
        &mut self,
        cqid: u16,
        sqid: u16,
        cid: u16,
        st: Status,
        dw0: u32,
        db: &[AtomicU32],
    ) {
        let Some(cq) = self.cqs.get_mut(usize::from(cqid)).and_then(|c| c.as_mut()) else {
            return;
        };
        cq.backlog.push_back(Post { sqid, cid, st, dw0 });
        self.flush_cq(cqid, db);
    }

    /// Posts what fits of every CQ's backlog.
    fn flush_backlogs(&mut self, db: &[AtomicU32]) {
        for q in 0..self.cqs.len() {
            if self.cqs[q].as_ref().is_some_and(|c| !c.backlog.is_empty()) {
                self.flush_cq(q as u16, db);
            }
        }
    }

    /// Posts backlogged completions of CQ `cqid` while the ring has room.
    pub(super) fn flush_cq(&mut self, cqid: u16, db: &[AtomicU32]) {
        let head = db[2 * usize::from(cqid) + 1].load(Ordering::Acquire);
        loop {
            let Some(cq) = self.cqs.get_mut(usize::from(cqid)).and_then(|c| c.as_mut()) else {
                return;
            };
            if cq.full(head) {
                return;
            }
            let Some(p) = cq.backlog.pop_front() else {
                return;
            };
            let (addr, phase) = cq.advance();
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

    /// Keeps command `post` of CQ `cqid` from completing: until `due`, or (`None`) until it
    /// is aborted or the controller is reset.
    fn hold(&mut self, cqid: u16, post: Post, due: Option<Instant>) {
        self.held.push(Held { cqid, post, due });
    }

    /// Moves held completions whose delay is over to their CQ's backlog.
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
}
