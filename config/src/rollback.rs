//! The rollback list of one load: what it created, and the settings before it changed any.
//!
//! Invariant: every object a load created has its undo call in the list, pushed right after
//! the call that created it succeeded, so a failed load removes exactly what it added, newest
//! first (a namespace before its subsystem, a subsystem before its bdev). Objects that were
//! there before the load are never in it. Dropping a `Txn` keeps everything (the load
//! succeeded).

use super::settings::Snapshot;
use super::table::UndoCall;
use crate::Daemon;

/// One load in progress.
#[derive(Debug, Default)]
pub struct Txn {
    undo: Vec<UndoCall>,
    kept: Vec<String>,
    settings: Option<Snapshot>,
}

impl Txn {
    /// Remembers how to remove an object this load created.
    pub fn push(&mut self, u: UndoCall) {
        self.undo.push(u);
    }

    /// Remembers something a rollback cannot remove (said in its summary).
    pub fn keep(&mut self, what: String) {
        if !what.is_empty() && !self.kept.contains(&what) {
            self.kept.push(what);
        }
    }

    /// Copies the settings before the load's first setting changes them.
    pub fn before_setting(&mut self, rpc: &dyn Daemon) {
        if self.settings.is_none() {
            self.settings = Some(rpc.settings().snapshot(rpc));
        }
    }

    /// Whether the load has created or changed anything yet.
    pub fn is_empty(&self) -> bool {
        self.undo.is_empty() && self.kept.is_empty() && self.settings.is_none()
    }

    /// Removes what the load created, newest first, and restores the settings. Returns what
    /// was done, for the error message: `removed …; could not remove …; kept …`.
    pub fn rollback(self, rpc: &dyn Daemon) -> String {
        let mut removed = Vec::new();
        let mut failed = Vec::new();
        for u in self.undo.into_iter().rev() {
            match rpc.invoke(&u.method, Some(&u.params)) {
                Ok(_) => {
                    log::info!("config: rollback: removed {} ({})", u.what, u.method);
                    removed.push(u.what);
                }
                Err(e) => {
                    log::warn!(
                        "config: rollback: {} {}: {} (code {})",
                        u.method,
                        u.params,
                        e.message,
                        e.code
                    );
                    failed.push(format!("{} ({})", u.what, e.message));
                }
            }
        }
        let mut parts = Vec::new();
        if !removed.is_empty() {
            parts.push(format!("removed {}", removed.join(", ")));
        }
        if !failed.is_empty() {
            parts.push(format!("could not remove {}", failed.join(", ")));
        }
        if let Some(s) = self.settings {
            rpc.settings().restore(rpc, s);
            parts.push("settings restored".into());
        }
        for k in &self.kept {
            log::info!("config: rollback: {k}");
        }
        parts.extend(self.kept);
        if parts.is_empty() {
            "nothing was created".into()
        } else {
            parts.join("; ")
        }
    }
}
