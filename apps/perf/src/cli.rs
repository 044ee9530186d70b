//! Command line: flags as t/io_uring and spdk_nvme_perf users know them, validated once.

use clap::{Parser, ValueEnum};
use serde::Serialize;

/// The I/O pattern (`-w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Randread,
    Randwrite,
    Read,
    Write,
    Randrw,
}

impl Rw {
    /// The flag value (`randread`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Rw::Randread => "randread",
            Rw::Randwrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::Randrw => "randrw",
        }
    }

    /// Whether offsets are random.
    pub fn random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }

    /// Share of reads in percent, given `-M`.
    pub fn read_pct(self, rwmixread: u8) -> u8 {
        match self {
            Rw::Randread | Rw::Read => 100,
            Rw::Randwrite | Rw::Write => 0,
            Rw::Randrw => rwmixread,
        }
    }
}

/// pmio-perf: drive block devices from pinned reactors at a queue depth and report IOPS,
/// bandwidth and latency.
#[derive(Parser, Debug, Clone, Serialize)]
#[command(
    name = "pmio-perf",
    version,
    about,
    after_help = crate::spec::drivers_help()
)]
pub struct Opts {
    /// Queue depth per (core, device).
    #[arg(short = 'd', long = "depth", default_value_t = 128)]
    pub depth: u32,
    /// Most I/Os submitted per call (one plug, one doorbell).
    #[arg(short = 's', long = "submit-batch", default_value_t = 32)]
    pub submit_batch: u32,
    /// Most completions reaped per call.
    #[arg(short = 'c', long = "complete-batch", default_value_t = 32)]
    pub complete_batch: u32,
    /// I/O size in bytes (4096, 4k, 128k...).
    #[arg(short = 'b', long = "bs", default_value = "4096", value_parser = parse_size_arg)]
    pub bs: u64,
    /// I/O pattern.
    #[arg(short = 'w', long = "rw", value_enum, default_value_t = Rw::Randread)]
    pub rw: Rw,
    /// Percentage of reads with -w randrw.
    #[arg(short = 'M', long = "rwmixread", default_value_t = 50,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub rwmixread: u8,
    /// Run time in seconds (after warm-up).
    #[arg(short = 't', long = "time", default_value_t = 10.0, value_parser = parse_secs)]
    pub time: f64,
    /// Cores: a mask (0x3), a list ([0,1]) or ranges (0-3,6). Default: the last core.
    #[arg(short = 'm', long = "cores")]
    pub cores: Option<String>,
    /// Device spec; repeat for several devices.
    #[arg(long = "dev", value_name = "SPEC")]
    pub dev: Vec<String>,
    /// Seconds of warm-up before measuring.
    #[arg(long, default_value_t = 0.0, value_parser = parse_secs_or_zero)]
    pub warmup: f64,
    /// Print one JSON object at the end instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Write a self-describing pattern and check every read (first fills each core's region
    /// when the workload reads).
    #[arg(long)]
    pub verify: bool,
    /// Every core drives every device (spdk_nvme_perf --use-every-core).
    #[arg(long = "use-every-core")]
    pub use_every_core: bool,
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    crate::spec::parse_size(s)
}

fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e7 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

fn parse_secs_or_zero(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1e7).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds >= 0")),
    }
}

impl Opts {
    /// Checks the flags that do not depend on the devices. One-line messages.
    pub fn validate(&self) -> Result<(), String> {
        if self.depth == 0 || self.depth > 65535 {
            return Err(format!("--depth {}: must be 1..=65535", self.depth));
        }
        if self.submit_batch == 0 || self.submit_batch > self.depth {
            return Err(format!(
                "--submit-batch {}: must be 1..=depth ({})",
                self.submit_batch, self.depth
            ));
        }
        if self.complete_batch == 0 || self.complete_batch > self.depth {
            return Err(format!(
                "--complete-batch {}: must be 1..=depth ({})",
                self.complete_batch, self.depth
            ));
        }
        if self.bs == 0 || self.bs > 16 << 20 {
            return Err(format!("--bs {}: must be 1 byte .. 16 MiB", self.bs));
        }
        Ok(())
    }
}
