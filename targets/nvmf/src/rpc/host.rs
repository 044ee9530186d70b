//! `nvmf_subsystem_add_host`, `nvmf_subsystem_remove_host`, `nvmf_subsystem_allow_any_host`.

use pmio_jsonrpc::RpcError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

use super::context::NvmfRpc;
use super::errors::{internal, nvmf_error};
use super::rules::{self, Ignored, TgtName, targeted};
use super::subsystem::subsystem;
use crate::error::NvmfError;
use crate::subsystem::HostKeys;

/// `nvmf_subsystem_add_host` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct AddHost {
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQN.
    pub host: String,
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
    /// TLS pre-shared key (a keyring name, `NVMeTLSkey-1:...`): the host connects over a
    /// secure channel with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub psk: Option<String>,
    /// DH-HMAC-CHAP key (a keyring name): the host must authenticate every queue with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub dhchap_key: Option<String>,
    /// DH-HMAC-CHAP controller key (a keyring name): the controller proves it holds it to a
    /// host that asks (bidirectional authentication).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub dhchap_ctrlr_key: Option<String>,
}

/// `nvmf_subsystem_remove_host` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RemoveHost {
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQN.
    pub host: String,
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
    /// How long SPDK waits for the host's controllers to go; pmio disconnects them at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(skip))]
    pub timeout_ms: Option<Ignored<u64>>,
}

/// `nvmf_subsystem_allow_any_host` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AllowAnyHost {
    /// Subsystem NQN.
    pub nqn: String,
    /// Any host (true) or only the listed ones (false).
    pub allow_any_host: bool,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
}

targeted!(AddHost, RemoveHost, AllowAnyHost);

pub(super) fn nvmf_subsystem_add_host(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: AddHost = rules::decode(params)?;
    subsystem(rpc, &p.nqn)?;
    let keys = host_keys(rpc, &p)?;
    let psk = host_psk(rpc, &p)?;
    let authenticated = keys.is_some();
    rpc.tgt
        .add_host_with_keys(&p.nqn, &p.host, keys)
        .map_err(|e| match e {
            NvmfError::NotFound(_) => nvmf_error(&e),
            _ => internal("Internal error", &e),
        })?;
    if let Some(k) = psk.clone() {
        rpc.tgt
            .set_host_psk(&p.nqn, &p.host, k)
            .map_err(|e| internal("Internal error", &e))?;
    }
    log::info!(
        "nvmf: {} admits host {}{}{}",
        p.nqn,
        p.host,
        if authenticated { " (DH-HMAC-CHAP)" } else { "" },
        if psk.is_some() { " (TLS PSK)" } else { "" }
    );
    Ok(Value::Bool(true))
}

/// The keyring keys `dhchap_key` and `dhchap_ctrlr_key` name; an unknown name is SPDK's
/// "Invalid parameters", as is a controller key without a host key.
fn host_keys(rpc: &NvmfRpc, p: &AddHost) -> Result<Option<HostKeys>, RpcError> {
    let invalid = || RpcError::new(pmio_jsonrpc::code::INVALID_PARAMS, "Invalid parameters");
    let get = |name: &str, what: &str| {
        rpc.keyring.get(name).map_err(|_| {
            log::error!("nvmf: unable to find DH-HMAC-CHAP {what}: {name}");
            invalid()
        })
    };
    let ckey = match &p.dhchap_ctrlr_key {
        Some(name) => Some(get(name, "ctrlr key")?),
        None => None,
    };
    let Some(name) = &p.dhchap_key else {
        if ckey.is_some() {
            log::error!("nvmf: a DH-HMAC-CHAP ctrlr key needs a host key");
            return Err(invalid());
        }
        return Ok(None);
    };
    Ok(Some(HostKeys {
        host: p.host.clone(),
        dhchap_key: get(name, "key")?,
        dhchap_ctrlr_key: ckey,
    }))
}

/// The keyring key `psk` names, checked now to hold a TLS PSK in the interchange format
/// (SPDK reads it at add_host too): an unknown name or another kind of key is SPDK's
/// "Invalid parameters".
fn host_psk(rpc: &NvmfRpc, p: &AddHost) -> Result<Option<Arc<pmio_keyring::Key>>, RpcError> {
    let Some(name) = &p.psk else {
        return Ok(None);
    };
    let invalid = || RpcError::new(pmio_jsonrpc::code::INVALID_PARAMS, "Invalid parameters");
    let key = rpc.keyring.get(name).map_err(|_| {
        log::error!("nvmf: unable to find PSK {name}");
        invalid()
    })?;
    if let Err(e) = key.tls_psk() {
        log::error!("nvmf: PSK {name} is not a TLS PSK: {e}");
        return Err(invalid());
    }
    Ok(Some(key))
}

pub(super) fn nvmf_subsystem_remove_host(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: RemoveHost = rules::decode(params)?;
    subsystem(rpc, &p.nqn)?;
    // A host that is not on the list: SPDK's -ENOENT becomes "Internal error".
    rpc.tgt
        .remove_host(&p.nqn, &p.host)
        .map_err(|e| internal("Internal error", &e))?;
    log::info!("nvmf: {} no longer admits host {}", p.nqn, p.host);
    Ok(Value::Bool(true))
}

pub(super) fn nvmf_subsystem_allow_any_host(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: AllowAnyHost = rules::decode(params)?;
    rpc.tgt
        .allow_any_host(&p.nqn, p.allow_any_host)
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: {} allow_any_host {}", p.nqn, p.allow_any_host);
    Ok(Value::Bool(true))
}
