//! Unit tests, regression tests (Linux's sbitmap bug history) and property tests of the sbitmap.

use super::*;

fn map(depth: u32) -> Sbitmap {
    Sbitmap::new(depth, SbitmapOptions::default())
}

fn rr_map(depth: u32) -> Sbitmap {
    Sbitmap::new(depth, SbitmapOptions { round_robin: true })
}

/// Tags of a `(mask, offset)` batch.
fn tags_of(mask: u64, offset: u32) -> Vec<u16> {
    (0..64)
        .filter(|i| mask & (1u64 << i) != 0)
        .map(|i| (offset + i) as u16)
        .collect()
}

/// Takes every tag with single gets; returns them in order handed out.
fn drain(sb: &Sbitmap, hint: &mut AllocHint) -> Vec<u32> {
    let mut got = Vec::new();
    while let Some(t) = sb.get(hint) {
        got.push(t);
        assert!(got.len() <= sb.depth() as usize, "more tags than depth");
    }
    got
}

// ---------------------------------------------------------------------------------------------
// Word size rule

#[test]
fn shift_rule_examples() {
    // (depth, bits per word): Linux's examples plus the batch guarantee.
    for (depth, bpw) in [
        (0, 64),
        (1, 64),
        (3, 64),
        (4, 1),
        (7, 1),
        (8, 2),
        (32, 8),
        (64, 16),
        (127, 16),
        (128, 32),
        (255, 32),
        (256, 64),
        (1023, 64),
        (1024, 64),
        (65536, 64),
    ] {
        assert_eq!(1u32 << calculate_shift(depth), bpw, "depth {depth}");
        assert_eq!(map(depth).bits_per_word(), bpw, "depth {depth}");
    }
}

#[test]
fn shift_rule_holds_for_every_depth() {
    for depth in 0..=4096u32 {
        let shift = calculate_shift(depth);
        let bpw = 1u32 << shift;
        assert!(shift <= 6, "depth {depth}");
        let words = depth.div_ceil(bpw);
        if depth >= 4 {
            // At least 4 words where depth allows.
            assert!(
                words >= 4 || bpw >= BATCH_BITS,
                "depth {depth}: {words} words"
            );
            // And not needlessly small: doubling the word would leave fewer than 4 words.
            if shift < 6 {
                assert!(4 * 2 * bpw > depth || bpw < BATCH_BITS, "depth {depth}");
            }
        } else {
            assert_eq!(bpw, 64, "depth {depth}");
        }
        if depth >= BATCH_WORD_MIN_DEPTH {
            assert!(bpw >= BATCH_BITS, "depth {depth}: {bpw}-bit words");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Basics

#[test]
fn sbitmap_is_send_sync_and_hint_is_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Sbitmap>();
    send::<AllocHint>();
}

#[test]
fn word_and_cleared_are_on_separate_cache_lines() {
    assert_eq!(std::mem::align_of::<SbitmapWord>(), 64);
    assert_eq!(std::mem::size_of::<SbitmapWord>(), 128);
    let w = SbitmapWord::new();
    let a = std::ptr::addr_of!(w.word) as usize;
    let b = std::ptr::addr_of!(w.cleared) as usize;
    assert_eq!(a % 64, 0);
    assert_eq!(b % 64, 0);
    assert_ne!(a / 64, b / 64);
}

#[test]
fn get_hands_out_every_tag_once() {
    for depth in [1, 2, 3, 4, 5, 31, 64, 100, 127, 128, 200, 1000, 1024] {
        let sb = map(depth);
        let mut hint = AllocHint::new(&sb);
        let mut got = drain(&sb, &mut hint);
        assert_eq!(got.len(), depth as usize, "depth {depth}");
        assert_eq!(sb.busy(), depth);
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), depth as usize);
        assert!(got.iter().all(|&t| t < depth));
        // Full map: hint reset to 0.
        assert_eq!(hint.value(), 0);
        for t in got {
            sb.put(&mut hint, t);
        }
        assert_eq!(sb.busy(), 0);
        // Deferred frees are all reclaimable.
        assert_eq!(drain(&sb, &mut hint).len(), depth as usize);
    }
}

#[test]
fn empty_map_gives_nothing() {
    let sb = map(0);
    let mut hint = AllocHint::new(&sb);
    assert_eq!(sb.get(&mut hint), None);
    assert_eq!(sb.get_batch(&mut hint, 8), None);
    assert_eq!(sb.get_shallow(&mut hint, 4), None);
    assert_eq!(sb.busy(), 0);
    assert_eq!(sb.map_nr(), 0);
}

