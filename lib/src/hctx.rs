//! Hardware context types and the mapping of an I/O to one.
//!
//! A device exposes queue sets by type, as blk-mq does: `Default` always, and optionally
//! separate `Read` and `Poll` sets. Polled I/O goes to a `Poll` queue, a read to a `Read` queue,
//! everything else to `Default`; a type the device has no queues for maps to `Default`. A
//! polled I/O on a device without poll queues is issued as a normal one (its POLLED flag is
//! dropped, as Linux's `bio_clear_polled`), so polled and non-polled requests never share a queue.

use crate::request::{Op, ReqFlags};

/// Hardware context type (Linux's `enum hctx_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[repr(u8)]
pub enum HctxType {
    #[default]
    Default = 0,
    Read = 1,
    Poll = 2,
}

/// Number of hctx types.
pub const HCTX_MAX_TYPES: usize = 3;

impl HctxType {
    pub const ALL: [HctxType; HCTX_MAX_TYPES] = [HctxType::Default, HctxType::Read, HctxType::Poll];

    /// The type an I/O asks for, before looking at what the device has
    /// (`blk_mq_get_hctx_type`).
    pub fn wanted(op: Op, flags: ReqFlags) -> HctxType {
        if flags.contains(ReqFlags::POLLED) {
            HctxType::Poll
        } else if op == Op::Read {
            HctxType::Read
        } else {
            HctxType::Default
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            HctxType::Default => "default",
            HctxType::Read => "read",
            HctxType::Poll => "poll",
        }
    }
}

/// How many hardware queues of each type a device offers (per reactor that opens it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HctxQueues {
    pub default: u16,
    pub read: u16,
    pub poll: u16,
}

impl Default for HctxQueues {
    fn default() -> Self {
        HctxQueues::DEFAULT_ONLY
    }
}

impl HctxQueues {
    /// One default queue, no read or poll queues.
    pub const DEFAULT_ONLY: HctxQueues = HctxQueues {
        default: 1,
        read: 0,
        poll: 0,
    };

    pub fn count(&self, ty: HctxType) -> u16 {
        match ty {
            HctxType::Default => self.default,
            HctxType::Read => self.read,
            HctxType::Poll => self.poll,
        }
    }

    /// The type that actually serves `ty` on this device (`blk_mq_map_queue`).
    pub fn map_type(&self, ty: HctxType) -> HctxType {
        if self.count(ty) > 0 {
            ty
        } else {
            HctxType::Default
        }
    }

    /// Maps an I/O to the hctx type that serves it, and the flags it is issued with (POLLED
    /// dropped when the device has no poll queues).
    pub fn map(&self, op: Op, flags: ReqFlags) -> (HctxType, ReqFlags) {
        let ty = self.map_type(HctxType::wanted(op, flags));
        let flags = if ty == HctxType::Poll {
            flags
        } else {
            flags.without(ReqFlags::POLLED)
        };
        (ty, flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_types_map_to_default() {
        let q = HctxQueues::DEFAULT_ONLY;
        assert_eq!(q.map(Op::Read, ReqFlags::NONE).0, HctxType::Default);
        let (ty, flags) = q.map(Op::Read, ReqFlags::POLLED);
        assert_eq!(ty, HctxType::Default);
        assert!(
            !flags.contains(ReqFlags::POLLED),
            "polled dropped without poll queues"
        );
    }

    #[test]
    fn present_types_are_used() {
        let q = HctxQueues {
            default: 1,
            read: 1,
            poll: 1,
        };
        assert_eq!(q.map(Op::Read, ReqFlags::NONE).0, HctxType::Read);
        assert_eq!(q.map(Op::Write, ReqFlags::NONE).0, HctxType::Default);
        assert_eq!(q.map(Op::Read, ReqFlags::POLLED).0, HctxType::Poll);
        assert_eq!(q.map(Op::Write, ReqFlags::POLLED).0, HctxType::Poll);
        assert!(
            q.map(Op::Read, ReqFlags::POLLED)
                .1
                .contains(ReqFlags::POLLED)
        );
    }
}
