//! The list a reactor's tasks are woken on from other threads: a lock-free stack of task headers
//! linked through the headers themselves (a wake allocates nothing), emptied whole by the
//! reactor and handed out oldest first. A header's remote flag ([`Header::claim_remote`]) keeps
//! it on the list at most once, which is what lets one link field serve.
//!
//! Only the reactor removes, and only everything at once (`swap` to null), so the stack has no
//! ABA problem: a pusher's CAS compares the head pointer only, never reads through it, and links
//! its header in front of whatever the head is when the CAS succeeds. Each header on the list
//! holds one reference (`TaskRef::into_raw` on push, `TaskRef::from_raw` when handed out).

use std::ptr;

use super::task::{Header, TaskRef};
use crate::inbox::sync::{AtomicPtr, Ordering};

/// `head` of a closed list: never a header's address (no allocation sits at the dangling,
/// aligned address).
fn closed() -> *mut Header {
    ptr::dangling_mut()
}

/// Headers of tasks woken from other threads (multi-producer, one consumer: the reactor).
///
/// On its own pair of cache lines: the reactor loads `head` every turn, and the inbox's other
/// flags are written by every message sender.
#[repr(align(128))]
pub(crate) struct WakeList {
    head: AtomicPtr<Header>,
}

impl WakeList {
    pub(crate) fn new() -> WakeList {
        WakeList {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes `task` (whose remote flag the caller claimed); false if the list is closed.
    pub(crate) fn push(&self, task: &TaskRef) -> bool {
        let mut head = self.head.load(Ordering::Relaxed);
        if head == closed() {
            return false;
        }
        let node = task.clone().into_raw().cast_mut();
        loop {
            task.next.store(head, Ordering::Relaxed);
            // Release: the link and the waker's writes before this wake are visible to the
            // reactor's acquire in `take`.
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) if now == closed() => {
                    // SAFETY: `node` came from `into_raw` above and was never published.
                    drop(unsafe { TaskRef::from_raw(node) });
                    return false;
                }
                Err(now) => head = now,
            }
        }
    }

    /// Whether nothing is queued (one relaxed load; the inbox's fences order it when it
    /// matters).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Takes every queued header, oldest first. Reactor only, while the list is open.
    pub(crate) fn take(&self) -> Wakes {
        let mut node = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        if node == closed() {
            self.head.store(closed(), Ordering::Relaxed);
            return Wakes::default();
        }
        // Reverse the stack into arrival order.
        let mut oldest = ptr::null_mut();
        while !node.is_null() {
            // SAFETY: each node on the list holds a strong reference (see `push`), now owned by
            // this take, so the header is alive; no other thread reads or writes its link until
            // its remote flag is released, after `Wakes` hands it out.
            let header = unsafe { &*node };
            let next = header.next.load(Ordering::Relaxed);
            header.next.store(oldest, Ordering::Relaxed);
            oldest = node;
            node = next;
        }
        Wakes { next: oldest }
    }

    /// Refuses further pushes and drops what is queued.
    pub(crate) fn close(&self) {
        let node = self.head.swap(closed(), Ordering::Acquire);
        if node != closed() {
            drop(Wakes { next: node });
        }
    }
}

impl Drop for WakeList {
    fn drop(&mut self) {
        self.close();
    }
}

/// Headers taken off a [`WakeList`], each handed out once with the reference the list held.
pub(crate) struct Wakes {
    next: *mut Header,
}

impl Default for Wakes {
    fn default() -> Wakes {
        Wakes {
            next: ptr::null_mut(),
        }
    }
}

impl Iterator for Wakes {
    type Item = TaskRef;

    fn next(&mut self) -> Option<TaskRef> {
        if self.next.is_null() {
            return None;
        }
        // SAFETY: `next` is a node taken off the list (see `WakeList::take`); its strong
        // reference is handed out exactly once, here, and the link is read before the caller
        // can release the header's remote flag and let a pusher rewrite it.
        let task = unsafe { TaskRef::from_raw(self.next) };
        self.next = task.next.load(Ordering::Relaxed);
        Some(task)
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        self.by_ref().for_each(drop);
    }
}
