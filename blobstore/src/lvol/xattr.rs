//! The xattrs SPDK's lib/lvol keeps on disk, encoded and checked as it does (lvol.c):
//!
//! | blob | xattr | value |
//! |---|---|---|
//! | the super blob | `uuid` | the lvstore's uuid, 36 characters and a NUL (37 bytes) |
//! | the super blob | `name` | the lvstore's name and a NUL (`strnlen + 1`) |
//! | an lvol | `uuid` | its uuid, 37 bytes as above |
//! | an lvol | `name` | at creation 64 bytes, the name NUL-padded (`lvol_get_xattr_value` gives `SPDK_LVOL_NAME_MAX`); after a rename the name and a NUL |

use super::uuid::{UUID_STRING_LEN, Uuid};
use crate::{BlobId, Error, Result};

/// The xattr holding a name.
pub const XATTR_NAME: &str = "name";
/// The xattr holding a uuid.
pub const XATTR_UUID: &str = "uuid";
/// Bytes of an lvstore name with its NUL, at most (`SPDK_LVS_NAME_MAX`).
pub const LVS_NAME_MAX: usize = 64;
/// Bytes of an lvol name with its NUL, at most (`SPDK_LVOL_NAME_MAX`).
pub const LVOL_NAME_MAX: usize = 64;
/// The blobstore type of an lvstore (`"LVOLSTORE"`, zero-padded).
pub const LVOLSTORE_BSTYPE: [u8; 16] = *b"LVOLSTORE\0\0\0\0\0\0\0";

/// Checks a name SPDK would accept: 1 to `max - 1` bytes (room for the NUL), no NUL inside
/// (`spdk_lvs_init`, `lvs_verify_lvol_name`).
pub(crate) fn check_name(name: &str, max: usize) -> Result<()> {
    let reason = if name.is_empty() {
        "is empty"
    } else if name.len() >= max {
        "is too long (at most 63 bytes)"
    } else if name.contains('\0') {
        "contains a NUL"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        name: name.to_string(),
        reason,
    })
}

/// A uuid's value: the lower-case string and its NUL.
pub(crate) fn uuid_value(u: &Uuid) -> Vec<u8> {
    let mut v = u.to_string().into_bytes();
    v.push(0);
    v
}

/// A uuid as SPDK accepts it: exactly 37 bytes, NUL last, parsable.
pub(crate) fn parse_uuid_value(v: &[u8]) -> Option<Uuid> {
    let (s, nul) = v.split_at_checked(UUID_STRING_LEN)?;
    if nul != [0] {
        return None;
    }
    Uuid::parse(std::str::from_utf8(s).ok()?)
}

/// A name's value as `set_xattr` after a rename (and the lvstore's) writes it.
pub(crate) fn name_value(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

/// An lvol name's value as `spdk_lvol_create` writes it: padded to 64 bytes.
pub(crate) fn lvol_name_value_at_create(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.resize(LVOL_NAME_MAX, 0);
    v
}

/// A name as SPDK reads it back (`snprintf("%s", attr)` after checking the length): up
/// to the first NUL. `None` if the value is longer than `max`, has no NUL, or is not text.
pub(crate) fn parse_name_value(v: &[u8], max: usize) -> Option<String> {
    if v.len() > max {
        return None;
    }
    let end = v.iter().position(|&b| b == 0)?;
    String::from_utf8(v[..end].to_vec()).ok()
}

/// The error for an lvol blob without a usable name (SPDK fails the load with -EINVAL).
pub(crate) fn bad_lvol_name(id: BlobId) -> Error {
    Error::corrupt(
        id,
        "lvol has no name xattr of at most 64 bytes ending in a NUL",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_spdks() {
        let u = Uuid::parse("d85e7013-5a99-455b-ad54-45543114a7ea").unwrap();
        let v = uuid_value(&u);
        assert_eq!(v.len(), 37, "SPDK_UUID_STRING_LEN");
        assert_eq!(v[36], 0);
        assert_eq!(parse_uuid_value(&v), Some(u));
        assert_eq!(parse_uuid_value(&v[..36]), None);
        let mut long = v.clone();
        long.push(0);
        assert_eq!(parse_uuid_value(&long), None);

        let n = lvol_name_value_at_create("thin");
        assert_eq!(n.len(), 64);
        assert_eq!(&n[..5], b"thin\0");
        assert_eq!(parse_name_value(&n, LVOL_NAME_MAX).as_deref(), Some("thin"));
        assert_eq!(name_value("lvs0"), b"lvs0\0");
        assert_eq!(
            parse_name_value(b"lvs0\0", LVS_NAME_MAX).as_deref(),
            Some("lvs0")
        );
        assert_eq!(parse_name_value(b"lvs0", LVS_NAME_MAX), None);
        assert_eq!(parse_name_value(&[b'a'; 65], LVS_NAME_MAX), None);
    }

    #[test]
    fn names_spdk_refuses() {
        let cases: [(&str, bool); 5] = [
            ("", false),
            ("a", true),
            (&"x".repeat(63), true),
            (&"x".repeat(64), false),
            ("a\0b", false),
        ];
        for (name, ok) in cases {
            assert_eq!(check_name(name, LVOL_NAME_MAX).is_ok(), ok, "{name:?}");
        }
    }
}
