//! Driver-tag layout 2, blk-mq's, for a device that cannot be opened with a command id per
//! scheduler tag: a second tag set and request pool per hctx (the driver's), each started
//! request copied into a driver request under a driver tag, and a carrier map from driver tag
//! back to the scheduler request.

use super::SchedPath;
use super::dispatch::{merged_buf, requeue};
use crate::bdev::queue::Hctx;

impl SchedPath {
    /// Starts the handed-out requests in `out`: a driver tag each (taken in batches), the
    /// (possibly merged) I/O copied into the driver's request (started at `now`), one driver
    /// `submit` per hctx.
    /// Requests no driver tag is left for go back to the scheduler. Returns how many started.
    pub(super) fn start_copy(&mut self, hctx: &mut [Hctx], hctx_at: &[u8], now: u64) -> usize {
        let n = self.out.len();
        if n == 0 {
            return 0;
        }
        let mut started = 0;
        for k in 0..n {
            let d = self.out[k];
            let local = (d.id - self.base) as u16;
            let src = self.pool[local];
            let hi = hctx_at[src.hctx.index()] as usize;
            let h = &mut hctx[hi];
            let cache = &mut self.drv_cache[hi];
            let dtag = match cache.pop() {
                Some(t) => Some(t),
                None => match h.tags.get_batch(&mut h.hint, (n - k) as u32) {
                    Some(b) => {
                        cache.extend(b.iter());
                        cache.pop()
                    }
                    None => h.tags.get(&mut h.hint),
                },
            };
            let Some(dtag) = dtag else {
                requeue(&self.dd, &self.out[k..n]);
                break;
            };
            let drq = &mut h.pool[dtag];
            // The whole request, keeping the driver pool's own tag and hctx.
            let (tag, ty) = (drq.tag, drq.hctx);
            *drq = src;
            drq.tag = tag;
            drq.hctx = ty;
            // The driver sees the request start now (its submitter's clock stays in the
            // scheduler request, which completion reports).
            drq.submit_ns = now;
            if d.nr_members > 1 {
                drq.lba = d.sector;
                drq.nblocks = d.nblocks;
                if src.op.has_data() {
                    drq.buf = merged_buf(&src, &d);
                }
            }
            self.carrier[hi][usize::from(dtag)] = local;
            self.drv_busy[hi] += 1;
            h.pending[h.npending] = dtag;
            h.npending += 1;
            started += 1;
        }
        for (h, cache) in hctx.iter_mut().zip(&mut self.drv_cache) {
            if !cache.is_empty() {
                h.tags.put_batch(&mut h.put_hint, cache);
                cache.clear();
            }
            h.submit_pending(None);
        }
        started
    }

    /// Maps a driver batch of hctx `hi` (`h.done`) back to the scheduler requests the driver
    /// requests carried, into `done_ids` for `complete_members`, and frees the driver tags.
    // Always inlined: the body of `poll_layout`'s loop, in a file of its own.
    #[inline(always)]
    pub(super) fn reap_copy(&mut self, hi: usize, h: &mut Hctx) {
        self.done_ids.clear();
        let carrier = &self.carrier[hi];
        for &dtag in &h.done {
            let local = carrier[usize::from(dtag)];
            self.done_ids
                .push((self.base + u32::from(local), h.pool[dtag].status));
        }
        h.tags.put_batch(&mut h.put_hint, &h.done);
        self.freed.clear();
    }
}
