//! rpc.py's `vhost_*` subcommands for vhost-user-blk controllers: the same positional
//! arguments, flags and requests (rpc.py always sends `readonly` and `packed_ring`), the same
//! output (nothing for create and delete, indent-2 JSON for the query).

use clap::Subcommand;
use pmio_vhost::rpc::{CreateBlkController, DeleteController, GetControllers};
use serde_json::Value;

use crate::Print;
use crate::nvmf::encode;

/// The vhost target's methods.
#[derive(Subcommand, Debug)]
pub enum VhostMethod {
    /// Add a new vhost block controller.
    #[command(name = "vhost_create_blk_controller", rename_all = "kebab-case")]
    CreateBlkController {
        /// Controller name (the socket's name in the target's socket directory).
        ctrlr: String,
        /// Bdev name.
        dev_name: String,
        /// CPU mask for this controller.
        #[arg(long)]
        cpumask: Option<String>,
        /// Virtio blk transport name (default: vhost_user_blk).
        #[arg(long)]
        transport: Option<String>,
        /// Set controller as read-only.
        #[arg(short = 'r', long)]
        readonly: bool,
        /// Set controller as packed ring supported (pmio: refused).
        #[arg(short = 'p', long = "packed_ring")]
        packed_ring: bool,
    },
    /// List vhost controllers.
    #[command(name = "vhost_get_controllers", rename_all = "kebab-case")]
    GetControllers {
        /// Name of controller.
        #[arg(short = 'n', long)]
        name: Option<String>,
    },
    /// Delete a vhost controller.
    #[command(name = "vhost_delete_controller", rename_all = "kebab-case")]
    DeleteController {
        /// Controller name.
        ctrlr: String,
    },
}

/// Method name, params and output style of a vhost subcommand.
pub fn request(m: &VhostMethod) -> (&'static str, Option<Value>, Print) {
    match m {
        VhostMethod::CreateBlkController {
            ctrlr,
            dev_name,
            cpumask,
            transport,
            readonly,
            packed_ring,
        } => (
            "vhost_create_blk_controller",
            encode(&CreateBlkController {
                ctrlr: ctrlr.clone(),
                dev_name: dev_name.clone(),
                cpumask: cpumask.clone(),
                transport: transport.clone(),
                readonly: *readonly,
                packed_ring: *packed_ring,
            }),
            Print::Nothing,
        ),
        VhostMethod::GetControllers { name } => (
            "vhost_get_controllers",
            encode(&GetControllers { name: name.clone() }),
            Print::Dict,
        ),
        VhostMethod::DeleteController { ctrlr } => (
            "vhost_delete_controller",
            encode(&DeleteController {
                ctrlr: ctrlr.clone(),
            }),
            Print::Nothing,
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::{Args, Method, request};

    fn params(argv: &[&str]) -> (String, String) {
        let mut full = vec!["pmio-rpc"];
        full.extend_from_slice(argv);
        let a = Args::try_parse_from(full).unwrap();
        assert!(matches!(a.method, Method::Vhost(_)));
        let (m, p, _) = request(&a.method).unwrap();
        (m.to_string(), serde_json::to_string(&p).unwrap())
    }

    #[test]
    fn requests_match_rpc_py() {
        assert_eq!(
            params(&["vhost_create_blk_controller", "vhost.0", "Malloc0"]).1,
            r#"{"ctrlr":"vhost.0","dev_name":"Malloc0","readonly":false,"packed_ring":false}"#
        );
        assert_eq!(
            params(&[
                "vhost_create_blk_controller",
                "--cpumask",
                "0x2",
                "-r",
                "vhost.1",
                "Malloc1"
            ])
            .1,
            r#"{"ctrlr":"vhost.1","dev_name":"Malloc1","cpumask":"0x2","readonly":true,"packed_ring":false}"#
        );
        assert_eq!(params(&["vhost_get_controllers"]).1, "null");
        assert_eq!(
            params(&["vhost_get_controllers", "-n", "vhost.0"]).1,
            r#"{"name":"vhost.0"}"#
        );
        assert_eq!(
            params(&["vhost_delete_controller", "vhost.0"]),
            (
                "vhost_delete_controller".to_string(),
                r#"{"ctrlr":"vhost.0"}"#.to_string()
            )
        );
    }
}
