//! The framework's own methods over any daemon's registry: `rpc_get_methods`,
//! `framework_get_subsystems` and `framework_get_config`, answered from the methods and the
//! `save_config` sections the modules registered (SPDK's `lib/rpc` and `lib/init`), and
//! `framework_wait_init` (SPDK's `lib/event/app.c`), which `spdk_top` sends first.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::decl;
use crate::error::{RpcError, code};
use crate::message::Call;
use crate::registry::{Method, RUNTIME, Registry, RpcState, STARTUP};

/// A daemon whose registry the framework methods read.
pub trait Framework: Sized + 'static {
    /// Every method and section of the daemon.
    fn registry(&self) -> &Registry<Self>;
    /// The state calls arrive in now.
    fn state(&self) -> RpcState;
}

/// Runs `call` on daemon `c` in its current state: a daemon's
/// [`Handler::call`](crate::server::Handler::call) when it has nothing of its own to add.
pub fn call<C: Framework>(c: &C, call: &Call) -> Result<Value, RpcError> {
    c.registry()
        .call(c, c.state(), &call.method, call.params.as_ref())
}

/// `rpc_get_methods` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GetMethods {
    /// Only the methods callable in the current state.
    #[serde(default)]
    pub current: bool,
    /// Include deprecated aliases (pmio has none).
    #[serde(default)]
    pub include_aliases: bool,
}

/// `framework_get_config` parameters.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GetConfig {
    /// Section (subsystem) name.
    pub name: String,
    /// Newer SPDK clients ask for batched calls; pmio's sections have no batches, so the
    /// flattened and the batched form are the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_batches: Option<bool>,
}

/// `spdk_kill_instance` parameters (the daemon delivers the signal once the reply is sent).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KillInstance {
    /// Signal name (`SIGTERM`, `TERM`, `15`, ...).
    pub sig_name: String,
}

/// The framework methods, for any daemon `C`.
pub fn methods<C: Framework>() -> Vec<Method<C>> {
    const ANY: u8 = STARTUP | RUNTIME;
    vec![
        Method::new("rpc_get_methods", ANY, rpc_get_methods::<C>),
        Method::new(
            "framework_get_subsystems",
            ANY,
            framework_get_subsystems::<C>,
        ),
        Method::new("framework_get_config", RUNTIME, framework_get_config::<C>),
        Method::new("framework_wait_init", ANY, framework_wait_init::<C>),
    ]
}

/// How often `framework_wait_init` looks at the state while start-up is held
/// (`--wait-for-rpc`): its caller waits for an operator's `framework_start_init`, so a
/// hundredth of a second late is nothing, and the check is one load.
const WAIT_INIT_POLL: Duration = Duration::from_millis(10);

/// `true` once the framework is initialised. Called before (`--wait-for-rpc`), the reply
/// waits until `framework_start_init` has run, as SPDK's does; only this caller's connection
/// waits (each connection has its own thread). Parameters are ignored, as SPDK ignores them.
fn framework_wait_init<C: Framework>(c: &C, _: &str, _: Option<&Value>) -> Result<Value, RpcError> {
    while c.state() != RpcState::Runtime {
        std::thread::sleep(WAIT_INIT_POLL);
    }
    Ok(Value::Bool(true))
}

fn rpc_get_methods<C: Framework>(
    c: &C,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetMethods = decl::decode(params)?;
    Ok(json!(c.registry().names(p.current.then(|| c.state()))))
}

fn framework_get_subsystems<C: Framework>(
    c: &C,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    decl::no_params(method, params)?;
    Ok(Value::Array(
        c.registry()
            .sections()
            .iter()
            .filter(|s| s.always_listed || !s.calls(c).is_empty())
            .map(|s| json!({"subsystem": s.name, "depends_on": s.depends_on}))
            .collect(),
    ))
}

fn framework_get_config<C: Framework>(
    c: &C,
    _: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let p: GetConfig = decl::decode(params)?;
    c.registry()
        .config(c, &p.name)
        .map(Value::Array)
        .ok_or_else(|| {
            RpcError::new(
                code::INVALID_PARAMS,
                format!("Subsystem '{}' not found", p.name),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Daemon {
        methods: Registry<Daemon>,
        saved: Vec<Value>,
    }

    impl Framework for Daemon {
        fn registry(&self) -> &Registry<Daemon> {
            &self.methods
        }
        fn state(&self) -> RpcState {
            RpcState::Runtime
        }
    }

    fn daemon(saved: Vec<Value>) -> Daemon {
        let mut methods: Registry<Daemon> = methods().into_iter().collect();
        methods.register("framework_start_init", STARTUP, |_, _, _| Ok(json!(true)));
        methods.section("bdev", &[], |d: &Daemon| d.saved.clone());
        methods.list_always("bdev");
        methods.section("scheduler", &[], |_| Vec::new());
        methods.section("nvmf", &["bdev"], |_| vec![json!({"method": "x"})]);
        Daemon { methods, saved }
    }

    fn call(d: &Daemon, m: &str, p: Value) -> Result<Value, RpcError> {
        d.methods
            .call(d, d.state(), m, Some(&p).filter(|p| !p.is_null()))
    }

    #[test]
    fn subsystems_are_the_sections_with_calls_or_always_listed() {
        let d = daemon(Vec::new());
        assert_eq!(
            call(&d, "framework_get_subsystems", Value::Null).unwrap(),
            json!([{"subsystem": "bdev", "depends_on": []}, {"subsystem": "nvmf", "depends_on": ["bdev"]}])
        );
        let e = call(&d, "framework_get_subsystems", json!({})).unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
    }

    #[test]
    fn config_of_a_section_and_of_none() {
        let d = daemon(vec![json!({"method": "bdev_null_create"})]);
        assert_eq!(
            call(
                &d,
                "framework_get_config",
                json!({"name": "bdev", "with_batches": true})
            )
            .unwrap(),
            json!([{"method": "bdev_null_create"}])
        );
        assert_eq!(
            call(&d, "framework_get_config", json!({"name": "scheduler"})).unwrap(),
            json!([])
        );
        let e = call(&d, "framework_get_config", json!({"name": "iscsi"})).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-32602, "Subsystem 'iscsi' not found")
        );
    }

    #[test]
    fn wait_init_answers_true_at_runtime() {
        let d = daemon(Vec::new());
        assert_eq!(
            call(&d, "framework_wait_init", Value::Null).unwrap(),
            json!(true)
        );
    }

    #[test]
    fn a_call_runs_in_the_daemons_state() {
        let d = daemon(Vec::new());
        let call = |method: &str| Call {
            id: Some(json!(1)),
            method: method.into(),
            params: None,
        };
        assert!(super::call(&d, &call("framework_get_subsystems")).is_ok());
        // The daemon is at runtime: a start-up method is refused with SPDK's state error.
        let e = super::call(&d, &call("framework_start_init")).unwrap_err();
        assert_eq!(e.code, code::INVALID_STATE);
        let e = super::call(&d, &call("nope")).unwrap_err();
        assert_eq!(e, RpcError::method_not_found());
    }

    #[test]
    fn methods_listed_all_or_current() {
        let d = daemon(Vec::new());
        let all = call(&d, "rpc_get_methods", Value::Null).unwrap();
        assert!(
            all.as_array()
                .unwrap()
                .contains(&json!("framework_start_init"))
        );
        let now = call(&d, "rpc_get_methods", json!({"current": true})).unwrap();
        assert!(
            !now.as_array()
                .unwrap()
                .contains(&json!("framework_start_init"))
        );
        assert!(
            now.as_array()
                .unwrap()
                .contains(&json!("framework_get_config"))
        );
    }
}
