//! One queue of a ublk disk, owned by the reactor that serves it: its io_uring (where its
//! FETCH_REQ and COMMIT_AND_FETCH_REQ commands wait in the kernel), its request descriptors
//! (mapped from `/dev/ublkcN`), one data buffer per tag, its own bdev queue, and what each
//! tag is doing.
//!
//! A tag's life: its fetch waits in the kernel (`Kernel`); the fetch completes with a request
//! in the tag's descriptor; the request becomes one bdev I/O through the tag's buffer (`Bdev`,
//! or `Waiting` while the bdev queue is full); its completion is staged (`Commit`) and sent
//! back with COMMIT_AND_FETCH_REQ, which is also the tag's next fetch (`Kernel` again). The
//! kernel copies a write's data into the buffer before it completes the fetch, and a read's
//! data out of it while it takes the commit, so a buffer belongs to its tag's one request at a
//! time. A fetch that comes back aborted (the disk stopped) ends the tag (`Dead`).
//!
//! Why a ring per queue and not one per reactor: the kernel gives back a queue's waiting
//! fetches when the ring they were sent on closes (the commands are cancelable), which is how
//! a stopped disk's queue lets go of `/dev/ublkcN` so DEL_DEV can finish; with a shared ring
//! one disk's stop would need the ring of every other disk on the reactor to close.
//!
//! Data moves one of two ways, chosen per disk (`user_copy`). Copied by the kernel: the
//! fetch names the tag's buffer, into which the kernel copies a write's data before it
//! completes the fetch, and out of which it copies a read's data while it takes the commit
//! (one `copy_from_user`/`copy_to_user` per request inside the ring's submit). User copy
//! (`UBLK_F_USER_COPY`, Linux 6.5+): the commands name no buffer; the queue itself reads a
//! write's data from `/dev/ublkcN` at the request's offset (`pread`) before the bdev write,
//! and writes a read's data there (`pwrite`) after the bdev read, before the commit: the same
//! copy, in a system call of its own, the server deciding when (and whether) data moves.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use pmio::bdev::{BdevQueue, BdevQueueOptions, Registry, SubmitError};
use pmio::dma::DmaRegion;
use pmio::{Io, IoBuf, IoStatus, Op, Plug};

use crate::error::UblkError;
use crate::params::{Geometry, Plan, commit_result, plan};
use crate::sys::{self, EventFd, IoCmd, IoDesc, IodMap};

/// Completions reaped from the bdev queue per poll.
const REAP: usize = 128;

/// A queue of a disk: (disk id, queue id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueKey {
    pub dev: u32,
    pub q: u16,
}

/// What a queue reports when it has closed.
#[derive(Debug)]
pub struct QueueReport {
    pub key: QueueKey,
    /// Requests served through the bdev.
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
    /// The disk was added with `UBLK_F_USER_COPY`: the queue moves the data itself.
    pub user_copy: bool,
}

/// What a tag is doing.
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

/// A queue as its reactor serves it. Field order is drop order: the ring goes first (the
/// kernel gives back the waiting fetches), then the bdev queue, before the buffers its I/O
/// used (which the group keeps: see [`UblkQueue::close`]).
pub struct UblkQueue {
    pub key: QueueKey,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Signalled by the ring for each CQE while `notify` is on; the reactor watches it.
    event: EventFd,
    /// Whether the ring signals `event`: only while the queue is idle. A busy queue is polled
    /// anyway, and a signal per CQE would cost the kernel an eventfd wake-up and the reactor a
    /// read() per poll.
    notify: bool,
    bdev: BdevQueue,
    plug: Plug,
    iods: IodMap,
    bufs: Option<DmaRegion>,
    cdev: Arc<File>,
    geometry: Geometry,
    ioctl_encode: bool,
    user_copy: bool,
    tags: Vec<TagState>,
    descs: Vec<IoDesc>,
    waiting: VecDeque<u16>,
    /// Staged commits: (tag, result).
    commits: Vec<(u16, i32)>,
    in_kernel: u32,
    in_bdev: u32,
    completed: u64,
    error: Option<i32>,
    /// Bdev completions of one poll (preallocated: no allocation per I/O).
    done: Vec<(u64, IoStatus)>,
}

