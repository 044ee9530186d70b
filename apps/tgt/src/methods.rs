//! The RPC method table and the methods that need nothing but the target state.
//!
//! Names, parameters and result shapes are SPDK's (reference/spdk-rpc.md), so rpc.py and scripts
//! written for `spdk_tgt` work unchanged. Each method has SPDK's state mask: start-up methods run
//! only before `framework_start_init` (`--wait-for-rpc`), runtime methods only after.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::target::Target;
use pmio_jsonrpc::decl;
use pmio_jsonrpc::framework::KillInstance;
use pmio_jsonrpc::server::Handler;
use pmio_jsonrpc::{Call, RpcError, code};
use pmio_jsonrpc::{RUNTIME, Registry, STARTUP};

/// A method of pmio-tgt: it runs on the daemon's [`Rpc`].
pub type Method = pmio_jsonrpc::Method<Rpc>;

/// A method body as a plain function (the form this crate's modules write theirs in).
pub type MethodFn = fn(&Rpc, &str, Option<&Value>) -> Result<Value, RpcError>;

/// What `spdk_kill_instance` does once its reply is sent: deliver `signal` to the daemon.
pub type KillFn = Box<dyn Fn(i32) + Send + Sync>;

/// The RPC front end of a [`Target`]: method lookup, state checks, dispatch.
pub struct Rpc {
    /// The daemon state.
    pub target: Arc<Target>,
    methods: Registry<Rpc>,
    on_kill: KillFn,
    /// The `-c` configuration held back by `--wait-for-rpc` until `framework_start_init`.
    pending_config: std::sync::Mutex<Option<pmio_config::Document>>,
    /// Settings mapped from SPDK configurations (NVMe driver defaults, scheduler).
    pub settings: pmio_config::settings::Settings,
}

/// The daemon as the configuration loader sees it.
fn as_daemon(rpc: &Rpc) -> &(dyn pmio_config::Daemon + 'static) {
    rpc
}

/// The bdev host the bdev modules' methods run on.
fn bdevs(rpc: &Rpc) -> &Arc<pmio_runtime::rpc::BdevHost> {
    &rpc.target.bdevs
}

/// The NVMe/TCP target the nvmf and sock methods run on.
fn nvmf(rpc: &Rpc) -> &pmio_nvmf::rpc::NvmfRpc {
    &rpc.target.nvmf
}

/// Every method of pmio-tgt (what [`Rpc::new`] serves; `--check-config` asks it without a
/// daemon).
pub fn all_methods() -> Registry<Rpc> {
    let mut methods = Registry::new();
    // The sections of save_config in replay order: the keys come first (NVMe-oF hosts and
    // NVMe controllers name them), the NVMe-oF target's namespaces need their bdevs, its
    // listeners the socket options.
    methods.order_sections(&[
        "keyring",
        "sock",
        "bdev",
        "vhost_blk",
        "ublk",
        "nvmf",
        "scheduler",
    ]);
    methods.section("bdev", &[], bdev_config);
    methods.list_always("bdev");
    // A scheduler loaded from a configuration is saved in SPDK's section for it.
    methods.section("scheduler", &[], |rpc: &Rpc| {
        rpc.settings.saved_scheduler().into_iter().collect()
    });
    methods.extend(base_methods());
    methods.extend(pmio_jsonrpc::framework::methods());
    methods.merge(
        pmio_reactors::rpc::methods().into_iter().collect(),
        |rpc: &Rpc| &rpc.target.reactors,
    );
    methods.merge(pmio_runtime::rpc::methods(), bdevs);
    methods.merge(pmio_null::rpc::methods().into_iter().collect(), bdevs);
    methods.merge(pmio_malloc::rpc::methods().into_iter().collect(), bdevs);
    methods.merge(pmio_uring::rpc::methods().into_iter().collect(), bdevs);
    methods.merge(pmio_raid::rpc::methods(), |r: &Rpc| &r.target.raid);
    methods.merge(
        pmio_lvol::rpc::methods().into_iter().collect(),
        |r: &Rpc| &r.target.lvol,
    );
    methods.merge(pmio_rbd::rpc::methods().into_iter().collect(), |r: &Rpc| {
        &r.target.rbd
    });
    methods.merge(
        pmio_nvme::rpc::methods().into_iter().collect(),
        |r: &Rpc| &*r.target.nvme,
    );
    methods.merge(pmio_keyring::rpc::methods(), |r: &Rpc| &r.target.keyring);
    methods.merge(pmio_nvmf::rpc::methods(), nvmf);
    methods.merge(pmio_vhost::rpc::methods(), |rpc: &Rpc| &rpc.target.vhost);
    methods.merge(pmio_ublk::rpc::methods(), |rpc: &Rpc| &rpc.target.ublk);
    methods.merge(pmio_config::methods().into_iter().collect(), as_daemon);
    methods
}

