//! Known answers computed independently of this code: each HKDF-Expand-Label `info` built by
//! hand in a shell script and fed to `openssl kdf ... HKDF`, each digest by `openssl mac ...
//! HMAC | base64`, by `vectors.sh` beside this file; the interchange text is libnvme's
//! test/psk.c vector.

use super::*;

const HOST: &str = "nqn.2016-06.io.spdk:host1";
const SUB: &str = "nqn.2016-06.io.spdk:cnode1";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// SPDK's fixture key (doc/nvmf.md): the 32 ASCII bytes `00112233445566778899aabbccddeeff`.
fn spdk_key() -> TlsPsk {
    TlsPsk::parse("NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:").unwrap()
}

#[test]
fn sha256_chain_matches_openssls_command_line() {
    let r = RetainedPsk::derive(&spdk_key(), HOST).unwrap();
    assert_eq!(r.hash(), TlsHash::Sha256);
    assert_eq!(
        r.key(),
        hex("1fec2d4b69d3cb88e56214d464f00b168d2a635024b7a893aa6fad2840f49f2a")
    );
    let v0 = PskIdentity::new(IdentityVersion::V0, &r, HOST, SUB).unwrap();
    assert_eq!(v0.to_string(), format!("NVMe0R01 {HOST} {SUB}"));
    assert_eq!(
        &*v0.tls_psk(&r).unwrap(),
        &hex("45956d30221db43e664e8d6e78a79c31a81824cbd12acfdaca0e6032b335bbd9")
    );
    let v1 = PskIdentity::new(IdentityVersion::V1, &r, HOST, SUB).unwrap();
    assert_eq!(
        v1.to_string(),
        format!("NVMe1R01 {HOST} {SUB} JJKW5+E1EXmLneITezArMYi9DfiDT+6WgubKFa7JTxc=")
    );
    assert_eq!(
        &*v1.tls_psk(&r).unwrap(),
        &hex("01f45b2e62464e9d8abc4648e1b0ffeb332b7a62f588add26123bcc9b29c0306")
    );
}

#[test]
fn sha384_chain_matches_openssls_command_line() {
    let key = TlsPsk::new(PskHash::Sha384, &(0u8..48).collect::<Vec<_>>()).unwrap();
    let r = RetainedPsk::derive(&key, HOST).unwrap();
    assert_eq!(r.hash(), TlsHash::Sha384);
    assert_eq!(
        r.key(),
        hex(
            "f5ea5a564fe603263adfa29f56413f0ccfef77253f5f9453f3b1cbd713647df6c12a219bf58437765\
             1a9281aa441b7b3"
        )
    );
    let v0 = PskIdentity::new(IdentityVersion::V0, &r, HOST, SUB).unwrap();
    assert_eq!(
        &*v0.tls_psk(&r).unwrap(),
        &hex(
            "20efe643239f00f8e8bcc2b6899c2799127f10c8c9cb11ecf0996b5a56e5b38786e2899a275ea7396\
             8ef20008662bae6"
        )
    );
    let v1 = PskIdentity::new(IdentityVersion::V1, &r, HOST, SUB).unwrap();
    assert_eq!(
        v1.digest.as_deref(),
        Some("Kz6xmcqkitv/CCSt6Y2brx5XDylXFAHI8jrXfGnKBiUtNf2rvVpPyti9CRHHJH5H")
    );
    assert_eq!(
        &*v1.tls_psk(&r).unwrap(),
        &hex(
            "565d94312e822b56f813ca60be327459085e7f45a38266fbd580f0b735a8f6f5c7d6a63b754ef2357\
             7f44490e34fe48d"
        )
    );
}

#[test]
fn untransformed_keys_are_retained_as_they_are() {
    let k32 = TlsPsk::new(PskHash::None, &[7u8; 32]).unwrap();
    let r = RetainedPsk::derive(&k32, HOST).unwrap();
    assert_eq!((r.hash(), r.key()), (TlsHash::Sha256, &[7u8; 32][..]));
    let k48 = TlsPsk::new(PskHash::None, &[7u8; 48]).unwrap();
    assert_eq!(
        RetainedPsk::derive(&k48, HOST).unwrap().hash(),
        TlsHash::Sha384
    );
}

#[test]
fn libnvmes_interchange_vector_parses() {
    let k =
        TlsPsk::parse("NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:").unwrap();
    assert_eq!(
        k.psk(),
        hex("5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03")
    );
}

#[test]
fn identities_parse_back_and_bad_ones_are_refused() {
    let r = RetainedPsk::derive(&spdk_key(), HOST).unwrap();
    for v in [IdentityVersion::V0, IdentityVersion::V1] {
        let id = PskIdentity::new(v, &r, HOST, SUB).unwrap();
        let back = PskIdentity::parse(id.to_string().as_bytes()).unwrap();
        assert_eq!(back, id);
        assert!(back.digest_matches(&r).unwrap());
    }
    let other =
        RetainedPsk::derive(&TlsPsk::new(PskHash::Sha256, &[1; 32]).unwrap(), HOST).unwrap();
    let id = PskIdentity::new(IdentityVersion::V1, &other, HOST, SUB).unwrap();
    assert!(!id.digest_matches(&r).unwrap(), "another key's digest");
    for bad in [
        "".as_bytes(),
        b"NVMe0R01",
        b"NVMe0R01 host",
        b"NVMe0R03 host sub",
        b"NVMe2R01 host sub",
        b"NVMe0G01 host sub",
        b"NVMe1R01 host sub",
        b"NVMe0R01 host sub extra",
        b"NVMe0R01  sub",
        b"NVMe0R01 h\xffst sub",
    ] {
        assert!(
            PskIdentity::parse(bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let sha384 = PskIdentity {
        hash: TlsHash::Sha384,
        ..PskIdentity::parse(format!("NVMe0R01 {HOST} {SUB}").as_bytes()).unwrap()
    };
    assert!(matches!(
        sha384.tls_psk(&r),
        Err(PskError::HashMismatch { .. })
    ));
}

#[test]
fn a_context_over_255_bytes_is_refused() {
    let r = RetainedPsk::derive(&spdk_key(), HOST).unwrap();
    let long = format!("nqn.2016-06.io.spdk:{}", "x".repeat(200));
    let id = PskIdentity::new(IdentityVersion::V0, &r, &long, &long).unwrap();
    assert!(matches!(id.tls_psk(&r), Err(PskError::ContextTooLong(_))));
}
