//! Loom model of the freeze handshake (`make loom`): a queue sending batches through its map
//! while the owner freezes the lvol, moves the clusters its old map points at, publishes a new
//! map and thaws. The old map's cluster is a loom cell: a use of it that is not ordered before
//! the owner's change is a data race loom reports, and a use after the change (through a map
//! the queue should have dropped) fails the assertion.

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;

use super::{ClusterMap, VolShared};

#[test]
fn loom_no_request_uses_the_old_map_once_a_freeze_has_moved_its_clusters() {
    loom::model(|| {
        let vol = Arc::new(VolShared::new(ClusterMap::new([1], None, true, false)));
        let slot = vol.add_queue();
        let old = Arc::new(UnsafeCell::new(0u32));
        let (v, c) = (Arc::clone(&vol), Arc::clone(&old));
        // The queue was opened on the old map.
        let seen = vol.generation();
        let queue = thread::spawn(move || {
            for _ in 0..2 {
                // As LvolQueue::dispatch: the handshake first, then the generation.
                if slot.enter(1) {
                    if v.generation() == seen {
                        // SAFETY: a plain read of the cell; loom checks it is ordered with
                        // the owner's write.
                        let moved = c.with(|p| unsafe { *p });
                        assert_eq!(
                            moved, 0,
                            "a request went through the old map after the freeze"
                        );
                    }
                    slot.leave(1);
                }
            }
        });
        vol.freeze();
        // SAFETY: as above, the write loom checks against the queue's reads.
        old.with_mut(|p| unsafe { *p = 1 });
        vol.replace(Arc::new(ClusterMap::new([2], None, true, false)));
        vol.thaw();
        queue.join().unwrap();
    });
}
