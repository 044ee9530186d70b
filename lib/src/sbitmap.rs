//! A lockless scalable bitmap of tags (Linux's `lib/sbitmap.c`), one per hardware context.
//!
//! `depth` bits are split into words of [`Sbitmap::bits_per_word`] bits (see [`calculate_shift`]
//! for the rule). A set bit is a busy tag. Each word's allocation bits sit on their own cache line,
//! and the word's `cleared` bits (frees not yet folded back, written by [`Sbitmap::put`]) sit on
//! another, so a free does not bounce the line allocators are working on. Deferred frees are folded
//! into the allocation bits only when an allocator finds the word full.
//!
//! Each submitter (a reactor) owns an [`AllocHint`] that keeps it in its own region of the map:
//! it starts at a random bit, moves past a bit only when that very bit was handed out, jumps to
//! the bit a submitter just freed (it is cache-hot), and resets to 0 when the map is full.
//!
//! [`Sbitmap::get_batch`] takes up to a word of tags with one compare-and-swap per word attempt and
//! returns `(mask, offset)`: tag `offset + i` for every set bit `i` of `mask`, which holds only
//! the bits that were free (it may be partial and non-contiguous).
//!
//! ```
//! use pmio::sbitmap::{AllocHint, Sbitmap, SbitmapOptions};
//!
//! let sb = Sbitmap::new(1024, SbitmapOptions::default());
//! let mut hint = AllocHint::new(&sb);
//! let (mask, offset) = sb.get_batch(&mut hint, 32).expect("the map is empty");
//! let tags: Vec<u16> = (0..64)
//!     .filter(|i| mask & (1u64 << i) != 0)
//!     .map(|i| (offset + i) as u16)
//!     .collect();
//! assert_eq!(tags.len(), 32);
//! assert_eq!(sb.busy(), 32);
//! sb.put_batch(&mut hint, &tags);
//! assert_eq!(sb.busy(), 0);
//! ```
//!
//! Memory ordering: taking a bit is an acquire, freeing one (into `cleared` or the word) is a
//! release, and folding `cleared` into the word is an acquire (of the frees) followed by a
//! release (to the next allocator), so whatever a tag's previous owner wrote before freeing it
//! happens-before whatever its next owner does after getting it.

use std::cell::Cell;
use std::marker::PhantomData;

use self::sync::{AtomicU32, AtomicU64, Ordering};

#[cfg(all(test, loom))]
mod loom_tests;

/// Atomics: loom's under `cfg(loom)` (model checking), std's otherwise.
mod sync {
    #[cfg(loom)]
    pub(super) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    #[cfg(not(loom))]
    pub(super) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
}

/// log2 of the widest word (64 bits).
const MAX_SHIFT: u32 = 6;

/// The batch a plug asks for; a word holds at least this many bits when the depth allows it.
pub const BATCH_BITS: u32 = 32;

/// From this depth on a word holds at least [`BATCH_BITS`] bits.
pub const BATCH_WORD_MIN_DEPTH: u32 = 128;

/// log2 of the number of bits per word for a map of `depth` bits.
///
/// The rule (Linux's `sbitmap_calculate_shift` plus a batch guarantee):
/// 1. Start from 64-bit words.
/// 2. If `depth >= 4`, halve the word while it would leave fewer than 4 words
///    (`4 << shift > depth`), so allocators spread over at least 4 cache lines.
///    A depth below 4 keeps one 64-bit word.
/// 3. If `depth >= 128` ([`BATCH_WORD_MIN_DEPTH`]), a word holds at least 32 bits
///    ([`BATCH_BITS`]), so one word can serve a full plug batch ([`Sbitmap::get_batch`] never
///    spans words).
///
/// With step 2 alone a depth of 128 already gets 32-bit words (4 × 32), so step 3 only states the
/// guarantee; it is checked by a unit test over every depth. Examples: depth 1023 → 64 bits × 16
/// words; 256 → 64 × 4; 128..=255 → 32-bit words; 64 → 16 × 4; 32 → 8 × 4; 4 → 1 × 4; 3 → one
/// word.
pub const fn calculate_shift(depth: u32) -> u32 {
    let mut shift = MAX_SHIFT;
    if depth >= 4 {
        while (4u64 << shift) > depth as u64 {
            shift -= 1;
        }
    }
    if depth >= BATCH_WORD_MIN_DEPTH && (1u32 << shift) < BATCH_BITS {
        shift = BATCH_BITS.trailing_zeros();
    }
    shift
}

