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

/// Methods by name, in registration order (the order `rpc_get_methods` lists them).
pub struct Registry<C: ?Sized> {
    methods: Vec<Method<C>>,
}

impl<C: ?Sized> Default for Registry<C> {
    fn default() -> Self {
        Registry {
            methods: Vec::new(),
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

    /// Adds every method of `other`, whose methods run on the part of `C` that `project`
    /// returns.
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
