//! SPDK's settings methods (`bdev_nvme_set_options`, `framework_set_scheduler`,
//! `sock_impl_set_options`, `nvmf_set_config`, ...) and what they become in pmio.
//!
//! A setting is first *planned*, with no side effect: each key gets a [`Note`] saying whether it
//! maps onto a pmio setting ([`NoteKind::Mapped`]), asks for what pmio does anyway
//! ([`NoteKind::Same`]) or has no equivalent and is dropped, with the reason
//! ([`NoteKind::Ignored`]). The plan's [`Effect`] is then applied to the daemon's [`Settings`].
//! `--check-config` stops after planning. A key at SPDK's default says nothing: pmio keeps its own
//! default. Keys pmio does not know (a newer SPDK's) are dropped with a note, never refused: a
//! setting carries no data.
//!
//! [`Settings`] holds what was mapped (NVMe driver defaults for later attaches, the scheduler
//! choice) so `save_config` writes it back and a failed load can restore the state before it.

pub mod plans;
pub mod scheduler;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmio_nvme::NvmeOptions;
pub use pmio_nvme::rpc::NvmeDefaults;
use pmio_nvme::rpc::SharedDefaults;
use pmio_nvmf::SockOptions;
pub use pmio_nvmf::rpc::sock::SockChange;

use serde_json::{Value, json};

use crate::Daemon;
use pmio_jsonrpc::RpcError;

/// What one key of a setting became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteKind {
    /// Applied to a pmio setting.
    Mapped,
    /// Asks for what pmio does anyway.
    Same,
    /// No equivalent in pmio: dropped.
    Ignored,
}

/// One key's fate, with the words an operator reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// Mapped, same or ignored.
    pub kind: NoteKind,
    /// The key (empty for a note on the whole call).
    pub key: String,
    /// What pmio does with it, and why.
    pub text: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.text)
        } else {
            write!(f, "{}: {}", self.key, self.text)
        }
    }
}

/// A setting's effect on the daemon.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Nothing changes.
    None,
    /// New defaults for NVMe controllers attached from now on; `saved` is what `save_config`
    /// writes back.
    Nvme {
        /// The driver options that change.
        defaults: NvmeDefaults,
        /// The call's parameters.
        saved: Value,
    },
    /// New socket options for NVMe/TCP connections accepted from now on (`save_config`
    /// writes the options in effect, see `pmio_nvmf::rpc::sock::config`).
    Sock(SockChange),
    /// The hashes and DH groups the NVMe-oF target's in-band authentication may choose from
    /// (`nvmf_set_config`'s `dhchap_digests`, `dhchap_dhgroups`).
    Dhchap(pmio_nvmf::DhchapPolicy),
    /// A scheduler choice (reactor modes); `saved` is what `save_config` writes back.
    Scheduler {
        /// Static or dynamic.
        choice: SchedChoice,
        /// The call's parameters.
        saved: Value,
    },
}

/// A planned setting: the notes and the effect.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// One note per key that says something.
    pub notes: Vec<Note>,
    /// What applying it changes.
    pub effect: Effect,
}

impl Plan {
    /// Whether anything of the call maps onto pmio (else the call is only ignored).
    pub fn maps(&self) -> bool {
        self.notes.iter().any(|n| n.kind != NoteKind::Ignored)
    }

    /// The notes of `kind`, as `key: text` (a note on the whole call: `text`) joined by "; ".
    pub fn summary(&self, kind: NoteKind) -> String {
        self.notes
            .iter()
            .filter(|n| n.kind == kind)
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A planning function: decodes a call's parameters, no side effect.
pub type PlanFn = fn(Option<&Value>) -> Result<Plan, RpcError>;

/// SPDK's scheduler names, as pmio's reactors honour them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedChoice {
    /// `static` (and `gscheduler`): reactors keep the mode the command line gave them.
    Static,
    /// `dynamic`: every reactor in interrupt mode, so idle ones sleep.
    Dynamic,
}

/// What the command line asked of the reactors, for `framework_set_scheduler`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReactorMode {
    /// Interrupt-mode idle time (`None`: `--no-interrupt`, busy polling).
    pub interrupt_idle: Option<Duration>,
    /// `--idle-sleep-us`: the idle time `dynamic` uses.
    pub idle_sleep: Duration,
}

