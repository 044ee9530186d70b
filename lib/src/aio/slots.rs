//! The in-flight table of an [`super::AioBdev`]: one slot per I/O between submission and the
//! moment its future took the result, indexed by the request's token.
//!
//! A slot is free, in flight (staged or submitted; its future waits), done (the status, until
//! the future takes it), rejected (the block layer's refusal, likewise), or orphaned: its
//! future was dropped while the device still had the I/O, and the slot holds the future's
//! buffer until the completion, so the memory is freed only once the device is done with it.
//!
//! A slot's state is plain data (no destructor): the refusal and the orphaned buffer of the
//! rare states wait in a side list, so the hot path's state changes are plain stores, not
//! calls to drop the state they replace (2 % of the async path's samples).
//!
//! The table is allocated at open for as many I/Os as the queue can hold; it grows (rare,
//! cold) only if more are ever in flight, so the steady state allocates nothing.

use std::any::Any;
use std::task::Waker;

use super::AioError;
use crate::bdev::SubmitError;
use crate::request::IoStatus;

/// A buffer kept for a dropped future until its I/O completes (`None`: the I/O had none).
pub(super) type Orphan = Option<Box<dyn Any>>;

/// One I/O's place in the table (24 bytes).
struct Slot {
    /// The waker of the last future that used the slot (a no-op waker at first). Kept when
    /// the slot is freed: the task that frees a slot usually takes it again for its next I/O
    /// (the free list is a stack), and then finds its own waker here (`will_wake`), so an I/O
    /// neither clones nor drops a waker (no reference-count traffic).
    waker: Waker,
    /// The next free slot while this one is free (`NONE` ends the list).
    next: u32,
    state: State,
}

/// A slot's state: one byte, so each hot check is one compare (a success is a state of its
/// own, not a status to test; the rarer outcomes keep what they carry aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum State {
    /// Not in use; `next` links it in the free list.
    Free,
    /// Staged or submitted; its future waits.
    InFlight,
    /// Completed successfully; the future has not taken the result yet.
    Succeeded,
    /// Completed with an error, whose status is in the side list.
    Failed,
    /// Refused by the block layer at submission; the error is in the side list.
    Rejected,
    /// Submitted, and its future is gone: its buffer waits for the completion in the side
    /// list.
    Orphaned,
}

/// What a slot in a rare state holds, kept beside the table (see the module docs).
enum Aside {
    Failed(IoStatus),
    Rejected(AioError),
    Orphaned(Orphan),
}

/// What a later poll of a future finds in its slot.
pub(super) enum Outcome {
    /// Still in flight, and the slot's waker wakes the poll's task.
    Pending,
    /// Still in flight, and the slot's waker wakes another task: the caller stores the poll's
    /// ([`Slots::replace_waker`]; no clone here: that is a call out).
    PendingOtherWaker,
    /// Done; the slot is freed.
    Succeeded,
    /// The device failed the I/O with this status; the slot is freed.
    Failed(IoStatus),
    /// The block layer refused the I/O; the slot is freed.
    Rejected(AioError),
}

const NONE: u32 = u32::MAX;

/// The slots and their free list (a stack: the slot freed last is reused first, warm in
/// cache and holding the waker of the task that freed it).
pub(super) struct Slots {
    slots: Vec<Slot>,
    free: u32,
    /// The statuses, refusals and orphaned buffers of slots in those states, by slot (a
    /// linear search: cold paths only, and short).
    aside: Vec<(u32, Aside)>,
}

impl Slots {
    /// A table of `n` free slots.
    pub(super) fn new(n: u32) -> Slots {
        let mut slots = Slots {
            slots: Vec::with_capacity(n as usize),
            free: NONE,
            aside: Vec::new(),
        };
        for _ in 0..n {
            slots.grow();
        }
        slots
    }

    /// Takes a free slot and marks it in flight; true if the waker it keeps wakes the same task
    /// as `waker`, else the caller stores a clone of `waker` ([`Slots::replace_waker`]) before
    /// the I/O can complete (no clone here: that is a call out).
    #[inline]
    pub(super) fn alloc(&mut self, waker: &Waker) -> (u32, bool) {
        if self.free == NONE {
            self.grow();
        }
        let i = self.free;
        let slot = held(&mut self.slots, i);
        debug_assert_eq!(
            slot.state,
            State::Free,
            "the free list holds free slots only"
        );
        self.free = slot.next;
        slot.state = State::InFlight;
        (i, slot.waker.will_wake(waker))
    }

