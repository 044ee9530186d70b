//! An NVMe/TCP controller's own part of the controller model: attaching (connect the admin
//! queue, then the bring-up every controller goes through, registers read by Property Get),
//! and the controller's thread, which owns the admin queue after attach: Keep Alive every
//! KATO/2, the Aborts of commands past their deadline (`abort.rs`), an Asynchronous Event
//! Request kept posted (`aer.rs`), and the reconnect policy (SPDK's bdev_nvme reset /
//! reconnect / ctrlr loss).
//!
//! # Reconnect
//! A queue pair that loses its connection (or fails it: a command still not complete after
//! an Abort) asks for a reset ([`TcpCtrlr::request_reset`]); the controller's thread notices
//! it, or its own admin connection failing (end of stream, a bad PDU, a Keep Alive or an Abort
//! unanswered or failed), and then:
//! 1. makes `CtrlrInner::reset_gen` odd: queue pairs drop their connections at their next
//!    submit or poll and hold their I/O, outstanding and new (counted by `outstanding()`);
//! 2. reconnects the admin queue (a new controller: Connect with CNTLID 0xFFFF, CC.EN = 1 by
//!    Property Set, CSTS.RDY, Set Features Number of Queues), now and then every
//!    `reconnect_delay_sec`, on this thread (blocking here blocks no reactor);
//! 3. on success makes the generation even again: each queue pair connects anew, without
//!    waiting, on its own reactor (`qpair.rs`), and resubmits what it held;
//! 4. past `fast_io_fail_timeout_sec` (when set) held and new I/O fails with ENXIO
//!    (`IoError::Disconnected`) while reconnecting goes on;
//! 5. past `ctrlr_loss_timeout_sec` (at once when 0: one attempt, no retry; never when -1)
//!    the controller is failed: every I/O fails with ENXIO, now and later.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::admin::AdminQueue;
use crate::ctrlr::{
    Controller, CtrlrInner, Init, NvmeOptions, PAGE_SIZE, SET_NUM_QUEUES, nvme_enable, nvme_ready,
    set_num_queues_sqe,
};
use crate::dma::DmaMapper;
use crate::error::NvmeError;
use crate::recovery::CtrlrLiveness;
use crate::regs::{Cc, RegisterIo, off};
use crate::spec::pdu::Digests;
use crate::spec::{ConnectData, Sqe, admin_opc};
use crate::tcp::ConnError;

use super::abort::{AbortAsks, SentAborts};
use super::admin::TcpAdmin;
use super::aer::Aer;
use super::options::{TcpOptions, TcpTarget};

/// How long one connection set-up (TCP, ICReq/ICResp, Connect) may take. Linux's host gives
/// the ICResp 10 s.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the controller's thread looks at its admin connection and its timers.
const TICK: Duration = Duration::from_millis(10);

/// What an NVMe/TCP controller adds to the controller model.
pub(crate) struct TcpCtrlr {
    pub target: TcpTarget,
    pub opts: TcpOptions,
    pub addr: SocketAddr,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub admin: Arc<TcpAdmin>,
    /// The controller ID of the current association (I/O queues connect with it).
    pub cntlid: AtomicU16,
    /// A queue pair lost its connection, or a reset was asked for.
    reset_wanted: AtomicBool,
    /// Reconnecting for longer than `fast_io_fail_timeout_sec`: I/O is failed, not held.
    pub fast_io_fail: AtomicBool,
    /// Aborts the queue pairs asked for, sent by the controller's thread (`abort.rs`).
    pub(super) abort_asks: AbortAsks,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    waker: OnceLock<std::thread::Thread>,
}

impl TcpCtrlr {
    pub(crate) fn digests(&self) -> Digests {
        Digests {
            header: self.opts.hdgst,
            data: self.opts.ddgst,
        }
    }