impl UblkQueue {
    /// Maps the queue's descriptors, takes its buffers (`spare`, a region an earlier queue of
    /// this reactor left, when it is large enough), opens its bdev queue and ring, and sends
    /// a fetch for every tag — all on the calling reactor, which the kernel then takes as the
    /// queue's server thread.
    pub fn open(
        setup: QueueSetup,
        registry: &Registry,
        spare: &mut Vec<DmaRegion>,
    ) -> Result<UblkQueue, UblkError> {
        let QueueSetup {
            key,
            cdev,
            depth,
            bdev,
            geometry,
            ioctl_encode,
            user_copy,
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
        let bufs = match spare.iter().position(|r| r.len() >= bytes) {
            Some(i) => spare.swap_remove(i),
            None => DmaRegion::with_options(bytes, dev.dma_options())
                .map_err(|e| qerr(format!("{bytes} bytes of I/O buffers: {e}")))?,
        };
        // SAFETY: the region stays mapped, same pages, until the reactor's ublk group is
        // dropped (a closed queue hands it back to the group, which keeps it for the next
        // queue), after every queue of the group, and so after every bdev queue using it.
        unsafe { dev.register_memory(&[(bufs.as_ptr(), bufs.len())]) };
        let bdepth = u32::from(depth).min(dev.info().max_queue_depth);
        let bq = BdevQueue::open_in(
            registry,
            &bdev,
            BdevQueueOptions {
                depth: bdepth,
                ..BdevQueueOptions::default()
            },
        )
        .map_err(|e| qerr(format!("opening bdev {bdev}: {e}")))?;
        let mut plug = Plug::default();
        bq.register_plug(&mut plug);
        // One command per tag is in the kernel at most: the SQ never holds more than `depth`.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(u32::from(depth).next_power_of_two())
            .map_err(UblkError::Ring)?;
        let event = EventFd::new().map_err(UblkError::Ring)?;
        ring.submitter()
            .register_eventfd(event.fd())
            .map_err(UblkError::Ring)?;
        let n = usize::from(depth);
        let mut q = UblkQueue {
            key,
            ring,
            event,
            notify: true,
            bdev: bq,
            plug,
            iods,
            bufs: Some(bufs),
            cdev,
            geometry,
            ioctl_encode,
            user_copy,
            tags: vec![TagState::Commit; n],
            descs: vec![IoDesc::default(); n],
            waiting: VecDeque::with_capacity(n),
            commits: Vec::with_capacity(n),
            in_kernel: 0,
            in_bdev: 0,
            completed: 0,
            error: None,
            done: Vec::with_capacity(REAP),
        };
        match q.fetch_all() {
            Ok(()) => Ok(q),
            Err(e) => {
                let (_, bufs) = q.close();
                spare.extend(bufs);
                Err(qerr(format!("sending its fetches: {e}")))
            }
        }
    }

    /// A fetch for every tag, in one submit.
    fn fetch_all(&mut self) -> std::io::Result<()> {
        for tag in 0..self.depth() {
            self.push(tag, None)?;
        }
        self.ring.submit().map(drop)
    }

    pub fn depth(&self) -> u16 {
        self.tags.len() as u16
    }

    /// The eventfd the ring signals (for the reactor's fd watch).
    pub fn event_fd(&self) -> i32 {
        self.event.fd()
    }

    fn buf(&self, tag: u16) -> IoBuf {
        let b = self
            .bufs
            .as_ref()
            .expect("buffers live while the queue serves");
        let size = self.geometry.buf_bytes as usize;
        let off = usize::from(tag) * size;
        assert!(off + size <= b.len());
        // SAFETY: bytes `off..off + size` of the queue's region, which outlives every I/O of
        // the queue (handed to the group after the bdev queue is closed); they are tag
        // `tag`'s alone, and a tag has one request at a time.
        unsafe { IoBuf::from_raw_parts(b.as_ptr().add(off), size as u32) }
    }

    /// Queues tag `tag`'s fetch (`commit: None`) or commit-and-fetch on the ring.
    fn push(&mut self, tag: u16, commit: Option<i32>) -> std::io::Result<()> {
        let (cmd, result) = match commit {
            None => (sys::IO_FETCH_REQ, 0),
            Some(r) => (sys::IO_COMMIT_AND_FETCH_REQ, r),
        };
        // With user copy the kernel refuses a command that names a buffer.
        let addr = if self.user_copy {
            0
        } else {
            self.buf(tag).as_ptr() as u64
        };
        let c = IoCmd {
            q_id: self.key.q,
            tag,
            result,
            addr,
        };
        let sqe = opcode::UringCmd80::new(
            types::Fd(self.cdev.as_raw_fd()),
            sys::io_op(cmd, self.ioctl_encode),
        )
        .cmd(sys::cmd_bytes(&c))
        .build()
        .user_data(u64::from(tag));
        // SAFETY: the command names the tag's buffer, which lives as long as the queue (and
        // past it: the group keeps it), and the descriptor area mapped by `iods`; the kernel
        // writes only those. The SQE itself is copied into the ring.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| std::io::Error::other("submission queue full"))?;
        self.tags[usize::from(tag)] = TagState::Kernel;
        self.in_kernel += 1;
        Ok(())
    }

    /// One pass: (1) requests the kernel delivered become bdev I/O, (2) waiting ones are
    /// retried, (3) the bdev queue is flushed (one doorbell), (4) its completions are staged
    /// as commits, (5) the commits go to the kernel in one submit. Returns whether anything
    /// happened.
    pub fn poll(&mut self) -> bool {
        self.plug.begin();
        let mut busy = self.take_requests();
        busy |= self.retry_waiting();
        self.plug.finish();
        self.bdev.flush();
        busy |= self.reap_bdev();
        busy |= self.send_commits();
        if busy {
            self.quiet_notify();
        } else if !self.notify && self.is_idle() {
            busy = self.wake_notify();
        }
        busy
    }

    /// The queue is busy: the ring stops signalling (a signalled eventfd is read back to
    /// zero once, so the reactor's watch does not stay ready).
    fn quiet_notify(&mut self) {
        if self.notify {
            self.ring.completion().disable_eventfd();
            self.notify = false;
            self.event.drain();
        }
    }

    /// The queue went idle: the ring signals again. Returns whether a CQE came before the
    /// switch (it signalled nothing: the next poll takes it).
    fn wake_notify(&mut self) -> bool {
        self.ring.completion().enable_eventfd();
        self.notify = true;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        !self.ring.completion().is_empty()
    }

    /// Step 1: the ring's completions.
    fn take_requests(&mut self) -> bool {
        let mut n = 0;
        loop {
            // One CQE per borrow of the completion queue (its drop publishes the head).
            let Some(cqe) = self.ring.completion().next() else {
                break;
            };
            n += 1;
            self.on_cqe(cqe.user_data() as u16, cqe.result());
        }
        n > 0
    }

    /// Tag `tag`'s command came back with `res`: a request becomes a bdev I/O, a staged
    /// failure, or waits for room.
    fn on_cqe(&mut self, tag: u16, res: i32) {
        let Some(state) = self.tags.get(usize::from(tag)).copied() else {
            log::error!("ublk {:?}: completion for tag {tag} beyond depth", self.key);
            return;
        };
        if state != TagState::Kernel {
            log::error!("ublk {:?}: tag {tag} completed while {state:?}", self.key);
            return;
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
            return;
        }
        let d = self.iods.get(tag);
        self.descs[usize::from(tag)] = d;
        match plan(&d, &self.geometry, self.buf(tag)) {
            Plan::Fail(e) => self.stage(tag, e),
            Plan::Bdev(mut io) => {
                if self.user_copy
                    && io.op == Op::Write
                    && let Err(e) = self.copy_in(tag, io.buf)
                {
                    return self.stage(tag, e);
                }
                io.token = u64::from(tag);
                self.submit(tag, &io);
            }
        }
    }

    /// User copy of write request `tag`'s data into `buf` (the tag's buffer), or the errno
    /// its commit carries.
    fn copy_in(&self, tag: u16, buf: IoBuf) -> Result<(), i32> {
        let off = sys::user_copy_offset(self.key.q, tag);
        // SAFETY: `buf` is part of tag `tag`'s buffer (see `buf`), which no I/O uses now: the
        // tag's request has only just come from the kernel.
        unsafe { sys::user_copy_in(&self.cdev, off, buf.as_ptr(), buf.len() as usize) }
            .map_err(|e| self.copy_failed(tag, "in", &e))
    }

    /// User copy of read request `tag`'s data (its first `len` bytes) to the kernel.
    fn copy_out(&self, tag: u16, len: u32) -> Result<(), i32> {
        let off = sys::user_copy_offset(self.key.q, tag);
        let buf = self.buf(tag).range(0, len);
        // SAFETY: `buf` is tag `tag`'s buffer, which its completed bdev read has filled and no
        // I/O uses until the tag's next request.
        unsafe { sys::user_copy_out(&self.cdev, off, buf.as_ptr(), buf.len() as usize) }
            .map_err(|e| self.copy_failed(tag, "out", &e))
    }

    #[cold]
    fn copy_failed(&self, tag: u16, dir: &str, e: &std::io::Error) -> i32 {
        log::error!("ublk {:?}: tag {tag}: user copy {dir}: {e}", self.key);
        -libc::EIO
    }

    fn submit(&mut self, tag: u16, io: &Io) {
        match self.bdev.submit(&mut self.plug, io) {
            Ok(_) => {
                self.tags[usize::from(tag)] = TagState::Bdev;
                self.in_bdev += 1;
            }
            Err(SubmitError::Busy) => {
                self.tags[usize::from(tag)] = TagState::Waiting;
                self.waiting.push_back(tag);
            }
            Err(e) => self.refuse(tag, &e),
        }
    }

    #[cold]
    fn refuse(&mut self, tag: u16, e: &SubmitError) {
        log::debug!("ublk {:?}: tag {tag}: {e}", self.key);
        let errno = match e {
            SubmitError::Unsupported { .. } => -libc::EOPNOTSUPP,
            _ => -libc::EIO,
        };
        self.stage(tag, errno);
    }

    /// Step 2: waiting requests, while the bdev queue takes them.
    fn retry_waiting(&mut self) -> bool {
        let mut any = false;
        while let Some(&tag) = self.waiting.front() {
            let d = self.descs[usize::from(tag)];
            let Plan::Bdev(mut io) = plan(&d, &self.geometry, self.buf(tag)) else {
                unreachable!("a waiting request was planned as bdev I/O");
            };
            io.token = u64::from(tag);
            match self.bdev.submit(&mut self.plug, &io) {
                Ok(_) => {
                    self.waiting.pop_front();
                    self.tags[usize::from(tag)] = TagState::Bdev;
                    self.in_bdev += 1;
                    any = true;
                }
                Err(SubmitError::Busy) => break,
                Err(e) => {
                    self.waiting.pop_front();
                    self.refuse(tag, &e);
                    any = true;
                }
            }
        }
        any
    }

    /// Step 4: the bdev's completions.
    fn reap_bdev(&mut self) -> bool {
        if self.bdev.outstanding() == 0 {
            return false;
        }
        self.done.clear();
        let done = &mut self.done;
        if self.bdev.poll(REAP, |rq| done.push((rq.token, rq.status))) == 0 {
            return false;
        }
        for i in 0..self.done.len() {
            let (token, status) = self.done[i];
            self.on_bdev_done(token as u16, status);
        }
        true
    }

    /// Tag `tag`'s bdev I/O completed with `status`.
    fn on_bdev_done(&mut self, tag: u16, status: IoStatus) {
        if self.tags.get(usize::from(tag)) != Some(&TagState::Bdev) {
            log::error!(
                "ublk {:?}: bdev completion for tag {tag} not in flight",
                self.key
            );
            return;
        }
        self.in_bdev -= 1;
        self.completed += 1;
        let d = self.descs[usize::from(tag)];
        let mut r = commit_result(&d, status);
        if self.user_copy
            && r > 0
            && d.op() == sys::IO_OP_READ
            && let Err(e) = self.copy_out(tag, r as u32)
        {
            r = e;
        }
        self.stage(tag, r);
    }

    fn stage(&mut self, tag: u16, result: i32) {
        self.tags[usize::from(tag)] = TagState::Commit;
        self.commits.push((tag, result));
    }

    /// Step 5: every staged commit, in one submit.
    fn send_commits(&mut self) -> bool {
        if self.commits.is_empty() {
            return false;
        }
        for i in 0..self.commits.len() {
            let (tag, result) = self.commits[i];
            if let Err(e) = self.push(tag, Some(result)) {
                // Cannot happen (one command per tag, the SQ holds the depth): keep the rest
                // staged for the next poll rather than lose a request.
                log::error!("ublk {:?}: tag {tag}: {e}", self.key);
                self.commits.drain(..i);
                return true;
            }
        }
        self.commits.clear();
        if let Err(e) = self.ring.submit() {
            log::error!("ublk {:?}: submitting commits: {e}", self.key);
        }
        true
    }

    /// Whether work is in flight that no fd announces (bdev I/O, waiting requests).
    pub fn must_poll(&self) -> bool {
        self.in_bdev > 0 || !self.waiting.is_empty() || !self.commits.is_empty()
    }

    /// Whether nothing of the queue is in the bdev or staged: what the kernel holds is only
    /// fetches, which closing the ring gives back.
    pub fn is_idle(&self) -> bool {
        self.in_bdev == 0 && self.waiting.is_empty() && self.commits.is_empty()
    }

    /// Closes the queue: the ring first (the kernel cancels the fetches it still holds), then
    /// the bdev queue. Returns the report and the buffer region, which the caller keeps while
    /// the bdev may hold it registered (see [`UblkQueue::open`]).
    pub fn close(self) -> (QueueReport, Option<DmaRegion>) {
        let report = QueueReport {
            key: self.key,
            completed: self.completed,
            error: self.error,
        };
        let UblkQueue {
            ring,
            bdev,
            bufs,
            in_bdev,
            key,
            ..
        } = self;
        drop(ring);
        if in_bdev > 0 {
            // Only a shutdown that timed out gets here: the buffers must outlive the device's
            // use of them.
            log::warn!("ublk {key:?}: closed with {in_bdev} bdev I/Os in flight");
            std::mem::forget(bdev);
            std::mem::forget(bufs);
            return (report, None);
        }
        drop(bdev);
        (report, bufs)
    }
}
