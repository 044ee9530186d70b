//! In-flight request tracking (INFLIGHT_SHMFD): a log of which heads each queue has taken
//! and not yet returned, kept in a memfd that the front end holds on to. When pmio-tgt dies
//! and a new one takes over (QEMU's `reconnect=`), the front end hands the same memfd back
//! (SET_INFLIGHT_FD) and the new backend resubmits exactly the requests that were in flight:
//! none is lost, none is done twice from the guest's point of view.
//!
//! The region's layout is the backend's own (the front end treats it as opaque): per queue, a
//! 64-byte-aligned block of a 16-byte header (`version: u16`, `desc_num: u16`, `used_idx:
//! u16`, zero padding) and one 16-byte state per descriptor (`inflight: u8`, padding,
//! `counter: u64` at offset 8: the submission order, for resubmitting in order).
//!
//! The protocol for one queue: taking head `h` sets its counter then its flag; a completion is
//! published (used ring index stored) before its flag is cleared; after a poll's batch of flags
//! is cleared, the header's `used_idx` is set to the published used index. A crash between
//! publishing and clearing leaves flags set for heads the guest already has back: on recovery
//! the used ring entries from the header's `used_idx` to the guest's used index name them,
//! and their flags are cleared before anything is resubmitted.
//!
//! All access goes through vm-memory's bounds-checked volatile accessors: the front end could
//! change the region under us, and nothing it writes there can make us touch memory outside
//! it (a corrupt log only makes us resubmit heads the ring then checks like any other).

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap, MmapRegion};

use crate::error::VhostError;
use crate::spec::ring;

/// Layout version written into each queue's header.
const VERSION: u16 = 1;
const HEADER: u64 = 16;
const STATE: u64 = 16;
const ALIGN: u64 = 64;

/// Bytes of one queue's block for `queue_size` descriptors.
pub fn queue_bytes(queue_size: u16) -> u64 {
    (HEADER + STATE * u64::from(queue_size)).div_ceil(ALIGN) * ALIGN
}

/// A mapped in-flight region, shared by the rings of one session.
#[derive(Debug)]
pub struct InflightRegion {
    mem: GuestMemoryMmap,
    num_queues: u16,
    queue_size: u16,
}

/// The answer to GET_INFLIGHT_FD: the region's size and a new, zeroed memfd of that size.
pub struct NewRegion {
    pub region: Arc<InflightRegion>,
    pub file: File,
    pub mmap_size: u64,
}

impl InflightRegion {
    /// A new zeroed region for `num_queues` queues of `queue_size` descriptors (GET_INFLIGHT_FD).
    pub fn create(num_queues: u16, queue_size: u16) -> Result<NewRegion, VhostError> {
        let size = queue_bytes(queue_size) * u64::from(num_queues);
        let file = crate::sys::memfd("pmio-vhost-inflight", size)
            .map_err(|e| VhostError::Inflight(format!("memfd of {size} bytes: {e}")))?;
        let dup = file
            .try_clone()
            .map_err(|e| VhostError::Inflight(e.to_string()))?;
        let region = Self::map(dup, size, 0, num_queues, queue_size)?;
        for q in 0..num_queues {
            let base = queue_bytes(queue_size) * u64::from(q);
            region.put(base, VERSION)?;
            region.put(base + 2, queue_size)?;
        }
        Ok(NewRegion {
            region: Arc::new(region),
            file,
            mmap_size: size,
        })
    }

    /// Maps the region the front end hands back (SET_INFLIGHT_FD).
    pub fn map(
        file: File,
        mmap_size: u64,
        mmap_offset: u64,
        num_queues: u16,
        queue_size: u16,
    ) -> Result<InflightRegion, VhostError> {
        let need = queue_bytes(queue_size) * u64::from(num_queues);
        if num_queues == 0 || queue_size == 0 || mmap_size < need {
            return Err(VhostError::Inflight(format!(
                "{mmap_size} bytes for {num_queues} queues of {queue_size} (need {need})"
            )));
        }
        let size = usize::try_from(mmap_size)
            .map_err(|_| VhostError::Inflight(format!("size {mmap_size}")))?;
        let m = MmapRegion::from_file(FileOffset::new(file, mmap_offset), size)
            .map_err(|e| VhostError::Inflight(format!("mapping: {e}")))?;
        let r = GuestRegionMmap::new(m, GuestAddress(0))
            .ok_or_else(|| VhostError::Inflight("mapping".into()))?;
        let mem = GuestMemoryMmap::from_regions(vec![r])
            .map_err(|e| VhostError::Inflight(e.to_string()))?;
        Ok(InflightRegion {
            mem,
            num_queues,
            queue_size,
        })
    }

    fn put<T: vm_memory::ByteValued>(&self, at: u64, v: T) -> Result<(), VhostError> {
        self.mem
            .write_obj(v, GuestAddress(at))
            .map_err(|e| VhostError::Inflight(e.to_string()))
    }

    /// Queue `index`'s log, for a ring of `size` descriptors.
    pub fn queue(self: &Arc<Self>, index: u16, size: u16) -> Result<QueueLog, VhostError> {
        if index >= self.num_queues || size > self.queue_size {
            return Err(VhostError::Inflight(format!(
                "queue {index} of {size} descriptors in a region for {} queues of {}",
                self.num_queues, self.queue_size
            )));
        }
        Ok(QueueLog {
            region: Arc::clone(self),
            base: queue_bytes(self.queue_size) * u64::from(index),
            size,
            counter: 0,
        })
    }
}

