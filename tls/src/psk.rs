//! From a configured PSK to the key TLS uses (NVMe/TCP transport spec §3.6.1.3, TP 8018), as
//! SPDK (`include/spdk_internal/nvme_tcp.h`) and libnvme since linux-nvme/libnvme PR 1040 derive
//! it:
//!
//! 1. **Retained PSK**: `HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", NQNh, L)`
//!    with the hash the interchange text names (`NVMeTLSkey-1:01:` SHA-256, `02:` SHA-384);
//!    `00:` uses the configured PSK as it is.
//! 2. **PSK identity**: `NVMe0R<hh> <NQNh> <NQNc>` (TCP 1.0c, SPDK's) or, TP 8018's version 1,
//!    `NVMe1R<hh> <NQNh> <NQNc> <digest>`, the digest
//!    `base64(HMAC-H(retained, NQNh " " NQNc " NVMe-over-Fabrics"))`. `<hh>` names the cipher
//!    suite's hash: 01 TLS_AES_128_GCM_SHA256, 02 TLS_AES_256_GCM_SHA384.
//! 3. **TLS PSK**: `HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", context, L)`,
//!    the context the identity itself in version 0 and `"<hh> <digest>"` in version 1.
//!
//! `L` is the hash's length; HKDF-Expand-Label is RFC 8446's (`"tls13 "` before the label).
//! Where peers disagreed (spdk/spdk issue 3838: SPDK finds no key for an `NVMe1R01` identity
//! that nvme-cli's `--identity 1` makes; libnvme PR 1040: libnvme derived other keys than
//! SPDK before it), pmio's target accepts both identity versions and derives as SPDK does.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use openssl::hash::MessageDigest;
use openssl::md::Md;
use openssl::pkey::{Id, PKey};
use openssl::pkey_ctx::PkeyCtx;
use openssl::sign::Signer;
use zeroize::Zeroizing;

use pmio_keyring::{PskHash, TlsPsk};

/// Why a key or an identity could not be used. Never carries key bytes.
#[derive(Debug, thiserror::Error)]
pub enum PskError {
    /// OpenSSL refused a derivation.
    #[error("OpenSSL: {0}")]
    Ssl(#[from] openssl::error::ErrorStack),
    /// The PSK identity is not one of the two forms.
    #[error("not an NVMe/TCP PSK identity: {0}")]
    Identity(String),
    /// A label's context is longer than the 255 bytes HKDF-Expand-Label carries.
    #[error("a {0}-byte HKDF context is longer than 255 bytes")]
    ContextTooLong(usize),
    /// The identity names another hash than the key's.
    #[error("the identity names {identity:?}, the key is for {key:?}")]
    HashMismatch { identity: TlsHash, key: TlsHash },
}

/// The hash of a TLS 1.3 cipher suite NVMe/TCP uses, as PSK identities name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TlsHash {
    /// 01: TLS_AES_128_GCM_SHA256.
    Sha256 = 1,
    /// 02: TLS_AES_256_GCM_SHA384.
    Sha384 = 2,
}

impl TlsHash {
    /// The hash of identifier `id` (01 or 02).
    pub fn from_id(id: u8) -> Option<TlsHash> {
        match id {
            1 => Some(TlsHash::Sha256),
            2 => Some(TlsHash::Sha384),
            _ => None,
        }
    }

    /// Bytes of its digest, the length of the PSKs derived with it.
    pub fn key_len(self) -> usize {
        match self {
            TlsHash::Sha256 => 32,
            TlsHash::Sha384 => 48,
        }
    }

