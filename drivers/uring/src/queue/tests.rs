use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types};
use pmio::{IoStatus, Op, OpSet, PrioClass, ReqFlags, Request};

use super::buffers::FixedBuffers;
use super::engine::{Enter, STAGE_CHUNK, poll_enter};
use super::progress::{Step, file_step};
use super::ring::build_ring;
use super::sqe::{Prep, ioprio};
use super::{QueueConfig, Target};

#[test]
fn short_transfers_resume_and_eof_fails() {
    // Full transfer.
    assert_eq!(
        file_step(Op::Read, 4096, 0, 4096, 512),
        Step::Complete(IoStatus::Success)
    );
    // Short read: resume from 1024 bytes, then finish.
    assert_eq!(
        file_step(Op::Read, 1024, 0, 4096, 512),
        Step::Resubmit(1024)
    );
    assert_eq!(
        file_step(Op::Read, 3072, 1024, 4096, 512),
        Step::Complete(IoStatus::Success)
    );
    // End of file: nothing moved.
    assert_eq!(
        file_step(Op::Read, 0, 1024, 4096, 512),
        Step::Complete(IoStatus::Errno(libc::EIO))
    );
    // O_DIRECT stopping at an unaligned end of file cannot resume.
    assert_eq!(
        file_step(Op::Read, 100, 0, 4096, 512),
        Step::Complete(IoStatus::Errno(libc::EIO))
    );
    // Buffered (align 1) can.
    assert_eq!(file_step(Op::Write, 100, 0, 4096, 1), Step::Resubmit(100));
    // Errors carry their errno.
    assert_eq!(
        file_step(Op::Write, -libc::ENOSPC, 0, 4096, 1),
        Step::Complete(IoStatus::Errno(libc::ENOSPC))
    );
    // Flush and friends return 0 on success.
    assert_eq!(
        file_step(Op::Flush, 0, 0, 0, 512),
        Step::Complete(IoStatus::Success)
    );
}

/// The SQE bytes of a crate-built entry.
fn bytes_of(e: squeue::Entry) -> [u8; 64] {
    // SAFETY: `squeue::Entry` is 64 bytes of plain data (see `RawSqe::into_entry`).
    unsafe { std::mem::transmute::<squeue::Entry, [u8; 64]>(e) }
}

#[test]
fn raw_sqe_matches_the_builder() {
    let cfg = QueueConfig {
        name: Arc::from("t"),
        file: Arc::new(tempfile::tempfile().unwrap()),
        target: Target::File,
        block_shift: 9,
        num_blocks: 1 << 20,
        direct_align: 512,
        supported: OpSet::READ_WRITE,
        iopoll: false,
        buffers: Arc::default(),
        wait_us: 0,
    };
    let mut buf = vec![0u8; 8192];
    let base = buf.as_mut_ptr() as usize;
    let fixed = Prep {
        cfg,
        fixed: FixedBuffers::one(base, 8192, 3),
    };
    for (op, fua, prio, in_fixed, done) in [
        (Op::Read, false, pmio::IoPrio::default(), true, 0),
        (Op::Write, true, pmio::IoPrio::default(), true, 512),
        (
            Op::Read,
            false,
            pmio::IoPrio {
                class: PrioClass::Rt,
                level: 3,
            },
            false,
            1024,
        ),
        (Op::Write, false, pmio::IoPrio::default(), false, 0),
    ] {
        let mut rq = Request {
            op,
            lba: 77,
            nblocks: 8,
            prio,
            ..Request::default()
        };
        if fua {
            rq.flags = ReqFlags::FUA;
        }
        let mut other = [0u8; 4096];
        let ptr = if in_fixed {
            buf.as_mut_ptr()
        } else {
            other.as_mut_ptr()
        };
        // SAFETY: the buffer outlives `rq`, and nothing is submitted.
        rq.buf = unsafe { pmio::IoBuf::from_raw_parts(ptr, 4096) };
        let bytes = fixed.check(&rq).unwrap();
        let raw = fixed.rw_sqe(&rq, bytes, done, 42).unwrap();
        let built = builder_rw(&fixed, &rq, bytes, done).user_data(42);
        assert_eq!(
            bytes_of(raw.into_entry()),
            bytes_of(built),
            "{op:?} fua={fua} fixed={in_fixed}"
        );
    }
    let flush = Request {
        op: Op::Flush,
        ..Request::default()
    };
    assert!(fixed.rw_sqe(&flush, 0, 0, 1).is_none());
    // A flush goes to the builder's fsync instead.
    let fsync = opcode::Fsync::new(types::Fixed(0))
        .flags(types::FsyncFlags::DATASYNC)
        .build()
        .user_data(1);
    assert_eq!(
        bytes_of(fixed.file_entry::<squeue::Entry>(&flush, 0, 0, 1)),
        bytes_of(fsync)
    );
}

