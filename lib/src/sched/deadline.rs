//! mq-deadline: per-priority deadline scheduling with O(1) accounting.
//!
//! A mirror of Linux's `block/mq-deadline.c`. Per priority class (RT, BE, IDLE) and direction
//! (read; write = everything that is not a read) there is a sector-sorted tree and a FIFO whose
//! entries carry a deadline; head insertions and requeues go to a dispatch list that is served
//! before everything else.
//!
//! Dispatch (`dd_dispatch_request`): the dispatch list first; then, only when two or more
//! classes have requests queued, the aging pass (a BE or IDLE request inserted more than
//! `prio_aging_expire` ago goes first); then RT → BE → IDLE, where a lower class waits while a
//! higher one has requests queued or in flight. Within a class a sequential batch continues
//! up to `fifo_batch` requests; otherwise a direction is chosen (reads, unless writes have been
//! passed over `writes_starved` times) and the FIFO head is taken if its deadline has passed,
//! else the next request by sector.
//!
//! The per-class counters `inserted`, `merged` and `dispatched` are plain integers owned by
//! whoever holds the scheduler (its lock, in [`super::SharedDeadline`]); `completed` is an
//! atomic updated without that lock, plus the completions of counted bursts that a reactor
//! held back while it still had requests of that class in flight and then reported under
//! the lock it took anyway ([`Deadline::insert_dispatch_counted`]). "Queued at this priority" is
//! `inserted − completed`: three loads, never a sum over cores (the 2021 regression that cost
//! Linux two thirds of its IOPS).
//!
//! Time is injected (`now_ns`); nothing here reads a clock or sleeps, so every behaviour is
//! deterministic and testable.
//!
//! Deviation from Linux, on purpose: choosing a request is side-effect free until a request is
//! actually taken, so an aging pass that finds nothing old enough does not disturb the batch
//! state (`last_dir`, `batching`, `starved`) of the normal pass.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::request::{IoStatus, Op, PrioClass, ReqFlags};

use super::sorttree::{MAX_SECTOR, Probe, Tree};
use super::{Dir, Dispatched, SchedError, SchedRq};

/// "No request" in the index links of the slab.
const NIL: u32 = u32::MAX;

/// Number of priority classes.
const NR_PRIO: usize = 3;

/// Largest number of scheduler tags over all owners: ids must fit 16 bits (the sort sets
/// pack them with the sector). A sort set shifts up to as many keys as it holds on insert and
/// remove, so very deep configurations pay a longer `memmove` (8 bytes per queued request of
/// the same class and direction).
pub const MAX_NR_REQUESTS: u32 = 1 << 16;

/// Linux's `BLKDEV_DEFAULT_RQ`.
const BLKDEV_DEFAULT_RQ: u32 = 128;

/// Default number of scheduler tags for a device queue of `queue_depth` entries:
/// `2 × min(queue_depth, 128)` (Linux's `blk_mq_default_nr_requests`).
pub fn default_nr_requests(queue_depth: u32) -> u32 {
    2 * queue_depth.clamp(1, BLKDEV_DEFAULT_RQ)
}

/// Tunables and device limits of an mq-deadline instance. Defaults are Linux's.
///
/// Times are in milliseconds, as in Linux's `queue/iosched/` sysfs files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineOptions {
    /// Deadline of a read after insertion (default 500 ms).
    pub read_expire_ms: u64,
    /// Deadline of a write after insertion (default 5000 ms).
    pub write_expire_ms: u64,
    /// How many times reads may be preferred over waiting writes (default 2).
    pub writes_starved: u32,
    /// Whether a request may be merged in front of a queued one (default true).
    pub front_merges: bool,
    /// Longest sequential batch dispatched in one direction (default 16).
    pub fifo_batch: u32,
    /// A BE or IDLE request waiting longer than this is dispatched ahead of higher classes
    /// (default 10000 ms; 0 is rejected: it would let BE and IDLE overtake RT).
    pub prio_aging_expire_ms: u64,
    /// Shallow tag depth for everything that is not a synchronous read (0 = `nr_requests`,
    /// Linux's current default).
    pub async_depth: u32,
    /// Scheduler tags: request ids are `0..nr_requests` (default `2 × min(QD, 128)` = 256).
    pub nr_requests: u32,
    /// Queues (reactors) that may insert and dispatch: owners are `0..owners` (default 64).
    pub owners: u16,
    /// Device limit: largest request, in blocks (default unlimited).
    pub max_transfer_blocks: u32,
    /// Device limit: no request crosses a multiple of this many blocks (default 0: none), as
    /// the block layer's split leaves none across the device's boundary.
    pub boundary_blocks: u32,
    /// Device limit: buffer segments per request (default 1: a pmio request carries one
    /// buffer, so only requests whose buffers are contiguous in memory merge).
    pub max_segments: u32,
    /// Device logical block size in bytes (to tell contiguous buffers; default 512).
    pub block_size: u32,
}

impl Default for DeadlineOptions {
    fn default() -> Self {
        DeadlineOptions {
            read_expire_ms: 500,
            write_expire_ms: 5000,
            writes_starved: 2,
            front_merges: true,
            fifo_batch: 16,
            prio_aging_expire_ms: 10_000,
            async_depth: 0,
            nr_requests: default_nr_requests(BLKDEV_DEFAULT_RQ),
            owners: 64,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
            max_segments: 1,
            block_size: 512,
        }
    }
}

impl DeadlineOptions {
    /// Defaults for a device with the given queue depth, transfer limit and block size.
    pub fn for_device(queue_depth: u32, max_transfer_blocks: u32, block_size: u32) -> Self {
        DeadlineOptions {
            nr_requests: default_nr_requests(queue_depth),
            max_transfer_blocks,
            block_size,
            ..DeadlineOptions::default()
        }
    }

    /// Defaults for a device opened by `owners` reactors, each with its own hardware queue of
    /// `queue_depth` entries: each owner gets `default_nr_requests(queue_depth)` scheduler
    /// tags of its own (Linux's per-hctx `sched_tags`), and owner `o`'s request ids are
    /// `o × per_owner + tag` (see [`DeadlineOptions::per_owner`]).
    pub fn for_queues(
        queue_depth: u32,
        owners: u16,
        max_transfer_blocks: u32,
        block_size: u32,
    ) -> Self {
        DeadlineOptions {
            nr_requests: default_nr_requests(queue_depth) * u32::from(owners.max(1)),
            owners: owners.max(1),
            max_transfer_blocks,
            block_size,
            ..DeadlineOptions::default()
        }
    }

    /// Scheduler tags per owner when ids are split evenly (`nr_requests / owners`): owner
    /// `o` uses ids `o × per_owner .. (o + 1) × per_owner`.
    pub fn per_owner(&self) -> u32 {
        self.nr_requests / u32::from(self.owners.max(1))
    }

