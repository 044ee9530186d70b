use serde_json::{Value, json};

use pmio_config::check::{self, World};
use pmio_config::document::parse;
use pmio_config::load::*;
use pmio_config::report::Verdict;
use pmio_jsonrpc::RpcState;

use super::testutil::{NVMF, SAMPLE, call, free_port, nvmf_fixture, rpc};
use crate::methods::Rpc;

fn names(r: &Rpc) -> Vec<String> {
    call(r, "bdev_get_bdevs", Value::Null)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect()
}

fn nqns(r: &Rpc) -> Vec<String> {
    r.target
        .nvmf
        .tgt
        .config()
        .subsystems
        .iter()
        .map(|s| s.nqn.clone())
        .collect()
}

#[test]
fn the_spdk_sample_loads() {
    let (_re, r) = rpc(RpcState::Runtime);
    let rep = apply(&r, &parse(SAMPLE).unwrap()).unwrap();
    assert_eq!(names(&r), ["Malloc0", "Null0"]);
    let b = call(&r, "bdev_get_bdevs", json!({"name": "Null0"})).unwrap();
    assert_eq!(b[0]["uuid"], "936bd35f-4de0-4658-aa00-5177613485bf");
    assert_eq!(b[0]["block_size"], 4096);
    assert_eq!(rep.count(Verdict::Create), 2);
    assert_eq!(rep.count(Verdict::Refuse), 0);
    assert!(rep.count(Verdict::Ignore) >= 10, "{}", rep.render());
    // "static" keeps the reactors as they were; it is saved back in its own section.
    assert_eq!(
        r.target.reactors().interrupt_idle(0),
        Some(std::time::Duration::from_millis(1))
    );
    assert_eq!(
        r.settings.saved_scheduler().unwrap()["params"],
        json!({"name": "static"})
    );
}

#[test]
fn the_spdk_nvmf_section_loads_and_round_trips() {
    let (text, io, disc) = nvmf_fixture();
    let (re, r) = rpc(RpcState::Runtime);
    apply(&r, &parse(&text).unwrap()).unwrap();
    assert_eq!(names(&r), ["Malloc0", "Malloc1", "Null0"]);
    let subs = call(&r, "nvmf_get_subsystems", Value::Null).unwrap();
    assert_eq!(subs[0]["listen_addresses"][0]["trsvcid"], disc.to_string());
    let c1 = &subs[1];
    assert_eq!(c1["nqn"], "nqn.2016-06.io.spdk:cnode1");
    assert_eq!(c1["allow_any_host"], false);
    assert_eq!(
        c1["hosts"][0]["nqn"],
        "nqn.2014-08.org.nvmexpress:uuid:6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
    );
    assert_eq!(c1["namespaces"][1]["nsid"], 2);
    assert_eq!(c1["namespaces"][1]["bdev_name"], "Malloc1");
    assert_eq!(
        c1["namespaces"][1]["nguid"],
        "B6A1E9D20F434E8B8C7752D9A3E1C6F4"
    );
    assert_eq!(c1["listen_addresses"][0]["trsvcid"], io.to_string());
    assert_eq!(subs[2]["max_namespaces"], 32);
    let t = call(&r, "nvmf_get_transports", Value::Null).unwrap();
    assert_eq!(t[0]["io_unit_size"], 8192);
    assert_eq!(t[0]["c2h_success"], false);
    // pmio's own save_config of it loads into a fresh daemon as the same target, once
    // this one has let go of its ports.
    let nvmf_saved = pmio_nvmf::rpc::config(&r.target.nvmf);
    let saved = json!({"subsystems": [
        {"subsystem": "bdev", "config": crate::methods::bdev_config(&r)},
        {"subsystem": "nvmf", "config": nvmf_saved}]});
    crate::shutdown(&r);
    drop(r);
    re.stop().unwrap();
    let (_re2, r2) = rpc(RpcState::Runtime);
    apply(&r2, &parse(&saved.to_string()).unwrap()).unwrap();
    assert_eq!(call(&r2, "nvmf_get_subsystems", Value::Null).unwrap(), subs);
    assert_eq!(call(&r2, "nvmf_get_transports", Value::Null).unwrap(), t);
    assert_eq!(
        json!(pmio_nvmf::rpc::config(&r2.target.nvmf)),
        saved["subsystems"][1]["config"]
    );
    crate::shutdown(&r2);
}

