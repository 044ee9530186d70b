//! The nvmf methods against rpc.py's requests and SPDK's replies.

use serde_json::{Value, json};

use super::config;
use super::rules::Hex;
use super::testutil::{call, daemon, free_port};
use crate::subsystem::DISCOVERY_NQN;

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

#[test]
fn hex_round_trip() {
    let b: Hex<8> = "ABCDEF0123456789".parse().unwrap();
    assert_eq!(b.to_string(), "ABCDEF0123456789");
    assert!("ABCDEF012345678".parse::<Hex<8>>().is_err());
    assert!("ABCDEF012345678G".parse::<Hex<8>>().is_err());
    assert!(
        "fe828eed-8ef3-4fcf-80c2-8367daa6"
            .parse::<Hex<16>>()
            .is_err()
    );
}

#[test]
fn rpc_py_requests_and_spdk_replies() {
    let r = daemon();
    // rpc.py's nvmf_create_transport -t TCP, every other transport's keys included.
    let create = json!({"trtype": "TCP", "c2h_success": true, "no_srq": false, "zcopy": false,
        "dif_insert_or_strip": false, "no_wr_batching": false, "disable_mappable_bar0": false,
        "disable_adaptive_irq": false, "disable_shadow_doorbells": false,
        "disable_command_passthru": false});
    assert_eq!(
        call(&r, "nvmf_create_transport", create.clone()).unwrap(),
        json!(true)
    );
    let e = call(&r, "nvmf_create_transport", create).unwrap_err();
    assert_eq!(e.code, -32603);
    assert!(
        e.message.starts_with("Transport type 'TCP' already exists"),
        "{}",
        e.message
    );
    let e = call(&r, "nvmf_create_transport", json!({"trtype": "RDMA"})).unwrap_err();
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("'RDMA'"), "{}", e.message);
    let t = call(&r, "nvmf_get_transports", Value::Null).unwrap();
    assert_eq!(t[0]["trtype"], "TCP");
    assert_eq!(t[0]["max_queue_depth"], 128);
    assert_eq!(t[0]["io_unit_size"], 131072);
    // The replayed transport of save_config is accepted as is.
    let cfg = config(&r.nvmf);
    assert_eq!(cfg[0]["method"], "nvmf_create_transport");
    let r2 = daemon();
    call(&r2, "nvmf_create_transport", cfg[0]["params"].clone()).unwrap();
    assert_eq!(call(&r2, "nvmf_get_transports", Value::Null).unwrap(), t);

    let sub = json!({"nqn": NQN, "serial_number": "SPDK00000000000001", "allow_any_host": true,
        "max_namespaces": 10, "ana_reporting": false, "passthrough": false, "enable_nssr": false});
    assert_eq!(
        call(&r, "nvmf_create_subsystem", sub.clone()).unwrap(),
        json!(true)
    );
    let e = call(&r, "nvmf_create_subsystem", sub).unwrap_err();
    assert_eq!(e.code, -32603);
    assert!(
        e.message
            .starts_with(&format!("Unable to create subsystem {NQN}")),
        "{}",
        e.message
    );
    // Unknown keys and wrong types: SPDK's -32602, naming the key.
    let e = call(&r, "nvmf_delete_subsystem", json!({"nqn": NQN, "x": 1})).unwrap_err();
    assert_eq!(e.code, -32602);
    assert!(e.message.contains("\"x\""), "{}", e.message);
    let e = call(
        &r,
        "nvmf_subsystem_remove_ns",
        json!({"nqn": NQN, "nsid": "1"}),
    )
    .unwrap_err();
    assert_eq!(e.code, -32602);
    let e = call(&r, "nvmf_get_subsystems", json!({"tgt_name": "other"})).unwrap_err();
    assert_eq!(e.code, -32603);

    call(
        &r,
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 256, "block_size": 512,
            "uuid": "fe828eed-8ef3-4fcf-80c2-8367daa65457"}),
    )
    .unwrap();
    let add = json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0", "no_auto_visible": false,
        "hide_metadata": false}});
    assert_eq!(call(&r, "nvmf_subsystem_add_ns", add).unwrap(), json!(1));
    let e = call(
        &r,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Nope"}}),
    )
    .unwrap_err();
    assert_eq!(e.code, -32602);
    assert!(e.message.starts_with("Invalid parameters"), "{}", e.message);
    // The bdev is claimed while it backs a namespace.
    let e = call(&r, "bdev_malloc_delete", json!({"name": "Malloc0"})).unwrap_err();
    assert_eq!(e.code, -libc::EBUSY);
    assert!(e.message.contains(NQN), "{}", e.message);
    let b = call(&r, "bdev_get_bdevs", json!({"name": "Malloc0"})).unwrap();
    assert_eq!(b[0]["claimed"], true);

    let s = call(&r, "nvmf_get_subsystems", Value::Null).unwrap();
    assert_eq!(s[0]["nqn"], DISCOVERY_NQN);
    assert_eq!(s[0]["subtype"], "Discovery");
    assert!(s[0].get("namespaces").is_none());
    assert_eq!(s[1]["subtype"], "NVMe");
    assert_eq!(s[1]["max_namespaces"], 10);
    assert_eq!(
        s[1]["namespaces"][0],
        json!({"nsid": 1, "bdev_name": "Malloc0", "name": "Malloc0",
            "nguid": "FE828EED8EF34FCF80C28367DAA65457",
            "uuid": "fe828eed-8ef3-4fcf-80c2-8367daa65457"})
    );
    assert_eq!(
        call(&r, "nvmf_subsystem_get_controllers", json!({"nqn": NQN})).unwrap(),
        json!([])
    );
    let st = call(&r, "nvmf_get_stats", Value::Null).unwrap();
    assert_eq!(st["poll_groups"][0]["name"], "nvmf_tgt_poll_group_000");
    assert_eq!(st["poll_groups"][0]["transports"][0]["trtype"], "TCP");

    assert_eq!(
        call(
            &r,
            "nvmf_subsystem_remove_ns",
            json!({"nqn": NQN, "nsid": 1})
        )
        .unwrap(),
        json!(true)
    );
    assert_eq!(
        call(&r, "bdev_malloc_delete", json!({"name": "Malloc0"})).unwrap(),
        json!(true)
    );
    assert_eq!(
        call(&r, "nvmf_delete_subsystem", json!({"nqn": NQN})).unwrap(),
        json!(true)
    );
    let e = call(&r, "nvmf_delete_subsystem", json!({"nqn": NQN})).unwrap_err();
    assert_eq!(e.code, -32602);
}

