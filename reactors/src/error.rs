//! The crate's error type for starting, messaging and stopping reactors.

use std::io;

use crate::coremask::CoreMaskError;

/// Errors from [`crate::Reactors`] and [`crate::ReactorsHandle`].
#[derive(Debug, thiserror::Error)]
pub enum ReactorError {
    /// The core mask was refused (syntax or a core this process may not use).
    #[error(transparent)]
    CoreMask(#[from] CoreMaskError),
    /// A [`crate::ReactorsOptions`] field is out of range.
    #[error("invalid reactor option {name}: {reason}")]
    InvalidOption {
        /// The option's field name.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// No reactor of this group runs on that core.
    #[error("core {core} has no reactor in this group (reactor cores: {mask})")]
    UnknownCore {
        /// The core asked for.
        core: u32,
        /// The group's core mask, as a list.
        mask: String,
    },
    /// The reactor is stopping or stopped: the message was not accepted (and will not run).
    #[error("the reactor on core {core} is stopping or stopped; message not accepted")]
    Stopped {
        /// The reactor's core.
        core: u32,
    },
    /// A blocking call (`run_on`, `run_on_all`) made on a reactor of the same group, which
    /// would wait for itself forever.
    #[error(
        "blocking call on the reactor thread of core {core} would deadlock; send a message instead"
    )]
    WouldDeadlock {
        /// The calling reactor's core.
        core: u32,
    },
    /// A task was cancelled with [`crate::JoinHandle::abort`] before it finished.
    #[error("the task on core {core} was aborted")]
    TaskAborted {
        /// The task's core.
        core: u32,
    },
    /// The reactor stopped before the task finished; the task was dropped on its core.
    #[error("the reactor on core {core} stopped before the task finished; the task was dropped")]
    TaskStopped {
        /// The task's core.
        core: u32,
    },
    /// A message, poller or task panicked on that reactor; its thread has exited.
    #[error("the reactor on core {core} panicked")]
    Panicked {
        /// The reactor's core.
        core: u32,
    },
    /// `sched_setaffinity` refused to pin the reactor thread.
    #[error("cannot pin the reactor thread to core {core}: {source}")]
    Pin {
        /// The core.
        core: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `eventfd` failed while creating a reactor.
    #[error("cannot create the eventfd for the reactor on core {core}: {source}")]
    EventFd {
        /// The core.
        core: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The OS refused to create the reactor thread.
    #[error("cannot spawn the reactor thread for core {core}: {source}")]
    Spawn {
        /// The core.
        core: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
