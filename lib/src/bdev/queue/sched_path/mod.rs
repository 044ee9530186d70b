//! The I/O path with a scheduler (mq-deadline), as blk-mq runs it.
//!
//! A [`BdevQueue`] opened with [`SchedMode::MqDeadline`] takes requests from **scheduler
//! tags** of its own (`per_owner` of the shared scheduler's ids: `2 × min(depth, 128)` by
//! default, deeper than the driver queue), then:
//!
//! - `submit` prepares the request in the scheduler pool and appends it to a pending list.
//!   Synchronous reads (and flush/FUA) take their tag through the plug (batch allocation);
//!   everything else gets the scheduler's `limit_depth` shallow depth and a single
//!   `get_shallow` (no batching, as Linux's `dd_limit_depth`). It also notes what flush
//!   needs to know about the burst as a whole: its classes, whether any request is a HEAD
//!   insertion or adjacent to its predecessor (could merge), requests per hctx.
//! - `flush` of a regular burst (one class, no HEAD, nothing adjacent) with room on the
//!   driver queues asks the scheduler, under one lock, to count it inserted and dispatched
//!   at once ([`SharedDeadline::insert_dispatch_counted`]: only when nothing waits there and
//!   no higher class is queued or in flight, i.e. when insert + dispatch would hand the
//!   whole burst out anyway) and rings the drivers with it. Otherwise the burst is inserted
//!   (merges, sort trees, FIFOs) and dispatched under one lock. Only consecutive requests
//!   are checked for adjacency, as Linux's plug merge does: two adjacent requests of one
//!   burst with others between them go out as two commands on the counted path.
//! - dispatch (at flush, and at poll when the scheduler has work and the driver has room):
//!   one `dispatch_batch` lock for as many requests as the driver queues have room for; each
//!   handed-out request takes a **driver tag** there (see below), and the driver is rung
//!   once per hctx. Requests another reactor's dispatch parked on this owner's ready list
//!   come out first.
//! - `poll` reaps driver completions in batches; requests handed out by count complete with
//!   one counter add per class per batch; the others complete through the scheduler without
//!   its lock (each merged member exactly once, with the carrier's status). Every member is
//!   stamped, counted and reported, and the scheduler tags go back with one `put_batch`.
//!
//! **Driver tags.** When the device allows it, the driver queues are opened with a command id
//! per scheduler tag ([`SchedPath::driver_depth`]) and run requests where they live, in the
//! scheduler pool, as Linux's driver tag maps to the scheduler's request (`tags->rqs[tag] =
//! rq`) instead of copying it: the driver tag is then a counted slot of the hctx's `depth`
//! (the queue is owned by one reactor), the driver sees the dispatch time in `submit_ns` and
//! a merged carrier's merged extent, and both are restored before completion reports them.
//! A device that cannot be opened that deep gets the blk-mq layout: a second tag set and
//! request pool per hctx, each started request copied into a driver request, a carrier map.
//!
//! Everything is allocated at open; no per-I/O allocation, lock or clock read.

use std::sync::Arc;

use crate::bdev::split::Splits;
use crate::bdev::stats::{QueueStats, now_ns};
use super::{BdevError, BdevQueue, BurstShape, Hctx, SchedMode, SubmitError, report_done};
use crate::hctx::{HCTX_MAX_TYPES, HctxType};
use crate::plug::Plug;
use crate::request::{Io, IoBuf, IoStatus, PrioClass, ReqFlags, Request};
use crate::sbitmap::AllocHint;
use crate::sched::{Dispatched, SchedError, SchedRq, SharedDeadline};
use crate::tags::{RequestPool, Tags, TagsOptions};

