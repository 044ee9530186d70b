//! What the reactors read to translate an lvol I/O: each lvol's cluster map, published by the
//! lvstore's metadata owner, read with atomics and no lock.
//!
//! A [`ClusterMap`] is one blob's map of a given shape (size, parent, flags): an array of
//! `AtomicU32` device clusters, 0 for none. The owner stores a new cluster into the array only
//! after the metadata that maps it has been written (so an I/O never reaches a cluster the
//! store could forget), with `Release`; a reactor loads it with `Acquire`. A change of shape
//! (snapshot, resize, read-only) publishes a new map and bumps the lvol's generation: a queue
//! compares its cached generation once per submitted batch and takes the new map under a
//! mutex only then (never per I/O).
//!
//! A metadata change that moves clusters away from a blob (a snapshot takes them) first
//! *freezes* the lvol: no queue may still be writing through the old map. Each queue has one
//! atomic word, its [`QueueSlot`]: a count of its requests in flight to the base device
//! through its map, and a frozen bit the owner sets. Both sides change the same word with
//! read-modify-writes, so they are ordered by that word's modification order alone (no
//! store-load pattern, no reliance on sequential consistency): a queue adds its batch and
//! looks at the bit in the value it replaced; the owner sets the bit and then waits until
//! the count is 0. Either the queue's add came first (the owner waits for those requests) or
//! the owner's bit did (the queue parks the batch). A queue looks at the generation only
//! after its add succeeded, so a batch sent after a thaw uses the map published before it.
//!
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use self::sync::AtomicUsize;

#[cfg(all(test, loom))]
mod loom_tests;

/// The freeze handshake's atomic: loom's under `cfg(loom)` (model checking, `make loom`),
/// std's otherwise. The maps' own atomics are std's always: the handshake is what orders
/// their use.
mod sync {
    #[cfg(loom)]
    pub(super) use loom::sync::atomic::AtomicUsize;
    #[cfg(not(loom))]
    pub(super) use std::sync::atomic::AtomicUsize;

