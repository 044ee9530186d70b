//! A test host for the target: a blocking NVMe/TCP initiator on the crate's own codec, able to
//! send what the kernel's host never does, and a target on reactors with a malloc bdev.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use pmio::bdev::Registry;
use pmio_malloc::{MallocDevice, MallocOptions};
use pmio_nvmf::pdu::{self, Digests, Header, IcReq, Link, Pda, Side};
use pmio_nvmf::spec::{self, Cqe, Sqe, Status};
use pmio_nvmf::{ListenAddr, NvmfTarget, SubsystemParams, TransportOpts};
use pmio_reactors::{CoreMask, Reactors, ReactorsOptions};

pub const NQN: &str = "nqn.2016-06.io.pmio:test1";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

/// A target on up to two reactors (interrupt mode), with subsystem [`NQN`] on a malloc bdev
/// (`blocks` of 512 bytes) as namespace 1, listening on 127.0.0.1 at a free port.
pub struct TestTarget {
    pub reactors: Option<Reactors>,
    pub tgt: Arc<NvmfTarget>,
    pub registry: Arc<Registry>,
    pub addr: SocketAddr,
}

impl TestTarget {
    pub fn start(opts: TransportOpts, allow_any_host: bool) -> TestTarget {
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
        let dev = MallocDevice::new(MallocOptions {
            name: "Malloc0".into(),
            num_blocks: 32768,
            ..MallocOptions::default()
        })
        .unwrap();
        registry.register(dev).unwrap();
        let tgt = NvmfTarget::new(reactors.handle(), Arc::clone(&registry));
        tgt.create_transport(opts).unwrap();
        tgt.create_subsystem(&SubsystemParams {
            nqn: NQN.into(),
            allow_any_host,
            ..SubsystemParams::default()
        })
        .unwrap();
        assert_eq!(tgt.add_ns(NQN, "Malloc0", 0, None, None, None).unwrap(), 1);
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
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        self.tgt.shutdown();
        if let Some(r) = self.reactors.take() {
            r.stop().unwrap();
        }
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    /// A TCP connection with ICReq/ICResp done.
    pub fn connect(addr: SocketAddr, digests: Digests) -> Host {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sock.set_nodelay(true).unwrap();
        let mut h = Host {
            sock,
            link: Link::new(Side::Host, pdu::max_plen_for_data(1 << 20)),
            rx: Vec::new(),
            next_cid: 0,
            qid: 0,
            in_capsule: 4096,
        };
        h.send(
            &Header::IcReq(IcReq {
                pfv: 0,
                hpda: Pda::ZERO,
                digests,
                maxr2t: 0,
            }),
            &[],
        );
        match h.recv().0 {
            Header::IcResp(r) => {
                assert_eq!(r.digests, digests, "digests echoed");
                assert!(r.maxh2cdata >= 4096 && r.maxh2cdata % 4 == 0);
                h.link = h.link.negotiated(digests, Pda::ZERO, r.cpda);
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
        h
    }

    /// Sends `h` with `data` (encoded by the codec: digests as negotiated).
    pub fn send(&mut self, h: &Header, data: &[u8]) {
        let mut head = [0u8; pdu::MAX_HEAD_LEN];
        let enc = pdu::encode(h, data.len(), &self.link, &mut head).unwrap();
        let mut bytes = head[..enc.head_len].to_vec();
        bytes.extend_from_slice(data);
        if enc.data_digest {
            bytes.extend_from_slice(&pdu::data_digest([data]));
        }
        self.sock.write_all(&bytes).unwrap();
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.sock.write_all(bytes).unwrap();
    }

    /// The next PDU from the target (panics on a timeout or a bad PDU).
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
                Err(e) => panic!("recv: {e}"),
            }
        }
    }

    pub fn cid(&mut self) -> u16 {
        self.next_cid = self.next_cid.wrapping_add(1);
        self.next_cid
    }