/// A queue's side of a shared mq-deadline: its scheduler tags, requests and buffers.
pub(super) struct SchedPath {
    dd: Arc<SharedDeadline>,
    owner: u16,
    /// First scheduler id of this owner (`owner × per_owner`).
    base: u32,
    /// Scheduler tags (`0..per_owner`); request id = `base + tag`.
    tags: Arc<Tags>,
    pool: RequestPool,
    hint: AllocHint,
    put_hint: AllocHint,
    /// Submitted since the last flush: `pending[..npending]`.
    pending: Box<[u16]>,
    npending: usize,
    /// Clock of the current burst (0: not read since the last flush).
    burst_ns: u64,
    /// Insertion burst (capacity `per_owner`).
    rqs: Vec<SchedRq>,
    /// Dispatch batch (capacity: the driver tags of every hctx).
    out: Vec<Dispatched>,
    /// Per opened hctx: driver tag → scheduler tag of the request it carries.
    carrier: Vec<Box<[u16]>>,
    /// Per opened hctx: driver tags taken in a batch and not used yet (capacity 64).
    drv_cache: Vec<Vec<u16>>,
    /// Per opened hctx: driver tags in use (so dispatch knows the room without counting bits).
    drv_busy: Vec<u32>,
    /// Completion batch given to the scheduler (capacity: the deepest hctx).
    done_ids: Vec<(u32, IoStatus)>,
    /// Scheduler tags freed by a completion batch (capacity `per_owner`).
    freed: Vec<u16>,
    /// Requests the scheduler refused (a bug), failed at the next poll (capacity `per_owner`).
    failed: Vec<u16>,
    /// Whether the driver queues run requests where they live, in this scheduler pool (each
    /// opened with a command id per scheduler tag; see [`SchedPath::driver_depth`]); else
    /// each started request is copied into a driver request under a driver tag.
    shared: bool,
    /// Shared pool, per scheduler tag: how it was started. `VIA_COUNTED` (handed out by
    /// `insert_dispatch_counted`, completed by count), `VIA_SCHED` (through the scheduler:
    /// completed through it; its submit time is in `saved_ns`), `VIA_MERGED` (also carries
    /// merged members: its own extent is in `saved_ext`).
    via: Box<[u8]>,
    /// Shared pool, per scheduler tag started through the scheduler: the submitter's clock
    /// (the driver sees the dispatch time in `submit_ns`, as with a driver request).
    saved_ns: Box<[u64]>,
    /// Shared pool, per merged carrier: its own `lba`, `nblocks` and buffer.
    saved_ext: Box<[(u64, u32, IoBuf)]>,
    /// The pending burst, as `submit` saw it (to hand it out whole without a look at each
    /// request): classes present (bit per class), whether any is HEAD or adjacent to its
    /// predecessor in the same direction, the predecessor's direction (2: none) and extent,
    /// the end of the last request per direction, and requests per hctx type.
    burst_classes: u8,
    burst_irregular: bool,
    prev_dir: u8,
    prev_start: u64,
    prev_end: u64,
    burst_end: [u64; 2],
    burst_hctx: [u32; HCTX_MAX_TYPES],
    /// Shared pool: requests started through the scheduler and not completed (0: every
    /// request in flight was handed out by count).
    sched_inflight: u32,
    /// Shared pool: requests handed out by count and not completed, per class.
    counted_inflight: [u32; 3],
    /// Completions of counted requests not reported to the scheduler yet, per class: held
    /// back only while this queue still has counted requests of that class in flight (so
    /// the class's "queued > 0" is true with or without them), reported with the next
    /// counted burst (on the line that call writes anyway) or with the atomic once the
    /// class's last counted request completes.
    deferred: [u64; 3],
}

/// `via` values (shared pool).
const VIA_COUNTED: u8 = 0;
const VIA_SCHED: u8 = 1;
const VIA_MERGED: u8 = 2;

/// "No request in this direction" in `burst_end`.
const NO_END: u64 = u64::MAX;

impl std::fmt::Debug for SchedPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedPath")
            .field("owner", &self.owner)
            .field("base", &self.base)
            .field("sched_tags", &self.tags.depth())
            .finish()
    }
}

impl SchedPath {
    /// Builds owner `owner`'s side of `dd` for a queue whose hctxs are `hctx`.
    pub(super) fn new(
        dd: &Arc<SharedDeadline>,
        owner: u16,
        info: &crate::bdev::BdevInfo,
        hctx: &[Hctx],
        drv_depth: u32,
    ) -> Result<SchedPath, BdevError> {
        let invalid = |reason: String| BdevError::InvalidConfig {
            name: info.name.clone(),
            reason,
        };
        let opts = dd.with_locked(|d| d.options().clone());
        if owner >= opts.owners {
            return Err(invalid(format!(
                "mq-deadline owner {owner} outside the scheduler's {} owners",
                opts.owners
            )));
        }
        if opts.max_segments != 1 {
            return Err(invalid(format!(
                "mq-deadline max_segments {} (a request carries one buffer: must be 1)",
                opts.max_segments
            )));
        }
        if opts.block_size != info.block_size {
            return Err(invalid(format!(
                "mq-deadline block size {} differs from the device's {}",
                opts.block_size, info.block_size
            )));
        }
        if opts.max_transfer_blocks > info.max_transfer_blocks {
            return Err(invalid(format!(
                "mq-deadline max transfer {} blocks exceeds the device's {}",
                opts.max_transfer_blocks, info.max_transfer_blocks
            )));
        }
        // Merges must not cross the device's boundary: the scheduler's boundaries must include
        // every one of the device's.
        let (b, db) = (opts.boundary_blocks, info.boundary_blocks);
        if db != 0 && (b == 0 || db % b != 0) {
            return Err(invalid(format!(
                "mq-deadline boundary {b} blocks does not divide the device's {db}-block boundary"
            )));
        }
        if info.num_blocks > 1 << 48 {
            return Err(invalid(format!(
                "mq-deadline sorts sectors below 2^48; the device has {} blocks",
                info.num_blocks
            )));
        }
        let per_owner = opts.per_owner();
        if per_owner == 0 || per_owner > u32::from(u16::MAX) {
            return Err(invalid(format!(
                "mq-deadline: {per_owner} scheduler tags per owner outside 1..=65535"
            )));
        }
        let tags = Tags::new(TagsOptions {
            depth: per_owner,
            ..TagsOptions::default()
        })
        .map_err(|e| invalid(e.to_string()))?;
        let pool = RequestPool::new(&tags, HctxType::Default);
        let hint = tags.new_hint();
        let put_hint = tags.new_hint();
        let drv_total: usize = hctx.iter().map(|h| h.tags.depth() as usize).sum();
        let deepest = hctx
            .iter()
            .map(|h| h.tags.depth() as usize)
            .max()
            .unwrap_or(0);
        Ok(SchedPath {
            dd: Arc::clone(dd),
            owner,
            base: u32::from(owner) * per_owner,
            tags: Arc::new(tags),
            pool,
            hint,
            put_hint,
            pending: vec![0; per_owner as usize].into_boxed_slice(),
            npending: 0,
            burst_ns: 0,
            rqs: Vec::with_capacity(per_owner as usize),
            out: Vec::with_capacity(drv_total),
            carrier: hctx
                .iter()
                .map(|h| vec![0u16; h.tags.depth() as usize].into_boxed_slice())
                .collect(),
            drv_cache: hctx.iter().map(|_| Vec::with_capacity(64)).collect(),
            drv_busy: vec![0; hctx.len()],
            done_ids: Vec::with_capacity(deepest),
            freed: Vec::with_capacity(per_owner as usize),
            failed: Vec::with_capacity(per_owner as usize),
            shared: drv_depth >= per_owner,
            via: vec![VIA_COUNTED; per_owner as usize].into_boxed_slice(),
            saved_ns: vec![0; per_owner as usize].into_boxed_slice(),
            saved_ext: vec![(0, 0, IoBuf::EMPTY); per_owner as usize].into_boxed_slice(),
            burst_classes: 0,
            burst_irregular: false,
            prev_dir: 2,
            prev_start: 0,
            prev_end: 0,
            burst_end: [NO_END; 2],
            burst_hctx: [0; HCTX_MAX_TYPES],
            sched_inflight: 0,
            counted_inflight: [0; 3],
            deferred: [0; 3],
        })
    }