    /// What this host says in a Connect to the current controller (an admin queue's
    /// replaces the CNTLID).
    pub(crate) fn connect_data(&self) -> ConnectData {
        ConnectData {
            hostid: self.hostid,
            cntlid: self.cntlid.load(Ordering::Acquire),
            subnqn: self.target.subnqn.clone(),
            hostnqn: self.hostnqn.clone(),
        }
    }

    /// The host side of an in-band authentication, when the subsystem asks for one.
    pub(crate) fn auth_config(&self) -> Result<pmio_auth::host::HostConfig, ConnError> {
        let keys = self.opts.dhchap.as_ref().ok_or(ConnError::AuthRequired)?;
        keys.config(&self.hostnqn, &self.target.subnqn)
            .map_err(|e| ConnError::Auth(format!("the DH-HMAC-CHAP key: {e}")))
    }

    /// The TLS PSK of a new connection, when attached with one.
    pub(crate) fn client_psk(&self) -> Result<Option<pmio_tls::ClientPsk>, ConnError> {
        match &self.opts.psk {
            Some(k) => k.client_psk(&self.hostnqn, &self.target.subnqn).map(Some),
            None => Ok(None),
        }
    }

    /// Asks the controller's thread to reset (reconnect) the controller.
    pub(crate) fn request_reset(&self) {
        self.reset_wanted.store(true, Ordering::Release);
        self.wake();
    }

    pub(super) fn wake(&self) {
        if let Some(t) = self.waker.get() {
            t.unpark();
        }
    }

    /// Stops the controller's thread and waits for it (unless called on it).
    fn stop_thread(&self) {
        self.wake();
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }
}

/// No DMA: a TCP controller reads and writes buffers through its sockets. Registrations are
/// kept (so the same calls work on either transport) at IOVA = address.
struct NoDma;

impl DmaMapper for NoDma {
    unsafe fn map(&self, vaddr: *mut u8, _len: usize) -> Result<u64, NvmeError> {
        Ok(vaddr as u64)
    }

    fn unmap(&self, _vaddr: *mut u8, _len: usize) -> Result<(), NvmeError> {
        Ok(())
    }
}

/// Attaches the NVMe/TCP controller of subsystem `target.subnqn` at `target.traddr:trsvcid`
/// as `name` (bdevs `<name>n<nsid>`): connects the admin queue, brings the controller up
/// (properties, Identify, namespaces, I/O queues granted) and starts its thread (Keep Alive,
/// reconnects). Blocks until done (at most a few timeouts): call it off the reactors, as an
/// RPC does. The controller model's options are the defaults ([`connect_with`] sets them).
pub fn connect(name: &str, target: &TcpTarget, opts: TcpOptions) -> Result<Controller, NvmeError> {
    let nvme = NvmeOptions {
        name: name.to_string(),
        ..NvmeOptions::default()
    };
    connect_with(target, opts, nvme)
}

