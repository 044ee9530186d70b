//! The io_uring driver at the DriverQueue level, on temporary files, loop devices and file
//! systems without O_DIRECT: data round trips, short reads, errors, no hangs.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pmio::{BlockDevice, DriverQueue, HctxType, IoBuf, IoStatus, Op, Request};
use pmio_uring::{UringBdev, UringError, UringOptions};

/// Memory aligned for O_DIRECT.
struct Buf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Buf {
    fn new(len: usize) -> Buf {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Buf { ptr, layout }
    }
    fn slice(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
    fn slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
    fn io(&self, off: usize, len: usize) -> IoBuf {
        assert!(off + len <= self.layout.size());
        // SAFETY: inside the allocation; tests wait for completion before touching or freeing.
        unsafe { IoBuf::from_raw_parts(self.ptr.add(off), len as u32) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

fn rq(op: Op, lba: u64, nblocks: u32, buf: IoBuf) -> Request {
    Request {
        op,
        lba,
        nblocks,
        buf,
        ..Request::default()
    }
}

/// Submits `rqs` (tags 0..n) in one batch and polls until all complete; panics after 10 s.
fn run(q: &mut dyn DriverQueue, rqs: &mut [Request]) {
    for (i, r) in rqs.iter_mut().enumerate() {
        r.tag = i as u16;
        r.status = IoStatus::Pending;
    }
    let tags: Vec<u16> = (0..rqs.len() as u16).collect();
    q.submit(rqs, &tags);
    let mut done = Vec::with_capacity(rqs.len());
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.len() < rqs.len() {
        let before = done.len();
        let n = q.poll(rqs, &mut done, rqs.len() - before);
        assert_eq!(n, done.len() - before);
        assert!(
            Instant::now() < deadline,
            "I/O hung: {} of {} done",
            done.len(),
            rqs.len()
        );
    }
    assert_eq!(q.outstanding(), 0);
    let mut sorted = done.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        rqs.len(),
        "each request completes exactly once"
    );
}

fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn temp_file(dir: &Path, len: u64) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new_in(dir).unwrap();
    f.as_file().set_len(len).unwrap();
    f
}

fn round_trip(opts: UringOptions, register: bool) {
    let bdev = UringBdev::create(&opts).unwrap();
    let bs = bdev.info().block_size as usize;
    let n = 32usize;
    let io = 4096usize.max(bs);
    let mut wbuf = Buf::new(n * io);
    let rbuf = Buf::new(n * io);
    pattern(wbuf.slice_mut(), 7);
    if register {
        // SAFETY: both buffers outlive the queue (dropped at the end of this function, after it).
        unsafe {
            bdev.register_buffers(&[
                (wbuf.ptr, wbuf.layout.size()),
                (rbuf.ptr, rbuf.layout.size()),
            ])
        };
    }
    let mut q = bdev.open_queue(HctxType::Default, 0, 64).unwrap();
    let per = (io / bs) as u32;
    // Scattered LBAs: block i goes to slot (i * 7) % 64.
    let lba = |i: usize| ((i * 7) % 64) as u64 * u64::from(per);
    let mut w: Vec<Request> = (0..n)
        .map(|i| rq(Op::Write, lba(i), per, wbuf.io(i * io, io)))
        .collect();
    run(q.as_mut(), &mut w);
    assert!(w.iter().all(|r| r.status == IoStatus::Success), "{w:?}");
    let mut r: Vec<Request> = (0..n)
        .map(|i| rq(Op::Read, lba(i), per, rbuf.io(i * io, io)))
        .collect();
    run(q.as_mut(), &mut r);
    assert!(r.iter().all(|r| r.status == IoStatus::Success));
    assert!(
        wbuf.slice() == rbuf.slice(),
        "read back differs from what was written"
    );
    drop(q);
}

#[test]
fn uring_write_then_read_back_direct() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    round_trip(UringOptions::new(f.path()), false);
}

#[test]
fn uring_write_then_read_back_buffered() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let mut o = UringOptions::new(f.path());
    o.direct = false;
    let bdev = UringBdev::create(&o).unwrap();
    assert_eq!(
        bdev.info().block_size,
        512,
        "buffered files use 512-byte blocks"
    );
    drop(bdev);
    round_trip(o, false);
}

