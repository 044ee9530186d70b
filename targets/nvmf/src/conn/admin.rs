//! Admin commands of an admin queue: fabrics Property Get/Set, and the controller's commands.

use super::*;

impl Conn {
    /// An admin command (admin queue): fabrics Property Get/Set, or the controller's.
    pub(super) fn admin_command(
        &mut self,
        sh: &mut GroupShared,
        slot: u16,
        data: std::ops::Range<usize>,
    ) {
        let sqe = self.slots[usize::from(slot)].sqe;
        let qp = self.qp.as_mut().expect("connected");
        let ctrlr = qp
            .ctrlr
            .as_mut()
            .expect("the admin queue has the controller");
        let now = pmio_reactors::now_ns();
        let mut cc_change = CcChange::None;
        let outcome = if sqe.opcode() == spec::admin_opc::FABRICS {
            ctrlr.touch(now);
            let size8 = sqe.cdw10 & 7 == 1;
            let (status, v) = match sqe.fctype() {
                spec::fctype::PROPERTY_GET => match ctrlr.property_get(sqe.cdw11, size8) {
                    Ok(v) => (Status::SUCCESS, v),
                    Err(st) => (st, 0),
                },
                spec::fctype::PROPERTY_SET => {
                    let v = u64::from(sqe.cdw12) | u64::from(sqe.cdw13) << 32;
                    match ctrlr.property_set(sqe.cdw11, size8, v) {
                        Ok(change) => {
                            cc_change = change;
                            (Status::SUCCESS, 0)
                        }
                        Err(st) => (st, 0),
                    }
                }
                _ => (Status::INVALID_OPCODE, 0),
            };
            Some(AdminOutcome::Done {
                status,
                dw0: v as u32,
                dw1: (v >> 32) as u32,
                data: Vec::new(),
            })
        } else {
            let cfg = sh.tgt.config();
            cfg.subsystem(&qp.subnqn).map(|subsys| {
                let out = ctrlr.admin(&sqe, &self.rx[data], subsys, &cfg.subsystems, now);
                if sqe.opcode() == spec::admin_opc::SET_FEATURES {
                    sh.tgt
                        .set_io_queues(&qp.subnqn, qp.cntlid, ctrlr.io_queues_granted());
                }
                out
            })
        };
        if matches!(cc_change, CcChange::Reset | CcChange::Shutdown) {
            // The host's I/O queues end with a controller reset or shutdown (SPDK does the
            // same); the admin queue stays.
            let (nqn, cntlid) = (qp.subnqn.clone(), qp.cntlid);
            sh.tgt.disconnect_io_queues(&nqn, cntlid);
        }
        let (status, dw0, dw1, out) = match outcome {
            None => {
                self.respond(slot, 0, Status::INTERNAL_ERROR, 0, 0);
                self.close("its subsystem was deleted");
                return;
            }
            Some(AdminOutcome::Held) => {
                self.slots[usize::from(slot)].state = CmdState::Held;
                return;
            }
            Some(AdminOutcome::Done {
                status,
                dw0,
                dw1,
                data,
            }) => (status, dw0, dw1, data),
        };
        if !out.is_empty() && status.is_success() {
            let mut out = out;
            out.truncate(sqe.sgl().len as usize);
            let c2h = Header::C2HData(pdu::C2HData {
                cccid: sqe.cid(),
                datao: 0,
                last: true,
                success: false,
            });
            self.queue_owned(&c2h, out);
        }
        self.respond(slot, 0, status, dw0, dw1);
    }
}
