//! pmio-tgt: the pmio daemon. Reactors, bdevs, and SPDK-compatible JSON-RPC 2.0 on a unix socket.
//!
//! The daemon is its modules put together: the JSON-RPC server and the framework methods are
//! `pmio-jsonrpc`'s, every other method lives beside its module (`pmio_runtime::rpc`, the
//! drivers' and targets' `rpc` modules, `pmio_reactors::rpc`), and configuration loading is
//! `pmio-config`'s, over this daemon's methods.
//!
//! - [`target`]: the daemon state (framework state, the modules' contexts).
//! - [`methods`]: the registry (every module's methods merged onto [`methods::Rpc`], the
//!   `save_config` sections in replay order) and the daemon's own methods
//!   (`spdk_get_version`, `spdk_kill_instance`, `framework_start_init`).
//! - [`metrics`]: `--metrics-listen`, the daemon's counters for Prometheus on `GET /metrics`.
//!
//! ```
//! use pmio_tgt::methods::all_methods;
//! let methods = all_methods();
//! assert!(methods.find("bdev_malloc_create").is_some());
//! assert_eq!(methods.find("framework_start_init").unwrap().states, pmio_jsonrpc::STARTUP);
//! ```

#[cfg(test)]
mod config_tests;
pub mod methods;
pub mod metrics;
pub mod target;

/// Releases everything the daemon holds, after the RPC server has stopped and before the
/// reactors stop: closes the NVMe/TCP target's connections and listeners (they run on the
/// reactors and use the bdevs), unloads the lvstores cleanly, detaches NVMe controllers with the shutdown sequence, then
/// unregisters every bdev.
pub fn shutdown(rpc: &methods::Rpc) {
    let t = &rpc.target;
    t.nvmf.tgt.shutdown();
    t.vhost.tgt.shutdown();
    t.ublk.tgt.shutdown();
    t.lvol.shutdown();
    t.nvme.detach_all();
    for r in t.bdevs.records().into_iter().rev() {
        if let Err(e) = t.bdevs.registry.unregister(&r.name) {
            log::debug!("unregistering {}: {e}", r.name);
        }
    }
}
