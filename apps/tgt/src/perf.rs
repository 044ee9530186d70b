//! `perform_tests`: a bdevperf-style workload run inside the daemon, on its reactors.
//!
//! Each named bdev gets one job, placed round-robin on the reactors (with `every_core`, as
//! bdevperf's `-C`, one job on every reactor for each bdev). A job is a poller: it opens
//! a [`BdevQueue`] on its reactor, keeps `depth` I/Os of `size` bytes in flight for `seconds`,
//! records every latency in a histogram, then drains, reports on a channel and unregisters
//! itself. The RPC thread only sends the start messages and waits for the reports; no reactor
//! ever waits for it.
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

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use hdrhistogram::Histogram;
use pmio::bdev::{BdevQueue, BdevQueueOptions, SchedMode};
use pmio::dma::DmaRegion;
use pmio::plug::Plug;
use pmio::sched::Scheduler;
use pmio::{BlockDevice, Io, IoBuf, Op};
use pmio_reactors::{PollerId, PollerResult, ReactorCtx};
use serde_json::{Value, json};

use crate::jsonrpc::RpcError;
use crate::methods::{Method, RUNTIME, Rpc};
use crate::params::Params;
use crate::target::Target;

/// The methods of this module.
pub fn methods() -> Vec<Method> {
    vec![Method {
        name: "perform_tests",
        states: RUNTIME,
        run: perform_tests,
    }]
}

/// I/Os submitted per burst (one plug, one doorbell).
const BURST: usize = 32;
/// Completions reaped per poll call.
const REAP: usize = 64;
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

