//! Per-queue I/O statistics: ops, bytes and latency (sum/min/max) per operation.
//!
//! A queue's owner (one reactor) accumulates into a plain [`QueueStats`] and publishes it,
//! once per completion batch, into a shared [`QueueStatsCell`] with a single-writer seqlock:
//! plain relaxed stores bracketed by a sequence counter, no read-modify-write, no lock.
//! Readers (the registry, RPC, the perf summary) take a consistent [`QueueStats::snapshot`]
//! of each cell and sum them only when asked, as SPDK's `spdk_bdev_get_device_stat` does.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use crate::request::Op;

/// The clock requests are stamped with (one reading per batch): pmio's shared clock.
pub use pmio_clock::now_ns;

/// Number of operations tracked (one slot per [`Op`]).
pub const NUM_OPS: usize = Op::ALL.len();

/// Counters of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpStats {
    /// Completed requests (successful or not).
    pub ops: u64,
    /// Bytes moved by successful requests.
    pub bytes: u64,
    /// Requests that completed with an error status.
    pub errors: u64,
    /// Sum of latencies (ns) of completed requests.
    pub lat_sum_ns: u64,
    /// Smallest latency seen (ns); `u64::MAX` while `ops == 0`.
    pub lat_min_ns: u64,
    /// Largest latency seen (ns).
    pub lat_max_ns: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            ops: 0,
            bytes: 0,
            errors: 0,
            lat_sum_ns: 0,
            lat_min_ns: u64::MAX,
            lat_max_ns: 0,
        }
    }
}

impl OpStats {
    /// Records one completion.
    #[inline]
    pub fn record(&mut self, bytes: u64, lat_ns: u64, ok: bool) {
        self.ops += 1;
        if ok {
            self.bytes += bytes;
        } else {
            self.errors += 1;
        }
        self.lat_sum_ns += lat_ns;
        self.lat_min_ns = self.lat_min_ns.min(lat_ns);
        self.lat_max_ns = self.lat_max_ns.max(lat_ns);
    }

    /// Average latency (ns), 0 without completions.
    pub fn lat_avg_ns(&self) -> u64 {
        self.lat_sum_ns.checked_div(self.ops).unwrap_or(0)
    }

    /// Adds another set of counters (sums; min of mins, max of maxes).
    pub fn add(&mut self, o: &OpStats) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.lat_sum_ns += o.lat_sum_ns;
        self.lat_min_ns = self.lat_min_ns.min(o.lat_min_ns);
        self.lat_max_ns = self.lat_max_ns.max(o.lat_max_ns);
    }
}

/// Counters of one queue (or a sum of queues), one [`OpStats`] per [`Op`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Indexed by `Op as usize`.
    pub ops: [OpStats; NUM_OPS],
}

impl QueueStats {
    /// Counters of `op`.
    pub fn op(&self, op: Op) -> &OpStats {
        &self.ops[op as usize]
    }

    /// Mutable counters of `op`.
    #[inline]
    pub fn op_mut(&mut self, op: Op) -> &mut OpStats {
        &mut self.ops[op as usize]
    }

    /// Adds another queue's counters.
    pub fn add(&mut self, o: &QueueStats) {
        for (a, b) in self.ops.iter_mut().zip(o.ops.iter()) {
            a.add(b);
        }
    }

    /// All operations folded into one.
    pub fn total(&self) -> OpStats {
        let mut t = OpStats::default();
        for s in &self.ops {
            t.add(s);
        }
        t
    }

    /// Consistent copy of a shared cell (see [`QueueStatsCell::load`]).
    pub fn snapshot(cell: &QueueStatsCell) -> QueueStats {
        cell.load()
    }
}

const FIELDS: usize = 6;

/// A queue's statistics shared with readers on other threads.
///
/// Exactly one writer (the reactor owning the queue) calls [`QueueStatsCell::publish`];
/// any thread may [`QueueStatsCell::load`]. A seqlock made only of atomics: the writer makes
/// the sequence odd, stores every field (relaxed), then makes it even again (release); a
/// reader retries until it sees the same even sequence before and after reading.
#[derive(Debug)]
#[repr(align(64))]
pub struct QueueStatsCell {
    seq: AtomicU64,
    fields: [[AtomicU64; FIELDS]; NUM_OPS],
    /// I/Os the queue had in flight at its last completion batch (a gauge, outside the
    /// seqlock: one relaxed store beside each publication).
    outstanding: AtomicU64,
}

