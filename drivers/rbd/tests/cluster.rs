//! pmio-rbd against a real one-node Ceph cluster (`test/ci/ceph.sh start`; `make rbd` starts
//! it and runs these with `--ignored`). `PMIO_CEPH_DIR` names the cluster's directory
//! (default /tmp/pmio-ceph).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmio::{BlockDevice, DriverQueue, HctxType, IoBuf, IoStatus, Op, Request};
use pmio_rbd::{Cluster, ClusterOptions, RbdDevice, RbdError, RbdOptions};

fn dir() -> String {
    std::env::var("PMIO_CEPH_DIR").unwrap_or_else(|_| "/tmp/pmio-ceph".into())
}

fn opts() -> ClusterOptions {
    let d = dir();
    ClusterOptions {
        cluster_name: "pmio".into(),
        user_id: "pmio".into(),
        config_file: Some(format!("{d}/ceph.conf")),
        key_file: Some(format!("{d}/client.pmio.keyring")),
        ..ClusterOptions::default()
    }
}

/// `rbd ARGS` on the test cluster as client.admin; panics on failure.
fn rbd(args: &[&str]) -> Vec<u8> {
    let conf = format!("{}/ceph.conf", dir());
    let out = Command::new("rbd")
        .args(["--cluster", "pmio", "-c", &conf])
        .args(args)
        .output()
        .expect("run rbd");
    assert!(
        out.status.success(),
        "rbd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn fresh_image(name: &str, size_mib: u32) {
    let _ = Command::new("rbd")
        .args(["--cluster", "pmio", "-c", &format!("{}/ceph.conf", dir())])
        .args(["rm", &format!("rbd/{name}")])
        .output();
    rbd(&[
        "create",
        &format!("rbd/{name}"),
        "--size",
        &format!("{size_mib}M"),
    ]);
}

/// Runs one request to completion on `q`.
fn run(q: &mut Box<dyn DriverQueue>, op: Op, lba: u64, buf: &mut [u8], bs: usize) -> IoStatus {
    let mut rqs = vec![Request::default()];
    rqs[0].op = op;
    rqs[0].lba = lba;
    rqs[0].nblocks = (buf.len() / bs).max(1) as u32;
    // SAFETY: `buf` outlives the request, which is reaped below before returning.
    rqs[0].buf = unsafe { IoBuf::from_raw_parts(buf.as_mut_ptr(), buf.len() as u32) };
    q.submit(&mut rqs, &[0]);
    let mut done = Vec::with_capacity(1);
    let t0 = Instant::now();
    while q.poll(&mut rqs, &mut done, 1) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no completion in 30 s"
        );
        std::thread::sleep(Duration::from_micros(50));
    }
    rqs[0].status
}

fn pattern(lba: u64, bs: usize) -> Vec<u8> {
    (0..bs)
        .map(|i| (lba as usize * 31 + i * 7) as u8 ^ (i >> 8) as u8)
        .collect()
}

