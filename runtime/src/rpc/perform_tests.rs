//! `perform_tests`: a bdevperf-style workload run inside the daemon, on its reactors.
//!
//! Each named bdev gets one job, placed round-robin on the reactors (with `every_core`, as
//! bdevperf's `-C`, one job on every reactor for each bdev). A job is a one-job worker of the
//! job engine ([`crate::job`]): a poller that opens a [`BdevQueue`] on its reactor,
//! keeps `depth` I/Os of `size` bytes in flight for `seconds`, records every latency in a
//! histogram, then drains, reports on a channel and unregisters itself. What is the daemon's
//! own is in `JobHooks`: the queue's live statistics for `bdev_get_iostat`, stopping early
//! when the daemon shuts down, the report. The RPC thread only sends the start messages and
//! waits for the reports; no reactor ever waits for it.
//!
//! When the bdev's scheduler is mq-deadline (`bdev_set_scheduler`), the job opens its queue in
//! the block layer's [`SchedMode::MqDeadline`] mode on the device's shared
//! [`SharedDeadline`](pmio::sched::SharedDeadline), as owner = its reactor's index: requests
//! take that reactor's scheduler tags, are inserted at flush, dispatched as driver tags free up
//! and completed (with merged members) through it; latency then counts from insertion. The job
//! depth must fit the reactor's scheduler tags (`nr_requests`).
//!
//! Parameters (all optional): `bdevs` (names; default every bdev), `rw` (`read`, `write`,
//! `randread` (default), `randwrite`, `rw`, `randrw`), `rwmixread` (read % of `rw`/`randrw`,
//! default 50), `depth` (default 32), `size` (bytes, a multiple of the block size, default 4096),
//! `seconds` (default 5), `every_core` (bool, default false). Result, per job in bdevperf's shape:
//! `{"results": [{"job", "core_mask", "workload", "status" ("finished" | "aborted" by shutdown),
//! "queue_depth", "io_size", "runtime", "iops", "mibps", "io_failed", "io_timeout",
//! "avg_latency_us", "min_latency_us", "max_latency_us", "latency_percentiles_us": {"p50", "p90",
//! "p99", "p99.9", "p99.99"}, "scheduler"}], "core_count"}`.

use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use crate::job::{Hooks, JobSpec, Phase, Timing, Worker, WorkerOptions, WorkerReport, new_hist};
use hdrhistogram::Histogram;
use pmio::bdev::{BdevQueue, SchedMode};
use pmio::dma::DmaRegion;
use pmio::sched::Scheduler;
use pmio::{BlockDevice, Op};
use pmio_reactors::ReactorCtx;
use serde_json::{Value, json};

use super::host::BdevHost;
use pmio_jsonrpc::Method;
use pmio_jsonrpc::RUNTIME;
use pmio_jsonrpc::RpcError;
use pmio_jsonrpc::decl;
use serde::{Deserialize, Serialize};

/// The methods of this module.
pub fn methods() -> Vec<Method<Arc<BdevHost>>> {
    vec![Method::new("perform_tests", RUNTIME, perform_tests)]
}

/// I/Os submitted per burst (one plug, one doorbell).
const BURST: u32 = 32;
/// Completions reaped per poll call.
const REAP: u32 = 64;
/// Longest run accepted, in seconds.
const MAX_SECONDS: f64 = 3600.0;
/// Largest I/O accepted, in bytes.
const MAX_IO_SIZE: u64 = 128 << 20;
/// Largest buffer memory of one job (`depth * size`), in bytes.
const MAX_JOB_MEMORY: u64 = 1 << 30;

/// Access pattern of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Random offsets (else sequential).
    pub random: bool,
    /// Percentage of reads.
    pub read_pct: u8,
}