#[test]
fn a_failed_load_removes_what_it_created() {
    let (_re, r) = rpc(RpcState::Runtime);
    // Something that was there before the load stays whatever happens.
    call(
        &r,
        "bdev_null_create",
        json!({"name": "Old", "num_blocks": 8, "block_size": 512}),
    )
    .unwrap();
    let before_modes = r.target.reactors().interrupt_idle(0);
    // The port is taken by someone else: only binding finds out, after the rest exists.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let free = free_port();
    let doc = json!({"subsystems": [
        {"subsystem": "bdev", "config": [
            {"method": "bdev_nvme_set_options", "params": {"timeout_us": 2000000,
                "action_on_timeout": "reset"}},
            {"method": "bdev_malloc_create", "params": {"name": "M", "num_blocks": 64, "block_size": 512}}]},
        {"subsystem": "scheduler", "config": [
            {"method": "framework_set_scheduler", "params": {"name": "dynamic"}}]},
        {"subsystem": "nvmf", "config": [
            {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
            {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:c1"}},
            {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:c1",
                "namespace": {"bdev_name": "M"}}},
            {"method": "nvmf_subsystem_add_host", "params": {"nqn": "nqn.2016-06.io.spdk:c1",
                "host": "nqn.2014-08.org.nvmexpress:uuid:1"}},
            {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2016-06.io.spdk:c1",
                "listen_address": {"trtype": "TCP", "traddr": "127.0.0.1", "trsvcid": free.to_string()}}},
            {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2016-06.io.spdk:c1",
                "listen_address": {"trtype": "TCP", "traddr": "127.0.0.1", "trsvcid": port.to_string()}}}]}]});
    let e = apply(&r, &parse(&doc.to_string()).unwrap()).unwrap_err();
    assert!(e.message.contains("subsystems[2] (nvmf) config[5]"), "{e}");
    assert!(
        e.message.contains(&format!("listener 127.0.0.1:{port}")),
        "{e}"
    );
    for gone in [
        "listener 127.0.0.1",
        "host nqn.2014-08.org.nvmexpress:uuid:1",
        "namespace on bdev M",
        "subsystem nqn.2016-06.io.spdk:c1",
        "bdev M",
        "settings restored",
        "the TCP transport stays",
    ] {
        assert!(e.message.contains(gone), "{gone}: {e}");
    }
    assert_eq!(names(&r), ["Old"]);
    assert_eq!(nqns(&r), [pmio_nvmf::subsystem::DISCOVERY_NQN]);
    // The target no longer listens on the port the load had bound. (Binding the port again
    // here would race with other tests' connections, whose kernel-chosen source ports can be
    // this number.)
    let listening = r
        .target
        .nvmf
        .tgt
        .config()
        .subsystems
        .iter()
        .any(|s| s.listeners.iter().any(|l| l.trsvcid == free.to_string()));
    assert!(
        !listening,
        "a listener on port {free} survived the rollback"
    );
    assert_eq!(r.settings.state(), Default::default());
    assert_eq!(r.target.reactors().interrupt_idle(0), before_modes);
    // Fixed, the same file loads: the transport left behind is taken as it is.
    drop(busy);
    apply(&r, &parse(&doc.to_string()).unwrap()).unwrap();
    assert_eq!(names(&r), ["Old", "M"]);
    assert_eq!(
        r.settings.nvme_options("Nvme9").io_timeout,
        std::time::Duration::from_secs(2)
    );
    // The mapped NVMe options come first in the bdev section of save_config.
    assert_eq!(
        crate::methods::bdev_config(&r)[0]["method"],
        "bdev_nvme_set_options"
    );
    r.target.nvmf.tgt.shutdown();
}

#[test]
fn a_failed_load_puts_old_settings_of_objects_back() {
    let (_re, r) = rpc(RpcState::Runtime);
    call(
        &r,
        "bdev_null_create",
        json!({"name": "N0", "num_blocks": 64, "block_size": 512}),
    )
    .unwrap();
    call(
        &r,
        "nvmf_create_subsystem",
        json!({"nqn": "nqn.2016-06.io.spdk:c1"}),
    )
    .unwrap();
    call(
        &r,
        "bdev_set_scheduler",
        json!({"name": "N0", "scheduler": "mq-deadline", "fifo_batch": 4}),
    )
    .unwrap();
    // The check passes (the path exists); creating a bdev on a directory fails.
    let doc = json!({"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_set_scheduler", "params": {"name": "N0", "scheduler": "none"}},
        {"method": "nvmf_subsystem_allow_any_host",
            "params": {"nqn": "nqn.2016-06.io.spdk:c1", "allow_any_host": true}},
        {"method": "bdev_uring_create", "params": {"name": "U", "filename": "/"}}]}]});
    let e = apply(&r, &parse(&doc.to_string()).unwrap()).unwrap_err();
    assert!(e.message.contains("bdev_uring_create (bdev U)"), "{e}");
    let s = call(&r, "bdev_get_scheduler", json!({"name": "N0"})).unwrap();
    assert_eq!(s[0]["scheduler"], "mq-deadline");
    assert_eq!(s[0]["tunables"]["fifo_batch"], 4);
    let c1 = r.target.nvmf.tgt.config();
    assert!(
        !c1.subsystem("nqn.2016-06.io.spdk:c1")
            .unwrap()
            .allow_any_host
    );
}

