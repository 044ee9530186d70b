//! SPDK's `spdk_top` against pmio-tgt: the RPC sequence `app/spdk_top/spdk_top.c` (SPDK
//! v25.09) sends, on one connection as it does, under NVMe/TCP load, with every field it
//! decodes checked as its decoders check them.
//!
//! spdk_top's `wait_init` sends `framework_wait_init` (waiting out `--wait-for-rpc`), then
//! `framework_get_reactors` for `tick_rate`, `thread_get_stats`, `thread_get_pollers`,
//! `framework_get_reactors`; its data thread then repeats `framework_get_reactors`,
//! `thread_get_stats`, `thread_get_pollers`, `framework_get_scheduler` every refresh. Any error
//! reply, or an object its strict decoders (`spdk_json_decode_object`) find a key they do not
//! know in, or a key missing or mistyped, stops the screen: what is checked here.
//!
//! The load: pmio-tgt A serves a null bdev over NVMe/TCP; pmio-tgt B attaches it and runs
//! `perform_tests` on it, so A's poll group works while the sequence runs.
//!
//! CI has no SPDK build, so running the real program is a manual check:
//! `LD_LIBRARY_PATH=$SPDK/build/lib $SPDK/build/bin/spdk_top -r /var/tmp/pmio.sock` (a curses
//! program: in a terminal, or under `tmux` with `capture-pane` to record its screens).

mod tgt_util;

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tgt_util::Daemon;

const NQN: &str = "nqn.2016-06.io.spdk:top";

/// One client connection, as spdk_top keeps one: a request, its reply.
struct Top {
    stream: UnixStream,
    next_id: u64,
}

impl Top {
    fn connect(sock: &Path) -> Top {
        let stream = UnixStream::connect(sock).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Top { stream, next_id: 1 }
    }

    /// Sends `method` without parameters (spdk_top's `rpc_send_req`) and returns its result;
    /// an error reply fails the test, as it stops spdk_top.
    fn call(&mut self, method: &str) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let req = json!({"jsonrpc": "2.0", "method": method, "id": id});
        self.stream.write_all(req.to_string().as_bytes()).unwrap();
        let mut replies = serde_json::Deserializer::from_reader(&self.stream).into_iter::<Value>();
        let reply = replies
            .next()
            .unwrap_or_else(|| panic!("{method}: connection closed"))
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        assert_eq!(reply["id"], id, "{reply}");
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].clone()
    }
}

/// What one decoder table of spdk_top accepts: required and optional keys with their decoder.
struct Decoder {
    what: &'static str,
    required: &'static [(&'static str, Kind)],
    optional: &'static [(&'static str, Kind)],
    /// `spdk_json_decode_object_relaxed`: unknown keys are skipped.
    relaxed: bool,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    U32,
    U64,
    Str,
    Bool,
    Array,
}

impl Kind {
    fn accepts(self, v: &Value) -> bool {
        match self {
            Kind::U32 => v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)),
            Kind::U64 => v.as_u64().is_some(),
            Kind::Str => v.is_string(),
            Kind::Bool => v.is_boolean(),
            Kind::Array => v.is_array(),
        }
    }
}

impl Decoder {
    /// Decodes `v` as spdk_top would, or fails naming what it would refuse.
    fn check(&self, v: &Value) {
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("{}: not an object: {v}", self.what));
        for (k, kind) in self.required {
            let got = obj
                .get(*k)
                .unwrap_or_else(|| panic!("{}: missing {k}: {v}", self.what));
            assert!(kind.accepts(got), "{}: {k} is not {kind:?}: {v}", self.what);
        }
        for (k, got) in obj {
            let known = self
                .required
                .iter()
                .chain(self.optional)
                .find(|(name, _)| name == k);
            match known {
                Some((_, kind)) => {
                    assert!(kind.accepts(got), "{}: {k} is not {kind:?}: {v}", self.what)
                }
                None => assert!(self.relaxed, "{}: spdk_top refuses key {k}: {v}", self.what),
            }
        }
    }
}

use Kind::*;

