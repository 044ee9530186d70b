//! Logical volumes in pmio-tgt end to end: lvstores on a malloc bdev and on a uring bdev over
//! a file, thin lvols exported over NVMe/TCP and driven by `pmio-perf --verify`, a snapshot
//! taken while that I/O runs, a snapshot and clone whose data is read back by an NVMe/TCP host
//! in this process, a resize, the daemon restarted cleanly and after `kill -9` (the lvstore is
//! found again on its bdev, with its lvols and their data), and an image SPDK v25.09 wrote
//! (`blobstore/tests/fixtures`) attached with bdev_uring: SPDK's lvols listed, SPDK's data
//! read back over the bdev path.

mod perf_util;
mod tgt_util;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio::bdev::{BdevQueue, BdevQueueOptions};
use pmio::plug::Plug;
use pmio::{BlockDevice, DmaRegion, Io, IoBuf, IoStatus, Op};
use pmio_nvme::tcp::{self, TcpOptions, TcpTarget};
use serde_json::Value;
use tgt_util::{Daemon, free_port};

/// Exports bdev `bdev` as the only namespace of subsystem `nqn` on `port`.
fn export(d: &Daemon, nqn: &str, bdev: &str, port: &str, first: bool) {
    if first {
        d.rpc_ok(&["nvmf_create_transport", "-t", "TCP"]);
    }
    d.rpc_ok(&["nvmf_create_subsystem", nqn, "-a", "-s", "PMIO0001"]);
    d.rpc_ok(&["nvmf_subsystem_add_ns", nqn, bdev]);
    d.rpc_ok(&[
        "nvmf_subsystem_add_listener",
        nqn,
        "-t",
        "tcp",
        "-a",
        "127.0.0.1",
        "-s",
        port,
    ]);
}

fn perf_verify(port: &str, nqn: &str, secs: &str, what: &str) {
    let dev = format!("nvmf:traddr=127.0.0.1,trsvcid={port},subnqn={nqn}");
    let core = if perf_util::cpus() >= 2 { "[1]" } else { "[0]" };
    let out = perf_util::perf(&[
        "-m", core, "--dev", &dev, "-b", "4096", "-w", "randrw", "-M", "50", "-d", "32", "-s", "8",
        "-c", "8", "-t", secs, "--verify", "--json",
    ]);
    perf_util::verify_clean(&out, what);
}

/// An NVMe/TCP host in this process, doing one I/O at a time on namespace 1.
struct Host {
    q: Option<BdevQueue>,
    plug: Plug,
    buf: DmaRegion,
    ctrlr: pmio_nvme::Controller,
}

impl Host {
    fn connect(port: &str, nqn: &str) -> Host {
        let target = TcpTarget {
            traddr: "127.0.0.1".into(),
            trsvcid: port.into(),
            subnqn: nqn.into(),
        };
        let ctrlr = tcp::connect("Host0", &target, TcpOptions::default()).unwrap();
        let dev: Arc<dyn BlockDevice> = ctrlr.bdevs().into_iter().next().unwrap();
        let q = BdevQueue::open(
            dev,
            BdevQueueOptions {
                depth: 8,
                ..Default::default()
            },
        )
        .unwrap();
        let mut plug = Plug::default();
        q.register_plug(&mut plug);
        Host {
            q: Some(q),
            plug,
            buf: DmaRegion::new(1 << 20).unwrap(),
            ctrlr,
        }
    }

    fn num_blocks(&self) -> u64 {
        self.q.as_ref().unwrap().num_blocks()
    }

