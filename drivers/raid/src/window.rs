//! The rebuild window: the range of array blocks a background process is copying now, which
//! front-end writes must not touch until the copy is done (SPDK's quiesced range). Reads
//! and writes outside it go on.
//!
//! One writer (the rebuild) publishes a window; every queue of the array reads it once per
//! submit call and parks writes that overlap it. Before copying, the rebuild waits until
//! every queue has either no write in flight or acknowledged the window (no write it has in
//! flight overlaps it). The two sides pair as Dekker's: a queue stores its write count and
//! then reads the window, the rebuild stores the window and then reads the counts, with a
//! `SeqCst` fence between each store and load, so a write is either seen by the rebuild (it
//! waits) or sees the window (it parks).

use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, Weak};

/// A range of array blocks, `start..end` (empty when `start == end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Range {
    pub seq: u64,
    pub start: u64,
    pub end: u64,
}

impl Range {
    /// Whether blocks `lba..lba + n` touch the range.
    #[inline]
    pub fn overlaps(&self, lba: u64, n: u64) -> bool {
        self.start < self.end && lba < self.end && lba + n.max(1) > self.start
    }
}

/// What a queue tells the rebuild.
#[derive(Debug, Default)]
pub struct QueueAck {
    /// Writes the queue has in flight (an upper bound while it routes a batch).
    pub writes: AtomicU64,
    /// The newest window sequence the queue has no in-flight write overlapping.
    pub seen: AtomicU64,
}

/// The published window and the queues that honour it.
#[derive(Debug, Default)]
pub struct Window {
    /// Odd while the writer changes the range.
    seq: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    queues: Mutex<Vec<Weak<QueueAck>>>,
}

impl Window {
    /// Registers a queue (at open).
    pub fn register(&self) -> Arc<QueueAck> {
        let ack = Arc::new(QueueAck::default());
        let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        q.retain(|w| w.strong_count() > 0);
        q.push(Arc::downgrade(&ack));
        ack
    }

    /// The current window (a seqlock read: retried while the writer is changing it).
    #[inline]
    pub fn read(&self) -> Range {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let start = self.start.load(Ordering::Acquire);
                let end = self.end.load(Ordering::Acquire);
                // Pairs with the release increment ending `publish`.
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return Range {
                        seq: s1,
                        start,
                        end,
                    };
                }
            }
            std::hint::spin_loop();
        }
    }

    /// A queue's side of the handshake before it routes a batch: `writes` is stored, then
    /// the window read. Pairs with the fence in [`Window::publish`].
    #[inline]
    pub fn enter(&self, ack: &QueueAck, writes: u64) -> Range {
        ack.writes.store(writes, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.read()
    }

    /// Publishes `start..end` (one writer at a time) and returns its sequence number.
    pub fn publish(&self, start: u64, end: u64) -> u64 {
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.start.store(start, Ordering::Release);
        self.end.store(end, Ordering::Release);
        let seq = self.seq.fetch_add(1, Ordering::AcqRel) + 1;
        // Pairs with the fence in `enter`: a queue that stored its writes before this either
        // is seen below, or reads the new window.
        fence(Ordering::SeqCst);
        seq
    }

    /// Whether no queue has a write in flight that overlaps window `seq` (the rebuild looks
    /// again, yielding to its reactor, until it is).
    pub fn quiet(&self, seq: u64) -> bool {
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .all(|q| q.seen.load(Ordering::Acquire) >= seq || q.writes.load(Ordering::Acquire) == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_half_open_and_an_empty_window_holds_nothing() {
        let r = Range {
            seq: 2,
            start: 100,
            end: 200,
        };
        assert!(r.overlaps(199, 1) && r.overlaps(50, 51) && r.overlaps(150, 0));
        assert!(!r.overlaps(200, 8) && !r.overlaps(92, 8));
        assert!(!Range::default().overlaps(0, u32::MAX as u64));
    }

    #[test]
    fn the_rebuild_waits_for_a_queue_with_writes_until_it_acknowledges() {
        let w = Window::default();
        let idle = w.register();
        let busy = w.register();
        assert_eq!(w.enter(&busy, 3).start, 0);
        let seq = w.publish(0, 64);
        assert_eq!(w.read().end, 64);
        // The idle queue (no writes) never holds the rebuild; the busy one does until it
        // says none of its writes overlaps.
        assert!(!w.quiet(seq));
        busy.seen.store(seq, Ordering::Release);
        assert!(w.quiet(seq));
        // A queue that closed holds nothing.
        let seq = w.publish(64, 128);
        assert!(!w.quiet(seq));
        drop(busy);
        assert!(w.quiet(seq));
        drop(idle);
    }
}
