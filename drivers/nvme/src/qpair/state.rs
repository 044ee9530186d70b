//! What a queue pair knows of itself: its [`QpairState`] (may it touch its hardware queues?),
//! changed by one setter that logs each change.

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
