//! `pmio-rpc`'s subcommands for the bdev layer's and the job engine's methods (feature `cli`),
//! parsed into the methods' own declarations (clap's derive on the same structs).

use clap::Subcommand;
use pmio_jsonrpc::cli::{Print, Request, TextFormat};
use pmio_jsonrpc::decl::BoolDefault;

use super::bdev::{Examine, GetBdevs, GetIostat};
use super::histogram::{EnableHistogram, GetHistogram};
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
    /// Enable or disable a bdev's latency histogram.
    #[command(name = "bdev_enable_histogram", rename_all = "kebab-case")]
    BdevEnableHistogram {
        /// Enable the histogram (the default).
        #[arg(short = 'e', long, overrides_with = "disable")]
        enable: bool,
        /// Disable the histogram.
        #[arg(short = 'd', long)]
        disable: bool,
        /// Count only this I/O type (read, write, unmap, flush, write_zeroes, ...).
        #[arg(short = 'o', long)]
        opc: Option<String>,
        /// log2 of the buckets per range (default 7).
        #[arg(long)]
        granularity: Option<u8>,
        /// Histogram min value in nanoseconds.
        #[arg(long)]
        min_nsec: Option<u64>,
        /// Histogram max value in nanoseconds.
        #[arg(long)]
        max_nsec: Option<u64>,
        /// Bdev name.
        name: String,
    },
    /// A bdev's latency histogram: SPDK's JSON (for scripts/histogram.py), or with --table a
    /// table of percentiles and a bar chart.
    #[command(name = "bdev_get_histogram")]
    BdevGetHistogram {
        /// Print percentiles and a bar chart instead of the JSON (pmio).
        #[arg(long)]
        table: bool,
        /// Bdev name.
        name: String,
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
            BdevCommand::BdevEnableHistogram {
                disable,
                opc,
                granularity,
                min_nsec,
                max_nsec,
                name,
                ..
            } => {
                // rpc.py sends optional numbers only when non-zero.
                let nz = |v: Option<u64>| v.filter(|&n| n != 0);
                let p = EnableHistogram {
                    name: name.clone(),
                    enable: !disable,
                    opc: opc.clone(),
                    granularity: granularity.filter(|&g| g != 0),
                    min_nsec: nz(*min_nsec),
                    max_nsec: nz(*max_nsec),
                };
                Request::new("bdev_enable_histogram", &p, Print::Nothing)
            }
            BdevCommand::BdevGetHistogram { table, name } => {
                let print = if *table {
                    Print::Text(TextFormat(super::histogram::table))
                } else {
                    Print::Dict
                };
                Request::new(
                    "bdev_get_histogram",
                    &GetHistogram { name: name.clone() },
                    print,
                )
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
