//! pmio-tgt end to end with pmio-rpc: create null, malloc and uring bdevs; list and look them
//! up; run perform_tests; read iostat; switch a bdev to mq-deadline and back; save_config, stop,
//! restart with -c that file and find the same bdevs; --wait-for-rpc with load_config; an idle
//! daemon uses (almost) no CPU.

mod tgt_util;

use std::time::Duration;

use serde_json::Value;
use tgt_util::Daemon;

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn tgt_session_create_list_perf_iostat_sched_save_restart() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let img = img.to_str().unwrap().to_string();
    let d = Daemon::start(&sock, &[]);

    assert_eq!(
        d.rpc_ok(&["bdev_null_create", "Null0", "64", "512"]),
        "Null0\n"
    );
    assert_eq!(
        d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "8", "4096"]),
        "Malloc0\n"
    );
    assert_eq!(
        d.rpc_ok(&["bdev_uring_create", &img, "Uring0", "4096"]),
        "Uring0\n"
    );
    // An unnamed malloc bdev gets SPDK's next free MallocN name.
    assert_eq!(d.rpc_ok(&["bdev_malloc_create", "1", "512"]), "Malloc1\n");
    assert_eq!(d.rpc_ok(&["bdev_malloc_delete", "Malloc1"]), "");

    let all = d.rpc_json(&["bdev_get_bdevs"]);
    assert_eq!(names(&all), ["Null0", "Malloc0", "Uring0"]);
    assert_eq!(all[0]["num_blocks"], 131072);
    assert_eq!(all[0]["block_size"], 512);
    assert_eq!(all[0]["product_name"], "Null disk");
    assert_eq!(all[1]["num_blocks"], 2048);
    assert_eq!(all[2]["product_name"], "URING bdev");
    assert_eq!(all[2]["num_blocks"], 4096);
    assert_eq!(all[2]["driver_specific"]["uring"]["filename"], img.as_str());
    let uuid = all[1]["uuid"].as_str().unwrap().to_string();
    assert_eq!(all[1]["aliases"][0], uuid.as_str());
    // Look up by name and by UUID alias.
    let one = d.rpc_json(&["bdev_get_bdevs", "-b", "Malloc0"]);
    assert_eq!(names(&one), ["Malloc0"]);
    let by_uuid = d.rpc_json(&["bdev_get_bdevs", "-b", &uuid]);
    assert_eq!(names(&by_uuid), ["Malloc0"]);
    // A missing bdev: exit 1 with rpc.py's error print.
    let out = d.rpc(&["bdev_get_bdevs", "-b", "Nope"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("request:\n{\n  \"name\": \"Nope\",\n  \"method\": \"bdev_get_bdevs\",\n  \"req_id\": 1\n}\nGot JSON-RPC error response\nresponse:\n{\n  \"code\": -19,\n  \"message\": \"No such device\"\n}"), "{text}");

    // perform_tests on two bdevs at once (malloc with writes, uring with reads).
    let r = d.rpc_json(&[
        "perform_tests",
        "-b",
        "Malloc0",
        "-b",
        "Uring0",
        "-w",
        "randrw",
        "-q",
        "8",
        "-o",
        "4096",
        "-t",
        "0.5",
    ]);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for j in results {
        assert_eq!(j["status"], "finished", "{j}");
        assert_eq!(j["io_failed"], 0, "{j}");
        assert!(j["iops"].as_f64().unwrap() > 0.0, "{j}");
        let p = &j["latency_percentiles_us"];
        assert!(p["p50"].as_f64().unwrap() <= p["p99"].as_f64().unwrap());
        assert!(j["min_latency_us"].as_f64().unwrap() <= j["avg_latency_us"].as_f64().unwrap());
    }
    let ios = |name: &str| {
        let s = d.rpc_json(&["bdev_get_iostat", "-b", name]);
        let b = &s["bdevs"][0];
        (
            b["num_read_ops"].as_u64().unwrap(),
            b["num_write_ops"].as_u64().unwrap(),
            b["bytes_read"].as_u64().unwrap(),
        )
    };
    let (reads, writes, bytes) = ios("Malloc0");
    assert!(reads > 0 && writes > 0, "{reads} {writes}");
    assert_eq!(bytes, reads * 4096);
    let (ur, uw, _) = ios("Uring0");
    assert!(ur > 0 && uw > 0);

    // mq-deadline on Null0: perform_tests goes through it, counters count every I/O.
    assert_eq!(
        d.rpc_ok(&[
            "bdev_set_scheduler",
            "Null0",
            "mq-deadline",
            "--fifo-batch",
            "8"
        ]),
        ""
    );
    let r = d.rpc_json(&[
        "perform_tests",
        "-b",
        "Null0",
        "-w",
        "randread",
        "-q",
        "16",
        "-t",
        "0.5",
    ]);
    let job = &r["results"][0];
    assert_eq!(job["scheduler"], "mq-deadline");
    let s = d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"]);
    assert_eq!(s[0]["scheduler"], "mq-deadline");
    assert_eq!(s[0]["tunables"]["fifo_batch"], 8);
    let be = &s[0]["counters"]["be"];
    assert!(be["completed"].as_u64().unwrap() > 0);
    assert_eq!(be["inserted"], be["completed"]);
    assert_eq!(be["queued"], 0);
    let (null_reads, _, _) = ios("Null0");
    // Every completed scheduler request is one read of the job (merged members included).
    assert!(null_reads <= be["completed"].as_u64().unwrap());
    // Bad scheduler input: clear errors.
    let out = d.rpc(&["bdev_set_scheduler", "Null0", "bfq"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unknown I/O scheduler"));

    // Save with the scheduler set, then switch back to none and restore it from the file.
    let saved = d.rpc_ok(&["save_config"]);
    assert_eq!(d.rpc_ok(&["bdev_set_scheduler", "Null0", "none"]), "");
    assert_eq!(
        d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"])[0]["scheduler"],
        "none"
    );
    let cfg: Value = serde_json::from_str(&saved).unwrap();
    // SPDK's order: the keys, the socket options, then the bdevs.
    assert_eq!(cfg["subsystems"][0]["subsystem"], "keyring");
    assert_eq!(cfg["subsystems"][1]["subsystem"], "sock");
    assert_eq!(cfg["subsystems"][2]["subsystem"], "bdev");
    let cfg_path = dir.path().join("config.json");
    std::fs::write(&cfg_path, &saved).unwrap();

    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
    assert!(!sock.exists());

    let d = Daemon::start(&sock, &["-c", cfg_path.to_str().unwrap()]);
    let again = d.rpc_json(&["bdev_get_bdevs"]);
    assert_eq!(names(&again), ["Null0", "Malloc0", "Uring0"]);
    for (a, b) in all
        .as_array()
        .unwrap()
        .iter()
        .zip(again.as_array().unwrap())
    {
        assert_eq!(a["uuid"], b["uuid"]);
        assert_eq!(a["num_blocks"], b["num_blocks"]);
        assert_eq!(a["block_size"], b["block_size"]);
    }
    let s = d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"]);
    assert_eq!(s[0]["scheduler"], "mq-deadline");
    assert_eq!(s[0]["tunables"]["fifo_batch"], 8);
    // And the saved configuration is stable across the round trip.
    assert_eq!(d.rpc_ok(&["save_config"]), saved);
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

#[test]
fn tgt_wait_for_rpc_and_load_config() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let d = Daemon::start(&sock, &["--wait-for-rpc"]);
    // Runtime methods are refused in the start-up state with SPDK's -1.
    let out = d.rpc(&["bdev_null_create", "Null0", "1", "512"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\"code\": -1") && text.contains("framework_start_init"),
        "{text}"
    );
    let current = d.rpc_json(&["rpc_get_methods", "--current"]);
    assert!(
        current
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "framework_start_init")
    );
    // load_config as rpc.py does it: replays the calls, then framework_start_init.
    let cfg = dir.path().join("c.json");
    std::fs::write(
        &cfg,
        r#"{"subsystems":[{"subsystem":"bdev","config":[
            {"method":"bdev_null_create","params":{"name":"N1","num_blocks":64,"block_size":512}},
            {"method":"bdev_malloc_create","params":{"name":"M1","num_blocks":64,"block_size":512}}]}]}"#,
    )
    .unwrap();
    assert_eq!(d.rpc_ok(&["load_config", "-j", cfg.to_str().unwrap()]), "");
    assert_eq!(names(&d.rpc_json(&["bdev_get_bdevs"])), ["N1", "M1"]);
    let current = d.rpc_json(&["rpc_get_methods", "--current"]);
    assert!(
        !current
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "framework_start_init")
    );
    // An unknown method in a configuration is refused before anything runs.
    std::fs::write(
        &cfg,
        r#"{"subsystems":[{"subsystem":"bdev","config":[{"method":"nope"}]}]}"#,
    )
    .unwrap();
    let out = d.rpc(&["load_config", "-j", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Unknown method"));
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

#[test]
fn tgt_bad_start_config_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let cfg = dir.path().join("c.json");
    std::fs::write(
        &cfg,
        r#"{"subsystems":[{"subsystem":"bdev","config":[
            {"method":"bdev_null_create","params":{"name":"N1","num_blocks":64,"block_size":500}}]}]}"#,
    )
    .unwrap();
    let mut d = Daemon::spawn(&sock, &["-c", cfg.to_str().unwrap()]);
    assert_eq!(d.wait_exit().code(), Some(1));
    let log = d.log();
    assert!(
        log.contains("config[0]")
            && log.contains("bdev_null_create")
            && log.contains("block size 500"),
        "{log}"
    );
    // Nothing is left behind.
    assert!(!sock.exists());
}

