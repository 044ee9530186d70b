//! Rebuild: brings a raid1 member that is being rebuilt ([`SlotState::Rebuilding`]) up to
//! date by copying the array's data to it from an operational member, a window at a time
//! (SPDK's raid "process"; Mayastor's rebuild job).
//!
//! Each window is published ([`crate::window`]): front-end writes to it wait in their
//! queues, and once none is in flight there the window is read from the source and written
//! to the target. Writes elsewhere go on and reach the target too (it is writable), so what
//! has been copied stays current and what has not will be copied after them. When every
//! window is done the target becomes operational and the superblock says so.
//!
//! The copy runs on its own thread with synchronous member I/O (a reactor never waits);
//! `process_max_bandwidth_mb_sec` paces it by sleeping between windows. Which blocks to
//! copy is a list of ranges: the whole array, or only what the write-intent bitmap says
//! changed while the member was away.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use pmio::BlockDevice;

use crate::member_io::{MemberIo, MemberIoError};
use crate::{RaidDevice, SlotState, keeper};

/// SPDK's `bdev_raid_set_options`: how a background process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessOptions {
    /// Bytes copied per window, KiB (SPDK's default 1024).
    pub window_size_kb: u32,
    /// Most MiB copied per second; 0 for no limit (SPDK's default).
    pub max_bandwidth_mb_sec: u32,
}

impl Default for ProcessOptions {
    fn default() -> Self {
        ProcessOptions {
            window_size_kb: 1024,
            max_bandwidth_mb_sec: 0,
        }
    }
}

/// A rebuild running (or just finished) on an array.
#[derive(Debug)]
pub struct Process {
    /// The slot being rebuilt.
    pub target: usize,
    /// Its bdev's name.
    pub target_name: String,
    /// Array blocks to copy in all.
    pub total_blocks: u64,
    /// Array blocks copied so far.
    copied: AtomicU64,
    /// Where the copy stands: the first array block of the next window (SPDK's
    /// `window_offset`, reported as the progress).
    offset: AtomicU64,
    stop: AtomicBool,
    finished: AtomicBool,
}

impl Process {
    /// Blocks copied so far.
    pub fn copied_blocks(&self) -> u64 {
        self.copied.load(Ordering::Acquire)
    }

    /// The first array block not yet reached.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Acquire)
    }

    /// Whether the copy has ended (done, failed or stopped).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Asks the copy to stop after its current window.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Why a rebuild ended early.
#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error("no operational member to copy from")]
    NoSource,
    #[error("stopped")]
    Stopped,
    #[error("the target left the array")]
    TargetGone,
    #[error(transparent)]
    Io(#[from] MemberIoError),
}

/// `ranges` cut into windows of at most `window` blocks.
pub fn windows(ranges: &[(u64, u64)], window: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    ranges.iter().flat_map(move |&(start, end)| {
        (start..end)
            .step_by(window.max(1) as usize)
            .map(move |s| (s, (s + window).min(end)))
    })
}

/// Starts rebuilding slot `target` of `dev` (already [`SlotState::Rebuilding`]), copying
/// array blocks `ranges`; `done` runs on the copy's thread when it ends.
pub fn start(
    dev: &Arc<RaidDevice>,
    target: usize,
    ranges: Vec<(u64, u64)>,
    opts: ProcessOptions,
    done: impl FnOnce(Result<u64, RebuildError>) + Send + 'static,
) -> std::io::Result<Arc<Process>> {
    let target_name = dev.members()[target]
        .as_ref()
        .map(|m| m.info().name.clone())
        .unwrap_or_default();
    let process = Arc::new(Process {
        target,
        target_name,
        total_blocks: ranges.iter().map(|&(s, e)| e - s).sum(),
        copied: AtomicU64::new(0),
        offset: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        finished: AtomicBool::new(false),
    });
    let weak = Arc::downgrade(dev);
    let p = Arc::clone(&process);
    std::thread::Builder::new()
        .name(
            format!("raid-rb-{}", dev.info().name)
                .chars()
                .take(15)
                .collect(),
        )
        .spawn(move || {
            let r = run(&weak, &p, &ranges, opts);
            if let Some(dev) = weak.upgrade() {
                dev.shared.window.publish(0, 0);
                finish(&dev, &p, &r);
            }
            p.finished.store(true, Ordering::Release);
            done(r);
        })?;
    Ok(process)
}

