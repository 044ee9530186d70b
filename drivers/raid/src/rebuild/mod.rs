//! Rebuild: brings a raid1 member that is being rebuilt ([`SlotState::Rebuilding`]) up to
//! date by copying the array's data to it from an operational member, a window at a time
//! (SPDK's raid "process"; Mayastor's rebuild job).
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the process ([`Process`]): started on a reactor, its end recorded |
//! | `copy.rs` | the copy: windows, retries, pacing, checkpoints, with async member I/O |
//!
//! Each window is published ([`crate::window`]): front-end writes to it wait in their
//! queues, and once none is in flight there the window is read from the source and written
//! to the target. Writes elsewhere go on and reach the target too (it is writable), so what
//! has been copied stays current and what has not will be copied after them. When every
//! window is done the target becomes operational; the array's superblock writer records it.
//!
//! The copy is a task on one reactor (the [`Runner`]'s), with async I/O on queues of its
//! own of the source and the target: nothing on it blocks, and it touches the front-end
//! queues only through the window's atomics. `process_max_bandwidth_mb_sec` paces it with
//! the reactor's timers. Which blocks to copy is a [`Plan`]: the whole array, only what the
//! write-intent bitmap says changed while the member was away, or what is left of either
//! after a restart ([`crate::checkpoint`]).

mod copy;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pmio::aio::AioError;
use pmio_reactors::{ReactorError, ReactorsHandle};

use pmio::BlockDevice;

use crate::{RaidDevice, SlotState};

pub use copy::IO_ATTEMPTS;

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

/// Where an array's background processes run: one reactor of the daemon (SPDK runs a raid
/// process on a thread of its own; here it is a task on a reactor, which other tasks and
/// pollers share).
#[derive(Clone)]
pub struct Runner {
    reactors: ReactorsHandle,
    core: u32,
}

impl Runner {
    /// Processes run on reactor `core` of `reactors`.
    pub fn new(reactors: ReactorsHandle, core: u32) -> Runner {
        Runner { reactors, core }
    }

    /// Processes run on the first reactor of `reactors`.
    pub fn first_core(reactors: &ReactorsHandle) -> Runner {
        Runner::new(reactors.clone(), reactors.cores()[0])
    }
}

/// What a rebuild copies: array block ranges, ascending and disjoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub ranges: Vec<(u64, u64)>,
    /// Whether the ranges are (what is left of) the whole array; else of the write-intent
    /// bitmap's regions. Kept in the checkpoint, so a restart knows what the rest is.
    pub full: bool,
}

impl Plan {
    /// Every block of an array of `num_blocks`.
    pub fn full(num_blocks: u64) -> Plan {
        Plan {
            ranges: vec![(0, num_blocks)],
            full: true,
        }
    }

    /// Blocks in the plan.
    pub fn blocks(&self) -> u64 {
        self.ranges.iter().map(|&(s, e)| e - s).sum()
    }
}

/// A rebuild running (or just finished) on an array.
#[derive(Debug)]
pub struct Process {
    /// The slot being rebuilt.
    pub target: usize,
    /// Its bdev's name.
    pub target_name: String,
    /// Array blocks to copy in all (by this run: after a restart, only what was left).
    pub total_blocks: u64,
    /// Array blocks copied so far.
    copied: AtomicU64,
    /// Where the copy stands: the first array block of the next window (SPDK's
    /// `window_offset`, reported as the progress).
    offset: AtomicU64,
    /// The offset last recorded on the target (its checkpoint).
    checkpointed: AtomicU64,
    stop: AtomicBool,
    finished: AtomicBool,
    /// Why it ended early, if it did.
    error: Mutex<Option<String>>,
}