    /// Stores `waker` in slot `i`, returning the one it replaces (for the caller to drop once it
    /// let go of the table: a destructor is a call out).
    #[cold]
    pub(super) fn replace_waker(&mut self, i: u32, waker: Waker) -> Waker {
        std::mem::replace(&mut self.slots[i as usize].waker, waker)
    }

    /// Whether slot `i` still waits for its I/O (its waker not called yet).
    #[cold]
    pub(super) fn is_waiting(&self, i: u32) -> bool {
        self.slots[i as usize].state == State::InFlight
    }

    /// Frees slot `i` (a result taken, or an abandoned slot done); its waker stays.
    #[inline]
    fn release(&mut self, i: u32) {
        let slot = held(&mut self.slots, i);
        slot.state = State::Free;
        slot.next = self.free;
        self.free = i;
    }

    /// The completion of slot `i`: a waiting future's slot becomes done and its task is woken
    /// (the waker only queues the task: it must not poll it from inside the wake, which no
    /// executor does); an orphan's slot is freed and its buffer returned, to drop once the
    /// handle is released.
    #[inline]
    pub(super) fn complete(&mut self, i: u32, status: IoStatus) -> Option<Box<dyn Any>> {
        let slot = &mut self.slots[i as usize];
        // The waited-for success first and alone (a compare each, not a jump over states).
        if slot.state == State::InFlight && status == IoStatus::Success {
            slot.state = State::Succeeded;
            slot.waker.wake_by_ref();
            return None;
        }
        self.complete_rare(i, status)
    }

    /// The completion of a failed I/O or of an orphaned slot (freed, its buffer returned).
    #[cold]
    fn complete_rare(&mut self, i: u32, status: IoStatus) -> Option<Box<dyn Any>> {
        let slot = &mut self.slots[i as usize];
        match slot.state {
            State::InFlight => {
                slot.state = State::Failed;
                slot.waker.wake_by_ref();
                self.aside.push((i, Aside::Failed(status)));
                None
            }
            State::Orphaned => {
                let Aside::Orphaned(buf) = self.take_aside(i) else {
                    unreachable!("slot {i} is orphaned")
                };
                self.release(i);
                buf
            }
            state => panic!("slot {i} completed but not in flight ({state:?})"),
        }
    }

    /// Takes what slot `i` keeps aside.
    #[cold]
    fn take_aside(&mut self, i: u32) -> Aside {
        let k = self
            .aside
            .iter()
            .position(|(slot, _)| *slot == i)
            .unwrap_or_else(|| unreachable!("slot {i} keeps nothing aside"));
        self.aside.swap_remove(k).1
    }

    /// The block layer refused the I/O of slot `i` (still waited for: a dropped future's
    /// staged I/O is taken out of the list first); its task is woken.
    #[cold]
    pub(super) fn reject(&mut self, i: u32, e: SubmitError) {
        let slot = &mut self.slots[i as usize];
        debug_assert_eq!(slot.state, State::InFlight, "slot {i} rejected twice");
        slot.state = State::Rejected;
        slot.waker.wake_by_ref();
        self.aside.push((i, Aside::Rejected(e.into())));
    }

    /// The future of slot `i` is polled again: its outcome once done or refused (the slot is
    /// freed), else whether the slot's waker is the poll's `waker`.
    #[inline]
    pub(super) fn poll(&mut self, i: u32, waker: &Waker) -> Outcome {
        let slot = held(&mut self.slots, i);
        // The success first and alone: one compare and a branch.
        if slot.state == State::Succeeded {
            self.release(i);
            return Outcome::Succeeded;
        }
        if slot.state != State::InFlight {
            return self.take_outcome(i);
        }
        if slot.waker.will_wake(waker) {
            Outcome::Pending
        } else {
            Outcome::PendingOtherWaker
        }
    }

    /// Frees failed or rejected slot `i`, returning what it kept aside.
    #[cold]
    fn take_outcome(&mut self, i: u32) -> Outcome {
        let out = match self.take_aside(i) {
            Aside::Failed(status) => Outcome::Failed(status),
            Aside::Rejected(e) => Outcome::Rejected(e),
            Aside::Orphaned(_) => unreachable!("slot {i} polled by no future"),
        };
        self.release(i);
        out
    }

    /// The future of slot `i` is dropped: a done slot is freed (`buf` may go at once, returned
    /// as `Some`), an in-flight one keeps `buf` until its completion (`None` returned).
    pub(super) fn abandon(&mut self, i: u32, buf: Orphan) -> Option<Orphan> {
        match self.slots[i as usize].state {
            State::Succeeded => {
                self.release(i);
                Some(buf)
            }
            State::Failed | State::Rejected => {
                drop(self.take_outcome(i));
                Some(buf)
            }
            State::InFlight => {
                self.slots[i as usize].state = State::Orphaned;
                self.aside.push((i, Aside::Orphaned(buf)));
                None
            }
            State::Free | State::Orphaned => unreachable!("slot {i} abandoned twice"),
        }
    }

