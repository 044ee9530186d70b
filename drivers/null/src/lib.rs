//! The null block device: every I/O completes without touching data, at once or after a
//! configured latency. It is pmio's framework-overhead benchmark (the bdev layer, tags, plug
//! and poll loop with a driver that costs next to nothing), like SPDK's null bdev and Linux's
//! null_blk.
//!
//! ```
//! use pmio::BlockDevice;
//! use pmio_null::{NullDevice, NullOptions};
//!
//! let dev = NullDevice::new(NullOptions { name: "Null0".into(), ..NullOptions::default() }).unwrap();
//! assert_eq!(dev.info().block_size, 512);
//! ```

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "rpc")]
pub mod rpc;
use std::sync::Arc;

use pmio::bdev::now_ns;
use pmio::{
    BdevError, BdevInfo, BlockDevice, DriverQueue, HctxQueues, HctxType, IoStatus, OpSet, Request,
    Uuid,
};

/// Options of a null device. Defaults: `Null0`, 1 GiB of 512-byte blocks (SPDK's null bdev
/// is usually created with 512-byte blocks; Linux null_blk's default block size is 512 too),
/// immediate completion, one default queue per reactor, queues up to 4096 deep.
#[derive(Clone, Debug)]
pub struct NullOptions {
    /// Device name (unique in a registry).
    pub name: String,
    /// UUID; a random one when `None`.
    pub uuid: Option<Uuid>,
    /// Logical block size in bytes: a power of two from 512 to 65536.
    pub block_size: u32,
    /// Number of logical blocks (> 0).
    pub num_blocks: u64,
    /// Completion latency in nanoseconds (0 = complete at the next poll).
    pub latency_ns: u64,
    /// Hardware queues one reactor may open per type (for tests of read/poll queue mapping).
    pub queues: HctxQueues,
    /// Deepest queue that may be opened (1..=65535).
    pub max_queue_depth: u32,
    /// Largest request in blocks (default unlimited): the block layer splits larger I/O, so a
    /// null device with a small limit measures splitting's cost.
    pub max_transfer_blocks: u32,
    /// No request may cross a multiple of this many blocks (default 0: none).
    pub boundary_blocks: u32,
}

impl Default for NullOptions {
    fn default() -> Self {
        NullOptions {
            name: "Null0".into(),
            uuid: None,
            block_size: 512,
            num_blocks: (1 << 30) / 512,
            latency_ns: 0,
            queues: HctxQueues::DEFAULT_ONLY,
            max_queue_depth: 4096,
            max_transfer_blocks: u32::MAX,
            boundary_blocks: 0,
        }
    }
}

/// A null block device.
#[derive(Debug)]
pub struct NullDevice {
    info: BdevInfo,
    latency_ns: u64,
}

impl NullDevice {
    /// Validates `opts` and creates the device.
    pub fn new(opts: NullOptions) -> Result<Arc<NullDevice>, BdevError> {
        let info = BdevInfo {
            name: opts.name.clone(),
            uuid: opts.uuid.unwrap_or_else(Uuid::new_v4),
            product_name: "Null disk".into(),
            block_size: opts.block_size,
            num_blocks: opts.num_blocks,
            supported_ops: OpSet::ALL,
            queues: opts.queues,
            max_queue_depth: opts.max_queue_depth,
            max_transfer_blocks: opts.max_transfer_blocks,
            boundary_blocks: opts.boundary_blocks,
        };
        info.validate()?;
        Ok(Arc::new(NullDevice {
            info,
            latency_ns: opts.latency_ns,
        }))
    }

    /// The configured completion latency (ns).
    pub fn latency_ns(&self) -> u64 {
        self.latency_ns
    }
}

impl BlockDevice for NullDevice {
    fn info(&self) -> &BdevInfo {
        &self.info
    }

    fn open_queue(
        &self,
        ty: HctxType,
        index: u16,
        depth: u32,
    ) -> Result<Box<dyn DriverQueue>, BdevError> {
        self.info.check_queue(ty, index, depth)?;
        Ok(Box::new(NullQueue::new(depth, self.latency_ns)))
    }
}

/// One reactor's queue of a null device: a FIFO ring of started tags.
///
/// Requests complete in submission order. With a latency, the head completes once
/// `now >= submit_ns + latency` (one clock read per poll); submit times are non-decreasing
/// within a queue because its owner reads its clock once per batch, so FIFO order is also
/// deadline order.
pub struct NullQueue {
    ring: Box<[u16]>,
    mask: usize,
    head: usize,
    tail: usize,
    latency_ns: u64,
}

impl NullQueue {
    fn new(depth: u32, latency_ns: u64) -> NullQueue {
        let cap = (depth as usize).next_power_of_two();
        NullQueue {
            ring: vec![0u16; cap].into_boxed_slice(),
            mask: cap - 1,
            head: 0,
            tail: 0,
            latency_ns,
        }
    }

    /// Reports the `n` oldest started requests done: copies their tags out of the ring (at
    /// most two slices) and marks them successful.
    #[inline]
    fn complete_head(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, n: usize) {
        let start = done.len();
        let h = self.head & self.mask;
        let first = n.min(self.ring.len() - h);
        done.extend_from_slice(&self.ring[h..h + first]);
        done.extend_from_slice(&self.ring[..n - first]);
        for &tag in &done[start..] {
            rqs[tag as usize].status = IoStatus::Success;
        }
        self.head = self.head.wrapping_add(n);
    }

