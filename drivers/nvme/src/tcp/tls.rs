//! TLS 1.3 with a pre-shared key on the host's connections (`--psk`): the keyring key read
//! and derived into the identity and TLS PSK each time a queue connects (so a rotated key
//! file is used at the next reconnect), as SPDK's `nvme_tcp.c` derives them.

use std::sync::Arc;

use pmio_keyring::Key;
use pmio_tls::{ClientPsk, IdentityVersion};

use super::conn::ConnError;

/// The PSK a controller is attached with (a keyring key in the interchange format).
#[derive(Clone, Debug)]
pub struct TlsKey(pub Arc<Key>);

impl PartialEq for TlsKey {
    fn eq(&self, o: &TlsKey) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}

impl Eq for TlsKey {}

impl TlsKey {
    /// The identity and TLS PSK from `hostnqn` to `subnqn`, the key's text read now. The
    /// identity is version 0 (`NVMe0R`), what SPDK's host sends and SPDK's target finds.
    pub(crate) fn client_psk(&self, hostnqn: &str, subnqn: &str) -> Result<ClientPsk, ConnError> {
        let configured = self
            .0
            .tls_psk()
            .map_err(|e| ConnError::Tls(format!("the PSK: {e}")))?;
        ClientPsk::derive(&configured, hostnqn, subnqn, IdentityVersion::V0)
            .map_err(|e| ConnError::Tls(format!("the PSK: {e}")))
    }
}
