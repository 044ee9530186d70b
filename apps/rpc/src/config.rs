//! `load_config`: pmio-tgt's `load_config` method when the daemon has it (the whole file is
//! checked before anything is created, and removed again if a call fails), else rpc.py's
//! call-by-call replay (SPDK's daemons; files too large for one request).

use std::io::Read;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::client::{CallError, Client};

/// Requests larger than this go as a replay (pmio-tgt takes requests up to 1 MiB).
const MAX_ONE_REQUEST: usize = (1 << 20) - 4096;

/// Loads the configuration in `json_conf` (default: standard input) into the daemon.
pub fn load_config(
    c: &mut Client,
    include_aliases: bool,
    json_conf: Option<&PathBuf>,
) -> Result<(), CallError> {
    let text = match json_conf {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| CallError::Transport(format!("reading {}: {e}", p.display())))?,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| CallError::Transport(format!("reading standard input: {e}")))?;
            s
        }
    };
    let doc: Value = serde_json::from_str(&text)
        .map_err(|e| CallError::Transport(format!("invalid JSON configuration: {e}")))?;
    if doc.get("subsystems").and_then(Value::as_array).is_none() {
        return Err(CallError::Transport(
            "invalid JSON configuration: no \"subsystems\" array".into(),
        ));
    }
    if serde_json::to_vec(&doc).map_or(usize::MAX, |b| b.len()) <= MAX_ONE_REQUEST {
        match c.call("load_config", Some(doc.clone())) {
            Ok(report) => {
                log::info!("load_config: {report}");
                return Ok(());
            }
            Err(CallError::Rpc { error, .. }) if error["code"] == json!(-32601) => {
                log::info!("the daemon has no load_config method: replaying the calls");
            }
            Err(e) => return Err(e),
        }
    }
    replay(c, include_aliases, &doc)
}

/// rpc.py's `load_config`: checks every method is known, then replays the calls in rounds of
/// what the daemon's state allows, calling `framework_start_init` when it is allowed. On
/// pmio-tgt the connection is then a load session: a failing call removes what the replay
/// created (see pmio-tgt's `config::session`).
fn replay(c: &mut Client, include_aliases: bool, doc: &Value) -> Result<(), CallError> {
    let Some(subsystems) = doc.get("subsystems").and_then(Value::as_array) else {
        return Err(CallError::Transport(
            "invalid JSON configuration: no \"subsystems\" array".into(),
        ));
    };
    // As rpc.py: drop subsystems with no config, check every method is known, then replay in
    // rounds of what the current state allows, calling framework_start_init when allowed.
    let mut pending: Vec<Vec<Value>> = subsystems
        .iter()
        .filter_map(|s| s.get("config").and_then(Value::as_array).cloned())
        .filter(|c| !c.is_empty())
        .collect();
    let names = |v: Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect()
    };
    let allowed = names(c.call(
        "rpc_get_methods",
        Some(json!({ "include_aliases": include_aliases })),
    )?);
    if pending.is_empty() {
        if allowed.iter().any(|m| m == "framework_start_init") {
            c.call("framework_start_init", None)?;
        }
        return Ok(());
    }
    for e in pending.iter().flatten() {
        let known = e
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| allowed.iter().any(|a| a == m));
        if !known {
            return Err(CallError::Transport(
                "Unknown method was included in the config file".into(),
            ));
        }
    }
    while !pending.is_empty() {
        let allowed = names(c.call(
            "rpc_get_methods",
            Some(json!({ "current": true, "include_aliases": include_aliases })),
        )?);
        let mut found = false;
        for config in pending.iter_mut() {
            let mut rest = Vec::new();
            for e in config.drain(..) {
                let m = e.get("method").and_then(Value::as_str).unwrap_or_default();
                if allowed.iter().any(|a| a == m) {
                    c.call(m, e.get("params").cloned())?;
                    found = true;
                } else {
                    rest.push(e);
                }
            }
            *config = rest;
        }
        pending.retain(|c| !c.is_empty());
        if allowed.iter().any(|m| m == "framework_start_init") {
            c.call("framework_start_init", None)?;
            found = true;
        }
        if !found {
            break;
        }
    }
    if !pending.is_empty() {
        crate::say(
            "Some configs were skipped because the RPC state that can call them passed over.",
        );
    }
    Ok(())
}
