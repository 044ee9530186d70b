//! A test host for the target: a blocking NVMe/TCP initiator on the crate's own codec, able to
//! send what the kernel's host never does, and a target on reactors with a malloc bdev.
//!
//! Every wait is bounded ([`IO_TIMEOUT`], [`SETTLE_TIMEOUT`]) and generous: the tests run on a
//! loaded 2-core machine next to other builds.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio::bdev::Registry;
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_nvmf::pdu::{self, Digests, Fes, Header, IcReq, Link, Side, TermReq};
use pmio_nvmf::spec::{self, Cqe, SglDesc, Sqe, Status};
use pmio_nvmf::{GroupStats, ListenAddr, NvmfTarget, SubsystemParams, TransportOpts};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};

// The test data pattern, one copy for both ends of the wire: pmio-nvme's NVMe/TCP host tests
// keep it (no crate depends on the other for a test helper).
#[path = "../../../../drivers/nvme/tests/tcp_common/pattern.rs"]
mod pattern;
pub use pattern::pattern;

pub const NQN: &str = "nqn.2016-06.io.pmio:test1";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

/// Blocks of 512 bytes of the malloc bdev behind namespace 1.
pub const NUM_BLOCKS: u64 = 32768;

/// How long the test host waits for one PDU before it gives up.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the target gets to close connections and give everything back once hosts left.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Blocks [`TestTarget::assert_serving`] writes (the last ones: tests keep clear of them).
const PROBE_LBA: u64 = NUM_BLOCKS - 64;

/// A target on up to two reactors (interrupt mode), with subsystem [`NQN`] on a malloc bdev
/// ([`NUM_BLOCKS`] of 512 bytes) as namespace 1, listening on 127.0.0.1 at a free port.
pub struct TestTarget {
    pub reactors: Option<Reactors>,
    pub tgt: Arc<NvmfTarget>,
    pub registry: Arc<Registry>,
    pub addr: SocketAddr,
}

impl TestTarget {
    /// The default transport, any host admitted.
    pub fn new() -> TestTarget {
        TestTarget::start(TransportOpts::default(), true)
    }

    pub fn start(opts: TransportOpts, allow_any_host: bool) -> TestTarget {
        TestTarget::with_subsystem(
            opts,
            SubsystemParams {
                nqn: NQN.into(),
                allow_any_host,
                ..SubsystemParams::default()
            },
        )
    }

