//! `bdev_nvme_*` over NVMe/TCP, in one process: pmio-nvmf serves a subsystem over 127.0.0.1
//! on its reactors, the module attaches it as SPDK's host would.

use std::sync::Arc;

use pmio::bdev::Registry as BdevRegistry;
use pmio_jsonrpc::{Registry, RpcError, RpcState};
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_nvmf::{ListenAddr, NvmfTarget, SubsystemParams, TransportOpts};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
use pmio_runtime::rpc::BdevHost;
use serde_json::{Value, json};

use super::defaults::{NvmeDefaults, Reconnect};
use super::{NvmeRpc, methods};

const NQN: &str = "nqn.2016-06.io.pmio:nvme-tests";

/// One unpinned reactor.
fn reactors() -> Reactors {
    Reactors::start(
        CoreMask::parse("0x1").unwrap(),
        ReactorsOptions {
            pin_threads: false,
            interrupt_idle: Some(std::time::Duration::from_millis(1)),
            ..ReactorsOptions::default()
        },
    )
    .unwrap()
}

/// The module on a bdev host of its own, with the bdev layer's methods beside its own (what a
/// daemon merges).
struct Host {
    nvme: NvmeRpc,
    methods: Registry<NvmeRpc>,
    bdev_methods: Registry<Arc<BdevHost>>,
    _reactors: Reactors,
}

fn host() -> Host {
    let _ = env_logger::builder().is_test(true).try_init();
    let reactors = reactors();
    Host {
        nvme: NvmeRpc::new(Arc::new(BdevHost::new(reactors.handle()))),
        methods: methods().into_iter().collect(),
        bdev_methods: pmio_runtime::rpc::methods(),
        _reactors: reactors,
    }
}

fn call(h: &Host, m: &str, p: Value) -> Result<Value, RpcError> {
    let p = Some(&p).filter(|p| !p.is_null());
    if h.methods.find(m).is_some() {
        h.methods.call(&h.nvme, RpcState::Runtime, m, p)
    } else {
        h.bdev_methods.call(&h.nvme.bdevs, RpcState::Runtime, m, p)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// pmio-nvmf serving a subsystem with a 4 MiB malloc namespace.
struct Served {
    tgt: Arc<NvmfTarget>,
    _reactors: Reactors,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.tgt.shutdown();
    }
}

/// A subsystem with a 4 MiB malloc namespace on 127.0.0.1:`port`.
fn serve(port: u16) -> Served {
    let reactors = reactors();
    let registry = Arc::new(BdevRegistry::new());
    let dev = MallocDevice::new(MallocOptions {
        name: "Malloc0".into(),
        num_blocks: 8192,
        block_size: 512,
        ..MallocOptions::default()
    })
    .unwrap();
    registry.register(dev).unwrap();
    let tgt = NvmfTarget::new(reactors.handle(), registry);
    tgt.create_transport(TransportOpts::default()).unwrap();
    tgt.create_subsystem(&SubsystemParams {
        nqn: NQN.into(),
        allow_any_host: true,
        ..SubsystemParams::default()
    })
    .unwrap();
    tgt.add_ns(NQN, "Malloc0", 0, None, None, None, 0).unwrap();
    let la = ListenAddr::new("127.0.0.1", &port.to_string(), None).unwrap();
    tgt.add_listener(NQN, la).unwrap();
    Served {
        tgt,
        _reactors: reactors,
    }
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
    let tgt = serve(port);
    let host = host();
    // What `bdev_nvme_set_options {"ctrlr_loss_timeout_sec": 20, "reconnect_delay_sec": 2}`
    // sets in a daemon.
    host.nvme.defaults().set(NvmeDefaults {
        reconnect: Reconnect {
            ctrlr_loss_timeout_sec: Some(20),
            reconnect_delay_sec: Some(2),
            fast_io_fail_timeout_sec: None,
        },
        ..NvmeDefaults::default()
    });
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
    let tc = tgt.tgt.controllers(NQN).unwrap();
    assert_eq!(tc.len(), 1);

    // save_config: the attach with every knob it used.
    let saved = host.nvme.config();
    let a = &saved[0]["params"];
    assert_eq!(saved[0]["method"], "bdev_nvme_attach_controller");
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
    host.nvme.detach_all();
}

#[test]
fn tcp_attach_failures() {
    let host = host();
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
    assert!(host.nvme.attaching_mut().is_empty());
    assert_eq!(
        call(&host, "bdev_nvme_get_controllers", Value::Null).unwrap(),
        json!([])
    );
    // SPDK's rules between the knobs: a delay needs a loss timeout.
    let mut p = attach_params("Nvme0", port);
    p["reconnect_delay_sec"] = json!(1);
    let e = call(&host, "bdev_nvme_attach_controller", p).unwrap_err();
    assert_eq!(e.code, -libc::EINVAL, "{}", e.message);
}
