//! SPDK's `nvmf_*` methods on the daemon's NVMe/TCP target ([`pmio_nvmf::NvmfTarget`]).
//!
//! Names, parameters and replies are SPDK v25.09's (reference/nvmf.md), so rpc.py and scripts
//! written for `nvmf_tgt` work unchanged, including the keys of other transports rpc.py always
//! sends to `nvmf_create_transport`. Errors follow SPDK's `nvmf_rpc.c`: bad parameters and
//! missing objects are -32602 "Invalid parameters", a subsystem that cannot be created is -32603
//! "Unable to create subsystem NQN"; pmio appends what was wrong after a colon. [`config`] is the
//! "nvmf" section of `save_config`, in SPDK's order.
//!
//! The methods only change the target's configuration, under its lock, on the RPC connection
//! thread; binding a listener is a non-blocking `bind`/`listen`. Connections and their I/O live
//! on the reactors and pick the changes up by themselves.

use std::fmt;
use std::net::SocketAddr;

use pmio::Uuid;
use pmio_nvmf::NvmfTarget;
use pmio_nvmf::error::NvmfError;
use pmio_nvmf::subsystem::{
    DISCOVERY_NQN, ListenAddr, Namespace, SubType, Subsystem, SubsystemParams, TransportOpts,
};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::methods::{Method, MethodFn, Rpc};
use pmio_jsonrpc::RUNTIME;
use pmio_jsonrpc::params::Params;
use pmio_jsonrpc::{RpcError, code};

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |name: &'static str, run: MethodFn| Method::new(name, RUNTIME, run);
    vec![
        m("nvmf_create_transport", nvmf_create_transport),
        m("nvmf_get_transports", nvmf_get_transports),
        m("nvmf_create_subsystem", nvmf_create_subsystem),
        m("nvmf_delete_subsystem", nvmf_delete_subsystem),
        m("nvmf_get_subsystems", nvmf_get_subsystems),
        m("nvmf_subsystem_add_ns", nvmf_subsystem_add_ns),
        m("nvmf_subsystem_remove_ns", nvmf_subsystem_remove_ns),
        m("nvmf_subsystem_add_listener", nvmf_subsystem_add_listener),
        m(
            "nvmf_subsystem_remove_listener",
            nvmf_subsystem_remove_listener,
        ),
        m("nvmf_subsystem_get_listeners", nvmf_subsystem_get_listeners),
        m("nvmf_subsystem_add_host", nvmf_subsystem_add_host),
        m("nvmf_subsystem_remove_host", nvmf_subsystem_remove_host),
        m(
            "nvmf_subsystem_allow_any_host",
            nvmf_subsystem_allow_any_host,
        ),
        m(
            "nvmf_subsystem_get_controllers",
            nvmf_subsystem_get_controllers,
        ),
        m("nvmf_subsystem_get_qpairs", nvmf_subsystem_get_qpairs),
        m("nvmf_get_stats", nvmf_get_stats),
    ]
}

// --- errors ---

/// -32602, SPDK's text, then what was wrong.
fn invalid(detail: impl fmt::Display) -> RpcError {
    RpcError::new(
        code::INVALID_PARAMS,
        format!("Invalid parameters: {detail}"),
    )
}

/// -32603 with SPDK's text for the failure, then what was wrong.
fn internal(what: &str, detail: impl fmt::Display) -> RpcError {
    RpcError::new(code::INTERNAL_ERROR, format!("{what}: {detail}"))
}

/// The reply for a target error where SPDK answers "Invalid parameters" (most of them).
fn nvmf_error(e: &NvmfError) -> RpcError {
    match e {
        NvmfError::Reactor(_) => internal("Internal error", e),
        _ => invalid(e),
    }
}

/// The target's one name. SPDK's `tgt_name` selects among several targets; pmio has one, which
/// answers to SPDK's default name or to none.
const TGT_NAME: &str = "nvmf_tgt";

/// The poll group of `core`, named as SPDK names the poll group of its `index`-th thread.
fn poll_group_name(nvmf: &NvmfTarget, core: u32) -> String {
    let index = nvmf.cores().iter().position(|&c| c == core).unwrap_or(0);
    format!("nvmf_tgt_poll_group_{index:03}")
}

