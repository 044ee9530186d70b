//! A reactor's handle on one block device: the submit / flush / poll path.
//!
//! # Files
//!
//! - `mod.rs`: the handle: [`BdevQueue`], its hctxs, [`BdevQueue::open`], accessors.
//! - `options.rs`: [`BdevQueueOptions`] and [`SchedMode`].
//! - `validate.rs`: what an I/O must be to be accepted ([`SubmitError`]), checked per I/O or
//!   once per burst shape.
//! - `plain_path.rs`: `submit`, `submit_with`, `flush` and `poll`, and the path without a
//!   scheduler, which each of them takes unless the queue has one.
//! - `complete.rs`: what every `poll` shares: the hctx order, and reporting a completion.
//! - `split_path.rs`: a queue's side of splitting an I/O into children.
//! - `sched_path/`: the path through mq-deadline, with its two driver-tag layouts (its
//!   `mod.rs` has its own map).
//! - `tests.rs`, `sched_path/tests.rs`: tests of the plain and the scheduler path.
//!
//! # How it works
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
//! With a scheduler ([`SchedMode::MqDeadline`]) requests take the scheduler's tags instead,
//! are inserted at flush and take driver tags at dispatch (`sched_path/`). Which of the two
//! paths a queue takes is decided once, at open (`IoPath`), and looked at once per call (per
//! run of a burst), never per I/O.
//!
//! An I/O larger than the device's transfer limit, or across its boundary, becomes child
//! requests that take tags like any other and complete the parent once (see
//! [`super::split`] for the scheme, `split_path.rs` for the code): the submitter sees
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

use super::histogram::{BdevHistogram, QueueHistogram};
use super::registry::Registry;
use super::split::{self, Splits};
use super::stats::{QueueStats, QueueStatsCell, now_ns};
use super::{BdevError, BlockDevice, DriverQueue};
use crate::hctx::{HCTX_MAX_TYPES, HctxQueues, HctxType};
use crate::plug::{DevKey, Plug};
use crate::request::{Io, OpSet, Request};
use crate::sbitmap::AllocHint;
use crate::tags::{RequestPool, Tags, TagsOptions};

mod complete;
mod options;
mod plain_path;
mod sched_path;
mod split_path;
mod validate;

pub use options::{BdevQueueOptions, SchedMode};
pub use validate::SubmitError;

use sched_path::SchedPath;

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

/// Which way requests go between submit and the driver, decided at open. It is looked at once
/// per call (per run of a `submit_with` burst), never per I/O.
enum IoPath {
    /// No scheduler: requests take driver tags and go to the driver at flush
    /// (`plain_path.rs`).
    Plain,
    /// mq-deadline: requests take scheduler tags, are inserted at flush and take driver tags
    /// at dispatch (`sched_path/`).
    Sched(Box<SchedPath>),
}

impl IoPath {
    /// The path for `sched`, on a queue whose hctxs (`hctx`, opened `drv_depth` deep) are open.
    fn open(
        sched: &SchedMode,
        info: &super::BdevInfo,
        hctx: &[Hctx],
        drv_depth: u32,
    ) -> Result<IoPath, BdevError> {
        Ok(match sched {
            SchedMode::None => IoPath::Plain,
            SchedMode::MqDeadline { dd, owner } => {
                IoPath::Sched(Box::new(SchedPath::new(dd, *owner, info, hctx, drv_depth)?))
            }
        })
    }

    #[inline]
    fn is_sched(&self) -> bool {
        matches!(self, IoPath::Sched(_))
    }

    #[inline]
    fn sched(&self) -> Option<&SchedPath> {
        match self {
            IoPath::Plain => None,
            IoPath::Sched(sp) => Some(sp),
        }
    }

    #[inline]
    fn sched_mut(&mut self) -> Option<&mut SchedPath> {
        match self {
            IoPath::Plain => None,
            IoPath::Sched(sp) => Some(sp),
        }
    }
}

/// A tag set with its request pool and two allocation hints, the submitter's and the
/// completer's: what each hctx takes driver requests from, and the scheduler path scheduler
/// requests.
struct TagSet {
    tags: Arc<Tags>,
    pool: RequestPool,
    hint: AllocHint,
    put_hint: AllocHint,
}

