//! Fuzzing the completion path: the emulator writes random completion entries (random CIDs,
//! phase tags, statuses, SQ heads) into a live I/O completion queue while real I/O runs. The
//! driver must never panic, never complete a request twice, and never leave one hanging (the
//! timeout / abort / reset machinery recovers queues the garbage desynchronised).

use std::time::{Duration, Instant};

use pmio::bdev::DriverQueue;
use pmio::request::{Io, Op, Request};
use proptest::prelude::*;

use super::tests::{Buf, attach};
use super::*;
use crate::ctrlr::NvmeOptions;
use crate::qpair::NvmeQpair;

/// One round of a fuzz script: (requests to submit, random CQEs to write, step the emulator).
type Round = (usize, usize, bool);

/// One fuzz case: `script` is a list of (requests to submit, random CQEs to write, whether
/// the emulator processes its queues) rounds, each followed by a poll.
fn run_case(
    seed: u64,
    depth: usize,
    script: &[(usize, usize, bool)],
) -> Result<(crate::QpairStats, EmuStats), TestCaseError> {
    let emu = Emu::new(EmuConfig::default());
    emu.set_inline(false);
    emu.seed(seed);
    let opts = NvmeOptions {
        io_timeout: Duration::from_millis(15),
        abort_timeout: Duration::from_millis(15),
        health_check_interval: Duration::from_millis(1),
        // Room in the CQ for garbage next to real completions.
        io_queue_entries: 128,
        ..NvmeOptions::default()
    };
    let c = attach(&emu, opts);
    let mut q = c.bdev(1).unwrap().open_qpair(depth as u32).unwrap();
    let buf = Buf::new(&c, depth * 4096);
    let mut rqs: Vec<Request> = (0..depth)
        .map(|t| Request {
            tag: t as u16,
            ..Request::default()
        })
        .collect();
    let mut in_flight = vec![false; depth];
    let mut submitted = 0u64;
    let mut completed = 0u64;
    let mut done = Vec::with_capacity(4 * depth);
    let mut reap = |q: &mut NvmeQpair,
                    rqs: &mut [Request],
                    in_flight: &mut [bool],
                    completed: &mut u64|
     -> Result<(), TestCaseError> {
        done.clear();
        q.poll(rqs, &mut done, 4 * depth);
        for &tag in &done {
            let t = usize::from(tag);
            prop_assert!(t < in_flight.len(), "completion of tag {} never used", t);
            prop_assert!(in_flight[t], "tag {} completed twice", t);
            prop_assert!(rqs[t].status != pmio::request::IoStatus::Pending);
            in_flight[t] = false;
            *completed += 1;
        }
        Ok(())
    };
    let mut lba = seed % 1000;
    for &(nsub, nscribble, step) in script {
        let mut tags = Vec::new();
        for t in 0..depth {
            if tags.len() == nsub {
                break;
            }
            if !in_flight[t] {
                lba = (lba * 31 + 7) % 8000;
                rqs[t].prepare(
                    &Io {
                        op: if lba.is_multiple_of(3) {
                            Op::Write
                        } else {
                            Op::Read
                        },
                        lba,
                        nblocks: 8,
                        buf: buf.io(t * 4096, 4096),
                        ..Io::default()
                    },
                    0,
                );
                in_flight[t] = true;
                tags.push(t as u16);
            }
        }
        submitted += tags.len() as u64;
        q.submit(&mut rqs, &tags);
        if step {
            emu.step();
        }
        emu.scribble_cq(q.qid(), nscribble);
        reap(&mut q, &mut rqs, &mut in_flight, &mut completed)?;
    }
    // No more garbage: everything must complete (recovered or failed), once.
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight.iter().any(|&f| f) {
        prop_assert!(
            Instant::now() < deadline,
            "requests hang: {:?} {:?}",
            q.stats(),
            emu.stats()
        );
        emu.step();
        reap(&mut q, &mut rqs, &mut in_flight, &mut completed)?;
    }
    prop_assert_eq!(submitted, completed);
    prop_assert_eq!(q.outstanding(), 0);
    Ok((q.stats(), emu.stats()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random CQ contents never cause a panic, a double completion or a hang.
    #[test]
    fn prop_random_completions_never_complete_twice(
        seed in any::<u64>(),
        depth in 2usize..24,
        script in prop::collection::vec((0usize..8, 0usize..5, any::<bool>()), 1..30),
    ) {
        run_case(seed, depth, &script)?;
    }
}

/// A fixed corpus of cases (the shapes that found bugs while writing the driver's recovery),
/// run by every `cargo test`.
#[test]
fn fuzz_corpus_random_completions() {
    type Case<'a> = (u64, usize, &'a [Round]);
    let corpus: &[Case] = &[
        // Garbage before any real completion.
        (1, 4, &[(4, 4, false), (0, 4, true), (2, 0, true)]),
        // Garbage filling the CQ so real completions backlog.
        (
            2,
            8,
            &[(8, 4, true), (8, 4, true), (8, 4, true), (8, 4, true)],
        ),
        // Queue of 2: every slot contended.
        (
            3,
            2,
            &[(2, 1, true), (2, 1, false), (2, 1, true), (1, 3, true)],
        ),
        // Many rounds, light garbage.
        (4, 16, &[(5, 1, true); 25]),
    ];
    let (mut garbage, mut ignored, mut resets) = (0, 0, 0);
    for &(seed, depth, script) in corpus {
        match run_case(seed, depth, script) {
            Ok((q, e)) => {
                garbage += e.scribbled;
                ignored += q.unknown_completions + q.duplicates;
                resets += q.resets;
            }
            Err(e) => panic!("corpus case seed {seed} depth {depth}: {e}"),
        }
    }
    // The garbage reached the driver, was ignored, and desynchronised queues were recovered.
    assert!(garbage > 20, "{garbage}");
    assert!(ignored > 0);
    assert!(resets > 0);
}
