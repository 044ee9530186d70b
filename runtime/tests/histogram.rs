//! SPDK's latency histograms on pmio's bdev host: known latencies (a null bdev that completes
//! each I/O after a fixed delay) land in the right buckets, every I/O of the chosen type is
//! counted once, and a reader of SPDK's format reads `bdev_get_histogram`'s reply
//! (`test/ci/histogram-rows.py`; `SPDK_HISTOGRAM_PY` names SPDK's own `scripts/histogram.py`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use pmio_jsonrpc::{Registry, RpcState};
use pmio_null::{NullDevice, NullOptions};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};
use pmio_runtime::rpc::histogram::histogram_from_json;
use pmio_runtime::rpc::{self, BdevHost, BdevRecord};
use serde_json::{Value, json};

/// The null bdev's completion delay.
const LATENCY_NS: u64 = 200_000;

struct Host {
    reactors: Option<Reactors>,
    host: Arc<BdevHost>,
    methods: Registry<Arc<BdevHost>>,
}

impl Host {
    fn new() -> Host {
        let opts = ReactorsOptions {
            pin_threads: false,
            interrupt_idle: Some(Duration::from_millis(1)),
            ..ReactorsOptions::default()
        };
        let reactors = Reactors::start(CoreMask::parse("0x1").unwrap(), opts).unwrap();
        let host = Arc::new(BdevHost::new(reactors.handle()));
        let dev = NullDevice::new(NullOptions {
            name: "Slow0".into(),
            latency_ns: LATENCY_NS,
            ..NullOptions::default()
        })
        .unwrap();
        host.add_bdev(dev, BdevRecord::new("Slow0", "null", None))
            .unwrap();
        Host {
            reactors: Some(reactors),
            host,
            methods: rpc::methods(),
        }
    }

    fn call(&self, method: &str, params: Value) -> Result<Value, pmio_jsonrpc::RpcError> {
        self.methods
            .call(&self.host, RpcState::Runtime, method, Some(&params))
    }

    fn iostat(&self, key: &str) -> u64 {
        let s = self
            .call("bdev_get_iostat", json!({"name": "Slow0"}))
            .unwrap();
        s["bdevs"][0][key].as_u64().unwrap()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.host.unregister_all();
        if let Some(r) = self.reactors.take() {
            r.stop().unwrap();
        }
    }
}

fn histogram_py() -> PathBuf {
    std::env::var_os("SPDK_HISTOGRAM_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test/ci/histogram-rows.py")
        })
}

#[test]
fn known_latencies_land_in_their_buckets_and_histogram_py_reads_them() {
    let h = Host::new();
    // Off: SPDK's -EFAULT text.
    let e = h
        .call("bdev_get_histogram", json!({"name": "Slow0"}))
        .unwrap_err();
    assert_eq!(e.code, -32603);
    assert!(e.message.starts_with("Bad address"), "{}", e.message);
    let e = h
        .call(
            "bdev_enable_histogram",
            json!({"name": "Nope", "enable": true}),
        )
        .unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (-19, "No such device"));
    let e = h
        .call(
            "bdev_enable_histogram",
            json!({"name": "Slow0", "enable": true, "opc": "reed"}),
        )
        .unwrap_err();
    assert_eq!(e.code, -32603);

    // Reads only, over a read/write mix.
    let r = h
        .call(
            "bdev_enable_histogram",
            json!({"name": "Slow0", "enable": true, "opc": "read"}),
        )
        .unwrap();
    assert_eq!(r, json!(true));
    let res = h
        .call(
            "perform_tests",
            json!({"rw": "randrw", "rwmixread": 50, "depth": 8, "seconds": 0.3}),
        )
        .unwrap();
    assert_eq!(res["results"][0]["status"], "finished", "{res}");
    let reply = h
        .call("bdev_get_histogram", json!({"name": "Slow0"}))
        .unwrap();
    assert_eq!(reply["tsc_rate"], 1_000_000_000u64);
    assert_eq!(reply["granularity"], 7);
    let hist = histogram_from_json(&reply).unwrap();
    let reads = h.iostat("num_read_ops");
    assert!(reads > 0 && h.iostat("num_write_ops") > 0);
    assert_eq!(hist.total(), reads, "every read counted once, no write");
    // Nothing completes before its delay; the bucket holding the delay's start is 1/128 of a
    // power of two wide.
    let first = hist.nonzero()[0];
    assert!(
        first.end > LATENCY_NS && first.start <= LATENCY_NS + LATENCY_NS / 64,
        "{first:?}"
    );
    assert!(hist.percentile(0.0) >= LATENCY_NS);

    // A reader of SPDK's format (SPDK's own scripts/histogram.py with SPDK_HISTOGRAM_PY),
    // fed the reply as rpc.py prints it.
    let mut child = Command::new("python3")
        .arg(histogram_py())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs (test/ci/host-deps.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string_pretty(&reply).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Latency histogram\n"), "{text}");
    // "%9.3f - %9.3f: %9.4f%%  (%9u)": start and end in us, cumulative share, count.
    let rows: Vec<(f64, f64, u64)> = text
        .lines()
        .filter(|l| l.contains(" - ") && l.ends_with(')'))
        .map(|l| {
            let (range, rest) = l.split_once(':').unwrap();
            let (a, b) = range.split_once(" - ").unwrap();
            let count = rest
                .rsplit_once('(')
                .unwrap()
                .1
                .trim_end_matches(')')
                .trim();
            (
                a.trim().parse().unwrap(),
                b.trim().parse().unwrap(),
                count.parse().unwrap(),
            )
        })
        .collect();
    assert!(!rows.is_empty(), "{text}");
    assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), reads, "{text}");
    let delay_us = LATENCY_NS as f64 / 1000.0;
    assert!(
        rows[0].1 > delay_us && rows[0].0 <= delay_us * 1.02,
        "{text}"
    );

    // Off again: the counts go, the method answers -EFAULT.
    h.call(
        "bdev_enable_histogram",
        json!({"name": "Slow0", "enable": false}),
    )
    .unwrap();
    assert!(
        h.call("bdev_get_histogram", json!({"name": "Slow0"}))
            .is_err()
    );
}

#[test]
fn save_config_turns_enabled_histograms_back_on() {
    let h = Host::new();
    assert!(rpc::histogram::config(&h.host).is_empty());
    h.call(
        "bdev_enable_histogram",
        json!({"name": "Slow0", "enable": true, "opc": "write", "granularity": 5}),
    )
    .unwrap();
    // SPDK writes name, enable and opc.
    assert_eq!(
        rpc::histogram::config(&h.host),
        [json!({"method": "bdev_enable_histogram",
                "params": {"name": "Slow0", "enable": true, "opc": "write"}})]
    );
    let reply = h
        .call("bdev_get_histogram", json!({"name": "Slow0"}))
        .unwrap();
    assert_eq!(reply["granularity"], 5);
    h.call(
        "bdev_enable_histogram",
        json!({"name": "Slow0", "enable": false}),
    )
    .unwrap();
    assert!(rpc::histogram::config(&h.host).is_empty());
}
