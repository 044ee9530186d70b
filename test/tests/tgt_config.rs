//! pmio-tgt as a drop-in for spdk_tgt's configuration files: SPDK v25.09's `save_config`
//! output (config/tests/fixtures) with `-c`, `--check-config`, pmio-rpc's `load_config` and
//! rpc.py's call-by-call replay; mapped, ignored and refused methods; rollback of a load that
//! fails at run time; hostile files that start nothing; pmio's own `save_config` round trip.

mod tgt_util;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use tgt_util::{Daemon, bin_dir, free_port};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Fixture `name` with its NVMe/TCP ports (4420, discovery 8009) moved to free ones.
fn with_free_ports(name: &str) -> (String, u16, u16) {
    let (io, disc) = (free_port(), free_port());
    let text = fixture(name)
        .replace("\"trsvcid\": \"4420\"", &format!("\"trsvcid\": \"{io}\""))
        .replace("\"trsvcid\": \"8009\"", &format!("\"trsvcid\": \"{disc}\""));
    (text, io, disc)
}

/// SPDK v25.09's save_config of an NVMe/TCP target (two subsystems, a discovery listener).
fn nvmf_fixture() -> (String, u16, u16) {
    with_free_ports("spdk-v25.09-nvmf.json")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn names(d: &Daemon) -> Vec<String> {
    d.rpc_json(&["bdev_get_bdevs"])
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect()
}

fn check_config(file: &Path) -> Output {
    Command::new(bin_dir().join("pmio-tgt"))
        .arg("--check-config")
        .arg(file)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// `pmio-tgt -c file`, expected to refuse: its exit status 1, its log, and no socket left.
fn refused_start(dir: &Path, file: &Path) -> String {
    let sock = dir.join("r.sock");
    let mut d = Daemon::spawn(&sock, &["-c", file.to_str().unwrap()]);
    assert_eq!(d.wait_exit().code(), Some(1), "{}", d.log());
    assert!(!sock.exists());
    d.log()
}

#[test]
fn tgt_spdk_sample_starts_with_c() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "spdk.json", &fixture("spdk-v25.09-sample.json"));
    let d = Daemon::start(&dir.path().join("t.sock"), &["-c", cfg.to_str().unwrap()]);
    assert_eq!(names(&d), ["Malloc0", "Null0"]);
    let m = d.rpc_json(&["bdev_get_bdevs", "-b", "Malloc0"]);
    assert_eq!(m[0]["uuid"], "f91d6740-6004-4847-ac97-5b05967e4c7c");
    assert_eq!(m[0]["num_blocks"], 65536);
    let log = d.log();
    // Each setting without meaning is listed once, with why.
    for want in [
        "config: ignored iobuf_set_options: pmio has no shared iobuf pool",
        "config: ignored accel_set_options: pmio has no accel framework",
        "config: ignored bdev_set_options:",
        "config: ignored iscsi_set_options: pmio has no iSCSI target",
        "config: sock_impl_set_options: recv_buf_size: 2097152: SO_RCVBUF of each NVMe/TCP connection",
        "config: sock_impl_set_options: ignored enable_zerocopy_send_server: true: pmio copies on send",
        "config: subsystems[0] (keyring): empty section",
        "configuration applied: 2 to create",
    ] {
        assert_eq!(log.matches(want).count(), 1, "{want}:\n{log}");
    }
    // Loading the same settings again at run time logs nothing new about them.
    let again = write(
        dir.path(),
        "settings.json",
        r#"{"subsystems":[{"subsystem":"iobuf","config":[{"method":"iobuf_set_options","params":{"small_pool_count":1}}]}]}"#,
    );
    assert_eq!(
        d.rpc_ok(&["load_config", "-j", again.to_str().unwrap()]),
        ""
    );
    assert_eq!(
        d.log().matches("config: ignored iobuf_set_options").count(),
        1
    );
    // The scheduler choice is saved back, in SPDK's section.
    let saved: Value = serde_json::from_str(&d.rpc_ok(&["save_config"])).unwrap();
    let sections: Vec<&str> = saved["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subsystem"].as_str().unwrap())
        .collect();
    assert!(sections.contains(&"scheduler"), "{saved}");
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

