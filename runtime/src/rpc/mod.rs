//! The RPC side of embedding pmio (feature `rpc`): the bdevs a daemon's methods share, and the
//! methods of the bdev layer and of the job engine.
//!
//! - [`host`]: [`BdevHost`], every bdev with the module that made it and the call that
//!   recreates it, its users, statistics and scheduler. A driver's `rpc` module registers its
//!   create and delete methods on it.
//! - [`params`]: parameter types and calls every bdev module shares (`uuid`, `bdev_*_delete`).
//! - [`bdev`]: `bdev_get_bdevs`, `bdev_get_iostat`.
//! - [`histogram`]: `bdev_enable_histogram`, `bdev_get_histogram` (SPDK's latency histograms).
//! - [`perform_tests`]: bdevperf's `perform_tests`, run by the job engine on the reactors.
//! - [`scheduler`]: `bdev_set_scheduler`, `bdev_get_scheduler` (pmio's mq-deadline).
//!
//! ```
//! use std::sync::Arc;
//! use pmio_jsonrpc::{Registry, RpcState};
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
//! use pmio_runtime::rpc::{self, BdevHost};
//!
//! let reactors = Reactors::start(CoreMask::parse("0x1")?, ReactorsOptions { pin_threads: false, ..Default::default() })?;
//! let host = Arc::new(BdevHost::new(reactors.handle()));
//! let methods: Registry<Arc<BdevHost>> = rpc::methods();
//! let none = methods.call(&host, RpcState::Runtime, "bdev_get_bdevs", None)?;
//! assert_eq!(none, serde_json::json!([]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod bdev;
#[cfg(feature = "cli")]
pub mod cli;
pub mod histogram;
pub mod host;
pub mod params;
pub mod perform_tests;
pub mod scheduler;

use std::sync::Arc;

pub use host::{BdevHost, BdevModule, BdevRecord, BdevUser, BusyGuard, bdev_error};
use pmio_jsonrpc::Registry;

/// Every method of this module, on the host.
pub fn methods() -> Registry<Arc<BdevHost>> {
    let mut r = Registry::new();
    r.extend(bdev::methods());
    r.extend(histogram::methods());
    r.extend(perform_tests::methods());
    r.extend(scheduler::methods());
    r
}
