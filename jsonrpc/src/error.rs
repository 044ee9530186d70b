//! Errors of a JSON-RPC reply: SPDK's codes and texts.
//!
//! SPDK answers a failed operation with a negative errno and the C library's text for it
//! (`spdk_jsonrpc_send_error_response(request, -ENODEV, spdk_strerror(ENODEV))`), and a
//! protocol failure with the JSON-RPC 2.0 codes; rpc.py and scripts match on both.

use std::fmt;

use serde::Serialize;

/// JSON-RPC 2.0 error codes used by SPDK.
pub mod code {
    /// The bytes are not JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// Valid JSON but not a JSON-RPC request object (also: batch arrays).
    pub const INVALID_REQUEST: i32 = -32600;
    /// No method of that name.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Parameters given to a method that takes none.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Bad or unknown parameters (SPDK reports decode failures with this code).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Method exists but is not callable in the current state (startup vs runtime).
    pub const INVALID_STATE: i32 = -1;
}

/// An error object of a JSON-RPC response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RpcError {
    /// JSON-RPC code or negative errno.
    pub code: i32,
    /// Human-readable message.
    pub message: String,
}

impl RpcError {
    /// An error with an explicit code and message.
    pub fn new(code: i32, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// `-32700 Parse error`.
    pub fn parse_error() -> RpcError {
        RpcError::new(code::PARSE_ERROR, "Parse error")
    }

    /// `-32600 Invalid request`, SPDK's text.
    pub fn invalid_request() -> RpcError {
        RpcError::new(code::INVALID_REQUEST, "Invalid request")
    }

    /// `-32601 Method not found`.
    pub fn method_not_found() -> RpcError {
        RpcError::new(code::METHOD_NOT_FOUND, "Method not found")
    }

    /// `-32602`, SPDK's text for parameters given to a method that takes none.
    pub fn no_params(method: &str) -> RpcError {
        RpcError::new(
            code::INVALID_PARAMS,
            format!("{method} method requires no parameters"),
        )
    }

    /// `-32603` for bad or unknown parameters: SPDK's text, then what was wrong.
    pub fn decode(detail: impl fmt::Display) -> RpcError {
        RpcError::new(
            code::INTERNAL_ERROR,
            format!("spdk_json_decode_object failed: {detail}"),
        )
    }

    /// A failed operation: negative errno with its strerror text (SPDK's form).
    pub fn errno(errno: i32) -> RpcError {
        let e = errno.abs();
        RpcError::new(-e, strerror(e))
    }

    /// A failed operation: negative errno, strerror text, then a detail naming the object.
    pub fn errno_detail(errno: i32, detail: impl fmt::Display) -> RpcError {
        let e = errno.abs();
        RpcError::new(-e, format!("{}: {detail}", strerror(e)))
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// The C library's message for an errno value (without Rust's " (os error N)" suffix).
pub fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno.abs()).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strerror_matches_spdk_text() {
        assert_eq!(strerror(libc::ENODEV), "No such device");
        assert_eq!(strerror(-libc::EEXIST), "File exists");
        assert_eq!(RpcError::errno(-19).message, "No such device");
        assert_eq!(RpcError::errno(-19).code, -19);
    }
}