#[test]
fn uring_registered_buffers_round_trip() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    round_trip(UringOptions::new(f.path()), true);
    let mut o = UringOptions::new(f.path());
    o.direct = false;
    round_trip(o, true);
}

#[test]
fn uring_two_threads_two_rings() {
    let f = temp_file(Path::new("/var/tmp"), 4 << 20);
    let bdev = std::sync::Arc::new(UringBdev::create(&UringOptions::new(f.path())).unwrap());
    let bs = bdev.info().block_size;
    let per = 4096 / bs;
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let bdev = bdev.clone();
            std::thread::spawn(move || {
                let mut q = bdev.open_queue(HctxType::Default, 0, 32).unwrap();
                let mut wbuf = Buf::new(32 * 4096);
                let rbuf = Buf::new(32 * 4096);
                pattern(wbuf.slice_mut(), 100 + t);
                let base = t * 512 * u64::from(per);
                let mut w: Vec<Request> = (0..32)
                    .map(|i| {
                        rq(
                            Op::Write,
                            base + i as u64 * u64::from(per),
                            per,
                            wbuf.io(i * 4096, 4096),
                        )
                    })
                    .collect();
                run(q.as_mut(), &mut w);
                let mut r: Vec<Request> = (0..32)
                    .map(|i| {
                        rq(
                            Op::Read,
                            base + i as u64 * u64::from(per),
                            per,
                            rbuf.io(i * 4096, 4096),
                        )
                    })
                    .collect();
                run(q.as_mut(), &mut r);
                assert!(r.iter().all(|r| r.status == IoStatus::Success));
                assert!(wbuf.slice() == rbuf.slice());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn uring_io_beyond_the_device_is_refused() {
    let f = temp_file(Path::new("/var/tmp"), 64 << 10);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    let nb = bdev.info().num_blocks;
    let buf = Buf::new(8192);
    let mut q = bdev.open_queue(HctxType::Default, 0, 8).unwrap();
    let mut r = vec![
        rq(Op::Read, nb - 1, 1, buf.io(0, 4096)),
        rq(Op::Read, nb, 1, buf.io(0, 4096)),
        rq(Op::Read, nb - 1, 2, buf.io(0, 8192)),
        rq(Op::Read, 0, 0, buf.io(0, 4096)),
        // Buffer shorter than the transfer.
        rq(Op::Read, 0, 2, buf.io(0, 512)),
    ];
    let bs = bdev.info().block_size;
    r[2].nblocks = 8192 / bs;
    r[2].lba = nb - 1;
    run(q.as_mut(), &mut r);
    assert_eq!(r[0].status, IoStatus::Success);
    for x in &r[1..] {
        assert_eq!(x.status, IoStatus::Errno(libc::EINVAL), "{x:?}");
    }
}

/// A file that shrinks under the device: reads past the new end fail with EIO (after the
/// part before it was read and the rest resubmitted), reads before it still work, nothing
/// hangs.
#[test]
fn uring_truncated_while_in_use_fails_without_hang() {
    for direct in [true, false] {
        let f = temp_file(Path::new("/var/tmp"), 1 << 20);
        let mut o = UringOptions::new(f.path());
        o.direct = direct;
        let bdev = UringBdev::create(&o).unwrap();
        let bs = u64::from(bdev.info().block_size);
        let mut q = bdev.open_queue(HctxType::Default, 0, 8).unwrap();
        f.as_file().set_len(12 * 1024).unwrap();
        let buf = Buf::new(5 * 16384);
        let blocks = |bytes: u64| (bytes / bs) as u32;
        let mut r = vec![
            // Wholly before the new end.
            rq(Op::Read, 0, blocks(8192), buf.io(0, 8192)),
            // Straddling it: 4 KiB come back short, the remainder hits EOF.
            rq(Op::Read, 8192 / bs, blocks(8192), buf.io(16384, 8192)),
            // Wholly past it.
            rq(Op::Read, 65536 / bs, blocks(4096), buf.io(32768, 4096)),
            rq(Op::Read, (1 << 20) / bs - 1, 1, buf.io(49152, bs as usize)),
        ];
        run(q.as_mut(), &mut r);
        assert_eq!(r[0].status, IoStatus::Success, "direct={direct}");
        for x in &r[1..] {
            assert_eq!(
                x.status,
                IoStatus::Errno(libc::EIO),
                "direct={direct}: {x:?}"
            );
        }
    }
}

/// A file whose size is not a multiple of the block size: the tail is not part of the device.
/// `nop=1`: every request completes successfully without reaching the file (t/io_uring -N1's
/// measure of the ring alone): reads leave their buffers as they were, writes leave the file as
/// it was, and requests the device refuses are still refused.
#[test]
fn uring_nop_mode_completes_without_moving_data() {
    let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    f.write_all(&[0x5a; 64 << 10]).unwrap();
    let mut o = UringOptions::new(f.path());
    o.direct = false;
    o.nop = true;
    let bdev = UringBdev::create(&o).unwrap();
    assert!(bdev.is_nop());
    let nb = bdev.info().num_blocks;
    let bs = bdev.info().block_size as usize;
    let mut buf = Buf::new(8 * 4096);
    buf.slice_mut().fill(0x11);
    let mut q = bdev.open_queue(HctxType::Default, 0, 64).unwrap();
    let mut r: Vec<Request> = (0..4)
        .map(|i| {
            rq(
                Op::Read,
                i * 8,
                (4096 / bs) as u32,
                buf.io(i as usize * 4096, 4096),
            )
        })
        .chain((4..8).map(|i| {
            rq(
                Op::Write,
                i * 8,
                (4096 / bs) as u32,
                buf.io(i as usize * 4096, 4096),
            )
        }))
        .chain([
            rq(Op::Flush, 0, 0, IoBuf::EMPTY),
            rq(Op::Read, nb, 1, buf.io(0, bs)),
        ])
        .collect();
    run(q.as_mut(), &mut r);
    for x in &r[..9] {
        assert_eq!(x.status, IoStatus::Success, "{x:?}");
    }
    assert_eq!(r[9].status, IoStatus::Errno(libc::EINVAL), "past the end");
    assert!(
        buf.slice().iter().all(|&b| b == 0x11),
        "a NOP read moved data"
    );
    drop(q);
    let on_disk = std::fs::read(f.path()).unwrap();
    assert!(on_disk.iter().all(|&b| b == 0x5a), "a NOP write moved data");
}

/// Whether `/dev/shm` is a tmpfs mount here (from /proc/mounts).
fn dev_shm_is_tmpfs() -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 2 && f[1] == "/dev/shm" && f[2] == "tmpfs"
        })
    })
}