/// [`connect`] with the options of the controller model both transports share: `nvme.name`
/// names the controller, and `io_timeout`, `abort_timeout`, `admin_timeout`, `io_retries`
/// and `recovery_retries` mean what they mean on PCIe (SPDK's `bdev_nvme_set_options` apply
/// to TCP controllers too). The queues are `opts`' (`io_queues`, `queue_size`; the admin
/// queue has 32 entries, as Linux's host), `shutdown_timeout` bounds the shutdown at detach,
/// and the PCIe-only `admin_queue_entries`, `max_io_queues`, `io_queue_entries` and
/// `health_check_interval` are not used (the connection and Keep Alive tell a lost
/// controller).
pub fn connect_with(
    target: &TcpTarget,
    opts: TcpOptions,
    nvme: NvmeOptions,
) -> Result<Controller, NvmeError> {
    opts.validate()?;
    let nvme_opts = NvmeOptions {
        max_io_queues: opts.io_queues,
        io_queue_entries: opts.queue_size,
        ..nvme
    };
    nvme_opts.validate()?;
    let name = nvme_opts.name.as_str();
    let addr = target.resolve()?;
    let hostid = pmio::Uuid::new_v4();
    let hostnqn = opts.hostnqn_or_generated(&hostid);
    let admin = Arc::new(TcpAdmin::new(name, nvme_opts.admin_timeout));
    let tcp = TcpCtrlr {
        target: target.clone(),
        addr,
        hostnqn,
        hostid: hostid.0,
        admin: admin.clone(),
        cntlid: AtomicU16::new(0),
        reset_wanted: AtomicBool::new(false),
        fast_io_fail: AtomicBool::new(false),
        abort_asks: AbortAsks::default(),
        thread: Mutex::new(None),
        waker: OnceLock::new(),
        opts,
    };
    let cntlid = connect_admin(name, &tcp)?;
    tcp.cntlid.store(cntlid, Ordering::Release);
    log::info!(
        "{name}: connected to {} at {addr} as controller {cntlid} (host {})",
        target.subnqn,
        tcp.hostnqn
    );
    let regs: Arc<dyn RegisterIo> = admin.clone();
    let init = Init::with_transport(
        regs,
        Arc::new(NoDma),
        nvme_opts,
        AdminQueue::Tcp(admin),
        crate::ctrlr::Transport::Tcp(Box::new(tcp)),
    )?;
    let ctrlr = init.run()?;
    spawn_thread(&ctrlr.inner)?;
    Ok(ctrlr)
}

/// Connects the admin queue of a new association: its controller ID.
fn connect_admin(name: &str, t: &TcpCtrlr) -> Result<u16, NvmeError> {
    t.admin
        .connect(
            t.addr,
            t.digests(),
            t.connect_data(),
            t.opts.keep_alive_timeout_ms,
            CONNECT_TIMEOUT,
            super::admin::QueueSecurity {
                auth: &|| t.auth_config(),
                tls: t.client_psk().map_err(|e| NvmeError::Disconnected {
                    ctrlr: name.to_string(),
                    reason: format!("connecting to {}: {e}", t.addr),
                })?,
            },
        )
        .map_err(|e| NvmeError::Disconnected {
            ctrlr: name.to_string(),
            reason: format!("connecting to {}: {e}", t.addr),
        })
}

fn spawn_thread(inner: &Arc<CtrlrInner>) -> Result<(), NvmeError> {
    let t = inner.tcp().expect("a TCP controller");
    let weak = Arc::downgrade(inner);
    let handle = std::thread::Builder::new()
        .name(format!("nvme-tcp-{}", inner.name))
        .spawn(move || run(weak))
        .map_err(|e| NvmeError::Disconnected {
            ctrlr: inner.name.clone(),
            reason: format!("cannot start the controller's thread: {e}"),
        })?;
    let _ = t.waker.set(handle.thread().clone());
    *t.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    Ok(())
}

/// Where the controller's thread is.
enum Link {
    /// Connected; the next Keep Alive is due then (`None`: keep-alive off).
    Up { keep_alive: Option<Instant> },
    /// Lost since `since`; the next attempt is due at `next`.
    Lost { since: Instant, next: Instant },
}

/// The controller's thread: holds only a weak reference, so the controller goes when its
/// users do.
fn run(weak: Weak<CtrlrInner>) {
    let mut link = Link::Up {
        keep_alive: next_keep_alive(&weak),
    };
    let mut aborts = SentAborts::default();
    let mut aer = Aer::default();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.detached.load(Ordering::Acquire) || inner.liveness() != CtrlrLiveness::Alive {
            return;
        }
        let t = inner.tcp().expect("a TCP controller");
        let now = Instant::now();
        link = match link {
            Link::Up { keep_alive } => up_step(&inner, t, keep_alive, (&mut aborts, &mut aer), now),
            Link::Lost { since, next } if now >= next => reconnect_step(&inner, t, since, now),
            lost @ Link::Lost { .. } => lost,
        };
        drop(inner);
        std::thread::park_timeout(TICK);
    }
}

