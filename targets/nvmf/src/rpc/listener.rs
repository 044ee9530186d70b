//! `nvmf_subsystem_add_listener`, `nvmf_subsystem_remove_listener`,
//! `nvmf_subsystem_get_listeners`.

use pmio_jsonrpc::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::NvmfRpc;
use super::errors::{invalid, nvmf_error};
use super::json::addr_json;
use super::rules::{self, Ignored, TgtName, default_only_str, targeted};
use super::subsystem::{SubsystemQuery, subsystem};
use crate::subsystem::ListenAddr;

/// `nvmf_subsystem_add_listener` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AddListener {
    /// Subsystem NQN.
    pub nqn: String,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
    /// A secure channel: TLS 1.3 with the hosts' PSKs (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure_channel: Option<bool>,
    /// ANA state: "optimized".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ana_state: Option<String>,
    /// Which socket implementation SPDK uses (posix, uring); pmio has its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sock_impl: Option<Ignored<String>>,
    /// The address.
    pub listen_address: ListenAddress,
}

/// `nvmf_subsystem_remove_listener` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveListener {
    /// Subsystem NQN.
    pub nqn: String,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
    /// The address.
    pub listen_address: ListenAddress,
}

targeted!(AddListener, RemoveListener);

/// `listen_address` of the listener methods, in the order rpc.py sends its keys.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenAddress {
    /// Transport type: TCP (any case).
    pub trtype: String,
    /// An IP address.
    pub traddr: String,
    /// Address family (IPv4, IPv6; default: the address's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adrfam: Option<String>,
    /// The port: required for TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trsvcid: Option<String>,
}

impl ListenAddress {
    /// The address the target listens on: TCP only; `trsvcid` required.
    pub fn listen_addr(&self) -> Result<ListenAddr, RpcError> {
        if !self.trtype.eq_ignore_ascii_case("tcp") {
            return Err(invalid(format_args!(
                "trtype {:?}: pmio listens on TCP only",
                self.trtype
            )));
        }
        let Some(trsvcid) = &self.trsvcid else {
            return Err(invalid("trsvcid (the port) is required for TCP"));
        };
        ListenAddr::new(&self.traddr, trsvcid, self.adrfam.as_deref()).map_err(|e| nvmf_error(&e))
    }

    /// `l` as SPDK writes a listener's address (`save_config`).
    pub fn of(l: &ListenAddr) -> ListenAddress {
        ListenAddress {
            trtype: "TCP".into(),
            traddr: l.traddr.clone(),
            adrfam: Some(l.adrfam.name().into()),
            trsvcid: Some(l.trsvcid.clone()),
        }
    }
}

pub(super) fn nvmf_subsystem_add_listener(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: AddListener = rules::decode(params)?;
    default_only_str("ana_state", p.ana_state.as_deref(), "optimized")?;
    let addr = p.listen_address.listen_addr()?;
    let secure = p.secure_channel.unwrap_or(false);
    rpc.tgt
        .add_listener_with(&p.nqn, addr.clone(), secure)
        .map_err(|e| nvmf_error(&e))?;
    log::info!(
        "nvmf: {} listening on {}:{}{}",
        p.nqn,
        addr.traddr,
        addr.trsvcid,
        if secure { " (secure channel)" } else { "" }
    );
    Ok(Value::Bool(true))
}

pub(super) fn nvmf_subsystem_remove_listener(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: RemoveListener = rules::decode(params)?;
    let addr = p.listen_address.listen_addr()?;
    rpc.tgt
        .remove_listener(&p.nqn, &addr)
        .map_err(|e| nvmf_error(&e))?;
    log::info!(
        "nvmf: {} no longer listening on {}:{}",
        p.nqn,
        addr.traddr,
        addr.trsvcid
    );
    Ok(Value::Bool(true))
}

pub(super) fn nvmf_subsystem_get_listeners(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SubsystemQuery = rules::decode(params)?;
    let s = subsystem(rpc, &p.nqn)?;
    Ok(Value::Array(
        s.listeners
            .iter()
            .map(|l| json!({"address": addr_json(l)}))
            .collect(),
    ))
}
