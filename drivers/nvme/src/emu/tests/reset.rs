//! Controller resets: driven by the queue pairs' polls without blocking them, the I/O queues
//! deleted first, from other threads, and a queue pair closed while it recreates its queues.

use super::*;

#[test]
fn fault_reset_does_not_block_the_poller() {
    // RUST_LOG=info shows the reset's steps and the longest call.
    let _ = env_logger::builder().is_test(true).try_init();
    let ready_delay = Duration::from_millis(200);
    let emu = stepped_emu_with_ready_delay(ready_delay);
    let mut w = Workload::new(&emu, fast_opts(), 16);
    w.run(&writes(16, 1));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    // Writes of version 2 to units 0..8 are in the device when it fails.
    w.submit_writes(0..8, 2, &mut timer);
    emu.make_fatal();
    let t0 = Instant::now();
    w.poll_until_resetting(&mut timer, &mut done);
    assert!(done.is_empty(), "nothing completes before the reset");
    assert_eq!(emu.stats().disables, 1, "the reset disabled the controller");
    // Writes of version 2 to units 8..16, submitted during the reset: held, still counted.
    w.submit_writes(8..16, 2, &mut timer);
    assert!(w.q.resetting());
    assert_eq!(w.q.outstanding(), 16);
    let polls_before = timer.calls;
    w.poll_until_done(16, &mut timer, &mut done);
    let elapsed = t0.elapsed();
    done.sort_unstable();
    assert_eq!(done, (0..16).collect::<Vec<u16>>(), "each completed once");
    for t in 0..16 {
        assert_eq!(w.rqs[t].status, IoStatus::Success, "tag {t}");
        w.acked[t] = Some(2);
    }
    // RDY took 200 ms to clear, then 200 ms to set: the reset waited for both, the calls
    // for neither.
    assert!(elapsed >= 2 * ready_delay, "{elapsed:?}");
    assert!(
        timer.max < MAX_CALL,
        "a call took {:?} ({} calls)",
        timer.max,
        timer.calls
    );
    assert!(
        timer.calls - polls_before > 10,
        "the reset was polled, not waited for"
    );
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((e.fatal, e.disables), (1, 1));
    assert_eq!(s.resets, 1);
    assert_eq!(
        s.recovered, 8,
        "the writes caught in the reset were resubmitted"
    );
    assert_eq!(s.completed, 16 + 16);
    assert_eq!(emu.io_queues(), (1, 1), "queues recreated");
    log::info!(
        "reset over {elapsed:?}: {} calls, the longest {:?}",
        timer.calls,
        timer.max
    );
    w.verify_by_reading();
    w.verify_in_emulator();
}

#[test]
fn fault_reset_that_never_gets_ready_fails_every_io_without_blocking() {
    // RUST_LOG=error shows why each reset failed.
    let _ = env_logger::builder().is_test(true).try_init();
    // CSTS.RDY never clears after CC.EN=0, or never sets after CC.EN=1.
    for (disable, enable) in [
        (Duration::MAX, Duration::ZERO),
        (Duration::ZERO, Duration::MAX),
    ] {
        let emu = Emu::new(EmuConfig::default());
        emu.set_inline(false);
        let mut w = Workload::new(&emu, fast_opts(), 16);
        w.run(&writes(16, 1));
        emu.set_ready_delays(disable, enable);
        let (timer, elapsed) = w.writes_across_a_reset();
        log::info!(
            "reset failed after {elapsed:?}: {} calls, the longest {:?}",
            timer.calls,
            timer.max
        );
        // CAP.TO is 1 (500 ms): the reset gives up then, and fails everything at once.
        assert!(elapsed >= Duration::from_millis(500), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
        for t in 0..8 {
            assert_eq!(w.rqs[t].status, IoStatus::Errno(libc::EIO), "tag {t}");
        }
        assert_eq!(w.q.last_error(), Some(crate::IoError::ControllerFailed));
        assert_eq!(w.q.stats().failed_dead, 8);
        // New I/O fails at once with the same error.
        let t = Instant::now();
        assert_eq!(w.run(&writes(3, 3)), vec![IoStatus::Errno(libc::EIO); 3]);
        assert!(t.elapsed() < MAX_CALL);
        assert_eq!(emu.stats().disables, 1);
        // Every write of version 1 is intact: the failed ones never reached the device.
        w.verify_in_emulator();
        w.detach_promptly();
    }
}

#[test]
fn fault_reset_never_waits_for_the_admin_queue_lock() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    // B has a read in flight when A resets the controller.
    let (mut qb, _bufb, mut rqb) = w.second_qpair_reading();
    w.submit_writes(0..4, 2, &mut timer);
    emu.make_fatal();
    // Another thread holds the admin queue (the test thread itself: a blocking lock on the
    // poll path would deadlock here): A wants a reset but does not start it.
    let inner = w.c.inner.clone();
    let admin = inner.admin();
    w.poll_until_resetting(&mut timer, &mut done);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(30) {
        emu.step();
        timer.time(|| w.q.poll(&mut w.rqs, &mut done, 64));
    }
    assert_eq!(
        emu.stats().disables,
        0,
        "not started while the admin queue is busy"
    );
    assert!(w.q.resetting() && done.is_empty());
    drop(admin);
    w.poll_until_done(4, &mut timer, &mut done);
    assert_eq!(emu.stats().disables, 1);
    assert!((0..4).all(|t| w.rqs[t].status == IoStatus::Success));
    // B recreates its queues only when it gets the admin queue, without waiting for it.
    let admin = inner.admin();
    let mut done_b = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(30) {
        emu.step();
        timer.time(|| qb.poll(&mut rqb, &mut done_b, 8));
    }
    assert!(qb.resetting() && done_b.is_empty());
    assert_eq!(qb.outstanding(), 1);
    drop(admin);
    let t0 = Instant::now();
    while done_b.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "B hangs");
        emu.step();
        timer.time(|| qb.poll(&mut rqb, &mut done_b, 8));
    }
    assert_eq!(rqb[0].status, IoStatus::Success);
    assert_eq!((qb.stats().resets, qb.stats().recovered), (1, 1));
    assert_eq!(emu.io_queues(), (2, 2));
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    drop(qb);
    w.verify_acked(0..4, 2);
}

