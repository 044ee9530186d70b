//! A reactor's inbox: the state other threads share with a reactor, and the lock-free protocol
//! around it. Everything cross-thread in the crate that must not lose a message lives here.
//!
//! - **Messages** go on a lock-free queue (crossbeam `SegQueue`), popped by the reactor only.
//! - **Sleep/wake handshake** (interrupt mode): the reactor sets `sleeping`, then re-checks the
//!   queue and the group's [`StopFlag`] before it waits on its wake event (an eventfd); a
//!   sender pushes, then writes the event only if it sees `sleeping`. A `fence(SeqCst)` on each
//!   side, between its write and its read, makes at least one of them see the other: the
//!   reactor sees the message and does not wait, or the sender sees `sleeping` and wakes it.
//!   The event is only a hint (stale notifications cause a spurious wake-up at most); the
//!   re-check before every wait is what keeps messages from being stranded. The same wait also
//!   ends when one of the reactor's watched fds ([`crate::fdwatch`]) is ready; those need no
//!   handshake (their readiness is level-triggered state the poll itself checks).
//! - **Task wakes** from other threads ([`crate::exec`]) go on an intrusive list of task
//!   headers (no allocation per wake) with the same handshake as messages: the waker pushes,
//!   fences, and writes the event if it sees `sleeping`; the reactor's re-check looks at both.
//!   Closing the inbox closes the list.
//! - **Stop**: a sender counts itself in `inflight` before it checks `closed` and out after its
//!   push; the reactor sets `closed`, then waits for `inflight == 0`. Every push that returned
//!   `Ok` is then in the queue for the reactor's final drain, and every later one is refused.
//!   [`StopFlag::request`] sets the group's flag (an early refusal for senders, the loop exit
//!   for reactors) and wakes every reactor unconditionally.
//!
//! Memory orders are chosen so that the protocol holds with acquire/release plus `SeqCst`
//! *fences* — what loom models exactly (it treats `SeqCst` accesses as `AcqRel`). All of it goes
//! through the [`sync`] shim: std's atomics, `SegQueue` and [`crate::sys::EventFd`] normally;
//! under `cfg(loom)` loom's atomics, and a queue and an event built on loom primitives with the
//! same guarantees, so that the `loom_…` models run this very code (the model event ignores
//! watched fds). `make loom` runs them.

use std::io;
use std::time::Duration;

use crate::exec::{TaskRef, WakeList, Wakes};
use crate::fdwatch::{FdWatches, Woken};

use self::sync::{AtomicBool, AtomicUsize, Event, Ordering, Queue, fence, spin};

