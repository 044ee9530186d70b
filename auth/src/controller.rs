//! The controller's side of DH-HMAC-CHAP on one queue (NVMe Base 2.0 §8.13.5, SPDK's
//! `lib/nvmf/auth.c`): what an Authentication Send does to the exchange and what an
//! Authentication Receive returns. Pure: the transport hands it the commands' data.
//!
//! The exchange, one command each:
//! 1. Send AUTH_Negotiate: the strongest hash and DH group both sides allow are chosen.
//! 2. Receive DH-HMAC-CHAP_Challenge: C1, sequence number S1, the controller's DH value.
//! 3. Send DH-HMAC-CHAP_Reply: the host's response is checked (and its challenge C2 answered).
//! 4. Receive DH-HMAC-CHAP_Success1 (with the controller's response when bidirectional).
//! 5. Bidirectional only: Send DH-HMAC-CHAP_Success2 (or AUTH_Failure2).
//!
//! A Send that breaks the exchange completes successfully, as the spec has it: the next
//! Receive returns AUTH_Failure1 with the reason, and the transport then closes the queue
//! ([`ControllerAuth::must_close`]).

use pmio_keyring::DhchapSecret;
use zeroize::Zeroizing;

use crate::crypto::{self, DhGroup, DhKey, Hash, ResponseInput, Role};
use crate::msg::{Challenge, Message, RC_FAILURE, Reason, Success1};

/// What the controller allows and holds for one host.
#[derive(Clone)]
pub struct ControllerConfig {
    /// Hashes allowed (`nvmf_set_config`'s `dhchap_digests`).
    pub digests: Vec<Hash>,
    /// DH groups allowed (`dhchap_dhgroups`).
    pub dhgroups: Vec<DhGroup>,
    /// The host's key (`nvmf_subsystem_add_host --dhchap-key`).
    pub host_key: DhchapSecret,
    /// The controller's key, for hosts that authenticate the controller too.
    pub ctrlr_key: Option<DhchapSecret>,
    pub hostnqn: String,
    pub subnqn: String,
}

/// Where the exchange is (SPDK's `nvmf_qpair_auth_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for AUTH_Negotiate.
    Negotiate,
    /// Negotiated: the next Receive returns the challenge.
    Challenge,
    /// Waiting for the host's reply.
    Reply,
    /// The host is authenticated: the next Receive returns Success1.
    Success1,
    /// Waiting for the host's Success2 (bidirectional).
    Success2,
    /// Failed: the next Receive returns AUTH_Failure1.
    Failure1(Reason),
    /// Authenticated.
    Completed,
    /// Failed and answered (or the host gave up): the queue must close.
    Error,
}

/// What an Authentication Send or Receive command completes with, besides its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandStatus {
    /// Success (also for a Send whose message failed the exchange: see the module docs).
    Success,
    /// Invalid Field in Command: wrong SECP/SPSP, or a transfer length that is not the data's.
    InvalidField,
}

/// SECP of NVMe in-band authentication.
pub const SECP_NVME: u8 = 0xe9;

/// The controller's half of one queue's authentication.
pub struct ControllerAuth {
    cfg: ControllerConfig,
    state: State,
    tid: u16,
    hash: Hash,
    dhgroup: DhGroup,
    dhkey: Option<DhKey>,
    /// C1.
    cval: Vec<u8>,
    seqnum: u32,
    /// The controller's response to the host's C2, when asked for.
    ctrlr_response: Option<Zeroizing<Vec<u8>>>,
}

impl ControllerAuth {
    /// A new exchange; `seqnum` is this challenge's S1 (never 0; the subsystem counts them).
    pub fn new(cfg: ControllerConfig, seqnum: u32) -> ControllerAuth {
        ControllerAuth {
            cfg,
            state: State::Negotiate,
            tid: 0,
            hash: Hash::Sha256,
            dhgroup: DhGroup::Null,
            dhkey: None,
            cval: Vec::new(),
            seqnum: seqnum.max(1),
            ctrlr_response: None,
        }
    }

    /// Where the exchange is.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether the queue is authenticated.
    pub fn is_done(&self) -> bool {
        self.state == State::Completed
    }

    /// Whether the queue must close: the exchange failed and the host has been told.
    pub fn must_close(&self) -> bool {
        self.state == State::Error
    }

