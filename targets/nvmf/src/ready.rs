//! Which of a poll group's connections have bytes to read: one epoll set per group, every
//! socket in it level-triggered for EPOLLIN with its connection's id as the event's data,
//! asked once per poll with a zero timeout. A poll then reads only the sockets that have
//! something, as SPDK's posix sock group does (`posix_sock_group_impl_poll`), instead of one
//! `recv` per connection per poll that mostly answers EAGAIN: the admin queue's socket and
//! idle queues on every poll, 64 system calls a poll with 64 connections.
//!
//! Level-triggered, so a connection that stopped reading with data left (its two reads a poll
//! used up) is reported again on the next poll; the kernel moves a reported socket to the end
//! of its ready list, so with more ready sockets than one call returns, each gets its turn.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Events one poll takes at most (the rest are reported on the next).
const MAX_EVENTS: usize = 256;

pub(crate) struct ReadySet {
    epfd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl ReadySet {
    pub fn new() -> io::Result<ReadySet> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new fd that only
        // this OwnedFd closes.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is open and owned by nothing else (see above).
        let epfd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(ReadySet {
            epfd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS],
        })
    }

    /// Watches `fd` for input, reported as `id`.
    pub fn add(&self, fd: RawFd, id: usize) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: id as u64,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; the kernel copies it.
        let rc =
            unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd` (before it is closed: an fd closed while watched leaves the set
    /// by itself only once no duplicate of it remains).
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: EPOLL_CTL_DEL ignores the event pointer (null is allowed since Linux 2.6.9).
        let rc = unsafe {
            libc::epoll_ctl(
                self.epfd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            log::debug!(
                "nvmf: epoll_ctl DEL fd {fd}: {}",
                io::Error::last_os_error()
            );
        }
    }

    /// The ids of the connections whose sockets have input (or a hang-up, or an error: the
    /// read then says which) now, without waiting.
    pub fn poll(&mut self) -> &[libc::epoll_event] {
        // SAFETY: `events` is a live buffer of MAX_EVENTS entries the kernel writes at most
        // that many of; timeout 0 never blocks.
        let n = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                self.events.as_mut_ptr(),
                MAX_EVENTS as libc::c_int,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                log::warn!("nvmf: epoll_wait: {e}");
            }
            return &[];
        }
        &self.events[..n as usize]
    }
}

/// The connection id an event of [`ReadySet::poll`] reports.
pub(crate) fn event_id(ev: &libc::epoll_event) -> usize {
    // Copied out: the struct is packed on x86-64, so no reference to the field.
    let data = ev.u64;
    data as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    fn ids(set: &mut ReadySet) -> Vec<usize> {
        set.poll().iter().map(event_id).collect()
    }

    /// The ids reported once something is (loopback delivery is immediate, but a loaded
    /// machine may take a moment).
    fn wait_ids(set: &mut ReadySet) -> Vec<usize> {
        for _ in 0..2000 {
            let v = ids(set);
            if !v.is_empty() {
                return v;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Vec::new()
    }

    #[test]
    fn reports_sockets_with_input_until_it_is_read() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c1 = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut s1 = l.accept().unwrap().0;
        let _c2 = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let s2 = l.accept().unwrap().0;
        let mut set = ReadySet::new().unwrap();
        set.add(s1.as_raw_fd(), 7).unwrap();
        set.add(s2.as_raw_fd(), 9).unwrap();
        assert!(ids(&mut set).is_empty(), "nothing sent yet");
        c1.write_all(b"x").unwrap();
        assert_eq!(wait_ids(&mut set), vec![7]);
        // Level-triggered: still reported while unread.
        assert_eq!(ids(&mut set), vec![7]);
        let mut b = [0u8; 1];
        s1.read_exact(&mut b).unwrap();
        assert!(ids(&mut set).is_empty(), "read: no longer reported");
        set.remove(s1.as_raw_fd());
        c1.write_all(b"y").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(ids(&mut set).is_empty(), "removed: not reported");
        // A hang-up is input too (the read then sees the end).
        drop(_c2);
        assert_eq!(wait_ids(&mut set), vec![9]);
    }
}
