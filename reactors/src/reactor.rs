//! One reactor: its loop, its pollers, and the context messages and pollers run with.
//!
//! A turn: run up to `msg_batch` messages, run the task step (timers, woken tasks, up to
//! `task_budget` polls: [`crate::exec`]), run every active poller, run the timed pollers that
//! are due, charge the turn's time to busy (something did work) or idle, and in interrupt mode
//! sleep on the eventfd and the watched fds once idle long enough (never with tasks queued).
//! The clock is read once per turn.

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ReactorError;
use crate::exec::{self, Executor};
use crate::fdwatch::{FdInterest, FdWatch, FdWatches};
use crate::group::{ReactorShared, ReactorsHandle, Shared};
use crate::stats::LocalStats;
use crate::sys;

/// What a poller reports after a run: did it do work?
///
/// Busy turns count as busy time in [`crate::ReactorStats`] and keep an interrupt-mode
/// reactor awake. A `bool` converts (`true` = busy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollerResult {
    /// Nothing to do this time.
    Idle,
    /// Did some work.
    Busy,
}

impl From<bool> for PollerResult {
    fn from(busy: bool) -> PollerResult {
        if busy {
            PollerResult::Busy
        } else {
            PollerResult::Idle
        }
    }
}

/// Identifies a poller on its reactor (unique per reactor for the reactor's lifetime).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PollerId(u64);

impl PollerId {
    /// The raw number.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// A registered poller as listed by [`ReactorCtx::pollers`] (SPDK's `thread_get_pollers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PollerInfo {
    /// Its id.
    pub id: PollerId,
    /// The name given at registration.
    pub name: String,
    /// `None` for an active poller (every turn), else the timed poller's period.
    pub period: Option<Duration>,
    /// Times it ran.
    pub runs: u64,
    /// Times it reported [`PollerResult::Busy`].
    pub busy_runs: u64,
}

/// Run counters shared between a poller and its registry entry (plain cells: one thread).
#[derive(Debug, Default)]
struct PollerCounters {
    runs: Cell<u64>,
    busy_runs: Cell<u64>,
}

impl PollerCounters {
    #[inline]
    fn count(&self, result: PollerResult) -> bool {
        self.runs.set(self.runs.get() + 1);
        let busy = result == PollerResult::Busy;
        self.busy_runs.set(self.busy_runs.get() + busy as u64);
        busy
    }
}

/// The registry entry behind [`PollerInfo`].
struct Registered {
    id: PollerId,
    name: String,
    period: Option<Duration>,
    counters: Rc<PollerCounters>,
}

/// A message: a closure run once on the target reactor.
pub type Message = Box<dyn FnOnce(&mut ReactorCtx) + Send>;

type PollerFn = Box<dyn FnMut(&mut ReactorCtx) -> PollerResult>;

/// A registered poller. `period_ns == 0` marks an active poller.
struct Poller {
    id: PollerId,
    period_ns: u64,
    next_due: u64,
    counters: Rc<PollerCounters>,
    f: PollerFn,
}

impl Poller {
    /// Runs the poller once; returns whether it was busy.
    #[inline]
    fn run(&mut self, ctx: &mut ReactorCtx) -> bool {
        let result = (self.f)(ctx);
        self.counters.count(result)
    }
}

/// What messages and pollers see of their reactor: its core, the turn's clock, poller
/// registration, message sending, and typed reactor-local state.
///
/// Only ever handed out by `&mut` on the reactor's own thread; it is not `Send`, so
/// reactor-local state may be `!Send` (a device queue handle, an `Rc`).
pub struct ReactorCtx {
    core: u32,
    index: usize,
    handle: ReactorsHandle,
    now: u64,
    next_poller_id: u64,
    pending_add: Vec<Poller>,
    pending_remove: Vec<PollerId>,
    pollers: Vec<Registered>,
    locals: HashMap<TypeId, Box<dyn Any>>,
    fds: FdWatches,
    exec: Rc<Executor>,
    stay_awake: bool,
    stopping: bool,
}

impl ReactorCtx {
    /// The core this reactor runs on.
    pub fn core(&self) -> u32 {
        self.core
    }

