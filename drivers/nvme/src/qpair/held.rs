//! Submissions held in software while the queues are down for a controller reset: kept in
//! order (and counted by `outstanding()`), submitted once the queues are back, or failed
//! with everything else. Nothing here depends on PCIe.

use pmio::request::Request;

use super::NvmeQpair;

impl NvmeQpair {
    /// Holds submissions in software while a controller reset is in progress (in order;
    /// counted as outstanding).
    #[cold]
    pub(super) fn hold(&mut self, rqs: &mut [Request], tags: &[u16]) {
        for &tag in tags {
            let Some(idx) = self.free_tag(rqs, tag) else {
                continue;
            };
            self.slots[idx].held = true;
            self.held.push(tag);
            self.outstanding += 1;
        }
    }

    /// After a controller reset: submits what was held, in order.
    #[cold]
    pub(super) fn submit_held(&mut self, rqs: &mut [Request]) {
        let held = self.take_held();
        if !held.is_empty() {
            self.submit_batch(rqs, &held);
        }
        self.restore_held(held);
    }

    /// Takes the held tags out (no longer held nor counted); give the vector back with
    /// [`NvmeQpair::restore_held`] so its capacity is kept (no allocation).
    pub(super) fn take_held(&mut self) -> Vec<u16> {
        let held = std::mem::take(&mut self.held);
        self.outstanding -= held.len();
        for &tag in &held {
            self.slots[usize::from(tag)].held = false;
        }
        held
    }

    pub(super) fn restore_held(&mut self, mut held: Vec<u16>) {
        held.clear();
        self.held = held;
    }
}
