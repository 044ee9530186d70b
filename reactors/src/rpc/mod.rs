//! SPDK's reactor and thread methods (feature `rpc`), in SPDK's shapes, so SPDK's `spdk_top`
//! and rpc.py read pmio's reactors unchanged.
//!
//! pmio has one SPDK "lightweight thread" per reactor: named `reactor_N`, id `N + 1` (SPDK's
//! thread ids start at 1), its cpumask the reactor's core. Ticks are nanoseconds
//! (`tick_rate` 1e9).
//!
//! - [`reactors`](mod@reactors): `framework_get_reactors`, with each core's `/proc/stat` times.
//! - [`threads`]: `thread_get_stats` and `thread_get_pollers`.
//! - `cli` (feature `cli`): `pmio-rpc`'s subcommands for these methods.
//!
//! `spdk_top` decodes a reactor, a thread and a poller object strictly (a key SPDK does not
//! write fails the whole screen), so these answers carry exactly SPDK's keys.

#[cfg(feature = "cli")]
pub mod cli;
mod procstat;
pub mod reactors;
pub mod threads;

use pmio_jsonrpc::{Method, RUNTIME};

use crate::{ReactorsHandle, now_ns};
use procstat::CpuTimes;

/// SPDK's `tick_rate`: pmio's ticks are nanoseconds.
pub const TICK_RATE: u64 = 1_000_000_000;

/// What the reactor methods read: the reactors, each one's thread id, the start time and each
/// core's CPU times at start.
pub struct ReactorsRpc {
    handle: ReactorsHandle,
    tids: Vec<i32>,
    start_ns: u64,
    /// Each core's `/proc/stat` times when this view was made (SPDK reports times since the
    /// app started); `None` where the file has no line for it.
    start_times: Vec<Option<CpuTimes>>,
}

impl ReactorsRpc {
    /// The reactor methods' view of `handle`. Asks each reactor its thread id (one round
    /// trip).
    pub fn new(handle: ReactorsHandle) -> ReactorsRpc {
        // SAFETY: gettid has no preconditions.
        let tids = handle
            .run_on_all(|_| unsafe { libc::gettid() })
            .unwrap_or_default();
        let start_times = procstat::read(handle.cores());
        ReactorsRpc {
            handle,
            tids,
            start_ns: now_ns(),
            start_times,
        }
    }

    /// Thread id of each reactor, in core order.
    pub fn tids(&self) -> &[i32] {
        &self.tids
    }

    /// Nanoseconds since this view was made (the daemon's start).
    pub fn uptime_ns(&self) -> u64 {
        now_ns().saturating_sub(self.start_ns)
    }
}

/// The reactor methods.
pub fn methods() -> Vec<Method<ReactorsRpc>> {
    vec![
        Method::new(
            "framework_get_reactors",
            RUNTIME,
            reactors::framework_get_reactors,
        ),
        Method::new("thread_get_stats", RUNTIME, threads::thread_get_stats),
        Method::new("thread_get_pollers", RUNTIME, threads::thread_get_pollers),
    ]
}

/// The SPDK thread of the reactor on `core`: its name.
fn thread_name(core: u32) -> String {
    format!("reactor_{core}")
}

/// The SPDK thread of the reactor on `core`: its id (SPDK's ids start at 1).
fn thread_id(core: u32) -> u64 {
    u64::from(core) + 1
}

/// A one-core mask in `spdk_cpuset_fmt`'s form: hex, no `0x`, no leading zeros (core 0: `1`,
/// core 9: `200`), for any core a mask can hold.
fn cpumask(core: u32) -> String {
    let digit = 1u8 << (core % 4);
    let zeros = (core / 4) as usize;
    format!("{digit:x}{}", "0".repeat(zeros))
}

#[cfg(test)]
mod tests;