/// Synchronisation primitives: loom's under `cfg(loom)` (model checking), the real ones
/// otherwise.
pub(crate) mod sync {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, fence};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, fence};

    #[cfg(loom)]
    pub(super) use self::model::{Event, Queue};
    #[cfg(not(loom))]
    pub(super) use crate::sys::EventFd as Event;
    #[cfg(not(loom))]
    pub(super) use crossbeam_queue::SegQueue as Queue;

    /// One round of a wait loop: spin a little, then yield the CPU (a loom yield in models).
    #[inline]
    pub(super) fn spin(round: u32) {
        #[cfg(loom)]
        {
            let _ = round;
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        if round < 1000 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }

    /// Loom stand-ins for `SegQueue` and the eventfd, with the guarantees the protocol uses.
    #[cfg(loom)]
    mod model {
        use std::collections::VecDeque;
        use std::io;
        use std::time::Duration;

        use loom::sync::atomic::{AtomicUsize, Ordering};
        use loom::sync::{Condvar, Mutex};

        use crate::fdwatch::{FdWatches, Woken};

        /// `SegQueue`: a push is an atomic read-modify-write (`SegQueue` CASes its tail
        /// index) and `is_empty` is atomic loads, taking no lock, so the handshake can only
        /// rely on those, as it does with the real queue. The items themselves sit behind a
        /// mutex (the real queue's slot hand-off is release/acquire too).
        pub(crate) struct Queue<T> {
            items: Mutex<VecDeque<T>>,
            len: AtomicUsize,
        }

        impl<T> Queue<T> {
            pub(crate) fn new() -> Queue<T> {
                Queue {
                    items: Mutex::new(VecDeque::new()),
                    len: AtomicUsize::new(0),
                }
            }

            pub(crate) fn push(&self, value: T) {
                let mut items = self.items.lock().unwrap();
                items.push_back(value);
                self.len.fetch_add(1, Ordering::SeqCst);
            }

            pub(crate) fn pop(&self) -> Option<T> {
                let mut items = self.items.lock().unwrap();
                let value = items.pop_front();
                if value.is_some() {
                    self.len.fetch_sub(1, Ordering::SeqCst);
                }
                value
            }

            pub(crate) fn is_empty(&self) -> bool {
                self.len.load(Ordering::SeqCst) == 0
            }
        }

        /// The eventfd: a counter that `notify` increments, `drain` zeroes and `wait` blocks
        /// on while it is zero (a lost wake-up is a loom deadlock). A timed wait may time out
        /// at any moment, so it returns at once when nothing is signalled. Watched fds are
        /// not modelled (no fd is ever ready).
        pub(crate) struct Event {
            count: Mutex<u64>,
            cv: Condvar,
        }

        impl Event {
            pub(crate) fn new() -> io::Result<Event> {
                Ok(Event {
                    count: Mutex::new(0),
                    cv: Condvar::new(),
                })
            }

            pub(crate) fn notify(&self) {
                *self.count.lock().unwrap() += 1;
                self.cv.notify_one();
            }

            pub(crate) fn drain(&self) {
                *self.count.lock().unwrap() = 0;
            }

            pub(crate) fn wait(&self, timeout: Option<Duration>, _: &mut FdWatches) -> Woken {
                let mut count = self.count.lock().unwrap();
                if timeout.is_none() {
                    while *count == 0 {
                        count = self.cv.wait(count).unwrap();
                    }
                }
                Woken {
                    event: *count > 0,
                    fds: 0,
                }
            }
        }
    }
}

/// A group's stop request. Once set, every inbox refuses new messages and every reactor
/// leaves its loop (it then closes its inbox and drains it).
pub(crate) struct StopFlag(AtomicBool);

impl StopFlag {
    pub(crate) fn new() -> StopFlag {
        StopFlag(AtomicBool::new(false))
    }

    /// Whether stop was requested. Relaxed: a reactor about to wait re-checks it after its
    /// fence, and [`StopFlag::request`] writes every wake event after setting it, so a
    /// reactor that misses the store here is woken.
    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the flag and wakes the reactor of each inbox (unconditionally: it sees the flag
    /// before waiting, or its wait returns).
    pub(crate) fn request<'a, T: 'a>(&self, inboxes: impl IntoIterator<Item = &'a Inbox<T>>) {
        self.0.store(true, Ordering::SeqCst);
        for inbox in inboxes {
            inbox.notify();
        }
    }
}

/// One reactor's inbox: message queue, sleep/wake handshake and stop admission. Senders on any
/// thread call [`Inbox::push`]; only the reactor calls the other methods (except
/// [`Inbox::notify`] and [`Inbox::is_sleeping`]).
pub(crate) struct Inbox<T> {
    queue: Queue<T>,
    /// Set by the reactor from just before its pre-wait re-check until it woke.
    sleeping: AtomicBool,
    /// Set when the reactor stops accepting messages.
    closed: AtomicBool,
    /// Senders between their `closed` check and the end of their push.
    inflight: AtomicUsize,
    /// Tasks of this reactor woken from other threads (the executor's cross-core wakes).
    wakes: WakeList,
    /// Wakes the reactor (an eventfd).
    event: Event,
}

impl<T> Inbox<T> {
    /// An empty, open inbox (creates the eventfd).
    pub(crate) fn new() -> io::Result<Inbox<T>> {
        Ok(Inbox {
            queue: Queue::new(),
            sleeping: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            inflight: AtomicUsize::new(0),
            wakes: WakeList::new(),
            event: Event::new()?,
        })
    }

