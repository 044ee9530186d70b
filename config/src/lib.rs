//! Configurations in the shape `save_config` prints — pmio's own and SPDK v25.09's, unchanged:
//! `pmio-tgt -c FILE`, the `load_config` method (pmio-rpc), rpc.py's `load_config` replay, and
//! `pmio-tgt --check-config FILE`.
//!
//! - [`document`]: reading the file, with limits (size, nesting, counts).
//! - [`table`]: every method a configuration may hold and what pmio does with it: create,
//!   set, map, ignore, refuse (vhost: refused until pmio has it).
//! - [`settings`]: SPDK's settings planned key by key, and the daemon's mapped settings.
//! - [`check`]: the whole document checked without side effects (`--check-config`, and the
//!   first pass of every load).
//! - [`load`](mod@load): applying it, all or nothing ([`rollback`]'s list of what to remove again).
//! - [`session`]: rpc.py's call-by-call replay made all-or-nothing.
//! - [`report`]: what was (or would be) created, mapped, ignored and refused.
//!
//! ```
//! use pmio_config::{check, document};
//! let doc = document::parse(r#"{"subsystems": [
//!     {"subsystem": "iobuf", "config": [{"method": "iobuf_set_options",
//!         "params": {"small_pool_count": 8192}}]},
//!     {"subsystem": "bdev", "config": [{"method": "bdev_ocf_create",
//!         "params": {"name": "Cache0", "mode": "wt", "cache_bdev_name": "a", "core_bdev_name": "b"}}]}]}"#)
//! .unwrap();
//! let r = check::check(&doc, check::World::default());
//! assert_eq!(r.lines[0].verdict.word(), "ignore");
//! assert_eq!(r.lines[1].verdict.word(), "refuse");
//! assert!(r.lines[1].text.starts_with("Cache0: pmio has no OCF cache"));
//! ```

pub mod check;
mod daemon;
pub mod document;
pub mod load;
pub mod report;
pub mod rollback;
pub mod session;
pub mod settings;
pub mod table;

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

pub use daemon::Daemon;
pub use document::{ConfigCall, Document, parse};
pub use load::{LoadError, apply};

use pmio_jsonrpc::Method;
use pmio_jsonrpc::{RUNTIME, STARTUP};
use pmio_jsonrpc::{RpcError, code};
use table::{Handling, TABLE};

/// Reads and parses the file at `path` (refusing an oversized one before reading it).
pub fn read(path: &Path) -> anyhow::Result<Document> {
    let what = || format!("configuration {}", path.display());
    let len = std::fs::metadata(path).with_context(what)?.len();
    if len > document::MAX_FILE_BYTES as u64 {
        bail!(
            "{}: {len} bytes, larger than the {} MiB a configuration may have",
            what(),
            document::MAX_FILE_BYTES >> 20
        );
    }
    let text = std::fs::read_to_string(path).with_context(what)?;
    parse(&text).with_context(what)
}

/// The RPC methods of this module: SPDK's settings methods (mapped or ignored, callable in
/// both states, as SPDK's start-up-only ones are not: a file loaded at run time applies them),
/// `framework_get_scheduler` (what `framework_set_scheduler` left in effect) and `load_config`.
pub fn methods() -> Vec<Method<dyn Daemon>> {
    let mut out: Vec<Method<dyn Daemon>> = TABLE
        .iter()
        .filter_map(|e| match e.handling {
            Handling::Setting(_) => Some(Method::new(e.method, STARTUP | RUNTIME, run_setting)),
            // bdev_examine is the bdev layer's own method at runtime (pmio_runtime::rpc); a
            // configuration's call is still ignored (every bdev it creates is examined).
            Handling::Ignore(_) if e.method == "bdev_examine" => None,
            Handling::Ignore(_) => Some(Method::new(e.method, STARTUP | RUNTIME, run_ignored)),
            _ => None,
        })
        .collect();
    out.push(Method::new(
        "framework_get_scheduler",
        STARTUP | RUNTIME,
        settings::scheduler::framework_get_scheduler,
    ));
    out.push(Method::new("load_config", STARTUP | RUNTIME, load_config));
    out
}

/// A settings method called on its own: planned, applied, its notes logged.
fn run_setting(
    rpc: &(dyn Daemon + 'static),
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let Some(Handling::Setting(plan)) = table::lookup(method).map(|e| e.handling) else {
        return Err(RpcError::method_not_found());
    };
    let p = plan(params)?;
    rpc.settings().apply(rpc, &p.effect)?;
    rpc.settings().log_notes(method, &p.notes);
    Ok(Value::Bool(true))
}

/// A settings method pmio has no use for: accepted (parameters must be an object), logged once.
fn run_ignored(
    rpc: &(dyn Daemon + 'static),
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let Some(Handling::Ignore(why)) = table::lookup(method).map(|e| e.handling) else {
        return Err(RpcError::method_not_found());
    };
    if !matches!(params, None | Some(Value::Object(_))) {
        return Err(RpcError::decode("params must be an object"));
    }
    rpc.settings().log_ignored(method, "", why);
    Ok(Value::Bool(true))
}

/// `load_config {"subsystems": [...]}` (pmio's; rpc.py replays the file instead): checks the
/// whole document, applies it, removes what it created if a call fails. Answers what was
/// created, set, mapped and ignored.
fn load_config(
    rpc: &(dyn Daemon + 'static),
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let Some(p) = params else {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            "Invalid parameters: load_config takes the configuration {\"subsystems\": [...]}",
        ));
    };
    let doc = document::from_value(p)
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("Invalid parameters: {e:#}")))?;
    let report = apply(rpc, &doc).map_err(|e| {
        log::warn!("load_config: {e}");
        e.to_rpc()
    })?;
    log::info!("load_config: {}", report.totals());
    Ok(report.to_json())
}

/// Why a method pmio refuses in a configuration is not a method of pmio (appended to
/// "Method not found").
pub fn not_found_detail(method: &str) -> Option<&'static str> {
    match table::lookup(method)?.handling {
        Handling::Refuse(_, why) | Handling::Vhost(_, why, _) => Some(why),
        _ => None,
    }
}
