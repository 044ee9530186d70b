//! One reactor's queue of a RAID bdev: it owns a queue of every member on the same reactor
//! and forwards each request to the members that hold its blocks, under the same tag,
//! completing it in its own `poll` once every member it went to has answered.
//!
//! - raid0 and concat: a request goes to the one member holding its strip; a flush to all.
//! - raid1: a write (write-zeroes, unmap, flush) goes to every member taking writes
//!   (operational or being rebuilt) and succeeds when one current copy does; a member whose
//!   I/O fails is failed out of the array for every reactor ([`Health`]), and the array goes
//!   on degraded. A read goes to the operational member with the fewest blocks outstanding
//!   on this queue (SPDK's raid1 rule) and, if it fails, is retried on another one before it
//!   fails. An I/O that failed on a member is acknowledged from the others only once that
//!   member's failure is recorded in the superblock ([`Health::recorded`]): until then it
//!   waits in `held`.
//!
//! raid0 and concat forward a request in place: the array's queue rewrites its block to the
//! member's, hands the caller's own request array to that member's queue under the same tag,
//! and puts the array's block back when the member completes it (kept per tag meanwhile), so
//! there is no copy of the request and no second pass over the completions. raid1 sends a
//! write to several members at once, each answering on its own (and a member that is itself
//! a virtual bdev rewrites the request it is given), so raid1 gives each member its own copy.
//!
//! While a rebuild copies a window of the array ([`crate::window`]), a raid1 queue parks
//! writes to that window and routes them when the window moves on; everything else goes on.
//!
//! Members come and go (a member added, removed or failed): the queue follows
//! [`Health::generation`] with one load per call and, when it moves, opens queues of members
//! that appeared and closes those of members that left once nothing is outstanding on them.
//!
//! Nothing is allocated per I/O: every per-tag and per-member array is sized at open.

use std::collections::VecDeque;
use std::sync::Arc;

use pmio::{BdevError, BlockDevice, DriverQueue, HctxType, IoStatus, Op, OpSet, Request};

use crate::Shared;
use crate::health::Health;
use crate::layout::RaidLevel;
use crate::window::{QueueAck, Range};

/// A member's queue on this reactor and what goes through it.
struct Member {
    /// `None` while the slot has no member (or this queue could not open one).
    q: Option<Box<dyn DriverQueue>>,
    /// The device `q` is a queue of.
    dev: Option<Arc<dyn BlockDevice>>,
    /// Whether `q` is the queue of the slot's member now, taking new I/O (a queue of a
    /// member that left stays, not live, until its last I/O is reaped).
    live: bool,
    /// The member's copies of the requests sent to it (raid1); empty when requests are
    /// forwarded in place.
    rqs: Vec<Request>,
    done: Vec<u16>,
    /// Tags to submit to it at the end of the current call.
    fwd: Vec<u16>,
    /// Blocks of reads outstanding on it (raid1's read balancing).
    read_blocks: u64,
}

/// Where one tag stands.
#[derive(Clone, Copy, Default)]
struct TagState {
    /// Members still to answer.
    pending: u8,
    /// Members that answered with success.
    ok: u8,
    /// Members a raid1 read has been tried on (a bit each).
    tried: u32,
    /// Members that failed it (a bit each): it waits until their failure is recorded.
    failed_on: u32,
    /// The first error an answer carried.
    error: Option<IoStatus>,
    /// The array block of the request, put back at its completion.
    lba: u64,
    /// Its blocks.
    nblocks: u32,
    /// The write-intent bitmap generation that must be durable before it is acknowledged
    /// (0: none).
    map_gen: u64,
    /// Whether it changes data (write, write-zeroes, unmap): what a rebuild window holds.
    write: bool,
}

/// A RAID bdev's queue (see the module docs).
pub(crate) struct RaidQueue {
    shared: Arc<Shared>,
    members: Vec<Member>,
    /// Whether requests go to the members in place (raid0, concat) or as copies (raid1).
    in_place: bool,
    depth: u32,
    /// The health generation the member queues match.
    seen: u64,
    tags: Vec<TagState>,
    /// Finished requests to report at the next poll.
    finished: VecDeque<u16>,
    /// Finished requests waiting for a member's failure to be recorded.
    held: Vec<u16>,
    inflight: usize,
    /// This queue's side of the rebuild window handshake (raid1).
    ack: Arc<QueueAck>,
    /// The window as last read.
    win: Range,
    /// Writes waiting for the window to move off their blocks.
    parked: Vec<u16>,
    /// Writes in flight.
    writes: u64,
}

