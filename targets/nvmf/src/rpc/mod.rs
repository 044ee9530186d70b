//! SPDK's `nvmf_*` and `sock_*` methods on the NVMe/TCP target (feature `rpc`).
//!
//! Names, parameters and replies are SPDK v25.09's (reference/nvmf.md), so rpc.py and scripts
//! written for `nvmf_tgt` work unchanged, including the keys of other transports rpc.py always
//! sends to `nvmf_create_transport`. Each method's parameters are declared once, as a serde
//! struct in the order rpc.py sends the keys: the method decodes it, [`config()`] writes the
//! `save_config` calls with it and `pmio-rpc` builds its requests from it.
//!
//! The methods run on an [`NvmfRpc`] (the target and the daemon's bdevs). They only change the
//! target's configuration, under its lock, on the RPC connection thread; binding a listener is
//! a non-blocking `bind`/`listen`. Connections and their I/O live on the reactors and pick the
//! changes up by themselves.
//!
//! - [`context`]: [`NvmfRpc`], and the target as a user of the bdevs it serves.
//! - [`rules`]: SPDK's extra rules as small types (`tgt_name`, ignored keys, hex identities)
//!   and the decoding with the nvmf methods' error replies; [`errors`]: those replies.
//! - [`transport`], [`subsystem`], [`ns`], [`listener`], [`host`], [`conn`]: the methods and
//!   their declarations, by what they act on.
//! - [`json`]: replies in SPDK's shapes; [`mod@config`]: the "nvmf" section of `save_config`.
//! - [`sock`]: the `sock_*` methods on the target's sockets and the "sock" section.
//!
//! ```
//! use std::sync::Arc;
//! use pmio_jsonrpc::{Registry, RpcState};
//! use pmio_nvmf::rpc::{self, NvmfRpc};
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
//! use pmio_runtime::rpc::BdevHost;
//! use serde_json::json;
//!
//! let reactors = Reactors::start(CoreMask::parse("0x1")?, ReactorsOptions { pin_threads: false, ..Default::default() })?;
//! let nvmf = NvmfRpc::new(Arc::new(BdevHost::new(reactors.handle())));
//! let methods: Registry<NvmfRpc> = rpc::methods();
//! let nqn = json!({"nqn": "nqn.2016-06.io.spdk:cnode1"});
//! methods.call(&nvmf, RpcState::Runtime, "nvmf_create_subsystem", Some(&nqn))?;
//! assert_eq!(rpc::config(&nvmf)[0]["method"], "nvmf_create_subsystem");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
pub mod conn;
pub mod context;
pub mod errors;
pub mod host;
pub mod json;
pub mod listener;
pub mod ns;
pub mod rules;
pub mod sock;
pub mod subsystem;
pub mod transport;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_ana;
#[cfg(test)]
mod testutil;

pub use config::config;
pub use context::NvmfRpc;
pub use transport::transport_matches;

use pmio_jsonrpc::{Method, RUNTIME, Registry, RpcError};
use serde_json::Value;

/// A method body of this module.
type Run = fn(&NvmfRpc, &str, Option<&Value>) -> Result<Value, RpcError>;

/// The `nvmf_*` methods (runtime only, as SPDK's), in SPDK's order, then the socket methods
/// ([`sock::methods`]), with the module's `save_config` sections: "nvmf" and "sock".
pub fn methods() -> Registry<NvmfRpc> {
    let m = |name: &'static str, run: Run| Method::new(name, RUNTIME, run);
    let mut r: Registry<NvmfRpc> = [
        m("nvmf_create_transport", transport::nvmf_create_transport),
        m("nvmf_get_transports", transport::nvmf_get_transports),
        m("nvmf_create_subsystem", subsystem::nvmf_create_subsystem),
        m("nvmf_delete_subsystem", subsystem::nvmf_delete_subsystem),
        m("nvmf_get_subsystems", subsystem::nvmf_get_subsystems),
        m("nvmf_subsystem_add_ns", ns::nvmf_subsystem_add_ns),
        m("nvmf_subsystem_remove_ns", ns::nvmf_subsystem_remove_ns),
        m(
            "nvmf_subsystem_add_listener",
            listener::nvmf_subsystem_add_listener,
        ),
        m(
            "nvmf_subsystem_remove_listener",
            listener::nvmf_subsystem_remove_listener,
        ),
        m(
            "nvmf_subsystem_get_listeners",
            listener::nvmf_subsystem_get_listeners,
        ),
        m(
            "nvmf_subsystem_listener_set_ana_state",
            listener::nvmf_subsystem_listener_set_ana_state,
        ),
        m("nvmf_subsystem_add_host", host::nvmf_subsystem_add_host),
        m(
            "nvmf_subsystem_remove_host",
            host::nvmf_subsystem_remove_host,
        ),
        m(
            "nvmf_subsystem_allow_any_host",
            host::nvmf_subsystem_allow_any_host,
        ),
        m(
            "nvmf_subsystem_get_controllers",
            conn::nvmf_subsystem_get_controllers,
        ),
        m("nvmf_subsystem_get_qpairs", conn::nvmf_subsystem_get_qpairs),
        m("nvmf_get_stats", conn::nvmf_get_stats),
    ]
    .into_iter()
    .collect();
    // The nvmf section replays after the bdevs its namespaces take and the socket options
    // its listeners use.
    r.section("nvmf", &["bdev", "sock"], config::config);
    r.list_always("nvmf");
    r.extend(sock::methods());
    r.section("sock", &[], sock::config);
    r.list_always("sock");
    r
}
