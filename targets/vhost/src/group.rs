//! A reactor's vhost group: the rings this reactor owns, the bdev queues it opened for them,
//! its bounce buffers and plug, and one poller that runs them all. Everything here lives on
//! its reactor: controllers' sessions reach it by message only ([`start_ring`],
//! [`stop_ring`], [`set_mem`], [`set_call`]).
//!
//! One poll: (1) each ring retries waiting requests and takes new ones, submitting into the
//! plug; (2) each bdev queue is flushed (one doorbell); (3) completions are reaped and routed to
//! their rings by token; (4) each ring publishes its used entries and signals the guest once;
//! (5) rings whose stop has drained are removed and answered.

use std::sync::Arc;
use std::sync::mpsc::Sender;

use pmio::bdev::{BdevQueue, BdevQueueOptions, Registry};
use pmio::{IoStatus, Plug};
use pmio_reactors::{FdInterest, FdWatch, PollerId, PollerResult, ReactorCtx};

use crate::buf::BufPool;
use crate::error::VhostError;
use crate::mem::GuestMem;
use crate::ring::{IoCtx, RingKey, RingSetup, RingTask};

/// Completions reaped per bdev queue per poll.
const REAP: usize = 128;

/// A bdev queue opened on this reactor, with the number of rings using it.
struct GroupQueue {
    name: String,
    q: BdevQueue,
    users: usize,
}

/// A ring in the group, with the reactor's watch of its kick eventfd.
struct Member {
    ring: RingTask,
    /// Index into `queues`.
    queue: usize,
    watch: Option<FdWatch>,
}

/// The vhost group of one reactor.
pub(crate) struct VhostGroup {
    core: u32,
    queues: Vec<Option<GroupQueue>>,
    /// Rings by group index; the generation of each index is in `gens`.
    rings: Vec<Option<Member>>,
    gens: Vec<u16>,
    plug: Plug,
    pool: BufPool,
    done: Vec<(u64, IoStatus)>,
    /// Watches to end after this poll (rings removed).
    unwatch: Vec<FdWatch>,
    /// Removed rings, dropped (closing their eventfds) after their watches end.
    removed: Vec<RingTask>,
    poller: Option<PollerId>,
}

/// A completion token: group index (bits 32..), generation (16..32), head (..16).
fn token(index: usize, generation: u16) -> u64 {
    ((index as u64) << 32) | (u64::from(generation) << 16)
}

impl VhostGroup {
    fn new(core: u32) -> VhostGroup {
        VhostGroup {
            core,
            queues: Vec::new(),
            rings: Vec::new(),
            gens: Vec::new(),
            plug: Plug::default(),
            pool: BufPool::new(),
            done: Vec::with_capacity(REAP),
            unwatch: Vec::new(),
            removed: Vec::new(),
            poller: None,
        }
    }

