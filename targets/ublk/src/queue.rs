//! One queue of a ublk disk, owned by the reactor that serves it: its request descriptors
//! (mapped from `/dev/ublkcN`), one data buffer per tag, its own bdev queue, and what each
//! tag is doing.
//!
//! A tag's life: its fetch waits in the kernel (`Kernel`); the fetch completes with a request
//! in the tag's descriptor; the request becomes one bdev I/O through the tag's buffer (`Bdev`,
//! or `Waiting` while the bdev queue is full); its completion is committed back with
//! COMMIT_AND_FETCH_REQ, which is also the tag's next fetch (`Kernel` again). The kernel copies
//! a write's data into the buffer before it completes the fetch, and a read's data out of it
//! while it takes the commit, so a buffer belongs to its tag's one request at a time. A fetch
//! that comes back aborted (the disk stopped, or the server's ring closed) ends the tag
//! (`Dead`); the queue is drained once every tag is dead with no I/O left.
//!
//! Buffers are copied through by the kernel (neither user copy nor zero copy: see the crate
//! documentation for why and what it costs).

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use io_uring::{opcode, squeue, types};
use pmio::bdev::{BdevQueue, BdevQueueOptions, Registry, SubmitError};
use pmio::dma::DmaRegion;
use pmio::{Io, IoBuf, IoStatus, Plug};

use crate::error::UblkError;
use crate::params::{Geometry, Plan, commit_result, plan};
use crate::sys::{self, IoCmd, IoDesc, IodMap};

/// A queue of a disk: (disk id, queue id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueKey {
    pub dev: u32,
    pub q: u16,
}

/// What a queue reports when it has drained (or failed to start).
#[derive(Debug)]
pub struct QueueReport {
    pub key: QueueKey,
    /// Requests served.
    pub completed: u64,
    /// The first error a fetch or commit came back with (not the stop's abort).
    pub error: Option<i32>,
}

/// Everything a reactor needs to start serving a queue.
pub struct QueueSetup {
    pub key: QueueKey,
    /// `/dev/ublkcN`, open while any queue of the disk may use it.
    pub cdev: Arc<File>,
    pub depth: u16,
    pub bdev: String,
    pub geometry: Geometry,
    pub ioctl_encode: bool,
    /// Told once the queue has drained.
    pub drained: Sender<QueueReport>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagState {
    /// A fetch (or commit-and-fetch) is in the kernel.
    Kernel,
    /// Its request is a bdev I/O in flight.
    Bdev,
    /// Its request waits for room in the bdev queue.
    Waiting,
    /// Its commit is staged, to go with the next submit.
    Commit,
    /// Its fetch came back aborted: no more requests.
    Dead,
}

/// A queue as its reactor serves it. Field order is drop order: the bdev queue goes before the
/// buffers its I/O used.
pub struct UblkQueue {
    pub key: QueueKey,
    bdev: BdevQueue,
    bufs: Option<DmaRegion>,
    iods: Option<IodMap>,
    cdev: Arc<File>,
    geometry: Geometry,
    ioctl_encode: bool,
    tags: Vec<TagState>,
    descs: Vec<IoDesc>,
    waiting: VecDeque<u16>,
    /// Staged commits: (tag, result).
    commits: Vec<(u16, i32)>,
    in_kernel: u32,
    in_bdev: u32,
    completed: u64,
    error: Option<i32>,
    drained: Option<Sender<QueueReport>>,
}

impl UblkQueue {
    /// Maps the queue's descriptors, allocates its buffers and opens its bdev queue (on the
    /// calling reactor).
    pub fn open(setup: QueueSetup, registry: &Registry) -> Result<UblkQueue, UblkError> {
        let QueueSetup {
            key,
            cdev,
            depth,
            bdev,
            geometry,
            ioctl_encode,
            drained,
        } = setup;
        let qerr = |reason: String| UblkError::Queue {
            id: key.dev,
            queue: key.q,
            reason,
        };
        let dev = registry
            .get(&bdev)
            .ok_or_else(|| UblkError::BdevNotFound(bdev.clone()))?;
        let iods = IodMap::map(&cdev, key.q, depth)
            .map_err(|e| qerr(format!("mapping its request descriptors: {e}")))?;
        let bytes = usize::from(depth) * geometry.buf_bytes as usize;
        let bufs = DmaRegion::with_options(bytes, dev.dma_options())
            .map_err(|e| qerr(format!("{bytes} bytes of I/O buffers: {e}")))?;
        let bdepth = u32::from(depth).min(dev.info().max_queue_depth);
        let q = BdevQueue::open_in(
            registry,
            &bdev,
            BdevQueueOptions {
                depth: bdepth,
                ..BdevQueueOptions::default()
            },
        )
        .map_err(|e| qerr(format!("opening bdev {bdev}: {e}")))?;
        let n = usize::from(depth);
        Ok(UblkQueue {
            key,
            bdev: q,
            bufs: Some(bufs),
            iods: Some(iods),
            cdev,
            geometry,
            ioctl_encode,
            tags: vec![TagState::Kernel; n],
            descs: vec![IoDesc::default(); n],
            waiting: VecDeque::with_capacity(n),
            commits: Vec::with_capacity(n),
            in_kernel: 0,
            in_bdev: 0,
            completed: 0,
            error: None,
            drained: Some(drained),
        })
    }

