//! The copy of a rebuild, on its reactor: a window at a time, each read from the source and
//! written to the target through async queues of its own, a failed I/O retried a few times
//! before the copy gives up, paced by the reactor's timers, and its progress recorded on
//! the target every so often ([`crate::checkpoint`]).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use pmio::aio::{AioOptions, IoBufMut};
use pmio::{BlockDevice, DmaRegion, Op};
use pmio_reactors::{sleep, yield_now};
use pmio_runtime::Bdev;

use super::{Plan, Process, ProcessOptions, RebuildError, windows};
use crate::checkpoint::{CHECKPOINT_LEN, CHECKPOINT_OFFSET_BYTES, Checkpoint};
use crate::{RaidDevice, SlotState};

/// Tries an I/O of the rebuild gets before the rebuild gives up (a replica's connection that
/// drops and comes back, a busy target: transient; a dead disk: not).
pub const IO_ATTEMPTS: u32 = 4;
/// The wait before the first retry, four times longer before each next one (5, 20, 80 ms:
/// about a tenth of a second in all, while front-end writes to the window wait).
const RETRY_BACKOFF: Duration = Duration::from_millis(5);
/// How often the progress is recorded on the target: a restart copies at most this much
/// again, and each record costs a flush and a one-block write.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// How long the copy spins (yielding to the reactor) for the window to quiet before it
/// sleeps between looks.
const QUIET_SPINS: u32 = 64;
const QUIET_NAP: Duration = Duration::from_micros(50);

/// What the copy works with.
struct Setup {
    src: Arc<dyn BlockDevice>,
    dst: Arc<dyn BlockDevice>,
    block_size: u64,
    data_offset: u64,
    window: u64,
    /// Where the checkpoint goes (arrays with a superblock only: without one, the target's
    /// blocks are all data).
    checkpoint: Option<(u64, Checkpoint)>,
}

impl Setup {
    fn new(dev: &RaidDevice, p: &Process, opts: ProcessOptions) -> Result<Setup, RebuildError> {
        let members = dev.members();
        let h = dev.health();
        let src = (0..h.slots())
            .filter(|&i| i != p.target && h.operational(i))
            .find_map(|i| members[i].clone())
            .ok_or(RebuildError::NoSource)?;
        let dst = members[p.target].clone().ok_or(RebuildError::TargetGone)?;
        let block_size = u64::from(dev.info().block_size);
        let checkpoint = dev.superblock().map(|_| {
            (
                CHECKPOINT_OFFSET_BYTES / block_size,
                Checkpoint {
                    array: dev.info().uuid,
                    member: dst.info().uuid,
                    offset: 0,
                    full: false,
                },
            )
        });
        Ok(Setup {
            src,
            dst,
            block_size,
            data_offset: dev.layout().data_offset,
            window: (u64::from(opts.window_size_kb) * 1024 / block_size).max(1),
            checkpoint,
        })
    }
}

/// A queue of `dev` on this reactor.
fn open(dev: &Arc<dyn BlockDevice>) -> Result<Bdev, RebuildError> {
    Bdev::open_device(Arc::clone(dev), AioOptions::default()).map_err(|e| RebuildError::Open {
        member: dev.info().name.clone(),
        reason: e.to_string(),
    })
}

/// Copies `plan` to `p`'s target; returns the blocks copied.
pub(super) async fn run(
    weak: &Weak<RaidDevice>,
    p: &Process,
    plan: &Plan,
    opts: ProcessOptions,
) -> Result<u64, RebuildError> {
    let s = {
        let dev = weak.upgrade().ok_or(RebuildError::Stopped)?;
        Setup::new(&dev, p, opts)?
    };
    let src = open(&s.src)?;
    let dst = open(&s.dst)?;
    let mut buf = DmaRegion::with_options((s.window * s.block_size) as usize, s.src.dma_options())?;
    let mut ck = Checkpointer::new(&s, plan.full)?;
    let started = Instant::now();
    let mut copied = 0u64;
    for (start, end) in windows(&plan.ranges, s.window) {
        let dev = weak.upgrade().ok_or(RebuildError::Stopped)?;
        if p.stopping() {
            return Err(RebuildError::Stopped);
        }
        if dev.health().state(p.target) != SlotState::Rebuilding {
            return Err(RebuildError::TargetGone);
        }
        let seq = dev.shared.window.publish(start, end);
        wait_quiet(&dev, p, seq).await?;
        let len = ((end - start) * s.block_size) as usize;
        let lba = s.data_offset + start;
        let window = buf.slice(..len);
        let window = with_retries("reading the source", &src, Op::Read, window, lba, p).await?;
        let window = with_retries("writing the target", &dst, Op::Write, window, lba, p).await?;
        buf = window.into_inner();
        copied += end - start;
        p.copied.store(copied, std::sync::atomic::Ordering::Release);
        p.offset.store(end, std::sync::atomic::Ordering::Release);
        drop(dev);
        if ck.due() {
            ck.record(&dst, end, p).await?;
        }
        pace(started, copied * s.block_size, opts.max_bandwidth_mb_sec).await;
    }
    // The end, recorded: a restart from here has nothing left to copy.
    let end = weak.upgrade().map_or(0, |d| d.info().num_blocks);
    ck.record(&dst, end, p).await?;
    Ok(copied)
}

