//! Controller bring-up (a polled state machine), I/O queue creation and deletion, and
//! shutdown.
//!
//! Bring-up follows NVMe base spec §3.5.1 and SPDK's `nvme_ctrlr_process_init`: disable the
//! controller if a previous user left it enabled, program the admin queue, enable, identify
//! the controller and its active namespaces, and ask for I/O queues. Each state has its own
//! deadline: CAP.TO × 500 ms for ready transitions, the admin timeout for commands.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pmio::hctx::HctxQueues;

use crate::admin::{AdminQueue, check_alive};
use crate::dma::{DmaMapper, Mappings};
use crate::error::NvmeError;
use crate::prp;
use crate::recovery::{AtomicLiveness, CtrlrLiveness, ResetStep};
use crate::regs::{Cap, Cc, Csts, RegisterIo, off};
use crate::spec::{Cqe, IdentifyController, IdentifyNamespace, Sqe, Status, admin_opc, cns, fid};

/// Host memory page size the driver uses (CC.MPS = 0).
pub const PAGE_SIZE: u64 = 4096;

/// Controller options (SPDK's `spdk_nvme_ctrlr_opts`, the parts that apply).
#[derive(Clone, Debug)]
pub struct NvmeOptions {
    /// Controller name; namespaces become bdevs `<name>n<nsid>`. Default `Nvme0`.
    pub name: String,
    /// Admin queue entries (2..=4096). Default 32.
    pub admin_queue_entries: u32,
    /// I/O queue pairs to ask the controller for (Set Features Number of Queues). Default 64.
    pub max_io_queues: u16,
    /// Entries of each I/O queue; 0 = the opened depth + 1. Clamped to CAP.MQES + 1.
    pub io_queue_entries: u32,
    /// Hardware queues of each type one reactor opens (per namespace bdev). Default: one
    /// default queue.
    pub queues: HctxQueues,
    /// Deadline of each admin command. Default 30 s.
    pub admin_timeout: Duration,
    /// Lower bound of the shutdown wait (the controller's RTD3E may ask for more). Default 10 s.
    pub shutdown_timeout: Duration,
    /// Times a command that completed with a retryable status is resubmitted. Default 4.
    pub io_retries: u8,
    /// Deadline of each I/O command, checked by the poller: a command past it is aborted
    /// (Abort), and the controller is reset when the abort fails or the aborted command still
    /// does not complete. `Duration::ZERO` disables I/O timeouts. Default 30 s.
    pub io_timeout: Duration,
    /// Deadline of one Abort command (the poller waits for it). Default 1 s.
    pub abort_timeout: Duration,
    /// Times one I/O is resubmitted after a timeout or a controller reset before it fails
    /// with `IoStatus::Timeout`. Default 3.
    pub recovery_retries: u8,
    /// How often a poller with commands outstanding reads CSTS for a fatal status (then resets
    /// the controller) or a vanished device (then fails every I/O). Default 10 ms.
    pub health_check_interval: Duration,
}

impl Default for NvmeOptions {
    fn default() -> Self {
        NvmeOptions {
            name: "Nvme0".to_string(),
            admin_queue_entries: 32,
            max_io_queues: 64,
            io_queue_entries: 0,
            queues: HctxQueues::DEFAULT_ONLY,
            admin_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(10),
            io_retries: 4,
            io_timeout: Duration::from_secs(30),
            abort_timeout: Duration::from_secs(1),
            recovery_retries: 3,
            health_check_interval: Duration::from_millis(10),
        }
    }
}

impl NvmeOptions {
    /// Checks ranges once, at attach.
    pub fn validate(&self) -> Result<(), NvmeError> {
        let bad = |s: String| Err(NvmeError::InvalidOption(s));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return bad(format!(
                "controller name '{}' must be non-empty ASCII letters, digits or _",
                self.name
            ));
        }
        if !(2..=4096).contains(&self.admin_queue_entries) {
            return bad(format!(
                "admin_queue_entries {} not in 2..=4096",
                self.admin_queue_entries
            ));
        }
        if self.max_io_queues == 0 || self.max_io_queues == u16::MAX {
            return bad(format!(
                "max_io_queues {} not in 1..=65534",
                self.max_io_queues
            ));
        }
        if self.io_queue_entries == 1 || self.io_queue_entries > 65536 {
            return bad(format!(
                "io_queue_entries {} not 0 or in 2..=65536",
                self.io_queue_entries
            ));
        }
        if self.queues.default == 0 {
            return bad("at least one default queue per reactor".to_string());
        }
        Ok(())
    }
}

