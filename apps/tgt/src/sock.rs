//! SPDK's `sock` subsystem on the NVMe/TCP target's sockets: `sock_impl_get_options` answers
//! the options new connections get ([`pmio_nvmf::SockOptions`]), in SPDK v25.09's shape for
//! the `posix` implementation, and [`config`] is the "sock" section of `save_config`.
//! `sock_impl_set_options` is a setting (`config::settings::plans::sock_impl_set_options`):
//! buffer sizes and TCP_QUICKACK map onto the target's options, the rest is noted.

use pmio_nvmf::SockOptions;
use serde_json::{Value, json};

use crate::methods::{Method, Rpc};
use pmio_jsonrpc::params::Params;
use pmio_jsonrpc::{RUNTIME, STARTUP};
use pmio_jsonrpc::{RpcError, code};

/// pmio's one socket implementation, by SPDK's name.
pub const IMPL_NAME: &str = "posix";

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        Method::new(
            "sock_impl_get_options",
            STARTUP | RUNTIME,
            sock_impl_get_options,
        ),
        Method::new(
            "sock_get_default_impl",
            STARTUP | RUNTIME,
            sock_get_default_impl,
        ),
    ]
}

/// The options as `sock_impl_get_options` writes them (`sock_rpc.c`'s keys, in its order):
/// what pmio's sockets do. pmio reads up to 64 KiB of a connection's PDUs at a time (SPDK's
/// receive pipe), copies on send (no MSG_ZEROCOPY), places connections round robin and has
/// no TLS.
pub fn options_json(o: &SockOptions) -> Value {
    json!({
        "recv_buf_size": o.recv_buf_size,
        "send_buf_size": o.send_buf_size,
        "enable_recv_pipe": true,
        "enable_quickack": o.enable_quickack,
        "enable_placement_id": 0,
        "enable_zerocopy_send_server": false,
        "enable_zerocopy_send_client": false,
        "zerocopy_threshold": 0,
        "tls_version": 0,
        "enable_ktls": false
    })
}

/// `sock_impl_get_options {"impl_name": "posix"}`. Another implementation is refused as SPDK
/// refuses one it does not have: -32602 "Invalid parameters".
fn sock_impl_get_options(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: String = p.req("impl_name")?;
    p.finish()?;
    if name != IMPL_NAME {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("Invalid parameters: pmio's sockets are {IMPL_NAME} sockets, not {name}"),
        ));
    }
    Ok(options_json(&rpc.target.nvmf.sock_options()))
}

/// `sock_get_default_impl`: `{"impl_name": "posix"}`.
fn sock_get_default_impl(_: &Rpc, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    crate::methods::no_params(method, params)?;
    Ok(json!({"impl_name": IMPL_NAME}))
}

/// The "sock" section of `save_config`: the default implementation, then its options (as
/// SPDK writes them, so SPDK loads the file too).
pub fn config(rpc: &Rpc) -> Vec<Value> {
    let mut opts = serde_json::Map::new();
    opts.insert("impl_name".into(), json!(IMPL_NAME));
    if let Value::Object(o) = options_json(&rpc.target.nvmf.sock_options()) {
        opts.extend(o);
    }
    vec![
        json!({"method": "sock_set_default_impl", "params": {"impl_name": IMPL_NAME}}),
        json!({"method": "sock_impl_set_options", "params": opts}),
    ]
}
