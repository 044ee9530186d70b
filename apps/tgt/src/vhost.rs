//! SPDK's `vhost_*` methods on the daemon's vhost-user-blk target ([`pmio_vhost::VhostTarget`]).
//!
//! Names, parameters and replies are SPDK v25.09's vhost app's (reference/vhost.md). Errors
//! follow `vhost_rpc.c`: a refused create or delete is -32602 with the errno's text ("File
//! exists", "No such device"), an unknown name in `vhost_get_controllers` is -32603 "No such
//! device"; where pmio knows more, it follows after a colon. [`config`] is the "vhost_blk"
//! section of `save_config`.

use pmio_vhost::{BlkCtrlrParams, CtrlrInfo, VhostError};
use serde_json::{Value, json};

use crate::methods::{Method, MethodFn, Rpc};
use pmio_jsonrpc::RUNTIME;
use pmio_jsonrpc::error::{RpcError, code, strerror};
use pmio_jsonrpc::params::Params;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |name: &'static str, run: MethodFn| Method::new(name, RUNTIME, run);
    vec![
        m("vhost_create_blk_controller", vhost_create_blk_controller),
        m("vhost_get_controllers", vhost_get_controllers),
        m("vhost_delete_controller", vhost_delete_controller),
    ]
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
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let ctrlr: String = p.req("ctrlr")?;
    let dev_name: String = p.req("dev_name")?;
    let cpumask: Option<String> = p.opt("cpumask")?;
    let readonly = p.opt::<bool>("readonly")?.unwrap_or(false);
    let packed_ring = p.opt::<bool>("packed_ring")?.unwrap_or(false);
    // Newer rpc.py sends the transport; pmio has SPDK's default one.
    if let Some(t) = p.opt::<String>("transport")?
        && t != "vhost_user_blk"
    {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("Invalid argument: transport {t:?} (pmio has vhost_user_blk only)"),
        ));
    }
    p.finish()?;
    let t = &rpc.target;
    // A bdev changes hands here: a concurrent bdev delete waits (see Target::hold_bdev_owners).
    let _owners = t.bdevs.hold_bdev_owners();
    t.vhost
        .create_blk(&BlkCtrlrParams {
            ctrlr,
            dev_name,
            cpumask,
            readonly,
            packed_ring,
        })
        .map_err(|e| vhost_error(code::INVALID_PARAMS, &e))?;
    Ok(Value::Bool(true))
}

fn ctrlr_json(c: &CtrlrInfo) -> Value {
    let sessions: Vec<Value> = if c.connected.load(std::sync::atomic::Ordering::Relaxed) {
        vec![json!({
            "vid": c.sessions.load(std::sync::atomic::Ordering::Relaxed) - 1,
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
                "transport": "vhost_user_blk",
            }
        }
    })
}

fn vhost_get_controllers(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let name: Option<String> = p.opt("name")?;
    p.finish()?;
    let all = rpc.target.vhost.controllers();
    let list: Vec<Value> = match &name {
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

fn vhost_delete_controller(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let ctrlr: String = p.req("ctrlr")?;
    p.finish()?;
    rpc.target
        .vhost
        .delete(&ctrlr)
        .map_err(|e| vhost_error(code::INVALID_PARAMS, &e))?;
    Ok(Value::Bool(true))
}

/// The "vhost_blk" section of `save_config`: one create per controller, in creation order.
pub fn config(rpc: &Rpc) -> Vec<Value> {
    rpc.target
        .vhost
        .controllers()
        .iter()
        .map(|c| {
            json!({
                "method": "vhost_create_blk_controller",
                "params": {
                    "ctrlr": c.name,
                    "dev_name": c.bdev,
                    "cpumask": c.cpumask.to_hex(),
                    "readonly": c.readonly,
                    "packed_ring": false,
                }
            })
        })
        .collect()
}
