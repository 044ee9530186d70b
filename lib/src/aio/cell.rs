//! The cell around a handle's shared state: a `RefCell` whose hot path stores nothing.
//!
//! The futures' own steps on the state (staging an I/O, looking at its slot) call no code from
//! outside the aio module: no waker, no buffer's or driver's method, no destructor. Nothing can
//! come back to the handle while one of them runs, so they need no borrow flag of their own,
//! only to see that no step that does call out is under way ([`StateCell::lock`]: `progress`,
//! whose wakes, driver calls and destructors might). That check is one load. A `RefCell`
//! borrow is a load, a store and a read-modify-write of one word, and the futures polled one
//! after the other in a turn chained their borrows through it (each borrow's load waiting on
//! the last release's store): 0.7 ns of the async path's ~18 per I/O.

use std::cell::{Cell, UnsafeCell};
use std::ops::{Deref, DerefMut};

/// A value reached by [`StateCell::quick`] steps (which call nothing that could come back) and
/// [`StateCell::lock`]ed ones (which may). `!Sync`: one thread.
pub(super) struct StateCell<T> {
    value: UnsafeCell<T>,
    /// A [`Locked`] guard is alive.
    locked: Cell<bool>,
}

impl<T> StateCell<T> {
    pub(super) fn new(value: T) -> StateCell<T> {
        StateCell {
            value: UnsafeCell::new(value),
            locked: Cell::new(false),
        }
    }

    /// Runs `f` on the value. Panics if a locked step is under way (what it called came back
    /// here).
    ///
    /// # Safety
    ///
    /// `f` calls nothing that could reach this cell: no waker, no method of a trait implemented
    /// outside the aio module (buffers, drivers), no destructor of a value from outside it, and
    /// not the global allocator's grow path with a value it does not own.
    #[inline]
    pub(super) unsafe fn quick<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        if self.locked.get() {
            reentered();
        }
        // SAFETY: only this thread reaches the cell (it is `!Sync`); no `Locked` guard is alive
        // (checked), and no other `quick` step is running, since none calls anything that could
        // come here (the caller's): this is the only reference to the value while `f` runs.
        f(unsafe { &mut *self.value.get() })
    }

    /// The value for a step that may call out (wakers, drivers, destructors): a `quick` step or
    /// another `lock` while the guard lives panics.
    #[inline]
    pub(super) fn lock(&self) -> Locked<'_, T> {
        if self.locked.replace(true) {
            reentered();
        }
        Locked { cell: self }
    }

    pub(super) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn reentered() -> ! {
    panic!("an aio handle used from inside its own progress (by a waker, driver or destructor)")
}

/// Exclusive access to a [`StateCell`]'s value until dropped.
pub(super) struct Locked<'a, T> {
    cell: &'a StateCell<T>,
}

impl<T> Deref for Locked<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: while the guard lives no other reference to the value is made (`lock` and
        // `quick` refuse), and this one is tied to the guard's borrow.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes it the only one made through the guard.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        self.cell.locked.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_step_or_a_second_lock_inside_a_locked_step_panics() {
        let cell = StateCell::new(1u32);
        // SAFETY: the closure calls nothing.
        assert_eq!(unsafe { cell.quick(|v| std::mem::replace(v, 2)) }, 1);
        {
            let mut locked = cell.lock();
            *locked += 1;
            let quick = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: the closure calls nothing (it is never run: the cell is locked).
                unsafe { cell.quick(|v| *v) }
            }));
            assert!(quick.is_err(), "a quick step while locked panics");
            let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                drop(cell.lock());
            }));
            assert!(again.is_err(), "a second lock panics");
        }
        // SAFETY: the closure calls nothing.
        let after = unsafe { cell.quick(|v| *v) };
        assert_eq!(after, 3, "unlocked once the guard is gone");
    }
}