/// Buffered reads of a tmpfs file are served by io-wq workers (pmio-perf then suggests a
/// wait); O_DIRECT, NOPs and other file systems' buffered reads are not flagged.
#[test]
fn uring_reports_reads_served_by_io_wq() {
    let f = temp_file(Path::new("/var/tmp"), 64 << 10);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    assert!(!bdev.reads_use_io_wq(), "O_DIRECT");
    if !dev_shm_is_tmpfs() {
        eprintln!("/dev/shm is not a tmpfs mount here; only the O_DIRECT case was checked");
        return;
    }
    let shm = temp_file(Path::new("/dev/shm"), 64 << 10);
    let mut o = UringOptions::new(shm.path());
    o.direct = false;
    assert!(
        UringBdev::create(&o).unwrap().reads_use_io_wq(),
        "buffered on tmpfs"
    );
    o.nop = true;
    assert!(
        !UringBdev::create(&o).unwrap().reads_use_io_wq(),
        "NOPs read nothing"
    );
}

#[test]
fn uring_file_shorter_than_the_io_range() {
    let f = temp_file(Path::new("/var/tmp"), 3 * 4096 + 100);
    let mut o = UringOptions::new(f.path());
    o.block_size = Some(4096);
    let bdev = UringBdev::create(&o).unwrap();
    assert_eq!(bdev.info().num_blocks, 3);
    let buf = Buf::new(4 * 4096);
    let mut q = bdev.open_queue(HctxType::Default, 0, 4).unwrap();
    let mut r = vec![
        rq(Op::Read, 2, 2, buf.io(0, 8192)),
        rq(Op::Read, 0, 3, buf.io(0, 3 * 4096)),
    ];
    run(q.as_mut(), &mut r);
    assert_eq!(r[0].status, IoStatus::Errno(libc::EINVAL));
    assert_eq!(r[1].status, IoStatus::Success);

    // Smaller than one block.
    let small = temp_file(Path::new("/var/tmp"), 100);
    let e = UringBdev::create(&UringOptions::new(small.path())).unwrap_err();
    assert!(matches!(e, UringError::TooSmall { size: 100, .. }), "{e}");
    assert!(e.to_string().contains("too small"), "{e}");
}

