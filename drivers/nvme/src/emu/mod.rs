//! A software NVMe controller with fault injection, for tests and benchmarks (not shipped in
//! apps: built under `cfg(test)` or the `emulator` feature).
//!
//! [`Emu`] implements the driver's [`RegisterIo`](crate::RegisterIo) and
//! [`DmaMapper`](crate::DmaMapper) interfaces: controller registers with enable / disable
//! (controller reset) / shutdown behaviour, the admin commands the driver uses (Identify
//! controller / namespace / active namespace list, Set Features Number of Queues, Create /
//! Delete I/O SQ and CQ, Abort), NVM I/O (read, write, flush, write zeroes, dataset
//! management) against RAM with PRP lists, and SQ/CQ rings with doorbells and phase tags.
//! DMA reaches only memory the driver mapped, as through an IOMMU: at IOVA = VA, or, after
//! [`Emu::set_iova_ranges`], wherever [`crate::iova`] places it in those ranges (as VFIO
//! does on a narrow IOMMU), translated back on every access.
//!
//! CSTS.RDY follows CC.EN at once, or after a delay ([`EmuConfig::ready_delay`],
//! [`Emu::set_ready_delays`]) as a real controller's reset and initialisation take.
//!
//! Admin commands are processed when the admin SQ doorbell is written. I/O commands are
//! processed on their doorbell write ([`Emu::set_inline`], the default), or by [`Emu::step`]
//! (called by the test, or by the thread of [`Emu::spawn`]). Delayed completions are posted by
//! `step` once due.
//!
//! Faults ([`FaultRule`]) are matched per command (opcode, LBA range, n-th I/O command, admin or
//! I/O) or by rate (seeded, reproducible), and a matched command is delayed, dropped (held, never
//! completed unless aborted), completed twice, completed with a chosen status, or makes the
//! controller fatal (CSTS.CFS) or vanish (every register reads all ones, nothing completes).
//!
//! # Files
//! - `mod.rs`: [`EmuConfig`], [`EmuStats`], the emulator's state (queues, namespace, IOMMU,
//!   rules) and [`Emu`], with the accessors tests read it through.
//! - `registers.rs`: the register file (`RegisterIo`): CAP, VS, CC, CSTS, AQA/ASQ/ACQ and
//!   the doorbells; enable, disable (controller reset) and shutdown, CSTS.RDY delays.
//! - `queues.rs`: SQ processing (fetch, fault, execute, post), completion posting with
//!   backlogs and phase tags, [`Emu::step`].
//! - `admin.rs`: the admin commands (Identify, Set Features Number of Queues, Create / Delete
//!   I/O SQ and CQ, Abort).
//! - `nvm.rs`: the NVM commands against RAM, data moved through PRPs and PRP lists.
//! - `dma.rs`: the IOMMU (`DmaMapper`): mappings, translation, device reads and writes.
//! - `fault.rs`: [`Fault`], [`FaultRule`] and how a command is matched; faults injected from
//!   outside (fatal status, vanishing, bogus and scribbled completions).
//! - `thread.rs`: [`Emu::spawn`], the emulator on a thread of its own; [`pin_to_core`].

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::iova::IovaSpace;

mod admin;
mod dma;
mod fault;
mod nvm;
mod queues;
mod registers;
mod thread;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod lifecycle;
#[cfg(test)]
mod tests;

pub use fault::{Fault, FaultRule};
pub use thread::{EmuThread, pin_to_core};

use queues::{Cq, Held, Sq};

/// Emulated controller geometry.
#[derive(Clone, Debug)]
pub struct EmuConfig {
    /// Blocks of namespace 1.
    pub blocks: u64,
    /// log2 of the block size (9 = 512 bytes).
    pub block_shift: u8,
    /// MDTS (units of 4 KiB pages, power of two exponent).
    pub mdts: u8,
    /// CAP.MQES (0-based maximum queue entries).
    pub mqes: u16,
    /// I/O queue pairs granted by Set Features Number of Queues.
    pub max_io_queues: u16,
    /// CAP.TO (500 ms units).
    pub to: u8,
    /// How long CSTS.RDY takes to follow a change of CC.EN (a real controller resets and
    /// initialises meanwhile). Default zero: at once. See also [`Emu::set_ready_delays`].
    pub ready_delay: Duration,
    /// Namespace 1's NOIOB, blocks (0: no optimal I/O boundary).
    pub noiob: u16,
    /// The VS register. Below 1.1 (`0x0001_0100`) the controller behaves as NVMe 1.0: it has no
    /// active namespace list (Identify CNS 02h is an invalid field).
    pub version: u32,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            blocks: 8192,
            block_shift: 9,
            mdts: 5,
            mqes: 1023,
            max_io_queues: 8,
            to: 1,
            ready_delay: Duration::ZERO,
            noiob: 0,
            version: 0x0001_0400,
        }
    }
}

