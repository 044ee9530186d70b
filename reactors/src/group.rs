//! A group of reactors: start one pinned thread per core, send messages to them, run
//! closures on all of them, read their stats, stop and join them.

use std::cell::Cell;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::coremask::CoreMask;
use crate::error::ReactorError;
use crate::inbox::{Inbox, StopFlag};
use crate::reactor::{Message, Reactor, ReactorConfig, ReactorCtx};
use crate::stats::{ReactorStats, StatsCell};
use crate::sys;

/// How to run a group of reactors (SPDK-style options struct; `Default` documents defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReactorsOptions {
    /// Most messages run per loop turn before pollers get their turn (default 64; SPDK
    /// runs 8 events per turn). Must be ≥ 1.
    pub msg_batch: usize,
    /// Most tasks ([`ReactorCtx::spawn`]) polled per loop turn before pollers get their turn
    /// (default 64, as `msg_batch`); each task is polled at most once a turn whatever the
    /// budget. Must be ≥ 1.
    pub task_budget: usize,
    /// Interrupt mode: a reactor whose turns stayed idle for this long sleeps on its eventfd
    /// until a message, a stop request, a watched fd ([`ReactorCtx::watch_fd`]) or its next
    /// timed poller. `None` (default) = busy polling, what `pmio-perf` wants. Active pollers
    /// do not run while the reactor sleeps (see [`ReactorCtx::watch_fd`] and
    /// [`ReactorCtx::stay_awake`]). `Some(Duration::ZERO)` sleeps after any idle turn.
    pub interrupt_idle: Option<Duration>,
    /// Pin each reactor thread to its core with `sched_setaffinity` (default true). With
    /// pinning, every core of the mask must be available to the process.
    pub pin_threads: bool,
    /// Thread name prefix; the core number is appended (default `"reactor_"`, giving
    /// `reactor_0`). At most 11 bytes, so that the name fits Linux's 15-byte limit.
    pub thread_name_prefix: String,
    /// Stack size of reactor threads in bytes (default `None` = Rust's default, 2 MiB).
    pub stack_size: Option<usize>,
}

impl Default for ReactorsOptions {
    fn default() -> ReactorsOptions {
        ReactorsOptions {
            msg_batch: 64,
            task_budget: 64,
            interrupt_idle: None,
            pin_threads: true,
            thread_name_prefix: "reactor_".to_string(),
            stack_size: None,
        }
    }
}

impl ReactorsOptions {
    /// Checks every field (done once by [`Reactors::start`]).
    pub fn validate(&self) -> Result<(), ReactorError> {
        let bad = |name, reason: &str| {
            Err(ReactorError::InvalidOption {
                name,
                reason: reason.to_string(),
            })
        };
        if self.msg_batch == 0 || self.msg_batch > 1 << 20 {
            return bad("msg_batch", "must be between 1 and 1048576");
        }
        if self.task_budget == 0 || self.task_budget > 1 << 20 {
            return bad("task_budget", "must be between 1 and 1048576");
        }
        if self.thread_name_prefix.len() > 11 || self.thread_name_prefix.contains('\0') {
            return bad(
                "thread_name_prefix",
                "must be at most 11 bytes without NUL (Linux thread names have 15)",
            );
        }
        if let Some(s) = self.stack_size
            && s < 64 * 1024
        {
            return bad("stack_size", "must be at least 64 KiB");
        }
        Ok(())
    }
}

/// A value on its own pair of cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub T);

/// The part of a reactor other threads touch.
#[repr(align(128))]
pub(crate) struct ReactorShared {
    pub core: u32,
    /// Messages, the sleep/wake handshake and stop admission (the lock-free part).
    pub inbox: Inbox<Message>,
    /// Set if the reactor thread panicked.
    pub panicked: AtomicBool,
    /// Interrupt mode: idle time before sleeping, ns; `u64::MAX` = busy polling. Read by
    /// the reactor on idle turns only.
    interrupt_idle_ns: Padded<AtomicU64>,
    pub stats: StatsCell,
}

impl ReactorShared {
    #[inline]
    pub(crate) fn interrupt_idle_ns(&self) -> u64 {
        self.interrupt_idle_ns.0.load(Ordering::Relaxed)
    }
}

