//! Latency histograms through pmio-tgt and pmio-rpc, as an SPDK user takes them:
//! `bdev_enable_histogram`, a workload, `pmio-rpc bdev_get_histogram NAME | histogram.py`
//! (`test/ci/histogram-rows.py`, pmio's reader of SPDK's format with SPDK's row format, since
//! CI has no SPDK checkout; `SPDK_HISTOGRAM_PY=/path/to/spdk/scripts/histogram.py` runs
//! SPDK's own), the `--table` view, and the histogram turned back on by `save_config`'s replay.

mod tgt_util;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use tgt_util::Daemon;

fn histogram_py(reply: &str) -> String {
    let script = std::env::var_os("SPDK_HISTOGRAM_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ci/histogram-rows.py"));
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (test/ci/host-deps.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(reply.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "histogram.py failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The I/O counts of histogram.py's rows, summed.
fn py_total(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.contains(" - ") && l.ends_with(')'))
        .map(|l| {
            let n = l.rsplit_once('(').unwrap().1.trim_end_matches(')').trim();
            n.parse::<u64>().unwrap()
        })
        .sum()
}

#[test]
fn histogram_of_a_served_bdev_reads_with_spdks_script_and_survives_save_config() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("h.sock");
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "16", "512"]);
    d.rpc_ok(&["bdev_enable_histogram", "-e", "-o", "write", "Malloc0"]);
    let r = d.rpc_json(&[
        "perform_tests",
        "-b",
        "Malloc0",
        "-w",
        "randrw",
        "-q",
        "8",
        "-t",
        "0.3",
    ]);
    assert_eq!(r["results"][0]["status"], "finished", "{r}");
    let io = d.rpc_json(&["bdev_get_iostat", "-b", "Malloc0"]);
    let writes = io["bdevs"][0]["num_write_ops"].as_u64().unwrap();
    assert!(writes > 0 && io["bdevs"][0]["num_read_ops"].as_u64().unwrap() > 0);

    // rpc.py's print, piped into the reader: every write, and only writes, counted.
    let reply = d.rpc_ok(&["bdev_get_histogram", "Malloc0"]);
    let text = histogram_py(&reply);
    assert!(text.starts_with("Latency histogram\n"), "{text}");
    assert_eq!(py_total(&text), writes, "{text}");

    // The table: the same count, percentiles in order, a bar per range.
    let table = d.rpc_ok(&["bdev_get_histogram", "--table", "Malloc0"]);
    assert!(
        table.starts_with(&format!("Latency histogram: {writes} I/Os")),
        "{table}"
    );
    let value = |label: &str| -> f64 {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(label))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {label}: {table}"))
    };
    let ps: Vec<f64> = ["min", "p50", "p90", "p99", "max"]
        .iter()
        .map(|l| value(l))
        .collect();
    assert!(ps.windows(2).all(|w| w[0] <= w[1]), "{table}");
    assert!(table.contains('#'), "{table}");

    // save_config writes the call; a daemon loaded from it counts again.
    let saved = d.rpc_ok(&["save_config"]);
    assert!(saved.contains("\"bdev_enable_histogram\""), "{saved}");
    let conf = dir.path().join("saved.json");
    std::fs::write(&conf, &saved).unwrap();
    drop(d);
    let sock2 = dir.path().join("h2.sock");
    let d2 = Daemon::start(&sock2, &["-c", conf.to_str().unwrap()]);
    let again = d2.rpc_json(&["bdev_get_histogram", "Malloc0"]);
    assert_eq!(again["granularity"], 7, "{again}");
    d2.rpc_ok(&["bdev_enable_histogram", "-d", "Malloc0"]);
    let off = d2.rpc(&["bdev_get_histogram", "Malloc0"]);
    assert_eq!(off.status.code(), Some(1));
}
