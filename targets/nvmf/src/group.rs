//! A reactor's poll group (SPDK's `nvmf_tgt_poll_group`): the connections this reactor owns,
//! the bdev queues it opened for their namespaces, its data buffers and one poller that runs
//! them all. Everything here lives on its reactor (reactor-local state): no lock on the I/O
//! path; the target's lock is taken only when a connection is set up, for admin commands, and
//! when the configuration generation moved.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::Arc;

use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::{BlockDevice, IoStatus, OpSet, Plug};
use pmio_reactors::{FdInterest, FdWatch, PollerId, PollerResult, ReactorCtx};

use crate::ana::{AnaState, ListenerAna};
use crate::buf::BufPool;
use crate::conn::Conn;
use crate::ctrlr::{ConnectCmd, ConnectData, ConnectReject, connect_field};
use crate::ready::{self, ReadySet};
use crate::stats::GroupStats;
use crate::tgt::NvmfTarget;

/// Completions reaped per bdev queue per poll.
const REAP: usize = 128;
/// How often keep-alive timers are checked.
const HOUSEKEEPING_NS: u64 = 100_000_000;

/// A namespace as an I/O queue pair uses it: what a command is checked against, and the bdev
/// queue (index into the group's) that runs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NsRef {
    pub queue: usize,
    /// The serial of the queue at `queue` when this was taken: a command that outlived its
    /// namespace (waiting for data or for a request) finds its queue gone, not another one.
    pub queue_serial: u64,
    pub block_size: u32,
    pub num_blocks: u64,
    pub ops: OpSet,
    /// The namespace's ANA group (its state depends on the listener a queue came in on).
    pub anagrpid: u32,
}

/// A bdev queue opened on this reactor.
pub(crate) struct GroupQueue {
    pub name: String,
    pub serial: u64,
    pub q: BdevQueue,
}

/// What connections share within the group (split from the connection list so a connection
/// can be handed `&mut GroupShared` while the group iterates its connections).
pub(crate) struct GroupShared {
    pub tgt: Arc<NvmfTarget>,
    pub core: u32,
    /// Bdev queues by index; `None` where a queue no namespace uses any more was closed.
    pub queues: Vec<Option<GroupQueue>>,
    queue_serial: u64,
    pub plug: Plug,
    pub pool: BufPool,
    /// Configuration generation of `ns`.
    pub generation: u64,
    /// Subsystem NQN → NSID → namespace.
    pub ns: HashMap<String, HashMap<u32, NsRef>>,
    /// Subsystem NQN → the ANA states of its listeners; absent without ANA reporting.
    pub ana: HashMap<String, Vec<ListenerAna>>,
    pub stats: GroupStats,
    /// Set when the generation moved this poll (admin queues look for namespace news).
    pub config_changed: bool,
}

/// A change to the reactor's watched fds, applied after the poll (the group cannot reach the
/// reactor while the reactor runs it).
enum FdOp {
    /// Watch connection `id`'s socket.
    Watch {
        id: usize,
        fd: std::os::fd::RawFd,
    },
    Interest {
        watch: FdWatch,
        interest: FdInterest,
    },
    Unwatch {
        watch: FdWatch,
    },
}

/// The poll group of one reactor.
pub(crate) struct PollGroup {
    fd_ops: Vec<FdOp>,
    /// Which connections have input: a poll reads only those.
    ready: ReadySet,
    conns: Vec<Option<Conn>>,
    free_ids: Vec<usize>,
    shared: GroupShared,
    /// (token, status) of the completions of one poll, reused.
    done: Vec<(u64, IoStatus)>,
    next_housekeeping_ns: u64,
    poller: Option<PollerId>,
    tick: Option<PollerId>,
    /// The last connection serial handed out.
    next_serial: u64,
}