mod args;
mod json;

use args::*;
pub use json::config;
use json::*;

// --- transport ---

/// Keys of RDMA and vfio-user that rpc.py sends (as `false`) or may send: meaningless for TCP,
/// accepted and ignored, as SPDK's TCP transport ignores them.
const OTHER_TRANSPORTS_BOOL: [&str; 5] = [
    "no_srq",
    "no_wr_batching",
    "disable_mappable_bar0",
    "disable_adaptive_irq",
    "disable_shadow_doorbells",
];
const OTHER_TRANSPORTS_NUM: [&str; 5] = [
    "num_cqe",
    "max_srq_depth",
    "acceptor_backlog",
    "ack_timeout",
    "data_wr_pool_size",
];
/// SPDK tunables pmio has no counterpart for (shared buffer pools, acceptor polling, control
/// message pools, keep-alive limits): accepted and ignored.
const NO_COUNTERPART_NUM: [&str; 6] = [
    "num_shared_buffers",
    "buf_cache_size",
    "acceptor_poll_rate",
    "control_msg_num",
    "kas",
    "min_kato",
];

fn nvmf_create_transport(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let trtype: String = a.req("trtype")?;
    a.target_name()?;
    let d = TransportOpts::default();
    let opts = TransportOpts {
        max_queue_depth: a.opt("max_queue_depth")?.unwrap_or(d.max_queue_depth),
        max_io_qpairs_per_ctrlr: a
            .opt("max_io_qpairs_per_ctrlr")?
            .unwrap_or(d.max_io_qpairs_per_ctrlr),
        in_capsule_data_size: a
            .opt("in_capsule_data_size")?
            .unwrap_or(d.in_capsule_data_size),
        max_io_size: a.opt("max_io_size")?.unwrap_or(d.max_io_size),
        io_unit_size: a.opt("io_unit_size")?.unwrap_or(d.io_unit_size),
        max_aq_depth: a.opt("max_aq_depth")?.unwrap_or(d.max_aq_depth),
        c2h_success: a.opt("c2h_success")?.unwrap_or(d.c2h_success),
        abort_timeout_sec: a.opt("abort_timeout_sec")?.unwrap_or(d.abort_timeout_sec),
    };
    a.default_only("dif_insert_or_strip", json!(false))?;
    a.default_only("zcopy", json!(false))?;
    a.default_only("sock_priority", json!(0))?;
    // pmio has no command pass-through to disable.
    a.ignore::<bool>(&["disable_command_passthru"])?;
    a.ignore::<bool>(&OTHER_TRANSPORTS_BOOL)?;
    a.ignore::<u64>(&OTHER_TRANSPORTS_NUM)?;
    a.ignore::<u64>(&NO_COUNTERPART_NUM)?;
    a.finish()?;
    if !trtype.eq_ignore_ascii_case("tcp") {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("Invalid transport type '{trtype}': pmio serves TCP only"),
        ));
    }
    rpc.target
        .nvmf
        .create_transport(opts.clone())
        .map_err(|e| match e {
            NvmfError::Exists(_) => internal("Transport type 'TCP' already exists", &e),
            _ => internal("Transport type 'TCP' create failed", &e),
        })?;
    log::info!("nvmf: TCP transport created: {opts:?}");
    Ok(Value::Bool(true))
}

/// Whether the TCP transport exists with the options `nvmf_create_transport` `params` ask for
/// (`None`: no transport yet). Only the options pmio honours are compared; a configuration
/// loaded again finds its transport there (see `config::table`).
pub(crate) fn transport_matches(rpc: &Rpc, params: &Value) -> Option<bool> {
    let have = rpc.target.nvmf.transport()?;
    let d = TransportOpts::default();
    let num = |k: &str, dflt: u32| match params.get(k) {
        None | Some(Value::Null) => Some(dflt),
        Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()),
    };
    let num16 = |k: &str, dflt: u16| num(k, dflt.into()).and_then(|n| u16::try_from(n).ok());
    let want = TransportOpts {
        max_queue_depth: num16("max_queue_depth", d.max_queue_depth)?,
        max_io_qpairs_per_ctrlr: num16("max_io_qpairs_per_ctrlr", d.max_io_qpairs_per_ctrlr)?,
        in_capsule_data_size: num("in_capsule_data_size", d.in_capsule_data_size)?,
        max_io_size: num("max_io_size", d.max_io_size)?,
        io_unit_size: num("io_unit_size", d.io_unit_size)?,
        max_aq_depth: num16("max_aq_depth", d.max_aq_depth)?,
        c2h_success: match params.get("c2h_success") {
            None | Some(Value::Null) => d.c2h_success,
            Some(v) => v.as_bool()?,
        },
        abort_timeout_sec: num("abort_timeout_sec", d.abort_timeout_sec)?,
    };
    Some(want == have)
}

