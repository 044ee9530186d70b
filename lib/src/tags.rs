//! Tags of one hardware context, and the fixed pool of requests they index.
//!
//! A hardware context (hctx) has `depth` **driver tags**, `0..depth`, and optionally
//! `reserved` **reserved tags**, `depth..depth + reserved`, kept for admin and internal
//! commands so they never wait behind normal I/O. Each range is its own [`Sbitmap`], so a
//! driver tag is the bitmap bit itself (batches need no translation) and a reserved tag is
//! `depth + bit`. As in blk-mq, reserved tags are taken one at a time: there is no batch
//! allocation for them, and none with a shallow-depth limit either ([`Tags::get_shallow`]).
//!
//! The tag is also the index of the request in the hctx's [`RequestPool`] and the driver's
//! command identifier (NVMe CID), so tags are `u16` and `depth + reserved <= 65536`.
//!
//! [`Tags`] is `Send + Sync`: the per-reactor queues of a device own theirs, while scheduler
//! tags are shared by every reactor through an `Arc<Tags>`. Each submitter keeps its own
//! [`AllocHint`] per bitmap ([`Tags::new_hint`], [`Tags::new_reserved_hint`]).
//!
//! ```
//! use pmio::HctxType;
//! use pmio::tags::{RequestPool, Tags, TagsOptions};
//!
//! let tags = Tags::new(TagsOptions { depth: 128, reserved: 1, ..Default::default() })?;
//! let pool = RequestPool::new(&tags, HctxType::Default);
//! let mut hint = tags.new_hint();
//! let batch = tags.get_batch(&mut hint, 8).expect("free tags");
//! let got: Vec<u16> = batch.iter().collect();
//! assert!(got.iter().all(|&t| t < 128 && pool[t].tag == t));
//! tags.put_batch(&mut hint, &got);
//! assert_eq!(tags.busy(), 0);
//! # Ok::<(), pmio::tags::TagsError>(())
//! ```

use std::ops::{Index, IndexMut};

use crate::hctx::HctxType;
use crate::request::Request;
use crate::sbitmap::{AllocHint, Sbitmap, SbitmapOptions};

/// Most tags one hctx may have (driver + reserved): tags are `u16`.
pub const MAX_TAGS: u32 = 1 << 16;

/// Shape of a hardware context's tags. Defaults: 128 driver tags, no reserved tags, normal
/// (not round-robin) allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagsOptions {
    /// Driver tags (`0..depth`), at least 1.
    pub depth: u32,
    /// Reserved tags (`depth..depth + reserved`).
    pub reserved: u32,
    /// Hand driver tags out strictly in order (sbitmap round-robin mode). Refuses batching.
    pub round_robin: bool,
}

impl Default for TagsOptions {
    fn default() -> Self {
        TagsOptions {
            depth: 128,
            reserved: 0,
            round_robin: false,
        }
    }
}

/// Invalid tag configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TagsError {
    /// No driver tags were asked for.
    #[error("tag depth must be at least 1")]
    ZeroDepth,
    /// More tags than a `u16` can name.
    #[error("{depth} driver + {reserved} reserved tags exceed the limit of {MAX_TAGS}")]
    TooMany { depth: u32, reserved: u32 },
}

impl TagsError {
    /// Negative errno in SPDK's convention.
    pub fn errno(&self) -> i32 {
        -libc::EINVAL
    }
}

/// A batch of driver tags from one bitmap word: tag `offset + i` for every set bit `i` of
/// `mask`. The mask may be partial and non-contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagBatch {
    /// Bit `i` set: tag `offset + i` is in the batch.
    pub mask: u64,
    /// The tag of bit 0.
    pub offset: u32,
}

impl TagBatch {
    /// Number of tags in the batch.
    #[inline]
    pub fn len(&self) -> u32 {
        self.mask.count_ones()
    }

    /// Whether the batch holds no tag.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// The tags, lowest first.
    #[inline]
    pub fn iter(&self) -> TagBatchIter {
        TagBatchIter {
            mask: self.mask,
            offset: self.offset,
        }
    }
}