    /// The target with subsystem `params` (its NQN must be [`NQN`]).
    pub fn with_subsystem(opts: TransportOpts, params: SubsystemParams) -> TestTarget {
        let _ = env_logger::builder().is_test(true).try_init();
        let avail = CoreMask::available().unwrap();
        let cores: Vec<u32> = avail.cores().iter().copied().take(2).collect();
        let mask = CoreMask::from_cores(cores).unwrap();
        let reactors = Reactors::start(
            mask,
            ReactorsOptions {
                interrupt_idle: Some(Duration::from_millis(1)),
                pin_threads: false,
                ..ReactorsOptions::default()
            },
        )
        .unwrap();
        let registry = Arc::new(Registry::new());
        add_malloc(&registry, "Malloc0");
        let tgt = NvmfTarget::new(reactors.handle(), Arc::clone(&registry));
        tgt.create_transport(opts).unwrap();
        tgt.create_subsystem(&params).unwrap();
        assert_eq!(
            tgt.add_ns(NQN, "Malloc0", 0, None, None, None, 0).unwrap(),
            1
        );
        let port = free_port();
        let la = ListenAddr::new("127.0.0.1", &port.to_string(), None).unwrap();
        tgt.add_listener(NQN, la).unwrap();
        TestTarget {
            reactors: Some(reactors),
            tgt,
            registry,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// The poll groups' counters summed over the reactors.
    pub fn stats(&self) -> GroupStats {
        let mut sum = GroupStats::default();
        for (_, s) in self.tgt.group_stats() {
            sum.admin_qpairs += s.admin_qpairs;
            sum.io_qpairs += s.io_qpairs;
            sum.current_admin_qpairs += s.current_admin_qpairs;
            sum.current_io_qpairs += s.current_io_qpairs;
            sum.pending_bdev_io += s.pending_bdev_io;
            sum.completed_nvme_io += s.completed_nvme_io;
            sum.buffers_in_use += s.buffers_in_use;
        }
        sum
    }

    /// Waits (bounded) until nothing of the target's hosts is left: no queue pair, no
    /// controller, no bdev I/O, no data buffer. Call once every host of the test is dropped.
    pub fn assert_no_leaks(&self) {
        let idle = |s: &GroupStats| {
            s.current_admin_qpairs == 0
                && s.current_io_qpairs == 0
                && s.pending_bdev_io == 0
                && s.buffers_in_use == 0
        };
        let ok = wait_until(SETTLE_TIMEOUT, || {
            self.tgt.controllers(NQN).unwrap().is_empty() && idle(&self.stats())
        });
        assert!(
            ok,
            "the target kept resources after its hosts left: {:?}, controllers {:?}",
            self.tgt.group_stats(),
            self.tgt.controllers(NQN).unwrap()
        );
    }

    /// Proves the target still serves: a new controller (admin and I/O queue, which land on
    /// different reactors) writes and reads back a few blocks, then disconnects.
    pub fn assert_serving(&self) {
        let (mut admin, cntlid) = Host::admin_queue(self.addr, Digests::NONE, 0);
        let mut io = Host::io_queue(self.addr, Digests::NONE, cntlid, 1);
        let data = pattern(4096, PROBE_LBA ^ u64::from(cntlid));
        let w = io.write(PROBE_LBA, &data);
        assert!(w.status().is_success(), "probe write: {:?}", w.status());
        let r = io.read(PROBE_LBA, 8);
        assert!(r.status().is_success(), "probe read: {:?}", r.status());
        assert!(r.data == data, "probe read back differs");
        admin.keep_alive();
    }

    /// [`TestTarget::assert_serving`] and then [`TestTarget::assert_no_leaks`]: the end of
    /// every bad-input test, once its own hosts are dropped.
    pub fn assert_healthy(&self) {
        self.assert_serving();
        self.assert_no_leaks();
    }
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        self.tgt.shutdown();
        if let Some(r) = self.reactors.take() {
            let stopped = r.stop();
            // A reactor that panicked fails the test here (unless it is failing already).
            if !std::thread::panicking() {
                stopped.unwrap();
            }
        }
    }
}

/// Registers a malloc bdev `name` of [`NUM_BLOCKS`] blocks of 512 bytes.
pub fn add_malloc(registry: &Registry, name: &str) {
    let dev = MallocDevice::new(MallocOptions {
        name: name.into(),
        num_blocks: NUM_BLOCKS,
        ..MallocOptions::default()
    })
    .unwrap();
    registry.register(dev).unwrap();
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `cond` every few milliseconds until it holds (true) or `limit` passed (false).
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A Read or Write of `nblocks` 512-byte blocks at `lba` of namespace `nsid` (no SGL yet).
pub fn rw_sqe(opcode: u8, nsid: u32, lba: u64, nblocks: u32) -> Sqe {
    Sqe {
        nsid,
        cdw10: lba as u32,
        cdw11: (lba >> 32) as u32,
        cdw12: nblocks - 1,
        ..Sqe::new(opcode, 0)
    }
}

/// An admin command `opcode` with command dword 10 `cdw10`.
pub fn admin_sqe(opcode: u8, cdw10: u32) -> Sqe {
    Sqe {
        cdw10,
        ..Sqe::new(opcode, 0)
    }
}

/// One queue pair of the test host.
pub struct Host {
    pub sock: TcpStream,
    pub link: Link,
    rx: Vec<u8>,
    next_cid: u16,
    pub qid: u16,
    /// In-capsule data limit (IOCCSZ × 16 − 64 once identified; 4096 by default).
    pub in_capsule: usize,
}

/// What came back for one command.
#[derive(Debug)]
pub struct Reply {
    pub cqe: Cqe,
    pub data: Vec<u8>,
}

impl Reply {
    pub fn status(&self) -> Status {
        self.cqe.status()
    }
}

impl Host {
    /// A TCP connection, nothing sent yet.
    pub fn tcp(addr: SocketAddr) -> Host {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        sock.set_nodelay(true).unwrap();
        Host {
            sock,
            link: Link::new(Side::Host, pdu::max_plen_for_data(1 << 20)),
            rx: Vec::new(),
            next_cid: 0,
            qid: 0,
            in_capsule: 4096,
        }
    }

    /// A TCP connection with ICReq/ICResp done.
    pub fn connect(addr: SocketAddr, digests: Digests) -> Host {
        let mut h = Host::tcp(addr);
        h.icreq(digests);
        h
    }

    /// Sends the ICReq and takes the ICResp (the link then uses `digests`).
    pub fn icreq(&mut self, digests: Digests) {
        self.send(&icreq_header(digests), &[]);
        match self.recv().0 {
            Header::IcResp(r) => {
                let req = IcReq::new(digests);
                assert_eq!(r.check(&req), Ok(()), "an ICResp Linux's host takes");
                self.link = self.link.after_ic(&req, &r);
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
    }

    /// The bytes of PDU `h` with `data`, encoded by the codec (digests as negotiated).
    pub fn encode(&self, h: &Header, data: &[u8]) -> Vec<u8> {
        let mut head = [0u8; pdu::MAX_HEAD_LEN];
        let enc = pdu::encode(h, data.len(), &self.link, &mut head).unwrap();
        let mut bytes = head[..enc.head_len].to_vec();
        bytes.extend_from_slice(data);
        if enc.data_digest {
            bytes.extend_from_slice(&pdu::data_digest([data]));
        }
        bytes
    }

    /// Sends `h` with `data` (encoded by the codec: digests as negotiated).
    pub fn send(&mut self, h: &Header, data: &[u8]) {
        let bytes = self.encode(h, data);
        self.send_raw(&bytes);
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).unwrap();
    }

    /// Sends raw bytes, ignoring a connection the target already closed.
    pub fn send_raw_lossy(&mut self, bytes: &[u8]) {
        let _ = self.sock.write_all(bytes);
    }

    /// Closes the sending half: the target reads end-of-stream.
    pub fn shutdown_write(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Write);
    }

    /// The next PDU from the target (panics on a timeout, a bad PDU or a closed connection).
    pub fn recv(&mut self) -> (Header, Vec<u8>) {
        self.try_recv().expect("the target closed the connection")
    }

    /// The next PDU, or `None` when the target closed the connection.
    pub fn try_recv(&mut self) -> Option<(Header, Vec<u8>)> {
        loop {
            if let Some((p, used)) = pdu::parse(&self.rx, &self.link).unwrap() {
                let out = (p.header, p.data.to_vec());
                self.rx.drain(..used);
                return Some(out);
            }
            let mut buf = [0u8; 65536];
            match self.sock.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => self.rx.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    panic!("recv: nothing from the target within {IO_TIMEOUT:?}")
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
    }

    /// Asserts that the target closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        if let Some((h, _)) = self.try_recv() {
            panic!("expected the target to close the connection, got {h:?}");
        }
    }

    /// Whether the target closes the connection within `limit` (PDUs before that are
    /// skipped).
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.sock.set_read_timeout(Some(left)).unwrap();
            let mut buf = [0u8; 65536];
            let r = self.sock.read(&mut buf);
            self.sock.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
            match r {
                Ok(0) => return true,
                Ok(n) => self.rx.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => panic!("recv: {e}"),
            }
        }
    }

    /// Expects a C2HTermReq with Fatal Error Status `fes`, then the connection closed.
    /// Returns the TermReq and the header it echoed.
    pub fn expect_term_req(&mut self, fes: Fes) -> (TermReq, Vec<u8>) {
        let (h, echoed) = self
            .try_recv()
            .unwrap_or_else(|| panic!("closed without a C2HTermReq (expected {fes:?})"));
        let Header::C2HTermReq(t) = h else {
            panic!("expected a C2HTermReq ({fes:?}), got {h:?}");
        };
        assert_eq!(t.fes, fes as u16, "FES of {t:?}, expected {fes:?}");
        self.expect_closed();
        (t, echoed)
    }

    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Sends a command capsule (in-capsule `data`, SGL set accordingly unless `sqe` has one).
    pub fn send_cmd(&mut self, sqe: &mut Sqe, data: &[u8]) {
        let bytes = self.encode_cmd(sqe, data);
        self.send_raw(&bytes);
    }

    /// The bytes of a command capsule as [`Host::send_cmd`] sends them.
    pub fn encode_cmd(&mut self, sqe: &mut Sqe, data: &[u8]) -> Vec<u8> {
        if !data.is_empty() {
            sqe.set_sgl(SglDesc::in_capsule(data.len() as u32));
        } else if sqe.sgl().sgl_type == 0 {
            sqe.set_sgl(SglDesc::transport(sqe.sgl().len));
        }
        let h = Header::CapsuleCmd(pdu::CapsuleCmd::new(sqe));
        self.encode(&h, data)
    }

    /// Gives `sqe` a new CID, sends it with in-capsule `data` and returns the CID.
    pub fn submit(&mut self, mut sqe: Sqe, data: &[u8]) -> u16 {
        sqe.set_cid(self.cid());
        self.send_cmd(&mut sqe, data);
        sqe.cid()
    }

    /// Sends a Read (transport SGL for its data) and returns its CID.
    pub fn submit_read(&mut self, nsid: u32, lba: u64, nblocks: u32) -> u16 {
        let mut sqe = rw_sqe(spec::nvm_opc::READ, nsid, lba, nblocks);
        sqe.set_sgl(SglDesc::transport(nblocks * 512));
        self.submit(sqe, &[])
    }

    /// Sends a Write whose data goes through R2T (transport SGL) and returns its CID.
    pub fn submit_r2t_write(&mut self, lba: u64, nblocks: u32) -> u16 {
        let mut sqe = rw_sqe(spec::nvm_opc::WRITE, 1, lba, nblocks);
        sqe.set_sgl(SglDesc::transport(nblocks * 512));
        self.submit(sqe, &[])
    }

    /// The next PDU, which must be an R2T for command `cid`.
    pub fn expect_r2t(&mut self, cid: u16) -> pdu::R2T {
        match self.recv().0 {
            Header::R2T(r) => {
                assert_eq!(r.cccid, cid, "R2T for another command");
                r
            }
            other => panic!("expected an R2T for {cid}, got {other:?}"),
        }
    }

    /// Sends one H2CData PDU.
    pub fn h2c(&mut self, cccid: u16, ttag: u16, datao: u32, last: bool, data: &[u8]) {
        let h = Header::H2CData(pdu::H2CData {
            cccid,
            ttag,
            datao,
            last,
        });
        self.send(&h, data);
    }

    /// The next CapsuleResp, which must be command `cid`'s (no data PDU before it).
    pub fn expect_resp(&mut self, cid: u16) -> Cqe {
        match self.recv().0 {
            Header::CapsuleResp(r) => {
                let cqe = r.completion();
                assert_eq!(cqe.cid, cid, "response for another command");
                cqe
            }
            other => panic!("expected the response of {cid}, got {other:?}"),
        }
    }

    /// Waits for the response of command `cid`, collecting C2HData (answering R2Ts with
    /// `write_data`).
    pub fn wait(&mut self, cid: u16, write_data: &[u8]) -> Reply {
        let mut data = Vec::new();
        loop {
            let (h, d) = self.recv();
            match h {
                Header::C2HData(c) => {
                    assert_eq!(c.cccid, cid);
                    assert_eq!(c.datao as usize, data.len(), "C2HData in order");
                    data.extend_from_slice(&d);
                    if c.success {
                        assert!(c.last);
                        return Reply {
                            cqe: Cqe::new(cid, Status::SUCCESS, 0, 0),
                            data,
                        };
                    }
                }
                Header::CapsuleResp(r) => {
                    let cqe = r.completion();
                    assert_eq!(cqe.cid, cid, "response for another command");
                    return Reply { cqe, data };
                }
                Header::R2T(r) => {
                    assert_eq!(r.cccid, cid);
                    self.answer_r2t(&r, write_data);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Sends the data an R2T asks for, in 32 KiB pieces (several H2CData per R2T, as hosts
    /// may).
    pub fn answer_r2t(&mut self, r: &pdu::R2T, write_data: &[u8]) {
        let off = r.r2to as usize;
        let end = off + r.r2tl as usize;
        let mut pos = off;
        while pos < end {
            let n = (end - pos).min(32768);
            self.h2c(
                r.cccid,
                r.ttag,
                pos as u32,
                pos + n == end,
                &write_data[pos..pos + n],
            );
            pos += n;
        }
    }

    /// Collects the replies of `n` commands, whatever their order, answering none of their
    /// R2Ts. Replies by CID.
    pub fn collect(&mut self, n: usize) -> HashMap<u16, Reply> {
        let mut data: HashMap<u16, Vec<u8>> = HashMap::new();
        let mut done = HashMap::new();
        while done.len() < n {
            let (h, d) = self.recv();
            match h {
                Header::C2HData(c) => {
                    let buf = data.entry(c.cccid).or_default();
                    assert_eq!(c.datao as usize, buf.len(), "C2HData in order");
                    buf.extend_from_slice(&d);
                    if c.success {
                        let data = data.remove(&c.cccid).unwrap();
                        let cqe = Cqe::new(c.cccid, Status::SUCCESS, 0, 0);
                        assert!(done.insert(c.cccid, Reply { cqe, data }).is_none());
                    }
                }
                Header::CapsuleResp(r) => {
                    let cqe = r.completion();
                    let data = data.remove(&cqe.cid).unwrap_or_default();
                    assert!(done.insert(cqe.cid, Reply { cqe, data }).is_none());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        done
    }

    /// Fabrics Connect of queue `qid` (`cntlid` 0xFFFF for the admin queue).
    pub fn fabrics_connect(
        &mut self,
        qid: u16,
        sqsize: u16,
        subnqn: &str,
        hostnqn: &str,
        cntlid: u16,
        kato_ms: u32,
    ) -> Reply {
        let mut sqe = spec::ConnectCmd {
            recfmt: 0,
            qid,
            sqsize,
            cattr: 0,
            kato_ms,
        }
        .sqe();
        let cid = self.cid();
        sqe.set_cid(cid);
        self.send_cmd(&mut sqe, &connect_data(subnqn, hostnqn, cntlid));
        self.qid = qid;
        self.wait(cid, &[])
    }

    pub fn prop_get(&mut self, offset: u32, size8: bool) -> u64 {
        let mut sqe = Sqe {
            cdw10: u32::from(size8),
            cdw11: offset,
            ..Sqe::new(spec::admin_opc::FABRICS, self.cid())
        };
        sqe.set_fctype(spec::fctype::PROPERTY_GET);
        let cid = sqe.cid();
        self.send_cmd(&mut sqe, &[]);
        let r = self.wait(cid, &[]);
        assert!(r.status().is_success(), "{:?}", r.status());
        u64::from(r.cqe.dw0) | u64::from(r.cqe.dw1) << 32
    }

    pub fn prop_set(&mut self, offset: u32, value: u32) {
        let mut sqe = Sqe {
            cdw11: offset,
            cdw12: value,
            ..Sqe::new(spec::admin_opc::FABRICS, self.cid())
        };
        sqe.set_fctype(spec::fctype::PROPERTY_SET);
        let cid = sqe.cid();
        self.send_cmd(&mut sqe, &[]);
        let r = self.wait(cid, &[]);
        assert!(r.status().is_success(), "{:?}", r.status());
    }

    /// An admin command reading `len` bytes.
    pub fn admin(&mut self, mut sqe: Sqe, len: u32) -> Reply {
        sqe.set_cid(self.cid());
        sqe.set_sgl(SglDesc::transport(len));
        let cid = sqe.cid();
        self.send_cmd(&mut sqe, &[]);
        self.wait(cid, &[])
    }

    /// Keep Alive (admin queue); asserts it succeeds.
    pub fn keep_alive(&mut self) {
        let r = self.admin(admin_sqe(spec::admin_opc::KEEP_ALIVE, 0), 0);
        assert!(r.status().is_success(), "Keep Alive: {:?}", r.status());
    }

    /// The admin queue of a new controller, enabled, with 4 I/O queues granted. Returns the
    /// controller ID.
    pub fn admin_queue(addr: SocketAddr, digests: Digests, kato_ms: u32) -> (Host, u16) {
        let mut h = Host::connect(addr, digests);
        let r = h.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, kato_ms);
        assert!(r.status().is_success(), "admin Connect: {:?}", r.status());
        let cntlid = r.cqe.dw0 as u16;
        h.enable();
        (h, cntlid)
    }

    /// Enables a connected controller (CC: IOSQES 6, IOCQES 4, EN) and asks for 4 I/O queues.
    pub fn enable(&mut self) {
        self.prop_set(0x14, 6 << 16 | 4 << 20);
        self.prop_set(0x14, 6 << 16 | 4 << 20 | 1);
        assert_eq!(self.prop_get(0x1c, false) & 1, 1, "CSTS.RDY");
        let sf = Sqe {
            cdw10: spec::fid::NUMBER_OF_QUEUES,
            cdw11: 3 | 3 << 16,
            ..Sqe::new(spec::admin_opc::SET_FEATURES, 0)
        };
        let r = self.admin(sf, 0);
        assert!(r.status().is_success(), "{:?}", r.status());
    }

    /// An I/O queue `qid` of controller `cntlid` (128 entries).
    pub fn io_queue(addr: SocketAddr, digests: Digests, cntlid: u16, qid: u16) -> Host {
        Host::io_queue_sized(addr, digests, cntlid, qid, 127)
    }

    /// An I/O queue `qid` of controller `cntlid` with `sqsize + 1` entries.
    pub fn io_queue_sized(
        addr: SocketAddr,
        digests: Digests,
        cntlid: u16,
        qid: u16,
        sqsize: u16,
    ) -> Host {
        let mut h = Host::connect(addr, digests);
        let r = h.fabrics_connect(qid, sqsize, NQN, HOSTNQN, cntlid, 0);
        assert!(r.status().is_success(), "I/O Connect: {:?}", r.status());
        h
    }

    /// Writes `data` at `lba` of namespace 1 (512-byte blocks): in-capsule when it fits.
    pub fn write(&mut self, lba: u64, data: &[u8]) -> Reply {
        self.write_ns(1, lba, data)
    }

    /// Writes `data` at `lba` of namespace `nsid` (512-byte blocks): in-capsule when it fits.
    pub fn write_ns(&mut self, nsid: u32, lba: u64, data: &[u8]) -> Reply {
        let mut sqe = rw_sqe(spec::nvm_opc::WRITE, nsid, lba, (data.len() / 512) as u32);
        sqe.set_cid(self.cid());
        let cid = sqe.cid();
        if data.len() <= self.in_capsule {
            self.send_cmd(&mut sqe, data);
        } else {
            sqe.set_sgl(SglDesc::transport(data.len() as u32));
            self.send_cmd(&mut sqe, &[]);
        }
        self.wait(cid, data)
    }

    /// Reads `nblocks` 512-byte blocks at `lba` of namespace 1.
    pub fn read(&mut self, lba: u64, nblocks: u32) -> Reply {
        self.read_ns(1, lba, nblocks)
    }

    /// Reads `nblocks` 512-byte blocks at `lba` of namespace `nsid`.
    pub fn read_ns(&mut self, nsid: u32, lba: u64, nblocks: u32) -> Reply {
        let cid = self.submit_read(nsid, lba, nblocks);
        self.wait(cid, &[])
    }
}

/// The ICReq the test host sends.
pub fn icreq_header(digests: Digests) -> Header {
    Header::IcReq(IcReq::new(digests))
}

/// The 1024 bytes of a Connect's data, as a host encodes them (the codec the target parses
/// them with, from `pmio-nvme-spec`).
pub fn connect_data(subnqn: &str, hostnqn: &str, cntlid: u16) -> [u8; spec::CONNECT_DATA_LEN] {
    spec::ConnectData {
        hostid: [7u8; 16],
        cntlid,
        subnqn: subnqn.into(),
        hostnqn: hostnqn.into(),
    }
    .encode()
}

/// A new controller's admin queue and its I/O queue 1 (128 entries).
pub fn session(t: &TestTarget, digests: Digests) -> (Host, Host) {
    let (admin, cntlid) = Host::admin_queue(t.addr, digests, 0);
    let io = Host::io_queue(t.addr, digests, cntlid, 1);
    (admin, io)
}

/// Both digests.
pub const DIGESTS: Digests = Digests {
    header: true,
    data: true,
};

/// Transient Transport Error (SCT 0h, SC 22h): what a command whose data arrived damaged
/// gets.
pub fn is_transient_transport_error(s: Status) -> bool {
    s.sct() == spec::sct::GENERIC && s.sc() == spec::sc::TRANSIENT_TRANSPORT_ERROR && !s.dnr()
}

/// Proves that `io` (a queue of `entries` entries) has every slot free: that many writes
/// through R2T outstanding at once all get their R2T, then all complete.
pub fn assert_slots_free(io: &mut Host, entries: usize, lba: u64) {
    let data = pattern(8192, lba);
    let cids: Vec<u16> = (0..entries)
        .map(|i| io.submit_r2t_write(lba + 16 * i as u64, 16))
        .collect();
    let mut r2ts = Vec::new();
    for &cid in &cids {
        r2ts.push(io.expect_r2t(cid));
    }
    for r in &r2ts {
        io.answer_r2t(r, &data);
    }
    let replies = io.collect(entries);
    for cid in cids {
        let st = replies[&cid].status();
        assert!(st.is_success(), "write {cid}: {st:?}");
    }
}
