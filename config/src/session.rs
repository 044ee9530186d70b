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
//!   (`bdev_ocf_create`, `iscsi_create_target_node`, ...), so rpc.py calls them instead of
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
use crate::Daemon;
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
/// Whether this thread's connection is in a load session (rpc.py's replay under way).
pub fn active() -> bool {
    SESSION.with(|s| s.borrow().is_some())
}

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
pub fn call(rpc: &dyn Daemon, call: &Call) -> Result<Value, RpcError> {
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