/// The check mirrors the methods' decoding: every key shape rpc.py and SPDK send, checked
/// clean, is taken by the method too (a stricter check would refuse good files).
#[test]
fn every_key_the_check_takes_the_method_takes() {
    let (_re, r) = rpc(RpcState::Runtime);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("disk");
    std::fs::write(&file, vec![0u8; 1 << 20]).unwrap();
    let port = free_port().to_string();
    let nqn = "nqn.2016-06.io.spdk:keys";
    let bdev = vec![
        json!({"method": "bdev_null_create", "params": {"name": "N", "num_blocks": 64,
                "block_size": 512, "uuid": "12345678-1234-4234-8234-123456789abc",
                "physical_block_size": 512, "md_size": 0, "dif_type": 0,
                "dif_is_head_of_md": false, "dif_pi_format": 0,
                "preferred_write_granularity": 0, "preferred_write_alignment": 0,
                "optimal_write_size": 0, "preferred_unmap_granularity": 0,
                "preferred_unmap_alignment": 0}}),
        json!({"method": "bdev_malloc_create", "params": {"num_blocks": 64, "block_size": 512,
                "physical_block_size": 0, "optimal_io_boundary": 0, "md_size": 0,
                "md_interleave": false, "dif_type": 0, "dif_is_head_of_md": false,
                "dif_pi_format": 0, "numa_id": -1}}),
        json!({"method": "bdev_uring_create", "params": {"name": "U", "filename": file,
                "block_size": 512, "uuid": "22345678-1234-4234-8234-123456789abc",
                "direct": false}}),
        json!({"method": "bdev_aio_create", "params": {"name": "A", "filename": file,
                "block_size": 512, "readonly": false, "fallocate": false}}),
        json!({"method": "bdev_set_scheduler", "params": {"name": "N", "scheduler": "mq-deadline",
                "read_expire": 500, "write_expire": 5000, "writes_starved": 2,
                "front_merges": 1, "fifo_batch": 16, "prio_aging_expire": 10000,
                "nr_requests": 64}}),
    ];
    let nvmf = vec![
        json!({"method": "nvmf_create_transport", "params": {"trtype": "tcp", "tgt_name": "nvmf_tgt",
                "max_queue_depth": 64, "max_io_qpairs_per_ctrlr": 8, "in_capsule_data_size": 8192,
                "max_io_size": 131072, "io_unit_size": 131072, "max_aq_depth": 32,
                "num_shared_buffers": 4095, "buf_cache_size": 32, "dif_insert_or_strip": false,
                "zcopy": false, "c2h_success": true, "sock_priority": 0, "abort_timeout_sec": 1,
                "ack_timeout": 0, "data_wr_pool_size": 0, "disable_command_passthru": false,
                "no_srq": false, "no_wr_batching": false, "disable_mappable_bar0": false,
                "disable_adaptive_irq": false, "disable_shadow_doorbells": false,
                "num_cqe": 0, "max_srq_depth": 0, "acceptor_backlog": 100,
                "acceptor_poll_rate": 10000, "control_msg_num": 32, "kas": 0, "min_kato": 1000}}),
        json!({"method": "nvmf_create_subsystem", "params": {"nqn": nqn, "tgt_name": "nvmf_tgt",
                "serial_number": "SPDK0001", "model_number": "pmio", "max_namespaces": 4,
                "allow_any_host": false, "ana_reporting": false, "min_cntlid": 1,
                "max_cntlid": 100, "max_discard_size_kib": 0, "max_write_zeroes_size_kib": 0,
                "passthrough": false, "enable_nssr": false}}),
        json!({"method": "nvmf_subsystem_add_host", "params": {"nqn": nqn, "tgt_name": "nvmf_tgt",
                "host": "nqn.2014-08.org.nvmexpress:uuid:2"}}),
        json!({"method": "nvmf_subsystem_add_ns", "params": {"nqn": nqn, "tgt_name": "nvmf_tgt",
                "namespace": {"nsid": 3, "bdev_name": "12345678-1234-4234-8234-123456789abc",
                    "nguid": "00112233445566778899AABBCCDDEEFF", "eui64": "0011223344556677",
                    "uuid": "32345678-1234-4234-8234-123456789abc", "anagrpid": 0,
                    "no_auto_visible": false, "hide_metadata": false}}}),
        json!({"method": "nvmf_subsystem_add_listener", "params": {"nqn": nqn, "tgt_name": "nvmf_tgt",
                "listen_address": {"trtype": "TCP", "adrfam": "ipv4", "traddr": "127.0.0.1",
                    "trsvcid": port}, "secure_channel": false, "ana_state": "optimized",
                "sock_impl": "posix"}}),
        json!({"method": "nvmf_subsystem_allow_any_host", "params": {"nqn": nqn,
                "allow_any_host": true, "tgt_name": "nvmf_tgt"}}),
    ];
    let doc = json!({"subsystems": [{"subsystem": "bdev", "config": bdev},
        {"subsystem": "nvmf", "config": nvmf}]});
    let doc = parse(&doc.to_string()).unwrap();
    let checked = check::check(&doc, World::of(&r));
    assert_eq!(checked.count(Verdict::Refuse), 0, "{}", checked.render());
    apply(&r, &doc).unwrap();
    assert_eq!(names(&r), ["N", "Malloc0", "U", "A"]);
    crate::shutdown(&r);
}

