//! Async bdev I/O on the reactors: [`Bdev`] opens a [`pmio::aio::AioBdev`] on the reactor
//! that calls it and registers the handle's progress poller there.
//!
//! A reactor turn runs messages, then tasks, then pollers: the tasks of a turn submit into the
//! handle's plug, and its poller (`bdev_queue:NAME` in `thread_get_pollers`) then starts them
//! all with one doorbell, reaps completions and wakes their tasks, which run on the next turn.
//! While I/O is in flight the poller keeps an interrupt-mode reactor awake
//! ([`ReactorCtx::stay_awake`]): completions of a polled device have no fd to wake it.
//!
//! Devices are found by name in a registry: the process's ([`registry`]) for [`Bdev::open`],
//! any other with [`Bdev::open_in`].

use std::cell::{Cell, RefCell};
use std::ops::Deref;
use std::rc::{Rc, Weak};
use std::sync::{Arc, LazyLock};

use pmio::BlockDevice;
use pmio::aio::{AioBdev, AioOptions};
use pmio::bdev::{BdevError, Registry};
use pmio_reactors::{
    PollerId, PollerResult, ReactorCtx, ReactorError, ReactorsHandle, current_core,
};

/// The process's bdev registry, where [`Bdev::open`] looks devices up (SPDK's global bdev
/// list). Register devices here before opening them.
pub fn registry() -> &'static Registry {
    static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);
    &REGISTRY
}

/// Why a [`Bdev`] could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The block layer refused (no such device, queue open failed, ...).
    #[error(transparent)]
    Bdev(#[from] BdevError),
    /// Called off a reactor thread: a handle belongs to a reactor.
    #[error("bdev {0}: open it on a reactor (from a task, message or poller)")]
    NotOnReactor(String),
    /// The reactor is stopping: its progress poller cannot be registered.
    #[error("bdev {name}: {source}")]
    Reactor {
        name: String,
        #[source]
        source: ReactorError,
    },
}

/// A reactor's async handle on a block device: [`AioBdev`]'s futures (`read`, `write`,
/// `flush`, `write_zeroes`, `deallocate`) through `Deref`, driven by a poller on this reactor.
/// Cloning shares the handle; it is closed (after its in-flight I/O) when the last clone drops.
/// Not `Send`: open it on the reactor that uses it.
///
/// ```
/// use pmio::dma::DmaRegion;
/// use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
/// use pmio_runtime::Bdev;
///
/// let malloc = pmio_malloc::MallocDevice::new(pmio_malloc::MallocOptions {
///     name: "DocMalloc0".into(),
///     ..Default::default()
/// })?;
/// pmio_runtime::registry().register(malloc)?;
/// let core = CoreMask::available()?.first();
/// let reactors = Reactors::start(CoreMask::from_cores([core])?, ReactorsOptions::default())?;
/// let task = reactors.spawn_on(core, || async {
///     let bdev = Bdev::open("DocMalloc0")?;
///     let mut buf = DmaRegion::new(4096)?;
///     buf.as_mut_slice()[..5].copy_from_slice(b"hello");
///     let (res, buf) = bdev.write(buf, 8).await;
///     res?;
///     let (res, back) = bdev.read(DmaRegion::new(4096)?, 8).await;
///     res?;
///     Ok::<bool, Box<dyn std::error::Error + Send + Sync>>(back.as_slice() == buf.as_slice())
/// })?;
/// assert!(task.join()?.expect("I/O"));
/// reactors.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Bdev {
    aio: Rc<AioBdev>,
}

impl std::fmt::Debug for Bdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.aio.fmt(f)
    }
}

thread_local! {
    /// Handles [`Bdev::open`] gave out on this reactor, by name: one queue per reactor and
    /// device, shared by its tasks (SPDK's per-thread I/O channel).
    static OPEN: RefCell<Vec<(String, Weak<AioBdev>)>> = const { RefCell::new(Vec::new()) };
    /// Handles whose progress poller is not registered yet (the message that does it runs on
    /// the next turn: a task cannot reach its reactor's context, and an `Rc` cannot be sent).
    static UNPOLLED: RefCell<Vec<Weak<AioBdev>>> = const { RefCell::new(Vec::new()) };
}

