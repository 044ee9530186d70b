//! pmio-tgt's vhost-user-blk controllers through pmio-rpc: create with SPDK's parameters and
//! replies, the socket in the `-S` directory, what a front end is offered (GET_FEATURES over
//! the socket), a connected controller not deletable, a served bdev not deletable, bad cpumasks
//! and packed rings refused, save_config and a restart with -c. The data path is
//! `make vm-test-vhost` (QEMU) and pmio-vhost's own tests.

mod tgt_util;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use tgt_util::Daemon;

/// Sends GET_FEATURES (vhost-user request 1, version 1) and returns the features.
fn get_features(s: &mut UnixStream) -> u64 {
    let mut msg = Vec::new();
    for w in [1u32, 1, 0] {
        msg.extend_from_slice(&w.to_le_bytes());
    }
    s.write_all(&msg).unwrap();
    let mut reply = [0u8; 20];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(u32::from_le_bytes(reply[0..4].try_into().unwrap()), 1);
    assert_eq!(u32::from_le_bytes(reply[8..12].try_into().unwrap()), 8);
    u64::from_le_bytes(reply[12..20].try_into().unwrap())
}

fn err_text(d: &Daemon, args: &[&str]) -> String {
    let out = d.rpc(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn tgt_vhost_controllers() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let sdir = dir.path().to_str().unwrap().to_string();
    let d = Daemon::start(&sock, &["-S", &sdir]);
    d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "8", "4096"]);
    d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc1", "8", "512"]);
    assert_eq!(
        d.rpc_ok(&["vhost_create_blk_controller", "vhost.0", "Malloc0"]),
        ""
    );
    d.rpc_ok(&["vhost_create_blk_controller", "-r", "vhost.1", "Malloc1"]);
    assert!(dir.path().join("vhost.0").exists());

    // SPDK's replies, and pmio's refusals.
    let e = err_text(&d, &["vhost_create_blk_controller", "vhost.0", "Malloc1"]);
    assert!(e.contains("File exists"), "{e}");
    let e = err_text(
        &d,
        &["vhost_create_blk_controller", "-p", "vhost.2", "Malloc0"],
    );
    assert!(e.contains("packed_ring is not supported"), "{e}");
    let e = err_text(
        &d,
        &[
            "vhost_create_blk_controller",
            "--cpumask",
            "0x80",
            "vhost.2",
            "Malloc0",
        ],
    );
    assert!(e.contains("runs no reactor"), "{e}");
    let e = err_text(&d, &["vhost_create_blk_controller", "vhost.2", "Nope"]);
    assert!(e.contains("bdev Nope does not exist"), "{e}");
    let e = err_text(&d, &["vhost_create_blk_controller", "a/b", "Malloc0"]);
    assert!(e.contains("not a file name"), "{e}");
    let e = err_text(&d, &["vhost_get_controllers", "-n", "nope"]);
    assert!(e.contains("No such device"), "{e}");
    let e = err_text(&d, &["vhost_delete_controller", "nope"]);
    assert!(e.contains("No such device"), "{e}");
    let e = err_text(&d, &["bdev_malloc_delete", "Malloc0"]);
    assert!(e.contains("vhost controller vhost.0"), "{e}");

    let list = d.rpc_json(&["vhost_get_controllers"]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let c1 = &d.rpc_json(&["vhost_get_controllers", "-n", "vhost.1"])[0];
    assert_eq!(c1["ctrlr"], "vhost.1");
    assert_eq!(c1["cpumask"], "0x1");
    assert_eq!(c1["backend_specific"]["block"]["readonly"], true);
    assert_eq!(c1["backend_specific"]["block"]["bdev"], "Malloc1");
    assert_eq!(c1["socket"], dir.path().join("vhost.1").to_str().unwrap());
    assert_eq!(c1["sessions"].as_array().unwrap().len(), 0);

    // A front end: the offered features; a connected controller is not deleted.
    let mut fe = UnixStream::connect(dir.path().join("vhost.1")).unwrap();
    let f = get_features(&mut fe);
    for bit in [32, 30, 6, 5, 2, 1, 12, 28] {
        assert!(f & 1 << bit != 0, "feature bit {bit} missing from {f:#x}");
    }
    assert!(f & 1 << 34 == 0, "packed ring offered");
    assert!(
        f & 1 << 13 == 0,
        "discard offered on a read-only controller"
    );
    let e = err_text(&d, &["vhost_delete_controller", "vhost.1"]);
    assert!(e.contains("connected front end"), "{e}");
    assert_eq!(
        d.rpc_json(&["vhost_get_controllers", "-n", "vhost.1"])[0]["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    drop(fe);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d
        .rpc(&["vhost_delete_controller", "vhost.1"])
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "not deletable after the front end left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!dir.path().join("vhost.1").exists(), "socket left behind");
    d.rpc_ok(&["bdev_malloc_delete", "Malloc1"]);

    // save_config and -c.
    let cfg = d.rpc_ok(&["save_config"]);
    assert!(cfg.contains("\"vhost_blk\""), "{cfg}");
    assert!(cfg.contains("vhost_create_blk_controller"), "{cfg}");
    let path = dir.path().join("config.json");
    std::fs::write(&path, &cfg).unwrap();
    assert!(d.signal(libc::SIGTERM).success());
    let d = Daemon::start(&sock, &["-S", &sdir, "-c", path.to_str().unwrap()]);
    let list = d.rpc_json(&["vhost_get_controllers"]);
    assert_eq!(list[0]["ctrlr"], "vhost.0");
    assert_eq!(list[0]["backend_specific"]["block"]["bdev"], "Malloc0");
    let mut fe = UnixStream::connect(dir.path().join("vhost.0")).unwrap();
    let f = get_features(&mut fe);
    assert!(
        f & 1 << 13 != 0 && f & 1 << 14 != 0,
        "discard / write zeroes: {f:#x}"
    );
    drop(fe);
    assert!(d.signal(libc::SIGTERM).success());
}
