//! The 16-byte uuids lvstores and lvols carry, in the string form SPDK stores them in
//! (`spdk_uuid_fmt_lower`, `spdk_uuid_parse`: 36 lower-case hex-and-dash characters).

use std::fmt;
use std::hash::{BuildHasher, Hasher};

/// A uuid (RFC 4122 layout, stored as its 16 bytes in order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

/// Characters of the string form, without the NUL SPDK adds (`SPDK_UUID_STRING_LEN` - 1).
pub const UUID_STRING_LEN: usize = 36;

impl Uuid {
    /// A random version-4 uuid. The randomness is std's per-process SipHash keys
    /// (`RandomState`), which needs no file or dependency; uuids only have to be unique.
    pub fn new_v4() -> Uuid {
        let mut b = [0u8; 16];
        for half in b.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x706d_696f_6c76_6f6c); // "pmiolvol"
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Uuid(b)
    }

    /// Parses the 36-character form (either case), as `spdk_uuid_parse` does.
    pub fn parse(s: &str) -> Option<Uuid> {
        let s = s.as_bytes();
        if s.len() != UUID_STRING_LEN {
            return None;
        }
        let mut out = [0u8; 16];
        let mut nibbles = 0;
        for (i, &c) in s.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if c != b'-' {
                    return None;
                }
                continue;
            }
            let v = (c as char).to_digit(16)? as u8;
            out[nibbles / 2] |= v << (4 * (1 - nibbles % 2));
            nibbles += 1;
        }
        Some(Uuid(out))
    }

    /// The nil uuid, SPDK's "no uuid".
    pub fn is_nil(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Uuid {
    /// The lower-case 8-4-4-4-12 form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_form_round_trips() {
        let s = "d85e7013-5a99-455b-ad54-45543114a7ea";
        let u = Uuid::parse(s).unwrap();
        assert_eq!(u.0[0], 0xd8);
        assert_eq!(u.0[15], 0xea);
        assert_eq!(u.to_string(), s);
        assert_eq!(Uuid::parse(&s.to_uppercase()), Some(u));
        for bad in [
            "",
            "d85e7013-5a99-455b-ad54-45543114a7e",
            "d85e7013-5a99-455b-ad54-45543114a7eaa",
            "d85e7013x5a99-455b-ad54-45543114a7ea",
            "g85e7013-5a99-455b-ad54-45543114a7ea",
        ] {
            assert_eq!(Uuid::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn new_v4_is_version_4_and_unique() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert_ne!(a, b);
        assert_eq!(a.0[6] >> 4, 4);
        assert_eq!(a.0[8] >> 6, 2);
        assert_eq!(Uuid::parse(&a.to_string()), Some(a));
    }
}