    /// How deep `BdevQueue::open` opens the driver queues for `sched` and a queue `depth`
    /// deep: with mq-deadline, deep enough for a command id per scheduler tag
    /// (`max(depth, per_owner)`) when the device allows it, so the driver runs requests in
    /// the scheduler pool (no copy, no second tag set: the hctx's depth is enforced by a
    /// counter); else `depth` (requests are copied into driver requests under driver tags).
    pub(super) fn driver_depth(
        sched: &SchedMode,
        info: &crate::bdev::BdevInfo,
        depth: u32,
    ) -> u32 {
        match sched {
            SchedMode::None => depth,
            SchedMode::MqDeadline { dd, .. } => {
                let per_owner = dd.with_locked(|d| d.options().per_owner());
                let want = depth.max(per_owner);
                if want <= info.max_queue_depth.min(65535) {
                    want
                } else {
                    depth
                }
            }
        }
    }

    /// The scheduler tags (plugs bind to them instead of the driver tags).
    pub(super) fn tags(&self) -> &Arc<Tags> {
        &self.tags
    }

    /// Scheduler tags in use (submitted and not completed).
    pub(super) fn busy(&self) -> u32 {
        self.tags.busy()
    }

    /// Whether requests of this queue are still in the scheduler or in flight.
    fn idle(&self) -> bool {
        self.npending == 0 && self.tags.busy() == 0
    }

    /// Builds the mode's side for `sched`, or `None` without a scheduler.
    pub(super) fn for_mode(
        sched: &SchedMode,
        info: &crate::bdev::BdevInfo,
        hctx: &[Hctx],
        drv_depth: u32,
    ) -> Result<Option<Box<SchedPath>>, BdevError> {
        Ok(match sched {
            SchedMode::None => None,
            SchedMode::MqDeadline { dd, owner } => {
                Some(Box::new(SchedPath::new(dd, *owner, info, hctx, drv_depth)?))
            }
        })
    }

    /// Driver requests in flight on hctx `hi`.
    pub(super) fn driver_busy(&self, hi: usize) -> u32 {
        self.drv_busy[hi]
    }

    /// The clock of the current burst (read now if this is its first request).
    #[inline]
    pub(super) fn burst_clock(&mut self) -> u64 {
        if self.burst_ns == 0 {
            self.burst_ns = now_ns();
        }
        self.burst_ns
    }

    /// Takes a scheduler tag for `io` (a split's child issued by `poll`, mapped to `ty` with
    /// `flags`: no plug, the scheduler's depth limit) and queues it after the pending burst,
    /// to be inserted by [`SchedPath::start_resumed`]. `None` when no tag is free.
    pub(super) fn queue_resumed(
        &mut self,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
        now: u64,
    ) -> Option<u16> {
        let tag = match self.dd.limit_depth(io.op, flags) {
            None => self.tags.get(&mut self.hint),
            Some(depth) => self.tags.get_shallow(&mut self.hint, depth),
        }?;
        let rq = &mut self.pool[tag];
        rq.prepare(io, now);
        rq.flags = flags;
        rq.hctx = ty;
        // At most `per_owner` scheduler tags exist, so a pending slot is always free.
        self.pending[self.npending] = tag;
        self.npending += 1;
        Some(tag)
    }

    /// Requests submitted and not inserted yet (where `queue_resumed` adds its own).
    pub(super) fn pending_len(&self) -> usize {
        self.npending
    }

    /// Inserts the requests `queue_resumed` queued after `from` (the pending burst before
    /// them stays for the next flush) and dispatches what the driver queues have room for.
    /// Returns how many started.
    pub(super) fn start_resumed(
        &mut self,
        from: usize,
        hctx: &mut [Hctx],
        slot: &[u8],
        now: u64,
    ) -> usize {
        if self.npending == from {
            return 0;
        }
        self.insert_from(from, hctx, now);
        self.start(hctx, slot, now)
    }

    /// Forgets the burst tracked by `submit` (at flush).
    #[inline]
    fn reset_burst(&mut self) {
        self.burst_classes = 0;
        self.burst_irregular = false;
        self.prev_dir = 2;
        self.burst_end = [NO_END; 2];
        self.burst_hctx = [0; HCTX_MAX_TYPES];
    }
}

