//! I/O schedulers: `none` (pass-through) and `mq-deadline`.
//!
//! A scheduler sees small `Copy` descriptors ([`SchedRq`]) named by their **scheduler tag**
//! (`id`), never the requests themselves, so it knows nothing of buffers or drivers. One
//! [`Scheduler`] is chosen per device; each reactor that opens the device gets a
//! [`SchedQueue`] from it and drives it in batches:
//!
//! 1. on submit: [`SchedQueue::insert_batch`] (a burst of requests, one lock acquisition);
//! 2. on flush / poll: [`SchedQueue::dispatch_batch`] with as many entries as it has free
//!    driver tags, then submits what it got;
//!    [`SchedQueue::requeue_batch`] gives back what the driver could not take;
//! 3. on reap: [`SchedQueue::complete_batch`], which reports every member of a merged request
//!    exactly once (lock-free for mq-deadline).
//!
//! The block layer's scheduler path also uses a crate-private bypass,
//! `SharedDeadline::insert_dispatch_counted`: a burst it has vetted (one class, no HEAD,
//! nothing adjacent) is counted as inserted and dispatched in one locked step when
//! mq-deadline would hand it out whole anyway (nothing waiting, no higher class busy), and
//! completed by count (`SharedDeadline::complete_counted`), without per-request state.
//!
//! ```
//! use pmio::sched::{DeadlineOptions, SchedKind, SchedRq, Scheduler};
//! use pmio::{IoStatus, Op, PrioClass, ReqFlags};
//!
//! let sched = Scheduler::new(SchedKind::parse("mq-deadline").unwrap(), DeadlineOptions::default())
//!     .unwrap();
//! let mut q = sched.queue(0);
//! let rq = SchedRq { id: 7, owner: 0, op: Op::Read, prio: PrioClass::Be, flags: ReqFlags::NONE,
//!                    sector: 0, nblocks: 8, addr: 0 };
//! q.insert_batch(&[rq], 1_000).unwrap();
//! let mut out = Vec::with_capacity(32);
//! assert_eq!(q.dispatch_batch(2_000, 32, &mut out), 1);
//! let mut done = Vec::new();
//! q.complete_batch([(out[0].id, IoStatus::Success)], |id, st| done.push((id, st))).unwrap();
//! assert_eq!(done, [(7, IoStatus::Success)]);
//! ```
//!
//! Files: `mod.rs` (this file: descriptors, errors, the per-device [`Scheduler`] and
//! per-reactor [`SchedQueue`]), `passthrough.rs` (`none`), `deadline.rs` with `deadline/`
//! (mq-deadline itself, single-threaded; its own map opens [`deadline`]), `shared.rs`
//! (mq-deadline behind one lock, shared by reactors), `sorttree.rs` (its sector-sorted sets).

pub mod deadline;
mod passthrough;
mod shared;
mod sorttree;

use std::sync::Arc;

use crate::request::{IoStatus, Op, PrioClass, ReqFlags, Request};

pub use deadline::{
    Deadline, DeadlineOptions, Inserted, Members, PrioStats, TUNABLES, default_nr_requests,
};
pub use passthrough::PassThrough;
pub use shared::{InsertSummary, SharedDeadline};

/// Data direction as schedulers see it: writes are everything that is not a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dir {
    /// Reads.
    Read = 0,
    /// Everything that is not a read.
    Write = 1,
}

impl Dir {
    /// The direction of an operation (flush, discard and write-zeroes count as writes).
    #[inline]
    pub fn of(op: Op) -> Dir {
        if op.is_read() { Dir::Read } else { Dir::Write }
    }
}

