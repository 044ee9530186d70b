//! A submitter's plug: requests for a burst, counted per device and allocated in batches.
//!
//! A submitter (one reactor) opens a plug for a burst of I/O ([`Plug::begin`]), says how many
//! requests it will need for each (device, hctx type) ([`Plug::expect`]), then takes one tag per
//! request ([`Plug::take`]) and closes the plug ([`Plug::finish`]).
//!
//! - **Sized per device.** The count is kept per (device, hctx type): I/O for another device
//!   does not inflate this device's batch (the 2023 io_uring proposal; the kernel still sizes
//!   the plug by the whole submit call).
//! - **One batch, retried.** The first take for a (device, type) allocates everything counted
//!   for it with [`Tags::get_batch`] (one compare-and-swap per word). When a batch yields fewer
//!   tags than asked, the plug asks again (the 2025 blk-mq fix), for a whole word each time
//!   (the bitmap's window then covers every free bit of the word it lands on; bits beyond the
//!   remainder go straight back), until the count is met or no tag is free: scattered free
//!   tags cost one batch per word, never one `get` per tag.
//! - **Cached per (device, type).** Each (device, hctx type) has its own cache, so a mixed
//!   read/write/polled burst to several devices never finds the "wrong" request at the head of
//!   a single list (the per-type split the kernel discussed but never merged). The caller passes
//!   the *mapped* type ([`crate::HctxQueues::map`]): on a device without read queues, reads and
//!   writes both use `Default` and share one cache; polled and non-polled never mix.
//! - **Leftovers freed.** `finish` returns unused tags with one [`Tags::put_batch`] per
//!   (device, type). Each cache entry holds an `Arc<Tags>` (cloned once, when the entry is
//!   bound) and its own [`AllocHint`] for that.
//!
//! Entries are created the first time a (device, type) is seen (or by [`Plug::register`]) and
//! kept, with their cache capacity, across bursts: after warm-up a burst allocates nothing.
//!
//! ```
//! use std::sync::Arc;
//! use pmio::HctxType;
//! use pmio::plug::{DevKey, Plug};
//! use pmio::tags::{Tags, TagsOptions};
//!
//! let tags = Arc::new(Tags::new(TagsOptions::default())?);
//! let mut hint = tags.new_hint();
//! let mut plug = Plug::default();
//! let dev = DevKey(0);
//! plug.begin();
//! plug.expect(dev, HctxType::Default, 4);
//! let got: Vec<u16> = (0..3).map(|_| plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap()).collect();
//! plug.finish(); // frees the fourth tag
//! assert_eq!(tags.busy(), 3);
//! assert_eq!(plug.stats().cache_misses, 0);
//! tags.put_batch(&mut hint, &got); // as completion would
//! # Ok::<(), pmio::tags::TagsError>(())
//! ```

use std::sync::Arc;

use crate::hctx::HctxType;
use crate::sbitmap::AllocHint;
use crate::tags::{TagBatch, Tags};

/// A submitter's name for a device (e.g. its slot in the reactor's queue table). Cheap to
/// compare; unique among the devices one plug sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevKey(pub u32);

/// Plug configuration. Default: at most 64 requests cached per (device, type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlugOptions {
    /// Most tags allocated (and cached) at once for one (device, type). A burst that expects
    /// more is served in several fills of at most this many. At least 1.
    pub max_cached: u32,
}

impl Default for PlugOptions {
    fn default() -> Self {
        PlugOptions { max_cached: 64 }
    }
}

/// What a plug did, summed over its bursts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlugStats {
    /// Bursts (outermost `begin`s).
    pub bursts: u64,
    /// `get_batch` calls, retries included.
    pub batches_asked: u64,
    /// `get_batch` calls that returned at least one tag.
    pub batches_obtained: u64,
    /// Tags obtained through `get_batch` (divide by `batches_obtained` for the mean).
    pub batch_tags: u64,
    /// `get_batch` calls made because the previous one yielded fewer tags than asked.
    pub retries: u64,
    /// Takes served from the cache.
    pub cache_hits: u64,
    /// Takes the cache could not serve: more takes than expected or outside a burst (each then
    /// tries a single-tag `get`), or a fill that found no free tag. Hits plus misses = takes.
    pub cache_misses: u64,
    /// Tags taken one at a time while filling, after batches and retries fell short.
    pub single_fallbacks: u64,
    /// Tags taken one at a time while filling because only one was expected.
    pub single_fills: u64,
    /// Cached tags returned unused at `finish`.
    pub leftovers_freed: u64,
    /// Takes that found no free tag at all (the submitter is told "busy").
    pub exhausted: u64,
}

impl PlugStats {
    /// Mean tags per obtained batch (0 when there was none).
    pub fn tags_per_batch(&self) -> f64 {
        if self.batches_obtained == 0 {
            0.0
        } else {
            self.batch_tags as f64 / self.batches_obtained as f64
        }
    }
}

