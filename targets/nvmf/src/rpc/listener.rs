//! `nvmf_subsystem_add_listener`, `nvmf_subsystem_remove_listener`,
//! `nvmf_subsystem_get_listeners`, `nvmf_subsystem_listener_set_ana_state`.

use pmio_jsonrpc::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::NvmfRpc;
use super::errors::{internal, invalid, nvmf_error};
use super::json::listener_json;
use super::rules::{self, Ignored, TgtName, targeted};
use super::subsystem::{SubsystemQuery, subsystem};
use crate::ana::AnaState;
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
    /// The ANA state of every group through it: "optimized" (or "non_optimized",
    /// "inaccessible").
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

/// `nvmf_subsystem_listener_set_ana_state` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SetAnaState {
    /// Subsystem NQN.
    pub nqn: String,
    /// The state: "optimized", "non_optimized" or "inaccessible".
    pub ana_state: String,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
    /// The ANA group (absent or 0: every group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anagrpid: Option<u32>,
    /// The listener.
    pub listen_address: ListenAddress,
}

targeted!(AddListener, RemoveListener, SetAnaState);

/// The ANA state named `s`, or SPDK's -32602 for another name.
fn ana_state(s: &str) -> Result<AnaState, RpcError> {
    AnaState::parse(s).ok_or_else(|| {
        invalid(format_args!(
            "ana_state {s:?}: optimized, non_optimized or inaccessible"
        ))
    })
}

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
    let state = match &p.ana_state {
        None => AnaState::Optimized,
        Some(s) => ana_state(s)?,
    };
    let addr = p.listen_address.listen_addr()?;
    let secure = p.secure_channel.unwrap_or(false);
    rpc.tgt
        .add_listener_with(&p.nqn, addr.clone(), secure, state)
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
        s.listeners.iter().map(|l| listener_json(&s, l)).collect(),
    ))
}

/// SPDK's answer: `true`; a subsystem without ANA reporting, a group beyond the maximum or
/// an address that is no listener: -32603 "error setting ANA state" (as SPDK's callback).
pub(super) fn nvmf_subsystem_listener_set_ana_state(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SetAnaState = rules::decode(params)?;
    let state = ana_state(&p.ana_state)?;
    let addr = p.listen_address.listen_addr()?;
    // A missing subsystem is SPDK's -32602, like the other listener methods.
    subsystem(rpc, &p.nqn)?;
    rpc.tgt
        .set_ana_state(&p.nqn, &addr, state, p.anagrpid.unwrap_or(0))
        .map_err(|e| internal("error setting ANA state", &e))?;
    Ok(Value::Bool(true))
}