    /// Checks every field; called once at construction so the hot path never re-checks.
    pub fn validate(&self) -> Result<(), SchedError> {
        let bad =
            |name: &'static str, reason: String| Err(SchedError::InvalidOption { name, reason });
        if self.prio_aging_expire_ms == 0 {
            return bad("prio_aging_expire", "must be greater than 0".into());
        }
        // Keep ms → ns conversions far from overflow (about 584 years in u64 ns).
        for (name, v) in [
            ("read_expire", self.read_expire_ms),
            ("write_expire", self.write_expire_ms),
            ("prio_aging_expire", self.prio_aging_expire_ms),
        ] {
            if v > MAX_TIME_MS {
                return bad(name, format!("{v} ms exceeds {MAX_TIME_MS} ms"));
            }
        }
        if self.nr_requests == 0 || self.nr_requests > MAX_NR_REQUESTS {
            return bad(
                "nr_requests",
                format!("{} not in 1..={MAX_NR_REQUESTS}", self.nr_requests),
            );
        }
        if self.async_depth > self.nr_requests {
            return bad(
                "async_depth",
                format!(
                    "{} exceeds nr_requests {}",
                    self.async_depth, self.nr_requests
                ),
            );
        }
        if self.owners == 0 {
            return bad("owners", "must be at least 1".into());
        }
        if self.max_transfer_blocks == 0 {
            return bad("max_transfer_blocks", "must be at least 1".into());
        }
        if self.max_segments == 0 {
            return bad("max_segments", "must be at least 1".into());
        }
        if self.block_size == 0 || !self.block_size.is_power_of_two() {
            return bad(
                "block_size",
                format!("{} is not a power of two", self.block_size),
            );
        }
        Ok(())
    }

    /// The effective shallow depth for asynchronous requests.
    pub fn effective_async_depth(&self) -> u32 {
        if self.async_depth == 0 {
            self.nr_requests
        } else {
            self.async_depth
        }
    }
}

/// Largest time tunable accepted, in ms (one year).
const MAX_TIME_MS: u64 = 365 * 24 * 3600 * 1000;

/// Names of the runtime tunables, as Linux's sysfs files.
pub const TUNABLES: [&str; 7] = [
    "read_expire",
    "write_expire",
    "writes_starved",
    "front_merges",
    "fifo_batch",
    "prio_aging_expire",
    "async_depth",
];

/// Snapshot of one priority class's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrioStats {
    /// Requests inserted (a requeued request is counted once).
    pub inserted: u64,
    /// Requests merged into another request.
    pub merged: u64,
    /// Requests taken out of the scheduler (merged members are not counted; a requeued
    /// request is counted once).
    pub dispatched: u64,
    /// Requests completed (every merged member counts).
    pub completed: u64,
    /// `inserted − completed`: in the scheduler or in flight.
    pub queued: u64,
}

/// Asserts that every class has drained: everything inserted was dispatched and completed,
/// and nothing is queued (tests of the scheduler and of the block layer over it).
#[cfg(test)]
pub(crate) fn assert_drained(stats: impl Fn(PrioClass) -> PrioStats) {
    for p in PrioClass::ALL {
        let s = stats(p);
        assert_eq!(
            (s.inserted, s.completed, s.queued),
            (s.dispatched, s.dispatched, 0),
            "{p:?}"
        );
    }
}

/// Per-class "limit the tag depth" answer for the tag layer (`dd_limit_depth`): the shallow
/// depth for everything that is not a synchronous read, `None` (no limit, batching allowed)
/// for reads and for flush/FUA requests, which Linux never limits.
pub fn limit_depth_for(op: Op, flags: ReqFlags, async_depth: u32) -> Option<u32> {
    if op == Op::Read || op == Op::Flush || flags.contains(ReqFlags::FUA) {
        None
    } else {
        Some(async_depth)
    }
}

// ------------------------------------------------------------------------------------------
// The part updated without the scheduler's lock: completion.

/// Meta word of a request in flight: bit 31 set, class in the low bits.
const INFLIGHT: u32 = 1 << 31;
/// Meta bit of a merged member (completed through its carrier, never on its own).
const MEMBER: u32 = 1 << 30;

/// Per-id links readable without the lock. `next` chains the members of a merged request in
/// sector order (written under the lock while the requests are queued, read at completion);
/// `head` is a carrier's first member; `meta` is `INFLIGHT | class` while handed out.
#[derive(Debug)]
struct Link {
    next: AtomicU32,
    head: AtomicU32,
    meta: AtomicU32,
}

/// One counter per cache line, so completers of different classes do not share a line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct PaddedCounter(AtomicU64);

/// Completion state shared by a scheduler and whoever completes its requests.
///
/// Invariant: a request's links are changed only under the scheduler's lock while it is
/// queued, and read here only after it was handed out (the hand-out synchronises).
#[derive(Debug)]
pub(crate) struct CompletionSide {
    completed: [PaddedCounter; NR_PRIO],
    links: Box<[Link]>,
}

impl CompletionSide {
    fn new(nr: u32) -> CompletionSide {
        let links = (0..nr)
            .map(|_| Link {
                next: AtomicU32::new(NIL),
                head: AtomicU32::new(NIL),
                meta: AtomicU32::new(0),
            })
            .collect();
        CompletionSide {
            completed: Default::default(),
            links,
        }
    }

    #[inline]
    fn completed(&self, prio: PrioClass) -> u64 {
        self.completed[prio as usize].0.load(Ordering::Relaxed)
    }

    #[inline]
    fn in_flight(&self, id: u32) -> bool {
        self.links[id as usize].meta.load(Ordering::Acquire) & INFLIGHT != 0
    }

    /// Members of a handed-out carrier, in sector order (the carrier included).
    pub(crate) fn members(&self, carrier: u32) -> Members<'_> {
        let next = match self.links.get(carrier as usize) {
            Some(l) => l.head.load(Ordering::Relaxed),
            None => NIL,
        };
        Members {
            links: &self.links,
            next,
            left: self.links.len(),
        }
    }

    /// Completes `counts[class]` requests of each class that were handed out without
    /// per-request state (`Deadline::insert_dispatch_counted`).
    #[inline]
    pub(crate) fn complete_counted(&self, counts: [u64; NR_PRIO]) {
        for (c, n) in self.completed.iter().zip(counts) {
            if n != 0 {
                c.0.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Completes handed-out carriers: `f(member, status)` once per member, then one atomic
    /// add per class for the whole batch. Ids that are not in flight are rejected (logged)
    /// and the rest still complete.
    pub(crate) fn complete_batch<I, F>(&self, done: I, mut f: F) -> Result<usize, SchedError>
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        let mut per_prio = [0u64; NR_PRIO];
        let mut total = 0;
        let mut first_err = None;
        for (id, status) in done {
            let Some(link) = self.links.get(id as usize) else {
                log::error!("mq-deadline: completion of unknown request id {id}");
                first_err.get_or_insert(SchedError::BadId { id });
                continue;
            };
            // Load and store, not a read-modify-write: the completer owns the request, so no
            // one else writes its meta; a second completion of the same request (a caller bug)
            // is still caught unless two threads race on it.
            let meta = link.meta.load(Ordering::Acquire);
            let owned = meta & (INFLIGHT | MEMBER) == INFLIGHT;
            if owned {
                link.meta.store(0, Ordering::Relaxed);
            } else {
                log::error!(
                    "mq-deadline: completion of request {id}, which is not a request in flight"
                );
                first_err.get_or_insert(SchedError::NotInFlight { id });
                continue;
            }
            let prio = (meta & 0x3) as usize;
            let mut m = link.head.load(Ordering::Relaxed);
            let mut left = self.links.len();
            while m != NIL && left > 0 {
                if m != id {
                    self.links[m as usize].meta.store(0, Ordering::Release);
                }
                f(m, status);
                per_prio[prio] += 1;
                total += 1;
                m = self.links[m as usize].next.load(Ordering::Relaxed);
                left -= 1;
            }
        }
        for (c, n) in self.completed.iter().zip(per_prio) {
            if n != 0 {
                c.0.fetch_add(n, Ordering::Relaxed);
            }
        }
        match first_err {
            None => Ok(total),
            Some(e) => Err(e),
        }
    }
}

/// Iterator over the members of a merged request, in sector order.
#[derive(Debug)]
pub struct Members<'a> {
    links: &'a [Link],
    next: u32,
    left: usize,
}

