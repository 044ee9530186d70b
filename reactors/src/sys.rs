//! The thin OS layer: CPU affinity, eventfd, ppoll, thread CPU time, signal masks. Every `unsafe` of the crate lives here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::fdwatch::{FdWatches, Woken};

/// Largest number of cores a mask can name (`CPU_SETSIZE`, as SPDK's `SPDK_CPUSET_SIZE`).
pub const MAX_CORES: u32 = libc::CPU_SETSIZE as u32;

/// The cores this process may run on, ascending: the affinity of its main thread
/// (`sched_getaffinity(getpid())`), so that a pinned calling thread (a reactor) still sees the
/// whole set. Reflects `taskset` and cgroup cpusets.
pub fn available_cores() -> io::Result<Vec<u32>> {
    // SAFETY: getpid has no preconditions.
    affinity(unsafe { libc::getpid() })
}

/// The cores the calling thread may run on (after pinning: just its core).
#[cfg(test)]
pub fn current_thread_cores() -> io::Result<Vec<u32>> {
    affinity(0)
}

fn affinity(pid: libc::pid_t) -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass a valid pointer to a cpu_set_t and its exact size.
    let rc = unsafe { libc::sched_getaffinity(pid, size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..MAX_CORES)
        // SAFETY: core < CPU_SETSIZE, so CPU_ISSET stays inside the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) })
        .collect())
}

/// Pins the calling thread to exactly `core` (`sched_setaffinity`).
pub fn pin_current_thread(core: u32) -> io::Result<()> {
    if core >= MAX_CORES {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: all-zero is a valid empty cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: core < CPU_SETSIZE (checked above), so CPU_SET writes inside the set.
    unsafe { libc::CPU_SET(core as usize, &mut set) };
    // SAFETY: valid pointer to an initialised cpu_set_t of the given size; pid 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`), in nanoseconds.
///
/// Useful to check that an idle reactor really sleeps, and to compute CPU ns per I/O.
pub fn thread_cpu_time_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The reactors' clock, shared with the block layer (turns, timed pollers and I/O stamps
/// compare): monotonic nanoseconds, read once per loop turn and handed to pollers as
/// [`crate::ReactorCtx::now_ns`].
pub use pmio_clock::{clock_source, now_ns};

/// A non-blocking eventfd used to wake a sleeping reactor (modelled by loom under `cfg(loom)`).
#[cfg_attr(loom, allow(dead_code))]
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// Creates an eventfd with counter 0 (`EFD_NONBLOCK | EFD_CLOEXEC`).
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall wrapper; flags are valid constants.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a freshly created descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds 1 to the counter, waking a `wait`er. A full counter (EAGAIN) already means "awake".
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an fd we own.
        let rc = unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&raw const one).cast::<libc::c_void>(),
                size_of::<u64>(),
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EAGAIN) {
                log::warn!("eventfd write failed: {err}");
            }
        }
    }

    /// Resets the counter to 0 (non-blocking read; EAGAIN when already 0 is fine).
    pub fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid, writable u64 from an fd we own.
        let _ = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&raw mut value).cast::<libc::c_void>(),
                size_of::<u64>(),
            )
        };
    }

    /// Blocks until the counter is non-zero, a fd of `watched` is ready, or `timeout` passes
    /// (`None` = no timeout), in one `ppoll`. EINTR counts as a spurious wake-up.
    #[cfg_attr(loom, allow(dead_code))]
    pub fn wait(&self, timeout: Option<Duration>, watched: &mut FdWatches) -> Woken {
        watched.wait(self.0.as_raw_fd(), timeout)
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// `ppoll(2)` on `fds` with the thread's signal mask; returns how many entries have events
/// (0 on timeout, EINTR or another error: the caller treats it as a spurious wake-up).
#[cfg_attr(loom, allow(dead_code))]
pub fn ppoll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> usize {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: fds is a valid, writable array of fds.len() pollfds; ts_ptr is null or points to
    // a live timespec; a null sigmask keeps the thread's mask.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    usize::try_from(rc).unwrap_or(0)
}

/// A set of signals (`sigset_t`), built once and only read after.
pub struct SigSet(libc::sigset_t);

impl SigSet {
    /// The set of `signals`.
    pub fn of(signals: &[libc::c_int]) -> io::Result<SigSet> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before any other use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t owned by this frame.
        if unsafe { libc::sigemptyset(&mut set) } != 0 {
            return Err(io::Error::last_os_error());
        }
        for &s in signals {
            // SAFETY: as above; an invalid signal number is reported by the return value.
            if unsafe { libc::sigaddset(&mut set, s) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(SigSet(set))
    }

    /// Blocks the set in the calling thread (`pthread_sigmask(SIG_BLOCK)`); threads it spawns
    /// from now on inherit the mask.
    pub fn block_in_this_thread(&self) -> io::Result<()> {
        // SAFETY: `self.0` is an initialised sigset_t; the old mask is not asked for.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &self.0, std::ptr::null_mut()) };
        match rc {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Takes one pending signal of the set, waiting for one (`sigwait`); the set must be
    /// blocked in every thread, or a signal may go to another thread's default action.
    pub fn wait(&self) -> libc::c_int {
        loop {
            let mut sig = 0;
            // SAFETY: `self.0` is an initialised sigset_t and `sig` a valid out pointer.
            if unsafe { libc::sigwait(&self.0, &mut sig) } == 0 {
                return sig;
            }
        }
    }
}

/// Sends `sig` to the calling thread alone (`pthread_kill(pthread_self())`), for tests that
/// must not signal the whole test process.
#[cfg(test)]
pub fn signal_this_thread(sig: libc::c_int) {
    // SAFETY: pthread_self is always a live thread (this one); `sig` is a valid signal number.
    let rc = unsafe { libc::pthread_kill(libc::pthread_self(), sig) };
    assert_eq!(rc, 0, "pthread_kill: {}", io::Error::from_raw_os_error(rc));
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn eventfd_wakes_and_times_out() {
        let efd = EventFd::new().unwrap();
        let mut none = FdWatches::new();
        let t = Instant::now();
        assert!(!efd.wait(Some(Duration::from_millis(20)), &mut none).event);
        assert!(t.elapsed() >= Duration::from_millis(19));
        efd.notify();
        efd.notify();
        assert!(efd.wait(Some(Duration::from_secs(5)), &mut none).event);
        efd.drain();
        assert!(!efd.wait(Some(Duration::ZERO), &mut none).event);
    }

    #[test]
    fn affinity_lists_and_pins() {
        let cores = available_cores().unwrap();
        assert!(!cores.is_empty());
        let core = *cores.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(core).unwrap();
            assert_eq!(current_thread_cores().unwrap(), vec![core]);
            // The process-wide set is unchanged by pinning one thread.
            assert!(!available_cores().unwrap().is_empty());
        })
        .join()
        .unwrap();
        assert!(pin_current_thread(MAX_CORES).is_err());
    }

    #[test]
    fn clocks_advance() {
        let a = now_ns();
        let c0 = thread_cpu_time_ns();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(now_ns() > a);
        assert!(thread_cpu_time_ns() > c0);
    }
}