impl Workload {
    /// Parses bdevperf's `-w` names; `mix` is the read percentage of `rw`/`randrw`.
    pub fn parse(rw: &str, mix: Option<u32>) -> Result<Workload, String> {
        let (random, read_pct) = match rw {
            "read" => (false, 100),
            "write" => (false, 0),
            "randread" => (true, 100),
            "randwrite" => (true, 0),
            "rw" | "randrw" => {
                let m = mix.unwrap_or(50);
                if m > 100 {
                    return Err(format!("rwmixread {m} is above 100"));
                }
                (rw == "randrw", m as u8)
            }
            other => {
                return Err(format!(
                    "rw \"{other}\" is not one of read, write, randread, randwrite, rw, randrw"
                ));
            }
        };
        if mix.is_some() && !matches!(rw, "rw" | "randrw") {
            return Err(format!("rwmixread applies only to rw and randrw, not {rw}"));
        }
        Ok(Workload { random, read_pct })
    }
}

/// One job as the RPC thread plans it: the engine's description, and the reactor (index in
/// the core mask) it runs on, which is also its mq-deadline owner.
struct Planned {
    spec: JobSpec,
    reactor: usize,
}

/// Jobs planned and not yet handed to a reactor. On an error path they give their buffers back
/// to the bdevs' caches instead of freeing them: a cached buffer may still be registered with
/// its device (`JobSpec::with_buffers`).
struct Plan<'t> {
    target: &'t BdevHost,
    jobs: Vec<Planned>,
}

impl Drop for Plan<'_> {
    fn drop(&mut self) {
        for p in self.jobs.drain(..) {
            let name = p.spec.dev.info().name.clone();
            if let Some(bufs) = p.spec.into_buffers() {
                self.target.give_back_buffer(&name, bufs);
            }
        }
    }
}

/// What a job reports.
struct JobReport {
    name: String,
    core: u32,
    ios: u64,
    bytes: u64,
    errors: u64,
    elapsed_ns: u64,
    hist: Histogram<u64>,
    aborted: bool,
    error: Option<String>,
    /// The job's buffers, back for the next job on this bdev.
    bufs: Option<DmaRegion>,
}

/// `perform_tests` parameters (all optional; see the module documentation).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct PerformTests {
    /// Bdev names (default: every bdev).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'b', long = "bdev"))]
    pub bdevs: Option<Vec<String>>,
    /// Workload: `read`, `write`, `randread` (default), `randwrite`, `rw`, `randrw`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "cli",
        arg(short = 'w', long = "rw", default_value = "randread")
    )]
    pub rw: Option<String>,
    /// I/Os in flight per job (default 32).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "cli",
        arg(short = 'q', long = "depth", default_value = "32")
    )]
    pub depth: Option<u32>,
    /// I/O size in bytes (default 4096).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "cli",
        arg(short = 'o', long = "size", default_value = "4096")
    )]
    pub size: Option<u64>,
    /// Run time in seconds (default 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "cli",
        arg(short = 't', long = "seconds", default_value = "5")
    )]
    pub seconds: Option<f64>,
    /// Read percentage of `rw` and `randrw` (default 50).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(short = 'M', long))]
    pub rwmixread: Option<u32>,
    /// One job on every reactor for each bdev (bdevperf's `-C`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[cfg_attr(feature = "cli", arg(short = 'C', long))]
    pub every_core: bool,
}

