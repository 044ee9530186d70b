//! `io_uring_enter` through the ring's registered index.
//!
//! A ring registered with its thread (`IORING_REGISTER_RING_FDS`, Linux 5.18) is entered by
//! index with `IORING_ENTER_REGISTERED_RING`: the kernel then skips the file-table lookup and
//! the file reference it takes and drops on every call, which in a threaded process (a
//! reactor's) are two atomics on a shared file. t/io_uring registers its ring the same way.
//! The io-uring crate keeps a registration only in one short-lived `Submitter`, so the queue
//! makes its own calls here. Registration is per thread, like the ring (SINGLE_ISSUER): the
//! queue that owns a `RingFd` never leaves the thread that opened it.

use std::io;
use std::os::fd::RawFd;

/// `IORING_ENTER_GETEVENTS`.
pub(crate) const ENTER_GETEVENTS: u32 = 1 << 0;
/// `IORING_ENTER_EXT_ARG`: the argument is a `struct io_uring_getevents_arg`.
const ENTER_EXT_ARG: u32 = 1 << 3;
/// `IORING_ENTER_REGISTERED_RING`: the fd argument is a registered index.
const ENTER_REGISTERED_RING: u32 = 1 << 4;
/// `IORING_REGISTER_RING_FDS` / `IORING_UNREGISTER_RING_FDS`.
const REGISTER_RING_FDS: u32 = 20;
const UNREGISTER_RING_FDS: u32 = 21;

/// The kernel's `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// The kernel's `struct __kernel_timespec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

impl KernelTimespec {
    pub(crate) fn from_micros(us: u32) -> KernelTimespec {
        KernelTimespec {
            tv_sec: i64::from(us / 1_000_000),
            tv_nsec: i64::from(us % 1_000_000) * 1000,
        }
    }
}

/// The kernel's `struct io_uring_getevents_arg` (no signal mask, no minimum wait).
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// How a queue names its ring to `io_uring_enter`. Must be dropped before the ring's
/// descriptor is closed (declared before the ring in its owner): unregistering names the ring
/// by that descriptor.
#[derive(Debug)]
pub(crate) struct RingFd {
    /// The ring's descriptor.
    ring_fd: RawFd,
    /// What `io_uring_enter` is given: the registered index, or `ring_fd` when registration
    /// was refused.
    fd: RawFd,
    registered: bool,
}

impl RingFd {
    /// Registers the ring `ring_fd` with the calling thread. When the kernel refuses (before
    /// 5.18, or the thread's 16 slots are taken) the queue enters through the plain descriptor,
    /// which works the same at the cost of the lookup.
    pub(crate) fn register(ring_fd: RawFd, name: &str) -> RingFd {
        let mut up = RsrcUpdate {
            offset: u32::MAX, // any free slot; the kernel writes back which
            resv: 0,
            data: ring_fd as u64,
        };
        // SAFETY: IORING_REGISTER_RING_FDS reads and writes back `nr_args` (1) updates at the
        // pointer, which points at `up`, alive for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                ring_fd,
                REGISTER_RING_FDS,
                &mut up as *mut RsrcUpdate,
                1u32,
            )
        };
        if rc == 1 {
            log::debug!(
                "uring bdev {name}: ring registered with its thread (index {})",
                up.offset
            );
            RingFd {
                ring_fd,
                fd: up.offset as RawFd,
                registered: true,
            }
        } else {
            log::debug!(
                "uring bdev {name}: ring not registered with its thread ({}); entering by fd",
                io::Error::last_os_error()
            );
            RingFd {
                ring_fd,
                fd: ring_fd,
                registered: false,
            }
        }
    }

    /// Whether enters go through the registered index.
    #[cfg(test)]
    pub(crate) fn is_registered(&self) -> bool {
        self.registered
    }

    /// One `io_uring_enter(to_submit, min_complete, flags)`, waiting at most `timeout` when
    /// given. Returns how many SQEs the kernel consumed.
    ///
    /// # Safety
    /// Every SQE queued must point at memory that stays valid until its completion is reaped.
    #[inline]
    pub(crate) unsafe fn enter(
        &self,
        to_submit: u32,
        min_complete: u32,
        mut flags: u32,
        timeout: Option<&KernelTimespec>,
    ) -> io::Result<u32> {
        if self.registered {
            flags |= ENTER_REGISTERED_RING;
        }
        let arg = timeout.map(|ts| GeteventsArg {
            sigmask: 0,
            sigmask_sz: 0,
            min_wait_usec: 0,
            ts: ts as *const KernelTimespec as u64,
        });
        let (argp, argsz) = match &arg {
            Some(a) => {
                flags |= ENTER_EXT_ARG;
                (a as *const GeteventsArg, size_of::<GeteventsArg>())
            }
            None => (std::ptr::null(), 0),
        };
        // SAFETY: `argp` is null (size 0) or points at `arg`, whose `ts` points at `timeout`;
        // both outlive the call. The SQEs' memory is the caller's contract.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd,
                to_submit,
                min_complete,
                flags,
                argp,
                argsz,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as u32)
        }
    }
}

