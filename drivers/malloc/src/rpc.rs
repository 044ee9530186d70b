//! SPDK's `bdev_malloc_create` and `bdev_malloc_delete` (feature `rpc`), on the daemon's
//! [`BdevHost`].
//!
//! [`MallocCreate`] is the one declaration of `bdev_malloc_create`'s parameters, in the order
//! SPDK's rpc.py sends them: the method decodes it, `save_config` writes the call with it and
//! `pmio-rpc` builds it from rpc.py's command line. Metadata, DIF and NUMA placement are
//! accepted only at SPDK's defaults (malloc disks here have none).

use std::sync::Arc;

use pmio::BlockDevice;
use pmio_jsonrpc::decl::{self, BoolDefault, IntDefault};
use pmio_jsonrpc::{Method, RUNTIME, RpcError};
use pmio_runtime::rpc::params;
use pmio_runtime::rpc::{BdevHost, bdev_error};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{MallocDevice, MallocOptions};

/// The module's name in SPDK's errors and records.
pub const MODULE: &str = "malloc";

/// The methods of the malloc module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![
        Method::new("bdev_malloc_create", RUNTIME, bdev_malloc_create),
        Method::new(
            "bdev_malloc_delete",
            RUNTIME,
            |h: &Arc<BdevHost>, _: &str, p: Option<&Value>| params::delete_bdev(h, p, MODULE),
        ),
    ]
}

/// `bdev_malloc_create` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MallocCreate {
    /// Size in blocks.
    pub num_blocks: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// Physical block size: 0 or `block_size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_block_size: Option<u32>,
    /// Bdev name (default: the first free of Malloc0, Malloc1, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// UUID (default: random).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Optimal I/O boundary in blocks: 0 (none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimal_io_boundary: Option<IntDefault<0>>,
    /// Metadata bytes per block: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md_size: Option<IntDefault<0>>,
    /// Metadata interleaved with data: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub md_interleave: Option<BoolDefault<false>>,
    /// DIF type: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_type: Option<IntDefault<0>>,
    /// DIF at the head of the metadata: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_is_head_of_md: Option<BoolDefault<false>>,
    /// DIF protection-information format: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dif_pi_format: Option<IntDefault<0>>,
    /// NUMA node of the memory: -1 (any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_id: Option<IntDefault<-1>>,
}

fn bdev_malloc_create(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: MallocCreate = decl::decode(params)?;
    let uuid = params::parse_uuid(p.uuid.as_deref())?;
    params::check_physical_block_size(p.physical_block_size, p.block_size)?;
    // SPDK names unnamed malloc bdevs Malloc0, Malloc1, ...
    let name = match p.name {
        Some(n) => n,
        None => (0..)
            .map(|i| format!("Malloc{i}"))
            .find(|n| host.registry.get(n).is_none())
            .unwrap_or_default(),
    };
    host.check_name_free(&name)?;
    let dev = MallocDevice::new(MallocOptions {
        name: name.clone(),
        uuid,
        block_size: p.block_size,
        num_blocks: p.num_blocks,
        ..MallocOptions::default()
    })
    .map_err(|e| bdev_error(&e))?;
    let info = dev.info();
    let create = MallocCreate {
        num_blocks: info.num_blocks,
        block_size: info.block_size,
        name: Some(name),
        uuid: Some(info.uuid.to_string()),
        ..MallocCreate::default()
    };
    params::add_bdev(host, dev, MODULE, "bdev_malloc_create", &create)
}
