//! The method registry: names, SPDK's state mask, dispatch.
//!
//! SPDK registers each method with the states it may run in (`SPDK_RPC_STARTUP`,
//! `SPDK_RPC_RUNTIME`): start-up methods run only before `framework_start_init`
//! (`--wait-for-rpc`), runtime methods only after. A [`Registry`] is generic over the context
//! its methods run on (the daemon's state), and a module that knows only part of that state
//! registers its methods on its own context type; [`Registry::merge`] hangs them on the daemon's
//! with a projection, so the module never names the daemon.

use std::sync::Arc;

use serde_json::Value;

use crate::error::{RpcError, code};

/// Start-up state bit of a state mask.
pub const STARTUP: u8 = 1;
/// Runtime state bit of a state mask.
pub const RUNTIME: u8 = 2;

/// The framework state a call arrives in, as SPDK's RPC state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RpcState {
    /// `--wait-for-rpc`: only start-up methods until `framework_start_init`.
    Startup = STARTUP,
    /// Initialised: runtime methods.
    Runtime = RUNTIME,
}

impl RpcState {
    /// The state's bit in a method's state mask.
    pub fn bit(self) -> u8 {
        self as u8
    }

    /// Name used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            RpcState::Startup => "startup",
            RpcState::Runtime => "runtime",
        }
    }

    /// The state whose bit is `bit` (`None` for anything else).
    pub fn from_bit(bit: u8) -> Option<RpcState> {
        match bit {
            STARTUP => Some(RpcState::Startup),
            RUNTIME => Some(RpcState::Runtime),
            _ => None,
        }
    }
}

/// A method's body: the context, the method's name (for SPDK's texts that name it) and its
/// parameters (`None` when absent or `null`).
pub type Run<C> = Arc<dyn Fn(&C, &str, Option<&Value>) -> Result<Value, RpcError> + Send + Sync>;

/// One registered method.
pub struct Method<C: ?Sized> {
    /// SPDK's method name.
    pub name: &'static str,
    /// States in which it may be called ([`STARTUP`] | [`RUNTIME`]).
    pub states: u8,
    /// Implementation.
    pub run: Run<C>,
}

impl<C: ?Sized> Clone for Method<C> {
    fn clone(&self) -> Self {
        Method {
            name: self.name,
            states: self.states,
            run: self.run.clone(),
        }
    }
}

impl<C: ?Sized> Method<C> {
    /// A method named `name`, callable in `states`, running `run`.
    pub fn new(
        name: &'static str,
        states: u8,
        run: impl Fn(&C, &str, Option<&Value>) -> Result<Value, RpcError> + Send + Sync + 'static,
    ) -> Method<C> {
        Method {
            name,
            states,
            run: Arc::new(run),
        }
    }

    /// Refuses a call in a state the method is not registered for, with SPDK's text.
    pub fn check_state(&self, state: RpcState) -> Result<(), RpcError> {
        if self.states & state.bit() != 0 {
            return Ok(());
        }
        let msg = match state {
            RpcState::Startup => {
                "Method may only be called after framework is initialized using \
                 framework_start_init RPC."
            }
            RpcState::Runtime => "Method may only be called before framework initialization.",
        };
        Err(RpcError::new(
            code::INVALID_STATE,
            format!("{msg} ({}; current state: {})", self.name, state.name()),
        ))
    }
}

/// What a module writes into one section (SPDK subsystem) of `save_config`: the calls that
/// recreate its objects and settings, in replay order.
pub type Write<C> = Arc<dyn Fn(&C) -> Vec<Value> + Send + Sync>;

/// A section of `save_config` (SPDK's subsystem): its name, the sections whose objects its
/// calls need, and each module's part of it in registration order.
pub struct Section<C: ?Sized> {
    /// SPDK's subsystem name (`bdev`, `nvmf`, `sock`, ...).
    pub name: &'static str,
    /// Sections that replay before this one (`framework_get_subsystems`' `depends_on`).
    pub depends_on: Vec<&'static str>,
    /// Listed by `framework_get_subsystems` even when it has no calls.
    pub always_listed: bool,
    writers: Vec<Write<C>>,
}

impl<C: ?Sized> Section<C> {
    /// Every module's calls for this section, in registration order.
    pub fn calls(&self, ctx: &C) -> Vec<Value> {
        self.writers.iter().flat_map(|w| w(ctx)).collect()
    }
}

/// Methods by name, in registration order (the order `rpc_get_methods` lists them), and the
/// sections of `save_config` their modules write.
pub struct Registry<C: ?Sized> {
    methods: Vec<Method<C>>,
    sections: Vec<Section<C>>,
}

impl<C: ?Sized> Default for Registry<C> {
    fn default() -> Self {
        Registry {
            methods: Vec::new(),
            sections: Vec::new(),
        }
    }
}