    /// The freezer's wait between looks at a queue's count.
    pub(super) fn backoff() {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// One blob's cluster map, of one shape.
#[derive(Debug)]
pub struct ClusterMap {
    /// Device cluster of each blob cluster; 0 is unallocated (cluster 0 is metadata).
    clusters: Box<[AtomicU32]>,
    /// The snapshot the blob reads through to where it has no cluster.
    pub parent: Option<Arc<ClusterMap>>,
    /// Clusters are allocated on first write.
    pub thin: bool,
    /// The data cannot be written.
    pub read_only: bool,
}

impl ClusterMap {
    /// A map of `clusters` (0 for unallocated).
    pub fn new(
        clusters: impl IntoIterator<Item = u32>,
        parent: Option<Arc<ClusterMap>>,
        thin: bool,
        read_only: bool,
    ) -> ClusterMap {
        ClusterMap {
            clusters: clusters.into_iter().map(AtomicU32::new).collect(),
            parent,
            thin,
            read_only,
        }
    }

    /// Blob clusters.
    pub fn len(&self) -> u64 {
        self.clusters.len() as u64
    }

    /// Whether the blob has no cluster.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }

    /// The blob's own device cluster for blob cluster `i` (0: none, or past the end).
    #[inline]
    pub fn own(&self, i: u64) -> u32 {
        self.clusters
            .get(i as usize)
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// The device cluster a read of blob cluster `i` reads: the blob's own, else the first
    /// ancestor's that has it; 0 when none does (the read returns zeroes).
    #[inline]
    pub fn read_through(&self, i: u64) -> u32 {
        let mut m = self;
        loop {
            if i >= m.len() {
                return 0;
            }
            match m.own(i) {
                0 => match &m.parent {
                    Some(p) => m = p,
                    None => return 0,
                },
                c => return c,
            }
        }
    }

    /// Publishes device cluster `c` for blob cluster `i`, after its metadata is written.
    pub fn publish(&self, i: u64, c: u32) {
        if let Some(slot) = self.clusters.get(i as usize) {
            slot.store(c, Ordering::Release);
        }
    }
}

/// A queue's word's frozen bit; the bits below it count requests in flight.
const FROZEN: usize = 1 << (usize::BITS - 1);

/// One queue's side of the freeze (see the module docs).
#[derive(Debug)]
pub struct QueueSlot {
    word: AtomicUsize,
}

impl QueueSlot {
    fn new(frozen: bool) -> QueueSlot {
        QueueSlot {
            word: AtomicUsize::new(if frozen { FROZEN } else { 0 }),
        }
    }

    /// Before the queue sends `n` requests to the base through its map: counts them, unless
    /// the lvol is frozen (then nothing stays counted and the queue parks them).
    #[inline]
    pub fn enter(&self, n: usize) -> bool {
        let was = self.word.fetch_add(n, Ordering::AcqRel);
        if was & FROZEN != 0 {
            self.word.fetch_sub(n, Ordering::Release);
            return false;
        }
        true
    }

    /// `n` requests counted by [`QueueSlot::enter`] are done with the map: completed, or not
    /// sent to the base after all. `Release` orders their use of the map before a freezer's
    /// look at the count.
    #[inline]
    pub fn leave(&self, n: usize) {
        if n > 0 {
            self.word.fetch_sub(n, Ordering::Release);
        }
    }

    /// Whether the owner has frozen the lvol for this queue.
    #[inline]
    pub fn is_frozen(&self) -> bool {
        self.word.load(Ordering::Acquire) & FROZEN != 0
    }

    /// Forgets what is counted (the queue is going away).
    pub fn retire(&self) {
        self.word.fetch_and(FROZEN, Ordering::Release);
    }
}

/// The queues of one lvol and whether it is frozen; new queues start frozen during a freeze.
#[derive(Debug, Default)]
struct Slots {
    frozen: bool,
    list: Vec<Arc<QueueSlot>>,
}

/// What every queue of one lvol shares with the metadata owner.
#[derive(Debug)]
pub struct VolShared {
    version: AtomicU64,
    map: Mutex<Arc<ClusterMap>>,
    slots: Mutex<Slots>,
}

impl VolShared {
    /// An lvol whose map is `map`.
    pub fn new(map: ClusterMap) -> VolShared {
        VolShared {
            version: AtomicU64::new(1),
            map: Mutex::new(Arc::new(map)),
            slots: Mutex::new(Slots::default()),
        }
    }

    /// The current generation: it changes whenever a new map is published.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The current map and its generation.
    pub fn current(&self) -> (Arc<ClusterMap>, u64) {
        let m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        (Arc::clone(&m), self.version.load(Ordering::Acquire))
    }

    /// The current map.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.current().0
    }

    /// Publishes a new map (a new shape).
    pub fn replace(&self, map: Arc<ClusterMap>) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        *m = map;
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new queue's slot.
    pub fn add_queue(&self) -> Arc<QueueSlot> {
        let mut slots = self.slots();
        let slot = Arc::new(QueueSlot::new(slots.frozen));
        slots.list.retain(|s| Arc::strong_count(s) > 1);
        slots.list.push(Arc::clone(&slot));
        slot
    }

    /// Freezes the lvol and waits until no queue has a request in flight through the old
    /// map. Until [`VolShared::thaw`], queues park what they are given.
    pub fn freeze(&self) {
        let list = {
            let mut slots = self.slots();
            slots.frozen = true;
            for s in &slots.list {
                s.word.fetch_or(FROZEN, Ordering::AcqRel);
            }
            slots.list.clone()
        };
        for s in list {
            while s.word.load(Ordering::Acquire) & !FROZEN != 0 {
                sync::backoff();
            }
        }
    }

    /// Lets queues submit again (after the new map is published).
    pub fn thaw(&self) {
        let mut slots = self.slots();
        slots.frozen = false;
        for s in &slots.list {
            s.word.fetch_and(!FROZEN, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reads_go_down_the_parent_chain() {
        let grand = Arc::new(ClusterMap::new([7, 0, 9], None, false, true));
        let parent = Arc::new(ClusterMap::new([0, 5, 0], Some(grand), true, true));
        let child = ClusterMap::new([0, 0, 0, 0], Some(parent), true, false);
        assert_eq!(child.read_through(0), 7);
        assert_eq!(child.read_through(1), 5);
        assert_eq!(child.read_through(2), 9);
        assert_eq!(child.read_through(3), 0, "past every ancestor's end");
        child.publish(1, 11);
        assert_eq!(child.read_through(1), 11);
        assert_eq!(child.own(0), 0);
    }

    #[test]
    fn freeze_waits_for_inflight_requests() {
        let vol = Arc::new(VolShared::new(ClusterMap::new([0], None, true, false)));
        let slot = vol.add_queue();
        assert!(slot.enter(2));
        let v = Arc::clone(&vol);
        let t = std::thread::spawn(move || {
            v.freeze();
        });
        // The freezer raises the flag first; a loaded machine may start its thread late.
        let t0 = std::time::Instant::now();
        while !slot.is_frozen() {
            assert!(t0.elapsed() < Duration::from_secs(10), "freeze never began");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.is_finished(), "freeze returned with requests in flight");
        slot.leave(1);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.is_finished(), "freeze returned with a request in flight");
        slot.leave(1);
        t.join().unwrap();
        assert!(!slot.enter(1), "a frozen lvol turns requests away");
        let late = vol.add_queue();
        assert!(
            late.is_frozen(),
            "a queue opened during a freeze starts frozen"
        );
        vol.thaw();
        assert!(!slot.is_frozen() && !late.is_frozen());
        assert!(slot.enter(1));
    }
}