    /// The index of this reactor's queue on bdev `name`, opened now if needed.
    fn queue_for(&mut self, registry: &Registry, name: &str) -> Result<usize, VhostError> {
        if let Some(i) = self
            .queues
            .iter()
            .position(|q| q.as_ref().is_some_and(|q| q.name == name))
        {
            self.queues[i].as_mut().expect("found").users += 1;
            return Ok(i);
        }
        let dev = registry
            .get(name)
            .ok_or_else(|| VhostError::BdevNotFound(name.to_string()))?;
        let depth = dev.info().max_queue_depth.min(256);
        // Opened through the registry, so the bdev's I/O statistics include the VM's I/O.
        let q = BdevQueue::open_in(
            registry,
            name,
            BdevQueueOptions {
                depth,
                ..BdevQueueOptions::default()
            },
        )
        .map_err(|e| VhostError::Ring(format!("opening bdev {name}: {e}")))?;
        q.register_plug(&mut self.plug);
        self.pool.register_with(q.device().as_ref());
        log::info!("vhost: core {}: opened {name} (depth {depth})", self.core);
        let gq = GroupQueue {
            name: name.to_string(),
            q,
            users: 1,
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

    /// Closes queues no ring uses and no I/O is in flight on.
    fn close_unused_queues(&mut self) {
        for slot in &mut self.queues {
            if slot
                .as_ref()
                .is_some_and(|q| q.users == 0 && q.q.outstanding() == 0)
            {
                let gq = slot.take().expect("checked");
                self.plug.forget(gq.q.key());
                log::info!("vhost: core {}: closed {}", self.core, gq.name);
            }
        }
    }

    fn find(&mut self, key: RingKey) -> Option<&mut Member> {
        self.rings.iter_mut().flatten().find(|m| m.ring.key == key)
    }

    /// One pass over every ring. Returns whether anything happened.
    fn poll(&mut self, now_ns: u64) -> bool {
        let mut busy = false;
        let mut pool_grew = false;
        self.plug.begin();
        for (i, slot) in self.rings.iter_mut().enumerate() {
            let Some(m) = slot else { continue };
            let q = self.queues[m.queue].as_mut().map(|g| &mut g.q);
            let mut io = IoCtx {
                q,
                plug: &mut self.plug,
                pool: &mut self.pool,
                pool_grew: &mut pool_grew,
                token: token(i, self.gens[i]),
            };
            busy |= m.ring.poll(&mut io, now_ns);
        }
        self.plug.finish();
        if pool_grew {
            for gq in self.queues.iter().flatten() {
                self.pool.register_with(gq.q.device().as_ref());
            }
        }
        for gq in self.queues.iter_mut().flatten() {
            gq.q.flush();
        }
        for qi in 0..self.queues.len() {
            let Some(gq) = &mut self.queues[qi] else {
                continue;
            };
            if gq.q.outstanding() == 0 {
                continue;
            }
            self.done.clear();
            let done = &mut self.done;
            if gq.q.poll(REAP, |rq| done.push((rq.token, rq.status))) == 0 {
                continue;
            }
            busy = true;
            for &(tok, status) in &self.done {
                let (index, generation, head) =
                    ((tok >> 32) as usize, (tok >> 16) as u16, tok as u16);
                match self.rings.get_mut(index).and_then(Option::as_mut) {
                    Some(m) if self.gens[index] == generation => {
                        m.ring.io_done(head, status, &mut self.pool)
                    }
                    _ => log::error!("vhost: completion for a ring that is gone"),
                }
            }
        }
        let mut removed_any = false;
        for slot in &mut self.rings {
            let Some(m) = slot else { continue };
            m.ring.publish();
            if m.ring.is_drained() {
                let m = slot.take().expect("checked");
                if let Some(w) = m.watch {
                    self.unwatch.push(w);
                }
                if let Some(gq) = self.queues[m.queue].as_mut() {
                    gq.users -= 1;
                }
                log::info!(
                    "vhost {}: queue {} stopped on core {} ({} requests)",
                    m.ring.name,
                    m.ring.key.queue,
                    self.core,
                    m.ring.completed
                );
                self.removed.push(m.ring);
                removed_any = true;
            }
        }
        if removed_any {
            self.close_unused_queues();
            busy = true;
        }
        busy
    }

    /// Whether the reactor must keep polling although this poll found nothing.
    fn must_poll(&self) -> bool {
        self.rings.iter().flatten().any(|m| m.ring.must_poll())
    }
}

fn ensure_group(ctx: &mut ReactorCtx) {
    if ctx.local::<VhostGroup>().is_some() {
        return;
    }
    let core = ctx.core();
    ctx.set_local(VhostGroup::new(core));
    let id = ctx.register_poller("vhost_blk_poll_group", |ctx| {
        let now = ctx.now_ns();
        let Some(g) = ctx.local::<VhostGroup>() else {
            return PollerResult::Idle;
        };
        let busy = g.poll(now);
        let must_poll = g.must_poll();
        let unwatch = std::mem::take(&mut g.unwatch);
        let removed = std::mem::take(&mut g.removed);
        for w in unwatch {
            ctx.unwatch_fd(w);
        }
        // Their kick and call eventfds close only now, after the watches ended; the stop
        // replies go out after that.
        for r in removed {
            r.finish_stop();
        }
        if must_poll {
            ctx.stay_awake();
        }
        if busy {
            PollerResult::Busy
        } else {
            PollerResult::Idle
        }
    });
    ctx.local::<VhostGroup>().expect("just set").poller = Some(id);
}

/// Starts a ring on this reactor (the calling reactor owns it from now on).
pub(crate) fn start_ring(
    ctx: &mut ReactorCtx,
    registry: &Registry,
    setup: RingSetup,
) -> Result<(), VhostError> {
    ensure_group(ctx);
    let now = ctx.now_ns();
    let g = ctx.local::<VhostGroup>().expect("ensured");
    if g.find(setup.key).is_some() {
        return Err(VhostError::Ring(format!(
            "queue {} is already running",
            setup.key.queue
        )));
    }
    let queue = g.queue_for(registry, &setup.bdev)?;
    let gq = g.queues[queue].as_ref().expect("opened");
    let ring = match RingTask::new(setup, &gq.q, now) {
        Ok(r) => r,
        Err(e) => {
            g.queues[queue].as_mut().expect("opened").users -= 1;
            g.close_unused_queues();
            return Err(e);
        }
    };
    let index = match g.rings.iter().position(Option::is_none) {
        Some(i) => i,
        None => {
            g.rings.push(None);
            g.gens.push(0);
            g.rings.len() - 1
        }
    };
    g.gens[index] = g.gens[index].wrapping_add(1);
    let kick = ring.kick_fd();
    log::info!(
        "vhost {}: queue {} started on core {}",
        ring.name,
        ring.key.queue,
        g.core
    );
    g.rings[index] = Some(Member {
        ring,
        queue,
        watch: None,
    });
    if let Some(fd) = kick {
        let w = ctx.watch_fd(fd, FdInterest::Read);
        let g = ctx.local::<VhostGroup>().expect("ensured");
        g.rings[index].as_mut().expect("just set").watch = Some(w);
    }
    Ok(())
}

/// Asks ring `key` to stop once its in-flight requests have completed; `reply` then gets the
/// next available index. A ring this reactor does not run is answered at once with `None`
/// dropped (the sender is dropped).
pub(crate) fn stop_ring(ctx: &mut ReactorCtx, key: RingKey, reply: Sender<u16>) {
    if let Some(m) = ctx.local::<VhostGroup>().and_then(|g| g.find(key)) {
        m.ring.stop(reply);
    }
}

/// Gives every ring of controller `ctrlr` on this reactor the new memory table.
pub(crate) fn set_mem(ctx: &mut ReactorCtx, ctrlr: u64, mem: &Arc<GuestMem>) {
    if let Some(g) = ctx.local::<VhostGroup>() {
        for m in g.rings.iter_mut().flatten() {
            if m.ring.key.ctrlr == ctrlr {
                m.ring.set_mem(Arc::clone(mem));
            }
        }
    }
}

/// Replaces ring `key`'s call eventfd.
pub(crate) fn set_call(ctx: &mut ReactorCtx, key: RingKey, call: Option<std::fs::File>) {
    if let Some(m) = ctx.local::<VhostGroup>().and_then(|g| g.find(key)) {
        m.ring.set_call(call);
    }
}

/// Drops this reactor's group after its rings (stops must have been asked and answered
/// before: a ring still here is stopped now, waiting up to 5 s for its I/O).
pub(crate) fn shut_down(ctx: &mut ReactorCtx) {
    let Some(mut g) = ctx.take_local::<VhostGroup>() else {
        return;
    };
    if let Some(id) = g.poller.take() {
        ctx.unregister_poller(id);
    }
    let deadline = pmio_reactors::now_ns() + 5_000_000_000;
    for m in g.rings.iter_mut().flatten() {
        let (tx, _rx) = std::sync::mpsc::channel();
        m.ring.stop(tx);
    }
    while g.rings.iter().any(Option::is_some) && pmio_reactors::now_ns() < deadline {
        g.poll(pmio_reactors::now_ns());
    }
    for w in g
        .unwatch
        .drain(..)
        .chain(g.rings.iter_mut().flatten().filter_map(|m| m.watch.take()))
    {
        ctx.unwatch_fd(w);
    }
    if g.rings.iter().any(Option::is_some) {
        log::error!("vhost: core {}: rings still had I/O at shutdown", g.core);
        // Their buffers must outlive the devices' use of them.
        std::mem::forget(g.pool);
        return;
    }
    let VhostGroup { queues, pool, .. } = g;
    drop(queues);
    drop(pool);
}
