//! What the loader needs of the daemon it loads into: its methods (a load is a replay of calls
//! through them), its state, its mapped settings, and the few objects whose state a check or a
//! rollback reads directly.

use std::sync::Arc;

use pmio::bdev::Registry as Bdevs;
use pmio_jsonrpc::{RpcError, RpcState};
use pmio_nvme::rpc::CtrlrRecord;
use pmio_nvmf::NvmfTarget;
use pmio_reactors::ReactorsHandle;
use serde_json::Value;

use crate::settings::Settings;

/// A daemon a configuration loads into (pmio-tgt's `Rpc`, or an embedding app's).
pub trait Daemon: Send + Sync {
    /// Runs `method` with `params` as if it came over the socket.
    fn invoke(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError>;
    /// The state mask of `method`, if the daemon has it.
    fn states_of(&self, method: &str) -> Option<u8>;
    /// Names of every method, or of those callable in the current state.
    fn method_names(&self, current: bool) -> Vec<&'static str>;
    /// The state calls arrive in now.
    fn state(&self) -> RpcState;
    /// The settings mapped from SPDK's settings methods.
    fn settings(&self) -> &Settings;
    /// The reactors (their interrupt modes are settings).
    fn reactors(&self) -> &ReactorsHandle;
    /// The daemon's bdevs.
    fn bdevs(&self) -> &Bdevs;
    /// The NVMe/TCP target (transport and subsystems the checks see; socket options).
    fn nvmf(&self) -> &Arc<NvmfTarget>;
    /// The NVMe controllers attached.
    fn nvme_ctrlrs(&self) -> Vec<CtrlrRecord>;
}
