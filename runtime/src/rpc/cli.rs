//! `pmio-rpc`'s subcommands for the bdev layer's and the job engine's methods (feature `cli`),
//! parsed into the methods' own declarations (clap's derive on the same structs).

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request};
use pmio_jsonrpc::decl::BoolDefault;

use super::bdev::{Examine, GetBdevs, GetIostat};
use super::perform_tests::PerformTests;
use super::scheduler::{GetScheduler, SetScheduler};

/// The bdev layer's subcommands.
#[derive(Subcommand, Debug)]
pub enum BdevCommand {
    /// List bdevs, or one.
    #[command(name = "bdev_get_bdevs")]
    BdevGetBdevs(GetBdevs),
    /// I/O statistics of bdevs.
    #[command(name = "bdev_get_iostat", rename_all = "kebab-case")]
    BdevGetIostat {
        /// Bdev name.
        #[arg(short = 'b', long)]
        name: Option<String>,
        /// Per-channel statistics (pmio: not supported).
        #[arg(short = 'c', long)]
        per_channel: bool,
    },
    /// Select a bdev's I/O scheduler and its tunables (pmio; Linux's iosched names, ms).
    #[command(name = "bdev_set_scheduler")]
    BdevSetScheduler(SetScheduler),
    /// Scheduler, tunables and per-priority counters of bdevs (pmio).
    #[command(name = "bdev_get_scheduler")]
    BdevGetScheduler(GetScheduler),
    /// Have every module look at a bdev again (lvstores on it are found).
    #[command(name = "bdev_examine")]
    BdevExamine(Examine),
    /// Run a bdevperf-style workload inside the daemon (pmio).
    #[command(name = "perform_tests")]
    PerformTests(PerformTests),
}

impl BdevCommand {
    /// The call this subcommand makes.
    pub fn request(&self) -> Result<Request, String> {
        Ok(match self {
            BdevCommand::BdevGetBdevs(p) => Request::new("bdev_get_bdevs", p, Print::Dict),
            BdevCommand::BdevGetIostat { name, per_channel } => {
                let p = GetIostat {
                    name: name.clone(),
                    per_channel: BoolDefault(*per_channel),
                    ..GetIostat::default()
                };
                Request::new("bdev_get_iostat", &p, Print::Dict)
            }
            BdevCommand::BdevSetScheduler(p) => {
                Request::new("bdev_set_scheduler", p, Print::Nothing)
            }
            BdevCommand::BdevGetScheduler(p) => Request::new("bdev_get_scheduler", p, Print::Dict),
            BdevCommand::BdevExamine(p) => Request::new("bdev_examine", p, Print::Nothing),
            BdevCommand::PerformTests(p) => Request::new("perform_tests", p, Print::Dict),
        })
    }
}
