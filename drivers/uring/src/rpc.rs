//! `bdev_uring_create` / `bdev_uring_delete` (feature `rpc`): files and block devices through
//! io_uring, on the daemon's [`BdevHost`].
//!
//! SPDK's parameters (`filename`, `name`, `block_size`, `uuid`) plus pmio's `direct` (default
//! true: O_DIRECT; false for buffered I/O, e.g. on tmpfs), declared once in [`UringCreate`].
//! Opening the file blocks on the file system, so it happens on the RPC connection thread,
//! never on a reactor; each reactor that runs I/O on the bdev later opens its own ring.

use std::sync::Arc;

use pmio::{BdevError, BdevInfo, BlockDevice, DriverQueue, HctxType};
use pmio_jsonrpc::{Method, RUNTIME, RpcError, decl};
use pmio_runtime::rpc::params;
use pmio_runtime::rpc::{BdevHost, BdevRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{UringBdev, UringError, UringOptions};

/// The module's name in SPDK's errors and records.
pub const MODULE: &str = "uring";

/// The methods of the uring module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![
        Method::new("bdev_uring_create", RUNTIME, bdev_uring_create),
        Method::new(
            "bdev_uring_delete",
            RUNTIME,
            |h: &Arc<BdevHost>, _: &str, p: Option<&Value>| params::delete_bdev(h, p, MODULE),
        ),
    ]
}

/// `bdev_uring_create` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UringCreate {
    /// File or block device path.
    pub filename: String,
    /// Bdev name.
    pub name: String,
    /// Block size (default, or 0: the device's logical block size; for files the file
    /// system's direct-I/O alignment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// UUID (default: random).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// pmio: O_DIRECT (default true); false for buffered I/O.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<bool>,
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

fn bdev_uring_create(
    host: &Arc<BdevHost>,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: UringCreate = decl::decode(params)?;
    let uuid = params::parse_uuid(p.uuid.as_deref())?;
    let direct = p.direct.unwrap_or(true);
    host.check_name_free(&p.name)?;
    let opts = UringOptions {
        name: Some(p.name.clone()),
        direct,
        block_size: p.block_size.filter(|&b| b != 0),
        ..UringOptions::new(&p.filename)
    };
    let dev = UringBdev::create(&opts).map_err(|e| uring_error(&e))?;
    let mut info = dev.info().clone();
    if let Some(u) = uuid {
        info.uuid = u;
    }
    let create = UringCreate {
        block_size: Some(info.block_size),
        uuid: Some(info.uuid.to_string()),
        direct: (!direct).then_some(false),
        ..p
    };
    let mut record = BdevRecord::new(
        &create.name,
        MODULE,
        Some(params::call("bdev_uring_create", &create)),
    );
    record.driver_specific = json!({"uring": {"filename": create.filename}});
    host.add_bdev(Arc::new(WithUuid { inner: dev, info }), record)?;
    log::info!("created uring bdev {} on {}", create.name, create.filename);
    Ok(Value::String(create.name))
}