    fn io(&mut self, op: Op, lba: u64, len: usize) -> IoStatus {
        let q = self.q.as_mut().unwrap();
        // SAFETY: the buffer is ours and outlives the I/O, which completes before we return.
        let buf = unsafe { IoBuf::from_raw_parts(self.buf.as_ptr(), len as u32) };
        let io = Io {
            op,
            lba,
            nblocks: (len / 512) as u32,
            buf,
            ..Io::default()
        };
        self.plug.begin();
        q.expect(&mut self.plug, &io);
        q.submit(&mut self.plug, &io).unwrap();
        self.plug.finish();
        q.flush();
        let mut status = IoStatus::Pending;
        let t0 = Instant::now();
        while q.outstanding() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(20), "I/O hangs");
            q.poll(8, |rq| status = rq.status);
        }
        status
    }

    fn write(&mut self, lba: u64, data: &[u8]) {
        self.buf.as_mut_slice()[..data.len()].copy_from_slice(data);
        assert_eq!(self.io(Op::Write, lba, data.len()), IoStatus::Success);
    }

    fn read(&mut self, lba: u64, len: usize) -> Vec<u8> {
        assert_eq!(self.io(Op::Read, lba, len), IoStatus::Success);
        self.buf.as_slice()[..len].to_vec()
    }

    fn flush(&mut self) {
        assert_eq!(self.io(Op::Flush, 0, 0), IoStatus::Success);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.q = None;
        let _ = self.ctrlr.detach();
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 9) as u8)
        .collect()
}

fn lvol<'a>(lvols: &'a Value, name: &str) -> &'a Value {
    lvols
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no lvol {name}: {lvols}"))
}

