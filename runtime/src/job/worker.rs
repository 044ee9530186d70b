//! One core's worker: its (core, device) jobs driven from one reactor poller, one plug shared
//! by the jobs.
//!
//! A poller turn:
//! 1. before the timing's go: wait (idle);
//! 2. from the measure start: forget the warm-up, begin measuring;
//! 3. decide to stop: the run's end, the fill done, the hooks' abort, a failure (a device
//!    that failed every I/O for a while is one);
//! 4. per job: reap one completion batch, then (unless stopping) refill in bursts;
//! 5. hand the running totals to the hooks;
//! 6. stopping and every queue drained: report through the hooks and unregister.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use pmio::plug::Plug;
use pmio_reactors::{PollerId, PollerResult, ReactorCtx, ReactorStats};

use super::error::JobError;
use super::hooks::Hooks;
use super::report::WorkerReport;
use super::spec::{JobSpec, Phase, Timing};
use super::state::{Job, seed};
use super::stats::Counts;

/// How a worker runs.
pub struct WorkerOptions {
    pub phase: Phase,
    /// When to measure and stop, shared with the thread that says go.
    pub timing: Arc<Timing>,
    /// The poller's name in the reactor's poller list. Default: `job`.
    pub poller_name: &'static str,
}

impl WorkerOptions {
    /// Options for `phase` on `timing`, with the default poller name.
    pub fn new(phase: Phase, timing: Arc<Timing>) -> WorkerOptions {
        WorkerOptions {
            phase,
            timing,
            poller_name: "job",
        }
    }
}

/// One core's worker (see the module doc). Lives inside its poller.
pub struct Worker<H: Hooks> {
    core: u32,
    phase: Phase,
    jobs: Vec<Job>,
    plug: Plug,
    timing: Arc<Timing>,
    counts: Counts,
    measure_start: u64,
    /// 0 until go.
    end: u64,
    measuring: bool,
    stopping: bool,
    aborted: bool,
    start_stats: Option<ReactorStats>,
    start_ns: u64,
    error: Option<JobError>,
    hooks: H,
    poller: Rc<Cell<Option<PollerId>>>,
}

impl<H: Hooks> Worker<H> {
    /// Opens every job's queue and buffers on this reactor, tells the hooks, and registers
    /// the worker's poller. It reports once, through [`Hooks::finished`], when its jobs have
    /// drained; on an error here nothing runs and nothing is reported.
    pub fn start(
        ctx: &mut ReactorCtx,
        opts: WorkerOptions,
        specs: Vec<JobSpec>,
        mut hooks: H,
    ) -> Result<(), JobError> {
        let mut plug = Plug::default();
        let mut jobs = Vec::with_capacity(specs.len());
        for (i, s) in specs.into_iter().enumerate() {
            jobs.push(Job::open(s, opts.phase, &mut plug, seed(ctx.core(), i))?);
        }
        for (i, j) in jobs.iter().enumerate() {
            hooks.opened(i, &j.q);
        }
        let poller = Rc::new(Cell::new(None));
        let mut w = Worker {
            core: ctx.core(),
            phase: opts.phase,
            jobs,
            plug,
            timing: opts.timing,
            counts: Counts::default(),
            measure_start: 0,
            end: 0,
            measuring: opts.phase == Phase::Fill,
            stopping: false,
            aborted: false,
            start_stats: None,
            start_ns: 0,
            error: None,
            hooks,
            poller: Rc::clone(&poller),
        };
        let id = ctx.register_poller(opts.poller_name, move |ctx| w.step(ctx));
        poller.set(Some(id));
        Ok(())
    }

    /// One poller turn (the steps of the module doc).
    fn step(&mut self, ctx: &mut ReactorCtx) -> PollerResult {
        let now = ctx.now_ns();
        if self.end == 0 && !self.go(ctx, now) {
            // Nothing in flight yet; the go is an atomic store, not a wake-up.
            ctx.stay_awake();
            return PollerResult::Idle;
        }
        if !self.measuring && now >= self.measure_start {
            self.begin_measuring(ctx, now);
        }
        if !self.stopping {
            if self.phase == Phase::Run && now >= self.end {
                self.stopping = true;
            } else if self.hooks.abort() {
                self.stopping = true;
                self.aborted = true;
            }
        }
        let mut did = false;
        for j in &mut self.jobs {
            did |= j.reap(&mut self.counts, &mut self.hooks) > 0;
            if j.st.unusable.is_some() && self.error.is_none() {
                self.error = j.take_unusable();
            }
            if !self.stopping && self.error.is_none() {
                match j.refill(self.phase, &mut self.plug, &mut self.counts) {
                    Ok(n) => did |= n > 0,
                    Err(e) => self.error = Some(e),
                }
            }
        }
        self.hooks.turn(&self.counts);
        if self.phase == Phase::Fill && self.jobs.iter().all(Job::filled) {
            self.stopping = true;
        }
        if self.error.is_some() {
            self.stopping = true;
        }
        if self.stopping && self.jobs.iter().all(|j| j.q.outstanding() == 0) {
            self.finish(ctx, now);
            return PollerResult::Idle;
        }
        // Waiting for a device is not idleness: keep an interrupt-mode reactor awake.
        ctx.stay_awake();
        did.into()
    }

    /// Takes the timing's window once it has been given. Returns whether it has.
    #[cold]
    fn go(&mut self, ctx: &mut ReactorCtx, now: u64) -> bool {
        let Some((measure_start, end)) = self.timing.window() else {
            return false;
        };
        self.end = end;
        self.measure_start = measure_start;
        self.start_ns = now;
        if self.phase == Phase::Fill {
            self.start_stats = ctx.handle().stats(self.core);
        }
        true
    }

    #[cold]
    fn begin_measuring(&mut self, ctx: &mut ReactorCtx, now: u64) {
        self.measuring = true;
        self.start_ns = now;
        self.start_stats = ctx.handle().stats(self.core);
        for j in &mut self.jobs {
            j.begin_measuring();
        }
    }

    #[cold]
    fn finish(&mut self, ctx: &mut ReactorCtx, now: u64) {
        let Some(id) = self.poller.take() else {
            return; // already finished
        };
        ctx.unregister_poller(id);
        log::debug!("core {}: plug {:?}", self.core, self.plug.stats());
        let busy_pct = match (self.start_stats, ctx.handle().stats(self.core)) {
            (Some(a), Some(b)) => b.since(&a).busy_pct(),
            _ => 0.0,
        };
        let report = WorkerReport {
            core: self.core,
            jobs: self.jobs.iter_mut().map(Job::take_result).collect(),
            busy_pct,
            measure_start_ns: self.start_ns,
            end_ns: self.end,
            drained_ns: now,
            aborted: self.aborted,
            error: self.error.take(),
        };
        self.hooks.finished(report);
    }
}