fn nvmf_get_transports(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let trtype: Option<String> = a.opt("trtype")?;
    a.target_name()?;
    a.finish()?;
    let t = rpc.target.nvmf.transport();
    if let Some(tt) = &trtype
        && (t.is_none() || !tt.eq_ignore_ascii_case("tcp"))
    {
        return Err(RpcError::errno_detail(
            -libc::ENODEV,
            format_args!("no transport {tt}"),
        ));
    }
    Ok(Value::Array(t.iter().map(transport_json).collect()))
}

// --- subsystems ---

fn nvmf_create_subsystem(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let p = SubsystemParams {
        nqn: a.req("nqn")?,
        serial_number: a.opt("serial_number")?,
        model_number: a.opt("model_number")?,
        allow_any_host: a.opt("allow_any_host")?.unwrap_or(false),
        max_namespaces: a.opt("max_namespaces")?.unwrap_or(0),
        min_cntlid: a.opt("min_cntlid")?,
        max_cntlid: a.opt("max_cntlid")?,
    };
    a.target_name()?;
    a.default_only("ana_reporting", json!(false))?;
    a.default_only("passthrough", json!(false))?;
    a.default_only("enable_nssr", json!(false))?;
    // Limits on Dataset Management and Write Zeroes sizes (0: none, pmio's only setting).
    a.default_only("max_discard_size_kib", json!(0))?;
    a.default_only("max_write_zeroes_size_kib", json!(0))?;
    a.finish()?;
    rpc.target
        .nvmf
        .create_subsystem(&p)
        .map_err(|e| internal(&format!("Unable to create subsystem {}", p.nqn), &e))?;
    log::info!("nvmf: created subsystem {}", p.nqn);
    Ok(Value::Bool(true))
}

fn nvmf_delete_subsystem(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    a.target_name()?;
    a.finish()?;
    rpc.target
        .nvmf
        .delete_subsystem(&nqn)
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: deleted subsystem {nqn}");
    Ok(Value::Bool(true))
}

fn nvmf_get_subsystems(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: Option<String> = a.opt("nqn")?;
    a.target_name()?;
    a.finish()?;
    let c = rpc.target.nvmf.config();
    match nqn {
        None => Ok(Value::Array(
            c.subsystems.iter().map(subsystem_json).collect(),
        )),
        Some(n) => match c.subsystem(&n) {
            Some(s) => Ok(json!([subsystem_json(s)])),
            None => Err(RpcError::errno_detail(
                -libc::ENODEV,
                format_args!("no subsystem {n}"),
            )),
        },
    }
}

/// The subsystem `nqn`, or SPDK's -32602 for a missing one.
fn subsystem(rpc: &Rpc, nqn: &str) -> Result<Subsystem, RpcError> {
    rpc.target
        .nvmf
        .config()
        .subsystem(nqn)
        .cloned()
        .ok_or_else(|| invalid(format_args!("subsystem {nqn} not found")))
}

// --- namespaces ---

/// `namespace` of `nvmf_subsystem_add_ns`.
struct NsParams {
    bdev_name: String,
    nsid: u32,
    nguid: Option<[u8; 16]>,
    eui64: Option<[u8; 8]>,
    uuid: Option<Uuid>,
}