/// Writes of version 2 to units 0..8 on a controller that fails while the first four are in
/// the device (the last four are submitted during the reset), with `fault` hitting the
/// queue pair's Create I/O CQ and SQ after the reset. Returns the workload, the timings of
/// its calls and how long the reset took until every write completed.
fn reset_with_slow_queue_creation(
    fault: Fault,
    opts: NvmeOptions,
) -> (Workload, CallTimer, Duration) {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, opts, 8);
    w.run(&writes(8, 1));
    for opc in [admin_opc::CREATE_IO_CQ, admin_opc::CREATE_IO_SQ] {
        emu.inject(FaultRule::new(fault).admin().opcode(opc));
    }
    let (timer, elapsed) = w.writes_across_a_reset();
    (w, timer, elapsed)
}

#[test]
fn fault_slow_queue_creation_after_a_reset_does_not_block_the_poller() {
    let delay = Duration::from_millis(100);
    let (mut w, timer, elapsed) = reset_with_slow_queue_creation(Fault::Delay(delay), fast_opts());
    assert!(elapsed >= 2 * delay, "{elapsed:?}");
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    assert!((0..8).all(|t| w.rqs[t].status == IoStatus::Success));
    let s = w.q.stats();
    assert_eq!((s.resets, s.recovered), (1, 4));
    assert_eq!(w.emu.stats().delayed, 2);
    w.verify_acked(0..8, 2);
}

#[test]
fn fault_queue_creation_that_never_completes_fails_every_io_without_blocking() {
    let opts = NvmeOptions {
        admin_timeout: Duration::from_millis(200),
        ..fast_opts()
    };
    let (mut w, timer, elapsed) = reset_with_slow_queue_creation(Fault::Drop, opts);
    // The Create I/O CQ times out after the admin timeout.
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    assert!((0..8).all(|t| w.rqs[t].status == IoStatus::Errno(libc::EIO)));
    assert_eq!(w.q.last_error(), Some(crate::IoError::ControllerFailed));
    assert_eq!(w.run(&writes(2, 3)), vec![IoStatus::Errno(libc::EIO); 2]);
    w.verify_in_emulator();
    w.detach_promptly();
}

#[test]
fn emu_start_reset_is_driven_by_the_queue_pairs() {
    let emu = stepped_emu_with_ready_delay(Duration::from_millis(50));
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    w.submit_writes(0..4, 2, &mut timer);
    w.c.start_reset().unwrap();
    assert!(w.c.inner.reset_in_progress(), "started at once");
    // The queues are deleted before the controller is disabled, by the queue pairs' polls.
    assert_eq!(
        (emu.stats().sq_deletions, emu.stats().disables),
        (0, 0),
        "nothing waited for"
    );
    // Asking again while it is in progress does nothing.
    w.c.start_reset().unwrap();
    w.poll_until_resetting(&mut timer, &mut done);
    w.submit_writes(4..8, 2, &mut timer);
    w.poll_until_done(8, &mut timer, &mut done);
    assert!((0..8).all(|t| w.rqs[t].status == IoStatus::Success));
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    let e = emu.stats();
    assert_eq!((e.sq_deletions, e.disables, w.q.stats().resets), (1, 1, 1));
    w.verify_acked(0..8, 2);
}