impl PollGroup {
    fn new(tgt: Arc<NvmfTarget>, core: u32) -> std::io::Result<PollGroup> {
        let buf_size = tgt.transport().map_or(131072, |t| t.max_io_size as usize);
        Ok(PollGroup {
            fd_ops: Vec::new(),
            ready: ReadySet::new()?,
            conns: Vec::new(),
            free_ids: Vec::new(),
            shared: GroupShared {
                tgt,
                core,
                queues: Vec::new(),
                queue_serial: 0,
                plug: Plug::default(),
                pool: BufPool::new(buf_size),
                generation: 0,
                ns: HashMap::new(),
                ana: HashMap::new(),
                stats: GroupStats::default(),
                config_changed: false,
            },
            done: Vec::with_capacity(REAP),
            next_housekeeping_ns: 0,
            poller: None,
            tick: None,
            next_serial: 0,
        })
    }

    fn add(&mut self, stream: TcpStream, now_ns: u64, secure: bool) {
        let id = self.free_ids.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.next_serial += 1;
        let conn = Conn::new(id, self.next_serial, stream, &self.shared, now_ns, secure)
            .and_then(|c| self.ready.add(c.fd(), id).map(|()| c));
        match conn {
            Ok(c) => {
                self.fd_ops.push(FdOp::Watch { id, fd: c.fd() });
                self.conns[id] = Some(c);
            }
            Err(e) => {
                log::warn!("nvmf: dropping a new connection: {e}");
                self.free_ids.push(id);
            }
        }
    }

    /// One pass over everything: sockets in, bdev completions, sockets out. Returns whether
    /// anything happened.
    fn poll(&mut self, now_ns: u64) -> bool {
        let mut busy = false;
        self.refresh(now_ns);
        let sh = &mut self.shared;
        sh.plug.begin();
        for ev in self.ready.poll() {
            if let Some(Some(c)) = self.conns.get_mut(ready::event_id(ev)) {
                busy |= c.receive(sh, now_ns);
            }
        }
        // Decrypted TLS input that did not fit the last read: the socket no longer reports it.
        for c in self.conns.iter_mut().flatten() {
            if c.has_buffered_input() {
                busy |= c.receive(sh, now_ns);
            }
        }
        sh.plug.finish();
        for gq in sh.queues.iter_mut().flatten() {
            gq.q.flush();
        }
        // Completions, routed to their connections by token (connection id, slot).
        for qi in 0..sh.queues.len() {
            let Some(gq) = &mut sh.queues[qi] else {
                continue;
            };
            if gq.q.outstanding() == 0 {
                continue;
            }
            self.done.clear();
            let done = &mut self.done;
            let n = gq.q.poll(REAP, |rq| done.push((rq.token, rq.status)));
            if n == 0 {
                continue;
            }
            busy = true;
            sh.stats.pending_bdev_io -= n as u64;
            for &(token, status) in &self.done {
                let (id, slot) = ((token >> 16) as usize, token as u16);
                match self.conns.get_mut(id).and_then(Option::as_mut) {
                    Some(c) => c.io_done(slot, status, sh),
                    None => log::error!("nvmf: completion for connection {id} that is gone"),
                }
            }
        }
        // Commands that found their bdev queue full, then everything produced goes out.
        sh.plug.begin();
        for c in self.conns.iter_mut().flatten() {
            busy |= c.retry_waiting(sh);
        }
        sh.plug.finish();
        for gq in sh.queues.iter_mut().flatten() {
            gq.q.flush();
        }
        for (id, slot) in self.conns.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            busy |= c.send(&mut self.shared);
            // Wake for writability only while output waits for room in the socket.
            if let Some(watch) = c.watch
                && c.wants_write() != c.watching_write
            {
                c.watching_write = c.wants_write();
                let interest = if c.watching_write {
                    FdInterest::ReadWrite
                } else {
                    FdInterest::Read
                };
                self.fd_ops.push(FdOp::Interest { watch, interest });
            }
            if c.is_finished() {
                if let Some(watch) = c.watch {
                    self.fd_ops.push(FdOp::Unwatch { watch });
                }
                let c = slot.take().expect("checked");
                self.ready.remove(c.fd());
                c.finish(&mut self.shared);
                self.free_ids.push(id);
                busy = true;
            }
        }
        self.shared.stats.buffers_in_use = self.shared.pool.in_use() as u64;
        self.shared.tgt.group_stats[self.index()].publish(&self.shared.stats);
        busy
    }

    fn index(&self) -> usize {
        self.shared
            .tgt
            .cores()
            .iter()
            .position(|&c| c == self.shared.core)
            .unwrap_or(0)
    }

    /// Takes a new namespace snapshot when the configuration moved, and checks keep-alive
    /// timers now and then.
    fn refresh(&mut self, now_ns: u64) {
        let sh = &mut self.shared;
        let generation = sh.tgt.generation();
        sh.config_changed = generation != sh.generation;
        if sh.config_changed {
            sh.generation = generation;
            sh.rebuild_ns();
        }
        if sh.config_changed || now_ns >= self.next_housekeeping_ns {
            self.next_housekeeping_ns = now_ns + HOUSEKEEPING_NS;
            for c in self.conns.iter_mut().flatten() {
                c.housekeeping(sh, now_ns);
            }
            sh.close_unused_queues();
        }
    }

    /// Whether the reactor must keep polling although this poll found nothing: bdev I/O in
    /// flight (a device's completion wakes no one), commands waiting for a bdev request, or
    /// a connection closing.
    fn must_poll(&self) -> bool {
        self.shared.stats.pending_bdev_io > 0 || self.conns.iter().flatten().any(Conn::must_poll)
    }

    /// Closes every connection of controller (`nqn`, `cntlid`).
    fn close_controller(&mut self, nqn: &str, cntlid: u16, io_only: bool) {
        for c in self.conns.iter_mut().flatten() {
            if c.belongs_to(nqn, cntlid) && !(io_only && c.is_admin()) {
                c.close("its controller is being removed");
            }
        }
    }
}

