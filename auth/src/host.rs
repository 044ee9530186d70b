//! The host's side of DH-HMAC-CHAP on one queue (SPDK's `lib/nvme/nvme_auth.c`, Linux's
//! `drivers/nvme/host/auth.c`): the messages it sends and what it makes of the controller's.
//! Pure: the transport sends and receives them with Authentication Send/Receive.
//!
//! 1. [`HostAuth::negotiate`] → Send.
//! 2. Receive → [`HostAuth::challenge`] → the reply to Send.
//! 3. Receive → [`HostAuth::success1`] → done, or (bidirectional) a Success2 or Failure2 to Send.

use pmio_keyring::DhchapSecret;
use zeroize::Zeroizing;

use crate::crypto::{self, DhGroup, DhKey, Hash, ResponseInput, Role};
use crate::msg::{Message, Negotiate, RC_FAILURE, Reason, Reply};

/// What the host holds and allows.
#[derive(Clone)]
pub struct HostConfig {
    /// The host's key (`--dhchap-key`).
    pub key: DhchapSecret,
    /// The controller's key: with it the host authenticates the controller too.
    pub ctrlr_key: Option<DhchapSecret>,
    pub hostnqn: String,
    pub subnqn: String,
    /// Hashes offered (`bdev_nvme_set_options`' `dhchap_digests`; default all).
    pub digests: Vec<Hash>,
    /// DH groups offered (default all).
    pub dhgroups: Vec<DhGroup>,
}

/// Why the host's authentication failed.
#[derive(Debug, thiserror::Error)]
pub enum HostAuthError {
    /// The controller answered AUTH_Failure1 (a wrong key: reason 01h).
    #[error("the controller refused the host: AUTH_Failure1 reason {rc:#04x}, explanation {rce:#04x} ({})", Reason::from_u8(*rce))]
    Refused { rc: u8, rce: u8 },
    /// The controller's response to the host's challenge does not verify.
    #[error("the controller's response does not match: it does not hold the controller key")]
    ControllerMismatch,
    /// A message that is not the one expected, or malformed.
    #[error("unexpected message from the controller: {0}")]
    Protocol(String),
    /// The cryptography failed.
    #[error(transparent)]
    Crypto(#[from] crypto::CryptoError),
}

/// The end of an exchange: what is left to send, and the outcome.
pub struct Finish {
    /// Success2, or Failure2 when the controller failed, to send with Authentication Send.
    pub send: Option<Vec<u8>>,
    pub result: Result<(), HostAuthError>,
}

/// The host's half of one queue's authentication.
pub struct HostAuth {
    cfg: HostConfig,
    tid: u16,
    /// S2, when the host authenticates the controller.
    seqnum: u32,
    hash: Hash,
    dh_secret: Option<Zeroizing<Vec<u8>>>,
    /// C2.
    cval: Option<Vec<u8>>,
}

impl HostAuth {
    /// A new exchange with transaction id `tid`; `seqnum` is S2 (used when bidirectional,
    /// never 0; the controller object counts them).
    pub fn new(cfg: HostConfig, tid: u16, seqnum: u32) -> HostAuth {
        HostAuth {
            cfg,
            tid,
            seqnum: seqnum.max(1),
            hash: Hash::Sha256,
            dh_secret: None,
            cval: None,
        }
    }

    /// Whether the controller is authenticated too.
    pub fn bidirectional(&self) -> bool {
        self.cfg.ctrlr_key.is_some()
    }

    /// Step 1: AUTH_Negotiate.
    pub fn negotiate(&self) -> Vec<u8> {
        Message::Negotiate(Negotiate {
            tid: self.tid,
            sc_c: 0,
            hashes: self.cfg.digests.iter().map(|h| *h as u8).collect(),
            dhgroups: self.cfg.dhgroups.iter().map(|g| *g as u8).collect(),
            has_dhchap: true,
        })
        .encode()
    }

