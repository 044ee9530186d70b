//! pmio-perf on uring bdevs end to end: --verify on a temporary file, O_DIRECT and buffered,
//! two reactors, zero mismatches; bad uring specs exit 2 with a clear message.

mod perf_util;

use std::path::Path;

use perf_util::{perf, two_cores, verify_clean};

/// A temporary file of `len` bytes of real data on /var/tmp (ext4 here; O_DIRECT capable).
fn data_file(len: usize) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    let mut x: u64 = 0x243F_6A88_85A3_08D3;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(f.path(), data).unwrap();
    f
}

fn verify_run(spec: &str, rw: &str) {
    let out = perf(&[
        "--dev",
        spec,
        "-b",
        "4096",
        "-w",
        rw,
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
    verify_clean(&out, &format!("{spec} {rw}"));
}

#[test]
fn uring_perf_verify_direct_two_reactors() {
    let f = data_file(16 << 20);
    let spec = format!("uring:path={}", f.path().display());
    verify_run(&spec, "randrw");
    verify_run(&spec, "randread");
}

#[test]
fn uring_perf_verify_buffered_two_reactors() {
    let f = data_file(16 << 20);
    let spec = format!("uring:path={},direct=0", f.path().display());
    verify_run(&spec, "randrw");
    verify_run(&spec, "randread");
}

#[test]
fn uring_perf_bad_specs_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    std::fs::write(&small, [0u8; 100]).unwrap();
    let d = dir.path().display().to_string();
    for (spec, needle) in [
        ("uring".to_string(), "path=FILE is required"),
        (format!("uring:path={d}"), "is a directory"),
        (format!("uring:path={d}/missing"), "no such file"),
        (format!("uring:path={}", small.display()), "too small"),
        (
            format!("uring:path={d},hipri=yes"),
            "hipri=yes: must be 0 or 1",
        ),
    ] {
        let out = perf(&["--dev", &spec, "-t", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        assert!(stderr.contains(needle), "{spec}: {stderr}");
    }
    assert!(Path::new(&d).exists());
}