#[test]
fn new_hint_is_within_depth_and_spread() {
    let sb = map(1024);
    let hints: Vec<u32> = (0..64).map(|_| AllocHint::new(&sb).value()).collect();
    assert!(hints.iter().all(|&h| h < 1024));
    let mut distinct = hints.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() > 32, "hints not spread: {hints:?}");
    assert_eq!(AllocHint::new(&rr_map(1024)).value(), 0);
}

#[test]
fn hint_advances_only_when_the_hinted_tag_is_returned() {
    let sb = map(256);
    // Word 1 (bits 64..128); the search starts at bit 0 of the hinted word.
    let mut hint = AllocHint::with_start(64);
    assert_eq!(sb.get(&mut hint), Some(64));
    assert_eq!(hint.value(), 65);
    assert_eq!(sb.get(&mut hint), Some(65));
    assert_eq!(hint.value(), 66);
    // Hint in the middle of a word: bit 0 of the word is returned, the hint stays.
    let mut other = AllocHint::with_start(140);
    assert_eq!(sb.get(&mut other), Some(128));
    assert_eq!(other.value(), 140);
}

#[test]
fn put_points_the_hint_at_the_freed_tag() {
    let sb = map(256);
    let mut hint = AllocHint::with_start(0);
    let t = sb.get(&mut hint).unwrap();
    sb.put(&mut hint, t);
    assert_eq!(hint.value(), t);
    let mut tags = Vec::new();
    for _ in 0..3 {
        tags.push(sb.get(&mut hint).unwrap() as u16);
    }
    sb.put_batch(&mut hint, &tags);
    assert_eq!(hint.value(), u32::from(*tags.last().unwrap()));
}

#[test]
fn put_is_deferred_until_the_word_looks_full() {
    let sb = map(256);
    let mut hint = AllocHint::with_start(0);
    let tags: Vec<u32> = (0..64).map(|_| sb.get(&mut hint).unwrap()).collect();
    assert!(tags.iter().all(|&t| t < 64), "word 0 first");
    sb.put(&mut hint, 5);
    let w = &sb.map[0];
    assert_eq!(w.cleared.0.load(Ordering::Relaxed), 1 << 5);
    assert_eq!(
        w.word.0.load(Ordering::Relaxed),
        u64::MAX,
        "allocation bits untouched"
    );
    assert_eq!(sb.busy(), 63);
    // The word is full: the get folds the free in and takes it.
    let mut h2 = AllocHint::with_start(0);
    assert_eq!(sb.get(&mut h2), Some(5));
    assert_eq!(w.cleared.0.load(Ordering::Relaxed), 0);
}

#[test]
fn put_batch_clears_directly_in_the_words() {
    let sb = map(256);
    let mut hint = AllocHint::with_start(0);
    let all = drain(&sb, &mut hint);
    assert_eq!(all.len(), 256);
    // Runs across three words, including an interleaving.
    let tags: Vec<u16> = vec![1, 2, 3, 70, 71, 4, 200, 255];
    sb.put_batch(&mut hint, &tags);
    assert_eq!(sb.busy(), 256 - 8);
    for w in sb.map.iter() {
        assert_eq!(w.cleared.0.load(Ordering::Relaxed), 0);
    }
    assert_eq!(sb.map[0].word.0.load(Ordering::Relaxed), !0b11110);
    assert_eq!(sb.map[1].word.0.load(Ordering::Relaxed), !(0b11 << 6));
    assert_eq!(
        sb.map[3].word.0.load(Ordering::Relaxed),
        !((1 << 8) | (1 << 63))
    );
    assert_eq!(hint.value(), 255);
}

/// Tags freed in any order (as a device completes them) are freed exactly, whether the map is
/// small enough to gather its bits per word or large enough to clear run by run.
#[test]
fn put_batch_in_completion_order_frees_exactly_those_tags() {
    // 4 and 8 words (small gather), 10 and 63 words (full gather), 128 words (runs); the
    // two largest take minutes under Miri.
    let depths: &[u32] = if cfg!(miri) {
        &[128, 512, 600]
    } else {
        &[128, 512, 600, 4000, 8192]
    };
    for &depth in depths {
        let sb = map(depth);
        let mut hint = AllocHint::with_start(0);
        assert_eq!(drain(&sb, &mut hint).len(), depth as usize);
        // A scattered order touching every word, with a tag out of range in the middle.
        let mut tags: Vec<u16> = (0..depth / 3)
            .map(|i| ((i * 37 + 11) % depth) as u16)
            .collect();
        tags.insert(tags.len() / 2, depth as u16);
        sb.put_batch(&mut hint, &tags);
        let freed: std::collections::BTreeSet<u16> = tags
            .iter()
            .copied()
            .filter(|&t| u32::from(t) < depth)
            .collect();
        assert_eq!(sb.busy(), depth - freed.len() as u32, "depth {depth}");
        let again: std::collections::BTreeSet<u16> = drain(&sb, &mut hint)
            .into_iter()
            .map(|t| t as u16)
            .collect();
        assert_eq!(again, freed, "depth {depth}");
    }
}