impl TagSet {
    /// `depth` tags and requests of hctx type `ty` (device `name`, for the error).
    fn new(name: &str, depth: u32, ty: HctxType) -> Result<TagSet, BdevError> {
        let tags = Tags::new(TagsOptions {
            depth,
            ..TagsOptions::default()
        })
        .map_err(|e| BdevError::InvalidConfig {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        let pool = RequestPool::new(&tags, ty);
        let hint = tags.new_hint();
        let put_hint = tags.new_hint();
        Ok(TagSet {
            tags: Arc::new(tags),
            pool,
            hint,
            put_hint,
        })
    }
}

impl Hctx {
    /// Hands the pending list to the driver in one `submit` (one doorbell), if it has any. Its
    /// requests are in `rqs` (the scheduler pool the driver runs them in), else in this hctx's
    /// own pool.
    #[inline]
    fn submit_pending(&mut self, rqs: Option<&mut [Request]>) {
        if self.npending > 0 {
            let rqs = match rqs {
                Some(rqs) => rqs,
                None => self.pool.as_mut_slice(),
            };
            self.drv.submit(rqs, &self.pending[..self.npending]);
            self.npending = 0;
        }
    }
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
    /// Opened hctxs; `hctx_at[ty]` is where type `ty`'s is in `hctx` (`NO_HCTX`: the device
    /// has none of that type).
    hctx: Vec<Hctx>,
    hctx_at: [u8; HCTX_MAX_TYPES],
    /// Plain, or through the scheduler (with the scheduler path's state).
    path: IoPath,
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
    /// The device's latency histogram switch this queue follows, if attached.
    hist: Option<Box<QueueHistogram>>,
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

/// `hctx_at` of a type the device has no queue of.
const NO_HCTX: u8 = u8::MAX;

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
        let mut hctx_at = [NO_HCTX; HCTX_MAX_TYPES];
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
            let TagSet {
                tags,
                pool,
                hint,
                put_hint,
            } = TagSet::new(&info.name, opts.depth, ty)?;
            hctx_at[ty.index()] = hctx.len() as u8;
            hctx.push(Hctx {
                drv,
                tags,
                pool,
                hint,
                put_hint,
                pending: vec![0; opts.depth as usize].into_boxed_slice(),
                npending: 0,
                done: Vec::with_capacity(opts.depth as usize),
            });
        }
        let path = IoPath::open(&opts.sched, info, &hctx, drv_depth)?;
        // Every parent in progress holds a tag: as many parents as tags.
        let split =
            (info.max_transfer_blocks != u32::MAX || info.boundary_blocks != 0).then(|| {
                let tags = match &path {
                    IoPath::Sched(sp) => sp.tags().depth(),
                    IoPath::Plain => opts.depth * hctx.len() as u32,
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
            hctx_at,
            path,
            split,
            burst_ns: 0,
            inflight: 0,
            poll_first: 0,
            stats: QueueStats::default(),
            cell: Arc::new(QueueStatsCell::new()),
            hist: None,
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
        let mut q = BdevQueue::open(dev, opts)?;
        registry.attach_stats(name, q.stats_cell())?;
        if let Some(h) = registry.histogram(name) {
            q.attach_histogram(h);
        }
        Ok(q)
    }

    /// Makes this queue count its completions' latencies into `switch`'s histogram while it
    /// is on (done by [`BdevQueue::open_in`] with the registry's switch of the device).
    pub fn attach_histogram(&mut self, switch: Arc<BdevHistogram>) {
        self.hist = Some(Box::new(QueueHistogram::new(switch)));
    }

    /// Zeroes this queue's share of the device's latency histogram (the device's other queues'
    /// counts, and those of closed queues, stay): how a job forgets its warm-up. Call it on the
    /// queue's reactor, between polls.
    pub fn reset_histogram(&mut self) {
        if let Some(h) = self.hist.as_deref_mut() {
            h.reset();
        }
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
        match &self.path {
            IoPath::Plain => &SchedMode::None,
            IoPath::Sched(sp) => sp.mode(),
        }
    }

    /// I/Os submitted and not yet reaped (pending ones included).
    pub fn outstanding(&self) -> u32 {
        self.inflight
    }

    /// Binds `plug`'s cache entries for this device ahead of the first burst (optional).
    pub fn register_plug(&self, plug: &mut Plug) {
        for ty in HctxType::ALL {
            if let Some(h) = self.hctx_of(ty) {
                let tags = self.path.sched().map_or(&h.tags, |sp| sp.tags());
                plug.register(self.key, ty, tags);
            }
        }
    }

    fn hctx_of(&self, ty: HctxType) -> Option<&Hctx> {
        self.hctx.get(self.hctx_at[ty.index()] as usize)
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
        match &self.path {
            // The scheduler path counts its driver requests itself.
            IoPath::Sched(sp) => sp.driver_busy(usize::from(self.hctx_at[ty.index()])),
            IoPath::Plain => h.tags.busy(),
        }
    }

    /// Scheduler tags in use by this queue (0 without a scheduler).
    pub fn sched_busy_tags(&self) -> u32 {
        self.path.sched().map_or(0, |sp| sp.busy())
    }
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
mod tests;
