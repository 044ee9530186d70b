//! pmio-perf: drive block devices from pinned reactors and report IOPS, bandwidth and
//! latency — pmio's peer of t/io_uring and spdk_nvme_perf.
//!
//! Cores and devices are paired as spdk_nvme_perf's `associate_workers_with_ns` does: round
//! robin over max(cores, devices) pairs (one device, two cores: both cores drive it, each with
//! its own queue; three devices, one core: that core drives all three), or every pair with
//! `--use-every-core`. Each pair keeps `--depth` I/Os in flight on its own [`BdevQueue`]; when
//! several cores share a device, each addresses its own slice of the LBA range (so `--verify`
//! sequence numbers have one writer per block). With `--verify` two I/Os in flight never share
//! a unit of the region, so on a device whose regions hold no more units than `--depth`, its
//! jobs run at a lower depth, said on stderr (as SPDK's bdevperf does for verify jobs).
//!
//! [`BdevQueue`]: pmio::bdev::BdevQueue
//!
//! Exit status: 0 success; 1 I/O errors, verify mismatches or a runtime failure; 2 bad
//! flags or device specs.

mod cli;
mod hooks;
mod lathist;
mod plot;
mod report;
mod spec;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Parser;
use pmio::BlockDevice;
use pmio::bdev::{Registry, SchedMode};
use pmio::sched::{SchedKind, SharedDeadline};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, now_ns};
use pmio_runtime::job::{
    Counts, JobSpec, Phase, Timing, Worker, WorkerOptions, WorkerReport, pattern,
};

use cli::Opts;
use hooks::PerfHooks;
use report::{CoreCounters, CoreResult, Report, process_cpu_ns, second_line};