impl Iterator for Members<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.next == NIL || self.left == 0 {
            return None;
        }
        let id = self.next;
        self.next = self.links[id as usize].next.load(Ordering::Relaxed);
        self.left -= 1;
        Some(id)
    }
}

// ------------------------------------------------------------------------------------------
// The part under the lock.

/// Where a request id currently is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Never inserted, or handed out (in flight or completed): may be inserted.
    Out,
    /// In its class's sort tree and FIFO.
    Queued,
    /// In the dispatch list (head insertion or requeue).
    Head,
    /// Merged into another request that is still in the scheduler.
    Member,
    /// Taken out of the scheduler for another owner; waits in that owner's ready list.
    Ready,
}

/// Slab entry, indexed by scheduler tag. Carrier fields describe the merged request.
#[derive(Clone, Copy, Debug)]
struct Slot {
    state: State,
    owner: u16,
    op: Op,
    prio: PrioClass,
    flags: ReqFlags,
    /// Whether it was already counted as dispatched (requeues count once).
    started: bool,
    sector: u64,
    nblocks: u32,
    nsegs: u32,
    /// First member's buffer address (0: unknown / none).
    addr: u64,
    /// End of the last member's buffer (0: unknown / none).
    end_addr: u64,
    insert_ns: u64,
    deadline_ns: u64,
    fifo_prev: u32,
    fifo_next: u32,
    chain_head: u32,
    chain_tail: u32,
    nr_members: u32,
}

impl Slot {
    /// Merge bookkeeping shared by back and front merges: sizes add up, the merged request
    /// keeps the earlier insertion time and deadline (as Linux's `dd_merged_requests`).
    fn take_sizes_and_times(&mut self, other: &Slot, segs: u32) {
        self.nblocks += other.nblocks;
        self.nsegs = segs;
        self.nr_members += other.nr_members;
        self.insert_ns = self.insert_ns.min(other.insert_ns);
        self.deadline_ns = self.deadline_ns.min(other.deadline_ns);
    }

    const EMPTY: Slot = Slot {
        state: State::Out,
        owner: 0,
        op: Op::Read,
        prio: PrioClass::Be,
        flags: ReqFlags::NONE,
        started: false,
        sector: 0,
        nblocks: 0,
        nsegs: 0,
        addr: 0,
        end_addr: 0,
        insert_ns: 0,
        deadline_ns: 0,
        fifo_prev: NIL,
        fifo_next: NIL,
        chain_head: NIL,
        chain_tail: NIL,
        nr_members: 0,
    };

    #[inline]
    fn dir(&self) -> Dir {
        Dir::of(self.op)
    }

    #[inline]
    fn end(&self) -> u64 {
        self.sector + u64::from(self.nblocks)
    }
}

/// One priority class: sort trees and FIFOs per direction, plus counters.
///
/// Laid out so that what a counted burst writes (`latest_pos`, `inserted`, `dispatched`)
/// shares one cache line, and each class has lines of its own: a burst moves one line of
/// scheduler state (besides the lock's) between the cores that share the scheduler.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct PerPrio {
    /// Sector of the last request dispatched per direction (Linux's `latest_pos`).
    latest_pos: [u64; 2],
    inserted: u64,
    merged: u64,
    dispatched: u64,
    /// Completions of requests handed out by count that their reactor reported with its
    /// next locked batch instead of the atomic (`insert_dispatch_counted`'s `completed`).
    completed_locked: u64,
    fifo_head: [u32; 2],
    fifo_tail: [u32; 2],
    sort: [Tree; 2],
}

impl PerPrio {
    fn new(nr: u32) -> PerPrio {
        PerPrio {
            sort: [Tree::with_capacity(nr), Tree::with_capacity(nr)],
            fifo_head: [NIL; 2],
            fifo_tail: [NIL; 2],
            ..PerPrio::default()
        }
    }
}

/// What became of an inserted request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// Queued in its class's tree and FIFO.
    Queued,
    /// Put on the dispatch list (HEAD flag).
    Head,
    /// Merged into request `into` (its carrier), which will complete it.
    Merged { into: u32 },
}

/// The mq-deadline scheduler of one device, single-threaded (wrap it in
/// [`super::SharedDeadline`] to share it between reactors).
#[derive(Debug)]
pub struct Deadline {
    opts: DeadlineOptions,
    fifo_expire_ns: [u64; 2],
    aging_ns: u64,
    async_depth: u32,
    slots: Box<[Slot]>,
    side: Arc<CompletionSide>,
    prios: [PerPrio; NR_PRIO],
    /// Head insertions and requeues.
    dispatch: VecDeque<u32>,
    /// Per owner: requests taken out of the scheduler for it by another owner's dispatch.
    ready: Box<[VecDeque<u32>]>,
    last_dir: Dir,
    batching: u32,
    starved: u32,
    /// Requests (carriers) in the trees or the dispatch list.
    pending: u32,
    /// Requests in all ready lists.
    ready_total: u32,
    /// Whether `dispatch_run` may take sequential runs at once (tests turn it off to compare).
    fast_runs: bool,
}

/// The request chosen by one step of the dispatch algorithm, before it is taken.
#[derive(Clone, Copy, Debug)]
struct Choice {
    id: u32,
    dir: Dir,
    /// Position of `id` in its sort set, when the choice found it there.
    pos: Option<usize>,
    /// Whether this starts a new batch (direction decided afresh).
    new_batch: bool,
    /// Whether writes were chosen after reads had been preferred `writes_starved` times.
    starved_writes: bool,
    /// Whether reads were preferred over waiting writes.
    passed_writes: bool,
}

