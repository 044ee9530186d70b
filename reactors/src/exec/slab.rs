//! A slab of values addressed by generation-checked keys: the executor's tasks and its timers.
//!
//! A freed slot is reused by the next insert with its generation bumped, so a key held past its
//! value's removal (a stale wake, a timer that already fired) finds nothing instead of the slot's
//! next tenant. The storage only grows, to the most values alive at once: inserting into a
//! warmed-up slab does not allocate.

/// Addresses a value in a [`Slab`]: slot index and the slot's generation at insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    index: u32,
    generation: u32,
}

impl Key {
    /// No value (a task header before its task is inserted).
    pub(crate) const NONE: Key = Key {
        index: u32::MAX,
        generation: 0,
    };

    /// Packed into one word, for an atomic.
    pub(crate) fn to_bits(self) -> u64 {
        u64::from(self.index) << 32 | u64::from(self.generation)
    }

    pub(crate) fn from_bits(bits: u64) -> Key {
        Key {
            index: (bits >> 32) as u32,
            generation: bits as u32,
        }
    }
}

enum Entry<T> {
    /// Free; `next` is the next free slot (`u32::MAX`: none).
    Free {
        next: u32,
    },
    Full(T),
}

struct Slot<T> {
    generation: u32,
    entry: Entry<T>,
}

/// Values of type `T` under [`Key`]s (single-threaded).
pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: u32,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Slab<T> {
        Slab {
            slots: Vec::new(),
            free: u32::MAX,
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Values stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        if let Some(slot) = self.slots.get_mut(self.free as usize) {
            let index = self.free;
            let Entry::Free { next } = slot.entry else {
                unreachable!("the free list holds free slots only")
            };
            self.free = next;
            slot.entry = Entry::Full(value);
            return Key {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len()).expect("slab over 2^32 slots");
        assert!(index != u32::MAX, "slab over 2^32 slots");
        self.slots.push(Slot {
            generation: 0,
            entry: Entry::Full(value),
        });
        Key {
            index,
            generation: 0,
        }
    }

    fn slot(&mut self, key: Key) -> Option<&mut Slot<T>> {
        self.slots
            .get_mut(key.index as usize)
            .filter(|s| s.generation == key.generation)
    }

    /// The value under `key`, unless it was removed.
    pub(crate) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match &mut self.slot(key)?.entry {
            Entry::Full(value) => Some(value),
            _ => None,
        }
    }

    /// Whether `key` still addresses a stored value.
    pub(crate) fn contains(&self, key: Key) -> bool {
        self.slots
            .get(key.index as usize)
            .is_some_and(|s| s.generation == key.generation && matches!(s.entry, Entry::Full(_)))
    }

    /// Frees `key`'s slot; returns its value.
    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let free = self.free;
        let slot = self.slot(key)?;
        if matches!(slot.entry, Entry::Free { .. }) {
            return None;
        }
        slot.generation = slot.generation.wrapping_add(1);
        let old = std::mem::replace(&mut slot.entry, Entry::Free { next: free });
        self.free = key.index;
        self.len -= 1;
        match old {
            Entry::Full(value) => Some(value),
            Entry::Free { .. } => None,
        }
    }

    /// Removes every stored value, in slot order.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::new();
        for index in 0..self.slots.len() {
            let slot = &self.slots[index];
            if matches!(slot.entry, Entry::Full(_)) {
                let key = Key {
                    index: index as u32,
                    generation: slot.generation,
                };
                out.extend(self.remove(key));
            }
        }
        out
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_find_nothing_after_reuse() {
        let mut s = Slab::default();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.remove(a), Some("a"));
        let c = s.insert("c");
        // c reuses a's slot under a new generation.
        assert_eq!(c.index, a.index);
        assert_ne!(c, a);
        assert_eq!(s.get_mut(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get_mut(c), Some(&mut "c"));
        assert_eq!(s.len(), 2);
        assert!(s.contains(b) && !s.contains(a));
        assert_eq!(Key::from_bits(c.to_bits()), c);
    }

    #[test]
    fn drain_empties_stored_values_only() {
        let mut s = Slab::default();
        let keys: Vec<Key> = (0..5).map(|i| s.insert(i)).collect();
        s.remove(keys[1]);
        assert_eq!(s.drain(), vec![0, 2, 3, 4]);
        assert_eq!(s.len(), 0);
        assert_eq!(s.get_mut(keys[0]), None);
        // Freed slots are reused.
        s.insert(9);
        assert_eq!(s.slots.len(), 5);
    }
}
