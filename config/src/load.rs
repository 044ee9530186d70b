//! Applying a configuration: `-c` at start-up, the `load_config` method, and each call of
//! rpc.py's replay ([`super::session`]).
//!
//! A document is applied in two steps:
//!
//! 1. Check it whole ([`super::check`]) against the running daemon: a refused or unknown
//!    method, an unknown section with calls, a namespace on a bdev nobody creates, a bad
//!    value: the load stops before anything is created, listing every problem.
//! 2. Apply the calls in order ([`step`]), each object's undo recorded in a [`Txn`]. A call
//!    that fails anyway (a port in use, a device that does not answer) removes what the load
//!    created, newest first, and restores the settings; the error names the call, its object
//!    and what was rolled back.
//!
//! In the start-up state (`--wait-for-rpc`), calls allowed there run first, then
//! `framework_start_init`, then the rest, as rpc.py's `load_config` and SPDK's `-c` do.

use serde_json::{Value, json};

use super::check::{self, World};
use super::document::{ConfigCall, Document};
use super::report::{Report, Verdict};
use super::rollback::Txn;
use super::settings::NoteKind;
use super::table::{self, Before, Handling, Undo};
use crate::Daemon;
use pmio_jsonrpc::RpcState;
use pmio_jsonrpc::STARTUP;
use pmio_jsonrpc::{RpcError, code};

