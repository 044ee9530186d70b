//! The two textual key formats of NVMe over Fabrics, parsed and checked once, with the secret
//! bytes kept in memory that is wiped on drop and never printed by `Debug`.
//!
//! - **DH-HMAC-CHAP secrets** (NVMe Base 2.0 §8.13.5.8, as nvme-cli's `gen-dhchap-key` writes
//!   them): `DHHC-1:xx:<base64 of key || CRC-32(key), little endian>:`, `xx` the hash the key is
//!   transformed with before use (00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512), the key 32, 48
//!   or 64 bytes (Linux's and SPDK's rule).
//! - **TLS PSKs in the interchange format** (NVMe/TCP TP 8011, nvme-cli's `gen-tls-key`):
//!   `NVMeTLSkey-1:xx:<base64 of PSK || CRC-32(PSK)>:`, `xx` 01 (SHA-256, 32 bytes), 02
//!   (SHA-384, 48 bytes) or 00 (no transform; 32 or 48 bytes), as SPDK's
//!   `nvme_tcp_parse_interchange_psk` reads them.
//!
//! Both end with a colon; whitespace after it (the newline `echo` leaves in a key file) is
//! ignored. The CRC is the IEEE CRC-32 (zlib's), stored little endian.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

/// Why a key's text was refused. The variants never carry the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The text does not start with the format's prefix (`DHHC-1:` or `NVMeTLSkey-1:`).
    #[error("not a {0} key: the text must start with {0}")]
    Prefix(&'static str),
    /// The two hex digits after the prefix are not a hash the format knows.
    #[error("unknown hash identifier {0:?}")]
    HashId(String),
    /// The text between the second and the last colon is not base64.
    #[error("the key is not valid base64")]
    Base64,
    /// The decoded key (without its CRC) has a length the format does not allow.
    #[error("a key of {0} bytes is not allowed here")]
    Length(usize),
    /// The CRC-32 after the key does not match it (a typo, or a truncated file).
    #[error("the key's CRC-32 does not match")]
    Crc,
    /// The key does not end with `:` (or has more after it than whitespace).
    #[error("the key must end with ':'")]
    Trailer,
}

/// The hash a DH-HMAC-CHAP secret is transformed with (`DHHC-1:xx:`), and the hash identifiers
/// of DH-HMAC-CHAP itself (1..=3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum SecretHash {
    /// 00: the key is used as it is.
    None = 0,
    /// 01: HMAC-SHA-256.
    Sha256 = 1,
    /// 02: HMAC-SHA-384.
    Sha384 = 2,
    /// 03: HMAC-SHA-512.
    Sha512 = 3,
}

impl SecretHash {
    /// The hash of identifier `id`.
    pub fn from_id(id: u8) -> Option<SecretHash> {
        Some(match id {
            0 => SecretHash::None,
            1 => SecretHash::Sha256,
            2 => SecretHash::Sha384,
            3 => SecretHash::Sha512,
            _ => return None,
        })
    }

    /// Bytes of its digest (0 for none).
    pub fn digest_len(self) -> usize {
        match self {
            SecretHash::None => 0,
            SecretHash::Sha256 => 32,
            SecretHash::Sha384 => 48,
            SecretHash::Sha512 => 64,
        }
    }

    /// Whether this is [`SecretHash::None`].
    pub fn is_none(self) -> bool {
        self == SecretHash::None
    }
}

/// The hash of a TLS PSK in the interchange format (`NVMeTLSkey-1:xx:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PskHash {
    /// 00: the configured PSK is used as it is (32 or 48 bytes).
    None = 0,
    /// 01: SHA-256 (a 32-byte PSK, TLS_AES_128_GCM_SHA256).
    Sha256 = 1,
    /// 02: SHA-384 (a 48-byte PSK, TLS_AES_256_GCM_SHA384).
    Sha384 = 2,
}