/// `rpc_decode_tick_rate` (relaxed).
const TICK_RATE: Decoder = Decoder {
    what: "tick_rate",
    required: &[("tick_rate", U64)],
    optional: &[],
    relaxed: true,
};
/// `rpc_core_info_decoders`.
const CORE: Decoder = Decoder {
    what: "reactor",
    required: &[
        ("lcore", U32),
        ("busy", U64),
        ("idle", U64),
        ("irq", U64),
        ("sys", U64),
        ("usr", U64),
        ("in_interrupt", Bool),
        ("lw_threads", Array),
        ("tid", U64),
    ],
    optional: &[("core_freq", U32)],
    relaxed: false,
};
/// `rpc_core_thread_info_decoders` (exactly four keys: spdk_top sizes its array by them).
const CORE_THREAD: Decoder = Decoder {
    what: "lw_thread",
    required: &[
        ("name", Str),
        ("id", U64),
        ("cpumask", Str),
        ("elapsed", U64),
    ],
    optional: &[],
    relaxed: false,
};
/// `rpc_thread_info_decoders`.
const THREAD: Decoder = Decoder {
    what: "thread",
    required: &[
        ("name", Str),
        ("id", U64),
        ("cpumask", Str),
        ("busy", U64),
        ("idle", U64),
        ("active_pollers_count", U64),
        ("timed_pollers_count", U64),
        ("paused_pollers_count", U64),
    ],
    optional: &[],
    relaxed: false,
};
/// `rpc_thread_pollers_decoders` (relaxed) and the three arrays spdk_top finds by name.
const POLLER_THREAD: Decoder = Decoder {
    what: "pollers' thread",
    required: &[
        ("name", Str),
        ("id", U64),
        ("active_pollers", Array),
        ("timed_pollers", Array),
        ("paused_pollers", Array),
    ],
    optional: &[],
    relaxed: true,
};
/// `rpc_pollers_decoders`.
const POLLER: Decoder = Decoder {
    what: "poller",
    required: &[
        ("name", Str),
        ("state", Str),
        ("id", U64),
        ("run_count", U64),
        ("busy_count", U64),
    ],
    optional: &[("period_ticks", U64)],
    relaxed: false,
};
/// `rpc_scheduler_decoders` (relaxed).
const SCHEDULER: Decoder = Decoder {
    what: "scheduler",
    required: &[("scheduler_period", U64)],
    optional: &[("scheduler_name", Str), ("governor_name", Str)],
    relaxed: true,
};

/// One refresh of spdk_top's data thread, decoded.
struct Screen {
    reactors: Value,
    threads: Value,
    pollers: Value,
    scheduler: Value,
}

fn refresh(top: &mut Top) -> Screen {
    let reactors = top.call("framework_get_reactors");
    TICK_RATE.check(&reactors);
    for core in reactors["reactors"].as_array().expect("reactors array") {
        CORE.check(core);
        for t in core["lw_threads"].as_array().unwrap() {
            CORE_THREAD.check(t);
        }
    }
    let threads = top.call("thread_get_stats");
    for t in threads["threads"].as_array().expect("threads array") {
        THREAD.check(t);
    }
    let pollers = top.call("thread_get_pollers");
    for t in pollers["threads"].as_array().expect("threads array") {
        POLLER_THREAD.check(t);
        for kind in ["active_pollers", "timed_pollers", "paused_pollers"] {
            for p in t[kind].as_array().unwrap() {
                POLLER.check(p);
                // SPDK writes period_ticks only for a timed poller.
                assert_eq!(
                    p.get("period_ticks").is_some(),
                    kind == "timed_pollers",
                    "{p}"
                );
            }
        }
    }
    let scheduler = top.call("framework_get_scheduler");
    SCHEDULER.check(&scheduler);
    Screen {
        reactors,
        threads,
        pollers,
        scheduler,
    }
}

/// The poller named `name` on the first thread of `s`, if listed.
fn poller<'a>(s: &'a Screen, name: &str) -> Option<&'a Value> {
    let t = &s.pollers["threads"][0];
    ["active_pollers", "timed_pollers"]
        .iter()
        .flat_map(|k| t[*k].as_array().unwrap())
        .find(|p| p["name"] == name)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// Starts pmio-tgt with `--wait-for-rpc` and checks that `framework_wait_init` answers only
