//! Replies and `save_config` entries in SPDK's shapes.

use super::*;

/// An address as SPDK's `nvmf_transport_listen_dump_trid` writes it.
pub(super) fn addr_json(l: &ListenAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": l.adrfam.name(),
        "traddr": l.traddr,
        "trsvcid": l.trsvcid
    })
}

/// A connection's end as SPDK writes a queue pair's `listen_address` / `peer_address`.
pub(super) fn sockaddr_json(sa: &SocketAddr) -> Value {
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
pub(super) fn transport_json(o: &TransportOpts) -> Value {
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
pub(super) fn ns_json(n: &Namespace) -> Value {
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
pub(super) fn subsystem_json(s: &Subsystem) -> Value {
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