#[test]
fn emu_reset_aborts_commands_in_the_device_by_deleting_their_queue() {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    // Four writes of version 2 the device holds (fetched, never executed), then a reset.
    emu.inject(FaultRule::new(Fault::Drop).times(Some(4)));
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    w.submit_writes(0..4, 2, &mut timer);
    emu.step();
    assert_eq!(emu.held(), 4);
    w.c.start_reset().unwrap();
    w.poll_until_done(4, &mut timer, &mut done);
    // Delete I/O SQ completed them as aborted; the queue pair resubmitted each once.
    let (s, e) = (w.q.stats(), emu.stats());
    assert_eq!((emu.held(), e.sq_deletions, e.disables), (0, 1, 1));
    assert_eq!((s.resets, s.recovered, s.errors), (1, 4, 0), "{s:?}");
    assert!((0..4).all(|t| w.rqs[t].status == IoStatus::Success));
    w.verify_acked(0..4, 2);
}

#[test]
fn fault_reset_disables_a_controller_that_does_not_delete_its_queues() {
    let emu = stepped_emu_with_ready_delay(Duration::ZERO);
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    emu.inject(
        FaultRule::new(Fault::Drop)
            .admin()
            .opcode(admin_opc::DELETE_IO_SQ),
    );
    let (mut timer, mut done) = (CallTimer::default(), Vec::new());
    w.submit_writes(0..4, 2, &mut timer);
    let t0 = Instant::now();
    w.c.start_reset().unwrap();
    w.poll_until_resetting(&mut timer, &mut done);
    // Waits out the deletion budget (1 s), polled, never waited for, then resets anyway.
    w.poll_until_done(4, &mut timer, &mut done);
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    assert!(timer.max < MAX_CALL, "a call took {:?}", timer.max);
    let e = emu.stats();
    assert_eq!((e.sq_deletions, e.disables, w.q.stats().resets), (0, 1, 1));
    assert!((0..4).all(|t| w.rqs[t].status == IoStatus::Success));
    w.verify_acked(0..4, 2);
}

#[test]
fn fault_reset_with_queue_pairs_on_two_threads() {
    let emu = Emu::new(EmuConfig {
        ready_delay: Duration::from_millis(20),
        to: 10,
        ..EmuConfig::default()
    });
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(300),
        ..fast_opts()
    };
    let c = attach(&emu, opts);
    let _thread = emu.spawn(None);
    // The controller fails while both threads have I/O in flight (about a third of the way).
    emu.inject(FaultRule::new(Fault::Fatal).nth(1000));
    let stats: Vec<QpairStats> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2usize)
            .map(|i| {
                let (emu, c) = (
                    emu.clone(),
                    Controller {
                        inner: c.inner.clone(),
                    },
                );
                s.spawn(move || {
                    let mut w = Workload::on(&emu, c, 16);
                    w.threaded = true;
                    let units = i * 256..(i + 1) * 256;
                    for round in 1..=3 {
                        let mut ios: Vec<_> =
                            units.clone().map(|u| (Op::Write, u, round)).collect();
                        ios.extend(units.clone().map(|u| (Op::Read, u, 0)));
                        let st = w.run(&ios);
                        assert!(st.iter().all(|s| s.is_success()), "thread {i}: {st:?}");
                    }
                    w.verify_by_reading();
                    w.q.stats()
                })
            })
            .collect();
        workers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let e = emu.stats();
    assert_eq!(
        (e.fatal, e.disables),
        (1, 1),
        "one reset for both queue pairs"
    );
    for (i, s) in stats.iter().enumerate() {
        assert_eq!(s.resets, 1, "queue pair {i}: {s:?}");
        assert_eq!((s.errors, s.duplicates), (0, 0), "queue pair {i}: {s:?}");
    }
}

