//! Fabrics Connect: the first command of every queue pair, which makes it an admin queue (with
//! a new controller) or an I/O queue of an existing controller.

use super::*;
use crate::ctrlr::ConnectCheck;
use crate::spec::Answering;
use crate::subsystem::Subsystem;

impl Conn {
    /// Fabrics Connect: the first command of every queue pair.
    pub(super) fn connect(
        &mut self,
        sh: &mut GroupShared,
        sqe: Sqe,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        if sqe.opcode() != spec::admin_opc::FABRICS || sqe.fctype() != spec::fctype::CONNECT {
            // One slot-less answer, then the connection goes: nothing else is allowed first.
            self.send_cqe(sqe.cid(), 0, Status::COMMAND_SEQUENCE_ERROR, 0, 0);
            return Err(Fatal("a command before Fabrics Connect".into()));
        }
        let cmd = ConnectCmd::parse(&sqe);
        let answer = ConnectData::parse(&self.rx[data])
            .map_err(ConnectReject::from)
            .and_then(|d| self.admit(sh, &cmd, &d));
        match answer {
            Ok(Admitted::Now(cntlid)) => {
                let dw0 = match self.auth {
                    Some(_) => spec::connect_success_auth_dw0(cntlid),
                    None => spec::connect_success_dw0(cntlid),
                };
                self.send_cqe(sqe.cid(), cmd.qid, Status::SUCCESS, dw0, 0);
            }
            Ok(Admitted::AskController(d, owner)) => {
                let pending = PendingConnect {
                    cid: sqe.cid(),
                    qid: cmd.qid,
                    cntlid: d.cntlid,
                    sqsize: cmd.sqsize,
                };
                self.phase = Phase::Connecting(pending);
                self.connecting = Some((d.subnqn.clone(), pending));
                let (tgt, nqn, me, conn, serial) = (
                    Arc::clone(&sh.tgt),
                    d.subnqn.clone(),
                    sh.core,
                    self.id,
                    self.serial,
                );
                let asked = sh.tgt.reactors.send(owner, move |ctx| {
                    let verdict = crate::group::check_io_connect(ctx, &nqn, &cmd, &d);
                    let answered = ctx.send(me, move |ctx| {
                        crate::group::io_connect_answer(ctx, conn, serial, verdict);
                    });
                    if answered.is_err() {
                        log::warn!("nvmf: the answer to an I/O Connect was lost: stopping");
                    }
                    drop(tgt);
                });
                if asked.is_err() {
                    self.io_connect_answer(sh, Err(ConnectReject::new(Status::INTERNAL_ERROR)));
                }
            }
            Err(r) => self.refuse_connect(sqe.cid(), cmd.qid, r),
        }
        Ok(())
    }

    /// Answers a refused Connect, then closes the connection (the host gives the queue up,
    /// and SPDK disconnects it too): a host cannot pile up refusals the target must send.
    fn refuse_connect(&mut self, cid: u16, qid: u16, r: ConnectReject) {
        log::warn!(
            "nvmf: connection {} ({}): Connect of queue {qid} refused: {}",
            self.id,
            self.peer,
            r.status.answering(Answering::Connect)
        );
        self.send_cqe(cid, qid, r.status, r.dw0, 0);
        self.close("its Connect was refused");
    }

    /// The controller's verdict on this connection's I/O-queue Connect.
    pub fn io_connect_answer(&mut self, sh: &mut GroupShared, verdict: Result<(), ConnectReject>) {
        let Phase::Connecting(p) = self.phase else {
            // Closed meanwhile: `finish` gives the reservation back.
            return;
        };
        self.phase = Phase::Ready;
        let Some((nqn, _)) = self.connecting.take() else {
            return;
        };
        let auth = self.pending_auth.take();
        match verdict {
            Ok(()) => {
                let dw0 = match auth {
                    Some(_) => spec::connect_success_auth_dw0(p.cntlid),
                    None => spec::connect_success_dw0(p.cntlid),
                };
                self.auth = auth;
                self.qp = Some(Qpair {
                    qid: p.qid,
                    cntlid: p.cntlid,
                    subnqn: nqn.clone(),
                    ctrlr: None,
                });
                self.make_slots(p.sqsize);
                sh.stats.io_qpairs += 1;
                sh.stats.current_io_qpairs += 1;
                log::info!(
                    "nvmf: connection {} ({}): I/O queue {} of controller {} on {nqn} ({} entries)",
                    self.id,
                    self.peer,
                    p.qid,
                    p.cntlid,
                    u32::from(p.sqsize) + 1
                );
                self.send_cqe(p.cid, p.qid, Status::SUCCESS, dw0, 0);
            }
            Err(r) => {
                sh.tgt.remove_qpair(&nqn, p.cntlid, p.qid);
                self.refuse_connect(p.cid, p.qid, r);
            }
        }
    }

    /// A secure channel carries the queues of the host and subsystem its PSK identity names,
    /// no others; a host with a PSK connects only over a secure channel (its key would
    /// protect nothing if it could come in the clear).
    fn check_channel(&self, s: &Subsystem, hostnqn: &str) -> Result<(), ConnectReject> {
        let refuse = |why: &str| {
            log::warn!(
                "nvmf: connection {} ({}): {hostnqn} to {}: {why}",
                self.id,
                self.peer,
                s.nqn
            );
            Err(ConnectReject::new(Status::CONNECT_INVALID_HOST))
        };
        match self.sock.psk_identity() {
            Some(id) if id.hostnqn == hostnqn && id.subnqn == s.nqn => Ok(()),
            Some(id) => refuse(&format!(
                "the TLS PSK was for {} to {}",
                id.hostnqn, id.subnqn
            )),
            None if self.sock.is_tls() => refuse("no PSK identity on a secure channel"),
            None if s.host_psk(hostnqn).is_some() => {
                refuse("the host has a TLS PSK: it connects over a secure channel only")
            }
            None => Ok(()),
        }
    }