/// When the next Keep Alive is due, from now (`None`: keep-alive off).
fn next_keep_alive(weak: &Weak<CtrlrInner>) -> Option<Instant> {
    let iv = weak.upgrade()?.tcp()?.opts.keep_alive_interval()?;
    Some(Instant::now() + iv)
}

/// Connected: notices a lost admin connection or a wanted reset, sends Keep Alive when due,
/// sends the Aborts asked for and looks for their answers, keeps an AER posted.
fn up_step(
    inner: &CtrlrInner,
    t: &TcpCtrlr,
    keep_alive: Option<Instant>,
    (aborts, aer): (&mut SentAborts, &mut Aer),
    now: Instant,
) -> Link {
    let mut lost = t.reset_wanted.swap(false, Ordering::AcqRel) || !t.admin.check_stream();
    let mut next_ka = keep_alive;
    if let (false, Some(due), Some(iv)) = (lost, keep_alive, t.opts.keep_alive_interval())
        && now >= due
    {
        // Answered within the interval, or the connection is taken for lost.
        let sqe = Sqe::new(admin_opc::KEEP_ALIVE, 0);
        if let Err(e) = t.admin.exec(sqe, iv, &inner.name, "Keep Alive") {
            log::warn!("{e}");
            lost = true;
        }
        next_ka = Some(now + iv);
    }
    if !lost && let Err(e) = aborts.step(inner, t, now) {
        log::error!("{e}");
        lost = true;
    }
    if !lost && let Err(e) = aer.step(inner, t) {
        log::warn!("{e}");
        lost = true;
    }
    if !lost {
        return Link::Up {
            keep_alive: next_ka,
        };
    }
    log::warn!(
        "{}: controller connection lost: resetting (reconnect every {} s, loss after {} s)",
        inner.name,
        t.opts.reconnect_delay_sec,
        t.opts.ctrlr_loss_timeout_sec
    );
    aborts.clear(t);
    aer.clear();
    // Odd: queue pairs drop their connections and hold their I/O.
    inner.reset_gen.fetch_add(1, Ordering::AcqRel);
    t.admin.disconnect();
    Link::Lost {
        since: now,
        next: now,
    }
}

/// Lost: one reconnect attempt, then the policy's verdict.
fn reconnect_step(inner: &CtrlrInner, t: &TcpCtrlr, since: Instant, now: Instant) -> Link {
    match reconnect(inner, t) {
        Ok(()) => {
            t.fast_io_fail.store(false, Ordering::Release);
            t.reset_wanted.store(false, Ordering::Release);
            // Even again: queue pairs connect anew and resubmit.
            inner.reset_gen.fetch_add(1, Ordering::AcqRel);
            log::info!(
                "{}: reconnected as controller {}",
                inner.name,
                t.cntlid.load(Ordering::Acquire)
            );
            Link::Up {
                keep_alive: t.opts.keep_alive_interval().map(|iv| Instant::now() + iv),
            }
        }
        Err(e) => {
            t.admin.disconnect();
            let lost_for = now.saturating_duration_since(since);
            let loss = t.opts.ctrlr_loss_timeout_sec;
            if loss == 0 || (loss > 0 && lost_for >= Duration::from_secs(loss as u64)) {
                log::error!(
                    "{}: reconnect failed ({e}); controller lost after {} s: failing its I/O",
                    inner.name,
                    lost_for.as_secs()
                );
                inner
                    .liveness
                    .store(CtrlrLiveness::Failed, Ordering::Release);
                inner.reset_gen.fetch_add(1, Ordering::AcqRel);
                return Link::Lost { since, next: now };
            }
            let fast = t.opts.fast_io_fail_timeout_sec;
            if fast != 0
                && lost_for >= Duration::from_secs(u64::from(fast))
                && !t.fast_io_fail.swap(true, Ordering::AcqRel)
            {
                log::warn!(
                    "{}: disconnected for {fast} s: failing I/O until reconnected",
                    inner.name
                );
            }
            log::warn!("{}: reconnect failed: {e}", inner.name);
            Link::Lost {
                since,
                next: now + Duration::from_secs(u64::from(t.opts.reconnect_delay_sec)),
            }
        }
    }
}

