//! NVMe in-band authentication (DH-HMAC-CHAP, NVMe Base 2.0 §8.13 and TP 8006) for pmio's
//! NVMe-oF target and its NVMe/TCP host.
//!
//! - [`msg`]: AUTH_Negotiate, the DH-HMAC-CHAP messages and AUTH_Failure1/2, encoded and
//!   decoded with their lengths checked.
//! - [`crypto`]: hashes, RFC 7919's DH groups, the key transformation and the responses, on
//!   OpenSSL.
//! - [`controller`]: the controller's side of one queue's exchange, command by command.
//! - [`host`]: the host's side.
//!
//! Both sides are pure state machines: the transports carry their bytes in Authentication
//! Send/Receive commands. Keys come from `pmio-keyring` and are never logged.
//!
//! ```
//! use pmio_auth::controller::{ControllerAuth, ControllerConfig};
//! use pmio_auth::crypto::{DhGroup, Hash};
//! use pmio_auth::host::{HostAuth, HostConfig};
//! use pmio_keyring::{DhchapSecret, SecretHash};
//!
//! let key = DhchapSecret::new(SecretHash::Sha256, &[1; 32])?;
//! let (hostnqn, subnqn) = ("nqn.2014-08.org.nvmexpress:host".to_string(), "nqn.x:sub".to_string());
//! let mut ctrlr = ControllerAuth::new(ControllerConfig {
//!     digests: vec![Hash::Sha256], dhgroups: vec![DhGroup::Null], host_key: key.clone(),
//!     ctrlr_key: None, hostnqn: hostnqn.clone(), subnqn: subnqn.clone() }, 1);
//! let mut host = HostAuth::new(HostConfig { key, ctrlr_key: None, hostnqn, subnqn,
//!     digests: vec![Hash::Sha256], dhgroups: vec![DhGroup::Null] }, 7, 1);
//! ctrlr.send(&host.negotiate());
//! let reply = host.challenge(&ctrlr.receive(4096))?;
//! ctrlr.send(&reply);
//! assert!(host.success1(&ctrlr.receive(4096)).result.is_ok());
//! assert!(ctrlr.is_done());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod controller;
pub mod crypto;
pub mod host;
pub mod msg;

#[cfg(test)]
mod tests;
