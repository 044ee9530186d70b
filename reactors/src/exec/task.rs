//! A task: one allocation, an `Arc` of its header — which wakers share, on any thread: which
//! reactor owns the task, the task's key there, the flags that keep it queued at most once, the
//! function that polls it — followed by its future, which only the owning reactor's thread
//! touches. References to it ([`TaskRef`]) and wakers are the header's address, so a wake and
//! the poll after it touch the header's line and the future's only, with no pointer to chase
//! between them.
//!
//! A wake on the owning reactor's thread pushes the header on the local run queue (plain loads
//! and stores on `local`, which only that thread touches); a wake from any other thread claims
//! `queued_remote` and goes through the reactor's inbox ([`crate::inbox::Inbox::push_wake`]),
//! which wakes the reactor if it sleeps.

use std::cell::UnsafeCell;
use std::future::Future;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::Deref;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool as LocalBool, AtomicU8, AtomicU64 as LocalU64};
use std::task::{Context, Poll};

use super::executor::{self, Executor};
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
    /// Finished (future dropped), not on the run queue: wakes are ignored.
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

/// What wakers of a task share, in the task's one allocation ([`TaskRef`]) just before its
/// future.
///
/// `repr(C)`, the fields every wake and dispatch touch last: a local wake reads `owner` and
/// writes `local`, a dispatch reads `local` and calls `poll`. The cell places the header so that
/// these hot fields start a cache line and the future follows them on it: a task whose future
/// is up to 104 bytes touches two lines per wake and poll, not three (its own line for the
/// header and the future's after it). The cold fields (remote wakes, abort, insert, finish)
/// end the line before, beside nothing hot.
#[repr(C)]
pub(crate) struct Header {
    shared: Arc<Shared>,
    /// The rest of what depends on the future's type.
    vtable: &'static Vtable,
    /// The task's slab key ([`Key::NONE`] until inserted). Owner thread only.
    key: LocalU64,
    /// The wake list's link ([`super::wakelist`]).
    pub(super) next: AtomicPtr<Header>,
    /// The owning reactor's index in `shared`.
    index: u32,
    /// On the owner's inbox wake list; claimed by remote wakers, released by the owner.
    queued_remote: AtomicBool,
    /// [`crate::JoinHandle::abort`] was called.
    aborted: AtomicBool,
    /// Whether the cell holds its future: from the insert until the task finishes. Owner
    /// thread only (as `local`).
    has_future: LocalBool,
    // The hot fields, from a line's start on (`Cell::pad`).
    owner: ExecId,
    /// Runs this task and those behind it on the run queue of its future type (its type's
    /// [`Cell::run`]): a dispatch loads no other pointer.
    run: RunFn,
    /// A `local::*` state. Owner thread only: relaxed loads and stores, no read-modify-write
    /// (plain `mov`s), and not part of the cross-thread protocol (std atomics, also under loom).
    local: AtomicU8,
}

/// A future type's task step: runs the tasks at the front of a run queue's batch whose run
/// function this is (the first one's), polling each in its turn with their future's poll
/// inlined (one call, not one per task); returns how many it took, and counts those it
/// dropped unpolled (see [`super::executor::Executor::run_same`]).
pub(crate) type RunFn = unsafe fn(&Executor, &[*const Header], &mut usize) -> usize;

/// Where the header's hot fields start in it.
const HOT_AT: usize = std::mem::offset_of!(Header, owner);
/// The padding before the header in a cell: puts the hot fields at a line's start.
const PAD: usize = (64 - HOT_AT % 64) % 64;

// The cold fields fill the line before the hot ones, which take 24 bytes of theirs (a field
// added to the cold ones would push the header across a line's start). (Loom's atomics are
// larger.)
#[cfg(not(loom))]
const _: () = assert!(HOT_AT == 40 && std::mem::size_of::<Header>() == 64);

/// A task's operations that depend on its future's type (one per type, static).
struct Vtable {
    clone_ref: unsafe fn(*const Header),
    drop_ref: unsafe fn(*const Header),
    drop_future: unsafe fn(*const Header),
    #[cfg(all(test, loom))]
    strong_count: unsafe fn(*const Header) -> usize,
}

/// A task's one allocation (in an `Arc`): padding, the header, then the future. Line-aligned,
/// with the padding that puts the header's hot fields at the start of the line the future
/// begins on (see [`Header`]). The future is written on the owner's thread at insert
/// (`spawn_on` allocates the cell on another), dropped in place there when the task finishes.
#[repr(C, align(64))]
struct Cell<F> {
    pad: [u8; PAD],
    header: Header,
    future: UnsafeCell<MaybeUninit<F>>,
}

/// Where the header is in a cell of any future type (the fields before it do not depend on
/// it).
const HEADER_AT: usize = std::mem::offset_of!(Cell<()>, header);

