//! Ring set-up: the setup flags a queue wants, tried best first and dropped a step at a time
//! while the kernel refuses them with EINVAL (older kernels know fewer flags).

use std::io;

use io_uring::{Builder, IoUring, cqueue, squeue};

use crate::error::UringError;

/// The setup flags a ring was created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFlags {
    pub single_issuer: bool,
    pub defer_taskrun: bool,
    pub coop_taskrun: bool,
    pub submit_all: bool,
    /// No SQ index array (SQEs are consumed in ring order; Linux 6.6+).
    pub no_sqarray: bool,
    /// The kernel sets `IORING_SQ_TASKRUN` in the SQ flags while completions wait for task
    /// work (set with COOP_TASKRUN or DEFER_TASKRUN): a poll enters the kernel for them only
    /// when the flag says so.
    pub taskrun_flag: bool,
    pub iopoll: bool,
}

impl RingFlags {
    /// One rung of `LADDER`, without IOPOLL (the queue's choice, not the kernel's).
    const fn rung(
        single_issuer: bool,
        defer_taskrun: bool,
        coop_taskrun: bool,
        submit_all: bool,
        no_sqarray: bool,
    ) -> RingFlags {
        RingFlags {
            single_issuer,
            defer_taskrun,
            coop_taskrun,
            submit_all,
            no_sqarray,
            // TASKRUN_FLAG (5.19) needs COOP_TASKRUN or DEFER_TASKRUN (6.1), and every kernel
            // with either knows it.
            taskrun_flag: coop_taskrun || defer_taskrun,
            iopoll: false,
        }
    }

    /// A builder for a ring of `entries` SQEs with these flags.
    fn builder<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
        self,
        entries: u32,
    ) -> Builder<S, C> {
        type Set<S, C> = fn(&mut Builder<S, C>) -> &mut Builder<S, C>;
        let mut b = IoUring::<S, C>::builder();
        b.setup_cqsize(entries * 2).setup_clamp();
        let flags: [(bool, Set<S, C>); 7] = [
            (self.single_issuer, Builder::setup_single_issuer),
            (self.defer_taskrun, Builder::setup_defer_taskrun),
            (self.coop_taskrun, Builder::setup_coop_taskrun),
            (self.taskrun_flag, Builder::setup_taskrun_flag),
            (self.submit_all, Builder::setup_submit_all),
            (self.no_sqarray, Builder::setup_no_sqarray),
            (self.iopoll, Builder::setup_iopoll),
        ];
        for (on, set) in flags {
            if on {
                set(&mut b);
            }
        }
        b
    }
}

/// Setup-flag sets tried in order; the first the kernel accepts wins. EINVAL moves on.
/// (single_issuer, defer_taskrun, coop_taskrun, submit_all, no_sqarray)
const LADDER: [RingFlags; 7] = [
    RingFlags::rung(true, true, true, true, true),
    RingFlags::rung(true, true, true, true, false),
    RingFlags::rung(true, true, false, true, false),
    RingFlags::rung(true, false, true, true, false),
    RingFlags::rung(false, false, true, true, false),
    RingFlags::rung(false, false, false, true, false),
    RingFlags::rung(false, false, false, false, false),
];

/// Creates a ring of `entries` SQEs with the best setup flags the kernel accepts.
pub(crate) fn build_ring<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
    name: &str,
    entries: u32,
    iopoll: bool,
) -> Result<(IoUring<S, C>, RingFlags), UringError> {
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for rung in LADDER {
        let flags = RingFlags { iopoll, ..rung };
        match flags.builder::<S, C>(entries).build(entries) {
            Ok(ring) => {
                log::debug!("uring bdev {name}: ring of {entries} entries, setup flags {flags:?}");
                return Ok((ring, flags));
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                log::debug!(
                    "uring bdev {name}: setup flags (single_issuer={}, defer_taskrun={}, \
                     coop_taskrun={}, submit_all={}, no_sqarray={}) refused with EINVAL; \
                     trying fewer",
                    flags.single_issuer,
                    flags.defer_taskrun,
                    flags.coop_taskrun,
                    flags.submit_all,
                    flags.no_sqarray
                );
                last = e;
            }
            Err(e) => {
                return Err(UringError::Ring {
                    name: name.to_string(),
                    what: "io_uring_setup",
                    source: e,
                });
            }
        }
    }
    Err(UringError::Ring {
        name: name.to_string(),
        what: "io_uring_setup (every flag set refused)",
        source: last,
    })
}
