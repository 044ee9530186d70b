//! A task: its header, which wakers share (behind an `Arc`, on any thread) — which reactor owns
//! the task, the task's key there, the flags that keep it queued at most once — and its body
//! (the boxed future), which only the owning reactor's thread touches. The header holds the
//! body, and wakers are built from the header's address, so a wake and the poll after it touch
//! the header and the future only, not a slab slot and a task box as well.
//!
//! A wake on the owning reactor's thread pushes the header on the local run queue (plain loads
//! and stores on `local`, which only that thread touches); a wake from any other thread claims
//! `queued_remote` and goes through the reactor's inbox ([`crate::inbox::Inbox::push_wake`]),
//! which wakes the reactor if it sleeps.

use std::cell::UnsafeCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64 as LocalU64};
use std::task::{Context, Poll};

use super::executor;
use super::slab::Key;
use crate::error::ReactorError;
use crate::group::Shared;
use crate::inbox::Inbox;
use crate::inbox::sync::{AtomicBool, AtomicPtr, Ordering};
use crate::reactor::Message;

/// Where a task stands on its own reactor (`Header::local`).
mod local {
    /// Built (by `spawn_on`, on another thread) but not inserted yet: wakes are ignored, the
    /// insert queues the first poll.
    pub(super) const NEW: u8 = 0;
    /// Inserted, not on the run queue.
    pub(super) const IDLE: u8 = 1;
    /// On the run queue.
    pub(super) const QUEUED: u8 = 2;
    /// Finished (body dropped), not on the run queue: wakes are ignored.
    pub(super) const DONE: u8 = 3;
    /// Finished while on the run queue (it woke itself in its last poll): its slab entry stays
    /// until the queue hands it out, so a queued header is always alive.
    pub(super) const DONE_QUEUED: u8 = 4;
    /// Aborted (seen by the owner) while on the run queue, or queued for it: dropped, not
    /// polled, when the queue hands it out. The owner sees an abort once, as a wake (its own or
    /// a remote one), so a poll does not read the cross-thread `aborted` flag.
    pub(super) const ABORTED_QUEUED: u8 = 5;
}

/// Identifies an executor in one word, so a local wake compares one: its group's id above
/// [`ExecId::INDEX_BITS`], its reactor's index there below. Never [`ExecId::NONE`]: group ids
/// start at 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExecId(u64);

impl ExecId {
    /// No executor (a thread that is not a reactor's).
    pub(crate) const NONE: ExecId = ExecId(0);
    /// Room for the reactor index: far more reactors than a machine has cores.
    const INDEX_BITS: u32 = 24;

    pub(crate) fn new(shared: &Shared, index: usize) -> ExecId {
        let group = shared.id();
        assert!(
            index < 1 << Self::INDEX_BITS,
            "reactor index {index} over 2^24"
        );
        assert!(
            group != 0 && group < 1 << (64 - Self::INDEX_BITS),
            "group id {group} out of range"
        );
        ExecId(group << Self::INDEX_BITS | index as u64)
    }
}

/// What wakers of a task share.
///
/// `repr(C)`, hot fields first: a local wake reads `owner` and writes `local`, a dispatch reads
/// `local` and `body`; together 32 bytes (the compiler's order put them 45 bytes apart).
/// Aligned to a cache line: in its `Arc` the two counters take a line of their own (touched by
/// waker clones and drops, never per wake), and the whole header (56 bytes) is one line, so a
/// wake and a dispatch touch one line of the header wherever the allocator put it.
#[repr(C, align(64))]
pub(crate) struct Header {
    owner: ExecId,
    /// A `local::*` state. Owner thread only: relaxed loads and stores, no read-modify-write
    /// (plain `mov`s), and not part of the cross-thread protocol (std atomics, also under loom).
    local: AtomicU8,
    /// On the owner's inbox wake list; claimed by remote wakers, released by the owner.
    queued_remote: AtomicBool,
    /// [`crate::JoinHandle::abort`] was called.
    aborted: AtomicBool,
    /// The owning reactor's index in `shared`.
    index: u32,
    /// The task's body: `None` until inserted and once finished. Owner thread only (see the
    /// `Send`/`Sync` impls).
    body: UnsafeCell<Option<Body>>,
    /// The task's slab key ([`Key::NONE`] until inserted). Owner thread only.
    key: LocalU64,
    /// The wake list's link ([`super::wakelist`]).
    pub(super) next: AtomicPtr<Header>,
    shared: Arc<Shared>,
}