/// Whether `op` changes the data a rebuild copies.
#[inline]
fn changes_data(op: Op) -> bool {
    matches!(op, Op::Write | Op::WriteZeroes | Op::Discard)
}

impl RaidQueue {
    pub(crate) fn new(shared: Arc<Shared>, depth: u32) -> Result<RaidQueue, BdevError> {
        let d = depth as usize;
        let in_place = shared.layout.level != RaidLevel::Raid1;
        let copies = if in_place { 0 } else { d };
        let n = shared.health.slots();
        let members = (0..n)
            .map(|_| Member {
                q: None,
                dev: None,
                live: false,
                rqs: vec![Request::default(); copies],
                done: Vec::with_capacity(d),
                fwd: Vec::with_capacity(d),
                read_blocks: 0,
            })
            .collect();
        let mut q = RaidQueue {
            members,
            in_place,
            depth,
            seen: shared.health.generation(),
            tags: vec![TagState::default(); d],
            finished: VecDeque::with_capacity(d),
            held: Vec::with_capacity(d),
            inflight: 0,
            ack: shared.window.register(),
            win: Range::default(),
            parked: Vec::with_capacity(d),
            writes: 0,
            shared,
        };
        // At open every member taking writes must open for raid0 and concat. A raid1 member
        // that cannot be reached (a replica gone, not yet failed out) leaves the array, as an
        // I/O error would make it, and the queue opens on the others.
        let slots = q
            .shared
            .slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut refused = None;
        for (i, dev) in slots.into_iter().enumerate() {
            if let Some(dev) = dev
                && q.shared.health.writable(i)
            {
                match dev.open_queue(HctxType::Default, 0, depth) {
                    Ok(mq) => {
                        let m = &mut q.members[i];
                        m.q = Some(mq);
                        m.dev = Some(dev);
                        m.live = true;
                    }
                    Err(e) if q.in_place => return Err(e),
                    Err(e) => {
                        log::error!(
                            "raid bdev {}: cannot open member {} ({e}); it leaves the array",
                            q.shared.name,
                            dev.info().name
                        );
                        q.shared.fail_member(i);
                        refused.get_or_insert(e);
                    }
                }
            }
        }
        match refused {
            Some(e) if !q.members.iter().any(|m| m.live) => Err(e),
            _ => Ok(q),
        }
    }

    fn health(&self) -> &Health {
        &self.shared.health
    }

    /// Follows a change of the members (cold: a member came, left or failed).
    #[cold]
    fn resync(&mut self) {
        let generation = self.health().generation();
        let slots = self
            .shared
            .slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut all_done = true;
        for (i, dev) in slots.into_iter().enumerate() {
            let want = dev.filter(|_| self.shared.health.writable(i));
            let m = &mut self.members[i];
            let same = match (&m.dev, &want) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            m.live = false;
            if m.q.as_ref().is_some_and(|q| q.outstanding() > 0) {
                // Closed (and the new member opened) once its last I/O is reaped.
                all_done = false;
                continue;
            }
            m.q = None;
            m.dev = None;
            let Some(dev) = want else { continue };
            match dev.open_queue(HctxType::Default, 0, self.depth) {
                Ok(q) => {
                    m.q = Some(q);
                    m.dev = Some(dev);
                    m.live = true;
                }
                Err(e) => {
                    log::error!(
                        "raid bdev {}: cannot open member {} on this reactor: {e}",
                        self.shared.name,
                        dev.info().name
                    );
                    self.shared.fail_member(i);
                }
            }
        }
        if all_done {
            self.seen = generation;
        }
    }

    fn fits(&mut self, len: usize) {
        if self.tags.len() < len {
            self.tags.resize(len, TagState::default());
            if !self.in_place {
                for m in &mut self.members {
                    m.rqs.resize(len, Request::default());
                }
            }
        }
    }