/// Options of an [`Sbitmap`], fixed at construction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SbitmapOptions {
    /// Hand tags out strictly in order (each get continues after the last tag handed out).
    /// Batching is refused in this mode ([`Sbitmap::get_batch`] returns `None`). Default: false.
    pub round_robin: bool,
}

/// Maps of at most this many words gather a `put_batch`'s bits per word before clearing them.
const GATHER_WORDS: usize = 64;
/// Maps of at most this many words (every map up to 512 tags) gather into a smaller local
/// array: zeroing `GATHER_WORDS` words takes a `memset` call and eight cache lines of stack per
/// batch, where a handful of words is all a typical queue has.
const GATHER_WORDS_SMALL: usize = 8;

/// Pads (and aligns) its content to a cache line of its own.
#[repr(align(64))]
struct CacheLine<T>(T);

/// One word of the map: allocation bits and deferred frees, each on its own cache line.
struct SbitmapWord {
    /// Allocation bits: 1 = busy.
    word: CacheLine<AtomicU64>,
    /// Freed bits not yet folded into `word` (they stay set in `word` until then).
    cleared: CacheLine<AtomicU64>,
}

impl SbitmapWord {
    fn new() -> Self {
        SbitmapWord {
            word: CacheLine(AtomicU64::new(0)),
            cleared: CacheLine(AtomicU64::new(0)),
        }
    }
}

/// The mask of the low `bits` bits (`bits` ≤ 64; 64 gives the full word without shifting by 64).
#[inline]
const fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// How a shallow limit over the whole map is shared out per word (see
/// [`Sbitmap::get_shallow`]): each word gets its proportional share rounded down, and the
/// shares lost to rounding go, one each, to the leading words, so the shares add up exactly to
/// the limit.
#[derive(Clone, Copy, Debug)]
struct ShallowSplit {
    /// Share of a full word.
    per_full: u32,
    /// Share of the last, short word (if any).
    per_last: u32,
    /// Words `0..extra` get one more.
    extra: u32,
}

/// A lockless bitmap of `depth` tags; see the [module documentation](self).
///
/// The words for the depth given to [`Sbitmap::new`] are allocated once; [`Sbitmap::resize`]
/// changes the depth within that capacity without allocating.
pub struct Sbitmap {
    /// The words for the initial depth (the capacity).
    map: Box<[SbitmapWord]>,
    /// Bits in use: `depth <= capacity`.
    depth: AtomicU32,
    /// The depth the map was created with.
    capacity: u32,
    /// log2 of bits per word.
    shift: u32,
    round_robin: bool,
}

/// A submitter's allocation hint for one [`Sbitmap`]: the tag its next search starts from.
///
/// Owned by the caller (one per reactor), never shared: it is `Send` but not `Sync`. It carries
/// its own small random generator, used when the hint must be re-randomised after a shrink.
#[derive(Debug)]
pub struct AllocHint {
    hint: u32,
    rng: u32,
    _not_sync: PhantomData<Cell<()>>,
}

impl AllocHint {
    /// A hint at a random position of `sb` (0 in round-robin mode or for an empty map).
    pub fn new(sb: &Sbitmap) -> Self {
        let mut h = AllocHint {
            hint: 0,
            rng: seed(),
            _not_sync: PhantomData,
        };
        let depth = sb.depth();
        if !sb.round_robin && depth > 0 {
            h.hint = h.random_below(depth);
        }
        h
    }

    /// A hint starting at `start` (deterministic; for tests and for callers that spread
    /// submitters themselves). A start beyond the depth is re-randomised at the next get.
    pub fn with_start(start: u32) -> Self {
        AllocHint {
            hint: start,
            rng: seed(),
            _not_sync: PhantomData,
        }
    }

    /// The tag the next search starts from.
    pub fn value(&self) -> u32 {
        self.hint
    }

    /// A pseudo-random number in `0..n` (`n > 0`), xorshift32 with Lemire's reduction.
    fn random_below(&mut self, n: u32) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        ((u64::from(x) * u64::from(n)) >> 32) as u32
    }
}

