//! Loom models of the cross-core wake handoff: a remote waker claims the task's remote flag,
//! links its header onto the reactor's inbox wake list and writes the wake event if the reactor
//! sleeps; the reactor takes the list, releases each flag and polls. The model reactor is the
//! real loop reduced to those calls: "poll" the task (read what the wakers wrote), then take
//! wakes or [`Inbox::sleep`] without timeout. A lost wake leaves it waiting forever (a loom
//! deadlock); a wake whose writes are not visible to the poll after it does too.

use std::sync::Arc;

use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;

use super::task::{Header, NewTask, TaskRef};
use crate::coremask::CoreMask;
use crate::fdwatch::FdWatches;
use crate::group::Shared;

/// Explores every interleaving with at most `preemptions` preemptions (`None`: all). The models
/// below take 0.1 s (exhaustive), 3 s (bound 3; bound 4 costs 30 s) and 0.01 s (exhaustive) in
/// release on the project machine. Each fails if its handshake step is weakened: the fence in
/// `Inbox::push_wake` dropped (the first), `Header::release_remote` made a plain store (the
/// second).
fn model(preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = preemptions;
    b.check(f);
}

/// A one-reactor group and the header of a task on it.
fn task() -> (Arc<Shared>, TaskRef) {
    let mask = CoreMask::from_cores([0]).unwrap();
    let shared = Arc::new(Shared::new(mask, None).unwrap());
    let task = NewTask::<std::future::Pending<()>>::new(Arc::clone(&shared), 0);
    (shared, task.task().clone())
}

/// The reactor: polls the task until `ready` says it is done, waiting for a wake between polls.
/// Returns the number of polls.
fn reactor(shared: &Shared, header: &Header, ready: impl Fn() -> bool) -> u32 {
    let inbox = header.inbox();
    let mut fds = FdWatches::new();
    let mut polls = 0;
    loop {
        polls += 1;
        if ready() {
            return polls;
        }
        // Pending: wait for a wake.
        loop {
            let mut woken = false;
            for task in inbox.take_wakes() {
                task.release_remote();
                woken = true;
            }
            if woken {
                break;
            }
            inbox.sleep(None, shared.stop(), &mut fds, || {});
        }
    }
}

/// One waker writes, then wakes, racing with the reactor's first poll and its way into sleep.
#[test]
fn loom_remote_wake_racing_with_sleep_is_never_lost() {
    model(None, || {
        let (shared, header) = task();
        let data = Arc::new(AtomicU32::new(0));
        let (h, d) = (header.clone(), data.clone());
        let waker = thread::spawn(move || {
            d.store(1, Ordering::Relaxed);
            h.wake_remote();
        });
        let polls = reactor(&shared, &header, || data.load(Ordering::Relaxed) == 1);
        waker.join().unwrap();
        assert!(polls <= 2);
    });
}

/// Two wakers: the second may find the task still on the list and push nothing; the reactor's
/// release of the remote flag must then make the second waker's write visible to the poll.
#[test]
fn loom_wake_coalesced_into_a_queued_one_is_still_seen() {
    model(Some(3), || {
        let (shared, header) = task();
        let data = Arc::new(AtomicU32::new(0));
        let wakers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|bit| {
                let (h, d) = (header.clone(), data.clone());
                thread::spawn(move || {
                    d.fetch_or(bit, Ordering::Relaxed);
                    h.wake_remote();
                })
            })
            .collect();
        reactor(&shared, &header, || data.load(Ordering::Relaxed) == 3);
        for w in wakers {
            w.join().unwrap();
        }
    });
}

/// A wake racing with the reactor closing its inbox (stop): the header is either dropped by the
/// close or refused, never left on the list holding a reference.
#[test]
fn loom_wake_racing_with_close_leaks_nothing() {
    model(None, || {
        let (_shared, header) = task();
        let h = header.clone();
        let waker = thread::spawn(move || h.wake_remote());
        header.inbox().close_and_quiesce();
        waker.join().unwrap();
        // The list's reference is gone either way, and later wakes are refused.
        assert_eq!(header.strong_count(), 1);
        header.wake_remote();
        assert_eq!(header.strong_count(), 1);
    });
}

/// An abort from another thread: the owner reads the flag when it takes the wake (not at each
/// poll), so the abort must be visible once the wake is.
#[test]
fn loom_remote_abort_is_seen_when_its_wake_is_taken() {
    model(None, || {
        let (shared, header) = task();
        let h = header.clone();
        let aborter = thread::spawn(move || h.abort());
        let polls = reactor(&shared, &header, || header.is_aborted());
        aborter.join().unwrap();
        assert!(polls <= 2);
    });
}
