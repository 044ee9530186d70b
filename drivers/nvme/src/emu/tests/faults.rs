//! One fault at a time on the queue pair's commands (drop, delay, failed statuses, duplicate
//! and unknown completions, a vanished device), then random mixes of them.

use super::*;
#[test]
fn fault_fatal_status_resets_and_resubmits_through_translated_iovas() {
    let emu = narrow_iommu_emu();
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    assert_eq!(emu.translated(), 3);
    w.run(&writes(64, 1));
    emu.inject(FaultRule::new(Fault::Fatal).nth(100));
    let st = w.run(&writes(64, 2));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    assert_eq!(w.q.stats().resets, 1);
    w.verify_by_reading();
    w.verify_in_emulator();
}

#[test]
fn fault_delay_within_timeout_completes_late() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut opts = fast_opts();
    opts.io_timeout = Duration::from_secs(5);
    let mut w = Workload::new(&emu, opts, 16);
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_millis(40))).nth(5));
    let t = Instant::now();
    let st = w.run(&writes(64, 1));
    assert!(t.elapsed() >= Duration::from_millis(40));
    assert!(st.iter().all(|s| s.is_success()));
    assert_eq!(emu.stats().delayed, 1);
    assert_eq!(w.q.stats().timeouts, 0);
    w.verify_by_reading();
}

#[test]
fn fault_delay_past_timeout_is_aborted_and_resubmitted() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_secs(10))).nth(7));
    let st = w.run(&writes(64, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.delayed, e.aborts, e.aborts_hit), (1, 1, 1));
    assert_eq!((s.timeouts, s.aborts, s.recovered, s.resets), (1, 1, 1, 0));
    w.verify_by_reading();
}

#[test]
fn fault_drop_is_aborted_and_resubmitted() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(
        FaultRule::new(Fault::Drop)
            .opcode(crate::spec::nvm_opc::WRITE)
            .nth(3),
    );
    emu.inject(FaultRule::new(Fault::Drop).lba(80..88));
    let st = w.run(&writes(64, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.dropped, e.aborts_hit), (2, 2));
    assert_eq!((s.timeouts, s.aborts, s.recovered, s.resets), (2, 2, 2, 0));
    w.verify_by_reading();
}

#[test]
fn fault_drop_every_attempt_fails_with_timeout_after_the_retry_budget() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    // Unit 10 (LBA 80) is dropped every time: aborted, resubmitted 3 times, then failed.
    emu.inject(FaultRule::new(Fault::Drop).lba(80..88).times(None));
    let st = w.run(&writes(32, 1));
    for (i, s) in st.iter().enumerate() {
        if i == 10 {
            assert_eq!(*s, IoStatus::Timeout);
        } else {
            assert_eq!(*s, IoStatus::Success, "I/O {i}");
        }
    }
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!(e.dropped, 4);
    assert_eq!((s.timeouts, s.aborts, s.recovered, s.errors), (4, 4, 3, 1));
    assert!(matches!(
        w.q.last_error(),
        Some(crate::IoError::TimedOut { retries: 3 })
    ));
    emu.clear_faults();
    w.verify_by_reading();
}

#[test]
fn fault_failed_abort_resets_the_controller() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let invalid = Status::new(sct::GENERIC, 0x02, true);
    emu.inject(FaultRule::new(Fault::Drop).nth(9));
    emu.inject(
        FaultRule::new(Fault::Status(invalid))
            .admin()
            .opcode(admin_opc::ABORT),
    );
    let st = w.run(&writes(64, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    // The reset deleted the queue first: the dropped write came back aborted, then was
    // resubmitted.
    assert_eq!((e.dropped, e.sq_deletions, e.disables), (1, 1, 1));
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (1, 1, 1, 1)
    );
    assert!(s.recovered >= 1);
    assert_eq!(emu.io_queues(), (1, 1), "queues recreated");
    w.verify_by_reading();
}

#[test]
fn fault_abort_that_times_out_resets_the_controller() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(FaultRule::new(Fault::Drop).nth(2));
    emu.inject(FaultRule::new(Fault::Drop).admin().opcode(admin_opc::ABORT));
    let st = w.run(&writes(48, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!(
        (e.dropped, e.aborts, e.disables),
        (2, 0, 1),
        "the Abort itself was dropped"
    );
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (1, 1, 1, 1)
    );
    w.verify_by_reading();
}

