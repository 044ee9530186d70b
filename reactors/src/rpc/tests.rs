//! The methods' answers against the keys SPDK's `spdk_top` decodes (`app/spdk_top/spdk_top.c`:
//! `rpc_core_info_decoders`, `rpc_thread_info_decoders`, `rpc_pollers_decoders`, ...), which
//! refuse a key they do not list.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::{CoreMask, PollerResult, Reactors, ReactorsOptions};

#[test]
fn cpumask_as_spdk_formats_it() {
    let rows = [(0, "1"), (1, "2"), (3, "8"), (4, "10"), (9, "200")];
    for (core, want) in rows {
        assert_eq!(cpumask(core), want, "core {core}");
    }
    for core in 0..128 {
        assert_eq!(cpumask(core), format!("{:x}", 1u128 << core));
    }
    // Beyond u128: still one digit and zeros.
    assert_eq!(cpumask(1023).len(), 256);
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

fn set<'a>(k: &[&'a str]) -> BTreeSet<&'a str> {
    k.iter().copied().collect()
}

fn call(r: &ReactorsRpc, name: &str) -> Value {
    let m = methods().into_iter().find(|m| m.name == name).unwrap();
    (m.run)(r, name, None).unwrap()
}

/// One reactor with an active poller busy every other run and a 1 ms timed poller.
fn reactors() -> Reactors {
    let mask = CoreMask::from_cores([CoreMask::available().unwrap().first()]).unwrap();
    let r = Reactors::start(mask, ReactorsOptions::default()).unwrap();
    r.run_on_all(|ctx| {
        let mut n = 0u64;
        ctx.register_poller("every_other", move |_| {
            n += 1;
            n.is_multiple_of(2)
        });
        ctx.register_timed_poller("tick", Duration::from_millis(1), |_| PollerResult::Idle);
    })
    .unwrap();
    r
}

#[test]
fn reactors_threads_and_pollers_carry_exactly_spdks_keys() {
    let r = reactors();
    let rpc = ReactorsRpc::new(r.handle());
    std::thread::sleep(Duration::from_millis(20));

    let fr = call(&rpc, "framework_get_reactors");
    assert_eq!(keys(&fr), set(&["tick_rate", "pid", "reactors"]));
    let core = &fr["reactors"][0];
    assert_eq!(
        keys(core),
        set(&[
            "lcore",
            "tid",
            "busy",
            "idle",
            "in_interrupt",
            "irq",
            "sys",
            "usr",
            "lw_threads"
        ])
    );
    let lw = &core["lw_threads"][0];
    assert_eq!(keys(lw), set(&["name", "id", "cpumask", "elapsed"]));
    assert_eq!(lw["id"], 1 + core["lcore"].as_u64().unwrap());

    let ts = call(&rpc, "thread_get_stats");
    let t = &ts["threads"][0];
    assert_eq!(
        keys(t),
        set(&[
            "name",
            "id",
            "cpumask",
            "busy",
            "idle",
            "active_pollers_count",
            "timed_pollers_count",
            "paused_pollers_count"
        ])
    );
    assert_eq!((&t["name"], &t["id"]), (&lw["name"], &lw["id"]));
    assert_eq!(t["active_pollers_count"], 1);
    assert_eq!(t["timed_pollers_count"], 1);

    let tp = call(&rpc, "thread_get_pollers");
    assert_eq!(tp["tick_rate"], TICK_RATE);
    let th = &tp["threads"][0];
    assert_eq!(
        keys(th),
        set(&[
            "name",
            "id",
            "active_pollers",
            "timed_pollers",
            "paused_pollers"
        ])
    );
    let active = &th["active_pollers"][0];
    assert_eq!(
        keys(active),
        set(&["name", "id", "state", "run_count", "busy_count"])
    );
    assert_eq!(
        (&active["name"], &active["state"]),
        (&"every_other".into(), &"waiting".into())
    );
    let (runs, busy) = (
        active["run_count"].as_u64().unwrap(),
        active["busy_count"].as_u64().unwrap(),
    );
    assert!(runs > 10 && busy.abs_diff(runs / 2) <= 1, "{active}");
    let timed = &th["timed_pollers"][0];
    assert_eq!(timed["name"], "tick");
    assert_eq!(timed["period_ticks"], 1_000_000);
    assert!(timed["run_count"].as_u64().unwrap() >= 1, "{timed}");
    assert_eq!(timed["busy_count"], 0);
    assert_eq!(th["paused_pollers"], Value::Array(Vec::new()));

    // Counts only grow.
    std::thread::sleep(Duration::from_millis(10));
    let again = call(&rpc, "thread_get_pollers");
    let a2 = &again["threads"][0]["active_pollers"][0];
    assert_eq!(a2["id"], active["id"]);
    assert!(a2["run_count"].as_u64().unwrap() > runs);
    r.stop().unwrap();
}

#[test]
fn parameters_are_refused() {
    let r = reactors();
    let rpc = ReactorsRpc::new(r.handle());
    for m in methods() {
        let e = (m.run)(&rpc, m.name, Some(&serde_json::json!({}))).unwrap_err();
        assert_eq!(e.code, pmio_jsonrpc::code::INVALID_PARAMS, "{}", m.name);
    }
    r.stop().unwrap();
}
