//! A reactor's run queue: the headers of its queued tasks, first in, first out, on the reactor's
//! thread only.
//!
//! Two vectors instead of one ring: wakes push onto `incoming`; the task step runs `batch` from
//! `pos` on and, once through it, swaps the two (the emptied batch keeps its storage and takes
//! the next wakes). A push is a vector push and a pop a pointer read, with no `RefCell` borrow
//! and no wrap-around arithmetic. Tasks left in `batch` by the budget stay first in line.
//!
//! The cells are plain: only the reactor's thread reaches the queue (it lives in the `!Sync`
//! executor), `push` calls nothing but the allocator, and [`RunQueue::pop_each`] holds no
//! reference into the cells while it calls out, so no two references to one vector overlap.

use std::cell::{Cell, UnsafeCell};

use super::task::Header;

#[derive(Default)]
pub(crate) struct RunQueue {
    /// Woken since `batch` was taken; behind it in line.
    incoming: UnsafeCell<Vec<*const Header>>,
    /// Taken from `incoming`; `batch[pos..]` not run yet.
    batch: UnsafeCell<Vec<*const Header>>,
    pos: Cell<usize>,
}

impl RunQueue {
    /// Queues `task` behind the others.
    #[inline]
    pub(crate) fn push(&self, task: *const Header) {
        // SAFETY: see the module comment: no other reference to `incoming` is alive (`pop_each`
        // holds none while it calls out) and `Vec::push` does not reach the queue.
        let incoming = unsafe { &mut *self.incoming.get() };
        if incoming.len() == incoming.capacity() {
            // Out of line: the wake path keeps no registers across a call, so needs no frame.
            return grow_and_push(task, incoming);
        }
        incoming.push(task);
    }

    /// Tasks queued.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        // SAFETY: shared reads while no mutable reference is alive (module comment).
        unsafe { (*self.batch.get()).len() - self.pos.get() + (*self.incoming.get()).len() }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands the first `n` (at most) queued tasks to `run`, oldest first, as slices of what is
    /// left of them: `run` takes some from the front (at least one) and returns how many; it
    /// may push. Returns how many were handed out. While `run` is called, the rest of its batch
    /// is not counted by [`RunQueue::len`].
    #[inline]
    pub(crate) fn pop_each(
        &self,
        n: usize,
        mut run: impl FnMut(&[*const Header]) -> usize,
    ) -> usize {
        let mut left = n;
        while left > 0 {
            // The batch moves out while `run` is called, so no reference into a cell is held.
            // SAFETY: no other reference to `batch` is alive (module comment).
            let mut batch = std::mem::take(unsafe { &mut *self.batch.get() });
            let mut pos = self.pos.replace(0);
            if pos == batch.len() {
                batch.clear();
                // SAFETY: as above, for `incoming`.
                std::mem::swap(&mut batch, unsafe { &mut *self.incoming.get() });
                pos = 0;
            }
            let end = batch.len().min(pos + left);
            let mut next = pos;
            while next < end {
                let took = run(&batch[next..end]);
                debug_assert!((1..=end - next).contains(&took), "took {took} tasks");
                next += took;
            }
            left -= end - pos;
            // SAFETY: as above; `run` is done and nothing else refers to `batch`.
            unsafe { *self.batch.get() = batch };
            self.pos.set(end);
            if end == pos {
                break;
            }
        }
        n - left
    }

    /// Forgets every queued task.
    pub(crate) fn clear(&self) {
        // SAFETY: as in `push`; `clear` calls out to nothing.
        unsafe {
            (*self.incoming.get()).clear();
            (*self.batch.get()).clear();
        }
        self.pos.set(0);
    }
}

/// `push` into a full vector (until the queue has grown to its peak). The task comes first:
/// the wake path has it in the first argument register already.
#[cold]
#[inline(never)]
fn grow_and_push(task: *const Header, incoming: &mut Vec<*const Header>) {
    incoming.push(task);
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A stand-in header address (never dereferenced).
    fn task(n: usize) -> *const Header {
        std::ptr::without_provenance(n * 64)
    }

    fn pop(q: &RunQueue, n: usize, push_on: Option<(usize, usize)>) -> Vec<usize> {
        let mut out = Vec::new();
        q.pop_each(n, |tasks| {
            let t = tasks[0].addr() / 64;
            if let Some((seen, pushed)) = push_on
                && seen == t
            {
                q.push(task(pushed));
            }
            out.push(t);
            1
        });
        out
    }

    #[test]
    fn first_in_first_out_across_batches_and_budgets() {
        let q = RunQueue::default();
        assert!(q.is_empty());
        (1..=5).for_each(|n| q.push(task(n)));
        assert_eq!(q.len(), 5);
        // A budget of 3 leaves 4 and 5 first in line; 6, woken while 2 runs, goes behind them.
        assert_eq!(pop(&q, 3, Some((2, 6))), [1, 2, 3]);
        assert_eq!(q.len(), 3);
        q.push(task(7));
        assert_eq!(pop(&q, 4, Some((5, 8))), [4, 5, 6, 7]);
        // Only what was queued is handed out, however large the budget.
        assert_eq!(pop(&q, 10, None), [8]);
        assert!(pop(&q, 10, None).is_empty());
        assert!(q.is_empty());
        q.push(task(9));
        q.clear();
        assert!(q.is_empty());
    }
}
