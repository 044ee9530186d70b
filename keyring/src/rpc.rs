//! SPDK's keyring methods (feature `rpc`): `keyring_file_add_key`, `keyring_file_remove_key`,
//! `keyring_get_keys`, and the "keyring" section of `save_config` (one `keyring_file_add_key`
//! per key, name and path: never the key's text).
//!
//! The methods run on a [`KeyringRpc`], which holds the keyring they change (the daemon's one,
//! which its NVMe-oF target and NVMe host look keys up in). Failures answer as SPDK's do: the negated errno and its
//! text (`-1 "Operation not permitted"` for a key file others may read).

use pmio_jsonrpc::decl;
use pmio_jsonrpc::{Method, RUNTIME, Registry, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

use crate::keyring::{KeyError, Keyring};

/// What the keyring methods run on.
#[derive(Clone, Default)]
pub struct KeyringRpc {
    /// The keyring they change.
    pub keyring: Arc<Keyring>,
}

/// `keyring_file_add_key` parameters. Unknown keys are ignored, as SPDK decodes this method's
/// parameters (`spdk_json_decode_object_relaxed`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FileAddKey {
    /// Name of the key.
    pub name: String,
    /// Absolute path of the file holding the key (owner-only permissions).
    pub path: String,
}

/// `keyring_file_remove_key` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FileRemoveKey {
    /// Name of the key.
    pub name: String,
}

/// The keyring methods (runtime, as SPDK's) and the "keyring" section.
pub fn methods() -> Registry<KeyringRpc> {
    let mut r: Registry<KeyringRpc> = [
        Method::new("keyring_file_add_key", RUNTIME, keyring_file_add_key),
        Method::new("keyring_file_remove_key", RUNTIME, keyring_file_remove_key),
        Method::new("keyring_get_keys", RUNTIME, keyring_get_keys),
    ]
    .into_iter()
    .collect();
    r.section("keyring", &[], config);
    r.list_always("keyring");
    r
}

fn key_error(e: &KeyError) -> RpcError {
    RpcError::errno(e.errno())
}

fn decode<T: serde::de::DeserializeOwned>(params: Option<&Value>) -> Result<T, RpcError> {
    // SPDK answers a decode failure of these methods with -32602 and strerror(EINVAL).
    decl::decode(params).map_err(|e| {
        log::error!("keyring: bad parameters: {e}");
        RpcError::new(pmio_jsonrpc::code::INVALID_PARAMS, "Invalid argument")
    })
}

fn keyring_file_add_key(
    rpc: &KeyringRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: FileAddKey = decode(params)?;
    rpc.keyring
        .file_add_key(&p.name, std::path::Path::new(&p.path))
        .map_err(|e| key_error(&e))?;
    Ok(Value::Bool(true))
}

fn keyring_file_remove_key(
    rpc: &KeyringRpc,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: FileRemoveKey = decode(params)?;
    rpc.keyring
        .file_remove_key(&p.name)
        .map_err(|e| key_error(&e))?;
    Ok(Value::Bool(true))
}

fn keyring_get_keys(
    rpc: &KeyringRpc,
    name: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(name, params)?;
    let keys = rpc.keyring.keys().into_iter().map(|k| {
        let mut v = json!({
            "name": k.name,
            "module": k.module,
            "removed": k.removed,
            "probed": k.probed,
            "refcnt": k.refcnt,
        });
        // SPDK asks the module for its part (the path) only of a key still in the keyring.
        if !k.removed {
            v["path"] = Value::String(k.path.display().to_string());
        }
        v
    });
    Ok(Value::Array(keys.collect()))
}

/// The "keyring" section: one `keyring_file_add_key` per key in the keyring.
pub fn config(rpc: &KeyringRpc) -> Vec<Value> {
    rpc.keyring
        .keys()
        .into_iter()
        .filter(|k| !k.removed)
        .map(|k| {
            let p = FileAddKey {
                name: k.name,
                path: k.path.display().to_string(),
            };
            json!({"method": "keyring_file_add_key", "params": p})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{DhchapSecret, SecretHash};
    use pmio_jsonrpc::RpcState;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn methods_answer_as_spdk_and_never_show_the_secret() {
        let rpc = KeyringRpc::default();
        let m = methods();
        let dir = tempfile::tempdir().unwrap();
        let text = DhchapSecret::new(SecretHash::Sha384, &[0x42; 48])
            .unwrap()
            .encode()
            .to_string();
        let path = dir.path().join("key0");
        std::fs::write(&path, &text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let call = |name: &str, p: Value| m.call(&rpc, RpcState::Runtime, name, Some(&p));
        let add = json!({"name": "key0", "path": path.display().to_string()});
        let e = call("keyring_file_add_key", add.clone()).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-1, "Operation not permitted")
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            call("keyring_file_add_key", add.clone()).unwrap(),
            json!(true)
        );
        let e = call("keyring_file_add_key", add).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (-17, "File exists"));
        let e = call("keyring_file_add_key", json!({"name": "k"})).unwrap_err();
        assert_eq!(e.code, -32602);
        let keys = m
            .call(&rpc, RpcState::Runtime, "keyring_get_keys", None)
            .unwrap();
        assert_eq!(
            keys,
            json!([{"name": "key0", "module": "keyring_file", "removed": false, "probed": false,
                    "refcnt": 1, "path": path.display().to_string()}])
        );
        let saved = serde_json::to_string(&config(&rpc)).unwrap();
        assert!(saved.contains("keyring_file_add_key"));
        let b64 = &text[10..text.len() - 1];
        assert!(!keys.to_string().contains(b64) && !saved.contains(b64));
        // A user (a host entry, a controller) holds the key while it is removed.
        let held = rpc.keyring.get("key0").unwrap();
        assert_eq!(
            call("keyring_file_remove_key", json!({"name": "key0"})).unwrap(),
            json!(true)
        );
        let e = call("keyring_file_remove_key", json!({"name": "key0"})).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-2, "No such file or directory")
        );
        assert!(config(&rpc).is_empty());
        let keys = m
            .call(&rpc, RpcState::Runtime, "keyring_get_keys", None)
            .unwrap();
        assert_eq!(
            keys,
            json!([{"name": "key0", "module": "keyring_file", "removed": true, "probed": false,
                    "refcnt": 1}])
        );
        drop(held);
        let keys = m.call(&rpc, RpcState::Runtime, "keyring_get_keys", None);
        assert_eq!(keys.unwrap(), json!([]));
    }

    #[test]
    fn add_key_ignores_unknown_parameters_as_spdk() {
        let rpc = KeyringRpc::default();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let text = DhchapSecret::new(SecretHash::None, &[1; 32])
            .unwrap()
            .encode();
        std::fs::write(&path, &*text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        let p = json!({"name": "k", "path": path.display().to_string(), "extra": 1});
        let r = methods().call(&rpc, RpcState::Runtime, "keyring_file_add_key", Some(&p));
        assert_eq!(r.unwrap(), json!(true));
        assert_eq!(
            rpc.keyring.get("k").unwrap().dhchap().unwrap().key(),
            &[1; 32]
        );
    }
}
