//! Sector-sorted sets of requests without allocation: sorted arrays of packed keys.
//!
//! A key is `sector << 16 | id` (ids are scheduler tags below 2^16, sectors below 2^48), so
//! keys are unique and order by (sector, id) as Linux's rb-tree does. Lookups are branch-free
//! binary searches (`partition_point`); insert and remove shift the tail with one `memmove`.
//! Each set is preallocated to the scheduler's depth (a request is in at most one set), so
//! nothing allocates after construction.
//!
//! Why not a tree: a scheduler holds at most `nr_requests` requests (256 by default, at most
//! [`MAX_NR_REQUESTS`]), and at that size every pointer-chasing tree (a `BTreeMap`, a treap,
//! Linux's rb-tree) loses to a binary search plus a ≤2 KiB memmove: tree descents on random
//! sectors mispredict a branch per level, and `BTreeMap` also allocates and frees nodes as it
//! grows and shrinks. Measured in `benches/sched.rs` (see BENCHMARKS.md): a treap in a slab
//! cost ~400 ns per request on the bench machine, this ~4× less.
//!
//! [`MAX_NR_REQUESTS`]: super::deadline::MAX_NR_REQUESTS

/// Largest sector a key can hold (2^48 − 1: 128 PiB with 512-byte blocks).
pub(crate) const MAX_SECTOR: u64 = (1 << 48) - 1;

const ID_BITS: u32 = 16;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

#[inline]
fn key(sector: u64, id: u32) -> u64 {
    debug_assert!(sector <= MAX_SECTOR && u64::from(id) <= ID_MASK);
    sector << ID_BITS | u64::from(id)
}

#[inline]
fn id_of(key: u64) -> u32 {
    (key & ID_MASK) as u32
}

/// Result of [`Tree::probe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) back: Option<u32>,
    pub(crate) front: Option<u32>,
    pub(crate) pos: usize,
}

/// One sorted set of (sector, id).
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    keys: Vec<u64>,
}