impl GroupShared {
    /// Rebuilds the namespace snapshot from the configuration, opening bdev queues for
    /// namespaces new to this reactor.
    fn rebuild_ns(&mut self) {
        let snap = self.tgt.ns_snapshot();
        let mut ns = HashMap::with_capacity(snap.len());
        self.ana.clear();
        for (nqn, (list, ana)) in snap {
            if !ana.is_empty() {
                self.ana.insert(nqn.clone(), ana);
            }
            let mut m = HashMap::with_capacity(list.len());
            for n in list {
                match self.queue_for(&n.bdev) {
                    Ok(queue) => {
                        let info = n.bdev.info();
                        let queue_serial = self.queues[queue].as_ref().expect("open").serial;
                        m.insert(
                            n.nsid,
                            NsRef {
                                queue,
                                queue_serial,
                                block_size: info.block_size,
                                num_blocks: info.num_blocks,
                                ops: info.supported_ops,
                                anagrpid: n.anagrpid,
                            },
                        );
                    }
                    Err(e) => log::error!(
                        "nvmf: core {}: namespace {} of {nqn} ({}): {e}",
                        self.core,
                        n.nsid,
                        n.bdev_name()
                    ),
                }
            }
            ns.insert(nqn, m);
        }
        self.ns = ns;
        self.close_unused_queues();
    }

    /// Closes the bdev queues no namespace uses any more, once their I/O is done (so a
    /// deleted bdev is not kept alive by this reactor).
    pub fn close_unused_queues(&mut self) {
        for (i, slot) in self.queues.iter_mut().enumerate() {
            let Some(gq) = slot else { continue };
            let used = self
                .ns
                .values()
                .flat_map(|m| m.values())
                .any(|n| n.queue == i);
            if used || gq.q.outstanding() > 0 {
                continue;
            }
            log::info!(
                "nvmf: core {}: closed {} (no namespace uses it)",
                self.core,
                gq.name
            );
            self.plug.forget(gq.q.key());
            *slot = None;
        }
    }

    /// The ANA state of group `anagrpid` of subsystem `nqn` through listener `addr`, as of
    /// the snapshot: Optimized without ANA reporting, Inaccessible through an address that is
    /// no listener any more.
    pub fn ana_state(&self, nqn: &str, addr: &crate::ListenAddr, anagrpid: u32) -> AnaState {
        match self.ana.get(nqn) {
            None => AnaState::Optimized,
            Some(ls) => crate::ana::state_through(ls, addr, anagrpid),
        }
    }

