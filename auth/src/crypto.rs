//! DH-HMAC-CHAP's cryptography on OpenSSL (NVMe Base 2.0 §8.13.5.2–§8.13.5.7): the hash
//! functions, the finite-field DH groups of RFC 7919, the key transformation and the responses.
//!
//! - A secret's key is transformed before use: `Kh = HMAC-H(key, NQN || "NVMe-over-Fabrics")`
//!   with the hash its `DHHC-1:xx:` names (none: the key as it is).
//! - With a DH group, the challenge is augmented: `Ca = HMAC-H(H(g^xy mod p), C)`.
//! - A response is `HMAC-H(K, Ca || seq (LE32) || T_ID (LE16) || SC_C || "HostHost" or
//!   "Controller" || NQN1 || 0x00 || NQN2)`: the host's over host NQN then subsystem NQN with
//!   the host key, the controller's the other way round with the controller key.

use openssl::bn::BigNum;
use openssl::derive::Deriver;
use openssl::dh::Dh;
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::sign::Signer;
use zeroize::Zeroizing;

use pmio_keyring::{DhchapSecret, SecretHash};

/// A failure of the cryptography itself (OpenSSL), or a peer's DH value that is no group element.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    /// OpenSSL refused an operation.
    #[error("OpenSSL: {0}")]
    Ssl(#[from] openssl::error::ErrorStack),
    /// The peer's DH public value is outside 2..p-2 or of the wrong length.
    #[error("the peer's DH public value is not valid in {0}")]
    BadPublic(&'static str),
}

/// The hash functions of DH-HMAC-CHAP (identifiers of NVMe Base 2.0 Figure 447).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Hash {
    /// 01h.
    Sha256 = 1,
    /// 02h.
    Sha384 = 2,
    /// 03h.
    Sha512 = 3,
}

impl Hash {
    /// Every hash, strongest first (the order a controller picks in, as SPDK's).
    pub const STRONGEST_FIRST: [Hash; 3] = [Hash::Sha512, Hash::Sha384, Hash::Sha256];

    /// The hash of identifier `id`.
    pub fn from_id(id: u8) -> Option<Hash> {
        Some(match id {
            1 => Hash::Sha256,
            2 => Hash::Sha384,
            3 => Hash::Sha512,
            _ => return None,
        })
    }

    /// The name SPDK's RPCs use (`sha256`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Hash::Sha256 => "sha256",
            Hash::Sha384 => "sha384",
            Hash::Sha512 => "sha512",
        }
    }

    /// The hash named `name`.
    pub fn from_name(name: &str) -> Option<Hash> {
        Hash::STRONGEST_FIRST.into_iter().find(|h| h.name() == name)
    }

    /// Bytes of its digest: the length of challenges and responses.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
            Hash::Sha512 => 64,
        }
    }

    fn md(self) -> MessageDigest {
        match self {
            Hash::Sha256 => MessageDigest::sha256(),
            Hash::Sha384 => MessageDigest::sha384(),
            Hash::Sha512 => MessageDigest::sha512(),
        }
    }
}

/// The DH groups of DH-HMAC-CHAP: none, or RFC 7919's finite-field groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DhGroup {
    /// 00h: no DH exchange (the challenge is not augmented).
    Null = 0,
    /// 01h.
    Ffdhe2048 = 1,
    /// 02h.
    Ffdhe3072 = 2,
    /// 03h.
    Ffdhe4096 = 3,
    /// 04h.
    Ffdhe6144 = 4,
    /// 05h.
    Ffdhe8192 = 5,
}

impl DhGroup {
    /// Every group, strongest first (the order a controller picks in, as SPDK's).
    pub const STRONGEST_FIRST: [DhGroup; 6] = [
        DhGroup::Ffdhe8192,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe2048,
        DhGroup::Null,
    ];