/// A cheap, non-zero seed for a hint's generator: a process-wide counter and a stack address
/// hashed with std's randomly keyed SipHash (`RandomState`, keyed once per thread from the OS).
/// Not for anything but spreading submitters over the map.
fn seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    // Plain std atomic even under loom: it is not part of the modelled state.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let local = 0u8;
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    h.write_usize(std::ptr::addr_of!(local) as usize);
    let z = h.finish();
    (z as u32 ^ (z >> 32) as u32) | 1
}

impl Sbitmap {
    /// A map of `depth` free tags, words sized by [`calculate_shift`].
    pub fn new(depth: u32, opts: SbitmapOptions) -> Self {
        let shift = calculate_shift(depth);
        let words = depth.div_ceil(1 << shift);
        Sbitmap {
            map: (0..words).map(|_| SbitmapWord::new()).collect(),
            depth: AtomicU32::new(depth),
            capacity: depth,
            shift,
            round_robin: opts.round_robin,
        }
    }

    /// Tags currently in use (changed by [`Sbitmap::resize`]).
    pub fn depth(&self) -> u32 {
        self.depth.load(Ordering::Relaxed)
    }

    /// The depth the map was created with: the most [`Sbitmap::resize`] can grow to.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Bits per word (a power of two, at most 64): the largest batch [`Sbitmap::get_batch`] can
    /// return.
    pub fn bits_per_word(&self) -> u32 {
        1 << self.shift
    }

    /// log2 of [`Sbitmap::bits_per_word`].
    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// Number of words in use at the current depth.
    pub fn map_nr(&self) -> u32 {
        self.words_for(self.depth())
    }

    /// Whether the map hands out tags in round-robin order.
    pub fn is_round_robin(&self) -> bool {
        self.round_robin
    }

    #[inline]
    fn words_for(&self, depth: u32) -> u32 {
        depth.div_ceil(1 << self.shift)
    }

    /// Bits of word `index` in use at `depth` (the last word may be short).
    #[inline]
    fn map_depth(&self, depth: u32, index: u32) -> u32 {
        (depth - (index << self.shift)).min(1 << self.shift)
    }

    /// Takes one free tag, or `None` when every tag is busy.
    ///
    /// Searches from the hinted word (from its bit 0, or from the hinted bit in round-robin mode)
    /// over every word, folding a word's deferred frees in when it looks full.
    #[inline]
    pub fn get(&self, hint: &mut AllocHint) -> Option<u32> {
        let depth = self.depth.load(Ordering::Relaxed);
        let h = self.hint_before_get(hint, depth);
        let index = h >> self.shift;
        let nr = if self.round_robin {
            self.find_bit(depth, None, index, h & (self.bits_per_word() - 1), false)
        } else {
            self.get_from_hinted_word(depth, index)
                .or_else(|| self.find_bit(depth, None, index, 0, true))
        };
        self.hint_after_get(hint, depth, h, nr);
        nr
    }

    /// Fast path of [`Sbitmap::get`]: the first free bit of word `index`, if this one attempt
    /// wins it (anything else — a full word, a lost race, deferred frees — is left to
    /// [`Sbitmap::find_bit`], which starts over from the same word).
    #[inline]
    fn get_from_hinted_word(&self, depth: u32, index: u32) -> Option<u32> {
        let word = &self.map.get(index as usize)?.word.0;
        let free = !word.load(Ordering::Relaxed) & low_mask(self.map_depth(depth, index));
        if free == 0 {
            return None;
        }
        let bit = 1u64 << free.trailing_zeros();
        (word.fetch_or(bit, Ordering::Acquire) & bit == 0)
            .then(|| (index << self.shift) + free.trailing_zeros())
    }

    /// Takes one free tag among the first `shallow_depth` tags' worth of each word, or `None`.
    ///
    /// `shallow_depth` limits the whole map (as Linux since 2025, 42e6c6ce03fd): word `i` may
    /// use its low `share(i)` bits, where `share(i)` is `shallow_depth` × (bits of word `i`) /
    /// depth rounded down, and the units lost to rounding go one each to the leading words, so
    /// the shares add up to exactly `min(shallow_depth, depth)`. (Linux's per-word formula can
    /// come out one short in total when the last word is short.) A `shallow_depth` of 0 gets
    /// nothing.
    pub fn get_shallow(&self, hint: &mut AllocHint, shallow_depth: u32) -> Option<u32> {
        if shallow_depth == 0 {
            return None;
        }
        let depth = self.depth.load(Ordering::Relaxed);
        let h = self.hint_before_get(hint, depth);
        let split = self.shallow_split(depth, shallow_depth);
        let nr = self.find_bit(
            depth,
            split,
            h >> self.shift,
            h & (self.bits_per_word() - 1),
            true,
        );
        self.hint_after_get(hint, depth, h, nr);
        nr
    }