impl Drop for RingFd {
    /// Releases the thread's slot (it holds a reference to the ring, which would otherwise
    /// stay open until the thread exits). Runs on the registering thread (the owning queue is
    /// not `Send`), while the ring's descriptor is still open.
    fn drop(&mut self) {
        if !self.registered {
            return;
        }
        let up = RsrcUpdate {
            offset: self.fd as u32,
            resv: 0,
            data: 0,
        };
        // SAFETY: IORING_UNREGISTER_RING_FDS reads `nr_args` (1) updates at the pointer, which
        // points at `up`, alive for the call; `ring_fd` is still open (see the type's doc).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                self.ring_fd,
                UNREGISTER_RING_FDS,
                &up as *const RsrcUpdate,
                1u32,
            )
        };
        if rc < 0 {
            log::debug!(
                "uring: unregistering ring slot {} failed ({})",
                self.fd,
                io::Error::last_os_error()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use io_uring::{IoUring, opcode};
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// More rings than a thread has registration slots (16), one after another: each is
    /// registered, so dropping one gives its slot back; and each enters by its index.
    #[test]
    fn registered_rings_enter_and_give_their_slot_back() {
        for i in 0..40u64 {
            let mut ring: IoUring = IoUring::new(8).unwrap();
            let fd = RingFd::register(ring.as_raw_fd(), "test");
            assert!(fd.is_registered(), "ring {i} was not registered");
            let nop = opcode::Nop::new().build().user_data(i);
            // SAFETY: a NOP points at no memory.
            unsafe { ring.submission().push(&nop) }.unwrap();
            // SAFETY: as above.
            let consumed = unsafe { fd.enter(1, 1, ENTER_GETEVENTS, None) }.unwrap();
            assert_eq!(consumed, 1);
            let cqe = ring.completion().next().expect("the NOP completed");
            assert_eq!((cqe.user_data(), cqe.result()), (i, 0));
        }
    }

    /// With every slot of the thread taken (the kernel has 16), a ring is not registered and
    /// enters through its descriptor instead, with the same result.
    #[test]
    fn a_ring_without_a_slot_enters_by_fd() {
        let mut held = Vec::new();
        let mut ring: IoUring = IoUring::new(8).unwrap();
        let fd = loop {
            let fd = RingFd::register(ring.as_raw_fd(), "test");
            if !fd.is_registered() {
                break fd;
            }
            held.push(fd);
            assert!(held.len() <= 64, "the kernel never ran out of slots");
        };
        assert!(!held.is_empty());
        let nop = opcode::Nop::new().build().user_data(9);
        // SAFETY: a NOP points at no memory.
        unsafe { ring.submission().push(&nop) }.unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { fd.enter(1, 1, ENTER_GETEVENTS, None) }.unwrap(), 1);
        assert_eq!(ring.completion().next().map(|c| c.user_data()), Some(9));
        // The held registrations name the same ring; release them before it closes.
        drop(held);
    }

    /// A wait with nothing in flight ends at its timeout with ETIME.
    #[test]
    fn wait_ends_at_its_timeout() {
        let ring: IoUring = IoUring::new(8).unwrap();
        let fd = RingFd::register(ring.as_raw_fd(), "test");
        let start = Instant::now();
        let ts = KernelTimespec::from_micros(20_000);
        // SAFETY: nothing is queued.
        let err = unsafe { fd.enter(0, 1, ENTER_GETEVENTS, Some(&ts)) }.unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ETIME));
        assert!(start.elapsed() >= Duration::from_millis(15));
    }

    #[test]
    fn timespec_from_micros() {
        assert_eq!(
            KernelTimespec::from_micros(2_500_001),
            KernelTimespec {
                tv_sec: 2,
                tv_nsec: 500_001_000
            }
        );
    }
}