impl Tree {
    /// An empty set able to hold `cap` requests without allocating.
    pub(crate) fn with_capacity(cap: u32) -> Tree {
        Tree {
            keys: Vec::with_capacity(cap as usize),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Index of the first key not below `k`.
    #[inline]
    fn lower_bound(&self, k: u64) -> usize {
        self.keys.partition_point(|&x| x < k)
    }

    /// Adds `id` at `sector` (it must not be in the set).
    #[inline]
    pub(crate) fn insert(&mut self, id: u32, sector: u64) {
        debug_assert!(
            self.keys.len() < self.keys.capacity(),
            "sort set over capacity"
        );
        let k = key(sector, id);
        let i = self.lower_bound(k);
        self.keys.insert(i, k);
    }

    /// Removes `id`, which was added at `sector`. Returns whether it was there.
    #[inline]
    pub(crate) fn remove(&mut self, id: u32, sector: u64) -> bool {
        let k = key(sector, id);
        let i = self.lower_bound(k);
        if self.keys.get(i) == Some(&k) {
            self.keys.remove(i);
            true
        } else {
            false
        }
    }

    /// One search for everything an insert needs: the merge candidates around a new request
    /// at `sector..end` named `id`, and where it would go. `back` is the last request below
    /// `sector`, `front` the first at or after `end`, `pos` the insert position of `id`.
    #[inline]
    pub(crate) fn probe(&self, sector: u64, end: u64, id: u32) -> Probe {
        let sector = sector.min(MAX_SECTOR);
        let i0 = self.lower_bound(key(sector, 0));
        let back = i0.checked_sub(1).map(|j| id_of(self.keys[j]));
        // Requests starting inside [sector, end) overlap the new one: rare, so scan a few.
        let k = key(sector, id);
        let pos = self
            .scan(i0, |x| x < k)
            .unwrap_or_else(|| self.lower_bound(k));
        let end_key = key(end.min(MAX_SECTOR), 0);
        let j = self
            .scan(i0, |x| x < end_key)
            .unwrap_or_else(|| self.lower_bound(end_key));
        Probe {
            back,
            front: self.keys.get(j).map(|&x| id_of(x)),
            pos,
        }
    }

    /// From `i`, the first position where `below` is false, if found within a few steps.
    #[inline]
    fn scan(&self, mut i: usize, below: impl Fn(u64) -> bool) -> Option<usize> {
        for _ in 0..4 {
            match self.keys.get(i) {
                Some(&x) if below(x) => i += 1,
                _ => return Some(i),
            }
        }
        None
    }

    /// Inserts `id` at `sector` at position `pos` from [`Tree::probe`] (no search).
    #[inline]
    pub(crate) fn insert_at(&mut self, pos: usize, id: u32, sector: u64) {
        let k = key(sector, id);
        debug_assert!(pos == 0 || self.keys[pos - 1] < k);
        debug_assert!(pos == self.keys.len() || k < self.keys[pos]);
        debug_assert!(self.keys.len() < self.keys.capacity());
        self.keys.insert(pos, k);
    }

    /// Like [`Tree::first_at_or_after`], with the request's position (for [`Tree::remove_at`]).
    #[inline]
    pub(crate) fn next_at(&self, sector: u64) -> Option<(usize, u32)> {
        let i = self.lower_bound(key(sector.min(MAX_SECTOR), 0));
        self.keys.get(i).map(|&k| (i, id_of(k)))
    }

    /// The request at position `i` (in sector order).
    #[inline]
    pub(crate) fn id_at(&self, i: usize) -> u32 {
        id_of(self.keys[i])
    }

    /// Removes the request at position `i`, which must be `id`.
    #[inline]
    pub(crate) fn remove_at(&mut self, i: usize, id: u32) {
        debug_assert_eq!(id_of(self.keys[i]), id);
        self.keys.remove(i);
    }

    /// Removes the `n` requests from position `i` on (one shift of the tail).
    #[inline]
    pub(crate) fn remove_run(&mut self, i: usize, n: usize) {
        self.keys.drain(i..i + n);
    }

    /// The first request whose sector is at least `sector` (smallest id among equals).
    #[inline]
    pub(crate) fn first_at_or_after(&self, sector: u64) -> Option<u32> {
        let i = self.lower_bound(key(sector.min(MAX_SECTOR), 0));
        self.keys.get(i).map(|&k| id_of(k))
    }

    /// The last request whose sector is below `sector` (largest id among equals).
    #[inline]
    pub(crate) fn last_before(&self, sector: u64) -> Option<u32> {
        let i = self.lower_bound(key(sector.min(MAX_SECTOR), 0));
        i.checked_sub(1).map(|j| id_of(self.keys[j]))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn lookups_and_capacity() {
        let mut t = Tree::with_capacity(4096);
        let cap = t.keys.capacity();
        for id in 0..4096 {
            t.insert(id, u64::from(4095 - id) * 8);
        }
        assert_eq!(t.keys.capacity(), cap, "no reallocation");
        assert_eq!(t.len(), 4096);
        assert_eq!(t.first_at_or_after(8 * 100 + 1), Some(4095 - 101));
        assert_eq!(t.last_before(8 * 100), Some(4095 - 99));
        assert_eq!(t.last_before(0), None);
        assert_eq!(t.first_at_or_after(8 * 4096), None);
        assert!(t.remove(4095, 0));
        assert!(!t.remove(4095, 0));
        assert_eq!(t.first_at_or_after(0), Some(4094));
        // Largest sector still orders.
        t.insert(4095, MAX_SECTOR);
        assert_eq!(t.first_at_or_after(u64::MAX), Some(4095));
    }

    proptest! {
        #[test]
        fn prop_sorted_set_matches_btreeset(
            ops in prop::collection::vec((any::<bool>(), 0u32..64, 0u64..40), 1..400)
        ) {
            let mut t = Tree::with_capacity(64);
            let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
            let mut sector_of = [None; 64];
            for (ins, id, sector) in ops {
                if ins {
                    if sector_of[id as usize].is_none() {
                        t.insert(id, sector);
                        model.insert((sector, id));
                        sector_of[id as usize] = Some(sector);
                    }
                } else if let Some(sec) = sector_of[id as usize].take() {
                    prop_assert!(t.remove(id, sec));
                    model.remove(&(sec, id));
                }
                prop_assert_eq!(
                    t.first_at_or_after(sector),
                    model.range((sector, 0)..).next().map(|&(_, i)| i)
                );
                prop_assert_eq!(
                    t.last_before(sector),
                    model.range(..(sector, 0)).next_back().map(|&(_, i)| i)
                );
                prop_assert_eq!(t.len(), model.len());
                let (end, pid) = (sector + u64::from(id % 5), 63 - id);
                let pr = t.probe(sector, end, pid);
                prop_assert_eq!(pr.back, model.range(..(sector, 0)).next_back().map(|&(_, i)| i));
                prop_assert_eq!(pr.front, model.range((end, 0)..).next().map(|&(_, i)| i));
                prop_assert_eq!(pr.pos, model.range(..(sector, pid)).count());
            }
        }
    }
}
