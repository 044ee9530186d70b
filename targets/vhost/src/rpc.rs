//! SPDK's `vhost_*` methods on the vhost-user-blk target (feature `rpc`).
//!
//! Names, parameters and replies are SPDK v25.09's vhost app's (reference/vhost.md). Errors
//! follow `vhost_rpc.c`: a refused create or delete is -32602 with the errno's text ("File
//! exists", "No such device"), an unknown name in `vhost_get_controllers` is -32603 "No such
//! device"; where pmio knows more, it follows after a colon. Each method's parameters are
//! declared once ([`CreateBlkController`], [`GetControllers`], [`DeleteController`]): the
//! method decodes it, [`config`] (the "vhost_blk" section of `save_config`) writes it and
//! `pmio-rpc` builds it (`crate::cli`, feature `cli`: clap's derive is on the declarations).
//!
//! ```
//! use std::sync::Arc;
//! use pmio_jsonrpc::{Registry, RpcState};
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
//! use pmio_runtime::rpc::BdevHost;
//! use pmio_vhost::rpc::{self, VhostRpc};
//!
//! let reactors = Reactors::start(CoreMask::parse("0x1")?, ReactorsOptions { pin_threads: false, ..Default::default() })?;
//! let vhost = VhostRpc::new(Arc::new(BdevHost::new(reactors.handle())));
//! let methods: Registry<VhostRpc> = rpc::methods();
//! let none = methods.call(&vhost, RpcState::Runtime, "vhost_get_controllers", None)?;
//! assert_eq!(none, serde_json::json!([]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;
use std::sync::atomic::Ordering;

use pmio_jsonrpc::decl;
use pmio_jsonrpc::error::{RpcError, code, strerror};
use pmio_jsonrpc::{Method, RUNTIME, Registry};
use pmio_runtime::rpc::params::call;
use pmio_runtime::rpc::{BdevHost, BdevUser};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{BlkCtrlrParams, CtrlrInfo, VhostError, VhostTarget};

/// The context of the vhost methods: the target and the bdevs its controllers serve.
#[derive(Clone)]
pub struct VhostRpc {
    /// The vhost-user-blk target.
    pub tgt: Arc<VhostTarget>,
    /// Every bdev of the daemon.
    pub bdevs: Arc<BdevHost>,
}

impl VhostRpc {
    /// A target on `bdevs`' reactors serving `bdevs`' devices, registered with the host as a
    /// user of its controllers' disks (they are never deleted under it).
    pub fn new(bdevs: Arc<BdevHost>) -> VhostRpc {
        let tgt = VhostTarget::new(bdevs.reactors().clone(), bdevs.registry.clone());
        bdevs.add_user(Arc::new(VhostUser(tgt.clone())));
        VhostRpc { tgt, bdevs }
    }
}

/// The vhost target as a user of bdevs: a controller's disk is claimed.
struct VhostUser(Arc<VhostTarget>);

impl BdevUser for VhostUser {
    fn user_of(&self, name: &str) -> Option<String> {
        self.0.bdev_in_use(name).map(|ctrlr| {
            format!(
                "bdev {name} is the disk of vhost controller {ctrlr}; delete it first \
                 (vhost_delete_controller {ctrlr})"
            )
        })
    }
}

/// The methods of this module (runtime only, as SPDK's) and its `save_config` section,
/// "vhost_blk".
pub fn methods() -> Registry<VhostRpc> {
    let mut r: Registry<VhostRpc> = [
        Method::new(
            "vhost_create_blk_controller",
            RUNTIME,
            vhost_create_blk_controller,
        ),
        Method::new("vhost_get_controllers", RUNTIME, vhost_get_controllers),
        Method::new("vhost_delete_controller", RUNTIME, vhost_delete_controller),
    ]
    .into_iter()
    .collect();
    r.section("vhost_blk", &["bdev"], config);
    r.list_always("vhost_blk");
    r
}

/// SPDK's one vhost-blk transport, which pmio has.
pub const TRANSPORT: &str = "vhost_user_blk";

