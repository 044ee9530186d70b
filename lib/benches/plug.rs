//! Plug and request cache vs one tag at a time.
//!
//! - `plug/cached_32`: 32 requests through a plug — begin, expect 32, 32 takes (one batch
//!   fill, 31 cache hits), finish — then the 32 tags freed with one `put_batch`, as a
//!   completion batch would.
//! - `plug/naive_32`: 32 single `get`s, no cache, then 32 single `put`s.
//!
//! Both on a 1024-tag hctx (16 words of 64 bits), one submitter.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use pmio::HctxType;
use pmio::plug::{DevKey, Plug};
use pmio::tags::{Tags, TagsOptions};

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
    g.bench_function("cached_32", |b| {
        b.iter(|| {
            plug.begin();
            plug.expect(dev, HctxType::Default, BURST as u32);
            for slot in taken.iter_mut() {
                *slot = plug
                    .take(dev, HctxType::Default, &t, &mut hint)
                    .expect("free tag");
            }
            plug.finish();
            t.put_batch(&mut hint, black_box(&taken));
        })
    });
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
