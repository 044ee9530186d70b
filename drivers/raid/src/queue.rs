//! One reactor's queue of a RAID bdev: it owns a queue of every member on the same reactor
//! and forwards each request to the members that hold its blocks, under the same tag (each
//! member queue has its own request array), completing it in its own `poll` once every
//! member it went to has answered.
//!
//! - raid0 and concat: a request goes to the one member holding its strip; a flush to all.
//! - raid1: a write (write-zeroes, unmap, flush) goes to every operational member and
//!   succeeds when one copy does; a member whose I/O fails is failed out of the array for
//!   every reactor ([`Health`]), and the array goes on degraded. A read goes to the
//!   operational member with the fewest blocks outstanding on this queue (SPDK's raid1 rule)
//!   and, if it fails, is retried on another one before it fails.
//!
//! Nothing is allocated per I/O: every per-tag and per-member array is sized at open.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pmio::{DriverQueue, IoStatus, Op, OpSet, Request};

use crate::layout::{Layout, RaidLevel};

/// Which members of an array are operational, shared by every queue of the array.
#[derive(Debug)]
pub struct Health {
    failed: Vec<AtomicBool>,
}

impl Health {
    pub(crate) fn new(members: usize) -> Health {
        Health {
            failed: (0..members).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Whether member `i` still takes I/O.
    pub fn operational(&self, i: usize) -> bool {
        !self.failed[i].load(Ordering::Acquire)
    }

    /// Members still taking I/O.
    pub fn operational_count(&self) -> usize {
        (0..self.failed.len())
            .filter(|&i| self.operational(i))
            .count()
    }

    /// Fails member `i` out of the array; true if this call did it.
    pub(crate) fn fail(&self, i: usize) -> bool {
        !self.failed[i].swap(true, Ordering::AcqRel)
    }
}

/// A member's queue on this reactor and what goes through it.
struct Member {
    q: Box<dyn DriverQueue>,
    rqs: Vec<Request>,
    done: Vec<u16>,
    /// Tags to submit to it at the end of the current call.
    fwd: Vec<u16>,
    /// Blocks of reads outstanding on it (raid1's read balancing).
    read_blocks: u64,
}

/// Where one tag stands.
#[derive(Clone, Copy, Default)]
struct TagState {
    /// Members still to answer.
    pending: u8,
    /// Members that answered with success.
    ok: u8,
    /// Members a raid1 read has been tried on (a bit each).
    tried: u32,
    /// The first error an answer carried.
    error: Option<IoStatus>,
}

/// A RAID bdev's queue (see the module docs).
pub(crate) struct RaidQueue {
    layout: Arc<Layout>,
    health: Arc<Health>,
    name: Arc<str>,
    members: Vec<Member>,
    tags: Vec<TagState>,
    /// Finished requests to report at the next poll.
    finished: VecDeque<u16>,
    inflight: usize,
}

impl RaidQueue {
    pub(crate) fn new(
        name: Arc<str>,
        layout: Arc<Layout>,
        health: Arc<Health>,
        queues: Vec<Box<dyn DriverQueue>>,
        depth: u32,
    ) -> RaidQueue {
        let depth = depth as usize;
        let members = queues
            .into_iter()
            .map(|q| Member {
                q,
                rqs: vec![Request::default(); depth],
                done: Vec::with_capacity(depth),
                fwd: Vec::with_capacity(depth),
                read_blocks: 0,
            })
            .collect();
        RaidQueue {
            layout,
            health,
            name,
            members,
            tags: vec![TagState::default(); depth],
            finished: VecDeque::with_capacity(depth),
            inflight: 0,
        }
    }

    fn fits(&mut self, len: usize) {
        if self.tags.len() < len {
            self.tags.resize(len, TagState::default());
            for m in &mut self.members {
                m.rqs.resize(len, Request::default());
            }
        }
    }

    /// Puts request `rq` (tag `t`) on member `m`'s list at member block `lba`.
    fn stage(&mut self, m: usize, t: u16, rq: &Request, lba: u64) {
        let member = &mut self.members[m];
        let r = &mut member.rqs[t as usize];
        *r = *rq;
        r.lba = lba;
        r.status = IoStatus::Pending;
        if rq.op == Op::Read {
            member.read_blocks += u64::from(rq.nblocks);
        }
        member.fwd.push(t);
        self.tags[t as usize].pending += 1;
    }

    /// The operational raid1 member with the fewest read blocks outstanding, among those
    /// not in `tried`.
    fn pick_reader(&self, tried: u32) -> Option<usize> {
        (0..self.members.len())
            .filter(|&i| tried & (1 << i) == 0 && self.health.operational(i))
            .min_by_key(|&i| self.members[i].read_blocks)
    }

    /// Routes request `t` to its members; false if it finished at once (status set).
    fn route(&mut self, rqs: &mut [Request], t: u16) -> bool {
        let rq = rqs[t as usize];
        self.tags[t as usize] = TagState::default();
        let end = rq.lba.checked_add(u64::from(rq.nblocks));
        if rq.op != Op::Flush && end.is_none_or(|e| e > self.layout.num_blocks) {
            rqs[t as usize].status = IoStatus::Errno(libc::EINVAL);
            return false;
        }
        let all =
            rq.op == Op::Flush || (self.layout.level == RaidLevel::Raid1 && rq.op != Op::Read);
        if all {
            for m in 0..self.members.len() {
                if self.health.operational(m) {
                    self.stage(m, t, &rq, rq.lba);
                }
            }
        } else if self.layout.level == RaidLevel::Raid1 {
            if let Some(m) = self.pick_reader(0) {
                self.tags[t as usize].tried = 1 << m;
                self.stage(m, t, &rq, rq.lba);
            }
        } else {
            let (m, lba) = self.layout.locate(rq.lba);
            if self.health.operational(m) {
                self.stage(m, t, &rq, lba);
            }
        }
        if self.tags[t as usize].pending == 0 {
            // No member to send it to: the array has lost the data's only copy.
            rqs[t as usize].status = IoStatus::Errno(libc::EIO);
            return false;
        }
        true
    }

    fn kick(&mut self) {
        for m in &mut self.members {
            if !m.fwd.is_empty() {
                m.q.submit(&mut m.rqs, &m.fwd);
                m.fwd.clear();
            }
        }
    }

    /// Member `m` answered tag `t` with `status`; true when the request is finished.
    fn answer(&mut self, rqs: &mut [Request], m: usize, t: u16, status: IoStatus) -> bool {
        let rq = rqs[t as usize];
        if rq.op == Op::Read {
            let b = &mut self.members[m].read_blocks;
            *b = b.saturating_sub(u64::from(rq.nblocks));
        }
        let level = self.layout.level;
        let st = &mut self.tags[t as usize];
        st.pending -= 1;
        if status == IoStatus::Success {
            st.ok += 1;
        } else {
            st.error.get_or_insert(status);
            if level == RaidLevel::Raid1 && self.health.fail(m) {
                log::error!(
                    "raid bdev {}: member {m} failed an I/O ({status:?}) and leaves the array; {} of {} members remain",
                    self.name,
                    self.health.operational_count(),
                    self.members.len()
                );
            }
            if level == RaidLevel::Raid1 && rq.op == Op::Read {
                let tried = self.tags[t as usize].tried;
                if let Some(next) = self.pick_reader(tried) {
                    // The answer is the retry's.
                    self.tags[t as usize].error = None;
                    self.tags[t as usize].tried |= 1 << next;
                    self.stage(next, t, &rq, rq.lba);
                    return false;
                }
            }
        }
        let st = self.tags[t as usize];
        if st.pending > 0 {
            return false;
        }
        rqs[t as usize].status = match (level, st.error) {
            (_, None) => IoStatus::Success,
            // A mirror's write is good while one copy is.
            (RaidLevel::Raid1, Some(_)) if st.ok > 0 && rq.op != Op::Read => IoStatus::Success,
            (_, Some(e)) => e,
        };
        true
    }
}

impl DriverQueue for RaidQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.fits(rqs.len());
        for &t in tags {
            if self.route(rqs, t) {
                self.inflight += 1;
            } else {
                self.finished.push_back(t);
            }
        }
        self.kick();
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        for m in 0..self.members.len() {
            if self.members[m].q.outstanding() == 0 {
                continue;
            }
            let mut reaped = std::mem::take(&mut self.members[m].done);
            let member = &mut self.members[m];
            let cap = member.rqs.len();
            member.q.poll(&mut member.rqs, &mut reaped, cap);
            for &t in &reaped {
                let status = self.members[m].rqs[t as usize].status;
                if self.answer(rqs, m, t, status) {
                    self.inflight -= 1;
                    self.finished.push_back(t);
                }
            }
            reaped.clear();
            self.members[m].done = reaped;
        }
        // Reads retried on another member go out now.
        self.kick();
        let n = self.finished.len().min(max);
        done.extend(self.finished.drain(..n));
        n
    }

    fn outstanding(&self) -> usize {
        self.inflight + self.finished.len()
    }
}

/// The operations every member supports (and so the array does).
pub(crate) fn common_ops(ops: impl Iterator<Item = OpSet>) -> OpSet {
    ops.fold(OpSet::ALL, |acc, o| {
        [Op::Read, Op::Write, Op::Flush, Op::Discard, Op::WriteZeroes]
            .into_iter()
            .filter(|&op| acc.contains(op) && o.contains(op))
            .fold(OpSet::EMPTY, OpSet::with)
    })
}
