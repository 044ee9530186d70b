//! A reactor's ublk group: the disk queues this reactor owns and one poller that runs them.
//! Everything here lives on its reactor; the target reaches it by message only
//! ([`start_queue`], [`close_queue`], [`shut_down`]).
//!
//! One poll: (1) each queue takes its new requests, runs its bdev I/O and sends its commits
//! ([`UblkQueue::poll`]); (2) queues asked to close that have nothing left in the bdev are
//! closed and their closers answered; (3) the reactor stays awake while any queue has bdev
//! I/O in flight (its ring's eventfd wakes it for new requests otherwise).

use std::sync::mpsc::Sender;

use pmio::bdev::Registry;
use pmio::dma::DmaRegion;
use pmio_reactors::{FdInterest, FdWatch, PollerId, PollerResult, ReactorCtx};

use crate::error::UblkError;
use crate::queue::{QueueKey, QueueReport, QueueSetup, UblkQueue};

/// A queue in the group.
struct Member {
    queue: UblkQueue,
    watch: FdWatch,
    /// Set by [`close_queue`]: answered once the queue has closed.
    closing: Option<Sender<QueueReport>>,
}

/// The ublk group of one reactor.
struct UblkGroup {
    core: u32,
    members: Vec<Member>,
    /// Buffer regions of closed queues. A bdev may keep memory registered with it pinned
    /// until all its queues close, so a region is never unmapped while the group lives; the
    /// next queue of the reactor reuses one instead of allocating.
    spare: Vec<DmaRegion>,
    poller: Option<PollerId>,
}

impl UblkGroup {
    /// Steps 1 and 2 of a poll: returns whether anything happened; the queues ready to close
    /// go to `closed` (their fd watches must end first: [`finish_closed`]).
    fn poll(&mut self, closed: &mut Vec<Member>) -> bool {
        let mut busy = false;
        for m in &mut self.members {
            busy |= m.queue.poll();
        }
        let mut i = 0;
        while i < self.members.len() {
            let m = &self.members[i];
            if m.closing.is_some() && m.queue.is_idle() {
                closed.push(self.members.swap_remove(i));
                busy = true;
            } else {
                i += 1;
            }
        }
        busy
    }

    fn must_poll(&self) -> bool {
        self.members.iter().any(|m| m.queue.must_poll())
    }
}

/// Ends closed members' fd watches, then closes their queues and answers their closers.
fn finish_closed(ctx: &mut ReactorCtx, closed: Vec<Member>) {
    for m in closed {
        ctx.unwatch_fd(m.watch);
        let (report, bufs) = m.queue.close();
        log::info!(
            "ublk {}: queue {} closed on core {} ({} requests)",
            report.key.dev,
            report.key.q,
            ctx.core(),
            report.completed
        );
        if let Some(g) = ctx.local::<UblkGroup>() {
            g.spare.extend(bufs);
        }
        if let Some(tx) = m.closing {
            let _ = tx.send(report);
        }
    }
}

fn ensure_group(ctx: &mut ReactorCtx) {
    if ctx.local::<UblkGroup>().is_some() {
        return;
    }
    let core = ctx.core();
    ctx.set_local(UblkGroup {
        core,
        members: Vec::new(),
        spare: Vec::new(),
        poller: None,
    });
    let id = ctx.register_poller("ublk_poll_group", |ctx| {
        let Some(g) = ctx.local::<UblkGroup>() else {
            return PollerResult::Idle;
        };
        let mut closed = Vec::new();
        let busy = g.poll(&mut closed);
        let must_poll = g.must_poll();
        if !closed.is_empty() {
            finish_closed(ctx, closed);
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
    ctx.local::<UblkGroup>().expect("just set").poller = Some(id);
}

/// Opens a queue on this reactor and sends its fetches (this reactor serves it from now on).
pub(crate) fn start_queue(
    ctx: &mut ReactorCtx,
    registry: &Registry,
    setup: QueueSetup,
) -> Result<(), UblkError> {
    ensure_group(ctx);
    let g = ctx.local::<UblkGroup>().expect("ensured");
    if g.members.iter().any(|m| m.queue.key == setup.key) {
        return Err(UblkError::Queue {
            id: setup.key.dev,
            queue: setup.key.q,
            reason: "already running".into(),
        });
    }
    let queue = UblkQueue::open(setup, registry, &mut g.spare)?;
    log::info!(
        "ublk {}: queue {} started on core {} (depth {})",
        queue.key.dev,
        queue.key.q,
        g.core,
        queue.depth()
    );
    let watch = ctx.watch_fd(queue.event_fd(), FdInterest::Read);
    ctx.local::<UblkGroup>()
        .expect("ensured")
        .members
        .push(Member {
            queue,
            watch,
            closing: None,
        });
    Ok(())
}

/// Asks queue `key` to close once nothing of it is in the bdev (call after STOP_DEV, when
/// the kernel sends it no more requests); `reply` then gets its report. A queue this reactor
/// does not run drops `reply` at once.
pub(crate) fn close_queue(ctx: &mut ReactorCtx, key: QueueKey, reply: Sender<QueueReport>) {
    let Some(g) = ctx.local::<UblkGroup>() else {
        return;
    };
    if let Some(m) = g.members.iter_mut().find(|m| m.queue.key == key) {
        m.closing = Some(reply);
    }
}

/// Drops this reactor's group: closes every queue (waiting up to 5 s for their bdev I/O),
/// then frees the spare buffers.
pub(crate) fn shut_down(ctx: &mut ReactorCtx) {
    let Some(mut g) = ctx.take_local::<UblkGroup>() else {
        return;
    };
    if let Some(id) = g.poller.take() {
        ctx.unregister_poller(id);
    }
    let deadline = pmio_reactors::now_ns() + 5_000_000_000;
    while g.members.iter().any(|m| !m.queue.is_idle()) && pmio_reactors::now_ns() < deadline {
        for m in &mut g.members {
            m.queue.poll();
        }
    }
    let mut stuck = false;
    for m in g.members.drain(..) {
        ctx.unwatch_fd(m.watch);
        stuck |= !m.queue.is_idle();
        let (report, bufs) = m.queue.close();
        g.spare.extend(bufs);
        if let Some(tx) = m.closing {
            let _ = tx.send(report);
        }
    }
    if stuck {
        log::error!("ublk: core {}: queues still had I/O at shutdown", g.core);
        std::mem::forget(g.spare);
    }
}
