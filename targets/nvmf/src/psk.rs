//! The target's side of a secure channel's key lookup: a ClientHello's PSK identity names a
//! host and a subsystem; the key is the host's `--psk` keyring key in that subsystem, if the
//! subsystem listens on this address as a secure channel and admits the host. Both identity
//! versions are taken (`NVMe0R`, which SPDK's host sends, and TP 8018's `NVMe1R` with its
//! digest, which nvme-cli's `--identity 1` makes: spdk/spdk issue 3838); the key is derived
//! as SPDK derives it.

use std::net::SocketAddr;
use std::sync::Weak;

use pmio_tls::{PskIdentity, PskLookup, RetainedPsk};
use zeroize::Zeroizing;

use crate::tgt::NvmfTarget;

/// The lookup of one connection (accepted on `local`).
pub(crate) struct TargetPsks {
    pub tgt: Weak<NvmfTarget>,
    pub local: SocketAddr,
    pub peer: SocketAddr,
}

impl TargetPsks {
    fn refuse(&self, id: &PskIdentity, why: &str) -> Option<Zeroizing<Vec<u8>>> {
        log::warn!(
            "nvmf: TLS from {}: identity {}: {why}",
            self.peer,
            id.to_string().chars().take(600).collect::<String>()
        );
        None
    }
}

impl PskLookup for TargetPsks {
    fn tls_psk(&self, id: &PskIdentity) -> Option<Zeroizing<Vec<u8>>> {
        let tgt = self.tgt.upgrade()?;
        let key = {
            let g = tgt.lock();
            let Some(s) = g.config.subsystem(&id.subnqn) else {
                return self.refuse(id, "no such subsystem");
            };
            if !s.listener_for(self.local).is_some_and(|l| s.is_secure(l)) {
                return self.refuse(id, "the subsystem has no secure channel on this address");
            }
            if !s.admits(&id.hostnqn) {
                return self.refuse(id, "the host is not admitted");
            }
            match s.host_psk(&id.hostnqn) {
                Some(k) => std::sync::Arc::clone(&k.psk),
                None => return self.refuse(id, "the host has no PSK"),
            }
        };
        let configured = match key.tls_psk() {
            Ok(k) => k,
            Err(e) => return self.refuse(id, &format!("its key is not usable: {e}")),
        };
        let derived = RetainedPsk::derive(&configured, &id.hostnqn).and_then(|r| {
            if !id.digest_matches(&r)? {
                return Ok(None);
            }
            id.tls_psk(&r).map(Some)
        });
        match derived {
            Ok(Some(k)) => Some(k),
            Ok(None) => self.refuse(id, "its digest is not the host key's"),
            Err(e) => self.refuse(id, &e.to_string()),
        }
    }
}
