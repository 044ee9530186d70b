//! In-band authentication of a queue (DH-HMAC-CHAP): started by a Connect whose host has
//! keys, carried by Fabrics Authentication Send/Receive; until it completes the queue takes no
//! other command (Authentication Required, as SPDK answers). A failed exchange is answered with
//! AUTH_Failure1, counted, logged without the secret, and the connection closed.

use pmio_auth::controller::{CommandStatus, ControllerAuth, ControllerConfig};

use super::*;
use crate::subsystem::Subsystem;
use crate::tgt::DhchapPolicy;

/// The Authentication Receive room this target fills at most (the longest message, a
/// challenge with an ffdhe8192 value, is 16 + 64 + 1024 bytes).
const MAX_AUTH_RECEIVE: usize = 4096;

impl Conn {
    /// The exchange a Connect of `hostnqn` to `subsys` must go through, if the host has keys:
    /// the keys' texts are read now (a key file replaced meanwhile rotates the key for the
    /// next queue). `Err` when a key cannot be read.
    pub(super) fn auth_for(
        &self,
        tgt: &NvmfTarget,
        policy: &DhchapPolicy,
        subsys: &Subsystem,
        hostnqn: &str,
    ) -> Result<Option<Box<ControllerAuth>>, ConnectReject> {
        let Some(keys) = subsys.host_keys(hostnqn) else {
            return Ok(None);
        };
        let unusable = |e: pmio_keyring::KeyError| {
            log::error!(
                "nvmf: connection {} ({}): {hostnqn}'s DH-HMAC-CHAP key for {}: {e}",
                self.id,
                self.peer,
                subsys.nqn
            );
            ConnectReject::new(Status::INTERNAL_ERROR)
        };
        let host_key = keys.dhchap_key.dhchap().map_err(unusable)?;
        let ctrlr_key = match &keys.dhchap_ctrlr_key {
            Some(k) => Some(k.dhchap().map_err(unusable)?),
            None => None,
        };
        let cfg = ControllerConfig {
            digests: policy.digests.clone(),
            dhgroups: policy.dhgroups.clone(),
            host_key,
            ctrlr_key,
            hostnqn: hostnqn.to_string(),
            subnqn: subsys.nqn.clone(),
        };
        Ok(Some(Box::new(ControllerAuth::new(
            cfg,
            tgt.next_auth_seqnum(),
        ))))
    }

    /// Whether the queue still has to authenticate before it carries commands.
    pub(super) fn auth_pending(&self) -> bool {
        self.auth.as_ref().is_some_and(|a| !a.is_done())
    }

    /// A command on a queue that has not authenticated yet: refused, the queue stays.
    pub(super) fn refuse_unauthenticated(&mut self, sqe: &Sqe) {
        log::warn!(
            "nvmf: connection {} ({}): command {:#04x} before authentication",
            self.id,
            self.peer,
            sqe.opcode()
        );
        self.send_cqe(sqe.cid(), self.qid(), Status::AUTH_REQUIRED, 0, 0);
    }

    /// Fabrics Authentication Send or Receive.
    pub(super) fn auth_command(
        &mut self,
        sh: &mut GroupShared,
        sqe: Sqe,
        data: std::ops::Range<usize>,
    ) {
        let (secp, spsp0, spsp1, len) = spec::auth_fields(&sqe);
        let send = sqe.fctype() == spec::fctype::AUTH_SEND;
        let room = if send {
            data.len()
        } else {
            (sqe.sgl().len as usize).min(MAX_AUTH_RECEIVE)
        };
        let qid = self.qid();
        // A Receive with no room could carry no message (nor a C2HData of nothing).
        let no_room = !send && room == 0;
        if no_room
            || ControllerAuth::check_command(secp, spsp0, spsp1, len, room)
                != CommandStatus::Success
        {
            log::warn!(
                "nvmf: connection {} ({}): Authentication {} with SECP {secp:#04x}, SPSP \
                 {spsp0}/{spsp1}, length {len} for {room} bytes",
                self.id,
                self.peer,
                if send { "Send" } else { "Receive" }
            );
            self.send_cqe(sqe.cid(), qid, Status::INVALID_FIELD, 0, 0);
            return;
        }
        if self.auth.as_ref().is_none_or(|a| a.is_done()) {
            // A new exchange: the first on a queue whose host has keys only now, or a
            // re-authentication of an authenticated queue (SPDK allows both).
            if !self.restart_auth(sh) {
                self.send_cqe(sqe.cid(), qid, Status::COMMAND_SEQUENCE_ERROR, 0, 0);
                return;
            }
        }
        let auth = self.auth.as_mut().expect("an exchange");
        if send {
            auth.send(&self.rx[data]);
        } else {
            let out = auth.receive(room);
            let c2h = Header::C2HData(pdu::C2HData {
                cccid: sqe.cid(),
                datao: 0,
                last: true,
                success: false,
            });
            self.queue_owned(&c2h, out);
        }
        self.send_cqe(sqe.cid(), qid, Status::SUCCESS, 0, 0);
        let auth = self.auth.as_ref().expect("an exchange");
        if auth.must_close() {
            sh.tgt.auth_failed();
            log::error!(
                "nvmf: connection {} ({}): in-band authentication of queue {qid} failed ({} \
                 failures since start)",
                self.id,
                self.peer,
                sh.tgt.auth_failures()
            );
            self.close("its authentication failed");
        } else if auth.is_done() {
            let (h, g) = auth.chosen();
            log::info!(
                "nvmf: connection {} ({}): queue {qid} authenticated ({}, {})",
                self.id,
                self.peer,
                h.name(),
                g.name()
            );
        }
    }

    /// A new exchange for this queue's host, with its keys as configured now; false when the
    /// host has none (a host without keys has nothing to authenticate with).
    fn restart_auth(&mut self, sh: &GroupShared) -> bool {
        let Some(qp) = &self.qp else { return false };
        let Some(hostnqn) = self.hostnqn.clone() else {
            return false;
        };
        let cfg = sh.tgt.config();
        let Some(subsys) = cfg.subsystem(&qp.subnqn) else {
            return false;
        };
        match self.auth_for(&sh.tgt, &cfg.dhchap, subsys, &hostnqn) {
            Ok(Some(a)) => {
                self.auth = Some(a);
                true
            }
            _ => false,
        }
    }
}