    fn expect(&self, data: &[u8], what: &str) -> Result<Message, HostAuthError> {
        let m = Message::decode(data).map_err(|e| HostAuthError::Protocol(e.to_string()))?;
        if let Message::Failure {
            from_host: false,
            rc,
            rce,
            ..
        } = m
        {
            return Err(HostAuthError::Refused { rc, rce });
        }
        if m.tid() != self.tid {
            return Err(HostAuthError::Protocol(format!(
                "{} of transaction {} in {}",
                m.name(),
                m.tid(),
                self.tid
            )));
        }
        log::debug!(
            "nvme auth [{}]: {} (expected {what})",
            self.cfg.subnqn,
            m.name()
        );
        Ok(m)
    }

    /// Step 2: the controller's challenge (or its refusal) → the reply to send.
    pub fn challenge(&mut self, data: &[u8]) -> Result<Vec<u8>, HostAuthError> {
        let Message::Challenge(c) = self.expect(data, "a challenge")? else {
            return Err(HostAuthError::Protocol("not a challenge".into()));
        };
        let hash = Hash::from_id(c.hash)
            .filter(|h| self.cfg.digests.contains(h))
            .ok_or_else(|| HostAuthError::Protocol(format!("hash {:#04x} not offered", c.hash)))?;
        let group = DhGroup::from_id(c.dhgroup)
            .filter(|g| self.cfg.dhgroups.contains(g))
            .ok_or_else(|| {
                HostAuthError::Protocol(format!("DH group {:#04x} not offered", c.dhgroup))
            })?;
        self.hash = hash;
        let dhkey = DhKey::generate(group)?;
        let dhv = match &dhkey {
            Some(k) => {
                self.dh_secret = Some(k.shared_secret(&c.dhv)?);
                k.public()?
            }
            None if c.dhv.is_empty() => Vec::new(),
            None => {
                return Err(HostAuthError::Protocol(
                    "a DH value in the null group".into(),
                ));
            }
        };
        let rval = crypto::response(
            &self.cfg.key,
            &ResponseInput {
                hash,
                role: Role::Host,
                challenge: &c.cval,
                seqnum: c.seqnum,
                tid: self.tid,
                dh_secret: self.dh_secret.as_deref().map(|s| &s[..]),
                hostnqn: &self.cfg.hostnqn,
                subnqn: &self.cfg.subnqn,
            },
        )?;
        self.cval = match self.bidirectional() {
            true => Some(crypto::random(hash.len())?),
            false => None,
        };
        Ok(Message::Reply(Reply {
            tid: self.tid,
            rval: rval.to_vec(),
            cval: self.cval.clone(),
            seqnum: if self.cval.is_some() { self.seqnum } else { 0 },
            dhv,
        })
        .encode())
    }

    /// Step 3: Success1 (or the controller's refusal).
    pub fn success1(&mut self, data: &[u8]) -> Finish {
        let done = |result| Finish { send: None, result };
        let s = match self.expect(data, "Success1") {
            Ok(Message::Success1(s)) => s,
            Ok(m) => return done(Err(HostAuthError::Protocol(m.name().into()))),
            Err(e) => return done(Err(e)),
        };
        let (Some(ckey), Some(c2)) = (&self.cfg.ctrlr_key, &self.cval) else {
            return done(Ok(()));
        };
        let want = crypto::response(
            ckey,
            &ResponseInput {
                hash: self.hash,
                role: Role::Controller,
                challenge: c2,
                seqnum: self.seqnum,
                tid: self.tid,
                dh_secret: self.dh_secret.as_deref().map(|s| &s[..]),
                hostnqn: &self.cfg.hostnqn,
                subnqn: &self.cfg.subnqn,
            },
        );
        let ok = match (&want, &s.rval) {
            (Ok(w), Some(r)) => crypto::same(w, r),
            _ => false,
        };
        if ok {
            return Finish {
                send: Some(Message::Success2 { tid: self.tid }.encode()),
                result: Ok(()),
            };
        }
        Finish {
            send: Some(
                Message::Failure {
                    tid: self.tid,
                    from_host: true,
                    rc: RC_FAILURE,
                    rce: Reason::Failed as u8,
                }
                .encode(),
            ),
            result: Err(match want {
                Err(e) => e.into(),
                Ok(_) => HostAuthError::ControllerMismatch,
            }),
        }
    }
}