/// What the emulator saw and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// I/O commands fetched (retries included).
    pub io_commands: u64,
    /// Admin commands fetched.
    pub admin_commands: u64,
    /// Commands delayed ([`Fault::Delay`]).
    pub delayed: u64,
    /// Commands dropped ([`Fault::Drop`]).
    pub dropped: u64,
    /// Completions lost ([`Fault::Lose`]).
    pub lost: u64,
    /// Completions posted twice ([`Fault::Duplicate`]).
    pub duplicated: u64,
    /// Commands completed with an injected status ([`Fault::Status`]).
    pub status_injected: u64,
    /// Times the controller went fatal (CSTS.CFS).
    pub fatal: u64,
    /// Times the device vanished.
    pub vanished: u64,
    /// Abort commands received.
    pub aborts: u64,
    /// Abort commands that found (and aborted) their command.
    pub aborts_hit: u64,
    /// Controller resets (CC.EN 1 → 0).
    pub disables: u64,
    /// I/O submission queues deleted (Delete I/O SQ).
    pub sq_deletions: u64,
    /// Random completion entries written by [`Emu::scribble_cq`].
    pub scribbled: u64,
    /// Completions posted.
    pub posted: u64,
}

struct State {
    cfg: EmuConfig,
    cap: u64,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    sqs: Vec<Option<Sq>>,
    cqs: Vec<Option<Cq>>,
    disk: Vec<u8>,
    /// The DMA mappings and their IOVAs.
    iommu: IovaSpace,
    rules: Vec<FaultRule>,
    rng: u64,
    held: Vec<Held>,
    stats: EmuStats,
    /// Delay of CSTS.RDY after CC.EN, indexed by the new RDY value (0: disable, 1: enable).
    ready_delay: [Duration; 2],
    /// A CSTS.RDY change not yet visible: the new value and when (`None`: never).
    ready_pending: Option<(bool, Option<Instant>)>,
}

/// The emulated controller: registers and DMA mapping in one (share it as `Arc<Emu>`).
pub struct Emu {
    st: Mutex<State>,
    /// Doorbell values: index 2·qid is the SQ tail, 2·qid + 1 the CQ head.
    doorbells: Box<[AtomicU32]>,
    vanished: AtomicBool,
    inline_io: AtomicBool,
}

impl Emu {
    /// A controller with one namespace (NSID 1) of `cfg.blocks` zeroed blocks.
    pub fn new(cfg: EmuConfig) -> Arc<Emu> {
        let nq = usize::from(cfg.max_io_queues) + 1;
        let cap = u64::from(cfg.mqes) | 1 << 16 | u64::from(cfg.to) << 24 | 1 << 37 | 4 << 52;
        let disk = vec![0u8; (cfg.blocks << cfg.block_shift) as usize];
        let ready_delay = [cfg.ready_delay; 2];
        Arc::new(Emu {
            st: Mutex::new(State {
                cfg,
                cap,
                cc: 0,
                csts: 0,
                aqa: 0,
                asq: 0,
                acq: 0,
                sqs: (0..nq).map(|_| None).collect(),
                cqs: (0..nq).map(|_| None).collect(),
                disk,
                iommu: IovaSpace::new(None),
                rules: Vec::new(),
                rng: 0x9e37_79b9_7f4a_7c15,
                held: Vec::new(),
                stats: EmuStats::default(),
                ready_delay,
                ready_pending: None,
            }),
            doorbells: (0..2 * nq).map(|_| AtomicU32::new(0)).collect(),
            vanished: AtomicBool::new(false),
            inline_io: AtomicBool::new(true),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether I/O commands are processed when their doorbell is written (default true);
    /// when false they wait for [`Emu::step`].
    pub fn set_inline(&self, inline: bool) {
        self.inline_io.store(inline, Ordering::Release);
    }

    /// Counters.
    pub fn stats(&self) -> EmuStats {
        self.lock().stats.clone()
    }

    /// `len` bytes of the namespace at byte `offset`.
    pub fn disk(&self, offset: usize, len: usize) -> Vec<u8> {
        self.lock().disk[offset..offset + len].to_vec()
    }

    /// Overwrites namespace bytes at `offset`.
    pub fn set_disk(&self, offset: usize, data: &[u8]) {
        self.lock().disk[offset..offset + data.len()].copy_from_slice(data);
    }

    /// I/O SQs and CQs currently created.
    pub fn io_queues(&self) -> (usize, usize) {
        let s = self.lock();
        (
            s.sqs.iter().skip(1).filter(|q| q.is_some()).count(),
            s.cqs.iter().skip(1).filter(|q| q.is_some()).count(),
        )
    }
}
