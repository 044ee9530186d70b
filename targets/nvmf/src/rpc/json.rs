//! The nvmf methods' replies in SPDK's shapes (and member order).

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::rules::Hex;
use crate::NvmfTarget;
use crate::subsystem::{ListenAddr, Namespace, SubType, Subsystem, TransportOpts};

/// An address as SPDK's `nvmf_transport_listen_dump_trid` writes it.
pub fn addr_json(l: &ListenAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": l.adrfam.name(),
        "traddr": l.traddr,
        "trsvcid": l.trsvcid
    })
}

/// A listener as `nvmf_subsystem_get_listeners` lists it: its address, and with ANA
/// reporting the state of every group through it (`ana_states`, SPDK's shape).
pub fn listener_json(s: &Subsystem, l: &ListenAddr) -> Value {
    let mut v = json!({"address": addr_json(l)});
    if s.ana_reporting {
        v["ana_states"] = Value::Array(
            (1..=s.max_namespaces)
                .map(|g| json!({"ana_group": g, "ana_state": s.ana_state(l, g).name()}))
                .collect(),
        );
    }
    v
}

/// A connection's end as SPDK writes a queue pair's `listen_address` / `peer_address`.
pub fn sockaddr_json(sa: &SocketAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": if sa.is_ipv4() { "IPv4" } else { "IPv6" },
        "traddr": sa.ip().to_string(),
        "trsvcid": sa.port().to_string()
    })
}

/// A transport as `nvmf_get_transports` lists it, which is also how SPDK's `save_config`
/// recreates it (`nvmf_transport_dump_opts` writes both). SPDK's buffer-pool, DIF, zero-copy
/// and socket-priority options, which pmio does not have, show SPDK's defaults.
pub fn transport_json(o: &TransportOpts) -> Value {
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
pub fn ns_json(n: &Namespace) -> Value {
    let mut v = json!({
        "nsid": n.nsid,
        "bdev_name": n.bdev_name(),
        "name": n.bdev_name(),
    });
    if n.nguid != [0; 16] {
        v["nguid"] = json!(Hex(n.nguid).to_string());
    }
    if let Some(e) = n.eui64 {
        v["eui64"] = json!(Hex(e).to_string());
    }
    if n.uuid.0 != [0; 16] {
        v["uuid"] = json!(n.uuid.to_string());
    }
    v
}

/// A host of `s` as `nvmf_get_subsystems` lists it: its NQN and its keys' names.
fn host_json(s: &Subsystem, host: &str) -> Value {
    let mut v = json!({"nqn": host});
    if let Some(k) = s.host_keys(host) {
        v["dhchap_key"] = json!(k.dhchap_key.name());
        if let Some(c) = &k.dhchap_ctrlr_key {
            v["dhchap_ctrlr_key"] = json!(c.name());
        }
    }
    if let Some(k) = s.host_psk(host) {
        v["psk"] = json!(k.psk.name());
    }
    v
}

/// A subsystem as `nvmf_get_subsystems` lists it (SPDK's member order; the discovery
/// subsystem has no namespaces nor identity).
pub fn subsystem_json(s: &Subsystem) -> Value {
    let mut v = json!({
        "nqn": s.nqn,
        "subtype": match s.subtype {
            SubType::Discovery => "Discovery",
            SubType::Nvme => "NVMe",
        },
        "listen_addresses": s.listeners.iter().map(addr_json).collect::<Vec<_>>(),
        "allow_any_host": s.allow_any_host,
        "hosts": s.hosts.iter().map(|h| host_json(s, h)).collect::<Vec<_>>(),
    });
    if s.subtype == SubType::Nvme {
        v["serial_number"] = json!(s.serial_number);
        v["model_number"] = json!(s.model_number);
        v["max_namespaces"] = json!(s.max_namespaces);
        v["min_cntlid"] = json!(s.min_cntlid);
        v["max_cntlid"] = json!(s.max_cntlid);
        v["namespaces"] = Value::Array(
            s.namespaces
                .iter()
                .map(|n| {
                    let mut j = ns_json(n);
                    // SPDK lists a namespace's ANA group only with ANA reporting on.
                    if s.ana_reporting {
                        j["anagrpid"] = json!(n.anagrpid);
                    }
                    j
                })
                .collect(),
        );
    }
    v
}

/// The poll group of `core`, named as SPDK names the poll group of its `index`-th thread.
pub fn poll_group_name(tgt: &NvmfTarget, core: u32) -> String {
    let index = tgt.cores().iter().position(|&c| c == core).unwrap_or(0);
    format!("nvmf_tgt_poll_group_{index:03}")
}
