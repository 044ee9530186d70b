//! What an I/O must be to be accepted: a supported op, blocks inside the device, a buffer of
//! exactly its blocks. `submit` checks each I/O ([`BdevQueue::validate`]); `submit_with`
//! checks what depends on the burst's shape once ([`BdevQueue::burst_shape`]) and leaves
//! each I/O one comparison ([`BurstShape::needs_care`]).

use super::BdevQueue;
use crate::bdev::split::crosses;
use crate::hctx::HctxType;
use crate::request::{Io, Op, ReqFlags};

/// Why an I/O was not accepted. Everything but `Busy` is the submitter's mistake.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// No request free on the hctx this I/O maps to: reap completions and retry.
    #[error("queue busy: no free request")]
    Busy,
    #[error("bdev {name}: operation {op} not supported")]
    Unsupported { name: String, op: &'static str },
    #[error("bdev {name}: blocks {lba}+{nblocks} beyond the device's {num_blocks} blocks")]
    OutOfRange {
        name: String,
        lba: u64,
        nblocks: u32,
        num_blocks: u64,
    },
    #[error("bdev {name}: {op} of 0 blocks")]
    Empty { name: String, op: &'static str },
    #[error("bdev {name}: buffer of {len} bytes for {nblocks} blocks of {block_size} bytes")]
    BadBuffer {
        name: String,
        len: u32,
        nblocks: u32,
        block_size: u32,
    },
}

impl SubmitError {
    /// Whether the I/O may succeed later unchanged.
    pub fn is_busy(&self) -> bool {
        matches!(self, SubmitError::Busy)
    }
}

/// What [`BdevQueue::burst_shape`] found of a burst's shape.
#[derive(Clone, Copy)]
pub(super) struct BurstShape {
    pub(super) ty: HctxType,
    pub(super) flags: ReqFlags,
    /// The op has a block range (everything but flush).
    range: bool,
    /// Bytes each buffer must hold (0: the op moves no data).
    bytes: u64,
    /// Last LBA an I/O of this size may start at (`None`: larger than the device, or than
    /// the device's transfer limit, so every one is split).
    last_lba: Option<u64>,
    /// The device's boundary in blocks (0: none): an I/O across one is split.
    boundary: u32,
}

impl BurstShape {
    /// Whether `io` (of this shape) may fail `validate` (outside the device, or a buffer of
    /// the wrong size) or need a split (too long for the device, or across its boundary):
    /// `false` means it is valid and goes out whole.
    #[inline]
    pub(super) fn needs_care(&self, io: &Io) -> bool {
        self.range
            && (self.last_lba.is_none_or(|l| io.lba > l)
                || (self.bytes != 0 && u64::from(io.buf.len()) != self.bytes)
                || (self.boundary != 0 && crosses(io.lba, io.nblocks, self.boundary)))
    }
}

impl BdevQueue {
    /// The checks of a `submit_with` burst that depend only on its shape (`io`'s op, flags
    /// and block count), done once: the op is supported and the block count allowed (else
    /// the error `validate` gives), the hctx type and flags it maps to, and what is left to
    /// check per I/O. When I/Os of this shape are longer than the device's transfer limit,
    /// every one needs care (it is split); on a device with a boundary (a volume's cluster, an
    /// array's strip), those that cross one do.
    #[inline]
    pub(super) fn burst_shape(&self, io: &Io) -> Result<BurstShape, SubmitError> {
        // A flush has no range or buffer to check.
        let range = io.op != Op::Flush;
        if !self.ops.contains(io.op) || (range && io.nblocks == 0) {
            self.validate(io)?;
        }
        let (ty, flags) = self.queues.map(io.op, io.flags);
        Ok(BurstShape {
            ty,
            flags,
            range,
            bytes: if io.op.has_data() {
                u64::from(io.nblocks) * u64::from(self.block_size)
            } else {
                0
            },
            last_lba: if io.nblocks > self.max_transfer {
                None
            } else {
                self.num_blocks.checked_sub(u64::from(io.nblocks))
            },
            boundary: self.boundary,
        })
    }

    /// Checks `io` against the device: a supported op, a block range inside the device
    /// (none for a flush), a buffer of exactly its blocks (for an op that moves data).
    #[inline]
    pub(super) fn validate(&self, io: &Io) -> Result<(), SubmitError> {
        if !self.ops.contains(io.op) {
            return Err(self.unsupported(io));
        }
        if io.op == Op::Flush {
            return Ok(());
        }
        let end = io.lba.checked_add(u64::from(io.nblocks));
        if io.nblocks == 0 || end.is_none_or(|e| e > self.num_blocks) {
            return Err(self.bad_range(io));
        }
        if io.op.has_data()
            && u64::from(io.buf.len()) != u64::from(io.nblocks) * u64::from(self.block_size)
        {
            return Err(SubmitError::BadBuffer {
                name: self.name.to_string(),
                len: io.buf.len(),
                nblocks: io.nblocks,
                block_size: self.block_size,
            });
        }
        Ok(())
    }

    #[cold]
    fn unsupported(&self, io: &Io) -> SubmitError {
        SubmitError::Unsupported {
            name: self.name.to_string(),
            op: io.op.name(),
        }
    }

    #[cold]
    fn bad_range(&self, io: &Io) -> SubmitError {
        let name = self.name.to_string();
        if io.nblocks == 0 {
            SubmitError::Empty {
                name,
                op: io.op.name(),
            }
        } else {
            SubmitError::OutOfRange {
                name,
                lba: io.lba,
                nblocks: io.nblocks,
                num_blocks: self.num_blocks,
            }
        }
    }
}
