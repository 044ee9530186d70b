//! Per-reactor statistics: counted locally by the reactor, published to atomics once per loop
//! turn (plain stores, single writer), read from any thread.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A snapshot of one reactor's counters (all cumulative since start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReactorStats {
    /// The reactor's core.
    pub core: u32,
    /// Time in turns where a message ran or a poller reported busy, ns.
    pub busy_ns: u64,
    /// Time in turns where nothing did work (awake, polling), ns.
    pub idle_ns: u64,
    /// Time asleep on the eventfd (interrupt mode), ns.
    pub sleep_ns: u64,
    /// Loop turns run.
    pub turns: u64,
    /// Messages run.
    pub messages: u64,
    /// Times the reactor woke from an interrupt-mode sleep.
    pub wakeups: u64,
    /// Of those, the wake-ups where a watched fd ([`crate::ReactorCtx::watch_fd`]) was ready.
    pub fd_wakeups: u64,
    /// Task polls ([`crate::ReactorCtx::spawn`]).
    pub task_polls: u64,
    /// Tasks alive on the reactor now.
    pub tasks: u32,
    /// Active pollers registered now.
    pub active_pollers: u32,
    /// Timed pollers registered now.
    pub timed_pollers: u32,
    /// Asleep on its eventfd (interrupt mode) when the snapshot was taken.
    pub sleeping: bool,
}

impl ReactorStats {
    /// busy / (busy + idle + sleep), in percent (0 when no time has been accounted).
    pub fn busy_pct(&self) -> f64 {
        let total = self.busy_ns + self.idle_ns + self.sleep_ns;
        if total == 0 {
            0.0
        } else {
            self.busy_ns as f64 * 100.0 / total as f64
        }
    }

    /// The counters accumulated since `earlier` (poller and task counts are taken from `self`).
    pub fn since(&self, earlier: &ReactorStats) -> ReactorStats {
        ReactorStats {
            core: self.core,
            busy_ns: self.busy_ns.saturating_sub(earlier.busy_ns),
            idle_ns: self.idle_ns.saturating_sub(earlier.idle_ns),
            sleep_ns: self.sleep_ns.saturating_sub(earlier.sleep_ns),
            turns: self.turns.saturating_sub(earlier.turns),
            messages: self.messages.saturating_sub(earlier.messages),
            wakeups: self.wakeups.saturating_sub(earlier.wakeups),
            fd_wakeups: self.fd_wakeups.saturating_sub(earlier.fd_wakeups),
            task_polls: self.task_polls.saturating_sub(earlier.task_polls),
            tasks: self.tasks,
            active_pollers: self.active_pollers,
            timed_pollers: self.timed_pollers,
            sleeping: self.sleeping,
        }
    }
}

/// The reactor's own (non-atomic) counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LocalStats {
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub sleep_ns: u64,
    pub turns: u64,
    pub messages: u64,
    pub wakeups: u64,
    pub fd_wakeups: u64,
    pub task_polls: u64,
    pub tasks: u32,
    pub active_pollers: u32,
    pub timed_pollers: u32,
}

/// The published copy; its own cache lines so that senders reading the slot's flags do not
/// bounce with the per-turn stores.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct StatsCell {
    busy_ns: AtomicU64,
    idle_ns: AtomicU64,
    sleep_ns: AtomicU64,
    turns: AtomicU64,
    messages: AtomicU64,
    wakeups: AtomicU64,
    fd_wakeups: AtomicU64,
    task_polls: AtomicU64,
    tasks: AtomicU32,
    /// active << 32 | timed
    pollers: AtomicU64,
}

impl StatsCell {
    /// Single writer (the reactor): relaxed stores, no read-modify-write.
    #[inline]
    pub fn publish(&self, s: &LocalStats) {
        self.busy_ns.store(s.busy_ns, Ordering::Relaxed);
        self.idle_ns.store(s.idle_ns, Ordering::Relaxed);
        self.sleep_ns.store(s.sleep_ns, Ordering::Relaxed);
        self.messages.store(s.messages, Ordering::Relaxed);
        self.wakeups.store(s.wakeups, Ordering::Relaxed);
        self.fd_wakeups.store(s.fd_wakeups, Ordering::Relaxed);
        self.task_polls.store(s.task_polls, Ordering::Relaxed);
        self.tasks.store(s.tasks, Ordering::Relaxed);
        self.pollers.store(
            (s.active_pollers as u64) << 32 | s.timed_pollers as u64,
            Ordering::Relaxed,
        );
        self.turns.store(s.turns, Ordering::Release);
    }

    pub fn snapshot(&self, core: u32, sleeping: bool) -> ReactorStats {
        let turns = self.turns.load(Ordering::Acquire);
        let pollers = self.pollers.load(Ordering::Relaxed);
        ReactorStats {
            core,
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            idle_ns: self.idle_ns.load(Ordering::Relaxed),
            sleep_ns: self.sleep_ns.load(Ordering::Relaxed),
            turns,
            messages: self.messages.load(Ordering::Relaxed),
            wakeups: self.wakeups.load(Ordering::Relaxed),
            fd_wakeups: self.fd_wakeups.load(Ordering::Relaxed),
            task_polls: self.task_polls.load(Ordering::Relaxed),
            tasks: self.tasks.load(Ordering::Relaxed),
            active_pollers: (pollers >> 32) as u32,
            timed_pollers: pollers as u32,
            sleeping,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_snapshot_and_delta() {
        let cell = StatsCell::default();
        let mut s = LocalStats {
            busy_ns: 30,
            idle_ns: 60,
            sleep_ns: 10,
            turns: 5,
            messages: 7,
            wakeups: 1,
            fd_wakeups: 1,
            task_polls: 4,
            tasks: 2,
            active_pollers: 2,
            timed_pollers: 3,
        };
        cell.publish(&s);
        let a = cell.snapshot(4, false);
        assert_eq!((a.core, a.busy_ns, a.turns, a.messages), (4, 30, 5, 7));
        assert_eq!((a.wakeups, a.fd_wakeups), (1, 1));
        assert_eq!((a.task_polls, a.tasks), (4, 2));
        assert_eq!((a.active_pollers, a.timed_pollers), (2, 3));
        assert!((a.busy_pct() - 30.0).abs() < 1e-9);
        s.busy_ns = 130;
        s.turns = 9;
        cell.publish(&s);
        let d = cell.snapshot(4, false).since(&a);
        assert_eq!((d.busy_ns, d.idle_ns, d.turns), (100, 0, 4));
        assert_eq!(ReactorStats::default().busy_pct(), 0.0);
    }
}
