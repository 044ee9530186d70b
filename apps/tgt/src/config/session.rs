//! rpc.py's `load_config` on pmio-tgt: a replay, one call at a time, made all-or-nothing.
//!
//! SPDK's rpc.py (and pmio-rpc talking to a daemon without the `load_config` method) loads a
//! file on one connection: `rpc_get_methods {"include_aliases": false}` (and nothing else: the
//! command `rpc_get_methods` always sends `current` too) to check every method is known, then
//! rounds of `rpc_get_methods {"current": true, ...}` and the calls the state allows. The server
//! never sees the file, so it cannot check it first; instead, from that opening call on, the
//! connection is a *load session*:
//!
//! - `rpc_get_methods` also lists the methods a configuration may hold that pmio refuses
//!   (`bdev_raid_create`, `iscsi_create_target_node`, ...), so rpc.py calls them instead of
//!   stopping with a bare "Unknown method" or, worse, skipping them as not allowed now;
//! - each configuration call runs as a [`step`], its undo recorded;
//! - a call that fails (a refusal included) removes what the session created and restores
//!   the settings before its error is answered, with what was rolled back appended.
//!
//! The session ends, keeping everything, when the connection closes (its thread ends: the
//! server runs one thread per connection, and the session lives in that thread) or when the
//! client calls a method that is not part of a configuration (a query, a delete).

use std::cell::RefCell;

use serde_json::Value;

use super::document::ConfigCall;
use super::load::step;
use super::report::Report;
use super::rollback::Txn;
use super::table::{self, Handling, TABLE};
use crate::methods::Rpc;
use pmio_jsonrpc::{Call, RpcError};

/// A load session of this connection (thread).
#[derive(Default)]
struct Session {
    txn: Txn,
    calls: usize,
}

thread_local! {
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
}

/// Whether `call` is rpc.py's `load_config` opening: `rpc_get_methods` with `include_aliases`
/// and nothing else.
fn opens_load(call: &Call) -> bool {
    call.method == "rpc_get_methods"
        && call
            .params
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(|p| {
                p.len() == 1 && p.get("include_aliases").is_some_and(Value::is_boolean)
            })
}

/// `rpc_get_methods` inside a session: `{"current": true, "include_aliases": _}`.
fn lists_in_load(call: &Call) -> bool {
    call.method == "rpc_get_methods"
        && call
            .params
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(|p| {
                p.get("current") == Some(&Value::Bool(true))
                    && p.keys().all(|k| k == "current" || k == "include_aliases")
            })
}

/// Whether `method` can be part of a configuration (anything the table knows).
fn in_configs(method: &str) -> bool {
    table::lookup(method).is_some() || method == "framework_start_init"
}

/// Answers one request of a connection (the server's entry point).
pub fn call(rpc: &Rpc, call: &Call) -> Result<Value, RpcError> {
    if opens_load(call) {
        end("a new load_config begins");
        SESSION.with(|s| *s.borrow_mut() = Some(Session::default()));
        log::debug!("config: load session begins (rpc.py's load_config)");
        return with_refused(rpc.invoke(&call.method, call.params.as_ref()));
    }
    if !SESSION.with(|s| s.borrow().is_some()) {
        return rpc.invoke(&call.method, call.params.as_ref());
    }
    if lists_in_load(call) {
        return with_refused(rpc.invoke(&call.method, call.params.as_ref()));
    }
    if !in_configs(&call.method) || call.method == "framework_start_init" {
        if call.method != "framework_start_init" {
            end(&format!("{} is not part of a configuration", call.method));
        }
        return rpc.invoke(&call.method, call.params.as_ref());
    }
    let mut s = SESSION
        .with(|s| s.borrow_mut().take())
        .expect("checked above");
    s.calls += 1;
    let section = table::lookup(&call.method).map_or("?", |e| e.section);
    let c = ConfigCall {
        origin: format!("load_config call {} ({section})", s.calls),
        section: section.to_string(),
        method: call.method.clone(),
        params: call.params.clone(),
    };
    match step(rpc, &c, &mut s.txn, &mut Report::default()) {
        Ok(v) => {
            SESSION.with(|cell| *cell.borrow_mut() = Some(s));
            Ok(v)
        }
        Err(e) => {
            let rolled = s.txn.rollback(rpc);
            log::warn!(
                "config: load_config stopped: {}; rolled back: {rolled}",
                e.message
            );
            Err(RpcError::new(
                e.code,
                format!("{}; load_config rolled back: {rolled}", e.message),
            ))
        }
    }
}

/// Ends this connection's session, keeping what it created.
fn end(why: &str) {
    if let Some(s) = SESSION.with(|s| s.borrow_mut().take()) {
        log::debug!("config: load session ends after {} calls ({why})", s.calls);
    }
}