impl Drop for SchedPath {
    fn drop(&mut self) {
        // Only possible with requests still in flight; report what did complete.
        if self.deferred != [0; 3] {
            self.dd.complete_counted(self.deferred);
        }
        if !self.idle() {
            log::warn!(
                "mq-deadline owner {}: queue closed with {} requests in the scheduler or in flight",
                self.owner,
                self.tags.busy()
            );
        }
    }
}

impl BdevQueue {
    /// `submit` with a scheduler: take a scheduler tag (plug batch for synchronous reads,
    /// shallow single tag otherwise) and queue the request for the next flush.
    #[inline]
    pub(super) fn submit_sched(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
    ) -> Result<u16, SubmitError> {
        let tag = self.queue_sched(plug, io, ty, flags)?;
        self.inflight += 1;
        Ok(tag)
    }

    /// The request side of `submit_sched` (also a split's children at submit): the tag, the
    /// request, the pending list and what flush needs to know of the burst; not `inflight`.
    #[inline]
    pub(super) fn queue_sched(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        ty: HctxType,
        flags: ReqFlags,
    ) -> Result<u16, SubmitError> {
        let key = self.key;
        let Some(sp) = self.sp.as_deref_mut() else {
            return Err(SubmitError::Busy);
        };
        if sp.burst_ns == 0 {
            sp.burst_ns = now_ns();
        }
        let tag = match sp.dd.limit_depth(io.op, flags) {
            None => plug.take(key, ty, &sp.tags, &mut sp.hint),
            Some(depth) => sp.tags.get_shallow(&mut sp.hint, depth),
        }
        .ok_or(SubmitError::Busy)?;
        let rq = &mut sp.pool[tag];
        rq.prepare(io, sp.burst_ns);
        rq.flags = flags;
        // The hctx the request will be dispatched to (scheduler requests are all `Default`
        // in the pool; this field tells dispatch where to go).
        rq.hctx = ty;
        // At most `per_owner` scheduler tags exist, so a pending slot is always free.
        sp.pending[sp.npending] = tag;
        sp.npending += 1;
        // What flush needs to know to hand the burst out whole (see `flush_direct`).
        let dir = u8::from(!io.op.is_read());
        let end = io.lba.wrapping_add(u64::from(io.nblocks));
        sp.burst_classes |= 1 << (io.prio.class as u8);
        // Branch-free: `&` and `|` on bools evaluate both sides.
        sp.burst_irregular |= flags.contains(ReqFlags::HEAD)
            | ((sp.prev_dir == dir) & ((sp.prev_end == io.lba) | (end == sp.prev_start)));
        sp.prev_dir = dir;
        sp.prev_start = io.lba;
        sp.prev_end = end;
        sp.burst_end[usize::from(dir)] = end;
        sp.burst_hctx[ty.index()] += 1;
        Ok(tag)
    }

    /// One run of `submit_with` with a scheduler (the per-burst work done once: hctx mapping,
    /// the scheduler's depth limit, the burst clock and class): up to `n` I/Os until one finds
    /// no tag (then fewer queued and `None`) or needs care (returned, not queued).
    #[inline]
    pub(super) fn sched_burst_run<F>(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        shape: &BurstShape,
        n: u32,
        next: &mut F,
    ) -> (u32, Option<Io>)
    where
        F: FnMut() -> (u64, IoBuf, u64),
    {
        let mut io = *io;
        let (ty, flags) = (shape.ty, shape.flags);
        let key = self.key;
        let Some(sp) = self.sp.as_deref_mut() else {
            return (0, None);
        };
        if sp.burst_ns == 0 {
            sp.burst_ns = now_ns();
        }
        let now = sp.burst_ns;
        let depth = sp.dd.limit_depth(io.op, flags);
        let dir = u8::from(!io.op.is_read());
        let nb = u64::from(io.nblocks);
        // Every I/O of this call has direction `dir`: a predecessor in the other direction
        // (or none) becomes an extent no valid I/O touches (LBAs are below 2^48).
        let (mut prev_start, mut prev_end) = if sp.prev_dir == dir {
            (sp.prev_start, sp.prev_end)
        } else {
            (u64::MAX, u64::MAX)
        };
        let mut adjacent = false;
        let mut queued = 0u32;
        let mut care = None;
        for _ in 0..n {
            (io.lba, io.buf, io.token) = next();
            if shape.needs_care(&io) {
                care = Some(io);
                break;
            }
            let tag = match depth {
                None => plug.take(key, ty, &sp.tags, &mut sp.hint),
                Some(d) => sp.tags.get_shallow(&mut sp.hint, d),
            };
            let Some(tag) = tag else {
                break;
            };
            let rq = &mut sp.pool[tag];
            rq.prepare(&io, now);
            rq.flags = flags;
            rq.hctx = ty;
            sp.pending[sp.npending] = tag;
            sp.npending += 1;
            let end = io.lba.wrapping_add(nb);
            adjacent |= (prev_end == io.lba) | (end == prev_start);
            (prev_start, prev_end) = (io.lba, end);
            queued += 1;
        }
        if queued > 0 {
            sp.burst_classes |= 1 << (io.prio.class as u8);
            sp.burst_irregular |= adjacent || flags.contains(ReqFlags::HEAD);
            (sp.prev_dir, sp.prev_start, sp.prev_end) = (dir, prev_start, prev_end);
            sp.burst_end[usize::from(dir)] = prev_end;
            sp.burst_hctx[ty.index()] += queued;
            self.inflight += queued;
        }
        (queued, care)
    }

