//! SPDK's reply to a driver error: its errno, with the driver's explanation as the text.

use pmio_jsonrpc::RpcError;

use crate::NvmeError;

/// SPDK-style errno for a driver error; the message keeps the driver's explanation.
pub fn nvme_error(e: &NvmeError) -> RpcError {
    let errno = match e {
        NvmeError::InvalidAddress(_) | NvmeError::InvalidOption(_) => libc::EINVAL,
        NvmeError::NoSuchDevice { .. }
        | NvmeError::NotBoundToVfio { .. }
        | NvmeError::NoIommuGroup { .. }
        | NvmeError::VfioUnavailable { .. }
        | NvmeError::DeviceRemoved { .. }
        | NvmeError::Detached { .. } => libc::ENODEV,
        NvmeError::GroupNotViable { .. } | NvmeError::Resetting { .. } => libc::EBUSY,
        NvmeError::Permission { .. } => libc::EACCES,
        NvmeError::MemlockTooLow { .. } | NvmeError::DmaAlloc(_) => libc::ENOMEM,
        NvmeError::Timeout { .. } => libc::ETIMEDOUT,
        // SPDK's attach answers a target it cannot reach or connect to with -EIO too, but
        // with the reason logged; pmio's message carries it.
        NvmeError::Disconnected { .. } => libc::EIO,
        NvmeError::Unsupported { .. } => libc::EOPNOTSUPP,
        _ => libc::EIO,
    };
    RpcError::errno_detail(-errno, e)
}