    /// This reactor's position in the group's core mask (0-based).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Monotonic time in ns ([`crate::now_ns`]) read at the start of this loop turn. Pollers
    /// can use it instead of reading the clock themselves (batched clock reads).
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// A handle to the whole group (to send to any reactor, read stats, request stop).
    pub fn handle(&self) -> &ReactorsHandle {
        &self.handle
    }

    /// Sends a message to the reactor on `core` (this one included; it then runs on a later
    /// turn, after the messages already queued). See [`ReactorsHandle::send`].
    pub fn send<F>(&self, core: u32, f: F) -> Result<(), ReactorError>
    where
        F: FnOnce(&mut ReactorCtx) + Send + 'static,
    {
        self.handle.send(core, f)
    }

    /// Registers an active poller, run on every turn from the next poller pass on (when
    /// called from a message: this turn; from a poller: the next turn). The poller returns
    /// [`PollerResult`] or `bool` (busy).
    pub fn register_poller<F, R>(&mut self, name: &str, mut f: F) -> PollerId
    where
        F: FnMut(&mut ReactorCtx) -> R + 'static,
        R: Into<PollerResult>,
    {
        self.add_poller(name, 0, Box::new(move |ctx| f(ctx).into()))
    }

    /// Registers a timed poller run about every `period` (first run one period from now).
    /// A zero period registers an active poller.
    pub fn register_timed_poller<F, R>(
        &mut self,
        name: &str,
        period: Duration,
        mut f: F,
    ) -> PollerId
    where
        F: FnMut(&mut ReactorCtx) -> R + 'static,
        R: Into<PollerResult>,
    {
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        self.add_poller(name, period_ns, Box::new(move |ctx| f(ctx).into()))
    }

    /// Unregisters a poller; it does not run again, even later in the current pass (a
    /// poller may unregister itself or others). It is dropped on this thread at the end of
    /// the current step. Returns false if the id is unknown or already unregistered.
    pub fn unregister_poller(&mut self, id: PollerId) -> bool {
        match self.pollers.iter().position(|p| p.id == id) {
            Some(pos) => {
                self.pollers.swap_remove(pos);
                self.pending_remove.push(id);
                true
            }
            None => false,
        }
    }

    /// The pollers currently registered on this reactor with their run counts (registration
    /// order not kept). Allocates: for control paths (RPC, tests).
    pub fn pollers(&self) -> Vec<PollerInfo> {
        self.pollers
            .iter()
            .map(|r| PollerInfo {
                id: r.id,
                name: r.name.clone(),
                period: r.period,
                runs: r.counters.runs.get(),
                busy_runs: r.counters.busy_runs.get(),
            })
            .collect()
    }

