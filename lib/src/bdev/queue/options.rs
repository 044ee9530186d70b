//! How a [`BdevQueue`](super::BdevQueue) is opened: its depth and its scheduler.

use std::sync::Arc;

use crate::sched::SharedDeadline;

/// Where requests go between submit and flush.
///
/// `None` hands them straight to the driver at flush. With `MqDeadline`, requests take
/// scheduler tags, are inserted at flush and take driver tags at dispatch (see
/// `sched_path/`).
#[derive(Clone, Debug, Default)]
pub enum SchedMode {
    /// No scheduler: pending requests go to the driver at the next flush.
    #[default]
    None,
    /// The device's mq-deadline, shared by the reactors that open it; this queue is its
    /// owner `owner` (`0..owners`, one per queue: owner `o` uses scheduler ids
    /// `o × per_owner ..`, its scheduler tags).
    MqDeadline {
        /// The device's scheduler.
        dd: Arc<SharedDeadline>,
        /// This queue's owner number.
        owner: u16,
    },
}

impl PartialEq for SchedMode {
    fn eq(&self, other: &SchedMode) -> bool {
        match (self, other) {
            (SchedMode::None, SchedMode::None) => true,
            (
                SchedMode::MqDeadline { dd: a, owner: x },
                SchedMode::MqDeadline { dd: b, owner: y },
            ) => Arc::ptr_eq(a, b) && x == y,
            _ => false,
        }
    }
}

impl Eq for SchedMode {}

/// Options of [`BdevQueue::open`](super::BdevQueue::open).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BdevQueueOptions {
    /// Requests in flight per hctx (driver tags); at most the device's `max_queue_depth`.
    /// Default 128.
    pub depth: u32,
    /// Scheduler (default none).
    pub sched: SchedMode,
}

impl Default for BdevQueueOptions {
    fn default() -> Self {
        BdevQueueOptions {
            depth: 128,
            sched: SchedMode::None,
        }
    }
}