    pub fn depth(&self) -> u16 {
        self.tags.len() as u16
    }

    pub fn bdev(&self) -> &BdevQueue {
        &self.bdev
    }

    pub fn bdev_mut(&mut self) -> &mut BdevQueue {
        &mut self.bdev
    }

    /// The buffers, as `(address, length)` for the bdev's `register_memory`.
    pub fn region(&self) -> Option<(*mut u8, usize)> {
        self.bufs.as_ref().map(|b| (b.as_ptr(), b.len()))
    }

    fn buf(&self, tag: u16) -> IoBuf {
        let b = self.bufs.as_ref().expect("buffers live while the queue serves");
        let size = self.geometry.buf_bytes as usize;
        let off = usize::from(tag) * size;
        assert!(off + size <= b.len());
        // SAFETY: bytes `off..off + size` of the queue's region, which outlives every I/O of
        // the queue (dropped after the bdev queue, or leaked while the kernel may still use
        // it); they are tag `tag`'s alone, and a tag has one request at a time.
        unsafe { IoBuf::from_raw_parts(b.as_ptr().add(off), size as u32) }
    }

    /// The SQE of tag `tag`'s fetch (`commit: None`) or commit-and-fetch.
    pub fn sqe(&self, tag: u16, commit: Option<i32>, user_data: u64) -> squeue::Entry128 {
        let (cmd, result) = match commit {
            None => (sys::IO_FETCH_REQ, 0),
            Some(r) => (sys::IO_COMMIT_AND_FETCH_REQ, r),
        };
        let c = IoCmd {
            q_id: self.key.q,
            tag,
            result,
            addr: self.buf(tag).as_ptr() as u64,
        };
        opcode::UringCmd80::new(
            types::Fd(self.cdev.as_raw_fd()),
            sys::io_op(cmd, self.ioctl_encode),
        )
        .cmd(sys::cmd_bytes(&c))
        .build()
        .user_data(user_data)
    }

    /// Counts a fetch or commit handed to the kernel.
    pub fn sent(&mut self, tag: u16) {
        self.tags[usize::from(tag)] = TagState::Kernel;
        self.in_kernel += 1;
    }

    /// Tag `tag`'s command came back with `res`. A request becomes a bdev I/O (submitted
    /// into `plug`, `token` naming the tag), a staged failure, or waits for room.
    pub fn on_cqe(&mut self, tag: u16, res: i32, plug: &mut Plug, token: u64) -> bool {
        let Some(state) = self.tags.get(usize::from(tag)).copied() else {
            log::error!("ublk {:?}: completion for tag {tag} beyond depth", self.key);
            return false;
        };
        if state != TagState::Kernel {
            log::error!("ublk {:?}: tag {tag} completed while {state:?}", self.key);
            return false;
        }
        self.in_kernel -= 1;
        if res != sys::IO_RES_OK {
            if res != sys::IO_RES_ABORT && self.error.is_none() {
                log::error!(
                    "ublk {:?}: tag {tag}: the kernel answered {}",
                    self.key,
                    std::io::Error::from_raw_os_error(-res)
                );
                self.error = Some(res);
            }
            self.tags[usize::from(tag)] = TagState::Dead;
            return true;
        }
        let Some(iods) = self.iods.as_ref() else {
            return true;
        };
        let d = iods.get(tag);
        self.descs[usize::from(tag)] = d;
        match plan(&d, &self.geometry, self.buf(tag)) {
            Plan::Fail(e) => self.stage(tag, e),
            Plan::Bdev(mut io) => {
                io.token = token;
                self.submit(tag, &io, plug);
            }
        }
        true
    }