/// Cache and count of one (device, hctx type).
struct Entry {
    dev: DevKey,
    ty: HctxType,
    /// Requests expected in this burst and not yet allocated.
    pending: u32,
    /// Allocated, not yet taken: batches as the bitmap handed them out, never empty, taken
    /// from the last one, lowest tag first. A fill pushes one entry per batch, not one per tag.
    /// Capacity `max_cached` (every batch holds a tag), never grown.
    cache: Vec<TagBatch>,
    /// The tags the cache came from; bound at the first take.
    tags: Option<Arc<Tags>>,
    /// The address of `tags` (0 while unbound), for the take fast path's check.
    tags_addr: usize,
    /// Hint used to free leftovers into `tags`.
    put_hint: Option<AllocHint>,
}

impl Entry {
    fn new(dev: DevKey, ty: HctxType, max_cached: u32) -> Entry {
        Entry {
            dev,
            ty,
            pending: 0,
            cache: Vec::with_capacity(max_cached as usize),
            tags: None,
            tags_addr: 0,
            put_hint: None,
        }
    }

    /// Takes a cached tag.
    #[inline]
    fn pop(&mut self) -> Option<u16> {
        let b = self.cache.last_mut()?;
        let tag = b.offset + b.mask.trailing_zeros();
        b.mask &= b.mask - 1;
        if b.mask == 0 {
            self.cache.pop();
        }
        Some(tag as u16)
    }

    /// Tags cached.
    fn cached(&self) -> usize {
        self.cache.iter().map(|b| b.len() as usize).sum()
    }

    /// Returns the cached tags to their bitmap; counts them.
    fn free_cache(&mut self, stats: &mut PlugStats) {
        if self.cache.is_empty() {
            return;
        }
        if let (Some(tags), Some(hint)) = (&self.tags, &mut self.put_hint) {
            let mut buf = [0u16; 64];
            let mut n = 0;
            for tag in self.cache.iter().flat_map(TagBatch::iter) {
                if n == buf.len() {
                    tags.put_batch(hint, &buf);
                    n = 0;
                }
                buf[n] = tag;
                n += 1;
                stats.leftovers_freed += 1;
            }
            tags.put_batch(hint, &buf[..n]);
        }
        self.cache.clear();
    }

    /// Makes `tags` this entry's tags (first take, or the device's queue was reopened).
    #[cold]
    fn bind(&mut self, tags: &Arc<Tags>, stats: &mut PlugStats) {
        self.free_cache(stats);
        self.tags = Some(Arc::clone(tags));
        self.tags_addr = Arc::as_ptr(tags) as usize;
        self.put_hint = Some(tags.new_hint());
    }
}

/// A submitter's plug with its request cache per (device, hctx type). See the module docs.
///
/// Not `Sync`: one plug per submitter. Dropping a plug frees whatever it still caches.
pub struct Plug {
    entries: Vec<Entry>,
    /// The entry the last take used: checked first, as a burst's takes usually go to one
    /// (device, type).
    last: usize,
    max_cached: u32,
    /// Nesting depth of `begin`; the burst ends when it returns to 0.
    depth: u32,
    stats: PlugStats,
}

impl Default for Plug {
    fn default() -> Self {
        Plug::new(PlugOptions::default())
    }
}

