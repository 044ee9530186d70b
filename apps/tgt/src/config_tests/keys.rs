//! Keys in a configuration: save_config's "keyring" section loads into a fresh daemon as the
//! same keys, and a key file others may read stops the load.

use std::os::unix::fs::PermissionsExt;

use pmio_config::document::parse;
use pmio_config::load::apply;
use pmio_jsonrpc::RpcState;
use serde_json::{Value, json};

use super::testutil::{call, rpc};

const SECRET: &str = "DHHC-1:01:MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIenHzQ:\n";

fn key_file(dir: &std::path::Path, name: &str, mode: u32) -> String {
    let p = dir.join(name);
    std::fs::write(&p, SECRET).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p.display().to_string()
}

#[test]
fn saved_keys_load_into_a_fresh_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (k0, k1) = (
        key_file(dir.path(), "k0", 0o600),
        key_file(dir.path(), "k1", 0o400),
    );
    let (_re, r) = rpc(RpcState::Runtime);
    for (name, path) in [("key0", &k0), ("key1", &k1)] {
        let add = json!({"name": name, "path": path});
        assert_eq!(call(&r, "keyring_file_add_key", add).unwrap(), json!(true));
    }
    let keys = call(&r, "keyring_get_keys", Value::Null).unwrap();
    assert!(!keys.to_string().contains("MTIzNDU2"), "{keys}");
    let section = call(&r, "framework_get_config", json!({"name": "keyring"})).unwrap();
    assert_eq!(
        section,
        json!([
            {"method": "keyring_file_add_key", "params": {"name": "key0", "path": k0}},
            {"method": "keyring_file_add_key", "params": {"name": "key1", "path": k1}},
        ])
    );
    let subsystems = call(&r, "framework_get_subsystems", Value::Null).unwrap();
    assert_eq!(subsystems[0]["subsystem"], "keyring", "{subsystems}");

    let saved = json!({"subsystems": [{"subsystem": "keyring", "config": section}]});
    let (_re2, r2) = rpc(RpcState::Runtime);
    apply(&r2, &parse(&saved.to_string()).unwrap()).unwrap();
    assert_eq!(call(&r2, "keyring_get_keys", Value::Null).unwrap(), keys);

    // A key file made readable by its group stops a load before anything is added.
    std::fs::set_permissions(&k1, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (_re3, r3) = rpc(RpcState::Runtime);
    let e = apply(&r3, &parse(&saved.to_string()).unwrap()).unwrap_err();
    assert!(
        format!("{e:#}").contains("invalid permissions for key file"),
        "{e:#}"
    );
    assert_eq!(
        call(&r3, "keyring_get_keys", Value::Null).unwrap(),
        json!([])
    );
}

/// `nvmf_set_config`'s DH-HMAC-CHAP lists narrow what the target's authentication may choose,
/// and save_config writes them back; unknown names stop the load.
#[test]
fn nvmf_set_config_narrows_the_dhchap_choice_and_is_saved() {
    let (_re, r) = rpc(RpcState::Runtime);
    let cfg = json!({"subsystems": [{"subsystem": "nvmf", "config": [
        {"method": "nvmf_set_config", "params": {"dhchap_digests": ["sha512"],
            "dhchap_dhgroups": ["ffdhe3072", "null"]}}]}]});
    apply(&r, &parse(&cfg.to_string()).unwrap()).unwrap();
    let policy = r.target.nvmf.tgt.config().dhchap;
    assert_eq!(policy.digests, [pmio_auth::crypto::Hash::Sha512]);
    let section = call(&r, "framework_get_config", json!({"name": "nvmf"})).unwrap();
    assert_eq!(
        section[0],
        json!({"method": "nvmf_set_config", "params": {"dhchap_digests": ["sha512"],
            "dhchap_dhgroups": ["ffdhe3072", "null"]}})
    );
    let bad = json!({"subsystems": [{"subsystem": "nvmf", "config": [
        {"method": "nvmf_set_config", "params": {"dhchap_digests": ["md5"]}}]}]});
    let (_re2, r2) = rpc(RpcState::Runtime);
    assert!(apply(&r2, &parse(&bad.to_string()).unwrap()).is_err());
    assert_eq!(
        r2.target.nvmf.tgt.config().dhchap,
        pmio_nvmf::DhchapPolicy::default()
    );
}