/// One queue's part of the region, used by the ring on its reactor.
#[derive(Debug)]
pub struct QueueLog {
    region: Arc<InflightRegion>,
    base: u64,
    size: u16,
    /// The next submission's counter.
    counter: u64,
}

impl QueueLog {
    fn m(&self) -> &GuestMemoryMmap {
        &self.region.mem
    }

    fn state(&self, head: u16) -> u64 {
        self.base + HEADER + STATE * u64::from(head)
    }

    /// Records head `head` as taken (before its request is parsed or submitted).
    pub fn begin(&mut self, head: u16) {
        let at = self.state(head);
        self.counter += 1;
        let _ = self.m().write_obj(self.counter, GuestAddress(at + 8));
        let _ = self.m().store(1u8, GuestAddress(at), Ordering::Release);
    }

    /// After the used index `used_idx` was published: clears the flags of `heads` (this
    /// batch), then records `used_idx`.
    pub fn end_batch(&mut self, heads: &[u16], used_idx: u16) {
        for &h in heads {
            let _ = self
                .m()
                .store(0u8, GuestAddress(self.state(h)), Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        let _ = self
            .m()
            .store(used_idx, GuestAddress(self.base + 4), Ordering::Release);
    }

    /// Recovery at ring start: `guest_used` is the used index in guest memory, `used_head(i)`
    /// reads the head of used entry `i`. Clears the flags of heads published after the log's
    /// last batch, and returns the heads still in flight, oldest first.
    pub fn recover(&mut self, guest_used: u16, used_head: impl Fn(u16) -> Option<u16>) -> Vec<u16> {
        let version: u16 = self.m().read_obj(GuestAddress(self.base)).unwrap_or(0);
        if version != VERSION {
            log::warn!("vhost: in-flight log version {version}, not {VERSION}: ignored");
            return Vec::new();
        }
        let logged: u16 = self
            .m()
            .read_obj(GuestAddress(self.base + 4))
            .unwrap_or(guest_used);
        let mut i = logged;
        let mut steps = 0u32;
        while i != guest_used && steps <= u32::from(ring::MAX_SIZE) {
            if let Some(h) = used_head(i).filter(|&h| h < self.size) {
                let _ = self
                    .m()
                    .store(0u8, GuestAddress(self.state(h)), Ordering::Relaxed);
            }
            i = i.wrapping_add(1);
            steps += 1;
        }
        let _ = self
            .m()
            .store(guest_used, GuestAddress(self.base + 4), Ordering::Release);
        let mut live: Vec<(u64, u16)> = (0..self.size)
            .filter_map(|h| {
                let at = self.state(h);
                let flag: u8 = self.m().read_obj(GuestAddress(at)).ok()?;
                let c: u64 = self.m().read_obj(GuestAddress(at + 8)).ok()?;
                (flag == 1).then_some((c, h))
            })
            .collect();
        live.sort_unstable();
        self.counter = live.last().map_or(0, |&(c, _)| c);
        live.into_iter().map(|(_, h)| h).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_heads_survive_in_the_memfd_in_order() {
        let NewRegion {
            region,
            file,
            mmap_size,
        } = InflightRegion::create(2, 8).unwrap();
        assert_eq!(mmap_size, 2 * queue_bytes(8));
        let mut q1 = region.queue(1, 8).unwrap();
        for h in [5, 2, 7, 0] {
            q1.begin(h);
        }
        // Heads 2 and 0 completed and were published in a batch (used index 2).
        q1.end_batch(&[2, 0], 2);
        // Head 7 was published too (used index 3), then the process died before clearing.
        drop(q1);
        drop(region);
        // The next process maps what the front end kept.
        let again = Arc::new(InflightRegion::map(file, mmap_size, 0, 2, 8).unwrap());
        let mut q1 = again.queue(1, 8).unwrap();
        let used = [2u16, 0, 7];
        let live = q1.recover(3, |i| used.get(usize::from(i)).copied());
        assert_eq!(
            live,
            vec![5],
            "head 7 was published; 5 is the one in flight"
        );
        // Queue 0 was never used.
        let mut q0 = again.queue(0, 8).unwrap();
        assert!(q0.recover(0, |_| None).is_empty());
        // New heads count on from the recovered order.
        q1.begin(3);
        let live = q1.recover(3, |_| None);
        assert_eq!(live, vec![5, 3]);
    }

    #[test]
    fn a_bad_region_is_refused_or_ignored() {
        let NewRegion { file, .. } = InflightRegion::create(1, 8).unwrap();
        assert!(InflightRegion::map(file.try_clone().unwrap(), 16, 0, 1, 8).is_err());
        let r = Arc::new(InflightRegion::map(file, queue_bytes(8), 0, 1, 8).unwrap());
        assert!(r.queue(1, 8).is_err());
        assert!(r.queue(0, 16).is_err());
        // A garbled header: nothing is resubmitted.
        r.put(0, 77u16).unwrap();
        let mut q = r.queue(0, 8).unwrap();
        q.begin(1);
        assert!(q.recover(0, |_| None).is_empty());
    }
}
