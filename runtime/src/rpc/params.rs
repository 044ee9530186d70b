//! Parameter types and calls every bdev module's methods share.

use std::sync::Arc;

use pmio::{BlockDevice, Uuid};
use pmio_jsonrpc::{RpcError, decl};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::host::{BdevHost, BdevRecord};

/// A bdev's `uuid` parameter (a string, as SPDK's clients send it), parsed; a malformed one is
/// refused with SPDK's decode failure, naming what was given.
pub fn parse_uuid(uuid: Option<&str>) -> Result<Option<Uuid>, RpcError> {
    match uuid {
        None => Ok(None),
        Some(s) => Uuid::parse(s).map(Some).ok_or_else(|| {
            RpcError::decode(format_args!("parameter \"uuid\": \"{s}\" is not a UUID"))
        }),
    }
}

/// `bdev_*_delete` parameters.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteBdev {
    /// Bdev name.
    pub name: String,
}

/// `bdev_*_delete {name}` for a bdev of `module`.
pub fn delete_bdev(
    host: &BdevHost,
    params: Option<&Value>,
    module: &str,
) -> Result<Value, RpcError> {
    let p: DeleteBdev = decl::decode(params)?;
    host.delete_bdev(&p.name, module)?;
    log::info!("deleted {module} bdev {}", p.name);
    Ok(Value::Bool(true))
}

/// SPDK's `physical_block_size`: pmio devices have one block size, so only 0 (unset) or the
/// logical block size are accepted.
pub fn check_physical_block_size(pbs: Option<u32>, block_size: u32) -> Result<(), RpcError> {
    match pbs {
        None | Some(0) => Ok(()),
        Some(pbs) if pbs == block_size => Ok(()),
        Some(pbs) => Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!(
                "parameter \"physical_block_size\" ({pbs}) must equal block_size ({block_size})"
            ),
        )),
    }
}

/// A `{"method", "params"}` call as `save_config` writes it.
pub fn call(method: &str, params: &impl Serialize) -> Value {
    let params = serde_json::to_value(params).unwrap_or_else(|e| {
        // A declaration that cannot serialize is a programming error; keep the method.
        log::error!("{method}: parameters do not serialize: {e}");
        Value::Null
    });
    json!({"method": method, "params": params})
}

/// Registers `dev` made by `module`, recreated by `method` with `create`, and answers with its
/// name (the create methods' reply).
pub fn add_bdev(
    host: &BdevHost,
    dev: Arc<dyn BlockDevice>,
    module: &'static str,
    method: &str,
    create: &impl Serialize,
) -> Result<Value, RpcError> {
    let info = dev.info();
    let (name, num_blocks, block_size) = (info.name.clone(), info.num_blocks, info.block_size);
    host.add_bdev(
        dev,
        BdevRecord::new(&name, module, Some(call(method, create))),
    )?;
    log::info!("{method}: {name}, {num_blocks} blocks of {block_size} bytes");
    Ok(Value::String(name))
}
