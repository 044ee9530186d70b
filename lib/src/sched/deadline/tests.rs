//! Deterministic tests of mq-deadline: time is injected, never slept.

use super::*;
use crate::request::IoStatus;
use crate::sched::{Dispatched, SchedRq};

const MS: u64 = 1_000_000;

fn opts() -> DeadlineOptions {
    DeadlineOptions {
        nr_requests: 1024,
        owners: 2,
        max_segments: 128,
        ..DeadlineOptions::default()
    }
}

fn rq(id: u32, op: Op, prio: PrioClass, sector: u64, nblocks: u32) -> SchedRq {
    SchedRq {
        id,
        owner: 0,
        op,
        prio,
        flags: ReqFlags::NONE,
        sector,
        nblocks,
        addr: 0,
    }
}

fn read(id: u32, sector: u64) -> SchedRq {
    rq(id, Op::Read, PrioClass::Be, sector, 8)
}

fn write(id: u32, sector: u64) -> SchedRq {
    rq(id, Op::Write, PrioClass::Be, sector, 8)
}

/// Dispatches one request for owner 0.
fn one(dd: &mut Deadline, now: u64) -> Option<Dispatched> {
    let mut out = Vec::with_capacity(1);
    dd.dispatch_batch(0, now, 1, &mut out);
    out.pop()
}

/// Dispatches and completes one request at a time until nothing comes out.
fn drain(dd: &mut Deadline, now: u64) -> Vec<Dispatched> {
    let mut all = Vec::new();
    while let Some(d) = one(dd, now) {
        dd.complete_batch([(d.id, IoStatus::Success)], |_, _| {})
            .unwrap();
        all.push(d);
    }
    all
}

#[test]
fn defaults_are_linux() {
    let o = DeadlineOptions::default();
    assert_eq!(o.read_expire_ms, 500);
    assert_eq!(o.write_expire_ms, 5000);
    assert_eq!(o.writes_starved, 2);
    assert!(o.front_merges);
    assert_eq!(o.fifo_batch, 16);
    assert_eq!(o.prio_aging_expire_ms, 10_000);
    assert_eq!(o.nr_requests, 256);
    assert_eq!(default_nr_requests(32), 64);
    assert_eq!(default_nr_requests(1024), 256);
    assert_eq!(o.effective_async_depth(), 256);
    o.validate().unwrap();
}

#[test]
fn invalid_options_rejected() {
    let bad = |o: DeadlineOptions| Deadline::new(o).unwrap_err();
    assert!(matches!(
        bad(DeadlineOptions {
            prio_aging_expire_ms: 0,
            ..opts()
        }),
        SchedError::InvalidOption {
            name: "prio_aging_expire",
            ..
        }
    ));
    assert!(matches!(
        bad(DeadlineOptions {
            nr_requests: 0,
            ..opts()
        }),
        SchedError::InvalidOption {
            name: "nr_requests",
            ..
        }
    ));
    assert!(matches!(
        bad(DeadlineOptions {
            block_size: 1000,
            ..opts()
        }),
        SchedError::InvalidOption {
            name: "block_size",
            ..
        }
    ));
    assert!(matches!(
        bad(DeadlineOptions {
            async_depth: 2000,
            ..opts()
        }),
        SchedError::InvalidOption {
            name: "async_depth",
            ..
        }
    ));
}

#[test]
fn tunables_by_name() {
    let mut dd = Deadline::new(opts()).unwrap();
    for name in TUNABLES {
        dd.get_param(name).unwrap();
    }
    assert_eq!(dd.get_param("read_expire"), Ok(500));
    dd.set_param("read_expire", 100).unwrap();
    assert_eq!(dd.get_param("read_expire"), Ok(100));
    assert_eq!(dd.fifo_expire_ns[0], 100 * MS);
    dd.set_param("front_merges", 0).unwrap();
    assert!(!dd.options().front_merges);
    assert!(dd.set_param("front_merges", 2).is_err());
    assert!(matches!(
        dd.set_param("prio_aging_expire", 0),
        Err(SchedError::InvalidOption { .. })
    ));
    assert_eq!(dd.get_param("prio_aging_expire"), Ok(10_000));
    assert_eq!(
        dd.set_param("quantum", 1),
        Err(SchedError::UnknownParam("quantum".into()))
    );
    assert!(dd.set_param("fifo_batch", u64::MAX).is_err());
}

#[test]
fn expired_deadline_served_first() {
    // A read far away, inserted at t=0, then 40 sequential reads at t=100 ms.
    let setup = || {
        let mut dd = Deadline::new(opts()).unwrap();
        dd.insert(&read(999, 100_000), 0).unwrap();
        for i in 0..40 {
            dd.insert(&read(i, u64::from(i) * 16), 100 * MS).unwrap();
        }
        dd
    };
    // Before its deadline the old read waits for the sweep to reach it.
    let mut dd = setup();
    let order: Vec<u32> = drain(&mut dd, 200 * MS).iter().map(|d| d.id).collect();
    assert_eq!(order.last(), Some(&999));
    // After its deadline (500 ms) it goes first once the current batch (16) ends.
    let mut dd = setup();
    let order: Vec<u32> = drain(&mut dd, 550 * MS).iter().map(|d| d.id).collect();
    assert_eq!(&order[..16], &(0..16).collect::<Vec<_>>()[..]);
    assert_eq!(order[16], 999);
    assert_eq!(&order[17..], &(16..40).collect::<Vec<_>>()[..]);
}