impl Deadline {
    /// A scheduler with validated options; allocates everything it will ever need.
    pub fn new(opts: DeadlineOptions) -> Result<Deadline, SchedError> {
        opts.validate()?;
        let nr = opts.nr_requests;
        let owners = usize::from(opts.owners);
        Ok(Deadline {
            fifo_expire_ns: [
                ms_to_ns(opts.read_expire_ms),
                ms_to_ns(opts.write_expire_ms),
            ],
            aging_ns: ms_to_ns(opts.prio_aging_expire_ms),
            async_depth: opts.effective_async_depth(),
            slots: vec![Slot::EMPTY; nr as usize].into_boxed_slice(),
            side: Arc::new(CompletionSide::new(nr)),
            prios: [PerPrio::new(nr), PerPrio::new(nr), PerPrio::new(nr)],
            dispatch: VecDeque::with_capacity(nr as usize),
            ready: (0..owners)
                .map(|_| VecDeque::with_capacity(nr as usize))
                .collect(),
            last_dir: Dir::Read,
            batching: 0,
            starved: 0,
            pending: 0,
            ready_total: 0,
            fast_runs: true,
            opts,
        })
    }

    pub(crate) fn side(&self) -> &Arc<CompletionSide> {
        &self.side
    }

    /// The options in effect (tunables reflect runtime changes).
    pub fn options(&self) -> &DeadlineOptions {
        &self.opts
    }

    /// Scheduler tags (`0..nr_requests` are valid ids).
    pub fn nr_requests(&self) -> u32 {
        self.opts.nr_requests
    }

    /// Shallow depth the tag layer applies to a request (`dd_limit_depth`); `None` = no limit
    /// and batched allocation allowed.
    pub fn limit_depth(&self, op: Op, flags: ReqFlags) -> Option<u32> {
        limit_depth_for(op, flags, self.async_depth)
    }

    /// Requests at `prio` inserted and not completed (in the scheduler or in flight). O(1).
    #[inline]
    pub fn queued(&self, prio: PrioClass) -> u64 {
        let p = &self.prios[prio as usize];
        let completed = self.side.completed(prio) + p.completed_locked;
        debug_assert!(completed <= p.inserted, "completed exceeds inserted");
        p.inserted.saturating_sub(completed)
    }

    /// Counters of one class.
    pub fn stats(&self, prio: PrioClass) -> PrioStats {
        let p = &self.prios[prio as usize];
        PrioStats {
            inserted: p.inserted,
            merged: p.merged,
            dispatched: p.dispatched,
            completed: self.side.completed(prio) + p.completed_locked,
            queued: self.queued(prio),
        }
    }

    /// Whether anything waits to be dispatched (for any owner).
    pub fn has_work(&self) -> bool {
        self.pending != 0 || self.ready_total != 0
    }

    /// Requests waiting in the scheduler (trees and dispatch list), not counting ready lists.
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Whether `owner` has requests waiting for it (dispatch list or ready list).
    pub fn has_work_for(&self, owner: u16) -> bool {
        self.pending != 0
            || self
                .ready
                .get(usize::from(owner))
                .is_some_and(|r| !r.is_empty())
    }

    // --------------------------------------------------------------------------------------
    // Tunables.

    /// Sets a tunable by its Linux sysfs name (times in ms, front_merges 0/1).
    pub fn set_param(&mut self, name: &str, value: u64) -> Result<(), SchedError> {
        let mut o = self.opts.clone();
        let to_u32 = |v: u64| {
            u32::try_from(v).map_err(|_| SchedError::InvalidOption {
                name: param_name(name),
                reason: format!("{v} is too large"),
            })
        };
        match name {
            "read_expire" => o.read_expire_ms = value,
            "write_expire" => o.write_expire_ms = value,
            "writes_starved" => o.writes_starved = to_u32(value)?,
            "front_merges" => match value {
                0 => o.front_merges = false,
                1 => o.front_merges = true,
                _ => {
                    return Err(SchedError::InvalidOption {
                        name: "front_merges",
                        reason: format!("{value} is not 0 or 1"),
                    });
                }
            },
            "fifo_batch" => o.fifo_batch = to_u32(value)?,
            "prio_aging_expire" => o.prio_aging_expire_ms = value,
            "async_depth" => {
                let v = to_u32(value)?;
                if v == 0 {
                    return Err(SchedError::InvalidOption {
                        name: "async_depth",
                        reason: "must be at least 1".into(),
                    });
                }
                o.async_depth = v;
            }
            _ => return Err(SchedError::UnknownParam(name.to_string())),
        }
        o.validate()?;
        self.fifo_expire_ns = [ms_to_ns(o.read_expire_ms), ms_to_ns(o.write_expire_ms)];
        self.aging_ns = ms_to_ns(o.prio_aging_expire_ms);
        self.async_depth = o.effective_async_depth();
        self.opts = o;
        Ok(())
    }

    /// Reads a tunable by its Linux sysfs name.
    pub fn get_param(&self, name: &str) -> Result<u64, SchedError> {
        let o = &self.opts;
        Ok(match name {
            "read_expire" => o.read_expire_ms,
            "write_expire" => o.write_expire_ms,
            "writes_starved" => u64::from(o.writes_starved),
            "front_merges" => u64::from(o.front_merges),
            "fifo_batch" => u64::from(o.fifo_batch),
            "prio_aging_expire" => o.prio_aging_expire_ms,
            "async_depth" => u64::from(self.async_depth),
            _ => return Err(SchedError::UnknownParam(name.to_string())),
        })
    }

    // --------------------------------------------------------------------------------------
    // Insert and merge.

    /// Inserts one request at time `now_ns` (`dd_insert_request`): HEAD requests go to the
    /// dispatch list; others are merged into an adjacent queued request when allowed, else
    /// queued in their class's tree and FIFO with deadline `now + expire[dir]`.
    pub fn insert(&mut self, rq: &SchedRq, now_ns: u64) -> Result<Inserted, SchedError> {
        let id = rq.id;
        let Some(slot) = self.slots.get(id as usize) else {
            return Err(SchedError::BadId { id });
        };
        if slot.state != State::Out || self.side.in_flight(id) {
            return Err(SchedError::Busy { id });
        }
        if rq.sector > MAX_SECTOR || rq.sector + u64::from(rq.nblocks) > MAX_SECTOR + 1 {
            return Err(SchedError::SectorRange {
                id,
                sector: rq.sector,
            });
        }
        if rq.owner >= self.opts.owners {
            return Err(SchedError::BadOwner {
                owner: rq.owner,
                owners: self.opts.owners,
            });
        }
        let dir = Dir::of(rq.op);
        let bytes = u64::from(rq.nblocks) * u64::from(self.opts.block_size);
        self.slots[id as usize] = Slot {
            state: State::Queued,
            owner: rq.owner,
            op: rq.op,
            prio: rq.prio,
            flags: rq.flags,
            started: false,
            sector: rq.sector,
            nblocks: rq.nblocks,
            nsegs: 1,
            addr: rq.addr,
            end_addr: if rq.addr == 0 {
                0
            } else {
                rq.addr.wrapping_add(bytes)
            },
            insert_ns: now_ns,
            deadline_ns: now_ns.saturating_add(self.fifo_expire_ns[dir as usize]),
            fifo_prev: NIL,
            fifo_next: NIL,
            chain_head: id,
            chain_tail: id,
            nr_members: 1,
        };
        let link = &self.side.links[id as usize];
        link.next.store(NIL, Ordering::Relaxed);
        link.head.store(id, Ordering::Relaxed);
        self.prios[rq.prio as usize].inserted += 1;

        if rq.flags.contains(ReqFlags::HEAD) {
            self.slots[id as usize].state = State::Head;
            self.dispatch.push_front(id);
            self.pending += 1;
            return Ok(Inserted::Head);
        }
        let (p, d) = (rq.prio as usize, dir as usize);
        let end = rq.sector + u64::from(rq.nblocks);
        let probe = self.prios[p].sort[d].probe(rq.sector, end, id);
        if let Some(into) = self.try_insert_merge(id, probe) {
            return Ok(Inserted::Merged { into });
        }
        self.prios[p].sort[d].insert_at(probe.pos, id, rq.sector);
        self.fifo_push_back(p, d, id);
        self.pending += 1;
        Ok(Inserted::Queued)
    }