impl<F> Cell<F> {
    /// The cell of a [`TaskRef`]'s pointer (which points at its header, with the provenance of
    /// the whole allocation).
    #[inline]
    fn of(header: *const Header) -> *const Cell<F> {
        const { assert!(std::mem::offset_of!(Cell<F>, header) == HEADER_AT) };
        header.wrapping_byte_sub(HEADER_AT).cast()
    }
}

impl<F: Future<Output = ()>> Cell<F> {
    const VTABLE: Vtable = Vtable {
        clone_ref: Self::clone_ref,
        drop_ref: Self::drop_ref,
        drop_future: Self::drop_future,
        #[cfg(all(test, loom))]
        strong_count: Self::strong_count,
    };

    /// # Safety (of each function below)
    ///
    /// `header` is a [`TaskRef`]'s pointer (`Arc::into_raw` of an `Arc<Cell<F>>`, moved to its
    /// `header` field), alive; the future functions are called on the owner's thread, as
    /// [`TaskRef`]'s methods document.
    #[inline(always)]
    unsafe fn poll(header: *const Header, cx: &mut Context<'_>) -> Poll<()> {
        let cell = Self::of(header);
        // SAFETY: the caller (`TaskRef::poll_with`) is on the owner thread, not nested in a poll of
        // this task, and the future is there: this is the only reference to it until the poll
        // returns. It is never moved: written in place at insert, dropped in place.
        unsafe {
            let future = (*(*cell).future.get()).assume_init_mut();
            Pin::new_unchecked(future).poll(cx)
        }
    }

    /// `RunFn`: see there; the caller's as `Executor::run_same`'s.
    unsafe fn run(exec: &Executor, batch: &[*const Header], dropped: &mut usize) -> usize {
        // SAFETY: the caller's; `poll` is given headers of this run function, so of cells of
        // this future type.
        unsafe { exec.run_same(batch, Self::run, dropped, |h, cx| Self::poll(h, cx)) }
    }

    unsafe fn drop_future(header: *const Header) {
        let cell = Self::of(header);
        // SAFETY: `TaskRef::drop_future`: the owner thread, outside any poll of this task, the
        // future there, and marked gone before (a panicking destructor leaks, never drops twice).
        unsafe { (*(*cell).future.get()).assume_init_drop() }
    }

    unsafe fn clone_ref(header: *const Header) {
        // SAFETY: the cell is `Arc::into_raw` of a live `Arc<Cell<F>>` (see above).
        unsafe { Arc::increment_strong_count(Self::of(header)) }
    }

    unsafe fn drop_ref(header: *const Header) {
        // SAFETY: as in `clone_ref`; the caller gives up the reference it owned.
        unsafe { Arc::decrement_strong_count(Self::of(header)) }
    }

    #[cfg(all(test, loom))]
    unsafe fn strong_count(header: *const Header) -> usize {
        // SAFETY: as in `clone_ref`; the `ManuallyDrop` leaves the count alone.
        let cell = ManuallyDrop::new(unsafe { Arc::from_raw(Self::of(header)) });
        Arc::strong_count(&cell)
    }
}

impl<F> Drop for Cell<F> {
    /// The executor drops a task's future on its thread before it lets go of the task (when
    /// it finishes, at shutdown); a future still here escaped that (a shutdown cut short) and
    /// goes with the cell.
    fn drop(&mut self) {
        if *self.header.has_future.get_mut() {
            // SAFETY: the future is there (`has_future`), and nothing else can reach it (the
            // cell's last reference is going).
            unsafe { self.future.get_mut().assume_init_drop() };
        }
    }
}

/// A counted reference to a task (what an `Arc` of its cell is, type-erased): the slab's, a
/// handle's, a waker's, the wake list's. Its pointer is the header's, with the provenance of the
/// whole allocation (from `Arc::into_raw`), so the future behind the header is reachable
/// through it.
pub(crate) struct TaskRef {
    ptr: NonNull<Header>,
}

// SAFETY: a `TaskRef` shares the header, which is `Send + Sync`; the future behind it is only
// reached by the owner thread (`TaskRef`'s unsafe methods), and dropping the last reference
// drops no future (the executor dropped it, see `Cell`'s `Drop`).
unsafe impl Send for TaskRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for TaskRef {}

/// A task made for an executor, its future not written yet: typed, so the insert writes a
/// future of the type its cell was made for. `Send` (the future is not there): `spawn_on` makes
/// it on the caller's thread and sends it to the owner's.
pub(crate) struct NewTask<F> {
    task: TaskRef,
    _future: PhantomData<fn(F)>,
}