    /// Bits word `index` may use under a shallow limit of `shallow` tags (`None`: no limit).
    /// Equals `ShallowSplit`'s share; a test checks the shares add up to `shallow`.
    pub fn shallow_word_depth(&self, index: u32, shallow: u32) -> u32 {
        let depth = self.depth();
        if index >= self.words_for(depth) {
            return 0;
        }
        self.word_depth_with(depth, index, self.shallow_split(depth, shallow))
    }

    /// The per-word split of `shallow` over `depth`, or `None` when it does not limit anything.
    fn shallow_split(&self, depth: u32, shallow: u32) -> Option<ShallowSplit> {
        if shallow >= depth {
            return None;
        }
        let bpw = self.bits_per_word();
        let full_words = depth >> self.shift;
        let last = depth & (bpw - 1);
        let share = |bits: u32| (u64::from(bits) * u64::from(shallow) / u64::from(depth)) as u32;
        let per_full = share(bpw);
        let per_last = share(last);
        let extra = shallow - full_words * per_full - per_last;
        Some(ShallowSplit {
            per_full,
            per_last,
            extra,
        })
    }

    /// Bits of word `index` usable at `depth` under `split`.
    #[inline]
    fn word_depth_with(&self, depth: u32, index: u32, split: Option<ShallowSplit>) -> u32 {
        match split {
            None => self.map_depth(depth, index),
            Some(s) => {
                let base = if index < depth >> self.shift {
                    s.per_full
                } else {
                    s.per_last
                };
                base + u32::from(index < s.extra)
            }
        }
    }

    /// Walks the words from `index`, taking the first free bit found.
    ///
    /// The first word is searched from bit `alloc_hint`; with `wrap` the search wraps to bit 0
    /// of that word, without it (round robin) the start word is visited once more at the end,
    /// from bit 0, so a free tag is never missed.
    fn find_bit(
        &self,
        depth: u32,
        split: Option<ShallowSplit>,
        mut index: u32,
        mut alloc_hint: u32,
        wrap: bool,
    ) -> Option<u32> {
        let map_nr = self.words_for(depth);
        let visits = map_nr + u32::from(!wrap && alloc_hint != 0);
        for _ in 0..visits {
            let word_depth = self.word_depth_with(depth, index, split);
            if word_depth != 0
                && let Some(nr) = self.find_bit_in_word(index, word_depth, alloc_hint, wrap)
            {
                return Some((index << self.shift) + nr);
            }
            alloc_hint = 0;
            index += 1;
            if index >= map_nr {
                index = 0;
            }
        }
        None
    }

    /// Takes a free bit of word `index` among its low `word_depth` bits, folding deferred frees
    /// in when the word looks full; retries only while a retry can succeed (see
    /// [`Sbitmap::deferred_clear`]).
    fn find_bit_in_word(&self, index: u32, word_depth: u32, hint: u32, wrap: bool) -> Option<u32> {
        let w = &self.map[index as usize];
        loop {
            if let Some(nr) = get_word(&w.word.0, word_depth, hint, wrap) {
                return Some(nr);
            }
            if !deferred_clear(w, word_depth, hint, wrap) {
                return None;
            }
        }
    }