impl<C: ?Sized + 'static> Registry<C> {
    /// An empty registry.
    pub fn new() -> Registry<C> {
        Registry::default()
    }

    /// Adds `method`. A second method of the same name is a programming error: the first one
    /// would silently win, so it panics at start-up instead.
    pub fn add(&mut self, method: Method<C>) {
        assert!(
            self.find(method.name).is_none(),
            "RPC method {} registered twice",
            method.name
        );
        self.methods.push(method);
    }

    /// Adds a method from its parts (SPDK's `SPDK_RPC_REGISTER(name, fn, states)`).
    pub fn register(
        &mut self,
        name: &'static str,
        states: u8,
        run: impl Fn(&C, &str, Option<&Value>) -> Result<Value, RpcError> + Send + Sync + 'static,
    ) {
        self.add(Method::new(name, states, run));
    }

    /// Adds every method and section part of `other`, which run on the part of `C` that
    /// `project` returns.
    pub fn merge<D: ?Sized + 'static>(
        &mut self,
        other: Registry<D>,
        project: impl Fn(&C) -> &D + Send + Sync + 'static,
    ) {
        let project = Arc::new(project);
        for m in other.methods {
            let (p, run) = (project.clone(), m.run);
            self.register(m.name, m.states, move |c, name, params| {
                run(p(c), name, params)
            });
        }
        for s in other.sections {
            for w in s.writers {
                let p = project.clone();
                self.section(s.name, &s.depends_on, move |c: &C| w(p(c)));
            }
            if s.always_listed {
                self.list_always(s.name);
            }
        }
    }

    /// Adds `write` as this registry's next part of section `name` (created on first use, with
    /// `depends_on`; later parts add their dependencies). A module calls it for each part it
    /// writes, in the order they replay.
    pub fn section(
        &mut self,
        name: &'static str,
        depends_on: &[&'static str],
        write: impl Fn(&C) -> Vec<Value> + Send + Sync + 'static,
    ) {
        let i = match self.sections.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                self.sections.push(Section {
                    name,
                    depends_on: Vec::new(),
                    always_listed: false,
                    writers: Vec::new(),
                });
                self.sections.len() - 1
            }
        };
        let s = &mut self.sections[i];
        for d in depends_on {
            if !s.depends_on.contains(d) {
                s.depends_on.push(d);
            }
        }
        s.writers.push(Arc::new(write));
    }

    /// Fixes the replay order of sections `names` (each created empty if no module wrote it
    /// yet): a daemon calls it before merging its modules.
    pub fn order_sections(&mut self, names: &[&'static str]) {
        for n in names {
            if !self.sections.iter().any(|s| s.name == *n) {
                self.sections.push(Section {
                    name: n,
                    depends_on: Vec::new(),
                    always_listed: false,
                    writers: Vec::new(),
                });
            }
        }
    }

    /// Lists section `name` in `framework_get_subsystems` even when it has no calls (SPDK
    /// lists every subsystem it has; a section of settings only is listed when it has some).
    pub fn list_always(&mut self, name: &'static str) {
        if let Some(s) = self.sections.iter_mut().find(|s| s.name == name) {
            s.always_listed = true;
        }
    }

    /// The sections, in the order their first part was registered (their replay order).
    pub fn sections(&self) -> &[Section<C>] {
        &self.sections
    }

    /// Section `name`'s calls, or `None` when no module writes it.
    pub fn config(&self, ctx: &C, name: &str) -> Option<Vec<Value>> {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.calls(ctx))
    }

    /// The method called `name`.
    pub fn find(&self, name: &str) -> Option<&Method<C>> {
        self.methods.iter().find(|m| m.name == name)
    }

    /// Every method, in registration order.
    pub fn methods(&self) -> impl Iterator<Item = &Method<C>> {
        self.methods.iter()
    }

    /// Names of every method, or (with `Some(state)`) of those callable in `state`.
    pub fn names(&self, state: Option<RpcState>) -> Vec<&'static str> {
        self.methods
            .iter()
            .filter(|m| state.is_none_or(|s| m.states & s.bit() != 0))
            .map(|m| m.name)
            .collect()
    }

    /// Runs `name` on `ctx` in `state`: `-32601` when there is no such method, SPDK's `-1`
    /// text when the state forbids it.
    pub fn call(
        &self,
        ctx: &C,
        state: RpcState,
        name: &str,
        params: Option<&Value>,
    ) -> Result<Value, RpcError> {
        let m = self.find(name).ok_or_else(RpcError::method_not_found)?;
        m.check_state(state)?;
        (m.run)(ctx, name, params.filter(|p| !p.is_null()))
    }
}

/// Adds each method as [`Registry::add`] does.
impl<C: ?Sized + 'static> Extend<Method<C>> for Registry<C> {
    fn extend<I: IntoIterator<Item = Method<C>>>(&mut self, methods: I) {
        for m in methods {
            self.add(m);
        }
    }
}