/// `vhost_create_blk_controller` parameters, in the order rpc.py sends them (it always sends
/// `readonly` and `packed_ring`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct CreateBlkController {
    /// Controller name (its socket's name in the socket directory).
    pub ctrlr: String,
    /// Bdev name.
    pub dev_name: String,
    /// Reactor mask (default: every reactor).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub cpumask: Option<String>,
    /// Virtio-blk transport, which newer rpc.py sends: vhost_user_blk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub transport: Option<String>,
    /// Read-only disk.
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(short = 'r', long))]
    pub readonly: bool,
    /// Packed virtqueues (refused by the target).
    #[serde(default)]
    #[cfg_attr(feature = "cli", arg(short = 'p', long = "packed_ring"))]
    pub packed_ring: bool,
}

/// `vhost_get_controllers` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetControllers {
    /// Only this controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'n', long))]
    pub name: Option<String>,
}

/// `vhost_delete_controller` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct DeleteController {
    /// Controller name.
    pub ctrlr: String,
}

/// `code` with the errno's text, then pmio's detail when it adds anything.
fn vhost_error(code: i32, e: &VhostError) -> RpcError {
    let text = strerror(e.errno());
    match e {
        VhostError::Exists(_) | VhostError::NotFound(_) => RpcError::new(code, text),
        _ => RpcError::new(code, format!("{text}: {e}")),
    }
}

fn vhost_create_blk_controller(
    rpc: &VhostRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: CreateBlkController = decl::decode(params)?;
    if let Some(t) = &p.transport
        && t != TRANSPORT
    {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("Invalid argument: transport {t:?} (pmio has {TRANSPORT} only)"),
        ));
    }
    // A bdev changes hands here: a concurrent bdev delete waits (see
    // BdevHost::hold_bdev_owners).
    let _owners = rpc.bdevs.hold_bdev_owners();
    rpc.tgt
        .create_blk(&BlkCtrlrParams {
            ctrlr: p.ctrlr,
            dev_name: p.dev_name,
            cpumask: p.cpumask,
            readonly: p.readonly,
            packed_ring: p.packed_ring,
        })
        .map_err(|e| vhost_error(code::INVALID_PARAMS, &e))?;
    Ok(Value::Bool(true))
}

/// A controller as `vhost_get_controllers` lists it (SPDK's member order).
fn ctrlr_json(c: &CtrlrInfo) -> Value {
    let sessions: Vec<Value> = if c.connected.load(Ordering::Relaxed) {
        vec![json!({
            "vid": c.sessions.load(Ordering::Relaxed) - 1,
            "id": 0,
            "name": format!("{}s{}", c.name, 0),
            "started": true,
        })]
    } else {
        Vec::new()
    };
    json!({
        "ctrlr": c.name,
        "cpumask": c.cpumask.to_hex(),
        "delay_base_us": 0,
        "iops_threshold": 60000,
        "socket": c.socket.display().to_string(),
        "sessions": sessions,
        "backend_specific": {
            "block": {
                "readonly": c.readonly,
                "bdev": c.bdev,
                "transport": TRANSPORT,
            }
        }
    })
}

fn vhost_get_controllers(
    rpc: &VhostRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetControllers = decl::decode(params)?;
    let all = rpc.tgt.controllers();
    let list: Vec<Value> = match &p.name {
        None => all.iter().map(|c| ctrlr_json(c)).collect(),
        Some(n) => {
            let c = all
                .iter()
                .find(|c| &c.name == n)
                .ok_or_else(|| RpcError::new(code::INTERNAL_ERROR, strerror(-libc::ENODEV)))?;
            vec![ctrlr_json(c)]
        }
    };
    Ok(Value::Array(list))
}

fn vhost_delete_controller(
    rpc: &VhostRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: DeleteController = decl::decode(params)?;
    rpc.tgt
        .delete(&p.ctrlr)
        .map_err(|e| vhost_error(code::INVALID_PARAMS, &e))?;
    Ok(Value::Bool(true))
}

/// The "vhost_blk" section of `save_config`: one create per controller, in creation order.
pub fn config(rpc: &VhostRpc) -> Vec<Value> {
    rpc.tgt
        .controllers()
        .iter()
        .map(|c| {
            let create = CreateBlkController {
                ctrlr: c.name.clone(),
                dev_name: c.bdev.clone(),
                cpumask: Some(c.cpumask.to_hex()),
                readonly: c.readonly,
                ..CreateBlkController::default()
            };
            call("vhost_create_blk_controller", &create)
        })
        .collect()
}