    #[cold]
    fn poll_delayed(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        let now = now_ns();
        let avail = self.outstanding().min(max);
        let mut n = 0;
        while n < avail {
            let tag = self.ring[(self.head + n) & self.mask];
            if rqs[tag as usize].submit_ns.saturating_add(self.latency_ns) > now {
                break;
            }
            n += 1;
        }
        self.complete_head(rqs, done, n);
        n
    }
}

impl DriverQueue for NullQueue {
    #[inline]
    fn submit(&mut self, _rqs: &mut [Request], tags: &[u16]) {
        debug_assert!(self.outstanding() + tags.len() <= self.ring.len());
        let t = self.tail & self.mask;
        let first = tags.len().min(self.ring.len() - t);
        self.ring[t..t + first].copy_from_slice(&tags[..first]);
        self.ring[..tags.len() - first].copy_from_slice(&tags[first..]);
        self.tail = self.tail.wrapping_add(tags.len());
    }

    #[inline]
    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        if self.head == self.tail {
            return 0;
        }
        if self.latency_ns != 0 {
            return self.poll_delayed(rqs, done, max);
        }
        let n = self.outstanding().min(max);
        self.complete_head(rqs, done, n);
        n
    }

    fn outstanding(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio::Op;

    fn pool(n: usize) -> Vec<Request> {
        (0..n)
            .map(|i| Request {
                tag: i as u16,
                ..Request::default()
            })
            .collect()
    }

    #[test]
    fn options_are_validated() {
        let bad = [
            NullOptions {
                block_size: 1000,
                ..Default::default()
            },
            NullOptions {
                block_size: 256,
                ..Default::default()
            },
            NullOptions {
                num_blocks: 0,
                ..Default::default()
            },
            NullOptions {
                max_queue_depth: 70000,
                ..Default::default()
            },
            NullOptions {
                queues: HctxQueues {
                    default: 0,
                    read: 1,
                    poll: 0,
                },
                ..Default::default()
            },
        ];
        for o in bad {
            assert!(matches!(
                NullDevice::new(o),
                Err(BdevError::InvalidConfig { .. })
            ));
        }
        let d = NullDevice::new(NullOptions::default()).unwrap();
        assert_eq!(d.info().size_bytes(), 1 << 30);
        assert_eq!(d.info().product_name, "Null disk");
        assert!(d.info().supported_ops.contains(Op::Discard));
    }

    #[test]
    fn open_checks_type_index_and_depth() {
        let d = NullDevice::new(NullOptions {
            queues: HctxQueues {
                default: 1,
                read: 2,
                poll: 0,
            },
            ..Default::default()
        })
        .unwrap();
        assert!(d.open_queue(HctxType::Default, 0, 128).is_ok());
        assert!(d.open_queue(HctxType::Read, 1, 128).is_ok());
        assert!(d.open_queue(HctxType::Read, 2, 128).is_err());
        assert!(d.open_queue(HctxType::Poll, 0, 128).is_err());
        assert!(d.open_queue(HctxType::Default, 0, 0).is_err());
        assert!(d.open_queue(HctxType::Default, 0, 5000).is_err());
    }

    #[test]
    fn completes_in_order_up_to_max() {
        let d = NullDevice::new(NullOptions::default()).unwrap();
        let mut q = d.open_queue(HctxType::Default, 0, 8).unwrap();
        let mut rqs = pool(8);
        let mut done = Vec::with_capacity(8);
        q.submit(&mut rqs, &[3, 1, 7]);
        q.submit(&mut rqs, &[0]);
        assert_eq!(q.outstanding(), 4);
        assert_eq!(q.poll(&mut rqs, &mut done, 2), 2);
        assert_eq!(done, vec![3, 1]);
        assert_eq!(rqs[3].status, IoStatus::Success);
        assert_eq!(rqs[7].status, IoStatus::Pending);
        assert_eq!(q.poll(&mut rqs, &mut done, 8), 2);
        assert_eq!(done, vec![3, 1, 7, 0]);
        assert_eq!(q.outstanding(), 0);
        assert_eq!(q.poll(&mut rqs, &mut done, 8), 0);
    }

    #[test]
    fn ring_wraps_many_times() {
        let d = NullDevice::new(NullOptions::default()).unwrap();
        let mut q = d.open_queue(HctxType::Default, 0, 6).unwrap();
        let mut rqs = pool(6);
        let mut done = Vec::with_capacity(6);
        for round in 0..100u16 {
            let tags: Vec<u16> = (0..6).map(|i| (i + round) % 6).collect();
            q.submit(&mut rqs, &tags);
            done.clear();
            assert_eq!(q.poll(&mut rqs, &mut done, 6), 6);
            assert_eq!(done, tags);
        }
    }

    #[test]
    fn latency_holds_completions_until_due() {
        let d = NullDevice::new(NullOptions {
            latency_ns: 20_000_000,
            ..Default::default()
        })
        .unwrap();
        let mut q = d.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut rqs = pool(4);
        let mut done = Vec::with_capacity(4);
        let t0 = now_ns();
        rqs[0].submit_ns = t0;
        rqs[1].submit_ns = t0;
        q.submit(&mut rqs, &[0, 1]);
        assert_eq!(q.poll(&mut rqs, &mut done, 4), 0, "not due yet");
        while now_ns() < t0 + 20_000_000 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(q.poll(&mut rqs, &mut done, 4), 2);
        assert!(now_ns() >= t0 + 20_000_000);
        assert_eq!(done, vec![0, 1]);
    }
}