    /// Puts request `t` on member `m`'s list at member block `lba`: the caller's request
    /// itself when forwarding in place, else the member's copy of it.
    fn stage(&mut self, rqs: &mut [Request], m: usize, t: u16, lba: u64) {
        let member = &mut self.members[m];
        let rq = if self.in_place {
            &mut rqs[t as usize]
        } else {
            let r = &mut member.rqs[t as usize];
            *r = rqs[t as usize];
            r
        };
        rq.lba = lba;
        rq.status = IoStatus::Pending;
        let rq = *rq;
        if rq.op == Op::Read {
            member.read_blocks += u64::from(rq.nblocks);
        }
        member.fwd.push(t);
        self.tags[t as usize].pending += 1;
    }

    /// Whether member `m` can take I/O of this kind from this queue now.
    #[inline]
    fn usable(&self, m: usize, read: bool) -> bool {
        self.members[m].live
            && if read {
                self.health().operational(m)
            } else {
                self.health().writable(m)
            }
    }

    /// The operational raid1 member with the fewest read blocks outstanding, among those
    /// not in `tried`.
    fn pick_reader(&self, tried: u32) -> Option<usize> {
        (0..self.members.len())
            .filter(|&i| tried & (1 << i) == 0 && self.usable(i, true))
            .min_by_key(|&i| self.members[i].read_blocks)
    }

    /// Routes request `t` to its members; false if it finished at once (status set).
    fn route(&mut self, rqs: &mut [Request], t: u16) -> bool {
        let rq = rqs[t as usize];
        self.tags[t as usize] = TagState {
            lba: rq.lba,
            nblocks: rq.nblocks,
            write: changes_data(rq.op),
            ..TagState::default()
        };
        let layout = &self.shared.layout;
        let end = rq.lba.checked_add(u64::from(rq.nblocks));
        if rq.op != Op::Flush && end.is_none_or(|e| e > layout.num_blocks) {
            rqs[t as usize].status = IoStatus::Errno(libc::EINVAL);
            return false;
        }
        let level = layout.level;
        let all = rq.op == Op::Flush || (level == RaidLevel::Raid1 && rq.op != Op::Read);
        if level == RaidLevel::Raid1 && changes_data(rq.op) && self.shared.map.active() {
            self.mark_dirty(t, rq.lba, rq.nblocks);
        }
        let layout = &self.shared.layout;
        if all {
            let lba = layout.mirror_lba(rq.lba);
            for m in 0..self.members.len() {
                if self.usable(m, false) {
                    self.stage(rqs, m, t, lba);
                }
            }
        } else if level == RaidLevel::Raid1 {
            let lba = layout.mirror_lba(rq.lba);
            if let Some(m) = self.pick_reader(0) {
                self.tags[t as usize].tried = 1 << m;
                self.stage(rqs, m, t, lba);
            }
        } else {
            let (m, lba) = layout.locate(rq.lba);
            if self.usable(m, true) {
                self.stage(rqs, m, t, lba);
            }
        }
        if self.tags[t as usize].pending == 0 {
            // No member to send it to: the array has lost the data's only copy.
            rqs[t as usize].status = IoStatus::Errno(libc::EIO);
            return false;
        }
        true
    }

    fn kick(&mut self, rqs: &mut [Request]) {
        for m in &mut self.members {
            if m.fwd.is_empty() {
                continue;
            }
            let arr = if self.in_place { &mut *rqs } else { &mut m.rqs };
            match &mut m.q {
                Some(q) => q.submit(arr, &m.fwd),
                None => unreachable!("requests are staged only on open member queues"),
            }
            m.fwd.clear();
        }
    }

