//! `nvmf_create_subsystem`, `nvmf_delete_subsystem`, `nvmf_get_subsystems`.

use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::decl::{BoolDefault, IntDefault};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::NvmfRpc;
use super::errors::{internal, invalid, nvmf_error};
use super::json::subsystem_json;
use super::rules::{self, TgtName, targeted};
use crate::subsystem::{Subsystem, SubsystemParams};

/// `nvmf_create_subsystem` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSubsystem {
    /// Subsystem NQN.
    pub nqn: String,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
    /// Serial number (default: SPDK's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    /// Model number (default: SPDK's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_number: Option<String>,
    /// Any host may connect (no host list).
    #[serde(default)]
    pub allow_any_host: bool,
    /// Namespace limit (0: SPDK's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_namespaces: Option<u32>,
    /// Asymmetric Namespace Access reporting: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ana_reporting: Option<bool>,
    /// Lowest dynamic controller ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_cntlid: Option<u16>,
    /// Highest dynamic controller ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cntlid: Option<u16>,
    /// Dataset Management size limit, KiB: 0 (none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_discard_size_kib: Option<IntDefault<0>>,
    /// Write Zeroes size limit, KiB: 0 (none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_write_zeroes_size_kib: Option<IntDefault<0>>,
    /// NVMe pass-through: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passthrough: Option<BoolDefault<false>>,
    /// NVM subsystem reset: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_nssr: Option<BoolDefault<false>>,
}

/// A subsystem's NQN and the target: the parameters of `nvmf_delete_subsystem` and of the
/// per-subsystem queries.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct SubsystemQuery {
    /// Subsystem NQN.
    pub nqn: String,
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
}

/// `nvmf_get_subsystems` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetSubsystems {
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
    /// Only this subsystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nqn: Option<String>,
}

targeted!(CreateSubsystem, SubsystemQuery, GetSubsystems);

impl CreateSubsystem {
    /// What the target makes of it.
    pub fn subsystem_params(&self) -> SubsystemParams {
        SubsystemParams {
            nqn: self.nqn.clone(),
            serial_number: self.serial_number.clone(),
            model_number: self.model_number.clone(),
            allow_any_host: self.allow_any_host,
            max_namespaces: self.max_namespaces.unwrap_or(0),
            min_cntlid: self.min_cntlid,
            max_cntlid: self.max_cntlid,
            ana_reporting: self.ana_reporting.unwrap_or(false),
        }
    }

    /// The call that recreates subsystem `s` (`save_config`).
    pub fn of(s: &Subsystem) -> CreateSubsystem {
        CreateSubsystem {
            nqn: s.nqn.clone(),
            serial_number: Some(s.serial_number.clone()),
            model_number: Some(s.model_number.clone()),
            allow_any_host: s.allow_any_host,
            max_namespaces: Some(s.max_namespaces),
            ana_reporting: Some(s.ana_reporting),
            min_cntlid: Some(s.min_cntlid),
            max_cntlid: Some(s.max_cntlid),
            ..CreateSubsystem::default()
        }
    }
}

pub(super) fn nvmf_create_subsystem(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p = rules::decode::<CreateSubsystem>(params)?.subsystem_params();
    rpc.tgt
        .create_subsystem(&p)
        .map_err(|e| internal(&format!("Unable to create subsystem {}", p.nqn), &e))?;
    log::info!("nvmf: created subsystem {}", p.nqn);
    Ok(Value::Bool(true))
}

pub(super) fn nvmf_delete_subsystem(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: SubsystemQuery = rules::decode(params)?;
    rpc.tgt
        .delete_subsystem(&p.nqn)
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: deleted subsystem {}", p.nqn);
    Ok(Value::Bool(true))
}

pub(super) fn nvmf_get_subsystems(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetSubsystems = rules::decode(params)?;
    let c = rpc.tgt.config();
    match p.nqn {
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
pub(super) fn subsystem(rpc: &NvmfRpc, nqn: &str) -> Result<Subsystem, RpcError> {
    rpc.tgt
        .config()
        .subsystem(nqn)
        .cloned()
        .ok_or_else(|| invalid(format_args!("subsystem {nqn} not found")))
}
