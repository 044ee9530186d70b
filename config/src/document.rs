//! The configuration document `save_config` prints and `-c` / `load_config` read:
//! `{"subsystems": [{"subsystem": S, "config": [{"method": M, "params": P}, ...] | null}, ...]}`.
//!
//! The file comes from elsewhere (another team's SPDK, a hand edit, an attacker's upload), so it
//! is read with limits checked before anything is built from it: its size, its nesting depth
//! (scanned on the bytes, before serde recurses), the number of sections and of calls. Every
//! error names where in the document it is.

use anyhow::{Context, bail};
use serde_json::Value;

use pmio_jsonrpc::frame::{Decoder, FrameError};

/// Largest configuration file read (a saved SPDK target with thousands of subsystems is a few
/// MiB).
pub const MAX_FILE_BYTES: usize = 64 << 20;
/// Deepest nesting of objects and arrays: SPDK's documents nest 7 levels (document, sections,
/// section, calls, call, params, namespace or listen_address, dhchap lists).
pub const MAX_DEPTH: usize = 32;
/// Most sections: SPDK v25.09 has about 20 subsystems.
pub const MAX_SECTIONS: usize = 1024;
/// Most calls over all sections: 1,024 subsystems (SPDK's default `max_subsystems`) with a few
/// dozen namespaces, hosts and listeners each.
pub const MAX_CALLS: usize = 100_000;

/// One call of a configuration file, with where it came from (for error messages).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigCall {
    /// `subsystems[i] (name) config[j]`.
    pub origin: String,
    /// The section (SPDK subsystem) it is in.
    pub section: String,
    /// Method name.
    pub method: String,
    /// Parameters (`None` when absent or null).
    pub params: Option<Value>,
}

/// One `{"subsystem": S, "config": ...}` member.
#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    /// Index in `subsystems`.
    pub index: usize,
    /// Subsystem name.
    pub name: String,
    /// Calls it holds (`config` null or empty: 0).
    pub calls: usize,
}

/// A parsed configuration: its sections and their calls, in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Document {
    /// Every section, empty ones included.
    pub sections: Vec<Section>,
    /// Every call, in order.
    pub calls: Vec<ConfigCall>,
}

/// Parses configuration text, with the limits above.
pub fn parse(text: &str) -> anyhow::Result<Document> {
    if text.len() > MAX_FILE_BYTES {
        bail!(
            "{} bytes: larger than the {} MiB a configuration may have",
            text.len(),
            MAX_FILE_BYTES >> 20
        );
    }
    let mut d = Decoder::new(MAX_FILE_BYTES, MAX_DEPTH);
    d.feed(text.as_bytes());
    let doc = match d.next_value() {
        Ok(Some(v)) => v,
        Ok(None) if text.trim().is_empty() => bail!("not valid JSON: the file is empty"),
        Ok(None) => bail!("not valid JSON: the document ends early"),
        Err(FrameError::TooDeep) => {
            bail!("not a configuration: objects and arrays nested deeper than {MAX_DEPTH} levels")
        }
        Err(FrameError::Syntax(e)) => bail!("not valid JSON: {e}"),
        Err(FrameError::TooLarge) => bail!("larger than {} MiB", MAX_FILE_BYTES >> 20),
    };
    if !d.is_idle() {
        bail!("not valid JSON: more text after the document");
    }
    from_value(&doc)
}

/// Reads a document already decoded (the `load_config` method's parameters).
pub fn from_value(doc: &Value) -> anyhow::Result<Document> {
    let Some(top) = doc.as_object() else {
        bail!("the document must be an object with a \"subsystems\" array");
    };
    let Some(subsystems) = top.get("subsystems") else {
        bail!("no \"subsystems\" member at the top level");
    };
    if let Some(k) = top.keys().find(|k| *k != "subsystems") {
        bail!("unknown member \"{k}\" at the top level (only \"subsystems\")");
    }
    let Some(subsystems) = subsystems.as_array() else {
        bail!("\"subsystems\" must be an array");
    };
    if subsystems.len() > MAX_SECTIONS {
        bail!(
            "\"subsystems\" has {} sections; at most {MAX_SECTIONS} are read",
            subsystems.len()
        );
    }
    let total: usize = subsystems
        .iter()
        .filter_map(|s| s.get("config").and_then(Value::as_array))
        .map(Vec::len)
        .sum();
    if total > MAX_CALLS {
        bail!("{total} calls: more than the {MAX_CALLS} a configuration may have");
    }
    let mut out = Document::default();
    for (i, s) in subsystems.iter().enumerate() {
        let Some(s) = s.as_object() else {
            bail!("subsystems[{i}] must be an object");
        };
        let name = s
            .get("subsystem")
            .and_then(Value::as_str)
            .with_context(|| format!("subsystems[{i}] has no \"subsystem\" name string"))?;
        if let Some(k) = s.keys().find(|k| *k != "subsystem" && *k != "config") {
            bail!("subsystems[{i}] ({name}): unknown member \"{k}\"");
        }
        let config = match s.get("config") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => &a[..],
            Some(_) => bail!("subsystems[{i}] ({name}): \"config\" must be an array or null"),
        };
        out.sections.push(Section {
            index: i,
            name: name.to_string(),
            calls: config.len(),
        });
        for (j, entry) in config.iter().enumerate() {
            out.calls.push(call(i, name, j, entry)?);
        }
    }
    Ok(out)
}