#[test]
fn an_lvstore_on_malloc_serves_a_thin_lvol_over_nvme_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("tgt.sock");
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_malloc_create", "-b", "Malloc0", "64", "512"]);
    let lvs = d.rpc_ok(&[
        "bdev_lvol_create_lvstore",
        "Malloc0",
        "lvs0",
        "-c",
        "1048576",
    ]);
    let stores = d.rpc_json(&["bdev_lvol_get_lvstores"]);
    assert_eq!(stores[0]["uuid"], lvs.trim());
    assert_eq!(stores[0]["base_bdev"], "Malloc0");
    assert_eq!(stores[0]["cluster_size"], 1048576);
    let bdev = d.rpc_ok(&["bdev_lvol_create", "-t", "-l", "lvs0", "vol0", "32"]);
    let b = d.rpc_json(&["bdev_get_bdevs", "-b", "lvs0/vol0"]);
    assert_eq!(b[0]["name"], bdev.trim());
    assert_eq!(b[0]["aliases"][0], "lvs0/vol0");
    assert_eq!(b[0]["product_name"], "Logical Volume");
    assert_eq!(b[0]["driver_specific"]["lvol"]["thin_provision"], true);
    // The base is claimed by the store.
    let out = d.rpc(&["bdev_malloc_delete", "Malloc0"]);
    assert!(!out.status.success());
    let port = free_port().to_string();
    let nqn = "nqn.2016-06.io.pmio:lvol0";
    export(&d, nqn, "lvs0/vol0", &port, true);
    perf_verify(
        &port,
        nqn,
        "1",
        "randrw over NVMe/TCP to a thin lvol on malloc",
    );
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert!(
        lvol(&lvols, "vol0")["num_allocated_clusters"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(d.signal(libc::SIGTERM).success());
}

#[test]
fn lvols_on_a_file_keep_their_data_through_snapshots_resize_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("lvs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let img = img.to_str().unwrap().to_string();
    let sock = dir.path().join("tgt.sock");
    let nqn = "nqn.2016-06.io.pmio:vol0";
    let nqn2 = "nqn.2016-06.io.pmio:clone1";

    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_uring_create", &img, "Uring0", "512"]);
    d.rpc_ok(&[
        "bdev_lvol_create_lvstore",
        "Uring0",
        "lvs0",
        "-c",
        "1048576",
    ]);
    d.rpc_ok(&["bdev_lvol_create", "-t", "-l", "lvs0", "vol0", "16"]);
    let port = free_port().to_string();
    export(&d, nqn, "lvs0/vol0", &port, true);
    perf_verify(&port, nqn, "1", "randrw to a thin lvol on a file");

    // A snapshot taken while the host's verified I/O runs: the lvol's I/O is frozen for the
    // snapshot's commit, then goes on copying on write; no read ever mismatches.
    let (p2, n2) = (port.clone(), nqn.to_string());
    let io = std::thread::spawn(move || perf_verify(&p2, &n2, "2", "randrw across a snapshot"));
    std::thread::sleep(Duration::from_millis(800));
    d.rpc_ok(&["bdev_lvol_snapshot", "lvs0/vol0", "snap0"]);
    io.join().unwrap();
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert_eq!(lvol(&lvols, "snap0")["is_snapshot"], true);
    assert_eq!(lvol(&lvols, "vol0")["is_clone"], true);

    // Known data, a snapshot of it, data over part of it, and a clone of the snapshot.
    let a = pattern(1, 64 << 10);
    let b = pattern(2, 8 << 10);
    {
        let mut h = Host::connect(&port, nqn);
        h.write(0, &a);
        h.write(4096, &a);
        h.flush();
    }
    d.rpc_ok(&["bdev_lvol_snapshot", "lvs0/vol0", "snap1"]);
    let mut expect = a.clone();
    expect[4096..4096 + b.len()].copy_from_slice(&b);
    {
        let mut h = Host::connect(&port, nqn);
        h.write(8, &b);
        assert_eq!(h.read(0, a.len()), expect);
        assert_eq!(h.read(4096, a.len()), a);
        h.flush();
    }
    d.rpc_ok(&["bdev_lvol_clone", "lvs0/snap1", "clone1"]);
    export(&d, nqn2, "lvs0/clone1", &port, false);
    {
        let mut c = Host::connect(&port, nqn2);
        assert_eq!(c.read(0, a.len()), a, "the clone reads the snapshot's data");
        assert_eq!(c.read(4096, a.len()), a);
    }

    // Resize: the bdev grows, the data stays.
    d.rpc_ok(&["bdev_lvol_resize", "lvs0/vol0", "24"]);
    let bd = d.rpc_json(&["bdev_get_bdevs", "-b", "lvs0/vol0"]);
    assert_eq!(bd[0]["num_blocks"], (24 << 20) / 512);
    let before = d.rpc_json(&["bdev_lvol_get_lvols"]);

    // A clean restart: the store is found again when its bdev appears.
    assert!(d.signal(libc::SIGTERM).success());
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_uring_create", &img, "Uring0", "512"]);
    let after = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert_eq!(after, before, "the lvols as they were");
    let bd = d.rpc_json(&["bdev_get_bdevs", "-b", "lvs0/vol0"]);
    assert_eq!(bd[0]["num_blocks"], (24 << 20) / 512);
    let port = free_port().to_string();
    export(&d, nqn, "lvs0/vol0", &port, true);
    let c = pattern(3, 16 << 10);
    let tail = (20 << 20) / 512;
    {
        let mut h = Host::connect(&port, nqn);
        assert_eq!(h.num_blocks(), (24 << 20) / 512);
        assert_eq!(h.read(0, a.len()), expect);
        assert_eq!(h.read(4096, a.len()), a);
        // A first write to a cluster past the old end, then kill -9.
        h.write(tail, &c);
        h.flush();
    }
    assert!(!d.signal(libc::SIGKILL).success());

    // After kill -9 the store was not unloaded: it is recovered, with every acknowledged
    // and flushed write.
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_uring_create", &img, "Uring0", "512"]);
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    for n in ["vol0", "snap0", "snap1", "clone1"] {
        lvol(&lvols, n);
    }
    let port = free_port().to_string();
    export(&d, nqn, "lvs0/vol0", &port, true);
    {
        let mut h = Host::connect(&port, nqn);
        assert_eq!(h.read(0, a.len()), expect);
        assert_eq!(h.read(tail, c.len()), c);
    }

    // Lineage: clone1 inflated leaves snap1 with one clone (vol0), so deleting snap1 merges
    // it into vol0; then vol0 is decoupled from snap0 while verified I/O runs on it.
    d.rpc_ok(&["bdev_lvol_inflate", "lvs0/clone1"]);
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert_eq!(lvol(&lvols, "clone1")["is_clone"], false);
    assert_eq!(lvol(&lvols, "clone1")["is_thin_provisioned"], false);
    d.rpc_ok(&["bdev_lvol_delete", "lvs0/snap1"]);
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert!(
        lvols
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["name"] != "snap1")
    );
    let bd = d.rpc_json(&["bdev_get_bdevs", "-b", "lvs0/vol0"]);
    assert_eq!(bd[0]["driver_specific"]["lvol"]["base_snapshot"], "snap0");
    {
        let mut h = Host::connect(&port, nqn);
        assert_eq!(
            h.read(0, a.len()),
            expect,
            "vol0 reads the same after the merge"
        );
        assert_eq!(h.read(tail, c.len()), c);
    }
    let (p2, n2) = (port.clone(), nqn.to_string());
    let io = std::thread::spawn(move || perf_verify(&p2, &n2, "2", "randrw across a decouple"));
    std::thread::sleep(Duration::from_millis(800));
    d.rpc_ok(&["bdev_lvol_decouple_parent", "lvs0/vol0"]);
    io.join().unwrap();
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert_eq!(lvol(&lvols, "vol0")["is_clone"], false);
    let refused = d.rpc(&["bdev_lvol_decouple_parent", "lvs0/vol0"]);
    assert!(!refused.status.success(), "vol0 has no parent any more");
    assert!(d.signal(libc::SIGTERM).success());
}

