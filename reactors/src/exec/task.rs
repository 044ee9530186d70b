//! A task and its header. The header is the part wakers share (behind an `Arc`, on any thread):
//! which reactor owns the task, the task's key there, and the flags that keep the task queued at
//! most once. The future itself stays in its reactor's slab and never leaves that thread.
//!
//! A wake on the owning reactor's thread pushes the key on the local run queue (plain loads and
//! stores on `queued_local`, which only that thread touches); a wake from any other thread claims
//! `queued_remote` and goes through the reactor's inbox ([`crate::inbox::Inbox::push_wake`]),
//! which wakes the reactor if it sleeps.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Wake, Waker};

use super::executor;
use super::slab::Key;
use crate::error::ReactorError;
use crate::group::Shared;
use crate::inbox::Inbox;
use crate::inbox::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use crate::reactor::Message;

/// Identifies an executor: its group and its reactor's index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExecId {
    group: u64,
    index: u32,
}

impl ExecId {
    pub(crate) fn new(shared: &Shared, index: usize) -> ExecId {
        ExecId {
            group: shared.id(),
            index: index as u32,
        }
    }
}

/// What wakers of a task share.
pub(crate) struct Header {
    shared: Arc<Shared>,
    owner: ExecId,
    /// The task's slab key ([`Key::NONE`] until inserted). Owner thread only.
    key: AtomicU64,
    /// On the owner's run queue. Owner thread only: relaxed loads and stores, no
    /// read-modify-write.
    queued_local: AtomicBool,
    /// On the owner's inbox wake list; claimed by remote wakers, released by the owner.
    queued_remote: AtomicBool,
    /// [`crate::JoinHandle::abort`] was called.
    aborted: AtomicBool,
    /// The wake list's link ([`super::wakelist`]).
    pub(super) next: AtomicPtr<Header>,
}

impl Header {
    /// The header of a task that will live on the reactor at `index` of `shared`.
    pub(crate) fn new(shared: Arc<Shared>, index: usize) -> Header {
        Header {
            owner: ExecId::new(&shared, index),
            shared,
            key: AtomicU64::new(Key::NONE.to_bits()),
            queued_local: AtomicBool::new(false),
            queued_remote: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    pub(crate) fn owner(&self) -> ExecId {
        self.owner
    }

    /// The owning reactor's inbox.
    pub(crate) fn inbox(&self) -> &Inbox<Message> {
        &self.shared.slot(self.owner.index as usize).inbox
    }

    /// Fails with [`ReactorError::WouldDeadlock`] on a reactor thread of the task's group.
    pub(crate) fn check_not_own_reactor(&self) -> Result<(), ReactorError> {
        self.shared.check_not_own_reactor()
    }

    pub(crate) fn key(&self) -> Key {
        Key::from_bits(self.key.load(Ordering::Relaxed))
    }

    pub(crate) fn set_key(&self, key: Key) {
        self.key.store(key.to_bits(), Ordering::Relaxed);
    }

    /// Owner thread: marks the task queued locally; false if it already was.
    #[inline]
    pub(crate) fn claim_local(&self) -> bool {
        if self.queued_local.load(Ordering::Relaxed) {
            return false;
        }
        self.queued_local.store(true, Ordering::Relaxed);
        true
    }

    /// Owner thread, just before a poll: wakes from here on queue the task again.
    #[inline]
    pub(crate) fn release_local(&self) {
        self.queued_local.store(false, Ordering::Relaxed);
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

    /// Asks the executor to drop the task instead of polling it again, and wakes it.
    pub(crate) fn abort(self: &Arc<Self>) {
        // Pairs with the acquire in `is_aborted`, read by the owner when it takes the wake.
        self.aborted.store(true, Ordering::Release);
        self.wake_by_ref();
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// The cross-core path: queue on the owner's inbox wake list (waking it if asleep).
    pub(crate) fn wake_remote(self: &Arc<Self>) {
        if self.claim_remote() {
            self.inbox().push_wake(self);
        }
    }
}

impl Wake for Header {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !executor::schedule_if_owner(self) {
            self.wake_remote();
        }
    }
}

/// A task's future, type-erased: the user's future wrapped with its completer.
pub(crate) type TaskFuture = Pin<Box<dyn Future<Output = ()>>>;

/// A spawned task as its executor holds it.
pub(crate) struct Task {
    pub header: Arc<Header>,
    /// A waker for this task, made once at spawn and lent to every poll.
    pub waker: Waker,
    pub future: TaskFuture,
}

impl Task {
    pub(crate) fn new(header: Arc<Header>, future: TaskFuture) -> Task {
        Task {
            waker: Waker::from(Arc::clone(&header)),
            header,
            future,
        }
    }
}