    /// Takes up to `nr` free tags (at most a word's worth, and 64 at most) from one word.
    ///
    /// Returns `(mask, offset)`: tag `offset + i` for each set bit `i` of `mask`. The mask has at
    /// most `nr` bits, all of them bits that were free, but it may be partial and non-contiguous
    /// (a window of `nr` bits starting at the word's first free bit is claimed with one
    /// compare-and-swap; bits busy inside it stay with their owners). `None` when no tag is free,
    /// when `nr` is 0, or in round-robin mode.
    ///
    /// Words are tried from the hinted one; a word that looks full, or whose window holds fewer
    /// than `nr` free bits while frees are pending, has its deferred frees folded in first.
    /// The caller retries for the rest if it wants more.
    pub fn get_batch(&self, hint: &mut AllocHint, nr: u32) -> Option<(u64, u32)> {
        if self.round_robin || nr == 0 {
            return None;
        }
        let depth = self.depth.load(Ordering::Relaxed);
        let h = self.hint_before_get(hint, depth);
        let map_nr = self.words_for(depth);
        let mut index = h >> self.shift;
        for _ in 0..map_nr {
            let word_depth = self.map_depth(depth, index);
            if let Some((mask, start)) = self.find_bits_in_word(index, word_depth, nr) {
                let offset = (index << self.shift) + start;
                // Move past the window if it handed out the hinted tag.
                if h >= offset && h - offset < 64 && mask & (1u64 << (h - offset)) != 0 {
                    let next = offset + nr.min(word_depth);
                    hint.hint = if next >= depth { 0 } else { next };
                }
                return Some((mask, offset));
            }
            index += 1;
            if index >= map_nr {
                index = 0;
            }
        }
        hint.hint = 0;
        None
    }

    /// Claims up to `nr` free bits of word `index` (low `word_depth` bits) with one CAS per
    /// attempt; returns `(mask, start)` relative to the word. At most one fold of deferred frees
    /// per call; gives up when the word is still full after it.
    fn find_bits_in_word(&self, index: u32, word_depth: u32, nr: u32) -> Option<(u64, u32)> {
        let w = &self.map[index as usize];
        let word = &w.word.0;
        let n = nr.min(word_depth).min(64);
        let valid = low_mask(word_depth);
        let mut folded = false;
        let mut val = word.load(Ordering::Relaxed);
        loop {
            let free = !val & valid;
            // Precise full test: `val | !valid == u64::MAX`.
            if free == 0 {
                if folded {
                    return None;
                }
                // Fold pending frees; even if another allocator folded them first, re-read the
                // word: it may have free bits by now (the 2024 `cleared` race).
                fold_cleared(w);
                folded = true;
                val = word.load(Ordering::Relaxed);
                continue;
            }
            // The window starts at the first free bit, slid back so it fits in the word.
            let start = free.trailing_zeros().min(word_depth - n);
            let window = low_mask(n) << start;
            if !folded
                && (free & window).count_ones() < n
                && w.cleared.0.load(Ordering::Relaxed) != 0
            {
                fold_cleared(w);
                folded = true;
                val = word.load(Ordering::Relaxed);
                continue;
            }
            match word.compare_exchange_weak(val, val | window, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some(((window & !val) >> start, start)),
                Err(current) => val = current,
            }
        }
    }

    /// Frees `tag` (deferred: sets it in its word's `cleared` bits, leaving the allocation line
    /// alone) and points the hint at it (it is cache-hot), unless in round-robin mode or the tag
    /// is beyond the current depth. A tag outside the map is logged and ignored.
    #[inline]
    pub fn put(&self, hint: &mut AllocHint, tag: u32) {
        if tag >= self.capacity {
            self.bad_put(tag);
            return;
        }
        let w = &self.map[(tag >> self.shift) as usize];
        let bit = 1u64 << (tag & (self.bits_per_word() - 1));
        let old = w.cleared.0.fetch_or(bit, Ordering::Release);
        debug_assert_eq!(old & bit, 0, "sbitmap: tag {tag} freed twice");
        if !self.round_robin && tag < self.depth.load(Ordering::Relaxed) {
            hint.hint = tag;
        }
    }

    /// Frees `tags` directly in the allocation words (no deferral): one atomic and-not per word
    /// the batch touches. Points the hint at the last tag (as [`Sbitmap::put`]). Tags outside
    /// the map are logged and ignored.
    ///
    /// Linux (`sbitmap_queue_clear_batch`) clears once per run of consecutive tags in one word.
    /// Completions of a real device come back in any order, which makes such runs short (about
    /// one atomic per two tags on a 128-deep map of four words); gathering each word's bits over
    /// the whole batch first costs a few register operations per tag instead.
    pub fn put_batch(&self, hint: &mut AllocHint, tags: &[u16]) {
        if self.map.len() <= GATHER_WORDS_SMALL {
            self.put_batch_gathered::<GATHER_WORDS_SMALL>(tags);
        } else if self.map.len() <= GATHER_WORDS {
            self.put_batch_gathered::<GATHER_WORDS>(tags);
        } else {
            self.put_batch_runs(tags);
        }
        if let Some(&last) = tags.last() {
            let last = u32::from(last);
            if !self.round_robin && last < self.depth.load(Ordering::Relaxed) {
                hint.hint = last;
            }
        }
    }