    /// The bdev queue of namespace `ns` among `queues` (a group's), if it is still open.
    pub fn queue<'a>(
        queues: &'a mut [Option<GroupQueue>],
        ns: &NsRef,
    ) -> Option<&'a mut BdevQueue> {
        match queues.get_mut(ns.queue) {
            Some(Some(gq)) if gq.serial == ns.queue_serial => Some(&mut gq.q),
            _ => None,
        }
    }

    /// The index of this reactor's queue on `dev`, opened now if needed. A queue on an older
    /// object of the same name (a bdev replaced by a resize) is not reused: it drains and
    /// closes once no namespace uses it.
    fn queue_for(&mut self, dev: &Arc<dyn BlockDevice>) -> Result<usize, pmio::BdevError> {
        let name = &dev.info().name;
        let open = self.queues.iter().position(|q| {
            q.as_ref()
                .is_some_and(|q| &q.name == name && Arc::ptr_eq(q.q.device(), dev))
        });
        if let Some(i) = open {
            return Ok(i);
        }
        let depth = dev.info().max_queue_depth.min(256);
        let q = BdevQueue::open_in(
            &self.tgt.registry,
            name,
            BdevQueueOptions {
                depth,
                ..BdevQueueOptions::default()
            },
        )?;
        q.register_plug(&mut self.plug);
        self.pool.register_with(q.device().as_ref());
        log::info!("nvmf: core {}: opened {name} (depth {depth})", self.core);
        self.queue_serial += 1;
        let gq = GroupQueue {
            name: name.clone(),
            serial: self.queue_serial,
            q,
        };
        match self.queues.iter().position(Option::is_none) {
            Some(i) => {
                self.queues[i] = Some(gq);
                Ok(i)
            }
            None => {
                self.queues.push(Some(gq));
                Ok(self.queues.len() - 1)
            }
        }
    }

    /// Tells every open device about the pool's memory (after the pool grew).
    pub fn register_pool(&self) {
        for gq in self.queues.iter().flatten() {
            self.pool.register_with(gq.q.device().as_ref());
        }
    }
}

/// Takes connection `stream` onto this reactor's poll group (created, with its poller, on the
/// first connection).
pub(crate) fn add_connection(
    ctx: &mut ReactorCtx,
    tgt: Arc<NvmfTarget>,
    stream: TcpStream,
    secure: bool,
) {
    let core = ctx.core();
    let now = ctx.now_ns();
    if ctx.local::<PollGroup>().is_none() {
        match PollGroup::new(tgt, core) {
            Ok(g) => {
                ctx.set_local(g);
            }
            Err(e) => {
                log::error!(
                    "nvmf: core {core}: cannot create the poll group ({e}): dropping a connection"
                );
                return;
            }
        }
        let id = ctx.register_poller("nvmf_tcp_poll_group", |ctx| {
            let now = ctx.now_ns();
            let Some(g) = ctx.local::<PollGroup>() else {
                return PollerResult::Idle;
            };
            let busy = g.poll(now);
            let must_poll = g.must_poll();
            let ops = std::mem::take(&mut g.fd_ops);
            apply_fd_ops(ctx, ops);
            if must_poll {
                ctx.stay_awake();
            }
            if busy {
                PollerResult::Busy
            } else {
                PollerResult::Idle
            }
        });
        // Keep-alive timers, namespace news and close lingers need a turn now and then even
        // when no socket wakes the reactor; the poll group's poller does the work.
        let tick = ctx.register_timed_poller(
            "nvmf_tcp_tick",
            std::time::Duration::from_nanos(HOUSEKEEPING_NS),
            |_| PollerResult::Idle,
        );
        let g = ctx.local::<PollGroup>().expect("just set");
        g.poller = Some(id);
        g.tick = Some(tick);
    }
    ctx.local::<PollGroup>()
        .expect("created above")
        .add(stream, now, secure);
}

