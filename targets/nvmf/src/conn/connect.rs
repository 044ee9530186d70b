//! Fabrics Connect: the first command of every queue pair, which makes it an admin queue (with
//! a new controller) or an I/O queue of an existing controller.

use super::*;

impl Conn {
    /// Fabrics Connect: the first command of every queue pair.
    pub(super) fn connect(
        &mut self,
        sh: &mut GroupShared,
        sqe: Sqe,
        data: std::ops::Range<usize>,
    ) -> Result<(), Fatal> {
        if sqe.opcode != spec::admin_opc::FABRICS || sqe.fctype() != spec::fctype::CONNECT {
            // One slot-less answer, then the connection goes: nothing else is allowed first.
            self.send_cqe(sqe.cid, 0, Status::COMMAND_SEQUENCE_ERROR, 0, 0);
            return Err(Fatal("a command before Fabrics Connect".into()));
        }
        let cmd = ConnectCmd::parse(&sqe);
        let answer = ConnectData::parse(&self.rx[data]).and_then(|d| self.admit(sh, &cmd, &d));
        match answer.map_err(<(Status, u32)>::from) {
            Ok(cntlid) => {
                let dw0 = spec::connect_success_dw0(cntlid);
                self.send_cqe(sqe.cid, cmd.qid, Status::SUCCESS, dw0, 0);
                Ok(())
            }
            Err((st, dw0)) => {
                log::warn!(
                    "nvmf: connection {} ({}): Connect refused: {st:?}",
                    self.id,
                    self.peer
                );
                self.send_cqe(sqe.cid, cmd.qid, st, dw0, 0);
                Ok(())
            }
        }
    }

    /// Checks a Connect and sets the queue pair up; the controller ID or the refusal.
    pub(super) fn admit(
        &mut self,
        sh: &mut GroupShared,
        cmd: &ConnectCmd,
        d: &ConnectData,
    ) -> Result<u16, ConnectReject> {
        let tgt: &NvmfTarget = &sh.tgt;
        let mut g = tgt.lock();
        let opts = g.config.transport.clone().unwrap_or_default();
        cmd.check(&opts)?;
        let subsys = g.config.subsystem(&d.subnqn).cloned();
        let listening = subsys.as_ref().is_some_and(|s| {
            s.listeners.iter().any(|l| {
                let a = l.socket_addr();
                a.port() == self.local.port()
                    && (a.ip().is_unspecified() || a.ip() == self.local.ip())
            })
        });
        if subsys.is_some() && !listening {
            // The subsystem exists but not on this address: as if it did not.
            return Err(ConnectReject::invalid_data_field(connect_field::SUBNQN));
        }
        let entries = u32::from(cmd.sqsize) + 1;
        let cntlid = if cmd.qid == 0 {
            admit_admin_connect(subsys.as_ref(), d)?;
            let s = subsys.expect("admitted");
            let Some(cntlid) = NvmfTarget::alloc_cntlid(&mut g, &s) else {
                return Err(ConnectReject::new(Status::CONNECT_CONTROLLER_BUSY));
            };
            let now = pmio_reactors::now_ns();
            let ctrlr = Controller::new(cntlid, &s, d, cmd.kato_ms, &opts, now);
            g.ctrlrs.push(CtrlrRecord {
                subnqn: s.nqn.clone(),
                cntlid,
                hostnqn: d.hostnqn.clone(),
                hostid: d.hostid,
                core: sh.core,
                io_queues: ctrlr.io_queues_granted(),
                kato_ms: ctrlr.kato_ms(),
                qpairs: vec![QpairRecord {
                    qid: 0,
                    core: sh.core,
                    peer: self.peer,
                    local: self.local,
                }],
            });
            self.qp = Some(Qpair {
                qid: 0,
                cntlid,
                subnqn: s.nqn.clone(),
                ctrlr: Some(Box::new(ctrlr)),
            });
            sh.stats.admin_qpairs += 1;
            sh.stats.current_admin_qpairs += 1;
            cntlid
        } else {
            let s = subsys.ok_or(ConnectReject::invalid_data_field(connect_field::SUBNQN))?;
            let Some(rec) = g
                .ctrlrs
                .iter_mut()
                .find(|c| c.subnqn == s.nqn && c.cntlid == d.cntlid)
            else {
                return Err(ConnectReject::invalid_data_field(connect_field::CNTLID));
            };
            if rec.hostnqn != d.hostnqn {
                return Err(ConnectReject::invalid_data_field(connect_field::HOSTNQN));
            }
            if cmd.qid > rec.io_queues || rec.qpairs.iter().any(|q| q.qid == cmd.qid) {
                return Err(ConnectReject::new(Status::INVALID_QUEUE_IDENTIFIER));
            }
            rec.qpairs.push(QpairRecord {
                qid: cmd.qid,
                core: sh.core,
                peer: self.peer,
                local: self.local,
            });
            self.qp = Some(Qpair {
                qid: cmd.qid,
                cntlid: d.cntlid,
                subnqn: s.nqn.clone(),
                ctrlr: None,
            });
            sh.stats.io_qpairs += 1;
            sh.stats.current_io_qpairs += 1;
            d.cntlid
        };
        drop(g);
        self.slots = (0..entries).map(|_| Slot::free()).collect();
        self.free = (0..entries as u16).rev().collect();
        log::info!(
            "nvmf: connection {} ({}): {} queue {} of controller {cntlid} on {} for {} ({entries} entries)",
            self.id,
            self.peer,
            if cmd.qid == 0 { "admin" } else { "I/O" },
            cmd.qid,
            d.subnqn,
            d.hostnqn
        );
        Ok(cntlid)
    }
}
