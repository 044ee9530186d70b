//! A reactor's handle on one block device: the submit / flush / poll path.
//!
//! [`BdevQueue::open`] opens, on the calling reactor, queue 0 of every hctx type the device
//! declares ([`crate::HctxQueues`]), each with its own [`Tags`], [`RequestPool`], allocation
//! hints, a pending list (started at the next flush) and a done list, all allocated at open.
//! The handle is not `Send`: it lives and dies on the reactor that opened it.
//!
//! One I/O: [`BdevQueue::submit`] validates it (op supported, LBA range, buffer length), maps
//! it to an hctx type, takes a request through the submitter's [`Plug`] (one batch of tags per
//! burst; a single tag outside a burst), prepares it and appends it to the pending list;
//! [`BdevQueue::flush`] hands each hctx's pending tags to its driver queue in one
//! [`DriverQueue::submit`] (one doorbell); [`BdevQueue::poll`] reaps completions in batches,
//! stamps them with one clock read per batch, updates the queue's statistics, calls the
//! caller back per request, then frees the batch's tags with one `put_batch`.
//! A full queue answers [`SubmitError::Busy`]; nothing is dropped.
//!
//! An I/O larger than the device's transfer limit, or across its boundary, becomes child
//! requests that take tags like any other and complete the parent once (see
//! [`super::split`] for the scheme, `queue/split_path.rs` for the code): the submitter sees
//! one I/O.
//!
//! No allocation, lock, or per-I/O clock read happens on this path: clocks are read once per
//! burst (first submit after a flush) and once per completion batch.
//!
//! ```
//! # use std::sync::Arc;
//! # use pmio::bdev::{BdevQueue, BdevQueueOptions};
//! # use pmio::plug::Plug;
//! # use pmio::{BlockDevice, Io, Op};
//! # fn demo(dev: Arc<dyn BlockDevice>, buf: pmio::IoBuf) -> Result<(), Box<dyn std::error::Error>> {
//! let mut q = BdevQueue::open(dev, BdevQueueOptions { depth: 128, ..Default::default() })?;
//! let mut plug = Plug::default();
//! let io = Io { op: Op::Read, lba: 0, nblocks: 8, buf, ..Io::default() };
//! plug.begin();
//! q.expect(&mut plug, &io);
//! q.submit(&mut plug, &io)?;
//! plug.finish();
//! q.flush();
//! while q.outstanding() > 0 {
//!     q.poll(32, |rq| assert!(rq.status.is_success()));
//! }
//! # Ok(()) }
//! ```

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::registry::Registry;
use super::split::{self, Splits};
use super::stats::{QueueStats, QueueStatsCell, now_ns};
use super::{BdevError, BlockDevice, DriverQueue};
use crate::hctx::{HCTX_MAX_TYPES, HctxQueues, HctxType};
use crate::plug::{DevKey, Plug};
use crate::request::{Io, IoBuf, Op, OpSet, ReqFlags, Request};
use crate::sbitmap::AllocHint;
use crate::sched::SharedDeadline;
use crate::tags::{RequestPool, Tags, TagsOptions};

mod sched_path;
use sched_path::SchedPath;

mod split_path;

/// Where requests go between submit and flush.
///
/// `None` hands them straight to the driver at flush. With `MqDeadline`, requests take
/// scheduler tags, are inserted at flush and take driver tags at dispatch (see
/// `sched_path.rs`).
#[derive(Clone, Debug, Default)]
pub enum SchedMode {
    /// No scheduler: pending requests go to the driver at the next flush.
    #[default]
    None,
    /// The device's mq-deadline, shared by the reactors that open it; this queue is its
    /// owner `owner` (`0..owners`, one per queue: owner `o` uses scheduler ids
    /// `o × per_owner ..`, its scheduler tags).
    MqDeadline {
        /// The device's scheduler.
        dd: Arc<SharedDeadline>,
        /// This queue's owner number.
        owner: u16,
    },
}

impl PartialEq for SchedMode {
    fn eq(&self, other: &SchedMode) -> bool {
        match (self, other) {
            (SchedMode::None, SchedMode::None) => true,
            (
                SchedMode::MqDeadline { dd: a, owner: x },
                SchedMode::MqDeadline { dd: b, owner: y },
            ) => Arc::ptr_eq(a, b) && x == y,
            _ => false,
        }
    }
}

impl Eq for SchedMode {}

/// Options of [`BdevQueue::open`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BdevQueueOptions {
    /// Requests in flight per hctx (driver tags); at most the device's `max_queue_depth`.
    /// Default 128.
    pub depth: u32,
    /// Scheduler (default none).
    pub sched: SchedMode,
}

impl Default for BdevQueueOptions {
    fn default() -> Self {
        BdevQueueOptions {
            depth: 128,
            sched: SchedMode::None,
        }
    }
}

