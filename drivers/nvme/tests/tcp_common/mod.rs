//! The NVMe/TCP host's test peer: pmio's own target (pmio-nvmf) on reactors in this process,
//! on 127.0.0.1, serving a malloc bdev that outlives target restarts; a proxy in front of it
//! that rewrites or drops chosen PDUs (`proxy.rs`); and a small driver of one queue pair for
//! the tests (submit, poll until done, bounded).

#![allow(dead_code)]

mod pattern;
pub mod proxy;

pub use pattern::pattern;

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio::bdev::{DriverQueue, Registry};
use pmio::request::{IoBuf, IoStatus, Op, Request};
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_nvme::tcp::{TcpOptions, TcpTarget};
use pmio_nvmf::{DhchapPolicy, HostKeys, ListenAddr, NvmfTarget, SubsystemParams, TransportOpts};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};

pub const NQN: &str = "nqn.2016-06.io.pmio:tcp-host";

/// 512-byte blocks of the malloc bdev (16 MiB).
pub const NUM_BLOCKS: u64 = 32768;

/// Key files in a private directory (owner-only, as the keyring wants them), added to a
/// keyring under their names.
pub struct KeyFiles {
    dir: tempfile::TempDir,
    pub ring: pmio_keyring::Keyring,
}

impl KeyFiles {
    pub fn new() -> KeyFiles {
        KeyFiles {
            dir: tempfile::tempdir().unwrap(),
            ring: pmio_keyring::Keyring::new(),
        }
    }

    /// Key `name` holding `text` (a newline after it, as `echo` leaves one).
    pub fn add(&self, name: &str, text: &str) -> Arc<pmio_keyring::Key> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        self.ring.file_add_key(name, &path).unwrap();
        self.ring.get(name).unwrap()
    }
}

/// `len` bytes at `lba` written and read back through an I/O queue of namespace 1.
pub fn io_round_trip(ctrlr: &pmio_nvme::Controller, lba: u64, len: usize, seed: u8) {
    let bdev = ctrlr.bdev(1).unwrap();
    let mut d = Driver::new(bdev.open_tcp_qpair(4).unwrap(), 4);
    let mut data = pattern(len, u64::from(seed));
    assert!(d.one(Op::Write, lba, &mut data).is_success());
    let mut back = vec![0u8; len];
    assert!(d.one(Op::Read, lba, &mut back).is_success());
    assert!(back == data, "data read back equals data written");
}

/// How long a test waits for I/O before it calls it a hang (loaded 2-core machine).
pub const IO_LIMIT: Duration = Duration::from_secs(20);

/// pmio's NVMe/TCP target on one reactor, subsystem [`NQN`] with a malloc bdev as namespace 1.
pub struct Target {
    reactors: Option<Reactors>,
    tgt: Option<Arc<NvmfTarget>>,
    registry: Arc<Registry>,
    pub port: u16,
    opts: TransportOpts,
    /// Hosts that must authenticate, and the policy: applied again at every `up`.
    auth: Vec<(String, HostKeys)>,
    policy: Option<DhchapPolicy>,
    /// A secure-channel listener, and the hosts admitted with their TLS PSKs.
    tls: Option<Vec<(String, Arc<pmio_keyring::Key>)>>,
}

impl Target {
    pub fn start() -> Target {
        Target::with(TransportOpts::default())
    }

    pub fn with(opts: TransportOpts) -> Target {
        let _ = env_logger::builder().is_test(true).try_init();
        let registry = Arc::new(Registry::new());
        let dev = MallocDevice::new(MallocOptions {
            name: "Malloc0".into(),
            num_blocks: NUM_BLOCKS,
            ..MallocOptions::default()
        })
        .unwrap();
        registry.register(dev).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut t = Target {
            reactors: None,
            tgt: None,
            registry,
            port,
            opts,
            auth: Vec::new(),
            policy: None,
            tls: None,
        };
        t.up();
        t
    }

    /// The target with its listener a secure channel (TLS 1.3 PSK) admitting only `hosts`,
    /// each with its PSK key.
    pub fn with_tls(hosts: Vec<(String, Arc<pmio_keyring::Key>)>) -> Target {
        let mut t = Target::start();
        t.down();
        t.tls = Some(hosts);
        t.up();
        t
    }

