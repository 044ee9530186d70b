//! The admin queue, per transport: commands submitted and polled one at a time, plus a
//! one-page data buffer for Identify. The controller model (`ctrlr/`, `recovery.rs`) sees one
//! [`AdminQueue`]; each transport keeps its own mechanism:
//! - `pcie.rs`: rings in host memory, doorbells in BAR0 (PCIe).
//! - `crate::tcp::admin`: the admin connection (NVMe/TCP), its data read from C2HData.

mod pcie;

use std::time::Duration;

use crate::error::NvmeError;
use crate::regs::{Csts, RegisterIo, off};
use crate::spec::{Cqe, Sqe};
use crate::tcp::admin::TcpAdmin;

pub(crate) use pcie::PcieAdmin;

/// Size of the admin data buffer (Identify data is 4 KiB).
pub(crate) const DATA_BYTES: usize = 4096;

/// A controller's admin queue.
pub(crate) enum AdminQueue {
    Pcie(PcieAdmin),
    Tcp(std::sync::Arc<TcpAdmin>),
}

impl AdminQueue {
    /// After a controller reset: PCIe re-zeroes the rings and the host's indices; a TCP admin
    /// queue is a new connection already.
    pub fn reset(&mut self, dstrd: u8, page: usize) {
        if let AdminQueue::Pcie(a) = self {
            a.reset(dstrd, page);
        }
    }

    /// Programs AQA/ASQ/ACQ (PCIe, controller disabled); a TCP admin queue exists by Connect.
    pub fn program(&self, regs: &dyn RegisterIo) {
        if let AdminQueue::Pcie(a) = self {
            a.program(regs);
        }
    }

    /// Fills the data buffer with `byte` (so stale data is never mistaken for a reply).
    pub fn fill_data(&self, byte: u8) {
        match self {
            AdminQueue::Pcie(a) => a.fill_data(byte),
            AdminQueue::Tcp(a) => a.fill_data(byte),
        }
    }

    /// Points `sqe`'s data at the data buffer (PCIe: PRP 1; TCP: the next command submitted
    /// reads its C2HData into it).
    pub fn point_data(&self, sqe: &mut Sqe) {
        match self {
            AdminQueue::Pcie(a) => sqe.prp1 = a.data_iova(),
            AdminQueue::Tcp(a) => a.arm_data(),
        }
    }

    /// Copies the data buffer out as a `T` (an Identify structure).
    pub fn read_data<T: Copy>(&self) -> T {
        match self {
            AdminQueue::Pcie(a) => a.read_data(),
            AdminQueue::Tcp(a) => a.read_data(),
        }
    }

    /// Submits `sqe` with a fresh command identifier; returns the identifier (`None`: no
    /// room, or no connection).
    pub fn submit(&mut self, regs: &dyn RegisterIo, sqe: Sqe) -> Option<u16> {
        match self {
            AdminQueue::Pcie(a) => a.submit(regs, sqe),
            AdminQueue::Tcp(a) => a.submit(sqe),
        }
    }

    /// The completion of `cid` if it arrived; completions of other commands are kept for
    /// whoever polls for them later.
    pub fn poll_for(&mut self, regs: &dyn RegisterIo, cid: u16) -> Option<Cqe> {
        match self {
            AdminQueue::Pcie(a) => a.poll_for(regs, cid),
            AdminQueue::Tcp(a) => a.poll_for(cid),
        }
    }

    /// Submits `sqe` and waits for its completion (at most `timeout`). Fails on a timeout, a
    /// dead controller or connection, or an error status.
    pub fn exec(
        &mut self,
        regs: &dyn RegisterIo,
        sqe: Sqe,
        timeout: Duration,
        ctrlr: &str,
        what: &'static str,
    ) -> Result<Cqe, NvmeError> {
        match self {
            AdminQueue::Pcie(a) => a.exec(regs, sqe, timeout, ctrlr, what),
            AdminQueue::Tcp(a) => a.exec(sqe, timeout, ctrlr, what),
        }
    }

    /// Fails when the controller cannot answer any more: PCIe reads CSTS (fatal status, or
    /// all ones: removed); TCP looks at its connection (no round trip).
    pub fn check_alive(
        &self,
        regs: &dyn RegisterIo,
        ctrlr: &str,
        state: &'static str,
    ) -> Result<(), NvmeError> {
        match self {
            AdminQueue::Pcie(_) => check_alive(regs, ctrlr, state).map(|_| ()),
            AdminQueue::Tcp(a) => a.check_connected(ctrlr),
        }
    }
}

/// Fails when the controller reports a fatal status or reads as all ones.
pub(crate) fn check_alive(
    regs: &dyn RegisterIo,
    ctrlr: &str,
    state: &'static str,
) -> Result<Csts, NvmeError> {
    let csts = Csts(regs.read32(off::CSTS));
    if csts.is_all_ones() {
        return Err(NvmeError::DeviceRemoved {
            ctrlr: ctrlr.to_string(),
        });
    }
    if csts.cfs() {
        return Err(NvmeError::ControllerFatal {
            ctrlr: ctrlr.to_string(),
            state,
        });
    }
    Ok(csts)
}