    /// The reactor-local value of type `T`, if one was stored.
    pub fn local<T: 'static>(&mut self) -> Option<&mut T> {
        self.locals
            .get_mut(&TypeId::of::<T>())
            .and_then(|b| b.downcast_mut::<T>())
    }

    /// The reactor-local value of type `T`, created by `init` if absent.
    pub fn local_or_insert_with<T: 'static>(&mut self, init: impl FnOnce() -> T) -> &mut T {
        let slot = self
            .locals
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(init()));
        match slot.downcast_mut::<T>() {
            Some(v) => v,
            None => unreachable!("locals are keyed by their own TypeId"),
        }
    }

    /// Stores a reactor-local value of type `T`, returning the previous one.
    pub fn set_local<T: 'static>(&mut self, value: T) -> Option<T> {
        self.locals
            .insert(TypeId::of::<T>(), Box::new(value))
            .and_then(|old| old.downcast::<T>().ok().map(|b| *b))
    }

    /// Removes and returns the reactor-local value of type `T`.
    pub fn take_local<T: 'static>(&mut self) -> Option<T> {
        self.locals
            .remove(&TypeId::of::<T>())
            .and_then(|old| old.downcast::<T>().ok().map(|b| *b))
    }

    /// Keeps an interrupt-mode reactor from going to sleep after this turn without counting
    /// the turn as busy: call it from a poller that is idle only because it waits for a
    /// device (I/O outstanding, completions not yet posted).
    pub fn stay_awake(&mut self) {
        self.stay_awake = true;
    }

    /// Watches `fd` (a socket, a pipe, an eventfd of a device): while this reactor sleeps in
    /// interrupt mode, `fd` becoming ready for `interest` wakes it, and its pollers then run as
    /// after any wake-up (SPDK's fd group). A poller idle because it waits for a socket watches
    /// the socket instead of calling [`ReactorCtx::stay_awake`]. Busy polling ignores watches.
    ///
    /// Readiness is level-triggered: the poller must consume what woke the reactor (read until
    /// `WouldBlock`, handle the hang-up) or change the interest, or the reactor wakes again at
    /// once. The fd is not owned: [`ReactorCtx::unwatch_fd`] it before closing it (a closed
    /// fd still watched is logged and no longer polled). Watching costs no system call; each
    /// sleep polls every watched fd (made for tens of fds). Watches end with the reactor.
    ///
    /// # Panics
    ///
    /// If `fd` is negative.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use std::os::fd::AsRawFd;
    /// use std::os::unix::net::UnixStream;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use pmio_reactors::{CoreMask, FdInterest, PollerResult, Reactors, ReactorsOptions};
    ///
    /// let mask = CoreMask::from_cores([CoreMask::available()?.first()])?;
    /// let opts = ReactorsOptions {
    ///     interrupt_idle: Some(Duration::from_millis(1)),
    ///     ..ReactorsOptions::default()
    /// };
    /// let reactors = Reactors::start(mask, opts)?;
    /// let (mut peer, mut sock) = UnixStream::pair()?;
    /// sock.set_nonblocking(true)?;
    /// let got = Arc::new(AtomicBool::new(false));
    /// let g = got.clone();
    /// reactors.run_on(reactors.cores()[0], move |ctx| {
    ///     // Sleeps between messages; a byte on `sock` wakes it and the poller reads it.
    ///     let watch = ctx.watch_fd(sock.as_raw_fd(), FdInterest::Read);
    ///     ctx.register_poller("conn", move |ctx| {
    ///         let mut buf = [0u8; 16];
    ///         match sock.read(&mut buf) {
    ///             Ok(0) => {
    ///                 ctx.unwatch_fd(watch); // hang-up: stop watching before `sock` drops
    ///                 PollerResult::Idle
    ///             }
    ///             Ok(_) => {
    ///                 g.store(true, Ordering::Release);
    ///                 PollerResult::Busy
    ///             }
    ///             Err(_) => PollerResult::Idle, // WouldBlock: nothing to read
    ///         }
    ///     });
    /// })?;
    /// peer.write_all(b"ping")?;
    /// while !got.load(Ordering::Acquire) {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// reactors.stop()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn watch_fd(&mut self, fd: RawFd, interest: FdInterest) -> FdWatch {
        self.fds.watch(fd, interest)
    }

    /// Changes what readiness of a watched fd wakes the reactor, e.g. `ReadWrite` while a
    /// connection has output queued and `Read` once it is sent (a socket is almost always
    /// writable). No system call. Returns false if `watch` is unknown or already unwatched.
    pub fn set_fd_interest(&mut self, watch: FdWatch, interest: FdInterest) -> bool {
        self.fds.set_interest(watch, interest)
    }

    /// Stops watching; the fd no longer wakes the reactor from its next sleep on. Returns false
    /// if `watch` is unknown or already unwatched.
    pub fn unwatch_fd(&mut self, watch: FdWatch) -> bool {
        self.fds.unwatch(watch)
    }

    /// Number of fds this reactor watches.
    pub fn watched_fds(&self) -> usize {
        self.fds.len()
    }

    /// True while the reactor runs its last messages before exiting (pollers no longer run
    /// and sends to it are refused).
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    fn add_poller(&mut self, name: &str, period_ns: u64, f: PollerFn) -> PollerId {
        let id = PollerId(self.next_poller_id);
        self.next_poller_id += 1;
        let counters = Rc::new(PollerCounters::default());
        self.pollers.push(Registered {
            id,
            name: name.to_string(),
            period: (period_ns > 0).then(|| Duration::from_nanos(period_ns)),
            counters: Rc::clone(&counters),
        });
        self.pending_add.push(Poller {
            id,
            period_ns,
            next_due: 0,
            counters,
            f,
        });
        id
    }

    /// This reactor's executor.
    pub(crate) fn executor(&self) -> &Rc<Executor> {
        &self.exec
    }

    fn has_pending(&self) -> bool {
        !self.pending_add.is_empty() || !self.pending_remove.is_empty()
    }

    /// Whether `id` was unregistered during the current step (skip it).
    #[inline]
    fn is_removed(&self, id: PollerId) -> bool {
        !self.pending_remove.is_empty() && self.pending_remove.contains(&id)
    }
}