    /// Sends a command capsule (in-capsule `data`, SGL set accordingly unless `sqe` has one).
    pub fn send_cmd(&mut self, sqe: &mut Sqe, data: &[u8]) {
        if !data.is_empty() {
            sqe.dptr.sgl_type = spec::sgl_type::DATA_BLOCK_OFFSET;
            sqe.dptr.len = data.len() as u32;
            sqe.dptr.addr = 0;
        } else if sqe.dptr.sgl_type == 0 {
            sqe.dptr.sgl_type = spec::sgl_type::TRANSPORT_DATA_BLOCK;
        }
        let h = Header::CapsuleCmd(pdu::CapsuleCmd {
            sqe: sqe.to_bytes(),
        });
        self.send(&h, data);
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
                    let cqe = Cqe::from_bytes(&r.cqe);
                    assert_eq!(cqe.cid, cid, "response for another command");
                    return Reply { cqe, data };
                }
                Header::R2T(r) => {
                    assert_eq!(r.cccid, cid);
                    let off = r.r2to as usize;
                    let end = off + r.r2tl as usize;
                    // Send in 32 KiB pieces (several H2CData per R2T, as hosts may).
                    let mut pos = off;
                    while pos < end {
                        let n = (end - pos).min(32768);
                        let h = Header::H2CData(pdu::H2CData {
                            cccid: cid,
                            ttag: r.ttag,
                            datao: pos as u32,
                            last: pos + n == end,
                        });
                        self.send(&h, &write_data[pos..pos + n]);
                        pos += n;
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
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
        let mut sqe = Sqe::default();
        sqe.opcode = spec::admin_opc::FABRICS;
        sqe.set_fctype(spec::fctype::CONNECT);
        sqe.cid = self.cid();
        sqe.cdw10 = u32::from(qid) << 16;
        sqe.cdw11 = u32::from(sqsize);
        sqe.cdw12 = kato_ms;
        let mut data = vec![0u8; 1024];
        data[..16].copy_from_slice(&[7u8; 16]);
        data[16..18].copy_from_slice(&cntlid.to_le_bytes());
        data[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
        data[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
        let cid = sqe.cid;
        self.send_cmd(&mut sqe, &data);
        self.qid = qid;
        self.wait(cid, &[])
    }

    pub fn prop_get(&mut self, offset: u32, size8: bool) -> u64 {
        let mut sqe = Sqe::default();
        sqe.opcode = spec::admin_opc::FABRICS;
        sqe.set_fctype(spec::fctype::PROPERTY_GET);
        sqe.cid = self.cid();
        sqe.cdw10 = u32::from(size8);
        sqe.cdw11 = offset;
        let cid = sqe.cid;
        self.send_cmd(&mut sqe, &[]);
        let r = self.wait(cid, &[]);
        assert!(r.status().is_success(), "{:?}", r.status());
        u64::from(r.cqe.dw0) | u64::from(r.cqe.dw1) << 32
    }

    pub fn prop_set(&mut self, offset: u32, value: u32) {
        let mut sqe = Sqe::default();
        sqe.opcode = spec::admin_opc::FABRICS;
        sqe.set_fctype(spec::fctype::PROPERTY_SET);
        sqe.cid = self.cid();
        sqe.cdw11 = offset;
        sqe.cdw12 = value;
        let cid = sqe.cid;
        self.send_cmd(&mut sqe, &[]);
        let r = self.wait(cid, &[]);
        assert!(r.status().is_success(), "{:?}", r.status());
    }

    /// An admin command reading `len` bytes.
    pub fn admin(&mut self, mut sqe: Sqe, len: u32) -> Reply {
        sqe.cid = self.cid();
        sqe.dptr.sgl_type = spec::sgl_type::TRANSPORT_DATA_BLOCK;
        sqe.dptr.len = len;
        let cid = sqe.cid;
        self.send_cmd(&mut sqe, &[]);
        self.wait(cid, &[])
    }

    /// The admin queue of a new controller, enabled, with `io_queues` I/O queues granted.
    /// Returns the controller ID.
    pub fn admin_queue(addr: SocketAddr, digests: Digests, kato_ms: u32) -> (Host, u16) {
        let mut h = Host::connect(addr, digests);
        let r = h.fabrics_connect(0, 31, NQN, HOSTNQN, 0xFFFF, kato_ms);
        assert!(r.status().is_success(), "admin Connect: {:?}", r.status());
        let cntlid = r.cqe.dw0 as u16;
        // CC: IOSQES 6, IOCQES 4, EN.
        h.prop_set(0x14, 6 << 16 | 4 << 20);
        h.prop_set(0x14, 6 << 16 | 4 << 20 | 1);
        assert_eq!(h.prop_get(0x1c, false) & 1, 1, "CSTS.RDY");
        let mut sf = Sqe::default();
        sf.opcode = spec::admin_opc::SET_FEATURES;
        sf.cdw10 = u32::from(spec::fid::NUMBER_OF_QUEUES);
        sf.cdw11 = 3 | 3 << 16;
        let r = h.admin(sf, 0);
        assert!(r.status().is_success(), "{:?}", r.status());
        (h, cntlid)
    }

    /// An I/O queue `qid` of controller `cntlid`.
    pub fn io_queue(addr: SocketAddr, digests: Digests, cntlid: u16, qid: u16) -> Host {
        let mut h = Host::connect(addr, digests);
        let r = h.fabrics_connect(qid, 127, NQN, HOSTNQN, cntlid, 0);
        assert!(r.status().is_success(), "I/O Connect: {:?}", r.status());
        h
    }

    /// Writes `data` at `lba` of namespace 1 (512-byte blocks): in-capsule when it fits.
    pub fn write(&mut self, lba: u64, data: &[u8]) -> Reply {
        let mut sqe = Sqe::default();
        sqe.opcode = spec::nvm_opc::WRITE;
        sqe.nsid = 1;
        sqe.cid = self.cid();
        sqe.cdw10 = lba as u32;
        sqe.cdw11 = (lba >> 32) as u32;
        sqe.cdw12 = (data.len() / 512 - 1) as u32;
        let cid = sqe.cid;
        if data.len() <= self.in_capsule {
            self.send_cmd(&mut sqe, data);
        } else {
            sqe.dptr.sgl_type = spec::sgl_type::TRANSPORT_DATA_BLOCK;
            sqe.dptr.len = data.len() as u32;
            self.send_cmd(&mut sqe, &[]);
        }
        self.wait(cid, data)
    }

    /// Reads `nblocks` 512-byte blocks at `lba` of namespace 1.
    pub fn read(&mut self, lba: u64, nblocks: u32) -> Reply {
        let mut sqe = Sqe::default();
        sqe.opcode = spec::nvm_opc::READ;
        sqe.nsid = 1;
        sqe.cid = self.cid();
        sqe.cdw10 = lba as u32;
        sqe.cdw11 = (lba >> 32) as u32;
        sqe.cdw12 = nblocks - 1;
        sqe.dptr.sgl_type = spec::sgl_type::TRANSPORT_DATA_BLOCK;
        sqe.dptr.len = nblocks * 512;
        let cid = sqe.cid;
        self.send_cmd(&mut sqe, &[]);
        self.wait(cid, &[])
    }
}

/// `len` bytes of a pattern that differs per `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