// One line: a field added past it would put the header across two again. (Loom's atomics are
// larger.)
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Header>() == 64);

/// What only the owner thread touches: the future.
pub(crate) struct Body {
    future: TaskFuture,
}

// SAFETY: everything but `body` is `Send + Sync` (atomics, `Arc<Shared>`). `body`, which holds
// the `!Send` future, is only reached through `insert_body`, `poll` and `take_body`, whose
// callers must be on the owner reactor's thread; the executor takes the body out when the task
// finishes and, at the latest, when it shuts down or drops (on its thread), so the header may
// then end its life on any thread without touching the future.
unsafe impl Send for Header {}
// SAFETY: as for `Send`: shared references on other threads touch only the atomic fields.
unsafe impl Sync for Header {}

impl Header {
    /// The header of a task that will live on the reactor at `index` of `shared`.
    pub(crate) fn new(shared: Arc<Shared>, index: usize) -> Header {
        Header {
            owner: ExecId::new(&shared, index),
            index: index as u32,
            shared,
            key: LocalU64::new(Key::NONE.to_bits()),
            local: AtomicU8::new(local::NEW),
            queued_remote: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
            body: UnsafeCell::new(None),
        }
    }

    pub(crate) fn owner(&self) -> ExecId {
        self.owner
    }

    /// The owning reactor's inbox.
    pub(crate) fn inbox(&self) -> &Inbox<Message> {
        &self.shared.slot(self.index as usize).inbox
    }

    /// Fails with [`ReactorError::WouldDeadlock`] on a reactor thread of the task's group.
    pub(crate) fn check_not_own_reactor(&self) -> Result<(), ReactorError> {
        self.shared.check_not_own_reactor()
    }

    /// The task's slab key (owner thread).
    pub(crate) fn key(&self) -> Key {
        Key::from_bits(self.key.load(LOCAL))
    }

    /// Owner thread: the task is in the slab under `key` with its body; wakes queue it from
    /// now on (the caller queues its first poll).
    pub(crate) fn set_inserted(&self, key: Key) {
        self.key.store(key.to_bits(), LOCAL);
        self.local.store(local::IDLE, LOCAL);
    }

    /// Owner thread: marks the task queued locally; false if it already was, or is not
    /// inserted, or finished.
    #[inline]
    pub(crate) fn claim_local(&self) -> bool {
        if self.local.load(LOCAL) != local::IDLE {
            return false;
        }
        self.local.store(local::QUEUED, LOCAL);
        true
    }

    /// Owner thread, on taking the task off the run queue: true if it is to be polled (wakes
    /// from here on queue it again); false if it finished or was aborted while queued (the
    /// caller then calls [`Header::release_dead`]).
    #[inline]
    pub(crate) fn release_local(&self) -> bool {
        if self.local.load(LOCAL) != local::QUEUED {
            return false;
        }
        self.local.store(local::IDLE, LOCAL);
        true
    }

    /// Owner thread, on taking off the run queue a task [`Header::release_local`] refused: true
    /// if it was aborted (the caller drops its body), false if it finished while queued (the
    /// caller frees its slab entry).
    pub(crate) fn release_dead(&self) -> bool {
        let aborted = self.local.load(LOCAL) == local::ABORTED_QUEUED;
        let state = if aborted { local::IDLE } else { local::DONE };
        self.local.store(state, LOCAL);
        aborted
    }