    /// Starts serving (again) on the same port, with the same bdev and its data.
    pub fn up(&mut self) {
        let core = CoreMask::available().unwrap().cores()[0];
        let reactors = Reactors::start(
            CoreMask::from_cores([core]).unwrap(),
            ReactorsOptions {
                interrupt_idle: Some(Duration::from_millis(1)),
                pin_threads: false,
                ..ReactorsOptions::default()
            },
        )
        .unwrap();
        let tgt = NvmfTarget::new(reactors.handle(), Arc::clone(&self.registry));
        tgt.create_transport(self.opts.clone()).unwrap();
        tgt.create_subsystem(&SubsystemParams {
            nqn: NQN.into(),
            allow_any_host: true,
            ..SubsystemParams::default()
        })
        .unwrap();
        tgt.add_ns(NQN, "Malloc0", 0, None, None, None, 0).unwrap();
        let la = ListenAddr::new("127.0.0.1", &self.port.to_string(), None).unwrap();
        tgt.add_listener_with(NQN, la, self.tls.is_some(), pmio_nvmf::AnaState::Optimized)
            .unwrap();
        for (host, key) in self.tls.iter().flatten() {
            tgt.allow_any_host(NQN, false).unwrap();
            tgt.add_host(NQN, host).unwrap();
            tgt.set_host_psk(NQN, host, Arc::clone(key)).unwrap();
        }
        if !self.auth.is_empty() {
            tgt.allow_any_host(NQN, false).unwrap();
        }
        for (host, keys) in &self.auth {
            tgt.add_host_with_keys(NQN, host, Some(keys.clone()))
                .unwrap();
        }
        if let Some(p) = &self.policy {
            tgt.set_dhchap_policy(p.clone()).unwrap();
        }
        self.tgt = Some(tgt);
        self.reactors = Some(reactors);
    }

    /// Gives the listed `host` a TLS PSK (the listener stays as it is).
    pub fn set_psk(&self, host: &str, key: &Arc<pmio_keyring::Key>) {
        let tgt = self.tgt.as_ref().expect("the target is up");
        tgt.set_host_psk(NQN, host, Arc::clone(key)).unwrap();
    }

    /// Admits only `host`, which must authenticate with `keys` (now and after every `up`).
    pub fn require_auth(&mut self, host: &str, keys: HostKeys) {
        let tgt = self.tgt.as_ref().expect("the target is up");
        tgt.allow_any_host(NQN, false).unwrap();
        tgt.add_host_with_keys(NQN, host, Some(keys.clone()))
            .unwrap();
        self.auth.push((host.to_string(), keys));
    }

    /// The hashes and DH groups authentication may choose from (now and after every `up`).
    pub fn dhchap_policy(&mut self, p: DhchapPolicy) {
        let tgt = self.tgt.as_ref().expect("the target is up");
        tgt.set_dhchap_policy(p.clone()).unwrap();
        self.policy = Some(p);
    }

    /// Failed in-band authentications since the target (re)started.
    pub fn auth_failures(&self) -> u64 {
        self.tgt.as_ref().map_or(0, |t| t.auth_failures())
    }

    /// Stops serving: every connection closed, the port no longer listened on.
    pub fn down(&mut self) {
        if let Some(t) = self.tgt.take() {
            t.shutdown();
        }
        if let Some(r) = self.reactors.take() {
            r.stop().unwrap();
        }
    }

    pub fn addr(&self) -> TcpTarget {
        TcpTarget {
            traddr: "127.0.0.1".into(),
            trsvcid: self.port.to_string(),
            subnqn: NQN.into(),
        }
    }

    /// Adds a malloc bdev `name` of `num_blocks` blocks as the subsystem's next namespace;
    /// returns its NSID (connected hosts are sent a namespace attribute notice).
    pub fn add_namespace(&self, name: &str, num_blocks: u64) -> u32 {
        let dev = MallocDevice::new(MallocOptions {
            name: name.into(),
            num_blocks,
            ..MallocOptions::default()
        })
        .unwrap();
        self.registry.register(dev).unwrap();
        let tgt = self.tgt.as_ref().expect("the target is up");
        tgt.add_ns(NQN, name, 0, None, None, None, 0).unwrap()
    }

    /// Removes namespace `nsid` from the subsystem.
    pub fn remove_namespace(&self, nsid: u32) {
        let tgt = self.tgt.as_ref().expect("the target is up");
        tgt.remove_ns(NQN, nsid).unwrap();
    }

    /// IDs of the controllers connected to the subsystem now.
    pub fn cntlids(&self) -> Vec<u16> {
        self.tgt.as_ref().map_or(Vec::new(), |t| {
            t.controllers(NQN)
                .unwrap()
                .iter()
                .map(|c| c.cntlid)
                .collect()
        })
    }

    /// Admits only the hosts listed (`false`) or any host (`true`), and lists `hosts`.
    pub fn admit(&self, any: bool, hosts: &[&str]) {
        let tgt = self.tgt.as_ref().expect("the target is up");
        tgt.allow_any_host(NQN, any).unwrap();
        for h in hosts {
            tgt.add_host(NQN, h).unwrap();
        }
    }