/// A request as a scheduler sees it: a small copyable descriptor named by scheduler tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedRq {
    /// Scheduler tag (`0..nr_requests`); names the request until it completes.
    pub id: u32,
    /// Queue (reactor) that submitted it and will drive it to the device.
    pub owner: u16,
    /// Operation; reads are one direction, everything else the other.
    pub op: Op,
    /// Priority class (Linux's ioprio class; NONE maps to BE).
    pub prio: PrioClass,
    /// `ReqFlags::HEAD` puts it on the dispatch list; FUA requests are never merged.
    pub flags: ReqFlags,
    /// First logical block.
    pub sector: u64,
    /// Length in logical blocks.
    pub nblocks: u32,
    /// Buffer address (0 if none or unknown); requests merge into one segment only when their
    /// buffers are contiguous.
    pub addr: u64,
}

impl SchedRq {
    /// The descriptor of a prepared request, named `id` (its scheduler tag, made unique
    /// across owners) and submitted by `owner`.
    #[inline]
    pub fn from_request(id: u32, owner: u16, rq: &Request) -> SchedRq {
        SchedRq {
            id,
            owner,
            op: rq.op,
            prio: rq.prio.class,
            flags: rq.flags,
            sector: rq.lba,
            nblocks: rq.nblocks,
            addr: if rq.buf.is_empty() {
                0
            } else {
                rq.buf.as_ptr() as u64
            },
        }
    }
}

/// A request handed out by a scheduler: possibly several merged requests, named by its
/// carrier `id`. `sector`, `nblocks` and `addr` describe the merged I/O; the members (in
/// sector order, the carrier included) are listed by [`SharedDeadline::members`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// The carrier's id: what the driver runs and what `complete_batch` is given back.
    pub id: u32,
    /// Queue that submitted it (every member has the same owner).
    pub owner: u16,
    /// Operation (the same for every member).
    pub op: Op,
    /// Priority class (the same for every member).
    pub prio: PrioClass,
    /// Flags (the same for every member, up to `SYNC`).
    pub flags: ReqFlags,
    /// First logical block of the merged I/O.
    pub sector: u64,
    /// Length of the merged I/O in logical blocks.
    pub nblocks: u32,
    /// First member's buffer address (with `nsegs == 1`, the whole I/O's buffer).
    pub addr: u64,
    /// Buffer segments of the merged I/O.
    pub nsegs: u32,
    /// Requests merged into this one, itself included (1 when not merged).
    pub nr_members: u32,
}

/// Scheduler errors. Most are caller bugs reported instead of panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    #[error("unknown I/O scheduler {0:?} (expected \"none\" or \"mq-deadline\")")]
    UnknownScheduler(String),
    #[error("unknown mq-deadline parameter {0:?}")]
    UnknownParam(String),
    #[error("mq-deadline option {name}: {reason}")]
    InvalidOption { name: &'static str, reason: String },
    #[error("request id {id} is outside the scheduler's tags")]
    BadId { id: u32 },
    #[error("request id {id} is already in the scheduler or in flight")]
    Busy { id: u32 },
    #[error("request id {id} is not a request in flight")]
    NotInFlight { id: u32 },
    #[error("request id {id}: sector {sector} is beyond the scheduler's range (2^48)")]
    SectorRange { id: u32, sector: u64 },
    #[error("owner {owner} is outside the scheduler's {owners} owners")]
    BadOwner { owner: u16, owners: u16 },
    #[error("{queued} {} requests still queued or in flight at teardown", prio.name())]
    NotIdle { prio: PrioClass, queued: u64 },
}

/// Which scheduler a device uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SchedKind {
    /// Pass-through: batches go straight to the driver.
    #[default]
    None,
    /// mq-deadline.
    MqDeadline,
}

impl SchedKind {
    /// Parses `none` or `mq-deadline` (as Linux's `queue/scheduler`).
    pub fn parse(name: &str) -> Result<SchedKind, SchedError> {
        match name.trim() {
            "none" => Ok(SchedKind::None),
            "mq-deadline" => Ok(SchedKind::MqDeadline),
            other => Err(SchedError::UnknownScheduler(other.to_string())),
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            SchedKind::None => "none",
            SchedKind::MqDeadline => "mq-deadline",
        }
    }
}

impl std::str::FromStr for SchedKind {
    type Err = SchedError;