#[test]
#[ignore = "needs the test cluster: test/ci/ceph.sh start (make rbd)"]
fn data_written_at_qd32_reads_back_and_equals_rbd_export() {
    fresh_image("pmio-t-data", 8);
    let cluster = Cluster::connect(opts()).unwrap();
    let dev = RbdDevice::open(
        &cluster,
        RbdOptions {
            name: "Ceph0".into(),
            image: "pmio-t-data".into(),
            block_size: 4096,
            ..RbdOptions::default()
        },
    )
    .unwrap();
    let bs = 4096usize;
    assert_eq!(dev.info().num_blocks, 8 * 256);
    let mut q = dev.open_queue(HctxType::Default, 0, 64).unwrap();
    // 32 writes in flight at once, to every 7th block.
    let lbas: Vec<u64> = (0..32u64).map(|i| i * 7).collect();
    let mut bufs: Vec<Vec<u8>> = lbas.iter().map(|&l| pattern(l, bs)).collect();
    let mut rqs = vec![Request::default(); 32];
    for (i, rq) in rqs.iter_mut().enumerate() {
        rq.op = Op::Write;
        rq.lba = lbas[i];
        rq.nblocks = 1;
        // SAFETY: `bufs` outlives every request, all reaped below.
        rq.buf = unsafe { IoBuf::from_raw_parts(bufs[i].as_mut_ptr(), bs as u32) };
    }
    let tags: Vec<u16> = (0..32).collect();
    q.submit(&mut rqs, &tags);
    assert_eq!(q.outstanding(), 32);
    let mut done = Vec::with_capacity(32);
    let t0 = Instant::now();
    while done.len() < 32 {
        let max = 32 - done.len();
        q.poll(&mut rqs, &mut done, max);
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    assert_eq!(q.outstanding(), 0);
    let mut seen = done.clone();
    seen.sort();
    assert_eq!(seen, tags);
    assert!(rqs.iter().all(|r| r.status == IoStatus::Success));

    // Read back through a second queue (its own image handle).
    let mut q2 = dev.open_queue(HctxType::Default, 0, 64).unwrap();
    for &l in &lbas {
        let mut b = vec![0u8; bs];
        assert_eq!(run(&mut q2, Op::Read, l, &mut b, bs), IoStatus::Success);
        assert_eq!(b, pattern(l, bs), "block {l}");
    }
    // Flush, then what librbd's own CLI exports is what was written.
    assert_eq!(
        run(&mut q, Op::Flush, 0, &mut [0u8; 0], bs),
        IoStatus::Success
    );
    let img = rbd(&["export", "rbd/pmio-t-data", "-"]);
    assert_eq!(img.len(), 8 << 20);
    for &l in &lbas {
        let at = l as usize * bs;
        assert_eq!(
            &img[at..at + bs],
            &pattern(l, bs)[..],
            "rbd export, block {l}"
        );
    }
    // Write zeroes reads back as zeroes; a discard succeeds (librbd skips a discard of part
    // of an object, rbd_skip_partial_discard, so its data is not promised to be zero).
    let mut z = vec![0u8; bs];
    assert_eq!(
        run(&mut q, Op::WriteZeroes, lbas[1], &mut z, bs),
        IoStatus::Success
    );
    assert_eq!(
        run(&mut q, Op::Discard, lbas[2], &mut z, bs),
        IoStatus::Success
    );
    let mut b = vec![0xaau8; bs];
    assert_eq!(
        run(&mut q2, Op::Read, lbas[1], &mut b, bs),
        IoStatus::Success
    );
    assert!(b.iter().all(|&x| x == 0), "block {} not zero", lbas[1]);
    // Beyond the end: EINVAL, not sent.
    let mut b = vec![0u8; bs];
    assert_eq!(
        run(&mut q, Op::Read, 8 * 256, &mut b, bs),
        IoStatus::Errno(libc::EINVAL)
    );
}

#[test]
#[ignore = "needs the test cluster: test/ci/ceph.sh start (make rbd)"]
fn resize_is_seen_and_bad_names_give_clear_errors() {
    fresh_image("pmio-t-resize", 4);
    let cluster = Cluster::connect(opts()).unwrap();
    let mk = |pool: &str, image: &str| {
        RbdDevice::open(
            &cluster,
            RbdOptions {
                pool: pool.into(),
                image: image.into(),
                ..RbdOptions::default()
            },
        )
    };
    let dev = mk("rbd", "pmio-t-resize").unwrap();
    assert_eq!(dev.image_size().unwrap(), 4 << 20);
    dev.resize_image(16 << 20).unwrap();
    assert_eq!(dev.image_size().unwrap(), 16 << 20);
    let info = String::from_utf8(rbd(&["info", "rbd/pmio-t-resize", "--format", "json"])).unwrap();
    assert!(info.contains("\"size\":16777216"), "{info}");

    let e = mk("rbd", "no-such-image").unwrap_err();
    assert!(
        matches!(
            &e,
            RbdError::Ceph {
                call: "rbd_open",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.errno(), -libc::ENOENT);
    let e = mk("no-such-pool", "x").unwrap_err();
    assert!(
        matches!(
            &e,
            RbdError::Ceph {
                call: "rados_ioctx_create",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.errno(), -libc::ENOENT);
}

#[test]
#[ignore = "needs the test cluster: test/ci/ceph.sh start (make rbd)"]
fn a_cluster_that_is_down_fails_within_the_timeout() {
    // A monitor address nothing listens on.
    let t0 = Instant::now();
    let e = Cluster::connect(ClusterOptions {
        config_file: Some(format!("{}/ceph.conf", dir())),
        cluster_name: "pmio".into(),
        config_param: vec![("mon_host".into(), "127.0.0.1:1".into())],
        connect_timeout_secs: 3,
        ..ClusterOptions::default()
    })
    .unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(
            &e,
            RbdError::Ceph {
                call: "rados_connect",
                ..
            }
        ),
        "{e}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // The healthy cluster still connects afterwards.
    let c: Arc<Cluster> = Cluster::connect(opts()).unwrap();
    drop(c);
}
