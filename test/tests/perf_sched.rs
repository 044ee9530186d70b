//! pmio-perf with the mq-deadline scheduler on the I/O path: two reactors sharing one
//! scheduler lose or duplicate no I/O (verified data), priorities are reported per class, and
//! bad scheduler flags exit 2 with a one-line message.

mod perf_util;

use perf_util::{json, perf, two_cores, verify_clean};

/// Two cores submit to one malloc device through one shared mq-deadline (owners 0 and 1):
/// the fill writes every unit once, the randrw phase checks every read against the last
/// write of its unit, so a lost, duplicated or misplaced request shows up as a mismatch or a
/// hang.
#[test]
fn perf_sched_verify_two_reactors_one_device_no_loss_no_duplicate() {
    let out = perf(&[
        "--dev",
        "malloc:size=8M",
        "-b",
        "4096",
        "-w",
        "randrw",
        "-M",
        "50",
        "-d",
        "32",
        "-s",
        "8",
        "-c",
        "8",
        "-t",
        "1",
        "-m",
        two_cores(),
        "--sched",
        "mq-deadline",
        "--prio-mix",
        "rt=20,be=60,idle=20",
        "--verify",
        "--json",
    ]);
    let j = verify_clean(&out, "mq-deadline randrw on two reactors");
    let ios = j["ios"].as_u64().unwrap();
    let classes = j["classes"].as_object().expect("per-class report");
    let mut sum = 0;
    for c in ["rt", "be", "idle"] {
        let k = &classes[c];
        assert!(k["ios"].as_u64().unwrap() > 0, "{c}: {j}");
        assert!(k["lat_ns"]["p50"].as_u64().unwrap() > 0, "{c}: {j}");
        assert!(k["lat_ns"]["p999"].as_u64() >= k["lat_ns"]["p50"].as_u64());
        sum += k["ios"].as_u64().unwrap();
    }
    assert_eq!(sum, ios, "every I/O in exactly one class");
    assert_eq!(j["options"]["sched"], "mq-deadline");
}

/// Sequential writes through mq-deadline (adjacent requests with contiguous buffers merge)
/// and reads verified afterwards on one core.
#[test]
fn perf_sched_verify_sequential_one_core() {
    let out = perf(&[
        "--dev",
        "malloc:size=4M",
        "-b",
        "4096",
        "-w",
        "read",
        "-d",
        "16",
        "-s",
        "16",
        "-c",
        "4",
        "-t",
        "1",
        "-m",
        "0x1",
        "--sched",
        "mq-deadline",
        "--prio",
        "rt",
        "--verify",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    assert_eq!(j["verify_mismatches"], 0);
    assert_eq!(j["errors"], 0);
    assert_eq!(j["classes"]["rt"]["ios"], j["ios"]);
    assert!(j["classes"].get("be").is_none(), "{j}");
}

#[test]
fn perf_sched_bad_flags_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--sched", "bfq"], "unknown I/O scheduler \"bfq\""),
        (
            &["--sched-opt", "fifo_batch=8"],
            "needs --sched mq-deadline",
        ),
        (
            &["--sched", "mq-deadline", "--sched-opt", "fifo_batch"],
            "expected NAME=VALUE",
        ),
        (
            &["--sched", "mq-deadline", "--sched-opt", "bogus=1"],
            "unknown mq-deadline tunable",
        ),
        (
            &["--sched", "mq-deadline", "--sched-opt", "fifo_batch=-3"],
            "not a non-negative integer",
        ),
        (
            &[
                "--sched",
                "mq-deadline",
                "--sched-opt",
                "prio_aging_expire=0",
            ],
            "prio_aging_expire",
        ),
        (
            &["--sched", "mq-deadline", "--sched-opt", "async_depth=99999"],
            "async_depth",
        ),
        (&["--queue-depth", "0"], "--queue-depth 0"),
        (
            &["-d", "16", "-s", "8", "-c", "8", "--queue-depth", "32"],
            "--queue-depth 32",
        ),
        (&["--prio", "urgent"], "unknown priority class \"urgent\""),
        (&["--prio-mix", "rt=10,be=80"], "sum to 100"),
        (&["--prio-mix", "rt=10,rt=90"], "rt given twice"),
        (&["--prio-mix", "rt"], "is not CLASS=PCT"),
        (&["--prio-mix", "rt=x,be=100"], "not a percentage"),
        (
            &["--prio", "rt", "--prio-mix", "rt=100"],
            "one or the other",
        ),
    ];
    for (args, needle) in cases {
        let out = perf(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: want {needle:?} in {stderr}"
        );
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}