/// Why an I/O was not accepted. Everything but `Busy` is the submitter's mistake.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// No request free on the hctx this I/O maps to: reap completions and retry.
    #[error("queue busy: no free request")]
    Busy,
    #[error("bdev {name}: operation {op} not supported")]
    Unsupported { name: String, op: &'static str },
    #[error("bdev {name}: blocks {lba}+{nblocks} beyond the device's {num_blocks} blocks")]
    OutOfRange {
        name: String,
        lba: u64,
        nblocks: u32,
        num_blocks: u64,
    },
    #[error("bdev {name}: {op} of 0 blocks")]
    Empty { name: String, op: &'static str },
    #[error("bdev {name}: buffer of {len} bytes for {nblocks} blocks of {block_size} bytes")]
    BadBuffer {
        name: String,
        len: u32,
        nblocks: u32,
        block_size: u32,
    },
}

impl SubmitError {
    /// Whether the I/O may succeed later unchanged.
    pub fn is_busy(&self) -> bool {
        matches!(self, SubmitError::Busy)
    }
}

/// What [`BdevQueue::burst_shape`] found of a burst's shape.
#[derive(Clone, Copy)]
struct BurstShape {
    ty: HctxType,
    flags: ReqFlags,
    /// The op has a block range (everything but flush).
    range: bool,
    /// Bytes each buffer must hold (0: the op moves no data).
    bytes: u64,
    /// Last LBA an I/O of this size may start at (`None`: larger than the device, or the
    /// device may split it).
    last_lba: Option<u64>,
}

impl BurstShape {
    /// Whether `io` (of this shape) may fail `validate` (outside the device, or a buffer of
    /// the wrong size) or need a split (`last_lba` is `None` for shapes that may): `false`
    /// means it is valid and goes out whole.
    #[inline]
    fn needs_care(&self, io: &Io) -> bool {
        self.range
            && (self.last_lba.is_none_or(|l| io.lba > l)
                || (self.bytes != 0 && u64::from(io.buf.len()) != self.bytes))
    }
}

/// One opened hardware queue with its tags and requests.
struct Hctx {
    drv: Box<dyn DriverQueue>,
    tags: Arc<Tags>,
    pool: RequestPool,
    /// The submitter's allocation hint (one submitter: the owning reactor).
    hint: AllocHint,
    /// Hint for freeing at completion.
    put_hint: AllocHint,
    /// Prepared, not yet handed to the driver: `pending[..npending]` (depth entries; a
    /// fixed array rather than a `Vec`, so an append is one store).
    pending: Box<[u16]>,
    npending: usize,
    /// The completion batch being processed (capacity: depth).
    done: Vec<u16>,
}

static NEXT_KEY: AtomicU32 = AtomicU32::new(0);

/// A reactor's queue handle on one block device. Not `Send`. See the module docs.
pub struct BdevQueue {
    dev: Arc<dyn BlockDevice>,
    name: Arc<str>,
    key: DevKey,
    block_size: u32,
    num_blocks: u64,
    max_transfer: u32,
    /// The device's boundary in blocks (0: none).
    boundary: u32,
    ops: OpSet,
    queues: HctxQueues,
    /// Opened hctxs; `slot[ty]` indexes `hctx` for each type the device has.
    hctx: Vec<Hctx>,
    slot: [u8; HCTX_MAX_TYPES],
    sched: SchedMode,
    /// The scheduler path (`None` without a scheduler; see `sched_path.rs`).
    sp: Option<Box<SchedPath>>,
    /// Split parents in progress (`None` when the device takes any I/O whole).
    split: Option<Box<Splits>>,
    /// Clock of the current burst (0: not read yet since the last flush; always 0 with a
    /// scheduler, so `submit` diverts to it inside its once-per-burst branch).
    burst_ns: u64,
    /// Submitted (pending or started) and not yet reaped.
    inflight: u32,
    /// The hctx `poll` visits first: rotated per call so a busy queue cannot keep `max`
    /// completions coming and leave another queue (and a doorbell its driver defers to poll,
    /// see `DriverQueue::submit`) waiting.
    poll_first: usize,
    stats: QueueStats,
    cell: Arc<QueueStatsCell>,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for BdevQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BdevQueue")
            .field("bdev", &self.name)
            .field("key", &self.key)
            .field("hctxs", &self.hctx.len())
            .field("inflight", &self.inflight)
            .finish()
    }
}

const NO_SLOT: u8 = u8::MAX;

impl BdevQueue {
    /// Opens `dev` on the calling reactor: queue 0 of each hctx type the device declares,
    /// `opts.depth` deep. A device with several queues of one type offers them to several
    /// openers; one handle uses one queue per type.
    pub fn open(dev: Arc<dyn BlockDevice>, opts: BdevQueueOptions) -> Result<BdevQueue, BdevError> {
        let info = dev.info();
        let name: Arc<str> = Arc::from(info.name.as_str());
        let invalid = |reason: String| BdevError::InvalidConfig {
            name: info.name.clone(),
            reason,
        };
        if opts.depth == 0 || opts.depth > info.max_queue_depth.min(65535) {
            return Err(invalid(format!(
                "queue depth {} outside 1..={}",
                opts.depth,
                info.max_queue_depth.min(65535)
            )));
        }
        if info.queues.default == 0 {
            return Err(invalid("device declares no default queue".into()));
        }
        if info.max_transfer_blocks == 0 {
            return Err(invalid("max transfer of 0 blocks".into()));
        }
        let mut hctx = Vec::with_capacity(HCTX_MAX_TYPES);
        let mut slot = [NO_SLOT; HCTX_MAX_TYPES];
        // With a scheduler the driver may be opened deeper than `depth` (a command id per
        // scheduler tag); `depth` stays the limit on requests in flight.
        let drv_depth = SchedPath::driver_depth(&opts.sched, info, opts.depth);
        // The block layer's clock calibrates itself at its first reading (a few ms asleep):
        // here, not in the first I/O's submit.
        now_ns();
        for ty in HctxType::ALL {
            if info.queues.count(ty) == 0 {
                continue;
            }
            let drv = dev.open_queue(ty, 0, drv_depth)?;
            let tags = Tags::new(TagsOptions {
                depth: opts.depth,
                ..TagsOptions::default()
            })
            .map_err(|e| invalid(e.to_string()))?;
            let pool = RequestPool::new(&tags, ty);
            let hint = tags.new_hint();
            let put_hint = tags.new_hint();
            slot[ty.index()] = hctx.len() as u8;
            hctx.push(Hctx {
                drv,
                tags: Arc::new(tags),
                pool,
                hint,
                put_hint,
                pending: vec![0; opts.depth as usize].into_boxed_slice(),
                npending: 0,
                done: Vec::with_capacity(opts.depth as usize),
            });
        }
        let sp = SchedPath::for_mode(&opts.sched, info, &hctx, drv_depth)?;
        // Every parent in progress holds a tag: as many parents as tags.
        let split =
            (info.max_transfer_blocks != u32::MAX || info.boundary_blocks != 0).then(|| {
                let tags = match &sp {
                    Some(sp) => sp.tags().depth(),
                    None => opts.depth * hctx.len() as u32,
                };
                Box::new(Splits::new(
                    tags,
                    info.max_transfer_blocks,
                    info.boundary_blocks,
                    info.block_size,
                ))
            });
        Ok(BdevQueue {
            name,
            key: DevKey(NEXT_KEY.fetch_add(1, Ordering::Relaxed)),
            block_size: info.block_size,
            num_blocks: info.num_blocks,
            max_transfer: info.max_transfer_blocks,
            boundary: info.boundary_blocks,
            ops: info.supported_ops,
            queues: info.queues,
            hctx,
            slot,
            sched: opts.sched,
            sp,
            split,
            burst_ns: 0,
            inflight: 0,
            poll_first: 0,
            stats: QueueStats::default(),
            cell: Arc::new(QueueStatsCell::new()),
            _not_send: PhantomData,
            dev,
        })
    }