/// Applies the group's watched-fd changes: sockets wake this reactor when it sleeps
/// (interrupt mode), so an idle target burns no CPU.
fn apply_fd_ops(ctx: &mut ReactorCtx, mut ops: Vec<FdOp>) {
    if ops.is_empty() {
        return;
    }
    for op in ops.drain(..) {
        match op {
            FdOp::Watch { id, fd } => {
                let watch = ctx.watch_fd(fd, FdInterest::Read);
                let g = ctx.local::<PollGroup>().expect("the group runs this");
                match g.conns.get_mut(id).and_then(Option::as_mut) {
                    Some(c) => c.watch = Some(watch),
                    None => {
                        ctx.unwatch_fd(watch);
                    }
                }
            }
            FdOp::Interest { watch, interest } => {
                ctx.set_fd_interest(watch, interest);
            }
            FdOp::Unwatch { watch } => {
                ctx.unwatch_fd(watch);
            }
        }
    }
    // Keep the vector's capacity for the next poll.
    if let Some(g) = ctx.local::<PollGroup>() {
        g.fd_ops = ops;
    }
}

/// Closes the connections of controller (`nqn`, `cntlid`) on this reactor (`io_only`: its
/// I/O queues only).
pub(crate) fn close_controller(ctx: &mut ReactorCtx, nqn: &str, cntlid: u16, io_only: bool) {
    if let Some(g) = ctx.local::<PollGroup>() {
        g.close_controller(nqn, cntlid, io_only);
    }
}

/// On the reactor that owns controller (`nqn`, `cmd`'s controller ID): whether it takes
/// the I/O queue `cmd` connects (enabled, queue sizes set, the same host, a granted queue ID).
pub(crate) fn check_io_connect(
    ctx: &mut ReactorCtx,
    nqn: &str,
    cmd: &ConnectCmd,
    d: &ConnectData,
) -> Result<(), ConnectReject> {
    let gone = ConnectReject::invalid_data_field(connect_field::CNTLID);
    let g = ctx.local::<PollGroup>().ok_or(gone)?;
    let ctrlr = g
        .conns
        .iter()
        .flatten()
        .find_map(|c| c.controller(nqn, d.cntlid))
        .ok_or(gone)?;
    ctrlr.check_io_connect(cmd, d)
}

/// Delivers the controller's verdict to the connection (`id`, `serial`) waiting for it.
pub(crate) fn io_connect_answer(
    ctx: &mut ReactorCtx,
    id: usize,
    serial: u64,
    verdict: Result<(), ConnectReject>,
) {
    let Some(g) = ctx.local::<PollGroup>() else {
        return;
    };
    match g.conns.get_mut(id).and_then(Option::as_mut) {
        Some(c) if c.serial == serial => c.io_connect_answer(&mut g.shared, verdict),
        _ => log::debug!("nvmf: a Connect answer for a connection that has gone"),
    }
}

/// Closes every connection of this reactor, waits (bounded) for their I/O, and drops the
/// group: its bdev queues first, then the buffers they may have used.
pub(crate) fn shut_down(ctx: &mut ReactorCtx) {
    let Some(mut g) = ctx.take_local::<PollGroup>() else {
        return;
    };
    for id in [g.poller.take(), g.tick.take()].into_iter().flatten() {
        ctx.unregister_poller(id);
    }
    for c in g.conns.iter_mut().flatten() {
        c.close("the target is shutting down");
        if let Some(watch) = c.watch.take() {
            ctx.unwatch_fd(watch);
        }
    }
    let deadline = pmio_reactors::now_ns() + 5_000_000_000;
    while g.conns.iter().any(Option::is_some) && pmio_reactors::now_ns() < deadline {
        g.poll(pmio_reactors::now_ns());
    }
    let left = g.conns.iter().flatten().count();
    if left > 0 {
        log::error!(
            "nvmf: core {}: {left} connection(s) still had I/O at shutdown",
            g.shared.core
        );
        // Their buffers must outlive the devices' use of them: leak them rather than free
        // memory a device may still write.
        std::mem::forget(g.shared.pool);
        return;
    }
    let GroupShared { queues, pool, .. } = g.shared;
    drop(queues);
    drop(pool);
}
