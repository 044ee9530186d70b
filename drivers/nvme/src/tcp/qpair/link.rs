//! The queue pair's connection, off the hot path: following the controller's generation
//! (down while it reconnects, a new connection once it did, everything failed once it is
//! lost or detached), setting a connection up one non-blocking step per call, losing one
//! (what was in flight waits for the next, within the recovery budget) and resubmitting
//! what waited.

use std::sync::atomic::Ordering;
use std::time::Instant;

use pmio::request::Request;

use super::TcpQpair;
use crate::error::IoError;
use crate::qpair::tracker::CmdSlot;
use crate::recovery::CtrlrLiveness;
use crate::spec::{Answering, ConnectCmd};
use crate::tcp::auth::AuthFlow;
use crate::tcp::conn::{Conn, ConnError};
use crate::tcp::ctrlr::CONNECT_TIMEOUT;
use crate::tcp::sock::Connecting;

/// A connection being set up, one step looked at per call.
pub(super) enum Setup {
    /// TCP connect in progress.
    Tcp(Connecting),
    /// ICReq sent, waiting for the ICResp.
    Ic(Conn),
    /// Fabrics Connect sent (CID = depth), waiting for its response.
    Connect(Conn),
    /// The subsystem asked for in-band authentication: its commands (CID = depth) one after
    /// the other.
    Auth(Conn, Box<AuthFlow>),
}

/// The queue pair's connection.
pub(super) enum Link {
    Up(Conn),
    Setup {
        step: Setup,
        deadline: Instant,
    },
    /// No connection: waiting for the controller to reconnect.
    Down,
    /// Every request fails with this, now and later.
    Dead(IoError),
}

impl TcpQpair {
    /// Follows the controller: one atomic load when nothing changed.
    #[inline]
    pub(super) fn sync(&mut self, rqs: &mut [Request]) {
        let cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen != self.reset_gen || !matches!(self.link, Link::Up(_)) {
            self.sync_slow(rqs, true);
        }
    }

    /// The controller's generation moved, or there is no connection: goes down, connects
    /// anew, or fails everything, as the controller's state says; advances a connection set
    /// up one step. `reconnect`: a failed set-up asks the controller to reconnect (not while
    /// opening).
    #[cold]
    pub(super) fn sync_slow(&mut self, rqs: &mut [Request], reconnect: bool) {
        if matches!(self.link, Link::Dead(_)) {
            return;
        }
        if self.ctrlr.detached.load(Ordering::Acquire) {
            return self.go_dead(rqs, IoError::Removed);
        }
        if self.ctrlr.liveness() != CtrlrLiveness::Alive {
            return self.go_dead(rqs, IoError::Disconnected);
        }
        let cur_gen = self.ctrlr.reset_gen.load(Ordering::Acquire);
        if cur_gen != self.reset_gen {
            self.take_down(rqs);
            if cur_gen & 1 == 0 {
                self.reset_gen = cur_gen;
                self.start_setup(rqs, reconnect);
            }
        }
        if matches!(self.link, Link::Setup { .. }) {
            self.drive_setup(rqs, reconnect);
        }
        if !matches!(self.link, Link::Up(_))
            && !self.trk.held.is_empty()
            && self.tcp().fast_io_fail.load(Ordering::Acquire)
        {
            self.trk.fail_held(rqs, IoError::Disconnected);
        }
    }

    /// Starts connecting to the controller's current association.
    fn start_setup(&mut self, rqs: &mut [Request], reconnect: bool) {
        match Connecting::start(self.tcp().addr) {
            Ok(c) => {
                self.link = Link::Setup {
                    step: Setup::Tcp(c),
                    deadline: Instant::now() + CONNECT_TIMEOUT,
                };
            }
            Err(e) => self.conn_lost(rqs, ConnError::Io(e), reconnect),
        }
    }

    /// Advances the connection set-up by what happened since the last call.
    fn drive_setup(&mut self, rqs: &mut [Request], reconnect: bool) {
        let Link::Setup { step, deadline } = std::mem::replace(&mut self.link, Link::Down) else {
            return;
        };
        match self.setup_step(step) {
            Ok(Ok(conn)) => {
                log::debug!(
                    "{}: I/O queue {} connected (controller {})",
                    self.ctrlr.name,
                    self.qid,
                    self.tcp().cntlid.load(Ordering::Acquire)
                );
                self.link = Link::Up(conn);
                self.resubmit_held(rqs);
            }
            Ok(Err(_)) if Instant::now() > deadline => {
                let e = ConnError::Io(std::io::ErrorKind::TimedOut.into());
                self.conn_lost(rqs, e, reconnect);
            }
            Ok(Err(step)) => self.link = Link::Setup { step, deadline },
            Err(e) => self.conn_lost(rqs, e, reconnect),
        }
    }

