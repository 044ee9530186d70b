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
//! *freezes* the lvol: no queue may still be writing through the old map. Each queue publishes
//! how many of its requests are in flight to the base device in its [`QueueSlot`]; the
//! protocol is Dekker's, with sequentially consistent accesses on both sides: a queue raises
//! its count and then reads `frozen`; the owner sets `frozen` and then waits until every
//! count is 0. Either the queue sees the freeze (it parks its requests and lowers its count)
//! or the owner sees the count and waits for those requests to complete.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// One queue's count of requests in flight to the base device (see the module docs).
#[derive(Debug, Default)]
pub struct QueueSlot {
    pub inflight: AtomicUsize,
}

/// What every queue of one lvol shares with the metadata owner.
#[derive(Debug)]
pub struct VolShared {
    version: AtomicU64,
    map: Mutex<Arc<ClusterMap>>,
    frozen: AtomicBool,
    slots: Mutex<Vec<Arc<QueueSlot>>>,
}

impl VolShared {
    /// An lvol whose map is `map`.
    pub fn new(map: ClusterMap) -> VolShared {
        VolShared {
            version: AtomicU64::new(1),
            map: Mutex::new(Arc::new(map)),
            frozen: AtomicBool::new(false),
            slots: Mutex::new(Vec::new()),
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

    /// A new queue's slot.
    pub fn add_queue(&self) -> Arc<QueueSlot> {
        let slot = Arc::new(QueueSlot::default());
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|s| Arc::strong_count(s) > 1);
        slots.push(Arc::clone(&slot));
        slot
    }

    /// Whether the lvol is frozen (queues hold new requests).
    #[inline]
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Freezes the lvol and waits until no queue has a request in flight through the old
    /// map. Until [`VolShared::thaw`], queues park what they are given.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
        let slots: Vec<Arc<QueueSlot>> =
            self.slots.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for s in slots {
            while s.inflight.load(Ordering::SeqCst) != 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Lets queues submit again (after the new map is published).
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        slot.inflight.store(2, Ordering::SeqCst);
        let v = Arc::clone(&vol);
        let t = std::thread::spawn(move || {
            v.freeze();
        });
        // The freezer raises the flag first; a loaded machine may start its thread late.
        let t0 = std::time::Instant::now();
        while !vol.is_frozen() {
            assert!(t0.elapsed() < Duration::from_secs(10), "freeze never began");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.is_finished(), "freeze returned with requests in flight");
        slot.inflight.store(0, Ordering::SeqCst);
        t.join().unwrap();
        vol.thaw();
        assert!(!vol.is_frozen());
    }
}