impl Bdev {
    /// This reactor's handle on device `name` of the process [`registry`], opened with default
    /// options (128 requests in flight, no scheduler) on first use and shared afterwards.
    pub fn open(name: &str) -> Result<Bdev, OpenError> {
        let shared = OPEN.with_borrow_mut(|open| {
            open.retain(|(_, w)| w.strong_count() > 0);
            open.iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, w)| w.upgrade())
        });
        if let Some(aio) = shared {
            return Ok(Bdev { aio });
        }
        let bdev = Bdev::open_in(registry(), name, AioOptions::default())?;
        OPEN.with_borrow_mut(|open| open.push((name.to_string(), Rc::downgrade(&bdev.aio))));
        Ok(bdev)
    }

    /// A new handle (a queue of its own) on device `name` of `registry`, opened with `opts`
    /// on this reactor.
    pub fn open_in(registry: &Registry, name: &str, opts: AioOptions) -> Result<Bdev, OpenError> {
        Bdev::polled_here(name, || AioBdev::open_in(registry, name, opts))
    }

    /// A new handle (a queue of its own) on `dev`, registered anywhere or nowhere (a virtual
    /// bdev's member), opened with `opts` on this reactor.
    pub fn open_device(dev: Arc<dyn BlockDevice>, opts: AioOptions) -> Result<Bdev, OpenError> {
        let name = dev.info().name.clone();
        Bdev::polled_here(&name, || AioBdev::open(dev, opts))
    }

    /// Opens a handle with `open` on this reactor and has its progress poller registered.
    fn polled_here(
        name: &str,
        open: impl FnOnce() -> Result<AioBdev, BdevError>,
    ) -> Result<Bdev, OpenError> {
        let (Some(group), Some(core)) = (ReactorsHandle::current(), current_core()) else {
            return Err(OpenError::NotOnReactor(name.to_string()));
        };
        let aio = Rc::new(open()?);
        UNPOLLED.with_borrow_mut(|u| u.push(Rc::downgrade(&aio)));
        group
            .send(core, register_unpolled)
            .map_err(|source| OpenError::Reactor {
                name: name.to_string(),
                source,
            })?;
        Ok(Bdev { aio })
    }

    /// The handle under this one.
    pub fn aio(&self) -> &AioBdev {
        &self.aio
    }
}

impl Deref for Bdev {
    type Target = AioBdev;

    fn deref(&self) -> &AioBdev {
        &self.aio
    }
}

/// Registers the progress poller of every handle opened on this reactor since the last call
/// (and still open).
fn register_unpolled(ctx: &mut ReactorCtx) {
    for weak in UNPOLLED.take() {
        let Some(aio) = weak.upgrade() else {
            continue;
        };
        let id = Rc::new(Cell::new(None));
        let own_id = Rc::clone(&id);
        let name = format!("bdev_queue:{}", aio.name());
        drop(aio);
        let pid = ctx.register_poller(&name, move |ctx| progress_poller(ctx, &weak, &own_id));
        id.set(Some(pid));
    }
}

/// One turn of a handle's poller: progress, busy if anything moved; awake while I/O is in
/// flight; gone once the handle is closed.
#[inline]
fn progress_poller(
    ctx: &mut ReactorCtx,
    aio: &Weak<AioBdev>,
    id: &Cell<Option<PollerId>>,
) -> PollerResult {
    let Some(aio) = aio.upgrade() else {
        if let Some(id) = id.take() {
            ctx.unregister_poller(id);
        }
        return PollerResult::Idle;
    };
    if aio.progress().is_busy() {
        return PollerResult::Busy;
    }
    if aio.outstanding() > 0 {
        ctx.stay_awake();
    }
    PollerResult::Idle
}