#[test]
fn namespace_identities_and_hosts() {
    let r = daemon();
    call(&r, "nvmf_create_subsystem", json!({"nqn": NQN})).unwrap();
    call(
        &r,
        "bdev_null_create",
        json!({"name": "N0", "num_blocks": 64, "block_size": 512}),
    )
    .unwrap();
    let nsid = call(
        &r,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "N0", "nsid": 5,
            "nguid": "00112233445566778899AABBCCDDEEFF", "eui64": "0123456789ABCDEF",
            "uuid": "12345678-1234-4234-8234-123456789abc"}}),
    )
    .unwrap();
    assert_eq!(nsid, json!(5));
    let ns = &call(&r, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap()[0]["namespaces"][0];
    assert_eq!(ns["nguid"], "00112233445566778899AABBCCDDEEFF");
    assert_eq!(ns["eui64"], "0123456789ABCDEF");
    assert_eq!(ns["uuid"], "12345678-1234-4234-8234-123456789abc");
    for bad in [
        json!({"bdev_name": "N0", "nguid": "0011"}),
        json!({"bdev_name": "N0", "uuid": "nope"}),
        json!({"bdev_name": "N0", "nsid": 5}),
    ] {
        let e = call(
            &r,
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": bad}),
        )
        .unwrap_err();
        assert_eq!(e.code, -32602, "{bad}: {}", e.message);
    }
    let e = call(
        &r,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "N0", "ptpl_file": "/x"}}),
    )
    .unwrap_err();
    assert_eq!(e.code, -libc::EOPNOTSUPP);

    let host = "nqn.2014-08.org.nvmexpress:uuid:1234";
    let add = json!({"nqn": NQN, "host": host});
    call(&r, "nvmf_subsystem_add_host", add.clone()).unwrap();
    assert_eq!(
        call(&r, "nvmf_subsystem_add_host", add.clone())
            .unwrap_err()
            .code,
        -32603
    );
    let s = call(&r, "nvmf_get_subsystems", json!({"nqn": NQN})).unwrap();
    assert_eq!(s[0]["hosts"], json!([{"nqn": host}]));
    assert_eq!(s[0]["allow_any_host"], false);
    call(
        &r,
        "nvmf_subsystem_allow_any_host",
        json!({"nqn": NQN, "allow_any_host": true}),
    )
    .unwrap();
    call(&r, "nvmf_subsystem_remove_host", add.clone()).unwrap();
    assert_eq!(
        call(&r, "nvmf_subsystem_remove_host", add)
            .unwrap_err()
            .code,
        -32603
    );
    let e = call(
        &r,
        "nvmf_subsystem_add_host",
        json!({"nqn": "nqn.2016-06.io.spdk:none", "host": host}),
    )
    .unwrap_err();
    assert_eq!(e.code, -32602);
    assert_eq!(
        call(&r, "nvmf_get_subsystems", json!({"nqn": "nqn.x:y"}))
            .unwrap_err()
            .code,
        -19
    );
}

