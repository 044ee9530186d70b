//! pmio-perf `-b 1M --verify` on devices that take at most 64 KiB per request (issue 15): the
//! block layer splits every I/O into child requests (the malloc driver fails any request
//! beyond its limits), with and without mq-deadline, across an odd boundary, and on a queue
//! shallower than the children of one I/O. Every block read is checked.

mod perf_util;

use perf_util::{json, perf, two_cores};

/// Runs pmio-perf with `args` plus the common verify options and checks the report: exit 0,
/// no mismatch, no error, a fair number of 1 MiB I/Os.
fn verify_1m(what: &str, args: &[&str]) {
    let mut all = vec![
        "-b",
        "1M",
        "-t",
        "2",
        "-m",
        two_cores(),
        "--verify",
        "--json",
    ];
    all.extend_from_slice(args);
    let out = perf(&all);
    assert!(
        out.status.success(),
        "{what}: stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    assert_eq!(j["verify_mismatches"], 0, "{what}: {j}");
    assert_eq!(j["errors"], 0, "{what}: {j}");
    assert!(j["ios"].as_u64().unwrap() >= 8, "{what}: {j}");
    assert_eq!(j["options"]["bs"], 1 << 20, "{what}: {j}");
}

#[test]
fn perf_verify_1m_on_a_64k_device_randrw() {
    verify_1m(
        "malloc 64k randrw",
        &[
            "--dev",
            "malloc:size=32M,max_transfer=64k",
            "-w",
            "randrw",
            "-M",
            "50",
            "-d",
            "8",
            "-s",
            "4",
            "-c",
            "4",
        ],
    );
}

#[test]
fn perf_verify_1m_on_a_64k_device_with_a_boundary_under_mq_deadline() {
    verify_1m(
        "malloc 64k boundary 192k mq-deadline",
        &[
            "--dev",
            "malloc:size=32M,max_transfer=64k,boundary=192k",
            "--sched",
            "mq-deadline",
            "-w",
            "randrw",
            "-M",
            "50",
            "-d",
            "4",
            "-s",
            "2",
            "-c",
            "2",
        ],
    );
}

/// Two tags for sixteen children per I/O: the fill and the reads go through a split that can
/// never be issued at once.
#[test]
fn perf_verify_1m_on_a_queue_shallower_than_one_split() {
    verify_1m(
        "malloc 64k depth 2",
        &[
            "--dev",
            "malloc:size=16M,bs=4096,max_transfer=64k",
            "-w",
            "randread",
            "-d",
            "2",
            "-s",
            "1",
            "-c",
            "1",
        ],
    );
}