impl<F: Future<Output = ()>> NewTask<F> {
    /// A task that will live on the reactor at `index` of `shared`.
    pub(crate) fn new(shared: Arc<Shared>, index: usize) -> NewTask<F> {
        let header = Header {
            owner: ExecId::new(&shared, index),
            index: index as u32,
            shared,
            key: LocalU64::new(Key::NONE.to_bits()),
            local: AtomicU8::new(local::NEW),
            queued_remote: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            has_future: LocalBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
            run: Cell::<F>::run,
            vtable: &Cell::<F>::VTABLE,
        };
        let cell = Arc::new(Cell {
            pad: [0; PAD],
            header,
            future: UnsafeCell::new(MaybeUninit::<F>::uninit()),
        });
        // The header's address, derived from the whole cell's pointer (its provenance).
        let ptr = Arc::into_raw(cell)
            .wrapping_byte_add(HEADER_AT)
            .cast::<Header>()
            .cast_mut();
        // SAFETY: inside the `Arc`'s allocation, so never null.
        let ptr = unsafe { NonNull::new_unchecked(ptr) };
        NewTask {
            task: TaskRef { ptr },
            _future: PhantomData,
        }
    }

    /// The task (for its handle, and wakes before the insert, which it ignores).
    pub(crate) fn task(&self) -> &TaskRef {
        &self.task
    }

    /// Writes the task's future; the task is then ready to insert.
    ///
    /// # Safety
    ///
    /// On the owner reactor's thread (the future is `!Send`).
    pub(crate) unsafe fn put_future(self, future: F) -> TaskRef {
        let cell = Cell::<F>::of(self.task.as_ptr());
        // SAFETY: the cell was made for an `F` (`new`), and nothing else touches its future
        // yet: no poll or drop of a future that is not there (`has_future` is false); the
        // caller is on the thread that may own it.
        unsafe { (*(*cell).future.get()).write(future) };
        self.task.has_future.store(true, LOCAL);
        self.task
    }
}

impl TaskRef {
    /// The header's address, with the allocation's provenance (for the run queue and wakers).
    #[inline]
    pub(crate) fn as_ptr(&self) -> *const Header {
        self.ptr.as_ptr()
    }

    /// Gives up the reference as a pointer ([`TaskRef::from_raw`] takes it back).
    pub(crate) fn into_raw(self) -> *const Header {
        ManuallyDrop::new(self).as_ptr()
    }

    /// Takes back a reference given up by [`TaskRef::into_raw`].
    ///
    /// # Safety
    ///
    /// `ptr` came from `into_raw` (or is [`TaskRef::as_ptr`] of a live reference, when the
    /// result stays in a `ManuallyDrop`), and its reference is taken back once.
    #[inline]
    pub(crate) unsafe fn from_raw(ptr: *const Header) -> TaskRef {
        // SAFETY: the caller's: a `TaskRef`'s pointer, never null.
        let ptr = unsafe { NonNull::new_unchecked(ptr.cast_mut()) };
        TaskRef { ptr }
    }

    /// References alive (tests).
    #[cfg(all(test, loom))]
    pub(crate) fn strong_count(&self) -> usize {
        // SAFETY: the vtable of this cell's type, with its pointer.
        unsafe { (self.vtable.strong_count)(self.as_ptr()) }
    }

    /// Polls the task's future with `poll` (its type's), with a waker lent from this reference
    /// (built in place: no reference count traffic unless the future clones it).
    ///
    /// # Safety
    ///
    /// On the owner reactor's thread, not from inside a poll of this task, and after
    /// [`Header::release_local`] returned true: the task is inserted and not finished, so it has
    /// its future (written before the task leaves `NEW`, dropped just before it becomes `DONE`);
    /// `poll` is the poll function of its cell's future type.
    #[inline(always)]
    pub(crate) unsafe fn poll_with(
        &self,
        poll: impl Fn(*const Header, &mut Context<'_>) -> Poll<()>,
    ) -> Poll<()> {
        let waker = waker::borrowed(self);
        poll(self.as_ptr(), &mut Context::from_waker(&waker))
    }

    /// Drops the task's future in place, if it has one; returns whether it had. Its destructors
    /// may use the executor (no borrow of it may be held).
    ///
    /// # Safety
    ///
    /// On the owner reactor's thread, not from inside a poll of this task.
    pub(crate) unsafe fn drop_future(&self) -> bool {
        if !self.has_future.load(LOCAL) {
            return false;
        }
        // First: a destructor that panics leaves the rest of the future leaked, not dropped
        // again by the cell.
        self.has_future.store(false, LOCAL);
        // SAFETY: the caller's, and the future was there.
        unsafe { (self.vtable.drop_future)(self.as_ptr()) };
        true
    }

    /// Asks the executor to drop the task instead of polling it again: on the owner's thread
    /// at once, from others with a remote wake, on which the owner reads the flag.
    pub(crate) fn abort(&self) {
        // Pairs with the acquire in `is_aborted`, read by the owner when it takes the wake (or
        // inserts the task).
        self.aborted.store(true, Ordering::Release);
        if !executor::abort_if_owner(self) {
            self.wake_remote();
        }
    }

    /// Queues the task: on the owner's run queue from its own thread, else through its inbox.
    #[inline]
    pub(crate) fn wake_by_ref(&self) {
        if !executor::schedule_if_owner(self) {
            self.wake_remote();
        }
    }

    /// The cross-core path: queue on the owner's inbox wake list (waking it if asleep). Out of
    /// line, so the local path needs no stack frame.
    #[cold]
    #[inline(never)]
    pub(crate) fn wake_remote(&self) {
        if self.claim_remote() {
            self.inbox().push_wake(self);
        }
    }
}

impl Clone for TaskRef {
    fn clone(&self) -> TaskRef {
        // SAFETY: the vtable of this cell's type, with its pointer, alive (`self` holds it).
        unsafe { (self.vtable.clone_ref)(self.as_ptr()) };
        TaskRef { ptr: self.ptr }
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        // SAFETY: as in `clone`; this reference is given up.
        unsafe { (self.vtable.drop_ref)(self.as_ptr()) }
    }
}

impl Deref for TaskRef {
    type Target = Header;