/// Reads the process's user+system CPU time in clock ticks from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 (utime, stime) are at indices 11 and 12 after the command name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn tgt_idle_daemon_uses_no_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_null_create", "Null0", "8", "512"]);
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(d.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(d.child.id()) - before;
    // 2 s at 100 ticks/s: a busy-polling reactor would use ~200 ticks.
    assert!(used <= 10, "idle daemon used {used} ticks in 2 s");
    let r = d.rpc_json(&["framework_get_reactors"]);
    assert_eq!(r["reactors"][0]["in_interrupt"], true, "{r}");
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

#[test]
fn tgt_sigterm_during_perform_tests_answers_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "8", "512"]);
    let s = sock.clone();
    let job = std::thread::spawn(move || {
        tgt_util::rpc(
            &s,
            &[
                "perform_tests",
                "-b",
                "Malloc0",
                "-w",
                "randwrite",
                "-q",
                "16",
                "-t",
                "60",
            ],
        )
    });
    // Let the job start, then stop the daemon: the running job ends early and is answered.
    std::thread::sleep(Duration::from_millis(700));
    let started = std::time::Instant::now();
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(15));
    let out = job.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["results"][0]["status"], "aborted");
    assert!(v["results"][0]["iops"].as_f64().unwrap() > 0.0);
    assert!(!sock.exists());
}