    fn from_str(s: &str) -> Result<SchedKind, SchedError> {
        SchedKind::parse(s)
    }
}

/// The scheduler of one device, shared by every reactor that opens it.
#[derive(Clone, Debug)]
pub enum Scheduler {
    /// No scheduler.
    None,
    /// One mq-deadline instance for the device.
    MqDeadline(Arc<SharedDeadline>),
}

impl Scheduler {
    /// Creates a scheduler; `opts` is used (and validated) only for mq-deadline.
    pub fn new(kind: SchedKind, opts: DeadlineOptions) -> Result<Scheduler, SchedError> {
        Ok(match kind {
            SchedKind::None => Scheduler::None,
            SchedKind::MqDeadline => Scheduler::MqDeadline(Arc::new(SharedDeadline::new(opts)?)),
        })
    }

    /// Creates a scheduler by name (`none`, `mq-deadline`).
    pub fn from_name(name: &str, opts: DeadlineOptions) -> Result<Scheduler, SchedError> {
        Scheduler::new(SchedKind::parse(name)?, opts)
    }

    /// Which scheduler this is.
    pub fn kind(&self) -> SchedKind {
        match self {
            Scheduler::None => SchedKind::None,
            Scheduler::MqDeadline(_) => SchedKind::MqDeadline,
        }
    }

    /// Its name (`none`, `mq-deadline`).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Scheduler tags to allocate requests from (`None`: use driver tags directly).
    pub fn nr_requests(&self) -> Option<u32> {
        match self {
            Scheduler::None => None,
            Scheduler::MqDeadline(dd) => Some(dd.nr_requests()),
        }
    }

    /// Shallow tag depth for a request (`None`: no limit, batching allowed).
    #[inline]
    pub fn limit_depth(&self, op: Op, flags: ReqFlags) -> Option<u32> {
        match self {
            Scheduler::None => None,
            Scheduler::MqDeadline(dd) => dd.limit_depth(op, flags),
        }
    }

    /// The per-reactor handle for queue `owner` (`0..owners` of the options).
    pub fn queue(&self, owner: u16) -> SchedQueue {
        match self {
            Scheduler::None => SchedQueue::None(PassThrough::new(MAX_PASSTHROUGH)),
            Scheduler::MqDeadline(dd) => SchedQueue::MqDeadline {
                dd: Arc::clone(dd),
                owner,
            },
        }
    }

    /// Checks nothing is queued or in flight (mq-deadline); always Ok for `none`.
    pub fn teardown_check(&self) -> Result<(), SchedError> {
        match self {
            Scheduler::None => Ok(()),
            Scheduler::MqDeadline(dd) => dd.teardown_check(),
        }
    }
}

/// Capacity of a pass-through queue (at most this many requests inserted and not dispatched).
const MAX_PASSTHROUGH: usize = deadline::MAX_NR_REQUESTS as usize;

/// One reactor's handle on its device's scheduler. Not shared: each reactor owns its own.
#[derive(Debug)]
pub enum SchedQueue {
    /// Pass-through: dispatch returns what was inserted, in order.
    None(PassThrough),
    /// The device's shared mq-deadline, seen as owner `owner`.
    MqDeadline { dd: Arc<SharedDeadline>, owner: u16 },
}

impl SchedQueue {
    /// Inserts a burst at time `now_ns`. Each request's `owner` must be this queue's.
    #[inline]
    pub fn insert_batch(
        &mut self,
        rqs: &[SchedRq],
        now_ns: u64,
    ) -> Result<InsertSummary, SchedError> {
        match self {
            SchedQueue::None(pt) => pt.insert_batch(rqs),
            SchedQueue::MqDeadline { dd, .. } => dd.insert_batch(rqs, now_ns),
        }
    }