#[test]
fn listeners_need_a_transport_and_tcp() {
    let r = daemon();
    call(&r, "nvmf_create_subsystem", json!({"nqn": NQN})).unwrap();
    let port = free_port();
    let listen = json!({"nqn": NQN, "secure_channel": false,
        "listen_address": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": port}});
    let e = call(&r, "nvmf_subsystem_add_listener", listen.clone()).unwrap_err();
    assert_eq!(e.code, -32602);
    call(&r, "nvmf_create_transport", json!({"trtype": "tcp"})).unwrap();
    assert_eq!(
        call(&r, "nvmf_subsystem_add_listener", listen.clone()).unwrap(),
        json!(true)
    );
    assert_eq!(
        call(&r, "nvmf_subsystem_add_listener", listen.clone())
            .unwrap_err()
            .code,
        -32602
    );
    let want = json!({"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port});
    assert_eq!(
        call(&r, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap(),
        json!([{ "address": want }])
    );
    for bad in [
        json!({"trtype": "rdma", "traddr": "127.0.0.1", "trsvcid": "4420"}),
        json!({"trtype": "tcp", "traddr": "127.0.0.1"}),
        json!({"trtype": "tcp", "traddr": "localhost", "trsvcid": "4420"}),
        json!({"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "4420", "adrfam": "ipv6"}),
    ] {
        let e = call(
            &r,
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": bad}),
        )
        .unwrap_err();
        assert_eq!(e.code, -32602, "{bad}: {}", e.message);
    }
    let cfg = config(&r.nvmf);
    let methods: Vec<&str> = cfg.iter().map(|c| c["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "nvmf_create_transport",
            "nvmf_create_subsystem",
            "nvmf_subsystem_add_listener"
        ]
    );
    assert_eq!(cfg[2]["params"]["listen_address"], want);
    let remove = json!({"nqn": NQN, "listen_address": {"trtype": "TCP", "traddr": "127.0.0.1",
        "trsvcid": port, "adrfam": "IPv4"}});
    call(&r, "nvmf_subsystem_remove_listener", remove.clone()).unwrap();
    assert_eq!(
        call(&r, "nvmf_subsystem_remove_listener", remove)
            .unwrap_err()
            .code,
        -32602
    );
    assert_eq!(
        call(&r, "nvmf_subsystem_get_listeners", json!({"nqn": NQN})).unwrap(),
        json!([])
    );
}