impl Process {
    fn new(target: usize, target_name: String, plan: &Plan) -> Process {
        let first = plan.ranges.first().map_or(0, |&(s, _)| s);
        Process {
            target,
            target_name,
            total_blocks: plan.blocks(),
            copied: AtomicU64::new(0),
            offset: AtomicU64::new(first),
            checkpointed: AtomicU64::new(first),
            stop: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    /// Blocks copied so far.
    pub fn copied_blocks(&self) -> u64 {
        self.copied.load(Ordering::Acquire)
    }

    /// The first array block not yet reached.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Acquire)
    }

    /// The offset a restart would resume from (the last checkpoint on the target).
    pub fn checkpointed(&self) -> u64 {
        self.checkpointed.load(Ordering::Acquire)
    }

    /// Whether the copy has ended (done, failed or stopped).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Why the copy ended early (`None` while it runs or once it is done).
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Asks the copy to stop after its current window.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
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
    #[error("cannot open {member} on the rebuild's reactor: {reason}")]
    Open { member: String, reason: String },
    #[error("no buffer for a window: {0}")]
    Buffer(#[from] pmio::DmaError),
    #[error("{what} failed {attempts} times in a row, last: {source}")]
    Io {
        what: &'static str,
        attempts: u32,
        #[source]
        source: AioError,
    },
    #[error("cannot start on reactor {core}: {source}")]
    Reactor {
        core: u32,
        #[source]
        source: ReactorError,
    },
}

/// `ranges` cut into windows of at most `window` blocks.
pub fn windows(ranges: &[(u64, u64)], window: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    ranges.iter().flat_map(move |&(start, end)| {
        (start..end)
            .step_by(window.max(1) as usize)
            .map(move |s| (s, (s + window).min(end)))
    })
}

/// Starts rebuilding slot `target` of `dev` (already [`SlotState::Rebuilding`]) by `plan`,
/// as a task on `runner`'s reactor.
pub fn start(
    dev: &Arc<RaidDevice>,
    target: usize,
    plan: Plan,
    opts: ProcessOptions,
    runner: &Runner,
) -> Result<Arc<Process>, RebuildError> {
    let target_name = dev.members()[target]
        .as_ref()
        .map(|m| m.info().name.clone())
        .unwrap_or_default();
    let process = Arc::new(Process::new(target, target_name, &plan));
    let weak = Arc::downgrade(dev);
    let p = Arc::clone(&process);
    let task = runner
        .reactors
        .spawn_on(runner.core, move || run(weak, p, plan, opts))
        .map_err(|source| RebuildError::Reactor {
            core: runner.core,
            source,
        })?;
    // Detached: its end is in `Process`.
    drop(task);
    Ok(process)
}

/// The task: the copy, then its end recorded.
async fn run(weak: Weak<RaidDevice>, p: Arc<Process>, plan: Plan, opts: ProcessOptions) {
    // Also when the task is dropped at a reactor's stop: the window is left to no one.
    let _ended = Ended {
        weak: weak.clone(),
        p: Arc::clone(&p),
    };
    let r = copy::run(&weak, &p, &plan, opts).await;
    if let Some(dev) = weak.upgrade() {
        dev.shared.window.publish(0, 0);
        finish(&dev, &p, &r);
    }
}

/// Marks the process finished (after `finish`) however its task ends.
struct Ended {
    weak: Weak<RaidDevice>,
    p: Arc<Process>,
}

impl Drop for Ended {
    fn drop(&mut self) {
        if !self.p.finished() {
            if let Some(dev) = self.weak.upgrade() {
                dev.shared.window.publish(0, 0);
            }
            self.p.finished.store(true, Ordering::Release);
        }
    }
}

/// Makes the target operational after a full copy, or fails it out after an error (the
/// array stays degraded; the operator adds it back, and the copy resumes from its
/// checkpoint). The superblock writer records either; nothing here blocks the reactor.
fn finish(dev: &RaidDevice, p: &Process, r: &Result<u64, RebuildError>) {
    let name = &dev.info().name;
    match r {
        Ok(blocks) => {
            dev.health().set(p.target, SlotState::Operational);
            log::info!(
                "raid bdev {name}: rebuild of {} done ({blocks} blocks copied)",
                p.target_name
            );
            // Every copy current again: the write-intent bitmap has nothing left to say.
            let h = dev.health();
            if (0..h.slots()).all(|i| h.operational(i)) {
                dev.shared.map.clear();
                h.poke();
            }
        }
        Err(e) => {
            log::error!(
                "raid bdev {name}: rebuild of {} ended at block {}: {e}; the array stays degraded",
                p.target_name,
                p.offset()
            );
            *p.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            if dev.health().state(p.target) == SlotState::Rebuilding {
                dev.shared.fail_member(p.target);
            }
        }
    }
    p.finished.store(true, Ordering::Release);
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