#[test]
fn out_of_range_frees_are_ignored() {
    let sb = map(100);
    let mut hint = AllocHint::with_start(0);
    sb.put(&mut hint, 100);
    sb.put(&mut hint, u32::MAX);
    sb.put_batch(&mut hint, &[100, 5000]);
    assert_eq!(sb.busy(), 0);
    assert_eq!(drain(&sb, &mut hint).len(), 100);
}

#[test]
fn get_batch_takes_a_window_of_free_bits() {
    let sb = map(1024);
    let mut hint = AllocHint::with_start(0);
    let (mask, offset) = sb.get_batch(&mut hint, 32).unwrap();
    assert_eq!((mask, offset), (0xffff_ffff, 0));
    assert_eq!(sb.busy(), 32);
    // The hinted tag (0) was in the window: the hint moves past it.
    assert_eq!(hint.value(), 32);
    let (mask, offset) = sb.get_batch(&mut hint, 32).unwrap();
    assert_eq!((mask, offset), (0xffff_ffff, 32));
    // Word 0 full now: the next batch comes from word 1.
    let (mask, offset) = sb.get_batch(&mut hint, 32).unwrap();
    assert_eq!((mask, offset), (0xffff_ffff, 64));
    assert_eq!(sb.busy(), 96);
    for n in [1u32, 2, 7] {
        let (mask, _) = sb.get_batch(&mut hint, n).unwrap();
        assert_eq!(mask.count_ones(), n);
    }
    // Word 1 has bits 42..64 free: a 31-bit window slides back to 33..64 and yields 22 tags.
    let (mask, offset) = sb.get_batch(&mut hint, 31).unwrap();
    assert_eq!((mask, offset), (low_mask(22) << 9, 64 + 33));
}

#[test]
fn get_batch_window_slides_back_to_fit_the_word() {
    let sb = map(256);
    let mut hint = AllocHint::with_start(0);
    // Busy bits 0..40 of word 0 only.
    let (mask, offset) = sb.get_batch(&mut hint, 40).unwrap();
    assert_eq!((mask, offset), (low_mask(40), 0));
    // First free bit is 40; a 32-bit window from 40 would not fit, so it starts at 32 and
    // returns the 24 free bits 40..64.
    let mut h = AllocHint::with_start(0);
    let (mask, offset) = sb.get_batch(&mut h, 32).unwrap();
    assert_eq!(offset, 32);
    assert_eq!(mask, low_mask(24) << 8);
    assert_eq!(sb.busy(), 64);
}

#[test]
fn get_batch_zero_and_oversized_requests() {
    let sb = map(1024);
    let mut hint = AllocHint::with_start(0);
    assert_eq!(sb.get_batch(&mut hint, 0), None);
    // More than a word: capped at bits per word.
    let (mask, offset) = sb.get_batch(&mut hint, 1000).unwrap();
    assert_eq!((mask, offset), (u64::MAX, 0));
    let small = map(64); // 16-bit words
    let mut hint = AllocHint::with_start(0);
    let (mask, offset) = small.get_batch(&mut hint, 64).unwrap();
    assert_eq!((mask, offset), (0xffff, 0));
}

#[test]
fn get_batch_on_a_full_map_resets_the_hint() {
    let sb = map(128);
    let mut hint = AllocHint::with_start(0);
    drain(&sb, &mut hint);
    let mut h = AllocHint::with_start(77);
    assert_eq!(sb.get_batch(&mut h, 8), None);
    assert_eq!(h.value(), 0);
}

#[test]
fn round_robin_refuses_batches_and_goes_in_order() {
    let sb = rr_map(64);
    let mut hint = AllocHint::new(&sb);
    assert_eq!(sb.get_batch(&mut hint, 4), None);
    let got: Vec<u32> = (0..10).map(|_| sb.get(&mut hint).unwrap()).collect();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    // Frees do not move a round-robin hint: allocation continues in order.
    sb.put(&mut hint, 3);
    assert_eq!(sb.get(&mut hint), Some(10));
    // Freed tags behind the hint are found after the rest of the map.
    drain(&sb, &mut hint);
    sb.put(&mut hint, 7);
    let mut h = AllocHint::with_start(40);
    assert_eq!(sb.get(&mut h), Some(7));
}