/// `None` → `u64::MAX` (busy polling); durations saturate just below it.
fn idle_to_ns(idle: Option<Duration>) -> u64 {
    match idle {
        None => u64::MAX,
        Some(d) => u64::try_from(d.as_nanos())
            .unwrap_or(u64::MAX - 1)
            .min(u64::MAX - 1),
    }
}

static NEXT_GROUP_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (group id, core) of the reactor running on this thread.
    static CURRENT: Cell<Option<(u64, u32)>> = const { Cell::new(None) };
}

/// The core of the reactor running on the calling thread, or `None` off reactors.
pub fn current_core() -> Option<u32> {
    CURRENT.with(|c| c.get()).map(|(_, core)| core)
}

/// State shared by a group's reactors and handles.
pub(crate) struct Shared {
    id: u64,
    mask: CoreMask,
    slots: Box<[ReactorShared]>,
    /// core → index into `slots`, `u32::MAX` for cores without a reactor.
    index_of: Box<[u32]>,
    stop: Padded<StopFlag>,
    stop_requested: Mutex<bool>,
    stop_cv: Condvar,
}

impl Shared {
    #[inline]
    pub(crate) fn slot(&self, index: usize) -> &ReactorShared {
        &self.slots[index]
    }

    /// The state of a group on `mask` (an inbox and eventfd per core), no thread started.
    pub(crate) fn new(
        mask: CoreMask,
        interrupt_idle: Option<Duration>,
    ) -> Result<Shared, ReactorError> {
        let mut slots = Vec::with_capacity(mask.len());
        for &core in mask.cores() {
            let inbox = Inbox::new().map_err(|source| ReactorError::EventFd { core, source })?;
            slots.push(ReactorShared {
                core,
                inbox,
                panicked: AtomicBool::new(false),
                interrupt_idle_ns: Padded(AtomicU64::new(idle_to_ns(interrupt_idle))),
                stats: StatsCell::default(),
            });
        }
        let mut index_of = vec![u32::MAX; mask.last() as usize + 1].into_boxed_slice();
        for (i, &core) in mask.cores().iter().enumerate() {
            index_of[core as usize] = i as u32;
        }
        Ok(Shared {
            id: NEXT_GROUP_ID.fetch_add(1, Ordering::Relaxed),
            mask,
            slots: slots.into_boxed_slice(),
            index_of,
            stop: Padded(StopFlag::new()),
            stop_requested: Mutex::new(false),
            stop_cv: Condvar::new(),
        })
    }

    /// The group's unique id (tells groups apart in thread-locals).
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    pub(crate) fn stop_flag(&self) -> bool {
        self.stop.0.is_set()
    }

    /// The group's stop flag (for the reactor's pre-sleep check and senders).
    #[inline]
    pub(crate) fn stop(&self) -> &StopFlag {
        &self.stop.0
    }

    /// The index of `core`'s reactor.
    pub(crate) fn index(&self, core: u32) -> Result<usize, ReactorError> {
        match self.index_of.get(core as usize) {
            Some(&i) if i != u32::MAX => Ok(i as usize),
            _ => Err(ReactorError::UnknownCore {
                core,
                mask: self.mask.to_list(),
            }),
        }
    }

    fn request_stop(&self) {
        self.stop.0.request(self.slots.iter().map(|s| &s.inbox));
        let mut requested = self
            .stop_requested
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *requested = true;
        self.stop_cv.notify_all();
    }

    /// Fails with [`ReactorError::WouldDeadlock`] on a reactor thread of this group (a blocking
    /// call there would wait for itself).
    pub(crate) fn check_not_own_reactor(&self) -> Result<(), ReactorError> {
        match CURRENT.with(|c| c.get()) {
            Some((id, core)) if id == self.id => Err(ReactorError::WouldDeadlock { core }),
            _ => Ok(()),
        }
    }
}

/// A cheap, cloneable, `Send + Sync` handle to a reactor group: send messages, run closures,
/// read stats, request stop. Usable from reactors and from other threads (an RPC thread).
#[derive(Clone)]
pub struct ReactorsHandle {
    shared: Arc<Shared>,
}