    /// Inserts a burst and takes up to `max` requests for the driver, in one lock acquisition
    /// for mq-deadline. Returns what the insert did and how many were pushed into `out`.
    #[inline]
    pub fn insert_dispatch_batch(
        &mut self,
        rqs: &[SchedRq],
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> Result<(InsertSummary, usize), SchedError> {
        match self {
            SchedQueue::None(pt) => {
                let sum = pt.insert_batch(rqs)?;
                Ok((sum, pt.dispatch_batch(max, out)))
            }
            SchedQueue::MqDeadline { dd, owner } => {
                dd.insert_dispatch_batch(rqs, *owner, now_ns, max, out)
            }
        }
    }

    /// Takes up to `max` requests to submit to the driver (push into `out`, which should have
    /// room for `max`). Returns how many.
    #[inline]
    pub fn dispatch_batch(&mut self, now_ns: u64, max: usize, out: &mut Vec<Dispatched>) -> usize {
        match self {
            SchedQueue::None(pt) => pt.dispatch_batch(max, out),
            SchedQueue::MqDeadline { dd, owner } => dd.dispatch_batch(*owner, now_ns, max, out),
        }
    }

    /// Gives back dispatched requests the driver could not take; they go out first next time,
    /// in the order given.
    #[inline]
    pub fn requeue_batch(&mut self, rqs: &[Dispatched]) -> Result<(), SchedError> {
        match self {
            SchedQueue::None(pt) => pt.requeue_batch(rqs),
            SchedQueue::MqDeadline { dd, .. } => dd.requeue_batch(rqs.iter().map(|d| d.id)),
        }
    }

    /// Completes dispatched requests: `f(member, status)` once per member request.
    #[inline]
    pub fn complete_batch<I, F>(&mut self, done: I, f: F) -> Result<usize, SchedError>
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        match self {
            SchedQueue::None(pt) => Ok(pt.complete_batch(done, f)),
            SchedQueue::MqDeadline { dd, .. } => dd.complete_batch(done, f),
        }
    }

