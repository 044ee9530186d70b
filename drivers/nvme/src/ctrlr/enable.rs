//! The CC / CSTS handshake (NVMe base spec §3.5.1): bring-up's register states (read CAP,
//! disable a controller left enabled, program the admin queue, enable), the register steps
//! the controller reset repeats (`recovery.rs`), and the normal shutdown (CC.SHN, then
//! CSTS.SHST). A fabrics controller has the same registers, reached by Property Get/Set.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{CtrlrInner, Init, InitState, PAGE_SIZE};
use crate::admin::{AdminQueue, PcieAdmin, check_alive};
use crate::error::NvmeError;
use crate::regs::{Cap, Cc, Csts, RegisterIo, off};

impl Init {
    /// Reads CAP and VS; checks the controller can run the NVM command set with 4 KiB pages.
    pub(super) fn read_cap(&mut self) -> Result<Option<InitState>, NvmeError> {
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
        Ok(Some(InitState::CheckEnabled))
    }

    /// A controller left enabled by a previous user is disabled first (after RDY=1 if it is
    /// still enabling).
    pub(super) fn check_enabled(&mut self) -> Result<Option<InitState>, NvmeError> {
        let cc = Cc(self.regs.read32(off::CC));
        let csts = self.csts()?;
        if !cc.enabled() {
            return Ok(Some(InitState::DisableWaitForReady0));
        }
        self.reset_at_attach = true;
        log::info!(
            "{}: controller left enabled by a previous user; resetting it",
            self.name
        );
        Ok(Some(if csts.rdy() {
            InitState::Disable
        } else {
            InitState::DisableWaitForReady1
        }))
    }

    /// EN=1 but RDY=0: waits for RDY=1 before clearing EN.
    pub(super) fn disable_wait_for_ready1(&mut self) -> Result<Option<InitState>, NvmeError> {
        let csts = self.csts()?;
        // A controller in fatal status may never become ready: disable it anyway.
        Ok((csts.rdy() || csts.cfs()).then_some(InitState::Disable))
    }

    /// Clears CC.EN.
    pub(super) fn disable(&mut self) -> Result<Option<InitState>, NvmeError> {
        nvme_disable(&*self.regs);
        Ok(Some(InitState::DisableWaitForReady0))
    }

    /// Waits for CSTS.RDY to equal `ready` (`DisableWaitForReady0`, `EnableWaitForReady1`),
    /// then moves on to `next`.
    pub(super) fn wait_ready(
        &self,
        ready: bool,
        next: InitState,
    ) -> Result<Option<InitState>, NvmeError> {
        let done = nvme_ready(&*self.regs, &self.name, ready, self.state.describe())?;
        Ok(done.then_some(next))
    }

    /// Creates the admin queue (once; a fabrics controller's exists by Connect) and programs
    /// AQA / ASQ / ACQ (PCIe) and CC, EN still 0.
    pub(super) fn configure_admin(&mut self) -> Result<Option<InitState>, NvmeError> {
        if self.admin.is_none() {
            self.admin = Some(AdminQueue::Pcie(PcieAdmin::new(
                self.mapper.clone(),
                self.opts.admin_queue_entries,
                self.cap.dstrd(),
                PAGE_SIZE as usize,
            )?));
        }
        let admin = self.admin.as_mut().expect("just created");
        nvme_configure_admin(&*self.regs, admin, self.cap);
        Ok(Some(InitState::Enable))
    }

    /// Sets CC.EN.
    pub(super) fn enable(&mut self) -> Result<Option<InitState>, NvmeError> {
        nvme_enable(&*self.regs);
        Ok(Some(InitState::EnableWaitForReady1))
    }

    /// CSTS, unless the registers read all ones (the device is gone).
    fn csts(&self) -> Result<Csts, NvmeError> {
        let csts = Csts(self.regs.read32(off::CSTS));
        if csts.is_all_ones() {
            return Err(NvmeError::DeviceRemoved {
                ctrlr: self.name.clone(),
            });
        }
        Ok(csts)
    }
}

// Register steps shared by bring-up (`Init`) and the controller reset (`recovery.rs`), so the
// CC / CSTS sequence exists once. Each is one non-blocking step; the callers wait between them.

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

impl CtrlrInner {
    /// Normal shutdown: CC.SHN = 01b, then wait for CSTS.SHST = complete (bounded by
    /// max(RTD3E, the shutdown timeout)). Idempotent.
    pub fn shutdown(&self) -> Result<(), NvmeError> {
        if let Some(t) = self.tcp() {
            return crate::tcp::shutdown(self, t);
        }
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
        self.normal_shutdown()
    }

    /// CC.SHN = 01b, then waits for CSTS.SHST = complete, bounded by max(RTD3E, the
    /// shutdown timeout). Fails when the registers read all ones meanwhile.
    pub(crate) fn normal_shutdown(&self) -> Result<(), NvmeError> {
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