fn call(i: usize, section: &str, j: usize, entry: &Value) -> anyhow::Result<ConfigCall> {
    let origin = format!("subsystems[{i}] ({section}) config[{j}]");
    let Some(entry) = entry.as_object() else {
        bail!("{origin}: must be an object {{\"method\": ..., \"params\": ...}}");
    };
    let method = entry
        .get("method")
        .and_then(Value::as_str)
        .with_context(|| format!("{origin}: no \"method\" string"))?;
    if let Some(k) = entry.keys().find(|k| *k != "method" && *k != "params") {
        bail!("{origin} ({method}): unknown member \"{k}\"");
    }
    let params = match entry.get("params") {
        None | Some(Value::Null) => None,
        Some(p @ Value::Object(_)) => Some(p.clone()),
        Some(_) => bail!("{origin} ({method}): \"params\" must be an object"),
    };
    Ok(ConfigCall {
        origin,
        section: section.to_string(),
        method: method.to_string(),
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_save_config_shape() {
        let d = parse(
            r#"{"subsystems":[{"subsystem":"scsi","config":null},{"subsystem":"nbd","config":[]},
            {"subsystem":"bdev","config":[{"method":"bdev_null_create","params":{"name":"N","num_blocks":8,"block_size":512}},
            {"method":"bdev_wait_for_examine"}]}]}"#,
        )
        .unwrap();
        assert_eq!(d.sections.len(), 3);
        assert_eq!(d.sections[1].calls, 0);
        assert_eq!(d.calls.len(), 2);
        assert_eq!(d.calls[0].method, "bdev_null_create");
        assert_eq!(d.calls[0].origin, "subsystems[2] (bdev) config[0]");
        assert_eq!(d.calls[0].section, "bdev");
        assert_eq!(d.calls[1].params, None);
    }

    #[test]
    fn the_spdk_sample_parses() {
        let text = include_str!("../tests/fixtures/spdk-v25.09-sample.json");
        let d = parse(text).unwrap();
        let names: Vec<&str> = d.sections.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "keyring",
                "iobuf",
                "sock",
                "vmd",
                "accel",
                "bdev",
                "scsi",
                "scheduler",
                "vhost_scsi",
                "vhost_blk",
                "nbd",
                "nvmf",
                "iscsi"
            ]
        );
        assert_eq!(d.calls.len(), 17);
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        for (doc, want) in [
            ("", "the file is empty"),
            ("{", "ends early"),
            ("{} {}", "more text after"),
            ("[1]", "must be an object"),
            ("{}", "no \"subsystems\""),
            (r#"{"subsystems":[],"x":1}"#, "unknown member \"x\""),
            (r#"{"subsystems":{}}"#, "must be an array"),
            (r#"{"subsystems":[1]}"#, "subsystems[0] must be an object"),
            (r#"{"subsystems":[{"config":[]}]}"#, "no \"subsystem\" name"),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":{}}]}"#,
                "\"config\" must be an array or null",
            ),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":[{}]}]}"#,
                "no \"method\"",
            ),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":["bdev_null_create"]}]}"#,
                "config[0]: must be an object",
            ),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":7}]}]}"#,
                "no \"method\" string",
            ),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":"m","params":1}]}]}"#,
                "\"params\" must be an object",
            ),
            (
                r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":"m","parms":{}}]}]}"#,
                "unknown member \"parms\"",
            ),
        ] {
            let e = format!("{:#}", parse(doc).unwrap_err());
            assert!(e.contains(want), "{doc}: {e}");
        }
    }

    #[test]
    fn hostile_sizes_and_nesting_are_refused_before_building() {
        let deep = format!(
            "{{\"subsystems\":[{{\"subsystem\":\"bdev\",\"config\":[{{\"method\":\"m\",\"params\":{{\"a\":{}1{}}}}}]}}]}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = format!("{:#}", parse(&deep).unwrap_err());
        assert!(e.contains("nested deeper than 32"), "{e}");
        let many = format!(
            "{{\"subsystems\":[{{\"subsystem\":\"bdev\",\"config\":[{}]}}]}}",
            vec![r#"{"method":"bdev_wait_for_examine"}"#; 1_000_000].join(",")
        );
        let e = format!("{:#}", parse(&many).unwrap_err());
        assert!(e.contains("1000000 calls"), "{e}");
        let sections = format!(
            "{{\"subsystems\":[{}]}}",
            vec![r#"{"subsystem":"x","config":null}"#; 2000].join(",")
        );
        let e = format!("{:#}", parse(&sections).unwrap_err());
        assert!(e.contains("2000 sections"), "{e}");
        let big = " ".repeat(MAX_FILE_BYTES + 1);
        let e = format!("{:#}", parse(&big).unwrap_err());
        assert!(e.contains("larger than the 64 MiB"), "{e}");
    }
}