#[test]
fn expired_write_taken_from_fifo_head() {
    let mut dd = Deadline::new(DeadlineOptions {
        fifo_batch: 1,
        ..opts()
    })
    .unwrap();
    // Only writes: the FIFO head is taken when expired, else the next by sector.
    dd.insert(&write(1, 5000), 0).unwrap();
    dd.insert(&write(2, 0), MS).unwrap();
    dd.insert(&write(3, 16), MS).unwrap();
    let first = one(&mut dd, 2 * MS).unwrap(); // batch path from position 0
    assert_eq!(first.id, 2);
    let second = one(&mut dd, 5001 * MS).unwrap(); // write 1 expired at 5000 ms
    assert_eq!(second.id, 1);
    let third = one(&mut dd, 5001 * MS).unwrap();
    assert_eq!(third.id, 3);
    dd.complete_batch([1, 2, 3].map(|i| (i, IoStatus::Success)), |_, _| {})
        .unwrap();
    dd.teardown_check().unwrap();
}

#[test]
fn writes_not_starved_beyond_writes_starved() {
    for starved in [0u32, 1, 2, 5] {
        let mut dd = Deadline::new(DeadlineOptions {
            fifo_batch: 1,
            writes_starved: starved,
            ..opts()
        })
        .unwrap();
        for i in 0..60 {
            dd.insert(&read(i, u64::from(i) * 100), 0).unwrap();
        }
        for i in 0..8 {
            dd.insert(&write(100 + i, u64::from(i) * 100), 0).unwrap();
        }
        let order = drain(&mut dd, MS);
        let mut run = 0;
        let mut writes_left = 8;
        let mut runs = Vec::new();
        for d in &order {
            if d.op == Op::Read {
                run += 1;
                if writes_left > 0 {
                    // The very first read comes from the initial batch, before any decision.
                    assert!(
                        run <= starved + 1 + u32::from(runs.is_empty()),
                        "writes_starved {starved}: {run} reads in a row with writes waiting"
                    );
                }
            } else {
                runs.push(run);
                run = 0;
                writes_left -= 1;
            }
        }
        assert_eq!(writes_left, 0);
        // Reads are still preferred: exactly writes_starved reads between writes.
        assert!(
            runs[1..].iter().all(|&r| r == starved),
            "{starved}: {runs:?}"
        );
        dd.teardown_check().unwrap();
    }
}

#[test]
fn rt_before_be_before_idle_and_lower_waits_for_in_flight() {
    let mut dd = Deadline::new(opts()).unwrap();
    let mut id = 0;
    for prio in [PrioClass::Idle, PrioClass::Be, PrioClass::Rt] {
        for _ in 0..3 {
            dd.insert(&rq(id, Op::Read, prio, u64::from(id) * 64, 8), 0)
                .unwrap();
            id += 1;
        }
    }
    let order: Vec<PrioClass> = drain(&mut dd, MS).iter().map(|d| d.prio).collect();
    use PrioClass::*;
    assert_eq!(order, [Rt, Rt, Rt, Be, Be, Be, Idle, Idle, Idle]);

    // A BE request waits while an RT one is in flight.
    dd.insert(&rq(1, Op::Read, Rt, 0, 8), 2 * MS).unwrap();
    dd.insert(&rq(2, Op::Write, Be, 64, 8), 2 * MS).unwrap();
    let rt = one(&mut dd, 3 * MS).unwrap();
    assert_eq!(rt.id, 1);
    assert_eq!(
        one(&mut dd, 4 * MS),
        None,
        "BE dispatched while RT in flight"
    );
    assert_eq!(dd.queued(Rt), 1);
    dd.complete_batch([(1, IoStatus::Success)], |_, _| {})
        .unwrap();
    assert_eq!(one(&mut dd, 5 * MS).map(|d| d.id), Some(2));
    dd.complete_batch([(2, IoStatus::Success)], |_, _| {})
        .unwrap();
    dd.teardown_check().unwrap();
}

#[test]
fn idle_flooded_by_rt_dispatched_after_prio_aging_expire() {
    let mut dd = Deadline::new(opts()).unwrap();
    dd.insert(&rq(0, Op::Read, PrioClass::Idle, 1 << 20, 8), 0)
        .unwrap();
    let mut next_id = 1u32;
    let mut free: Vec<u32> = Vec::new();
    let mut idle_at = None;
    // Every 100 ms two RT reads arrive and one request is dispatched and completed.
    for step in 0..200u64 {
        let now = step * 100 * MS;
        for _ in 0..2 {
            let id = free.pop().unwrap_or_else(|| {
                next_id += 1;
                next_id - 1
            });
            dd.insert(&rq(id, Op::Read, PrioClass::Rt, u64::from(id) * 8, 8), now)
                .unwrap();
        }
        let d = one(&mut dd, now).unwrap();
        dd.complete_batch([(d.id, IoStatus::Success)], |_, _| {})
            .unwrap();
        if d.prio == PrioClass::Idle {
            idle_at = Some(now);
            break;
        }
        free.push(d.id);
    }
    assert_eq!(
        idle_at,
        Some(10_000 * MS),
        "IDLE must age after exactly 10 s"
    );
    assert!(dd.queued(PrioClass::Rt) > 0, "RT was still queued");

    // With a short aging time the IDLE request goes as soon as it is old enough.
    let mut dd = Deadline::new(DeadlineOptions {
        prio_aging_expire_ms: 50,
        ..opts()
    })
    .unwrap();
    dd.insert(&rq(0, Op::Write, PrioClass::Idle, 0, 8), 0)
        .unwrap();
    dd.insert(&rq(1, Op::Read, PrioClass::Rt, 64, 8), 0)
        .unwrap();
    dd.insert(&rq(2, Op::Read, PrioClass::Rt, 128, 8), 0)
        .unwrap();
    assert_eq!(one(&mut dd, 10 * MS).map(|d| d.id), Some(1));
    assert_eq!(one(&mut dd, 60 * MS).map(|d| d.id), Some(0));
}