#[test]
fn uring_flush_write_zeroes_discard() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    let ops = bdev.info().supported_ops;
    if !(ops.contains(Op::WriteZeroes) && ops.contains(Op::Discard)) {
        // Not ext4/xfs/btrfs (this machine's /var/tmp is ext4, which has both): the driver
        // must refuse what the file system cannot do, not fake it.
        eprintln!("/var/tmp lacks a fallocate mode: {ops:?}; checking refusals");
        let mut q = bdev.open_queue(HctxType::Default, 0, 4).unwrap();
        let mut z = vec![
            rq(Op::WriteZeroes, 0, 1, IoBuf::EMPTY),
            rq(Op::Discard, 0, 1, IoBuf::EMPTY),
        ];
        run(q.as_mut(), &mut z);
        for (r, op) in z.iter().zip([Op::WriteZeroes, Op::Discard]) {
            if !ops.contains(op) {
                assert_eq!(r.status, IoStatus::Errno(libc::EOPNOTSUPP));
            }
        }
        return;
    }
    let bs = bdev.info().block_size;
    let per = 4096 / bs;
    let mut wbuf = Buf::new(4 * 4096);
    pattern(wbuf.slice_mut(), 3);
    let rbuf = Buf::new(4 * 4096);
    let mut q = bdev.open_queue(HctxType::Default, 0, 8).unwrap();
    let mut w = vec![rq(Op::Write, 0, 4 * per, wbuf.io(0, 4 * 4096))];
    run(q.as_mut(), &mut w);
    let mut z = vec![
        rq(Op::WriteZeroes, u64::from(per), per, IoBuf::EMPTY),
        rq(Op::Discard, 2 * u64::from(per), per, IoBuf::EMPTY),
        rq(Op::Flush, 0, 0, IoBuf::EMPTY),
    ];
    run(q.as_mut(), &mut z);
    assert!(z.iter().all(|r| r.status == IoStatus::Success), "{z:?}");
    let mut r = vec![rq(Op::Read, 0, 4 * per, rbuf.io(0, 4 * 4096))];
    run(q.as_mut(), &mut r);
    let (w, r) = (wbuf.slice(), rbuf.slice());
    assert!(w[..4096] == r[..4096] && w[12288..] == r[12288..]);
    assert!(
        r[4096..12288].iter().all(|&b| b == 0),
        "zeroed and discarded ranges read 0"
    );
    assert_eq!(
        std::fs::metadata(f.path()).unwrap().len(),
        1 << 20,
        "size kept"
    );
}

#[test]
fn uring_create_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let e = UringBdev::create(&UringOptions::new(dir.path())).unwrap_err();
    assert!(matches!(e, UringError::IsDirectory { .. }), "{e}");
    assert!(e.to_string().contains("is a directory"), "{e}");

    let e = UringBdev::create(&UringOptions::new(dir.path().join("missing"))).unwrap_err();
    assert!(matches!(e, UringError::NotFound { .. }), "{e}");

    let e = UringBdev::create(&UringOptions::new("")).unwrap_err();
    assert!(matches!(e, UringError::MissingPath), "{e}");

    let e = UringBdev::create(&UringOptions::new("/dev/null")).unwrap_err();
    assert!(matches!(e, UringError::NotFileOrBlockDevice { .. }), "{e}");
    assert!(e.to_string().contains("character device"), "{e}");

    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = UringBdev::create(&UringOptions::new(&fifo)).unwrap_err();
    assert!(e.to_string().contains("FIFO"), "{e}");

    // The block size override must suit the device.
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let mut o = UringOptions::new(f.path());
    o.block_size = Some(3000);
    let e = UringBdev::create(&o).unwrap_err();
    assert!(matches!(e, UringError::BadBlockSize { .. }), "{e}");

    // Errors map onto the block layer's.
    let e = UringBdev::create(&UringOptions::new(dir.path())).unwrap_err();
    assert_eq!(e.into_bdev_error("u0").errno(), -libc::EINVAL);
}