    /// The group of identifier `id`.
    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::STRONGEST_FIRST
            .into_iter()
            .find(|g| *g as u8 == id)
    }

    /// The name SPDK's RPCs use (`null`, `ffdhe2048`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// The group named `name`.
    pub fn from_name(name: &str) -> Option<DhGroup> {
        DhGroup::STRONGEST_FIRST
            .into_iter()
            .find(|g| g.name() == name)
    }

    /// Bytes of a public value (and of the shared secret): the prime's size.
    pub fn public_len(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }

    /// RFC 7919's parameters, as OpenSSL writes them (`openssl genpkey -genparam -algorithm DH
    /// -pkeyopt group:ffdheNNNN`).
    fn params_pem(self) -> Option<&'static str> {
        Some(match self {
            DhGroup::Null => return None,
            DhGroup::Ffdhe2048 => include_str!("ffdhe/ffdhe2048.pem"),
            DhGroup::Ffdhe3072 => include_str!("ffdhe/ffdhe3072.pem"),
            DhGroup::Ffdhe4096 => include_str!("ffdhe/ffdhe4096.pem"),
            DhGroup::Ffdhe6144 => include_str!("ffdhe/ffdhe6144.pem"),
            DhGroup::Ffdhe8192 => include_str!("ffdhe/ffdhe8192.pem"),
        })
    }
}

/// One side's ephemeral DH key in a group (never the null group).
pub struct DhKey {
    group: DhGroup,
    dh: Dh<Private>,
    /// The same key for EVP's key exchange.
    pkey: PKey<Private>,
}

impl DhKey {
    /// A fresh key pair in `group`; `None` for the null group.
    pub fn generate(group: DhGroup) -> Result<Option<DhKey>, CryptoError> {
        let Some(pem) = group.params_pem() else {
            return Ok(None);
        };
        let dh = Dh::params_from_pem(pem.as_bytes())?.generate_key()?;
        let pkey = PKey::from_dh(dh)?;
        Ok(Some(DhKey {
            group,
            dh: pkey.dh()?,
            pkey,
        }))
    }

    /// The public value, big endian, padded to the prime's size.
    pub fn public(&self) -> Result<Vec<u8>, CryptoError> {
        let len = self.group.public_len() as i32;
        Ok(self.dh.public_key().to_vec_padded(len)?)
    }

    /// The shared secret with the peer's public value, padded to the prime's size (as Linux's
    /// kpp and SPDK's `EVP_PKEY_CTX_set_dh_pad` give it). A value outside 2..p-2 is refused.
    ///
    /// Derived with EVP (which reports the secret's true length) rather than `DH_compute_key`:
    /// OpenSSL 3.0's legacy call returned a secret with a leading zero byte moved to its end
    /// (its length unchanged), which Linux's nvmet then refused as a host response mismatch
    /// in 1 exchange in 256.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
        let len = self.group.public_len();
        let bad = || CryptoError::BadPublic(self.group.name());
        if peer.len() != len {
            return Err(bad());
        }
        let y = BigNum::from_slice(peer)?;
        let mut p_minus_1 = self.dh.prime_p().to_owned()?;
        p_minus_1.sub_word(1)?;
        let one = BigNum::from_u32(1)?;
        if y <= one || y >= p_minus_1 {
            return Err(bad());
        }
        let peer_dh = Dh::from_pqg(
            self.dh.prime_p().to_owned()?,
            self.dh.prime_q().map(|q| q.to_owned()).transpose()?,
            self.dh.generator().to_owned()?,
        )?
        .set_public_key(y)?;
        let peer_key = PKey::from_dh(peer_dh)?;
        let mut deriver = Deriver::new(&self.pkey)?;
        deriver.set_peer(&peer_key).map_err(|_| bad())?;
        let raw = Zeroizing::new(deriver.derive_to_vec().map_err(|_| bad())?);
        if raw.len() > len {
            return Err(bad());
        }
        let mut out = Zeroizing::new(vec![0u8; len - raw.len()]);
        out.extend_from_slice(&raw);
        Ok(out)
    }
}

fn hmac(hash: Hash, key: &[u8], parts: &[&[u8]]) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
    let pkey = PKey::hmac(key)?;
    let mut s = Signer::new(hash.md(), &pkey)?;
    for p in parts {
        s.update(p)?;
    }
    Ok(Zeroizing::new(s.sign_to_vec()?))
}