impl Rpc {
    /// The full method table over `target`; `on_kill` handles `spdk_kill_instance`.
    pub fn new(target: Arc<Target>, on_kill: KillFn) -> Rpc {
        Rpc {
            settings: pmio_config::settings::Settings::new(target.nvme.defaults().clone()),
            target,
            methods: all_methods(),
            on_kill,
            pending_config: std::sync::Mutex::new(None),
        }
    }

    /// Holds `doc` until `framework_start_init` (start-up with `--wait-for-rpc` and `-c`).
    pub fn defer_config(&self, doc: pmio_config::Document) {
        *self
            .pending_config
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(doc);
    }

    /// The state mask of `method`, if pmio has it.
    pub fn states_of(&self, method: &str) -> Option<u8> {
        self.methods.find(method).map(|m| m.states)
    }

    /// Names of every method, or of those callable in the current state.
    pub fn method_names(&self, current: bool) -> Vec<&'static str> {
        self.methods.names(current.then(|| self.target.state()))
    }

    /// Runs `method` with `params` as if it came over the socket (used for `-c` config files).
    pub fn invoke(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        if self.methods.find(method).is_none() {
            // What pmio does instead of an SPDK-only method, when it knows one.
            return Err(match pmio_config::not_found_detail(method) {
                Some(why) => {
                    RpcError::new(code::METHOD_NOT_FOUND, format!("Method not found: {why}"))
                }
                None => RpcError::method_not_found(),
            });
        }
        self.methods.call(self, self.target.state(), method, params)
    }
}

impl pmio_jsonrpc::framework::Framework for Rpc {
    fn registry(&self) -> &Registry<Rpc> {
        &self.methods
    }

    fn state(&self) -> pmio_jsonrpc::RpcState {
        self.target.state()
    }
}

impl pmio_config::Daemon for Rpc {
    fn invoke(&self, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
        Rpc::invoke(self, method, params)
    }

    fn states_of(&self, method: &str) -> Option<u8> {
        Rpc::states_of(self, method)
    }

    fn method_names(&self, current: bool) -> Vec<&'static str> {
        Rpc::method_names(self, current)
    }

    fn state(&self) -> pmio_jsonrpc::RpcState {
        self.target.state()
    }

    fn settings(&self) -> &pmio_config::settings::Settings {
        &self.settings
    }

    fn reactors(&self) -> &pmio_reactors::ReactorsHandle {
        self.target.reactors()
    }

    fn bdevs(&self) -> &pmio::bdev::Registry {
        &self.target.bdevs.registry
    }

    fn nvmf(&self) -> &Arc<pmio_nvmf::NvmfTarget> {
        &self.target.nvmf.tgt
    }

    fn nvme_ctrlrs(&self) -> Vec<pmio_nvme::rpc::CtrlrRecord> {
        self.target.nvme.ctrlrs()
    }
}

impl Handler for Rpc {
    fn call(&self, call: &Call) -> Result<Value, RpcError> {
        log::debug!("RPC {}", call.method);
        // rpc.py's load_config replays a file call by call on one connection: the session
        // makes that replay all-or-nothing (see pmio_config::session).
        pmio_config::session::call(self, call)
    }

    fn after_reply(&self, call: &Call) {
        if call.method == "spdk_kill_instance"
            && let Some(sig) = call
                .params
                .as_ref()
                .and_then(|p| p.get("sig_name"))
                .and_then(Value::as_str)
                .and_then(signal_number)
        {
            (self.on_kill)(sig);
        }
    }
}

