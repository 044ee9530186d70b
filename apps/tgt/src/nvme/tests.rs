//! `bdev_nvme_*` over NVMe/TCP, in one process: one daemon state serves a subsystem over
//! 127.0.0.1 (pmio-nvmf), another attaches it as SPDK's host would.

use serde_json::{Value, json};

use crate::config::testutil::{call, free_port, rpc};
use crate::methods::Rpc;
use pmio_jsonrpc::RpcState;

const NQN: &str = "nqn.2016-06.io.pmio:nvme-tests";

/// A subsystem with a 4 MiB malloc namespace on 127.0.0.1:`port`.
fn serve(r: &Rpc, port: u16) {
    call(
        r,
        "bdev_malloc_create",
        json!({"name": "Malloc0", "num_blocks": 8192, "block_size": 512}),
    )
    .unwrap();
    call(r, "nvmf_create_transport", json!({"trtype": "TCP"})).unwrap();
    call(
        r,
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true}),
    )
    .unwrap();
    call(
        r,
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    )
    .unwrap();
    call(
        r,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": {"trtype": "tcp", "traddr": "127.0.0.1",
            "trsvcid": port.to_string()}}),
    )
    .unwrap();
}

fn attach_params(name: &str, port: u16) -> Value {
    json!({"name": name, "trtype": "tcp", "traddr": "127.0.0.1", "adrfam": "ipv4",
        "trsvcid": port.to_string(), "subnqn": NQN, "prchk_reftag": false,
        "prchk_guard": false, "hdgst": false, "ddgst": true, "allow_unrecognized_csi": false,
        "hostnqn": "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000018"})
}

#[test]
fn tcp_attach_list_save_detach() {
    let port = free_port();
    let (_t, tgt) = rpc(RpcState::Runtime);
    serve(&tgt, port);
    let (_h, host) = rpc(RpcState::Runtime);
    call(
        &host,
        "bdev_nvme_set_options",
        json!({"ctrlr_loss_timeout_sec": 20, "reconnect_delay_sec": 2}),
    )
    .unwrap();
    let p = attach_params("Nvme0", port);
    assert_eq!(
        call(&host, "bdev_nvme_attach_controller", p.clone()).unwrap(),
        json!(["Nvme0n1"])
    );
    // The same name on the same path again: the names, nothing new.
    assert_eq!(
        call(&host, "bdev_nvme_attach_controller", p).unwrap(),
        json!(["Nvme0n1"])
    );
    // Another name on the same path, the same name elsewhere: -17 naming the other.
    let e = call(
        &host,
        "bdev_nvme_attach_controller",
        attach_params("Nvme1", port),
    )
    .unwrap_err();
    assert_eq!(e.code, -libc::EEXIST);
    assert!(e.message.contains("as controller Nvme0"), "{}", e.message);
    let e = call(
        &host,
        "bdev_nvme_attach_controller",
        attach_params("Nvme0", free_port()),
    )
    .unwrap_err();
    assert_eq!(e.code, -libc::EEXIST);

    let b = call(&host, "bdev_get_bdevs", json!({"name": "Nvme0n1"})).unwrap();
    assert_eq!(b[0]["num_blocks"], 8192);
    assert_eq!(b[0]["driver_specific"]["nvme"][0]["trid"]["trtype"], "TCP");
    let c = call(&host, "bdev_nvme_get_controllers", Value::Null).unwrap();
    assert_eq!(
        c,
        json!([{"name": "Nvme0", "ctrlrs": [{
            "state": "enabled",
            "trid": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1",
                "trsvcid": port.to_string(), "subnqn": NQN},
            "cntlid": c[0]["ctrlrs"][0]["cntlid"],
            "host": {"nqn": "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000018",
                "addr": "", "svcid": ""}}]}])
    );
    assert_eq!(
        call(&host, "bdev_nvme_get_controllers", json!({"name": "Nope"}))
            .unwrap_err()
            .code,
        -libc::ENODEV
    );
    // The target sees the host's controller.
    let tc = call(&tgt, "nvmf_subsystem_get_controllers", json!({"nqn": NQN})).unwrap();
    assert_eq!(tc.as_array().unwrap().len(), 1, "{tc}");

    // save_config: the set_options defaults, then the attach with every knob it used.
    let saved = crate::methods::bdev_config(&host);
    assert_eq!(saved[0]["method"], "bdev_nvme_set_options");
    let a = &saved[1]["params"];
    assert_eq!(saved[1]["method"], "bdev_nvme_attach_controller");
    assert_eq!(
        (
            &a["trtype"],
            &a["trsvcid"],
            &a["ctrlr_loss_timeout_sec"],
            &a["reconnect_delay_sec"],
            &a["ddgst"]
        ),
        (
            &json!("TCP"),
            &json!(port.to_string()),
            &json!(20),
            &json!(2),
            &json!(true)
        )
    );

    // A path that does not match is not detached; the right one is.
    let e = call(
        &host,
        "bdev_nvme_detach_controller",
        json!({"name": "Nvme0", "trsvcid": "1"}),
    )
    .unwrap_err();
    assert_eq!(e.code, -libc::ENODEV);
    call(
        &host,
        "bdev_nvme_detach_controller",
        json!({"name": "Nvme0", "trtype": "TCP", "subnqn": NQN}),
    )
    .unwrap();
    assert_eq!(
        call(&host, "bdev_get_bdevs", Value::Null).unwrap(),
        json!([])
    );
    crate::shutdown(&host);
    crate::shutdown(&tgt);
}

#[test]
fn tcp_attach_failures() {
    let (_h, host) = rpc(RpcState::Runtime);
    // Nothing listens: the driver's reason, and nothing is left reserved.
    let port = free_port();
    let e = call(
        &host,
        "bdev_nvme_attach_controller",
        attach_params("Nvme0", port),
    )
    .unwrap_err();
    assert_eq!(e.code, -libc::EIO, "{}", e.message);
    assert!(e.message.contains(&port.to_string()), "{}", e.message);
    assert!(host.target.attaching_mut().is_empty());
    assert_eq!(
        call(&host, "bdev_nvme_get_controllers", Value::Null).unwrap(),
        json!([])
    );
    // SPDK's rules between the knobs: a delay needs a loss timeout.
    let mut p = attach_params("Nvme0", port);
    p["reconnect_delay_sec"] = json!(1);
    let e = call(&host, "bdev_nvme_attach_controller", p).unwrap_err();
    assert_eq!(e.code, -libc::EINVAL, "{}", e.message);
    let e = call(
        &host,
        "bdev_nvme_set_options",
        json!({"ctrlr_loss_timeout_sec": 5, "reconnect_delay_sec": 6}),
    )
    .unwrap_err();
    assert_eq!(e.code, -32602, "{}", e.message);
}