    /// Host NQNs of the controllers connected to the subsystem now.
    pub fn hostnqns(&self) -> Vec<String> {
        self.tgt.as_ref().map_or(Vec::new(), |t| {
            t.controllers(NQN)
                .unwrap()
                .into_iter()
                .map(|c| c.hostnqn)
                .collect()
        })
    }

    /// Controllers connected to the subsystem now.
    pub fn controllers(&self) -> usize {
        self.tgt
            .as_ref()
            .map_or(0, |t| t.controllers(NQN).unwrap().len())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.down();
    }
}

/// Options that reconnect every second for up to `loss` seconds.
pub fn reconnecting(loss: i32, fast_io_fail: u32) -> TcpOptions {
    TcpOptions {
        ctrlr_loss_timeout_sec: loss,
        reconnect_delay_sec: 1,
        fast_io_fail_timeout_sec: fast_io_fail,
        ..TcpOptions::default()
    }
}

/// One queue pair driven by the test thread: requests by tag, completions counted per tag
/// (a second completion of a tag would be seen).
pub struct Driver<Q: DriverQueue> {
    pub q: Q,
    pub rqs: Vec<Request>,
    pub completions: Vec<u32>,
    done: Vec<u16>,
}

impl<Q: DriverQueue> Driver<Q> {
    pub fn new(q: Q, depth: usize) -> Driver<Q> {
        let mut rqs = vec![Request::default(); depth];
        for (i, r) in rqs.iter_mut().enumerate() {
            r.tag = i as u16;
        }
        Driver {
            q,
            rqs,
            completions: vec![0; depth],
            done: Vec::with_capacity(depth),
        }
    }

    /// Prepares tag `tag` for `op` of `nblocks` at `lba` on `buf` (512-byte blocks).
    pub fn prep(&mut self, tag: u16, op: Op, lba: u64, nblocks: u32, buf: &mut [u8]) {
        let r = &mut self.rqs[usize::from(tag)];
        r.op = op;
        r.lba = lba;
        r.nblocks = nblocks;
        // SAFETY: the test keeps `buf` alive and untouched until the request completes.
        r.buf = unsafe { IoBuf::from_raw_parts(buf.as_mut_ptr(), buf.len() as u32) };
        r.status = IoStatus::Pending;
    }

    pub fn submit(&mut self, tags: &[u16]) {
        self.q.submit(&mut self.rqs, tags);
    }

    /// Polls until `n` completions came or `limit` passed; returns the tags completed.
    pub fn reap(&mut self, n: usize, limit: Duration) -> Vec<u16> {
        let deadline = Instant::now() + limit;
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            self.done.clear();
            let cap = self.done.capacity();
            self.q.poll(&mut self.rqs, &mut self.done, cap);
            for &t in &self.done {
                self.completions[usize::from(t)] += 1;
                got.push(t);
            }
            if self.done.is_empty() {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        got
    }

    /// Submits the prepared `tags` and waits for all of them; returns their statuses.
    pub fn run(&mut self, tags: &[u16]) -> Vec<IoStatus> {
        self.submit(tags);
        let got = self.reap(tags.len(), IO_LIMIT);
        assert_eq!(
            got.len(),
            tags.len(),
            "I/O did not complete in {IO_LIMIT:?}"
        );
        tags.iter()
            .map(|&t| self.rqs[usize::from(t)].status)
            .collect()
    }

    /// One command, waited for.
    pub fn one(&mut self, op: Op, lba: u64, buf: &mut [u8]) -> IoStatus {
        let nblocks = (buf.len() / 512).max(1) as u32;
        self.prep(0, op, lba, nblocks, buf);
        self.run(&[0])[0]
    }

    /// Asserts no tag completed more than once.
    pub fn assert_no_double_completion(&self) {
        for (tag, &n) in self.completions.iter().enumerate() {
            assert!(
                n <= 1 || self.rqs.len() > 1,
                "tag {tag} completed {n} times"
            );
        }
    }
}

/// A queue opened through `BlockDevice::open_queue`, as the block layer holds it.
pub struct Dyn(pub Box<dyn DriverQueue>);

impl DriverQueue for Dyn {
    fn submit(&mut self, rqs: &mut [Request], tags: &[u16]) {
        self.0.submit(rqs, tags)
    }

    fn poll(&mut self, rqs: &mut [Request], done: &mut Vec<u16>, max: usize) -> usize {
        self.0.poll(rqs, done, max)
    }

    fn outstanding(&self) -> usize {
        self.0.outstanding()
    }
}