/// Refuses parameters for a method that takes none (SPDK's -32602 and text).
pub fn no_params(method: &str, params: Option<&Value>) -> Result<(), RpcError> {
    match params {
        None => Ok(()),
        Some(_) => Err(RpcError::no_params(method)),
    }
}

/// Signal number for SPDK's `sig_name` values (`SIGTERM`, `TERM`, `15`).
pub fn signal_number(name: &str) -> Option<i32> {
    let n = name.strip_prefix("SIG").unwrap_or(name);
    match n {
        "INT" | "2" => Some(libc::SIGINT),
        "TERM" | "15" => Some(libc::SIGTERM),
        "QUIT" | "3" => Some(libc::SIGQUIT),
        "HUP" | "1" => Some(libc::SIGHUP),
        "KILL" | "9" => Some(libc::SIGKILL),
        _ => None,
    }
}

fn base_methods() -> Vec<Method> {
    const ANY: u8 = STARTUP | RUNTIME;
    vec![
        Method::new("spdk_get_version", ANY, spdk_get_version),
        Method::new("spdk_kill_instance", ANY, spdk_kill_instance),
        Method::new("framework_start_init", STARTUP, framework_start_init),
    ]
}

fn spdk_get_version(_: &Rpc, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    no_params(method, params)?;
    let v = env!("CARGO_PKG_VERSION");
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    Ok(json!({
        "version": format!("pmio v{v}"),
        "fields": {
            "major": parts.next().unwrap_or(0),
            "minor": parts.next().unwrap_or(0),
            "patch": parts.next().unwrap_or(0),
            "suffix": ""
        }
    }))
}

fn spdk_kill_instance(_: &Rpc, _: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let sig = decl::decode::<KillInstance>(params)?.sig_name;
    if signal_number(&sig).is_none() {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("signal number not found (sig_name \"{sig}\")"),
        ));
    }
    // The signal is delivered in `after_reply`, once `true` has reached the client.
    Ok(Value::Bool(true))
}

fn framework_start_init(
    rpc: &Rpc,
    method: &str,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    no_params(method, params)?;
    if !rpc.target.start_runtime() {
        return Err(RpcError::new(
            code::INVALID_STATE,
            "framework is already initialized",
        ));
    }
    log::info!("framework initialized (runtime state)");
    let doc = rpc
        .pending_config
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(doc) = doc {
        let r = pmio_config::apply(rpc, &doc).map_err(|e| {
            RpcError::errno_detail(
                -libc::EINVAL,
                format_args!("applying the -c configuration: {e}"),
            )
        })?;
        log::info!("-c configuration applied: {}", r.totals());
    }
    Ok(Value::Bool(true))
}

