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
    for depth in 1..=600u32 {
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
                for round in 0..20_000u32 {
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
