//! RAID bdevs in pmio-tgt, end to end: made with rpc.py's `bdev_raid_create` flags over malloc
//! bdevs, exported over NVMe/TCP and written and read back by pmio's host
//! (`pmio-perf --verify`), listed by `bdev_raid_get_bdevs` in SPDK's shape, their members
//! claimed, written by `save_config` after their members and made again from it.

mod perf_util;
mod tgt_util;

use serde_json::{Value, json};
use tgt_util::{Daemon, free_port};

const NQN: &str = "nqn.2016-06.io.pmio:raid1";

fn serve(d: &Daemon, bdev: &str, port: &str) {
    d.rpc_ok(&["nvmf_create_transport", "-t", "TCP"]);
    d.rpc_ok(&["nvmf_create_subsystem", NQN, "-a", "-s", "PMIO0001"]);
    d.rpc_ok(&["nvmf_subsystem_add_ns", NQN, bdev]);
    d.rpc_ok(&[
        "nvmf_subsystem_add_listener",
        NQN,
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        port,
    ]);
}

fn verify_over_tcp(port: &str, what: &str) {
    let dev = format!("nvmf:traddr=127.0.0.1,trsvcid={port},subnqn={NQN}");
    let core = if perf_util::cpus() >= 2 { "[1]" } else { "[0]" };
    // 128 KiB I/Os cross the 64 KiB strips of the raid0; mixed reads and writes.
    let out = perf_util::perf(&[
        "-m", core, "--dev", &dev, "-b", "131072", "-w", "randrw", "-M", "50", "-d", "16", "-s",
        "8", "-c", "8", "-t", "1", "--verify", "--json",
    ]);
    perf_util::verify_clean(&out, what);
}