#[test]
fn fault_duplicate_completions_are_counted_and_ignored() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    emu.seed(7);
    // Room in the CQ for every duplicate: a duplicate posted after its tag was reused would
    // be indistinguishable from the new command's completion (CID reuse; no host can tell).
    let opts = NvmeOptions {
        io_queue_entries: 256,
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 16);
    emu.inject(FaultRule::new(Fault::Duplicate).rate(0.1, None));
    let mut ios = writes(200, 1);
    ios.extend((0..200).map(|u| (Op::Read, u, 0)));
    let st = w.run(&ios);
    assert!(st.iter().all(|s| s.is_success()));
    let dups = emu.stats().duplicated;
    assert!(dups > 10, "{dups}");
    assert_eq!(w.q.stats().duplicates, dups);
    assert_eq!(w.q.stats().completed, 400);
    assert_eq!(w.q.stats().unknown_completions, 0);
}

#[test]
fn fault_retryable_status_is_retried() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    emu.seed(11);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let not_ready = Status::new(sct::GENERIC, 0x82, false);
    emu.inject(FaultRule::new(Fault::Status(not_ready)).rate(0.05, Some(8)));
    let st = w.run(&writes(300, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    assert_eq!(emu.stats().status_injected, 8);
    assert_eq!(w.q.stats().retries, 8);
    w.verify_by_reading();
}

#[test]
fn fault_dnr_status_fails_the_io_and_is_reported() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let media = Status::new(sct::MEDIA, 0x81, true);
    let not_ready_dnr = Status::new(sct::GENERIC, 0x82, true);
    emu.inject(FaultRule::new(Fault::Status(media)).nth(4));
    emu.inject(FaultRule::new(Fault::Status(not_ready_dnr)).nth(20));
    let st = w.run(&writes(40, 1));
    for (i, s) in st.iter().enumerate() {
        match i {
            4 => assert_eq!(*s, IoStatus::Nvme(media.to_nvme_status())),
            20 => assert_eq!(*s, IoStatus::Nvme(not_ready_dnr.to_nvme_status())),
            _ => assert_eq!(*s, IoStatus::Success),
        }
    }
    assert_eq!(w.q.stats().retries, 0, "DNR is never retried");
    assert_eq!(w.q.stats().errors, 2);
    w.verify_by_reading();
}

#[test]
fn fault_fatal_status_resets_and_resubmits() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(64, 1));
    emu.inject(FaultRule::new(Fault::Fatal).nth(100));
    let st = w.run(&writes(64, 2));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.fatal, e.disables), (1, 1));
    assert_eq!(s.resets, 1);
    assert!(
        s.recovered >= 1,
        "the commands caught in the reset were resubmitted"
    );
    assert_eq!(s.timeouts, 0, "found by the CSTS check, not by timeouts");
    w.verify_by_reading();
}

#[test]
fn fault_reset_recreates_every_queue_pair() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut a = Workload::new(&emu, fast_opts(), 8);
    // B has I/O in flight when A resets the controller.
    let (mut qb, _bufb, mut rqb) = a.second_qpair_reading();
    assert_eq!(emu.io_queues(), (2, 2));
    emu.make_fatal();
    let st = a.run(&writes(32, 1));
    assert!(st.iter().all(|s| s.is_success()));
    assert_eq!(a.q.stats().resets, 1);
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while done.is_empty() {
        assert!(Instant::now() < deadline, "B hangs");
        emu.step();
        qb.poll(&mut rqb, &mut done, 8);
    }
    assert_eq!(done, vec![0]);
    assert_eq!(rqb[0].status, IoStatus::Success);
    assert_eq!(qb.stats().resets, 1);
    assert_eq!(qb.stats().recovered, 1);
    assert_eq!(emu.io_queues(), (2, 2));
    drop(qb);
    a.verify_by_reading();
}

#[test]
fn fault_vanished_device_fails_everything_promptly_and_detach_works() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(64, 1));
    emu.inject(FaultRule::new(Fault::Vanish).nth(80));
    let t = Instant::now();
    let st = w.run(&writes(64, 2));
    assert!(t.elapsed() < Duration::from_secs(2));
    let ok = st.iter().filter(|s| s.is_success()).count();
    let removed = st.iter().filter(|&&s| s == IoStatus::DeviceRemoved).count();
    assert_eq!(ok + removed, 64, "{st:?}");
    assert!(removed >= 48, "{removed}");
    assert!(w.q.stats().failed_dead >= removed as u64 - 16);
    // New I/O fails at once.
    let st = w.run(&writes(4, 3));
    assert_eq!(st, vec![IoStatus::DeviceRemoved; 4]);
    // Whatever was acknowledged is in the device's memory.
    w.verify_in_emulator();
    let t = Instant::now();
    let Workload { q, c, buf, .. } = w;
    drop(q);
    drop(buf);
    assert!(matches!(
        c.detach(),
        Err(crate::NvmeError::DeviceRemoved { .. })
    ));
    drop(c);
    assert!(t.elapsed() < Duration::from_secs(1), "detach hung");
    assert_eq!(emu.mapped(), 0, "every DMA mapping removed");
}