/// Resets from another thread, one after another, while a queue pair on this one keeps I/O
/// in flight (some of it held by the controller): each reset deletes the queue under the
/// polling queue pair, whose poll may be reaping when the aborts land. Every I/O succeeds once,
/// the data is each unit's last version, and no completion is an error or a duplicate.
#[test]
fn fault_resets_from_another_thread_under_io() {
    // RUST_LOG=warn shows each reset and what a failed one met.
    let _ = env_logger::builder().is_test(true).try_init();
    let emu = Emu::new(EmuConfig::default());
    let opts = NvmeOptions {
        // A command may be caught by several resets in a row here; the budget is not what
        // this test is about.
        recovery_retries: u8::MAX,
        ..fast_opts()
    };
    let c = attach(&emu, opts);
    emu.inject(FaultRule::new(Fault::Delay(Duration::from_micros(300))).rate(0.1, None));
    // The queue pair exists before the first reset: creating one during a reset is refused
    // (`Resetting`), as SPDK's qpair allocation is.
    let (created, queue_pair_ready) = std::sync::mpsc::channel();
    let stats = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            // Owned here: a panic before the send drops it, which ends the wait below.
            let created = created;
            let ctrlr = Controller {
                inner: c.inner.clone(),
            };
            let mut w = Workload::on(&emu, ctrlr, 16);
            created.send(()).unwrap();
            w.threaded = true;
            for round in 1..=20 {
                let mut ios: Vec<_> = (0..128).map(|u| (Op::Write, u, round)).collect();
                ios.extend((0..128).map(|u| (Op::Read, u, 0)));
                let st = w.run(&ios);
                assert!(st.iter().all(|s| s.is_success()), "round {round}: {st:?}");
            }
            w.verify_by_reading();
            w.q.stats()
        });
        // A worker that failed before (its sender gone) is reported by `join` below.
        let _ = queue_pair_ready.recv();
        let mut resets = 0u64;
        while !worker.is_finished() {
            c.reset().unwrap();
            resets += 1;
            std::thread::sleep(Duration::from_micros(500));
        }
        let st = worker.join().unwrap();
        assert!(resets >= 2, "{resets} resets");
        st
    });
    let e = emu.stats();
    assert!(stats.resets >= 1, "{stats:?}");
    assert_eq!((stats.errors, stats.duplicates), (0, 0), "{stats:?}");
    // A reset that found the queues not yet recreated after the one before deleted nothing.
    assert!(e.sq_deletions >= 1, "{e:?}");
}

/// Closing a queue pair while it recreates its queues after a reset (its Create I/O CQ or SQ
/// still pending) deletes what the controller has of them and leaks nothing: the controller
/// is left without I/O queues, and the rings' DMA mapping goes with the queue pair (a leaked
/// one would keep the device open after detach).
#[test]
fn fault_close_while_recreating_queues_leaves_nothing_behind() {
    for opc in [admin_opc::CREATE_IO_CQ, admin_opc::CREATE_IO_SQ] {
        let emu = Emu::new(EmuConfig::default());
        emu.set_inline(false);
        let mut w = Workload::new(&emu, fast_opts(), 8);
        w.run(&writes(8, 1));
        let mapped = emu.mapped();
        emu.inject(
            FaultRule::new(Fault::Delay(Duration::from_millis(50)))
                .admin()
                .opcode(opc),
        );
        let mut done = Vec::new();
        w.c.start_reset().unwrap();
        let t0 = Instant::now();
        while emu.stats().delayed == 0 {
            assert!(t0.elapsed() < Duration::from_secs(2), "no queue creation");
            w.emu.step();
            w.q.poll(&mut w.rqs, &mut done, 64);
        }
        assert!(w.q.resetting(), "the queues are still being recreated");
        let _thread = emu.spawn(None);
        let Workload { q, c, buf, .. } = w;
        drop(q);
        assert_eq!(
            emu.io_queues(),
            (0, 0),
            "opcode {opc:#x}: queues left behind"
        );
        assert!(
            emu.mapped() < mapped,
            "opcode {opc:#x}: the rings stay mapped ({} of {mapped})",
            emu.mapped()
        );
        drop(buf);
        c.detach().unwrap();
    }
}

/// `Controller::reset` (an RPC's reset) drives the reset itself and returns when it is over;
/// the queue pair then recreates its queues at its next use and I/O goes on. A reset that
/// cannot finish is reported as the controller's failure.
#[test]
fn emu_blocking_reset_returns_when_done_and_io_goes_on() {
    let emu = Emu::new(EmuConfig {
        ready_delay: Duration::from_millis(20),
        ..EmuConfig::default()
    });
    let mut w = Workload::new(&emu, fast_opts(), 8);
    w.run(&writes(8, 1));
    let t0 = Instant::now();
    w.c.reset().unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(emu.stats().disables, 1);
    assert_eq!(w.run(&writes(8, 2)), vec![IoStatus::Success; 8]);
    assert_eq!(w.q.stats().resets, 1);
    w.verify_acked(0..8, 2);
    emu.set_ready_delays(Duration::MAX, Duration::MAX);
    let e = w.c.reset().unwrap_err();
    assert!(matches!(e, NvmeError::ControllerFatal { .. }), "{e}");
}