/// A file read or write, `done` bytes in, through the io-uring crate's builder: the
/// reference the field-by-field encoding (`Prep::rw_sqe`) is checked against.
fn builder_rw(prep: &Prep, rq: &Request, bytes: u32, done: u32) -> squeue::Entry {
    let fd = types::Fixed(0);
    let off = (rq.lba << prep.cfg.block_shift) + u64::from(done);
    let ptr = rq.buf.as_ptr().wrapping_add(done as usize);
    let len = bytes - done;
    let prio = ioprio(rq);
    let flags = if rq.flags.contains(ReqFlags::FUA) {
        libc::RWF_DSYNC
    } else {
        0
    };
    match (rq.op, prep.fixed.index_of(ptr as usize, len as usize)) {
        (Op::Read, Some(i)) => opcode::ReadFixed::new(fd, ptr, len, i)
            .offset(off)
            .ioprio(prio)
            .build(),
        (Op::Read, None) => opcode::Read::new(fd, ptr, len)
            .offset(off)
            .ioprio(prio)
            .build(),
        (Op::Write, Some(i)) => opcode::WriteFixed::new(fd, ptr, len, i)
            .offset(off)
            .ioprio(prio)
            .rw_flags(flags)
            .build(),
        (Op::Write, None) => opcode::Write::new(fd, ptr, len)
            .offset(off)
            .ioprio(prio)
            .rw_flags(flags)
            .build(),
        (op, _) => panic!("{op:?} is not a read or write"),
    }
}

/// Whether a poll enters the kernel, and how, for each kind of moment it can find.
#[test]
fn poll_enters_only_when_owed_awaited_or_waiting() {
    let no = false;
    let wait = true;
    // (owed, in_kernel, cq_len, reaped, max, waits) -> what the poll does
    let table = [
        // Nothing in flight, nothing owed: no system call, with or without a wait.
        ((0, 0, 0, 0, 32, no), Enter::Skip),
        ((0, 0, 0, 0, 32, wait), Enter::Skip),
        // SQEs owed: submit them, whatever the CQ holds.
        ((4, 0, 0, 0, 32, no), Enter::Submit),
        ((4, 8, 3, 0, 32, no), Enter::Submit),
        // Requests in the kernel and an empty CQ: enter only for flagged task work.
        ((0, 8, 0, 0, 32, no), Enter::IfTaskWork),
        // Completions already in the CQ: reap them first.
        ((0, 8, 3, 0, 32, no), Enter::Skip),
        // Requests refused before the kernel completed this poll: nothing in the kernel.
        ((0, 0, 0, 2, 32, no), Enter::Skip),
        // With a wait, less than a batch in the CQ: submit and wait for the batch, which is
        // what is in the kernel, or what the poll may still complete if that is less.
        ((4, 8, 3, 0, 32, wait), Enter::Wait { want: 8 }),
        ((0, 8, 0, 0, 32, wait), Enter::Wait { want: 8 }),
        ((0, 64, 10, 0, 32, wait), Enter::Wait { want: 32 }),
        // A whole batch in the CQ: no wait (and no call unless something is owed).
        ((0, 8, 8, 0, 32, wait), Enter::Skip),
        ((4, 8, 8, 0, 32, wait), Enter::Submit),
        ((0, 64, 32, 0, 32, wait), Enter::Skip),
        // This poll already completed refused requests: no wait, as without one.
        ((0, 8, 0, 1, 32, wait), Enter::IfTaskWork),
        ((4, 8, 3, 1, 32, wait), Enter::Submit),
    ];
    for ((owed, in_kernel, cq_len, reaped, max, waits), want) in table {
        assert_eq!(
            poll_enter(owed, in_kernel, cq_len, reaped, max, waits),
            want,
            "owed {owed}, in kernel {in_kernel}, cq {cq_len}, reaped {reaped} of {max}, \
             waits {waits}"
        );
    }
}

/// A temporary file of 128 sectors, sector `i` filled with the byte `i`.
fn sector_file() -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i / 512) as u8).collect();
    std::io::Write::write_all(&mut f, &data).unwrap();
    f
}

/// One-sector reads, tag `t` reading sector `t * 3 % 128` into `bufs[t]`.
///
/// # Safety
/// `bufs` must stay alive and untouched until every read has completed.
unsafe fn sector_reads(bufs: &mut [[u8; 512]]) -> Vec<Request> {
    let mut rqs = Vec::with_capacity(bufs.len());
    for (t, b) in bufs.iter_mut().enumerate() {
        rqs.push(Request {
            tag: t as u16,
            op: Op::Read,
            lba: (t as u64 * 3) % 128,
            nblocks: 1,
            // SAFETY: the caller's contract (above).
            buf: unsafe { pmio::IoBuf::from_raw_parts(b.as_mut_ptr(), 512) },
            ..Request::default()
        });
    }
    rqs
}