/// A DH-HMAC-CHAP secret: its transform hash and its key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    hash: SecretHash,
    key: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhchapSecret")
            .field("hash", &self.hash)
            .field("len", &self.key.len())
            .finish_non_exhaustive()
    }
}

/// Lengths a DH-HMAC-CHAP key may have.
const DHCHAP_KEY_LENS: [usize; 3] = [32, 48, 64];

impl DhchapSecret {
    /// The text's prefix.
    pub const PREFIX: &'static str = "DHHC-1:";

    /// A secret from its parts; the key must be 32, 48 or 64 bytes.
    pub fn new(hash: SecretHash, key: &[u8]) -> Result<DhchapSecret, FormatError> {
        if !DHCHAP_KEY_LENS.contains(&key.len()) {
            return Err(FormatError::Length(key.len()));
        }
        Ok(DhchapSecret {
            hash,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// Parses `DHHC-1:xx:<base64>:`.
    pub fn parse(text: &str) -> Result<DhchapSecret, FormatError> {
        let (id, key) = parse_interchange(text, Self::PREFIX)?;
        let hash =
            SecretHash::from_id(id).ok_or_else(|| FormatError::HashId(format!("{id:02x}")))?;
        if !DHCHAP_KEY_LENS.contains(&key.len()) {
            return Err(FormatError::Length(key.len()));
        }
        Ok(DhchapSecret { hash, key })
    }

    /// The text form (`DHHC-1:xx:<base64>:`), in memory wiped on drop.
    pub fn encode(&self) -> Zeroizing<String> {
        encode_interchange(Self::PREFIX, self.hash as u8, &self.key)
    }

    /// The hash the key is transformed with.
    pub fn hash(&self) -> SecretHash {
        self.hash
    }

    /// The key bytes (untransformed).
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

/// A TLS pre-shared key in the interchange format: its hash and the configured PSK.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPsk {
    hash: PskHash,
    psk: Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for TlsPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPsk")
            .field("hash", &self.hash)
            .field("len", &self.psk.len())
            .finish_non_exhaustive()
    }
}

impl TlsPsk {
    /// The text's prefix.
    pub const PREFIX: &'static str = "NVMeTLSkey-1:";

    /// A PSK from its parts: 32 bytes for SHA-256, 48 for SHA-384, either for none.
    pub fn new(hash: PskHash, psk: &[u8]) -> Result<TlsPsk, FormatError> {
        let ok = match hash {
            PskHash::Sha256 => psk.len() == 32,
            PskHash::Sha384 => psk.len() == 48,
            PskHash::None => psk.len() == 32 || psk.len() == 48,
        };
        if !ok {
            return Err(FormatError::Length(psk.len()));
        }
        Ok(TlsPsk {
            hash,
            psk: Zeroizing::new(psk.to_vec()),
        })
    }

    /// Parses `NVMeTLSkey-1:xx:<base64>:`.
    pub fn parse(text: &str) -> Result<TlsPsk, FormatError> {
        let (id, psk) = parse_interchange(text, Self::PREFIX)?;
        let hash = match id {
            0 => PskHash::None,
            1 => PskHash::Sha256,
            2 => PskHash::Sha384,
            _ => return Err(FormatError::HashId(format!("{id:02x}"))),
        };
        TlsPsk::new(hash, &psk)
    }

    /// The text form (`NVMeTLSkey-1:xx:<base64>:`), in memory wiped on drop.
    pub fn encode(&self) -> Zeroizing<String> {
        encode_interchange(Self::PREFIX, self.hash as u8, &self.psk)
    }

    /// The PSK's hash.
    pub fn hash(&self) -> PskHash {
        self.hash
    }

    /// The configured PSK bytes.
    pub fn psk(&self) -> &[u8] {
        &self.psk
    }
}

/// `PREFIX xx : base64(key || crc) :` → (xx, key), the CRC checked.
fn parse_interchange(
    text: &str,
    prefix: &'static str,
) -> Result<(u8, Zeroizing<Vec<u8>>), FormatError> {
    let rest = text
        .strip_prefix(prefix)
        .ok_or(FormatError::Prefix(prefix))?;
    let (id, rest) = rest
        .split_once(':')
        .ok_or(FormatError::HashId(String::new()))?;
    let id_ok = id.len() == 2 && id.bytes().all(|b| b.is_ascii_hexdigit());
    let id = id_ok
        .then(|| u8::from_str_radix(id, 16).ok())
        .flatten()
        .ok_or_else(|| FormatError::HashId(id.chars().take(2).collect()))?;
    let rest = rest.trim_end();
    let b64 = rest.strip_suffix(':').ok_or(FormatError::Trailer)?;
    if b64.contains(':') {
        return Err(FormatError::Trailer);
    }
    let mut raw = Zeroizing::new(Vec::with_capacity(b64.len()));
    STANDARD
        .decode_vec(b64, &mut raw)
        .map_err(|_| FormatError::Base64)?;
    if raw.len() < 4 {
        return Err(FormatError::Length(raw.len().saturating_sub(4)));
    }
    let n = raw.len() - 4;
    let crc = u32::from_le_bytes(raw[n..].try_into().expect("4 bytes"));
    if crc32fast::hash(&raw[..n]) != crc {
        return Err(FormatError::Crc);
    }
    Ok((id, Zeroizing::new(raw[..n].to_vec())))
}

fn encode_interchange(prefix: &str, id: u8, key: &[u8]) -> Zeroizing<String> {
    let mut raw = Zeroizing::new(Vec::with_capacity(key.len() + 4));
    raw.extend_from_slice(key);
    raw.extend_from_slice(&crc32fast::hash(key).to_le_bytes());
    let mut out = Zeroizing::new(String::with_capacity(
        prefix.len() + 4 + raw.len() * 4 / 3 + 4,
    ));
    out.push_str(prefix);
    out.push_str(&format!("{id:02x}:"));
    STANDARD.encode_string(&*raw, &mut out);
    out.push(':');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// SPDK's PSK fixture (doc/nvmf.md, test/nvmf/host/async_init.sh): the 32 ASCII bytes
    /// `00112233445566778899aabbccddeeff` with hash 01.
    const SPDK_PSK: &str = "NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:";

    #[test]
    fn tls_psk_reads_spdks_fixture() {
        let p = TlsPsk::parse(&format!("{SPDK_PSK}\n")).unwrap();
        assert_eq!(p.hash(), PskHash::Sha256);
        assert_eq!(p.psk(), b"00112233445566778899aabbccddeeff");
        assert_eq!(&*p.encode(), SPDK_PSK);
    }

    #[test]
    fn dhchap_round_trips_its_text() {
        // base64("12345678901234567890123456789012" || crc32 LE)
        let mut raw = b"12345678901234567890123456789012".to_vec();
        raw.extend_from_slice(&crc32fast::hash(&raw).to_le_bytes());
        let text = format!("DHHC-1:01:{}:", STANDARD.encode(&raw));
        let s = DhchapSecret::parse(&text).unwrap();
        assert_eq!(s.hash(), SecretHash::Sha256);
        assert_eq!(s.key(), b"12345678901234567890123456789012");
        assert_eq!(&*s.encode(), &text);
    }

    #[test]
    fn dhchap_refusals() {
        let good = DhchapSecret::new(SecretHash::Sha512, &[7u8; 64]).unwrap();
        let text = good.encode().to_string();
        assert_eq!(
            DhchapSecret::parse(&text.replacen("DHHC-1", "DHHC-2", 1)),
            Err(FormatError::Prefix("DHHC-1:"))
        );
        assert!(matches!(
            DhchapSecret::parse(&text.replacen(":03:", ":04:", 1)),
            Err(FormatError::HashId(_))
        ));
        assert!(matches!(
            DhchapSecret::parse(&text.replacen(":03:", ":3:", 1)),
            Err(FormatError::HashId(_))
        ));
        assert_eq!(
            DhchapSecret::parse(text.trim_end_matches(':')),
            Err(FormatError::Trailer)
        );
        // One base64 character changed: the CRC no longer matches.
        let mut bad = text.clone().into_bytes();
        let at = 12;
        bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            DhchapSecret::parse(std::str::from_utf8(&bad).unwrap()),
            Err(FormatError::Crc)
        );
        let short = DhchapSecret::new(SecretHash::None, &[1u8; 33]);
        assert_eq!(short, Err(FormatError::Length(33)));
        assert_eq!(
            format!("{good:?}"),
            "DhchapSecret { hash: Sha512, len: 64, .. }"
        );
    }

    #[test]
    fn tls_psk_lengths_follow_the_hash() {
        assert!(TlsPsk::new(PskHash::Sha256, &[0u8; 32]).is_ok());
        assert_eq!(
            TlsPsk::new(PskHash::Sha256, &[0u8; 48]),
            Err(FormatError::Length(48))
        );
        assert!(TlsPsk::new(PskHash::None, &[0u8; 48]).is_ok());
        let psk = TlsPsk::new(PskHash::Sha384, &[0x5a; 48]).unwrap();
        let text = psk.encode();
        assert!(text.starts_with("NVMeTLSkey-1:02:"));
        assert_eq!(TlsPsk::parse(&text).unwrap(), psk);
        assert!(matches!(
            TlsPsk::parse(&text.replacen(":02:", ":03:", 1)),
            Err(FormatError::HashId(_))
        ));
        assert_eq!(
            TlsPsk::parse(
                &DhchapSecret::new(SecretHash::None, &[1; 32])
                    .unwrap()
                    .encode()
            ),
            Err(FormatError::Prefix("NVMeTLSkey-1:"))
        );
    }

    fn secret_hash() -> impl Strategy<Value = SecretHash> {
        (0u8..4).prop_map(|i| SecretHash::from_id(i).unwrap())
    }

    proptest! {
        /// Every valid secret survives encode → parse.
        #[test]
        fn prop_dhchap_round_trip(hash in secret_hash(), len in prop::sample::select(vec![32usize, 48, 64]), seed in any::<u64>()) {
            let key: Vec<u8> = (0..len).map(|i| (seed.wrapping_mul(i as u64 + 1) >> 7) as u8).collect();
            let s = DhchapSecret::new(hash, &key).unwrap();
            let back = DhchapSecret::parse(&s.encode()).unwrap();
            prop_assert_eq!(back, s);
        }

        /// Any text at all is either refused or parses to a key of an allowed length; the
        /// parser never panics.
        #[test]
        fn prop_parsers_never_panic(text in ".{0,120}") {
            if let Ok(s) = DhchapSecret::parse(&text) {
                prop_assert!(DHCHAP_KEY_LENS.contains(&s.key().len()));
            }
            if let Ok(p) = TlsPsk::parse(&text) {
                prop_assert!(p.psk().len() == 32 || p.psk().len() == 48);
            }
        }

        /// Flipping any one bit of a valid secret's base64 part is caught (base64, CRC or
        /// length), never accepted as a different key.
        #[test]
        fn prop_one_bit_flip_refused(seed in any::<u64>(), pos in 0usize..1000, bit in 0u8..7) {
            let key: Vec<u8> = (0..48).map(|i| (seed.rotate_left(i) as u8) ^ i as u8).collect();
            let text = DhchapSecret::new(SecretHash::Sha384, &key).unwrap().encode().to_string();
            let body = 10..text.len() - 1;
            let at = body.start + pos % body.len();
            let mut b = text.clone().into_bytes();
            b[at] ^= 1 << bit;
            if let Ok(t) = std::str::from_utf8(&b)
                && let Ok(s) = DhchapSecret::parse(t)
            {
                prop_assert_eq!(s.key(), &key[..], "a changed text gave another key");
            }
        }
    }
}