    /// The hash and group chosen (after AUTH_Negotiate).
    pub fn chosen(&self) -> (Hash, DhGroup) {
        (self.hash, self.dhgroup)
    }

    fn set_state(&mut self, s: State) {
        if self.state != s {
            log::debug!(
                "nvmf auth [{}:{}]: {:?} -> {s:?}",
                self.cfg.subnqn,
                self.cfg.hostnqn,
                self.state
            );
            self.state = s;
        }
    }

    fn fail(&mut self, why: Reason, detail: &str) -> CommandStatus {
        log::error!(
            "nvmf auth [{}:{}]: {why}: {detail}",
            self.cfg.subnqn,
            self.cfg.hostnqn
        );
        self.set_state(State::Failure1(why));
        CommandStatus::Success
    }

    /// Checks an Authentication Send/Receive command's SECP, SPSP0/1 and length (TL or AL)
    /// against the data that came with it (or room given for it).
    pub fn check_command(secp: u8, spsp0: u8, spsp1: u8, len: u32, data: usize) -> CommandStatus {
        if secp != SECP_NVME || spsp0 != 1 || spsp1 != 1 || len as usize != data {
            CommandStatus::InvalidField
        } else {
            CommandStatus::Success
        }
    }

    /// Authentication Send with `data`.
    pub fn send(&mut self, data: &[u8]) -> CommandStatus {
        let msg = match Message::decode(data) {
            Ok(m) => m,
            Err(e) => return self.fail(e.reason(), &e.to_string()),
        };
        match (self.state, msg) {
            (State::Negotiate, Message::Negotiate(n)) => {
                self.tid = n.tid;
                self.negotiate(&n)
            }
            (State::Reply, Message::Reply(r)) if r.tid == self.tid => self.reply(&r),
            (State::Success2, Message::Success2 { tid }) if tid == self.tid => {
                log::info!(
                    "nvmf auth [{}:{}]: the host accepted the controller",
                    self.cfg.subnqn,
                    self.cfg.hostnqn
                );
                self.set_state(State::Completed);
                CommandStatus::Success
            }
            (
                State::Success2,
                Message::Failure {
                    tid,
                    from_host: true,
                    rc,
                    rce,
                },
            ) if tid == self.tid => {
                log::error!(
                    "nvmf auth [{}:{}]: the host refused the controller: rc {rc} rce {rce} ({})",
                    self.cfg.subnqn,
                    self.cfg.hostnqn,
                    Reason::from_u8(rce)
                );
                self.set_state(State::Error);
                CommandStatus::Success
            }
            (State::Reply | State::Success2, m) if m.tid() != self.tid => self.fail(
                Reason::IncorrectPayload,
                &format!("{} of transaction {} in {}", m.name(), m.tid(), self.tid),
            ),
            (s, m) => self.fail(
                Reason::IncorrectProtocolMessage,
                &format!("{} in state {s:?}", m.name()),
            ),
        }
    }

    fn negotiate(&mut self, n: &crate::msg::Negotiate) -> CommandStatus {
        if n.sc_c != 0 {
            return self.fail(Reason::SccMismatch, "secure channel concatenation asked");
        }
        if !n.has_dhchap {
            return self.fail(Reason::ProtocolUnusable, "no DH-HMAC-CHAP descriptor");
        }
        let hash = Hash::STRONGEST_FIRST
            .into_iter()
            .find(|h| self.cfg.digests.contains(h) && n.hashes.contains(&(*h as u8)));
        let Some(hash) = hash else {
            return self.fail(Reason::HashUnusable, &format!("offered {:?}", n.hashes));
        };
        let group = DhGroup::STRONGEST_FIRST
            .into_iter()
            .find(|g| self.cfg.dhgroups.contains(g) && n.dhgroups.contains(&(*g as u8)));
        let Some(group) = group else {
            return self.fail(
                Reason::DhGroupUnusable,
                &format!("offered {:?}", n.dhgroups),
            );
        };
        (self.hash, self.dhgroup) = (hash, group);
        self.set_state(State::Challenge);
        CommandStatus::Success
    }