#[test]
fn shallow_limits_each_word_to_its_share() {
    let sb = map(256); // 4 words of 64
    let mut hint = AllocHint::with_start(0);
    let mut got = Vec::new();
    while let Some(t) = sb.get_shallow(&mut hint, 10) {
        got.push(t);
    }
    // 10 over 4 words: 3, 3, 2, 2 (the remainder goes to the leading words).
    assert_eq!(got.len(), 10);
    let per_word: Vec<usize> = (0..4)
        .map(|w| got.iter().filter(|&&t| t / 64 == w).count())
        .collect();
    assert_eq!(per_word, vec![3, 3, 2, 2]);
    assert!(got.iter().all(|&t| t % 64 < 3));
    // Unlimited gets still find the rest.
    assert_eq!(drain(&sb, &mut hint).len(), 246);
    assert_eq!(sb.get_shallow(&mut hint, 0), None);
}

#[test]
fn shallow_shares_add_up_to_the_limit() {
    let max_depth = if cfg!(miri) { 70 } else { 600 };
    for depth in 1..=max_depth {
        let sb = map(depth);
        let words = sb.map_nr();
        for shallow in 0..=depth + 1 {
            let mut total = 0;
            for i in 0..words {
                let d = sb.shallow_word_depth(i, shallow);
                assert!(
                    d <= sb.map_depth(depth, i),
                    "depth {depth} shallow {shallow} word {i}"
                );
                total += d;
            }
            assert_eq!(total, shallow.min(depth), "depth {depth} shallow {shallow}");
        }
    }
}

#[test]
fn resize_changes_depth_within_capacity() {
    let sb = map(256);
    assert_eq!(sb.resize(100), 100);
    assert_eq!(sb.depth(), 100);
    assert_eq!(sb.capacity(), 256);
    assert_eq!(sb.bits_per_word(), 64, "words stay as allocated");
    let mut hint = AllocHint::new(&sb);
    let got = drain(&sb, &mut hint);
    assert_eq!(got.len(), 100);
    assert!(got.iter().all(|&t| t < 100));
    assert_eq!(sb.resize(10_000), 256);
    assert_eq!(drain(&sb, &mut hint).len(), 156);
    assert_eq!(sb.busy(), 256);
}

#[test]
fn busy_counts_only_tags_below_depth_and_not_deferred_frees() {
    let sb = map(256);
    let mut hint = AllocHint::with_start(0);
    let tags = drain(&sb, &mut hint);
    sb.put(&mut hint, tags[0]);
    sb.put(&mut hint, tags[100]);
    assert_eq!(sb.busy(), 254);
    sb.resize(64);
    // Word 0 (64 tags) minus the deferred free of tag 0 (folded in by resize).
    assert_eq!(sb.busy(), 63);
}

