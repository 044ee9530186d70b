//! `nvmf_subsystem_add_ns` and `nvmf_subsystem_remove_ns`.

use pmio::Uuid;
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::decl::BoolDefault;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::context::NvmfRpc;
use super::errors::{invalid, nvmf_error};
use super::rules::{self, Hex, TgtName, refuse_given, targeted};
use crate::subsystem::Namespace;

/// `nvmf_subsystem_add_ns` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AddNs {
    /// Subsystem NQN.
    pub nqn: String,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
    /// The namespace.
    pub namespace: NsParams,
}

/// `namespace` of `nvmf_subsystem_add_ns`, in the order rpc.py sends its keys.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NsParams {
    /// The bdev behind it, by name or UUID alias.
    pub bdev_name: String,
    /// Persistent reservation file: refused (pmio has no persistent reservations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptpl_file: Option<String>,
    /// NSID (0 or absent: the first free).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    /// NGUID, 32 hexadecimal digits ([`Hex`]; default: the UUID's bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nguid: Option<String>,
    /// EUI-64, 16 hexadecimal digits ([`Hex`]; default: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eui64: Option<String>,
    /// UUID (default: the bdev's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// ANA group (0 or absent: the NSID).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anagrpid: Option<u32>,
    /// Hidden from controllers until made visible: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_auto_visible: Option<BoolDefault<false>>,
    /// Hide the bdev's metadata: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hide_metadata: Option<BoolDefault<false>>,
}

/// `nvmf_subsystem_remove_ns` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RemoveNs {
    /// Subsystem NQN.
    pub nqn: String,
    /// Namespace ID.
    pub nsid: u32,
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
}

targeted!(AddNs, RemoveNs);

impl NsParams {
    /// The parameters that recreate namespace `n` with its identities, so hosts see the same
    /// namespace after a restart (`save_config`); its ANA group when `ana_reporting` (SPDK
    /// writes it only then).
    pub fn of(n: &Namespace, ana_reporting: bool) -> NsParams {
        NsParams {
            bdev_name: n.bdev_name().to_string(),
            nsid: Some(n.nsid),
            nguid: Some(Hex(n.nguid).to_string()),
            eui64: n.eui64.map(|e| Hex(e).to_string()),
            uuid: Some(n.uuid.to_string()),
            anagrpid: ana_reporting.then_some(n.anagrpid),
            no_auto_visible: Some(BoolDefault(false)),
            ..NsParams::default()
        }
    }

    /// The identities given, parsed: the text a client sent is refused (-32602) naming it.
    fn identities(&self) -> Result<Identities, RpcError> {
        let uuid = match &self.uuid {
            None => None,
            Some(s) => Some(
                Uuid::parse(s).ok_or_else(|| invalid(format_args!("uuid {s:?} is not a UUID")))?,
            ),
        };
        Ok(Identities {
            uuid,
            nguid: hex("nguid", self.nguid.as_deref())?,
            eui64: hex("eui64", self.eui64.as_deref())?,
        })
    }
}

/// A namespace's identities (`None`: the target derives them).
struct Identities {
    uuid: Option<Uuid>,
    nguid: Option<[u8; 16]>,
    eui64: Option<[u8; 8]>,
}

/// Key `key`'s hexadecimal text, if given.
fn hex<const N: usize>(key: &str, s: Option<&str>) -> Result<Option<[u8; N]>, RpcError> {
    s.map(|s| s.parse::<Hex<N>>().map(|h| h.0))
        .transpose()
        .map_err(|e| invalid(format_args!("{key} {e}")))
}

pub(super) fn nvmf_subsystem_add_ns(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: AddNs = rules::decode(params)?;
    let ns = p.namespace;
    let ids = ns.identities()?;
    refuse_given(
        "ptpl_file",
        &ns.ptpl_file,
        "pmio has no persistent reservations",
    )?;
    // A bdev may be named by its UUID alias, as SPDK allows.
    let bdev = rpc
        .bdevs
        .find_bdev(&ns.bdev_name)
        .map(|d| d.info().name.clone())
        .unwrap_or(ns.bdev_name);
    // Not deleted between the look-up and the namespace's creation.
    let _owners = rpc.bdevs.hold_bdev_owners();
    let nsid = rpc
        .tgt
        .add_ns(
            &p.nqn,
            &bdev,
            ns.nsid.unwrap_or(0),
            ids.uuid,
            ids.nguid,
            ids.eui64,
            ns.anagrpid.unwrap_or(0),
        )
        .map_err(|e| nvmf_error(&e))?;
    log::info!("nvmf: {} namespace {nsid} on bdev {bdev}", p.nqn);
    Ok(json!(nsid))
}

pub(super) fn nvmf_subsystem_remove_ns(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: RemoveNs = rules::decode(params)?;
    let ns = rpc
        .tgt
        .remove_ns(&p.nqn, p.nsid)
        .map_err(|e| nvmf_error(&e))?;
    log::info!(
        "nvmf: {} namespace {} (bdev {}) removed",
        p.nqn,
        p.nsid,
        ns.bdev_name()
    );
    Ok(Value::Bool(true))
}