    /// Whether `id` may take part in a merge at all (Linux's `rq_mergeable`).
    fn mergeable(s: &Slot) -> bool {
        matches!(s.op, Op::Read | Op::Write)
            && !s.flags.contains(ReqFlags::FUA)
            && !s.flags.contains(ReqFlags::HEAD)
            && s.nblocks != 0
    }

    /// Whether `lo` followed by `hi` (adjacent in sectors) may become one request; returns the
    /// merged segment count. The children of a split I/O merge like any request (each member
    /// still completes on its own), within the device's limits.
    fn merge_fits(&self, lo: &Slot, hi: &Slot) -> Option<u32> {
        const ANY: ReqFlags = ReqFlags::SYNC.union(ReqFlags::CHILD);
        // Same owner too: the owner completes the members, whose requests live in its pool.
        let same = lo.op == hi.op
            && lo.owner == hi.owner
            && lo.prio == hi.prio
            && lo.flags.without(ANY) == hi.flags.without(ANY)
            && lo.end() == hi.sector;
        if !same || !Self::mergeable(lo) || !Self::mergeable(hi) {
            return None;
        }
        let blocks = u64::from(lo.nblocks) + u64::from(hi.nblocks);
        if blocks > u64::from(self.opts.max_transfer_blocks) {
            return None;
        }
        let b = u64::from(self.opts.boundary_blocks);
        if b != 0 && lo.sector / b != (hi.end() - 1) / b {
            return None;
        }
        let contiguous = lo.end_addr != 0 && lo.end_addr == hi.addr;
        let segs = lo.nsegs + hi.nsegs - u32::from(contiguous);
        (segs <= self.opts.max_segments).then_some(segs)
    }

    /// Tries to merge the new request `id` into a queued neighbour: back merge first (a queued
    /// request ending where `id` starts), then front merge (one starting where `id` ends).
    /// After a merge, the grown request may now touch another queued one: merge those too,
    /// as Linux's `attempt_back_merge` / `attempt_front_merge`.
    fn try_insert_merge(&mut self, id: u32, probe: Probe) -> Option<u32> {
        let s = &self.slots[id as usize];
        // Without a buffer address two requests make two segments.
        if !Self::mergeable(s) || (s.addr == 0 && self.opts.max_segments < 2) {
            return None;
        }
        let new = *s;
        let (p, d) = (new.prio as usize, new.dir() as usize);
        if let Some(q) = probe.back
            && let Some(segs) = self.merge_fits(&self.slots[q as usize], &new)
        {
            self.absorb_back(q, id, segs);
            self.prios[p].merged += 1;
            if let Some(r) = self.front_neighbour(q) {
                self.merge_queued(q, r);
            }
            return Some(q);
        }
        if self.opts.front_merges
            && let Some(q) = probe.front
            && let Some(segs) = self.merge_fits(&new, &self.slots[q as usize])
        {
            // The queued request keeps its place in the FIFO; re-key it in the tree.
            let old = self.slots[q as usize].sector;
            self.prios[p].sort[d].remove(q, old);
            self.absorb_front(q, id, segs);
            let sector = self.slots[q as usize].sector;
            self.prios[p].sort[d].insert(q, sector);
            self.prios[p].merged += 1;
            if let Some(prev) = self.back_neighbour(q) {
                self.merge_queued(prev, q);
                return Some(prev);
            }
            return Some(q);
        }
        None
    }

    /// A queued request of the same class and direction starting where `q` ends, if it can be
    /// merged behind `q`.
    fn front_neighbour(&self, q: u32) -> Option<u32> {
        let s = &self.slots[q as usize];
        let r = self.prios[s.prio as usize].sort[s.dir() as usize].first_at_or_after(s.end())?;
        self.merge_fits(s, &self.slots[r as usize]).map(|_| r)
    }

    /// A queued request of the same class and direction ending where `q` starts, if `q` can
    /// be merged behind it.
    fn back_neighbour(&self, q: u32) -> Option<u32> {
        let s = &self.slots[q as usize];
        let r = self.prios[s.prio as usize].sort[s.dir() as usize].last_before(s.sector)?;
        self.merge_fits(&self.slots[r as usize], s).map(|_| r)
    }

    /// Carrier `q` absorbs the (unqueued) request `n` behind it. Keeps the earlier FIFO times.
    fn absorb_back(&mut self, q: u32, n: u32, segs: u32) {
        let ns = self.slots[n as usize];
        let links = &self.side.links;
        let qs = &mut self.slots[q as usize];
        links[qs.chain_tail as usize]
            .next
            .store(ns.chain_head, Ordering::Relaxed);
        qs.chain_tail = ns.chain_tail;
        qs.end_addr = ns.end_addr;
        qs.take_sizes_and_times(&ns, segs);
        self.make_member(n);
    }

    /// Carrier `q` absorbs the (unqueued) request `n` in front of it. The caller re-keys `q`.
    fn absorb_front(&mut self, q: u32, n: u32, segs: u32) {
        let ns = self.slots[n as usize];
        let links = &self.side.links;
        let qs = &mut self.slots[q as usize];
        links[ns.chain_tail as usize]
            .next
            .store(qs.chain_head, Ordering::Relaxed);
        qs.chain_head = ns.chain_head;
        qs.sector = ns.sector;
        qs.addr = ns.addr;
        qs.take_sizes_and_times(&ns, segs);
        self.make_member(n);
    }

    /// `n` now belongs to a carrier's chain: not a carrier itself any more.
    fn make_member(&mut self, n: u32) {
        let s = &mut self.slots[n as usize];
        s.state = State::Member;
        s.chain_head = NIL;
        s.chain_tail = NIL;
    }

