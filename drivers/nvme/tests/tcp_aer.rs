//! Asynchronous events on an NVMe/TCP controller: pmio's target sends a namespace attribute
//! notice when a namespace is added or removed; the host's controller thread reads the
//! Changed Namespace List log and the active namespace list and logs what changed (the
//! controller's bdevs stay those of attach), and keeps an AER posted, also across a reconnect.

mod tcp_common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use pmio::request::Op;
use pmio_nvme::tcp::{self, TcpOptions};
use tcp_common::*;

/// The log lines of this test process, at info and above (the controller thread's notices
/// are what it logs).
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().unwrap().push(r.args().to_string());
        }
    }

    fn flush(&self) {}
}

static LOG: Capture = Capture(Mutex::new(Vec::new()));

fn capture() {
    if log::set_logger(&LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

/// Waits (bounded) until a log line contains every one of `words`.
fn logged(words: &[&str]) -> bool {
    let deadline = Instant::now() + IO_LIMIT;
    while Instant::now() < deadline {
        if LOG
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Forgets what was logged so far.
fn forget() {
    LOG.0.lock().unwrap().clear();
}

#[test]
fn namespace_notices_are_read_and_logged_across_a_reconnect() {
    capture();
    let mut t = Target::start();
    let opts = TcpOptions {
        // No admin traffic but the AER's own.
        keep_alive_timeout_ms: 0,
        ..reconnecting(10, 0)
    };
    let ctrlr = tcp::connect("Aen0", &t.addr(), opts).unwrap();
    assert_eq!(ctrlr.namespaces().len(), 1);
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(2).unwrap(), 2);
    let mut data = pattern(4096, 31);
    assert!(d.one(Op::Write, 0, &mut data).is_success());

    assert_eq!(t.add_namespace("Malloc1", 16384), 2);
    assert!(
        logged(&["Aen0: namespace 2 added", "16384 blocks of 512 bytes"]),
        "the notice was read"
    );
    // The bdevs stay those of attach.
    assert_eq!(ctrlr.namespaces().len(), 1);

    // A new association (the target restarted with namespace 1 only) gets its own AER.
    forget();
    t.down();
    t.up();
    assert!(logged(&["Aen0: reconnected"]));
    assert_eq!(t.add_namespace("Malloc2", 8192), 2);
    assert!(
        logged(&["Aen0: namespace 2 added", "8192 blocks"]),
        "notices reach the host after the reconnect"
    );
    let mut back = vec![0u8; 4096];
    assert!(d.one(Op::Read, 0, &mut back).is_success());
    assert!(back == data);

    // Reading the log let the target send the next notice, to the AER posted again.
    forget();
    t.remove_namespace(1);
    assert!(logged(&[
        "Aen0: namespace 1 removed",
        "I/O to Aen0n1 fails"
    ]));
    assert!(!d.one(Op::Read, 0, &mut back).is_success());
    drop(d);
    ctrlr.detach().unwrap();
}
