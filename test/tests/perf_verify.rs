//! pmio-perf --verify end to end on a malloc device: clean runs report no mismatch, a
//! corrupted block is found (test-only fault injection in the malloc driver).

mod perf_util;

use perf_util::{json, perf, two_cores, two_cores_count, verify_clean};

#[test]
fn perf_verify_randrw_two_reactors_has_no_mismatch() {
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
        "--verify",
        "--json",
    ]);
    let j = verify_clean(&out, "malloc randrw");
    assert_eq!(j["cores"].as_array().unwrap().len(), two_cores_count());
}

#[test]
fn perf_verify_randread_after_fill_has_no_mismatch() {
    let out = perf(&[
        "--dev",
        "malloc:size=4M,bs=4096",
        "-b",
        "8192",
        "-w",
        "randread",
        "-d",
        "16",
        "-s",
        "4",
        "-c",
        "4",
        "-t",
        "1",
        "-m",
        two_cores(),
        "--verify",
        "--json",
    ]);
    verify_clean(&out, "malloc randread after fill");
}

#[test]
fn perf_verify_lowers_the_depth_to_what_the_region_holds() {
    // 64 KiB at -b 4096: 16 units for one core, so at most 15 I/Os in flight (two never
    // share a unit); the default depth 128 is lowered, as bdevperf does, and said on stderr.
    let out = perf(&[
        "--dev",
        "malloc:size=64k",
        "-b",
        "4096",
        "-w",
        "randrw",
        "-t",
        "1",
        "-m",
        "[0]",
        "--verify",
        "--json",
    ]);
    verify_clean(&out, "malloc 64k, depth 128");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "pmio-perf: --verify: Malloc0 gives each core 16 I/O units of 4096 bytes: depth \
             lowered from 128 to 15 on it"
        ),
        "{stderr}"
    );
}

#[test]
fn fault_perf_verify_detects_a_corrupted_block() {
    // Block 100 (512-byte blocks) lies in 4 KiB unit 12, in core 0's region. A sequential
    // read pass over each region is guaranteed to read it back after the fill wrote it.
    let out = perf(&[
        "--dev",
        "malloc:size=2M,corrupt_lba=100",
        "-b",
        "4096",
        "-w",
        "read",
        "-d",
        "16",
        "-s",
        "8",
        "-c",
        "8",
        "-t",
        "1",
        "-m",
        two_cores(),
        "--verify",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let j = json(&out);
    assert!(j["verify_mismatches"].as_u64().unwrap() >= 1, "{j}");
    assert!(
        stderr.contains("verify mismatch on Malloc0: LBA 100: expected lba=100 seq=1"),
        "{stderr}"
    );
    assert!(stderr.contains("crc mismatch"), "{stderr}");
    assert!(
        !stderr.contains("LBA 101:"),
        "only the corrupted block: {stderr}"
    );
}