fn perform_tests(host: &Arc<BdevHost>, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let p: PerformTests = decl::decode(params)?;
    let names = p.bdevs;
    let rw = p.rw.unwrap_or_else(|| "randread".into());
    let depth = p.depth.unwrap_or(32);
    let size = p.size.unwrap_or(4096);
    let seconds = p.seconds.unwrap_or(5.0);
    let mix = p.rwmixread;
    let inval = |m: String| RpcError::errno_detail(-libc::EINVAL, m);
    let load = Workload::parse(&rw, mix).map_err(inval)?;
    if !(seconds > 0.0 && seconds <= MAX_SECONDS) {
        return Err(inval(format!(
            "seconds {seconds} not in (0, {MAX_SECONDS}]"
        )));
    }
    if depth == 0 || depth > 4096 {
        return Err(inval(format!("depth {depth} not in 1..=4096")));
    }
    if size == 0 || size > MAX_IO_SIZE {
        return Err(inval(format!("size {size} not in 1..={MAX_IO_SIZE}")));
    }
    if u64::from(depth) * size > MAX_JOB_MEMORY {
        return Err(inval(format!(
            "depth {depth} x size {size} needs more than {MAX_JOB_MEMORY} bytes of buffers"
        )));
    }
    let t = host;
    if t.is_stopping() {
        return Err(RpcError::errno_detail(
            -libc::ESHUTDOWN,
            "the daemon is shutting down",
        ));
    }
    let devs: Vec<Arc<dyn BlockDevice>> = match names {
        Some(ns) if ns.is_empty() => return Err(inval("bdevs is empty".into())),
        Some(ns) => ns
            .iter()
            .map(|n| {
                t.find_bdev(n)
                    .ok_or_else(|| RpcError::errno_detail(-libc::ENODEV, format_args!("bdev {n}")))
            })
            .collect::<Result<_, _>>()?,
        None => t.bdevs_in_order(),
    };
    if devs.is_empty() {
        return Err(RpcError::errno_detail(-libc::ENODEV, "no bdevs to test"));
    }
    let cores = t.reactors().cores().to_vec();
    if cores.is_empty() {
        return Err(RpcError::errno_detail(-libc::ESHUTDOWN, "no reactors"));
    }
    let mut plan = Plan {
        target: t,
        jobs: Vec::with_capacity(devs.len()),
    };
    let specs = &mut plan.jobs;
    for dev in devs {
        let i = dev.info();
        let name = &i.name;
        if specs.iter().any(|p| p.spec.dev.info().name == *name) {
            return Err(inval(format!("bdev {name} is named twice")));
        }
        if t.is_claimed(name) {
            return Err(RpcError::errno_detail(
                -libc::EBUSY,
                format_args!("bdev {name} is already running perform_tests"),
            ));
        }
        let bs = u64::from(i.block_size);
        // Above the device's largest transfer, the block layer splits each I/O.
        if size == 0 || !size.is_multiple_of(bs) || size / bs > u64::from(u32::MAX) {
            return Err(inval(format!(
                "size {size} is not a multiple of bdev {name}'s block size {bs}"
            )));
        }
        if size > i.size_bytes() {
            return Err(inval(format!(
                "size {size} is larger than bdev {name} ({} bytes)",
                i.size_bytes()
            )));
        }
        if depth > i.max_queue_depth {
            return Err(inval(format!(
                "depth {depth} exceeds bdev {name}'s largest queue ({})",
                i.max_queue_depth
            )));
        }
        if load.read_pct < 100 && !i.supported_ops.contains(Op::Write) {
            return Err(RpcError::errno_detail(
                -libc::EOPNOTSUPP,
                format_args!("bdev {name} does not support writes"),
            ));
        }
        let sched = super::scheduler::scheduler_of(t, name);
        if let Scheduler::MqDeadline(dd) = &sched {
            let tags = super::scheduler::per_owner_tags(dd);
            if depth > tags {
                return Err(inval(format!(
                    "depth {depth} exceeds the {tags} mq-deadline scheduler tags of each reactor \
                     on bdev {name} (raise them with bdev_set_scheduler nr_requests)"
                )));
            }
        }
        // One job per bdev, placed round-robin; with every_core, one on each reactor.
        let reactors: Vec<usize> = if p.every_core {
            (0..cores.len()).collect()
        } else {
            vec![specs.len() % cores.len()]
        };
        for reactor in reactors {
            // Allocating (and populating) buffers may take milliseconds: here, not on a reactor.
            let bufs = t
                .take_buffer(name, (u64::from(depth) * size) as usize)
                .map_err(|e| RpcError::errno_detail(e.errno(), format_args!("I/O buffers: {e}")))?;
            let mut spec = JobSpec::new(dev.clone(), depth, size);
            spec.submit_batch = BURST;
            spec.complete_batch = REAP;
            (spec.random, spec.read_pct) = (load.random, load.read_pct);
            spec.histogram = t.registry.histogram(name);
            if let Scheduler::MqDeadline(dd) = &sched {
                let owner = u16::try_from(reactor).map_err(|_| {
                    inval(format!(
                        "bdev {name}: reactor {reactor} has no mq-deadline owner"
                    ))
                })?;
                spec.sched = SchedMode::MqDeadline {
                    dd: Arc::clone(dd),
                    owner,
                };
            }
            // SAFETY: the region stays allocated, same pages, in this job or in the target's
            // buffer cache until the bdev is gone (`Target::forget_bdev_state`), after its last
            // I/O.
            let spec = unsafe { spec.with_buffers(bufs) };
            specs.push(Planned { spec, reactor });
        }
    }
    let mut names: Vec<String> = Vec::new();
    for p in &plan.jobs {
        let n = &p.spec.dev.info().name;
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let _claim = host.try_claim(&names).map_err(|n| {
        RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {n} is already running perform_tests"),
        )
    })?;
    // A scheduler switch between the lookup above and the claim: refuse rather than run on a
    // retired instance (the switch holds the same claim, so none can happen from here on).
    for p in &plan.jobs {
        let name = &p.spec.dev.info().name;
        let same = match (&p.spec.sched, super::scheduler::scheduler_of(t, name)) {
            (SchedMode::None, Scheduler::None) => true,
            (SchedMode::MqDeadline { dd, .. }, Scheduler::MqDeadline(b)) => Arc::ptr_eq(dd, &b),
            _ => false,
        };
        if !same {
            return Err(RpcError::errno_detail(
                -libc::EBUSY,
                format_args!("bdev {name}'s scheduler changed while perform_tests started"),
            ));
        }
    }
    let jobs = plan.jobs.len();
    let (tx, rx) = mpsc::channel::<JobReport>();
    let mut started = 0;
    let mut unstarted = std::mem::take(&mut plan.jobs).into_iter();
    for p in unstarted.by_ref() {
        let core = cores[p.reactor];
        let name = p.spec.dev.info().name.clone();
        let hooks = JobHooks {
            target: host.clone(),
            name,
            live_id: None,
            tx: tx.clone(),
        };
        let sent = t
            .reactors()
            .send(core, move |ctx| start_job(ctx, p.spec, seconds, hooks));
        if let Err(e) = sent {
            log::warn!("perform_tests: cannot reach reactor {core}: {e}");
            break;
        }
        started += 1;
    }
    plan.jobs.extend(unstarted);
    drop(tx);
    let wait = Duration::from_secs_f64(seconds) + Duration::from_secs(30);
    let mut reports = Vec::with_capacity(started);
    for _ in 0..started {
        match rx.recv_timeout(wait) {
            Ok(r) => reports.push(r),
            Err(_) => {
                return Err(RpcError::errno_detail(
                    -libc::ETIMEDOUT,
                    "a perform_tests job did not report in time",
                ));
            }
        }
    }
    if reports.len() < jobs {
        return Err(RpcError::errno_detail(
            -libc::ESHUTDOWN,
            "reactors are stopping; perform_tests not run",
        ));
    }
    reports.sort_by_key(|r| (names.iter().position(|n| *n == r.name), r.core));
    for r in &mut reports {
        if let Some(b) = r.bufs.take() {
            t.give_back_buffer(&r.name, b);
        }
    }
    if let Some(r) = reports.iter().find(|r| r.error.is_some()) {
        return Err(RpcError::errno_detail(
            -libc::EIO,
            format_args!(
                "bdev {}: {}",
                r.name,
                r.error.as_deref().unwrap_or_default()
            ),
        ));
    }
    let results: Vec<Value> = reports
        .iter()
        .map(|r| {
            let sched = super::scheduler::scheduler_of(t, &r.name);
            report_json(r, &rw, depth, size, sched.name())
        })
        .collect();
    let cores_used: std::collections::BTreeSet<u32> = reports.iter().map(|r| r.core).collect();
    Ok(json!({"results": results, "core_count": cores_used.len()}))
}