/// tmpfs accepts O_DIRECT since Linux 6.6; on older kernels it is refused with a clear error.
/// Either way: no hang, and data round-trips when it opens.
#[test]
fn uring_tmpfs_with_direct() {
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("SKIP uring_tmpfs_with_direct: no /dev/shm");
        return;
    }
    let f = temp_file(Path::new("/dev/shm"), 1 << 20);
    match UringBdev::create(&UringOptions::new(f.path())) {
        Ok(_) => {
            eprintln!("tmpfs accepts O_DIRECT on this kernel; checking a round trip");
            round_trip(UringOptions::new(f.path()), false);
        }
        Err(e) => {
            assert!(matches!(e, UringError::NoDirectIo { .. }), "{e}");
            assert!(e.to_string().contains("tmpfs"), "{e}");
        }
    }
}

/// ramfs has no direct I/O on any kernel: direct=1 is a clear error naming the file system.
#[test]
fn uring_no_direct_io_file_system_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path();
    let ok = Command::new("mount")
        .args(["-t", "ramfs", "none"])
        .arg(mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIP uring_no_direct_io_file_system_is_a_clear_error: cannot mount ramfs (not root?)"
        );
        return;
    }
    let path = mnt.join("disk");
    let result = || {
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![0u8; 1 << 20]).unwrap();
        drop(f);
        let e = UringBdev::create(&UringOptions::new(&path)).unwrap_err();
        assert!(matches!(e, UringError::NoDirectIo { .. }), "{e}");
        assert!(
            e.to_string().contains("ramfs") && e.to_string().contains("direct=0"),
            "{e}"
        );
        // Buffered works.
        let mut o = UringOptions::new(&path);
        o.direct = false;
        round_trip(o, false);
    };
    let r = std::panic::catch_unwind(result);
    unmount(mnt);
    r.unwrap();
}

/// Unmounts a test's file system. A closed ring lets go of its registered file only when the
/// kernel's deferred ring teardown has run, so "target is busy" is retried for a while, then
/// the mount is detached lazily rather than left behind.
fn unmount(mnt: &Path) {
    for _ in 0..200 {
        let done = Command::new("umount")
            .arg(mnt)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if done {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = Command::new("umount").arg("-l").arg(mnt).status();
}

#[test]
fn uring_hipri_without_poll_queues_falls_back_clearly() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let mut o = UringOptions::new(f.path());
    o.hipri = true;
    let bdev = UringBdev::create(&o).unwrap();
    if bdev.iopoll() {
        eprintln!("this machine's disk has poll queues: IOPOLL in use");
        assert_eq!(bdev.info().queues.poll, 1);
        let mut q = bdev.open_queue(HctxType::Poll, 0, 8).unwrap();
        let buf = Buf::new(4096);
        let mut r = vec![rq(
            Op::Read,
            0,
            4096 / bdev.info().block_size,
            buf.io(0, 4096),
        )];
        run(q.as_mut(), &mut r);
        assert_eq!(r[0].status, IoStatus::Success);
    } else {
        let why = bdev.iopoll_fallback_reason().expect("a fallback says why");
        eprintln!("hipri fallback: {why}");
        assert!(
            why.contains(&f.path().display().to_string()),
            "names the device: {why}"
        );
        assert_eq!(bdev.info().queues.poll, 0);
        assert!(bdev.open_queue(HctxType::Poll, 0, 8).is_err());
        round_trip(o, false);
    }
    // tmpfs: no block device to ask sysfs about, so the IOPOLL read probe decides.
    let shm = Path::new("/dev/shm")
        .is_dir()
        .then(|| temp_file(Path::new("/dev/shm"), 1 << 20));
    let shm_bdev = shm.as_ref().and_then(|shm| {
        let mut o = UringOptions::new(shm.path());
        o.hipri = true;
        UringBdev::create(&o).ok()
    });
    if let Some(bdev) = shm_bdev {
        assert!(!bdev.iopoll(), "tmpfs has no polled I/O");
        let why = bdev.iopoll_fallback_reason().unwrap();
        eprintln!("hipri fallback on tmpfs: {why}");
        assert!(why.contains("IOPOLL") && why.contains("tmpfs"), "{why}");
    }
    let mut o = UringOptions::new(f.path());
    o.hipri = true;
    o.direct = false;
    let bdev = UringBdev::create(&o).unwrap();
    assert!(!bdev.iopoll());
    assert!(bdev.iopoll_fallback_reason().unwrap().contains("O_DIRECT"));
}

#[test]
fn uring_unsupported_op_completes_with_error() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    let mut q = bdev.open_queue(HctxType::Default, 0, 4).unwrap();
    assert!(
        bdev.open_queue(HctxType::Default, 1, 4).is_err(),
        "one default queue per reactor"
    );
    assert!(bdev.open_queue(HctxType::Default, 0, 0).is_err());
    // A read-only file offers no writes; writes complete with EOPNOTSUPP.
    let ro = temp_file(Path::new("/var/tmp"), 1 << 20);
    let mut perm = std::fs::metadata(ro.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o444);
    std::fs::set_permissions(ro.path(), perm).unwrap();
    // Root ignores file modes; only check when the open really is read-only.
    let rbdev = UringBdev::create(&UringOptions::new(ro.path())).unwrap();
    if rbdev.is_read_only() {
        assert!(!rbdev.info().supported_ops.contains(Op::Write));
        let mut rq_ = rbdev.open_queue(HctxType::Default, 0, 4).unwrap();
        let buf = Buf::new(4096);
        let mut w = vec![rq(
            Op::Write,
            0,
            4096 / rbdev.info().block_size,
            buf.io(0, 4096),
        )];
        run(rq_.as_mut(), &mut w);
        assert_eq!(w[0].status, IoStatus::Errno(libc::EOPNOTSUPP));
    }
    // A buffer the kernel cannot write into (PROT_NONE): its EFAULT becomes the status.
    // SAFETY: an anonymous private mapping with no address hint; unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the kernel only tries (and fails) to access it; the request completes before
    // the unmap.
    let bad = unsafe { IoBuf::from_raw_parts(p.cast(), 4096) };
    let mut r = vec![rq(Op::Read, 0, 4096 / bdev.info().block_size, bad)];
    run(q.as_mut(), &mut r);
    assert_eq!(r[0].status, IoStatus::Errno(libc::EFAULT));
    // SAFETY: mapped above, no longer used.
    unsafe { libc::munmap(p, 4096) };
}