/// One active namespace, as Identify Namespace described it.
#[derive(Clone, Debug)]
pub struct Namespace {
    pub nsid: u32,
    /// Blocks.
    pub num_blocks: u64,
    /// log2 of the block size.
    pub block_shift: u8,
    /// Metadata bytes per block (namespaces with metadata are not exposed).
    pub metadata: u16,
    /// NGUID (all zero when the controller reports none).
    pub nguid: [u8; 16],
}

impl Namespace {
    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.block_shift
    }
}

/// Bring-up states, in order (SPDK's names where they exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitState {
    /// Read CAP and VS; check the controller is usable.
    ReadCap,
    /// Look at CC.EN / CSTS.RDY left by the previous user.
    CheckEnabled,
    /// EN=1 but RDY=0: wait for RDY=1 before disabling (spec: do not clear EN mid-enable).
    DisableWaitForReady1,
    /// Clear CC.EN.
    Disable,
    /// Wait for CSTS.RDY=0.
    DisableWaitForReady0,
    /// Program AQA/ASQ/ACQ and CC (EN still 0).
    ConfigureAdmin,
    /// Set CC.EN.
    Enable,
    /// Wait for CSTS.RDY=1.
    EnableWaitForReady1,
    /// Identify Controller.
    IdentifyController,
    /// Identify active namespace ID list.
    IdentifyActiveNs,
    /// Identify Namespace, one per active NSID.
    IdentifyNamespace,
    /// Set Features Number of Queues.
    SetNumQueues,
    /// Done.
    Ready,
}

impl InitState {
    /// What the state waits for, for timeout messages.
    pub fn describe(self) -> &'static str {
        match self {
            InitState::ReadCap => "reading CAP",
            InitState::CheckEnabled => "checking CC.EN",
            InitState::DisableWaitForReady1 => "waiting for CSTS.RDY=1 before disabling",
            InitState::Disable => "disabling",
            InitState::DisableWaitForReady0 => "waiting for CSTS.RDY=0 after disabling",
            InitState::ConfigureAdmin => "configuring the admin queue",
            InitState::Enable => "enabling",
            InitState::EnableWaitForReady1 => "waiting for CSTS.RDY=1 after enabling",
            InitState::IdentifyController => "waiting for Identify Controller",
            InitState::IdentifyActiveNs => "waiting for Identify active namespace list",
            InitState::IdentifyNamespace => "waiting for Identify Namespace",
            InitState::SetNumQueues => "waiting for Set Features Number of Queues",
            InitState::Ready => "ready",
        }
    }

    fn waits_for_ready_bit(self) -> bool {
        matches!(
            self,
            InitState::DisableWaitForReady1
                | InitState::DisableWaitForReady0
                | InitState::EnableWaitForReady1
        )
    }
}

/// The bring-up state machine. [`Init::poll`] does what the current state can do without
/// blocking and moves on; the caller polls until it returns `true`.
pub struct Init {
    name: String,
    regs: Arc<dyn RegisterIo>,
    mapper: Arc<Mappings>,
    opts: NvmeOptions,
    state: InitState,
    deadline: Instant,
    pending: Option<u16>,
    cap: Cap,
    vs: u32,
    admin: Option<AdminQueue>,
    id: Option<Box<IdentifyController>>,
    nsids: Vec<u32>,
    ns_index: usize,
    namespaces: Vec<Namespace>,
    io_queues: u16,
    reset_at_attach: bool,
}

impl Init {
    /// A state machine for the controller behind `regs`, using `mapper` for its DMA memory.
    pub fn new(
        regs: Arc<dyn RegisterIo>,
        mapper: Arc<dyn DmaMapper>,
        opts: NvmeOptions,
    ) -> Result<Init, NvmeError> {
        opts.validate()?;
        Ok(Init {
            name: opts.name.clone(),
            regs,
            mapper: Arc::new(Mappings::new(mapper)),
            opts,
            state: InitState::ReadCap,
            deadline: Instant::now(),
            pending: None,
            cap: Cap(0),
            vs: 0,
            admin: None,
            id: None,
            nsids: Vec::new(),
            ns_index: 0,
            namespaces: Vec::new(),
            io_queues: 0,
            reset_at_attach: false,
        })
    }

    /// Current state.
    pub fn state(&self) -> InitState {
        self.state
    }

    fn ready_timeout(&self) -> Duration {
        // CAP.TO = 0 is not allowed; treat it as the smallest unit.
        Duration::from_millis(self.cap.timeout_ms().max(500))
    }

    fn enter(&mut self, state: InitState, now: Instant) {
        log::trace!("{}: init state {:?}", self.name, state);
        self.state = state;
        self.pending = None;
        self.deadline = now
            + if state.waits_for_ready_bit() {
                self.ready_timeout()
            } else {
                self.opts.admin_timeout
            };
    }

