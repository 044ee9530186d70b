//! What is connected: `nvmf_subsystem_get_controllers`, `nvmf_subsystem_get_qpairs`,
//! `nvmf_get_stats`.

use pmio::Uuid;
use pmio_jsonrpc::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::NvmfRpc;
use super::errors::nvmf_error;
use super::json::{poll_group_name, sockaddr_json};
use super::rules::{self, TgtName, targeted};
use super::subsystem::SubsystemQuery;
use crate::subsystem::DISCOVERY_NQN;

/// `nvmf_get_stats` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetStats {
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
}

targeted!(GetStats);

pub(super) fn nvmf_subsystem_get_controllers(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SubsystemQuery = rules::decode(params)?;
    let ctrlrs = rpc.tgt.controllers(&p.nqn).map_err(|e| nvmf_error(&e))?;
    let cntrltype = if p.nqn == DISCOVERY_NQN {
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

pub(super) fn nvmf_subsystem_get_qpairs(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SubsystemQuery = rules::decode(params)?;
    let tgt = &rpc.tgt;
    let ctrlrs = tgt.controllers(&p.nqn).map_err(|e| nvmf_error(&e))?;
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
                "thread": poll_group_name(tgt, q.core),
                "hostnqn": c.hostnqn,
                "listen_address": sockaddr_json(&q.local),
                "peer_address": sockaddr_json(&q.peer)
            }));
        }
    }
    Ok(Value::Array(out))
}

pub(super) fn nvmf_get_stats(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    rules::decode::<GetStats>(params)?;
    let tgt = &rpc.tgt;
    let transports = if tgt.transport().is_some() {
        json!([{"trtype": "TCP"}])
    } else {
        json!([])
    };
    let groups: Vec<Value> = tgt
        .group_stats()
        .into_iter()
        .map(|(core, s)| {
            json!({
                "name": poll_group_name(tgt, core),
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
