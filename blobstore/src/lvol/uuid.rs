//! The 16-byte uuids lvstores and lvols carry, in the string form SPDK stores them in
//! (`spdk_uuid_fmt_lower`, `spdk_uuid_parse`: 36 lower-case hex-and-dash characters).

/// pmio's uuid (the bdev layer's): parsed and printed in the string form SPDK stores.
pub use pmio::Uuid;

/// Characters of the string form, without the NUL SPDK adds (`SPDK_UUID_STRING_LEN` - 1).
pub const UUID_STRING_LEN: usize = 36;

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