    fn make_slots(&mut self, sqsize: u16) {
        let entries = u32::from(sqsize) + 1;
        self.slots = (0..entries).map(|_| CmdSlot::free()).collect();
        self.free = (0..entries as u16).rev().collect();
    }

    /// Checks a Connect against the configuration. An admin queue is set up at once with a new
    /// controller; an I/O queue is reserved in the controller's record and its admission
    /// left to the controller, on the reactor that owns it.
    fn admit(
        &mut self,
        sh: &mut GroupShared,
        cmd: &ConnectCmd,
        d: &ConnectData,
    ) -> Result<Admitted, ConnectReject> {
        let tgt: &NvmfTarget = &sh.tgt;
        let mut g = tgt.lock();
        let opts = g.config.transport.clone().unwrap_or_default();
        cmd.check(&opts)?;
        let subsys = g.config.subsystem(&d.subnqn).cloned();
        let listener = subsys
            .as_ref()
            .and_then(|s| s.listener_for(self.local).cloned());
        if subsys.is_some() && listener.is_none() {
            // The subsystem exists but not on this address: as if it did not.
            return Err(ConnectReject::invalid_data_field(connect_field::SUBNQN));
        }
        if let Some(s) = &subsys {
            self.check_channel(s, &d.hostnqn)?;
        }
        if cmd.qid == 0 {
            admit_admin_connect(subsys.as_ref(), d)?;
            let s = subsys.expect("admitted");
            let auth = self.auth_for(tgt, &g.config.dhchap, &s, &d.hostnqn)?;
            let Some(cntlid) = NvmfTarget::alloc_cntlid(&mut g, &s) else {
                return Err(ConnectReject::new(Status::CONNECT_CONTROLLER_BUSY));
            };
            let now = pmio_reactors::now_ns();
            let listener = listener.expect("checked with the subsystem");
            let ctrlr = Controller::new(cntlid, &s, d, cmd.kato_ms, &opts, now)
                .through(listener.clone(), &s);
            g.ctrlrs.push(CtrlrRecord {
                subnqn: s.nqn.clone(),
                cntlid,
                hostnqn: d.hostnqn.clone(),
                hostid: d.hostid,
                core: sh.core,
                io_queues: ctrlr.io_queues_granted(),
                kato_ms: ctrlr.kato_ms(),
                listener: listener.clone(),
                qpairs: vec![QpairRecord {
                    qid: 0,
                    core: sh.core,
                    peer: self.peer,
                    local: self.local,
                }],
            });
            drop(g);
            self.auth = auth;
            self.listener = Some(listener);
            self.hostnqn = Some(d.hostnqn.clone());
            self.qp = Some(Qpair {
                qid: 0,
                cntlid,
                subnqn: s.nqn.clone(),
                ctrlr: Some(Box::new(ctrlr)),
            });
            self.make_slots(cmd.sqsize);
            sh.stats.admin_qpairs += 1;
            sh.stats.current_admin_qpairs += 1;
            log::info!(
                "nvmf: connection {} ({}): admin queue of controller {cntlid} on {} for {}",
                self.id,
                self.peer,
                d.subnqn,
                d.hostnqn
            );
            return Ok(Admitted::Now(cntlid));
        }
        let s = subsys.ok_or(ConnectReject::invalid_data_field(connect_field::SUBNQN))?;
        let Some(rec) = g
            .ctrlrs
            .iter_mut()
            .find(|c| c.subnqn == s.nqn && c.cntlid == d.cntlid)
        else {
            return Err(ConnectReject::invalid_data_field(connect_field::CNTLID));
        };
        if rec.qpairs.iter().any(|q| q.qid == cmd.qid) {
            return Err(ConnectReject::new(Status::INVALID_QUEUE_IDENTIFIER));
        }
        // With ANA reporting a controller is one port's: its I/O queues come in where its
        // admin queue did (SPDK refuses them elsewhere too).
        if s.ana_reporting && listener.as_ref() != Some(&rec.listener) {
            return Err(ConnectReject::invalid_cmd_field(connect_field::QID));
        }
        let listener = rec.listener.clone();
        // Every queue of a host with keys authenticates, not only the admin queue.
        let hostnqn = rec.hostnqn.clone();
        let auth = self.auth_for(tgt, &g.config.dhchap, &s, &hostnqn)?;
        let Some(rec) = g
            .ctrlrs
            .iter_mut()
            .find(|c| c.subnqn == s.nqn && c.cntlid == d.cntlid)
        else {
            return Err(ConnectReject::invalid_data_field(connect_field::CNTLID));
        };
        self.pending_auth = auth;
        self.listener = Some(listener);
        self.hostnqn = Some(hostnqn);
        // Reserved here (a second Connect of the same queue is refused); given back if the
        // controller refuses.
        rec.qpairs.push(QpairRecord {
            qid: cmd.qid,
            core: sh.core,
            peer: self.peer,
            local: self.local,
        });
        let owner = rec.core;
        drop(g);
        Ok(Admitted::AskController(d.clone(), owner))
    }
}

/// What [`Conn::admit`] decided.
enum Admitted {
    /// The queue is set up: answer with this controller ID.
    Now(u16),
    /// Ask the controller, on the reactor of this core.
    AskController(ConnectData, u32),
}