    /// Whether a `dispatch_batch` may return something (lock-free hint for mq-deadline).
    #[inline]
    pub fn has_work(&self) -> bool {
        match self {
            SchedQueue::None(pt) => pt.pending() != 0,
            SchedQueue::MqDeadline { dd, .. } => dd.has_pending(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        assert_eq!(SchedKind::parse("none"), Ok(SchedKind::None));
        assert_eq!(SchedKind::parse("mq-deadline"), Ok(SchedKind::MqDeadline));
        assert_eq!(
            "mq-deadline".parse::<SchedKind>(),
            Ok(SchedKind::MqDeadline)
        );
        assert!(matches!(
            SchedKind::parse("bfq"),
            Err(SchedError::UnknownScheduler(s)) if s == "bfq"
        ));
        let s = Scheduler::from_name("mq-deadline", DeadlineOptions::default()).unwrap();
        assert_eq!(s.name(), "mq-deadline");
        assert_eq!(s.nr_requests(), Some(256));
        assert_eq!(
            Scheduler::from_name("none", DeadlineOptions::default())
                .unwrap()
                .name(),
            "none"
        );
    }

    #[test]
    fn descriptor_from_request_and_per_owner_ids() {
        let mut buf = vec![0u8; 4096];
        let mut rq = Request::default();
        // SAFETY: `buf` outlives the request, which is never submitted.
        let b = unsafe { crate::IoBuf::from_raw_parts(buf.as_mut_ptr(), 4096) };
        let io = crate::Io {
            op: Op::Write,
            lba: 77,
            nblocks: 8,
            buf: b,
            prio: crate::IoPrio {
                class: PrioClass::Rt,
                level: 0,
            },
            flags: ReqFlags::FUA,
            token: 5,
        };
        rq.prepare(&io, 1);
        let d = SchedRq::from_request(300, 1, &rq);
        assert_eq!(
            (d.id, d.owner, d.op, d.prio, d.flags, d.sector, d.nblocks),
            (300, 1, Op::Write, PrioClass::Rt, ReqFlags::FUA, 77, 8)
        );
        assert_eq!(d.addr, buf.as_ptr() as u64);
        let o = DeadlineOptions::for_queues(128, 2, 256, 4096);
        assert_eq!((o.nr_requests, o.owners, o.per_owner()), (512, 2, 256));
        o.validate().unwrap();
    }

    #[test]
    fn limit_depth_spares_sync_reads() {
        let opts = DeadlineOptions {
            nr_requests: 64,
            async_depth: 48,
            ..DeadlineOptions::default()
        };
        let s = Scheduler::new(SchedKind::MqDeadline, opts).unwrap();
        assert_eq!(s.limit_depth(Op::Read, ReqFlags::NONE), None);
        assert_eq!(s.limit_depth(Op::Write, ReqFlags::NONE), Some(48));
        assert_eq!(s.limit_depth(Op::Discard, ReqFlags::NONE), Some(48));
        assert_eq!(s.limit_depth(Op::Write, ReqFlags::FUA), None);
        assert_eq!(s.limit_depth(Op::Flush, ReqFlags::NONE), None);
        if let Scheduler::MqDeadline(dd) = &s {
            dd.set_param("async_depth", 16).unwrap();
            assert_eq!(s.limit_depth(Op::Write, ReqFlags::NONE), Some(16));
            assert!(dd.set_param("async_depth", 65).is_err());
        }
        assert_eq!(Scheduler::None.limit_depth(Op::Write, ReqFlags::NONE), None);
        // Default async_depth is nr_requests: a limit that refuses batching but not depth.
        let d = Scheduler::new(SchedKind::MqDeadline, DeadlineOptions::default()).unwrap();
        assert_eq!(d.limit_depth(Op::Write, ReqFlags::NONE), Some(256));
    }

    #[test]
    fn insert_dispatch_in_one_call() {
        for kind in [SchedKind::None, SchedKind::MqDeadline] {
            let s = Scheduler::new(kind, DeadlineOptions::default()).unwrap();
            let mut q = s.queue(0);
            let rqs: Vec<SchedRq> = (0..8)
                .map(|i| SchedRq {
                    id: i,
                    owner: 0,
                    op: Op::Read,
                    prio: PrioClass::Be,
                    flags: ReqFlags::NONE,
                    sector: u64::from(i) * 64,
                    nblocks: 8,
                    addr: 0,
                })
                .collect();
            let mut out = Vec::with_capacity(8);
            let (sum, n) = q.insert_dispatch_batch(&rqs, 0, 5, &mut out).unwrap();
            assert_eq!((sum.queued, n), (8, 5), "{}", kind.name());
            assert_eq!(q.dispatch_batch(0, 8, &mut out), 3);
            let mut seen = 0;
            q.complete_batch(out.iter().map(|d| (d.id, IoStatus::Success)), |_, _| {
                seen += 1
            })
            .unwrap();
            assert_eq!(seen, 8);
            s.teardown_check().unwrap();
        }
    }

    #[test]
    fn passthrough_queue_round_trip() {
        let mut q = Scheduler::None.queue(0);
        let rqs: Vec<SchedRq> = (0..4)
            .map(|i| SchedRq {
                id: i,
                owner: 0,
                op: Op::Write,
                prio: PrioClass::Idle,
                flags: ReqFlags::NONE,
                sector: u64::from(i) * 8,
                nblocks: 8,
                addr: 0,
            })
            .collect();
        q.insert_batch(&rqs, 0).unwrap();
        assert!(q.has_work());
        let mut out = Vec::with_capacity(8);
        assert_eq!(q.dispatch_batch(0, 3, &mut out), 3);
        let back = [out[1], out[2]];
        q.requeue_batch(&back).unwrap();
        out.truncate(1);
        assert_eq!(q.dispatch_batch(0, 8, &mut out), 3);
        let ids: Vec<u32> = out.iter().map(|d| d.id).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        let mut seen = Vec::new();
        let n = q
            .complete_batch(ids.iter().map(|&i| (i, IoStatus::Success)), |i, _| {
                seen.push(i)
            })
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(seen, ids);
        assert!(!q.has_work());
    }
}
