//! `nvmf_create_transport` and `nvmf_get_transports`.
//!
//! pmio serves TCP only. rpc.py sends the keys of RDMA and vfio-user too (its `store_true`
//! flags as `false`): they are accepted and ignored, as SPDK's TCP transport ignores them, and
//! so are SPDK tunables pmio has no counterpart for (shared buffer pools, acceptor polling,
//! control message pools, keep-alive limits).

use pmio_jsonrpc::decl::{self, BoolDefault, IntDefault};
use pmio_jsonrpc::{RpcError, code};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::context::NvmfRpc;
use super::errors::internal;
use super::json::transport_json;
use super::rules::{self, Ignored, TgtName, targeted};
use crate::NvmfTarget;
use crate::error::NvmfError;
use crate::subsystem::TransportOpts;

/// `nvmf_create_transport` parameters, in the order rpc.py sends them.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTransport {
    /// Transport type: TCP (any case).
    pub trtype: String,
    /// The target ([`TgtName`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tgt_name: Option<TgtName>,
    /// Entries of an I/O queue at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queue_depth: Option<u16>,
    /// I/O queue pairs per controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_io_qpairs_per_ctrlr: Option<u16>,
    /// In-capsule data size, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_capsule_data_size: Option<u32>,
    /// Largest I/O, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_io_size: Option<u32>,
    /// SPDK's buffer unit, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_unit_size: Option<u32>,
    /// Entries of the admin queue at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_aq_depth: Option<u16>,
    /// SPDK's shared buffer pool: no counterpart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_shared_buffers: Option<Ignored<u64>>,
    /// SPDK's per-poll-group buffer cache: no counterpart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buf_cache_size: Option<Ignored<u64>>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_cqe: Option<Ignored<u64>>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_srq_depth: Option<Ignored<u64>>,
    /// Reads end with C2HData carrying SUCCESS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub c2h_success: Option<bool>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_srq: Option<Ignored<bool>>,
    /// Zero-copy: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zcopy: Option<BoolDefault<false>>,
    /// DIF insert/strip: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_insert_or_strip: Option<BoolDefault<false>>,
    /// Socket priority: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sock_priority: Option<IntDefault<0>>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptor_backlog: Option<Ignored<u64>>,
    /// Seconds an Abort waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort_timeout_sec: Option<u32>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_wr_batching: Option<Ignored<bool>>,
    /// SPDK's control message pool: no counterpart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_msg_num: Option<Ignored<u64>>,
    /// vfio-user only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_mappable_bar0: Option<Ignored<bool>>,
    /// vfio-user only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_adaptive_irq: Option<Ignored<bool>>,
    /// vfio-user only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_shadow_doorbells: Option<Ignored<bool>>,
    /// SPDK's acceptor polling interval: no counterpart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptor_poll_rate: Option<Ignored<u64>>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timeout: Option<Ignored<u64>>,
    /// RDMA only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_wr_pool_size: Option<Ignored<u64>>,
    /// pmio has no command pass-through to disable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_command_passthru: Option<Ignored<bool>>,
    /// SPDK's keep-alive granularity: no counterpart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kas: Option<Ignored<u64>>,
    /// SPDK's minimum keep-alive timeout: no counterpart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_kato: Option<Ignored<u64>>,
}

/// `nvmf_get_transports` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct GetTransports {
    /// The name of the parent NVMe-oF target (pmio has one, nvmf_tgt).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 't', long))]
    pub tgt_name: Option<TgtName>,
    /// Only this transport type.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub trtype: Option<String>,
}

targeted!(CreateTransport, GetTransports);

impl CreateTransport {
    /// The target's options: what was given, pmio's defaults for the rest.
    pub fn opts(&self) -> TransportOpts {
        let d = TransportOpts::default();
        TransportOpts {
            max_queue_depth: self.max_queue_depth.unwrap_or(d.max_queue_depth),
            max_io_qpairs_per_ctrlr: self
                .max_io_qpairs_per_ctrlr
                .unwrap_or(d.max_io_qpairs_per_ctrlr),
            in_capsule_data_size: self.in_capsule_data_size.unwrap_or(d.in_capsule_data_size),
            max_io_size: self.max_io_size.unwrap_or(d.max_io_size),
            io_unit_size: self.io_unit_size.unwrap_or(d.io_unit_size),
            max_aq_depth: self.max_aq_depth.unwrap_or(d.max_aq_depth),
            c2h_success: self.c2h_success.unwrap_or(d.c2h_success),
            abort_timeout_sec: self.abort_timeout_sec.unwrap_or(d.abort_timeout_sec),
        }
    }
}

pub(super) fn nvmf_create_transport(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: CreateTransport = rules::decode(params)?;
    if !p.trtype.eq_ignore_ascii_case("tcp") {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "Invalid transport type '{}': pmio serves TCP only",
                p.trtype
            ),
        ));
    }
    let opts = p.opts();
    rpc.tgt
        .create_transport(opts.clone())
        .map_err(|e| match e {
            NvmfError::Exists(_) => internal("Transport type 'TCP' already exists", &e),
            _ => internal("Transport type 'TCP' create failed", &e),
        })?;
    log::info!("nvmf: TCP transport created: {opts:?}");
    Ok(Value::Bool(true))
}

/// Whether the TCP transport exists with the options `nvmf_create_transport` `params` ask for
/// (`None`: no transport yet, or parameters that do not decode). Only the options pmio honours
/// are compared; a configuration loaded again finds its transport there.
pub fn transport_matches(tgt: &NvmfTarget, params: &Value) -> Option<bool> {
    let have = tgt.transport()?;
    let want = decl::decode::<CreateTransport>(Some(params)).ok()?.opts();
    Some(want == have)
}

pub(super) fn nvmf_get_transports(
    rpc: &NvmfRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetTransports = rules::decode(params)?;
    let t = rpc.tgt.transport();
    if let Some(tt) = &p.trtype
        && (t.is_none() || !tt.eq_ignore_ascii_case("tcp"))
    {
        return Err(RpcError::errno_detail(
            -libc::ENODEV,
            format_args!("no transport {tt}"),
        ));
    }
    Ok(Value::Array(t.iter().map(transport_json).collect()))
}