/// A loop device over a temporary file, as a block device: block size from BLKSSZGET, size
/// from BLKGETSIZE64, data round trip. Needs root and a working losetup.
#[test]
fn uring_loop_block_device() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP uring_loop_block_device: needs root for losetup");
        return;
    }
    let f = temp_file(Path::new("/var/tmp"), 8 << 20);
    let out = match Command::new("losetup")
        .args([
            "--find",
            "--show",
            "--sector-size",
            "4096",
            "--direct-io=on",
        ])
        .arg(f.path())
        .output()
    {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!(
                "SKIP uring_loop_block_device: losetup failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("SKIP uring_loop_block_device: no losetup ({e})");
            return;
        }
    };
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let r = std::panic::catch_unwind(|| {
        let bdev = UringBdev::create(&UringOptions::new(&dev)).unwrap();
        assert_eq!(bdev.kind(), pmio_uring::DeviceKind::BlockDevice);
        assert_eq!(
            bdev.info().block_size,
            4096,
            "BLKSSZGET of a 4K-sector loop device"
        );
        assert_eq!(bdev.info().num_blocks, 2048, "BLKGETSIZE64 / 4096");
        round_trip(UringOptions::new(&dev), false);
        let mut o = UringOptions::new(&dev);
        o.direct = false;
        round_trip(o, true);
    });
    let _ = Command::new("losetup").arg("-d").arg(&dev).status();
    r.unwrap();
}

/// Registered buffers of every io_uring in this process, from /proc/self/fdinfo
/// (`UserBufs:` section, one `start: 0x…, len` or similar line each): the raw text.
fn ring_fdinfo() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/fdinfo").unwrap().flatten() {
        if let Ok(s) = std::fs::read_to_string(e.path())
            && s.contains("UserBufs:")
        {
            out.push(s);
        }
    }
    out
}