    /// `flush` with a scheduler: insert the burst (one lock), then dispatch what the driver
    /// queues have room for (one lock) and ring each driver once.
    pub(super) fn flush_sched(&mut self) -> usize {
        let Some(sp) = self.sp.as_deref_mut() else {
            return 0;
        };
        let now = if sp.burst_ns == 0 {
            now_ns()
        } else {
            sp.burst_ns
        };
        sp.burst_ns = 0;
        if sp.npending > 0 {
            if sp.shared
                && let Some(n) = sp.flush_direct(&mut self.hctx, &self.slot)
            {
                return n;
            }
            sp.reset_burst();
            sp.insert_pending(&self.hctx, now);
            return sp.start(&mut self.hctx, &self.slot, now);
        }
        // Nothing new: pick up what waits (requeued, or parked here by another reactor).
        if !sp.dd.has_pending() {
            return 0;
        }
        sp.dispatch(&mut self.hctx, &self.slot, now)
    }

    /// `poll` with a scheduler: reap driver completions, complete them through the scheduler
    /// (every merged member once; requests handed out by count, by count), then dispatch
    /// more if the scheduler has work.
    pub(super) fn poll_sched<F: FnMut(&Request)>(&mut self, max: usize, mut f: F) -> usize {
        let Some(sp) = self.sp.as_deref() else {
            return 0;
        };
        let shared = sp.shared;
        let refused = if sp.failed.is_empty() {
            0
        } else {
            self.fail_refused(&mut f)
        };
        if shared {
            self.poll_shared(max, f, refused)
        } else {
            self.poll_copy(max, f, refused)
        }
    }

    /// Completes the requests the scheduler refused (a bug) with `EINVAL`; returns how many.
    #[cold]
    fn fail_refused<F: FnMut(&Request)>(&mut self, f: &mut F) -> usize {
        let Some(sp) = self.sp.as_deref_mut() else {
            return 0;
        };
        let now = now_ns();
        let block_size = u64::from(self.block_size);
        for &local in &sp.failed {
            let rq = &mut sp.pool[local];
            rq.status = IoStatus::Errno(libc::EINVAL);
            report_done(
                rq,
                now,
                block_size,
                &mut self.stats,
                self.split.as_deref_mut(),
                f,
            );
        }
        sp.tags.put_batch(&mut sp.put_hint, &sp.failed);
        let n = sp.failed.len();
        sp.failed.clear();
        n
    }

