//! The in-flight table of an [`super::AioBdev`]: one slot per I/O between submission and the
//! moment its future took the result, indexed by the request's token.
//!
//! A slot is free, in flight (with the waker of the future waiting for it), done (the status,
//! until the future takes it), or orphaned: its future was dropped while the device still had
//! the I/O, and the slot holds the future's buffer until the completion, so the memory is freed
//! only once the device is done with it.
//!
//! The table is allocated at open for as many I/Os as the queue can hold; it grows (rare,
//! cold) only if more are ever in flight, so the steady state allocates nothing.

use std::any::Any;
use std::task::Waker;

use crate::request::IoStatus;

/// A buffer kept for a dropped future until its I/O completes (`None`: the I/O had none).
pub(super) type Orphan = Option<Box<dyn Any>>;

enum Slot {
    /// Not in use; the next free slot (`NONE` ends the list).
    Free(u32),
    /// Submitted; the waker of its future (`None` until a future waits on it).
    InFlight(Option<Waker>),
    /// Completed; the future has not taken the status yet.
    Done(IoStatus),
    /// Submitted, and its future is gone: the buffer waits for the completion here.
    Orphaned(Orphan),
}

const NONE: u32 = u32::MAX;

/// The slots and their free list (a stack: the slot freed last is reused first, warm in
/// cache).
pub(super) struct Slots {
    slots: Vec<Slot>,
    free: u32,
}

impl Slots {
    /// A table of `n` free slots.
    pub(super) fn new(n: u32) -> Slots {
        let mut slots = Slots {
            slots: Vec::with_capacity(n as usize),
            free: NONE,
        };
        for _ in 0..n {
            slots.grow();
        }
        slots
    }

    /// Takes a free slot and marks it in flight with `waker`.
    #[inline]
    pub(super) fn alloc(&mut self, waker: &Waker) -> u32 {
        if self.free == NONE {
            self.grow();
        }
        let i = self.free;
        let slot = &mut self.slots[i as usize];
        let Slot::Free(next) = *slot else {
            unreachable!("the free list holds free slots only")
        };
        self.free = next;
        *slot = Slot::InFlight(Some(waker.clone()));
        i
    }

    /// Frees slot `i` (a refused submission, or a result taken).
    #[inline]
    pub(super) fn release(&mut self, i: u32) {
        self.slots[i as usize] = Slot::Free(self.free);
        self.free = i;
    }

    /// The completion of slot `i`: a waiting future's slot becomes done and its waker is
    /// returned (to wake once the handle is no longer borrowed); an orphan's slot is freed and
    /// its buffer returned (to drop likewise).
    #[inline]
    pub(super) fn complete(&mut self, i: u32, status: IoStatus) -> Completed {
        let slot = &mut self.slots[i as usize];
        match std::mem::replace(slot, Slot::Done(status)) {
            Slot::InFlight(waker) => Completed::Wake(waker),
            Slot::Orphaned(buf) => {
                self.release(i);
                Completed::Orphan(buf)
            }
            Slot::Free(_) | Slot::Done(_) => unreachable!("slot {i} completed twice"),
        }
    }

    /// The future of slot `i` is polled again: its status once done (the slot is freed), else
    /// `None` with `waker` stored (replacing the old one unless it wakes the same task).
    #[inline]
    pub(super) fn poll(&mut self, i: u32, waker: &Waker) -> Option<IoStatus> {
        match &mut self.slots[i as usize] {
            Slot::Done(status) => {
                let status = *status;
                self.release(i);
                Some(status)
            }
            Slot::InFlight(w) => {
                match w {
                    Some(w) if w.will_wake(waker) => {}
                    _ => *w = Some(waker.clone()),
                }
                None
            }
            Slot::Free(_) | Slot::Orphaned(_) => unreachable!("slot {i} polled by no future"),
        }
    }

    /// The future of slot `i` is dropped: a done slot is freed (`buf` may go at once, returned
    /// as `Some`), an in-flight one keeps `buf` until its completion (`None` returned).
    pub(super) fn abandon(&mut self, i: u32, buf: Orphan) -> Option<Orphan> {
        let slot = &mut self.slots[i as usize];
        match slot {
            Slot::Done(_) => {
                self.release(i);
                Some(buf)
            }
            Slot::InFlight(_) => {
                *slot = Slot::Orphaned(buf);
                None
            }
            Slot::Free(_) | Slot::Orphaned(_) => unreachable!("slot {i} abandoned twice"),
        }
    }

    /// Takes the buffers of every orphaned slot (to leak them when a device never completes).
    pub(super) fn take_orphans(&mut self) -> Vec<Box<dyn Any>> {
        self.slots
            .iter_mut()
            .filter_map(|s| match s {
                Slot::Orphaned(buf) => buf.take(),
                _ => None,
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
        self.slots.push(Slot::Free(self.free));
        self.free = i;
    }
}

/// What a completion leaves to do once the handle is released.
pub(super) enum Completed {
    /// Wake the future's task.
    Wake(Option<Waker>),
    /// Drop the buffer of a future that is gone.
    Orphan(Orphan),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cycle_through_every_state_and_reuse_the_last_freed() {
        let mut s = Slots::new(2);
        let w = Waker::noop();
        let (a, b) = (s.alloc(w), s.alloc(w));
        assert_ne!(a, b);
        assert_eq!(s.poll(a, w), None, "in flight");
        assert!(matches!(
            s.complete(a, IoStatus::Success),
            Completed::Wake(Some(_))
        ));
        assert_eq!(s.poll(a, w), Some(IoStatus::Success));
        assert_eq!(s.alloc(w), a, "the slot freed last is reused first");
        // An abandoned in-flight slot keeps the buffer until its completion hands it back.
        assert!(s.abandon(b, Some(Box::new(7u32))).is_none());
        match s.complete(b, IoStatus::Errno(5)) {
            Completed::Orphan(Some(buf)) => assert_eq!(buf.downcast_ref::<u32>(), Some(&7)),
            _ => panic!("the orphan's buffer is handed back at completion"),
        }
        // A third I/O while two are in flight grows the table.
        let c = s.alloc(w);
        let d = s.alloc(w);
        assert_eq!(s.capacity(), 3);
        s.complete(c, IoStatus::Success);
        assert!(s.abandon(c, None).is_some(), "a done slot is freed at once");
        assert!(s.abandon(d, Some(Box::new(1u8))).is_none());
        assert_eq!(s.take_orphans().len(), 1);
    }
}