/// The transformed key of `secret` for `nqn` (§8.13.5.7).
pub fn transform_key(secret: &DhchapSecret, nqn: &str) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
    let hash = match secret.hash() {
        SecretHash::None => return Ok(Zeroizing::new(secret.key().to_vec())),
        SecretHash::Sha256 => Hash::Sha256,
        SecretHash::Sha384 => Hash::Sha384,
        SecretHash::Sha512 => Hash::Sha512,
    };
    hmac(hash, secret.key(), &[nqn.as_bytes(), b"NVMe-over-Fabrics"])
}

/// Who a response is computed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The host's response to the controller's challenge ("HostHost").
    Host,
    /// The controller's response to the host's challenge ("Controller").
    Controller,
}

/// What a response covers besides the key.
pub struct ResponseInput<'a> {
    pub hash: Hash,
    pub role: Role,
    /// The challenge answered.
    pub challenge: &'a [u8],
    /// The sequence number sent with it.
    pub seqnum: u32,
    pub tid: u16,
    /// The DH shared secret (`None` with the null group).
    pub dh_secret: Option<&'a [u8]>,
    pub hostnqn: &'a str,
    pub subnqn: &'a str,
}

/// The response to a challenge (§8.13.5.2, §8.13.5.4) with `secret`.
pub fn response(
    secret: &DhchapSecret,
    r: &ResponseInput<'_>,
) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
    let (word, nqn1, nqn2): (&[u8], &str, &str) = match r.role {
        Role::Host => (b"HostHost", r.hostnqn, r.subnqn),
        Role::Controller => (b"Controller", r.subnqn, r.hostnqn),
    };
    let key = transform_key(secret, nqn1)?;
    let ca = match r.dh_secret {
        None => Zeroizing::new(r.challenge.to_vec()),
        Some(s) => {
            let digest = openssl::hash::hash(r.hash.md(), s)?;
            hmac(r.hash, &digest, &[r.challenge])?
        }
    };
    hmac(
        r.hash,
        &key,
        &[
            &ca,
            &r.seqnum.to_le_bytes(),
            &r.tid.to_le_bytes(),
            &[0u8], // SC_C: no secure channel concatenation
            word,
            nqn1.as_bytes(),
            &[0u8],
            nqn2.as_bytes(),
        ],
    )
}

/// `n` random bytes (challenges, transaction ids, sequence numbers).
pub fn random(n: usize) -> Result<Vec<u8>, CryptoError> {
    let mut b = vec![0u8; n];
    openssl::rand::rand_bytes(&mut b)?;
    Ok(b)
}

