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

use crate::jsonrpc::{RpcError, code};
use crate::methods::{Method, MethodFn, RUNTIME, Rpc};
use crate::params::Params;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    let m = |name: &'static str, run: MethodFn| Method {
        name,
        states: RUNTIME,
        run,
    };
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

// --- parameters ---

/// A method's parameters, decoded as SPDK's nvmf methods decode theirs: a missing, mistyped or
/// unknown key is -32602 "Invalid parameters" (the bdev methods answer -32603), naming the key.
struct Args(Params);

/// Turns a [`Params`] decode error (-32603) into SPDK's nvmf reply; other errors (-95 for a
/// value pmio accepts only at its default) pass unchanged.
fn nvmf_decode(e: RpcError) -> RpcError {
    if e.code != code::INTERNAL_ERROR {
        return e;
    }
    let detail = e
        .message
        .strip_prefix("spdk_json_decode_object failed: ")
        .unwrap_or(&e.message);
    invalid(detail)
}

impl Args {
    fn new(params: Option<&Value>) -> Result<Args, RpcError> {
        Params::new(params).map(Args).map_err(nvmf_decode)
    }

    fn req<T: DeserializeOwned>(&mut self, key: &str) -> Result<T, RpcError> {
        self.0.req(key).map_err(nvmf_decode)
    }

    fn opt<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>, RpcError> {
        self.0.opt(key).map_err(nvmf_decode)
    }

    /// A key pmio implements only at SPDK's default `value`: anything else is -95.
    fn default_only(&mut self, key: &str, value: Value) -> Result<(), RpcError> {
        self.0.accept_default(key, value).map_err(nvmf_decode)
    }

    /// Keys accepted (their type checked) and ignored: they tune what pmio does not have.
    fn ignore<T: DeserializeOwned>(&mut self, keys: &[&str]) -> Result<(), RpcError> {
        for k in keys {
            self.opt::<T>(k)?;
        }
        Ok(())
    }

    /// A key pmio does not implement at all: refused (-95) when given.
    fn unsupported(&mut self, key: &str, why: &str) -> Result<(), RpcError> {
        match self.opt::<Value>(key)? {
            None => Ok(()),
            Some(_) => Err(RpcError::errno_detail(
                -libc::EOPNOTSUPP,
                format_args!("parameter \"{key}\": {why}"),
            )),
        }
    }

    /// `tgt_name`: SPDK's -32603 "Unable to find a target." for any name but pmio's one.
    fn target_name(&mut self) -> Result<(), RpcError> {
        match self.opt::<String>("tgt_name")? {
            None => Ok(()),
            Some(n) if n == TGT_NAME => Ok(()),
            Some(n) => Err(internal(
                "Unable to find a target.",
                format_args!("no target {n:?} (pmio has one, {TGT_NAME})"),
            )),
        }
    }

    fn finish(self) -> Result<(), RpcError> {
        self.0.finish().map_err(nvmf_decode)
    }
}

/// `n` bytes from `2n` hexadecimal digits, as SPDK decodes NGUID and EUI-64 (no dashes).
fn hex_bytes<const N: usize>(key: &str, s: &str) -> Result<[u8; N], RpcError> {
    let bad = || {
        invalid(format_args!(
            "{key} {s:?} is not {} hexadecimal digits",
            2 * N
        ))
    };
    if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Upper-case hexadecimal without separators (SPDK's NGUID and EUI-64 in replies).
fn hex_upper(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// `listen_address` of the listener methods: TCP only (any case); `trsvcid` required; `adrfam`
/// taken from the address when absent.
fn listen_address(a: &mut Args) -> Result<ListenAddr, RpcError> {
    let obj: Map<String, Value> = a.req("listen_address")?;
    let mut l = Args::new(Some(&Value::Object(obj)))?;
    let trtype: String = l.req("trtype")?;
    let traddr: String = l.req("traddr")?;
    let trsvcid: Option<String> = l.opt("trsvcid")?;
    let adrfam: Option<String> = l.opt("adrfam")?;
    l.finish()?;
    if !trtype.eq_ignore_ascii_case("tcp") {
        return Err(invalid(format_args!(
            "trtype {trtype:?}: pmio listens on TCP only"
        )));
    }
    let Some(trsvcid) = trsvcid else {
        return Err(invalid("trsvcid (the port) is required for TCP"));
    };
    ListenAddr::new(&traddr, &trsvcid, adrfam.as_deref()).map_err(|e| nvmf_error(&e))
}

// --- replies ---

/// An address as SPDK's `nvmf_transport_listen_dump_trid` writes it.
fn addr_json(l: &ListenAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": l.adrfam.name(),
        "traddr": l.traddr,
        "trsvcid": l.trsvcid
    })
}

/// A connection's end as SPDK writes a queue pair's `listen_address` / `peer_address`.
fn sockaddr_json(sa: &SocketAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": if sa.is_ipv4() { "IPv4" } else { "IPv6" },
        "traddr": sa.ip().to_string(),
        "trsvcid": sa.port().to_string()
    })
}

