//! In-band authentication (DH-HMAC-CHAP) of one queue's connection, after a Connect whose
//! response asked for it (AUTHREQ.ATR): the host's side of the exchange (`pmio-auth`) carried
//! in Authentication Send/Receive commands, one at a time, each started when the one before
//! completed. The admin queue runs it blocking ([`authenticate_blocking`]), an I/O queue one
//! completion per look ([`AuthFlow::advance`]) on its reactor.

use std::sync::Arc;
use std::time::Instant;

use pmio_auth::crypto::{DhGroup, Hash};
use pmio_auth::host::{HostAuth, HostAuthError, HostConfig};
use pmio_auth::msg::controller_message_len;
use pmio_keyring::{Key, KeyError};

use super::conn::{Conn, ConnError};
use crate::spec::Cqe;

/// The DH-HMAC-CHAP keys a controller is attached with (`--dhchap-key`, `--dhchap-ctrlr-key`:
/// keyring keys, read each time a queue authenticates, so a rotated key file is used at the
/// next reconnect).
#[derive(Clone, Debug)]
pub struct DhchapKeys {
    /// The host's key.
    pub key: Arc<Key>,
    /// The controller's key: the host authenticates the controller too.
    pub ctrlr_key: Option<Arc<Key>>,
}

impl PartialEq for DhchapKeys {
    fn eq(&self, o: &DhchapKeys) -> bool {
        Arc::ptr_eq(&self.key, &o.key)
            && match (&self.ctrlr_key, &o.ctrlr_key) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for DhchapKeys {}

impl DhchapKeys {
    /// The host side's configuration for one exchange: the keys' texts read now; every hash
    /// and group offered (SPDK's host default).
    pub(crate) fn config(&self, hostnqn: &str, subnqn: &str) -> Result<HostConfig, KeyError> {
        Ok(HostConfig {
            key: self.key.dhchap()?,
            ctrlr_key: match &self.ctrlr_key {
                Some(k) => Some(k.dhchap()?),
                None => None,
            },
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            digests: Hash::STRONGEST_FIRST.to_vec(),
            dhgroups: DhGroup::STRONGEST_FIRST.to_vec(),
        })
    }
}

/// Where the exchange is: the command in flight.
enum Step {
    /// AUTH_Negotiate sent.
    Negotiate,
    /// Receiving the challenge.
    Challenge,
    /// The reply sent.
    Reply,
    /// Receiving Success1 (or AUTH_Failure1).
    Success1,
    /// Success2 or AUTH_Failure2 sent; then the exchange ends with this.
    Last(Option<HostAuthError>),
}

/// One queue's exchange, command by command on CID `cid`.
pub(crate) struct AuthFlow {
    host: HostAuth,
    step: Step,
    cid: u16,
}

impl AuthFlow {
    /// Starts the exchange on `conn`: sends AUTH_Negotiate as `cid`.
    pub(crate) fn start(conn: &mut Conn, cid: u16, cfg: HostConfig) -> AuthFlow {
        let tid = transaction_id();
        let host = HostAuth::new(cfg, tid, u32::from(tid) | 1);
        conn.submit_auth_send(cid, &host.negotiate());
        AuthFlow {
            host,
            step: Step::Negotiate,
            cid,
        }
    }

    /// The CID its commands use.
    pub(crate) fn cid(&self) -> u16 {
        self.cid
    }

    /// The completion of the command in flight: the next command sent, or the end
    /// (`Ok(true)`: authenticated).
    pub(crate) fn advance(&mut self, conn: &mut Conn, cqe: Cqe) -> Result<bool, ConnError> {
        if !cqe.status().is_success() {
            log::error!(
                "nvme-tcp: Authentication {} failed: {}",
                if matches!(self.step, Step::Challenge | Step::Success1) {
                    "Receive"
                } else {
                    "Send"
                },
                cqe.status()
            );
            return Err(ConnError::Protocol {
                what: "an authentication command failed",
                cid: self.cid,
            });
        }
        let auth = |e: HostAuthError| ConnError::Auth(e.to_string());
        match std::mem::replace(&mut self.step, Step::Negotiate) {
            Step::Negotiate => {
                conn.submit_auth_recv(self.cid);
                self.step = Step::Challenge;
            }
            Step::Challenge => {
                let reply = self.host.challenge(received(conn)).map_err(auth)?;
                conn.submit_auth_send(self.cid, &reply);
                self.step = Step::Reply;
            }
            Step::Reply => {
                conn.submit_auth_recv(self.cid);
                self.step = Step::Success1;
            }
            Step::Success1 => {
                let fin = self.host.success1(received(conn));
                match fin.send {
                    Some(m) => {
                        conn.submit_auth_send(self.cid, &m);
                        self.step = Step::Last(fin.result.err());
                    }
                    None => return fin.result.map(|()| true).map_err(auth),
                }
            }
            Step::Last(None) => return Ok(true),
            Step::Last(Some(e)) => return Err(auth(e)),
        }
        Ok(false)
    }
}

/// The controller's message in the receive room: as long as its fields say (the rest of the
/// room is zeros), all of it when that cannot be told (the decoder then refuses it).
fn received(conn: &Conn) -> &[u8] {
    let b = conn.auth_data();
    &b[..controller_message_len(b).unwrap_or(b.len())]
}

/// A fresh transaction identifier.
fn transaction_id() -> u16 {
    pmio_auth::crypto::random(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .unwrap_or(1)
}

/// Runs the whole exchange on `conn` (a blocking caller: the admin queue's Connect), by
/// `deadline`.
pub(crate) fn authenticate_blocking(
    conn: &mut Conn,
    cid: u16,
    cfg: HostConfig,
    deadline: Instant,
) -> Result<(), ConnError> {
    let mut flow = AuthFlow::start(conn, cid, cfg);
    loop {
        let got = std::cell::Cell::new(None);
        conn.wait(
            deadline,
            |c, cqe| {
                if c == cid {
                    got.set(Some(cqe));
                }
            },
            |_| got.get().is_some(),
        )?;
        let Some(cqe) = got.get() else {
            return Err(ConnError::Io(std::io::ErrorKind::TimedOut.into()));
        };
        if flow.advance(conn, cqe)? {
            return Ok(());
        }
    }
}
