//! pmio-perf's command line: bad input exits 2 with a message naming the problem; good
//! runs print t/io_uring-style lines and a summary, or one JSON object.

mod perf_util;

use perf_util::{json, perf};

#[test]
fn perf_bad_inputs_exit_2_and_name_the_problem() {
    let cases: &[(&[&str], &str)] = &[
        (&["--dev", "bogus"], "unknown driver \"bogus\""),
        (&["--dev", "null:size=abc"], "size=abc"),
        (&["--dev", "null:foo=1"], "unknown key \"foo\""),
        (&["--dev", "null:size"], "expected key=value"),
        (&["--dev", "null:bs=1000"], "block size 1000"),
        (&["--dev", "malloc:size=0"], "multiple of the block size"),
        (
            &["--dev", "null", "--dev", "null:name=Null0"],
            "Null0 is already in use",
        ),
        (&["-d", "0"], "--depth 0"),
        (&["-s", "999"], "--submit-batch 999"),
        (&["-c", "0"], "--complete-batch 0"),
        (&["-b", "1000"], "--bs 1000: not a multiple"),
        (&["-b", "4x"], "unknown size suffix"),
        (&["-w", "sideways"], "sideways"),
        (&["-M", "101"], "101"),
        (&["-t", "0"], "not a positive number of seconds"),
        (&["--warmup=-1"], "--warmup"),
        (&["-m", "0x100000000"], "-m 0x100000000"),
        (&["-m", "zz"], "-m zz"),
        (&["--verify"], "does not store data"),
        (
            &["--verify", "--dev", "malloc:size=4k", "-b", "4096"],
            "1 I/O unit of 4096 bytes; verifying needs 2",
        ),
        (&["--bogus-flag"], "--bogus-flag"),
    ];
    for (args, needle) in cases {
        let out = perf(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: want {needle:?} in {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn perf_spec_errors_are_one_line() {
    let out = perf(&["--dev", "null:latency_us=x"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("pmio-perf: error: --dev \"null:latency_us=x\""),
        "{stderr}"
    );
}

#[test]
fn perf_json_report_has_the_documented_fields() {
    let out = perf(&[
        "--dev", "null", "-t", "1", "-m", "0x1", "--json", "-d", "64", "-s", "16", "-c", "16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    assert!(j["iops"].as_u64().unwrap() > 0);
    let ios = j["ios"].as_u64().unwrap();
    assert!(ios > 0);
    assert_eq!(
        j["bw_bytes"].as_u64().unwrap() / 4096,
        j["iops"].as_u64().unwrap()
    );
    assert_eq!(j["errors"], 0);
    assert_eq!(j["verify_mismatches"], 0);
    let lat = &j["lat_ns"];
    let (p50, p99, p999, max) = (
        lat["p50"].as_u64().unwrap(),
        lat["p99"].as_u64().unwrap(),
        lat["p999"].as_u64().unwrap(),
        lat["max"].as_u64().unwrap(),
    );
    assert!(lat["avg"].as_u64().unwrap() > 0);
    assert!(0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max, "{lat}");
    let cores = j["cores"].as_array().unwrap();
    assert_eq!(cores.len(), 1);
    assert_eq!(cores[0]["core"], 0);
    assert!(cores[0]["iops"].as_u64().unwrap() > 0);
    let busy = cores[0]["busy_pct"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&busy));
    let o = &j["options"];
    assert_eq!(
        (
            o["depth"].as_u64(),
            o["submit_batch"].as_u64(),
            o["complete_batch"].as_u64()
        ),
        (Some(64), Some(16), Some(16))
    );
    assert_eq!(o["rw"], "randread");
    assert_eq!(o["bs"], 4096);
}

#[test]
fn perf_prints_lines_and_a_summary() {
    let out = perf(&[
        "--dev",
        "null:latency_us=20",
        "-t",
        "2",
        "-m",
        "0x1",
        "-w",
        "randrw",
        "-M",
        "70",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = s.lines().filter(|l| l.starts_with("IOPS=")).collect();
    assert!(!lines.is_empty(), "{s}");
    for l in &lines {
        assert!(l.contains(", BW=") && l.contains("MiB/s, IOS/call="), "{l}");
    }
    assert!(s.contains("Total: IOPS="), "{s}");
    assert!(s.contains("core   0: IOPS="), "{s}");
    assert!(s.contains("Latency (us): avg="), "{s}");
    // 20 us of device latency: the median cannot be below it.
    let lat = s.lines().find(|l| l.starts_with("Latency")).unwrap();
    let p50: f64 = lat
        .split("p50=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(p50 >= 20.0, "{lat}");
}
