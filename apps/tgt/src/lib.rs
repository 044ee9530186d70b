//! pmio-tgt: the pmio daemon. Reactors, bdevs, and SPDK-compatible JSON-RPC 2.0 on a unix socket.
//!
//! - [`jsonrpc`]: framing of concatenated JSON values, request validation, responses (SPDK's wire
//!   format, see `reference/spdk-rpc.md`).
//! - [`params`]: strict parameter decoding with errors that name the parameter.
//! - [`server`]: the unix-socket server (limits, one thread per connection, clean stop).
//! - [`target`]: the daemon state (framework state, bdev records, statistics, reactors).
//! - [`methods`]: the method table and the SPDK methods on the target state;
//!   [`perf`] (`perform_tests`), [`sched`] (`bdev_set_scheduler`/`bdev_get_scheduler`),
//!   [`uring`] and [`nvme`] add theirs; [`nvmf`] has SPDK's `nvmf_*` methods on the NVMe/TCP
//!   target; [`sock`] answers `sock_impl_get_options` for its sockets; [`vhost`] has SPDK's
//!   `vhost_*` methods on the vhost-user-blk target.
//! - [`config`]: configurations in `save_config`'s shape, pmio's and SPDK's unchanged (`-c`,
//!   `load_config`, rpc.py's replay, `--check-config`): what is created, mapped, ignored, refused.
//!
//! ```
//! use pmio_tgt::jsonrpc::{Decoder, handle_value, RpcError};
//! let mut d = Decoder::default();
//! d.feed(br#"{"jsonrpc":"2.0","method":"nope","id":1}"#);
//! let mut out = Vec::new();
//! handle_value(d.next_value().unwrap().unwrap(), &mut out, |_| Err(RpcError::method_not_found()));
//! assert_eq!(out, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}\n");
//! ```

pub mod config;
pub mod jsonrpc;
pub mod methods;
pub mod nvme;
pub mod nvmf;
pub mod params;
pub mod perf;
pub mod sched;
pub mod server;
pub mod sock;
pub mod target;
pub mod uring;
pub mod vhost;

/// Releases everything the daemon holds, after the RPC server has stopped and before the
/// reactors stop: closes the NVMe/TCP target's connections and listeners (they run on the
/// reactors and use the bdevs), detaches NVMe controllers with the shutdown sequence, then
/// unregisters every bdev.
pub fn shutdown(rpc: &methods::Rpc) {
    let t = &rpc.target;
    t.nvmf.shutdown();
    t.vhost.shutdown();
    nvme::detach_all(t);
    for r in t.records().into_iter().rev() {
        if let Err(e) = t.registry.unregister(&r.name) {
            log::debug!("unregistering {}: {e}", r.name);
        }
    }
}