    fn submit(&mut self, tag: u16, io: &Io, plug: &mut Plug) {
        match self.bdev.submit(plug, io) {
            Ok(_) => {
                self.tags[usize::from(tag)] = TagState::Bdev;
                self.in_bdev += 1;
            }
            Err(SubmitError::Busy) => {
                self.tags[usize::from(tag)] = TagState::Waiting;
                self.waiting.push_back(tag);
            }
            Err(e) => {
                log::debug!("ublk {:?}: tag {tag}: {e}", self.key);
                let errno = match e {
                    SubmitError::Unsupported { .. } => -libc::EOPNOTSUPP,
                    _ => -libc::EIO,
                };
                self.stage(tag, errno);
            }
        }
    }

    /// Submits waiting requests while the bdev queue takes them; `token(tag)` names each.
    pub fn retry_waiting(&mut self, plug: &mut Plug, token: impl Fn(u16) -> u64) -> bool {
        let mut any = false;
        while let Some(&tag) = self.waiting.front() {
            let d = self.descs[usize::from(tag)];
            let Plan::Bdev(mut io) = plan(&d, &self.geometry, self.buf(tag)) else {
                unreachable!("a waiting request was planned as bdev I/O");
            };
            io.token = token(tag);
            match self.bdev.submit(plug, &io) {
                Ok(_) => {
                    self.waiting.pop_front();
                    self.tags[usize::from(tag)] = TagState::Bdev;
                    self.in_bdev += 1;
                    any = true;
                }
                Err(SubmitError::Busy) => break,
                Err(_) => {
                    self.waiting.pop_front();
                    self.stage(tag, -libc::EIO);
                    any = true;
                }
            }
        }
        any
    }

    /// Tag `tag`'s bdev I/O completed with `status`.
    pub fn on_bdev_done(&mut self, tag: u16, status: IoStatus) {
        if self.tags.get(usize::from(tag)) != Some(&TagState::Bdev) {
            log::error!("ublk {:?}: bdev completion for tag {tag} not in flight", self.key);
            return;
        }
        self.in_bdev -= 1;
        self.completed += 1;
        let r = commit_result(&self.descs[usize::from(tag)], status);
        self.stage(tag, r);
    }

    fn stage(&mut self, tag: u16, result: i32) {
        self.tags[usize::from(tag)] = TagState::Commit;
        self.commits.push((tag, result));
    }

    /// The staged commits, taken (the caller turns each into an SQE and calls [`sent`]).
    ///
    /// [`sent`]: UblkQueue::sent
    pub fn take_commits(&mut self, out: &mut Vec<(u16, i32)>) {
        out.append(&mut self.commits);
    }

    /// Whether work is in flight that no fd announces (bdev I/O, waiting requests).
    pub fn must_poll(&self) -> bool {
        self.in_bdev > 0 || !self.waiting.is_empty() || !self.commits.is_empty()
    }

    /// Whether every tag has ended and nothing is in flight.
    pub fn is_drained(&self) -> bool {
        self.in_kernel == 0
            && self.in_bdev == 0
            && self.waiting.is_empty()
            && self.commits.is_empty()
            && self.tags.iter().all(|&t| t == TagState::Dead)
    }

    /// The first error a command came back with.
    pub fn error(&self) -> Option<i32> {
        self.error
    }

    /// Whether the kernel still holds commands of this queue.
    pub fn in_kernel(&self) -> u32 {
        self.in_kernel
    }

    /// Tells the starter the queue is done and releases it. Memory the kernel may still write
    /// (commands of it outstanding: a forced removal) is leaked rather than unmapped.
    pub fn finish(mut self) {
        let report = QueueReport {
            key: self.key,
            completed: self.completed,
            error: self.error,
        };
        if self.in_kernel > 0 || self.in_bdev > 0 {
            log::warn!(
                "ublk {:?}: removed with {} commands in the kernel and {} bdev I/Os: its \
                 buffers are kept",
                self.key,
                self.in_kernel,
                self.in_bdev
            );
            std::mem::forget(self.bufs.take());
            std::mem::forget(self.iods.take());
        }
        if let Some(tx) = self.drained.take() {
            let _ = tx.send(report);
        }
    }
}
