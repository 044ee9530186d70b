//! SPDK's `ublk_*` methods on the ublk target (feature `rpc`).
//!
//! Names, parameters, replies and errors are SPDK v25.09's `lib/ublk/ublk_rpc.c`:
//! `ublk_create_target` and `ublk_destroy_target` answer true or -32603 with the errno's
//! text; `ublk_start_disk` and `ublk_recover_disk` answer the disk's id, or the negative
//! errno with its text; `ublk_stop_disk` answers true; `ublk_get_disks` lists
//! `{ublk_device, id, queue_depth, num_queues, bdev_name}` (and pmio's `user_copy`), an unknown
//! id -19 "No such device". `ublk_create_target`'s `disable_user_copy` is SPDK's; pmio also
//! lets each disk choose (`ublk_start_disk`'s `user_copy`, pmio's own).
//! Where pmio knows more (which module to load, which disk holds a bdev), it follows the
//! errno's text after a colon. Each method's parameters are declared once: the method decodes
//! it, [`config`] (the "ublk" section of `save_config`) writes it and `pmio-rpc` builds it
//! (`crate::cli`, feature `cli`).
//!
//! ```
//! use std::sync::Arc;
//! use pmio_jsonrpc::{Registry, RpcState};
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
//! use pmio_runtime::rpc::BdevHost;
//! use pmio_ublk::rpc::{self, UblkRpc};
//!
//! let reactors = Reactors::start(CoreMask::parse("0x1")?, ReactorsOptions { pin_threads: false, ..Default::default() })?;
//! let ublk = UblkRpc::new(Arc::new(BdevHost::new(reactors.handle())));
//! let methods: Registry<UblkRpc> = rpc::methods();
//! let none = methods.call(&ublk, RpcState::Runtime, "ublk_get_disks", None)?;
//! assert_eq!(none, serde_json::json!([]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use pmio_jsonrpc::decl;
use pmio_jsonrpc::error::{RpcError, code, strerror};
use pmio_jsonrpc::{Method, RUNTIME, Registry};
use pmio_runtime::rpc::params::call;
use pmio_runtime::rpc::{BdevHost, BdevUser};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{
    DEFAULT_NUM_QUEUES, DEFAULT_QUEUE_DEPTH, DiskInfo, StartDiskParams, UblkError, UblkTarget,
};

/// The context of the ublk methods: the target and the bdevs its disks serve.
#[derive(Clone)]
pub struct UblkRpc {
    /// The ublk target.
    pub tgt: Arc<UblkTarget>,
    /// Every bdev of the daemon.
    pub bdevs: Arc<BdevHost>,
}

impl UblkRpc {
    /// A target on `bdevs`' reactors serving `bdevs`' devices, registered with the host as a
    /// user of its disks' bdevs (they are never deleted under a started disk).
    pub fn new(bdevs: Arc<BdevHost>) -> UblkRpc {
        UblkRpc::with_target(
            UblkTarget::new(bdevs.reactors().clone(), bdevs.registry.clone()),
            bdevs,
        )
    }

    /// [`UblkRpc::new`] with a target made elsewhere (tests: another control device).
    pub fn with_target(tgt: Arc<UblkTarget>, bdevs: Arc<BdevHost>) -> UblkRpc {
        bdevs.add_user(Arc::new(UblkUser(tgt.clone())));
        UblkRpc { tgt, bdevs }
    }
}

/// The ublk target as a user of bdevs: a started disk's bdev is claimed.
struct UblkUser(Arc<UblkTarget>);

impl BdevUser for UblkUser {
    fn user_of(&self, name: &str) -> Option<String> {
        self.0.bdev_in_use(name).map(|id| {
            format!("bdev {name} is ublk disk {id} (/dev/ublkb{id}); stop it first (ublk_stop_disk {id})")
        })
    }
}

/// The methods of this module (runtime only, as SPDK's) and its `save_config` section,
/// "ublk".
pub fn methods() -> Registry<UblkRpc> {
    let mut r: Registry<UblkRpc> = [
        Method::new("ublk_create_target", RUNTIME, ublk_create_target),
        Method::new("ublk_destroy_target", RUNTIME, ublk_destroy_target),
        Method::new("ublk_start_disk", RUNTIME, ublk_start_disk),
        Method::new("ublk_stop_disk", RUNTIME, ublk_stop_disk),
        Method::new("ublk_recover_disk", RUNTIME, ublk_recover_disk),
        Method::new("ublk_get_disks", RUNTIME, ublk_get_disks),
    ]
    .into_iter()
    .collect();
    r.section("ublk", &["bdev"], config);
    r
}

