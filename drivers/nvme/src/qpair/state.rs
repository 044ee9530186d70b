//! What a queue pair knows of itself and of each of its commands: its [`QpairState`] (may it
//! touch its hardware queues?) and one [`CmdSlot`] per tag. Nothing here depends on PCIe.

use super::NvmeQpair;

/// Whether a queue pair may use its hardware queues (SPDK's `nvme_qpair_state`, reduced to
/// what a polled queue pair that follows controller resets needs). It changes only through
/// [`NvmeQpair::set_state`], which logs each change.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QpairState {
    /// The queues are up: submissions go to the device.
    Alive,
    /// A controller reset is in progress (or wanted and not yet started), or the queues are
    /// being recreated after one: the hardware queues are not touched and new submissions are
    /// held.
    Resetting,
    /// The device is gone: every request fails with `IoError::Removed`, now and later.
    Removed,
    /// The controller failed, or this queue pair could not recreate its queues after a reset:
    /// every request fails with `IoError::ControllerFailed` (until a later reset succeeds).
    Failed,
}

impl QpairState {
    /// What entering the state means, for the log.
    fn describe(self) -> &'static str {
        match self {
            QpairState::Alive => "queues up",
            QpairState::Resetting => "queues down for a controller reset",
            QpairState::Removed => "device removed: every request fails",
            QpairState::Failed => "controller failed: every request fails",
        }
    }
}

impl NvmeQpair {
    /// Moves the queue pair to `new`, logging the change; the only writer of `state`.
    pub(super) fn set_state(&mut self, new: QpairState) {
        if self.state != new {
            log::debug!(
                "{}: qpair {}: {} (was {:?})",
                self.ctrlr.name,
                self.rings.qid,
                new.describe(),
                self.state
            );
            self.state = new;
        }
    }
}

/// What the queue pair knows of the command of one tag (its CID).
#[derive(Clone, Copy, Default)]
pub(super) struct CmdSlot {
    pub(super) outstanding: bool,
    pub(super) retries: u8,
    /// Resubmissions after timeouts and resets.
    pub(super) recoveries: u8,
    /// An Abort was sent for it (a second timeout resets the controller).
    pub(super) aborted: bool,
    /// Completed since its last submission (a later completion is a duplicate).
    pub(super) done_once: bool,
    /// Submitted during a controller reset and held in software (not in the device).
    pub(super) held: bool,
    /// Submission time (ns since `epoch`), one clock read per submit batch.
    pub(super) ts: u64,
}
