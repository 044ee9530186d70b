//! The replies of the nvmf methods' failures, as SPDK's `nvmf_rpc.c` words them: bad parameters
//! and missing objects are -32602 "Invalid parameters", other failures -32603 with the text of
//! what failed; pmio appends what was wrong after a colon.

use std::fmt;

use pmio_jsonrpc::{RpcError, code};

use crate::error::NvmfError;

/// -32602, SPDK's text, then what was wrong.
pub fn invalid(detail: impl fmt::Display) -> RpcError {
    RpcError::new(
        code::INVALID_PARAMS,
        format!("Invalid parameters: {detail}"),
    )
}

/// -32603 with SPDK's text for the failure, then what was wrong.
pub fn internal(what: &str, detail: impl fmt::Display) -> RpcError {
    RpcError::new(code::INTERNAL_ERROR, format!("{what}: {detail}"))
}

/// The reply for a target error where SPDK answers "Invalid parameters" (most of them).
pub fn nvmf_error(e: &NvmfError) -> RpcError {
    match e {
        NvmfError::Reactor(_) => internal("Internal error", e),
        _ => invalid(e),
    }
}