/// A registry of `methods`, in their order (a module's method list).
impl<C: ?Sized + 'static> FromIterator<Method<C>> for Registry<C> {
    fn from_iter<I: IntoIterator<Item = Method<C>>>(methods: I) -> Self {
        let mut r = Registry::new();
        r.extend(methods);
        r
    }
}

/// A registry of a module's method list, in its order: `registry.merge(module::methods().into(),
/// project)` for a module whose `methods()` returns a `Vec`.
impl<C: ?Sized + 'static> From<Vec<Method<C>>> for Registry<C> {
    fn from(methods: Vec<Method<C>>) -> Self {
        methods.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sections_collect_every_modules_part_in_order() {
        struct Bdevs(u32);
        let mut module = Registry::<Bdevs>::new();
        module.section("bdev", &[], |b: &Bdevs| vec![json!({"n": b.0})]);
        module.list_always("bdev");
        let mut daemon = Registry::<(Bdevs, u32)>::new();
        daemon.section("bdev", &[], |d: &(Bdevs, u32)| vec![json!({"first": d.1})]);
        daemon.merge(module, |d: &(Bdevs, u32)| &d.0);
        daemon.section("nvmf", &["bdev", "sock"], |_| Vec::new());
        daemon.section("nvmf", &["bdev"], |_| vec![json!("ns")]);
        let ctx = (Bdevs(7), 1);
        assert_eq!(
            daemon.config(&ctx, "bdev").unwrap(),
            [json!({"first": 1}), json!({"n": 7})]
        );
        assert_eq!(daemon.config(&ctx, "nvmf").unwrap(), [json!("ns")]);
        assert!(daemon.config(&ctx, "iscsi").is_none());
        let s = daemon.sections();
        assert_eq!((s[0].name, s[0].always_listed), ("bdev", true));
        assert_eq!(
            (s[1].name, &s[1].depends_on[..]),
            ("nvmf", &["bdev", "sock"][..])
        );
    }

    struct Daemon {
        part: Part,
    }
    struct Part(u64);

    fn registry() -> Registry<Daemon> {
        let mut part = Registry::<Part>::new();
        part.register("part_get", RUNTIME, |p, _, _| Ok(json!(p.0)));
        let mut r = Registry::<Daemon>::new();
        r.register("framework_start_init", STARTUP, |_, _, _| Ok(json!(true)));
        r.register("echo", STARTUP | RUNTIME, |_, _, p| {
            Ok(p.cloned().unwrap_or(Value::Null))
        });
        r.merge(part, |d: &Daemon| &d.part);
        r
    }

    #[test]
    fn a_method_list_is_a_registry_in_its_order() {
        let list = vec![
            Method::new("b", RUNTIME, |_: &(), _: &str, _: Option<&Value>| {
                Ok(json!(1))
            }),
            Method::new("a", STARTUP, |_: &(), _: &str, _: Option<&Value>| {
                Ok(json!(2))
            }),
        ];
        let r = Registry::from(list);
        assert_eq!(r.names(None), ["b", "a"]);
        assert_eq!(r.call(&(), RpcState::Startup, "a", None).unwrap(), json!(2));
    }

    #[test]
    fn merged_methods_run_on_their_part() {
        let r = registry();
        let d = Daemon { part: Part(7) };
        assert_eq!(
            r.call(&d, RpcState::Runtime, "part_get", None).unwrap(),
            json!(7)
        );
        assert_eq!(r.names(None), ["framework_start_init", "echo", "part_get"]);
        assert_eq!(
            r.names(Some(RpcState::Startup)),
            ["framework_start_init", "echo"]
        );
    }

    #[test]
    fn state_mask_and_not_found_use_spdk_codes_and_texts() {
        let r = registry();
        let d = Daemon { part: Part(0) };
        let e = r.call(&d, RpcState::Startup, "part_get", None).unwrap_err();
        assert_eq!(e.code, -1);
        assert_eq!(
            e.message,
            "Method may only be called after framework is initialized using \
             framework_start_init RPC. (part_get; current state: startup)"
        );
        let e = r
            .call(&d, RpcState::Runtime, "framework_start_init", None)
            .unwrap_err();
        assert_eq!(
            e.message,
            "Method may only be called before framework initialization. \
             (framework_start_init; current state: runtime)"
        );
        assert_eq!(
            r.call(&d, RpcState::Runtime, "nope", None).unwrap_err(),
            RpcError::method_not_found()
        );
        // `null` params are no params.
        assert_eq!(
            r.call(&d, RpcState::Runtime, "echo", Some(&Value::Null))
                .unwrap(),
            Value::Null
        );
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_name_registers_once() {
        let mut r = registry();
        r.register("echo", RUNTIME, |_, _, _| Ok(Value::Null));
    }
}
