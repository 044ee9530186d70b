//! rpc.py's `sock_*` subcommands: the same flags and requests (a `--enable-X`/`--disable-X`
//! pair sends `X` only when one of them is given), the same output.

use clap::Subcommand;
use pmio_nvmf::rpc::sock::{SockImpl, SockImplSetOptions};
use serde_json::Value;

use crate::Print;
use crate::nvmf::encode;

/// The socket layer's methods.
#[derive(Subcommand, Debug)]
pub enum SockMethod {
    /// Get options of socket layer implementation.
    #[command(name = "sock_impl_get_options", rename_all = "kebab-case")]
    ImplGetOptions {
        /// Socket implementation name, e.g. posix.
        #[arg(short = 'i', long = "impl")]
        impl_name: String,
    },
    /// Set options of socket layer implementation.
    #[command(name = "sock_impl_set_options", rename_all = "kebab-case")]
    ImplSetOptions {
        /// Socket implementation name, e.g. posix.
        #[arg(short = 'i', long = "impl")]
        impl_name: String,
        /// Size of receive buffer on socket in bytes.
        #[arg(short = 'r', long)]
        recv_buf_size: Option<u64>,
        /// Size of send buffer on socket in bytes.
        #[arg(short = 's', long)]
        send_buf_size: Option<u64>,
        /// Option for placement-id. 0:disable,1:incoming_napi,2:incoming_cpu.
        #[arg(short = 'p', long)]
        enable_placement_id: Option<u64>,
        /// Enable receive pipe.
        #[arg(long, overrides_with = "disable_recv_pipe")]
        enable_recv_pipe: bool,
        /// Disable receive pipe.
        #[arg(long, overrides_with = "enable_recv_pipe")]
        disable_recv_pipe: bool,
        /// Enable quick ACK.
        #[arg(long, overrides_with = "disable_quickack")]
        enable_quickack: bool,
        /// Disable quick ACK.
        #[arg(long, overrides_with = "enable_quickack")]
        disable_quickack: bool,
        /// Enable zerocopy on send for server sockets.
        #[arg(long, overrides_with = "disable_zerocopy_send_server")]
        enable_zerocopy_send_server: bool,
        /// Disable zerocopy on send for server sockets.
        #[arg(long, overrides_with = "enable_zerocopy_send_server")]
        disable_zerocopy_send_server: bool,
        /// Enable zerocopy on send for client sockets.
        #[arg(long, overrides_with = "disable_zerocopy_send_client")]
        enable_zerocopy_send_client: bool,
        /// Disable zerocopy on send for client sockets.
        #[arg(long, overrides_with = "enable_zerocopy_send_client")]
        disable_zerocopy_send_client: bool,
        /// Set zerocopy_threshold in bytes.
        #[arg(long)]
        zerocopy_threshold: Option<u64>,
        /// TLS protocol version.
        #[arg(long)]
        tls_version: Option<u64>,
        /// Enable Kernel TLS.
        #[arg(long, overrides_with = "disable_ktls")]
        enable_ktls: bool,
        /// Disable Kernel TLS.
        #[arg(long, overrides_with = "enable_ktls")]
        disable_ktls: bool,
    },
    /// Set the default sock implementation.
    #[command(name = "sock_set_default_impl", rename_all = "kebab-case")]
    SetDefaultImpl {
        /// Socket implementation name, e.g. posix.
        #[arg(short = 'i', long = "impl")]
        impl_name: String,
    },
    /// Get the default sock implementation name.
    #[command(name = "sock_get_default_impl")]
    GetDefaultImpl,
}

/// An `--enable-X`/`--disable-X` pair: `X` only when one was given (the later wins, as in
/// rpc.py: clap's `overrides_with` keeps only the later of the two set).
fn pair(enable: bool, disable: bool) -> Option<bool> {
    match (enable, disable) {
        (true, _) => Some(true),
        (false, true) => Some(false),
        (false, false) => None,
    }
}

/// Method name, params and output style of a sock subcommand.
pub fn request(m: &SockMethod) -> (&'static str, Option<Value>, Print) {
    match m {
        SockMethod::ImplGetOptions { impl_name } => (
            "sock_impl_get_options",
            encode(&SockImpl {
                impl_name: impl_name.clone(),
            }),
            Print::Json,
        ),
        SockMethod::ImplSetOptions {
            impl_name,
            recv_buf_size,
            send_buf_size,
            enable_placement_id,
            enable_recv_pipe,
            disable_recv_pipe,
            enable_quickack,
            disable_quickack,
            enable_zerocopy_send_server,
            disable_zerocopy_send_server,
            enable_zerocopy_send_client,
            disable_zerocopy_send_client,
            zerocopy_threshold,
            tls_version,
            enable_ktls,
            disable_ktls,
        } => (
            "sock_impl_set_options",
            encode(&SockImplSetOptions {
                impl_name: impl_name.clone(),
                recv_buf_size: *recv_buf_size,
                send_buf_size: *send_buf_size,
                enable_recv_pipe: pair(*enable_recv_pipe, *disable_recv_pipe),
                enable_quickack: pair(*enable_quickack, *disable_quickack),
                enable_placement_id: *enable_placement_id,
                enable_zerocopy_send_server: pair(
                    *enable_zerocopy_send_server,
                    *disable_zerocopy_send_server,
                ),
                enable_zerocopy_send_client: pair(
                    *enable_zerocopy_send_client,
                    *disable_zerocopy_send_client,
                ),
                zerocopy_threshold: *zerocopy_threshold,
                tls_version: *tls_version,
                enable_ktls: pair(*enable_ktls, *disable_ktls),
                ..SockImplSetOptions::default()
            }),
            Print::Nothing,
        ),
        SockMethod::SetDefaultImpl { impl_name } => (
            "sock_set_default_impl",
            encode(&SockImpl {
                impl_name: impl_name.clone(),
            }),
            Print::Json,
        ),
        SockMethod::GetDefaultImpl => ("sock_get_default_impl", None, Print::Json),
    }
}