#[test]
fn raid0_and_raid1_over_malloc_serve_nvme_tcp_and_come_back_from_save_config() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tgt.sock");
    let d = Daemon::start(&sock, &["-m", "0x1"]);
    for m in ["Malloc0", "Malloc1", "Malloc2", "Malloc3"] {
        d.rpc_ok(&["bdev_malloc_create", "-b", m, "32", "512"]);
    }
    assert_eq!(
        d.rpc_ok(&[
            "bdev_raid_create",
            "-n",
            "Raid0",
            "-z",
            "64",
            "-r",
            "0",
            "-b",
            "Malloc0 Malloc1",
        ]),
        ""
    );
    d.rpc_ok(&[
        "bdev_raid_create",
        "-n",
        "Mirror",
        "-r",
        "raid1",
        "-b",
        "Malloc2 Malloc3",
    ]);

    // SPDK's shape.
    let raids = d.rpc_json(&["bdev_raid_get_bdevs", "all"]);
    let r0 = &raids[0];
    assert_eq!(r0["name"], "Raid0");
    assert_eq!(r0["raid_level"], "raid0");
    assert_eq!(r0["strip_size_kb"], 64);
    assert_eq!(r0["state"], "online");
    assert_eq!(r0["num_base_bdevs_operational"], 2);
    assert_eq!(r0["base_bdevs_list"][1]["name"], "Malloc1");
    assert_eq!(r0["base_bdevs_list"][1]["data_size"], 65536);
    assert_eq!(raids[1]["raid_level"], "raid1");
    assert_eq!(d.rpc_json(&["bdev_raid_get_bdevs", "offline"]), json!([]));
    let bdev = &d.rpc_json(&["bdev_get_bdevs", "-b", "Raid0"])[0];
    assert_eq!(bdev["num_blocks"], 2 * 65536);
    assert_eq!(bdev["product_name"], "Raid Volume");
    assert_eq!(bdev["driver_specific"]["raid"]["raid_level"], "raid0");
    let mirror = &d.rpc_json(&["bdev_get_bdevs", "-b", "Mirror"])[0];
    assert_eq!(mirror["num_blocks"], 65536);

    // Members are claimed; a member cannot join a second array.
    let out = d.rpc(&["bdev_malloc_delete", "Malloc1"]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("base bdev of raid bdev Raid0"), "{text}");
    let out = d.rpc(&[
        "bdev_raid_create",
        "-n",
        "R2",
        "-z",
        "64",
        "-r",
        "concat",
        "-b",
        "Malloc0",
    ]);
    assert!(!out.status.success());
    // Bad input: a clear error, and the daemon goes on.
    let out = d.rpc(&[
        "bdev_raid_create",
        "-n",
        "R3",
        "-z",
        "48",
        "-r",
        "0",
        "-b",
        "Nope",
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Failed to create RAID bdev R3"));
    let out = d.rpc(&[
        "bdev_raid_create",
        "-n",
        "R4",
        "-r",
        "1",
        "-b",
        "Malloc9 Malloc8",
        "-s",
    ]);
    assert!(!out.status.success());

    // Data written over NVMe/TCP through each array reads back.
    let port = free_port().to_string();
    serve(&d, "Raid0", &port);
    verify_over_tcp(&port, "randrw over NVMe/TCP to a raid0");
    let out = d.rpc(&["bdev_raid_delete", "Raid0"]);
    assert!(!out.status.success(), "deleted while a namespace serves it");

    // save_config: the process options first, members next, then the arrays, as SPDK writes
    // them; a daemon started from it has both arrays and the options.
    d.rpc_ok(&["bdev_raid_set_options", "-w", "256", "-b", "8"]);
    let saved = d.rpc_ok(&["save_config"]);
    assert_eq!(
        raid_options(&saved),
        json!({"process_window_size_kb": 256, "process_max_bandwidth_mb_sec": 8})
    );
    let cfg: Value = serde_json::from_str(&saved).unwrap();
    let bdev = cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "bdev")
        .unwrap();
    let calls: Vec<&str> = bdev["config"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["method"].as_str())
        .filter(|m| m.ends_with("_create") || m.starts_with("bdev_raid"))
        .collect();
    assert_eq!(
        calls,
        [
            "bdev_raid_set_options",
            "bdev_malloc_create",
            "bdev_malloc_create",
            "bdev_malloc_create",
            "bdev_malloc_create",
            "bdev_raid_create",
            "bdev_raid_create"
        ]
    );
    drop(d);
    let cfg_path = dir.path().join("saved.json");
    std::fs::write(&cfg_path, &saved).unwrap();
    let sock2 = dir.path().join("tgt2.sock");
    let d2 = Daemon::start(&sock2, &["-m", "0x1", "-c", cfg_path.to_str().unwrap()]);
    let raids = d2.rpc_json(&["bdev_raid_get_bdevs", "online"]);
    assert_eq!(raids.as_array().unwrap().len(), 2, "{raids}");
    assert_eq!(
        raid_options(&d2.rpc_ok(&["save_config"])),
        json!({"process_window_size_kb": 256, "process_max_bandwidth_mb_sec": 8}),
        "the options came back from the configuration"
    );
    // The raid1 over its fresh malloc members serves I/O too.
    d2.rpc_ok(&["nvmf_subsystem_remove_ns", NQN, "1"]);
    d2.rpc_ok(&["nvmf_subsystem_add_ns", NQN, "Mirror"]);
    let port2 = d2.rpc_json(&["nvmf_get_subsystems"]);
    let port2 = port2
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["nqn"] == NQN)
        .and_then(|s| s["listen_addresses"][0]["trsvcid"].as_str())
        .unwrap()
        .to_string();
    verify_over_tcp(&port2, "randrw over NVMe/TCP to a raid1");
    d2.rpc_ok(&["nvmf_delete_subsystem", NQN]);
    assert_eq!(d2.rpc_ok(&["bdev_raid_delete", "Raid0"]), "");
    assert_eq!(
        d2.rpc_json(&["bdev_raid_get_bdevs", "all"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    d2.rpc_ok(&["bdev_malloc_delete", "Malloc0"]);
}

/// The raid1 named `name` in `bdev_raid_get_bdevs all`.
/// The parameters of the `bdev_raid_set_options` call in a save_config's bdev section.
fn raid_options(saved: &str) -> Value {
    let cfg: Value = serde_json::from_str(saved).unwrap();
    cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "bdev")
        .and_then(|b| b["config"].as_array())
        .and_then(|c| c.iter().find(|c| c["method"] == "bdev_raid_set_options"))
        .map(|c| c["params"].clone())
        .unwrap_or(Value::Null)
}

fn raid_info(d: &Daemon, name: &str) -> Value {
    let all = d.rpc_json(&["bdev_raid_get_bdevs", "all"]);
    all.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no raid bdev {name} in {all}"))
}

fn image(dir: &std::path::Path, name: &str) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(8 << 20).unwrap();
    p.to_str().unwrap().to_string()
}