    /// The future of slot `i` is dropped while its I/O was still staged (withdrawn, never
    /// submitted): the slot is freed.
    pub(super) fn withdraw(&mut self, i: u32) {
        debug_assert_eq!(self.slots[i as usize].state, State::InFlight);
        self.release(i);
    }

    /// Takes the buffers of every orphaned slot (to leak them when a device never completes).
    pub(super) fn take_orphans(&mut self) -> Vec<Box<dyn Any>> {
        self.aside
            .iter_mut()
            .filter_map(|(_, a)| match a {
                Aside::Orphaned(buf) => buf.take(),
                Aside::Failed(_) | Aside::Rejected(_) => None,
            })
            .collect()
    }

    /// Slots in the table (its peak in-flight count so far, at least the count at open).
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Adds a free slot.
    #[cold]
    fn grow(&mut self) {
        let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 I/Os in flight");
        self.slots.push(Slot {
            waker: Waker::noop().clone(),
            next: self.free,
            state: State::Free,
        });
        self.free = i;
    }
}

/// Slot `i` of `slots`, the head of the free list or the slot of a future (an index `alloc`
/// gave out), without a bounds check on the hot path.
#[inline]
fn held(slots: &mut [Slot], i: u32) -> &mut Slot {
    debug_assert!((i as usize) < slots.len(), "slot {i} out of the table");
    // SAFETY: `i` is the free list's head (`grow` links only slots it pushed, `release` only
    // slots in the table) or a slot `alloc` returned to a future, which keeps it until its
    // drop; the table never shrinks, so either is in bounds.
    unsafe { slots.get_unchecked_mut(i as usize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's waker (not a no-op one, which `will_wake` may not recognise).
    struct Task;

    impl std::task::Wake for Task {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    #[test]
    fn slots_cycle_through_every_state_and_reuse_the_last_freed() {
        let mut s = Slots::new(2);
        let w = Waker::noop();
        let (a, b) = (s.alloc(w).0, s.alloc(w).0);
        assert_ne!(a, b);
        // A slot keeps the waker stored in it, and says when a poll's wakes another task.
        let task = Waker::from(std::sync::Arc::new(Task));
        drop(s.replace_waker(a, task.clone()));
        // What `will_wake` says of a clone (Miri may give a vtable two addresses).
        let same = task.clone().will_wake(&task);
        let pending = s.poll(a, &task);
        assert!(
            matches!(pending, Outcome::Pending) && same
                || matches!(pending, Outcome::PendingOtherWaker) && !same,
            "in flight"
        );
        assert!(matches!(s.poll(a, w), Outcome::PendingOtherWaker));
        assert!(s.is_waiting(a));
        assert!(s.complete(a, IoStatus::Success).is_none());
        assert!(!s.is_waiting(a));
        assert!(matches!(s.poll(a, w), Outcome::Succeeded));
        assert_eq!(
            s.alloc(&task),
            (a, same),
            "the slot freed last is reused first, with its waker"
        );
        // An abandoned in-flight slot keeps the buffer until its completion hands it back.
        assert!(s.abandon(b, Some(Box::new(7u32))).is_none());
        let buf = s.complete(b, IoStatus::Errno(5));
        assert_eq!(
            buf.and_then(|b| b.downcast::<u32>().ok()).as_deref(),
            Some(&7),
            "the orphan's buffer is handed back at completion"
        );
        // A third I/O while two are in flight grows the table.
        let c = s.alloc(w).0;
        let d = s.alloc(w).0;
        assert_eq!(s.capacity(), 3);
        s.complete(c, IoStatus::Success);
        assert!(s.abandon(c, None).is_some(), "a done slot is freed at once");
        assert!(s.abandon(d, Some(Box::new(1u8))).is_none());
        assert_eq!(s.take_orphans().len(), 1);
        // A refusal is handed to the future once, and frees the slot.
        let e = s.alloc(w).0;
        s.reject(e, SubmitError::Busy);
        assert!(matches!(s.poll(e, w), Outcome::Rejected(err) if err == SubmitError::Busy.into()));
        assert_eq!(s.alloc(w).0, e);
        // A failure's status is handed to the future once, and frees the slot.
        s.complete(e, IoStatus::Errno(5));
        assert!(matches!(s.poll(e, w), Outcome::Failed(IoStatus::Errno(5))));
        assert_eq!(s.alloc(w).0, e);
    }
}
