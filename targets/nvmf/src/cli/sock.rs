//! rpc.py's `sock_*` subcommands: the same flags and requests (a `--enable-X`/`--disable-X`
//! pair sends `X` only when one of them is given), the same output.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

use crate::rpc::sock::{SockImpl, SockImplSetOptions};

/// The socket layer's subcommands.
#[derive(Subcommand, Debug)]
pub enum SockCommand {
    /// Get options of socket layer implementation.
    #[command(name = "sock_impl_get_options")]
    SockImplGetOptions(SockImpl),
    /// Set options of socket layer implementation.
    #[command(name = "sock_impl_set_options", rename_all = "kebab-case")]
    SockImplSetOptions {
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
    #[command(name = "sock_set_default_impl")]
    SockSetDefaultImpl(SockImpl),
    /// Get the default sock implementation name.
    #[command(name = "sock_get_default_impl")]
    SockGetDefaultImpl,
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

impl SockCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        match self {
            SockCommand::SockImplGetOptions(p) => {
                Request::new("sock_impl_get_options", p, Print::Json)
            }
            SockCommand::SockImplSetOptions {
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
            } => {
                let p = SockImplSetOptions {
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
                };
                Request::new("sock_impl_set_options", &p, Print::Nothing)
            }
            SockCommand::SockSetDefaultImpl(p) => {
                Request::new("sock_set_default_impl", p, Print::Json)
            }
            SockCommand::SockGetDefaultImpl => Request::bare("sock_get_default_impl", Print::Json),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::SockCommand;

    /// pmio-rpc's command line, with only the sock subcommands.
    #[derive(Parser)]
    struct Args {
        #[command(subcommand)]
        method: SockCommand,
    }

    fn params(argv: &[&str]) -> serde_json::Value {
        let mut full = vec!["pmio-rpc"];
        full.extend_from_slice(argv);
        Args::try_parse_from(full)
            .unwrap()
            .method
            .request()
            .params
            .unwrap()
    }

    #[test]
    fn sock_flag_pairs_send_the_later_one_or_nothing() {
        let p = params(&[
            "sock_impl_set_options",
            "-i",
            "posix",
            "-r",
            "4096",
            "--enable-quickack",
            "--disable-quickack",
            "--disable-zerocopy-send-server",
            "--enable-zerocopy-send-server",
        ]);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            r#"{"impl_name":"posix","recv_buf_size":4096,"enable_quickack":false,"enable_zerocopy_send_server":true}"#
        );
        let p = params(&["sock_impl_get_options", "-i", "posix"]);
        assert_eq!(p, serde_json::json!({"impl_name": "posix"}));
    }
}