/// Whether some io_uring of this process lists a registered buffer starting at `addr`.
/// The kernel prints a ring's `UserBufs:` only when a trylock of the ring's lock succeeds,
/// and a test running beside this one may hold that lock for a moment (reading the same
/// fdinfo, for one), so a missing section is retried for a while before it counts.
fn ring_lists_buffer(addr: *const u8) -> Result<(), Vec<String>> {
    let want = format!("{:x}", addr as usize);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let infos = ring_fdinfo();
        if infos.iter().any(|s| s.contains(&want)) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(infos);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Buffers registered after a queue is open are picked up at its next submit: the ring's
/// fdinfo lists them, and data round-trips through READ_FIXED/WRITE_FIXED.
#[test]
fn uring_buffers_registered_after_open() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    let mut q = bdev.open_queue(HctxType::Default, 0, 8).unwrap();
    let mut wbuf = Buf::new(8 * 4096);
    let rbuf = Buf::new(8 * 4096);
    pattern(wbuf.slice_mut(), 11);
    // SAFETY: both buffers outlive `q` (dropped first, below).
    unsafe {
        bdev.register_buffers(&[
            (wbuf.ptr, wbuf.layout.size()),
            (rbuf.ptr, rbuf.layout.size()),
        ])
    };
    let per = 4096 / bdev.info().block_size;
    let mut w: Vec<Request> = (0..8)
        .map(|i| {
            rq(
                Op::Write,
                i as u64 * u64::from(per),
                per,
                wbuf.io(i * 4096, 4096),
            )
        })
        .collect();
    run(q.as_mut(), &mut w);
    let mut r: Vec<Request> = (0..8)
        .map(|i| {
            rq(
                Op::Read,
                i as u64 * u64::from(per),
                per,
                rbuf.io(i * 4096, 4096),
            )
        })
        .collect();
    run(q.as_mut(), &mut r);
    assert!(r.iter().all(|r| r.status == IoStatus::Success));
    assert!(wbuf.slice() == rbuf.slice());
    if let Err(infos) = ring_lists_buffer(wbuf.ptr) {
        panic!(
            "no ring lists the registered buffer at {:p}: {infos:#?}",
            wbuf.ptr
        );
    }
    drop(q);
}

/// pmio-perf's buffers: a DMA region of the pages the device asks for (base pages, see
/// `UringBdev::dma_options`), registered as fixed buffers; data round-trips.
#[test]
fn uring_dma_region_as_fixed_buffers() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    let region = pmio::dma::DmaRegion::with_options(64 * 4096, bdev.dma_options()).unwrap();
    assert_eq!(region.page_kind(), pmio::dma::PageKind::Base);
    dma_region_round_trip(&bdev, &region);
}

/// The same with a huge-page region (the default kinds, as another application may pass).
#[test]
fn uring_huge_page_region_as_fixed_buffers() {
    let f = temp_file(Path::new("/var/tmp"), 1 << 20);
    let bdev = UringBdev::create(&UringOptions::new(f.path())).unwrap();
    let region = pmio::dma::DmaRegion::new(64 * 4096).unwrap();
    dma_region_round_trip(&bdev, &region);
}

/// Registers `region` (64 pages), writes 32 pages from it and reads them back into the other 32.
fn dma_region_round_trip(bdev: &UringBdev, region: &pmio::dma::DmaRegion) {
    // SAFETY: `region` outlives the queue (dropped after it, below).
    unsafe { bdev.register_memory(&[(region.as_ptr(), region.len())]) };
    let mut q = bdev.open_queue(HctxType::Default, 0, 64).unwrap();
    // SAFETY: the region is ours, nothing else uses it.
    let mem = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), region.len()) };
    pattern(&mut mem[..32 * 4096], 5);
    let per = 4096 / bdev.info().block_size;
    let io = |i: usize| {
        // SAFETY: inside the region; completed before the region is touched again.
        unsafe { IoBuf::from_raw_parts(region.as_ptr().add(i * 4096), 4096) }
    };
    let mut w: Vec<Request> = (0..32)
        .map(|i| rq(Op::Write, i as u64 * u64::from(per), per, io(i)))
        .collect();
    run(q.as_mut(), &mut w);
    let mut r: Vec<Request> = (0..32)
        .map(|i| rq(Op::Read, i as u64 * u64::from(per), per, io(32 + i)))
        .collect();
    run(q.as_mut(), &mut r);
    assert!(r.iter().all(|r| r.status == IoStatus::Success));
    assert!(mem[..32 * 4096] == mem[32 * 4096..64 * 4096]);
    if let Err(infos) = ring_lists_buffer(region.as_ptr()) {
        panic!("the DMA region is not registered with any ring: {infos:#?}");
    }
    drop(q);
}