/// `ublk_create_target` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct CreateTarget {
    /// CPU mask for the ublk target's I/O threads (default: every reactor).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'm', long))]
    pub cpumask: Option<String>,
    /// Disable the ublk user-copy feature: disks that do not ask for it (ublk_start_disk
    /// --user-copy) have the kernel copy their data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "cli", arg(long = "disable-user-copy"))]
    pub disable_user_copy: bool,
}

/// `ublk_start_disk` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct StartDisk {
    /// Name of the bdev to export.
    pub bdev_name: String,
    /// ublk device ID, used as the suffix N in /dev/ublkbN.
    pub ublk_id: u32,
    /// Number of queues to create on the device. Default: 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'q', long = "num-queues"))]
    pub num_queues: Option<u32>,
    /// Per-queue depth. Default: 128.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'd', long = "queue-depth"))]
    pub queue_depth: Option<u32>,
    /// pmio's own: move the disk's data by user copy (UBLK_F_USER_COPY, Linux 6.5+), true,
    /// or have the kernel copy it through per-tag buffers, false. Default: the kernel copy
    /// (user copy measured no faster: BENCHMARKS.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long = "user-copy"))]
    pub user_copy: Option<bool>,
}

/// `ublk_stop_disk` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct StopDisk {
    /// ID of the ublk device to stop.
    pub ublk_id: u32,
}

/// `ublk_recover_disk` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RecoverDisk {
    /// Name of the bdev backing the recovering ublk device.
    pub bdev_name: String,
    /// ID of the ublk device to recover.
    pub ublk_id: u32,
}

/// `ublk_get_disks` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetDisks {
    /// ID of a ublk device to query. Default: list all.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'n', long = "ublk-id"))]
    pub ublk_id: Option<u32>,
}

/// The errno as code with its text, then pmio's detail where it adds anything.
fn ublk_error(code: i32, e: &UblkError) -> RpcError {
    let text = strerror(e.errno());
    match e {
        UblkError::NoDisk(_) | UblkError::TargetExists => RpcError::new(code, text),
        _ => RpcError::new(code, format!("{text}: {e}")),
    }
}

fn ublk_create_target(rpc: &UblkRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: CreateTarget = decl::decode(params)?;
    rpc.tgt
        .create(p.cpumask.as_deref(), p.disable_user_copy)
        .map_err(|e| ublk_error(code::INTERNAL_ERROR, &e))?;
    Ok(Value::Bool(true))
}

/// SPDK's method reads no parameters (and refuses none).
fn ublk_destroy_target(rpc: &UblkRpc, _: &str, _: Option<&Value>) -> Result<Value, RpcError> {
    rpc.tgt
        .destroy()
        .map_err(|e| ublk_error(code::INTERNAL_ERROR, &e))?;
    Ok(Value::Bool(true))
}

/// Reserves the disk and its bdev with the bdev owners held: a concurrent bdev delete either
/// ran before (the bdev is not found) or waits and then sees the disk.
/// The bdev is named by its own name from then on, whichever of its names the call gave
/// (an alias such as `lvs0/vol0`, a UUID).
fn reserve(rpc: &UblkRpc, p: &StartDiskParams) -> Result<crate::Reservation, RpcError> {
    let _owners = rpc.bdevs.hold_bdev_owners();
    let p = match rpc.bdevs.find_bdev(&p.bdev_name) {
        Some(d) => &StartDiskParams {
            bdev_name: d.info().name.clone(),
            ..p.clone()
        },
        None => p,
    };
    rpc.tgt.reserve(p).map_err(|e| ublk_error(e.errno(), &e))
}

fn ublk_start_disk(rpc: &UblkRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: StartDisk = decl::decode(params)?;
    let sp = StartDiskParams {
        bdev_name: p.bdev_name,
        ublk_id: p.ublk_id,
        num_queues: p.num_queues.unwrap_or(DEFAULT_NUM_QUEUES),
        queue_depth: p.queue_depth.unwrap_or(DEFAULT_QUEUE_DEPTH),
        user_copy: p.user_copy,
    };
    let r = reserve(rpc, &sp)?;
    let d = rpc.tgt.start(r).map_err(|e| ublk_error(e.errno(), &e))?;
    Ok(json!(d.id))
}

fn ublk_recover_disk(rpc: &UblkRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: RecoverDisk = decl::decode(params)?;
    let sp = StartDiskParams {
        bdev_name: p.bdev_name,
        ublk_id: p.ublk_id,
        num_queues: DEFAULT_NUM_QUEUES,
        queue_depth: DEFAULT_QUEUE_DEPTH,
        user_copy: None,
    };
    let r = reserve(rpc, &sp)?;
    let d = rpc.tgt.recover(r).map_err(|e| ublk_error(e.errno(), &e))?;
    Ok(json!(d.id))
}

