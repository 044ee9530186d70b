//! One reactor's queue of an lvol: translates each request (lvol block → blob cluster →
//! device cluster → base block) with the published map, forwards it to its own queue of the
//! base bdev under the same tag, and completes it in its own `poll`.
//!
//! - a read of a cluster the lvol has not written goes to the first ancestor that has it, or
//!   completes with zeroes;
//! - a write (or a write-zeroes over inherited data) to such a cluster of a thin lvol is
//!   parked, with every later request to that cluster, while the metadata owner allocates it
//!   (copying the parent's data in); the owner's reply resubmits them;
//! - write-zeroes over a cluster that reads as zeroes anyway completes at once (SPDK
//!   allocates the cluster and writes zeroes; the result reads the same and costs nothing);
//! - unmap forwards to the base for the lvol's own clusters and does nothing elsewhere; an
//!   unmap of a whole cluster of a thin lvol without a parent frees the cluster (SPDK's rule):
//!   it is parked, with every later request to that cluster, while the owner frees it;
//! - flush goes to the base (SPDK's lvol refuses flush; forwarding it makes the data the
//!   host flushed durable on a base with a volatile cache, such as a file).
//!
//! A forwarded request goes to the base queue in place: the lvol queue rewrites its extent
//! to the base's, hands the caller's own request array to the base under the same tag, and
//! puts the lvol extent back when the base completes it (kept per tag meanwhile). There is no
//! copy of the request and no second pass over the completions but that restore.
//!
//! Nothing is allocated per I/O: the saved extents are an array indexed by tag, the parked
//! list and the completion ring are reserved at open.

use std::collections::VecDeque;
use std::sync::Arc;

use pmio::{DriverQueue, IoStatus, Op, OpSet, Request};
use pmio_blobstore::BlobId;

use crate::map::{ClusterMap, QueueSlot, VolShared};
use crate::owner::{Mailbox, Msg, OwnerTx};

/// A parked request waiting for the lvol to thaw (not for an allocation).
const FROZEN: u64 = u64::MAX;

/// The fixed geometry of a translation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geo {
    /// Lvol blocks per cluster.
    pub(crate) cluster_blocks: u64,
    /// Base blocks per lvol block.
    pub(crate) base_per_block: u64,
    /// Base blocks per cluster.
    pub(crate) cluster_base_blocks: u64,
    /// Lvol block size in bytes.
    pub(crate) block_size: u32,
    /// Lvol blocks the device object was made with (its `BdevInfo`).
    pub(crate) num_blocks: u64,
    /// log2 of `cluster_blocks` when it is a power of two (SPDK's default sizes are): the
    /// translation then shifts and masks instead of dividing.
    pub(crate) cluster_shift: Option<u32>,
}

impl Geo {
    /// Blob cluster and block within it of lvol block `lba`.
    #[inline]
    fn split(&self, lba: u64) -> (u64, u64) {
        match self.cluster_shift {
            Some(s) => (lba >> s, lba & ((1 << s) - 1)),
            None => (lba / self.cluster_blocks, lba % self.cluster_blocks),
        }
    }
}

/// What to do with a request.
enum Step {
    Forward(u64),
    Done(IoStatus),
    Zero,
    Park(u64),
    Allocate(u64),
    Release(u64),
}

/// An lvol queue (see the module docs).
pub(crate) struct LvolQueue {
    pub(crate) base: Box<dyn DriverQueue>,
    pub(crate) base_ops: OpSet,
    /// The lvol extent (lba, nblocks) of each tag forwarded to the base, put back at its
    /// completion.
    pub(crate) saved: Vec<(u64, u32)>,
    pub(crate) fwd: Vec<u16>,
    pub(crate) vol: Arc<VolShared>,
    pub(crate) map: Arc<ClusterMap>,
    pub(crate) seen: u64,
    pub(crate) slot: Arc<QueueSlot>,
    pub(crate) owner: OwnerTx,
    pub(crate) blob: BlobId,
    pub(crate) geo: Geo,
    pub(crate) mailbox: Arc<Mailbox>,
    pub(crate) mail: Vec<(u64, Result<(), i32>)>,
    /// Completions to report at the next poll.
    pub(crate) local: VecDeque<u16>,
    /// Parked requests and the cluster each waits for ([`FROZEN`]: the thaw).
    pub(crate) parked: Vec<(u16, u64)>,
    pub(crate) resubmit: Vec<u16>,
    /// Clusters with an allocation asked of the owner.
    pub(crate) waiting: Vec<u64>,
    /// Requests in the base queue.
    pub(crate) inflight: usize,
}

