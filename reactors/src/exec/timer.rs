//! Timers on the reactor's clock: [`sleep`] and the per-reactor heap that drives it.
//!
//! A [`Sleep`] arms a timer on its first poll (deadline, waker) in its executor's [`Timers`]: a
//! min-heap of deadlines over a slab of wakers. At the start of each task step the reactor pops
//! the due deadlines and wakes their tasks; an interrupt-mode reactor sleeps no longer than to
//! the earliest deadline. The clock is the reactor's turn clock ([`crate::ReactorCtx::now_ns`]),
//! so a timer fires on the first turn that starts at or after its deadline. A `Sleep` dropped
//! before it fires frees its slot at once; its heap entry stays until its deadline passes or the
//! heap is compacted (when such entries outnumber the live ones).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::executor;
use super::slab::{Key, Slab};
use crate::sys;

/// Waits until `duration` has passed on the reactor's clock. The deadline is taken when
/// `sleep` is called; the future completes on the first reactor turn that starts at or after
/// it (a zero duration: the next turn). An interrupt-mode reactor sleeps until then.
///
/// The future is `!Send` and must be polled on a reactor thread.
///
/// # Panics
///
/// When polled off a reactor thread.
///
/// ```
/// use std::time::{Duration, Instant};
/// use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, sleep};
///
/// let mask = CoreMask::from_cores([CoreMask::available()?.first()])?;
/// let reactors = Reactors::start(mask, ReactorsOptions::default())?;
/// let t = Instant::now();
/// let slept = reactors.spawn_on(reactors.cores()[0], || async {
///     sleep(Duration::from_millis(5)).await;
///     "done"
/// })?;
/// assert_eq!(slept.join()?, "done");
/// assert!(t.elapsed() >= Duration::from_millis(5));
/// reactors.stop()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    Sleep {
        deadline: sys::now_ns().saturating_add(ns),
        timer: None,
        _local: PhantomData,
    }
}

/// The future of [`sleep`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    deadline: u64,
    timer: Option<Key>,
    /// Its timer lives in one reactor's heap: keep it on that thread.
    _local: PhantomData<*const ()>,
}

impl Sleep {
    /// The deadline on the reactors' clock ([`crate::now_ns`]), ns.
    pub fn deadline_ns(&self) -> u64 {
        self.deadline
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let fired = executor::with_current(|exec| {
            exec.poll_timer(&mut this.timer, this.deadline, cx.waker())
        });
        match fired {
            Some(true) => Poll::Ready(()),
            Some(false) => Poll::Pending,
            None => panic!("pmio_reactors::sleep polled outside a reactor thread"),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.timer.take() {
            executor::with_current(|exec| exec.cancel_timer(key));
        }
    }
}

/// A timer's state in [`Timers`].
enum TimerState {
    Armed(Waker),
    Fired,
}

/// One reactor's timers (reactor thread only).
#[derive(Default)]
pub(crate) struct Timers {
    /// (deadline, key bits), earliest first; entries of released timers linger (`stale`).
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    timers: Slab<TimerState>,
    /// Heap entries whose timer was released before it fired.
    stale: usize,
}

impl Timers {
    /// Arms a timer waking `waker` at `deadline`.
    pub(crate) fn arm(&mut self, deadline: u64, waker: Waker) -> Key {
        let key = self.timers.insert(TimerState::Armed(waker));
        self.heap.push(Reverse((deadline, key.to_bits())));
        key
    }

    /// Whether `key` fired; if not, it wakes `waker` when it does.
    pub(crate) fn poll(&mut self, key: Key, waker: &Waker) -> bool {
        match self.timers.get_mut(key) {
            Some(TimerState::Armed(w)) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                false
            }
            Some(TimerState::Fired) | None => true,
        }
    }

    /// Frees `key`; returns its waker if it had not fired (for the caller to drop outside the
    /// borrow).
    pub(crate) fn release(&mut self, key: Key) -> Option<Waker> {
        match self.timers.remove(key)? {
            TimerState::Armed(waker) => {
                self.stale += 1;
                if self.stale > 64 && self.stale > self.timers.len() {
                    self.compact();
                }
                Some(waker)
            }
            TimerState::Fired => None,
        }
    }

    /// The waker of the next timer due at `now`, marked fired.
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<Waker> {
        while let Some(&Reverse((deadline, bits))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            match self.timers.get_mut(Key::from_bits(bits)) {
                Some(state) => {
                    if let TimerState::Armed(waker) = std::mem::replace(state, TimerState::Fired) {
                        return Some(waker);
                    }
                }
                None => self.stale = self.stale.saturating_sub(1),
            }
        }
        None
    }

    /// The earliest deadline in the heap (`u64::MAX`: none).
    pub(crate) fn next_due(&self) -> u64 {
        self.heap.peek().map_or(u64::MAX, |Reverse((d, _))| *d)
    }

    /// Drops the heap entries of released timers.
    #[cold]
    fn compact(&mut self) {
        let timers = &self.timers;
        self.heap
            .retain(|Reverse((_, bits))| timers.contains(Key::from_bits(*bits)));
        self.stale = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn timers_fire_in_deadline_order_once() {
        let mut t = Timers::default();
        let (_, w) = waker();
        let late = t.arm(30, w.clone());
        let early = t.arm(10, w.clone());
        assert_eq!(t.next_due(), 10);
        assert!(t.pop_due(9).is_none());
        assert!(t.pop_due(10).is_some());
        assert!(t.poll(early, &w));
        assert!(!t.poll(late, &w));
        assert!(t.pop_due(29).is_none());
        assert!(t.pop_due(100).is_some());
        assert!(t.pop_due(100).is_none());
        assert!(t.release(early).is_none());
        assert!(t.release(late).is_none());
        assert_eq!(t.next_due(), u64::MAX);
    }

    #[test]
    fn released_timers_never_fire_and_are_compacted() {
        let mut t = Timers::default();
        let (count, w) = waker();
        let keys: Vec<Key> = (0..200).map(|i| t.arm(1000 + i, w.clone())).collect();
        for &k in &keys[..150] {
            assert!(t.release(k).is_some());
        }
        // Compaction ran once stale entries outnumbered live ones.
        assert!(t.heap.len() < 200, "{}", t.heap.len());
        let live = t.arm(5000, w.clone());
        while let Some(w) = t.pop_due(u64::MAX) {
            w.wake();
        }
        assert_eq!(count.0.load(Ordering::Relaxed), 51);
        assert!(t.poll(live, &w));
    }

    #[test]
    fn poll_retargets_the_waker() {
        let mut t = Timers::default();
        let (a, wa) = waker();
        let (b, wb) = waker();
        let k = t.arm(5, wa);
        assert!(!t.poll(k, &wb));
        t.pop_due(5).unwrap().wake();
        assert_eq!(
            (a.0.load(Ordering::Relaxed), b.0.load(Ordering::Relaxed)),
            (0, 1)
        );
    }
}