    /// `put_batch` for a map of at most `N` (≤ 64) words: each word's bits gathered over the
    /// batch, then one atomic per word touched.
    #[inline]
    fn put_batch_gathered<const N: usize>(&self, tags: &[u16]) {
        // Copied to a local: the atomics would otherwise make the compiler reload it.
        let shift = self.shift;
        let bit_mask = (1u32 << shift) - 1;
        let mut masks = [0u64; N];
        let mut touched = 0u64;
        for tag in self.tags_in_map(tags) {
            let i = (tag >> shift) as usize;
            masks[i] |= 1u64 << (tag & bit_mask);
            touched |= 1u64 << i;
        }
        while touched != 0 {
            let i = touched.trailing_zeros();
            touched &= touched - 1;
            self.clear_word_bits(i, masks[i as usize]);
        }
    }

    /// `put_batch` for larger maps: one atomic per run of consecutive tags in one word.
    fn put_batch_runs(&self, tags: &[u16]) {
        let shift = self.shift;
        let bit_mask = (1u32 << shift) - 1;
        let mut index = u32::MAX;
        let mut mask = 0u64;
        for tag in self.tags_in_map(tags) {
            let i = tag >> shift;
            if i != index {
                self.clear_word_bits(index, mask);
                index = i;
                mask = 0;
            }
            mask |= 1u64 << (tag & bit_mask);
        }
        self.clear_word_bits(index, mask);
    }

    /// The tags of a batch to free that lie inside the map; the others are logged and skipped.
    #[inline]
    fn tags_in_map<'a>(&'a self, tags: &'a [u16]) -> impl Iterator<Item = u32> + 'a {
        let capacity = self.capacity;
        tags.iter().map(|&t| u32::from(t)).filter(move |&t| {
            let inside = t < capacity;
            if !inside {
                self.bad_put(t);
            }
            inside
        })
    }

    /// Logs a free of a tag outside the map (a caller bug; the tag is ignored).
    #[cold]
    fn bad_put(&self, tag: u32) {
        log::error!(
            "sbitmap: put of tag {tag} beyond capacity {}",
            self.capacity
        );
    }

    /// Clears `mask` in word `index`'s allocation bits (nothing for an empty mask).
    #[inline]
    fn clear_word_bits(&self, index: u32, mask: u64) {
        if mask != 0 {
            let old = self.map[index as usize]
                .word
                .0
                .fetch_and(!mask, Ordering::Release);
            debug_assert_eq!(old & mask, mask, "sbitmap: put_batch of a free tag");
        }
    }

    /// Number of busy tags below the current depth (exact when the map is quiescent; a snapshot
    /// word by word otherwise). Tags freed with [`Sbitmap::put`] but not yet folded in count as
    /// free.
    pub fn busy(&self) -> u32 {
        let depth = self.depth();
        (0..self.words_for(depth))
            .map(|i| {
                let w = &self.map[i as usize];
                let word = w.word.0.load(Ordering::Relaxed);
                let cleared = w.cleared.0.load(Ordering::Relaxed);
                (word & !cleared & low_mask(self.map_depth(depth, i))).count_ones()
            })
            .sum()
    }

    /// Changes the depth to `depth`, capped at the capacity; returns the new depth. Allocates
    /// nothing. Pending deferred frees are folded in first. Tags beyond a shrunk depth that are
    /// busy stay busy until freed; hints beyond it are re-randomised at their next get.
    #[cold]
    pub fn resize(&self, depth: u32) -> u32 {
        let depth = depth.min(self.capacity);
        for w in self.map.iter() {
            fold_cleared(w);
        }
        self.depth.store(depth, Ordering::Release);
        depth
    }