    /// Member `m` answered tag `t` with `status`; true when the request is finished.
    fn answer(&mut self, rqs: &mut [Request], m: usize, t: u16, status: IoStatus) -> bool {
        if self.in_place {
            rqs[t as usize].lba = self.tags[t as usize].lba;
        }
        let rq = rqs[t as usize];
        if rq.op == Op::Read {
            let b = &mut self.members[m].read_blocks;
            *b = b.saturating_sub(u64::from(rq.nblocks));
        }
        let level = self.shared.layout.level;
        let st = &mut self.tags[t as usize];
        st.pending -= 1;
        if status == IoStatus::Success {
            // A write to a member being rebuilt is not a current copy on its own.
            if rq.op == Op::Read || (self.members[m].live && self.shared.health.operational(m)) {
                st.ok += 1;
            }
        } else {
            st.error.get_or_insert(status);
            if level == RaidLevel::Raid1 && self.members[m].live {
                st.failed_on |= 1 << m;
                let failed_now = self.shared.fail_member(m);
                if changes_data(rq.op) {
                    // Routed before tracking began: this write is one the member missed.
                    self.mark_dirty(t, rq.lba, rq.nblocks);
                }
                if failed_now {
                    log::error!(
                        "raid bdev {}: member {m} failed an I/O ({status:?}) and leaves the array; {} of {} members remain",
                        self.shared.name,
                        self.shared.health.operational_count(),
                        self.members.len()
                    );
                }
            }
            if level == RaidLevel::Raid1 && rq.op == Op::Read {
                let tried = self.tags[t as usize].tried;
                if let Some(next) = self.pick_reader(tried) {
                    // The answer is the retry's.
                    self.tags[t as usize].error = None;
                    self.tags[t as usize].tried |= 1 << next;
                    let lba = self.shared.layout.mirror_lba(rq.lba);
                    self.stage(rqs, next, t, lba);
                    return false;
                }
            }
        }
        let st = self.tags[t as usize];
        if st.pending > 0 {
            return false;
        }
        if st.write && !self.in_place {
            self.writes -= 1;
        }
        rqs[t as usize].status = match (level, st.error) {
            (_, None) => IoStatus::Success,
            // A mirror's write is good while one copy is.
            (RaidLevel::Raid1, Some(_)) if st.ok > 0 && rq.op != Op::Read => IoStatus::Success,
            (_, Some(e)) => {
                self.log_failed(&rq, st, e);
                e
            }
        };
        true
    }

    /// Says why the array fails a request (cold): which members it went to and what the
    /// members' states were, so a failure seen by a host can be traced to its member.
    #[cold]
    fn log_failed(&self, rq: &Request, st: TagState, e: IoStatus) {
        let h = self.health();
        let states: Vec<_> = (0..h.slots()).map(|i| h.state(i)).collect();
        log::warn!(
            "raid bdev {}: {} of {} blocks at {} failed ({e:?}): failed on members {:#b}, {} current copies answered it, members {states:?}",
            self.shared.name,
            rq.op.name(),
            rq.nblocks,
            st.lba,
            st.failed_on,
            st.ok
        );
    }

    /// Marks write `t`'s blocks in the write-intent bitmap; a new region makes the write
    /// wait for the bitmap to be durable, and wakes its writer.
    #[cold]
    fn mark_dirty(&mut self, t: u16, lba: u64, nblocks: u32) {
        if let Some(g) = self.shared.map.mark(lba, u64::from(nblocks)) {
            let st = &mut self.tags[t as usize];
            st.map_gen = st.map_gen.max(g);
            self.shared.health.poke();
        }
    }

    /// Whether finished tag `t` may be reported: a success that a member failed must wait
    /// for that failure to be recorded, and one that marked a new region of the
    /// write-intent bitmap for the bitmap to be durable.
    #[inline]
    fn releasable(&self, rqs: &[Request], t: u16) -> bool {
        let st = &self.tags[t as usize];
        if st.map_gen != 0
            && rqs[t as usize].status == IoStatus::Success
            && !self.shared.map.durable(st.map_gen)
        {
            return false;
        }
        let failed_on = st.failed_on;
        failed_on == 0
            || rqs[t as usize].status != IoStatus::Success
            || (0..self.members.len())
                .filter(|&i| failed_on & (1 << i) != 0)
                .all(|i| self.shared.health.recorded(i))
    }

    /// Routes `t` unless it is a write into the rebuild window (parked then).
    #[inline]
    fn admit(&mut self, rqs: &mut [Request], t: u16) {
        let rq = &rqs[t as usize];
        if !self.in_place && changes_data(rq.op) {
            if self.win.overlaps(rq.lba, u64::from(rq.nblocks)) {
                self.parked.push(t);
                return;
            }
            self.writes += 1;
        }
        if self.route(rqs, t) {
            self.inflight += 1;
        } else {
            if !self.in_place && changes_data(rqs[t as usize].op) {
                self.writes -= 1;
            }
            self.finished.push_back(t);
        }
    }