/// The method calls that recreate every bdev, controller and scheduler setting, in order.
pub fn bdev_config(rpc: &Rpc) -> Vec<Value> {
    let t = &rpc.target;
    // NVMe driver defaults first: they apply to the controllers attached after them.
    let mut out: Vec<Value> = rpc.settings.saved_nvme().into_iter().collect();
    // Ceph cluster registrations before the rbd bdevs that use them.
    out.extend(t.rbd.config());
    // The RAID process options before the arrays (SPDK writes module options first).
    out.extend(t.raid.config());
    out.extend(t.bdevs.create_calls());
    out.extend(t.nvme.config());
    out.extend(pmio_runtime::rpc::scheduler::config(&t.bdevs));
    out.extend(pmio_runtime::rpc::histogram::config(&t.bdevs));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmio_jsonrpc::RpcState;
    use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};

    fn rpc(state: RpcState) -> (Reactors, Rpc) {
        let reactors = Reactors::start(
            CoreMask::parse("0x1").unwrap(),
            ReactorsOptions {
                pin_threads: false,
                interrupt_idle: Some(std::time::Duration::from_millis(1)),
                ..ReactorsOptions::default()
            },
        )
        .unwrap();
        let target = Arc::new(Target::new(reactors.handle(), state));
        (reactors, Rpc::new(target, Box::new(|_| {})))
    }

    fn call(r: &Rpc, m: &str, p: Value) -> Result<Value, RpcError> {
        r.invoke(m, Some(&p).filter(|p| !p.is_null()))
    }

    #[test]
    fn startup_state_gates_runtime_methods() {
        let (_re, r) = rpc(RpcState::Startup);
        let e = call(
            &r,
            "bdev_null_create",
            json!({"name": "N", "num_blocks": 8, "block_size": 512}),
        )
        .unwrap_err();
        assert_eq!(e.code, -1);
        assert!(e.message.contains("framework_start_init"), "{}", e.message);
        assert!(r.method_names(true).contains(&"framework_start_init"));
        assert!(!r.method_names(true).contains(&"bdev_null_create"));
        assert_eq!(
            call(&r, "framework_start_init", Value::Null).unwrap(),
            json!(true)
        );
        assert_eq!(
            call(&r, "framework_start_init", Value::Null)
                .unwrap_err()
                .code,
            -1
        );
        assert!(
            call(
                &r,
                "bdev_null_create",
                json!({"name": "N", "num_blocks": 8, "block_size": 512})
            )
            .is_ok()
        );
    }

    #[test]
    fn create_conflict_delete_by_module() {
        let (_re, r) = rpc(RpcState::Runtime);
        let p = json!({"name": "X", "num_blocks": 8, "block_size": 512});
        assert_eq!(
            call(&r, "bdev_malloc_create", p.clone()).unwrap(),
            json!("X")
        );
        let e = call(&r, "bdev_null_create", p).unwrap_err();
        assert_eq!(e.code, -17);
        assert!(e.message.contains("Malloc disk"), "{}", e.message);
        assert_eq!(
            call(&r, "bdev_null_delete", json!({"name": "X"}))
                .unwrap_err()
                .code,
            -19
        );
        let e = call(
            &r,
            "bdev_malloc_create",
            json!({"name": "Y", "num_blocks": 8, "block_size": 512, "md_size": 8}),
        )
        .unwrap_err();
        assert_eq!(e.code, -libc::EOPNOTSUPP);
        let e = call(
            &r,
            "bdev_null_create",
            json!({"name": "Z", "num_blocks": 0, "block_size": 512}),
        )
        .unwrap_err();
        assert_eq!(e.code, -libc::EINVAL);
        assert_eq!(
            call(&r, "bdev_malloc_delete", json!({"name": "X"})).unwrap(),
            json!(true)
        );
        assert_eq!(call(&r, "bdev_get_bdevs", Value::Null).unwrap(), json!([]));
    }

    #[test]
    fn config_replays_into_a_fresh_target() {
        let (_a, r) = rpc(RpcState::Runtime);
        call(
            &r,
            "bdev_null_create",
            json!({"name": "N0", "num_blocks": 64, "block_size": 4096}),
        )
        .unwrap();
        call(
            &r,
            "bdev_malloc_create",
            json!({"num_blocks": 16, "block_size": 512}),
        )
        .unwrap();
        call(
            &r,
            "bdev_set_scheduler",
            json!({"name": "N0", "scheduler": "mq-deadline", "fifo_batch": 4}),
        )
        .unwrap();
        let cfg = json!({"subsystems": [{"subsystem": "bdev", "config": bdev_config(&r)}]});
        let calls = pmio_config::parse(&cfg.to_string()).unwrap();
        let (_b, r2) = rpc(RpcState::Runtime);
        pmio_config::apply(&r2, &calls).unwrap();
        let a = call(&r, "bdev_get_bdevs", Value::Null).unwrap();
        let b = call(&r2, "bdev_get_bdevs", Value::Null).unwrap();
        assert_eq!(a, b);
        assert_eq!(bdev_config(&r), bdev_config(&r2));
        let s = call(&r2, "bdev_get_scheduler", json!({"name": "N0"})).unwrap();
        assert_eq!(s[0]["tunables"]["fifo_batch"], 4);
    }

    #[test]
    fn perform_tests_runs_on_reactors_and_feeds_iostat() {
        let (_re, r) = rpc(RpcState::Runtime);
        call(
            &r,
            "bdev_null_create",
            json!({"name": "N0", "num_blocks": 1024, "block_size": 512}),
        )
        .unwrap();
        let out = call(
            &r,
            "perform_tests",
            json!({"bdevs": ["N0"], "rw": "randread", "depth": 8, "seconds": 0.2}),
        )
        .unwrap();
        let j = &out["results"][0];
        assert_eq!(j["status"], "finished");
        assert!(j["iops"].as_f64().unwrap() > 0.0);
        let st = call(&r, "bdev_get_iostat", json!({"name": "N0"})).unwrap();
        assert!(st["bdevs"][0]["num_read_ops"].as_u64().unwrap() > 0);
        // Bad inputs are refused before anything runs.
        for (p, code) in [
            (json!({"bdevs": ["nope"]}), -19),
            (json!({"bdevs": ["N0"], "size": 100}), -22),
            (json!({"bdevs": ["N0"], "rw": "verify"}), -22),
            (json!({"bdevs": ["N0"], "seconds": 0}), -22),
            (json!({"bdevs": ["N0"], "depth": 0}), -22),
            (
                json!({"bdevs": ["N0"], "depth": 4096, "size": 1 << 20}),
                -22,
            ),
            (json!({"bdevs": ["N0"], "size": 1u64 << 40}), -22),
            (json!({"bdevs": ["N0"], "bogus": 1}), -32603),
        ] {
            assert_eq!(
                call(&r, "perform_tests", p.clone()).unwrap_err().code,
                code,
                "{p}"
            );
        }
    }

    #[test]
    fn iostat_counts_running_jobs_and_resets() {
        let (_re, r) = rpc(RpcState::Runtime);
        let r = Arc::new(r);
        call(
            &r,
            "bdev_null_create",
            json!({"name": "N0", "num_blocks": 1024, "block_size": 512}),
        )
        .unwrap();
        let r2 = r.clone();
        let job = std::thread::spawn(move || {
            call(
                &r2,
                "perform_tests",
                json!({"bdevs": ["N0"], "depth": 4, "seconds": 1.0}),
            )
            .unwrap()
        });
        let reads = |r: &Rpc| {
            call(r, "bdev_get_iostat", json!({"name": "N0"})).unwrap()["bdevs"][0]["num_read_ops"]
                .as_u64()
                .unwrap()
        };
        let mut during = 0;
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            during = reads(&r);
            if during > 0 {
                break;
            }
        }
        assert!(during > 0, "no live statistics while the job runs");
        let out = job.join().unwrap();
        let after = reads(&r);
        assert!(after >= during);
        // Every completion of the job is counted exactly once.
        let ios = (out["results"][0]["iops"].as_f64().unwrap()
            * out["results"][0]["runtime"].as_f64().unwrap())
        .round() as u64;
        assert!(after.abs_diff(ios) <= 1 + ios / 1000, "{after} vs {ios}");
        call(
            &r,
            "bdev_get_iostat",
            json!({"names": ["N0"], "reset_mode": "all"}),
        )
        .unwrap();
        assert_eq!(reads(&r), 0);
    }

    /// `bdev_nvme_set_options` (a configuration setting) sets the NVMe module's defaults for
    /// later attaches, with SPDK's rules between the reconnect knobs.
    #[test]
    fn nvme_set_options_reach_the_nvme_module() {
        let (_re, r) = rpc(RpcState::Runtime);
        call(
            &r,
            "bdev_nvme_set_options",
            json!({"ctrlr_loss_timeout_sec": 20, "reconnect_delay_sec": 2}),
        )
        .unwrap();
        let d = r.target.nvme.defaults().get().reconnect;
        assert_eq!(
            (d.ctrlr_loss_timeout_sec, d.reconnect_delay_sec),
            (Some(20), Some(2))
        );
        assert_eq!(bdev_config(&r)[0]["method"], "bdev_nvme_set_options");
        let e = call(
            &r,
            "bdev_nvme_set_options",
            json!({"ctrlr_loss_timeout_sec": 5, "reconnect_delay_sec": 6}),
        )
        .unwrap_err();
        assert_eq!(e.code, -32602, "{}", e.message);
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_number("SIGTERM"), Some(libc::SIGTERM));
        assert_eq!(signal_number("INT"), Some(libc::SIGINT));
        assert_eq!(signal_number("9"), Some(libc::SIGKILL));
        assert_eq!(signal_number("SIGFOO"), None);
        let (_re, r) = rpc(RpcState::Runtime);
        let e = call(&r, "spdk_kill_instance", json!({"sig_name": "SIGFOO"})).unwrap_err();
        assert_eq!(e.code, -32602);
    }
}