    /// Sender side: queues `msg` and wakes the reactor if it sleeps. `Ok` means the reactor
    /// will pop it (before exiting, at the latest); `Err` hands `msg` back unqueued when the
    /// inbox is closed or `stop` is set.
    pub(crate) fn push(&self, msg: T, stop: &StopFlag) -> Result<(), T> {
        // Acquire half pairs with `close_and_quiesce`: if the reactor's read of `inflight`
        // came first, its `closed` store is visible below.
        self.inflight.fetch_add(1, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) || stop.is_set() {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            return Err(msg);
        }
        self.queue.push(msg);
        // Release half: the push is visible to a reactor that reads `inflight == 0` after this.
        self.inflight.fetch_sub(1, Ordering::SeqCst);
        // Pairs with the fence in `sleep`: either the reactor's re-check sees the push, or
        // this load sees `sleeping`.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.event.notify();
        }
        Ok(())
    }

    /// Reactor side: the next message, if any.
    #[inline]
    pub(crate) fn pop(&self) -> Option<T> {
        self.queue.pop()
    }

    /// Waker side (a thread other than the reactor's): queues `task` for the reactor's next
    /// turn and wakes the reactor if it sleeps — the same handshake as [`Inbox::push`]. The
    /// caller has claimed the task's remote flag (`Header::claim_remote`), so a task is in the
    /// list at most once. A closed inbox (reactor gone) drops the wake.
    pub(crate) fn push_wake(&self, task: &TaskRef) {
        if !self.wakes.push(task) {
            return;
        }
        // Pairs with the fence in `sleep`: either the reactor's re-check sees the wake, or
        // this load sees `sleeping`.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.event.notify();
        }
    }

    /// Reactor side: whether tasks were woken from other threads (one plain load).
    #[inline]
    pub(crate) fn has_wakes(&self) -> bool {
        !self.wakes.is_empty()
    }

    /// Reactor side: the tasks woken from other threads since the last call, oldest first.
    pub(crate) fn take_wakes(&self) -> Wakes {
        self.wakes.take()
    }

    /// Reactor side of the handshake: announces the sleep, re-checks for a message or a stop
    /// request, and unless one is there runs `before_wait` and waits for a wake-up, a ready fd
    /// of `watched`, or `timeout` (`None` = none). Returns what ended the wait, or `None` if it
    /// did not wait (something is pending).
    pub(crate) fn sleep(
        &self,
        timeout: Option<Duration>,
        stop: &StopFlag,
        watched: &mut FdWatches,
        before_wait: impl FnOnce(),
    ) -> Option<Woken> {
        self.sleeping.store(true, Ordering::SeqCst);
        // Pairs with the fence in `push`.
        fence(Ordering::SeqCst);
        if !self.queue.is_empty() || !self.wakes.is_empty() || stop.is_set() {
            self.sleeping.store(false, Ordering::Relaxed);
            return None;
        }
        before_wait();
        let woken = self.event.wait(timeout, watched);
        self.sleeping.store(false, Ordering::SeqCst);
        // Notifications up to here are consumed; their messages are in the queue, which the
        // reactor drains and re-checks before it waits again.
        self.event.drain();
        Some(woken)
    }

    /// Wakes the reactor whether or not it sleeps (stop request, mode switch).
    pub(crate) fn notify(&self) {
        self.event.notify();
    }

    /// Whether the reactor is asleep (or about to be) right now; for stats.
    pub(crate) fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }

    /// Reactor side: stops accepting messages and waits until no sender is between its check
    /// and its push, so that every accepted message is in the queue afterwards (pop them all).
    pub(crate) fn close_and_quiesce(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // A read-modify-write, not a load: it reads the latest `inflight`. If a sender's
        // increment comes after it, that increment reads from it and so sees `closed`;
        // otherwise it counts that sender until its push is done. Correct under
        // acquire/release alone.
        let mut round = 0u32;
        while self.inflight.fetch_add(0, Ordering::SeqCst) != 0 {
            spin(round);
            round = round.saturating_add(1);
        }
        // Tasks no longer run here: refuse their wakes, and drop the queued ones (each holds
        // the group alive, which holds this inbox: a cycle otherwise).
        self.wakes.close();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::thread;
    use std::time::Instant;

    use super::*;

    #[test]
    fn sleep_returns_at_once_when_a_message_or_stop_is_pending() {
        let inbox = Inbox::new().unwrap();
        let stop = StopFlag::new();
        inbox.push(1u32, &stop).unwrap();
        let mut waited = false;
        let mut fds = FdWatches::new();
        assert!(
            inbox
                .sleep(None, &stop, &mut fds, || waited = true)
                .is_none()
        );
        assert!(!waited && !inbox.is_sleeping());
        assert_eq!(inbox.pop(), Some(1));
        assert_eq!(inbox.pop(), None);
        stop.request([&inbox]);
        assert!(
            inbox
                .sleep(None, &stop, &mut fds, || waited = true)
                .is_none()
        );
        assert!(!waited);
    }

    #[test]
    fn push_wakes_a_sleeping_reactor() {
        let inbox = Arc::new(Inbox::new().unwrap());
        let stop = Arc::new(StopFlag::new());
        let (i, s) = (inbox.clone(), stop.clone());
        let reactor = thread::spawn(move || {
            let t = Instant::now();
            let mut fds = FdWatches::new();
            while i.pop().is_none() {
                i.sleep(Some(Duration::from_secs(10)), &s, &mut fds, || {});
            }
            t.elapsed()
        });
        while !inbox.is_sleeping() {
            thread::yield_now();
        }
        thread::sleep(Duration::from_millis(20));
        inbox.push(7u32, &stop).unwrap();
        assert!(reactor.join().unwrap() < Duration::from_secs(5));
    }

    #[test]
    fn closed_inbox_refuses_and_hands_the_message_back() {
        let inbox = Inbox::new().unwrap();
        let stop = StopFlag::new();
        inbox.push(1u32, &stop).unwrap();
        inbox.close_and_quiesce();
        assert_eq!(inbox.push(2, &stop), Err(2));
        assert_eq!(inbox.pop(), Some(1));
        assert_eq!(inbox.pop(), None);
        let open = Inbox::new().unwrap();
        stop.request([&open]);
        assert_eq!(open.push(3u32, &stop), Err(3));
    }
}