    /// Owner thread, having seen [`Header::is_aborted`]: the run queue is to hand the task out
    /// to be dropped, not polled. True if the caller must queue it (it was not queued). A task
    /// not inserted yet is left to the insert (which reads the flag), a finished one alone.
    pub(crate) fn claim_aborted(&self) -> bool {
        let state = self.local.load(LOCAL);
        if state == local::IDLE || state == local::QUEUED {
            self.local.store(local::ABORTED_QUEUED, LOCAL);
        }
        state == local::IDLE
    }

    /// Owner thread, once the body is taken: later wakes are ignored. True if the task is not
    /// on the run queue (the caller frees its slab entry now; else the queue's consumer does).
    #[inline]
    pub(crate) fn set_done(&self) -> bool {
        let state = self.local.load(LOCAL);
        let queued = state == local::QUEUED || state == local::ABORTED_QUEUED;
        let state = if queued {
            local::DONE_QUEUED
        } else {
            local::DONE
        };
        self.local.store(state, LOCAL);
        !queued
    }

    /// Gives the task its body.
    ///
    /// # Safety
    ///
    /// On the owner reactor's thread (the body is `!Send`), before the task is inserted.
    pub(crate) unsafe fn insert_body(&self, future: TaskFuture) {
        // SAFETY: the caller is on the owner thread, the only one that touches `body`, and no
        // poll or take of this body is running (it has none yet).
        unsafe { *self.body.get() = Some(Body { future }) };
    }

    /// Polls the task's future with a waker lent from this header (built in place: no
    /// reference count traffic unless the future clones it).
    ///
    /// # Safety
    ///
    /// On the owner reactor's thread, not from inside a poll of this task, and after
    /// [`Header::release_local`] returned true: the task is inserted and not finished, so it has
    /// its body (given before the task leaves `NEW`, taken just before it becomes `DONE`).
    #[inline]
    pub(crate) unsafe fn poll(self: &Arc<Self>) -> Poll<()> {
        // SAFETY: only the owner thread reaches `body`, and this poll is not nested in another
        // one of this task, so this is the only reference to it until the poll returns; the
        // future may drop or take other tasks' bodies (their own cells), never this one (a
        // task's body is taken only by its own poll's caller or at shutdown, outside polls).
        // The body is there (the caller's precondition).
        let body = unsafe { (*self.body.get()).as_mut().unwrap_unchecked() };
        let waker = waker::borrowed(self);
        body.future.as_mut().poll(&mut Context::from_waker(&waker))
    }

    /// Takes the task's body (to drop it outside any borrow: its destructors may use the
    /// executor).
    ///
    /// # Safety
    ///
    /// On the owner reactor's thread, not from inside a poll of this task.
    pub(crate) unsafe fn take_body(&self) -> Option<Body> {
        // SAFETY: as in `poll`: the owner thread, and no poll of this task holds the body.
        unsafe { (*self.body.get()).take() }
    }

    /// Remote waker: marks the task queued on the wake list; false if it already was (then the
    /// owner's [`Header::release_remote`] reads this claim and sees what the waker wrote).
    #[inline]
    pub(crate) fn claim_remote(&self) -> bool {
        // Release pairs with the acquire in `release_remote` (a wake that finds the flag set
        // pushes nothing, so the list's own release/acquire does not cover it).
        !self.queued_remote.swap(true, Ordering::AcqRel)
    }

    /// Owner, on taking the task off the wake list: later remote wakes push it again.
    #[inline]
    pub(crate) fn release_remote(&self) {
        // A read-modify-write, not a store: it reads the last claim (the one that pushed, or a
        // later one that found the flag still set) and acquires the waker's writes before it.
        self.queued_remote.swap(false, Ordering::Acquire);
    }

