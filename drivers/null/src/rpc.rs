//! SPDK's `bdev_null_create` and `bdev_null_delete` (feature `rpc`), on the daemon's
//! [`BdevHost`].
//!
//! [`NullCreate`] is the one declaration of `bdev_null_create`'s parameters, in the order SPDK's
//! rpc.py sends them (the method decodes it, `save_config` writes it, `pmio-rpc` builds it).
//! Metadata, DIF and the write/unmap hints are accepted only at SPDK's defaults.

use std::sync::Arc;

use pmio::BlockDevice;
use pmio_jsonrpc::decl::{self, BoolDefault, IntDefault};
use pmio_jsonrpc::{Method, RUNTIME, RpcError};
use pmio_runtime::rpc::params;
use pmio_runtime::rpc::{BdevHost, bdev_error};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{NullDevice, NullOptions};

/// The module's name in SPDK's errors and records.
pub const MODULE: &str = "null";

/// The methods of the null module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![
        Method::new("bdev_null_create", RUNTIME, bdev_null_create),
        Method::new(
            "bdev_null_delete",
            RUNTIME,
            |h: &Arc<BdevHost>, _: &str, p: Option<&Value>| params::delete_bdev(h, p, MODULE),
        ),
    ]
}

/// `bdev_null_create` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NullCreate {
    /// Size in blocks.
    pub num_blocks: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// Physical block size: 0 or `block_size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_block_size: Option<u32>,
    /// Bdev name.
    pub name: String,
    /// UUID (default: random).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Metadata bytes per block: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md_size: Option<IntDefault<0>>,
    /// DIF type: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_type: Option<IntDefault<0>>,
    /// DIF at the head of the metadata: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_is_head_of_md: Option<BoolDefault<false>>,
    /// DIF protection-information format: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_pi_format: Option<IntDefault<0>>,
    /// Write and unmap hints: 0 (none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_write_granularity: Option<IntDefault<0>>,
    /// See `preferred_write_granularity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_write_alignment: Option<IntDefault<0>>,
    /// See `preferred_write_granularity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimal_write_size: Option<IntDefault<0>>,
    /// See `preferred_write_granularity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_unmap_granularity: Option<IntDefault<0>>,
    /// See `preferred_write_granularity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_unmap_alignment: Option<IntDefault<0>>,
}

fn bdev_null_create(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: NullCreate = decl::decode(params)?;
    let uuid = params::parse_uuid(p.uuid.as_deref())?;
    params::check_physical_block_size(p.physical_block_size, p.block_size)?;
    host.check_name_free(&p.name)?;
    let dev = NullDevice::new(NullOptions {
        name: p.name.clone(),
        uuid,
        block_size: p.block_size,
        num_blocks: p.num_blocks,
        ..NullOptions::default()
    })
    .map_err(|e| bdev_error(&e))?;
    let info = dev.info();
    let create = NullCreate {
        num_blocks: info.num_blocks,
        block_size: info.block_size,
        name: p.name,
        uuid: Some(info.uuid.to_string()),
        ..NullCreate::default()
    };
    params::add_bdev(host, dev, MODULE, "bdev_null_create", &create)
}
