//! Loom model checks of the sbitmap's races on tiny maps (2–3 threads).
//!
//! Run with `make loom`. Each tag has an owner cell written with relaxed atomics: an owner
//! checks the cell reads `FREE` right after getting the tag, stores its id, and stores `FREE`
//! again just before freeing it. Only the sbitmap's own acquire/release chain (put → fold →
//! get) makes the next owner see `FREE`; a missing ordering or a tag handed out twice shows up
//! as a stale id.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;

use super::*;

const FREE: u32 = 0;

struct Owners(Vec<AtomicU32>);

impl Owners {
    fn new(n: u32) -> Self {
        Owners((0..n).map(|_| AtomicU32::new(FREE)).collect())
    }

    fn acquire(&self, tag: u32, me: u32) {
        let cell = &self.0[tag as usize];
        assert_eq!(cell.load(Ordering::Relaxed), FREE, "tag {tag} still owned");
        cell.store(me, Ordering::Relaxed);
    }

    fn release(&self, tag: u32, me: u32) {
        let cell = &self.0[tag as usize];
        assert_eq!(cell.load(Ordering::Relaxed), me, "tag {tag} stolen");
        cell.store(FREE, Ordering::Relaxed);
    }
}

/// Runs a model exhaustively (no preemption bound unless LOOM_MAX_PREEMPTIONS sets one): the
/// models below are small enough (each well under 10 s in release).
fn model(f: impl Fn() + Sync + Send + 'static) {
    loom::model::Builder::new().check(f);
}

fn tags_of(mask: u64, offset: u32) -> Vec<u32> {
    (0..64)
        .filter(|i| mask & (1u64 << i) != 0)
        .map(|i| offset + i)
        .collect()
}

/// Sets up a full map of `depth` whose tags `deferred` are freed with `put` (pending in
/// `cleared`), the rest still busy.
fn full_with_deferred(depth: u32, deferred: &[u32]) -> Sbitmap {
    let sb = Sbitmap::new(depth, SbitmapOptions::default());
    let mut h = AllocHint::with_start(0);
    for _ in 0..depth {
        sb.get(&mut h).unwrap();
    }
    for &t in deferred {
        sb.put(&mut h, t);
    }
    sb
}

