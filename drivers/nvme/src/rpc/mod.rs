//! SPDK's `bdev_nvme_*` methods on pmio's NVMe driver (feature `rpc`): controllers attached
//! over PCIe (VFIO) or NVMe/TCP, one bdev per namespace.
//!
//! The module's methods run on its own context, [`NvmeRpc`]: the attached controllers and the
//! driver defaults, over the daemon's [`BdevHost`](pmio_runtime::rpc::BdevHost). A daemon holds
//! one and merges [`methods`] into its registry with a projection to it; it writes the module's
//! part of `save_config` with [`NvmeRpc::config`] and detaches everything at shutdown with
//! [`NvmeRpc::detach_all`].
//!
//! - [`params`]: the one declaration of each method's parameters (the methods decode them,
//!   `pmio-rpc` builds and serializes them).
//! - [`args`]: `bdev_nvme_attach_controller`'s parameters checked against their transport
//!   (shared with `--check-config`); [`trid`]: where a controller is, as SPDK prints it.
//! - [`context`]: [`NvmeRpc`], the controller list, `save_config`'s attach calls, detach.
//! - [`defaults`]: the driver defaults `bdev_nvme_set_options` sets, SPDK's reconnect knobs.
//! - [`attach`], [`tcp`]: the attach method, and what is particular to NVMe/TCP attaches.
//! - [`ctrlrs`]: detach, reset and the controller list.
//! - [`error`]: driver errors as SPDK's errno replies.
//!
//! Attach brings the controller up (reset, admin queue, identify; for TCP, the connection and
//! the fabrics Connect: seconds at worst), so it runs on the RPC connection thread, never on a
//! reactor, with the controller's name and path reserved rather than the controller list
//! locked; it answers with one bdev name per namespace, `<name>n<nsid>`, as SPDK. Attaching the
//! same name to the same path again returns the existing names (idempotent); a name or path
//! already in use is -17 naming the controller. Detach and daemon shutdown remove the bdevs
//! first, then run the controller's shutdown sequence. `bdev_nvme_reset_controller` resets a
//! controller on the connection thread and answers once it is back; the reactors' queue pairs
//! hold their I/O meanwhile and recreate their queues at their next poll (no reactor waits).

//!
//! ```
//! use std::sync::Arc;
//! use pmio_jsonrpc::{Registry, RpcState};
//! use pmio_nvme::rpc::{self, NvmeRpc};
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
//! use pmio_runtime::rpc::BdevHost;
//!
//! let reactors = Reactors::start(CoreMask::parse("0x1")?, ReactorsOptions { pin_threads: false, ..Default::default() })?;
//! let nvme = NvmeRpc::new(Arc::new(BdevHost::new(reactors.handle())));
//! let methods: Registry<NvmeRpc> = rpc::methods().into_iter().collect();
//! let none = methods.call(&nvme, RpcState::Runtime, "bdev_nvme_get_controllers", None)?;
//! assert_eq!(none, serde_json::json!([]));
//! assert!(nvme.config().is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod args;
pub mod attach;
pub mod context;
pub mod ctrlrs;
pub mod defaults;
pub mod error;
pub mod params;
pub mod tcp;
pub mod trid;

pub use context::{CtrlrRecord, NvmeRpc};
pub use defaults::{NvmeDefaults, Reconnect, SharedDefaults};
pub use params::{NvmeAttach, NvmeDetach, NvmeGetControllers, NvmeReset, NvmeSetOptions};
pub use trid::{Adrfam, Trid};

use pmio_jsonrpc::{Method, RUNTIME};

/// The methods of the NVMe bdev module.
pub fn methods() -> Vec<Method<NvmeRpc>> {
    vec![
        Method::new(
            "bdev_nvme_attach_controller",
            RUNTIME,
            attach::bdev_nvme_attach_controller,
        ),
        Method::new(
            "bdev_nvme_detach_controller",
            RUNTIME,
            ctrlrs::bdev_nvme_detach_controller,
        ),
        Method::new(
            "bdev_nvme_reset_controller",
            RUNTIME,
            ctrlrs::bdev_nvme_reset_controller,
        ),
        Method::new(
            "bdev_nvme_get_controllers",
            RUNTIME,
            ctrlrs::bdev_nvme_get_controllers,
        ),
    ]
}

#[cfg(test)]
mod tests;