    /// `poll` when the drivers run requests in the scheduler pool: the driver hands back
    /// scheduler tags. Requests handed out by count complete with one counter add per class
    /// per batch and free their tags straight from the driver's done list; the others (the
    /// scheduler chose them, maybe merged) get their own extent and clock back and complete
    /// through the scheduler, every member once. `refused`: requests `poll_sched` already
    /// completed in this call (counted in the return value).
    fn poll_shared<F: FnMut(&Request)>(&mut self, max: usize, mut f: F, refused: usize) -> usize {
        let mut members = refused;
        let (first, nh) = self.rotate_poll();
        let Some(sp) = self.sp.as_deref_mut() else {
            return members;
        };
        let block_size = u64::from(self.block_size);
        let mut reaped = 0;
        let mut now = 0;
        for i in 0..nh {
            if reaped >= max {
                break;
            }
            let hi = (first + i) % nh;
            let h = &mut self.hctx[hi];
            h.done.clear();
            let n = h
                .drv
                .poll(sp.pool.as_mut_slice(), &mut h.done, max - reaped);
            if n == 0 {
                continue;
            }
            now = now_ns();
            sp.drv_busy[hi] -= n as u32;
            let mut counted = [0u64; 3];
            let mut walk = false;
            // With nothing from the scheduler in flight every request is counted, and with
            // one class counted in flight every request is of that class: no per-request
            // look-up at all (the common case).
            let all_counted = sp.sched_inflight == 0;
            let mut busy = sp
                .counted_inflight
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0);
            let only = match (busy.next(), busy.next()) {
                (Some((c, _)), None) if all_counted => Some(c),
                _ => None,
            };
            // Children of split I/O are looked for only while some are in flight.
            let mut split = self.split.as_deref_mut().filter(|s| s.has_children());
            for &tag in &h.done {
                if !all_counted && sp.via[usize::from(tag)] != VIA_COUNTED {
                    walk = true;
                    continue;
                }
                let rq = &mut sp.pool[tag];
                if only.is_none() {
                    counted[rq.prio.class as usize] += 1;
                }
                report_done(
                    rq,
                    now,
                    block_size,
                    &mut self.stats,
                    split.as_deref_mut(),
                    &mut f,
                );
            }
            if let Some(c) = only {
                counted[c] = n as u64;
            }
            if counted != [0; 3] {
                let mut report = [0u64; 3];
                for c in 0..3 {
                    if counted[c] == 0 {
                        continue;
                    }
                    sp.counted_inflight[c] -= counted[c] as u32;
                    sp.deferred[c] += counted[c];
                    if sp.counted_inflight[c] == 0 {
                        report[c] = std::mem::take(&mut sp.deferred[c]);
                    }
                }
                if report != [0; 3] {
                    sp.dd.complete_counted(report);
                }
            }
            if !walk {
                sp.tags.put_batch(&mut sp.put_hint, &h.done);
                members += n;
                reaped += n;
                continue;
            }
            // Some came through the scheduler: restore them, complete them (and their
            // merged members) through it, and free every tag of the batch at once.
            sp.freed.clear();
            sp.done_ids.clear();
            for &tag in &h.done {
                let t = usize::from(tag);
                match sp.via[t] {
                    VIA_COUNTED => sp.freed.push(tag),
                    via => {
                        let rq = &mut sp.pool[tag];
                        rq.submit_ns = sp.saved_ns[t];
                        if via == VIA_MERGED {
                            (rq.lba, rq.nblocks, rq.buf) = sp.saved_ext[t];
                        }
                        sp.via[t] = VIA_COUNTED;
                        sp.sched_inflight -= 1;
                        sp.done_ids.push((sp.base + u32::from(tag), rq.status));
                    }
                }
            }
            let split = self.split.as_deref_mut();
            sp.complete_members(now, block_size, &mut self.stats, split, &mut f);
            // Counted requests were reported in the first pass; `freed` holds them too.
            members += sp.freed.len();
            reaped += n;
        }
        self.end_sched_poll(members, now)
    }

    /// The end of a scheduler `poll` that completed `members` requests (`now`: the clock of
    /// its last batch, 0 if none): publish the statistics, issue the children split parents
    /// wait to issue, then dispatch more if driver room was freed or another reactor parked
    /// requests for this one. Returns the I/Os completed (children only count with their
    /// parent).
    fn end_sched_poll(&mut self, mut members: usize, mut now: u64) -> usize {
        let mut resume = false;
        if let Some(s) = self.split.as_deref_mut()
            && s.needs_poll_end()
        {
            members -= s.take_absorbed();
            resume = s.has_waiting();
        }
        if resume {
            self.resume_splits();
        }
        if members > 0 {
            self.inflight -= members as u32;
            self.cell.publish(&self.stats);
        }
        let Some(sp) = self.sp.as_deref_mut() else {
            return members;
        };
        if sp.dd.has_pending() {
            if now == 0 {
                now = now_ns();
            }
            sp.dispatch(&mut self.hctx, &self.slot, now);
        }
        members
    }

    /// `poll` when started requests are copies in the driver pools: map each driver tag back
    /// to its scheduler request, free the driver tags, complete through the scheduler.
    /// `refused` as in `poll_shared`.
    fn poll_copy<F: FnMut(&Request)>(&mut self, max: usize, mut f: F, refused: usize) -> usize {
        let mut members = refused;
        let (first, nh) = self.rotate_poll();
        let Some(sp) = self.sp.as_deref_mut() else {
            return members;
        };
        let block_size = u64::from(self.block_size);
        let mut reaped = 0;
        let mut now = 0;
        for i in 0..nh {
            if reaped >= max {
                break;
            }
            let hi = (first + i) % nh;
            let h = &mut self.hctx[hi];
            h.done.clear();
            let n = h.drv.poll(h.pool.as_mut_slice(), &mut h.done, max - reaped);
            if n == 0 {
                continue;
            }
            now = now_ns();
            sp.done_ids.clear();
            let carrier = &sp.carrier[hi];
            for &dtag in &h.done {
                let local = carrier[usize::from(dtag)];
                sp.done_ids
                    .push((sp.base + u32::from(local), h.pool[dtag].status));
            }
            h.tags.put_batch(&mut h.put_hint, &h.done);
            sp.drv_busy[hi] -= n as u32;
            sp.freed.clear();
            let split = self.split.as_deref_mut();
            sp.complete_members(now, block_size, &mut self.stats, split, &mut f);
            members += sp.freed.len();
            reaped += n;
        }
        self.end_sched_poll(members, now)
    }

    /// Scheduler tags in use by this queue (0 without a scheduler).
    pub fn sched_busy_tags(&self) -> u32 {
        self.sp.as_ref().map_or(0, |sp| sp.busy())
    }
}

impl SchedPath {
    /// Completes `done_ids` through the scheduler (every merged member once, with its
    /// carrier's status), reports each member, and frees the scheduler tags in `freed` (those
    /// already there too) with one `put_batch`.
    fn complete_members<F: FnMut(&Request)>(
        &mut self,
        now: u64,
        block_size: u64,
        stats: &mut QueueStats,
        mut split: Option<&mut Splits>,
        f: &mut F,
    ) {
        let (base, pool, freed) = (self.base, &mut self.pool, &mut self.freed);
        let res = self
            .dd
            .complete_batch(self.done_ids.iter().copied(), |id, status| {
                let Some(local) = id.checked_sub(base).and_then(|l| u16::try_from(l).ok()) else {
                    log::error!("mq-deadline: completed request {id} of another owner");
                    return;
                };
                let rq = &mut pool[local];
                rq.status = status;
                report_done(rq, now, block_size, stats, split.as_deref_mut(), f);
                freed.push(local);
            });
        if let Err(e) = res {
            log::error!("mq-deadline completion: {e}");
        }
        self.tags.put_batch(&mut self.put_hint, &self.freed);
    }
}