#[test]
fn sequential_batches_up_to_fifo_batch() {
    for batch in [1u32, 4, 16] {
        let mut dd = Deadline::new(DeadlineOptions {
            writes_starved: 1,
            fifo_batch: batch,
            ..opts()
        })
        .unwrap();
        for i in 0..40 {
            dd.insert(&read(i, u64::from(i) * 8 * 3), 0).unwrap();
            dd.insert(&write(100 + i, u64::from(i) * 8 * 3), 0).unwrap();
        }
        let order = drain(&mut dd, MS);
        assert_eq!(order.len(), 80);
        // Direction runs are exactly fifo_batch long while both directions have requests
        // (writes_starved 1 alternates directions at each new batch), except the first: the
        // initial batch continues from position 0, then reads are preferred once more.
        let mut runs = Vec::new();
        let mut cur = (order[0].op, 0);
        for d in &order {
            if d.op == cur.0 {
                cur.1 += 1;
            } else {
                runs.push(cur.1);
                cur = (d.op, 1);
            }
        }
        runs.push(cur.1);
        assert_eq!(runs[0], 2 * batch, "fifo_batch {batch}: {runs:?}");
        // Reads run out one batch early (they had a double first run); before that, runs
        // alternate with exactly fifo_batch requests each.
        let full = (80 / batch as usize) - 3;
        assert!(
            runs[1..full].iter().all(|&r| r == batch),
            "fifo_batch {batch}: {runs:?}"
        );
        // Within a batch, sectors ascend.
        for w in order.windows(2) {
            if w[0].op == w[1].op && w[1].sector < w[0].sector {
                // Only allowed at a batch boundary (restart from the FIFO).
                assert_eq!(w[1].id % 100, 0, "fifo_batch {batch}: sector went back");
            }
        }
    }
}

#[test]
fn merges_back_and_front_complete_every_member_once() {
    let mut dd = Deadline::new(opts()).unwrap();
    assert_eq!(dd.insert(&read(1, 8), 0), Ok(Inserted::Queued));
    assert_eq!(
        dd.insert(&read(2, 16), MS),
        Ok(Inserted::Merged { into: 1 })
    );
    assert_eq!(
        dd.insert(&read(3, 0), 2 * MS),
        Ok(Inserted::Merged { into: 1 })
    );
    // Not merged: other class, other direction, not adjacent, FUA.
    assert_eq!(
        dd.insert(&rq(4, Op::Read, PrioClass::Rt, 24, 8), 0),
        Ok(Inserted::Queued)
    );
    assert_eq!(dd.insert(&write(5, 24), 0), Ok(Inserted::Queued));
    assert_eq!(dd.insert(&read(6, 40), 0), Ok(Inserted::Queued));
    let mut fua = read(7, 48);
    fua.flags = ReqFlags::FUA;
    assert_eq!(dd.insert(&fua, 0), Ok(Inserted::Queued));
    let be = dd.stats(PrioClass::Be);
    assert_eq!((be.inserted, be.merged), (6, 2));

    // RT first; BE waits while it is in flight.
    let rt = one(&mut dd, 3 * MS).unwrap();
    assert_eq!(rt.id, 4);
    assert_eq!(one(&mut dd, 3 * MS), None);
    dd.complete_batch([(4, IoStatus::Success)], |_, _| {})
        .unwrap();
    let mut out = Vec::new();
    dd.dispatch_batch(0, 3 * MS, 16, &mut out);
    assert_eq!(out.len(), 4);
    let m = out.iter().find(|d| d.id == 1).unwrap();
    assert_eq!((m.sector, m.nblocks, m.nr_members), (0, 24, 3));
    assert_eq!(dd.members(1).collect::<Vec<_>>(), [3, 1, 2]);
    // A merged member is not completed on its own.
    assert_eq!(
        dd.complete_batch([(2, IoStatus::Success)], |_, _| {}),
        Err(SchedError::NotInFlight { id: 2 })
    );
    let mut seen = Vec::new();
    let eio = IoStatus::Errno(libc::EIO);
    let n = dd
        .complete_batch(
            out.iter()
                .map(|d| (d.id, if d.id == 1 { eio } else { IoStatus::Success })),
            |id, st| seen.push((id, st)),
        )
        .unwrap();
    assert_eq!(n, 6);
    seen.sort_by_key(|&(id, _)| id);
    assert_eq!(
        seen,
        [
            (1, eio),
            (2, eio),
            (3, eio),
            (5, IoStatus::Success),
            (6, IoStatus::Success),
            (7, IoStatus::Success)
        ]
    );
    // Completing again is refused.
    assert!(
        dd.complete_batch([(1, IoStatus::Success)], |_, _| {})
            .is_err()
    );
    let be = dd.stats(PrioClass::Be);
    assert_eq!(
        (be.inserted, be.dispatched, be.completed, be.queued),
        (6, 4, 6, 0)
    );
    dd.teardown_check().unwrap();

    // Member ids are free again once completed.
    assert_eq!(dd.insert(&read(2, 0), 10 * MS), Ok(Inserted::Queued));
    drain(&mut dd, 11 * MS);
}