#[test]
fn tgt_spdk_nvmf_file_serves_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let (text, io, disc) = nvmf_fixture();
    let cfg = write(dir.path(), "spdk-nvmf.json", &text);
    let d = Daemon::start(&sock, &["-m", "0x3", "-c", cfg.to_str().unwrap()]);
    assert_eq!(names(&d), ["Malloc0", "Malloc1", "Null0"]);
    let subs = d.rpc_json(&["nvmf_get_subsystems"]);
    let nqns: Vec<&str> = subs
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["nqn"].as_str().unwrap())
        .collect();
    assert_eq!(
        nqns,
        [
            "nqn.2014-08.org.nvmexpress.discovery",
            "nqn.2016-06.io.spdk:cnode1",
            "nqn.2016-06.io.spdk:cnode2"
        ]
    );
    assert_eq!(subs[1]["namespaces"].as_array().unwrap().len(), 2);
    assert_eq!(
        subs[1]["namespaces"][0]["uuid"],
        "3f0c2a5e-7b7d-4c1e-9a53-1d2c6e8f4a10"
    );
    assert_eq!(subs[2]["namespaces"][0]["bdev_name"], "Null0");
    // Both listeners are bound.
    for port in [io, disc] {
        drop(std::net::TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    // pmio's save_config of it restores the same target.
    let saved = d.rpc_ok(&["save_config"]);
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
    let file = write(dir.path(), "saved.json", &saved);
    let ok = check_config(&file);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let d2 = Daemon::start(&sock, &["-m", "0x3", "-c", file.to_str().unwrap()]);
    assert_eq!(d2.rpc_json(&["nvmf_get_subsystems"]), subs);
    assert_eq!(d2.rpc_ok(&["save_config"]), saved);
    assert_eq!(d2.signal(libc::SIGTERM).code(), Some(0));
}

#[test]
fn tgt_check_config_reports_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _, _) = nvmf_fixture();
    let cfg = write(dir.path(), "spdk-nvmf.json", &text);
    let out = check_config(&cfg);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for want in [
        "create  bdev_malloc_create",
        "bdev Malloc0: malloc, 131072 blocks of 512 bytes (64 MiB of RAM)",
        "create  nvmf_subsystem_add_ns ",
        "namespace 2 of nqn.2016-06.io.spdk:cnode1 on bdev Malloc1",
        "map     bdev_nvme_set_options ",
        "map     framework_set_scheduler ",
        "ignore  iobuf_set_options ",
        "0 refused",
        "pmio-tgt -c would load this configuration",
    ] {
        assert!(stdout.contains(want), "{want}:\n{stdout}");
    }
    // Nothing was bound: the file's ports are still free.
    for l in text.lines().filter(|l| l.contains("trsvcid")) {
        let port: u16 = l.split('"').nth(3).unwrap().parse().unwrap();
        drop(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
    }
    let bad = write(
        dir.path(),
        "ocf.json",
        r#"{"subsystems":[{"subsystem":"bdev","config":[
            {"method":"bdev_malloc_create","params":{"name":"M0","num_blocks":64,"block_size":512}},
            {"method":"bdev_ocf_create","params":{"name":"Cache0","mode":"wt","cache_bdev_name":"M0","core_bdev_name":"M1"}}]}]}"#,
    );
    let out = check_config(&bad);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("refuse  bdev_ocf_create")
            && stdout.contains("Cache0: pmio has no OCF cache"),
        "{stdout}"
    );
    assert!(
        stdout.contains("would refuse this configuration"),
        "{stdout}"
    );
}