impl std::fmt::Debug for Plug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plug")
            .field("entries", &self.entries.len())
            .field("active", &self.is_active())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Plug {
    /// A plug with no entries yet.
    pub fn new(opts: PlugOptions) -> Plug {
        Plug {
            entries: Vec::new(),
            last: 0,
            max_cached: opts.max_cached.max(1),
            depth: 0,
            stats: PlugStats::default(),
        }
    }

    /// Creates and binds the entry for (`dev`, `ty`) ahead of time (when a queue is opened), so
    /// the first burst allocates nothing.
    pub fn register(&mut self, dev: DevKey, ty: HctxType, tags: &Arc<Tags>) {
        let i = self.entry(dev, ty);
        let e = &mut self.entries[i];
        if !e.tags.as_ref().is_some_and(|t| Arc::ptr_eq(t, tags)) {
            e.bind(tags, &mut self.stats);
        }
    }

    /// Frees everything cached for `dev` and drops its entries (and their `Arc<Tags>`); call
    /// when the device's queue is closed.
    pub fn forget(&mut self, dev: DevKey) {
        let stats = &mut self.stats;
        self.entries.retain_mut(|e| {
            if e.dev == dev {
                e.free_cache(stats);
                false
            } else {
                true
            }
        });
        self.last = 0;
    }

    /// Opens a burst. Nested `begin`s are counted; only the outermost `finish` ends the burst.
    pub fn begin(&mut self) {
        if self.depth == 0 {
            self.stats.bursts += 1;
        }
        self.depth += 1;
    }

    /// Whether a burst is open.
    pub fn is_active(&self) -> bool {
        self.depth > 0
    }

    /// Counts `n` more requests this burst will take for (`dev`, `ty`), `ty` being the mapped
    /// hctx type. Ignored outside a burst.
    #[inline]
    pub fn expect(&mut self, dev: DevKey, ty: HctxType, n: u32) {
        if self.depth == 0 {
            return;
        }
        let i = self.entry(dev, ty);
        let e = &mut self.entries[i];
        e.pending = e.pending.saturating_add(n);
    }

    /// Takes a driver tag for one request to (`dev`, `ty`) from `tags`, allocating with `hint`.
    ///
    /// Served from the cache when it holds one; the first take after `expect` fills the cache
    /// (batch, retries, then single tags). Otherwise a single `get` (a cache miss). `None` when
    /// no tag is free: the caller reports "busy".
    #[inline]
    pub fn take(
        &mut self,
        dev: DevKey,
        ty: HctxType,
        tags: &Arc<Tags>,
        hint: &mut AllocHint,
    ) -> Option<u16> {
        // Fast path: the last entry used is this one, bound to these tags, with a tag cached.
        if let Some(e) = self.entries.get_mut(self.last)
            && e.dev == dev
            && e.ty == ty
            && e.tags_addr == Arc::as_ptr(tags) as usize
            && let Some(tag) = e.pop()
        {
            self.stats.cache_hits += 1;
            return Some(tag);
        }
        self.take_slow(dev, ty, tags, hint)
    }

    /// `take` when the fast path does not apply: finds (or creates) and binds the entry,
    /// fills its cache or falls back to a single `get`.
    #[inline(never)]
    fn take_slow(
        &mut self,
        dev: DevKey,
        ty: HctxType,
        tags: &Arc<Tags>,
        hint: &mut AllocHint,
    ) -> Option<u16> {
        let i = self.entry(dev, ty);
        self.last = i;
        let stats = &mut self.stats;
        let e = &mut self.entries[i];
        if !e.tags.as_ref().is_some_and(|t| Arc::ptr_eq(t, tags)) {
            e.bind(tags, stats);
        }
        if let Some(tag) = e.pop() {
            stats.cache_hits += 1;
            return Some(tag);
        }
        if e.pending > 0 && self.depth > 0 {
            fill(e, tags, hint, self.max_cached, stats);
            if let Some(tag) = e.pop() {
                stats.cache_hits += 1;
                return Some(tag);
            }
            // Nothing free at all: the fill already tried; do not try again.
            stats.cache_misses += 1;
            stats.exhausted += 1;
            return None;
        }
        stats.cache_misses += 1;
        let tag = tags.get(hint);
        if tag.is_none() {
            stats.exhausted += 1;
        }
        tag
    }

    /// Closes the burst (the outermost one): returns each entry's unused tags with one
    /// `put_batch` and forgets the counts.
    pub fn finish(&mut self) {
        match self.depth {
            0 => return,
            1 => {}
            _ => {
                self.depth -= 1;
                return;
            }
        }
        self.depth = 0;
        for e in &mut self.entries {
            e.free_cache(&mut self.stats);
            e.pending = 0;
        }
    }

    /// Tags cached for (`dev`, `ty`) right now.
    pub fn cached(&self, dev: DevKey, ty: HctxType) -> usize {
        self.entries
            .iter()
            .find(|e| e.dev == dev && e.ty == ty)
            .map_or(0, Entry::cached)
    }

    /// Counters since creation (or the last [`Plug::reset_stats`]).
    pub fn stats(&self) -> &PlugStats {
        &self.stats
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) {
        self.stats = PlugStats::default();
    }

    /// Index of the entry for (`dev`, `ty`), created on first sight.
    #[inline]
    fn entry(&mut self, dev: DevKey, ty: HctxType) -> usize {
        match self.entries.iter().position(|e| e.dev == dev && e.ty == ty) {
            Some(i) => i,
            None => self.add_entry(dev, ty),
        }
    }

    #[cold]
    fn add_entry(&mut self, dev: DevKey, ty: HctxType) -> usize {
        self.entries.push(Entry::new(dev, ty, self.max_cached));
        self.entries.len() - 1
    }
}

impl Drop for Plug {
    fn drop(&mut self) {
        for e in &mut self.entries {
            e.free_cache(&mut self.stats);
        }
    }
}

/// Fills an empty cache with up to `max_cached` of the entry's pending requests: batches,
/// retrying a short batch for the remainder, then single tags for what is still missing.
fn fill(e: &mut Entry, tags: &Tags, hint: &mut AllocHint, max_cached: u32, stats: &mut PlugStats) {
    let want = e.pending.min(max_cached);
    e.pending -= want;
    if want == 1 {
        stats.single_fills += fill_single(e, tags, hint, 1);
        return;
    }
    let need = if tags.can_batch() {
        fill_batches(e, tags, hint, want, stats)
    } else {
        want
    };
    if need > 0 {
        stats.single_fallbacks += fill_single(e, tags, hint, need);
    }
}

