//! rpc.py's `ublk_*` subcommands, for `pmio-rpc` (feature `cli`): the same positional
//! arguments, flags and requests, the same output (the disk id for start and recover, nothing
//! for create, destroy and stop, indent-2 JSON for the query). rpc.py's flags are the
//! declarations' keys, so clap's derive is on the declarations ([`crate::rpc`]) themselves.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

use crate::rpc::{CreateTarget, GetDisks, RecoverDisk, StartDisk, StopDisk};

/// The ublk target's subcommands.
#[derive(Subcommand, Debug)]
pub enum UblkCommand {
    /// Create spdk ublk target for ublk dev.
    #[command(name = "ublk_create_target")]
    UblkCreateTarget(CreateTarget),
    /// Destroy spdk ublk target for ublk dev.
    #[command(name = "ublk_destroy_target")]
    UblkDestroyTarget,
    /// Export a bdev as a ublk device.
    #[command(name = "ublk_start_disk")]
    UblkStartDisk(StartDisk),
    /// Stop a ublk device.
    #[command(name = "ublk_stop_disk")]
    UblkStopDisk(StopDisk),
    /// Recover ublk device.
    #[command(name = "ublk_recover_disk")]
    UblkRecoverDisk(RecoverDisk),
    /// Display full or specified ublk device list.
    #[command(name = "ublk_get_disks")]
    UblkGetDisks(GetDisks),
}

impl UblkCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Request {
        match self {
            UblkCommand::UblkCreateTarget(p) => {
                Request::new_or_bare("ublk_create_target", p, Print::Nothing)
            }
            UblkCommand::UblkDestroyTarget => Request::bare("ublk_destroy_target", Print::Nothing),
            UblkCommand::UblkStartDisk(p) => Request::new("ublk_start_disk", p, Print::Json),
            UblkCommand::UblkStopDisk(p) => Request::new("ublk_stop_disk", p, Print::Nothing),
            UblkCommand::UblkRecoverDisk(p) => Request::new("ublk_recover_disk", p, Print::Json),
            UblkCommand::UblkGetDisks(p) => Request::new_or_bare("ublk_get_disks", p, Print::Dict),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::UblkCommand;

    /// pmio-rpc's command line, with only the ublk subcommands.
    #[derive(Parser)]
    struct Args {
        #[command(subcommand)]
        method: UblkCommand,
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
        assert_eq!(params(&["ublk_create_target"]).1, "null");
        assert_eq!(
            params(&["ublk_create_target", "-m", "0x3"]).1,
            r#"{"cpumask":"0x3"}"#
        );
        assert_eq!(params(&["ublk_destroy_target"]).1, "null");
        assert_eq!(
            params(&["ublk_start_disk", "Malloc0", "0", "-q", "2", "-d", "64"]).1,
            r#"{"bdev_name":"Malloc0","ublk_id":0,"num_queues":2,"queue_depth":64}"#
        );
        assert_eq!(
            params(&["ublk_start_disk", "Malloc0", "1"]).1,
            r#"{"bdev_name":"Malloc0","ublk_id":1}"#
        );
        assert_eq!(
            params(&["ublk_start_disk", "Malloc0", "1", "--user-copy", "true"]).1,
            r#"{"bdev_name":"Malloc0","ublk_id":1,"user_copy":true}"#
        );
        assert_eq!(
            params(&["ublk_create_target", "--disable-user-copy"]).1,
            r#"{"disable_user_copy":true}"#
        );
        assert_eq!(
            params(&["ublk_stop_disk", "1"]),
            ("ublk_stop_disk".into(), r#"{"ublk_id":1}"#.into())
        );
        assert_eq!(
            params(&["ublk_recover_disk", "Malloc0", "1"]).1,
            r#"{"bdev_name":"Malloc0","ublk_id":1}"#
        );
        assert_eq!(params(&["ublk_get_disks"]).1, "null");
        assert_eq!(params(&["ublk_get_disks", "-n", "2"]).1, r#"{"ublk_id":2}"#);
    }
}
