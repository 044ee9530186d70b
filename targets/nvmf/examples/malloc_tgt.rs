//! malloc_tgt: a daemon that serves malloc bdevs over NVMe/TCP, with pmio-tgt's RPCs for them
//! — what an app that embeds pmio writes to have its own target.
//!
//! ```text
//! malloc_tgt SOCKET [CPUMASK]       # CPUMASK as pmio-tgt's -m (default 0x1)
//! pmio-rpc -s SOCKET bdev_malloc_create -b Malloc0 64 512
//! pmio-rpc -s SOCKET nvmf_create_transport -t TCP
//! pmio-rpc -s SOCKET nvmf_create_subsystem nqn.2016-06.io.spdk:cnode1 -a
//! pmio-rpc -s SOCKET nvmf_subsystem_add_ns nqn.2016-06.io.spdk:cnode1 Malloc0
//! pmio-rpc -s SOCKET nvmf_subsystem_add_listener nqn.2016-06.io.spdk:cnode1 -t tcp -a 127.0.0.1 -s 4420
//! ```

use std::sync::Arc;
use std::time::Duration;

use pmio_jsonrpc::framework::{self, Framework};
use pmio_jsonrpc::server::{Handler, Server, ServerOptions};
use pmio_jsonrpc::{Call, Registry, RpcError, RpcState};
use pmio_nvmf::rpc::NvmfRpc;
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, ShutdownSignals};
use pmio_runtime::rpc::BdevHost;
use serde_json::Value;

/// The daemon: its bdevs, the NVMe/TCP target serving them, and the methods over both.
struct MallocTgt {
    bdevs: Arc<BdevHost>,
    nvmf: NvmfRpc,
    methods: Registry<MallocTgt>,
}

impl Framework for MallocTgt {
    fn registry(&self) -> &Registry<MallocTgt> {
        &self.methods
    }
    fn state(&self) -> RpcState {
        RpcState::Runtime // no --wait-for-rpc: configured by RPC from the start
    }
}

impl Handler for MallocTgt {
    fn call(&self, call: &Call) -> Result<Value, RpcError> {
        framework::call(self, call)
    }
}

/// The part of the daemon the bdev methods run on.
fn bdevs(d: &MallocTgt) -> &Arc<BdevHost> {
    &d.bdevs
}

/// The framework's methods, the bdev layer's, the malloc driver's and the target's, each
/// module's on its part of the daemon; `save_config`'s sections in replay order.
fn methods() -> Registry<MallocTgt> {
    let mut r = Registry::from(framework::methods());
    r.order_sections(&["sock", "bdev", "nvmf"]);
    r.section("bdev", &[], |d: &MallocTgt| d.bdevs.create_calls());
    r.list_always("bdev");
    r.merge(pmio_runtime::rpc::bdev::methods().into(), bdevs);
    r.merge(pmio_malloc::rpc::methods().into(), bdevs);
    r.merge(pmio_nvmf::rpc::methods(), |d: &MallocTgt| &d.nvmf);
    r
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let mut args = std::env::args().skip(1);
    let sock = args.next().ok_or("usage: malloc_tgt SOCKET [CPUMASK]")?;
    let mask = CoreMask::parse(&args.next().unwrap_or_else(|| "0x1".into()))?;
    // 1. Signals blocked before any thread starts; the socket bound before the reactors.
    let signals = ShutdownSignals::block()?;
    let server = Server::bind(ServerOptions::new(&sock))?;
    let opts = ReactorsOptions {
        interrupt_idle: Some(Duration::from_millis(1)), // sleep when idle, as pmio-tgt
        ..ReactorsOptions::default()
    };
    let reactors = Reactors::start(mask, opts)?;
    // 2. The bdevs, the target that serves them, the methods; serve.
    let bdevs = Arc::new(BdevHost::new(reactors.handle()));
    let nvmf = NvmfRpc::new(bdevs.clone());
    let daemon = Arc::new(MallocTgt {
        bdevs,
        nvmf,
        methods: methods(),
    });
    let server = server.start(daemon.clone())?;
    log::info!("malloc_tgt listening on {sock}");
    // 3. Until a signal; then stop in order: no new calls, no connections, no bdevs.
    let sig = signals.wait();
    log::info!("signal {sig} received: shutting down");
    daemon.bdevs.begin_shutdown();
    server.stop(Duration::from_secs(10));
    daemon.nvmf.tgt.shutdown();
    daemon.bdevs.unregister_all();
    drop(daemon);
    reactors.stop()?;
    log::info!("malloc_tgt stopped");
    Ok(())
}
