//! A TCP proxy in front of pmio's target that forwards whole PDUs of I/O connections (the
//! first connection, the admin queue, passes untouched) and lets a test rewrite or drop the
//! PDUs going one way: a target that misbehaves in one precise way.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmio_nvme::tcp::TcpTarget;

use super::NQN;

/// Which way a PDU goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    ToTarget,
    ToHost,
}

/// Looks at one PDU (header and data as on the wire): rewrites it, or empties it to drop
/// it; returns whether it acted.
pub type Hook = Box<dyn FnMut(&mut Vec<u8>) -> bool + Send>;

struct Armed {
    dir: Dir,
    /// Disarmed after it acted once.
    once: bool,
    hook: Hook,
}

/// The proxy; it runs until the process ends.
pub struct Proxy {
    pub port: u16,
    armed: Arc<Mutex<Option<Armed>>>,
    hits: Arc<AtomicUsize>,
    split: Arc<AtomicBool>,
}

/// Sizes of the pieces a split PDU goes out in, in turn: cuts inside headers, digests and
/// payloads, and pieces holding the end of one PDU and the start of the next.
const PIECES: [usize; 8] = [1, 3, 7, 24, 100, 1000, 4093, 30000];

impl Proxy {
    /// A proxy to the target listening on `upstream` (127.0.0.1).
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Arc<Mutex<Option<Armed>>> = Arc::new(Mutex::new(None));
        let hits = Arc::new(AtomicUsize::new(0));
        let split = Arc::new(AtomicBool::new(false));
        let (a, h, sp) = (Arc::clone(&armed), Arc::clone(&hits), Arc::clone(&split));
        std::thread::spawn(move || {
            let mut conns = 0usize;
            for host in listener.incoming() {
                let Ok(host) = host else { return };
                let Ok(target) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                // The first connection is the admin queue: hooks see I/O queues only.
                let io = conns > 0;
                conns += 1;
                for (from, to, dir) in [
                    (
                        host.try_clone().unwrap(),
                        target.try_clone().unwrap(),
                        Dir::ToTarget,
                    ),
                    (
                        target.try_clone().unwrap(),
                        host.try_clone().unwrap(),
                        Dir::ToHost,
                    ),
                ] {
                    let (a, h, sp) = (Arc::clone(&a), Arc::clone(&h), Arc::clone(&sp));
                    std::thread::spawn(move || {
                        let split = (dir == Dir::ToHost).then_some(&*sp);
                        forward(from, to, io.then_some(dir), &a, &h, split)
                    });
                }
            }
        });
        Proxy {
            port,
            armed,
            hits,
            split,
        }
    }

    /// From now on, sends what goes to the host on I/O connections in pieces of odd sizes
    /// ([`PIECES`]) with pauses between, so the host's reads end anywhere in a PDU.
    pub fn split_to_host(&self) {
        self.split.store(true, Ordering::Release);
    }

    /// Hands the PDUs going `dir` on I/O connections to `hook` until it acts once.
    pub fn arm_once(&self, dir: Dir, hook: impl FnMut(&mut Vec<u8>) -> bool + Send + 'static) {
        self.set(dir, true, Box::new(hook));
    }

    /// Hands the PDUs going `dir` on I/O connections to `hook` until [`Proxy::disarm`].
    pub fn arm(&self, dir: Dir, hook: impl FnMut(&mut Vec<u8>) -> bool + Send + 'static) {
        self.set(dir, false, Box::new(hook));
    }

    fn set(&self, dir: Dir, once: bool, hook: Hook) {
        *self.armed.lock().unwrap() = Some(Armed { dir, once, hook });
    }

    pub fn disarm(&self) {
        *self.armed.lock().unwrap() = None;
    }

    pub fn armed(&self) -> bool {
        self.armed.lock().unwrap().is_some()
    }

    /// How many PDUs the hooks acted on.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Acquire)
    }

    pub fn addr(&self) -> TcpTarget {
        TcpTarget {
            traddr: "127.0.0.1".into(),
            trsvcid: self.port.to_string(),
            subnqn: NQN.into(),
        }
    }
}

/// Forwards whole PDUs from `from` to `to`, handing each to the armed hook when it watches
/// `dir` (`None`: the admin connection, never hooked), in pieces while `split` is set.
fn forward(
    mut from: TcpStream,
    mut to: TcpStream,
    dir: Option<Dir>,
    armed: &Mutex<Option<Armed>>,
    hits: &AtomicUsize,
    split: Option<&AtomicBool>,
) {
    let split = split.filter(|_| dir.is_some());
    if split.is_some() {
        let _ = to.set_nodelay(true);
    }
    let mut piece = 0;
    'pdus: loop {
        let mut pdu = vec![0u8; 8];
        if from.read_exact(&mut pdu).is_err() {
            break;
        }
        let plen = u32::from_le_bytes(pdu[4..8].try_into().unwrap()) as usize;
        pdu.resize(plen.max(8), 0);
        if from.read_exact(&mut pdu[8..]).is_err() {
            break;
        }
        if let Some(dir) = dir {
            let mut a = armed.lock().unwrap();
            if let Some(arm) = a.as_mut().filter(|arm| arm.dir == dir)
                && (arm.hook)(&mut pdu)
            {
                hits.fetch_add(1, Ordering::AcqRel);
                if arm.once {
                    *a = None;
                }
            }
        }
        if split.is_some_and(|s| s.load(Ordering::Acquire)) {
            let mut rest = &pdu[..];
            while !rest.is_empty() {
                let n = PIECES[piece % PIECES.len()].min(rest.len());
                piece += 1;
                if to.write_all(&rest[..n]).is_err() {
                    break 'pdus;
                }
                rest = &rest[n..];
                std::thread::sleep(Duration::from_micros(50));
            }
        } else if to.write_all(&pdu).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}