    /// Queued `lo` absorbs queued `hi` right behind it (`dd_merged_requests`): `hi` leaves the
    /// tree and FIFO; `lo` inherits `hi`'s FIFO position and time when those are earlier.
    fn merge_queued(&mut self, lo: u32, hi: u32) {
        let Some(segs) = self.merge_fits(&self.slots[lo as usize], &self.slots[hi as usize]) else {
            return;
        };
        let hs = self.slots[hi as usize];
        let (p, d) = (hs.prio as usize, hs.dir() as usize);
        self.prios[p].sort[d].remove(hi, hs.sector);
        if hs.deadline_ns < self.slots[lo as usize].deadline_ns {
            self.fifo_unlink(p, d, lo);
            self.fifo_replace(p, d, hi, lo);
        } else {
            self.fifo_unlink(p, d, hi);
        }
        self.pending -= 1;
        self.absorb_back(lo, hi, segs);
        self.prios[p].merged += 1;
    }

    // --------------------------------------------------------------------------------------
    // Intrusive FIFO (index links in the slab): O(1) push, unlink and replace.

    fn fifo_push_back(&mut self, p: usize, d: usize, id: u32) {
        let tail = self.prios[p].fifo_tail[d];
        {
            let s = &mut self.slots[id as usize];
            s.fifo_prev = tail;
            s.fifo_next = NIL;
        }
        if tail == NIL {
            self.prios[p].fifo_head[d] = id;
        } else {
            self.slots[tail as usize].fifo_next = id;
        }
        self.prios[p].fifo_tail[d] = id;
    }

    fn fifo_unlink(&mut self, p: usize, d: usize, id: u32) {
        let Slot {
            fifo_prev: prev,
            fifo_next: next,
            ..
        } = self.slots[id as usize];
        if prev == NIL {
            self.prios[p].fifo_head[d] = next;
        } else {
            self.slots[prev as usize].fifo_next = next;
        }
        if next == NIL {
            self.prios[p].fifo_tail[d] = prev;
        } else {
            self.slots[next as usize].fifo_prev = prev;
        }
        let s = &mut self.slots[id as usize];
        s.fifo_prev = NIL;
        s.fifo_next = NIL;
    }

    /// Puts unlinked `new` where `old` is and unlinks `old`.
    fn fifo_replace(&mut self, p: usize, d: usize, old: u32, new: u32) {
        let Slot {
            fifo_prev: prev,
            fifo_next: next,
            ..
        } = self.slots[old as usize];
        {
            let s = &mut self.slots[new as usize];
            s.fifo_prev = prev;
            s.fifo_next = next;
        }
        if prev == NIL {
            self.prios[p].fifo_head[d] = new;
        } else {
            self.slots[prev as usize].fifo_next = new;
        }
        if next == NIL {
            self.prios[p].fifo_tail[d] = new;
        } else {
            self.slots[next as usize].fifo_prev = new;
        }
        let s = &mut self.slots[old as usize];
        s.fifo_prev = NIL;
        s.fifo_next = NIL;
    }

    // --------------------------------------------------------------------------------------
    // Dispatch.

