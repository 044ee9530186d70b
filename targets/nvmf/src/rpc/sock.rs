//! SPDK's `sock` subsystem on the NVMe/TCP target's sockets ([`crate::SockOptions`]):
//! `sock_impl_get_options` answers the options new connections get, in SPDK v25.09's shape for
//! the `posix` implementation, `sock_get_default_impl` names it, and [`config`] is the "sock"
//! section of `save_config`.
//!
//! `sock_impl_set_options` is a setting the daemon's configuration code plans key by key
//! (buffer sizes and TCP_QUICKACK map onto the target's options, the rest is noted);
//! [`SockImplSetOptions`] declares its parameters and [`SockChange`] is what it changes.

use pmio_jsonrpc::decl::{self, no_params};
use pmio_jsonrpc::{Method, RUNTIME, RpcError, STARTUP, code};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::NvmfRpc;
use crate::SockOptions;

/// pmio's one socket implementation, by SPDK's name.
pub const IMPL_NAME: &str = "posix";

/// The socket methods.
pub fn methods() -> Vec<Method<NvmfRpc>> {
    vec![
        Method::new(
            "sock_impl_get_options",
            STARTUP | RUNTIME,
            sock_impl_get_options,
        ),
        Method::new(
            "sock_get_default_impl",
            STARTUP | RUNTIME,
            |_: &NvmfRpc, method: &str, params: Option<&Value>| {
                no_params(method, params)?;
                Ok(json!({"impl_name": IMPL_NAME}))
            },
        ),
    ]
}

/// `sock_impl_get_options` and `sock_set_default_impl` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct SockImpl {
    /// The implementation (pmio: posix).
    #[cfg_attr(feature = "cli", arg(short = 'i', long = "impl"))]
    pub impl_name: String,
}

/// `sock_impl_set_options` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SockImplSetOptions {
    /// The implementation whose options change (pmio's sockets are posix).
    pub impl_name: String,
    /// SO_RCVBUF, bytes (the daemon refuses a size past `u32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recv_buf_size: Option<u64>,
    /// SO_SNDBUF, bytes (the daemon refuses a size past `u32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_buf_size: Option<u64>,
    /// SPDK's receive pipe (pmio always reads up to 64 KiB at a time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_recv_pipe: Option<bool>,
    /// TCP_QUICKACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_quickack: Option<bool>,
    /// Connection placement (pmio: round robin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_placement_id: Option<u64>,
    /// MSG_ZEROCOPY for server sockets (pmio copies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_zerocopy_send_server: Option<bool>,
    /// MSG_ZEROCOPY for client sockets (pmio copies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_zerocopy_send_client: Option<bool>,
    /// Zero-copy threshold, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zerocopy_threshold: Option<u64>,
    /// TLS version (pmio has no TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_version: Option<u64>,
    /// Kernel TLS (pmio has no TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_ktls: Option<bool>,
    /// TLS pre-shared key (pmio has no TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psk_key: Option<String>,
    /// TLS PSK identity (pmio has no TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psk_identity: Option<String>,
}

/// What `sock_impl_set_options -i posix` changes of the NVMe/TCP target's socket options
/// (`None`: kept; SPDK's call also starts from the options in effect).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockChange {
    /// `recv_buf_size`: SO_RCVBUF.
    pub recv_buf_size: Option<u32>,
    /// `send_buf_size`: SO_SNDBUF.
    pub send_buf_size: Option<u32>,
    /// `enable_quickack`: TCP_QUICKACK.
    pub enable_quickack: Option<bool>,
}

impl SockChange {
    /// `o` with the fields that were set replaced.
    pub fn apply_to(&self, o: SockOptions) -> SockOptions {
        SockOptions {
            recv_buf_size: self.recv_buf_size.unwrap_or(o.recv_buf_size),
            send_buf_size: self.send_buf_size.unwrap_or(o.send_buf_size),
            enable_quickack: self.enable_quickack.unwrap_or(o.enable_quickack),
        }
    }
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
fn sock_impl_get_options(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SockImpl = decl::decode(params)?;
    if p.impl_name != IMPL_NAME {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "Invalid parameters: pmio's sockets are {IMPL_NAME} sockets, not {}",
                p.impl_name
            ),
        ));
    }
    Ok(options_json(&rpc.tgt.sock_options()))
}

/// The "sock" section of `save_config`: the default implementation, then its options (as
/// SPDK writes them, so SPDK loads the file too).
pub fn config(rpc: &NvmfRpc) -> Vec<Value> {
    let mut opts = serde_json::Map::new();
    opts.insert("impl_name".into(), json!(IMPL_NAME));
    if let Value::Object(o) = options_json(&rpc.tgt.sock_options()) {
        opts.extend(o);
    }
    vec![
        json!({"method": "sock_set_default_impl", "params": {"impl_name": IMPL_NAME}}),
        json!({"method": "sock_impl_set_options", "params": opts}),
    ]
}