/// Per-reactor settings taken from [`crate::ReactorsOptions`], validated.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReactorConfig {
    pub msg_batch: usize,
    pub task_budget: usize,
}

/// A reactor's thread-owned state.
pub(crate) struct Reactor {
    shared: Arc<Shared>,
    ctx: ReactorCtx,
    active: Vec<Poller>,
    timed: Vec<Poller>,
    /// Earliest `next_due` among timed pollers (`u64::MAX` when none).
    next_timed_due: u64,
    cfg: ReactorConfig,
    stats: LocalStats,
}

impl Reactor {
    pub(crate) fn new(shared: Arc<Shared>, index: usize, cfg: ReactorConfig) -> Reactor {
        let core = shared.slot(index).core;
        let handle = ReactorsHandle::from_shared(Arc::clone(&shared));
        let now = sys::now_ns();
        let executor = Rc::new(Executor::new(Arc::clone(&shared), index, now));
        exec::install(Rc::clone(&executor));
        Reactor {
            shared,
            ctx: ReactorCtx {
                core,
                index,
                handle,
                now,
                next_poller_id: 1,
                pending_add: Vec::new(),
                pending_remove: Vec::new(),
                pollers: Vec::new(),
                locals: HashMap::new(),
                fds: FdWatches::new(),
                exec: executor,
                stay_awake: false,
                stopping: false,
            },
            active: Vec::new(),
            timed: Vec::new(),
            next_timed_due: u64::MAX,
            cfg,
            stats: LocalStats::default(),
        }
    }

    /// Runs the loop until the group is asked to stop, then drains the inbox and exits.
    pub(crate) fn run(&mut self) {
        let shared = Arc::clone(&self.shared);
        let slot = shared.slot(self.ctx.index);
        let mut turn_start = sys::now_ns();
        let mut idle_since = turn_start;
        while !shared.stop_flag() {
            let busy = self.turn(slot, turn_start);
            let mut now = sys::now_ns();
            let spent = now.saturating_sub(turn_start);
            if busy {
                self.stats.busy_ns += spent;
            } else {
                self.stats.idle_ns += spent;
            }
            self.stats.turns += 1;
            if busy || self.ctx.stay_awake || self.ctx.exec.has_runnable() {
                idle_since = now;
            } else if now.saturating_sub(idle_since) >= slot.interrupt_idle_ns() {
                now = self.sleep(slot, &shared, now);
            }
            self.publish(slot);
            turn_start = now;
        }
        self.shutdown(slot);
    }

    /// One loop turn; returns whether anything did work.
    #[inline]
    fn turn(&mut self, slot: &ReactorShared, now: u64) -> bool {
        self.ctx.now = now;
        self.ctx.stay_awake = false;
        let mut busy = false;

        let mut ran = 0;
        while ran < self.cfg.msg_batch {
            let Some(msg) = slot.inbox.pop() else { break };
            msg(&mut self.ctx);
            ran += 1;
        }
        if ran > 0 {
            busy = true;
            self.stats.messages += ran as u64;
        }
        if self.ctx.has_pending() {
            self.apply_pending(now);
        }

        if self.ctx.exec.has_work(&slot.inbox, now) {
            busy |= self.run_tasks(slot, now);
        }

        for p in self.active.iter_mut() {
            if self.ctx.is_removed(p.id) {
                continue;
            }
            busy |= p.run(&mut self.ctx);
        }
        if now >= self.next_timed_due {
            busy |= self.run_timed(now);
        }
        if self.ctx.has_pending() {
            self.apply_pending(now);
        }
        busy
    }

    /// The task step; returns whether a task was polled.
    fn run_tasks(&mut self, slot: &ReactorShared, now: u64) -> bool {
        let exec = &self.ctx.exec;
        let polls = exec.run(&slot.inbox, now, self.cfg.task_budget);
        self.stats.task_polls += polls;
        self.stats.tasks = exec.task_count() as u32;
        polls > 0
    }