impl LvolQueue {
    pub(crate) fn new(
        base: Box<dyn DriverQueue>,
        base_ops: OpSet,
        vol: Arc<VolShared>,
        owner: OwnerTx,
        blob: BlobId,
        geo: Geo,
        depth: u32,
    ) -> LvolQueue {
        let depth = depth as usize;
        let (map, seen) = vol.current();
        let slot = vol.add_queue();
        LvolQueue {
            base,
            base_ops,
            saved: vec![(0, 0); depth],
            fwd: Vec::with_capacity(depth),
            vol,
            map,
            seen,
            slot,
            owner,
            blob,
            geo,
            mailbox: Arc::new(Mailbox::default()),
            mail: Vec::with_capacity(8),
            local: VecDeque::with_capacity(depth),
            parked: Vec::with_capacity(depth),
            resubmit: Vec::with_capacity(depth),
            waiting: Vec::with_capacity(8),
            inflight: 0,
        }
    }

    /// Decides what request `rq` needs.
    #[inline]
    fn step(&self, rq: &Request) -> Step {
        let g = &self.geo;
        let map = &*self.map;
        if rq.op == Op::Flush {
            return if self.base_ops.contains(Op::Flush) {
                Step::Forward(0)
            } else {
                Step::Done(IoStatus::Success)
            };
        }
        let n = u64::from(rq.nblocks);
        let end = rq.lba.checked_add(n);
        let size = (map.len() * g.cluster_blocks).min(g.num_blocks);
        let (i, within) = g.split(rq.lba);
        if end.is_none_or(|e| e > size) || within + n > g.cluster_blocks {
            return Step::Done(IoStatus::Errno(libc::EINVAL));
        }
        if !self.waiting.is_empty() && self.waiting.contains(&i) {
            return Step::Park(i);
        }
        if rq.op != Op::Read && map.read_only {
            return Step::Done(IoStatus::Errno(libc::EPERM));
        }
        let own = map.own(i);
        let base_lba = |c: u32| u64::from(c) * g.cluster_base_blocks + within * g.base_per_block;
        match rq.op {
            Op::Read => match map.read_through(i) {
                0 => Step::Zero,
                c => Step::Forward(base_lba(c)),
            },
            Op::Write if own != 0 => Step::Forward(base_lba(own)),
            Op::Write if map.thin => Step::Allocate(i),
            Op::Write => Step::Done(IoStatus::Errno(libc::EIO)),
            Op::WriteZeroes if own != 0 => Step::Forward(base_lba(own)),
            Op::WriteZeroes if map.read_through(i) == 0 => Step::Done(IoStatus::Success),
            Op::WriteZeroes if map.thin => Step::Allocate(i),
            Op::WriteZeroes => Step::Done(IoStatus::Errno(libc::EIO)),
            Op::Discard
                if own != 0
                    && map.thin
                    && map.parent.is_none()
                    && within == 0
                    && n == g.cluster_blocks =>
            {
                Step::Release(i)
            }
            Op::Discard if own != 0 && self.base_ops.contains(Op::Discard) => {
                Step::Forward(base_lba(own))
            }
            Op::Discard | Op::Flush => Step::Done(IoStatus::Success),
        }
    }