/// One job as the RPC thread describes it.
struct JobSpec {
    dev: Arc<dyn BlockDevice>,
    depth: u32,
    size: u64,
    load: Workload,
    seconds: f64,
    sched: Scheduler,
    /// The reactor (index in the core mask) the job runs on: its mq-deadline owner.
    reactor: usize,
    /// I/O buffers, at least `depth * size` bytes (allocated off the reactors).
    bufs: DmaRegion,
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

fn new_hist() -> Histogram<u64> {
    // 1 ns .. 1 h at 3 significant digits; allocated once per job, never per I/O.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn perform_tests(rpc: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let mut p = Params::new(params)?;
    let names: Option<Vec<String>> = p.opt("bdevs")?;
    let rw: String = p.opt("rw")?.unwrap_or_else(|| "randread".into());
    let depth: u32 = p.opt("depth")?.unwrap_or(32);
    let size: u64 = p.opt("size")?.unwrap_or(4096);
    let seconds: f64 = p.opt("seconds")?.unwrap_or(5.0);
    let mix: Option<u32> = p.opt("rwmixread")?;
    let every_core: bool = p.opt("every_core")?.unwrap_or(false);
    p.finish()?;
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
    let t = &rpc.target;
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
    let mut specs = Vec::with_capacity(devs.len());
    for dev in devs {
        let i = dev.info();
        let name = &i.name;
        if specs.iter().any(|s: &JobSpec| s.dev.info().name == *name) {
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
        let sched = crate::sched::scheduler_of(t, name);
        if let Scheduler::MqDeadline(dd) = &sched {
            let tags = crate::sched::per_owner_tags(dd);
            if depth > tags {
                return Err(inval(format!(
                    "depth {depth} exceeds the {tags} mq-deadline scheduler tags of each reactor \
                     on bdev {name} (raise them with bdev_set_scheduler nr_requests)"
                )));
            }
        }
        // One job per bdev, placed round-robin; with every_core, one on each reactor.
        let reactors: Vec<usize> = if every_core {
            (0..cores.len()).collect()
        } else {
            vec![specs.len() % cores.len()]
        };
        for reactor in reactors {
            // Allocating (and populating) buffers may take milliseconds: here, not on a reactor.
            let bufs = t
                .take_buffer(name, (u64::from(depth) * size) as usize)
                .map_err(|e| RpcError::errno_detail(e.errno(), format_args!("I/O buffers: {e}")))?;
            specs.push(JobSpec {
                dev: dev.clone(),
                depth,
                size,
                load,
                seconds,
                sched: sched.clone(),
                reactor,
                bufs,
            });
        }
    }
    let mut names: Vec<String> = Vec::new();
    for s in &specs {
        let n = &s.dev.info().name;
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let _claim = rpc.target.try_claim(&names).map_err(|n| {
        RpcError::errno_detail(
            -libc::EBUSY,
            format_args!("bdev {n} is already running perform_tests"),
        )
    })?;
    // A scheduler switch between the lookup above and the claim: refuse rather than run on a
    // retired instance (the switch holds the same claim, so none can happen from here on).
    for s in &specs {
        let name = &s.dev.info().name;
        let same = match (&s.sched, crate::sched::scheduler_of(t, name)) {
            (Scheduler::None, Scheduler::None) => true,
            (Scheduler::MqDeadline(a), Scheduler::MqDeadline(b)) => Arc::ptr_eq(a, &b),
            _ => false,
        };
        if !same {
            return Err(RpcError::errno_detail(
                -libc::EBUSY,
                format_args!("bdev {name}'s scheduler changed while perform_tests started"),
            ));
        }
    }
    let jobs = specs.len();
    let (tx, rx) = mpsc::channel::<JobReport>();
    let mut started = 0;
    for spec in specs {
        let core = cores[spec.reactor];
        let tx = tx.clone();
        let target = rpc.target.clone();
        let name = spec.dev.info().name.clone();
        let sent = t.reactors().send(core, move |ctx| {
            if let Err(e) = Job::start(ctx, spec, target, tx.clone()) {
                let _ = tx.send(JobReport::failed(name, ctx.core(), e));
            }
        });
        if let Err(e) = sent {
            log::warn!("perform_tests: cannot reach reactor {core}: {e}");
            break;
        }
        started += 1;
    }
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
            let sched = crate::sched::scheduler_of(t, &r.name);
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

/// One job on its reactor.
struct Job {
    name: String,
    core: u32,
    q: BdevQueue,
    /// Id of the queue's statistics in the target (`Target::add_live`).
    live_id: u64,
    plug: Plug,
    /// The I/O buffers (at least `depth * size` bytes), handed back in the report.
    bufs: Option<DmaRegion>,
    base: *mut u8,
    size: u64,
    nblocks: u32,
    load: Workload,
    units: u64,
    cursor: u64,
    rng: u64,
    free: Vec<u16>,
    target: Arc<Target>,
    start_ns: u64,
    end_ns: u64,
    stopping: bool,
    aborted: bool,
    error: Option<String>,
    ios: u64,
    bytes: u64,
    errors: u64,
    hist: Histogram<u64>,
    tx: Sender<JobReport>,
    poller: Rc<Cell<Option<PollerId>>>,
}

impl Job {
    /// Opens the queue and buffers on this reactor and registers the job's poller.
    fn start(
        ctx: &mut ReactorCtx,
        spec: JobSpec,
        target: Arc<Target>,
        tx: Sender<JobReport>,
    ) -> Result<(), String> {
        let info = spec.dev.info().clone();
        let mut plug = Plug::default();
        let sched = match &spec.sched {
            Scheduler::None => SchedMode::None,
            Scheduler::MqDeadline(dd) => SchedMode::MqDeadline {
                dd: Arc::clone(dd),
                owner: u16::try_from(spec.reactor)
                    .map_err(|_| format!("reactor {} has no mq-deadline owner", spec.reactor))?,
            },
        };
        let q = BdevQueue::open(
            spec.dev,
            BdevQueueOptions {
                depth: spec.depth,
                sched,
            },
        )
        .map_err(|e| e.to_string())?;
        q.register_plug(&mut plug);
        // bdev_get_iostat reads this queue's statistics while the job runs.
        let live_id = target.add_live(&info.name, q.stats_cell());
        let bufs = spec.bufs;
        // SAFETY: the region stays allocated, same pages, in this job or in the target's buffer
        // cache until the bdev is gone (`Target::forget_bdev_state`), after its last I/O.
        unsafe { q.device().register_memory(&[(bufs.as_ptr(), bufs.len())]) };
        let nblocks = (spec.size / u64::from(info.block_size)) as u32;
        let poller = Rc::new(Cell::new(None));
        let now = ctx.now_ns();
        let duration_ns = (spec.seconds * 1e9) as u64;
        let mut job = Job {
            name: info.name.clone(),
            core: ctx.core(),
            q,
            live_id,
            plug,
            base: bufs.as_ptr(),
            bufs: Some(bufs),
            size: spec.size,
            nblocks,
            load: spec.load,
            units: info.num_blocks / u64::from(nblocks),
            cursor: 0,
            rng: (now ^ (u64::from(ctx.core()) << 32)) | 1,
            free: (0..spec.depth as u16).rev().collect(),
            target,
            start_ns: now,
            end_ns: now + duration_ns,
            stopping: false,
            aborted: false,
            error: None,
            ios: 0,
            bytes: 0,
            errors: 0,
            hist: new_hist(),
            tx,
            poller: poller.clone(),
        };
        let id = ctx.register_poller("perform_tests", move |ctx| job.step(ctx));
        poller.set(Some(id));
        Ok(())
    }

    /// One poller turn: reap, stop when due, refill, report when drained.
    fn step(&mut self, ctx: &mut ReactorCtx) -> PollerResult {
        let now = ctx.now_ns();
        if !self.stopping && (now >= self.end_ns || self.target.is_stopping()) {
            self.stopping = true;
            self.aborted = now < self.end_ns;
        }
        let mut did = self.reap() > 0;
        if !self.stopping && self.error.is_none() {
            match self.refill() {
                Ok(n) => did |= n > 0,
                Err(e) => {
                    self.error = Some(e);
                    self.stopping = true;
                }
            }
        }
        if self.stopping && self.q.outstanding() == 0 {
            self.finish(ctx, now);
            return PollerResult::Idle;
        }
        // Waiting for a device is not idleness: keep an interrupt-mode reactor awake.
        ctx.stay_awake();
        did.into()
    }

    #[inline]
    fn next_rng(&mut self) -> u64 {
        let x = &mut self.rng;
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Picks op and LBA for one I/O.
    #[inline]
    fn plan(&mut self) -> (Op, u64) {
        let r = self.next_rng();
        let op = match self.load.read_pct {
            100 => Op::Read,
            0 => Op::Write,
            p => {
                if (r >> 32) % 100 < u64::from(p) {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        let unit = if self.load.random {
            ((u128::from(r) * u128::from(self.units)) >> 64) as u64
        } else {
            let u = self.cursor % self.units;
            self.cursor += 1;
            u
        };
        (op, unit * u64::from(self.nblocks))
    }

    #[inline]
    fn slot_buf(&self, slot: u16) -> *mut u8 {
        // SAFETY: slot < depth, so the slot's `size` bytes lie inside `bufs` (at least
        // depth * size bytes), which the job holds until it has finished.
        unsafe { self.base.add(slot as usize * self.size as usize) }
    }

    /// Submits new I/O while slots are free. Returns how many were submitted or queued.
    fn refill(&mut self) -> Result<usize, String> {
        let mut total = 0;
        // The burst's plan lives on the stack: (op, lba, slot).
        let mut plan = [(Op::Read, 0u64, 0u16); BURST];
        while !self.free.is_empty() {
            let n = self.free.len().min(BURST);
            let mut reads = 0;
            for p in plan.iter_mut().take(n) {
                let slot = self.free.pop().expect("n <= free slots");
                let (op, lba) = self.plan();
                reads += u32::from(op == Op::Read);
                *p = (op, lba, slot);
            }
            let mut io = Io {
                nblocks: self.nblocks,
                ..Io::default()
            };
            // Size the plug per hctx type of this device's I/O (reads may have their own queues).
            self.plug.begin();
            if reads > 0 {
                io.op = Op::Read;
                self.q.expect_n(&mut self.plug, &io, reads);
            }
            if (n as u32) > reads {
                io.op = Op::Write;
                self.q.expect_n(&mut self.plug, &io, n as u32 - reads);
            }
            let mut submitted = 0;
            let mut result = Ok(());
            for &(op, lba, slot) in &plan[..n] {
                io.op = op;
                io.lba = lba;
                // SAFETY: the slot's buffer is valid for `size` bytes and used by this one I/O
                // until its completion returns the slot to `free`.
                io.buf = unsafe { IoBuf::from_raw_parts(self.slot_buf(slot), self.size as u32) };
                io.token = u64::from(slot);
                match self.q.submit(&mut self.plug, &io) {
                    Ok(_) => submitted += 1,
                    Err(e) => {
                        if !e.is_busy() {
                            result = Err(format!("submit: {e}"));
                        }
                        break;
                    }
                }
            }
            // Give back the slots planned but not submitted.
            for &(_, _, slot) in &plan[submitted..n] {
                self.free.push(slot);
            }
            self.plug.finish();
            self.q.flush();
            total += submitted;
            result?;
            if submitted < n {
                break;
            }
        }
        Ok(total)
    }

    /// Reaps completions. Returns how many requests completed.
    fn reap(&mut self) -> usize {
        if self.q.outstanding() == 0 {
            return 0;
        }
        let Job {
            q,
            free,
            hist,
            ios,
            bytes,
            errors,
            size,
            ..
        } = self;
        // With mq-deadline, `submit_ns` is the insertion time: latency counts from there.
        q.poll(REAP, |rq| {
            hist.saturating_record(rq.complete_ns.saturating_sub(rq.submit_ns).max(1));
            *ios += 1;
            if rq.status.is_success() {
                *bytes += *size;
            } else {
                *errors += 1;
            }
            free.push(rq.token as u16);
        })
    }

    #[cold]
    fn finish(&mut self, ctx: &mut ReactorCtx, now: u64) {
        let Some(id) = self.poller.take() else {
            return;
        };
        ctx.unregister_poller(id);
        self.target
            .finish_live(&self.name, self.live_id, self.q.stats());
        let hist = std::mem::replace(&mut self.hist, Histogram::new(1).expect("histogram"));
        let elapsed_ns = now.saturating_sub(self.start_ns);
        let _ = self.tx.send(JobReport {
            name: self.name.clone(),
            core: self.core,
            ios: self.ios,
            bytes: self.bytes,
            errors: self.errors,
            elapsed_ns: elapsed_ns.max(1),
            hist,
            aborted: self.aborted,
            error: self.error.take(),
            bufs: self.bufs.take(),
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
