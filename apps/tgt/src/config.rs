//! Start-up configuration (`-c/--json`): the document `save_config` prints,
//! `{"subsystems": [{"subsystem": S, "config": [{"method": M, "params": P}, ...]}, ...]}`,
//! replayed as RPC calls in order.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::methods::Rpc;

/// One call of a configuration file, with where it came from (for error messages).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigCall {
    /// `subsystems[i] (name) config[j]`.
    pub origin: String,
    /// Method name.
    pub method: String,
    /// Parameters (`None` when absent or null).
    pub params: Option<Value>,
}

/// Parses a configuration document into calls. Subsystems whose `config` is `null` or empty are
/// skipped, as rpc.py's `load_config` does.
pub fn parse(text: &str) -> anyhow::Result<Vec<ConfigCall>> {
    let doc: Value = serde_json::from_str(text).context("not valid JSON")?;
    let Some(subsystems) = doc.get("subsystems") else {
        bail!("no \"subsystems\" member at the top level");
    };
    let Some(subsystems) = subsystems.as_array() else {
        bail!("\"subsystems\" must be an array");
    };
    let mut calls = Vec::new();
    for (i, s) in subsystems.iter().enumerate() {
        let name = s
            .get("subsystem")
            .and_then(Value::as_str)
            .with_context(|| format!("subsystems[{i}] has no \"subsystem\" name"))?;
        let config = match s.get("config") {
            None | Some(Value::Null) => continue,
            Some(Value::Array(a)) => a,
            Some(_) => bail!("subsystems[{i}] ({name}): \"config\" must be an array or null"),
        };
        for (j, entry) in config.iter().enumerate() {
            let origin = format!("subsystems[{i}] ({name}) config[{j}]");
            let method = entry
                .get("method")
                .and_then(Value::as_str)
                .with_context(|| format!("{origin}: no \"method\" string"))?;
            let params = match entry.get("params") {
                None | Some(Value::Null) => None,
                Some(p @ Value::Object(_)) => Some(p.clone()),
                Some(_) => bail!("{origin} ({method}): \"params\" must be an object"),
            };
            calls.push(ConfigCall {
                origin,
                method: method.to_string(),
                params,
            });
        }
    }
    Ok(calls)
}

/// Reads and parses the file at `path`.
pub fn load(path: &Path) -> anyhow::Result<Vec<ConfigCall>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading configuration {}", path.display()))?;
    parse(&text).with_context(|| format!("configuration {}", path.display()))
}

/// Runs every call through the RPC dispatcher; the first failure stops and is reported with
/// where it came from.
pub fn apply(rpc: &Rpc, calls: &[ConfigCall]) -> anyhow::Result<()> {
    for c in calls {
        rpc.invoke(&c.method, c.params.as_ref()).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}: {} (code {})",
                c.origin,
                c.method,
                e.message,
                e.code
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_save_config_shape() {
        let calls = parse(
            r#"{"subsystems":[{"subsystem":"scsi","config":null},{"subsystem":"nbd","config":[]},
            {"subsystem":"bdev","config":[{"method":"bdev_null_create","params":{"name":"N","num_blocks":8,"block_size":512}},
            {"method":"bdev_wait_for_examine"}]}]}"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].method, "bdev_null_create");
        assert_eq!(calls[0].origin, "subsystems[2] (bdev) config[0]");
        assert_eq!(calls[1].params, None);
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        for (doc, want) in [
            ("{", "not valid JSON"),
            ("{}", "no \"subsystems\""),
            (r#"{"subsystems":{}}"#, "must be an array"),
            (r#"{"subsystems":[{"config":[]}]}"#, "no \"subsystem\" name"),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":[{}]}]}"#,
                "no \"method\"",
            ),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":"m","params":1}]}]}"#,
                "\"params\" must be an object",
            ),
        ] {
            let e = format!("{:#}", parse(doc).unwrap_err());
            assert!(e.contains(want), "{doc}: {e}");
        }
    }
}
