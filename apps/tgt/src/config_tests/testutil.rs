//! A target on one unpinned reactor, and the fixtures with their ports made free.

use std::sync::Arc;

use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
use serde_json::Value;

use crate::methods::Rpc;
use crate::target::Target;
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::RpcState;

/// SPDK v25.09's `save_config` of an spdk_tgt with a malloc and a null bdev.
pub const SAMPLE: &str = include_str!("../../../../config/tests/fixtures/spdk-v25.09-sample.json");
/// The same with an NVMe/TCP target: transport, discovery listener, two subsystems.
pub const NVMF: &str = include_str!("../../../../config/tests/fixtures/spdk-v25.09-nvmf.json");

pub fn rpc(state: RpcState) -> (Reactors, Rpc) {
    let reactors = Reactors::start(
        CoreMask::parse("0x1").unwrap(),
        ReactorsOptions {
            pin_threads: false,
            interrupt_idle: Some(std::time::Duration::from_millis(1)),
            ..ReactorsOptions::default()
        },
    )
    .unwrap();
    let target = Arc::new(Target::new(reactors.handle(), state));
    (reactors, Rpc::new(target, Box::new(|_| {})))
}

pub fn call(r: &Rpc, m: &str, p: Value) -> Result<Value, RpcError> {
    r.invoke(m, Some(&p).filter(|p| !p.is_null()))
}

/// A port nobody listens on now, never handed out twice in this process: tests that run at the
/// same time (and check that a port is free again after a rollback) never share one.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// The nvmf fixture with its ports (4420 for the subsystems, 8009 for discovery) moved to
/// free ones.
pub fn nvmf_fixture() -> (String, u16, u16) {
    let (io, disc) = (free_port(), free_port());
    let text = NVMF
        .replace("\"trsvcid\": \"4420\"", &format!("\"trsvcid\": \"{io}\""))
        .replace("\"trsvcid\": \"8009\"", &format!("\"trsvcid\": \"{disc}\""));
    (text, io, disc)
}