/// A usage error: one line on stderr, exit status 2.
struct Usage(String);

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let opts = Opts::parse(); // clap prints its own errors and exits 2
    let plan = match plan(&opts) {
        Ok(p) => p,
        Err(Usage(msg)) => {
            eprintln!("pmio-perf: error: {msg}");
            return ExitCode::from(2);
        }
    };
    for note in &plan.notes {
        eprintln!("pmio-perf: {note}");
    }
    match run(&opts, plan) {
        Ok((report, extras_text)) => {
            if opts.json {
                match serde_json::to_string(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("pmio-perf: error: JSON: {e}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                println!("{}", report.summary());
            }
            if let Some(text) = &extras_text {
                print!("{text}");
            }
            if report.errors > 0 || report.verify_mismatches > 0 {
                eprintln!(
                    "pmio-perf: {} I/O errors, {} verify mismatches",
                    report.errors, report.verify_mismatches
                );
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pmio-perf: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// A device as the run sees it.
struct Dev {
    dev: Arc<dyn BlockDevice>,
    stores_data: bool,
}

/// What will run where, validated.
struct Plan {
    mask: CoreMask,
    devs: Vec<Dev>,
    /// Per device, the depth of each of its jobs: `--depth`, or lower with `--verify` on a
    /// device too small for it ([`verify_depth`]).
    depths: Vec<u32>,
    /// What the plan changed from the command line, for stderr.
    notes: Vec<String>,
    /// Per device, its mq-deadline instance (`--sched mq-deadline`).
    scheds: Vec<Option<Arc<SharedDeadline>>>,
    /// (core, device index, region index among that device's cores, region count).
    pairs: Vec<(u32, usize, u64, u64)>,
    _registry: Registry,
}

/// Validates everything that can be wrong in the command line, before starting anything.
fn plan(opts: &Opts) -> Result<Plan, Usage> {
    opts.validate().map_err(Usage)?;
    let mask = match &opts.cores {
        Some(m) => CoreMask::parse(m).map_err(|e| Usage(format!("-m {m}: {e}")))?,
        None => {
            let avail = CoreMask::available().map_err(|e| Usage(format!("cores: {e}")))?;
            CoreMask::from_cores([avail.last()]).map_err(|e| Usage(format!("cores: {e}")))?
        }
    };
    let registry = Registry::new();
    let specs: Vec<String> = if opts.dev.is_empty() {
        vec!["null".into()]
    } else {
        opts.dev.clone()
    };
    let mut devs = Vec::new();
    let mut per_driver = std::collections::HashMap::<String, usize>::new();
    for s in &specs {
        let driver = s.split(':').next().unwrap_or("").to_string();
        let idx = per_driver.entry(driver).or_default();
        let c = spec::parse_dev(s, *idx).map_err(|e| Usage(e.to_string()))?;
        *idx += 1;
        registry
            .register(Arc::clone(&c.dev))
            .map_err(|e| Usage(format!("--dev {s:?}: {e}")))?;
        devs.push(Dev {
            dev: c.dev,
            stores_data: c.stores_data,
        });
    }
    for d in &devs {
        let i = d.dev.info();
        if !opts.bs.is_multiple_of(u64::from(i.block_size)) {
            return Err(Usage(format!(
                "--bs {}: not a multiple of {}'s block size {}",
                opts.bs, i.name, i.block_size
            )));
        }
        if opts.bs > i.size_bytes() {
            return Err(Usage(format!(
                "--bs {}: larger than {} ({} bytes)",
                opts.bs,
                i.name,
                i.size_bytes()
            )));
        }
        if opts.verify
            && usize::try_from(opts.bs).unwrap_or(0) < pattern::MIN_BLOCK.max(i.block_size as usize)
        {
            return Err(Usage(format!("--verify: --bs {} too small", opts.bs)));
        }
        if opts.depth > i.max_queue_depth {
            return Err(Usage(format!(
                "--depth {}: {} supports at most {}",
                opts.depth, i.name, i.max_queue_depth
            )));
        }
        if opts.verify && !d.stores_data {
            return Err(Usage(format!(
                "--verify: {} does not store data (use malloc or a real device)",
                i.name
            )));
        }
    }
    // Pair cores and devices as spdk_nvme_perf does.
    let cores = mask.cores().to_vec();
    let mut raw: Vec<(u32, usize)> = Vec::new();
    if opts.use_every_core {
        for &c in &cores {
            for d in 0..devs.len() {
                raw.push((c, d));
            }
        }
    } else {
        let n = cores.len().max(devs.len());
        for i in 0..n {
            raw.push((cores[i % cores.len()], i % devs.len()));
        }
    }
    let mut pairs = Vec::new();
    for &(c, d) in &raw {
        let count = raw.iter().filter(|p| p.1 == d).count() as u64;
        let index = raw
            .iter()
            .take_while(|p| **p != (c, d))
            .filter(|p| p.1 == d)
            .count() as u64;
        pairs.push((c, d, index, count));
    }
    // Each of a device's cores addresses a region of `units` I/O units of it.
    let mut depths = Vec::with_capacity(devs.len());
    let mut notes = Vec::new();
    for (d, dev) in devs.iter().enumerate() {
        let i = dev.dev.info();
        let count = pairs.iter().filter(|p| p.1 == d).count() as u64;
        let units = i.size_bytes() / opts.bs / count;
        if units == 0 {
            return Err(Usage(format!(
                "{}: too small for {count} cores at --bs {}",
                i.name, opts.bs
            )));
        }
        let depth = if opts.verify {
            verify_depth(units, opts.depth).ok_or_else(|| {
                Usage(format!(
                    "--verify: {} gives each core 1 I/O unit of {} bytes; verifying needs 2",
                    i.name, opts.bs
                ))
            })?
        } else {
            opts.depth
        };
        if depth < opts.depth {
            notes.push(format!(
                "--verify: {} gives each core {units} I/O units of {} bytes: depth lowered from \
                 {} to {depth} on it (two I/Os in flight never share a unit)",
                i.name, opts.bs, opts.depth
            ));
        }
        depths.push(depth);
    }
    let mut scheds = Vec::with_capacity(devs.len());
    for (d, dev) in devs.iter().enumerate() {
        if SchedKind::parse(&opts.sched) != Ok(SchedKind::MqDeadline) {
            scheds.push(None);
            continue;
        }
        let i = dev.dev.info();
        let owners = pairs.iter().filter(|p| p.1 == d).count() as u16;
        let dopts = i.deadline_options(opts.hw_depth().min(depths[d]), owners);
        let dd = SharedDeadline::new(dopts)
            .map_err(|e| Usage(format!("--sched mq-deadline on {}: {e}", i.name)))?;
        for (name, v) in opts.sched_opts() {
            dd.set_param(name, v)
                .map_err(|e| Usage(format!("--sched-opt {name}={v}: {e}")))?;
        }
        scheds.push(Some(Arc::new(dd)));
    }
    Ok(Plan {
        mask,
        devs,
        depths,
        notes,
        scheds,
        pairs,
        _registry: registry,
    })
}

/// The depth a `--verify` job keeps on a region of `units` I/O units: `depth`, or at most
/// `units - 1`, since two I/Os in flight never share a unit and the engine needs a free unit
/// left over (`JobSpec::verify`). `None`: one unit, too small to verify. Lowered rather than
/// refused, as SPDK's bdevperf limits a verify job's queue depth to what its bdev holds.
fn verify_depth(units: u64, depth: u32) -> Option<u32> {
    let most = u32::try_from(units.saturating_sub(1)).unwrap_or(u32::MAX);
    (most > 0).then(|| depth.min(most))
}

/// What a timed phase records besides its results: each second's IOPS per core (for
/// `--plot`) and each job's SPDK histogram (`--latency-histogram`).
#[derive(Default)]
struct Extras {
    seconds: Vec<plot::Second>,
    hists: Vec<lathist::JobHistogram>,
}

/// Starts reactors, runs the fill (if verifying reads) and timed phases, and builds the report;
/// with `--latency-histogram`, also the `-LL` text to print after it; with `--plot`, writes the
/// picture.
fn run(opts: &Opts, plan: Plan) -> anyhow::Result<(Report, Option<String>)> {
    let reactors = Reactors::start(plan.mask.clone(), ReactorsOptions::default())
        .context("starting reactors")?;
    let cores: Vec<u32> = plan.mask.cores().to_vec();
    let reads = opts.rw.read_pct(opts.rwmixread) > 0;
    let mut tables: Vec<Option<Vec<u32>>> = plan
        .pairs
        .iter()
        .map(|&(_, d, _, count)| {
            opts.verify.then(|| {
                let units = plan.devs[d].dev.info().size_bytes() / opts.bs / count;
                vec![0u32; units as usize]
            })
        })
        .collect();
    if opts.verify && reads {
        if !opts.json {
            println!(
                "verify: writing each core's region once before the {} run",
                opts.rw.name()
            );
        }
        let results = phase(
            opts,
            &plan,
            &reactors,
            &cores,
            Phase::Fill,
            &mut tables,
            &mut Extras::default(),
        )?;
        for r in &results {
            if r.errors > 0 {
                return Err(anyhow!(
                    "fill phase: {} I/O errors on core {}",
                    r.errors,
                    r.core
                ));
            }
        }
    }
    let cpu0 = process_cpu_ns();
    let mut extras = Extras::default();
    let results = phase(
        opts,
        &plan,
        &reactors,
        &cores,
        Phase::Run,
        &mut tables,
        &mut extras,
    )?;
    let cpu_ns = process_cpu_ns().saturating_sub(cpu0);
    reactors.stop().context("stopping reactors")?;
    let names: Vec<String> = plan
        .devs
        .iter()
        .map(|d| d.dev.info().name.clone())
        .collect();
    if let Some(path) = &opts.plot {
        let mut all = pmio_runtime::job::new_hist();
        for r in &results {
            // Same bounds everywhere, so add cannot fail.
            let _ = all.add(&r.hist);
        }
        let title = format!(
            "pmio-perf {} {} B, depth {}, on {}",
            opts.rw.name(),
            opts.bs,
            opts.depth,
            names.join(", ")
        );
        plot::write(path, &title, &extras.seconds, &plot::latency_bars(&all))?;
    }
    let mut report = Report::build(results, opts, names, cpu_ns);
    let mut ll = None;
    if opts.latency_histogram {
        let jobs: Vec<_> = extras
            .hists
            .iter()
            .map(|j| (j.device.clone(), j.core, j.data()))
            .collect();
        if opts.json {
            report.latency_histograms = Some(
                jobs.iter()
                    .map(|(d, c, h)| lathist::JobBuckets::of(d, *c, h))
                    .collect(),
            );
        } else {
            ll = Some(lathist::render(&jobs));
        }
    }
    Ok((report, ll))
}

/// Runs one phase on every core; returns one result per core (jobs merged).
fn phase(
    opts: &Opts,
    plan: &Plan,
    reactors: &Reactors,
    cores: &[u32],
    ph: Phase,
    tables: &mut [Option<Vec<u32>>],
    extras: &mut Extras,
) -> anyhow::Result<Vec<CoreResult>> {
    let timing = Arc::new(Timing::new());
    let (tx, rx) = mpsc::channel::<WorkerReport>();
    let mut counters = Vec::new();
    let mut active_cores = Vec::new();
    // pair index order per core, to hand verify tables back.
    let mut pair_ids: Vec<(u32, Vec<usize>)> = Vec::new();
    for &core in cores {
        let ids: Vec<usize> = (0..plan.pairs.len())
            .filter(|&i| plan.pairs[i].0 == core)
            .collect();
        if ids.is_empty() {
            continue;
        }
        let mut specs = Vec::new();
        for &i in &ids {
            let (_, d, index, count) = plan.pairs[i];
            let info = plan.devs[d].dev.info();
            let units = info.size_bytes() / opts.bs / count;
            let depth = plan.depths[d];
            let mut s = JobSpec::new(Arc::clone(&plan.devs[d].dev), depth, opts.bs);
            s.queue_depth = opts.hw_depth().min(depth);
            s.submit_batch = opts.submit_batch.min(depth);
            s.complete_batch = opts.complete_batch.min(depth);
            s.random = opts.rw.random();
            s.read_pct = opts.rw.read_pct(opts.rwmixread);
            s.region_start = if count > 1 { index * units } else { 0 };
            s.region_units = units;
            s.verify = tables[i].take();
            if let Some(dd) = &plan.scheds[d] {
                s.sched = SchedMode::MqDeadline {
                    dd: Arc::clone(dd),
                    owner: index as u16,
                };
            }
            s.prio = opts.prio_of(i);
            if ph == Phase::Run && opts.latency_histogram {
                let h = lathist::JobHistogram::new(&info.name, core);
                s.histogram = Some(Arc::clone(&h.switch));
                extras.hists.push(h);
            }
            specs.push(s);
        }
        let c = Arc::new(CoreCounters::default());
        counters.push(Arc::clone(&c));
        let wopts = WorkerOptions {
            poller_name: "perf",
            ..WorkerOptions::new(ph, Arc::clone(&timing))
        };
        let hooks = PerfHooks {
            counters: c,
            tx: tx.clone(),
        };
        reactors
            .run_on(core, move |ctx| Worker::start(ctx, wopts, specs, hooks))
            .context("reaching a reactor")?
            .map_err(|e| anyhow!("core {core}: {e}"))?;
        active_cores.push(core);
        pair_ids.push((core, ids));
    }
    drop(tx);
    let start = now_ns();
    let warm = if ph == Phase::Run { opts.warmup } else { 0.0 };
    let measure_start = start + (warm * 1e9) as u64;
    let end = if ph == Phase::Run {
        measure_start + (opts.time * 1e9) as u64
    } else {
        u64::MAX
    };
    timing.go(measure_start, end);

    let mut outcomes: Vec<WorkerReport> = Vec::new();
    let mut last = Counts::default();
    let mut last_per_core: Vec<u64> = vec![0; counters.len()];
    let mut last_t = start;
    let mut next = start + 1_000_000_000;
    while outcomes.len() < active_cores.len() {
        let wait = next.saturating_sub(now_ns());
        match rx.recv_timeout(Duration::from_nanos(wait)) {
            Ok(o) => {
                outcomes.push(o);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(anyhow!("a reactor stopped before reporting"));
            }
        }
        let t = now_ns();
        let mut cur = Counts::default();
        let secs = (t - last_t) as f64 / 1e9;
        let mut per_core = Vec::with_capacity(counters.len());
        for (i, c) in counters.iter().enumerate() {
            let n = c.load();
            per_core.push((
                active_cores[i],
                n.ios.saturating_sub(last_per_core[i]) as f64 / secs,
            ));
            last_per_core[i] = n.ios;
            cur.add(&n);
        }
        if ph == Phase::Run {
            extras.seconds.push(plot::Second {
                t: (t - start) as f64 / 1e9,
                cores: per_core,
            });
        }
        if !opts.json && ph == Phase::Run {
            println!("{}", second_line(&cur.since(&last), secs, opts.bs));
        }
        last = cur;
        last_t = t;
        next += 1_000_000_000;
    }
    // Hand the verify tables back in pair order.
    for o in &mut outcomes {
        if let Some((_, ids)) = pair_ids.iter().find(|(c, _)| *c == o.core) {
            for (k, &i) in ids.iter().enumerate() {
                tables[i] = o.jobs.get_mut(k).and_then(|j| j.verify.take());
            }
        }
        if let Some(e) = &o.error {
            return Err(anyhow!("core {}: {e}", o.core));
        }
    }
    outcomes.sort_by_key(|o| o.core);
    Ok(outcomes.iter().map(CoreResult::of).collect())
}

#[cfg(test)]
mod tests {
    use super::verify_depth;

    #[test]
    fn verify_depth_leaves_a_free_unit() {
        // (units, --depth, depth kept)
        let rows: &[(u64, u32, Option<u32>)] = &[
            (0, 128, None),
            (1, 1, None),
            (2, 128, Some(1)),
            (64, 128, Some(63)), // the README's malloc:size=64M at -b 1M
            (128, 128, Some(127)),
            (129, 128, Some(128)),
            (1 << 40, 65535, Some(65535)),
        ];
        for &(units, depth, want) in rows {
            assert_eq!(
                verify_depth(units, depth),
                want,
                "{units} units, depth {depth}"
            );
        }
    }
}
