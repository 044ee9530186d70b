//! Plug and request cache vs one tag at a time.
//!
//! - `plug/cached_32`: 32 requests through a plug — begin, expect 32, 32 takes (one batch
//!   fill, 31 cache hits), finish — then the 32 tags freed with one `put_batch`, as a
//!   completion batch would.
//! - `plug/naive_32`: 32 single `get`s, no cache, then 32 single `put`s.
//!
//! Both on a 1024-tag hctx (16 words of 64 bits), one submitter. Before measuring, the bench
//! checks that a warm plug allocates no heap memory per burst (a counting global allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use pmio::HctxType;
use pmio::plug::{DevKey, Plug};
use pmio::sbitmap::AllocHint;
use pmio::tags::{Tags, TagsOptions};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const DEPTH: u32 = 1024;
const BURST: usize = 32;

fn tags() -> Arc<Tags> {
    Arc::new(
        Tags::new(TagsOptions {
            depth: DEPTH,
            ..Default::default()
        })
        .expect("valid tag options"),
    )
}

fn bench_plug(c: &mut Criterion) {
    let mut g = c.benchmark_group("plug");

    let t = tags();
    let mut hint = t.new_hint();
    let mut plug = Plug::default();
    let dev = DevKey(0);
    plug.register(dev, HctxType::Default, &t);
    let mut taken = [0u16; BURST];
    let mut burst = |plug: &mut Plug, hint: &mut AllocHint| {
        plug.begin();
        plug.expect(dev, HctxType::Default, BURST as u32);
        for slot in taken.iter_mut() {
            *slot = plug
                .take(dev, HctxType::Default, &t, hint)
                .expect("free tag");
        }
        plug.finish();
        t.put_batch(hint, black_box(&taken));
    };
    burst(&mut plug, &mut hint); // warm-up: entries created
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        burst(&mut plug, &mut hint);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(
        allocs, 0,
        "a warm plug allocated {allocs} times in 1000 bursts"
    );
    g.bench_function("cached_32", |b| b.iter(|| burst(&mut plug, &mut hint)));
    let s = *plug.stats();
    assert_eq!(s.cache_misses, 0, "the bench must measure the cached path");
    assert_eq!(t.busy(), 0);
    eprintln!(
        "plug/cached_32: {:.1} tags per batch, {} retries, {} single fallbacks over {} bursts",
        s.tags_per_batch(),
        s.retries,
        s.single_fallbacks,
        s.bursts
    );

    let t = tags();
    let mut hint = t.new_hint();
    g.bench_function("naive_32", |b| {
        b.iter(|| {
            for slot in taken.iter_mut() {
                *slot = t.get(&mut hint).expect("free tag");
            }
            for &tag in black_box(&taken).iter() {
                t.put(&mut hint, tag);
            }
        })
    });
    assert_eq!(t.busy(), 0);
    g.finish();
}

criterion_group!(benches, bench_plug);
criterion_main!(benches);
