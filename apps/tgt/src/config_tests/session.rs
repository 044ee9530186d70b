use serde_json::{Value, json};

use pmio_config::session;
use pmio_jsonrpc::{Call, RpcError};

use super::testutil::{SAMPLE, rpc};
use crate::methods::Rpc;
use pmio_jsonrpc::RpcState;
use pmio_jsonrpc::server::Handler;

fn active() -> bool {
    session::active()
}

fn req(r: &Rpc, method: &str, params: Value) -> Result<Value, RpcError> {
    r.call(&Call {
        id: Some(json!(1)),
        method: method.into(),
        params: Some(params).filter(|p| !p.is_null()),
    })
}

/// rpc.py's load_config, as `spdk/rpc/__init__.py` does it, over `r`.
fn rpc_py_load(r: &Rpc, doc: &Value) -> Result<(), RpcError> {
    let subsystems: Vec<Value> = doc["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["config"].as_array().is_some_and(|c| !c.is_empty()))
        .cloned()
        .collect();
    let allowed = req(r, "rpc_get_methods", json!({"include_aliases": false}))?;
    for s in &subsystems {
        for e in s["config"].as_array().unwrap() {
            assert!(
                allowed.as_array().unwrap().contains(&e["method"]),
                "Unknown method {}",
                e["method"]
            );
        }
    }
    let allowed = req(
        r,
        "rpc_get_methods",
        json!({"current": true, "include_aliases": false}),
    )?;
    for s in &subsystems {
        for e in s["config"].as_array().unwrap() {
            if allowed.as_array().unwrap().contains(&e["method"]) {
                req(r, e["method"].as_str().unwrap(), e["params"].clone())?;
            }
        }
    }
    Ok(())
}

#[test]
fn rpc_py_replay_loads_the_spdk_sample() {
    let (_re, r) = rpc(RpcState::Runtime);
    std::thread::scope(|t| {
        t.spawn(|| {
            rpc_py_load(&r, &serde_json::from_str(SAMPLE).unwrap()).unwrap();
            assert!(active());
            // A query ends the session, keeping what it made.
            req(&r, "bdev_get_bdevs", Value::Null).unwrap();
            assert!(!active());
        });
    });
    let b = req(&r, "bdev_get_bdevs", Value::Null).unwrap();
    assert_eq!(b.as_array().unwrap().len(), 2);
}

#[test]
fn rpc_py_replay_stops_and_rolls_back_at_a_refusal() {
    let (_re, r) = rpc(RpcState::Runtime);
    let doc = json!({"subsystems": [
        {"subsystem": "bdev", "config": [
            {"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
            {"method": "bdev_null_create", "params": {"name": "N0", "num_blocks": 64, "block_size": 512}},
            {"method": "bdev_ocf_create", "params": {"name": "Cache0", "mode": "wt",
                "cache_bdev_name": "M0", "core_bdev_name": "N0"}}]},
        {"subsystem": "nvmf", "config": [
            {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:c9"}}]}]});
    let e = std::thread::scope(|t| {
        t.spawn(|| {
            let e = rpc_py_load(&r, &doc).unwrap_err();
            assert!(!active());
            e
        })
        .join()
        .unwrap()
    });
    assert_eq!(e.code, -libc::EOPNOTSUPP);
    assert!(
        e.message
            .contains("bdev section: bdev_ocf_create Cache0 refused: pmio has no OCF cache"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("load_config rolled back: removed bdev N0, bdev M0"),
        "{}",
        e.message
    );
    assert_eq!(req(&r, "bdev_get_bdevs", Value::Null).unwrap(), json!([]));
    // Outside a session the refused methods are not listed.
    let all = req(
        &r,
        "rpc_get_methods",
        json!({"current": false, "include_aliases": false}),
    )
    .unwrap();
    assert!(!all.as_array().unwrap().contains(&json!("bdev_ocf_create")));
}

#[test]
fn ordinary_clients_never_start_a_session() {
    let (_re, r) = rpc(RpcState::Runtime);
    std::thread::scope(|t| {
        t.spawn(|| {
            req(
                &r,
                "rpc_get_methods",
                json!({"current": false, "include_aliases": false}),
            )
            .unwrap();
            req(
                &r,
                "bdev_malloc_create",
                json!({"name": "A", "num_blocks": 8, "block_size": 512}),
            )
            .unwrap();
            assert!(!active());
            // A failing call on a long-lived connection removes nothing else.
            assert!(
                req(
                    &r,
                    "bdev_malloc_create",
                    json!({"name": "A", "num_blocks": 8, "block_size": 512})
                )
                .is_err()
            );
        });
    });
    assert_eq!(
        req(&r, "bdev_get_bdevs", Value::Null).unwrap()[0]["name"],
        "A"
    );
}