fn ns_params(obj: Map<String, Value>) -> Result<NsParams, RpcError> {
    let mut n = Args::new(Some(&Value::Object(obj)))?;
    let bdev_name: String = n.req("bdev_name")?;
    let nsid: u32 = n.opt("nsid")?.unwrap_or(0);
    let nguid: Option<String> = n.opt("nguid")?;
    let eui64: Option<String> = n.opt("eui64")?;
    let uuid: Option<String> = n.opt("uuid")?;
    n.default_only("anagrpid", json!(0))?;
    n.default_only("no_auto_visible", json!(false))?;
    n.default_only("hide_metadata", json!(false))?;
    n.unsupported("ptpl_file", "pmio has no persistent reservations")?;
    n.finish()?;
    let uuid = match uuid {
        None => None,
        Some(s) => {
            Some(Uuid::parse(&s).ok_or_else(|| invalid(format_args!("uuid {s:?} is not a UUID")))?)
        }
    };
    Ok(NsParams {
        bdev_name,
        nsid,
        nguid: nguid.map(|s| hex_bytes("nguid", &s)).transpose()?,
        eui64: eui64.map(|s| hex_bytes("eui64", &s)).transpose()?,
        uuid,
    })
}

fn nvmf_subsystem_add_ns(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let ns = ns_params(a.req("namespace")?)?;
    a.target_name()?;
    a.finish()?;
    let t = &rpc.target;
    // A bdev may be named by its UUID alias, as SPDK allows.
    let bdev = t
        .bdevs
        .find_bdev(&ns.bdev_name)
        .map(|d| d.info().name.clone())
        .unwrap_or(ns.bdev_name);
    // Not deleted between the look-up and the namespace's creation.
    let _owners = t.bdevs.hold_bdev_owners();
    let nsid = t
        .nvmf
        .add_ns(&nqn, &bdev, ns.nsid, ns.uuid, ns.nguid, ns.eui64)
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: {nqn} namespace {nsid} on bdev {bdev}");
    Ok(json!(nsid))
}

fn nvmf_subsystem_remove_ns(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let nsid: u32 = a.req("nsid")?;
    a.target_name()?;
    a.finish()?;
    let ns = rpc
        .target
        .nvmf
        .remove_ns(&nqn, nsid)
        .map_err(|e| nvmf_error(&e))?;
    log::info!(
        "nvmf: {nqn} namespace {nsid} (bdev {}) removed",
        ns.bdev_name()
    );
    Ok(Value::Bool(true))
}

// --- listeners ---

fn nvmf_subsystem_add_listener(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let addr = listen_address(&mut a)?;
    a.target_name()?;
    a.default_only("secure_channel", json!(false))?;
    a.default_only("ana_state", json!("optimized"))?;
    // Which socket implementation SPDK uses (posix, uring); pmio has its own.
    a.ignore::<String>(&["sock_impl"])?;
    a.finish()?;
    rpc.target
        .nvmf
        .add_listener(&nqn, addr.clone())
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: {nqn} listening on {}:{}", addr.traddr, addr.trsvcid);
    Ok(Value::Bool(true))
}

fn nvmf_subsystem_remove_listener(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let addr = listen_address(&mut a)?;
    a.target_name()?;
    a.finish()?;
    rpc.target
        .nvmf
        .remove_listener(&nqn, &addr)
        .map_err(|e| nvmf_error(&e))?;
    log::info!(
        "nvmf: {nqn} no longer listening on {}:{}",
        addr.traddr,
        addr.trsvcid
    );
    Ok(Value::Bool(true))
}

/// `nqn` and `tgt_name`: the parameters of the query methods.
fn query_nqn(params: Option<&Value>) -> Result<String, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    a.target_name()?;
    a.finish()?;
    Ok(nqn)
}

fn nvmf_subsystem_get_listeners(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let s = subsystem(rpc, &query_nqn(params)?)?;
    Ok(Value::Array(
        s.listeners
            .iter()
            .map(|l| json!({"address": addr_json(l)}))
            .collect(),
    ))
}

// --- hosts ---