/// once `framework_start_init` has run (spdk_top's first call).
fn start_held(sock: &Path) -> Daemon {
    let d = Daemon::start(sock, &["--wait-for-rpc"]);
    let s = sock.to_path_buf();
    let waiter = std::thread::spawn(move || Top::connect(&s).call("framework_wait_init"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "framework_wait_init answered early");
    d.rpc_ok(&["framework_start_init"]);
    assert_eq!(waiter.join().unwrap(), json!(true));
    d
}

/// Daemon `a` serves Null0 over NVMe/TCP on `port`; `b` attaches it as Nvme0n1.
fn serve_null_over_tcp(a: &Daemon, b: &Daemon, port: u16) {
    let port = port.to_string();
    a.rpc_ok(&["bdev_null_create", "Null0", "64", "512"]);
    a.rpc_ok(&["nvmf_create_transport", "-t", "TCP"]);
    a.rpc_ok(&["nvmf_create_subsystem", NQN, "-a"]);
    a.rpc_ok(&["nvmf_subsystem_add_ns", NQN, "Null0"]);
    a.rpc_ok(&[
        "nvmf_subsystem_add_listener",
        NQN,
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
    ]);
    b.rpc_ok(&[
        "bdev_nvme_attach_controller",
        "-b",
        "Nvme0",
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        &port,
        "-n",
        NQN,
        "-f",
        "ipv4",
    ]);
}

#[test]
fn tgt_spdk_top_sequence_under_nvmf_load() {
    let dir = tempfile::tempdir().unwrap();
    let (sock_a, sock_b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let a = start_held(&sock_a);
    let b = Daemon::start(&sock_b, &[]);
    serve_null_over_tcp(&a, &b, tgt_util::free_port());
    // Reads before the job (examine's look for an lvstore on each new bdev, on A's Null0 and
    // on B's Nvme0n1 through A) count in the statistics as in SPDK's; the job's are compared.
    let reads = |v: &Value| v["bdevs"][0]["num_read_ops"].as_u64().unwrap();
    let served0 = reads(&a.rpc_json(&["bdev_get_iostat", "-b", "Null0"]));
    let host0 = reads(&b.rpc_json(&["bdev_get_iostat", "-b", "Nvme0n1"]));
    let job = std::thread::spawn(move || {
        tgt_util::rpc(
            &sock_b,
            &[
                "perform_tests",
                "-b",
                "Nvme0n1",
                "-q",
                "8",
                "-w",
                "randread",
                "-o",
                "4096",
                "-t",
                "4",
            ],
        )
    });

    // wait_init's calls after framework_wait_init.
    let mut top = Top::connect(&a.sock);
    let r = top.call("framework_get_reactors");
    TICK_RATE.check(&r);
    assert_eq!(r["tick_rate"], 1_000_000_000u64);
    std::thread::sleep(Duration::from_millis(500));
    let first = refresh(&mut top);
    std::thread::sleep(Duration::from_millis(1000));
    let second = refresh(&mut top);

    // Cores: one per reactor, their thread the one thread_get_stats lists.
    let (c1, c2) = (
        &first.reactors["reactors"][0],
        &second.reactors["reactors"][0],
    );
    let t1 = &first.threads["threads"][0];
    let t2 = &second.threads["threads"][0];
    assert_eq!(c1["lw_threads"][0]["id"], t1["id"]);
    assert_eq!(c1["lw_threads"][0]["name"], t1["name"]);
    assert_eq!(first.pollers["threads"][0]["id"], t1["id"]);
    assert!(u(&c1["tid"]) > 0);
    assert_eq!(
        first.reactors["pid"].as_u64(),
        Some(u64::from(a.child.id()))
    );
    // Ticks move: busy under load, busy + idle about the wall time between refreshes.
    assert!(u(&c2["busy"]) > u(&c1["busy"]), "{c1} -> {c2}");
    let spent = u(&c2["busy"]) + u(&c2["idle"]) - u(&c1["busy"]) - u(&c1["idle"]);
    assert!(
        (500_000_000..5_000_000_000).contains(&spent),
        "{spent} ns in about 1 s"
    );
    assert!(u(&t2["busy"]) > u(&t1["busy"]));
    assert!(u(&c2["lw_threads"][0]["elapsed"]) > u(&c1["lw_threads"][0]["elapsed"]));
    assert!(u(&c2["usr"]) + u(&c2["sys"]) >= u(&c1["usr"]) + u(&c1["sys"]));

    // Pollers: named as an operator reads them, counted while the host reads.
    let group1 = poller(&first, "nvmf_tcp_poll_group").expect("the poll group is listed");
    let group2 = poller(&second, "nvmf_tcp_poll_group").unwrap();
    assert_eq!(group1["id"], group2["id"]);
    assert_eq!(group1["state"], "waiting");
    assert!(u(&group2["run_count"]) > u(&group1["run_count"]));
    assert!(
        u(&group2["busy_count"]) > u(&group1["busy_count"]),
        "the poll group did work: {group1} -> {group2}"
    );
    assert!(u(&group2["busy_count"]) <= u(&group2["run_count"]));
    let accept = poller(&second, "nvmf_tcp_accept").expect("the acceptor is listed");
    assert_eq!(accept.get("period_ticks").map(u), Some(1_000_000));
    assert!(poller(&second, "nvmf_tcp_tick").is_some());
    // thread_get_stats counts what thread_get_pollers lists (no poller came or went).
    let listed = &second.pollers["threads"][0];
    assert_eq!(
        t2["active_pollers_count"].as_u64(),
        Some(listed["active_pollers"].as_array().unwrap().len() as u64)
    );
    assert_eq!(
        t2["timed_pollers_count"].as_u64(),
        Some(listed["timed_pollers"].as_array().unwrap().len() as u64)
    );
    // A poller is told apart by (id, thread id): ids are unique on their thread.
    let ids: BTreeSet<u64> = ["active_pollers", "timed_pollers"]
        .iter()
        .flat_map(|k| listed[*k].as_array().unwrap())
        .map(|p| u(&p["id"]))
        .collect();
    assert_eq!(
        ids.len() as u64,
        u(&t2["active_pollers_count"]) + u(&t2["timed_pollers_count"])
    );

    // The scheduler in effect: SPDK's default until one is set.
    assert_eq!(second.scheduler["scheduler_name"], "static");
    assert_eq!(second.scheduler["scheduler_period"], 0);

    // B's side: the job's poller, counted.
    let jobs = b.rpc_json(&["thread_get_pollers"]);
    let p = jobs["threads"][0]["active_pollers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "perform_tests")
        .cloned()
        .unwrap_or_else(|| panic!("perform_tests's poller on B: {jobs}"));
    assert!(u(&p["run_count"]) > 0 && u(&p["busy_count"]) > 0, "{p}");

    let out = job.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let res: Value = serde_json::from_str(&text).unwrap();
    assert!(res["results"][0]["iops"].as_f64().unwrap() > 0.0, "{res}");
    // A's bdev_get_iostat counts the reads it served over NVMe/TCP, as SPDK's does: B's
    // host side saw every one of them.
    let served = a.rpc_json(&["bdev_get_iostat", "-b", "Null0"]);
    let host = b.rpc_json(&["bdev_get_iostat", "-b", "Nvme0n1"]);
    assert!(reads(&host) > host0, "{host}");
    assert_eq!(
        reads(&served) - served0,
        reads(&host) - host0,
        "{served} {host}"
    );
    // The job is over: its poller left B's list.
    let jobs = b.rpc_json(&["thread_get_pollers"]);
    assert!(
        !jobs.to_string().contains("perform_tests"),
        "a finished job's poller is unregistered: {jobs}"
    );
}

#[test]
fn tgt_framework_get_scheduler_answers_what_is_in_effect() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("t.sock");
    let d = Daemon::start(&sock, &[]);
    let s = d.rpc_json(&["framework_get_scheduler"]);
    assert_eq!(
        s,
        json!({"scheduler_name": "static", "scheduler_period": 0,
               "isolated_core_mask": "0", "scheduling_core": 0}),
    );
    d.rpc_ok(&["framework_wait_init"]);
    // dynamic: every reactor sleeps when idle; the name is what is in effect.
    let set = d.raw(
        br#"{"jsonrpc":"2.0","method":"framework_set_scheduler","id":1,"params":{"name":"dynamic","period":100000}}"#,
    );
    assert!(set.contains("\"result\":true"), "{set}");
    let s = d.rpc_json(&["framework_get_scheduler"]);
    assert_eq!(s["scheduler_name"], "dynamic");
    // pmio has no scheduling period: the period asked for is not in effect.
    assert_eq!(s["scheduler_period"], 0);
    let e = d.raw(br#"{"jsonrpc":"2.0","method":"framework_get_scheduler","id":2,"params":{}}"#);
    assert!(e.contains("-32602"), "{e}");
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}