#[test]
fn tgt_wait_for_rpc_defers_the_start_config() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let cfg = dir.path().join("c.json");
    std::fs::write(
        &cfg,
        r#"{"subsystems":[{"subsystem":"bdev","config":[
            {"method":"bdev_null_create","params":{"name":"N1","num_blocks":64,"block_size":512}}]}]}"#,
    )
    .unwrap();
    let d = Daemon::start(&sock, &["--wait-for-rpc", "-c", cfg.to_str().unwrap()]);
    // Start-up state: bdev methods are not callable yet, the config has not run.
    assert_eq!(d.rpc(&["bdev_get_bdevs"]).status.code(), Some(1));
    assert_eq!(d.rpc_ok(&["framework_start_init"]), "");
    assert_eq!(names(&d.rpc_json(&["bdev_get_bdevs"])), ["N1"]);
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}

/// One mq-deadline bdev driven by two reactors at once (`-m 0x3`, perform_tests `every_core`):
/// each reactor is its own scheduler owner, both jobs finish without errors, and afterwards
/// the scheduler holds nothing (every inserted request completed, none queued). A job deeper
/// than a reactor's scheduler tags is refused with a clear error; switching back to none works.
#[test]
fn tgt_mq_deadline_two_reactors_one_bdev() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let d = Daemon::start(&sock, &["-m", "0x3"]);
    assert_eq!(
        d.rpc_ok(&["bdev_null_create", "Null0", "64", "512"]),
        "Null0\n"
    );
    assert_eq!(
        d.rpc_ok(&["bdev_set_scheduler", "Null0", "mq-deadline"]),
        ""
    );
    // Linux's per-hctx default: 2 × min(queue depth, 128) tags per reactor.
    let s = d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"]);
    assert_eq!(s[0]["tunables"]["nr_requests"], 256, "{s}");

    let perf = |depth: u32| -> Value {
        let req = format!(
            r#"{{"jsonrpc":"2.0","method":"perform_tests","id":1,"params":{{"bdevs":["Null0"],"rw":"randrw","depth":{depth},"seconds":0.5,"every_core":true}}}}"#
        );
        let out = d.raw(req.as_bytes());
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let r = perf(32);
    let results = r["result"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(results.len(), 2, "{r}");
    assert_eq!(r["result"]["core_count"], 2, "{r}");
    let masks: Vec<&str> = results
        .iter()
        .map(|j| j["core_mask"].as_str().unwrap())
        .collect();
    assert_eq!(masks, ["0x1", "0x2"], "{r}");
    for j in results {
        assert_eq!(j["job"], "Null0", "{j}");
        assert_eq!(j["status"], "finished", "{j}");
        assert_eq!(j["scheduler"], "mq-deadline", "{j}");
        assert_eq!(j["io_failed"], 0, "{j}");
        assert!(j["iops"].as_f64().unwrap() > 0.0, "{j}");
    }
    let s = d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"]);
    let c = &s[0]["counters"];
    for prio in ["rt", "be", "idle"] {
        assert_eq!(c[prio]["inserted"], c[prio]["completed"], "{prio}: {s}");
        assert_eq!(c[prio]["queued"], 0, "{prio}: {s}");
    }
    let done = c["be"]["completed"].as_u64().unwrap();
    assert!(done > 0, "{s}");
    // Reads and writes of both jobs went through the scheduler.
    let io = d.rpc_json(&["bdev_get_iostat", "-b", "Null0"]);
    let b = &io["bdevs"][0];
    assert!(b["num_read_ops"].as_u64().unwrap() > 0, "{io}");
    assert!(b["num_write_ops"].as_u64().unwrap() > 0, "{io}");

    // Fewer tags per reactor than the job depth: refused, saying why.
    assert_eq!(
        d.rpc_ok(&[
            "bdev_set_scheduler",
            "Null0",
            "mq-deadline",
            "--nr-requests",
            "16",
            "--fifo-batch",
            "4"
        ]),
        ""
    );
    let s = d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"]);
    assert_eq!(s[0]["tunables"]["nr_requests"], 16, "{s}");
    assert_eq!(s[0]["tunables"]["fifo_batch"], 4, "{s}");
    let r = perf(32);
    assert_eq!(r["error"]["code"], -22, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("scheduler tags") && msg.contains("16"),
        "{msg}"
    );
    // A depth that fits runs, on both reactors, through the rebuilt scheduler.
    let r = perf(16);
    let results = r["result"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(results.len(), 2, "{r}");
    for j in results {
        assert_eq!(j["io_failed"], 0, "{j}");
        assert!(j["iops"].as_f64().unwrap() > 0.0, "{j}");
    }
    let s = d.rpc_json(&["bdev_get_scheduler", "-b", "Null0"]);
    let be = &s[0]["counters"]["be"];
    assert_eq!(be["inserted"], be["completed"], "{s}");
    assert_eq!(be["queued"], 0, "{s}");
    // Retuning keeps the rebuilt instance's tags (a new nr_requests kept fifo_batch too).
    assert_eq!(s[0]["tunables"]["fifo_batch"], 4, "{s}");

    // Back to none; jobs on both reactors run straight to the driver.
    assert_eq!(d.rpc_ok(&["bdev_set_scheduler", "Null0", "none"]), "");
    let r = perf(32);
    let results = r["result"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(results.len(), 2, "{r}");
    for j in results {
        assert_eq!(j["scheduler"], "none", "{j}");
        assert_eq!(j["io_failed"], 0, "{j}");
    }
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}