/// Makes the target operational (recorded in the superblock) after a full copy, or leaves
/// it failed after an error.
fn finish(dev: &RaidDevice, p: &Process, r: &Result<u64, RebuildError>) {
    let name = &dev.info().name;
    match r {
        Ok(blocks) => {
            dev.health().set(p.target, SlotState::Operational);
            log::info!(
                "raid bdev {name}: rebuild of {} done ({blocks} blocks copied)",
                p.target_name
            );
            if let Err(e) = keeper::write_superblock(dev, |_| {}) {
                log::error!("raid bdev {name}: superblock after rebuild: {e}");
            }
            // Every copy current again: the write-intent bitmap has nothing left to say.
            let h = dev.health();
            if (0..h.slots()).all(|i| h.operational(i)) {
                dev.shared.map.clear();
                keeper::write_bitmap(dev);
            }
        }
        Err(e) => {
            log::error!("raid bdev {name}: rebuild of {} ended: {e}", p.target_name);
            if dev.health().state(p.target) == SlotState::Rebuilding {
                dev.health().fail(p.target);
            }
        }
    }
}

/// The copy loop; returns the blocks copied.
fn run(
    weak: &Weak<RaidDevice>,
    p: &Process,
    ranges: &[(u64, u64)],
    opts: ProcessOptions,
) -> Result<u64, RebuildError> {
    let (mut src, mut dst, block_size, data_offset, window) = {
        let dev = weak.upgrade().ok_or(RebuildError::Stopped)?;
        let members = dev.members();
        let h = dev.health();
        let src = (0..h.slots())
            .filter(|&i| i != p.target && h.operational(i))
            .find_map(|i| members[i].clone())
            .ok_or(RebuildError::NoSource)?;
        let dst: Arc<dyn BlockDevice> =
            members[p.target].clone().ok_or(RebuildError::TargetGone)?;
        let bs = u64::from(dev.info().block_size);
        let window = (u64::from(opts.window_size_kb) * 1024 / bs).max(1);
        let bytes = (window * bs) as usize;
        (
            MemberIo::with_capacity(src, bytes)?,
            MemberIo::with_capacity(dst, bytes)?,
            bs,
            dev.layout().data_offset,
            window,
        )
    };
    let started = Instant::now();
    let mut copied = 0u64;
    for (s, e) in windows(ranges, window) {
        let dev = weak.upgrade().ok_or(RebuildError::Stopped)?;
        if p.stop.load(Ordering::Acquire) {
            return Err(RebuildError::Stopped);
        }
        if dev.health().state(p.target) != SlotState::Rebuilding {
            return Err(RebuildError::TargetGone);
        }
        let w = &dev.shared.window;
        let seq = w.publish(s, e);
        let stop = || p.stop.load(Ordering::Acquire) || !dev.health().writable(p.target);
        if !w.wait_quiet(seq, stop) {
            return Err(RebuildError::Stopped);
        }
        let len = ((e - s) * block_size) as usize;
        let data = src.read(data_offset + s, len)?;
        dst.write(data_offset + s, &data)?;
        copied += e - s;
        p.copied.store(copied, Ordering::Release);
        p.offset.store(e, Ordering::Release);
        drop(dev);
        pace(started, copied * block_size, opts.max_bandwidth_mb_sec);
    }
    dst.flush()?;
    Ok(copied)
}

/// Sleeps as long as copying `bytes` since `started` is ahead of `mb_sec` MiB/s.
fn pace(started: Instant, bytes: u64, mb_sec: u32) {
    if mb_sec == 0 {
        return;
    }
    let due = Duration::from_secs_f64(bytes as f64 / (f64::from(mb_sec) * 1024.0 * 1024.0));
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_cut_into_windows_that_never_cross_a_range_end() {
        let w: Vec<_> = windows(&[(0, 5), (10, 12)], 2).collect();
        assert_eq!(w, [(0, 2), (2, 4), (4, 5), (10, 12)]);
        assert_eq!(windows(&[], 8).count(), 0);
    }
}
