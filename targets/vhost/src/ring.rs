//! One virtqueue as its reactor runs it: new requests from the available ring become bdev
//! I/O (in [`BUF_SIZE`] chunks through bounce buffers), completions go back through the used
//! ring, and the guest is signalled once per poll through the call eventfd.
//!
//! Requests are kept in a fixed table indexed by head descriptor (a head is the driver's until
//! the device returns it), each with preallocated segment and buffer lists: no allocation per
//! I/O. A request that finds its bdev queue full waits in a FIFO and is retried before new
//! requests are fetched, so nothing is dropped.
//!
//! Kicks: the guest is told not to kick (VRING_USED_F_NO_NOTIFY) while the ring is polled.
//! After [`KICKS_AFTER_IDLE_NS`] without work the ring turns kicks back on and lets its
//! reactor sleep; the kick eventfd, watched by the reactor, wakes it again (SPDK's interrupt
//! mode). A busy-polling reactor works the same way, it just never sleeps.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;

use pmio::bdev::BdevQueue;
use pmio::bdev::SubmitError;
use pmio::{Io, IoStatus, Op, Plug};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::blk::{self, Action, DevFacts};
use crate::buf::{BUF_SIZE, BufPool, DataBuf};
use crate::chain::{self, Segment};
use crate::inflight::QueueLog;
use crate::mem::GuestMem;
use crate::spec::{BlkStatus, DwzRange, ID_BYTES};
use crate::vring::{RingError, Vring, VringAddrs};

/// Idle time after which a ring asks the guest to kick again and lets its reactor sleep.
pub const KICKS_AFTER_IDLE_NS: u64 = 1_000_000;
/// Most segments of one request (SPDK's seg_max 126, plus header and status).
pub const MAX_SEGS: usize = 128;
/// `seg_max` as the guest is told.
pub const SEG_MAX: u32 = (MAX_SEGS - 2) as u32;
/// New requests taken from one ring per poll, so one busy ring cannot starve the others.
const FETCH_BURST: u16 = 64;

/// Identifies a ring across the target: its controller and queue index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingKey {
    pub ctrlr: u64,
    pub queue: u16,
}

/// What a reactor needs to run a ring (sent by the controller's session).
pub struct RingSetup {
    pub key: RingKey,
    /// Controller name, for log lines.
    pub name: Arc<str>,
    pub size: u16,
    pub addrs: VringAddrs,
    pub base: u16,
    pub mem: Arc<GuestMem>,
    pub kick: Option<File>,
    pub call: Option<File>,
    pub bdev: String,
    pub readonly: bool,
    /// GET_ID's answer.
    pub serial: [u8; ID_BYTES],
    /// The queue's in-flight log, when the front end negotiated INFLIGHT_SHMFD.
    pub log: Option<QueueLog>,
    /// Where the ring publishes its count of completed requests (the controller's metrics).
    pub requests: Arc<AtomicU64>,
}

/// A ring's life on its reactor.
enum RingState {
    Running,
    /// Stop asked: no new requests; the reply (the next available index) goes out when the
    /// last request in flight has completed.
    Stopping(Sender<u16>),
    /// The guest broke the ring: no new requests; in-flight ones finish.
    Broken,
}

/// One request in flight, at its head's index.
struct ReqSlot {
    busy: bool,
    segs: Vec<Segment>,
    status_addr: u64,
    op: Op,
    lba: u64,
    nblocks: u64,
    data_len: u64,
    /// Chunks: submitted `..next`, of `count`.
    next: u32,
    count: u32,
    /// Chunks submitted and not completed.
    pending: u32,
    /// One per data chunk submitted or filled (in chunk order).
    bufs: Vec<DataBuf>,
    status: BlkStatus,
}

impl ReqSlot {
    fn new() -> ReqSlot {
        ReqSlot {
            busy: false,
            segs: Vec::with_capacity(MAX_SEGS),
            status_addr: 0,
            op: Op::Read,
            lba: 0,
            nblocks: 0,
            data_len: 0,
            next: 0,
            count: 0,
            pending: 0,
            bufs: Vec::new(),
            status: BlkStatus::Ok,
        }
    }
}

