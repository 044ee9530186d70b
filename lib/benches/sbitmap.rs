//! sbitmap: batched vs single-tag allocation, and two threads on one map.
//!
//! - `sbitmap/get_batch_32`: one `get_batch(32)`, its mask expanded to tags, freed with one
//!   `put_batch` — what a plug and a completion batch do.
//! - `sbitmap/get_x32`: 32 × `get()`, freed with one `put_batch` (same free path as the batch,
//!   so the pair compares allocation alone).
//! - `sbitmap/get_put_x32`: 32 × `get()` and 32 × `put()` (deferred frees, folded in by later
//!   gets): the fully unbatched path, for reference.
//! - `sbitmap/contended_2threads`: two threads on one 128-tag map (4 words of 32), each
//!   repeatedly taking 32 tags with single `get`s and freeing them with `put`; throughput in
//!   tags allocated and freed per second across both threads.
//!
//! The first three on a 1024-tag map (16 words of 64 bits), one submitter.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pmio::sbitmap::{AllocHint, Sbitmap, SbitmapOptions};

const DEPTH: u32 = 1024;
const BATCH: u32 = 32;

/// Expands a `(mask, offset)` batch into `out`; returns how many tags.
#[inline]
fn expand(mut mask: u64, offset: u32, out: &mut [u16; 64]) -> usize {
    let mut n = 0;
    while mask != 0 {
        out[n] = (offset + mask.trailing_zeros()) as u16;
        n += 1;
        mask &= mask - 1;
    }
    n
}

fn bench_single_submitter(c: &mut Criterion) {
    let mut g = c.benchmark_group("sbitmap");

    let sb = Sbitmap::new(DEPTH, SbitmapOptions::default());
    let mut hint = AllocHint::new(&sb);
    let mut tags = [0u16; 64];
    g.bench_function("get_batch_32", |b| {
        b.iter(|| {
            let (mask, offset) = sb
                .get_batch(&mut hint, black_box(BATCH))
                .expect("free tags");
            let n = expand(mask, offset, &mut tags);
            sb.put_batch(&mut hint, black_box(&tags[..n]));
        })
    });
    assert_eq!(sb.busy(), 0);

    let sb = Sbitmap::new(DEPTH, SbitmapOptions::default());
    let mut hint = AllocHint::new(&sb);
    let mut tags = [0u16; BATCH as usize];
    g.bench_function("get_x32", |b| {
        b.iter(|| {
            for slot in tags.iter_mut() {
                *slot = sb.get(&mut hint).expect("free tag") as u16;
            }
            sb.put_batch(&mut hint, black_box(&tags));
        })
    });
    assert_eq!(sb.busy(), 0);

    let sb = Sbitmap::new(DEPTH, SbitmapOptions::default());
    let mut hint = AllocHint::new(&sb);
    g.bench_function("get_put_x32", |b| {
        b.iter(|| {
            for slot in tags.iter_mut() {
                *slot = sb.get(&mut hint).expect("free tag") as u16;
            }
            for &t in black_box(&tags).iter() {
                sb.put(&mut hint, u32::from(t));
            }
        })
    });
    assert_eq!(sb.busy(), 0);
    g.finish();
}

/// Tags each thread takes (with single gets) before freeing them, per round.
const HELD: usize = 32;
/// Rounds per thread per criterion iteration.
const ROUNDS: u64 = 64;

fn bench_contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("sbitmap");
    // Per iteration: 2 threads × ROUNDS × HELD tags, each allocated and freed once.
    g.throughput(Throughput::Elements(2 * ROUNDS * HELD as u64));
    g.bench_function("contended_2threads", |b| {
        b.iter_custom(|iters| {
            let sb = Arc::new(Sbitmap::new(128, SbitmapOptions::default()));
            let start = Arc::new(Barrier::new(3));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (sb, start) = (Arc::clone(&sb), Arc::clone(&start));
                    std::thread::spawn(move || {
                        let mut hint = AllocHint::new(&sb);
                        let mut held = [0u32; HELD];
                        start.wait();
                        for _ in 0..iters * ROUNDS {
                            for slot in held.iter_mut() {
                                // The other thread holds at most HELD of 128 tags.
                                *slot = sb.get(&mut hint).expect("free tag");
                            }
                            for &t in black_box(&held).iter() {
                                sb.put(&mut hint, t);
                            }
                        }
                    })
                })
                .collect();
            start.wait();
            let t0 = Instant::now();
            for t in threads {
                t.join().expect("bench thread");
            }
            let elapsed = t0.elapsed();
            assert_eq!(sb.busy(), 0);
            elapsed.max(Duration::from_nanos(1))
        })
    });
    g.finish();
}

criterion_group!(benches, bench_single_submitter, bench_contended);
criterion_main!(benches);
