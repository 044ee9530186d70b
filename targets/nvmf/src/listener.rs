//! The acceptor: a timed poller on the first reactor takes new connections from every
//! listening socket and hands each to a reactor, round robin (SPDK's poll-group choice), where
//! it stays for its life.

use std::sync::{Arc, Weak};
use std::time::Duration;

use pmio_reactors::{FdInterest, FdWatch, PollerResult, ReactorCtx};

use crate::tgt::NvmfTarget;

/// How often a busy-polling reactor looks at the listening sockets (SPDK's acceptor polls
/// every millisecond too); a sleeping one is woken by them (watched fds).
const ACCEPT_PERIOD: Duration = Duration::from_millis(1);
/// Most connections taken per socket per run.
const ACCEPT_BURST: usize = 16;

/// Starts the acceptor on the first reactor.
pub(crate) fn start(tgt: &Arc<NvmfTarget>) {
    let weak = Arc::downgrade(tgt);
    let first = tgt.cores()[0];
    let sent = tgt.reactors.send(first, move |ctx| {
        let mut acceptor = Acceptor {
            tgt: weak,
            generation: 0,
            socks: Vec::new(),
            watches: Vec::new(),
        };
        ctx.register_timed_poller("nvmf_tcp_accept", ACCEPT_PERIOD, move |ctx| {
            acceptor.poll(ctx)
        });
    });
    if let Err(e) = sent {
        log::error!("nvmf: cannot start the acceptor: {e}");
    }
}

struct Acceptor {
    tgt: Weak<NvmfTarget>,
    /// Configuration generation of `socks`.
    generation: u64,
    /// Each with whether it is a secure channel.
    socks: Vec<(Arc<std::net::TcpListener>, bool)>,
    /// The reactor's watches of `socks`.
    watches: Vec<FdWatch>,
}

impl Acceptor {
    fn poll(&mut self, ctx: &mut ReactorCtx) -> PollerResult {
        let Some(tgt) = self.tgt.upgrade() else {
            return PollerResult::Idle;
        };
        let generation = tgt.generation();
        if generation != self.generation {
            self.generation = generation;
            self.socks = tgt.listening();
            for w in self.watches.drain(..) {
                ctx.unwatch_fd(w);
            }
            for (s, _) in &self.socks {
                use std::os::fd::AsRawFd;
                self.watches
                    .push(ctx.watch_fd(s.as_raw_fd(), FdInterest::Read));
            }
        }
        let mut busy = false;
        for (sock, secure) in &self.socks {
            let secure = *secure;
            for _ in 0..ACCEPT_BURST {
                match sock.accept() {
                    Ok((stream, peer)) => {
                        busy = true;
                        let core = tgt.next_core();
                        let t = Arc::clone(&tgt);
                        let sent = ctx.send(core, move |ctx| {
                            crate::group::add_connection(ctx, t, stream, secure);
                        });
                        if sent.is_err() {
                            log::warn!("nvmf: connection from {peer} dropped: stopping");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        log::warn!("nvmf: accept: {e}");
                        break;
                    }
                }
            }
        }
        if busy {
            PollerResult::Busy
        } else {
            PollerResult::Idle
        }
    }
}