/// What a ring shares with its group while it polls: the bdev queue, the plug and the pool.
pub(crate) struct IoCtx<'a> {
    pub q: Option<&'a mut BdevQueue>,
    pub plug: &'a mut Plug,
    pub pool: &'a mut BufPool,
    /// Set when the pool grew (the group registers it with its devices again).
    pub pool_grew: &'a mut bool,
    /// This ring's token prefix (group index and generation), `| head` per request.
    pub token: u64,
}

/// A running ring.
pub(crate) struct RingTask {
    pub key: RingKey,
    pub name: Arc<str>,
    vring: Vring,
    mem: Arc<GuestMem>,
    kick: Option<File>,
    call: Option<File>,
    dev: DevFacts,
    serial: [u8; ID_BYTES],
    /// Blocks per chunk of a data transfer and of a discard / write zeroes.
    data_chunk: u64,
    range_chunk: u64,
    slots: Box<[ReqSlot]>,
    /// Heads whose next chunk found the bdev queue full, oldest first.
    waiting: VecDeque<u16>,
    /// The in-flight log, and what it still has to hear of: heads in flight when a previous
    /// backend stopped (resubmitted first, oldest first), heads returned since the last
    /// publish.
    log: Option<QueueLog>,
    replay: VecDeque<u16>,
    returned: Vec<u16>,
    inflight: u32,
    state: RingState,
    kicks_on: bool,
    idle_since_ns: u64,
    /// Requests completed (for `vhost_get_controllers`-style reporting and tests).
    pub completed: u64,
    /// `completed` as last stored into `requests`.
    reported: u64,
    requests: Arc<AtomicU64>,
}

impl RingTask {
    pub fn new(s: RingSetup, q: &BdevQueue, now_ns: u64) -> Result<RingTask, crate::VhostError> {
        let vring = Vring::new(&s.mem, s.size, s.addrs, s.base)?;
        let info = q.device().info();
        let bs = u64::from(info.block_size);
        let max_xfer = u64::from(info.max_transfer_blocks.max(1));
        let dev = DevFacts {
            block_size: info.block_size,
            num_blocks: info.num_blocks,
            ops: info.supported_ops,
            readonly: s.readonly,
        };
        let mut t = RingTask {
            key: s.key,
            name: s.name,
            vring,
            mem: s.mem,
            kick: s.kick,
            call: s.call,
            dev,
            serial: s.serial,
            data_chunk: (BUF_SIZE as u64 / bs).clamp(1, max_xfer),
            range_chunk: max_xfer.min(u64::from(u32::MAX)),
            slots: (0..s.size).map(|_| ReqSlot::new()).collect(),
            waiting: VecDeque::with_capacity(usize::from(s.size)),
            log: s.log,
            replay: VecDeque::new(),
            returned: Vec::with_capacity(usize::from(s.size)),
            inflight: 0,
            state: RingState::Running,
            kicks_on: false,
            idle_since_ns: now_ns,
            completed: 0,
            reported: 0,
            requests: s.requests,
        };
        t.recover();
        t.kicks(false);
        Ok(t)
    }

    /// With an in-flight log: finds the requests a previous backend took and did not return,
    /// to resubmit them before anything new. The front end set the ring's base to the guest's
    /// used index (it cannot know better); the heads taken are those returned plus those in
    /// flight, so the next new head is at used + in flight.
    fn recover(&mut self) {
        let Some(log) = &mut self.log else { return };
        let m = self.mem.mem();
        let Ok(used) = self.vring.guest_used(m) else {
            return;
        };
        let v = &self.vring;
        let heads = log.recover(used, |i| v.used_head(m, i));
        if heads.is_empty() && self.vring.last_avail() == used {
            return;
        }
        let next = used.wrapping_add(heads.len() as u16);
        log::info!(
            "vhost {}: queue {}: {} request(s) in flight before the restart resubmitted \
             (used index {used}, next available {next}, front end said {})",
            self.name,
            self.key.queue,
            heads.len(),
            self.vring.last_avail()
        );
        self.vring.restart_at(next, used);
        self.replay = heads.into();
    }