fn nvmf_subsystem_add_host(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let host: String = a.req("host")?;
    a.target_name()?;
    a.unsupported("psk", "pmio has no TLS")?;
    a.unsupported("dhchap_key", "pmio has no in-band authentication")?;
    a.unsupported("dhchap_ctrlr_key", "pmio has no in-band authentication")?;
    a.finish()?;
    subsystem(rpc, &nqn)?;
    rpc.target.nvmf.add_host(&nqn, &host).map_err(|e| match e {
        NvmfError::NotFound(_) => nvmf_error(&e),
        _ => internal("Internal error", &e),
    })?;
    log::info!("nvmf: {nqn} admits host {host}");
    Ok(Value::Bool(true))
}

fn nvmf_subsystem_remove_host(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let host: String = a.req("host")?;
    a.target_name()?;
    // How long SPDK waits for the host's controllers to go; pmio disconnects them at once.
    a.ignore::<u64>(&["timeout_ms"])?;
    a.finish()?;
    subsystem(rpc, &nqn)?;
    // A host that is not on the list: SPDK's -ENOENT becomes "Internal error".
    rpc.target
        .nvmf
        .remove_host(&nqn, &host)
        .map_err(|e| internal("Internal error", &e))?;
    log::info!("nvmf: {nqn} no longer admits host {host}");
    Ok(Value::Bool(true))
}

fn nvmf_subsystem_allow_any_host(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    let nqn: String = a.req("nqn")?;
    let allow: bool = a.req("allow_any_host")?;
    a.target_name()?;
    a.finish()?;
    rpc.target
        .nvmf
        .allow_any_host(&nqn, allow)
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: {nqn} allow_any_host {allow}");
    Ok(Value::Bool(true))
}

// --- connections ---

fn nvmf_subsystem_get_controllers(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let nqn = query_nqn(params)?;
    let ctrlrs = rpc
        .target
        .nvmf
        .controllers(&nqn)
        .map_err(|e| nvmf_error(&e))?;
    let cntrltype = if nqn == DISCOVERY_NQN {
        "discovery"
    } else {
        "io"
    };
    Ok(Value::Array(
        ctrlrs
            .iter()
            .map(|c| {
                json!({
                    "cntlid": c.cntlid,
                    "cntrltype": cntrltype,
                    "hostnqn": c.hostnqn,
                    "hostid": Uuid(c.hostid).to_string(),
                    // SPDK counts every connected queue pair, the admin queue included.
                    "num_io_qpairs": c.qpairs.len()
                })
            })
            .collect(),
    ))
}

fn nvmf_subsystem_get_qpairs(
    rpc: &Rpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let nqn = query_nqn(params)?;
    let nvmf = &rpc.target.nvmf;
    let ctrlrs = nvmf.controllers(&nqn).map_err(|e| nvmf_error(&e))?;
    let mut out = Vec::new();
    for c in &ctrlrs {
        let mut qpairs: Vec<_> = c.qpairs.iter().collect();
        qpairs.sort_by_key(|q| q.qid);
        for q in qpairs {
            out.push(json!({
                "cntlid": c.cntlid,
                "qid": q.qid,
                // SPDK v25.09's name for a connected queue pair (older SPDK printed "active").
                "state": "enabled",
                "thread": poll_group_name(nvmf, q.core),
                "hostnqn": c.hostnqn,
                "listen_address": sockaddr_json(&q.local),
                "peer_address": sockaddr_json(&q.peer)
            }));
        }
    }
    Ok(Value::Array(out))
}

fn nvmf_get_stats(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut a = Args::new(params)?;
    a.target_name()?;
    a.finish()?;
    let nvmf = &rpc.target.nvmf;
    let transports = if nvmf.transport().is_some() {
        json!([{"trtype": "TCP"}])
    } else {
        json!([])
    };
    let groups: Vec<Value> = nvmf
        .group_stats()
        .into_iter()
        .map(|(core, s)| {
            json!({
                "name": poll_group_name(nvmf, core),
                "admin_qpairs": s.admin_qpairs,
                "io_qpairs": s.io_qpairs,
                "current_admin_qpairs": s.current_admin_qpairs,
                "current_io_qpairs": s.current_io_qpairs,
                "pending_bdev_io": s.pending_bdev_io,
                "completed_nvme_io": s.completed_nvme_io,
                "transports": transports
            })
        })
        .collect();
    Ok(json!({"tick_rate": 1_000_000_000u64, "poll_groups": groups}))
}

#[cfg(test)]
mod tests;