fn us(ns: u64) -> f64 {
    (ns as f64 / 1000.0 * 1000.0).round() / 1000.0
}

fn report_json(r: &JobReport, rw: &str, depth: u32, size: u64, sched: &str) -> Value {
    let secs = r.elapsed_ns as f64 / 1e9;
    let iops = if secs > 0.0 { r.ios as f64 / secs } else { 0.0 };
    let mibps = if secs > 0.0 {
        r.bytes as f64 / secs / (1024.0 * 1024.0)
    } else {
        0.0
    };
    let h = &r.hist;
    let (min, max, avg) = if h.is_empty() {
        (0, 0, 0.0)
    } else {
        (h.min(), h.max(), h.mean())
    };
    let pct = |q: f64| {
        us(if h.is_empty() {
            0
        } else {
            h.value_at_quantile(q)
        })
    };
    json!({
        "job": r.name,
        "core_mask": format!("0x{:x}", 1u128 << r.core),
        "workload": rw,
        "status": if r.aborted { "aborted" } else { "finished" },
        "queue_depth": depth,
        "io_size": size,
        "runtime": (secs * 1e6).round() / 1e6,
        "iops": (iops * 100.0).round() / 100.0,
        "mibps": (mibps * 100.0).round() / 100.0,
        "io_failed": r.errors,
        "io_timeout": 0,
        "avg_latency_us": (avg / 1000.0 * 1000.0).round() / 1000.0,
        "min_latency_us": us(min),
        "max_latency_us": us(max),
        "latency_percentiles_us": {
            "p50": pct(0.50),
            "p90": pct(0.90),
            "p99": pct(0.99),
            "p99.9": pct(0.999),
            "p99.99": pct(0.9999)
        },
        "scheduler": sched
    })
}

