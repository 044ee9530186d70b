//! rpc.py's `bdev_raid_*` subcommands for `pmio-rpc` (feature `cli`), turned into the
//! methods' declarations.

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};

use crate::rpc::{
    BaseBdevs, RaidAddBaseBdev, RaidCreate, RaidDelete, RaidGetBdevs, RaidRemoveBaseBdev,
    RaidSetOptions,
};

/// The raid module's subcommands.
#[derive(Subcommand, Debug)]
pub enum RaidCommand {
    /// Create a new raid bdev.
    #[command(name = "bdev_raid_create", rename_all = "kebab-case")]
    BdevRaidCreate {
        /// Raid bdev name.
        #[arg(short = 'n', long)]
        name: String,
        /// Strip size in KiB.
        #[arg(short = 'z', long)]
        strip_size_kb: Option<u32>,
        /// Raid level: raid0 (0), raid1 (1) or concat.
        #[arg(short = 'r', long, value_parser = ["raid0", "0", "raid1", "1", "raid5f", "5f", "concat"])]
        raid_level: String,
        /// Base bdev names, whitespace separated, in quotes.
        #[arg(short = 'b', long)]
        base_bdevs: String,
        /// UUID of the raid bdev.
        #[arg(long)]
        uuid: Option<String>,
        /// Keep the array's configuration in a superblock on each base bdev.
        #[arg(short = 's', long)]
        superblock: bool,
    },
    /// Delete an existing raid bdev.
    #[command(name = "bdev_raid_delete")]
    BdevRaidDelete {
        /// Raid bdev name.
        name: String,
        /// Clear the superblock from all base bdevs.
        #[arg(short = 'c', long = "clear-sb")]
        clear_sb: bool,
    },
    /// Add base bdev to existing raid bdev.
    #[command(name = "bdev_raid_add_base_bdev")]
    BdevRaidAddBaseBdev {
        /// Raid bdev name.
        raid_bdev: String,
        /// Base bdev name.
        base_bdev: String,
    },
    /// Remove base bdev from existing raid bdev.
    #[command(name = "bdev_raid_remove_base_bdev")]
    BdevRaidRemoveBaseBdev {
        /// Base bdev name.
        name: String,
    },
    /// Set options for bdev raid.
    #[command(name = "bdev_raid_set_options", rename_all = "kebab-case")]
    BdevRaidSetOptions {
        /// Background process (e.g. rebuild) window size in KiB.
        #[arg(short = 'w', long)]
        process_window_size_kb: Option<u32>,
        /// Background process (e.g. rebuild) maximum bandwidth in MiB/Sec.
        #[arg(short = 'b', long)]
        process_max_bandwidth_mb_sec: Option<u32>,
    },
    /// List raid bdevs of a category.
    #[command(name = "bdev_raid_get_bdevs")]
    BdevRaidGetBdevs {
        /// all, online, configuring or offline.
        #[arg(value_parser = ["all", "online", "configuring", "offline"])]
        category: String,
    },
}

impl RaidCommand {
    /// The call this subcommand makes, with rpc.py's keys (`superblock` always sent).
    pub fn request(&self) -> Request {
        match self {
            RaidCommand::BdevRaidCreate {
                name,
                strip_size_kb,
                raid_level,
                base_bdevs,
                uuid,
                superblock,
            } => Request::new(
                "bdev_raid_create",
                &RaidCreate {
                    name: name.clone(),
                    raid_level: raid_level.clone(),
                    base_bdevs: BaseBdevs::List(
                        base_bdevs.split_whitespace().map(str::to_string).collect(),
                    ),
                    strip_size_kb: *strip_size_kb,
                    uuid: uuid.clone(),
                    superblock: Some(*superblock),
                },
                Print::Nothing,
            ),
            RaidCommand::BdevRaidDelete { name, clear_sb } => Request::new(
                "bdev_raid_delete",
                &RaidDelete {
                    name: name.clone(),
                    clear_sb: clear_sb.then_some(true),
                },
                Print::Nothing,
            ),
            RaidCommand::BdevRaidAddBaseBdev {
                raid_bdev,
                base_bdev,
            } => Request::new(
                "bdev_raid_add_base_bdev",
                &RaidAddBaseBdev {
                    raid_bdev: raid_bdev.clone(),
                    base_bdev: base_bdev.clone(),
                },
                Print::Nothing,
            ),
            RaidCommand::BdevRaidRemoveBaseBdev { name } => Request::new(
                "bdev_raid_remove_base_bdev",
                &RaidRemoveBaseBdev { name: name.clone() },
                Print::Nothing,
            ),
            RaidCommand::BdevRaidSetOptions {
                process_window_size_kb,
                process_max_bandwidth_mb_sec,
            } => Request::new(
                "bdev_raid_set_options",
                &RaidSetOptions {
                    process_window_size_kb: *process_window_size_kb,
                    process_max_bandwidth_mb_sec: *process_max_bandwidth_mb_sec,
                },
                Print::Nothing,
            ),
            RaidCommand::BdevRaidGetBdevs { category } => Request::new(
                "bdev_raid_get_bdevs",
                &RaidGetBdevs {
                    category: category.clone(),
                },
                Print::Json,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: RaidCommand,
    }

    fn sent(args: &[&str]) -> String {
        let cli =
            Cli::try_parse_from(std::iter::once("pmio-rpc").chain(args.iter().copied())).unwrap();
        let (method, params, _) = cli.cmd.request().into_parts();
        format!(
            "{method} {}",
            params.map(|p| p.to_string()).unwrap_or_default()
        )
    }

    #[test]
    fn sends_what_rpc_py_sends() {
        assert_eq!(
            sent(&[
                "bdev_raid_create",
                "-n",
                "Raid0",
                "-z",
                "64",
                "-r",
                "0",
                "-b",
                "Malloc0 Malloc1"
            ]),
            r#"bdev_raid_create {"name":"Raid0","raid_level":"0","base_bdevs":["Malloc0","Malloc1"],"strip_size_kb":64,"superblock":false}"#
        );
        assert_eq!(
            sent(&["bdev_raid_get_bdevs", "online"]),
            r#"bdev_raid_get_bdevs {"category":"online"}"#
        );
        assert_eq!(
            sent(&["bdev_raid_delete", "Raid0"]),
            r#"bdev_raid_delete {"name":"Raid0"}"#
        );
        assert_eq!(
            sent(&["bdev_raid_delete", "-c", "Raid0"]),
            r#"bdev_raid_delete {"name":"Raid0","clear_sb":true}"#
        );
        assert_eq!(
            sent(&["bdev_raid_add_base_bdev", "Raid1", "Nvme1n1"]),
            r#"bdev_raid_add_base_bdev {"raid_bdev":"Raid1","base_bdev":"Nvme1n1"}"#
        );
        assert_eq!(
            sent(&["bdev_raid_remove_base_bdev", "Nvme1n1"]),
            r#"bdev_raid_remove_base_bdev {"name":"Nvme1n1"}"#
        );
        assert_eq!(
            sent(&["bdev_raid_set_options", "-w", "256", "-b", "100"]),
            r#"bdev_raid_set_options {"process_window_size_kb":256,"process_max_bandwidth_mb_sec":100}"#
        );
    }
}