impl Default for QueueStatsCell {
    fn default() -> Self {
        let cell = QueueStatsCell {
            seq: AtomicU64::new(0),
            fields: Default::default(),
            outstanding: AtomicU64::new(0),
        };
        cell.publish(&QueueStats::default());
        cell
    }
}

impl QueueStatsCell {
    /// A cell holding zero counters.
    pub fn new() -> QueueStatsCell {
        QueueStatsCell::default()
    }

    /// Publishes the writer's current counters. Must only be called by the cell's single
    /// writer (the owning queue); O(fields) plain stores.
    #[inline]
    pub fn publish(&self, s: &QueueStats) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (f, o) in self.fields.iter().zip(s.ops.iter()) {
            f[0].store(o.ops, Ordering::Relaxed);
            f[1].store(o.bytes, Ordering::Relaxed);
            f[2].store(o.errors, Ordering::Relaxed);
            f[3].store(o.lat_sum_ns, Ordering::Relaxed);
            f[4].store(o.lat_min_ns, Ordering::Relaxed);
            f[5].store(o.lat_max_ns, Ordering::Relaxed);
        }
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// Records the I/Os in flight after a completion batch (the single writer only).
    #[inline]
    pub fn set_outstanding(&self, n: u32) {
        self.outstanding.store(u64::from(n), Ordering::Relaxed);
    }

    /// The I/Os in flight at the queue's last completion batch.
    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// A consistent copy of the last published counters.
    pub fn load(&self) -> QueueStats {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut out = QueueStats::default();
            for (f, o) in self.fields.iter().zip(out.ops.iter_mut()) {
                o.ops = f[0].load(Ordering::Relaxed);
                o.bytes = f[1].load(Ordering::Relaxed);
                o.errors = f[2].load(Ordering::Relaxed);
                o.lat_sum_ns = f[3].load(Ordering::Relaxed);
                o.lat_min_ns = f[4].load(Ordering::Relaxed);
                o.lat_max_ns = f[5].load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn record_and_sum() {
        let mut a = QueueStats::default();
        a.op_mut(Op::Read).record(4096, 100, true);
        a.op_mut(Op::Read).record(4096, 300, true);
        a.op_mut(Op::Write).record(512, 50, false);
        let r = a.op(Op::Read);
        assert_eq!((r.ops, r.bytes, r.errors), (2, 8192, 0));
        assert_eq!(
            (r.lat_min_ns, r.lat_max_ns, r.lat_avg_ns()),
            (100, 300, 200)
        );
        let w = a.op(Op::Write);
        assert_eq!((w.ops, w.bytes, w.errors), (1, 0, 1));
        let mut b = QueueStats::default();
        b.op_mut(Op::Read).record(4096, 10, true);
        a.add(&b);
        let t = a.total();
        assert_eq!((t.ops, t.bytes, t.errors), (4, 12288, 1));
        assert_eq!((t.lat_min_ns, t.lat_max_ns), (10, 300));
        assert_eq!(QueueStats::default().total().lat_avg_ns(), 0);
    }

    #[test]
    fn cell_publishes_and_loads() {
        let cell = QueueStatsCell::new();
        assert_eq!(cell.load(), QueueStats::default());
        let mut s = QueueStats::default();
        s.op_mut(Op::Discard).record(0, 7, true);
        cell.publish(&s);
        assert_eq!(QueueStats::snapshot(&cell), s);
    }

    #[test]
    fn cell_snapshots_are_consistent_under_concurrent_publish() {
        // The writer keeps every field of every op equal to the same counter; a torn read
        // would show different values.
        let cell = Arc::new(QueueStatsCell::new());
        let w = Arc::clone(&cell);
        let writer = std::thread::spawn(move || {
            for i in 1..=200_000u64 {
                let mut s = QueueStats::default();
                for o in s.ops.iter_mut() {
                    *o = OpStats {
                        ops: i,
                        bytes: i,
                        errors: i,
                        lat_sum_ns: i,
                        lat_min_ns: i,
                        lat_max_ns: i,
                    };
                }
                w.publish(&s);
            }
        });
        let mut last = 0;
        loop {
            let s = cell.load();
            let v = s.ops[0].ops;
            if v == 0 {
                continue; // the initial, all-default snapshot
            }
            for o in &s.ops {
                assert_eq!(
                    [
                        o.ops,
                        o.bytes,
                        o.errors,
                        o.lat_sum_ns,
                        o.lat_min_ns,
                        o.lat_max_ns
                    ],
                    [v; 6]
                );
            }
            assert!(v >= last, "counters went backwards");
            last = v;
            if v == 200_000 {
                break;
            }
        }
        writer.join().unwrap();
    }
}