/// Takes up to `want` tags in batches of at most one word. A batch that yields fewer tags
/// than asked is retried, asking for a whole word, until the count is met; a `None` (no free
/// tag anywhere) stops. Every batch yields at least one tag, so this ends. Returns how many
/// tags are still missing.
fn fill_batches(
    e: &mut Entry,
    tags: &Tags,
    hint: &mut AllocHint,
    want: u32,
    stats: &mut PlugStats,
) -> u32 {
    let mut need = want;
    let mut short = false;
    while need > 0 {
        if short {
            stats.retries += 1;
        }
        // A retry asks for a whole word: the bitmap's window then covers every free bit of
        // the word it lands on (a window the size of the remainder, on a word with scattered
        // free bits, yields a tag or two per call). Bits beyond the remainder go back at once.
        let ask = if short {
            tags.max_batch()
        } else {
            need.min(tags.max_batch())
        };
        stats.batches_asked += 1;
        let Some(mut batch) = tags.get_batch(hint, ask) else {
            break;
        };
        let mut got = batch.len();
        stats.batches_obtained += 1;
        if got > need {
            let keep = lowest_bits(batch.mask, need);
            let surplus = TagBatch {
                mask: batch.mask & !keep,
                offset: batch.offset,
            };
            batch.mask = keep;
            put_surplus(e, tags, hint, surplus);
            got = need;
        }
        stats.batch_tags += u64::from(got);
        e.cache.push(batch);
        need -= got;
        short = got < ask;
    }
    need
}

/// The lowest `n` set bits of `mask` (`n` < its popcount).
#[inline]
fn lowest_bits(mask: u64, n: u32) -> u64 {
    let mut rest = mask;
    for _ in 0..n {
        rest &= rest - 1;
    }
    mask & !rest
}

/// Returns the tags of `surplus` (taken by a whole-word retry beyond what was needed).
#[cold]
fn put_surplus(e: &mut Entry, tags: &Tags, hint: &mut AllocHint, surplus: TagBatch) {
    let mut buf = [0u16; 64];
    let mut n = 0;
    for t in surplus {
        buf[n] = t;
        n += 1;
    }
    let hint = e.put_hint.as_mut().unwrap_or(hint);
    tags.put_batch(hint, &buf[..n]);
}

