//! Command line: flags as t/io_uring and spdk_nvme_perf users know them, validated once.

use clap::{Parser, ValueEnum};
use pmio::PrioClass;
use pmio::sched::{SchedKind, TUNABLES};
use pmio_runtime::job::PrioMix;
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
    /// Cores: a mask (0x3), a list (`[0,1]`) or ranges (0-3,6). Default: the last core.
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
    /// when the workload reads). The depth is lowered, with a note on stderr, where a core's
    /// region holds no more I/O units than --depth.
    #[arg(long)]
    pub verify: bool,
    /// Every core drives every device (spdk_nvme_perf --use-every-core).
    #[arg(long = "use-every-core")]
    pub use_every_core: bool,
    /// Driver queue depth per (core, device) (default: --depth). Smaller than --depth with
    /// --sched mq-deadline, requests beyond it wait in the scheduler (its tags are
    /// 2 × min(queue depth, 128) per core).
    #[arg(long = "queue-depth", value_name = "N")]
    pub queue_depth: Option<u32>,
    /// I/O scheduler of every device: none or mq-deadline (one instance per device, shared
    /// by the cores that drive it).
    #[arg(long = "sched", default_value = "none", value_name = "NAME")]
    pub sched: String,
    /// mq-deadline tunable NAME=VALUE (Linux's sysfs names, times in ms); repeatable.
    #[arg(long = "sched-opt", value_name = "NAME=VALUE")]
    pub sched_opt: Vec<String>,
    /// I/O priority class of the jobs: rt, be or idle. One value for every job, or one per
    /// job (in job order: see --help's pairing of cores and devices).
    #[arg(long = "prio", value_name = "CLASS")]
    pub prio: Vec<String>,
    /// Priority classes mixed per I/O by percentage, e.g. rt=10,be=90 (sums to 100).
    #[arg(long = "prio-mix", value_name = "CLASS=PCT,...")]
    pub prio_mix: Option<String>,
    /// Count every I/O's latency in SPDK's histogram buckets (the bdev queues' histograms) and
    /// print them after the summary as spdk_nvme_perf -LL does: per device and core, the
    /// percentiles, then every bucket with its cumulative share and count.
    #[arg(long = "latency-histogram")]
    pub latency_histogram: bool,
    /// Write one SVG picture of the run: IOPS per second per core, and the latency
    /// distribution.
    #[arg(long = "plot", value_name = "FILE.svg")]
    pub plot: Option<std::path::PathBuf>,
}

/// Parses `rt=10,be=90` (each class at most once, percentages summing to 100).
pub fn parse_prio_mix(s: &str) -> Result<PrioMix, String> {
    let mut pct = [0u8; 3];
    let mut seen = [false; 3];
    for part in s.split(',') {
        let (name, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--prio-mix {s:?}: {part:?} is not CLASS=PCT"))?;
        let c = parse_class(name.trim()).map_err(|e| format!("--prio-mix {s:?}: {e}"))?;
        if std::mem::replace(&mut seen[c as usize], true) {
            return Err(format!("--prio-mix {s:?}: {} given twice", c.name()));
        }
        pct[c as usize] = v
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|&p| p <= 100)
            .ok_or_else(|| format!("--prio-mix {s:?}: {v:?} is not a percentage 0..=100"))?;
    }
    PrioMix::from_shares(pct)
        .ok_or_else(|| format!("--prio-mix {s:?}: percentages must sum to 100"))
}

/// Parses a priority class name (rt, be, idle).
pub fn parse_class(s: &str) -> Result<PrioClass, String> {
    PrioClass::ALL
        .into_iter()
        .find(|c| c.name() == s)
        .ok_or_else(|| format!("unknown priority class {s:?} (expected rt, be or idle)"))
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
        if let Some(q) = self.queue_depth
            && (q == 0 || q > self.depth)
        {
            return Err(format!(
                "--queue-depth {q}: must be 1..=depth ({})",
                self.depth
            ));
        }
        let kind = SchedKind::parse(&self.sched).map_err(|e| format!("--sched: {e}"))?;
        for o in &self.sched_opt {
            let (name, v) = o
                .split_once('=')
                .ok_or_else(|| format!("--sched-opt {o:?}: expected NAME=VALUE"))?;
            if kind != SchedKind::MqDeadline {
                return Err(format!("--sched-opt {o:?}: needs --sched mq-deadline"));
            }
            if !TUNABLES.contains(&name) {
                return Err(format!(
                    "--sched-opt {o:?}: unknown mq-deadline tunable (expected one of {})",
                    TUNABLES.join(", ")
                ));
            }
            v.parse::<u64>()
                .map_err(|_| format!("--sched-opt {o:?}: {v:?} is not a non-negative integer"))?;
        }
        if !self.prio.is_empty() && self.prio_mix.is_some() {
            return Err("--prio and --prio-mix: give one or the other".into());
        }
        for p in &self.prio {
            parse_class(p).map_err(|e| format!("--prio: {e}"))?;
        }
        if let Some(m) = &self.prio_mix {
            parse_prio_mix(m)?;
        }
        Ok(())
    }

    /// The driver queue depth per job.
    pub fn hw_depth(&self) -> u32 {
        self.queue_depth.unwrap_or(self.depth)
    }

    /// The scheduler tunables as (name, value); call after `validate`.
    pub fn sched_opts(&self) -> Vec<(&str, u64)> {
        self.sched_opt
            .iter()
            .filter_map(|o| o.split_once('='))
            .filter_map(|(n, v)| v.parse().ok().map(|v| (n, v)))
            .collect()
    }

    /// The priority mix of job `i` (`None`: no priority flags, no per-class report); call
    /// after `validate`.
    pub fn prio_of(&self, i: usize) -> Option<PrioMix> {
        if let Some(m) = &self.prio_mix {
            return parse_prio_mix(m).ok();
        }
        if self.prio.is_empty() {
            return None;
        }
        parse_class(&self.prio[i % self.prio.len()])
            .ok()
            .map(PrioMix::single)
    }
}