    /// The hint to search from: re-randomised (0 in round-robin mode) when at or beyond `depth`,
    /// as after a shrink.
    #[inline]
    fn hint_before_get(&self, hint: &mut AllocHint, depth: u32) -> u32 {
        if hint.hint >= depth {
            self.rerandomise_hint(hint, depth);
        }
        hint.hint
    }

    #[cold]
    fn rerandomise_hint(&self, hint: &mut AllocHint, depth: u32) {
        hint.hint = if depth == 0 || self.round_robin {
            0
        } else {
            hint.random_below(depth)
        };
    }

    /// After a single get from `h`: map full → 0; got exactly the hinted tag (or round robin) →
    /// the next tag (wrapping); otherwise unchanged, so the submitter stays in its region.
    #[inline]
    fn hint_after_get(&self, hint: &mut AllocHint, depth: u32, h: u32, nr: Option<u32>) {
        match nr {
            None => hint.hint = 0,
            Some(nr) if nr == h || self.round_robin => {
                let next = nr + 1;
                hint.hint = if next >= depth { 0 } else { next };
            }
            Some(_) => {}
        }
    }
}

impl std::fmt::Debug for Sbitmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sbitmap")
            .field("depth", &self.depth())
            .field("capacity", &self.capacity)
            .field("bits_per_word", &self.bits_per_word())
            .field("round_robin", &self.round_robin)
            .field("busy", &self.busy())
            .finish()
    }
}

/// Takes a free bit among the low `depth` bits of `word`, searching from bit `hint` and, with
/// `wrap`, from bit 0 when nothing is free above it. Losing a race for a bit re-reads the word
/// (the lost bit is now busy, so the search moves on).
#[inline]
fn get_word(word: &AtomicU64, depth: u32, hint: u32, wrap: bool) -> Option<u32> {
    let valid = low_mask(depth);
    let above = !low_mask(hint);
    loop {
        let free = !word.load(Ordering::Relaxed) & valid;
        let nr = if free & above != 0 {
            (free & above).trailing_zeros()
        } else if wrap && free != 0 {
            free.trailing_zeros()
        } else {
            return None;
        };
        let bit = 1u64 << nr;
        if word.fetch_or(bit, Ordering::Acquire) & bit == 0 {
            return Some(nr);
        }
    }
}

/// Moves a word's deferred frees into its allocation bits; true if it moved any.
///
/// Lockless (Linux uses `swap_lock`): the `cleared` bits are taken with one exchange, so each
/// deferred free is folded by exactly one folder, then cleared from the word. Between the two
/// steps the taken bits are in neither place; [`deferred_clear`] accounts for that window.
#[inline]
fn fold_cleared(w: &SbitmapWord) -> bool {
    if w.cleared.0.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let mask = w.cleared.0.swap(0, Ordering::Acquire);
    if mask == 0 {
        return false;
    }
    w.word.0.fetch_and(!mask, Ordering::Release);
    true
}

/// Called when a search of a word's low `depth` bits (from `hint`, wrapping or not) found
/// nothing: folds deferred frees in and says whether searching again can succeed.
///
/// True if frees were folded, or if none were pending but the searchable bits (those at or
/// above `hint` when not wrapping — the range the search covers, else an endless loop) have a
/// free bit: another allocator folded them meanwhile (the 2024 race, 72d04bdcf3f7).
///
/// Why this neither hangs nor spins (two allocators A and B on a word whose free bits are all
/// in `cleared`): if A takes `cleared` and B then finds it empty before A has cleared the word,
/// B sees a full word and gives up on it; but A retries after its fold and gets a bit unless
/// another allocator took the freed bits, so the two never both fail for want of the same free
/// bits. Each retry follows either a fold of at least one free or a free bit seen in the range
/// searched, which the retry takes unless another allocator took it first; so every retry is
/// paid for by another thread's progress (lock-free), and a quiescent word is never retried
/// forever.
fn deferred_clear(w: &SbitmapWord, depth: u32, hint: u32, wrap: bool) -> bool {
    if fold_cleared(w) {
        return true;
    }
    if depth == 0 {
        return false;
    }
    let mut mask = low_mask(depth);
    if !wrap {
        mask &= !low_mask(hint);
    }
    w.word.0.load(Ordering::Relaxed) & mask != mask
}

#[cfg(all(test, not(loom)))]
mod tests;