#[test]
fn tgt_refused_objects_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    for (doc, want) in [
        (
            json!({"subsystems": [
                {"subsystem": "bdev", "config": [
                    {"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
                    {"method": "bdev_lvol_create_lvstore", "params": {"bdev_name": "M0", "lvs_name": "lvs0"}}]}]}),
            "subsystems[0] (bdev) config[1]: bdev_lvol_create_lvstore lvs0: pmio does not create lvstores from a configuration",
        ),
        (
            json!({"subsystems": [{"subsystem": "iscsi", "config": [
                {"method": "iscsi_create_target_node", "params": {"name": "iqn.2016-06.io.spdk:d1"}}]}]}),
            "iscsi_create_target_node iqn.2016-06.io.spdk:d1: pmio has no iSCSI target",
        ),
        (
            json!({"subsystems": [{"subsystem": "nvmf", "config": [
                {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
                {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:c1"}},
                {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:c1",
                    "namespace": {"bdev_name": "lvs0/lvol0"}}}]}]}),
            "bdev lvs0/lvol0 is not created before this call (a name with '/' is a logical volume",
        ),
    ] {
        let f = write(dir.path(), "c.json", &doc.to_string());
        let log = refused_start(dir.path(), &f);
        assert!(log.contains(want), "{want}:\n{log}");
        assert!(log.contains("nothing was started"), "{log}");
    }
}

#[test]
fn tgt_hostile_files_start_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let million = format!(
        "{{\"subsystems\":[{{\"subsystem\":\"bdev\",\"config\":[{}]}}]}}",
        vec![r#"{"method":"bdev_wait_for_examine"}"#; 1_000_000].join(",")
    );
    let deep = format!(
        "{{\"subsystems\":[{{\"subsystem\":\"bdev\",\"config\":[{{\"method\":\"bdev_null_create\",\"params\":{{\"name\":{}\"N\"{}}}}}]}}]}}",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    for (text, want) in [
        (
            r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":"bdev_null_create","params":{"name":"N","num_blocks":"lots","block_size":512}}]}]}"#.to_string(),
            "parameter \"num_blocks\"",
        ),
        (
            r#"{"subsystems":[{"subsystem":"bdev","config":{"method":"bdev_null_create"}}]}"#
                .to_string(),
            "\"config\" must be an array or null",
        ),
        (
            r#"{"subsystems":"bdev"}"#.to_string(),
            "\"subsystems\" must be an array",
        ),
        (
            r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":["bdev_null_create"]}]}]}"#
                .to_string(),
            "no \"method\" string",
        ),
        (
            r#"{"subsystems":[{"subsystem":"raid5f","config":[{"method":"bdev_malloc_create","params":{"num_blocks":8,"block_size":512}}]}]}"#.to_string(),
            "unknown section raid5f with 1 calls",
        ),
        (million, "1000000 calls"),
        (deep, "nested deeper than 32 levels"),
        ("{\"subsystems\": [".to_string(), "ends early"),
    ] {
        let f = write(dir.path(), "hostile.json", &text);
        let log = refused_start(dir.path(), &f);
        assert!(log.contains(want), "{want}:\n{log}");
        let out = check_config(&f);
        assert_eq!(out.status.code(), Some(1));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains(want), "{want}:\n{said}");
    }
}

#[test]
fn tgt_load_config_at_run_time_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("t.sock"), &[]);
    d.rpc_ok(&["bdev_null_create", "Old", "1", "512"]);
    // A port someone else holds: only the bind finds out, after the bdevs and the subsystem.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (text, _, _) = nvmf_fixture();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    let nvmf = doc["subsystems"][11]["config"].as_array_mut().unwrap();
    let last = nvmf.len() - 1;
    nvmf[last]["params"]["listen_address"]["trsvcid"] =
        json!(busy.local_addr().unwrap().port().to_string());
    let f = write(dir.path(), "busy.json", &doc.to_string());
    let out = d.rpc(&["load_config", "-j", f.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("Address already in use"), "{stdout}");
    assert!(stdout.contains("rolled back: removed"), "{stdout}");
    assert_eq!(names(&d), ["Old"]);
    assert_eq!(
        d.rpc_json(&["nvmf_get_subsystems"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Fixed, it loads; the transport the failed load left is taken as it is.
    drop(busy);
    assert_eq!(d.rpc_ok(&["load_config", "-j", f.to_str().unwrap()]), "");
    assert_eq!(names(&d), ["Old", "Malloc0", "Malloc1", "Null0"]);
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

/// One rpc.py connection: pretty-printed requests, ids from 1, one JSON reply each.
struct RpcPy {
    s: UnixStream,
    id: u64,
    buf: Vec<u8>,
}

impl RpcPy {
    fn connect(sock: &Path) -> RpcPy {
        let s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        RpcPy {
            s,
            id: 0,
            buf: Vec::new(),
        }
    }

    fn call(&mut self, method: &str, params: Option<&Value>) -> Result<Value, Value> {
        self.id += 1;
        let mut req = json!({"jsonrpc": "2.0", "method": method, "id": self.id});
        if let Some(p) = params {
            req["params"] = p.clone();
        }
        self.s
            .write_all(serde_json::to_string_pretty(&req).unwrap().as_bytes())
            .unwrap();
        loop {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            if let Some(Ok(v)) = it.next() {
                let end = it.byte_offset();
                self.buf.drain(..end);
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
            let mut chunk = [0u8; 65536];
            let n = self.s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// spdk/rpc/__init__.py's load_config, step by step.
    fn load_config(&mut self, doc: &Value) -> Result<(), Value> {
        let subsystems: Vec<&Value> = doc["subsystems"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["config"].as_array().is_some_and(|c| !c.is_empty()))
            .collect();
        let allowed = self.call("rpc_get_methods", Some(&json!({"include_aliases": false})))?;
        for s in &subsystems {
            for e in s["config"].as_array().unwrap() {
                if !allowed.as_array().unwrap().contains(&e["method"]) {
                    return Err(json!("Unknown method was included in the config file"));
                }
            }
        }
        let allowed = self.call(
            "rpc_get_methods",
            Some(&json!({"current": true, "include_aliases": false})),
        )?;
        for s in &subsystems {
            for e in s["config"].as_array().unwrap() {
                if allowed.as_array().unwrap().contains(&e["method"]) {
                    self.call(e["method"].as_str().unwrap(), e.get("params"))?;
                }
            }
        }
        Ok(())
    }
}

#[test]
fn tgt_rpc_py_load_config_replay() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let d = Daemon::start(&sock, &[]);
    let (text, io, _) = nvmf_fixture();
    let doc: Value = serde_json::from_str(&text).unwrap();
    // A refused method after the bdevs and before the target: everything goes again.
    let mut bad = doc.clone();
    bad["subsystems"][5]["config"]
        .as_array_mut()
        .unwrap()
        .push(json!({"method": "bdev_ocf_create",
            "params": {"name": "Cache0", "mode": "wt", "cache_bdev_name": "Malloc0", "core_bdev_name": "Malloc1"}}));
    let e = RpcPy::connect(&sock).load_config(&bad).unwrap_err();
    assert_eq!(e["code"], -95, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("bdev section: bdev_ocf_create Cache0 refused: pmio has no OCF cache"),
        "{msg}"
    );
    assert!(
        msg.contains("load_config rolled back: removed bdev Null0, bdev Malloc1, bdev Malloc0"),
        "{msg}"
    );
    assert!(names(&d).is_empty());
    // The file as SPDK wrote it loads through rpc.py's replay.
    let mut c = RpcPy::connect(&sock);
    c.load_config(&doc).unwrap();
    // The same connection goes on as any other once it asks something else.
    assert_eq!(
        c.call("bdev_get_bdevs", None)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(
        c.call(
            "bdev_malloc_create",
            Some(&json!({"name": "Malloc0", "num_blocks": 8, "block_size": 512}))
        )
        .is_err()
    );
    assert_eq!(names(&d), ["Malloc0", "Malloc1", "Null0"]);
    drop(std::net::TcpStream::connect(("127.0.0.1", io)).unwrap());
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

/// The nvmf file with a vhost-blk controller, as SPDK's vhost app saves it: created now that
/// pmio-tgt has `vhost_create_blk_controller` (the table's vhost entry turns into a create).
#[test]
fn tgt_spdk_nvmf_and_vhost_blk_file() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let (text, io, _) = with_free_ports("spdk-v25.09-vhost-blk.json");
    let cfg = write(dir.path(), "vhost.json", &text);
    let vdir = dir.path().join("vhost");
    std::fs::create_dir(&vdir).unwrap();
    let d = Daemon::start(
        &sock,
        &["-S", vdir.to_str().unwrap(), "-c", cfg.to_str().unwrap()],
    );
    let c = d.rpc_json(&["vhost_get_controllers"]);
    assert_eq!(c[0]["ctrlr"], "vhost.0");
    assert_eq!(c[0]["backend_specific"]["block"]["bdev"], "Malloc1");
    assert!(vdir.join("vhost.0").exists());
    drop(std::net::TcpStream::connect(("127.0.0.1", io)).unwrap());
    // The disk of a vhost controller is in use.
    assert_eq!(
        d.rpc_json(&["bdev_get_bdevs", "-b", "Malloc1"])[0]["claimed"],
        true
    );
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}