    /// Hands out up to `max` requests for `owner` at time `now_ns` into `out`; returns how
    /// many were pushed. Requests already taken for `owner` by other owners come first; a
    /// request the algorithm picks for another owner goes to that owner's ready list (it
    /// counts towards `max`, so one call does bounded work). `out` should have capacity for
    /// `max` more entries (then nothing is allocated).
    pub fn dispatch_batch(
        &mut self,
        owner: u16,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> usize {
        let o = usize::from(owner);
        if o >= self.ready.len() {
            log::error!("mq-deadline: dispatch for unknown owner {owner}");
            return 0;
        }
        let mut n = 0;
        while n < max
            && let Some(id) = self.ready[o].pop_front()
        {
            self.ready_total -= 1;
            out.push(self.hand_out(id));
            n += 1;
        }
        let mut budget = max - n;
        while budget > 0 {
            if let Some(k) = self.dispatch_run(owner, budget, out) {
                n += k.0;
                budget -= k.1;
                continue;
            }
            let Some(id) = self.dispatch_one(now_ns) else {
                break;
            };
            budget -= 1;
            n += self.deliver(owner, id, out);
        }
        n
    }

    /// Hands `id` to `owner` (returns 1) or parks it in its owner's ready list (returns 0).
    #[inline]
    fn deliver(&mut self, owner: u16, id: u32, out: &mut Vec<Dispatched>) -> usize {
        let to = self.slots[id as usize].owner;
        if to == owner {
            out.push(self.hand_out(id));
            1
        } else {
            self.slots[id as usize].state = State::Ready;
            self.ready[usize::from(to)].push_back(id);
            self.ready_total += 1;
            0
        }
    }

    /// The common case in one step: when the dispatch list is empty and exactly one class has
    /// requests queued or in flight (so there is no aging pass and no class above to wait
    /// for) and the current sequential batch can continue, the next requests `dispatch_one`
    /// would return one by one are the consecutive entries of the sort set from the batch
    /// position on. Takes up to `budget` of them with one shift of the set. Returns
    /// (handed to `owner`, taken), or `None` when the fast path does not apply.
    fn dispatch_run(
        &mut self,
        owner: u16,
        budget: usize,
        out: &mut Vec<Dispatched>,
    ) -> Option<(usize, usize)> {
        if !self.fast_runs || !self.dispatch.is_empty() || self.batching >= self.opts.fifo_batch {
            return None;
        }
        let mut only = None;
        for prio in PrioClass::ALL {
            if self.queued(prio) > 0 {
                if only.is_some() {
                    return None;
                }
                only = Some(prio);
            }
        }
        let prio = only?;
        let (p, d) = (prio as usize, self.last_dir as usize);
        let (i, _) = self.prios[p].sort[d].next_at(self.prios[p].latest_pos[d])?;
        let avail = self.prios[p].sort[d].len() - i;
        let len = budget
            .min(avail)
            .min((self.opts.fifo_batch - self.batching) as usize);
        let mut handed = 0;
        for k in 0..len {
            let id = self.prios[p].sort[d].id_at(i + k);
            self.fifo_unlink(p, d, id);
            self.prios[p].latest_pos[d] = self.slots[id as usize].sector;
            self.count_dispatched(id);
            handed += self.deliver(owner, id, out);
        }
        self.prios[p].sort[d].remove_run(i, len);
        self.batching += len as u32;
        self.pending -= len as u32;
        Some((handed, len))
    }

    /// Marks a carrier and its members in flight and describes it.
    fn hand_out(&mut self, id: u32) -> Dispatched {
        let s = &mut self.slots[id as usize];
        s.state = State::Out;
        let s = *s;
        let meta = INFLIGHT | s.prio as u32;
        let links = &self.side.links;
        links[id as usize]
            .head
            .store(s.chain_head, Ordering::Relaxed);
        let mut m = s.chain_head;
        while m != NIL {
            if m != id {
                self.slots[m as usize].state = State::Out;
                links[m as usize]
                    .meta
                    .store(meta | MEMBER, Ordering::Release);
            }
            m = links[m as usize].next.load(Ordering::Relaxed);
        }
        links[id as usize].meta.store(meta, Ordering::Release);
        Dispatched {
            id,
            owner: s.owner,
            op: s.op,
            prio: s.prio,
            flags: s.flags,
            sector: s.sector,
            nblocks: s.nblocks,
            addr: s.addr,
            nsegs: s.nsegs,
            nr_members: s.nr_members,
        }
    }

    /// One step of `dd_dispatch_request`: takes the next request out of the scheduler.
    fn dispatch_one(&mut self, now_ns: u64) -> Option<u32> {
        if let Some(id) = self.dispatch.pop_front() {
            self.pending -= 1;
            self.count_dispatched(id);
            return Some(id);
        }
        if self.pending == 0 {
            return None;
        }
        if let Some(id) = self.dispatch_aged(now_ns) {
            return Some(id);
        }
        for prio in PrioClass::ALL {
            if let Some(c) = self.choose(prio, now_ns, None) {
                return Some(self.take(prio, c));
            }
            if self.queued(prio) > 0 {
                // Lower classes wait while this one has requests queued or in flight.
                break;
            }
        }
        None
    }

    /// The aging pass (`dd_dispatch_prio_aged_requests`): only when two or more classes have
    /// requests queued, a BE then IDLE request inserted at least `prio_aging_expire` ago.
    fn dispatch_aged(&mut self, now_ns: u64) -> Option<u32> {
        let busy = PrioClass::ALL
            .iter()
            .filter(|&&p| self.queued(p) > 0)
            .count();
        if busy < 2 || now_ns < self.aging_ns {
            return None;
        }
        let latest_start = now_ns - self.aging_ns;
        for prio in [PrioClass::Be, PrioClass::Idle] {
            if let Some(c) = self.choose(prio, now_ns, Some(latest_start)) {
                return Some(self.take(prio, c));
            }
        }
        None
    }

    /// `__dd_dispatch_request` without side effects: the request one class would dispatch.
    /// With `latest_start`, a request inserted after it is refused (`started_after`).
    fn choose(&self, prio: PrioClass, now_ns: u64, latest_start: Option<u64>) -> Option<Choice> {
        let pp = &self.prios[prio as usize];
        let batch = self.next_by_sector(pp, self.last_dir);
        let choice = match batch {
            Some((pos, id)) if self.batching < self.opts.fifo_batch => Choice {
                id,
                dir: self.last_dir,
                pos: Some(pos),
                new_batch: false,
                starved_writes: false,
                passed_writes: false,
            },
            _ => {
                let reads = pp.fifo_head[Dir::Read as usize] != NIL;
                let writes = pp.fifo_head[Dir::Write as usize] != NIL;
                let (dir, starved_writes, passed_writes) = if reads {
                    if writes && self.starved >= self.opts.writes_starved {
                        (Dir::Write, true, false)
                    } else {
                        (Dir::Read, false, writes)
                    }
                } else if writes {
                    (Dir::Write, true, false)
                } else {
                    return None;
                };
                let head = pp.fifo_head[dir as usize];
                let expired = now_ns >= self.slots[head as usize].deadline_ns;
                let next = if dir == self.last_dir {
                    batch
                } else {
                    self.next_by_sector(pp, dir)
                };
                let (id, pos) = match next {
                    Some((pos, next)) if !expired => (next, Some(pos)),
                    _ => (head, None),
                };
                Choice {
                    id,
                    dir,
                    pos,
                    new_batch: true,
                    starved_writes,
                    passed_writes,
                }
            }
        };
        if let Some(ls) = latest_start
            && self.slots[choice.id as usize].insert_ns > ls
        {
            return None;
        }
        Some(choice)
    }

    /// First queued request at or after the last dispatched position in direction `dir`
    /// (`deadline_from_pos`).
    #[inline]
    fn next_by_sector(&self, pp: &PerPrio, dir: Dir) -> Option<(usize, u32)> {
        pp.sort[dir as usize].next_at(pp.latest_pos[dir as usize])
    }

    /// Commits a choice: batch state, tree/FIFO removal, counters (`deadline_move_request`,
    /// `dd_start_request`).
    fn take(&mut self, prio: PrioClass, c: Choice) -> u32 {
        if c.new_batch {
            if c.starved_writes {
                self.starved = 0;
            } else if c.passed_writes {
                self.starved += 1;
            }
            self.last_dir = c.dir;
            self.batching = 0;
        }
        self.batching += 1;
        let (p, d) = (prio as usize, c.dir as usize);
        let sector = self.slots[c.id as usize].sector;
        match c.pos {
            Some(i) => self.prios[p].sort[d].remove_at(i, c.id),
            None => {
                self.prios[p].sort[d].remove(c.id, sector);
            }
        }
        self.fifo_unlink(p, d, c.id);
        self.prios[p].latest_pos[d] = sector;
        self.pending -= 1;
        self.count_dispatched(c.id);
        c.id
    }

    fn count_dispatched(&mut self, id: u32) {
        let s = &mut self.slots[id as usize];
        if !s.started {
            s.started = true;
            self.prios[s.prio as usize].dispatched += 1;
        }
    }

    // --------------------------------------------------------------------------------------
    // Direct dispatch of a burst the algorithm would hand out whole.

    /// Inserts and hands out a burst in one step when mq-deadline would dispatch all of it at
    /// once anyway, returning `false` (nothing changed) otherwise. The conditions: nothing waits
    /// in the scheduler (no queued, head or ready request, so no deadline, aging or direction
    /// choice is pending), the burst fits `max`, every request is `owner`'s, of one class with
    /// no higher class queued or in flight (so it would not wait), not a HEAD insertion, and
    /// not adjacent to its predecessor in the burst (sequential streams take the full path).
    /// Counters move as insert + dispatch would (`inserted` and `dispatched` once each). What
    /// differs from the full path: the order inside the one burst (submission order instead
    /// of sector order), and merges between requests of the burst that are adjacent without
    /// being consecutive, which the full path's insert merge would join and this path sends
    /// as separate commands (the data is the same). Only the predecessor is checked, as
    /// Linux's plug merge checks only the previous request since 5.16 ("block: only check
    /// previous entry for plug merge attempt"): looking further costs every burst a search
    /// for a merge random I/O almost never has. `out` should have room for the burst.
    pub fn insert_dispatch_direct(
        &mut self,
        rqs: &[SchedRq],
        owner: u16,
        now_ns: u64,
        max: usize,
        out: &mut Vec<Dispatched>,
    ) -> bool {
        if !self.fast_runs
            || self.pending != 0
            || self.ready_total != 0
            || rqs.is_empty()
            || rqs.len() > max
        {
            return false;
        }
        let prio = rqs[0].prio;
        let p = prio as usize;
        if (0..p).any(|h| self.queued(PrioClass::ALL[h]) != 0) {
            return false;
        }
        let mut prev_dir = None;
        let (mut prev_start, mut prev_end) = (0u64, 0u64);
        for rq in rqs {
            let end = rq.sector + u64::from(rq.nblocks);
            let dir = Dir::of(rq.op);
            let ok = rq.prio == prio
                && rq.owner == owner
                && !rq.flags.contains(ReqFlags::HEAD)
                && self
                    .slots
                    .get(rq.id as usize)
                    .is_some_and(|s| s.state == State::Out)
                && !self.side.in_flight(rq.id)
                && rq.sector <= MAX_SECTOR
                && end <= MAX_SECTOR + 1
                && (prev_dir != Some(dir) || (prev_end != rq.sector && end != prev_start));
            if !ok {
                return false;
            }
            prev_dir = Some(dir);
            (prev_start, prev_end) = (rq.sector, end);
        }
        let meta = INFLIGHT | prio as u32;
        let links = &self.side.links;
        for rq in rqs {
            let dir = Dir::of(rq.op);
            let bytes = u64::from(rq.nblocks) * u64::from(self.opts.block_size);
            self.slots[rq.id as usize] = Slot {
                state: State::Out,
                owner: rq.owner,
                op: rq.op,
                prio,
                flags: rq.flags,
                started: true,
                sector: rq.sector,
                nblocks: rq.nblocks,
                nsegs: 1,
                addr: rq.addr,
                end_addr: if rq.addr == 0 {
                    0
                } else {
                    rq.addr.wrapping_add(bytes)
                },
                insert_ns: now_ns,
                deadline_ns: now_ns.saturating_add(self.fifo_expire_ns[dir as usize]),
                fifo_prev: NIL,
                fifo_next: NIL,
                chain_head: rq.id,
                chain_tail: rq.id,
                nr_members: 1,
            };
            let link = &links[rq.id as usize];
            link.next.store(NIL, Ordering::Relaxed);
            link.head.store(rq.id, Ordering::Relaxed);
            link.meta.store(meta, Ordering::Release);
            out.push(Dispatched {
                id: rq.id,
                owner: rq.owner,
                op: rq.op,
                prio,
                flags: rq.flags,
                sector: rq.sector,
                nblocks: rq.nblocks,
                addr: rq.addr,
                nsegs: 1,
                nr_members: 1,
            });
            self.prios[p].latest_pos[dir as usize] = rq.sector + u64::from(rq.nblocks);
        }
        let n = rqs.len() as u64;
        self.prios[p].inserted += n;
        self.prios[p].dispatched += n;
        true
    }

    /// The counted form of [`Deadline::insert_dispatch_direct`] for a caller that vouches for
    /// every per-request condition itself (the block layer's scheduler path, which checks
    /// them as it builds the burst): `n` requests, all of class `prio`, all the caller's own
    /// and none in the scheduler or in flight (it owns their scheduler tags), none a HEAD
    /// insertion, each inside the sector range and not adjacent to its predecessor in the
    /// burst (the merges this leaves out are those of `insert_dispatch_direct`). `latest_pos[dir]` is the end of the burst's last
    /// request in that direction (`None`: none in that direction). `completed[class]` are
    /// completions of earlier counted requests the caller has not reported yet: they are
    /// counted first, whatever the answer (a reactor may hold a class's completions back
    /// while it still has requests of that class in flight, so "queued > 0" is unchanged by
    /// the delay, and report them here, on the line this call writes anyway, instead of with
    /// an atomic add on a line every reactor writes).
    ///
    /// Under the same scheduler-wide conditions as `insert_dispatch_direct` (nothing waits in
    /// the scheduler, no higher class queued or in flight; the caller has driver room for all
    /// `n`), the burst is counted as inserted and dispatched (once each, as insert + dispatch
    /// would) and `true` is returned; otherwise nothing changes. No per-request state is kept:
    /// these requests are not merge candidates (they left the scheduler at once), cannot be
    /// requeued, and complete through [`Deadline::complete_counted`], not `complete_batch`.
    pub fn insert_dispatch_counted(
        &mut self,
        prio: PrioClass,
        n: u32,
        latest_pos: [Option<u64>; 2],
        completed: [u64; 3],
    ) -> bool {
        for (pp, c) in self.prios.iter_mut().zip(completed) {
            pp.completed_locked += c;
        }
        if !self.fast_runs || self.pending != 0 || self.ready_total != 0 || n == 0 {
            return false;
        }
        let p = prio as usize;
        if (0..p).any(|h| self.queued(PrioClass::ALL[h]) != 0) {
            return false;
        }
        let pp = &mut self.prios[p];
        for (pos, latest) in pp.latest_pos.iter_mut().zip(latest_pos) {
            if let Some(l) = latest {
                *pos = l;
            }
        }
        pp.inserted += u64::from(n);
        pp.dispatched += u64::from(n);
        true
    }

    // --------------------------------------------------------------------------------------
    // Requeue, completion, teardown.

    /// Completes requests handed out by [`Deadline::insert_dispatch_counted`]:
    /// `counts[class]` of each class. Lock-free (one atomic add per class with a count).
    pub fn complete_counted(&self, counts: [u64; 3]) {
        self.side.complete_counted(counts);
    }

    /// Gives a handed-out request back (the driver could not take it): it goes to the head of
    /// the dispatch list and is not counted again.
    pub fn requeue(&mut self, id: u32) -> Result<(), SchedError> {
        let Some(&s) = self.slots.get(id as usize) else {
            return Err(SchedError::BadId { id });
        };
        let link = &self.side.links[id as usize];
        let meta = link.meta.load(Ordering::Acquire);
        // Only a carrier that is handed out and not completed may come back.
        if s.state != State::Out
            || s.chain_head == NIL
            || meta & (INFLIGHT | MEMBER) != INFLIGHT
            || link
                .meta
                .compare_exchange(meta, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return Err(SchedError::NotInFlight { id });
        }
        let mut m = s.chain_head;
        while m != NIL {
            if m != id {
                self.side.links[m as usize].meta.store(0, Ordering::Release);
                self.slots[m as usize].state = State::Member;
            }
            m = self.side.links[m as usize].next.load(Ordering::Relaxed);
        }
        self.slots[id as usize].state = State::Head;
        self.dispatch.push_front(id);
        self.pending += 1;
        Ok(())
    }

    /// Completes handed-out requests without needing `&mut`: `f(member, status)` once for
    /// every member of each (merged) request, in sector order. See
    /// [`super::SharedDeadline::complete_batch`].
    pub fn complete_batch<I, F>(&self, done: I, f: F) -> Result<usize, SchedError>
    where
        I: IntoIterator<Item = (u32, IoStatus)>,
        F: FnMut(u32, IoStatus),
    {
        self.side.complete_batch(done, f)
    }

    /// Members of a handed-out request, in sector order (the request itself included).
    pub fn members(&self, id: u32) -> Members<'_> {
        self.side.members(id)
    }

    /// Checks that nothing is queued or in flight (Linux's exit invariant). Logs and returns
    /// an error naming the first class that still has requests.
    pub fn teardown_check(&self) -> Result<(), SchedError> {
        for prio in PrioClass::ALL {
            let queued = self.queued(prio);
            if queued != 0 {
                log::error!(
                    "mq-deadline: teardown with {queued} {} requests queued or in flight",
                    prio.name()
                );
                return Err(SchedError::NotIdle { prio, queued });
            }
        }
        Ok(())
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Reported, never a panic in drop: the caller had its chance with `teardown_check`.
        let _ = self.teardown_check();
    }
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

fn param_name(name: &str) -> &'static str {
    TUNABLES
        .iter()
        .find(|&&n| n == name)
        .copied()
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests;