/// Waits, yielding to the reactor, until no front-end write in flight overlaps window `seq`.
async fn wait_quiet(dev: &RaidDevice, p: &Process, seq: u64) -> Result<(), RebuildError> {
    let mut looks = 0u32;
    while !dev.shared.window.quiet(seq) {
        if p.stopping() || !dev.health().writable(p.target) {
            return Err(RebuildError::Stopped);
        }
        looks += 1;
        if looks < QUIET_SPINS {
            yield_now().await;
        } else {
            sleep(QUIET_NAP).await;
        }
    }
    Ok(())
}

/// Runs `op` of `buf` at `lba` on `bdev`, tried up to [`IO_ATTEMPTS`] times with a growing
/// wait between tries; `what` names it in the error.
async fn with_retries<B: IoBufMut>(
    what: &'static str,
    bdev: &Bdev,
    op: Op,
    mut buf: B,
    lba: u64,
    p: &Process,
) -> Result<B, RebuildError> {
    let mut tries = Tries::default();
    loop {
        let (r, back) = match op {
            Op::Read => bdev.read(buf, lba).await,
            _ => bdev.write(buf, lba).await,
        };
        buf = back;
        match r {
            Ok(()) => return Ok(buf),
            Err(e) => tries.failed(what, lba, e, p).await?,
        }
    }
}

/// Flushes the target, tried as [`with_retries`] tries.
async fn flush_with_retries(bdev: &Bdev, p: &Process) -> Result<(), RebuildError> {
    let mut tries = Tries::default();
    loop {
        match bdev.flush().await {
            Ok(()) => return Ok(()),
            Err(e) => tries.failed("flushing the target", 0, e, p).await?,
        }
    }
}

/// The tries of one I/O so far.
struct Tries {
    done: u32,
    wait: Duration,
}

impl Default for Tries {
    fn default() -> Self {
        Tries {
            done: 0,
            wait: RETRY_BACKOFF,
        }
    }
}

impl Tries {
    /// A try of `what` (at block `lba`) failed with `e`: waits before the next one, or is
    /// the error the copy ends with once [`IO_ATTEMPTS`] have failed (or it is stopping).
    async fn failed(
        &mut self,
        what: &'static str,
        lba: u64,
        e: pmio::aio::AioError,
        p: &Process,
    ) -> Result<(), RebuildError> {
        self.done += 1;
        if self.done >= IO_ATTEMPTS || p.stopping() {
            return Err(RebuildError::Io {
                what,
                attempts: self.done,
                source: e,
            });
        }
        log::warn!(
            "raid rebuild of {}: {what} at block {lba}: try {} of {IO_ATTEMPTS} failed ({e}); again in {:?}",
            p.target_name,
            self.done,
            self.wait
        );
        sleep(self.wait).await;
        self.wait *= 4;
        Ok(())
    }
}

/// Records the copy's progress on the target now and then.
struct Checkpointer {
    /// The record's block and its contents (`None`: the array keeps no checkpoint).
    at: Option<(u64, Checkpoint)>,
    buf: Option<DmaRegion>,
    block_size: usize,
    last: Instant,
    flushes: bool,
}

impl Checkpointer {
    fn new(s: &Setup, full: bool) -> Result<Checkpointer, RebuildError> {
        let at = s.checkpoint.map(|(lba, c)| (lba, Checkpoint { full, ..c }));
        let buf = match at {
            Some(_) => Some(DmaRegion::with_options(
                s.block_size as usize,
                s.dst.dma_options(),
            )?),
            None => None,
        };
        Ok(Checkpointer {
            at,
            buf,
            block_size: s.block_size as usize,
            last: Instant::now(),
            flushes: s.dst.info().supported_ops.contains(Op::Flush),
        })
    }

    fn due(&self) -> bool {
        self.last.elapsed() >= CHECKPOINT_EVERY
    }

    /// Makes what was copied durable on the target, then records `offset` there.
    async fn record(&mut self, dst: &Bdev, offset: u64, p: &Process) -> Result<(), RebuildError> {
        self.last = Instant::now();
        if self.flushes {
            flush_with_retries(dst, p).await?;
        }
        let (Some((lba, c)), Some(mut buf)) = (self.at, self.buf.take()) else {
            return Ok(());
        };
        let bytes = Checkpoint { offset, ..c }.encode();
        let b = &mut buf.as_mut_slice()[..self.block_size];
        b[..CHECKPOINT_LEN].copy_from_slice(&bytes);
        b[CHECKPOINT_LEN..].fill(0);
        // One block: the region may be larger (a whole page or huge page).
        let block = buf.slice(..self.block_size);
        let block = with_retries("writing the checkpoint", dst, Op::Write, block, lba, p).await?;
        self.buf = Some(block.into_inner());
        p.checkpointed
            .store(offset, std::sync::atomic::Ordering::Release);
        Ok(())
    }
}

/// Sleeps as long as copying `bytes` since `started` is ahead of `mb_sec` MiB/s.
async fn pace(started: Instant, bytes: u64, mb_sec: u32) {
    if mb_sec == 0 {
        return;
    }
    let due = Duration::from_secs_f64(bytes as f64 / (f64::from(mb_sec) * 1024.0 * 1024.0));
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        sleep(wait).await;
    }
}