#[test]
fn requests_of_different_owners_do_not_merge() {
    let mut dd = Deadline::new(opts()).unwrap();
    dd.insert(&read(1, 0), 0).unwrap();
    let mut r = read(2, 8);
    r.owner = 1;
    assert_eq!(dd.insert(&r, 0), Ok(Inserted::Queued));
    assert_eq!(dd.insert(&read(3, 8 + 8), 0), Ok(Inserted::Queued));
    assert_eq!(dd.stats(PrioClass::Be).merged, 0);
}

#[test]
fn front_merges_off_and_limits() {
    let mut dd = Deadline::new(DeadlineOptions {
        front_merges: false,
        max_transfer_blocks: 16,
        ..opts()
    })
    .unwrap();
    dd.insert(&read(1, 8), 0).unwrap();
    assert_eq!(dd.insert(&read(2, 0), 0), Ok(Inserted::Queued));
    assert_eq!(dd.insert(&read(3, 16), 0), Ok(Inserted::Merged { into: 1 }));
    // 1 now carries 16 blocks: the transfer limit stops further merges.
    assert_eq!(dd.insert(&read(4, 24), 0), Ok(Inserted::Queued));
    drain(&mut dd, MS);

    // One segment: only buffers contiguous in memory merge.
    let mut dd = Deadline::new(DeadlineOptions {
        max_segments: 1,
        block_size: 512,
        ..opts()
    })
    .unwrap();
    let with_addr = |id, sector, addr| SchedRq {
        addr,
        ..read(id, sector)
    };
    dd.insert(&with_addr(1, 0, 0x10000), 0).unwrap();
    assert_eq!(
        dd.insert(&with_addr(2, 8, 0x10000 + 4096), 0),
        Ok(Inserted::Merged { into: 1 })
    );
    assert_eq!(
        dd.insert(&with_addr(3, 16, 0x90000), 0),
        Ok(Inserted::Queued)
    );
    let all = drain(&mut dd, MS);
    let m = all.iter().find(|d| d.id == 1).unwrap();
    assert_eq!((m.addr, m.nblocks, m.nsegs), (0x10000, 16, 1));
}

#[test]
fn merge_joins_two_queued_and_inherits_earlier_fifo_time() {
    let mut dd = Deadline::new(opts()).unwrap();
    dd.insert(&read(10, 16), 0).unwrap(); // upper, oldest
    dd.insert(&read(11, 1000), 5 * MS).unwrap();
    dd.insert(&read(12, 0), 10 * MS).unwrap(); // lower
    // 13 fills the gap: back-merges into 12, then 12 absorbs 10.
    assert_eq!(
        dd.insert(&read(13, 8), 20 * MS),
        Ok(Inserted::Merged { into: 12 })
    );
    assert_eq!(dd.stats(PrioClass::Be).merged, 2);
    let s = dd.slots[12];
    assert_eq!((s.sector, s.nblocks, s.nr_members), (0, 24, 3));
    assert_eq!(s.insert_ns, 0);
    assert_eq!(s.deadline_ns, 500 * MS);
    let pp = &dd.prios[PrioClass::Be as usize];
    assert_eq!(pp.fifo_head[0], 12, "12 took 10's place at the FIFO head");
    assert_eq!(dd.slots[12].fifo_next, 11);
    assert_eq!(pp.sort[0].len(), 2);
    assert_eq!(dd.pending(), 2);
    let all = drain(&mut dd, MS);
    assert_eq!(all.len(), 2);
    assert_eq!(dd.stats(PrioClass::Be).completed, 4);
    dd.teardown_check().unwrap();
}

#[test]
fn requeue_counted_once_and_goes_first() {
    let mut dd = Deadline::new(opts()).unwrap();
    dd.insert(&read(1, 0), 0).unwrap();
    dd.insert(&read(2, 8000), 0).unwrap();
    let d = one(&mut dd, MS).unwrap();
    assert_eq!(d.id, 1);
    dd.requeue(1).unwrap();
    assert_eq!(dd.requeue(1), Err(SchedError::NotInFlight { id: 1 }));
    assert_eq!(dd.requeue(2), Err(SchedError::NotInFlight { id: 2 }));
    // Completing a requeued request is refused until it is dispatched again.
    assert!(
        dd.complete_batch([(1, IoStatus::Success)], |_, _| {})
            .is_err()
    );
    dd.insert(&rq(3, Op::Read, PrioClass::Rt, 0, 8), 2 * MS)
        .unwrap();
    assert_eq!(one(&mut dd, 3 * MS).map(|d| d.id), Some(1));
    let be = dd.stats(PrioClass::Be);
    assert_eq!((be.inserted, be.dispatched, be.queued), (2, 1, 2));
    let rest = drain(&mut dd, 4 * MS);
    assert_eq!(rest.iter().map(|d| d.id).collect::<Vec<_>>(), [3, 2]);
    dd.complete_batch([(1, IoStatus::Success)], |_, _| {})
        .unwrap();
    assert_eq!(drain(&mut dd, 5 * MS).len(), 0);
    let be = dd.stats(PrioClass::Be);
    assert_eq!(
        (be.inserted, be.dispatched, be.completed, be.queued),
        (2, 2, 2, 0)
    );
    dd.teardown_check().unwrap();
}