impl SchedPath {
    /// Inserts the pending burst and dispatches what the driver queues have room for, under
    /// one lock (into `out`, started by [`SchedPath::start`]). The scheduler refuses a request
    /// only on a bug (ids and owner are checked at open, sectors by the device's size): then
    /// each is retried alone, and a refused one completes with `EINVAL` at the next poll.
    fn insert_pending(&mut self, hctx: &[Hctx], now: u64) {
        self.insert_from(0, hctx, now);
    }

    /// `insert_pending` of the pending requests after the first `from` (which stay pending).
    fn insert_from(&mut self, from: usize, hctx: &[Hctx], now: u64) {
        self.rqs.clear();
        for &t in &self.pending[from..self.npending] {
            self.rqs.push(SchedRq::from_request(
                self.base + u32::from(t),
                self.owner,
                &self.pool[t],
            ));
        }
        self.npending = from;
        let room = self.room(hctx);
        self.out.clear();
        let res = self
            .dd
            .insert_dispatch_batch(&self.rqs, self.owner, now, room, &mut self.out);
        if let Err(e) = res {
            log::error!("mq-deadline insert: {e}");
            for i in 0..self.rqs.len() {
                match self.dd.insert_batch(&self.rqs[i..=i], now) {
                    // Busy: it went in (and maybe out) with the batch.
                    Ok(_) | Err(SchedError::Busy { .. }) => {}
                    Err(e) => {
                        log::error!("mq-deadline: {e}; failing the request with EINVAL");
                        self.failed.push((self.rqs[i].id - self.base) as u16);
                    }
                }
            }
        }
    }

    /// Free driver tags over all hctxs.
    #[inline]
    fn room(&self, hctx: &[Hctx]) -> usize {
        hctx.iter()
            .zip(&self.drv_busy)
            .map(|(h, &b)| (h.tags.depth() - b) as usize)
            .sum()
    }

    /// Dispatches up to the driver queues' free room (one scheduler lock) and starts it.
    fn dispatch(&mut self, hctx: &mut [Hctx], slot: &[u8], now: u64) -> usize {
        let room = self.room(hctx);
        if room == 0 {
            return 0;
        }
        self.out.clear();
        self.dd.dispatch_batch(self.owner, now, room, &mut self.out);
        self.start(hctx, slot, now)
    }

    /// Hands the pending burst to the drivers whole, in the scheduler pool, when it is regular
    /// (one class, no HEAD, nothing adjacent to its predecessor in its direction), every hctx
    /// has room for its share, and the scheduler counts it inserted and dispatched at once
    /// ([`SharedDeadline::insert_dispatch_counted`]: nothing waits there, no higher class is
    /// queued or in flight). This is what insert + dispatch would hand out, in submission
    /// order. Returns how many started, or `None` when nothing changed.
    #[inline]
    fn flush_direct(&mut self, hctx: &mut [Hctx], slot: &[u8]) -> Option<usize> {
        let n = self.npending;
        // Requests waiting in the scheduler (lock-free hint): the full path, one lock.
        if self.burst_irregular || self.burst_classes.count_ones() != 1 || self.dd.has_pending() {
            return None;
        }
        for ty in HctxType::ALL {
            let want = self.burst_hctx[ty.index()];
            if want != 0 {
                let hi = usize::from(slot[ty.index()]);
                if hctx[hi].tags.depth() - self.drv_busy[hi] < want {
                    return None;
                }
            }
        }
        let prio = PrioClass::ALL[self.burst_classes.trailing_zeros() as usize];
        let latest = self.burst_end.map(|e| (e != NO_END).then_some(e));
        // Held-back completions are reported with this call, taken or not.
        let done = std::mem::take(&mut self.deferred);
        if !self
            .dd
            .insert_dispatch_counted(prio, n as u32, latest, done)
        {
            return None;
        }
        self.counted_inflight[prio as usize] += n as u32;
        self.npending = 0;
        if let [h] = hctx {
            self.drv_busy[0] += n as u32;
            h.drv.submit(self.pool.as_mut_slice(), &self.pending[..n]);
        } else {
            for &tag in &self.pending[..n] {
                let h = &mut hctx[usize::from(slot[self.pool[tag].hctx.index()])];
                // The room check above bounds each hctx's share by its depth.
                h.pending[h.npending] = tag;
                h.npending += 1;
            }
            for (hi, h) in hctx.iter_mut().enumerate() {
                if h.npending > 0 {
                    self.drv_busy[hi] += h.npending as u32;
                    h.drv
                        .submit(self.pool.as_mut_slice(), &h.pending[..h.npending]);
                    h.npending = 0;
                }
            }
        }
        self.reset_burst();
        Some(n)
    }

    /// Starts the handed-out requests in `out` (see `start_shared` and `start_copy`).
    #[inline]
    fn start(&mut self, hctx: &mut [Hctx], slot: &[u8], now: u64) -> usize {
        if self.shared {
            self.start_shared(hctx, slot, now)
        } else {
            self.start_copy(hctx, slot, now)
        }
    }