/// A load that stopped: the reply's code and the whole story (what failed, what was rolled
/// back).
#[derive(Clone, Debug, PartialEq)]
pub struct LoadError {
    /// JSON-RPC error code (the failed method's, or -95 for a refusal).
    pub code: i32,
    /// What happened.
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LoadError {}

impl LoadError {
    /// The JSON-RPC error for it.
    pub fn to_rpc(&self) -> RpcError {
        RpcError::new(self.code, self.message.clone())
    }
}

/// Stops a load on the check's refusals, listing each (`where: method object: why`).
fn refused(r: &Report) -> Option<LoadError> {
    let all: Vec<String> = r.refusals().map(|l| l.describe()).collect();
    if all.is_empty() {
        return None;
    }
    Some(LoadError {
        code: -libc::EOPNOTSUPP,
        message: format!(
            "configuration refused, nothing was applied: {}",
            all.join("; ")
        ),
    })
}

/// Checks `doc` against the running daemon, then applies it. On success, the report of what
/// was created, mapped and ignored.
pub fn apply(rpc: &dyn Daemon, doc: &Document) -> Result<Report, LoadError> {
    let screen = check::check(doc, World::of(rpc));
    if let Some(e) = refused(&screen) {
        return Err(e);
    }
    let mut report = Report::default();
    // Sections are reported by the check; calls by the step that runs them.
    report
        .lines
        .extend(screen.lines.iter().filter(|l| l.method == "-").cloned());
    for l in &report.lines {
        log::info!("config: {}: {}", l.origin, l.text);
    }
    let mut txn = Txn::default();
    match run_all(rpc, doc, &mut txn, &mut report) {
        Ok(()) => Ok(report),
        Err(e) => {
            let rolled = txn.rollback(rpc);
            Err(LoadError {
                code: e.code,
                message: format!("{}; rolled back: {rolled}", e.message),
            })
        }
    }
}

fn run_all(
    rpc: &dyn Daemon,
    doc: &Document,
    txn: &mut Txn,
    report: &mut Report,
) -> Result<(), RpcError> {
    if rpc.state() == RpcState::Startup {
        let (now, later): (Vec<&ConfigCall>, Vec<&ConfigCall>) = doc
            .calls
            .iter()
            .partition(|c| rpc.states_of(&c.method).unwrap_or(0) & STARTUP != 0);
        for c in now {
            step(rpc, c, txn, report)?;
        }
        rpc.invoke("framework_start_init", None)?;
        for c in later {
            step(rpc, c, txn, report)?;
        }
        return Ok(());
    }
    for c in &doc.calls {
        step(rpc, c, txn, report)?;
    }
    Ok(())
}

/// Runs one call of a configuration: refuses what the table refuses, plans and applies a
/// setting, creates an object and records its undo in `txn`. Returns the method's own result
/// (rpc.py's replay passes it back to the client). Errors name where the call came from and
/// its object.
pub fn step(
    rpc: &dyn Daemon,
    c: &ConfigCall,
    txn: &mut Txn,
    report: &mut Report,
) -> Result<Value, RpcError> {
    let params = c.params.clone().unwrap_or_else(|| json!({}));
    let Some(entry) = table::lookup(&c.method) else {
        return Err(RpcError::errno_detail(
            -libc::EOPNOTSUPP,
            format_args!(
                "{}: Unknown method {}: neither SPDK v25.09's save_config nor pmio writes it",
                c.origin, c.method
            ),
        ));
    };
    let handling = entry.handling(rpc.states_of(&c.method).is_some());
    match handling {
        Handling::Refuse(path, why) | Handling::Vhost(path, why, _) => {
            let obj = table::param(&params, path).unwrap_or_else(|| "?".into());
            Err(RpcError::errno_detail(
                -libc::EOPNOTSUPP,
                format_args!(
                    "{}: {} section: {} {obj} refused: {why}",
                    c.origin, entry.section, c.method
                ),
            ))
        }
        Handling::Ignore(why) => {
            if !matches!(c.params, None | Some(Value::Object(_))) {
                return Err(RpcError::decode(format_args!(
                    "{}: {}: params must be an object",
                    c.origin, c.method
                )));
            }
            rpc.settings().log_ignored(&c.method, "", why);
            report.push(Verdict::Ignore, &c.origin, &c.method, why);
            Ok(Value::Bool(true))
        }
        Handling::Setting(plan) => {
            let p = plan(c.params.as_ref()).map_err(|e| at(c, "", e))?;
            txn.before_setting(rpc);
            rpc.settings()
                .apply(rpc, &p.effect)
                .map_err(|e| at(c, "", e))?;
            rpc.settings().log_notes(&c.method, &p.notes);
            if p.maps() {
                let mut text = p.summary(NoteKind::Mapped);
                let same = p.summary(NoteKind::Same);
                if !text.is_empty() && !same.is_empty() {
                    text.push_str("; ");
                }
                text.push_str(&same);
                report.push(Verdict::Map, &c.origin, &c.method, text);
            }
            for n in p.notes.iter().filter(|n| n.kind == NoteKind::Ignored) {
                report.push(Verdict::Ignore, &c.origin, &c.method, n.to_string());
            }
            Ok(Value::Bool(true))
        }
        Handling::Create(cr) | Handling::Set(cr) => {
            let verdict = match handling {
                Handling::Set(_) => Verdict::Set,
                _ => Verdict::Create,
            };
            let what = (cr.what)(&params);
            let (method, params) = translate(&c.method, params).map_err(|e| at(c, &what, e))?;
            let before = match cr.undo {
                Undo::Before(f) => Some(f(rpc, &params)),
                _ => None,
            };
            if let Some(Before::Present(why)) = &before {
                log::info!("config: {}: {} already there: {why}", c.origin, c.method);
                report.push(verdict, &c.origin, &c.method, format!("{what}: {why}"));
                return Ok(Value::Bool(true));
            }
            let result = rpc
                .invoke(method, Some(&params))
                .map_err(|e| at(c, &what, hint(&c.method, &params, e)))?;
            match before {
                Some(Before::Undo(u)) => txn.push(u),
                Some(Before::Keep(k)) => txn.keep(k),
                Some(Before::Present(_)) => {}
                None => {
                    if let Some(u) = cr.undo.call(&what, &params, &result) {
                        txn.push(u);
                    }
                }
            }
            report.push(verdict, &c.origin, &c.method, what);
            Ok(result)
        }
    }
}

/// SPDK methods pmio serves with another of its methods: `bdev_aio_create` becomes
/// `bdev_uring_create` on the same file.
fn translate(method: &str, params: Value) -> Result<(&str, Value), RpcError> {
    match method {
        "bdev_aio_create" => {
            let u = check::params::aio_as_uring(&params)
                .map_err(|e| RpcError::errno_detail(-libc::EOPNOTSUPP, e))?;
            log::info!("config: bdev_aio_create becomes bdev_uring_create {u}");
            Ok(("bdev_uring_create", u))
        }
        m => Ok((m, params)),
    }
}

/// Adds to an error what the name of a missing bdev suggests (an lvol, a partition).
fn hint(method: &str, params: &Value, e: RpcError) -> RpcError {
    if method != "nvmf_subsystem_add_ns" {
        return e;
    }
    let Some(b) = table::param(params, "namespace.bdev_name") else {
        return e;
    };
    if e.code != code::INVALID_PARAMS || !e.message.contains(&b) {
        return e;
    }
    let more = check::params::missing_bdev(&b);
    match more.split_once(" (") {
        Some((_, h)) => RpcError::new(e.code, format!("{} ({h}", e.message)),
        None => e,
    }
}

/// The error of call `c` on `what`, with where it came from.
fn at(c: &ConfigCall, what: &str, e: RpcError) -> RpcError {
    let obj = if what.is_empty() {
        String::new()
    } else {
        format!(" ({what})")
    };
    RpcError::new(
        e.code,
        format!(
            "{}: {}{obj}: {} (code {})",
            c.origin, c.method, e.message, e.code
        ),
    )
}