    /// Opens the registered device `name` (see [`BdevQueue::open`]) and adds this queue's
    /// statistics to the registry's totals for it ([`Registry::device_stats`]).
    pub fn open_in(
        registry: &Registry,
        name: &str,
        opts: BdevQueueOptions,
    ) -> Result<BdevQueue, BdevError> {
        let dev = registry
            .get(name)
            .ok_or_else(|| BdevError::NotFound(name.to_string()))?;
        let q = BdevQueue::open(dev, opts)?;
        registry.attach_stats(name, q.stats_cell())?;
        Ok(q)
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This handle's key in plugs.
    pub fn key(&self) -> DevKey {
        self.key
    }

    /// Logical block size.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Number of logical blocks.
    pub fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    /// The scheduler mode.
    pub fn sched(&self) -> &SchedMode {
        &self.sched
    }

    /// I/Os submitted and not yet reaped (pending ones included).
    pub fn outstanding(&self) -> u32 {
        self.inflight
    }

    /// Binds `plug`'s cache entries for this device ahead of the first burst (optional).
    pub fn register_plug(&self, plug: &mut Plug) {
        for ty in HctxType::ALL {
            if let Some(h) = self.hctx_of(ty) {
                let tags = self.sp.as_ref().map_or(&h.tags, |sp| sp.tags());
                plug.register(self.key, ty, tags);
            }
        }
    }

    fn hctx_of(&self, ty: HctxType) -> Option<&Hctx> {
        self.hctx.get(self.slot[ty.index()] as usize)
    }

    /// Counts `io` for the plug's next batch allocation (call for each I/O of a burst
    /// before submitting them, as blk-mq's plug sizes its batch).
    #[inline]
    pub fn expect(&self, plug: &mut Plug, io: &Io) {
        self.expect_n(plug, io, 1);
    }

    /// Counts `n` I/Os shaped like `io` (same op and flags) at once (an I/O the device
    /// takes in several requests counts as its children).
    #[inline]
    pub fn expect_n(&self, plug: &mut Plug, io: &Io, n: u32) {
        let (ty, _) = self.queues.map(io.op, io.flags);
        let per = split::expected_children(io.nblocks, self.max_transfer);
        plug.expect(self.key, ty, n.saturating_mul(per));
    }

    /// Validates `io`, takes a request for it and queues it for the next [`flush`]. Returns
    /// the request's tag. [`SubmitError::Busy`] when its hctx has no free request.
    ///
    /// An I/O the device cannot take whole (above its `max_transfer_blocks`, or across its
    /// `boundary_blocks`) is split into child requests ([`super::split`]): accepted once its
    /// first child has a tag (that tag is returned), refused with `Busy` with nothing queued
    /// otherwise; children that found no tag are issued and started by later `poll`s. Its
    /// completion is reported once, after the last child, with the first error of any.
    ///
    /// [`flush`]: BdevQueue::flush
    #[inline]
    pub fn submit(&mut self, plug: &mut Plug, io: &Io) -> Result<u16, SubmitError> {
        self.validate(io)?;
        if split::must_split(io.lba, io.nblocks, self.max_transfer, self.boundary) {
            return self.submit_split(plug, io);
        }
        let (ty, flags) = self.queues.map(io.op, io.flags);
        if self.burst_ns == 0 {
            if self.sp.is_some() {
                return self.submit_sched(plug, io, ty, flags);
            }
            self.burst_ns = now_ns();
        }
        let now = self.burst_ns;
        let h = &mut self.hctx[self.slot[ty.index()] as usize];
        let tag = plug
            .take(self.key, ty, &h.tags, &mut h.hint)
            .ok_or(SubmitError::Busy)?;
        let rq = &mut h.pool[tag];
        rq.prepare(io, now);
        rq.flags = flags;
        // At most `depth` tags exist, so a pending slot is always free.
        h.pending[h.npending] = tag;
        h.npending += 1;
        self.inflight += 1;
        Ok(tag)
    }

    /// Submits up to `n` I/Os shaped like `io` (its op, flags, priority and block count),
    /// `next()` giving each one's LBA, buffer and token: the same as `n` calls of
    /// [`submit`](BdevQueue::submit) with `io` updated from `next()` before each, but the
    /// per-burst work (op checks, hctx mapping, the burst clock) is done once.
    ///
    /// Stops at the first I/O that cannot be queued and returns how many were queued, with
    /// the reason: `Busy` (no free request), or the I/O's validation error. `next()` was
    /// then called once more than the count queued (that I/O is the one refused), except when
    /// the shape itself is refused (unsupported op, 0 blocks) before any call.
    ///
    /// I/Os the device may have to split (longer than its transfer limit, or any I/O on a
    /// device with a boundary) go through `submit` one by one, inside the burst.
    #[inline]
    pub fn submit_with<F>(
        &mut self,
        plug: &mut Plug,
        io: &Io,
        n: u32,
        mut next: F,
    ) -> (u32, Option<SubmitError>)
    where
        F: FnMut() -> (u64, IoBuf, u64),
    {
        if n == 0 {
            return (0, None);
        }
        let shape = match self.burst_shape(io) {
            Ok(shape) => shape,
            Err(e) => return (0, Some(e)),
        };
        let sched = self.sp.is_some();
        let mut done = 0;
        loop {
            // One branch per run of the burst, not per I/O.
            let (queued, care) = if sched {
                self.sched_burst_run(plug, io, &shape, n - done, &mut next)
            } else {
                self.burst_run(plug, io, &shape, n - done, &mut next)
            };
            done += queued;
            let Some(care) = care else {
                return (done, (done < n).then_some(SubmitError::Busy));
            };
            // Invalid, or to be split: the whole of `submit`, then on with the burst.
            if let Err(e) = self.submit(plug, &care) {
                return (done, Some(e));
            }
            done += 1;
            if done == n {
                return (n, None);
            }
        }
    }

    /// One run of `submit_with` (no scheduler): up to `n` I/Os until one finds no tag (then
    /// fewer queued and `None`) or needs care (returned, not queued).
    #[inline]
    fn burst_run<F>(
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
        if self.burst_ns == 0 {
            self.burst_ns = now_ns();
        }
        let now = self.burst_ns;
        let hi = self.slot[ty.index()] as usize;
        for i in 0..n {
            (io.lba, io.buf, io.token) = next();
            if shape.needs_care(&io) {
                self.inflight += i;
                return (i, Some(io));
            }
            let h = &mut self.hctx[hi];
            let Some(tag) = plug.take(self.key, ty, &h.tags, &mut h.hint) else {
                self.inflight += i;
                return (i, None);
            };
            let rq = &mut h.pool[tag];
            rq.prepare(&io, now);
            rq.flags = flags;
            h.pending[h.npending] = tag;
            h.npending += 1;
        }
        self.inflight += n;
        (n, None)
    }

    /// The checks of a `submit_with` burst that depend only on its shape (`io`'s op, flags
    /// and block count), done once: the op is supported and the block count allowed (else
    /// the error `validate` gives), the hctx type and flags it maps to, and what is left to
    /// check per I/O. When the device may have to split I/Os of this shape (longer than its
    /// transfer limit, or it has a boundary), every I/O needs care.
    #[inline]
    fn burst_shape(&self, io: &Io) -> Result<BurstShape, SubmitError> {
        // A flush has no range or buffer to check.
        let range = io.op != Op::Flush;
        if !self.ops.contains(io.op) || (range && io.nblocks == 0) {
            self.validate(io)?;
        }
        let (ty, flags) = self.queues.map(io.op, io.flags);
        Ok(BurstShape {
            ty,
            flags,
            range,
            bytes: if io.op.has_data() {
                u64::from(io.nblocks) * u64::from(self.block_size)
            } else {
                0
            },
            last_lba: if io.nblocks > self.max_transfer || self.boundary != 0 {
                None
            } else {
                self.num_blocks.checked_sub(u64::from(io.nblocks))
            },
        })
    }

    #[inline]
    fn validate(&self, io: &Io) -> Result<(), SubmitError> {
        if !self.ops.contains(io.op) {
            return Err(self.unsupported(io));
        }
        if io.op == Op::Flush {
            return Ok(());
        }
        let end = io.lba.checked_add(u64::from(io.nblocks));
        if io.nblocks == 0 || end.is_none_or(|e| e > self.num_blocks) {
            return Err(self.bad_range(io));
        }
        if io.op.has_data()
            && u64::from(io.buf.len()) != u64::from(io.nblocks) * u64::from(self.block_size)
        {
            return Err(SubmitError::BadBuffer {
                name: self.name.to_string(),
                len: io.buf.len(),
                nblocks: io.nblocks,
                block_size: self.block_size,
            });
        }
        Ok(())
    }

    #[cold]
    fn unsupported(&self, io: &Io) -> SubmitError {
        SubmitError::Unsupported {
            name: self.name.to_string(),
            op: io.op.name(),
        }
    }

    #[cold]
    fn bad_range(&self, io: &Io) -> SubmitError {
        let name = self.name.to_string();
        if io.nblocks == 0 {
            SubmitError::Empty {
                name,
                op: io.op.name(),
            }
        } else {
            SubmitError::OutOfRange {
                name,
                lba: io.lba,
                nblocks: io.nblocks,
                num_blocks: self.num_blocks,
            }
        }
    }

    /// Starts every pending request: one driver `submit` call (one doorbell) per hctx that
    /// has any. Returns how many were started.
    #[inline]
    pub fn flush(&mut self) -> usize {
        self.burst_ns = 0;
        let mut n = 0;
        match self.sched {
            SchedMode::MqDeadline { .. } => return self.flush_sched(),
            SchedMode::None => {
                for h in &mut self.hctx {
                    if h.npending == 0 {
                        continue;
                    }
                    h.drv
                        .submit(h.pool.as_mut_slice(), &h.pending[..h.npending]);
                    n += h.npending;
                    h.npending = 0;
                }
            }
        }
        n
    }

    /// Reaps up to `max` completions (in driver batches of at most `max`), calls `f` for each
    /// completed request (status, token, `submit_ns`, `complete_ns` are set), updates the
    /// statistics, and frees the tags. Returns how many completed.
    #[inline]
    pub fn poll<F: FnMut(&Request)>(&mut self, max: usize, mut f: F) -> usize {
        if self.sp.is_some() {
            return self.poll_sched(max, f);
        }
        let mut total = 0;
        let (first, nh) = self.rotate_poll();
        for i in 0..nh {
            if total >= max {
                break;
            }
            let h = &mut self.hctx[(first + i) % nh];
            h.done.clear();
            let n = h.drv.poll(h.pool.as_mut_slice(), &mut h.done, max - total);
            if n == 0 {
                continue;
            }
            let now = now_ns();
            let block_size = u64::from(self.block_size);
            // Children of split I/O are looked for only while some are in flight: the batch
            // loop of everything else is the one without them.
            match self.split.as_deref_mut().filter(|s| s.has_children()) {
                None => {
                    for &tag in &h.done {
                        let rq = &mut h.pool[tag];
                        report_done(rq, now, block_size, &mut self.stats, None, &mut f);
                    }
                }
                Some(s) => {
                    for &tag in &h.done {
                        let rq = &mut h.pool[tag];
                        report_done(rq, now, block_size, &mut self.stats, Some(s), &mut f);
                    }
                }
            }
            h.tags.put_batch(&mut h.put_hint, &h.done);
            total += n;
        }
        if let Some(s) = self.split.as_deref()
            && s.needs_poll_end()
        {
            return self.poll_end_split(total);
        }
        if total > 0 {
            self.inflight -= total as u32;
            self.cell.publish(&self.stats);
        }
        total
    }

    /// The hctx a `poll` visits first and how many there are; the next `poll` starts at the
    /// one after it, so a queue that keeps returning `max` completions cannot starve another.
    #[inline]
    fn rotate_poll(&mut self) -> (usize, usize) {
        let nh = self.hctx.len();
        let first = self.poll_first;
        if nh > 1 {
            self.poll_first = (first + 1) % nh;
        }
        (first, nh)
    }

    /// This queue's statistics so far.
    pub fn stats(&self) -> &QueueStats {
        &self.stats
    }

    /// The shared cell other threads read this queue's statistics from (updated once per
    /// completion batch).
    pub fn stats_cell(&self) -> Arc<QueueStatsCell> {
        Arc::clone(&self.cell)
    }

    /// Driver tags in use on `ty`'s hctx (0 when the device has none of that type).
    pub fn busy_tags(&self, ty: HctxType) -> u32 {
        let Some(h) = self.hctx_of(ty) else {
            return 0;
        };
        match &self.sp {
            // The scheduler path counts its driver requests itself.
            Some(sp) => sp.driver_busy(usize::from(self.slot[ty.index()])),
            None => h.tags.busy(),
        }
    }
}

/// Stamps `rq` complete at `now`, records it in `stats` and reports it to `f`; with `split`
/// (children in flight), a split's child goes to its parent instead, which is recorded and
/// reported with its last child.
// Always inlined: it runs per I/O, and as a call it is not inlined into pmio-perf's poller;
// called with `None`, the child check compiles away.
#[inline(always)]
fn report_done<F: FnMut(&Request)>(
    rq: &mut Request,
    now: u64,
    block_size: u64,
    stats: &mut QueueStats,
    split: Option<&mut Splits>,
    f: &mut F,
) {
    rq.complete_ns = now;
    if let Some(split) = split
        && rq.flags.contains(ReqFlags::CHILD)
    {
        split_path::report_child(rq, now, block_size, stats, split, f);
        return;
    }
    record_done(rq, now, block_size, stats, f);
}

/// Records the completed `rq` (stamped at `now`) in `stats` and reports it to `f`.
#[inline(always)]
fn record_done<F: FnMut(&Request)>(
    rq: &Request,
    now: u64,
    block_size: u64,
    stats: &mut QueueStats,
    f: &mut F,
) {
    let lat = now.saturating_sub(rq.submit_ns);
    let bytes = if rq.op.has_data() {
        u64::from(rq.nblocks) * block_size
    } else {
        0
    };
    stats
        .op_mut(rq.op)
        .record(bytes, lat, rq.status.is_success());
    f(rq);
}

impl Drop for BdevQueue {
    fn drop(&mut self) {
        if self.inflight > 0 {
            log::warn!(
                "bdev {}: queue closed with {} I/O outstanding",
                self.name,
                self.inflight
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bdev::{BdevInfo, Uuid};
    use crate::request::{IoBuf, IoStatus};
    use std::cell::RefCell;
    use std::collections::{HashSet, VecDeque};
    use std::rc::Rc;

    /// What the test driver saw.
    #[derive(Default)]
    struct Log {
        submit_calls: Vec<(HctxType, usize)>,
        started: HashSet<(HctxType, u16)>,
    }

    struct TestDev {
        info: BdevInfo,
        fail_lba: Option<u64>,
        log: Arc<parking_lot::Mutex<Log>>,
    }

    struct TestQueue {
        ty: HctxType,
        fifo: VecDeque<u16>,
        fail_lba: Option<u64>,
        log: Arc<parking_lot::Mutex<Log>>,
    }

    impl BlockDevice for TestDev {
        fn info(&self) -> &BdevInfo {
            &self.info
        }
        fn open_queue(
            &self,
            ty: HctxType,
            _i: u16,
            _d: u32,
        ) -> Result<Box<dyn DriverQueue>, BdevError> {
            Ok(Box::new(TestQueue {
                ty,
                fifo: VecDeque::new(),
                fail_lba: self.fail_lba,
                log: Arc::clone(&self.log),
            }))
        }
    }

    impl DriverQueue for TestQueue {
        fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
            let mut log = self.log.lock();
            log.submit_calls.push((self.ty, tags.len()));
            for &t in tags {
                assert!(log.started.insert((self.ty, t)), "tag {t} handed out twice");
                assert_eq!(rqs[t as usize].hctx, self.ty);
                self.fifo.push_back(t);
            }
        }
        fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
            let mut log = self.log.lock();
            let mut n = 0;
            while n < max {
                let Some(t) = self.fifo.pop_front() else {
                    break;
                };
                let rq = &mut rqs[t as usize];
                rq.status = if Some(rq.lba) == self.fail_lba {
                    IoStatus::Errno(libc::EIO)
                } else {
                    IoStatus::Success
                };
                log.started.remove(&(self.ty, t));
                done.push(t);
                n += 1;
            }
            n
        }
        fn outstanding(&self) -> usize {
            self.fifo.len()
        }
    }

    fn dev(
        queues: HctxQueues,
        fail_lba: Option<u64>,
    ) -> (Arc<dyn BlockDevice>, Arc<parking_lot::Mutex<Log>>) {
        let log = Arc::new(parking_lot::Mutex::new(Log::default()));
        let d = TestDev {
            info: BdevInfo {
                name: "T0".into(),
                uuid: Uuid::default(),
                product_name: "Test".into(),
                block_size: 512,
                num_blocks: 1024,
                supported_ops: OpSet::READ_WRITE.with(Op::Flush),
                queues,
                max_queue_depth: 256,
                max_transfer_blocks: 64,
                boundary_blocks: 0,
            },
            fail_lba,
            log: Arc::clone(&log),
        };
        (Arc::new(d), log)
    }

    fn read(lba: u64, buf: &mut [u8]) -> Io {
        Io {
            op: Op::Read,
            lba,
            nblocks: (buf.len() / 512) as u32,
            // SAFETY: the tests keep `buf` alive and untouched until the I/O completes.
            buf: unsafe { IoBuf::from_raw_parts(buf.as_mut_ptr(), buf.len() as u32) },
            token: lba,
            ..Io::default()
        }
    }

    #[test]
    fn busy_when_full_nothing_dropped_each_completes_once() {
        let (d, log) = dev(HctxQueues::DEFAULT_ONLY, None);
        let mut q = BdevQueue::open(
            d,
            BdevQueueOptions {
                depth: 16,
                ..Default::default()
            },
        )
        .unwrap();
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 512];
        let mut tags = HashSet::new();
        for i in 0..16 {
            let t = q.submit(&mut plug, &read(i, &mut buf)).unwrap();
            assert!(tags.insert(t), "tag {t} given twice");
        }
        assert_eq!(
            q.submit(&mut plug, &read(99, &mut buf)),
            Err(SubmitError::Busy)
        );
        assert_eq!(q.outstanding(), 16);
        assert_eq!(q.flush(), 16);
        assert_eq!(
            log.lock().submit_calls,
            vec![(HctxType::Default, 16)],
            "one doorbell"
        );
        let mut seen = Vec::new();
        let n = q.poll(10, |rq| seen.push(rq.token));
        assert_eq!(n, 10);
        // Freed tags are reusable right away.
        for i in 0..10 {
            q.submit(&mut plug, &read(100 + i, &mut buf)).unwrap();
        }
        assert!(
            q.submit(&mut plug, &read(0, &mut buf))
                .unwrap_err()
                .is_busy()
        );
        q.flush();
        while q.outstanding() > 0 {
            q.poll(7, |rq| seen.push(rq.token));
        }
        seen.sort_unstable();
        let mut want: Vec<u64> = (0..16).chain(100..110).collect();
        want.sort_unstable();
        assert_eq!(seen, want, "every I/O completed exactly once");
        assert_eq!(q.busy_tags(HctxType::Default), 0);
        assert!(log.lock().started.is_empty());
    }