/// The seeds of the random-fault tests: `PMIO_FAULT_SEEDS` (comma-separated), else `default`.
/// A failure names its seed, so `PMIO_FAULT_SEEDS=N cargo test ... fault_` replays it.
fn fault_seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var("PMIO_FAULT_SEEDS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("PMIO_FAULT_SEEDS: comma-separated integers")
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

#[test]
fn fault_mixed_random_faults_on_the_emulator_thread() {
    for seed in fault_seeds(&[1234, 1, 2, 3]) {
        eprintln!("fault_mixed: seed {seed}");
        mixed_random_faults(seed);
    }
}

/// Four rounds, each writing every unit then reading it back (a read may overlap the write of
/// its unit), under dropped, delayed and failed commands; then everything acknowledged reads
/// back.
fn mixed_random_faults(seed: u64) {
    let emu = threaded_emu();
    emu.seed(seed);
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 32);
    let _thread = emu.spawn(None);
    w.threaded = true;
    let not_ready = Status::new(sct::GENERIC, 0x82, false);
    let media = Status::new(sct::MEDIA, 0x81, true);
    emu.inject(FaultRule::new(Fault::Drop).rate(0.01, Some(4)));
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_millis(5))).rate(0.02, None));
    emu.inject(FaultRule::new(Fault::Status(not_ready)).rate(0.02, None));
    emu.inject(FaultRule::new(Fault::Status(media)).rate(0.005, None));
    for round in 1..=4 {
        let mut ios = writes(512, round);
        ios.extend((0..512).map(|u| (Op::Read, u, 0)));
        w.run(&ios);
    }
    emu.clear_faults();
    let failed = w.statuses.iter().filter(|s| !s.is_success()).count() as u64;
    let s = w.q.stats();
    assert_eq!(s.completed, w.statuses.len() as u64);
    assert_eq!(s.errors, failed, "every failure reported and counted");
    // Every dropped command times out and is aborted. On a loaded machine (the emulator's thread
    // starved for longer than the 300 ms I/O or 50 ms abort timeout) slow commands time out
    // too, and an abort may itself time out and reset the controller: what holds whatever the
    // timing is that no timeout goes unanswered, and the data checks above and below.
    assert!(s.timeouts >= emu.stats().dropped, "{s:?}");
    assert!(s.aborts <= s.timeouts, "{s:?}");
    w.verify_by_reading();
}

/// The oracle of the fault tests must catch a lost write: a unit whose device copy is one
/// version older than the acknowledged one fails the read check, even when the read overlaps
/// a write of another unit.
#[test]
#[should_panic(expected = "block 24 reads back wrong: expected version [2]")]
fn emu_oracle_catches_an_older_version() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let v1 = w.run(&writes(8, 1));
    let v2 = w.run(&writes(8, 2));
    assert!(v1.iter().chain(&v2).all(|s| s.is_success()));
    // Unit 3 loses its second write behind the driver's back.
    let mut old = vec![0u8; IO_BYTES];
    for (b, chunk) in old.chunks_mut(512).enumerate() {
        block_pattern(24 + b as u64, 1, chunk);
    }
    emu.set_disk(3 * IO_BYTES, &old);
    w.run(&[(Op::Write, 4, 3), (Op::Read, 3, 0)]);
}

/// A read that overlaps a write of its unit may return the write's version: the emulator
/// executes a delayed write at once and completes it later, as a device may.
#[test]
fn emu_oracle_accepts_a_read_overlapping_a_write() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(8, 1));
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_millis(20))).opcode(nvm_opc::WRITE));
    let st = w.run(&[(Op::Write, 5, 2), (Op::Read, 5, 0)]);
    assert_eq!(st, vec![IoStatus::Success; 2]);
    assert_eq!(emu.stats().delayed, 1);
    // The read completed first and saw version 2, not yet acknowledged then.
    let got = u64::from_le_bytes(w.buf.bytes(IO_BYTES + 8, 8).try_into().unwrap());
    assert_eq!(got, 2);
    w.verify_by_reading();
}

#[test]
fn fault_lost_completion_is_not_found_by_abort_and_resets() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    emu.inject(FaultRule::new(Fault::Lose).nth(6));
    let st = w.run(&writes(48, 1));
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.lost, e.aborts, e.aborts_hit, e.disables), (1, 1, 0, 1));
    // First timeout → abort (not found); second timeout → reset → resubmitted.
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (2, 1, 0, 1)
    );
    assert!(s.recovered >= 1);
    w.verify_by_reading();
}

#[test]
fn fault_unknown_completions_are_counted_and_ignored() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    let qid = w.q.qid();
    w.run(&writes(8, 1));
    // A CID beyond the queue's depth, and one that is free (tag 15 never used).
    emu.post_bogus(qid, 1000, Status::SUCCESS);
    emu.post_bogus(qid, 15, Status::SUCCESS);
    let st = w.run(&writes(8, 2));
    assert!(st.iter().all(|s| s.is_success()));
    // The workload used tags 0..8 only: both are unknown, neither a duplicate.
    assert_eq!(w.q.stats().unknown_completions, 2, "{:?}", w.q.stats());
    assert_eq!(w.q.stats().duplicates, 0);
    assert_eq!(w.q.stats().completed, 16);
    w.verify_by_reading();
}