    fn reply(&mut self, r: &crate::msg::Reply) -> CommandStatus {
        let hl = self.hash.len();
        if r.rval.len() != hl {
            return self.fail(
                Reason::IncorrectPayload,
                "the hash length is not the hash's",
            );
        }
        let dh_secret = match &self.dhkey {
            None if r.dhv.is_empty() => None,
            None => return self.fail(Reason::IncorrectPayload, "a DH value in the null group"),
            Some(k) => match k.shared_secret(&r.dhv) {
                Ok(s) => Some(s),
                Err(e) => return self.fail(Reason::Failed, &e.to_string()),
            },
        };
        let input = ResponseInput {
            hash: self.hash,
            role: Role::Host,
            challenge: &self.cval,
            seqnum: self.seqnum,
            tid: self.tid,
            dh_secret: dh_secret.as_deref().map(|s| &s[..]),
            hostnqn: &self.cfg.hostnqn,
            subnqn: &self.cfg.subnqn,
        };
        match crypto::response(&self.cfg.host_key, &input) {
            Ok(want) if crypto::same(&want, &r.rval) => {}
            Ok(_) => return self.fail(Reason::Failed, "the host's response does not match"),
            Err(e) => return self.fail(Reason::Failed, &e.to_string()),
        }
        if let Some(c2) = &r.cval {
            let Some(ckey) = &self.cfg.ctrlr_key else {
                return self.fail(
                    Reason::Failed,
                    "the host asks for a controller key there is not",
                );
            };
            let input = ResponseInput {
                role: Role::Controller,
                challenge: c2,
                seqnum: r.seqnum,
                ..input
            };
            match crypto::response(ckey, &input) {
                Ok(resp) => self.ctrlr_response = Some(resp),
                Err(e) => return self.fail(Reason::Failed, &e.to_string()),
            }
        }
        log::info!(
            "nvmf auth [{}:{}]: host authenticated ({}, {})",
            self.cfg.subnqn,
            self.cfg.hostnqn,
            self.hash.name(),
            self.dhgroup.name()
        );
        self.set_state(State::Success1);
        CommandStatus::Success
    }

    /// Authentication Receive: the message for the host now, at most `al` bytes (a message
    /// longer than the room given is a failure the host is told of, truncated to fit).
    pub fn receive(&mut self, al: usize) -> Vec<u8> {
        let msg = match self.state {
            State::Challenge => self.challenge(),
            State::Success1 => Ok(self.success1()),
            State::Failure1(why) => Err(why),
            _ => Err(Reason::IncorrectProtocolMessage),
        };
        let bytes = match msg {
            Ok(m) if m.len() <= al => m,
            Ok(_) => self.failure1(Reason::IncorrectPayload),
            Err(why) => self.failure1(why),
        };
        let mut bytes = bytes;
        bytes.truncate(al);
        bytes
    }

    fn challenge(&mut self) -> Result<Vec<u8>, Reason> {
        let fail = |e: crypto::CryptoError| {
            log::error!("nvmf auth: the challenge could not be made: {e}");
            Reason::Failed
        };
        self.dhkey = DhKey::generate(self.dhgroup).map_err(fail)?;
        let dhv = match &self.dhkey {
            Some(k) => k.public().map_err(fail)?,
            None => Vec::new(),
        };
        self.cval = crypto::random(self.hash.len()).map_err(fail)?;
        self.set_state(State::Reply);
        Ok(Message::Challenge(Challenge {
            tid: self.tid,
            hash: self.hash as u8,
            dhgroup: self.dhgroup as u8,
            seqnum: self.seqnum,
            cval: self.cval.clone(),
            dhv,
        })
        .encode())
    }

    fn success1(&mut self) -> Vec<u8> {
        let rval = self.ctrlr_response.take().map(|r| r.to_vec());
        self.dhkey = None;
        self.set_state(if rval.is_some() {
            State::Success2
        } else {
            State::Completed
        });
        Message::Success1(Success1 {
            tid: self.tid,
            hl: self.hash.len() as u8,
            rval,
        })
        .encode()
    }

    fn failure1(&mut self, why: Reason) -> Vec<u8> {
        self.set_state(State::Error);
        Message::Failure {
            tid: self.tid,
            from_host: false,
            rc: RC_FAILURE,
            rce: why as u8,
        }
        .encode()
    }
}