    /// Translates and starts `tags` (from `submit`, or parked ones resubmitted).
    fn dispatch(&mut self, rqs: &mut [Request], tags: &[u16]) {
        if self.saved.len() < rqs.len() {
            self.saved.resize(rqs.len(), (0, 0));
        }
        // The freeze handshake (map.rs), then the generation: a batch let through after a
        // thaw must see the map published before it.
        if !self.slot.enter(tags.len()) {
            self.parked.extend(tags.iter().map(|&t| (t, FROZEN)));
            return;
        }
        if self.vol.generation() != self.seen {
            (self.map, self.seen) = self.vol.current();
        }
        self.fwd.clear();
        for &t in tags {
            let rq = &mut rqs[t as usize];
            let step = self.step(rq);
            match step {
                Step::Forward(lba) => {
                    self.saved[t as usize] = (rq.lba, rq.nblocks);
                    rq.lba = lba;
                    rq.nblocks = (u64::from(rq.nblocks) * self.geo.base_per_block) as u32;
                    self.fwd.push(t);
                }
                Step::Done(s) => {
                    rq.status = s;
                    self.local.push_back(t);
                }
                Step::Zero => {
                    let len = u64::from(rq.nblocks) * u64::from(self.geo.block_size);
                    if u64::from(rq.buf.len()) < len {
                        rq.status = IoStatus::Errno(libc::EINVAL);
                    } else {
                        zero(rq, len as usize);
                        rq.status = IoStatus::Success;
                    }
                    self.local.push_back(t);
                }
                Step::Park(i) => self.parked.push((t, i)),
                Step::Allocate(i) | Step::Release(i) => {
                    let mb = Arc::clone(&self.mailbox);
                    let blob = self.blob;
                    let job: crate::owner::Job = if matches!(step, Step::Release(_)) {
                        Box::new(move |o| o.release(blob, i, &mb))
                    } else {
                        Box::new(move |o| o.allocate(blob, i, &mb))
                    };
                    if self.owner.send(Msg::Job(job)).is_ok() {
                        self.waiting.push(i);
                        self.parked.push((t, i));
                    } else {
                        rq.status = IoStatus::Errno(libc::EIO);
                        self.local.push_back(t);
                    }
                }
            }
        }
        if !self.fwd.is_empty() {
            self.base.submit(rqs, &self.fwd);
            self.inflight += self.fwd.len();
        }
        self.slot.leave(tags.len() - self.fwd.len());
    }

    /// Moves parked requests whose wait is over to `resubmit` (or fails them).
    #[cold]
    fn unpark(&mut self, rqs: &mut [Request]) {
        self.mail.clear();
        self.mailbox.take(&mut self.mail);
        let thawed = !self.slot.is_frozen();
        self.resubmit.clear();
        let mut k = 0;
        while k < self.parked.len() {
            let (t, i) = self.parked[k];
            let outcome = if i == FROZEN {
                thawed.then_some(Ok(()))
            } else {
                self.mail.iter().find(|(c, _)| *c == i).map(|(_, r)| *r)
            };
            match outcome {
                None => k += 1,
                Some(r) => {
                    self.parked.swap_remove(k);
                    match r {
                        Ok(()) => self.resubmit.push(t),
                        Err(e) => {
                            rqs[t as usize].status = IoStatus::Errno(e);
                            self.local.push_back(t);
                        }
                    }
                }
            }
        }
        for (c, _) in &self.mail {
            self.waiting.retain(|w| w != c);
        }
        if !self.resubmit.is_empty() {
            // Oldest first, as they were submitted.
            self.resubmit
                .sort_unstable_by_key(|&t| rqs[t as usize].submit_ns);
            let tags = std::mem::take(&mut self.resubmit);
            self.dispatch(rqs, &tags);
            self.resubmit = tags;
        }
    }
}

/// Fills a read's buffer with zeroes.
fn zero(rq: &Request, len: usize) {
    // SAFETY: the submitter guarantees the buffer is valid for writes of its length and ours
    // until the request completes (IoBuf::from_raw_parts); `len` was checked against it.
    unsafe { std::ptr::write_bytes(rq.buf.as_ptr(), 0, len) };
}

impl DriverQueue for LvolQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.dispatch(rqs, tags);
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        if !self.parked.is_empty() {
            self.unpark(rqs);
        }
        let mut n = 0;
        while n < max {
            match self.local.pop_front() {
                Some(t) => {
                    done.push(t);
                    n += 1;
                }
                None => break,
            }
        }
        if n < max && self.inflight > 0 {
            let from = done.len();
            let got = self.base.poll(rqs, done, max - n);
            for &t in &done[from..] {
                let rq = &mut rqs[t as usize];
                (rq.lba, rq.nblocks) = self.saved[t as usize];
            }
            if got > 0 {
                self.inflight -= got;
                self.slot.leave(got);
            }
            n += got;
        }
        n
    }

    fn outstanding(&self) -> usize {
        self.inflight + self.local.len() + self.parked.len()
    }
}

impl Drop for LvolQueue {
    fn drop(&mut self) {
        self.slot.retire();
    }
}