#[test]
fn head_insert_goes_first() {
    let mut dd = Deadline::new(opts()).unwrap();
    dd.insert(&rq(1, Op::Read, PrioClass::Rt, 0, 8), 0).unwrap();
    let mut h = rq(2, Op::Flush, PrioClass::Idle, 0, 0);
    h.flags = ReqFlags::HEAD;
    assert_eq!(dd.insert(&h, 0), Ok(Inserted::Head));
    let order: Vec<u32> = drain(&mut dd, MS).iter().map(|d| d.id).collect();
    assert_eq!(order, [2, 1]);
}

#[test]
fn teardown_check_reports_queued_requests() {
    let mut dd = Deadline::new(opts()).unwrap();
    dd.insert(&rq(1, Op::Write, PrioClass::Idle, 0, 8), 0)
        .unwrap();
    assert_eq!(
        dd.teardown_check(),
        Err(SchedError::NotIdle {
            prio: PrioClass::Idle,
            queued: 1
        })
    );
    let d = one(&mut dd, MS).unwrap();
    // In flight still counts.
    assert!(dd.teardown_check().is_err());
    dd.complete_batch([(d.id, IoStatus::Success)], |_, _| {})
        .unwrap();
    dd.teardown_check().unwrap();
}

#[test]
fn bad_ids_and_owners_rejected() {
    let mut dd = Deadline::new(opts()).unwrap();
    assert_eq!(
        dd.insert(&read(5000, 0), 0),
        Err(SchedError::BadId { id: 5000 })
    );
    dd.insert(&read(1, 0), 0).unwrap();
    assert_eq!(dd.insert(&read(1, 64), 0), Err(SchedError::Busy { id: 1 }));
    let mut r = read(2, 64);
    r.owner = 2;
    assert!(matches!(dd.insert(&r, 0), Err(SchedError::BadOwner { .. })));
    let d = one(&mut dd, MS).unwrap();
    assert_eq!(dd.insert(&read(1, 64), 0), Err(SchedError::Busy { id: 1 }));
    assert_eq!(
        dd.complete_batch([(7000, IoStatus::Success)], |_, _| {}),
        Err(SchedError::BadId { id: 7000 })
    );
    dd.complete_batch([(d.id, IoStatus::Success)], |_, _| {})
        .unwrap();
}

/// A counted burst is taken only when mq-deadline would hand it out whole at once: nothing
/// waiting, no higher class queued or in flight; the counters move as insert + dispatch.
#[test]
fn counted_burst_only_when_nothing_waits_or_outranks_it() {
    const NONE: [u64; 3] = [0; 3];
    let mut dd = Deadline::new(opts()).unwrap();
    assert!(!dd.insert_dispatch_counted(PrioClass::Be, 0, [None; 2], NONE));
    assert!(dd.insert_dispatch_counted(PrioClass::Be, 3, [Some(808), None], NONE));
    let s = dd.stats(PrioClass::Be);
    assert_eq!((s.inserted, s.dispatched, s.queued), (3, 3, 3));
    // BE in flight does not hold RT back; RT in flight holds BE and IDLE back.
    assert!(dd.insert_dispatch_counted(PrioClass::Rt, 1, [None, Some(16)], NONE));
    assert!(!dd.insert_dispatch_counted(PrioClass::Be, 1, [None; 2], NONE));
    assert!(!dd.insert_dispatch_counted(PrioClass::Idle, 1, [None; 2], NONE));
    // A held-back RT completion reported with the next call counts first: RT is idle again
    // and the BE burst goes out.
    assert!(dd.insert_dispatch_counted(PrioClass::Be, 2, [None; 2], [1, 0, 0]));
    assert_eq!(dd.queued(PrioClass::Rt), 0);
    assert_eq!(dd.stats(PrioClass::Rt).completed, 1);
    // Something queued: the full path decides (deadlines, order, merges); held-back
    // completions still count.
    dd.insert(&read(9, 4000), 5).unwrap();
    assert!(!dd.insert_dispatch_counted(PrioClass::Be, 1, [None; 2], [0, 2, 0]));
    assert_eq!(dd.stats(PrioClass::Be).completed, 2);
    // The burst's end is where the elevator continues (`latest_pos`): 4000 ≥ 808.
    let d = one(&mut dd, 6).unwrap();
    assert_eq!(d.id, 9);
    dd.complete_batch([(9, IoStatus::Success)], |_, _| {})
        .unwrap();
    assert!(
        dd.teardown_check().is_err(),
        "counted requests still in flight"
    );
    dd.complete_counted([0, 3, 0]);
    assert_drained(|p| dd.stats(p));
    dd.teardown_check().unwrap();
}

#[test]
fn other_owners_requests_go_to_their_ready_list() {
    let mut dd = Deadline::new(opts()).unwrap();
    let mut r1 = read(1, 0);
    r1.owner = 1;
    dd.insert(&r1, 0).unwrap();
    dd.insert(&read(2, 8000), 0).unwrap();
    let mut out = Vec::new();
    // Owner 0's dispatch picks request 1 first (lowest sector) and parks it for owner 1.
    assert_eq!(dd.dispatch_batch(0, MS, 1, &mut out), 0);
    assert!(dd.has_work_for(1));
    assert_eq!(dd.dispatch_batch(0, MS, 4, &mut out), 1);
    assert_eq!(out[0].id, 2);
    assert_eq!(dd.dispatch_batch(1, MS, 4, &mut out), 1);
    assert_eq!((out[1].id, out[1].owner), (1, 1));
    assert_eq!(dd.stats(PrioClass::Be).dispatched, 2);
    dd.complete_batch(out.iter().map(|d| (d.id, IoStatus::Success)), |_, _| {})
        .unwrap();
    dd.teardown_check().unwrap();
}