#[test]
fn concurrent_get_put_never_hands_out_a_busy_tag() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let sb = Arc::new(map(128));
    let owned: Arc<Vec<AtomicBool>> = Arc::new((0..128).map(|_| AtomicBool::new(false)).collect());
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let sb = Arc::clone(&sb);
            let owned = Arc::clone(&owned);
            std::thread::spawn(move || {
                let mut hint = AllocHint::new(&sb);
                let mut held: Vec<u16> = Vec::new();
                let take = |held: &mut Vec<u16>, t: u16| {
                    let was = owned[t as usize].swap(true, Ordering::AcqRel);
                    assert!(!was, "tag {t} handed out while busy");
                    held.push(t);
                };
                for round in 0..if cfg!(miri) { 200 } else { 20_000u32 } {
                    if round % 3 == i % 3 {
                        if let Some((mask, offset)) = sb.get_batch(&mut hint, 8) {
                            for t in tags_of(mask, offset) {
                                take(&mut held, t);
                            }
                        }
                    } else if let Some(t) = sb.get(&mut hint) {
                        take(&mut held, t as u16);
                    }
                    if held.len() > 16 || round % 5 == 0 {
                        for &t in &held {
                            owned[t as usize].store(false, Ordering::Release);
                        }
                        if round % 2 == 0 {
                            sb.put_batch(&mut hint, &held);
                        } else {
                            for &t in &held {
                                sb.put(&mut hint, u32::from(t));
                            }
                        }
                        held.clear();
                    }
                }
                for &t in &held {
                    owned[t as usize].store(false, Ordering::Release);
                }
                sb.put_batch(&mut hint, &held);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(sb.busy(), 0);
    let mut hint = AllocHint::new(&sb);
    assert_eq!(drain(&sb, &mut hint).len(), 128);
}

// ---------------------------------------------------------------------------------------------
// Regressions: one per item of Linux's sbitmap bug history (reference/anchors.md §1.8, "Ours").

/// Linux fbb564a55780 ("lib/sbitmap: Fix invalid loop in __sbitmap_queue_get_batch()", 5.19,
/// fixing 9672b0d43782): the batch get's "word full" branch did `continue` without advancing
/// the word index and re-scanned the same full word. A full word must hand over to the next.
#[test]
fn regression_full_word_advances_to_next_word() {
    let sb = map(256); // 4 words of 64
    let mut hint = AllocHint::with_start(0);
    assert_eq!(sb.get_batch(&mut hint, 64), Some((u64::MAX, 0)));
    // Hinted at the full word 0: the batch comes from word 1, and so does a single get.
    let mut h = AllocHint::with_start(3);
    assert_eq!(sb.get_batch(&mut h, 8), Some((0xff, 64)));
    let mut h = AllocHint::with_start(3);
    assert_eq!(sb.get(&mut h), Some(72));
    // Only the word before the hinted one has room: the search wraps all the way round.
    for _ in 0..2 {
        sb.get_batch(&mut AllocHint::with_start(128), 64).unwrap();
    }
    // Word 1 has 64..73 busy: the 64-bit window covers the whole word, the rest of it is ours.
    let got = sb.get_batch(&mut AllocHint::with_start(0), 64).unwrap();
    assert_eq!(got, (!low_mask(9), 64));
    assert_eq!(sb.busy(), 256);
    sb.put_batch(&mut hint, &[10]);
    assert_eq!(
        sb.get_batch(&mut AllocHint::with_start(130), 32),
        Some((1, 10))
    );
}

/// Linux fbb564a55780 (part b) and 4dbce39540c3 ("sbitmap: remove redundant check in
/// __sbitmap_queue_get_batch", 2022): the batch's CAS ORs a window that may overlap busy
/// bits; the result must be filtered to the bits that were free (`get_mask & ~old`), never
/// "taking" a tag someone else owns.
#[test]
fn regression_partial_overlap_cas_returns_only_new_bits() {
    let sb = map(256);
    let mut hint = AllocHint::with_start(0);
    let first = sb.get_batch(&mut hint, 8).unwrap();
    assert_eq!(first, (0xff, 0));
    // Free 0, 2, 4, 6: bits 1, 3, 5, 7 stay owned inside the next window.
    sb.put_batch(&mut hint, &[0, 2, 4, 6]);
    let (mask, offset) = sb.get_batch(&mut AllocHint::with_start(0), 12).unwrap();
    assert_eq!(offset, 0);
    assert_eq!(
        mask, 0b1111_0101_0101,
        "only the free bits: 0, 2, 4, 6 and 8..12"
    );
    assert_eq!(sb.busy(), 12);
    // The owners of 1, 3, 5, 7 can still free them exactly once.
    sb.put_batch(&mut hint, &[1, 3, 5, 7]);
    assert_eq!(sb.busy(), 8);
}

/// Linux 9672b0d43782 ("sbitmap: add __sbitmap_queue_get_batch()", 5.16) folded `cleared`
/// before each word; Xue He's 2025 `sbitmap_find_bits_in_word` ("lib/sbitmap: add an helper of
/// sbitmap_find_bits_in_word") folds only when the word looks full or the window does not fit,
/// then retries the word. Either way, tags freed with the deferred `put` must be obtainable by
/// a batch get, not only by single gets.
#[test]
fn regression_pending_cleared_reclaimable_by_batch() {
    let sb = map(128); // 4 words of 32
    let mut hint = AllocHint::with_start(0);
    drain(&sb, &mut hint);
    for t in [33, 40, 41, 63] {
        sb.put(&mut hint, t);
    }
    assert_eq!(
        sb.map[1].word.0.load(Ordering::Relaxed),
        u64::from(u32::MAX)
    );
    let mut h = AllocHint::with_start(0);
    let (mask, offset) = sb.get_batch(&mut h, 32).expect("deferred frees reclaimed");
    let mut got = tags_of(mask, offset);
    got.sort_unstable();
    assert_eq!(got, vec![33, 40, 41, 63]);
    assert_eq!(sb.busy(), 128);
    // A window short of free bits folds pending frees in before its CAS.
    sb.put_batch(&mut hint, &[64, 65]);
    sb.put(&mut hint, 70);
    let (mask, offset) = sb.get_batch(&mut AllocHint::with_start(64), 32).unwrap();
    let mut got = tags_of(mask, offset);
    got.sort_unstable();
    assert_eq!(got, vec![64, 65, 70]);
}

/// Linux 72d04bdcf3f7 ("sbitmap: fix io hung due to race on sbitmap_word::cleared", 2024) and
/// 65f666c62036 (swap_lock made raw): two allocators on a word whose free bits are all in
/// `cleared`; one takes `cleared`, the other saw it empty and the word full and gave up, and
/// the task hung. Ours is lockless: the loser may give up, but then the folder gets a tag
/// (never both fail), and an allocator retries a word only while its searched range has a
/// free bit (never spins; in round-robin mode bits below the hint are outside the range).
#[test]
fn regression_cleared_race_neither_both_fail_nor_spin() {
    // Deterministic replay of the interleaving.
    let sb = map(2);
    let mut hint = AllocHint::with_start(0);
    drain(&sb, &mut hint);
    sb.put(&mut hint, 0);
    sb.put(&mut hint, 1);
    let w = &sb.map[0];
    // A has found the word full and exchanged `cleared` out, but not yet cleared the word.
    let taken = w.cleared.0.swap(0, Ordering::Acquire);
    assert_eq!(taken, 0b11);
    // B: nothing pending, word full: gives up at once.
    assert_eq!(sb.get(&mut AllocHint::with_start(0)), None);
    // A finishes its fold and retries: succeeds.
    w.word.0.fetch_and(!taken, Ordering::Release);
    assert!(get_word(&w.word.0, 2, 0, true).is_some());
    // B's search ran before A's fold completed, B's deferred clear after it: B retries.
    assert!(deferred_clear(w, 2, 0, true), "free bit visible: retry");
    assert!(sb.get(&mut AllocHint::with_start(0)).is_some());
    assert!(
        !deferred_clear(w, 2, 0, true),
        "full and nothing pending: give up"
    );

    // Round robin: bits below the hint are free, the searched range is full: no endless retry,
    // and the free bits are found on the second visit of the start word.
    let rr = rr_map(3);
    let mut h = AllocHint::with_start(0);
    drain(&rr, &mut h);
    rr.put(&mut h, 0);
    assert!(fold_cleared(&rr.map[0]));
    assert!(!deferred_clear(&rr.map[0], 3, 1, false));
    assert_eq!(rr.get(&mut AllocHint::with_start(1)), Some(0));

    // Threads: two allocators racing on an all-pending word, many times.
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    let sb = map(2);
    for _ in 0..rounds {
        let mut h = AllocHint::with_start(0);
        drain(&sb, &mut h);
        sb.put(&mut h, 0);
        sb.put(&mut h, 1);
        let got: Vec<Option<u32>> = std::thread::scope(|s| {
            let a = s.spawn(|| sb.get(&mut AllocHint::with_start(0)));
            let b = s.spawn(|| sb.get(&mut AllocHint::with_start(0)));
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        let won: Vec<u32> = got.iter().flatten().copied().collect();
        assert!(!won.is_empty(), "both allocators failed");
        if won.len() == 2 {
            assert_ne!(won[0], won[1]);
        }
        sb.put_batch(&mut h, &won.iter().map(|&t| t as u16).collect::<Vec<_>>());
        assert_eq!(sb.busy(), 0, "nothing lost");
    }
}

/// Linux 9672b0d43782 ("sbitmap: add __sbitmap_queue_get_batch()", 5.16): the batch mask is
/// built as `((1UL << nr_tags) - 1) << nr`, undefined for `nr_tags == 64` (harmless in blk-mq,
/// whose batches are ≤ 32). A batch of a whole word must work: a full-word mask.
#[test]
fn regression_batch_of_a_whole_word() {
    let sb = map(1024);
    let mut hint = AllocHint::with_start(0);
    assert_eq!(sb.bits_per_word(), 64);
    assert_eq!(sb.get_batch(&mut hint, 64), Some((u64::MAX, 0)));
    assert_eq!(sb.get_batch(&mut hint, 64), Some((u64::MAX, 64)));
    let tags: Vec<u16> = (0..128).collect();
    sb.put_batch(&mut hint, &tags);
    assert_eq!(sb.busy(), 0);
    // Smaller words: a batch of bits_per_word is the full (narrower) word.
    for depth in [64u32, 32, 8, 3] {
        let sb = map(depth);
        let bpw = sb.bits_per_word().min(depth);
        let mut hint = AllocHint::with_start(0);
        assert_eq!(
            sb.get_batch(&mut hint, bpw),
            Some((low_mask(bpw), 0)),
            "depth {depth}"
        );
    }
}

/// The 2022 depth refactor (per-word `sbitmap_word::depth` replaced by `__map_depth()`): the
/// last word may be shorter than the others. Neither single nor batch gets may hand out bits
/// beyond it, and its free bits must still be found.
#[test]
fn regression_last_short_word_respects_map_depth() {
    let sb = map(200); // six words of 32, then 8
    assert_eq!((sb.bits_per_word(), sb.map_nr()), (32, 7));
    let mut hint = AllocHint::with_start(0);
    for _ in 0..6 {
        sb.get_batch(&mut hint, 32).unwrap();
    }
    let (mask, offset) = sb.get_batch(&mut AllocHint::with_start(199), 32).unwrap();
    assert_eq!(
        (mask, offset),
        (0xff, 192),
        "only the 8 bits of the short word"
    );
    assert_eq!(sb.get(&mut hint), None);
    assert_eq!(sb.get_batch(&mut hint, 1), None);
    sb.put(&mut hint, 199);
    assert_eq!(sb.get(&mut AllocHint::with_start(195)), Some(199));
    let sb = map(1000); // 15 words of 64, then 40
    assert_eq!((sb.bits_per_word(), sb.map_nr()), (64, 16));
    let mut hint = AllocHint::with_start(999);
    let (mask, offset) = sb.get_batch(&mut hint, 64).unwrap();
    assert_eq!((mask, offset), (low_mask(40), 960));
    // Every tag handed out exactly once, none ≥ depth, for depths with a short last word.
    for depth in [5u32, 9, 66, 130, 200, 1000] {
        let sb = map(depth);
        let mut hint = AllocHint::new(&sb);
        let mut got = Vec::new();
        while let Some((mask, offset)) = sb.get_batch(&mut hint, 32) {
            got.extend(tags_of(mask, offset));
        }
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), depth as usize, "depth {depth}");
        assert!(got.iter().all(|&t| u32::from(t) < depth));
    }
}

/// Linux's `update_alloc_hint_before_get` (since the hint moved into `struct sbitmap`, 5.13):
/// after `sbitmap_resize` shrinks the map, a per-CPU hint may point beyond the depth and must be
/// re-randomised within it, never used to index a word that is out of range.
#[test]
fn regression_hint_beyond_depth_after_shrink() {
    let sb = map(1024);
    let mut hint = AllocHint::with_start(1000);
    let t = sb.get(&mut hint).unwrap();
    assert!(t >= 960, "hinted word");
    assert_eq!(sb.resize(100), 100);
    for _ in 0..50 {
        let t = sb.get(&mut hint).unwrap();
        assert!(t < 100, "tag {t} beyond the shrunk depth");
        assert!(hint.value() < 100);
    }
    // A hint beyond the depth before a batch or shallow get too.
    let mut h = AllocHint::with_start(5000);
    let (_, offset) = sb.get_batch(&mut h, 8).unwrap();
    assert!(offset < 100);
    let mut h = AllocHint::with_start(700);
    assert!(sb.get_shallow(&mut h, 90).unwrap() < 100);
    // Freeing a tag from before the shrink does not point the hint beyond the depth.
    let mut h = AllocHint::with_start(3);
    sb.put(&mut h, t);
    assert_eq!(h.value(), 3);
    // Shrink to nothing: gets fail without touching any word.
    sb.resize(0);
    assert_eq!(sb.get(&mut h), None);
    assert_eq!(sb.get_batch(&mut h, 8), None);
    assert_eq!(h.value(), 0);
}

// ---------------------------------------------------------------------------------------------
// Property tests against a model: a Vec<bool> of busy tags.

mod props {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Get,
        GetShallow(u32),
        GetBatch(u32),
        /// Free (deferred) the i-th busy tag, modulo the number busy.
        Put(usize),
        /// Free these busy tags (indices modulo the number busy) with one put_batch.
        PutBatch(Vec<usize>),
        /// Resize to this fraction (per mille) of the capacity.
        Resize(u32),
        /// Switch to the other of two hints.
        SwapHint,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Get),
            2 => (0u32..400).prop_map(Op::GetShallow),
            4 => (0u32..=70).prop_map(Op::GetBatch),
            3 => any::<usize>().prop_map(Op::Put),
            3 => proptest::collection::vec(any::<usize>(), 0..40).prop_map(Op::PutBatch),
            1 => (0u32..=1200).prop_map(Op::Resize),
            1 => Just(Op::SwapHint),
        ]
    }

    struct Model {
        busy: Vec<bool>,
        depth: u32,
    }

    impl Model {
        fn free_below_depth(&self) -> impl Iterator<Item = u32> + '_ {
            (0..self.depth).filter(|&t| !self.busy[t as usize])
        }
        fn busy_tags(&self) -> Vec<u32> {
            (0..self.busy.len() as u32)
                .filter(|&t| self.busy[t as usize])
                .collect()
        }
        fn take(&mut self, t: u32) -> Result<(), TestCaseError> {
            prop_assert!(t < self.depth, "tag {} beyond depth {}", t, self.depth);
            prop_assert!(!self.busy[t as usize], "busy tag {} handed out", t);
            self.busy[t as usize] = true;
            Ok(())
        }
    }

    fn run(depth: u32, round_robin: bool, ops: &[Op]) -> Result<(), TestCaseError> {
        let sb = Sbitmap::new(depth, SbitmapOptions { round_robin });
        let mut hints = [AllocHint::new(&sb), AllocHint::new(&sb)];
        let mut cur = 0;
        let mut m = Model {
            busy: vec![false; depth as usize],
            depth,
        };
        let bpw = sb.bits_per_word();
        for op in ops {
            let hint = &mut hints[cur];
            match op {
                Op::Get => match sb.get(hint) {
                    Some(t) => m.take(t)?,
                    None => prop_assert_eq!(m.free_below_depth().count(), 0),
                },
                Op::GetShallow(s) => {
                    let allowed = |t: u32| t % bpw < sb.shallow_word_depth(t / bpw, *s);
                    match sb.get_shallow(hint, *s) {
                        Some(t) => {
                            prop_assert!(allowed(t), "tag {} outside shallow {}", t, s);
                            m.take(t)?;
                        }
                        None => {
                            prop_assert_eq!(m.free_below_depth().filter(|&t| allowed(t)).count(), 0)
                        }
                    }
                }
                Op::GetBatch(n) => match sb.get_batch(hint, *n) {
                    Some((mask, offset)) => {
                        prop_assert!(!round_robin && *n > 0);
                        prop_assert!(mask != 0);
                        prop_assert!(mask.count_ones() <= (*n).min(bpw));
                        let tags = tags_of(mask, offset);
                        let word = u32::from(tags[0]) / bpw;
                        for t in tags {
                            prop_assert_eq!(u32::from(t) / bpw, word, "batch spans words");
                            m.take(u32::from(t))?;
                        }
                    }
                    None => {
                        prop_assert!(round_robin || *n == 0 || m.free_below_depth().count() == 0)
                    }
                },
                Op::Put(i) => {
                    let busy = m.busy_tags();
                    if !busy.is_empty() {
                        let t = busy[i % busy.len()];
                        sb.put(hint, t);
                        m.busy[t as usize] = false;
                    }
                }
                Op::PutBatch(idx) => {
                    let busy = m.busy_tags();
                    if !busy.is_empty() {
                        let mut tags: Vec<u16> =
                            idx.iter().map(|i| busy[i % busy.len()] as u16).collect();
                        tags.dedup();
                        let mut seen = std::collections::HashSet::new();
                        tags.retain(|t| seen.insert(*t));
                        sb.put_batch(hint, &tags);
                        for t in tags {
                            m.busy[t as usize] = false;
                        }
                    }
                }
                Op::Resize(permille) => {
                    let d = (u64::from(depth) * u64::from(*permille) / 1000) as u32;
                    m.depth = sb.resize(d);
                    prop_assert_eq!(m.depth, d.min(depth));
                }
                Op::SwapHint => cur ^= 1,
            }
            let expected = (0..m.depth).filter(|&t| m.busy[t as usize]).count() as u32;
            prop_assert_eq!(sb.busy(), expected);
        }
        // Every free tag can be obtained: free everything, then get them all back.
        let busy: Vec<u16> = m.busy_tags().iter().map(|&t| t as u16).collect();
        sb.put_batch(&mut hints[0], &busy);
        sb.resize(depth);
        let mut got: Vec<u32> = std::iter::from_fn(|| sb.get(&mut hints[1])).collect();
        got.sort_unstable();
        prop_assert_eq!(got, (0..depth).collect::<Vec<_>>());
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random mixes of every operation on random depths agree with the model.
        #[test]
        #[cfg_attr(miri, ignore = "too slow under miri")]
        fn prop_matches_model(
            depth in 1u32..300,
            round_robin in proptest::bool::weighted(0.2),
            ops in proptest::collection::vec(op(), 1..150),
        ) {
            run(depth, round_robin, &ops)?;
        }

        /// Depths around word boundaries, batch-heavy.
        #[test]
        #[cfg_attr(miri, ignore = "too slow under miri")]
        fn prop_batches_at_word_boundaries(
            depth in proptest::sample::select(vec![1u32, 3, 4, 63, 64, 65, 127, 128, 129, 256, 257, 1024]),
            ops in proptest::collection::vec(
                prop_oneof![(1u32..=64).prop_map(Op::GetBatch), any::<usize>().prop_map(Op::Put),
                    proptest::collection::vec(any::<usize>(), 1..64).prop_map(Op::PutBatch)],
                1..100,
            ),
        ) {
            run(depth, false, &ops)?;
        }
    }
}
