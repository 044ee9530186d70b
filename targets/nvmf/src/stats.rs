//! What a poll group counts (`nvmf_get_stats`): kept in plain integers on its reactor and
//! published to a cell that RPC threads read.

use std::sync::atomic::{AtomicU64, Ordering};

/// One poll group's counters (SPDK's names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Admin queue pairs ever connected.
    pub admin_qpairs: u64,
    /// I/O queue pairs ever connected.
    pub io_qpairs: u64,
    pub current_admin_qpairs: u64,
    pub current_io_qpairs: u64,
    /// Bdev I/O in flight.
    pub pending_bdev_io: u64,
    /// NVMe commands completed.
    pub completed_nvme_io: u64,
    /// Command data buffers held by commands (back to 0 once every host is gone: a test
    /// counts them back).
    pub buffers_in_use: u64,
}

/// The shared copy of a group's [`GroupStats`].
#[derive(Debug, Default)]
pub struct GroupStatsCell([AtomicU64; 7]);

impl GroupStatsCell {
    /// Publishes `s` (each field on its own; a reader may see a mix of two publications).
    pub fn publish(&self, s: &GroupStats) {
        let v = [
            s.admin_qpairs,
            s.io_qpairs,
            s.current_admin_qpairs,
            s.current_io_qpairs,
            s.pending_bdev_io,
            s.completed_nvme_io,
            s.buffers_in_use,
        ];
        for (cell, v) in self.0.iter().zip(v) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    /// The last published counters.
    pub fn load(&self) -> GroupStats {
        let v: Vec<u64> = self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        GroupStats {
            admin_qpairs: v[0],
            io_qpairs: v[1],
            current_admin_qpairs: v[2],
            current_io_qpairs: v[3],
            pending_bdev_io: v[4],
            completed_nvme_io: v[5],
            buffers_in_use: v[6],
        }
    }
}