mod props {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Step {
        Insert {
            prio: u8,
            write: bool,
            slot: u8,
            nblocks: u8,
            head: bool,
            owner: u16,
        },
        Dispatch {
            owner: u16,
            max: u8,
        },
        Complete {
            n: u8,
            fail: bool,
        },
        Requeue {
            n: u8,
        },
        Tick {
            ms: u16,
        },
        /// A burst of `n` requests of class `prio` handed out by count.
        Counted {
            prio: u8,
            n: u8,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u8..3, any::<bool>(), 0u8..24, 1u8..3, prop::bool::weighted(0.05), 0u16..2)
                .prop_map(|(prio, write, slot, nblocks, head, owner)| Step::Insert {
                    prio, write, slot, nblocks: nblocks * 4, head, owner
                }),
            2 => (0u16..2, 1u8..8).prop_map(|(owner, max)| Step::Dispatch { owner, max }),
            2 => (1u8..6, any::<bool>()).prop_map(|(n, fail)| Step::Complete { n, fail }),
            1 => (1u8..3).prop_map(|n| Step::Requeue { n }),
            1 => (1u16..3000).prop_map(|ms| Step::Tick { ms }),
            1 => (0u8..3, 1u8..5).prop_map(|(prio, n)| Step::Counted { prio, n }),
        ]
    }

    #[derive(Default)]
    struct Model {
        inserted: [u64; 3],
        completed: [u64; 3],
        /// Per id: in the scheduler (queued, merged or waiting in a ready list).
        in_sched: Vec<bool>,
        /// Per id: times completed.
        done: Vec<u32>,
        /// Per id: times handed out minus times requeued.
        handed: Vec<i32>,
        /// Per id: the life (insert count) it belongs to, to check completion per life.
        lives: Vec<u32>,
        prio: Vec<usize>,
        /// Carriers handed out and not completed.
        flight: Vec<Dispatched>,
        /// Requests handed out by count and not completed.
        counted: Vec<u32>,
        /// Counted completions held back, reported with the next counted call.
        deferred: [u64; 3],
    }

    fn check(dd: &Deadline, m: &Model) -> Result<(), TestCaseError> {
        for p in PrioClass::ALL {
            let s = dd.stats(p);
            let i = p as usize;
            prop_assert_eq!(s.inserted, m.inserted[i]);
            prop_assert_eq!(s.completed, m.completed[i]);
            prop_assert!(s.completed <= s.inserted);
            prop_assert_eq!(s.queued, m.inserted[i] - m.completed[i]);
            prop_assert!(s.dispatched + s.merged <= s.inserted);
        }
        Ok(())
    }

    fn take(
        dd: &mut Deadline,
        m: &mut Model,
        owner: u16,
        now: u64,
        max: usize,
    ) -> Result<(), TestCaseError> {
        let mut out = Vec::with_capacity(max);
        let n = dd.dispatch_batch(owner, now, max, &mut out);
        prop_assert_eq!(n, out.len());
        prop_assert!(n <= max);
        for d in out {
            prop_assert_eq!(d.owner, owner);
            let members: Vec<u32> = dd.members(d.id).collect();
            prop_assert_eq!(members.len() as u32, d.nr_members);
            prop_assert!(members.contains(&d.id));
            for &mid in &members {
                prop_assert!(m.in_sched[mid as usize], "member {} dispatched twice", mid);
                prop_assert_eq!(m.prio[mid as usize], d.prio as usize);
                m.in_sched[mid as usize] = false;
                m.handed[mid as usize] += 1;
                prop_assert_eq!(m.handed[mid as usize], 1);
            }
            m.flight.push(d);
        }
        Ok(())
    }

    fn complete(
        dd: &mut Deadline,
        m: &mut Model,
        n: usize,
        fail: bool,
    ) -> Result<(), TestCaseError> {
        // Requests handed out by count complete by count, with the carriers.
        let k = n.min(m.counted.len());
        let mut counts = [0u64; 3];
        for id in m.counted.drain(..k) {
            let i = id as usize;
            prop_assert_eq!(m.handed[i], 1);
            m.done[i] += 1;
            prop_assert_eq!(m.done[i], m.lives[i]);
            counts[m.prio[i]] += 1;
            m.handed[i] = 0;
        }
        if fail {
            // Held back (the model's `fail` doubles as "report later").
            for (d, c) in m.deferred.iter_mut().zip(counts) {
                *d += c;
            }
        } else {
            dd.complete_counted(counts);
            for (d, c) in m.completed.iter_mut().zip(counts) {
                *d += c;
            }
        }
        let n = n.min(m.flight.len());
        let batch: Vec<Dispatched> = m.flight.drain(..n).collect();
        let status = if fail {
            IoStatus::Errno(libc::EIO)
        } else {
            IoStatus::Success
        };
        let mut seen = Vec::new();
        let total = dd
            .complete_batch(batch.iter().map(|d| (d.id, status)), |id, st| {
                seen.push((id, st))
            })
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let expect: u32 = batch.iter().map(|d| d.nr_members).sum();
        prop_assert_eq!(total, expect as usize);
        for (id, st) in seen {
            prop_assert_eq!(st, status);
            let i = id as usize;
            prop_assert_eq!(m.handed[i], 1);
            m.done[i] += 1;
            prop_assert_eq!(
                m.done[i],
                m.lives[i],
                "id {} completed twice in one life",
                id
            );
            m.completed[m.prio[i]] += 1;
            m.handed[i] = 0;
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn prop_counters_and_exactly_once(steps in prop::collection::vec(step(), 1..200)) {
            const NR: u32 = 48;
            let mut dd = Deadline::new(DeadlineOptions {
                nr_requests: NR,
                owners: 2,
                max_segments: 4,
                max_transfer_blocks: 32,
                fifo_batch: 4,
                prio_aging_expire_ms: 2000,
                ..DeadlineOptions::default()
            }).unwrap();
            let mut m = Model {
                in_sched: vec![false; NR as usize],
                done: vec![0; NR as usize],
                handed: vec![0; NR as usize],
                lives: vec![0; NR as usize],
                prio: vec![0; NR as usize],
                ..Model::default()
            };
            let mut now = 0u64;
            for s in steps {
                match s {
                    Step::Insert { prio, write, slot, nblocks, head, owner } => {
                        // A free id: not in the scheduler and not handed out.
                        let Some(id) = (0..NR).find(|&i| !m.in_sched[i as usize] && m.handed[i as usize] == 0) else {
                            continue;
                        };
                        let p = PrioClass::ALL[prio as usize];
                        let r = SchedRq {
                            id, owner,
                            op: if write { Op::Write } else { Op::Read },
                            prio: p,
                            flags: if head { ReqFlags::HEAD } else { ReqFlags::NONE },
                            sector: u64::from(slot) * 4,
                            nblocks: u32::from(nblocks),
                            addr: 0,
                        };
                        dd.insert(&r, now).map_err(|e| TestCaseError::fail(e.to_string()))?;
                        m.inserted[p as usize] += 1;
                        m.in_sched[id as usize] = true;
                        m.lives[id as usize] += 1;
                        m.prio[id as usize] = p as usize;
                    }
                    Step::Dispatch { owner, max } => take(&mut dd, &mut m, owner, now, max as usize)?,
                    Step::Complete { n, fail } => complete(&mut dd, &mut m, n as usize, fail)?,
                    Step::Requeue { n } => {
                        for _ in 0..n {
                            let Some(d) = m.flight.pop() else { break };
                            let members: Vec<u32> = dd.members(d.id).collect();
                            dd.requeue(d.id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                            for mid in members {
                                m.in_sched[mid as usize] = true;
                                m.handed[mid as usize] -= 1;
                            }
                        }
                    }
                    Step::Tick { ms } => now += u64::from(ms) * MS,
                    Step::Counted { prio, n } => {
                        let ids: Vec<u32> = (0..NR)
                            .filter(|&i| !m.in_sched[i as usize] && m.handed[i as usize] == 0)
                            .take(usize::from(n))
                            .collect();
                        if ids.is_empty() {
                            continue;
                        }
                        let p = prio as usize;
                        // Held-back completions count first, whatever the answer.
                        let deferred = std::mem::take(&mut m.deferred);
                        for (c, d) in m.completed.iter_mut().zip(deferred) {
                            *c += d;
                        }
                        // Taken only when nothing waits and no higher class is busy.
                        let idle = !m.in_sched.iter().any(|&q| q)
                            && (0..p).all(|h| m.inserted[h] == m.completed[h]);
                        let taken = dd.insert_dispatch_counted(
                            PrioClass::ALL[p],
                            ids.len() as u32,
                            [Some(u64::from(n) * 4), None],
                            deferred,
                        );
                        prop_assert_eq!(taken, idle);
                        if taken {
                            for id in ids {
                                let i = id as usize;
                                m.inserted[p] += 1;
                                m.lives[i] += 1;
                                m.prio[i] = p;
                                m.handed[i] = 1;
                                m.counted.push(id);
                            }
                        }
                    }
                }
                check(&dd, &m)?;
            }
            // Drain: everything inserted is dispatched and completed exactly once.
            let mut rounds = 0;
            while m.in_sched.iter().any(|&q| q) || !m.flight.is_empty() || !m.counted.is_empty() {
                now += 100 * MS;
                take(&mut dd, &mut m, 0, now, 8)?;
                take(&mut dd, &mut m, 1, now, 8)?;
                let n = m.flight.len().max(m.counted.len());
                complete(&mut dd, &mut m, n, false)?;
                check(&dd, &m)?;
                rounds += 1;
                prop_assert!(rounds < 1000, "drain does not progress");
            }
            for i in 0..NR as usize {
                prop_assert_eq!(m.done[i], m.lives[i]);
            }
            let deferred = std::mem::take(&mut m.deferred);
            dd.complete_counted(deferred);
            prop_assert!(dd.teardown_check().is_ok());
            prop_assert!(!dd.has_work());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Taking sequential runs at once dispatches exactly what single steps would.
        #[test]
        fn prop_run_fast_path_matches_single_steps(
            steps in prop::collection::vec(step(), 1..200)
        ) {
            const NR: u32 = 48;
            let o = DeadlineOptions {
                nr_requests: NR,
                owners: 2,
                max_segments: 4,
                fifo_batch: 6,
                prio_aging_expire_ms: 2000,
                ..DeadlineOptions::default()
            };
            let mut fast = Deadline::new(o.clone()).unwrap();
            let mut slow = Deadline::new(o).unwrap();
            slow.fast_runs = false;
            let mut flight: Vec<u32> = Vec::new();
            let mut used = vec![false; NR as usize];
            let mut now = 0u64;
            for s in steps {
                match s {
                    Step::Insert { prio, write, slot, nblocks, head, owner } => {
                        let Some(id) = (0..NR).find(|&i| !used[i as usize]) else { continue };
                        let r = SchedRq {
                            id, owner,
                            op: if write { Op::Write } else { Op::Read },
                            prio: PrioClass::ALL[prio as usize],
                            flags: if head { ReqFlags::HEAD } else { ReqFlags::NONE },
                            sector: u64::from(slot) * 4,
                            nblocks: u32::from(nblocks),
                            addr: 0,
                        };
                        prop_assert_eq!(fast.insert(&r, now), slow.insert(&r, now));
                        used[id as usize] = true;
                    }
                    Step::Dispatch { owner, max } => {
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        fast.dispatch_batch(owner, now, max as usize, &mut a);
                        slow.dispatch_batch(owner, now, max as usize, &mut b);
                        prop_assert_eq!(&a, &b);
                        flight.extend(a.iter().map(|d| d.id));
                    }
                    Step::Complete { n, .. } | Step::Requeue { n } => {
                        let n = (n as usize).min(flight.len());
                        for id in flight.drain(..n) {
                            let mut members = Vec::new();
                            fast.complete_batch([(id, IoStatus::Success)], |m, _| members.push(m)).unwrap();
                            slow.complete_batch([(id, IoStatus::Success)], |_, _| {}).unwrap();
                            for m in members {
                                used[m as usize] = false;
                            }
                        }
                    }
                    Step::Tick { ms } => now += u64::from(ms) * MS,
                    // Counted bursts skip the trees altogether (the slow twin refuses them).
                    Step::Counted { .. } => {}
                }
            }
            for p in PrioClass::ALL {
                prop_assert_eq!(fast.stats(p), slow.stats(p));
            }
        }
    }
}

/// Linux's priority experiment (Bart Van Assche, 2021: scsi_debug with 1 ms delay and 16
/// commands, RT and BE jobs; aging 100 s → 11000 vs 40 IOPS, aging 0 → 6712 vs 6796) on a
/// simulated device: 16 commands at once, each completing 1 ms after dispatch; an RT and a BE
/// job keep 32 requests each outstanding and resubmit at completion. Returns IOPS (rt, be)
/// over `seconds` of simulated time.
fn simulate_rt_vs_be(aging_ms: u64, seconds: u64) -> (u64, u64) {
    const DEV_DEPTH: usize = 16;
    const JOB_DEPTH: u32 = 32;
    const LAT: u64 = MS;
    let mut dd = Deadline::new(DeadlineOptions {
        nr_requests: 2 * JOB_DEPTH,
        owners: 1,
        prio_aging_expire_ms: aging_ms,
        ..DeadlineOptions::default()
    })
    .unwrap();
    let mut seed = 0x2545_f491u32;
    let mut sector = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        u64::from(seed % (1 << 20)) * 8
    };
    // Job 0 is RT (ids 0..32), job 1 BE (ids 32..64): all requests start queued.
    for id in 0..2 * JOB_DEPTH {
        let prio = if id < JOB_DEPTH {
            PrioClass::Rt
        } else {
            PrioClass::Be
        };
        dd.insert(&rq(id, Op::Read, prio, sector(), 8), 0).unwrap();
    }
    // In flight: (completion time, id), at most DEV_DEPTH.
    let mut flight: VecDeque<(u64, u32)> = VecDeque::new();
    let mut done = [0u64; 2];
    let end = seconds * 1000 * MS;
    let mut now = 0;
    let mut out = Vec::with_capacity(DEV_DEPTH);
    while now < end {
        out.clear();
        dd.dispatch_batch(0, now, DEV_DEPTH - flight.len(), &mut out);
        for d in &out {
            flight.push_back((now + LAT, d.id));
        }
        // Next event: the oldest completion (dispatch order = completion order).
        let Some((t, id)) = flight.pop_front() else {
            break;
        };
        now = t;
        dd.complete_batch([(id, IoStatus::Success)], |_, _| {})
            .unwrap();
        let job = (id >= JOB_DEPTH) as usize;
        done[job] += 1;
        let prio = if job == 0 {
            PrioClass::Rt
        } else {
            PrioClass::Be
        };
        dd.insert(&rq(id, Op::Read, prio, sector(), 8), now)
            .unwrap();
    }
    (done[0] / seconds, done[1] / seconds)
}

#[test]
fn priority_rt_vs_be_with_long_and_short_aging() {
    let (rt, be) = simulate_rt_vs_be(100_000, 10);
    eprintln!("aging 100 s: RT {rt} IOPS, BE {be} IOPS");
    // The device does 16 per ms at most.
    assert!(rt + be <= 16_000 && rt + be > 15_000, "{rt} + {be}");
    assert!(
        rt > 15_000 && be < 100,
        "RT must own the device: {rt} vs {be}"
    );
    let (rt, be) = simulate_rt_vs_be(1, 10);
    eprintln!("aging 1 ms: RT {rt} IOPS, BE {be} IOPS");
    assert!(rt + be > 15_000, "{rt} + {be}");
    assert!(
        be > 4_000,
        "BE must get a real share with short aging: {rt} vs {be}"
    );
}
