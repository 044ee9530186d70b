//! A TCP proxy in front of pmio's target that forwards whole PDUs of I/O connections (the
//! first connection, the admin queue, passes untouched) and lets a test rewrite or drop the
//! PDUs going one way: a target that misbehaves in one precise way.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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
}

impl Proxy {
    /// A proxy to the target listening on `upstream` (127.0.0.1).
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Arc<Mutex<Option<Armed>>> = Arc::new(Mutex::new(None));
        let hits = Arc::new(AtomicUsize::new(0));
        let (a, h) = (Arc::clone(&armed), Arc::clone(&hits));
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
                    let (a, h) = (Arc::clone(&a), Arc::clone(&h));
                    std::thread::spawn(move || forward(from, to, io.then_some(dir), &a, &h));
                }
            }
        });
        Proxy { port, armed, hits }
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
/// `dir` (`None`: the admin connection, never hooked).
fn forward(
    mut from: TcpStream,
    mut to: TcpStream,
    dir: Option<Dir>,
    armed: &Mutex<Option<Armed>>,
    hits: &AtomicUsize,
) {
    loop {
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
        if to.write_all(&pdu).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}