#[test]
fn fault_fatal_and_drops_on_the_emulator_thread() {
    let emu = threaded_emu();
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 32);
    let _thread = emu.spawn(None);
    w.threaded = true;
    emu.inject(FaultRule::new(Fault::Drop).nth(300));
    let mut ios = writes(512, 1);
    ios.extend((0..512).map(|u| (Op::Read, u, 0)));
    let st = w.run(&ios);
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    emu.inject(FaultRule::new(Fault::Fatal).nth(1500));
    let st = w.run(&ios);
    assert!(st.iter().all(|s| s.is_success()), "{st:?}");
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.fatal, e.dropped, e.aborts_hit, e.disables), (1, 1, 1, 1));
    assert_eq!((s.timeouts, s.aborts, s.resets), (1, 1, 1));
    w.verify_by_reading();
}

#[test]
fn fault_pending_abort_does_not_block_the_poller() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(400),
        abort_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let mut w = Workload::new(&emu, opts, 4);
    // Command 0 is dropped and so is its Abort: the reset comes after the abort timeout.
    emu.inject(FaultRule::new(Fault::Drop).nth(0));
    emu.inject(FaultRule::new(Fault::Drop).admin().opcode(admin_opc::ABORT));
    let read = |w: &Workload, t: usize| Io {
        op: Op::Read,
        lba: t as u64 * 8,
        nblocks: 8,
        buf: w.buf.io(t * IO_BYTES, IO_BYTES),
        ..Io::default()
    };
    let io0 = read(&w, 0);
    w.rqs[0].prepare(&io0, 0);
    w.q.submit(&mut w.rqs, &[0]);
    let (mut other_done, mut max_poll) = (0u32, Duration::ZERO);
    let mut in_flight = false;
    let mut done = Vec::new();
    let t0 = Instant::now();
    let elapsed = loop {
        assert!(t0.elapsed() < Duration::from_secs(5), "hang");
        if !in_flight {
            let io1 = read(&w, 1);
            w.rqs[1].prepare(&io1, 0);
            w.q.submit(&mut w.rqs, &[1]);
            in_flight = true;
        }
        emu.step();
        done.clear();
        let t = Instant::now();
        w.q.poll(&mut w.rqs, &mut done, 8);
        max_poll = max_poll.max(t.elapsed());
        if done.contains(&1) {
            assert_eq!(w.rqs[1].status, IoStatus::Success);
            other_done += 1;
            in_flight = false;
        }
        if done.contains(&0) {
            break t0.elapsed();
        }
    };
    assert_eq!(
        w.rqs[0].status,
        IoStatus::Success,
        "resubmitted after the reset"
    );
    // Timeout at 400 ms, Abort given up at 700 ms, then the reset.
    assert!(elapsed >= Duration::from_millis(700), "{elapsed:?}");
    assert!(
        max_poll < Duration::from_millis(200),
        "a poll waited {max_poll:?} (the Abort timeout is 300 ms)"
    );
    assert!(other_done > 10, "{other_done}");
    let s = w.q.stats();
    assert_eq!(
        (s.timeouts, s.aborts, s.aborts_failed, s.resets),
        (1, 1, 1, 1)
    );
    // Tag 1 may have been in flight during the reset too.
    assert!(s.recovered >= 1);
}

#[test]
fn fault_failed_reset_fails_every_io_with_a_clear_error() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(16, 1));
    // The controller goes fatal, and the reset fails (Set Features refused afterwards).
    emu.inject(FaultRule::new(Fault::Fatal).nth(20));
    emu.inject(
        FaultRule::new(Fault::Status(Status::new(sct::GENERIC, 0x06, true)))
            .admin()
            .opcode(admin_opc::SET_FEATURES),
    );
    let st = w.run(&writes(32, 2));
    let ok = st.iter().filter(|s| s.is_success()).count();
    assert!(ok >= 4, "before the fatal status: {st:?}");
    assert!(
        st.iter()
            .all(|&s| s == IoStatus::Success || s == IoStatus::Errno(libc::EIO)),
        "{st:?}"
    );
    assert_eq!(w.q.last_error(), Some(crate::IoError::ControllerFailed));
    // New I/O fails at once with the same error.
    assert_eq!(w.run(&writes(3, 3)), vec![IoStatus::Errno(libc::EIO); 3]);
    assert_eq!(emu.stats().disables, 1);
    w.verify_in_emulator();
    w.detach_promptly();
}
