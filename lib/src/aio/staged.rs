//! The I/Os futures submitted since the last [`super::AioBdev::progress`], in order. Progress
//! hands them to the queue under one plug, a run of equal shape (op and size) per
//! `submit_with` — the block layer's burst path, whose per-burst checks are done once — and
//! keeps those that found the queue full, first in line for the next progress.

use crate::bdev::{BdevQueue, SubmitError};
use crate::plug::Plug;
use crate::request::{Io, IoBuf, Op};

/// Staged I/Os, in order.
pub(super) struct Staged {
    ios: Vec<StagedIo>,
}

/// One staged I/O: what `submit_with` needs of it (no priority or flags, which the handle
/// never sets); its token is its slot in the in-flight table.
#[derive(Clone, Copy)]
struct StagedIo {
    lba: u64,
    buf: IoBuf,
    nblocks: u32,
    slot: u32,
    op: Op,
}

impl Staged {
    /// An empty list with room for `n` I/Os (it grows, once, if more futures wait at once).
    pub(super) fn with_capacity(n: usize) -> Staged {
        Staged {
            ios: Vec::with_capacity(n),
        }
    }

    /// Appends an I/O for `slot`, its fields stored straight into its place (built in
    /// place by the inlined push: no copy of a whole entry read back just after its fields
    /// were stored, which stalls on store forwarding).
    #[inline]
    pub(super) fn push(&mut self, op: Op, lba: u64, nblocks: u32, buf: IoBuf, slot: u32) {
        self.ios.push(StagedIo {
            lba,
            buf,
            nblocks,
            slot,
            op,
        });
    }

    pub(super) fn len(&self) -> usize {
        self.ios.len()
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.ios.is_empty()
    }

    /// Takes the I/O of `slot` out of the list if it is still there (its future is dropped
    /// before the device saw it). Linear: the cancel path only.
    pub(super) fn cancel(&mut self, slot: u32) -> bool {
        match self.ios.iter().position(|io| io.slot == slot) {
            Some(i) => {
                self.ios.remove(i);
                true
            }
            None => false,
        }
    }

    /// Submits the list in order under one burst of `plug`, until the queue is full; an I/O
    /// the block layer refuses goes to `reject` (with its slot) and the rest go on. Returns
    /// how many were queued and how many rejected; what is left stays for the next call.
    #[inline]
    pub(super) fn submit(
        &mut self,
        q: &mut BdevQueue,
        plug: &mut Plug,
        mut reject: impl FnMut(u32, SubmitError),
    ) -> (usize, usize) {
        let ios = &self.ios;
        let (mut k, mut rejected) = (0, 0);
        plug.begin();
        while k < ios.len() {
            let first = ios[k];
            let run = 1 + ios[k + 1..]
                .iter()
                .take_while(|io| io.op == first.op && io.nblocks == first.nblocks)
                .count();
            let shape = Io {
                op: first.op,
                nblocks: first.nblocks,
                ..Io::default()
            };
            q.expect_n(plug, &shape, run as u32);
            let mut next = ios[k..k + run].iter();
            let (n, err) = q.submit_with(plug, &shape, run as u32, || {
                let io = next
                    .next()
                    .expect("submit_with asks for at most `run` I/Os");
                (io.lba, io.buf, u64::from(io.slot))
            });
            k += n as usize;
            match err {
                None => {}
                Some(SubmitError::Busy) => break,
                Some(e) => {
                    reject(ios[k].slot, e);
                    rejected += 1;
                    k += 1;
                }
            }
        }
        plug.finish();
        self.ios.drain(..k);
        (k - rejected, rejected)
    }
}
