//! Controller bring-up as a polled state machine ([`Init`], SPDK's `nvme_ctrlr_process_init`):
//! the states in order, each with its own deadline (CAP.TO × 500 ms for ready transitions, the
//! admin timeout for commands), admin commands run across polls, and the attached
//! [`Controller`] built once the controller is ready. The states' work is in `enable.rs`,
//! `identify.rs` and `queues.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::queues::QidMap;
use super::{Controller, CtrlrInner, Namespace, NvmeOptions, PAGE_SIZE, Transport};
use crate::admin::AdminQueue;
use crate::dma::{DmaMapper, Mappings};
use crate::error::NvmeError;
use crate::prp;
use crate::recovery::{AtomicLiveness, CtrlrLiveness};
use crate::regs::{Cap, RegisterIo};
use crate::spec::{Cqe, IdentifyController, Sqe, Status};

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
    pub(super) name: String,
    pub(super) regs: Arc<dyn RegisterIo>,
    pub(super) mapper: Arc<Mappings>,
    pub(super) opts: NvmeOptions,
    pub(super) state: InitState,
    pub(super) deadline: Instant,
    pub(super) pending: Option<u16>,
    pub(super) cap: Cap,
    pub(super) vs: u32,
    pub(super) admin: Option<AdminQueue>,
    pub(super) id: Option<Box<IdentifyController>>,
    pub(super) nsids: Vec<u32>,
    pub(super) ns_index: usize,
    pub(super) namespaces: Vec<Namespace>,
    pub(super) io_queues: u16,
    pub(super) reset_at_attach: bool,
    pub(super) transport: Transport,
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
            transport: Transport::Pcie,
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

    /// A state machine for a controller whose admin queue exists already (a fabrics
    /// controller's, created by Connect), reached through `transport`.
    pub(crate) fn with_transport(
        regs: Arc<dyn RegisterIo>,
        mapper: Arc<dyn DmaMapper>,
        opts: NvmeOptions,
        admin: AdminQueue,
        transport: Transport,
    ) -> Result<Init, NvmeError> {
        let mut init = Init::new(regs, mapper, opts)?;
        init.admin = Some(admin);
        init.transport = transport;
        Ok(init)
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

    /// Runs an admin command across polls: submits it on the first call, then returns the
    /// completion once it arrives (error statuses become errors).
    pub(super) fn admin_cmd(
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
            admin.check_alive(&*regs, &name, what)?;
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
    /// controller is ready. Each state's step returns the state to enter next, if any (the
    /// same state again for the next command of a series, with a new deadline).
    pub fn poll(&mut self, now: Instant) -> Result<bool, NvmeError> {
        if self.state != InitState::ReadCap && self.state != InitState::Ready && now > self.deadline
        {
            return Err(self.timeout());
        }
        let next = match self.state {
            // The CC / CSTS handshake (`enable.rs`).
            InitState::ReadCap => self.read_cap()?,
            InitState::CheckEnabled => self.check_enabled()?,
            InitState::DisableWaitForReady1 => self.disable_wait_for_ready1()?,
            InitState::Disable => self.disable()?,
            InitState::DisableWaitForReady0 => self.wait_ready(false, InitState::ConfigureAdmin)?,
            InitState::ConfigureAdmin => self.configure_admin()?,
            InitState::Enable => self.enable()?,
            InitState::EnableWaitForReady1 => {
                self.wait_ready(true, InitState::IdentifyController)?
            }
            // What the controller holds (`identify.rs`).
            InitState::IdentifyController => self.identify_controller()?,
            InitState::IdentifyActiveNs => self.identify_active_ns()?,
            InitState::IdentifyNamespace => self.identify_namespace()?,
            // The I/O queues it grants (`queues.rs`).
            InitState::SetNumQueues => self.set_num_queues()?,
            InitState::Ready => return Ok(true),
        };
        if let Some(next) = next {
            self.enter(next, now);
        }
        Ok(self.state == InitState::Ready)
    }

    pub(super) fn admin_ref(&self) -> &AdminQueue {
        self.admin
            .as_ref()
            .expect("admin queue exists after ConfigureAdmin")
    }

    pub(super) fn unsupported(&self, reason: String) -> NvmeError {
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
        // MDTS is in units of CAP.MPSMIN; on PCIe one PRP list page per command bounds it
        // too, on TCP the 32-bit SGL length.
        let mdts = if id.mdts == 0 || id.mdts >= 32 {
            u64::MAX
        } else {
            self.cap.mps_min_bytes() << id.mdts
        };
        let max_transfer = match self.transport {
            Transport::Pcie => mdts.min(prp::max_transfer(PAGE_SIZE, (PAGE_SIZE / 8) as usize)),
            Transport::Tcp(_) => mdts.min(u64::from(u32::MAX) & !(PAGE_SIZE - 1)),
        };
        let ctrlr = CtrlrInner {
            name: self.name,
            regs: self.regs,
            mapper: self.mapper,
            cap: self.cap,
            vs: self.vs,
            admin: Mutex::new(admin),
            qids: Mutex::new(QidMap::new(self.io_queues)),
            io_queues: self.io_queues,
            id,
            namespaces: self.namespaces,
            max_transfer,
            reset_at_attach: self.reset_at_attach,
            detached: AtomicBool::new(false),
            open_qpairs: AtomicUsize::new(0),
            reset_gen: AtomicU64::new(0),
            reset: Mutex::new(None),
            liveness: AtomicLiveness::new(CtrlrLiveness::Alive),
            epoch: Instant::now(),
            opts: self.opts,
            transport: self.transport,
        };
        Ok(Controller {
            inner: Arc::new(ctrlr),
        })
    }
}