/// A transport as `nvmf_get_transports` lists it (and `save_config` recreates it). SPDK's
/// buffer-pool, DIF, zero-copy and socket-priority options, which pmio does not have, show
/// SPDK's defaults.
fn transport_json(o: &TransportOpts) -> Value {
    json!({
        "trtype": "TCP",
        "max_queue_depth": o.max_queue_depth,
        "max_io_qpairs_per_ctrlr": o.max_io_qpairs_per_ctrlr,
        "in_capsule_data_size": o.in_capsule_data_size,
        "max_io_size": o.max_io_size,
        "io_unit_size": o.io_unit_size,
        "max_aq_depth": o.max_aq_depth,
        "num_shared_buffers": 511,
        "buf_cache_size": u32::MAX,
        "dif_insert_or_strip": false,
        "zcopy": false,
        "c2h_success": o.c2h_success,
        "sock_priority": 0,
        "abort_timeout_sec": o.abort_timeout_sec,
        "ack_timeout": 0,
        "data_wr_pool_size": 0
    })
}

/// A namespace as `nvmf_get_subsystems` lists it.
fn ns_json(n: &Namespace) -> Value {
    let mut v = json!({
        "nsid": n.nsid,
        "bdev_name": n.bdev_name(),
        "name": n.bdev_name(),
    });
    if n.nguid != [0; 16] {
        v["nguid"] = json!(hex_upper(&n.nguid));
    }
    if let Some(e) = n.eui64 {
        v["eui64"] = json!(hex_upper(&e));
    }
    if n.uuid.0 != [0; 16] {
        v["uuid"] = json!(n.uuid.to_string());
    }
    v
}

/// A subsystem as `nvmf_get_subsystems` lists it (SPDK's member order; the discovery
/// subsystem has no namespaces nor identity).
fn subsystem_json(s: &Subsystem) -> Value {
    let mut v = json!({
        "nqn": s.nqn,
        "subtype": match s.subtype {
            SubType::Discovery => "Discovery",
            SubType::Nvme => "NVMe",
        },
        "listen_addresses": s.listeners.iter().map(addr_json).collect::<Vec<_>>(),
        "allow_any_host": s.allow_any_host,
        "hosts": s.hosts.iter().map(|h| json!({"nqn": h})).collect::<Vec<_>>(),
    });
    if s.subtype == SubType::Nvme {
        v["serial_number"] = json!(s.serial_number);
        v["model_number"] = json!(s.model_number);
        v["max_namespaces"] = json!(s.max_namespaces);
        v["min_cntlid"] = json!(s.min_cntlid);
        v["max_cntlid"] = json!(s.max_cntlid);
        v["namespaces"] = Value::Array(s.namespaces.iter().map(ns_json).collect());
    }
    v
}

/// The "nvmf" section of `save_config`, in SPDK's order: the transport; then per subsystem
/// (discovery first) `nvmf_create_subsystem`, its hosts, its namespaces (with NSID, NGUID and
/// UUID, so hosts see the same identities after a restart) and its listeners.
pub fn config(rpc: &Rpc) -> Vec<Value> {
    let c = rpc.target.nvmf.config();
    let mut out = Vec::new();
    if let Some(t) = &c.transport {
        out.push(json!({"method": "nvmf_create_transport", "params": transport_json(t)}));
    }
    for s in &c.subsystems {
        if s.subtype == SubType::Nvme {
            out.push(json!({
                "method": "nvmf_create_subsystem",
                "params": {
                    "nqn": s.nqn,
                    "allow_any_host": s.allow_any_host,
                    "serial_number": s.serial_number,
                    "model_number": s.model_number,
                    "max_namespaces": s.max_namespaces,
                    "min_cntlid": s.min_cntlid,
                    "max_cntlid": s.max_cntlid,
                    "ana_reporting": false
                }
            }));
            for h in &s.hosts {
                out.push(json!({
                    "method": "nvmf_subsystem_add_host",
                    "params": {"nqn": s.nqn, "host": h}
                }));
            }
            for n in &s.namespaces {
                let mut ns = json!({"nsid": n.nsid, "bdev_name": n.bdev_name()});
                ns["nguid"] = json!(hex_upper(&n.nguid));
                if let Some(e) = n.eui64 {
                    ns["eui64"] = json!(hex_upper(&e));
                }
                ns["uuid"] = json!(n.uuid.to_string());
                ns["no_auto_visible"] = json!(false);
                out.push(json!({
                    "method": "nvmf_subsystem_add_ns",
                    "params": {"nqn": s.nqn, "namespace": ns}
                }));
            }
        }
        for l in &s.listeners {
            out.push(json!({
                "method": "nvmf_subsystem_add_listener",
                "params": {"nqn": s.nqn, "listen_address": addr_json(l), "secure_channel": false}
            }));
        }
    }
    out
}

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
        .find_bdev(&ns.bdev_name)
        .map(|d| d.info().name.clone())
        .unwrap_or(ns.bdev_name);
    // Not deleted between the look-up and the namespace's creation.
    let _owners = t.hold_bdev_owners();
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
mod tests {
    use super::*;
    use crate::target::{FwState, Target};
    use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
    use std::sync::Arc;