/// The fixture's word at byte offset `x` of an lvol, inside a write of tag `t`.
fn spdk_word(t: u64, x: u64) -> u64 {
    (t << 56) | x
}

#[test]
fn an_lvstore_spdk_wrote_is_found_and_its_data_read_over_the_bdev_path() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../blobstore/tests/fixtures/spdk-clean.img.gz");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("spdk.img");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&fixture).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    std::fs::write(&img, &bytes).unwrap();
    let sock = dir.path().join("tgt.sock");
    let d = Daemon::start(&sock, &[]);
    d.rpc_ok(&["bdev_uring_create", img.to_str().unwrap(), "Aio0", "512"]);
    let stores = d.rpc_json(&["bdev_lvol_get_lvstores"]);
    assert_eq!(stores[0]["name"], "lvs_fx");
    assert_eq!(stores[0]["uuid"], "9aee34d4-898d-4c73-bc5b-1478cef2e1bf");
    assert_eq!(stores[0]["free_clusters"], 4);
    let lvols = d.rpc_json(&["bdev_lvol_get_lvols"]);
    assert_eq!(lvols.as_array().unwrap().len(), 7, "{lvols}");
    let clone = lvol(&lvols, "clone");
    assert_eq!(clone["uuid"], "59c95a80-74aa-49ef-9330-3fa0401980fd");
    assert_eq!(clone["is_clone"], true);
    assert_eq!(lvol(&lvols, "snap")["is_snapshot"], true);
    let bd = d.rpc_json(&["bdev_get_bdevs", "-b", "lvs_fx/clone"]);
    assert_eq!(bd[0]["driver_specific"]["lvol"]["base_snapshot"], "snap");

    // The clone over NVMe/TCP: its own cluster (tag 4 at 4096) and what it reads through to
    // its snapshot (tag 3), as SPDK wrote them.
    let port = free_port().to_string();
    let nqn = "nqn.2016-06.io.pmio:spdkclone";
    export(&d, nqn, "lvs_fx/clone", &port, true);
    let mut h = Host::connect(&port, nqn);
    for (off, len, tag) in [
        (0u64, 4096usize, 3u64),
        (4096, 4096, 4),
        (8192, 8192, 3),
        (2097152, 4096, 3),
    ] {
        let got = h.read(off / 512, len);
        for (i, w) in got.chunks(8).enumerate() {
            let x = off + 8 * i as u64;
            assert_eq!(
                u64::from_le_bytes(w.try_into().unwrap()),
                spdk_word(tag, x),
                "clone byte {x}"
            );
        }
    }
    drop(h);
    assert!(d.signal(libc::SIGTERM).success());
}