/// Every read of `sector_reads` succeeded with its sector's bytes.
fn assert_sectors_read(rqs: &[Request], bufs: &[[u8; 512]]) {
    for (t, b) in bufs.iter().enumerate() {
        assert!(rqs[t].status.is_success(), "tag {t}: {:?}", rqs[t].status);
        let want = ((t * 3) % 128) as u8;
        assert!(b.iter().all(|&x| x == want), "tag {t}'s data");
    }
}

/// With `wait_us`, a poll that finds less than a batch in the CQ submits and waits for the
/// batch in one enter; every request completes, with its data.
#[test]
fn waiting_poll_collects_whole_batches() {
    use pmio::BlockDevice;
    let f = sector_file();
    let mut opts = crate::UringOptions::new(f.path());
    opts.direct = false;
    opts.wait_us = 200_000;
    let bdev = crate::UringBdev::create(&opts).unwrap();
    let mut q = bdev
        .open_queue(pmio::HctxType::Default, 0, 16)
        .expect("queue");
    let mut bufs = vec![[0u8; 512]; 16];
    // SAFETY: `bufs` outlives the queue's I/O and is read only after every completion.
    let mut rqs = unsafe { sector_reads(&mut bufs) };
    let tags: Vec<u16> = (0..16).collect();
    q.submit(&mut rqs, &tags);
    let mut done = Vec::with_capacity(16);
    let start = std::time::Instant::now();
    let mut got = 0;
    while got < 16 {
        got += q.poll(&mut rqs, &mut done, 16);
    }
    assert!(
        start.elapsed() < std::time::Duration::from_millis(150),
        "a full batch ends the wait before the timeout"
    );
    assert_eq!(q.outstanding(), 0);
    done.sort_unstable();
    assert_eq!(done, tags);
    assert_sectors_read(&rqs, &bufs);
    // Nothing in flight: no wait at all.
    let start = std::time::Instant::now();
    assert_eq!(q.poll(&mut rqs, &mut done, 16), 0);
    assert!(start.elapsed() < std::time::Duration::from_millis(100));
}

/// One `submit` of more requests than the SQ holds (and than one staging chunk): the SQ is
/// emptied into the kernel as it fills, and every request completes with its data.
#[test]
fn submit_beyond_the_sq_enters_to_make_room() {
    use pmio::BlockDevice;
    let f = sector_file();
    let mut opts = crate::UringOptions::new(f.path());
    opts.direct = false;
    let bdev = crate::UringBdev::create(&opts).unwrap();
    let mut q = bdev
        .open_queue(pmio::HctxType::Default, 0, 4)
        .expect("queue");
    let n = STAGE_CHUNK + 9;
    let mut bufs = vec![[0u8; 512]; n];
    // SAFETY: `bufs` outlives the queue's I/O and is read only after every completion.
    let mut rqs = unsafe { sector_reads(&mut bufs) };
    let tags: Vec<u16> = (0..n as u16).collect();
    q.submit(&mut rqs, &tags);
    let mut done = Vec::with_capacity(n);
    let mut polls = 0;
    while done.len() < n {
        q.poll(&mut rqs, &mut done, n);
        polls += 1;
        assert!(polls < 100_000, "{} of {n} completed", done.len());
    }
    assert_eq!(q.outstanding(), 0);
    done.sort_unstable();
    assert_eq!(done, tags);
    assert_sectors_read(&rqs, &bufs);
}

#[test]
fn ioprio_encoding() {
    let mut rq = Request::default();
    assert_eq!(ioprio(&rq), 0, "default priority leaves the thread's");
    rq.prio = pmio::IoPrio {
        class: PrioClass::Rt,
        level: 2,
    };
    assert_eq!(ioprio(&rq), 1 << 13 | 2);
    rq.prio = pmio::IoPrio {
        class: PrioClass::Idle,
        level: 9,
    };
    assert_eq!(ioprio(&rq), 3 << 13 | 7);
}

#[test]
fn ring_builds_with_some_flags() {
    let (_ring, flags) = build_ring::<squeue::Entry, cqueue::Entry>("t", 64, false).unwrap();
    assert!(!flags.iopoll);
    // A second ring in the same thread also builds (SINGLE_ISSUER is per ring).
    let (_r2, f2) = build_ring::<squeue::Entry128, cqueue::Entry32>("t", 8, false).unwrap();
    assert_eq!(flags, f2);
}