/// Whether `a` equals `b`, in time that does not depend on where they differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && openssl::memcmp::eq(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::bn::BigNumContext;

    #[test]
    fn the_groups_are_rfc_7919s() {
        let mut ctx = BigNumContext::new().unwrap();
        for g in DhGroup::STRONGEST_FIRST {
            let Some(pem) = g.params_pem() else { continue };
            let dh = Dh::params_from_pem(pem.as_bytes()).unwrap();
            let p = dh.prime_p();
            assert_eq!(p.num_bits() as usize, g.public_len() * 8, "{}", g.name());
            assert_eq!(dh.generator().to_dec_str().unwrap().to_string(), "2");
            // RFC 7919's primes have their top and bottom 64 bits set, and are safe primes.
            let b = p.to_vec();
            assert!(b[..8].iter().chain(&b[b.len() - 8..]).all(|x| *x == 0xff));
            if g == DhGroup::Ffdhe2048 {
                assert!(p.is_prime(20, &mut ctx).unwrap());
            }
        }
    }

    #[test]
    fn both_sides_derive_the_same_secret_and_bad_values_are_refused() {
        let a = DhKey::generate(DhGroup::Ffdhe2048).unwrap().unwrap();
        let b = DhKey::generate(DhGroup::Ffdhe2048).unwrap().unwrap();
        let (pa, pb) = (a.public().unwrap(), b.public().unwrap());
        assert_eq!(pa.len(), 256);
        let s1 = a.shared_secret(&pb).unwrap();
        assert_eq!(*s1, *b.shared_secret(&pa).unwrap());
        assert_eq!(s1.len(), 256);
        let mut one = vec![0u8; 256];
        one[255] = 1;
        assert!(a.shared_secret(&one).is_err());
        assert!(a.shared_secret(&[0xff; 256]).is_err());
        assert!(a.shared_secret(&pb[1..]).is_err());
        assert!(DhKey::generate(DhGroup::Null).unwrap().is_none());
    }

    /// The shared secret equals y^x mod p computed from the definition, padded to the prime's
    /// size, when it begins with a zero byte (1 exchange in 256): Linux's kpp and SPDK pad it
    /// so, and a response over it otherwise does not verify (Linux's nvmet found this).
    #[test]
    fn a_shared_secret_with_a_leading_zero_is_padded() {
        let mut ctx = BigNumContext::new().unwrap();
        let peer = DhKey::generate(DhGroup::Ffdhe2048).unwrap().unwrap();
        let y = peer.public().unwrap();
        let params =
            Dh::params_from_pem(DhGroup::Ffdhe2048.params_pem().unwrap().as_bytes()).unwrap();
        let (p, g) = (params.prime_p(), params.generator());
        let mut x = BigNum::from_slice(&random(32).unwrap()).unwrap();
        let mut tries = 0;
        loop {
            tries += 1;
            assert!(tries < 20_000, "no secret with a zero first byte");
            x.add_word(1).unwrap();
            let mut want = BigNum::new().unwrap();
            want.mod_exp(peer.dh.public_key(), &x, p, &mut ctx).unwrap();
            let want = want.to_vec_padded(256).unwrap();
            if want[0] != 0 {
                continue;
            }
            let mut public = BigNum::new().unwrap();
            public.mod_exp(g, &x, p, &mut ctx).unwrap();
            let dh = Dh::from_pqg(p.to_owned().unwrap(), None, g.to_owned().unwrap())
                .unwrap()
                .set_key(public, x.to_owned().unwrap())
                .unwrap();
            let pkey = PKey::from_dh(dh).unwrap();
            let mine = DhKey {
                group: DhGroup::Ffdhe2048,
                dh: pkey.dh().unwrap(),
                pkey,
            };
            assert_eq!(*mine.shared_secret(&y).unwrap(), want);
            // And the peer, from this side's public value, derives the same bytes.
            assert_eq!(*peer.shared_secret(&mine.public().unwrap()).unwrap(), want);
            break;
        }
    }

    /// The transformation against an HMAC computed here from its definition, and a response
    /// that changes with every input it covers.
    #[test]
    fn responses_cover_every_input() {
        let s = DhchapSecret::new(SecretHash::Sha256, &[7; 32]).unwrap();
        let k = transform_key(&s, "nqn.host").unwrap();
        let want = hmac(Hash::Sha256, &[7; 32], &[b"nqn.hostNVMe-over-Fabrics"]).unwrap();
        assert_eq!(*k, *want);
        let plain = DhchapSecret::new(SecretHash::None, &[7; 32]).unwrap();
        assert_eq!(&*transform_key(&plain, "x").unwrap(), &[7; 32]);

        let c = [3u8; 48];
        let base = ResponseInput {
            hash: Hash::Sha384,
            role: Role::Host,
            challenge: &c,
            seqnum: 1,
            tid: 2,
            dh_secret: None,
            hostnqn: "h",
            subnqn: "s",
        };
        let r0 = response(&s, &base).unwrap();
        assert_eq!(r0.len(), 48);
        let other = [4u8; 48];
        let variants = [
            ResponseInput { seqnum: 9, ..base },
            ResponseInput { tid: 9, ..base },
            ResponseInput {
                role: Role::Controller,
                ..base
            },
            ResponseInput {
                challenge: &other,
                ..base
            },
            ResponseInput {
                dh_secret: Some(&[1; 256]),
                ..base
            },
            ResponseInput {
                hostnqn: "h2",
                ..base
            },
            ResponseInput {
                subnqn: "s2",
                ..base
            },
        ];
        for v in &variants {
            assert_ne!(*response(&s, v).unwrap(), *r0);
        }
        assert_ne!(*response(&plain, &base).unwrap(), *r0);
    }
}