    /// Asks the executor to drop the task instead of polling it again: on the owner's thread
    /// at once, from others with a remote wake, on which the owner reads the flag.
    pub(crate) fn abort(self: &Arc<Self>) {
        // Pairs with the acquire in `is_aborted`, read by the owner when it takes the wake (or
        // inserts the task).
        self.aborted.store(true, Ordering::Release);
        if !executor::abort_if_owner(self) {
            self.wake_remote();
        }
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Queues the task: on the owner's run queue from its own thread, else through its inbox.
    #[inline]
    pub(crate) fn wake_by_ref(self: &Arc<Self>) {
        if !executor::schedule_if_owner(self) {
            self.wake_remote();
        }
    }

    /// The cross-core path: queue on the owner's inbox wake list (waking it if asleep). Out of
    /// line, so the local path needs no stack frame.
    #[cold]
    #[inline(never)]
    pub(crate) fn wake_remote(self: &Arc<Self>) {
        if self.claim_remote() {
            self.inbox().push_wake(self);
        }
    }
}

/// A task's [`Waker`]: its data pointer is the task's header in its `Arc` (what
/// `Arc::into_raw` gives), so a poll lends one built in place, and a wake on the owner's thread
/// is one direct call with no reference count traffic (std's `Wake` adapter adds a call).
mod waker {
    use std::mem::ManuallyDrop;
    use std::sync::Arc;
    use std::task::{RawWaker, RawWakerVTable, Waker};

    use super::Header;
    use super::executor;

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);

    /// A waker for `header` valid while the borrow lasts (it owns no reference; a clone does).
    #[inline]
    pub(super) fn borrowed(header: &Arc<Header>) -> ManuallyDrop<Waker> {
        // `Arc::as_ptr`, not a reference's address: the pointer must keep the provenance of
        // the whole allocation, reference counts included, for `Arc::from_raw` in `header`.
        let raw = RawWaker::new(Arc::as_ptr(header).cast(), &VTABLE);
        // SAFETY: `VTABLE`'s functions are called with this data pointer, `Arc::as_ptr` of an
        // `Arc<Header>` alive while `header` is borrowed; the `ManuallyDrop` keeps the unowned
        // reference from being released, and clones take references of their own.
        ManuallyDrop::new(unsafe { Waker::from_raw(raw) })
    }

    /// Borrows the header behind a waker's data pointer, as an `Arc` it must not drop.
    #[inline]
    fn header(data: *const ()) -> ManuallyDrop<Arc<Header>> {
        // SAFETY: every waker of this vtable holds `Arc::as_ptr` of a live `Arc<Header>`
        // (`borrowed`, `clone`); the `ManuallyDrop` leaves its reference count alone.
        ManuallyDrop::new(unsafe { Arc::from_raw(data.cast::<Header>()) })
    }

    fn clone(data: *const ()) -> RawWaker {
        // The clone owns a reference: the copy's is forgotten, to be released by `drop`/`wake`.
        std::mem::forget(Arc::clone(&header(data)));
        RawWaker::new(data, &VTABLE)
    }

    fn wake(data: *const ()) {
        let header = ManuallyDrop::into_inner(header(data));
        header.wake_by_ref();
    }

    fn wake_by_ref(data: *const ()) {
        if !executor::schedule_if_owner(&header(data)) {
            wake_remote(data);
        }
    }

    /// Out of line, with the data pointer, not a reference to an `Arc` on the stack: the local
    /// path then needs no stack frame.
    #[cold]
    #[inline(never)]
    fn wake_remote(data: *const ()) {
        header(data).wake_remote();
    }

    fn drop(data: *const ()) {
        std::mem::drop(ManuallyDrop::into_inner(header(data)));
    }
}

/// The ordering of the owner-only fields: they never synchronize with anything.
const LOCAL: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

/// A task's future, type-erased: the user's future wrapped with its completer.
pub(crate) type TaskFuture = Pin<Box<dyn Future<Output = ()>>>;
