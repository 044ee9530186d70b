//! A small daemon for the tests: the nvmf and sock methods beside the bdev layer's and the
//! malloc and null drivers', on one reactor.

use std::sync::Arc;

use pmio_jsonrpc::{Registry, RpcError, RpcState};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
use pmio_runtime::rpc::BdevHost;
use serde_json::Value;

use super::NvmfRpc;

/// The methods' context and the registry that serves them.
pub struct Daemon {
    pub nvmf: NvmfRpc,
    methods: Registry<NvmfRpc>,
    _reactors: Reactors,
}

/// The bdev host the bdev methods run on.
fn bdevs(n: &NvmfRpc) -> &Arc<BdevHost> {
    &n.bdevs
}

/// A daemon on one reactor (not pinned, sleeping when idle).
pub fn daemon() -> Daemon {
    let reactors = Reactors::start(
        CoreMask::parse("0x1").unwrap(),
        ReactorsOptions {
            pin_threads: false,
            interrupt_idle: Some(std::time::Duration::from_millis(1)),
            ..ReactorsOptions::default()
        },
    )
    .unwrap();
    let nvmf = NvmfRpc::new(Arc::new(BdevHost::new(reactors.handle())));
    let mut methods = Registry::new();
    methods.merge(pmio_runtime::rpc::methods(), bdevs);
    methods.merge(pmio_malloc::rpc::methods().into_iter().collect(), bdevs);
    methods.merge(pmio_null::rpc::methods().into_iter().collect(), bdevs);
    methods.merge(super::methods(), |n: &NvmfRpc| n);
    Daemon {
        nvmf,
        methods,
        _reactors: reactors,
    }
}

/// Calls `m` with `p` (`null`: no parameters) as a client would.
pub fn call(d: &Daemon, m: &str, p: Value) -> Result<Value, RpcError> {
    d.methods.call(
        &d.nvmf,
        RpcState::Runtime,
        m,
        Some(&p).filter(|p| !p.is_null()),
    )
}

/// A TCP port nobody listens on (for a moment).
pub fn free_port() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string()
}
