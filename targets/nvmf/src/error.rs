//! Errors of the target's configuration and set-up (RPC-facing). Protocol errors of one
//! connection are answered on that connection and never surface here.

/// What an nvmf RPC or set-up step can fail with. Each maps to SPDK's JSON-RPC reply in
/// pmio-tgt.
#[derive(Debug, thiserror::Error)]
pub enum NvmfError {
    /// A parameter is malformed or out of range.
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    /// The object (subsystem, namespace, host, listener, bdev) does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The object already exists.
    #[error("{0} already exists")]
    Exists(String),
    /// `nvmf_create_transport` was not called (or not for TCP).
    #[error("no TCP transport: call nvmf_create_transport -t TCP first")]
    NoTransport,
    /// Binding or configuring a listening socket failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A reactor could not be reached (the daemon is stopping).
    #[error("reactors: {0}")]
    Reactor(String),
}