/// Takes up to `n` tags one at a time into the cache; returns how many it got.
fn fill_single(e: &mut Entry, tags: &Tags, hint: &mut AllocHint, n: u32) -> u64 {
    let mut got = 0;
    for _ in 0..n {
        let Some(tag) = tags.get(hint) else { break };
        e.cache.push(TagBatch {
            mask: 1,
            offset: u32::from(tag),
        });
        got += 1;
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hctx::HctxQueues;
    use crate::request::{Op, ReqFlags};
    use crate::tags::TagsOptions;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    /// One device as a submitter sees it: its queue sets, and per mapped type the tags (and
    /// the submitter's hint) of its hctx.
    struct Dev {
        key: DevKey,
        queues: HctxQueues,
        hctx: HashMap<HctxType, (Arc<Tags>, AllocHint)>,
    }

    impl Dev {
        fn new(key: u32, queues: HctxQueues, depth: u32) -> Dev {
            let hctx = HctxType::ALL
                .into_iter()
                .filter(|&ty| queues.count(ty) > 0)
                .map(|ty| {
                    let tags = Arc::new(
                        Tags::new(TagsOptions {
                            depth,
                            ..Default::default()
                        })
                        .unwrap(),
                    );
                    let hint = tags.new_hint();
                    (ty, (tags, hint))
                })
                .collect();
            Dev {
                key: DevKey(key),
                queues,
                hctx,
            }
        }

        fn ty(&self, op: Op, flags: ReqFlags) -> HctxType {
            self.queues.map(op, flags).0
        }

        fn busy(&self) -> u32 {
            self.hctx.values().map(|(t, _)| t.busy()).sum()
        }
    }

    const ALL_QUEUES: HctxQueues = HctxQueues {
        default: 1,
        read: 1,
        poll: 1,
    };
    const NO_READ_QUEUES: HctxQueues = HctxQueues {
        default: 1,
        read: 0,
        poll: 1,
    };

    /// (device index, op, flags) of one I/O.
    type Sub = (usize, Op, ReqFlags);

    /// Runs one burst: expect everything, then take everything. Returns the tags taken per
    /// (device, type) and checks none is handed out twice.
    fn burst(
        plug: &mut Plug,
        devs: &mut [Dev],
        subs: &[Sub],
    ) -> HashMap<(usize, HctxType), Vec<u16>> {
        plug.begin();
        for &(d, op, flags) in subs {
            let ty = devs[d].ty(op, flags);
            plug.expect(devs[d].key, ty, 1);
        }
        let mut taken: HashMap<(usize, HctxType), Vec<u16>> = HashMap::new();
        for &(d, op, flags) in subs {
            let dev = &mut devs[d];
            let ty = dev.ty(op, flags);
            let (tags, hint) = dev.hctx.get_mut(&ty).unwrap();
            let tag = plug.take(dev.key, ty, tags, hint).expect("a free tag");
            assert!(u32::from(tag) < tags.depth());
            let list = taken.entry((d, ty)).or_default();
            assert!(!list.contains(&tag), "tag {tag} of {ty:?} handed out twice");
            list.push(tag);
        }
        plug.finish();
        taken
    }

    /// Frees the taken tags, as completion does.
    fn complete(devs: &mut [Dev], taken: HashMap<(usize, HctxType), Vec<u16>>) {
        for ((d, ty), list) in taken {
            let (tags, hint) = devs[d].hctx.get_mut(&ty).unwrap();
            tags.put_batch(hint, &list);
        }
    }

    fn mixed_burst() -> Vec<Sub> {
        let mut subs = Vec::new();
        for i in 0..8 {
            subs.push((0, Op::Read, ReqFlags::NONE));
            subs.push((0, Op::Write, ReqFlags::NONE));
            subs.push((0, Op::Read, ReqFlags::POLLED));
            subs.push((1, Op::Read, ReqFlags::NONE));
            if i % 2 == 0 {
                subs.push((0, Op::Flush, ReqFlags::NONE));
            }
        }
        subs
    }

    #[test]
    fn mixed_burst_never_misses() {
        let mut devs = [
            Dev::new(0, ALL_QUEUES, 128),
            Dev::new(1, HctxQueues::DEFAULT_ONLY, 128),
        ];
        let mut plug = Plug::default();
        let subs = mixed_burst();
        let taken = burst(&mut plug, &mut devs, &subs);
        let s = *plug.stats();
        assert_eq!(s.cache_misses, 0, "{s:?}");
        assert_eq!(s.cache_hits, subs.len() as u64);
        assert_eq!(s.leftovers_freed, 0, "counted exactly");
        // One batch per (device, type): dev0 read, default, poll; dev1 default (its reads).
        assert_eq!(taken.len(), 4);
        assert!(taken.contains_key(&(1, HctxType::Default)));
        assert_eq!(s.batches_obtained, 4);
        assert_eq!(s.batch_tags, subs.len() as u64);
        // Each device's batch is sized by its own I/O only.
        assert_eq!(taken[&(0, HctxType::Read)].len(), 8);
        assert_eq!(taken[&(0, HctxType::Default)].len(), 12, "writes + flushes");
        assert_eq!(taken[&(0, HctxType::Poll)].len(), 8);
        assert_eq!(taken[&(1, HctxType::Default)].len(), 8);
        assert_eq!(devs[0].busy() + devs[1].busy(), subs.len() as u32);
        complete(&mut devs, taken);
        assert_eq!(devs[0].busy() + devs[1].busy(), 0);
    }

    #[test]
    fn reads_share_default_requests_without_read_queues() {
        let mut devs = [
            Dev::new(0, NO_READ_QUEUES, 128),
            Dev::new(1, HctxQueues::DEFAULT_ONLY, 128),
        ];
        let mut plug = Plug::default();
        let subs = mixed_burst();
        let taken = burst(&mut plug, &mut devs, &subs);
        let s = *plug.stats();
        assert_eq!(s.cache_misses, 0, "{s:?}");
        assert_eq!(s.cache_hits, subs.len() as u64);
        // dev0's reads, writes and flushes come from one Default batch; polled reads stay apart.
        assert_eq!(taken.len(), 3);
        assert_eq!(taken[&(0, HctxType::Default)].len(), 8 + 8 + 4);
        assert_eq!(taken[&(0, HctxType::Poll)].len(), 8);
        assert_eq!(s.batches_obtained, 3);
        complete(&mut devs, taken);
        assert_eq!(devs[0].busy() + devs[1].busy(), 0);
    }

    #[test]
    fn warm_plug_reuses_entries_across_bursts() {
        let mut devs = [
            Dev::new(0, ALL_QUEUES, 256),
            Dev::new(1, HctxQueues::DEFAULT_ONLY, 256),
        ];
        let mut plug = Plug::default();
        let subs = mixed_burst();
        for _ in 0..5 {
            let taken = burst(&mut plug, &mut devs, &subs);
            complete(&mut devs, taken);
        }
        let s = *plug.stats();
        assert_eq!(s.bursts, 5);
        assert_eq!(s.cache_misses, 0);
        assert_eq!(plug.entries.len(), 4, "one entry per (device, type), kept");
        assert!(plug.entries.iter().all(|e| e.cache.capacity() == 64));
    }

    /// Takes every tag of `tags`, then frees all but `keep_busy` bits of every word, directly
    /// (put_batch), so each word's first free bit is 0 and a batch window of a whole word holds
    /// `bits_per_word - keep_busy.len()` free bits.
    fn occupy_scattered(tags: &Tags, hint: &mut AllocHint, keep_busy: &[u32]) -> Vec<u16> {
        let mut all = Vec::new();
        while let Some(b) = tags.get_batch(hint, 64) {
            all.extend(b);
        }
        assert_eq!(all.len() as u32, tags.depth());
        let bpw = tags.max_batch();
        let (busy, free): (Vec<u16>, Vec<u16>) = all
            .into_iter()
            .partition(|&t| keep_busy.contains(&(u32::from(t) % bpw)));
        tags.put_batch(hint, &free);
        busy
    }

    #[test]
    fn partial_batch_is_completed_by_retry() {
        let tags = Arc::new(Tags::new(TagsOptions::default()).unwrap()); // 128 = 4 × 32
        assert_eq!(tags.max_batch(), 32);
        let mut hint = tags.new_hint();
        let pinned = occupy_scattered(&tags, &mut hint, &[5, 20]);
        assert_eq!(pinned.len(), 8);

        let mut plug = Plug::default();
        let dev = DevKey(7);
        plug.begin();
        plug.expect(dev, HctxType::Default, 32);
        let mut got = HashSet::new();
        for _ in 0..32 {
            let t = plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap();
            assert!(!pinned.contains(&t), "tag {t} is busy elsewhere");
            assert!(got.insert(t), "tag {t} handed out twice");
        }
        plug.finish();
        let s = *plug.stats();
        assert_eq!(s.cache_misses, 0, "{s:?}");
        assert_eq!(s.batches_asked, 2, "{s:?}");
        assert_eq!(s.batches_obtained, 2);
        assert_eq!(s.retries, 1, "the short first batch was retried");
        assert_eq!(s.batch_tags, 32, "30 from the first word, 2 from the retry");
        assert_eq!(s.single_fallbacks, 0, "nothing taken one by one");
        assert_eq!(s.tags_per_batch(), 16.0);
        assert_eq!(tags.busy(), 32 + 8);
    }

    #[test]
    fn retries_take_every_free_tag_in_batches() {
        // depth 64 = 4 words of 16. Keep 8 scattered bits busy per word... every other bit,
        // so each batch window yields half of what it asks.
        let tags = Arc::new(
            Tags::new(TagsOptions {
                depth: 64,
                ..Default::default()
            })
            .unwrap(),
        );
        assert_eq!((tags.words(), tags.max_batch()), (4, 16));
        let mut hint = tags.new_hint();
        let odd: Vec<u32> = (1..16).step_by(2).collect();
        let pinned = occupy_scattered(&tags, &mut hint, &odd);
        assert_eq!(pinned.len(), 32);

        let mut plug = Plug::default();
        let dev = DevKey(0);
        plug.begin();
        plug.expect(dev, HctxType::Default, 40); // more than the 32 free tags
        let mut got = HashSet::new();
        while let Some(t) = plug.take(dev, HctxType::Default, &tags, &mut hint) {
            assert!(got.insert(t), "tag {t} handed out twice");
            assert_eq!(t % 2, 0, "odd tags are busy");
        }
        assert_eq!(got.len(), 32, "every free tag obtained");
        plug.finish();
        let s = *plug.stats();
        // One batch per word (8 free bits each), then one that finds nothing.
        assert!(s.retries <= u64::from(tags.words()), "{s:?}");
        assert_eq!(s.batch_tags, 32, "{s:?}");
        assert_eq!(s.single_fallbacks, 0, "{s:?}");
        assert!(s.exhausted >= 1);
    }

    #[test]
    fn scattered_free_tags_need_one_batch_per_word() {
        // The O_DIRECT refill: 128 tags in 4 words of 32, 96 in flight, the 32 free ones
        // scattered (every fourth bit), a burst of 32. A retry sized to the remainder would get
        // a tag or two per window; whole-word retries get each word's 8 in one go.
        let tags = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        assert_eq!((tags.words(), tags.max_batch()), (4, 32));
        let mut hint = tags.new_hint();
        let busy: Vec<u32> = (0..32).filter(|b| b % 4 != 0).collect();
        let pinned = occupy_scattered(&tags, &mut hint, &busy);
        assert_eq!(pinned.len(), 96);

        let mut plug = Plug::default();
        let dev = DevKey(3);
        plug.begin();
        plug.expect(dev, HctxType::Default, 30);
        let mut got = HashSet::new();
        for _ in 0..30 {
            let t = plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap();
            assert_eq!(t % 4, 0, "tag {t} is busy elsewhere");
            assert!(got.insert(t), "tag {t} handed out twice");
        }
        plug.finish();
        let s = *plug.stats();
        assert_eq!(s.single_fallbacks, 0, "{s:?}");
        assert_eq!(s.batch_tags, 30, "{s:?}");
        assert!(s.batches_asked <= 5, "{s:?}");
        // The 2 surplus tags of the last word went back: 96 + 30 busy.
        assert_eq!(tags.busy(), 96 + 30, "{s:?}");
    }

    #[test]
    fn leftovers_are_freed_at_finish() {
        let tags = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        let mut hint = tags.new_hint();
        let mut plug = Plug::default();
        let dev = DevKey(3);
        plug.begin();
        plug.expect(dev, HctxType::Read, 32);
        let got: Vec<u16> = (0..10)
            .map(|_| plug.take(dev, HctxType::Read, &tags, &mut hint).unwrap())
            .collect();
        assert_eq!(plug.cached(dev, HctxType::Read), 22);
        assert_eq!(tags.busy(), 32);
        plug.finish();
        assert_eq!(plug.stats().leftovers_freed, 22);
        assert_eq!(plug.cached(dev, HctxType::Read), 0);
        assert_eq!(tags.busy(), 10, "only the taken tags stay busy");
        tags.put_batch(&mut hint, &got);
        assert_eq!(tags.busy(), 0);
    }

    #[test]
    fn unexpected_takes_miss_and_nesting_defers_finish() {
        let tags = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        let mut hint = tags.new_hint();
        let mut plug = Plug::default();
        let dev = DevKey(0);
        // Outside a burst: expect is ignored, take is a plain get.
        plug.expect(dev, HctxType::Default, 5);
        let a = plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap();
        assert_eq!(plug.stats().cache_misses, 1);
        assert_eq!(tags.busy(), 1);

        plug.begin();
        plug.begin();
        plug.expect(dev, HctxType::Default, 2);
        let b = plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap();
        plug.finish(); // inner: nothing freed yet
        assert!(plug.is_active());
        assert_eq!(plug.cached(dev, HctxType::Default), 1);
        let c = plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap();
        let d = plug.take(dev, HctxType::Default, &tags, &mut hint).unwrap(); // beyond the count
        plug.finish();
        assert!(!plug.is_active());
        let s = *plug.stats();
        assert_eq!((s.bursts, s.cache_hits, s.cache_misses), (1, 2, 2), "{s:?}");
        tags.put_batch(&mut hint, &[a, b, c, d]);
        assert_eq!(tags.busy(), 0);
    }

    #[test]
    fn single_expected_request_and_round_robin_take_single_tags() {
        let tags = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        let rr = Arc::new(
            Tags::new(TagsOptions {
                round_robin: true,
                ..Default::default()
            })
            .unwrap(),
        );
        let (mut hint, mut rr_hint) = (tags.new_hint(), rr.new_hint());
        let mut plug = Plug::default();
        plug.begin();
        plug.expect(DevKey(0), HctxType::Default, 1);
        plug.expect(DevKey(1), HctxType::Default, 3);
        let a = plug
            .take(DevKey(0), HctxType::Default, &tags, &mut hint)
            .unwrap();
        let rr_tags: Vec<u16> = (0..3)
            .map(|_| {
                plug.take(DevKey(1), HctxType::Default, &rr, &mut rr_hint)
                    .unwrap()
            })
            .collect();
        plug.finish();
        let s = *plug.stats();
        assert_eq!(s.single_fills, 1);
        assert_eq!(s.single_fallbacks, 3, "round robin refuses batches");
        assert_eq!(s.batches_asked, 0);
        assert_eq!(s.cache_misses, 0);
        tags.put(&mut hint, a);
        rr.put_batch(&mut rr_hint, &rr_tags);
        assert_eq!(tags.busy() + rr.busy(), 0);
    }

    #[test]
    fn forget_and_drop_free_cached_tags() {
        let tags = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        let mut hint = tags.new_hint();
        let mut plug = Plug::default();
        plug.register(DevKey(0), HctxType::Default, &tags);
        assert_eq!(Arc::strong_count(&tags), 2);
        plug.begin();
        plug.expect(DevKey(0), HctxType::Default, 8);
        plug.expect(DevKey(1), HctxType::Default, 8);
        let a = plug
            .take(DevKey(0), HctxType::Default, &tags, &mut hint)
            .unwrap();
        let b = plug
            .take(DevKey(1), HctxType::Default, &tags, &mut hint)
            .unwrap();
        assert_eq!(tags.busy(), 16);
        plug.forget(DevKey(0));
        assert_eq!(tags.busy(), 9);
        assert_eq!(
            Arc::strong_count(&tags),
            2,
            "dev 0's Arc dropped, dev 1's held"
        );
        drop(plug); // mid-burst
        assert_eq!(tags.busy(), 2);
        assert_eq!(Arc::strong_count(&tags), 1);
        tags.put_batch(&mut hint, &[a, b]);
        assert_eq!(tags.busy(), 0);
    }

    #[test]
    fn take_from_other_tags_rebinds_instead_of_using_the_cache() {
        let a = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        let b = Arc::new(Tags::new(TagsOptions::default()).unwrap());
        let (mut ha, mut hb) = (a.new_hint(), b.new_hint());
        let mut plug = Plug::default();
        let dev = DevKey(5);
        plug.begin();
        plug.expect(dev, HctxType::Default, 8);
        let t = plug.take(dev, HctxType::Default, &a, &mut ha).unwrap();
        assert_eq!(plug.cached(dev, HctxType::Default), 7);
        // The device's queue was reopened with new tags: the fast path must not hand out
        // a tag cached from the old ones.
        let u = plug.take(dev, HctxType::Default, &b, &mut hb).unwrap();
        assert_eq!(a.busy(), 1, "the old cache went back to its tags");
        assert_eq!(b.busy(), 1);
        plug.finish();
        a.put(&mut ha, t);
        b.put(&mut hb, u);
        assert_eq!(a.busy() + b.busy(), 0);
    }

    #[test]
    fn large_bursts_refill_without_misses() {
        let tags = Arc::new(
            Tags::new(TagsOptions {
                depth: 1024,
                ..Default::default()
            })
            .unwrap(),
        );
        let mut hint = tags.new_hint();
        let mut plug = Plug::new(PlugOptions { max_cached: 32 });
        plug.begin();
        plug.expect(DevKey(0), HctxType::Default, 100);
        let got: HashSet<u16> = (0..100)
            .map(|_| {
                plug.take(DevKey(0), HctxType::Default, &tags, &mut hint)
                    .unwrap()
            })
            .collect();
        plug.finish();
        assert_eq!(got.len(), 100);
        let s = *plug.stats();
        assert_eq!(s.cache_misses, 0, "{s:?}");
        assert!(plug.entries[0].cache.capacity() == 32, "cache never grew");
        assert_eq!(tags.busy(), 100);
    }

    fn arb_sub() -> impl Strategy<Value = (usize, Op, bool)> {
        (
            0..2usize,
            prop::sample::select(Op::ALL.to_vec()),
            any::<bool>(),
        )
    }

    /// A step of a random burst: expect (with a possibly wrong count), take, or complete.
    #[derive(Clone, Debug)]
    enum Step {
        Expect(usize, Op, bool, u32),
        Take(usize, Op, bool),
        Complete(usize),
    }

    fn arb_step() -> impl Strategy<Value = Step> {
        prop_oneof![
            1 => (arb_sub(), 0..6u32).prop_map(|((d, op, p), n)| Step::Expect(d, op, p, n)),
            3 => arb_sub().prop_map(|(d, op, p)| Step::Take(d, op, p)),
            1 => (0..64usize).prop_map(Step::Complete),
        ]
    }

    proptest! {
        #[test]
        fn prop_random_bursts_never_double_allocate(
            bursts in prop::collection::vec(prop::collection::vec(arb_step(), 0..60), 1..6),
            read_queues in any::<bool>(),
            depth in prop::sample::select(vec![8u32, 32, 64, 128]),
            max_cached in 1..40u32,
        ) {
            let q0 = if read_queues { ALL_QUEUES } else { NO_READ_QUEUES };
            let mut devs = [Dev::new(0, q0, depth), Dev::new(1, HctxQueues::DEFAULT_ONLY, depth)];
            let mut plug = Plug::new(PlugOptions { max_cached });
            // Outstanding (taken, not completed) tags per (device, type).
            let mut outstanding: Vec<(usize, HctxType, u16)> = Vec::new();
            let (mut takes, mut nones) = (0u64, 0u64);
            for steps in &bursts {
                plug.begin();
                for step in steps {
                    match *step {
                        Step::Expect(d, op, p, n) => {
                            let flags = if p { ReqFlags::POLLED } else { ReqFlags::NONE };
                            let ty = devs[d].ty(op, flags);
                            plug.expect(devs[d].key, ty, n);
                        }
                        Step::Take(d, op, p) => {
                            let flags = if p { ReqFlags::POLLED } else { ReqFlags::NONE };
                            let dev = &mut devs[d];
                            let ty = dev.ty(op, flags);
                            let (tags, hint) = dev.hctx.get_mut(&ty).unwrap();
                            takes += 1;
                            let Some(tag) = plug.take(dev.key, ty, tags, hint) else {
                                nones += 1;
                                continue;
                            };
                            prop_assert!(u32::from(tag) < depth);
                            prop_assert!(
                                !outstanding.contains(&(d, ty, tag)),
                                "tag {} of dev {} {:?} handed out twice", tag, d, ty
                            );
                            outstanding.push((d, ty, tag));
                        }
                        Step::Complete(i) if !outstanding.is_empty() => {
                            let (d, ty, tag) = outstanding.swap_remove(i % outstanding.len());
                            let (tags, hint) = devs[d].hctx.get_mut(&ty).unwrap();
                            tags.put(hint, tag);
                        }
                        Step::Complete(_) => {}
                    }
                }
                plug.finish();
                // After finish, exactly the outstanding tags are busy.
                for (d, dev) in devs.iter().enumerate() {
                    for (&ty, (tags, _)) in &dev.hctx {
                        let n = outstanding.iter().filter(|o| o.0 == d && o.1 == ty).count();
                        prop_assert_eq!(tags.busy() as usize, n);
                    }
                }
            }
            let s = *plug.stats();
            prop_assert_eq!(s.cache_hits + s.cache_misses, takes);
            prop_assert_eq!(s.exhausted, nones);
            prop_assert!(s.retries <= s.batches_asked);
            for (d, ty, tag) in outstanding.drain(..) {
                let (tags, hint) = devs[d].hctx.get_mut(&ty).unwrap();
                tags.put(hint, tag);
            }
            prop_assert_eq!(devs[0].busy() + devs[1].busy(), 0);
        }
    }
}