#[test]
fn refusals_stop_before_anything_is_created() {
    let (_re, r) = rpc(RpcState::Runtime);
    let doc = r#"{"subsystems":[{"subsystem":"bdev","config":[
        {"method":"bdev_malloc_create","params":{"name":"M0","num_blocks":64,"block_size":512}},
        {"method":"bdev_malloc_create","params":{"name":"M1","num_blocks":64,"block_size":512}},
        {"method":"bdev_ocf_create","params":{"name":"Cache0","mode":"wt","cache_bdev_name":"M0","core_bdev_name":"M1"}}]},
        {"subsystem":"iscsi","config":[
        {"method":"iscsi_create_target_node","params":{"name":"disk1","alias_name":"d","luns":[{"bdev_name":"Cache0","lun_id":0}]}}]}]}"#;
    let e = apply(&r, &parse(doc).unwrap()).unwrap_err();
    assert_eq!(e.code, -libc::EOPNOTSUPP);
    assert!(
        e.message
            .starts_with("configuration refused, nothing was applied"),
        "{e}"
    );
    assert!(
        e.message.contains(
            "subsystems[0] (bdev) config[2]: bdev_ocf_create Cache0: pmio has no OCF cache"
        ),
        "{e}"
    );
    assert!(
        e.message
            .contains("subsystems[1] (iscsi) config[0]: iscsi_create_target_node disk1"),
        "{e}"
    );
    assert!(names(&r).is_empty());
}

#[test]
fn start_up_state_runs_settings_then_init_then_objects() {
    let (_re, r) = rpc(RpcState::Startup);
    let rep = apply(&r, &parse(SAMPLE).unwrap()).unwrap();
    assert_eq!(r.target.state(), RpcState::Runtime);
    assert_eq!(names(&r), ["Malloc0", "Null0"]);
    // Settings (allowed at start-up) were reported before the creates.
    let first_create = rep
        .lines
        .iter()
        .position(|l| l.verdict == Verdict::Create)
        .unwrap();
    assert!(
        rep.lines[..first_create]
            .iter()
            .any(|l| l.method == "iobuf_set_options")
    );
    assert!(
        !rep.lines[first_create..]
            .iter()
            .any(|l| l.method == "iobuf_set_options")
    );
}

#[test]
fn load_config_method_answers_the_report() {
    let (_re, r) = rpc(RpcState::Runtime);
    let v = call(&r, "load_config", serde_json::from_str(SAMPLE).unwrap()).unwrap();
    assert_eq!(
        v["created"],
        json!([
            "bdev_malloc_create: bdev Malloc0",
            "bdev_null_create: bdev Null0"
        ])
    );
    assert!(v["ignored"].as_array().unwrap().iter().any(|l| {
        l.as_str()
            .unwrap()
            .starts_with("iobuf_set_options: pmio has no shared iobuf pool")
    }));
    // The same again: the bdevs exist (SPDK refuses a second create too), nothing changes.
    let e = call(&r, "load_config", serde_json::from_str(SAMPLE).unwrap()).unwrap_err();
    assert!(
        e.message.contains("bdev Malloc0 already exists"),
        "{}",
        e.message
    );
    assert_eq!(names(&r), ["Malloc0", "Null0"]);
    for bad in [
        json!({}),
        json!({"subsystems": 1}),
        json!({"subsystems": [], "x": 1}),
    ] {
        assert_eq!(call(&r, "load_config", bad).unwrap_err().code, -32602);
    }
    // A refused method called on its own is "Method not found", with why.
    let e = call(&r, "bdev_ocf_create", json!({"name": "C"})).unwrap_err();
    assert_eq!(e.code, -32601);
    assert!(e.message.contains("pmio has no OCF cache"), "{}", e.message);
    let _ = NVMF;
}