    /// Runs the timed pollers due at `now` and schedules their next run one period after the
    /// previous due time (or one period from now when that is already past: no bursts).
    #[cold]
    fn run_timed(&mut self, now: u64) -> bool {
        let mut busy = false;
        let mut next = u64::MAX;
        for p in self.timed.iter_mut() {
            if p.next_due <= now && !self.ctx.is_removed(p.id) {
                busy |= p.run(&mut self.ctx);
                p.next_due = p.next_due.saturating_add(p.period_ns);
                if p.next_due <= now {
                    p.next_due = now.saturating_add(p.period_ns);
                }
            }
            next = next.min(p.next_due);
        }
        self.next_timed_due = next;
        busy
    }

    /// Moves pollers registered or unregistered during the last step into or out of the lists.
    #[cold]
    fn apply_pending(&mut self, now: u64) {
        for mut p in self.ctx.pending_add.drain(..) {
            if p.period_ns == 0 {
                self.active.push(p);
            } else {
                p.next_due = now.saturating_add(p.period_ns);
                self.next_timed_due = self.next_timed_due.min(p.next_due);
                self.timed.push(p);
            }
        }
        if !self.ctx.pending_remove.is_empty() {
            let removed = std::mem::take(&mut self.ctx.pending_remove);
            self.active.retain(|p| !removed.contains(&p.id));
            self.timed.retain(|p| !removed.contains(&p.id));
            self.next_timed_due = self
                .timed
                .iter()
                .map(|p| p.next_due)
                .min()
                .unwrap_or(u64::MAX);
            // Reuse the allocation.
            self.ctx.pending_remove = removed;
            self.ctx.pending_remove.clear();
        }
        self.stats.active_pollers = self.active.len() as u32;
        self.stats.timed_pollers = self.timed.len() as u32;
    }

    /// Interrupt mode: sleeps on the eventfd and the watched fds until a message, a stop
    /// request, a ready fd or the next timed poller. Returns the time after waking.
    #[cold]
    fn sleep(&mut self, slot: &ReactorShared, shared: &Shared, now: u64) -> u64 {
        let timeout = match self.next_timed_due.min(self.ctx.exec.next_timer()) {
            u64::MAX => None,
            due if due <= now => return now,
            due => Some(Duration::from_nanos(due - now)),
        };
        // Publish before waiting, so that stats read while asleep are current.
        let stats = &self.stats;
        let Some(woken) = slot
            .inbox
            .sleep(timeout, shared.stop(), &mut self.ctx.fds, || {
                slot.stats.publish(stats)
            })
        else {
            return now;
        };
        let woke = sys::now_ns();
        self.stats.sleep_ns += woke.saturating_sub(now);
        self.stats.wakeups += 1;
        self.stats.fd_wakeups += u64::from(woken.fds > 0);
        woke
    }

    /// Refuses new messages, runs every accepted one, drops tasks, pollers and locals here.
    fn shutdown(&mut self, slot: &ReactorShared) {
        self.ctx.stopping = true;
        slot.inbox.close_and_quiesce();
        while let Some(msg) = slot.inbox.pop() {
            self.ctx.now = sys::now_ns();
            msg(&mut self.ctx);
            self.stats.messages += 1;
        }
        // Tasks first: their destructors may still use pollers and locals.
        self.ctx.exec.shutdown();
        self.active.clear();
        self.timed.clear();
        self.ctx.pending_add.clear();
        self.ctx.pending_remove.clear();
        self.ctx.pollers.clear();
        self.ctx.locals.clear();
        self.ctx.fds.clear();
        // Tasks those destructors spawned, unpolled; then the executor leaves the thread.
        self.ctx.exec.shutdown();
        exec::uninstall();
        self.stats.tasks = 0;
        self.stats.active_pollers = 0;
        self.stats.timed_pollers = 0;
        self.publish(slot);
        log::debug!("reactor on core {} stopped", self.ctx.core);
    }

    #[inline]
    fn publish(&self, slot: &ReactorShared) {
        slot.stats.publish(&self.stats);
    }
}

impl Drop for Reactor {
    /// A reactor unwinding from a panic drops its tasks here, on its thread (after a normal
    /// stop there are none left).
    fn drop(&mut self) {
        self.ctx.exec.shutdown();
        exec::uninstall();
    }
}
