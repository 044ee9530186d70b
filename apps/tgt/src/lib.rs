//! pmio-tgt: the pmio daemon. Reactors, bdevs, and SPDK-compatible JSON-RPC 2.0 on a unix socket.
//!
//! The JSON-RPC server, its framing, errors and method registry are the `pmio-jsonrpc` crate;
//! this crate holds the daemon's state and the methods not yet moved to their modules.
//!
//! - [`target`]: the daemon state (framework state, bdev records, statistics, reactors).
//! - [`methods`]: the method table and the SPDK methods on the target state;
//!   [`perf`] (`perform_tests`), [`sched`] (`bdev_set_scheduler`/`bdev_get_scheduler`),
//!   [`uring`] add theirs; the NVMe/TCP target's `nvmf_*` and `sock_*` methods are
//!   `pmio_nvmf::rpc`'s, the vhost-user-blk target's `vhost_*` methods `pmio_vhost::rpc`'s.
//! - [`config`]: configurations in `save_config`'s shape, pmio's and SPDK's unchanged (`-c`,
//!   `load_config`, rpc.py's replay, `--check-config`): what is created, mapped, ignored, refused.
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
pub mod target;

/// Releases everything the daemon holds, after the RPC server has stopped and before the
/// reactors stop: closes the NVMe/TCP target's connections and listeners (they run on the
/// reactors and use the bdevs), detaches NVMe controllers with the shutdown sequence, then
/// unregisters every bdev.
pub fn shutdown(rpc: &methods::Rpc) {
    let t = &rpc.target;
    t.nvmf.tgt.shutdown();
    t.vhost.tgt.shutdown();
    t.nvme.detach_all();
    for r in t.bdevs.records().into_iter().rev() {
        if let Err(e) = t.bdevs.registry.unregister(&r.name) {
            log::debug!("unregistering {}: {e}", r.name);
        }
    }
}