    /// The cipher suite (OpenSSL's TLS 1.3 name).
    pub fn cipher_suite(self) -> &'static str {
        match self {
            TlsHash::Sha256 => "TLS_AES_128_GCM_SHA256",
            TlsHash::Sha384 => "TLS_AES_256_GCM_SHA384",
        }
    }

    /// The suite's two-byte identifier (RFC 8446 B.4).
    pub fn cipher_id(self) -> [u8; 2] {
        [0x13, self as u8]
    }

    fn md(self) -> &'static openssl::md::MdRef {
        match self {
            TlsHash::Sha256 => Md::sha256(),
            TlsHash::Sha384 => Md::sha384(),
        }
    }

    fn digest(self) -> MessageDigest {
        match self {
            TlsHash::Sha256 => MessageDigest::sha256(),
            TlsHash::Sha384 => MessageDigest::sha384(),
        }
    }
}

/// A retained PSK: what an NVMe/TCP entity keeps for one host, and the cipher suite hash its
/// TLS PSKs are derived with.
pub struct RetainedPsk {
    hash: TlsHash,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for RetainedPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetainedPsk")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

impl RetainedPsk {
    /// Step 1: the retained PSK of `configured` for host `hostnqn`. The cipher suite follows
    /// the interchange hash (01, 02), or the key's length when it names none (32 bytes
    /// SHA-256, 48 SHA-384), as SPDK and libnvme choose it.
    pub fn derive(configured: &TlsPsk, hostnqn: &str) -> Result<RetainedPsk, PskError> {
        let psk = configured.psk();
        let transform = match configured.hash() {
            PskHash::None => None,
            PskHash::Sha256 => Some(TlsHash::Sha256),
            PskHash::Sha384 => Some(TlsHash::Sha384),
        };
        let hash = transform.unwrap_or(if psk.len() == 48 {
            TlsHash::Sha384
        } else {
            TlsHash::Sha256
        });
        let key = match transform {
            None => Zeroizing::new(psk.to_vec()),
            Some(h) => hkdf_expand_label(h, psk, "HostNQN", hostnqn.as_bytes(), psk.len())?,
        };
        Ok(RetainedPsk { hash, key })
    }

    /// The cipher suite hash of the TLS PSKs derived from it.
    pub fn hash(&self) -> TlsHash {
        self.hash
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// TP 8018's PSK digest: `base64(HMAC-H(retained, NQNh " " NQNc " NVMe-over-Fabrics"))`.
    pub fn digest(&self, hostnqn: &str, subnqn: &str) -> Result<String, PskError> {
        let pkey = PKey::hmac(&self.key)?;
        let mut s = Signer::new(self.hash.digest(), &pkey)?;
        for part in [hostnqn, " ", subnqn, " ", "NVMe-over-Fabrics"] {
            s.update(part.as_bytes())?;
        }
        Ok(STANDARD.encode(s.sign_to_vec()?))
    }
}

/// The two identity forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentityVersion {
    /// `NVMe0R<hh> <NQNh> <NQNc>` (NVMe/TCP 1.0c; SPDK's host sends it).
    V0,
    /// `NVMe1R<hh> <NQNh> <NQNc> <digest>` (TP 8018; nvme-cli's `--identity 1`).
    V1,
}

/// A PSK identity of a retained PSK (`R`), parsed or made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PskIdentity {
    pub version: IdentityVersion,
    pub hash: TlsHash,
    pub hostnqn: String,
    pub subnqn: String,
    /// The PSK digest (version 1).
    pub digest: Option<String>,
}

impl std::fmt::Display for PskIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = match self.version {
            IdentityVersion::V0 => 0,
            IdentityVersion::V1 => 1,
        };
        write!(
            f,
            "NVMe{v}R{:02} {} {}",
            self.hash as u8, self.hostnqn, self.subnqn
        )?;
        if let Some(d) = &self.digest {
            write!(f, " {d}")?;
        }
        Ok(())
    }
}

impl PskIdentity {
    /// Step 2: the identity of `retained` between `hostnqn` and `subnqn`.
    pub fn new(
        version: IdentityVersion,
        retained: &RetainedPsk,
        hostnqn: &str,
        subnqn: &str,
    ) -> Result<PskIdentity, PskError> {
        let digest = match version {
            IdentityVersion::V0 => None,
            IdentityVersion::V1 => Some(retained.digest(hostnqn, subnqn)?),
        };
        Ok(PskIdentity {
            version,
            hash: retained.hash,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            digest,
        })
    }

