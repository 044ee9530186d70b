//! pmio-jsonrpc: the JSON-RPC 2.0 server library every pmio module registers its methods with,
//! as SPDK's `lib/jsonrpc` and `lib/rpc` (wire format: `reference/spdk-rpc.md`).
//!
//! - [`error`]: the error object of a reply, SPDK's codes and texts.
//! - [`frame`]: splitting a byte stream of concatenated JSON values, with size and depth limits.
//! - [`framework`]: `rpc_get_methods`, `framework_get_subsystems`, `framework_get_config` over any
//!   daemon's registry and the `save_config` sections its modules registered.
//! - [`message`]: request validation, response encoding, one value's handling.
//! - [`registry`]: methods by name with SPDK's state mask (start-up / runtime), generic over the
//!   context they run on, so a module registers its methods without knowing the daemon.
//! - [`cli`]: a client subcommand's request and rpc.py's printing styles.
//! - [`decl`]: one declaration per method's parameters (serde's derive), decoded with SPDK's rules.
//! - [`server`]: the unix-socket server (limits, one thread per connection, clean stop).
//!
//! ```
//! use pmio_jsonrpc::frame::Decoder;
//! use pmio_jsonrpc::message::handle_value;
//! use pmio_jsonrpc::registry::{Registry, RpcState, RUNTIME};
//! use serde_json::json;
//!
//! let mut methods = Registry::<()>::new();
//! methods.register("spdk_get_version", RUNTIME, |_, _, _| Ok(json!({"version": "pmio"})));
//! let mut d = Decoder::default();
//! d.feed(br#"{"jsonrpc":"2.0","method":"nope","id":1}"#);
//! let mut out = Vec::new();
//! handle_value(d.next_value().unwrap().unwrap(), &mut out, |c| {
//!     methods.call(&(), RpcState::Runtime, &c.method, c.params.as_ref())
//! });
//! assert_eq!(out, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}\n");
//! ```

pub mod cli;
pub mod decl;
pub mod error;
pub mod frame;
pub mod framework;
pub mod message;
pub mod registry;
pub mod server;

pub use error::{RpcError, code};
pub use message::Call;
pub use registry::{Method, RUNTIME, Registry, RpcState, STARTUP, Section};