/// A new association: admin Connect, CC.EN = 1, CSTS.RDY, as many I/O queues as before.
fn reconnect(inner: &CtrlrInner, t: &TcpCtrlr) -> Result<(), NvmeError> {
    let cntlid = connect_admin(&inner.name, t)?;
    let regs = &*inner.regs;
    regs.write32(off::CC, Cc::for_enable(inner.cap, PAGE_SIZE).0);
    nvme_enable(regs);
    let ready = Duration::from_millis(inner.cap.timeout_ms().max(500));
    let deadline = Instant::now() + ready;
    const RDY1: &str = "waiting for CSTS.RDY=1 after a reconnect";
    while !nvme_ready(regs, &inner.name, true, RDY1)? {
        if Instant::now() > deadline {
            return Err(NvmeError::Timeout {
                ctrlr: inner.name.clone(),
                state: RDY1,
                ms: ready.as_millis() as u64,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let sqe = set_num_queues_sqe(inner.io_queues);
    let cqe = t
        .admin
        .exec(sqe, inner.opts.admin_timeout, &inner.name, SET_NUM_QUEUES)?;
    // A reconnect is this transport's reset: the same grant is needed.
    inner.queues_granted(&cqe)?;
    t.cntlid.store(cntlid, Ordering::Release);
    Ok(())
}

/// Detach: stops the thread, lets the queue pairs know (they fail what they have), shuts the
/// controller down (CC.SHN, CSTS.SHST by properties) if it is connected, and disconnects.
pub(crate) fn shutdown(inner: &CtrlrInner, t: &TcpCtrlr) -> Result<(), NvmeError> {
    if inner.detached.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    t.stop_thread();
    let gen_before = inner.reset_gen.fetch_add(2, Ordering::AcqRel);
    let open = inner.open_qpairs.load(Ordering::Acquire);
    if open > 0 {
        log::warn!(
            "{}: detaching with {open} I/O queue pair(s) still open",
            inner.name
        );
    }
    let connected =
        gen_before & 1 == 0 && inner.liveness() == CtrlrLiveness::Alive && t.admin.connected();
    let result = match connected.then(|| inner.normal_shutdown()) {
        // The connection went meanwhile: nothing left to shut down.
        Some(Err(NvmeError::DeviceRemoved { .. })) | None => Ok(()),
        Some(r) => r,
    };
    t.admin.disconnect();
    result
}

impl CtrlrInner {
    /// The NVMe/TCP part of the controller (`None` on PCIe).
    pub(crate) fn tcp(&self) -> Option<&TcpCtrlr> {
        match &self.transport {
            crate::ctrlr::Transport::Tcp(t) => Some(t),
            crate::ctrlr::Transport::Pcie => None,
        }
    }

    /// Entries of each I/O queue: the asked size within CAP.MQES + 1 and MAXCMD.
    pub(crate) fn tcp_io_entries(&self) -> u32 {
        let mut n = self.opts.io_queue_entries.min(self.cap.max_queue_entries());
        if self.id.maxcmd != 0 {
            n = n.min(u32::from(self.id.maxcmd));
        }
        n.max(2)
    }

    /// Write data up to this many bytes travels in the command capsule (IOCCSZ × 16 − 64;
    /// none when the controller puts in-capsule data at an offset, ICDOFF ≠ 0).
    pub(crate) fn tcp_in_capsule(&self) -> u32 {
        if self.id.icdoff != 0 {
            return 0;
        }
        self.id.ioccsz.saturating_mul(16).saturating_sub(64)
    }
}