    #[inline]
    fn deref(&self) -> &Header {
        // SAFETY: the header is alive while this reference is.
        unsafe { self.ptr.as_ref() }
    }
}

// SAFETY: everything is `Send + Sync` but `poll` and `vtable`'s function pointers (plain
// data); the future behind the header is reached only by the owner thread.
unsafe impl Send for Header {}
// SAFETY: as for `Send`: shared references on other threads touch only the atomic fields.
unsafe impl Sync for Header {}

impl Header {
    pub(crate) fn owner(&self) -> ExecId {
        self.owner
    }

    /// The task step of the task's future type.
    #[inline]
    pub(crate) fn run_fn(&self) -> RunFn {
        self.run
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

    /// Owner thread: the task is in the slab under `key` with its future; wakes queue it from
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
    /// if it was aborted (the caller drops its future), false if it finished while queued (the
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

    /// Owner thread, as the task finishes (before its future is dropped): later wakes are
    /// ignored. True if the task is not on the run queue (the caller frees its slab entry now;
    /// else the queue's consumer does).
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

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }
}

/// A task's [`Waker`]: its data pointer is the task's [`TaskRef`] pointer, so a poll lends one
/// built in place, and a wake on the owner's thread is one direct call with no reference count
/// traffic (std's `Wake` adapter adds a call).
mod waker {
    use std::mem::ManuallyDrop;
    use std::task::{RawWaker, RawWakerVTable, Waker};

    use super::TaskRef;
    use super::executor;

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);

    /// A waker for `task` valid while the borrow lasts (it owns no reference; a clone does).
    #[inline]
    pub(super) fn borrowed(task: &TaskRef) -> ManuallyDrop<Waker> {
        let raw = RawWaker::new(task.as_ptr().cast(), &VTABLE);
        // SAFETY: `VTABLE`'s functions are called with this data pointer, a `TaskRef`'s pointer
        // alive while `task` is borrowed; the `ManuallyDrop` keeps the unowned reference from
        // being released, and clones take references of their own.
        ManuallyDrop::new(unsafe { Waker::from_raw(raw) })
    }

    /// Borrows the task behind a waker's data pointer, as a reference it must not drop.
    #[inline]
    fn task(data: *const ()) -> ManuallyDrop<TaskRef> {
        // SAFETY: every waker of this vtable holds a live `TaskRef`'s pointer (`borrowed`,
        // `clone`); the `ManuallyDrop` leaves its reference count alone.
        ManuallyDrop::new(unsafe { TaskRef::from_raw(data.cast()) })
    }

    fn clone(data: *const ()) -> RawWaker {
        // The clone owns a reference: the copy's is given up, to be released by `drop`/`wake`.
        let _ = TaskRef::clone(&task(data)).into_raw();
        RawWaker::new(data, &VTABLE)
    }

    fn wake(data: *const ()) {
        let task = ManuallyDrop::into_inner(task(data));
        task.wake_by_ref();
    }

    fn wake_by_ref(data: *const ()) {
        if !executor::schedule_if_owner(&task(data)) {
            wake_remote(data);
        }
    }

    /// Out of line, with the data pointer, not a reference to a `TaskRef` on the stack: the
    /// local path then needs no stack frame.
    #[cold]
    #[inline(never)]
    fn wake_remote(data: *const ()) {
        task(data).wake_remote();
    }

    fn drop(data: *const ()) {
        std::mem::drop(ManuallyDrop::into_inner(task(data)));
    }
}

/// The ordering of the owner-only fields: they never synchronize with anything.
const LOCAL: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;
