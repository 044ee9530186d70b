//! Which members of an array take I/O, shared by every queue of the array and by the
//! thread that keeps the superblock.
//!
//! A slot is in one of four states ([`SlotState`]); a queue reads them with one load each.
//! A member failed by an I/O error must be recorded in the superblock of the members that
//! remain before any I/O that failed on it is acknowledged: otherwise a restart could find
//! the failed member's superblock as current as theirs and read its stale data. So a failure
//! is *raised* by the queue that saw it and *recorded* by the superblock writer
//! ([`Health::recorded`]); an array without a superblock records it at once.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Where a member slot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Holds current data: read from and written to.
    Operational,
    /// Being rebuilt: written to (so it stays current where it has been copied), never read.
    Rebuilding,
    /// Left the array on an error: takes no I/O; its device is still attached.
    Failed,
    /// No member in the slot (removed, or absent when the array was assembled).
    Missing,
}

impl SlotState {
    fn code(self) -> u8 {
        match self {
            SlotState::Operational => 0,
            SlotState::Rebuilding => 1,
            SlotState::Failed => 2,
            SlotState::Missing => 3,
        }
    }

    fn from_code(c: u8) -> SlotState {
        match c {
            0 => SlotState::Operational,
            1 => SlotState::Rebuilding,
            2 => SlotState::Failed,
            _ => SlotState::Missing,
        }
    }
}

/// The member slots' states (see the module docs).
#[derive(Debug)]
pub struct Health {
    slots: Vec<AtomicU8>,
    /// Slots whose failure the superblock records (a bit each).
    recorded: AtomicU32,
    /// Raised on every change of a slot's state; queues re-read their members when it moves.
    generation: AtomicU64,
    /// Whether failures wait for the superblock writer (the array has a superblock).
    persistent: bool,
    /// Wakes the superblock writer: (a slot changed, something else to write).
    changed: Mutex<(bool, bool)>,
    wake: Condvar,
}

impl Health {
    pub(crate) fn new(states: &[SlotState], persistent: bool) -> Health {
        Health {
            slots: states.iter().map(|s| AtomicU8::new(s.code())).collect(),
            recorded: AtomicU32::new(0),
            generation: AtomicU64::new(0),
            persistent,
            changed: Mutex::new((false, false)),
            wake: Condvar::new(),
        }
    }

    /// Slots of the array.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Slot `i`'s state.
    #[inline]
    pub fn state(&self, i: usize) -> SlotState {
        SlotState::from_code(self.slots[i].load(Ordering::Acquire))
    }

    /// Whether member `i` holds current data (is read from).
    #[inline]
    pub fn operational(&self, i: usize) -> bool {
        self.state(i) == SlotState::Operational
    }

    /// Whether member `i` is written to (operational or being rebuilt).
    #[inline]
    pub fn writable(&self, i: usize) -> bool {
        matches!(
            self.state(i),
            SlotState::Operational | SlotState::Rebuilding
        )
    }

    /// Members holding current data.
    pub fn operational_count(&self) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.operational(i))
            .count()
    }

    /// The generation of the slot states: raised on every change.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Sets slot `i` to `to` (from whatever it was), waking the superblock writer.
    pub fn set(&self, i: usize, to: SlotState) {
        let from = SlotState::from_code(self.slots[i].swap(to.code(), Ordering::AcqRel));
        if from != to {
            log::info!("raid member slot {i}: {from:?} -> {to:?}");
            if to != SlotState::Failed {
                self.recorded.fetch_and(!(1 << i), Ordering::AcqRel);
            }
            self.bump();
        }
    }

    /// Fails member `i` out of the array on an I/O error; true if this call did it. Cold:
    /// takes the writer's lock to wake it.
    #[cold]
    pub(crate) fn fail(&self, i: usize) -> bool {
        let was = self.slots[i].load(Ordering::Acquire);
        let writable = matches!(
            SlotState::from_code(was),
            SlotState::Operational | SlotState::Rebuilding
        );
        if !writable
            || self.slots[i]
                .compare_exchange(
                    was,
                    SlotState::Failed.code(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
        {
            return false;
        }
        if !self.persistent {
            self.recorded.fetch_or(1 << i, Ordering::AcqRel);
        }
        self.bump();
        true
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.changed.lock().unwrap_or_else(|p| p.into_inner()).0 = true;
        self.wake.notify_all();
    }

    /// Wakes the superblock writer for something other than a slot change (the
    /// write-intent bitmap has a bit to make durable). Cold: takes its lock.
    #[cold]
    pub(crate) fn poke(&self) {
        self.changed.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.wake.notify_all();
    }

    /// Whether the failure of member `i` is recorded where a restart will see it, so an
    /// I/O that failed on it may be acknowledged from the others.
    #[inline]
    pub fn recorded(&self, i: usize) -> bool {
        self.recorded.load(Ordering::Acquire) & (1 << i) != 0
    }

    /// Marks the failures in `mask` recorded (the superblock writer, after a durable write).
    pub(crate) fn mark_recorded(&self, mask: u32) {
        self.recorded.fetch_or(mask, Ordering::AcqRel);
    }

    /// Slots failed now (a bit each).
    pub(crate) fn failed_mask(&self) -> u32 {
        (0..self.slots.len())
            .filter(|&i| self.state(i) == SlotState::Failed)
            .fold(0, |m, i| m | 1 << i)
    }

    /// Waits up to `timeout` to be woken; true if a slot changed since the last call.
    pub(crate) fn wait_change(&self, timeout: Duration) -> bool {
        let g = self.changed.lock().unwrap_or_else(|p| p.into_inner());
        let (mut g, _) = self
            .wake
            .wait_timeout_while(g, timeout, |c| !c.0 && !c.1)
            .unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *g).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_recorded_at_once_only_without_a_superblock() {
        let h = Health::new(&[SlotState::Operational; 2], false);
        assert!(h.fail(1));
        assert!(!h.fail(1), "failing twice reports once");
        assert!(h.recorded(1));
        let h = Health::new(&[SlotState::Operational; 2], true);
        let g = h.generation();
        assert!(h.fail(0));
        assert!(h.generation() > g);
        assert!(!h.recorded(0), "waits for the superblock writer");
        assert!(h.wait_change(Duration::ZERO));
        assert_eq!(h.failed_mask(), 1);
        h.mark_recorded(1);
        assert!(h.recorded(0));
        // A missing slot cannot fail; one brought back forgets its old failure.
        let h = Health::new(&[SlotState::Missing, SlotState::Operational], true);
        assert!(!h.fail(0));
        h.set(0, SlotState::Rebuilding);
        assert!(h.writable(0) && !h.operational(0));
    }
}
