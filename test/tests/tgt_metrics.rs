//! `pmio-tgt --metrics-listen`: the `/metrics` endpoint scraped by a real Prometheus (Debian's
//! `prometheus`, installed by `test/ci/host-deps.sh`) while `perform_tests` loads a bdev; the
//! values Prometheus stored, asked through its HTTP API, are `bdev_get_iostat`'s. Bad requests
//! and clients that vanish leave the daemon serving.

mod tgt_util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tgt_util::{Daemon, free_port};

/// `GET path` (or another request line) on `addr`; the status and the body.
fn http(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(format!("{request} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of sample `name{labels}` in an exposition (exact label text).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Percent-encodes a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server in a temporary directory, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second; waits until it is ready.
    fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("prometheus.yml");
        std::fs::write(
            &conf,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
                 - job_name: pmio\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
            .spawn()
            .expect("prometheus runs (test/ci/host-deps.sh installs Debian's package)");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        p.wait(Duration::from_secs(60), "Prometheus ready", || {
            TcpStream::connect(addr).is_ok() && http(addr, "GET /-/ready").0 == 200
        });
        p
    }

    /// Runs instant query `q`; the first result's value, if any.
    fn query(&self, q: &str) -> Option<f64> {
        let (status, body) = http(self.addr, &format!("GET /api/v1/query?query={}", encode(q)));
        assert_eq!(status, 200, "{q}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Polls `f` until true, at most `limit`.
    fn wait(&self, limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + limit;
        while !f() {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn prometheus_scrapes_what_bdev_get_iostat_says_and_bad_clients_do_no_harm() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("m.sock");
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let d = Daemon::start(&sock, &["--metrics-listen", &metrics.to_string()]);
    d.rpc_ok(&["bdev_null_create", "Null0", "64", "512"]);

    // The exposition itself: OpenMetrics text, pmio's families, the reactor's row.
    let (status, text) = http(metrics, "GET /metrics");
    assert_eq!(status, 200);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE pmio_bdev_read_bytes counter"),
        "{text}"
    );
    assert_eq!(
        sample(&text, "pmio_bdev_read_ops_total{bdev=\"Null0\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "pmio_reactor_interrupt_mode{core=\"0\"}"),
        Some(1.0)
    );
    assert!(sample(&text, "pmio_reactor_busy_seconds_total{core=\"0\"}").is_some());

    // Bad clients: wrong method, wrong path, garbage, one that goes away unanswered.
    assert_eq!(http(metrics, "POST /metrics").0, 405);
    assert_eq!(http(metrics, "GET /nope").0, 404);
    {
        let mut s = TcpStream::connect(metrics).unwrap();
        let _ = s.write_all(b"\x00\x01garbage\r\n\r\n");
    }
    {
        let mut s = TcpStream::connect(metrics).unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        // Gone before reading the answer.
    }
    assert_eq!(http(metrics, "GET /metrics").0, 200, "still serving");

    // A real Prometheus scrapes it while perform_tests runs.
    let prom = Prometheus::start(metrics);
    // Its discovery hands targets to the scrapers every 5 s: wait for the first scrape.
    prom.wait(Duration::from_secs(60), "the first scrape", || {
        prom.query("up{job=\"pmio\"}") == Some(1.0)
    });
    let sock2 = sock.clone();
    let load = std::thread::spawn(move || {
        tgt_util::rpc(
            &sock2,
            &["perform_tests", "-b", "Null0", "-q", "32", "-t", "4"],
        )
    });
    let series = "pmio_bdev_read_ops_total{bdev=\"Null0\"}";
    prom.wait(Duration::from_secs(30), "a scrape under load", || {
        prom.query(series).is_some_and(|v| v > 0.0)
    });
    let during = prom.query(series).unwrap();
    let out = load.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let io = d.rpc_json(&["bdev_get_iostat", "-b", "Null0"]);
    let b = &io["bdevs"][0];
    let reads = b["num_read_ops"].as_u64().unwrap() as f64;
    assert!(
        during < reads,
        "scraped during the load: {during} of {reads}"
    );
    // Once a scrape after the load has landed, Prometheus holds bdev_get_iostat's numbers.
    prom.wait(
        Duration::from_secs(30),
        "the final count in Prometheus",
        || prom.query(series) == Some(reads),
    );
    assert_eq!(
        prom.query("pmio_bdev_read_bytes_total{bdev=\"Null0\"}"),
        Some(b["bytes_read"].as_u64().unwrap() as f64)
    );
    let lat = prom
        .query("pmio_bdev_read_latency_seconds_total{bdev=\"Null0\"}")
        .unwrap();
    let ticks = b["read_latency_ticks"].as_u64().unwrap() as f64 / 1e9;
    assert!(
        (lat - ticks).abs() <= ticks * 1e-9 + 1e-9,
        "{lat} vs {ticks}"
    );
    // Prometheus read the families' types from the OpenMetrics text.
    let (_, meta) = http(
        prom.addr,
        "GET /api/v1/targets/metadata?metric=pmio_bdev_read_ops",
    );
    assert!(meta.contains("\"type\":\"counter\""), "{meta}");
    let busy = prom
        .query("pmio_reactor_busy_seconds_total{core=\"0\"}")
        .unwrap();
    assert!(busy > 0.5, "the reactor was busy during the load: {busy} s");
    drop(prom);
    assert_eq!(d.signal(libc::SIGTERM).code(), Some(0));
}