/// The mapped settings of the daemon.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SettingsState {
    /// NVMe driver defaults for later attaches (held by the NVMe module).
    pub nvme: NvmeDefaults,
    /// The last `bdev_nvme_set_options` parameters (written back by `save_config`).
    pub nvme_saved: Option<Value>,
    /// The last `framework_set_scheduler` choice and parameters.
    pub scheduler: Option<(SchedChoice, Value)>,
}

/// What [`Settings`] holds itself: the state but the NVMe defaults.
#[derive(Clone, Debug, Default)]
struct Saved {
    nvme_saved: Option<Value>,
    scheduler: Option<(SchedChoice, Value)>,
}

/// A copy of the settings and the reactors' modes, to go back to when a load fails.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    state: SettingsState,
    modes: Vec<(u32, Option<Duration>)>,
    sock: SockOptions,
    dhchap: pmio_nvmf::DhchapPolicy,
}

/// The daemon's mapped settings (one per daemon, see [`crate::Daemon::settings`]).
#[derive(Debug)]
pub struct Settings {
    /// The NVMe module's driver defaults, which `bdev_nvme_set_options` sets.
    nvme: Arc<SharedDefaults>,
    state: Mutex<Saved>,
    reactor_mode: Mutex<Option<ReactorMode>>,
    /// Ignored notes already logged (each is logged once).
    logged: Mutex<HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Settings {
    /// Settings that map `bdev_nvme_set_options` onto the NVMe module's defaults `nvme`.
    pub fn new(nvme: Arc<SharedDefaults>) -> Settings {
        Settings {
            nvme,
            state: Mutex::default(),
            reactor_mode: Mutex::default(),
            logged: Mutex::default(),
        }
    }

    /// Records what the command line asked of the reactors.
    pub fn set_reactor_mode(&self, mode: ReactorMode) {
        *lock(&self.reactor_mode) = Some(mode);
    }

    /// The current state.
    pub fn state(&self) -> SettingsState {
        let s = lock(&self.state).clone();
        SettingsState {
            nvme: self.nvme.get(),
            nvme_saved: s.nvme_saved,
            scheduler: s.scheduler,
        }
    }

    /// NVMe driver options for a new controller named `name`: the driver's defaults with what
    /// `bdev_nvme_set_options` mapped.
    pub fn nvme_options(&self, name: &str) -> NvmeOptions {
        self.nvme.options(name)
    }

    /// What `bdev_nvme_set_options` mapped for NVMe/TCP controllers attached from now on.
    pub fn nvme_defaults(&self) -> NvmeDefaults {
        self.nvme.get()
    }

    /// Copies the settings and the reactors' modes.
    pub fn snapshot(&self, rpc: &dyn Daemon) -> Snapshot {
        let h = rpc.reactors();
        Snapshot {
            state: self.state(),
            modes: h
                .cores()
                .iter()
                .map(|&c| (c, h.interrupt_idle(c)))
                .collect(),
            sock: rpc.nvmf().sock_options(),
            dhchap: rpc.nvmf().config().dhchap,
        }
    }

    /// Goes back to `snap`.
    pub fn restore(&self, rpc: &dyn Daemon, snap: Snapshot) {
        let h = rpc.reactors();
        for (core, idle) in snap.modes {
            if let Err(e) = h.set_interrupt_idle(core, idle) {
                log::warn!("config: restoring reactor {core}'s mode: {e}");
            }
        }
        rpc.nvmf().set_sock_options(snap.sock);
        if let Err(e) = rpc.nvmf().set_dhchap_policy(snap.dhchap) {
            log::warn!("config: restoring the DH-HMAC-CHAP digests and groups: {e}");
        }
        self.nvme.set(snap.state.nvme);
        *lock(&self.state) = Saved {
            nvme_saved: snap.state.nvme_saved,
            scheduler: snap.state.scheduler,
        };
    }

    /// Applies a planned effect.
    pub fn apply(&self, rpc: &dyn Daemon, effect: &Effect) -> Result<(), RpcError> {
        match effect {
            Effect::None => Ok(()),
            Effect::Nvme { defaults, saved } => {
                let mut s = lock(&self.state);
                self.nvme.set(*defaults);
                s.nvme_saved = Some(saved.clone());
                Ok(())
            }
            Effect::Sock(change) => {
                let nvmf = &rpc.nvmf();
                nvmf.set_sock_options(change.apply_to(nvmf.sock_options()));
                Ok(())
            }
            Effect::Dhchap(p) => rpc
                .nvmf()
                .set_dhchap_policy(p.clone())
                .map_err(|e| RpcError::new(pmio_jsonrpc::code::INVALID_PARAMS, e.to_string())),
            Effect::Scheduler { choice, saved } => {
                self.switch_reactors(rpc, *choice)?;
                lock(&self.state).scheduler = Some((*choice, saved.clone()));
                Ok(())
            }
        }
    }

    /// `dynamic`: every reactor in interrupt mode; `static`: back to the command line's mode
    /// (unchanged when the daemon did not say what it was).
    fn switch_reactors(&self, rpc: &dyn Daemon, choice: SchedChoice) -> Result<(), RpcError> {
        let mode = *lock(&self.reactor_mode);
        let want = match (choice, mode) {
            (SchedChoice::Dynamic, Some(m)) => Some(m.interrupt_idle.unwrap_or(m.idle_sleep)),
            (SchedChoice::Dynamic, None) => Some(Duration::from_millis(1)),
            (SchedChoice::Static, Some(m)) => m.interrupt_idle,
            (SchedChoice::Static, None) => return Ok(()),
        };
        let h = rpc.reactors();
        for &core in h.cores() {
            h.set_interrupt_idle(core, want).map_err(|e| {
                RpcError::errno_detail(-libc::EINVAL, format_args!("reactor {core}: {e}"))
            })?;
        }
        Ok(())
    }

    /// Logs a call's notes: what maps, every time; each ignored key once per daemon.
    pub fn log_notes(&self, method: &str, notes: &[Note]) {
        for n in notes {
            match n.kind {
                NoteKind::Mapped => log::info!("config: {method}: {n}"),
                NoteKind::Same => log::debug!("config: {method}: {n}"),
                NoteKind::Ignored => self.log_ignored(method, &n.key, &n.text),
            }
        }
    }

    /// Logs that `key` of `method` (empty: the whole call) was ignored, once per daemon.
    pub fn log_ignored(&self, method: &str, key: &str, why: &str) {
        let line = if key.is_empty() {
            format!("config: ignored {method}: {why}")
        } else {
            format!("config: {method}: ignored {key}: {why}")
        };
        if lock(&self.logged).insert(line.clone()) {
            log::info!("{line}");
        }
    }

    /// The calls `save_config` writes for the mapped settings: `bdev_nvme_set_options` (in the
    /// bdev section, before any attach) and `framework_set_scheduler` (the scheduler section).
    pub fn saved_nvme(&self) -> Option<Value> {
        lock(&self.state)
            .nvme_saved
            .clone()
            .map(|p| json!({"method": "bdev_nvme_set_options", "params": p}))
    }

    /// See [`Settings::saved_nvme`].
    pub fn saved_scheduler(&self) -> Option<Value> {
        lock(&self.state)
            .scheduler
            .as_ref()
            .map(|(_, p)| json!({"method": "framework_set_scheduler", "params": p}))
    }
}
