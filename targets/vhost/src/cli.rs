//! rpc.py's `vhost_*` subcommands for vhost-user-blk controllers, for `pmio-rpc` (feature
//! `cli`): the same positional arguments, flags and requests (rpc.py always sends `readonly`
//! and `packed_ring`), the same output (nothing for create and delete, indent-2 JSON for the
//! query). rpc.py's flags are the declarations' keys, so clap's derive is on the declarations
//! ([`crate::rpc`]) themselves.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

use crate::rpc::{CreateBlkController, DeleteController, GetControllers};

/// The vhost target's subcommands.
#[derive(Subcommand, Debug)]
pub enum VhostCommand {
    /// Add a new vhost block controller.
    #[command(name = "vhost_create_blk_controller")]
    VhostCreateBlkController(CreateBlkController),
    /// List vhost controllers.
    #[command(name = "vhost_get_controllers")]
    VhostGetControllers(GetControllers),
    /// Delete a vhost controller.
    #[command(name = "vhost_delete_controller")]
    VhostDeleteController(DeleteController),
}

impl VhostCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        match self {
            VhostCommand::VhostCreateBlkController(p) => {
                Request::new("vhost_create_blk_controller", p, Print::Nothing)
            }
            VhostCommand::VhostGetControllers(p) => {
                Request::new_or_bare("vhost_get_controllers", p, Print::Dict)
            }
            VhostCommand::VhostDeleteController(p) => {
                Request::new("vhost_delete_controller", p, Print::Nothing)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::VhostCommand;

    /// pmio-rpc's command line, with only the vhost subcommands.
    #[derive(Parser)]
    struct Args {
        #[command(subcommand)]
        method: VhostCommand,
    }

    fn params(argv: &[&str]) -> (String, String) {
        let mut full = vec!["pmio-rpc"];
        full.extend_from_slice(argv);
        let a = Args::try_parse_from(full).unwrap();
        let (m, p, _) = a.method.request().into_parts();
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