    /// One look at a set-up step: the connection once up, else the step to look at next.
    fn setup_step(&mut self, step: Setup) -> Result<Result<Conn, Setup>, ConnError> {
        Ok(Err(match step {
            Setup::Tcp(c) => match c.poll()? {
                None => Setup::Tcp(c),
                Some(()) => {
                    let max = self.max_transfer.min(u64::from(u32::MAX)) as u32;
                    let conn = Conn::new(
                        c.into_stream()?,
                        self.depth as usize + 1,
                        self.tcp().digests(),
                        max,
                        self.tcp().client_psk()?,
                    )?;
                    Setup::Ic(conn)
                }
            },
            Setup::Ic(mut conn) => {
                conn.flush()?;
                conn.poll(|_, _| {})?;
                if conn.ready() {
                    let data = self.tcp().connect_data();
                    let cmd = ConnectCmd {
                        recfmt: 0,
                        qid: self.qid,
                        sqsize: self.sqsize,
                        cattr: 0,
                        kato_ms: 0,
                    };
                    conn.submit_connect(self.depth as u16, cmd.sqe(), &data.encode());
                    conn.flush()?;
                    Setup::Connect(conn)
                } else {
                    Setup::Ic(conn)
                }
            }
            Setup::Connect(mut conn) => {
                let cid = self.depth as u16;
                let mut resp = None;
                conn.flush()?;
                conn.poll(|c, cqe| {
                    if c == cid {
                        resp = Some(cqe);
                    }
                })?;
                match resp {
                    Some(cqe)
                        if cqe.status().is_success()
                            && crate::spec::connect_requires_auth(cqe.dw0) =>
                    {
                        let cfg = self.tcp().auth_config()?;
                        let flow = AuthFlow::start(&mut conn, cid, cfg);
                        conn.flush()?;
                        Setup::Auth(conn, Box::new(flow))
                    }
                    Some(cqe) if cqe.status().is_success() => return Ok(Ok(conn)),
                    Some(cqe) => {
                        log::error!(
                            "{}: I/O queue {} Connect refused: {}",
                            self.ctrlr.name,
                            self.qid,
                            cqe.status().answering(Answering::Connect)
                        );
                        return Err(ConnError::Protocol {
                            what: "Fabrics Connect refused",
                            cid,
                        });
                    }
                    None => Setup::Connect(conn),
                }
            }
            Setup::Auth(mut conn, mut flow) => {
                let cid = flow.cid();
                let mut resp = None;
                conn.flush()?;
                conn.poll(|c, cqe| {
                    if c == cid {
                        resp = Some(cqe);
                    }
                })?;
                match resp {
                    Some(cqe) if flow.advance(&mut conn, cqe)? => {
                        log::info!(
                            "{}: I/O queue {} authenticated (DH-HMAC-CHAP)",
                            self.ctrlr.name,
                            self.qid
                        );
                        return Ok(Ok(conn));
                    }
                    _ => {
                        conn.flush()?;
                        Setup::Auth(conn, flow)
                    }
                }
            }
        }))
    }

    /// Drops the connection (if any). What was in flight on it waits for the next one, ahead
    /// of what was held already, each command within its recovery budget: one that spent it
    /// fails with `IoError::TimedOut`.
    fn take_down(&mut self, rqs: &mut [Request]) {
        if !matches!(self.link, Link::Up(_) | Link::Setup { .. }) {
            return;
        }
        self.link = Link::Down;
        self.trk.next_scan = u64::MAX;
        self.scratch.clear();
        for idx in 0..self.trk.slots.len() {
            if !self.trk.slots[idx].outstanding {
                continue;
            }
            if self.trk.may_recover(idx) {
                let slot = &mut self.trk.slots[idx];
                *slot = CmdSlot {
                    held: true,
                    retries: slot.retries,
                    recoveries: slot.recoveries + 1,
                    ..CmdSlot::default()
                };
                self.scratch.push(idx as u16);
            } else {
                self.trk.give_up(rqs, idx);
                self.trk.slots[idx] = CmdSlot {
                    done_once: true,
                    ..CmdSlot::default()
                };
                self.reap.push_back(idx as u16);
            }
        }
        self.scratch.extend_from_slice(&self.trk.held);
        std::mem::swap(&mut self.trk.held, &mut self.scratch);
    }

    /// This connection failed: drop it and (unless opening) ask the controller to reconnect,
    /// when it is still the controller's current association.
    #[cold]
    pub(super) fn conn_lost(&mut self, rqs: &mut [Request], e: ConnError, reconnect: bool) {
        log::warn!(
            "{}: I/O queue {} connection failed: {e}",
            self.ctrlr.name,
            self.qid
        );
        self.take_down(rqs);
        self.link = Link::Down;
        if reconnect && self.ctrlr.reset_gen.load(Ordering::Acquire) == self.reset_gen {
            self.tcp().request_reset();
        }
    }

    /// Fails everything, now and later, with `err`.
    #[cold]
    fn go_dead(&mut self, rqs: &mut [Request], err: IoError) {
        log::debug!(
            "{}: I/O queue {}: failing every request ({err})",
            self.ctrlr.name,
            self.qid
        );
        self.take_down(rqs);
        self.link = Link::Dead(err);
        self.trk.fail_held(rqs, err);
    }

    /// Sends what was held, in order, on the new connection.
    #[cold]
    fn resubmit_held(&mut self, rqs: &mut [Request]) {
        let held = self.trk.take_held();
        self.trk.batch_clock();
        for &tag in &held {
            self.trk.stats.recovered += 1;
            self.start(rqs, tag);
        }
        self.trk.restore_held(held);
        self.flush(rqs);
    }

    /// Sends what is queued; a failure drops the connection.
    pub(super) fn flush(&mut self, rqs: &mut [Request]) {
        if let Link::Up(conn) = &mut self.link
            && let Err(e) = conn.flush()
        {
            self.conn_lost(rqs, e, true);
        }
    }
}
