//! The embedding example `targets/nvmf/examples/malloc_tgt.rs` end to end: started on a
//! temporary socket, configured with pmio-rpc as pmio-tgt is (a malloc bdev, a subsystem with
//! it as namespace, a TCP listener on a free port), pmio's NVMe/TCP host writes and reads back
//! through it (`pmio-perf --verify`), it lists only the methods of the modules it includes,
//! writes their save_config sections, and stops cleanly on SIGTERM.

mod perf_util;
mod tgt_util;

use std::ffi::OsStr;

use serde_json::{Value, json};
use tgt_util::{Daemon, example, free_port};

const NQN: &str = "nqn.2016-06.io.pmio:example1";

/// The framework's, the bdev layer's and the malloc driver's methods; the rest must be the
/// NVMe/TCP target's (`nvmf_*`, `sock_*`).
const FRAMEWORK_BDEV_MALLOC: [&str; 9] = [
    "rpc_get_methods",
    "framework_get_subsystems",
    "framework_get_config",
    "framework_wait_init",
    "bdev_get_bdevs",
    "bdev_get_iostat",
    "bdev_examine",
    "bdev_malloc_create",
    "bdev_malloc_delete",
];

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|m| m.as_str().expect("a method name"))
        .collect()
}

#[test]
fn malloc_tgt_serves_a_malloc_bdev_over_nvme_tcp() {
    let bin = example("pmio-nvmf", "malloc_tgt");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("malloc_tgt.sock");
    let d = Daemon::start_program(&bin, &sock, &[sock.as_os_str(), OsStr::new("0x1")]);

    // Only the modules the example includes.
    let methods = d.rpc_json(&["rpc_get_methods"]);
    let methods = names(&methods);
    for m in &methods {
        assert!(
            FRAMEWORK_BDEV_MALLOC.contains(m) || m.starts_with("nvmf_") || m.starts_with("sock_"),
            "malloc_tgt serves {m}: {methods:?}"
        );
    }
    for m in FRAMEWORK_BDEV_MALLOC.iter().chain(&[
        "nvmf_create_transport",
        "nvmf_subsystem_add_ns",
        "sock_impl_get_options",
    ]) {
        assert!(methods.contains(m), "{m} missing: {methods:?}");
    }

    // Configured as pmio-tgt is.
    let port = free_port().to_string();
    assert_eq!(
        d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "16", "512"]),
        "Malloc0\n"
    );
    d.rpc_ok(&["nvmf_create_transport", "-t", "TCP"]);
    d.rpc_ok(&["nvmf_create_subsystem", NQN, "-a", "-s", "PMIO0001"]);
    d.rpc_ok(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
    d.rpc_ok(&[
        "nvmf_subsystem_add_listener",
        NQN,
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
    ]);
    // The target uses the bdev: it is not deleted under it.
    let out = d.rpc(&["bdev_malloc_delete", "Malloc0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("namespace 1 of NVMe-oF subsystem"));

    // What the host writes reads back (every read checked against the last write of its
    // block), on the other core where there is one.
    let dev = format!("nvmf:traddr=127.0.0.1,trsvcid={port},subnqn={NQN}");
    let core = if perf_util::cpus() >= 2 { "[1]" } else { "[0]" };
    let out = perf_util::perf(&[
        "-m", core, "--dev", &dev, "-b", "4096", "-w", "randrw", "-M", "50", "-d", "32", "-s", "8",
        "-c", "8", "-t", "1", "--verify", "--json",
    ]);
    let j = perf_util::verify_clean(&out, "randrw over NVMe/TCP to malloc_tgt");
    assert_eq!(j["devices"], json!(["Nvmf0n1"]), "{j}");

    // save_config's sections: the bdev, then the subsystem that takes it.
    let subsystems = d.rpc_json(&["framework_get_subsystems"]);
    let order: Vec<&Value> = subsystems
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["subsystem"])
        .collect();
    assert_eq!(order, [&json!("sock"), &json!("bdev"), &json!("nvmf")]);
    let bdev = d.rpc_json(&["framework_get_config", "bdev"]);
    assert_eq!(bdev[0]["method"], "bdev_malloc_create", "{bdev}");
    let nvmf = d.rpc_json(&["framework_get_config", "nvmf"]);
    assert!(
        nvmf.as_array()
            .unwrap()
            .iter()
            .any(|c| c["method"] == "nvmf_subsystem_add_ns"),
        "{nvmf}"
    );

    // SIGTERM: a clean stop that removes the socket.
    let log = d.log.clone();
    let status = d.signal(libc::SIGTERM);
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(log.contains("malloc_tgt stopped"), "{log}");
    assert!(!sock.exists(), "the socket is left behind");
}
