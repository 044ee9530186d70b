//! The I/O path with a scheduler (mq-deadline), as blk-mq runs it.
//!
//! # Files
//!
//! - `mod.rs`: [`SchedPath`], a queue's side of the scheduler, built and checked at open.
//! - `submit.rs`: taking a scheduler tag and noting the burst's shape (`submit`,
//!   `submit_with`, a split's children).
//! - `dispatch.rs`: `flush`: the counted hand-out of a regular burst, else insert and
//!   dispatch under the scheduler's lock, and starting what was handed out.
//! - `poll.rs`: reaping driver batches and completing them through the scheduler.
//! - `shared_pool.rs`: driver-tag layout 1, the driver runs requests in the scheduler pool.
//! - `driver_pool.rs`: driver-tag layout 2 (blk-mq's), a copy in a driver request.
//! - `tests.rs`: both layouts against a RAM disk, one and two owners.
//!
//! # How it works
//!
//! A [`BdevQueue`](super::BdevQueue) opened with [`SchedMode::MqDeadline`] takes requests
//! from **scheduler tags** of its own (`per_owner` of the shared scheduler's ids:
//! `2 × min(depth, 128)` by default, deeper than the driver queue), then:
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

use super::{BdevError, Hctx, SchedMode, TagSet};
use crate::bdev::BdevInfo;
use crate::bdev::stats::now_ns;
use crate::hctx::{HCTX_MAX_TYPES, HctxType};
use crate::request::{IoBuf, IoStatus};
use crate::sbitmap::AllocHint;
use crate::sched::{Dispatched, SchedRq, SharedDeadline};
use crate::tags::{RequestPool, Tags};

mod dispatch;
mod driver_pool;
mod poll;
mod shared_pool;
mod submit;

/// A queue's side of a shared mq-deadline: its scheduler tags, requests and buffers.
pub(super) struct SchedPath {
    dd: Arc<SharedDeadline>,
    owner: u16,
    /// `dd` and `owner` as the queue was opened with them (for `BdevQueue::sched`).
    mode: SchedMode,
    /// First scheduler id of this owner (`owner × per_owner`).
    base: u32,
    /// Scheduler tags (`0..per_owner`); request id = `base + tag`.
    tags: Arc<Tags>,
    pool: RequestPool,
    hint: AllocHint,
    put_hint: AllocHint,
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
    /// Shared pool, per scheduler tag: how it was started.
    via: Box<[Via]>,
    /// Shared pool, per scheduler tag started through the scheduler: the submitter's clock
    /// (the driver sees the dispatch time in `submit_ns`, as with a driver request).
    saved_ns: Box<[u64]>,
    /// Shared pool, per merged carrier: its own `lba`, `nblocks` and buffer.
    saved_ext: Box<[(u64, u32, IoBuf)]>,
    /// Submitted since the last flush: `pending[..npending]`.
    pending: Box<[u16]>,
    npending: usize,
    /// Clock of the current burst (0: not read since the last flush).
    burst_ns: u64,
    /// The pending burst, as `submit` saw it (to hand it out whole without a look at each
    /// request): classes present (bit per class), whether any is HEAD or adjacent to its
    /// predecessor in the same direction, the predecessor's direction (`NO_DIR`: none) and
    /// extent, the end of the last request per direction, and requests per hctx type.
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

/// How a request of the shared pool was started, so that its completion goes back the same way.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// Handed out by `insert_dispatch_counted`: completed by count.
    Counted,
    /// Through the scheduler: completed through it; its submit time is in `saved_ns`.
    Sched,
    /// Through the scheduler, also carrying merged members: its own extent is in `saved_ext`.
    Merged,
}

/// "No request in this direction" in `burst_end`.
const NO_END: u64 = u64::MAX;

/// "No predecessor" in `prev_dir` (directions are 0, read, and 1, write).
const NO_DIR: u8 = 2;

impl SchedPath {
    /// Builds owner `owner`'s side of `dd` for a queue whose hctxs are `hctx`.
    pub(super) fn new(
        dd: &Arc<SharedDeadline>,
        owner: u16,
        info: &BdevInfo,
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
        let TagSet {
            tags,
            pool,
            hint,
            put_hint,
        } = TagSet::new(&info.name, per_owner, HctxType::Default)?;
        let drv_total: usize = hctx.iter().map(|h| h.tags.depth() as usize).sum();
        let deepest = hctx
            .iter()
            .map(|h| h.tags.depth() as usize)
            .max()
            .unwrap_or(0);
        Ok(SchedPath {
            dd: Arc::clone(dd),
            owner,
            mode: SchedMode::MqDeadline {
                dd: Arc::clone(dd),
                owner,
            },
            base: u32::from(owner) * per_owner,
            tags,
            pool,
            hint,
            put_hint,
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
            via: vec![Via::Counted; per_owner as usize].into_boxed_slice(),
            saved_ns: vec![0; per_owner as usize].into_boxed_slice(),
            saved_ext: vec![(0, 0, IoBuf::EMPTY); per_owner as usize].into_boxed_slice(),
            pending: vec![0; per_owner as usize].into_boxed_slice(),
            npending: 0,
            burst_ns: 0,
            burst_classes: 0,
            burst_irregular: false,
            prev_dir: NO_DIR,
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
    pub(super) fn driver_depth(sched: &SchedMode, info: &BdevInfo, depth: u32) -> u32 {
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

    /// The scheduler and owner the queue was opened with.
    pub(super) fn mode(&self) -> &SchedMode {
        &self.mode
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

    /// Requests submitted and not inserted yet (where `queue_resumed` adds its own).
    pub(super) fn pending_len(&self) -> usize {
        self.npending
    }

    /// Forgets the burst tracked by `submit` (at flush).
    #[inline]
    fn reset_burst(&mut self) {
        self.burst_classes = 0;
        self.burst_irregular = false;
        self.prev_dir = NO_DIR;
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

#[cfg(test)]
mod tests;