    /// The kick eventfd, for the reactor to watch.
    pub fn kick_fd(&self) -> Option<std::os::fd::RawFd> {
        self.kick.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub fn set_call(&mut self, call: Option<File>) {
        self.call = call;
    }

    /// Switches to a new memory table; a ring that is no longer in guest memory stops.
    pub fn set_mem(&mut self, mem: Arc<GuestMem>) {
        self.mem = mem;
        if let Err(e) = self.vring.translate(&self.mem) {
            self.broken(&format!("after a new memory table: {e}"));
        }
    }

    /// Asks the ring to stop; `reply` gets the next available index once nothing is in
    /// flight.
    pub fn stop(&mut self, reply: Sender<u16>) {
        self.state = RingState::Stopping(reply);
    }

    /// Whether the ring stopped and nothing is in flight: the group removes it after sending
    /// the reply ([`RingTask::finish_stop`]).
    pub fn is_drained(&self) -> bool {
        matches!(self.state, RingState::Stopping(_)) && self.inflight == 0
    }

    /// Sends the stop reply (the next available index).
    pub fn finish_stop(self) {
        if let RingState::Stopping(reply) = self.state {
            let _ = reply.send(self.vring.last_avail());
        }
    }

    /// Whether the reactor must keep polling for this ring: I/O in flight or waiting, a stop
    /// to finish, or kicks still off.
    pub fn must_poll(&self) -> bool {
        self.inflight > 0
            || !self.waiting.is_empty()
            || !self.replay.is_empty()
            || matches!(self.state, RingState::Stopping(_))
            || (matches!(self.state, RingState::Running) && !self.kicks_on)
    }

    #[cold]
    fn broken(&mut self, why: &str) {
        if matches!(self.state, RingState::Running) {
            log::error!(
                "vhost {}: queue {} stopped: {why}",
                self.name,
                self.key.queue
            );
            self.state = RingState::Broken;
        }
    }

    fn kicks(&mut self, on: bool) {
        if let Err(e) = self.vring.set_kicks(self.mem.mem(), on) {
            self.broken(&e.to_string());
        }
        self.kicks_on = on;
    }

    /// Empties the kick eventfd (kicks that came while the ring was polled anyway).
    fn drain_kicks(&self) {
        if let Some(k) = &self.kick {
            crate::sys::drain(k.as_raw_fd());
        }
    }

    /// Takes new requests and retries waiting ones. Returns whether anything happened.
    pub fn poll(&mut self, io: &mut IoCtx<'_>, now_ns: u64) -> bool {
        let mut busy = self.retry_waiting(io);
        if !matches!(self.state, RingState::Running) {
            return busy;
        }
        if self.kicks_on {
            self.drain_kicks();
        }
        let mem = Arc::clone(&self.mem);
        let m = mem.mem();
        if !self.replay.is_empty() {
            for _ in 0..FETCH_BURST {
                let Some(head) = self.replay.pop_front() else {
                    break;
                };
                if head >= self.vring.size() || self.slots[usize::from(head)].busy {
                    self.broken(&format!("the in-flight log names head {head} twice"));
                    return true;
                }
                self.start(m, head, io);
            }
            return true;
        }
        let n = match self.vring.pending(m) {
            Ok(n) => n,
            Err(e) => {
                self.broken(&e.to_string());
                return busy;
            }
        };
        if n == 0 {
            if !self.kicks_on
                && self.inflight == 0
                && now_ns.saturating_sub(self.idle_since_ns) >= KICKS_AFTER_IDLE_NS
            {
                self.kicks(true);
                // A head added before the flag reached the guest came without a kick.
                if self.vring.pending(m).is_ok_and(|n| n > 0) {
                    self.kicks(false);
                    busy = true;
                }
            }
            return busy;
        }
        if self.kicks_on {
            self.kicks(false);
        }
        self.idle_since_ns = now_ns;
        for _ in 0..n.min(FETCH_BURST) {
            let head = match self.vring.pop(m) {
                Ok(h) => h,
                Err(e) => {
                    self.broken(&e.to_string());
                    break;
                }
            };
            if self.slots[usize::from(head)].busy {
                self.broken(&RingError::HeadInFlight(head).to_string());
                break;
            }
            if let Some(log) = &mut self.log {
                log.begin(head);
            }
            self.start(m, head, io);
        }
        true
    }

    /// Parses request `head` and starts it, or completes it at once.
    fn start(&mut self, m: &GuestMemoryMmap, head: u16, io: &mut IoCtx<'_>) {
        let h = usize::from(head);
        let mut segs = std::mem::take(&mut self.slots[h].segs);
        let parsed = parse(
            m,
            self.vring.table(),
            head,
            &mut segs,
            &self.dev,
            &self.serial,
        );
        self.slots[h].segs = segs;
        let (status_addr, data_len, action) = match parsed {
            Parsed::Unanswerable(why) => {
                log::warn!(
                    "vhost {}: queue {}: request {head}: {why}",
                    self.name,
                    self.key.queue
                );
                self.used(m, head, 0);
                return;
            }
            Parsed::Answer {
                status_addr,
                status,
                written,
            } => {
                self.answer(m, head, status_addr, status, written);
                return;
            }
            Parsed::Io {
                status_addr,
                data_len,
                action,
            } => (status_addr, data_len, action),
        };
        let (op, lba, nblocks, chunk) = match action {
            Action::Flush => (Op::Flush, 0, 0, 1),
            Action::Rw { op, lba, nblocks } => (op, lba, nblocks, self.data_chunk),
            Action::Range { op, lba, nblocks } => (op, lba, nblocks, self.range_chunk),
            Action::GetId => unreachable!("answered by parse"),
        };
        let slot = &mut self.slots[h];
        slot.busy = true;
        slot.status_addr = status_addr;
        slot.op = op;
        slot.lba = lba;
        slot.nblocks = nblocks;
        slot.data_len = data_len;
        slot.next = 0;
        slot.count = if op == Op::Flush {
            1
        } else {
            nblocks.div_ceil(chunk) as u32
        };
        slot.pending = 0;
        slot.status = BlkStatus::Ok;
        self.inflight += 1;
        if !self.submit(m, head, io) {
            self.waiting.push_back(head);
        }
    }

    /// Submits request `head`'s remaining chunks. Returns false when the bdev queue was full
    /// (the request waits); a refused chunk fails the request.
    fn submit(&mut self, m: &GuestMemoryMmap, head: u16, io: &mut IoCtx<'_>) -> bool {
        let bs = u64::from(self.dev.block_size);
        let slot = &mut self.slots[usize::from(head)];
        let chunk = if slot.op.has_data() {
            self.data_chunk
        } else {
            self.range_chunk
        };
        let Some(q) = io.q.as_deref_mut() else {
            slot.status = BlkStatus::IoErr;
            slot.count = slot.next;
            return self.maybe_done(m, head, io.pool);
        };
        while slot.next < slot.count {
            let c = u64::from(slot.next);
            let lba = slot.lba + c * chunk;
            let nblocks = if slot.op == Op::Flush {
                0
            } else {
                chunk.min(slot.nblocks - c * chunk)
            };
            let mut buf = pmio::IoBuf::EMPTY;
            if slot.op.has_data() {
                let len = (nblocks * bs) as usize;
                if slot.bufs.len() == slot.next as usize {
                    let b = match io.pool.get() {
                        Ok((b, grew)) => {
                            *io.pool_grew |= grew;
                            b
                        }
                        Err(e) => {
                            log::error!("vhost {}: no bounce buffer: {e}", self.name);
                            slot.status = BlkStatus::IoErr;
                            slot.count = slot.next;
                            break;
                        }
                    };
                    slot.bufs.push(b);
                    if slot.op == Op::Write {
                        let b = slot.bufs.last_mut().expect("just pushed");
                        let dst = &mut b.bytes_mut()[..len];
                        if read_guest(m, &slot.segs, c * chunk * bs, dst).is_none() {
                            slot.status = BlkStatus::IoErr;
                            slot.count = slot.next;
                            break;
                        }
                    }
                }
                buf = slot.bufs[slot.next as usize].io(len as u32);
            }
            let req = Io {
                op: slot.op,
                lba,
                nblocks: nblocks as u32,
                buf,
                token: io.token | u64::from(head),
                ..Io::default()
            };
            match q.submit(io.plug, &req) {
                Ok(_) => {
                    slot.next += 1;
                    slot.pending += 1;
                }
                Err(SubmitError::Busy) => return false,
                Err(e) => {
                    log::warn!(
                        "vhost {}: queue {}: request {head}: {e}",
                        self.name,
                        self.key.queue
                    );
                    slot.status = BlkStatus::IoErr;
                    slot.count = slot.next;
                    break;
                }
            }
        }
        self.maybe_done(m, head, io.pool);
        true
    }

    /// Retries requests whose chunks found the bdev queue full, oldest first.
    fn retry_waiting(&mut self, io: &mut IoCtx<'_>) -> bool {
        if self.waiting.is_empty() {
            return false;
        }
        let mem = Arc::clone(&self.mem);
        while let Some(&head) = self.waiting.front() {
            if !self.submit(mem.mem(), head, io) {
                break;
            }
            self.waiting.pop_front();
        }
        true
    }

    /// A chunk of request `head` completed with `status`.
    pub fn io_done(&mut self, head: u16, status: IoStatus, pool: &mut BufPool) {
        let Some(slot) = self.slots.get_mut(usize::from(head)) else {
            return;
        };
        if !slot.busy || slot.pending == 0 {
            log::error!(
                "vhost {}: completion for request {head}, which is not in flight",
                self.name
            );
            return;
        }
        slot.pending -= 1;
        if !status.is_success() {
            slot.status = BlkStatus::IoErr;
        }
        let mem = Arc::clone(&self.mem);
        self.maybe_done(mem.mem(), head, pool);
    }

    /// Completes request `head` once every chunk has been submitted and has completed.
    /// Returns true (for `submit`'s caller).
    fn maybe_done(&mut self, m: &GuestMemoryMmap, head: u16, pool: &mut BufPool) -> bool {
        let slot = &mut self.slots[usize::from(head)];
        if slot.pending > 0 || slot.next < slot.count {
            return true;
        }
        let mut written = 0u32;
        if slot.op == Op::Read && slot.status == BlkStatus::Ok {
            let bs = u64::from(self.dev.block_size);
            let chunk_bytes = self.data_chunk * bs;
            let mut off = 0u64;
            for b in slot.bufs.iter_mut() {
                let len = chunk_bytes.min(slot.data_len - off) as usize;
                if write_guest(m, &slot.segs, off, &b.bytes_mut()[..len]).is_none() {
                    slot.status = BlkStatus::IoErr;
                    break;
                }
                off += len as u64;
            }
            if slot.status == BlkStatus::Ok {
                written = slot.data_len as u32;
            }
        }
        for b in slot.bufs.drain(..) {
            pool.put(b);
        }
        slot.busy = false;
        self.inflight -= 1;
        let (status_addr, status) = (slot.status_addr, slot.status);
        self.answer(m, head, status_addr, status, written);
        true
    }

    /// Writes `status` and returns `head` with `data` bytes written before it.
    fn answer(
        &mut self,
        m: &GuestMemoryMmap,
        head: u16,
        status_addr: u64,
        st: BlkStatus,
        data: u32,
    ) {
        let len = match m.write_obj(st as u8, GuestAddress(status_addr)) {
            Ok(()) => data + 1,
            Err(_) => 0,
        };
        self.used(m, head, len);
    }

    fn used(&mut self, m: &GuestMemoryMmap, head: u16, len: u32) {
        self.completed += 1;
        if let Err(e) = self.vring.push_used(m, head, len) {
            self.broken(&e.to_string());
            return;
        }
        if self.log.is_some() {
            self.returned.push(head);
        }
    }

    /// Publishes this poll's completions and signals the guest once if it wants it.
    pub fn publish(&mut self) -> bool {
        if self.completed != self.reported {
            // One relaxed store per poll that completed requests: the ring is the only writer.
            self.requests.store(self.completed, Ordering::Relaxed);
            self.reported = self.completed;
        }
        let mem = Arc::clone(&self.mem);
        let published = self.vring.publish(mem.mem());
        if published.is_ok()
            && !self.returned.is_empty()
            && let Some(log) = &mut self.log
        {
            log.end_batch(&self.returned, self.vring.used_idx());
            self.returned.clear();
        }
        match published {
            Ok(true) => {
                if let Some(c) = &self.call {
                    crate::sys::signal(c.as_raw_fd());
                }
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.broken(&e.to_string());
                false
            }
        }
    }
}

/// What parsing a request decided.
enum Parsed {
    /// No status byte can be written: the head goes back with a used length of 0.
    Unanswerable(String),
    /// Answered without the bdev (an error status, or GET_ID's serial, `written` bytes).
    Answer {
        status_addr: u64,
        status: BlkStatus,
        written: u32,
    },
    /// Bdev I/O to do; the data segments are left in the slot's list.
    Io {
        status_addr: u64,
        data_len: u64,
        action: Action,
    },
}

/// Walks and classifies request `head` (its segments into `segs`).
fn parse(
    m: &GuestMemoryMmap,
    table: crate::chain::Table,
    head: u16,
    segs: &mut Vec<Segment>,
    dev: &DevFacts,
    serial: &[u8; ID_BYTES],
) -> Parsed {
    if let Err(e) = chain::walk(m, table, head, MAX_SEGS, segs) {
        return Parsed::Unanswerable(e.to_string());
    }
    let parts = match chain::split_blk(m, segs) {
        Ok(p) => p,
        Err(chain::PartsError::NoStatus) => {
            return Parsed::Unanswerable(chain::PartsError::NoStatus.to_string());
        }
        Err(chain::PartsError::BadHeader { status }) => {
            return Parsed::Answer {
                status_addr: status,
                status: BlkStatus::IoErr,
                written: 0,
            };
        }
    };
    let range = read_range(m, segs, parts.data_len);
    match blk::classify(&parts, segs, range, dev) {
        Ok(Action::GetId) => {
            let (status, written) = match write_guest(m, segs, 0, &serial[..]) {
                Some(n) => (BlkStatus::Ok, n as u32),
                None => (BlkStatus::IoErr, 0),
            };
            Parsed::Answer {
                status_addr: parts.status,
                status,
                written,
            }
        }
        Ok(action) => Parsed::Io {
            status_addr: parts.status,
            data_len: parts.data_len,
            action,
        },
        Err(status) => Parsed::Answer {
            status_addr: parts.status,
            status,
            written: 0,
        },
    }
}

/// The DISCARD / WRITE_ZEROES range in `segs`, when they hold exactly one.
fn read_range(m: &GuestMemoryMmap, segs: &[Segment], data_len: u64) -> Option<DwzRange> {
    if data_len != DwzRange::SIZE as u64 {
        return None;
    }
    let mut b = [0u8; DwzRange::SIZE];
    read_guest(m, segs, 0, &mut b)?;
    Some(DwzRange::from_bytes(&b))
}

/// Copies guest bytes from offset `off` of the data described by `segs` into `dst` (all of
/// it). `None` if the segments end first or memory fails.
fn read_guest(m: &GuestMemoryMmap, segs: &[Segment], off: u64, dst: &mut [u8]) -> Option<()> {
    let mut skip = off;
    let mut done = 0usize;
    for s in segs {
        if done == dst.len() {
            break;
        }
        let len = u64::from(s.len);
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = ((len - skip) as usize).min(dst.len() - done);
        m.read_slice(&mut dst[done..done + take], GuestAddress(s.addr + skip))
            .ok()?;
        done += take;
        skip = 0;
    }
    (done == dst.len()).then_some(())
}

/// Copies `src` into the data described by `segs` from offset `off`, as far as the segments
/// reach. Returns the bytes written, `None` if memory fails.
fn write_guest(m: &GuestMemoryMmap, segs: &[Segment], off: u64, src: &[u8]) -> Option<usize> {
    let mut skip = off;
    let mut done = 0usize;
    for s in segs {
        if done == src.len() {
            break;
        }
        let len = u64::from(s.len);
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = ((len - skip) as usize).min(src.len() - done);
        m.write_slice(&src[done..done + take], GuestAddress(s.addr + skip))
            .ok()?;
        done += take;
        skip = 0;
    }
    Some(done)
}

#[cfg(test)]
mod tests;