/// Loom models of the protocol (2–3 threads, exhaustive up to a preemption bound). The model
/// reactor is the real reactor loop reduced to its inbox calls: pop everything, leave on stop,
/// else [`Inbox::sleep`] without timeout; on leaving, [`Inbox::close_and_quiesce`] and a final
/// drain. A lost wake-up leaves it waiting forever, which loom reports as a deadlock.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// Explores every interleaving with at most `preemptions` preemptions (`None`: all).
    /// The bounds keep the four models below at 0.3 s, 12 s, 8 s and 0.02 s (exhaustive) on
    /// the project machine in release; one step further costs 47 s (unbounded), over 300 s
    /// (unbounded) and 105 s (bound 4).
    fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = preemptions;
        b.check(f);
    }

    /// The reactor loop: runs until `expect` messages arrived (`stop == None`) or until stop,
    /// then closes and drains. Returns the messages in the order popped.
    fn reactor(inbox: &Inbox<u32>, stop: &StopFlag, expect: Option<usize>) -> Vec<u32> {
        let mut got = Vec::new();
        let mut fds = FdWatches::new();
        loop {
            while let Some(m) = inbox.pop() {
                got.push(m);
            }
            if expect == Some(got.len()) || stop.is_set() {
                break;
            }
            inbox.sleep(None, stop, &mut fds, || {});
        }
        inbox.close_and_quiesce();
        while let Some(m) = inbox.pop() {
            got.push(m);
        }
        got
    }

    /// One sender, two messages, racing with the reactor's way into sleep (the second push can
    /// land while the reactor drains the notification of the first).
    #[test]
    fn loom_message_sent_while_reactor_goes_to_sleep_is_never_lost() {
        model(Some(5), || {
            let inbox = Arc::new(Inbox::new().unwrap());
            let stop = Arc::new(StopFlag::new());
            let (i, s) = (inbox.clone(), stop.clone());
            let sender = thread::spawn(move || {
                i.push(1, &s).unwrap();
                i.push(2, &s).unwrap();
            });
            let got = reactor(&inbox, &stop, Some(2));
            sender.join().unwrap();
            assert_eq!(got, vec![1, 2]);
        });
    }

    /// Two senders, one message each, both racing with the reactor's sleep.
    #[test]
    fn loom_two_senders_racing_with_sleep_are_both_run() {
        model(Some(4), || {
            let inbox = Arc::new(Inbox::new().unwrap());
            let stop = Arc::new(StopFlag::new());
            let senders: Vec<_> = [1, 2]
                .into_iter()
                .map(|m| {
                    let (i, s) = (inbox.clone(), stop.clone());
                    thread::spawn(move || i.push(m, &s).unwrap())
                })
                .collect();
            let mut got = reactor(&inbox, &stop, Some(2));
            for s in senders {
                s.join().unwrap();
            }
            got.sort_unstable();
            assert_eq!(got, vec![1, 2]);
        });
    }

    /// A sender races with a stop request (from a third thread) while the reactor may sleep:
    /// the reactor leaves (stop wakes it), and each message ran iff its push returned Ok.
    #[test]
    fn loom_sender_racing_with_stop_runs_or_is_refused() {
        model(Some(3), || {
            let inbox = Arc::new(Inbox::new().unwrap());
            let stop = Arc::new(StopFlag::new());
            let (i, s) = (inbox.clone(), stop.clone());
            let sender = thread::spawn(move || {
                let first = i.push(1, &s).is_ok();
                let second = i.push(2, &s).is_ok();
                // Once refused, refused for good.
                assert!(first || !second);
                [first, second]
            });
            let (i, s) = (inbox.clone(), stop.clone());
            let stopper = thread::spawn(move || s.request([&*i]));
            let got = reactor(&inbox, &stop, None);
            let accepted = sender.join().unwrap();
            stopper.join().unwrap();
            let expect: Vec<u32> = [1, 2]
                .into_iter()
                .zip(accepted)
                .filter_map(|(m, ok)| ok.then_some(m))
                .collect();
            assert_eq!(got, expect);
        });
    }

    /// The close alone (a reactor that panicked or could not pin closes without a group
    /// stop): a racing push either lands before the close's drain or is refused.
    #[test]
    fn loom_sender_racing_with_close_runs_or_is_refused() {
        model(None, || {
            let inbox = Arc::new(Inbox::new().unwrap());
            let stop = Arc::new(StopFlag::new());
            let (i, s) = (inbox.clone(), stop.clone());
            let sender = thread::spawn(move || i.push(1, &s).is_ok());
            inbox.close_and_quiesce();
            let mut got = Vec::new();
            while let Some(m) = inbox.pop() {
                got.push(m);
            }
            let ok = sender.join().unwrap();
            // Nothing can be pushed after the drain either.
            assert_eq!(inbox.pop(), None);
            assert_eq!(got, if ok { vec![1] } else { vec![] });
        });
    }
}
