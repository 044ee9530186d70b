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
