//! rpc.py's keyring subcommands for `pmio-rpc` (feature `cli`), built from the methods'
//! declarations.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

use crate::rpc::{FileAddKey, FileRemoveKey};

/// The keyring's subcommands.
#[derive(Subcommand, Debug)]
pub enum KeyringCommand {
    /// Add a key from a file (owner-only permissions).
    #[command(name = "keyring_file_add_key")]
    KeyringFileAddKey(FileAddKey),
    /// Remove a key added from a file.
    #[command(name = "keyring_file_remove_key")]
    KeyringFileRemoveKey(FileRemoveKey),
    /// List the keys (never their secrets).
    #[command(name = "keyring_get_keys")]
    KeyringGetKeys,
}

impl KeyringCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        match self {
            KeyringCommand::KeyringFileAddKey(p) => {
                Request::new("keyring_file_add_key", p, Print::Nothing)
            }
            KeyringCommand::KeyringFileRemoveKey(p) => {
                Request::new("keyring_file_remove_key", p, Print::Nothing)
            }
            KeyringCommand::KeyringGetKeys => Request::bare("keyring_get_keys", Print::Dict),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: KeyringCommand,
    }

    #[test]
    fn rpc_py_arguments() {
        let c = Cli::parse_from(["x", "keyring_file_add_key", "key0", "/tmp/k"]);
        let r = c.cmd.request();
        assert_eq!(r.method, "keyring_file_add_key");
        assert_eq!(r.params, Some(json!({"name": "key0", "path": "/tmp/k"})));
        let c = Cli::parse_from(["x", "keyring_get_keys"]);
        assert_eq!(c.cmd.request().params, None);
    }
}