/// Two submitters get, use and free (deferred) a tag each on a 2-tag map: never the same tag,
/// both succeed, and everything is free afterwards.
#[test]
fn loom_get_put_two_threads() {
    model(|| {
        let sb = Arc::new(Sbitmap::new(2, SbitmapOptions::default()));
        let owners = Arc::new(Owners::new(2));
        let threads: Vec<_> = (1..=2u32)
            .map(|me| {
                let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
                thread::spawn(move || {
                    let mut h = AllocHint::with_start(me - 1);
                    let t = sb.get(&mut h).expect("two tags for two threads");
                    owners.acquire(t, me);
                    owners.release(t, me);
                    sb.put(&mut h, t);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sb.busy(), 0);
        let mut h = AllocHint::with_start(0);
        assert!(sb.get(&mut h).is_some() && sb.get(&mut h).is_some());
    });
}

/// The 2024 `cleared` race (72d04bdcf3f7): two allocators on a full word whose only free tag
/// is pending in `cleared`. Exactly one gets it (neither both fail nor spin: loom bounds the
/// steps), and the tag's previous owner's writes are visible to it.
#[test]
fn loom_deferred_clear_race_one_pending() {
    model(|| {
        let sb = Arc::new(full_with_deferred(2, &[]));
        let owners = Arc::new(Owners::new(2));
        owners.acquire(1, 9);
        // Tag 1's owner frees it (deferred) before the race, as in the bug report.
        owners.release(1, 9);
        sb.put(&mut AllocHint::with_start(0), 1);
        let threads: Vec<_> = (1..=2u32)
            .map(|me| {
                let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
                thread::spawn(move || {
                    let mut h = AllocHint::with_start(0);
                    let got = sb.get(&mut h);
                    if let Some(t) = got {
                        owners.acquire(t, me);
                    }
                    got
                })
            })
            .collect();
        let got: Vec<Option<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let won: Vec<u32> = got.iter().flatten().copied().collect();
        assert_eq!(
            won,
            vec![1],
            "exactly one allocator gets the pending tag: {got:?}"
        );
        assert_eq!(sb.busy(), 2);
    });
}

/// Same race with every tag of the word pending: at least one allocator succeeds, no tag is
/// handed out twice, and whatever was not taken is still obtainable afterwards.
#[test]
fn loom_deferred_clear_race_all_pending() {
    model(|| {
        let sb = Arc::new(full_with_deferred(2, &[0, 1]));
        let owners = Arc::new(Owners::new(2));
        let threads: Vec<_> = (1..=2u32)
            .map(|me| {
                let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
                thread::spawn(move || {
                    let mut h = AllocHint::with_start(0);
                    let got = sb.get(&mut h);
                    if let Some(t) = got {
                        owners.acquire(t, me);
                    }
                    got
                })
            })
            .collect();
        let got: Vec<Option<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let won = got.iter().flatten().count() as u32;
        assert!(won >= 1, "both allocators failed: {got:?}");
        assert_eq!(sb.busy(), won);
        let mut h = AllocHint::with_start(0);
        let rest = std::iter::from_fn(|| sb.get(&mut h)).count() as u32;
        assert_eq!(won + rest, 2);
    });
}

/// A free racing an allocation on a full map: the allocator either misses the tag or gets it
/// with the previous owner's writes visible (put's release → fold's acquire/release → get's
/// acquire).
#[test]
fn loom_put_handoff_through_deferred_clear() {
    model(|| {
        let sb = Arc::new(full_with_deferred(2, &[]));
        let owners = Arc::new(Owners::new(2));
        owners.acquire(0, 1);
        let freer = {
            let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
            thread::spawn(move || {
                owners.release(0, 1);
                sb.put(&mut AllocHint::with_start(0), 0);
            })
        };
        let mut h = AllocHint::with_start(0);
        if let Some(t) = sb.get(&mut h) {
            assert_eq!(t, 0);
            owners.acquire(t, 2);
        }
        freer.join().unwrap();
    });
}

/// A batch get racing a single get on a 3-tag word whose tags are all pending in `cleared`:
/// at least one succeeds, no tag goes to both, and the rest stays obtainable.
#[test]
fn loom_get_batch_vs_get_on_pending_word() {
    model(|| {
        let sb = Arc::new(full_with_deferred(3, &[0, 1, 2]));
        let owners = Arc::new(Owners::new(3));
        let batcher = {
            let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
            thread::spawn(move || {
                let mut h = AllocHint::with_start(0);
                let tags = sb
                    .get_batch(&mut h, 3)
                    .map_or_else(Vec::new, |(m, o)| tags_of(m, o));
                for &t in &tags {
                    owners.acquire(t, 1);
                }
                tags
            })
        };
        let mut h = AllocHint::with_start(0);
        let single = sb.get(&mut h);
        if let Some(t) = single {
            owners.acquire(t, 2);
        }
        let batch = batcher.join().unwrap();
        let won = batch.len() as u32 + u32::from(single.is_some());
        assert!(won >= 1, "both failed");
        assert_eq!(sb.busy(), won);
        let rest = std::iter::from_fn(|| sb.get(&mut h)).count() as u32;
        assert_eq!(won + rest, 3);
    });
}

/// A direct batch free, a deferred free and a batch get race on a full 3-tag word: the batch
/// gets only freed tags, with their previous owners' writes visible, and nothing is lost.
#[test]
fn loom_put_batch_and_put_vs_get_batch() {
    model(|| {
        let sb = Arc::new(full_with_deferred(3, &[]));
        let owners = Arc::new(Owners::new(3));
        for t in 0..3 {
            owners.acquire(t, 1);
        }
        let batch_freer = {
            let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
            thread::spawn(move || {
                owners.release(0, 1);
                owners.release(1, 1);
                sb.put_batch(&mut AllocHint::with_start(0), &[0, 1]);
            })
        };
        let freer = {
            let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
            thread::spawn(move || {
                owners.release(2, 1);
                sb.put(&mut AllocHint::with_start(0), 2);
            })
        };
        let mut h = AllocHint::with_start(0);
        let got = sb
            .get_batch(&mut h, 3)
            .map_or_else(Vec::new, |(m, o)| tags_of(m, o));
        for &t in &got {
            owners.acquire(t, 2);
        }
        batch_freer.join().unwrap();
        freer.join().unwrap();
        assert_eq!(sb.busy(), got.len() as u32);
        let rest = std::iter::from_fn(|| sb.get(&mut h)).count();
        assert_eq!(got.len() + rest, 3);
    });
}

/// Three submitters on a 2-tag map, each getting, using and freeing one tag: never the same
/// tag twice at once; all free at the end. Bounded to 2 preemptions (3 take ~2 minutes).
#[test]
fn loom_three_threads_two_tags() {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(|| {
        let sb = Arc::new(Sbitmap::new(2, SbitmapOptions::default()));
        let owners = Arc::new(Owners::new(2));
        let threads: Vec<_> = (1..=3u32)
            .map(|me| {
                let (sb, owners) = (Arc::clone(&sb), Arc::clone(&owners));
                thread::spawn(move || {
                    let mut h = AllocHint::with_start(0);
                    if let Some(t) = sb.get(&mut h) {
                        owners.acquire(t, me);
                        owners.release(t, me);
                        sb.put(&mut h, t);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sb.busy(), 0);
    });
}