fn ublk_stop_disk(rpc: &UblkRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: StopDisk = decl::decode(params)?;
    rpc.tgt
        .stop(p.ublk_id)
        .map_err(|e| ublk_error(e.errno(), &e))?;
    Ok(Value::Bool(true))
}

/// A disk as `ublk_get_disks` lists it (SPDK's member order).
fn disk_json(d: &DiskInfo) -> Value {
    json!({
        "ublk_device": d.block_device(),
        "id": d.id,
        "queue_depth": d.queue_depth,
        "num_queues": d.num_queues,
        "bdev_name": d.bdev,
        "user_copy": d.user_copy,
    })
}

fn ublk_get_disks(rpc: &UblkRpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: GetDisks = decl::decode(params)?;
    let all = rpc.tgt.disks();
    let list: Vec<Value> = match p.ublk_id {
        None => all.iter().map(disk_json).collect(),
        Some(id) => {
            let d = all
                .iter()
                .find(|d| d.id == id)
                .ok_or_else(|| RpcError::errno(-libc::ENODEV))?;
            vec![disk_json(d)]
        }
    };
    Ok(Value::Array(list))
}

/// The "ublk" section of `save_config`: the target, then one start per disk, by id.
pub fn config(rpc: &UblkRpc) -> Vec<Value> {
    let Some(mask) = rpc.tgt.target_cpumask() else {
        return Vec::new();
    };
    let mut out = vec![call(
        "ublk_create_target",
        &CreateTarget {
            cpumask: Some(mask.to_hex()),
            disable_user_copy: rpc.tgt.user_copy_disabled(),
        },
    )];
    out.extend(rpc.tgt.disks().iter().map(|d| {
        call(
            "ublk_start_disk",
            &StartDisk {
                bdev_name: d.bdev.clone(),
                ublk_id: d.id,
                num_queues: Some(d.num_queues),
                queue_depth: Some(d.queue_depth),
                // As it runs, so a replay gets the same disk whatever the default.
                user_copy: Some(d.user_copy),
            },
        )
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio_jsonrpc::RpcState;
    use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};

    fn host() -> (Reactors, UblkRpc) {
        let reactors = Reactors::start(
            CoreMask::parse("0x1").unwrap(),
            ReactorsOptions {
                pin_threads: false,
                ..Default::default()
            },
        )
        .unwrap();
        let bdevs = Arc::new(BdevHost::new(reactors.handle()));
        let tgt = UblkTarget::with_control_path(
            reactors.handle(),
            bdevs.registry.clone(),
            "/nonexistent/ublk-control",
        );
        (reactors, UblkRpc::with_target(tgt, bdevs))
    }

    /// A kernel without ublk: the target is refused with SPDK's code and a message naming
    /// the module; the other methods say there is no target; nothing is saved.
    #[test]
    fn without_ublk_drv_every_method_says_so() {
        let (reactors, rpc) = host();
        let m = methods();
        let call = |name: &str, p: Value| m.call(&rpc, RpcState::Runtime, name, Some(&p));
        let e = call("ublk_create_target", json!({})).unwrap_err();
        assert_eq!(e.code, code::INTERNAL_ERROR);
        assert!(e.message.starts_with("No such file or directory: "), "{e}");
        assert!(e.message.contains("ublk_drv"), "{e}");
        let e = call(
            "ublk_start_disk",
            json!({"bdev_name": "Malloc0", "ublk_id": 0}),
        )
        .unwrap_err();
        assert_eq!(e.code, -libc::ENODEV, "{e}");
        // pmio's user_copy is a parameter of the method (not refused as unknown).
        let e = call(
            "ublk_start_disk",
            json!({"bdev_name": "Malloc0", "ublk_id": 0, "user_copy": true}),
        )
        .unwrap_err();
        assert_eq!(e.code, -libc::ENODEV, "{e}");
        let e = call("ublk_stop_disk", json!({"ublk_id": 0})).unwrap_err();
        assert_eq!(e.code, -libc::ENODEV, "{e}");
        let e = call(
            "ublk_start_disk",
            json!({"bdev_name": "Malloc0", "ublk_id": 0, "queue_depth": 5000}),
        )
        .unwrap_err();
        assert_eq!(e.code, -libc::EINVAL, "{e}");
        assert!(e.message.contains("4096"), "{e}");
        assert_eq!(call("ublk_get_disks", json!({})).unwrap(), json!([]));
        let e = call("ublk_get_disks", json!({"ublk_id": 3})).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-19, "No such device"));
        assert!(config(&rpc).is_empty());
        let e = call(
            "ublk_start_disk",
            json!({"bdev_name": "M", "ublk_id": 0, "x": 1}),
        )
        .unwrap_err();
        assert_eq!(e.code, code::INTERNAL_ERROR, "{e}");
        reactors.stop().unwrap();
    }
}