    /// Starts the handed-out requests in `out` where they are, in the scheduler pool: room on
    /// the request's hctx (a counter against its depth: the driver tag), the merged I/O
    /// written into the carrier (its own extent saved), the dispatch time as the driver's
    /// `submit_ns` (the submitter's saved), one driver `submit` per hctx. Requests no room is
    /// left for go back to the scheduler. Returns how many started.
    fn start_shared(&mut self, hctx: &mut [Hctx], slot: &[u8], now: u64) -> usize {
        let n = self.out.len();
        let mut started = 0;
        for k in 0..n {
            let d = self.out[k];
            let local = (d.id - self.base) as u16;
            let t = usize::from(local);
            let rq = &mut self.pool[local];
            let hi = usize::from(slot[rq.hctx.index()]);
            let h = &mut hctx[hi];
            if self.drv_busy[hi] >= h.tags.depth() {
                // This hctx is full (room was counted over all of them): give the rest back.
                if let Err(e) = self.dd.requeue_batch(self.out[k..n].iter().map(|d| d.id)) {
                    log::error!("mq-deadline requeue: {e}");
                }
                break;
            }
            self.saved_ns[t] = rq.submit_ns;
            rq.submit_ns = now;
            self.via[t] = if d.nr_members > 1 {
                self.saved_ext[t] = (rq.lba, rq.nblocks, rq.buf);
                let len = u64::from(d.nblocks) * u64::from(rq.buf.len() / rq.nblocks.max(1));
                rq.lba = d.sector;
                rq.nblocks = d.nblocks;
                if rq.op.has_data() {
                    // The carrier's own pointer, moved to the segment's start: it keeps
                    // the provenance of the region the members were cut from.
                    let ptr = rq.buf.as_ptr().with_addr(d.addr as usize);
                    // SAFETY: as in `start_copy`: the scheduler merged these requests into one
                    // segment only because their buffers are contiguous (`max_segments` is 1,
                    // checked at open), each valid until its request completes (the
                    // submitter's `IoBuf` contract), and the merged I/O completes no later
                    // than any member. The carrier's own buffer is restored at completion.
                    rq.buf = unsafe { IoBuf::from_raw_parts(ptr, len as u32) };
                }
                VIA_MERGED
            } else {
                VIA_SCHED
            };
            self.drv_busy[hi] += 1;
            h.pending[h.npending] = local;
            h.npending += 1;
            started += 1;
        }
        self.sched_inflight += started as u32;
        for h in hctx.iter_mut() {
            if h.npending > 0 {
                h.drv
                    .submit(self.pool.as_mut_slice(), &h.pending[..h.npending]);
                h.npending = 0;
            }
        }
        started
    }

    /// Starts the handed-out requests in `out`: a driver tag each (taken in batches), the
    /// (possibly merged) I/O copied into the driver's request (started at `now`), one driver
    /// `submit` per hctx.
    /// Requests no driver tag is left for go back to the scheduler. Returns how many started.
    fn start_copy(&mut self, hctx: &mut [Hctx], slot: &[u8], now: u64) -> usize {
        let n = self.out.len();
        if n == 0 {
            return 0;
        }
        let mut started = 0;
        for k in 0..n {
            let d = self.out[k];
            let local = (d.id - self.base) as u16;
            let src = self.pool[local];
            let hi = slot[src.hctx.index()] as usize;
            let h = &mut hctx[hi];
            let cache = &mut self.drv_cache[hi];
            let dtag = match cache.pop() {
                Some(t) => Some(t),
                None => match h.tags.get_batch(&mut h.hint, (n - k) as u32) {
                    Some(b) => {
                        cache.extend(b.iter());
                        cache.pop()
                    }
                    None => h.tags.get(&mut h.hint),
                },
            };
            let Some(dtag) = dtag else {
                // This hctx is full (room was counted over all of them): give the rest back.
                if let Err(e) = self.dd.requeue_batch(self.out[k..n].iter().map(|d| d.id)) {
                    log::error!("mq-deadline requeue: {e}");
                }
                break;
            };
            let drq = &mut h.pool[dtag];
            // The whole request, keeping the driver pool's own tag and hctx.
            let (tag, ty) = (drq.tag, drq.hctx);
            *drq = src;
            drq.tag = tag;
            drq.hctx = ty;
            // The driver sees the request start now (its submitter's clock stays in the
            // scheduler request, which completion reports).
            drq.submit_ns = now;
            if d.nr_members > 1 {
                drq.lba = d.sector;
                drq.nblocks = d.nblocks;
                if src.op.has_data() {
                    let len = u64::from(d.nblocks) * u64::from(src.buf.len() / src.nblocks.max(1));
                    // As in `start_shared`: the carrier's pointer, at the segment's start.
                    let ptr = src.buf.as_ptr().with_addr(d.addr as usize);
                    // SAFETY: the scheduler merged these requests into one segment only
                    // because their buffers are contiguous (`max_segments` is 1, checked at
                    // open): the range is the members' buffers end to end, each valid until
                    // its request completes (the submitter's `IoBuf` contract), and the merged
                    // I/O completes no later than any member.
                    drq.buf = unsafe { IoBuf::from_raw_parts(ptr, len as u32) };
                }
            }
            self.carrier[hi][usize::from(dtag)] = local;
            self.drv_busy[hi] += 1;
            h.pending[h.npending] = dtag;
            h.npending += 1;
            started += 1;
        }
        for (h, cache) in hctx.iter_mut().zip(&mut self.drv_cache) {
            if !cache.is_empty() {
                h.tags.put_batch(&mut h.put_hint, cache);
                cache.clear();
            }
            if h.npending > 0 {
                h.drv
                    .submit(h.pool.as_mut_slice(), &h.pending[..h.npending]);
                h.npending = 0;
            }
        }
        started
    }
}

#[cfg(test)]
mod tests;