const UUID_A: &str = "8d2f4a51-0a4e-4c11-9a3e-0000000000a1";
const UUID_B: &str = "8d2f4a51-0a4e-4c11-9a3e-0000000000b2";

#[test]
fn a_raid1_with_a_superblock_assembles_after_kill_9_refuses_its_stale_member_and_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (image(dir.path(), "a.img"), image(dir.path(), "b.img"));
    let sock = dir.path().join("tgt.sock");
    let members = |d: &Daemon| {
        d.rpc_ok(&["bdev_uring_create", &a, "UA", "512", "-u", UUID_A]);
        d.rpc_ok(&["bdev_uring_create", &b, "UB", "512", "-u", UUID_B]);
    };
    let d = Daemon::start(&sock, &["-m", "0x1"]);
    members(&d);
    d.rpc_ok(&[
        "bdev_raid_create",
        "-n",
        "Mirror",
        "-r",
        "1",
        "-b",
        "UA UB",
        "-s",
    ]);
    let r = raid_info(&d, "Mirror");
    assert_eq!(r["superblock"], true);
    assert_eq!(r["base_bdevs_list"][0]["data_offset"], 2048);
    // 8 MiB files, 1 MiB kept for the superblock.
    assert_eq!(r["base_bdevs_list"][1]["data_size"], 7 * 2048);
    let port = free_port().to_string();
    serve(&d, "Mirror", &port);
    verify_over_tcp(&port, "randrw to a raid1 with a superblock");
    // An array with a superblock is not in save_config: its members bring it back.
    assert!(!d.rpc_ok(&["save_config"]).contains("bdev_raid_create"));

    // UB leaves; the array goes on degraded, and UA's superblock records it.
    d.rpc_ok(&["bdev_raid_remove_base_bdev", "UB"]);
    let r = raid_info(&d, "Mirror");
    assert_eq!(r["num_base_bdevs_operational"], 1);
    assert_eq!(r["base_bdevs_list"][1]["name"], Value::Null);
    verify_over_tcp(&port, "randrw to a degraded raid1");
    assert!(!d.signal(libc::SIGKILL).success());

    // Restart: both members come back; UB's superblock is behind UA's, so the array
    // assembles from UA alone and UB is refused.
    let d = Daemon::start(&sock, &["-m", "0x1"]);
    members(&d);
    let r = raid_info(&d, "Mirror");
    assert_eq!(r["state"], "online", "{r}");
    assert_eq!(r["num_base_bdevs_operational"], 1, "{r}");
    assert_eq!(r["base_bdevs_list"][0]["name"], "UA");
    assert!(d.log().contains("refused as stale"), "{}", d.log());

    // Added back, UB is rebuilt (paced at 2 MiB/s so I/O meets it) while verified I/O runs.
    d.rpc_ok(&["bdev_raid_set_options", "-w", "256", "-b", "2"]);
    d.rpc_ok(&["bdev_raid_add_base_bdev", "Mirror", "UB"]);
    let r = raid_info(&d, "Mirror");
    assert_eq!(r["process"]["type"], "rebuild", "{r}");
    assert_eq!(r["process"]["target"], "UB");
    let port = free_port().to_string();
    serve(&d, "Mirror", &port);
    verify_over_tcp(&port, "randrw to a raid1 during its rebuild");
    let t0 = std::time::Instant::now();
    let mut seen_progress = false;
    loop {
        let r = raid_info(&d, "Mirror");
        if r.get("process").is_none() {
            assert_eq!(r["num_base_bdevs_operational"], 2, "{r}");
            break;
        }
        seen_progress |= r["process"]["progress"]["blocks"].as_u64().unwrap() > 0;
        assert!(t0.elapsed().as_secs() < 30, "rebuild hangs: {r}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(seen_progress);
    d.rpc_ok(&["nvmf_delete_subsystem", NQN]);
    d.rpc_ok(&["bdev_raid_delete", "Mirror"]);
    // The copies are the same, block for block, behind the superblock.
    let (fa, fb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(
        fa[1 << 20..] == fb[1 << 20..],
        "the rebuilt member differs from its source"
    );
    assert_eq!(fa[..512], fb[..512], "both carry the same superblock");
}