    fn timeout(&self) -> NvmeError {
        let ms = if self.state.waits_for_ready_bit() {
            self.ready_timeout().as_millis()
        } else {
            self.opts.admin_timeout.as_millis()
        };
        NvmeError::Timeout {
            ctrlr: self.name.clone(),
            state: self.state.describe(),
            ms: ms as u64,
        }
    }

    fn csts(&self) -> Result<Csts, NvmeError> {
        let csts = Csts(self.regs.read32(off::CSTS));
        if csts.is_all_ones() {
            return Err(NvmeError::DeviceRemoved {
                ctrlr: self.name.clone(),
            });
        }
        Ok(csts)
    }

    /// Runs an admin command across polls: submits it on the first call, then returns the
    /// completion once it arrives (error statuses become errors).
    fn admin_cmd(
        &mut self,
        sqe: Option<Sqe>,
        what: &'static str,
    ) -> Result<Option<Cqe>, NvmeError> {
        let name = self.name.clone();
        let regs = self.regs.clone();
        let admin = self
            .admin
            .as_mut()
            .expect("admin queue exists after ConfigureAdmin");
        let cid = match self.pending {
            Some(cid) => cid,
            None => {
                let sqe = sqe.expect("a command to submit when none is pending");
                let cid = admin
                    .submit(&*regs, sqe)
                    .ok_or_else(|| NvmeError::Timeout {
                        ctrlr: name.clone(),
                        state: "waiting for a free admin queue slot",
                        ms: 0,
                    })?;
                self.pending = Some(cid);
                return Ok(None);
            }
        };
        let Some(cqe) = admin.poll_for(&*regs, cid) else {
            check_alive(&*regs, &name, what)?;
            return Ok(None);
        };
        self.pending = None;
        let st: Status = cqe.status();
        if !st.is_success() {
            return Err(NvmeError::AdminCommand {
                ctrlr: name,
                what,
                status: st,
            });
        }
        Ok(Some(cqe))
    }