impl ReactorsHandle {
    pub(crate) fn from_shared(shared: Arc<Shared>) -> ReactorsHandle {
        ReactorsHandle { shared }
    }

    /// The group's core mask.
    pub fn mask(&self) -> &CoreMask {
        &self.shared.mask
    }

    /// The group's cores, ascending (reactor index order).
    pub fn cores(&self) -> &[u32] {
        self.shared.mask.cores()
    }

    /// Queues `f` to run on the reactor of `core`.
    ///
    /// Messages from one sender (one thread) to one reactor run in the order sent. Ok means
    /// the message will run exactly once, even if the group is stopped right after. Fails
    /// with [`ReactorError::UnknownCore`] or, once stop was requested or the reactor
    /// panicked, [`ReactorError::Stopped`] (the closure is dropped unrun). Never blocks; the
    /// eventfd is written only when the target reactor sleeps (interrupt mode).
    pub fn send<F>(&self, core: u32, f: F) -> Result<(), ReactorError>
    where
        F: FnOnce(&mut ReactorCtx) + Send + 'static,
    {
        self.send_boxed(core, Box::new(f))
    }

    /// [`ReactorsHandle::send`] for an already boxed message.
    pub fn send_boxed(&self, core: u32, msg: Message) -> Result<(), ReactorError> {
        let slot = self.shared.slot(self.shared.index(core)?);
        // On refusal the closure is dropped here, unrun.
        slot.inbox
            .push(msg, self.shared.stop())
            .map_err(|_| ReactorError::Stopped { core })
    }

    /// Runs `f` on the reactor of `core` and blocks the caller until it returns its result.
    /// For setup and control paths, not for reactors: called on a reactor of this group it
    /// fails with [`ReactorError::WouldDeadlock`].
    pub fn run_on<T, F>(&self, core: u32, f: F) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: FnOnce(&mut ReactorCtx) -> T + Send + 'static,
    {
        self.check_not_own_reactor()?;
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(core, move |ctx| {
            let _ = tx.send(f(ctx));
        })?;
        rx.recv().map_err(|_| ReactorError::Panicked { core })
    }

