//! The file descriptors a reactor watches while it sleeps (interrupt mode), as SPDK's fd group
//! does: a sleeping reactor wakes for a message, a stop request, its next timed poller, or a
//! watched fd becoming ready.
//!
//! The set is a `Vec<pollfd>` kept ready to hand to one `ppoll` (slot 0 is the reactor's
//! eventfd, filled in at each sleep), edited in place: watching pushes, unwatching swap-removes,
//! changing interest stores the new event mask. No system call on any change, which matters for
//! `set_fd_interest` (a connection toggles `POLLOUT` every time its output queue fills or
//! empties). A sleep costs one `ppoll` over the eventfd and every watched fd, O(n) in the kernel:
//! well under a microsecond for the tens of sockets a reactor holds, and paid only when the
//! reactor is idle. An epoll set would make sleeps O(ready) but every change an `epoll_ctl`
//! system call, and would add a descriptor per reactor; it wins only with hundreds of fds.
//!
//! Readiness is level-triggered: an fd that is ready when the reactor goes to sleep (data
//! arrived after its poller last read) ends the sleep at once, so no wake-up is lost — and an fd
//! left ready (unread data, a hang-up, an error) keeps waking the reactor until its poller
//! consumes it or unwatches it.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::sys;

/// Which readiness of a watched fd wakes a sleeping reactor ([`crate::ReactorCtx::watch_fd`]).
///
/// A hang-up or an error on the fd wakes it whatever the interest (as `poll(2)` reports them
/// unasked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FdInterest {
    /// Readable (`POLLIN`): data, a connection to accept, end of file.
    Read,
    /// Writable (`POLLOUT`): room in the send buffer. Watch for it only while output is queued,
    /// or the reactor never stays asleep (a socket is writable almost always).
    Write,
    /// Readable or writable.
    ReadWrite,
}

impl FdInterest {
    /// The `poll(2)` event mask.
    fn events(self) -> libc::c_short {
        match self {
            FdInterest::Read => libc::POLLIN,
            FdInterest::Write => libc::POLLOUT,
            FdInterest::ReadWrite => libc::POLLIN | libc::POLLOUT,
        }
    }
}

/// Identifies a watched fd on its reactor (unique per reactor for the reactor's lifetime),
/// returned by [`crate::ReactorCtx::watch_fd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FdWatch(u64);

impl FdWatch {
    /// The raw number.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// What ended a sleep, as far as the poll can tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Woken {
    /// The eventfd was signalled (a message, a stop request, a mode switch).
    pub event: bool,
    /// Watched fds that were ready.
    pub fds: u32,
}

/// A reactor's watched fds. Lives on the reactor thread (in [`crate::ReactorCtx`]): no lock.
pub(crate) struct FdWatches {
    /// `pollfds[0]` is the reactor's eventfd; `pollfds[i + 1]` belongs to `ids[i]`.
    pollfds: Vec<libc::pollfd>,
    ids: Vec<FdWatch>,
    next_id: u64,
}

impl FdWatches {
    pub(crate) fn new() -> FdWatches {
        FdWatches {
            pollfds: vec![libc::pollfd {
                fd: -1,
                events: libc::POLLIN,
                revents: 0,
            }],
            ids: Vec::new(),
            next_id: 1,
        }
    }

    /// Watches `fd` for `interest` from the next sleep on.
    pub(crate) fn watch(&mut self, fd: RawFd, interest: FdInterest) -> FdWatch {
        assert!(fd >= 0, "watch_fd: invalid fd {fd}");
        let id = FdWatch(self.next_id);
        self.next_id += 1;
        self.pollfds.push(libc::pollfd {
            fd,
            events: interest.events(),
            revents: 0,
        });
        self.ids.push(id);
        id
    }

    /// Changes what wakes the reactor for `id`; false if `id` is not watched.
    pub(crate) fn set_interest(&mut self, id: FdWatch, interest: FdInterest) -> bool {
        match self.slot(id) {
            Some(i) => {
                self.pollfds[i].events = interest.events();
                true
            }
            None => false,
        }
    }

    /// Stops watching `id`; false if it is not watched.
    pub(crate) fn unwatch(&mut self, id: FdWatch) -> bool {
        match self.slot(id) {
            Some(i) => {
                self.pollfds.swap_remove(i);
                self.ids.swap_remove(i - 1);
                true
            }
            None => false,
        }
    }