    /// Parses an identity a peer sent (the bytes of a ClientHello's pre_shared_key).
    pub fn parse(id: &[u8]) -> Result<PskIdentity, PskError> {
        let bad = || PskError::Identity(String::from_utf8_lossy(id).into_owned());
        let text = std::str::from_utf8(id).map_err(|_| bad())?;
        let mut words = text.split(' ');
        let head = words.next().ok_or_else(bad)?;
        let (version, hash) = match head.as_bytes() {
            [b'N', b'V', b'M', b'e', v @ (b'0' | b'1'), b'R', b'0', h] => {
                let hash = TlsHash::from_id(h.wrapping_sub(b'0')).ok_or_else(bad)?;
                let version = if *v == b'0' {
                    IdentityVersion::V0
                } else {
                    IdentityVersion::V1
                };
                (version, hash)
            }
            _ => return Err(bad()),
        };
        let hostnqn = words.next().filter(|w| !w.is_empty()).ok_or_else(bad)?;
        let subnqn = words.next().filter(|w| !w.is_empty()).ok_or_else(bad)?;
        let digest = match version {
            IdentityVersion::V0 => None,
            IdentityVersion::V1 => Some(words.next().filter(|w| !w.is_empty()).ok_or_else(bad)?),
        };
        if words.next().is_some() {
            return Err(bad());
        }
        Ok(PskIdentity {
            version,
            hash,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            digest: digest.map(str::to_string),
        })
    }

    /// Whether a version 1 identity's digest is `retained`'s (version 0 carries none).
    pub fn digest_matches(&self, retained: &RetainedPsk) -> Result<bool, PskError> {
        match &self.digest {
            None => Ok(true),
            Some(d) => {
                let want = retained.digest(&self.hostnqn, &self.subnqn)?;
                Ok(openssl::memcmp::eq(want.as_bytes(), d.as_bytes()) && want.len() == d.len())
            }
        }
    }

    /// Step 3: the TLS PSK this identity names, from `retained`.
    pub fn tls_psk(&self, retained: &RetainedPsk) -> Result<Zeroizing<Vec<u8>>, PskError> {
        if self.hash != retained.hash {
            return Err(PskError::HashMismatch {
                identity: self.hash,
                key: retained.hash,
            });
        }
        let context = match (&self.version, &self.digest) {
            (IdentityVersion::V1, Some(d)) => format!("{:02} {d}", self.hash as u8),
            _ => self.to_string(),
        };
        hkdf_expand_label(
            self.hash,
            &retained.key,
            "nvme-tls-psk",
            context.as_bytes(),
            self.hash.key_len(),
        )
    }
}

/// `HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, len)` (RFC 5869, RFC 8446 §7.1).
fn hkdf_expand_label(
    hash: TlsHash,
    ikm: &[u8],
    label: &str,
    context: &[u8],
    len: usize,
) -> Result<Zeroizing<Vec<u8>>, PskError> {
    let full = format!("tls13 {label}");
    let context_len =
        u8::try_from(context.len()).map_err(|_| PskError::ContextTooLong(context.len()))?;
    let mut info = Vec::with_capacity(4 + full.len() + context.len());
    info.extend_from_slice(&(len as u16).to_be_bytes());
    info.push(full.len() as u8);
    info.extend_from_slice(full.as_bytes());
    info.push(context_len);
    info.extend_from_slice(context);
    let mut ctx = PkeyCtx::new_id(Id::HKDF)?;
    ctx.derive_init()?;
    ctx.set_hkdf_md(hash.md())?;
    ctx.set_hkdf_key(ikm)?;
    ctx.add_hkdf_info(&info)?;
    let mut out = Zeroizing::new(vec![0u8; len]);
    ctx.derive(Some(&mut out))?;
    Ok(out)
}

#[cfg(test)]
mod tests;