    /// Runs `f` on every reactor and blocks until all have returned; results in core order
    /// ([`ReactorsHandle::cores`]). Fails like [`ReactorsHandle::run_on`].
    pub fn run_on_all<T, F>(&self, f: F) -> Result<Vec<T>, ReactorError>
    where
        T: Send + 'static,
        F: Fn(&mut ReactorCtx) -> T + Send + Sync + 'static,
    {
        self.check_not_own_reactor()?;
        let f = Arc::new(f);
        let cores = self.cores();
        let (tx, rx) = mpsc::channel();
        for (i, &core) in cores.iter().enumerate() {
            let f = Arc::clone(&f);
            let tx = tx.clone();
            self.send(core, move |ctx| {
                let _ = tx.send((i, f(ctx)));
            })?;
        }
        drop(tx);
        let mut out: Vec<Option<T>> = cores.iter().map(|_| None).collect();
        for _ in 0..cores.len() {
            match rx.recv() {
                Ok((i, v)) => out[i] = Some(v),
                Err(_) => {
                    let missing = out.iter().position(Option::is_none).unwrap_or(0);
                    return Err(ReactorError::Panicked {
                        core: cores[missing],
                    });
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The stats of the reactor on `core` (`None` if the group has no such reactor).
    pub fn stats(&self, core: u32) -> Option<ReactorStats> {
        let i = self.shared.index(core).ok()?;
        let slot = self.shared.slot(i);
        Some(slot.stats.snapshot(core, slot.inbox.is_sleeping()))
    }

    /// The stats of every reactor, in core order.
    pub fn all_stats(&self) -> Vec<ReactorStats> {
        self.shared
            .slots
            .iter()
            .map(|s| s.stats.snapshot(s.core, s.inbox.is_sleeping()))
            .collect()
    }

    /// Switches the reactor on `core` to interrupt mode (sleep after `Some(idle)` of idle
    /// turns) or to busy polling (`None`) at run time, as SPDK's
    /// `framework_set_reactor_interrupt_mode` / a scheduler would. Takes effect on its next turn.
    pub fn set_interrupt_idle(
        &self,
        core: u32,
        idle: Option<Duration>,
    ) -> Result<(), ReactorError> {
        let slot = self.shared.slot(self.shared.index(core)?);
        slot.interrupt_idle_ns
            .0
            .store(idle_to_ns(idle), Ordering::Relaxed);
        slot.inbox.notify();
        Ok(())
    }

    /// The interrupt-mode idle time of the reactor on `core` (`None` = busy polling, or no
    /// such reactor).
    pub fn interrupt_idle(&self, core: u32) -> Option<Duration> {
        let i = self.shared.index(core).ok()?;
        match self.shared.slot(i).interrupt_idle_ns() {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Whether the reactor on `core` is asleep on its eventfd right now (interrupt mode).
    pub fn is_sleeping(&self, core: u32) -> bool {
        self.shared
            .index(core)
            .is_ok_and(|i| self.shared.slot(i).inbox.is_sleeping())
    }

    /// Asks every reactor to stop (non-blocking, callable from a reactor, e.g. by an RPC
    /// such as `spdk_kill_instance`). From now on sends fail with `Stopped`; each reactor
    /// runs the messages it already accepted, drops its tasks, pollers and locals, and exits.
    /// [`Reactors::wait`] returns once they have.
    pub fn request_stop(&self) {
        self.shared.request_stop();
    }

    /// Whether stop has been requested.
    pub fn is_stopping(&self) -> bool {
        self.shared.stop_flag()
    }

    fn check_not_own_reactor(&self) -> Result<(), ReactorError> {
        self.shared.check_not_own_reactor()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// A running group of reactors, one pinned thread per core of a [`CoreMask`].
///
/// Dereferences to its [`ReactorsHandle`] (`send`, `run_on_all`, `stats`, ...). Dropping it
/// stops and joins the reactors (as [`Reactors::stop`], logging a panic).
pub struct Reactors {
    handle: ReactorsHandle,
    threads: Vec<(u32, JoinHandle<()>)>,
}

impl Reactors {
    /// Starts one thread per core of `mask`, named `<prefix><core>` and pinned to its core,
    /// and returns once every thread is pinned and running its loop.
    pub fn start(mask: CoreMask, opts: ReactorsOptions) -> Result<Reactors, ReactorError> {
        opts.validate()?;
        // Calibrate the clock here, not on the first reactor turn.
        sys::now_ns();
        if opts.pin_threads {
            mask.check_available()?;
        }
        let shared = Arc::new(Shared::new(mask, opts.interrupt_idle)?);
        let cfg = ReactorConfig {
            msg_batch: opts.msg_batch,
            task_budget: opts.task_budget,
        };
        let mut reactors = Reactors {
            handle: ReactorsHandle::from_shared(Arc::clone(&shared)),
            threads: Vec::with_capacity(shared.mask.len()),
        };
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), ReactorError>>();
        for (index, &core) in shared.mask.cores().iter().enumerate() {
            let mut builder =
                thread::Builder::new().name(format!("{}{core}", opts.thread_name_prefix));
            if let Some(size) = opts.stack_size {
                builder = builder.stack_size(size);
            }
            let shared = Arc::clone(&shared);
            let ready = ready_tx.clone();
            let pin = opts.pin_threads;
            match builder.spawn(move || reactor_main(shared, index, cfg, pin, ready)) {
                Ok(join) => reactors.threads.push((core, join)),
                Err(source) => {
                    // Dropping `reactors` stops and joins the threads already started.
                    return Err(ReactorError::Spawn { core, source });
                }
            }
        }
        drop(ready_tx);
        for _ in 0..reactors.threads.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    let core = shared
                        .slots
                        .iter()
                        .find(|s| s.panicked.load(Ordering::SeqCst))
                        .map_or(shared.mask.first(), |s| s.core);
                    return Err(ReactorError::Panicked { core });
                }
            }
        }
        log::info!(
            "started {} reactor(s) on cores {} ({}, clock {})",
            shared.mask.len(),
            shared.mask,
            match opts.interrupt_idle {
                None => "busy polling".to_string(),
                Some(d) => format!("interrupt mode after {d:?} idle"),
            },
            sys::clock_source()
        );
        Ok(reactors)
    }

    /// A cloneable handle to this group (for other threads and for reactors).
    pub fn handle(&self) -> ReactorsHandle {
        self.handle.clone()
    }

    /// Requests stop and joins every reactor. Messages accepted before (every `send` that
    /// returned Ok) have all run when this returns; unfinished tasks, pollers and
    /// reactor-local values have been dropped on their reactor threads. Returns each reactor's final stats, or
    /// [`ReactorError::Panicked`] naming the first reactor that panicked.
    pub fn stop(mut self) -> Result<Vec<ReactorStats>, ReactorError> {
        self.handle.request_stop();
        self.join_all()
    }

    /// Blocks until someone calls [`ReactorsHandle::request_stop`] (a reactor, an RPC thread,
    /// a signal handler thread) or a reactor panics, then joins like [`Reactors::stop`].
    pub fn wait(mut self) -> Result<Vec<ReactorStats>, ReactorError> {
        let shared = &self.handle.shared;
        let mut requested = shared
            .stop_requested
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while !*requested {
            requested = shared
                .stop_cv
                .wait(requested)
                .unwrap_or_else(|e| e.into_inner());
        }
        drop(requested);
        self.join_all()
    }

    fn join_all(&mut self) -> Result<Vec<ReactorStats>, ReactorError> {
        let mut first_panic = None;
        let own = CURRENT
            .with(|c| c.get())
            .filter(|&(id, _)| id == self.handle.shared.id)
            .map(|(_, core)| core);
        for (core, join) in self.threads.drain(..) {
            if own == Some(core) {
                // Stopped from one of its own reactors (the group was moved into a message):
                // that thread exits when the current message returns; it cannot join itself.
                log::warn!("reactors stopped from the reactor on core {core}; not joining it");
                continue;
            }
            if join.join().is_err() && first_panic.is_none() {
                first_panic = Some(core);
            }
        }
        match first_panic {
            Some(core) => Err(ReactorError::Panicked { core }),
            None => Ok(self.handle.all_stats()),
        }
    }
}

impl Deref for Reactors {
    type Target = ReactorsHandle;

    fn deref(&self) -> &ReactorsHandle {
        &self.handle
    }
}

impl Drop for Reactors {
    fn drop(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        self.handle.request_stop();
        if let Err(e) = self.join_all() {
            log::error!("stopping reactors: {e}");
        }
    }
}

/// On a panicking reactor: refuse further messages, drop the queued ones (their reply
/// channels disconnect, so blocked `run_on` callers get `Panicked`), and stop the group.
struct PanicGuard {
    shared: Arc<Shared>,
    index: usize,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if !thread::panicking() {
            return;
        }
        let slot = self.shared.slot(self.index);
        slot.panicked.store(true, Ordering::SeqCst);
        slot.inbox.close_and_quiesce();
        let mut dropped = 0usize;
        while let Some(msg) = slot.inbox.pop() {
            drop(msg);
            dropped += 1;
        }
        log::error!(
            "reactor on core {} panicked; {dropped} queued message(s) dropped; stopping all reactors",
            slot.core
        );
        self.shared.request_stop();
    }
}

fn reactor_main(
    shared: Arc<Shared>,
    index: usize,
    cfg: ReactorConfig,
    pin: bool,
    ready: mpsc::Sender<Result<(), ReactorError>>,
) {
    let _guard = PanicGuard {
        shared: Arc::clone(&shared),
        index,
    };
    let core = shared.slot(index).core;
    if pin && let Err(source) = sys::pin_current_thread(core) {
        shared.slot(index).inbox.close_and_quiesce();
        let _ = ready.send(Err(ReactorError::Pin { core, source }));
        return;
    }
    CURRENT.with(|c| c.set(Some((shared.id, core))));
    let mut reactor = Reactor::new(Arc::clone(&shared), index, cfg);
    let _ = ready.send(Ok(()));
    drop(ready);
    reactor.run();
    CURRENT.with(|c| c.set(None));
}