    fn rpc() -> (Reactors, Rpc) {
        let reactors = Reactors::start(
            CoreMask::parse("0x1").unwrap(),
            ReactorsOptions {
                pin_threads: false,
                interrupt_idle: Some(std::time::Duration::from_millis(1)),
                ..ReactorsOptions::default()
            },
        )
        .unwrap();
        let target = Arc::new(Target::new(reactors.handle(), FwState::Runtime));
        (reactors, Rpc::new(target, Box::new(|_| {})))
    }

    fn call(r: &Rpc, m: &str, p: Value) -> Result<Value, RpcError> {
        r.invoke(m, Some(&p).filter(|p| !p.is_null()))
    }

    const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

    #[test]
    fn hex_round_trip() {
        let b: [u8; 8] = hex_bytes("eui64", "ABCDEF0123456789").unwrap();
        assert_eq!(hex_upper(&b), "ABCDEF0123456789");
        assert!(hex_bytes::<8>("eui64", "ABCDEF012345678").is_err());
        assert!(hex_bytes::<8>("eui64", "ABCDEF012345678G").is_err());
        assert!(hex_bytes::<16>("nguid", "fe828eed-8ef3-4fcf-80c2-8367daa6").is_err());
    }

    #[test]
    fn rpc_py_requests_and_spdk_replies() {
        let (_re, r) = rpc();
        // rpc.py's nvmf_create_transport -t TCP, every other transport's keys included.
        let create = json!({"trtype": "TCP", "c2h_success": true, "no_srq": false, "zcopy": false,
            "dif_insert_or_strip": false, "no_wr_batching": false, "disable_mappable_bar0": false,
            "disable_adaptive_irq": false, "disable_shadow_doorbells": false,
            "disable_command_passthru": false});
        assert_eq!(
            call(&r, "nvmf_create_transport", create.clone()).unwrap(),
            json!(true)
        );
        let e = call(&r, "nvmf_create_transport", create).unwrap_err();
        assert_eq!(e.code, -32603);
        assert!(
            e.message.starts_with("Transport type 'TCP' already exists"),
            "{}",
            e.message
        );
        let e = call(&r, "nvmf_create_transport", json!({"trtype": "RDMA"})).unwrap_err();
        assert_eq!(e.code, -32602);
        assert!(e.message.contains("'RDMA'"), "{}", e.message);
        let t = call(&r, "nvmf_get_transports", Value::Null).unwrap();
        assert_eq!(t[0]["trtype"], "TCP");
        assert_eq!(t[0]["max_queue_depth"], 128);
        assert_eq!(t[0]["io_unit_size"], 131072);
        // The replayed transport of save_config is accepted as is.
        let cfg = config(&r);
        assert_eq!(cfg[0]["method"], "nvmf_create_transport");
        let (_re2, r2) = rpc();
        call(&r2, "nvmf_create_transport", cfg[0]["params"].clone()).unwrap();
        assert_eq!(call(&r2, "nvmf_get_transports", Value::Null).unwrap(), t);

        let sub = json!({"nqn": NQN, "serial_number": "SPDK00000000000001", "allow_any_host": true,
            "max_namespaces": 10, "ana_reporting": false, "passthrough": false, "enable_nssr": false});
        assert_eq!(
            call(&r, "nvmf_create_subsystem", sub.clone()).unwrap(),
            json!(true)
        );
        let e = call(&r, "nvmf_create_subsystem", sub).unwrap_err();
        assert_eq!(e.code, -32603);
        assert!(
            e.message
                .starts_with(&format!("Unable to create subsystem {NQN}")),
            "{}",
            e.message
        );
        // Unknown keys and wrong types: SPDK's -32602, naming the key.
        let e = call(&r, "nvmf_delete_subsystem", json!({"nqn": NQN, "x": 1})).unwrap_err();
        assert_eq!(e.code, -32602);
        assert!(e.message.contains("\"x\""), "{}", e.message);
        let e = call(
            &r,
            "nvmf_subsystem_remove_ns",
            json!({"nqn": NQN, "nsid": "1"}),
        )
        .unwrap_err();
        assert_eq!(e.code, -32602);
        let e = call(&r, "nvmf_get_subsystems", json!({"tgt_name": "other"})).unwrap_err();
        assert_eq!(e.code, -32603);

        call(
            &r,
            "bdev_malloc_create",
            json!({"name": "Malloc0", "num_blocks": 256, "block_size": 512,
                "uuid": "fe828eed-8ef3-4fcf-80c2-8367daa65457"}),
        )
        .unwrap();
        let add = json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0", "no_auto_visible": false,
            "hide_metadata": false}});
        assert_eq!(call(&r, "nvmf_subsystem_add_ns", add).unwrap(), json!(1));
        let e = call(
            &r,
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Nope"}}),
        )
        .unwrap_err();
        assert_eq!(e.code, -32602);
        assert!(e.message.starts_with("Invalid parameters"), "{}", e.message);
        // The bdev is claimed while it backs a namespace.
        let e = call(&r, "bdev_malloc_delete", json!({"name": "Malloc0"})).unwrap_err();
        assert_eq!(e.code, -libc::EBUSY);
        assert!(e.message.contains(NQN), "{}", e.message);
        let b = call(&r, "bdev_get_bdevs", json!({"name": "Malloc0"})).unwrap();
        assert_eq!(b[0]["claimed"], true);

        let s = call(&r, "nvmf_get_subsystems", Value::Null).unwrap();
        assert_eq!(s[0]["nqn"], DISCOVERY_NQN);
        assert_eq!(s[0]["subtype"], "Discovery");
        assert!(s[0].get("namespaces").is_none());
        assert_eq!(s[1]["subtype"], "NVMe");
        assert_eq!(s[1]["max_namespaces"], 10);
        assert_eq!(
            s[1]["namespaces"][0],
            json!({"nsid": 1, "bdev_name": "Malloc0", "name": "Malloc0",
                "nguid": "FE828EED8EF34FCF80C28367DAA65457",
                "uuid": "fe828eed-8ef3-4fcf-80c2-8367daa65457"})
        );
        assert_eq!(
            call(&r, "nvmf_subsystem_get_controllers", json!({"nqn": NQN})).unwrap(),
            json!([])
        );
        let st = call(&r, "nvmf_get_stats", Value::Null).unwrap();
        assert_eq!(st["poll_groups"][0]["name"], "nvmf_tgt_poll_group_000");
        assert_eq!(st["poll_groups"][0]["transports"][0]["trtype"], "TCP");

        assert_eq!(
            call(
                &r,
                "nvmf_subsystem_remove_ns",
                json!({"nqn": NQN, "nsid": 1})
            )
            .unwrap(),
            json!(true)
        );
        assert_eq!(
            call(&r, "bdev_malloc_delete", json!({"name": "Malloc0"})).unwrap(),
            json!(true)
        );
        assert_eq!(
            call(&r, "nvmf_delete_subsystem", json!({"nqn": NQN})).unwrap(),
            json!(true)
        );
        let e = call(&r, "nvmf_delete_subsystem", json!({"nqn": NQN})).unwrap_err();
        assert_eq!(e.code, -32602);
    }

    #[test]
    fn namespace_identities_and_hosts() {
        let (_re, r) = rpc();
        call(&r, "nvmf_create_subsystem", json!({"nqn": NQN})).unwrap();
        call(
            &r,
            "bdev_null_create",
            json!({"name": "N0", "num_blocks": 64, "block_size": 512}),
        )
        .unwrap();
        let nsid = call(
            &r,
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "N0", "nsid": 5,
                "nguid": "00112233445566778899AABBCCDDEEFF", "eui64": "0123456789ABCDEF",
                "uuid": "12345678-1234-4234-8234-123456789abc"}}),
        )
        .unwrap();
        assert_eq!(nsid, json!(5));
        let ns = &call(&r, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap()[0]["namespaces"][0];
        assert_eq!(ns["nguid"], "00112233445566778899AABBCCDDEEFF");
        assert_eq!(ns["eui64"], "0123456789ABCDEF");
        assert_eq!(ns["uuid"], "12345678-1234-4234-8234-123456789abc");
        for bad in [
            json!({"bdev_name": "N0", "nguid": "0011"}),
            json!({"bdev_name": "N0", "uuid": "nope"}),
            json!({"bdev_name": "N0", "nsid": 5}),
        ] {
            let e = call(
                &r,
                "nvmf_subsystem_add_ns",
                json!({"nqn": NQN, "namespace": bad}),
            )
            .unwrap_err();
            assert_eq!(e.code, -32602, "{bad}: {}", e.message);
        }
        let e = call(
            &r,
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "N0", "ptpl_file": "/x"}}),
        )
        .unwrap_err();
        assert_eq!(e.code, -libc::EOPNOTSUPP);

        let host = "nqn.2014-08.org.nvmexpress:uuid:1234";
        let add = json!({"nqn": NQN, "host": host});
        call(&r, "nvmf_subsystem_add_host", add.clone()).unwrap();
        assert_eq!(
            call(&r, "nvmf_subsystem_add_host", add.clone())
                .unwrap_err()
                .code,
            -32603
        );
        let s = call(&r, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap();
        assert_eq!(s[0]["hosts"], json!([{"nqn": host}]));
        assert_eq!(s[0]["allow_any_host"], false);
        call(
            &r,
            "nvmf_subsystem_allow_any_host",
            json!({"nqn": NQN, "allow_any_host": true}),
        )
        .unwrap();
        call(&r, "nvmf_subsystem_remove_host", add.clone()).unwrap();
        assert_eq!(
            call(&r, "nvmf_subsystem_remove_host", add)
                .unwrap_err()
                .code,
            -32603
        );
        let e = call(
            &r,
            "nvmf_subsystem_add_host",
            json!({"nqn": "nqn.2016-06.io.spdk:none", "host": host}),
        )
        .unwrap_err();
        assert_eq!(e.code, -32602);
        assert_eq!(
            call(&r, "nvmf_get_subsystems", json!({"nqn": "nqn.x:y"}))
                .unwrap_err()
                .code,
            -19
        );
    }

    #[test]
    fn listeners_need_a_transport_and_tcp() {
        let (_re, r) = rpc();
        call(&r, "nvmf_create_subsystem", json!({"nqn": NQN})).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        let listen = json!({"nqn": NQN, "secure_channel": false,
            "listen_address": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": port}});
        let e = call(&r, "nvmf_subsystem_add_listener", listen.clone()).unwrap_err();
        assert_eq!(e.code, -32602);
        call(&r, "nvmf_create_transport", json!({"trtype": "tcp"})).unwrap();
        assert_eq!(
            call(&r, "nvmf_subsystem_add_listener", listen.clone()).unwrap(),
            json!(true)
        );
        assert_eq!(
            call(&r, "nvmf_subsystem_add_listener", listen.clone())
                .unwrap_err()
                .code,
            -32602
        );
        let want =
            json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port});
        assert_eq!(
            call(&r, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap(),
            json!([{ "address": want }])
        );
        for bad in [
            json!({"trtype": "rdma", "traddr": "127.0.0.1", "trsvcid": "4420"}),
            json!({"trtype": "tcp", "traddr": "127.0.0.1"}),
            json!({"trtype": "tcp", "traddr": "localhost", "trsvcid": "4420"}),
            json!({"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "4420", "adrfam": "ipv6"}),
        ] {
            let e = call(
                &r,
                "nvmf_subsystem_add_listener",
                json!({"nqn": NQN, "listen_address": bad}),
            )
            .unwrap_err();
            assert_eq!(e.code, -32602, "{bad}: {}", e.message);
        }
        let cfg = config(&r);
        let methods: Vec<&str> = cfg.iter().map(|c| c["method"].as_str().unwrap()).collect();
        assert_eq!(
            methods,
            [
                "nvmf_create_transport",
                "nvmf_create_subsystem",
                "nvmf_subsystem_add_listener"
            ]
        );
        assert_eq!(cfg[2]["params"]["listen_address"], want);
        let remove = json!({"nqn": NQN, "listen_address": {"trtype": "TCP", "traddr": "127.0.0.1",
            "trsvcid": port, "adrfam": "IPv4"}});
        call(&r, "nvmf_subsystem_remove_listener", remove.clone()).unwrap();
        assert_eq!(
            call(&r, "nvmf_subsystem_remove_listener", remove)
                .unwrap_err()
                .code,
            -32602
        );
        assert_eq!(
            call(&r, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap(),
            json!([])
        );
    }
}
