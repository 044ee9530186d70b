//! Shared helpers of the pmio-perf end-to-end tests: build the binary once, run it.
// Each test binary that includes this module uses a subset of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Path of a debug pmio-perf built from this workspace (built once per test binary).
pub fn perf_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("test/ lives in the workspace")
            .to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "pmio-perf"])
            .current_dir(&root)
            .status()
            .expect("run cargo build -p pmio-perf");
        assert!(status.success(), "cargo build -p pmio-perf failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|t| if t.is_relative() { root.join(t) } else { t })
            .unwrap_or_else(|| root.join("target"));
        let bin = target.join("debug").join("pmio-perf");
        assert!(bin.exists(), "{} not found", bin.display());
        bin
    })
}

/// Runs pmio-perf with `args`.
pub fn perf(args: &[&str]) -> Output {
    Command::new(perf_bin())
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("run pmio-perf")
}

/// Parses the `--json` report on stdout.
pub fn json(out: &Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(s.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {s}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Number of CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `-m` for a two-reactor run: cores 0 and 1, or core 0 alone on a one-CPU machine.
pub fn two_cores() -> &'static str {
    if cpus() >= 2 { "0x3" } else { "0x1" }
}

/// Reactors a `two_cores()` run starts.
pub fn two_cores_count() -> usize {
    cpus().min(2)
}

/// Checks a `--verify --json` run: exit 0, no mismatch, no error, more than 100 I/Os.
/// Returns the report for further checks; `what` names the run in failure messages.
pub fn verify_clean(out: &Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(out);
    assert_eq!(j["verify_mismatches"], 0, "{what}: {j}");
    assert_eq!(j["errors"], 0, "{what}: {j}");
    assert!(j["ios"].as_u64().unwrap() > 100, "{what}: {j}");
    j
}