    /// Follows the rebuild window: parked writes it no longer covers go out, and the rebuild
    /// is told once no write in flight here overlaps the window.
    fn follow_window(&mut self, rqs: &mut [Request]) {
        let mut w = self.shared.window.read();
        if w.seq != self.win.seq && !self.parked.is_empty() {
            // The writes about to go out count before the window is read again (the
            // handshake of `Window::enter`), so a window published meanwhile waits for them.
            w = self
                .shared
                .window
                .enter(&self.ack, self.writes + self.parked.len() as u64);
        }
        self.take_window(rqs, w);
        let seen = self.ack.seen.load(std::sync::atomic::Ordering::Relaxed);
        if seen < w.seq && !self.writes_overlap(w) {
            self.ack
                .seen
                .store(w.seq, std::sync::atomic::Ordering::Release);
        }
        self.ack
            .writes
            .store(self.writes, std::sync::atomic::Ordering::Release);
    }

    /// Makes `w` the window this queue honours; writes parked for an older one are routed
    /// (or parked again where `w` covers them).
    #[inline]
    fn take_window(&mut self, rqs: &mut [Request], w: Range) {
        if w.seq != self.win.seq {
            self.win = w;
            if !self.parked.is_empty() {
                self.unpark(rqs);
            }
        }
    }

    /// Whether a write in flight here touches window `w` (cold: once per window).
    #[cold]
    fn writes_overlap(&self, w: Range) -> bool {
        w.start < w.end
            && self
                .tags
                .iter()
                .any(|s| s.pending > 0 && s.write && w.overlaps(s.lba, u64::from(s.nblocks)))
    }

    #[cold]
    fn unpark(&mut self, rqs: &mut [Request]) {
        let parked = std::mem::take(&mut self.parked);
        for &t in &parked {
            self.admit(rqs, t);
        }
        // `admit` parks again what the new window still covers; the list keeps its buffer.
        let mut parked = parked;
        parked.clear();
        parked.append(&mut self.parked);
        self.parked = parked;
    }

    #[cold]
    fn release_held(&mut self, rqs: &[Request]) {
        let mut i = 0;
        while i < self.held.len() {
            let t = self.held[i];
            if self.releasable(rqs, t) {
                self.held.swap_remove(i);
                self.finished.push_back(t);
            } else {
                i += 1;
            }
        }
    }
}

impl DriverQueue for RaidQueue {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        if self.health().generation() != self.seen {
            self.resync();
        }
        self.fits(rqs.len());
        if !self.in_place {
            let bound = self.writes + (tags.len() + self.parked.len()) as u64;
            let w = self.shared.window.enter(&self.ack, bound);
            self.take_window(rqs, w);
        }
        for &t in tags {
            self.admit(rqs, t);
        }
        if !self.in_place {
            self.ack
                .writes
                .store(self.writes, std::sync::atomic::Ordering::Release);
        }
        self.kick(rqs);
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        for m in 0..self.members.len() {
            let member = &mut self.members[m];
            let Some(q) = &mut member.q else { continue };
            if q.outstanding() == 0 {
                continue;
            }
            let mut reaped = std::mem::take(&mut member.done);
            let arr = if self.in_place {
                &mut *rqs
            } else {
                &mut member.rqs
            };
            let cap = arr.len();
            q.poll(arr, &mut reaped, cap);
            for &t in &reaped {
                let status = if self.in_place {
                    rqs[t as usize].status
                } else {
                    self.members[m].rqs[t as usize].status
                };
                if self.answer(rqs, m, t, status) {
                    self.inflight -= 1;
                    if self.releasable(rqs, t) {
                        self.finished.push_back(t);
                    } else {
                        self.held.push(t);
                    }
                }
            }
            reaped.clear();
            self.members[m].done = reaped;
        }
        if !self.held.is_empty() {
            self.release_held(rqs);
        }
        if self.health().generation() != self.seen {
            self.resync();
        }
        if !self.in_place {
            self.follow_window(rqs);
        }
        // Reads retried (and writes unparked) go out now.
        self.kick(rqs);
        let n = self.finished.len().min(max);
        done.extend(self.finished.drain(..n));
        n
    }

    fn outstanding(&self) -> usize {
        self.inflight + self.finished.len() + self.held.len() + self.parked.len()
    }
}

/// The operations every member supports (and so the array does).
pub(crate) fn common_ops(ops: impl Iterator<Item = OpSet>) -> OpSet {
    ops.fold(OpSet::ALL, |acc, o| {
        [Op::Read, Op::Write, Op::Flush, Op::Discard, Op::WriteZeroes]
            .into_iter()
            .filter(|&op| acc.contains(op) && o.contains(op))
            .fold(OpSet::EMPTY, OpSet::with)
    })
}
