//! ANA by RPC: rpc.py's requests for `nvmf_create_subsystem -r`, `nvmf_subsystem_add_ns
//! --anagrpid`, `nvmf_subsystem_listener_set_ana_state`, SPDK's `ana_states` listing and
//! errors, and save_config replayed on a fresh daemon giving the same states.

use serde_json::{Value, json};

use super::config;
use super::testutil::{call, daemon, free_port};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn listen(port: &str) -> Value {
    json!({"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": port, "adrfam": "ipv4"})
}

/// The ANA states `nvmf_subsystem_get_listeners` lists for the listener on `port`.
fn states(d: &super::testutil::Daemon, port: &str) -> Vec<(u64, String)> {
    let ls = call(d, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap();
    let l = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["address"]["trsvcid"] == port)
        .unwrap_or_else(|| panic!("no listener on {port}: {ls}"));
    l["ana_states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["ana_group"].as_u64().unwrap(),
                s["ana_state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn ana_states_by_rpc_and_save_config() {
    let d = daemon();
    call(&d, "nvmf_create_transport", json!({"trtype": "TCP"})).unwrap();
    call(
        &d,
        "bdev_malloc_create",
        json!({"name": "M0", "num_blocks": 64, "block_size": 512}),
    )
    .unwrap();
    call(
        &d,
        "bdev_malloc_create",
        json!({"name": "M1", "num_blocks": 64, "block_size": 512}),
    )
    .unwrap();
    call(
        &d,
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true, "max_namespaces": 4, "ana_reporting": true,
            "min_cntlid": 1, "max_cntlid": 100, "passthrough": false, "enable_nssr": false}),
    )
    .unwrap();
    // Group given, and SPDK's default: the NSID.
    let ns = |bdev: &str, g: Option<u32>| {
        let mut n = json!({"bdev_name": bdev, "no_auto_visible": false, "hide_metadata": false});
        if let Some(g) = g {
            n["anagrpid"] = json!(g);
        }
        json!({"nqn": NQN, "namespace": n})
    };
    assert_eq!(
        call(&d, "nvmf_subsystem_add_ns", ns("M0", Some(3))).unwrap(),
        1
    );
    assert_eq!(
        call(&d, "nvmf_subsystem_add_ns", ns("M1", None)).unwrap(),
        2
    );
    let e = call(&d, "nvmf_subsystem_add_ns", ns("M1", Some(5))).unwrap_err();
    assert_eq!(e.code, -32602, "{}", e.message);
    let subs = call(&d, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap();
    assert_eq!(subs[0]["namespaces"][0]["anagrpid"], 3);
    assert_eq!(subs[0]["namespaces"][1]["anagrpid"], 2);

    let (pa, pb) = (free_port(), free_port());
    call(
        &d,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "secure_channel": false, "listen_address": listen(&pa)}),
    )
    .unwrap();
    call(
        &d,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "secure_channel": false, "ana_state": "non_optimized",
            "listen_address": listen(&pb)}),
    )
    .unwrap();
    let all = |s: &str| (1..=4).map(|g| (g, s.to_string())).collect::<Vec<_>>();
    assert_eq!(states(&d, &pa), all("optimized"));
    assert_eq!(states(&d, &pb), all("non_optimized"));

    // rpc.py's request: one group, then every group.
    let set = json!({"nqn": NQN, "ana_state": "inaccessible", "anagrpid": 3,
        "listen_address": listen(&pa)});
    assert_eq!(
        call(&d, "nvmf_subsystem_listener_set_ana_state", set).unwrap(),
        true
    );
    let mut want = all("optimized");
    want[2].1 = "inaccessible".into();
    assert_eq!(states(&d, &pa), want);
    call(
        &d,
        "nvmf_subsystem_listener_set_ana_state",
        json!({"nqn": NQN, "ana_state": "optimized", "listen_address": listen(&pb)}),
    )
    .unwrap();
    assert_eq!(states(&d, &pb), all("optimized"));

    // SPDK's refusals.
    for (p, code) in [
        (
            json!({"nqn": NQN, "ana_state": "change", "listen_address": listen(&pa)}),
            -32602,
        ),
        (
            json!({"nqn": NQN, "ana_state": "optimized", "anagrpid": 9, "listen_address": listen(&pa)}),
            -32603,
        ),
        (
            json!({"nqn": NQN, "ana_state": "optimized", "listen_address": listen(&free_port())}),
            -32603,
        ),
        (
            json!({"nqn": "nqn.2016-06.io.spdk:none", "ana_state": "optimized",
                "listen_address": listen(&pa)}),
            -32602,
        ),
    ] {
        let e = call(&d, "nvmf_subsystem_listener_set_ana_state", p.clone()).unwrap_err();
        assert_eq!(e.code, code, "{p}: {}", e.message);
    }
    let e = call(
        &d,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "ana_state": "persistent_loss", "listen_address": listen(&free_port())}),
    )
    .unwrap_err();
    assert_eq!(e.code, -32602, "{}", e.message);

    // save_config replayed on a fresh daemon gives the same listing.
    let cfg = config(&d.nvmf);
    let methods: Vec<&str> = cfg.iter().map(|c| c["method"].as_str().unwrap()).collect();
    assert!(
        methods.contains(&"nvmf_subsystem_listener_set_ana_state"),
        "{methods:?}"
    );
    let create = cfg
        .iter()
        .find(|c| c["method"] == "nvmf_create_subsystem")
        .unwrap();
    assert_eq!(create["params"]["ana_reporting"], true);
    let before = call(&d, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap();
    let subs_before = call(&d, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap();
    drop(d);
    let d2 = daemon();
    for bdev in ["M0", "M1"] {
        call(
            &d2,
            "bdev_malloc_create",
            json!({"name": bdev, "num_blocks": 64, "block_size": 512}),
        )
        .unwrap();
    }
    for c in &cfg {
        call(&d2, c["method"].as_str().unwrap(), c["params"].clone())
            .unwrap_or_else(|e| panic!("{c}: {}", e.message));
    }
    assert_eq!(
        call(&d2, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap(),
        before
    );
    let subs_after = call(&d2, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap();
    assert_eq!(
        subs_after[0]["namespaces"], subs_before[0]["namespaces"],
        "NSIDs, identities and ANA groups"
    );
}

#[test]
fn set_ana_state_needs_ana_reporting() {
    let d = daemon();
    call(&d, "nvmf_create_transport", json!({"trtype": "TCP"})).unwrap();
    call(&d, "nvmf_create_subsystem", json!({"nqn": NQN})).unwrap();
    let p = free_port();
    call(
        &d,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": listen(&p)}),
    )
    .unwrap();
    let e = call(
        &d,
        "nvmf_subsystem_listener_set_ana_state",
        json!({"nqn": NQN, "ana_state": "inaccessible", "listen_address": listen(&p)}),
    )
    .unwrap_err();
    assert_eq!(e.code, -32603);
    assert!(
        e.message.contains("ANA reporting is disabled"),
        "{}",
        e.message
    );
    // Without ANA reporting SPDK lists no states.
    let ls = call(&d, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap();
    assert!(ls[0].get("ana_states").is_none(), "{ls}");
}