/// Adds to a method list the methods a configuration may hold that pmio refuses, so rpc.py
/// calls them and gets the refusal naming them.
fn with_refused(r: Result<Value, RpcError>) -> Result<Value, RpcError> {
    let mut v = r?;
    if let Some(list) = v.as_array_mut() {
        for e in TABLE {
            if matches!(e.handling, Handling::Refuse(..) | Handling::Vhost(..))
                && !list.iter().any(|m| m == e.method)
            {
                list.push(Value::String(e.method.to_string()));
            }
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::config::testutil::{SAMPLE, rpc};
    use pmio_jsonrpc::RpcState;
    use pmio_jsonrpc::server::Handler;

    fn active() -> bool {
        SESSION.with(|s| s.borrow().is_some())
    }

    fn req(r: &Rpc, method: &str, params: Value) -> Result<Value, RpcError> {
        r.call(&Call {
            id: Some(json!(1)),
            method: method.into(),
            params: Some(params).filter(|p| !p.is_null()),
        })
    }

    /// rpc.py's load_config, as `spdk/rpc/__init__.py` does it, over `r`.
    fn rpc_py_load(r: &Rpc, doc: &Value) -> Result<(), RpcError> {
        let subsystems: Vec<Value> = doc["subsystems"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["config"].as_array().is_some_and(|c| !c.is_empty()))
            .cloned()
            .collect();
        let allowed = req(r, "rpc_get_methods", json!({"include_aliases": false}))?;
        for s in &subsystems {
            for e in s["config"].as_array().unwrap() {
                assert!(
                    allowed.as_array().unwrap().contains(&e["method"]),
                    "Unknown method {}",
                    e["method"]
                );
            }
        }
        let allowed = req(
            r,
            "rpc_get_methods",
            json!({"current": true, "include_aliases": false}),
        )?;
        for s in &subsystems {
            for e in s["config"].as_array().unwrap() {
                if allowed.as_array().unwrap().contains(&e["method"]) {
                    req(r, e["method"].as_str().unwrap(), e["params"].clone())?;
                }
            }
        }
        Ok(())
    }

    #[test]
    fn rpc_py_replay_loads_the_spdk_sample() {
        let (_re, r) = rpc(RpcState::Runtime);
        std::thread::scope(|t| {
            t.spawn(|| {
                rpc_py_load(&r, &serde_json::from_str(SAMPLE).unwrap()).unwrap();
                assert!(active());
                // A query ends the session, keeping what it made.
                req(&r, "bdev_get_bdevs", Value::Null).unwrap();
                assert!(!active());
            });
        });
        let b = req(&r, "bdev_get_bdevs", Value::Null).unwrap();
        assert_eq!(b.as_array().unwrap().len(), 2);
    }

    #[test]
    fn rpc_py_replay_stops_and_rolls_back_at_a_refusal() {
        let (_re, r) = rpc(RpcState::Runtime);
        let doc = json!({"subsystems": [
            {"subsystem": "bdev", "config": [
                {"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
                {"method": "bdev_null_create", "params": {"name": "N0", "num_blocks": 64, "block_size": 512}},
                {"method": "bdev_raid_create", "params": {"name": "Raid0", "raid_level": "raid0",
                    "strip_size_kb": 64, "base_bdevs": ["M0", "N0"]}}]},
            {"subsystem": "nvmf", "config": [
                {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:c9"}}]}]});
        let e = std::thread::scope(|t| {
            t.spawn(|| {
                let e = rpc_py_load(&r, &doc).unwrap_err();
                assert!(!active());
                e
            })
            .join()
            .unwrap()
        });
        assert_eq!(e.code, -libc::EOPNOTSUPP);
        assert!(
            e.message
                .contains("bdev section: bdev_raid_create Raid0 refused: pmio has no RAID"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("load_config rolled back: removed bdev N0, bdev M0"),
            "{}",
            e.message
        );
        assert_eq!(req(&r, "bdev_get_bdevs", Value::Null).unwrap(), json!([]));
        // Outside a session the refused methods are not listed.
        let all = req(
            &r,
            "rpc_get_methods",
            json!({"current": false, "include_aliases": false}),
        )
        .unwrap();
        assert!(!all.as_array().unwrap().contains(&json!("bdev_raid_create")));
    }

    #[test]
    fn ordinary_clients_never_start_a_session() {
        let (_re, r) = rpc(RpcState::Runtime);
        std::thread::scope(|t| {
            t.spawn(|| {
                req(
                    &r,
                    "rpc_get_methods",
                    json!({"current": false, "include_aliases": false}),
                )
                .unwrap();
                req(
                    &r,
                    "bdev_malloc_create",
                    json!({"name": "A", "num_blocks": 8, "block_size": 512}),
                )
                .unwrap();
                assert!(!active());
                // A failing call on a long-lived connection removes nothing else.
                assert!(
                    req(
                        &r,
                        "bdev_malloc_create",
                        json!({"name": "A", "num_blocks": 8, "block_size": 512})
                    )
                    .is_err()
                );
            });
        });
        assert_eq!(
            req(&r, "bdev_get_bdevs", Value::Null).unwrap()[0]["name"],
            "A"
        );
    }
}