    /// Number of watched fds.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    pub(crate) fn clear(&mut self) {
        self.pollfds.truncate(1);
        self.ids.clear();
    }

    /// Index into `pollfds` of `id` (a linear scan: tens of fds, control path).
    fn slot(&self, id: FdWatch) -> Option<usize> {
        self.ids.iter().position(|&w| w == id).map(|i| i + 1)
    }

    /// Blocks until `wake_fd` (the reactor's eventfd) is readable, a watched fd is ready, or
    /// `timeout` passes (`None` = no timeout), in one `ppoll`. EINTR is a spurious wake-up.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn wait(&mut self, wake_fd: RawFd, timeout: Option<Duration>) -> Woken {
        self.pollfds[0].fd = wake_fd;
        let ready = sys::ppoll(&mut self.pollfds, timeout);
        if ready == 0 {
            return Woken::default();
        }
        let event = self.pollfds[0].revents & libc::POLLIN != 0;
        let mut fds = ready as u32 - u32::from(self.pollfds[0].revents != 0);
        if self.pollfds[1..]
            .iter()
            .any(|p| p.revents & libc::POLLNVAL != 0)
        {
            fds -= self.disable_closed();
        }
        Woken { event, fds }
    }

    /// A watched fd that was closed without being unwatched (`POLLNVAL`) would end every sleep
    /// at once: stop polling it (its watch stays, so `unwatch_fd` still works) and say so.
    /// Returns how many were disabled.
    #[cold]
    fn disable_closed(&mut self) -> u32 {
        let mut n = 0;
        for (p, id) in self.pollfds[1..].iter_mut().zip(&self.ids) {
            if p.revents & libc::POLLNVAL != 0 {
                log::warn!(
                    "watched fd {} ({id:?}) was closed before unwatch_fd; no longer polled",
                    p.fd
                );
                // poll(2) ignores negative fds.
                p.fd = -1;
                n += 1;
            }
        }
        n
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn watch_unwatch_and_interest_keep_ids_and_slots_together() {
        let mut w = FdWatches::new();
        let a = w.watch(10, FdInterest::Read);
        let b = w.watch(11, FdInterest::Write);
        let c = w.watch(12, FdInterest::ReadWrite);
        assert_eq!(w.len(), 3);
        assert!(w.unwatch(a));
        assert!(!w.unwatch(a));
        // c moved into a's slot; its entry still is fd 12.
        assert!(w.set_interest(c, FdInterest::Read));
        assert_eq!(w.pollfds[w.slot(c).unwrap()].fd, 12);
        assert_eq!(w.pollfds[w.slot(c).unwrap()].events, libc::POLLIN);
        assert_eq!(w.pollfds[w.slot(b).unwrap()].events, libc::POLLOUT);
        assert!(!w.set_interest(a, FdInterest::Write));
        w.clear();
        assert_eq!((w.len(), w.pollfds.len()), (0, 1));
        assert_ne!(w.watch(13, FdInterest::Read), c);
    }

    #[test]
    fn wait_reports_ready_fds_and_the_event() {
        let efd = sys::EventFd::new().unwrap();
        let (mut tx, rx) = UnixStream::pair().unwrap();
        let mut w = FdWatches::new();
        let r = w.watch(rx.as_raw_fd(), FdInterest::Read);
        let wake = efd.as_raw_fd();
        assert_eq!(w.wait(wake, Some(Duration::ZERO)), Woken::default());
        tx.write_all(b"x").unwrap();
        let got = w.wait(wake, Some(Duration::from_secs(5)));
        assert_eq!(
            got,
            Woken {
                event: false,
                fds: 1
            }
        );
        efd.notify();
        let got = w.wait(wake, Some(Duration::from_secs(5)));
        assert_eq!(
            got,
            Woken {
                event: true,
                fds: 1
            }
        );
        efd.drain();
        // Write interest: an empty socket buffer is writable at once.
        assert!(w.set_interest(r, FdInterest::Write));
        assert_eq!(w.wait(wake, Some(Duration::ZERO)).fds, 1);
        assert!(w.unwatch(r));
        assert_eq!(w.wait(wake, Some(Duration::ZERO)), Woken::default());
    }

    #[test]
    fn a_closed_watched_fd_is_disabled_not_spun_on() {
        let efd = sys::EventFd::new().unwrap();
        let mut w = FdWatches::new();
        // A number no test opens (closing a real fd here could race with another test
        // reusing its number).
        let id = w.watch(1 << 30, FdInterest::Read);
        let wake = efd.as_raw_fd();
        assert_eq!(w.wait(wake, Some(Duration::ZERO)), Woken::default());
        assert_eq!(w.pollfds[1].fd, -1);
        assert!(w.unwatch(id));
    }
}