    /// Advances the state machine as far as it can without waiting. Returns `true` when the
    /// controller is ready.
    pub fn poll(&mut self, now: Instant) -> Result<bool, NvmeError> {
        if self.state != InitState::ReadCap && self.state != InitState::Ready && now > self.deadline
        {
            return Err(self.timeout());
        }
        match self.state {
            InitState::ReadCap => {
                self.cap = Cap(self.regs.read64(off::CAP));
                self.vs = self.regs.read32(off::VS);
                if self.cap.0 == u64::MAX || self.vs == u32::MAX {
                    return Err(NvmeError::DeviceRemoved {
                        ctrlr: self.name.clone(),
                    });
                }
                if self.cap.css() & 1 == 0 && self.cap.css() & (1 << 6) == 0 {
                    return Err(self.unsupported(format!(
                        "no NVM command set (CAP.CSS {:#x})",
                        self.cap.css()
                    )));
                }
                if !(self.cap.mps_min_bytes()..=self.cap.mps_max_bytes()).contains(&PAGE_SIZE) {
                    return Err(self.unsupported(format!(
                        "memory page size {PAGE_SIZE} outside CAP.MPSMIN..MPSMAX ({}..{})",
                        self.cap.mps_min_bytes(),
                        self.cap.mps_max_bytes()
                    )));
                }
                log::debug!(
                    "{}: CAP {:#018x} VS {}.{}.{} (MQES {}, TO {} ms, DSTRD {})",
                    self.name,
                    self.cap.0,
                    self.vs >> 16,
                    (self.vs >> 8) & 0xff,
                    self.vs & 0xff,
                    self.cap.max_queue_entries(),
                    self.cap.timeout_ms(),
                    self.cap.dstrd()
                );
                self.enter(InitState::CheckEnabled, now);
            }
            InitState::CheckEnabled => {
                let cc = Cc(self.regs.read32(off::CC));
                let csts = self.csts()?;
                if cc.enabled() {
                    self.reset_at_attach = true;
                    log::info!(
                        "{}: controller left enabled by a previous user; resetting it",
                        self.name
                    );
                    if csts.rdy() {
                        self.enter(InitState::Disable, now);
                    } else {
                        self.enter(InitState::DisableWaitForReady1, now);
                    }
                } else {
                    self.enter(InitState::DisableWaitForReady0, now);
                }
            }
            InitState::DisableWaitForReady1 => {
                let csts = self.csts()?;
                // A controller in fatal status may never become ready: disable it anyway.
                if csts.rdy() || csts.cfs() {
                    self.enter(InitState::Disable, now);
                }
            }
            InitState::Disable => {
                nvme_disable(&*self.regs);
                self.enter(InitState::DisableWaitForReady0, now);
            }
            InitState::DisableWaitForReady0 => {
                if nvme_ready(&*self.regs, &self.name, false, self.state.describe())? {
                    self.enter(InitState::ConfigureAdmin, now);
                }
            }
            InitState::ConfigureAdmin => {
                if self.admin.is_none() {
                    self.admin = Some(AdminQueue::new(
                        self.mapper.clone(),
                        self.opts.admin_queue_entries,
                        self.cap.dstrd(),
                        PAGE_SIZE as usize,
                    )?);
                }
                let admin = self.admin.as_mut().expect("just created");
                nvme_configure_admin(&*self.regs, admin, self.cap);
                self.enter(InitState::Enable, now);
            }
            InitState::Enable => {
                nvme_enable(&*self.regs);
                self.enter(InitState::EnableWaitForReady1, now);
            }
            InitState::EnableWaitForReady1 => {
                if nvme_ready(&*self.regs, &self.name, true, self.state.describe())? {
                    self.enter(InitState::IdentifyController, now);
                }
            }
            InitState::IdentifyController => {
                let sqe = self.next_identify(cns::CONTROLLER, 0);
                if self.admin_cmd(sqe, "Identify Controller")?.is_some() {
                    let id: IdentifyController = self.admin_ref().read_data();
                    log::info!(
                        "{}: {} (serial {}, firmware {}), {} namespaces, MDTS {}",
                        self.name,
                        id.model(),
                        id.serial(),
                        id.firmware(),
                        id.nn,
                        id.mdts
                    );
                    self.id = Some(Box::new(id));
                    self.nsids.clear();
                    self.enter(InitState::IdentifyActiveNs, now);
                }
            }
            InitState::IdentifyActiveNs => {
                let start = self.nsids.last().copied().unwrap_or(0);
                let sqe = self.next_identify(cns::ACTIVE_NS_LIST, start);
                let done = match self.admin_cmd(sqe, "Identify active namespace list") {
                    Ok(c) => c.is_some(),
                    // NVMe 1.0 controllers have no active namespace list: every NSID up to
                    // NN is a candidate (inactive ones identify as size 0 and are skipped).
                    Err(NvmeError::AdminCommand { status, .. })
                        if self.vs < 0x0001_0100 && status.sct() == 0 && status.sc() == 0x02 =>
                    {
                        let nn = self.id.as_ref().map_or(0, |id| id.nn).min(1024);
                        self.nsids = (1..=nn).collect();
                        self.ns_index = 0;
                        self.enter(InitState::IdentifyNamespace, now);
                        return Ok(false);
                    }
                    Err(e) => return Err(e),
                };
                if done {
                    let list: [u32; 1024] = self.admin_ref().read_data();
                    let before = self.nsids.len();
                    for &nsid in list.iter().take_while(|&&n| n != 0) {
                        if nsid > start && nsid != u32::MAX {
                            self.nsids.push(nsid);
                        }
                    }
                    let full = list[1023] != 0 && self.nsids.len() > before;
                    if full {
                        // More may follow: ask again from the last NSID (new deadline).
                        self.enter(InitState::IdentifyActiveNs, now);
                    } else {
                        self.ns_index = 0;
                        self.enter(InitState::IdentifyNamespace, now);
                    }
                }
            }
            InitState::IdentifyNamespace => {
                let Some(&nsid) = self.nsids.get(self.ns_index) else {
                    self.enter(InitState::SetNumQueues, now);
                    return Ok(false);
                };
                let sqe = self.next_identify(cns::NAMESPACE, nsid);
                if self.admin_cmd(sqe, "Identify Namespace")?.is_some() {
                    let ns: IdentifyNamespace = self.admin_ref().read_data();
                    let fmt = ns.format();
                    if ns.nsze == 0 || !(9..=16).contains(&fmt.lbads()) {
                        log::warn!(
                            "{}: namespace {nsid} skipped (size {} blocks, block size 2^{})",
                            self.name,
                            ns.nsze,
                            fmt.lbads()
                        );
                    } else {
                        self.namespaces.push(Namespace {
                            nsid,
                            num_blocks: ns.nsze,
                            block_shift: fmt.lbads(),
                            metadata: fmt.ms(),
                            nguid: ns.nguid,
                        });
                    }
                    self.ns_index += 1;
                    self.enter(InitState::IdentifyNamespace, now);
                }
            }
            InitState::SetNumQueues => {
                let sqe = set_num_queues_sqe(self.opts.max_io_queues);
                if let Some(cqe) = self.admin_cmd(Some(sqe), SET_NUM_QUEUES)? {
                    self.io_queues = granted_queues(&cqe).min(self.opts.max_io_queues);
                    log::debug!("{}: {} I/O queue pairs granted", self.name, self.io_queues);
                    self.enter(InitState::Ready, now);
                    return Ok(true);
                }
            }
            InitState::Ready => return Ok(true),
        }
        Ok(false)
    }