    fn write(lba: u64, buf: &mut [u8]) -> Io {
        Io {
            op: Op::Write,
            ..read(lba, buf)
        }
    }

    /// A queue that always has `max` completions ready must not keep `poll` from visiting the
    /// device's other queue.
    #[test]
    fn poll_visits_every_hctx_while_one_stays_busy() {
        let queues = HctxQueues {
            default: 1,
            read: 1,
            poll: 0,
        };
        let (d, _log) = dev(queues, None);
        let opts = BdevQueueOptions {
            depth: 16,
            ..Default::default()
        };
        let mut q = BdevQueue::open(d, opts).unwrap();
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 512];
        for i in 0..16 {
            q.submit(&mut plug, &read(i, &mut buf)).unwrap();
        }
        let mut reads_reaped = 0;
        for _ in 0..4 {
            // Keep the default (write) queue full: it alone could answer every poll.
            while q.busy_tags(HctxType::Default) < 16 {
                q.submit(&mut plug, &write(500, &mut buf)).unwrap();
            }
            q.flush();
            q.poll(16, |rq| reads_reaped += usize::from(rq.op == Op::Read));
        }
        assert_eq!(reads_reaped, 16, "the read queue was never polled");
    }

    #[test]
    fn submit_with_matches_single_submits_and_stops_at_busy_or_bad_io() {
        let (d, log) = dev(HctxQueues::DEFAULT_ONLY, None);
        let mut q = BdevQueue::open(
            d,
            BdevQueueOptions {
                depth: 16,
                ..Default::default()
            },
        )
        .unwrap();
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 512];
        let shape = read(0, &mut buf);
        let mut calls = 0u64;
        plug.begin();
        q.expect_n(&mut plug, &shape, 10);
        let (n, err) = q.submit_with(&mut plug, &shape, 10, || {
            calls += 1;
            (calls, shape.buf, 100 + calls)
        });
        plug.finish();
        assert_eq!((n, err, calls), (10, None, 10));
        assert_eq!(q.outstanding(), 10);
        assert_eq!(plug.stats().cache_misses, 0, "one batch for the burst");
        // 6 tags left: the 7th I/O is refused as busy, after its `next()`.
        let (n, err) = q.submit_with(&mut plug, &shape, 8, || {
            calls += 1;
            (calls, shape.buf, 100 + calls)
        });
        assert_eq!((n, err, calls), (6, Some(SubmitError::Busy), 17));
        assert_eq!(q.outstanding(), 16);
        assert_eq!(q.flush(), 16);
        assert_eq!(log.lock().submit_calls, vec![(HctxType::Default, 16)]);
        let mut tokens = Vec::new();
        while q.outstanding() > 0 {
            q.poll(16, |rq| {
                assert_eq!(rq.lba + 100, rq.token);
                tokens.push(rq.token);
            });
        }
        tokens.sort_unstable();
        assert_eq!(tokens, (101..=116).collect::<Vec<u64>>());
        // An I/O past the end stops the burst with the error `submit` gives; the shape
        // itself (0 blocks) is refused before any `next()`.
        let (n, err) = q.submit_with(&mut plug, &shape, 4, || {
            calls += 1;
            let lba = if calls == 20 { 1024 } else { 0 };
            (lba, shape.buf, 0)
        });
        assert_eq!(n, 2);
        assert!(
            matches!(err, Some(SubmitError::OutOfRange { lba: 1024, .. })),
            "{err:?}"
        );
        assert_eq!(q.outstanding(), 2);
        let mut bad = vec![0u8; 1024];
        let mut wrong = read(0, &mut bad);
        wrong.nblocks = 1; // 1024 bytes for 1 block of 512
        assert!(matches!(
            q.submit_with(&mut plug, &wrong, 1, || (0, wrong.buf, 0)).1,
            Some(SubmitError::BadBuffer { .. })
        ));
        wrong.nblocks = 0;
        let before = calls;
        let (n, err) = q.submit_with(&mut plug, &wrong, 3, || {
            calls += 1;
            (0, shape.buf, 0)
        });
        assert_eq!((n, calls), (0, before));
        assert!(matches!(err, Some(SubmitError::Empty { .. })));
        q.flush();
        while q.outstanding() > 0 {
            q.poll(16, |_| {});
        }
        assert_eq!(
            q.busy_tags(HctxType::Default),
            0,
            "refused I/Os hold no tag"
        );
    }

    #[test]
    fn plug_burst_allocates_in_a_batch() {
        let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
        let mut q = BdevQueue::open(d, BdevQueueOptions::default()).unwrap();
        let mut plug = Plug::default();
        q.register_plug(&mut plug);
        let mut buf = vec![0u8; 512];
        for _round in 0..50 {
            plug.begin();
            let io = read(1, &mut buf);
            q.expect_n(&mut plug, &io, 32);
            let mut got = HashSet::new();
            for _ in 0..32 {
                assert!(got.insert(q.submit(&mut plug, &io).unwrap()));
            }
            plug.finish();
            q.flush();
            let mut n = 0;
            while n < 32 {
                n += q.poll(32, |_| {});
            }
        }
        let s = plug.stats();
        assert_eq!(s.cache_misses, 0, "{s:?}");
        assert!(s.batches_obtained >= 50, "{s:?}");
        assert_eq!(q.busy_tags(HctxType::Default), 0);
    }

    #[test]
    fn invalid_ios_are_rejected_with_clear_errors() {
        let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
        let mut q = BdevQueue::open(d, BdevQueueOptions::default()).unwrap();
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 1024];
        let mut io = read(1023, &mut buf);
        assert!(matches!(
            q.submit(&mut plug, &io),
            Err(SubmitError::OutOfRange { .. })
        ));
        io.lba = u64::MAX;
        assert!(matches!(
            q.submit(&mut plug, &io),
            Err(SubmitError::OutOfRange { .. })
        ));
        io.lba = 0;
        io.nblocks = 3;
        let e = q.submit(&mut plug, &io).unwrap_err();
        assert!(matches!(e, SubmitError::BadBuffer { .. }));
        assert!(e.to_string().contains("1024 bytes for 3 blocks"), "{e}");
        io.nblocks = 0;
        assert!(matches!(
            q.submit(&mut plug, &io),
            Err(SubmitError::Empty { .. })
        ));
        // More than the largest transfer (64 blocks) is split, not refused: only the buffer
        // is wrong here.
        io.nblocks = 65;
        assert!(matches!(
            q.submit(&mut plug, &io),
            Err(SubmitError::BadBuffer { .. })
        ));
        io.op = Op::Discard;
        io.nblocks = 1;
        let e = q.submit(&mut plug, &io).unwrap_err();
        assert_eq!(e.to_string(), "bdev T0: operation unmap not supported");
        let flush = Io {
            op: Op::Flush,
            ..Io::default()
        };
        assert!(q.submit(&mut plug, &flush).is_ok());
        assert_eq!(q.outstanding(), 1, "rejected I/Os took no request");
        q.flush();
        assert_eq!(q.poll(8, |_| {}), 1);
    }

    #[test]
    fn stats_count_ops_bytes_errors_and_latency() {
        let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, Some(5));
        let mut q = BdevQueue::open(d, BdevQueueOptions::default()).unwrap();
        let cell = q.stats_cell();
        let mut plug = Plug::default();
        let mut rbuf = vec![0u8; 2048];
        let mut wbuf = vec![0u8; 512];
        q.submit(&mut plug, &read(0, &mut rbuf)).unwrap();
        q.submit(&mut plug, &read(5, &mut rbuf)).unwrap();
        let mut w = read(7, &mut wbuf);
        w.op = Op::Write;
        q.submit(&mut plug, &w).unwrap();
        q.flush();
        let statuses = Rc::new(RefCell::new(Vec::new()));
        let s2 = Rc::clone(&statuses);
        while q.outstanding() > 0 {
            q.poll(32, |rq| {
                assert!(rq.complete_ns >= rq.submit_ns && rq.submit_ns > 0);
                s2.borrow_mut().push((rq.lba, rq.status));
            });
        }
        assert!(statuses.borrow().contains(&(5, IoStatus::Errno(libc::EIO))));
        let s = q.stats();
        let r = s.op(Op::Read);
        assert_eq!((r.ops, r.bytes, r.errors), (2, 2048, 1));
        let wr = s.op(Op::Write);
        assert_eq!((wr.ops, wr.bytes, wr.errors), (1, 512, 0));
        assert!(r.lat_min_ns <= r.lat_max_ns && r.lat_sum_ns >= r.lat_max_ns);
        assert_eq!(cell.load(), *s, "published to the shared cell");
    }

    #[test]
    fn reads_use_read_queues_when_the_device_has_them() {
        let (d, log) = dev(
            HctxQueues {
                default: 1,
                read: 1,
                poll: 0,
            },
            None,
        );
        let mut q = BdevQueue::open(
            d,
            BdevQueueOptions {
                depth: 4,
                ..Default::default()
            },
        )
        .unwrap();
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 512];
        for i in 0..4 {
            q.submit(&mut plug, &read(i, &mut buf)).unwrap();
        }
        assert!(
            q.submit(&mut plug, &read(9, &mut buf))
                .unwrap_err()
                .is_busy()
        );
        let mut w = read(9, &mut buf);
        w.op = Op::Write;
        q.submit(&mut plug, &w).expect("writes have their own hctx");
        q.flush();
        let calls = log.lock().submit_calls.clone();
        assert_eq!(calls, vec![(HctxType::Default, 1), (HctxType::Read, 4)]);
        assert_eq!(q.busy_tags(HctxType::Read), 4);
        let mut n = 0;
        while q.outstanding() > 0 {
            n += q.poll(2, |_| {});
        }
        assert_eq!(n, 5);
    }

    #[test]
    fn open_in_feeds_the_registry_totals() {
        let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
        let reg = Registry::new();
        reg.register(d).unwrap();
        assert!(matches!(
            BdevQueue::open_in(&reg, "nope", BdevQueueOptions::default()),
            Err(BdevError::NotFound(_))
        ));
        let mut plug = Plug::default();
        let mut buf = vec![0u8; 512];
        for _ in 0..2 {
            let mut q = BdevQueue::open_in(&reg, "T0", BdevQueueOptions::default()).unwrap();
            q.submit(&mut plug, &read(3, &mut buf)).unwrap();
            q.flush();
            while q.poll(8, |_| {}) == 0 {}
        }
        let t = reg.device_stats("T0").unwrap();
        assert_eq!(t.op(Op::Read).ops, 2, "closed queues keep counting");
        assert_eq!(t.op(Op::Read).bytes, 1024);
    }

    #[derive(Clone, Debug)]
    enum Action {
        /// A burst of `n` I/Os (reads if `read`), under a plug or not.
        Submit {
            n: u8,
            read: bool,
            plug: bool,
        },
        Flush,
        Poll {
            max: u8,
        },
    }

    fn action() -> impl proptest::strategy::Strategy<Value = Action> {
        use proptest::prelude::*;
        prop_oneof![
            (1u8..12, any::<bool>(), any::<bool>()).prop_map(|(n, read, plug)| Action::Submit {
                n,
                read,
                plug
            }),
            Just(Action::Flush),
            (1u8..12).prop_map(|max| Action::Poll { max }),
        ]
    }

    proptest::proptest! {
        /// Any interleaving of bursts, flushes and polls: a tag is never handed out twice
        /// while in flight, Busy comes only when the I/O's hctx is full, and every accepted
        /// I/O completes exactly once.
        #[test]
        fn prop_submit_flush_poll_keeps_every_invariant(
            actions in proptest::collection::vec(action(), 1..80),
            read_queue in proptest::bool::ANY,
        ) {
            let queues = HctxQueues { default: 1, read: u16::from(read_queue), poll: 0 };
            let (d, log) = dev(queues, None);
            let depth = 8u32;
            let mut q = BdevQueue::open(d, BdevQueueOptions { depth, ..Default::default() }).unwrap();
            let mut plug = Plug::default();
            let mut buf = vec![0u8; 512];
            let mut inflight: HashSet<(HctxType, u16)> = HashSet::new();
            let mut per_type = [0u32; HCTX_MAX_TYPES];
            let mut accepted = 0u64;
            let mut completed: Vec<u64> = Vec::new();
            let mut next_token = 0u64;
            for a in actions {
                match a {
                    Action::Submit { n, read: is_read, plug: use_plug } => {
                        let mut io = read(0, &mut buf);
                        io.op = if is_read { Op::Read } else { Op::Write };
                        let ty = queues.map(io.op, io.flags).0;
                        if use_plug {
                            plug.begin();
                            q.expect_n(&mut plug, &io, u32::from(n));
                        }
                        for _ in 0..n {
                            io.token = next_token;
                            match q.submit(&mut plug, &io) {
                                Ok(tag) => {
                                    proptest::prop_assert!(inflight.insert((ty, tag)), "tag {} twice", tag);
                                    per_type[ty.index()] += 1;
                                    accepted += 1;
                                    next_token += 1;
                                }
                                Err(e) => {
                                    proptest::prop_assert!(e.is_busy());
                                    proptest::prop_assert_eq!(per_type[ty.index()], depth, "busy only when full");
                                }
                            }
                        }
                        if use_plug {
                            plug.finish();
                        }
                        proptest::prop_assert_eq!(q.busy_tags(ty), per_type[ty.index()], "no tag leaked by the plug");
                    }
                    Action::Flush => {
                        q.flush();
                    }
                    Action::Poll { max } => {
                        let n = q.poll(usize::from(max), |rq| {
                            completed.push(rq.token);
                            assert!(inflight.remove(&(rq.hctx, rq.tag)), "completed a tag not in flight");
                            per_type[rq.hctx.index()] -= 1;
                        });
                        proptest::prop_assert!(n <= usize::from(max));
                    }
                }
                proptest::prop_assert_eq!(u64::from(q.outstanding()), accepted - completed.len() as u64);
            }
            q.flush();
            while q.outstanding() > 0 {
                q.poll(64, |rq| {
                    completed.push(rq.token);
                    assert!(inflight.remove(&(rq.hctx, rq.tag)));
                });
            }
            completed.sort_unstable();
            proptest::prop_assert_eq!(completed, (0..accepted).collect::<Vec<u64>>());
            proptest::prop_assert!(log.lock().started.is_empty());
            let total = q.stats().total();
            proptest::prop_assert_eq!(total.ops, accepted);
        }
    }

    #[test]
    fn open_checks_depth() {
        let (d, _log) = dev(HctxQueues::DEFAULT_ONLY, None);
        assert!(
            BdevQueue::open(
                Arc::clone(&d),
                BdevQueueOptions {
                    depth: 0,
                    ..Default::default()
                }
            )
            .is_err()
        );
        assert!(
            BdevQueue::open(
                d,
                BdevQueueOptions {
                    depth: 257,
                    ..Default::default()
                }
            )
            .is_err()
        );
    }
}
