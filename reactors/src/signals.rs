//! The signals that stop a daemon, taken by its main thread: SPDK's `spdk_app_start` stops the
//! app on SIGINT and SIGTERM; pmio's daemons stop on those, SIGQUIT and SIGHUP.
//!
//! [`ShutdownSignals::block`] blocks them in the calling thread before it starts any other
//! (reactors, the RPC server's threads inherit the mask), so none of them is ever interrupted
//! by one; the main thread then waits in [`ShutdownSignals::wait`] and shuts down in order.
//!
//! ```no_run
//! use pmio_reactors::{CoreMask, Reactors, ReactorsOptions, ShutdownSignals};
//!
//! let signals = ShutdownSignals::block()?; // first: before any thread starts
//! let reactors = Reactors::start(CoreMask::parse("0x1")?, ReactorsOptions::default())?;
//! let sig = signals.wait();
//! log::info!("signal {sig}: stopping");
//! reactors.stop()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io;

use crate::sys::SigSet;

/// The signals a daemon stops on.
pub const SHUTDOWN_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGQUIT, libc::SIGHUP];

/// [`SHUTDOWN_SIGNALS`], blocked in the thread that made it and the threads it spawned after.
pub struct ShutdownSignals(SigSet);

impl ShutdownSignals {
    /// Blocks the shutdown signals in the calling thread and every thread it spawns from now
    /// on. Call it first in `main`: a thread started before keeps the signals' default action
    /// (ending the process at once).
    pub fn block() -> io::Result<ShutdownSignals> {
        let set = SigSet::of(&SHUTDOWN_SIGNALS)?;
        set.block_in_this_thread()?;
        Ok(ShutdownSignals(set))
    }

    /// Waits until one of the signals arrives and returns its number.
    pub fn wait(&self) -> libc::c_int {
        self.0.wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::signal_this_thread;

    /// A signal sent while blocked stays pending and is what `wait` returns. In a thread of its
    /// own: the mask is per thread, and the test harness's threads keep theirs.
    #[test]
    fn a_blocked_signal_is_taken_by_wait() {
        std::thread::spawn(|| {
            let signals = ShutdownSignals::block().unwrap();
            signal_this_thread(libc::SIGHUP);
            assert_eq!(signals.wait(), libc::SIGHUP);
            // A thread spawned after inherits the mask and takes its own signal the same way.
            std::thread::spawn(move || {
                signal_this_thread(libc::SIGTERM);
                assert_eq!(signals.wait(), libc::SIGTERM);
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }
}