    fn admin_ref(&self) -> &AdminQueue {
        self.admin
            .as_ref()
            .expect("admin queue exists after ConfigureAdmin")
    }

    /// The Identify command to submit, or None while one is pending (its data buffer must not
    /// be touched then).
    fn next_identify(&self, cns: u32, nsid: u32) -> Option<Sqe> {
        self.pending.is_none().then(|| self.identify_sqe(cns, nsid))
    }

    fn identify_sqe(&self, cns: u32, nsid: u32) -> Sqe {
        let admin = self.admin_ref();
        admin.fill_data(0);
        let mut sqe = Sqe::new(admin_opc::IDENTIFY, 0);
        sqe.nsid = nsid;
        sqe.prp1 = admin.data_iova();
        sqe.cdw10 = cns;
        sqe
    }

    fn unsupported(&self, reason: String) -> NvmeError {
        NvmeError::Unsupported {
            ctrlr: self.name.clone(),
            reason,
        }
    }

    /// Polls until ready (sleeping briefly between polls while waiting on the controller).
    pub fn run(mut self) -> Result<Controller, NvmeError> {
        loop {
            let before = self.state;
            if self.poll(Instant::now())? {
                return self.finish();
            }
            if self.state == before {
                // Nothing moved: the controller is working. Register waits sleep longer.
                if before.waits_for_ready_bit() {
                    std::thread::sleep(Duration::from_millis(1));
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn finish(self) -> Result<Controller, NvmeError> {
        let id = self.id.ok_or_else(|| NvmeError::Unsupported {
            ctrlr: self.name.clone(),
            reason: "init finished without Identify data".into(),
        })?;
        let admin = self.admin.expect("admin queue exists when ready");
        // MDTS is in units of CAP.MPSMIN; one PRP list page per command bounds it too.
        let list_max = prp::max_transfer(PAGE_SIZE, (PAGE_SIZE / 8) as usize);
        let mdts = if id.mdts == 0 || id.mdts >= 32 {
            u64::MAX
        } else {
            self.cap.mps_min_bytes() << id.mdts
        };
        let max_transfer = mdts.min(list_max);
        let ctrlr = CtrlrInner {
            name: self.name,
            regs: self.regs,
            mapper: self.mapper,
            cap: self.cap,
            vs: self.vs,
            admin: Mutex::new(admin),
            qids: Mutex::new(vec![false; usize::from(self.io_queues) + 1]),
            io_queues: self.io_queues,
            id,
            namespaces: self.namespaces,
            max_transfer,
            reset_at_attach: self.reset_at_attach,
            detached: AtomicBool::new(false),
            open_qpairs: AtomicUsize::new(0),
            reset_gen: std::sync::atomic::AtomicU64::new(0),
            reset: Mutex::new(None),
            liveness: AtomicLiveness::new(CtrlrLiveness::Alive),
            epoch: Instant::now(),
            opts: self.opts,
        };
        Ok(Controller {
            inner: Arc::new(ctrlr),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Register steps shared by bring-up (`Init`) and the controller reset (`recovery.rs`), so the
// CC / CSTS sequence exists once. Each is one non-blocking step; the callers wait between them.

/// What Set Features Number of Queues is called in errors.
pub(crate) const SET_NUM_QUEUES: &str = "Set Features Number of Queues";

/// Locks `m` unless another thread holds it (a poisoned lock is still usable: its users
/// leave the data consistent).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Clears CC.EN (and any shutdown request): the controller resets, CSTS.RDY follows to 0.
pub(crate) fn nvme_disable(regs: &dyn RegisterIo) {
    let cc = regs.read32(off::CC);
    regs.write32(off::CC, cc & !(Cc::EN | Cc::SHN_MASK));
}

/// With the controller disabled: empties the admin queue, programs AQA / ASQ / ACQ from it,
/// and CC with EN still 0.
pub(crate) fn nvme_configure_admin(regs: &dyn RegisterIo, admin: &mut AdminQueue, cap: Cap) {
    admin.reset(cap.dstrd(), PAGE_SIZE as usize);
    admin.program(regs);
    regs.write32(off::CC, Cc::for_enable(cap, PAGE_SIZE).0);
}

/// Sets CC.EN (after [`nvme_configure_admin`]); CSTS.RDY follows to 1.
pub(crate) fn nvme_enable(regs: &dyn RegisterIo) {
    let cc = regs.read32(off::CC);
    regs.write32(off::CC, cc | Cc::EN);
}

/// Whether CSTS.RDY equals `ready` now. Fails when the registers read all ones and, while
/// waiting for RDY=1, on a fatal status (`state` names the wait in that error).
pub(crate) fn nvme_ready(
    regs: &dyn RegisterIo,
    ctrlr: &str,
    ready: bool,
    state: &'static str,
) -> Result<bool, NvmeError> {
    if ready {
        return check_alive(regs, ctrlr, state).map(|csts| csts.rdy());
    }
    // A controller in fatal status is being reset: CFS may stay set until RDY=0.
    let csts = Csts(regs.read32(off::CSTS));
    if csts.is_all_ones() {
        return Err(NvmeError::DeviceRemoved {
            ctrlr: ctrlr.to_string(),
        });
    }
    Ok(!csts.rdy())
}

/// Set Features Number of Queues asking for `count` I/O submission and completion queues.
pub(crate) fn set_num_queues_sqe(count: u16) -> Sqe {
    let n = u32::from(count.saturating_sub(1));
    let mut sqe = Sqe::new(admin_opc::SET_FEATURES, 0);
    sqe.cdw10 = fid::NUMBER_OF_QUEUES;
    sqe.cdw11 = n << 16 | n;
    sqe
}

/// What Create I/O Completion / Submission Queue are called in errors.
pub(crate) const CREATE_CQ: &str = "Create I/O Completion Queue";
pub(crate) const CREATE_SQ: &str = "Create I/O Submission Queue";

/// Create I/O Completion Queue `qid` of `entries` on the ring at `cq_iova` (physically
/// contiguous, polled: interrupts disabled).
pub(crate) fn create_cq_sqe(qid: u16, entries: u32, cq_iova: u64) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::CREATE_IO_CQ, 0);
    sqe.prp1 = cq_iova;
    sqe.cdw10 = (entries - 1) << 16 | u32::from(qid);
    sqe.cdw11 = 1;
    sqe
}

/// Create I/O Submission Queue `qid` of `entries` on the ring at `sq_iova`, completing on
/// CQ `qid` (physically contiguous).
pub(crate) fn create_sq_sqe(qid: u16, entries: u32, sq_iova: u64) -> Sqe {
    let mut sqe = Sqe::new(admin_opc::CREATE_IO_SQ, 0);
    sqe.prp1 = sq_iova;
    sqe.cdw10 = (entries - 1) << 16 | u32::from(qid);
    sqe.cdw11 = u32::from(qid) << 16 | 1;
    sqe
}

/// I/O queue pairs a Set Features Number of Queues completion grants (the fewer of SQs and
/// CQs; the fields are 0-based).
pub(crate) fn granted_queues(cqe: &Cqe) -> u16 {
    let nsqa = (cqe.dw0 & 0xffff) as u16;
    let ncqa = (cqe.dw0 >> 16) as u16;
    nsqa.min(ncqa).saturating_add(1)
}

/// What queue pairs and bdevs share of a controller.
pub(crate) struct CtrlrInner {
    pub name: String,
    pub regs: Arc<dyn RegisterIo>,
    pub mapper: Arc<Mappings>,
    pub cap: Cap,
    pub vs: u32,
    admin: Mutex<AdminQueue>,
    /// In-use flags of I/O queue IDs (index 0, the admin queue, unused).
    qids: Mutex<Vec<bool>>,
    pub io_queues: u16,
    pub id: Box<IdentifyController>,
    pub namespaces: Vec<Namespace>,
    /// Largest transfer of one command, bytes.
    pub max_transfer: u64,
    /// The controller was found enabled at attach (a previous user did not shut it down, or
    /// shut it down without disabling it) and was reset.
    pub reset_at_attach: bool,
    pub detached: AtomicBool,
    pub open_qpairs: AtomicUsize,
    /// Controller reset generation: odd while a reset is in progress, even otherwise. It moves
    /// by one when a reset starts and when it ends, by two when the device is found removed;
    /// queue pairs recreate their queues when it moved (and is even again).
    pub reset_gen: std::sync::atomic::AtomicU64,
    /// The step a reset in progress is at (`None` when none is), see `recovery.rs`.
    pub(crate) reset: Mutex<Option<ResetStep>>,
    /// Alive, removed (registers read all ones) or failed (a reset failed).
    pub liveness: AtomicLiveness,
    /// Origin of the driver's clock (`now_ns`): reset deadlines and queue pairs' timestamps.
    pub epoch: Instant,
    pub opts: NvmeOptions,
}

impl CtrlrInner {
    pub(crate) fn admin(&self) -> MutexGuard<'_, AdminQueue> {
        // A panic while holding the lock leaves the queue consistent (commands are
        // independent), so a poisoned lock is still usable.
        self.admin.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The admin queue if no one holds it now (reactors never wait for it on a reset).
    pub(crate) fn try_admin(&self) -> Option<MutexGuard<'_, AdminQueue>> {
        try_lock(&self.admin)
    }

    /// Runs one admin command to completion (not while a controller reset is in progress:
    /// the admin queue is being reprogrammed).
    pub fn admin_exec(&self, sqe: Sqe, what: &'static str) -> Result<Cqe, NvmeError> {
        if self.detached.load(Ordering::Acquire) {
            return Err(NvmeError::Detached {
                ctrlr: self.name.clone(),
            });
        }
        let mut admin = self.admin();
        if self.reset_in_progress() {
            return Err(NvmeError::Resetting {
                ctrlr: self.name.clone(),
            });
        }
        admin.exec(&*self.regs, sqe, self.opts.admin_timeout, &self.name, what)
    }

    /// Takes a free I/O queue ID.
    pub fn alloc_qid(&self) -> Result<u16, NvmeError> {
        let mut q = self.qids.lock().unwrap_or_else(|p| p.into_inner());
        match q.iter().skip(1).position(|used| !used) {
            Some(i) => {
                q[i + 1] = true;
                Ok(i as u16 + 1)
            }
            None => Err(NvmeError::NoQueues {
                ctrlr: self.name.clone(),
                granted: self.io_queues,
            }),
        }
    }

    /// Returns an I/O queue ID.
    pub fn free_qid(&self, qid: u16) {
        let mut q = self.qids.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(used) = q.get_mut(usize::from(qid)) {
            *used = false;
        }
    }

    /// Creates I/O CQ then SQ `qid` on rings at `cq_iova`/`sq_iova` (polled, no interrupts).
    pub fn create_io_queue(
        &self,
        qid: u16,
        entries: u32,
        sq_iova: u64,
        cq_iova: u64,
    ) -> Result<(), NvmeError> {
        self.admin_exec(create_cq_sqe(qid, entries, cq_iova), CREATE_CQ)?;
        if let Err(e) = self.admin_exec(create_sq_sqe(qid, entries, sq_iova), CREATE_SQ) {
            let _ = self.delete_queue(admin_opc::DELETE_IO_CQ, qid, "Delete I/O Completion Queue");
            return Err(e);
        }
        Ok(())
    }

    /// Deletes I/O SQ then CQ `qid`.
    pub fn delete_io_queue(&self, qid: u16) -> Result<(), NvmeError> {
        let sq = self.delete_queue(admin_opc::DELETE_IO_SQ, qid, "Delete I/O Submission Queue");
        let cq = self.delete_queue(admin_opc::DELETE_IO_CQ, qid, "Delete I/O Completion Queue");
        sq.and(cq)
    }

    /// Deletes one I/O queue: `opc` is Delete I/O SQ or CQ.
    pub(crate) fn delete_queue(
        &self,
        opc: u8,
        qid: u16,
        what: &'static str,
    ) -> Result<(), NvmeError> {
        let mut sqe = Sqe::new(opc, 0);
        sqe.cdw10 = u32::from(qid);
        self.admin_exec(sqe, what).map(|_| ())
    }

    /// Normal shutdown: CC.SHN = 01b, then wait for CSTS.SHST = complete (bounded by
    /// max(RTD3E, the shutdown timeout)). Idempotent.
    pub fn shutdown(&self) -> Result<(), NvmeError> {
        if self.detached.load(Ordering::Acquire) {
            return Ok(());
        }
        // Detaching is not on the I/O path: a reset in progress is finished first.
        self.reset_wait();
        if self.detached.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let open = self.open_qpairs.load(Ordering::Acquire);
        if open > 0 {
            log::warn!(
                "{}: shutting down with {open} I/O queue pair(s) still open",
                self.name
            );
        }
        let csts = Csts(self.regs.read32(off::CSTS));
        if csts.is_all_ones() {
            return Err(NvmeError::DeviceRemoved {
                ctrlr: self.name.clone(),
            });
        }
        let cc = self.regs.read32(off::CC);
        self.regs
            .write32(off::CC, (cc & !Cc::SHN_MASK) | Cc::SHN_NORMAL);
        let rtd3e = Duration::from_micros(u64::from(self.id.rtd3e));
        let timeout = rtd3e.max(self.opts.shutdown_timeout);
        let deadline = Instant::now() + timeout;
        loop {
            let csts = Csts(self.regs.read32(off::CSTS));
            if csts.is_all_ones() {
                return Err(NvmeError::DeviceRemoved {
                    ctrlr: self.name.clone(),
                });
            }
            if csts.shst() == 2 {
                log::debug!("{}: shutdown complete", self.name);
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(NvmeError::Timeout {
                    ctrlr: self.name.clone(),
                    state: "waiting for CSTS.SHST=complete after a normal shutdown",
                    ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for CtrlrInner {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!("{e}");
        }
        self.mapper.unregister_all();
    }
}

/// An attached controller. Namespaces are exposed as bdevs ([`Controller::bdevs`]); the
/// controller is shut down by [`Controller::detach`], or when the controller and every bdev
/// and queue pair of it are gone.
pub struct Controller {
    pub(crate) inner: Arc<CtrlrInner>,
}

impl Controller {
    /// Brings up the controller behind `regs` (see the module docs).
    pub fn attach_with(
        regs: Arc<dyn RegisterIo>,
        mapper: Arc<dyn DmaMapper>,
        opts: NvmeOptions,
    ) -> Result<Controller, NvmeError> {
        Init::new(regs, mapper, opts)?.run()
    }

    /// Controller name (`Nvme0`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Active namespaces with a usable format.
    pub fn namespaces(&self) -> &[Namespace] {
        &self.inner.namespaces
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.inner.id
    }

    /// Largest transfer of one command in bytes (MDTS, and one PRP list page).
    pub fn max_transfer_bytes(&self) -> u64 {
        self.inner.max_transfer
    }

    /// I/O queue pairs the controller granted.
    pub fn io_queues(&self) -> u16 {
        self.inner.io_queues
    }

    /// VS register (MJR [31:16], MNR [15:8], TER [7:0]).
    pub fn version(&self) -> u32 {
        self.inner.vs
    }

    /// CAP register.
    pub fn cap(&self) -> Cap {
        self.inner.cap
    }

    /// Whether attach found the controller enabled (left so by a previous user) and reset it.
    pub fn reset_at_attach(&self) -> bool {
        self.inner.reset_at_attach
    }

    /// Starts a controller reset and returns without waiting for it (SPDK's
    /// `spdk_nvme_ctrlr_reset` split as `..._reset_poll_async`): the queue pairs of the
    /// controller advance it as they submit and poll, holding new submissions meanwhile, then
    /// recreate their queues and resubmit what was outstanding. Nothing happens when a reset
    /// is in progress already. Fails when the controller is detached, removed or failed.
    pub fn start_reset(&self) -> Result<(), NvmeError> {
        let inner = &self.inner;
        loop {
            let seen = inner.reset_gen.load(Ordering::Acquire);
            if seen & 1 == 1 || inner.reset_start(seen, inner.now_ns())? {
                return Ok(());
            }
            // Another thread holds the admin queue for a moment (this caller is no reactor).
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Resets the controller and waits for the reset to end (off the I/O path: an RPC or a
    /// management thread, never a reactor): starts it as [`Controller::start_reset`] does,
    /// then drives it between short sleeps alongside the queue pairs' polls. The queue pairs
    /// recreate their own queues at their next submit or poll. Fails, with the reset's
    /// outcome, when the controller is left removed or failed.
    pub fn reset(&self) -> Result<(), NvmeError> {
        self.start_reset()?;
        self.inner.reset_wait();
        match self.inner.liveness() {
            CtrlrLiveness::Removed => Err(NvmeError::DeviceRemoved {
                ctrlr: self.inner.name.clone(),
            }),
            CtrlrLiveness::Failed => Err(NvmeError::ControllerFatal {
                ctrlr: self.inner.name.clone(),
                state: "after a failed reset",
            }),
            CtrlrLiveness::Alive => Ok(()),
        }
    }

    /// Queue pairs currently open.
    pub fn open_qpairs(&self) -> usize {
        self.inner.open_qpairs.load(Ordering::Acquire)
    }

    /// Makes `len` bytes at `addr` usable as I/O buffers: maps them for the device,
    /// replacing registrations they overlap (so a reused address never reaches stale pages;
    /// do not re-register memory with I/O in flight). Mappings still registered are removed
    /// when the controller goes.
    ///
    /// # Safety
    /// As [`DmaMapper::map`]: the memory must stay valid until [`Controller::dma_unregister`]
    /// or until the controller is dropped.
    pub unsafe fn dma_register(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.inner.mapper.register(&[(addr, len)]) }
    }

    /// Undoes [`Controller::dma_register`] (no I/O may use the memory any more).
    pub fn dma_unregister(&self, addr: *mut u8, len: usize) -> Result<(), NvmeError> {
        self.inner.mapper.unregister(addr, len)
    }

    /// Shuts the controller down (normal shutdown, bounded wait). Queue pairs should be
    /// closed first; any still open stop working. Idempotent.
    pub fn detach(&self) -> Result<(), NvmeError> {
        self.inner.shutdown()
    }
}