impl JobReport {
    fn failed(name: String, core: u32, error: String) -> JobReport {
        JobReport {
            name,
            core,
            ios: 0,
            bytes: 0,
            errors: 0,
            elapsed_ns: 0,
            hist: new_hist(),
            aborted: false,
            error: Some(error),
            bufs: None,
        }
    }
}

/// Starts one job on this reactor: it runs for `seconds` from now.
fn start_job(ctx: &mut ReactorCtx, spec: JobSpec, seconds: f64, hooks: JobHooks) {
    let (name, tx) = (hooks.name.clone(), hooks.tx.clone());
    let now = ctx.now_ns();
    let timing = Arc::new(Timing::started(now, now + (seconds * 1e9) as u64));
    let opts = WorkerOptions {
        poller_name: "perform_tests",
        ..WorkerOptions::new(Phase::Run, timing)
    };
    if let Err(e) = Worker::start(ctx, opts, vec![spec], hooks) {
        let _ = tx.send(JobReport::failed(name, ctx.core(), e.to_string()));
    }
}

/// What a perform_tests job plugs into the job engine: the bdev's live statistics, the
/// daemon's shutdown, and its report to the RPC thread.
struct JobHooks {
    target: Arc<BdevHost>,
    name: String,
    /// Id of the queue's statistics in the target (`BdevHost::add_live`).
    live_id: Option<u64>,
    tx: Sender<JobReport>,
}

impl Hooks for JobHooks {
    fn opened(&mut self, _job: usize, q: &BdevQueue) {
        // bdev_get_iostat reads this queue's statistics while the job runs.
        self.live_id = Some(self.target.add_live(&self.name, q.stats_cell()));
    }

    #[inline]
    fn abort(&self) -> bool {
        self.target.is_stopping()
    }

    fn finished(&mut self, mut r: WorkerReport) {
        // One spec, so one result.
        let Some(job) = r.jobs.pop() else {
            let e = "the job engine reported no job".to_string();
            let _ = self
                .tx
                .send(JobReport::failed(self.name.clone(), r.core, e));
            return;
        };
        if let Some(id) = self.live_id.take() {
            self.target.finish_live(&self.name, id, &job.queue_stats);
        }
        let _ = self.tx.send(JobReport {
            name: job.name,
            core: r.core,
            ios: job.ios,
            bytes: job.bytes,
            errors: job.errors,
            // Up to the drain: the time of every I/O counted.
            elapsed_ns: r.elapsed_with_drain_ns(),
            hist: job.hist,
            aborted: r.aborted,
            error: r.error.map(|e| e.to_string()),
            bufs: job.bufs,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse() {
        assert_eq!(
            Workload::parse("randread", None).unwrap(),
            Workload {
                random: true,
                read_pct: 100
            }
        );
        assert_eq!(Workload::parse("rw", Some(70)).unwrap().read_pct, 70);
        assert_eq!(Workload::parse("randrw", None).unwrap().read_pct, 50);
        assert!(Workload::parse("verify", None).is_err());
        assert!(Workload::parse("read", Some(50)).is_err());
        assert!(Workload::parse("rw", Some(101)).is_err());
    }
}
