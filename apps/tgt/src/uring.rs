//! `bdev_uring_create` / `bdev_uring_delete`: files and block devices through io_uring.
//!
//! SPDK's parameters (`filename`, `name`, `block_size`, `uuid`) plus pmio's `direct` (default
//! true: O_DIRECT; false for buffered I/O, e.g. on tmpfs). Opening the file blocks on the file
//! system, so it happens here, on the RPC connection thread, never on a reactor; each reactor
//! that runs I/O on the bdev later opens its own ring.

use std::sync::Arc;

use pmio::{BdevError, BdevInfo, BlockDevice, DriverQueue, HctxType, Uuid};
use pmio_uring::{UringBdev, UringError, UringOptions};
use serde_json::{Value, json};

use crate::methods::{Method, Rpc};
use crate::target::BdevKind;
use pmio_jsonrpc::RUNTIME;
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::params::Params;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![
        Method::new("bdev_uring_create", RUNTIME, bdev_uring_create),
        Method::new("bdev_uring_delete", RUNTIME, bdev_uring_delete),
    ]
}

/// A uring bdev with the UUID the caller asked for (the driver picks a random one).
struct WithUuid {
    inner: UringBdev,
    info: BdevInfo,
}

impl BlockDevice for WithUuid {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.inner.open_queue(ty, index, depth)
    }
}

fn uring_error(e: &UringError) -> RpcError {
    let errno = match e {
        UringError::NotFound { .. } | UringError::MissingPath => -libc::ENOENT,
        UringError::Os { source, .. } | UringError::Ring { source, .. } => {
            -source.raw_os_error().unwrap_or(libc::EIO)
        }
        _ => -libc::EINVAL,
    };
    RpcError::errno_detail(errno, e)
}

fn bdev_uring_create(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let filename: String = p.req("filename")?;
    let name: String = p.req("name")?;
    let block_size: Option<u32> = p.opt("block_size")?;
    let uuid: Option<String> = p.opt("uuid")?;
    let direct: bool = p.opt("direct")?.unwrap_or(true);
    p.finish()?;
    let uuid = match uuid {
        None => None,
        Some(s) => Some(Uuid::parse(&s).ok_or_else(|| {
            RpcError::decode(format_args!("parameter \"uuid\": \"{s}\" is not a UUID"))
        })?),
    };
    let t = &rpc.target;
    t.check_name_free(&name)?;
    let opts = UringOptions {
        name: Some(name.clone()),
        direct,
        block_size: block_size.filter(|&b| b != 0),
        ..UringOptions::new(&filename)
    };
    let dev = UringBdev::create(&opts).map_err(|e| uring_error(&e))?;
    let mut info = dev.info().clone();
    if let Some(u) = uuid {
        info.uuid = u;
    }
    let mut params = json!({
        "name": name,
        "filename": filename,
        "block_size": info.block_size,
        "uuid": info.uuid.to_string()
    });
    if !direct {
        params["direct"] = json!(false);
    }
    let create = json!({"method": "bdev_uring_create", "params": params});
    t.add_bdev(
        Arc::new(WithUuid { inner: dev, info }),
        BdevKind::Uring {
            filename: filename.clone(),
        },
        Some(create),
    )?;
    log::info!("created uring bdev {name} on {filename}");
    Ok(Value::String(name))
}

fn bdev_uring_delete(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    crate::methods::delete_module_bdev(rpc, params, "uring")
}