impl IntoIterator for TagBatch {
    type Item = u16;
    type IntoIter = TagBatchIter;
    fn into_iter(self) -> TagBatchIter {
        self.iter()
    }
}

/// Iterator over the tags of a [`TagBatch`].
#[derive(Clone, Debug)]
pub struct TagBatchIter {
    mask: u64,
    offset: u32,
}

impl Iterator for TagBatchIter {
    type Item = u16;

    #[inline]
    fn next(&mut self) -> Option<u16> {
        if self.mask == 0 {
            return None;
        }
        let bit = self.mask.trailing_zeros();
        self.mask &= self.mask - 1;
        Some((self.offset + bit) as u16)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.mask.count_ones() as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for TagBatchIter {}

/// Driver and reserved tags of one hardware context (or one scheduler's tags).
#[derive(Debug)]
pub struct Tags {
    driver: Sbitmap,
    reserved: Option<Sbitmap>,
    depth: u32,
    nr_reserved: u32,
    words: u32,
    bits_per_word: u32,
    batching: bool,
}

impl Tags {
    /// Creates the bitmaps; validates the configuration once.
    pub fn new(opts: TagsOptions) -> Result<Tags, TagsError> {
        if opts.depth == 0 {
            return Err(TagsError::ZeroDepth);
        }
        if u64::from(opts.depth) + u64::from(opts.reserved) > u64::from(MAX_TAGS) {
            return Err(TagsError::TooMany {
                depth: opts.depth,
                reserved: opts.reserved,
            });
        }
        let driver = Sbitmap::new(
            opts.depth,
            SbitmapOptions {
                round_robin: opts.round_robin,
            },
        );
        let reserved =
            (opts.reserved > 0).then(|| Sbitmap::new(opts.reserved, SbitmapOptions::default()));
        let bits_per_word = driver.bits_per_word();
        Ok(Tags {
            words: driver.map_nr(),
            bits_per_word,
            driver,
            reserved,
            depth: opts.depth,
            nr_reserved: opts.reserved,
            batching: !opts.round_robin,
        })
    }

    /// Number of driver tags.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Number of reserved tags.
    pub fn reserved(&self) -> u32 {
        self.nr_reserved
    }

    /// Driver plus reserved tags: the size of the request pool.
    pub fn total(&self) -> u32 {
        self.depth + self.nr_reserved
    }

    /// Words of the driver bitmap (the bound on batch retries).
    pub fn words(&self) -> u32 {
        self.words
    }

    /// Most tags one [`Tags::get_batch`] can return (one word).
    pub fn max_batch(&self) -> u32 {
        self.bits_per_word
    }

    /// Whether [`Tags::get_batch`] may succeed (false in round-robin mode).
    pub fn can_batch(&self) -> bool {
        self.batching
    }

    /// Whether `tag` is a reserved tag.
    pub fn is_reserved(&self, tag: u16) -> bool {
        u32::from(tag) >= self.depth
    }

    /// A new allocation hint for the driver tags (one per submitter).
    pub fn new_hint(&self) -> AllocHint {
        AllocHint::new(&self.driver)
    }

    /// A new allocation hint for the reserved tags, if there are any.
    pub fn new_reserved_hint(&self) -> Option<AllocHint> {
        self.reserved.as_ref().map(AllocHint::new)
    }

    /// Takes one driver tag; `None` when all are busy.
    #[inline]
    pub fn get(&self, hint: &mut AllocHint) -> Option<u16> {
        self.driver.get(hint).map(|t| t as u16)
    }

    /// Takes one driver tag among the first `shallow_depth` of each word's share (a scheduler's
    /// limit for a class of requests). Batching is not offered under a shallow limit.
    #[inline]
    pub fn get_shallow(&self, hint: &mut AllocHint, shallow_depth: u32) -> Option<u16> {
        self.driver
            .get_shallow(hint, shallow_depth)
            .map(|t| t as u16)
    }

    /// Takes up to `nr` free driver tags of one word with a single compare-and-swap (`nr` is
    /// clamped to [`Tags::max_batch`]). The batch may hold fewer tags than asked; `None` when
    /// no word has a free tag, or batching is refused (round-robin mode).
    #[inline]
    pub fn get_batch(&self, hint: &mut AllocHint, nr: u32) -> Option<TagBatch> {
        if !self.batching || nr == 0 {
            return None;
        }
        let nr = nr.min(self.bits_per_word);
        let (mask, offset) = self.driver.get_batch(hint, nr)?;
        (mask != 0).then_some(TagBatch { mask, offset })
    }

    /// Frees one driver tag.
    #[inline]
    pub fn put(&self, hint: &mut AllocHint, tag: u16) {
        debug_assert!(u32::from(tag) < self.depth, "put of non-driver tag {tag}");
        self.driver.put(hint, u32::from(tag));
    }

    /// Frees driver tags (completion batches, plug leftovers).
    #[inline]
    pub fn put_batch(&self, hint: &mut AllocHint, tags: &[u16]) {
        debug_assert!(tags.iter().all(|&t| u32::from(t) < self.depth));
        self.driver.put_batch(hint, tags);
    }

    /// Takes one reserved tag (`depth..depth + reserved`); `None` when there are none free.
    /// `hint` must come from [`Tags::new_reserved_hint`].
    pub fn get_reserved(&self, hint: &mut AllocHint) -> Option<u16> {
        let bit = self.reserved.as_ref()?.get(hint)?;
        Some((self.depth + bit) as u16)
    }

    /// Frees a reserved tag. `hint` must come from [`Tags::new_reserved_hint`].
    pub fn put_reserved(&self, hint: &mut AllocHint, tag: u16) {
        debug_assert!(self.is_reserved(tag), "put_reserved of driver tag {tag}");
        if let Some(r) = &self.reserved {
            r.put(hint, u32::from(tag) - self.depth);
        }
    }

    /// Driver tags in use.
    pub fn busy(&self) -> u32 {
        self.driver.busy()
    }

    /// Reserved tags in use.
    pub fn reserved_busy(&self) -> u32 {
        self.reserved.as_ref().map_or(0, Sbitmap::busy)
    }
}

/// The requests of one hardware context, indexed by tag; allocated once.
///
/// Entry `t` has `tag == t` and `hctx` set at creation; [`Request::prepare`] keeps both. The
/// owner of a tag owns the request at that index.
#[derive(Debug)]
pub struct RequestPool {
    rqs: Box<[Request]>,
}

impl RequestPool {
    /// One request per driver and reserved tag of `tags`, all of hctx type `hctx`.
    pub fn new(tags: &Tags, hctx: HctxType) -> RequestPool {
        RequestPool::with_len(tags.total(), hctx)
    }

    /// `len` requests (at most [`MAX_TAGS`]; larger values are clamped).
    pub fn with_len(len: u32, hctx: HctxType) -> RequestPool {
        let rqs = (0..len.min(MAX_TAGS))
            .map(|t| Request {
                tag: t as u16,
                hctx,
                ..Request::default()
            })
            .collect();
        RequestPool { rqs }
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.rqs.len()
    }

    /// Whether the pool is empty (never, for a pool built from [`Tags`]).
    pub fn is_empty(&self) -> bool {
        self.rqs.is_empty()
    }

    /// All requests, indexed by tag (what [`crate::DriverQueue::submit`] takes).
    pub fn as_slice(&self) -> &[Request] {
        &self.rqs
    }

    /// All requests, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [Request] {
        &mut self.rqs
    }
}

impl Index<u16> for RequestPool {
    type Output = Request;
    #[inline]
    fn index(&self, tag: u16) -> &Request {
        &self.rqs[usize::from(tag)]
    }
}

impl IndexMut<u16> for RequestPool {
    #[inline]
    fn index_mut(&mut self, tag: u16) -> &mut Request {
        &mut self.rqs[usize::from(tag)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn tags(depth: u32, reserved: u32) -> Tags {
        Tags::new(TagsOptions {
            depth,
            reserved,
            round_robin: false,
        })
        .unwrap()
    }

    #[test]
    fn tags_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Tags>();
        assert_send_sync::<std::sync::Arc<Tags>>();
    }

    #[test]
    fn options_are_validated() {
        let bad = |depth, reserved| {
            Tags::new(TagsOptions {
                depth,
                reserved,
                round_robin: false,
            })
            .unwrap_err()
        };
        assert_eq!(bad(0, 4), TagsError::ZeroDepth);
        assert!(matches!(bad(65_000, 1000), TagsError::TooMany { .. }));
        assert_eq!(bad(0, 0).errno(), -libc::EINVAL);
        assert!(
            Tags::new(TagsOptions {
                depth: 65_535,
                reserved: 1,
                round_robin: false
            })
            .is_ok()
        );
    }

    #[test]
    fn single_tags_cover_the_depth_once() {
        let t = tags(100, 0);
        let mut hint = t.new_hint();
        let mut seen = HashSet::new();
        while let Some(tag) = t.get(&mut hint) {
            assert!(u32::from(tag) < 100);
            assert!(seen.insert(tag), "tag {tag} handed out twice");
        }
        assert_eq!(seen.len(), 100);
        assert_eq!(t.busy(), 100);
        for &tag in &seen {
            t.put(&mut hint, tag);
        }
        assert_eq!(t.busy(), 0);
    }

    #[test]
    fn batch_returns_distinct_driver_tags() {
        let t = tags(128, 2);
        let mut hint = t.new_hint();
        let mut seen = HashSet::new();
        let mut batches = 0;
        while let Some(b) = t.get_batch(&mut hint, 32) {
            batches += 1;
            assert!(b.len() <= t.max_batch());
            assert_eq!(b.iter().len(), b.len() as usize);
            for tag in b {
                assert!(u32::from(tag) < 128, "batch gave reserved tag {tag}");
                assert!(seen.insert(tag), "tag {tag} handed out twice");
            }
        }
        assert_eq!(seen.len(), 128, "batches exhaust the map");
        assert!(batches >= 128 / t.max_batch());
        assert_eq!(t.reserved_busy(), 0);
        let all: Vec<u16> = seen.into_iter().collect();
        t.put_batch(&mut hint, &all);
        assert_eq!(t.busy(), 0);
        assert_eq!(t.get_batch(&mut hint, 0), None);
    }

    #[test]
    fn reserved_tags_sit_above_the_depth() {
        let t = tags(16, 3);
        let mut rhint = t.new_reserved_hint().unwrap();
        let mut got: Vec<u16> = std::iter::from_fn(|| t.get_reserved(&mut rhint)).collect();
        got.sort();
        assert_eq!(got, vec![16, 17, 18]);
        assert!(got.iter().all(|&g| t.is_reserved(g)));
        assert_eq!(t.reserved_busy(), 3);
        assert_eq!(t.busy(), 0, "reserved tags do not use driver tags");
        t.put_reserved(&mut rhint, 17);
        assert_eq!(t.get_reserved(&mut rhint), Some(17));
        assert_eq!(t.total(), 19);

        let none = tags(16, 0);
        assert!(none.new_reserved_hint().is_none());
        let mut hint = none.new_hint();
        assert_eq!(none.get_reserved(&mut hint), None);
    }

    #[test]
    fn round_robin_refuses_batching() {
        let t = Tags::new(TagsOptions {
            depth: 64,
            reserved: 0,
            round_robin: true,
        })
        .unwrap();
        let mut hint = t.new_hint();
        assert!(!t.can_batch());
        assert_eq!(t.get_batch(&mut hint, 8), None);
        assert!(t.get(&mut hint).is_some());
    }

    #[test]
    fn request_pool_is_indexed_by_tag() {
        let t = tags(32, 2);
        let mut pool = RequestPool::new(&t, HctxType::Poll);
        assert_eq!(pool.len(), 34);
        for tag in 0..34u16 {
            assert_eq!(pool[tag].tag, tag);
            assert_eq!(pool[tag].hctx, HctxType::Poll);
        }
        let io = crate::request::Io {
            lba: 99,
            nblocks: 8,
            ..Default::default()
        };
        pool[5].prepare(&io, 1234);
        assert_eq!(pool[5].tag, 5, "prepare keeps the tag");
        assert_eq!(pool.as_slice()[5].lba, 99);
        assert_eq!(pool.as_mut_slice()[5].submit_ns, 1234);
    }
}
