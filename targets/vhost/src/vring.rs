//! One split virtqueue in guest memory, as the device side walks it: new heads from the
//! available ring, completions into the used ring, and the two notification flags (the device
//! tells the driver not to kick; the driver tells the device not to interrupt).
//!
//! Ring addresses are kept as the front end's virtual addresses (what SET_VRING_ADDR sends)
//! and translated to guest physical addresses through the current memory table, again after
//! each new table. Every access goes through vm-memory's bounds checks: a ring the guest moved
//! outside its memory fails the access, never this process.
//!
//! Ordering (virtio 1.x §2.7.13): the available index is loaded with Acquire before the heads
//! and descriptors it covers are read; used elements are written before the used index is
//! stored with Release; a full fence separates that store from reading the driver's
//! NO_INTERRUPT flag, and separates re-enabling kicks from re-reading the available index.

use std::sync::atomic::{Ordering, fence};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::chain::Table;
use crate::error::VhostError;
use crate::mem::GuestMem;
use crate::spec::{Desc, ring};

/// The front end's addresses of a ring's three parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VringAddrs {
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
}

/// Why a ring cannot go on: the device stops it with a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("the available index jumped from {last} to {now} (queue size {size})")]
    IndexJump { last: u16, now: u16, size: u16 },
    #[error("head {head} is outside the queue (size {size})")]
    HeadOutOfRange { head: u16, size: u16 },
    #[error("head {0} offered again while in flight")]
    HeadInFlight(u16),
    #[error("the ring is no longer in guest memory")]
    Unmapped,
}

/// A split ring's device-side state.
#[derive(Debug)]
pub struct Vring {
    size: u16,
    addrs: VringAddrs,
    /// Guest physical addresses of the three parts.
    desc: u64,
    avail: u64,
    used: u64,
    /// Next available-ring entry to take.
    last_avail: u16,
    /// Next used-ring entry to fill.
    used_idx: u16,
    /// Used entries written since the last `publish`.
    unpublished: bool,
}

/// Whether `size` is a split ring's queue size (a power of two up to 32768).
pub fn valid_size(size: u32) -> bool {
    size > 0 && size <= u32::from(ring::MAX_SIZE) && size.is_power_of_two()
}

impl Vring {
    /// A ring of `size` entries at `addrs`, starting at available index `base`; the used
    /// index starts there too (every earlier request has completed).
    pub fn new(
        mem: &GuestMem,
        size: u16,
        addrs: VringAddrs,
        base: u16,
    ) -> Result<Vring, VhostError> {
        let mut v = Vring {
            size,
            addrs,
            desc: 0,
            avail: 0,
            used: 0,
            last_avail: base,
            used_idx: base,
            unpublished: false,
        };
        v.translate(mem)?;
        Ok(v)
    }

    /// Looks the ring's parts up in `mem` (a new memory table).
    pub fn translate(&mut self, mem: &GuestMem) -> Result<(), VhostError> {
        let n = u64::from(self.size);
        let part = |name: &str, va: u64, len: u64| {
            mem.va_to_gpa(va, len).ok_or_else(|| {
                VhostError::Ring(format!(
                    "the {name} ring at {va:#x} ({len} bytes) is outside guest memory"
                ))
            })
        };
        let desc = part("descriptor", self.addrs.desc, n * Desc::SIZE as u64)?;
        let avail = part("available", self.addrs.avail, ring::ENTRIES + 2 * n + 2)?;
        let used = part(
            "used",
            self.addrs.used,
            ring::ENTRIES + ring::USED_ELEM * n + 2,
        )?;
        (self.desc, self.avail, self.used) = (desc, avail, used);
        Ok(())
    }

    pub fn size(&self) -> u16 {
        self.size
    }

    /// The descriptor table, for the chain parser.
    pub fn table(&self) -> Table {
        Table {
            addr: self.desc,
            len: u32::from(self.size),
        }
    }

    /// The next available index the device will take (GET_VRING_BASE's answer once idle).
    pub fn last_avail(&self) -> u16 {
        self.last_avail
    }

    /// The used index the driver sees (in guest memory).
    pub fn guest_used(&self, m: &GuestMemoryMmap) -> Result<u16, RingError> {
        let v: u16 = m
            .load(GuestAddress(self.used + ring::IDX), Ordering::Acquire)
            .map_err(|_| RingError::Unmapped)?;
        Ok(u16::from_le(v))
    }

    /// The head of used entry `i` (in guest memory).
    pub fn used_head(&self, m: &GuestMemoryMmap, i: u16) -> Option<u16> {
        let slot = u64::from(i % self.size);
        let id: u32 = m
            .read_obj(GuestAddress(
                self.used + ring::ENTRIES + ring::USED_ELEM * slot,
            ))
            .ok()?;
        u16::try_from(u32::from_le(id)).ok()
    }

    /// Moves the ring to available index `last_avail` and used index `used` (recovery from an
    /// in-flight log: the heads between them are resubmitted from the log).
    pub fn restart_at(&mut self, last_avail: u16, used: u16) {
        self.last_avail = last_avail;
        self.used_idx = used;
    }

    /// The used index the device will publish next.
    pub fn used_idx(&self) -> u16 {
        self.used_idx
    }

    /// How many new heads the driver has made available. A count beyond the queue size is a
    /// driver bug or an attack.
    pub fn pending(&self, m: &GuestMemoryMmap) -> Result<u16, RingError> {
        let now: u16 = m
            .load(GuestAddress(self.avail + ring::IDX), Ordering::Acquire)
            .map_err(|_| RingError::Unmapped)?;
        let now = u16::from_le(now);
        let n = now.wrapping_sub(self.last_avail);
        if n > self.size {
            return Err(RingError::IndexJump {
                last: self.last_avail,
                now,
                size: self.size,
            });
        }
        Ok(n)
    }

    /// Takes the next available head (the caller checked `pending` first).
    pub fn pop(&mut self, m: &GuestMemoryMmap) -> Result<u16, RingError> {
        let slot = u64::from(self.last_avail % self.size);
        let head: u16 = m
            .read_obj(GuestAddress(self.avail + ring::ENTRIES + 2 * slot))
            .map_err(|_| RingError::Unmapped)?;
        let head = u16::from_le(head);
        if head >= self.size {
            return Err(RingError::HeadOutOfRange {
                head,
                size: self.size,
            });
        }
        self.last_avail = self.last_avail.wrapping_add(1);
        Ok(head)
    }

    /// Hands chain `head` back with `len` bytes written into its writable buffers. Seen by the
    /// driver at the next `publish`.
    pub fn push_used(&mut self, m: &GuestMemoryMmap, head: u16, len: u32) -> Result<(), RingError> {
        let slot = u64::from(self.used_idx % self.size);
        let mut elem = [0u8; ring::USED_ELEM as usize];
        elem[0..4].copy_from_slice(&u32::from(head).to_le_bytes());
        elem[4..8].copy_from_slice(&len.to_le_bytes());
        let at = self.used + ring::ENTRIES + ring::USED_ELEM * slot;
        m.write_slice(&elem, GuestAddress(at))
            .map_err(|_| RingError::Unmapped)?;
        self.used_idx = self.used_idx.wrapping_add(1);
        self.unpublished = true;
        Ok(())
    }

    /// Makes the used entries pushed since the last call visible. Returns whether the driver
    /// wants an interrupt for them (something was published and it did not set
    /// NO_INTERRUPT).
    pub fn publish(&mut self, m: &GuestMemoryMmap) -> Result<bool, RingError> {
        if !self.unpublished {
            return Ok(false);
        }
        self.unpublished = false;
        m.store(
            self.used_idx.to_le(),
            GuestAddress(self.used + ring::IDX),
            Ordering::Release,
        )
        .map_err(|_| RingError::Unmapped)?;
        // Pairs with the driver's barrier between setting NO_INTERRUPT and reading used->idx.
        fence(Ordering::SeqCst);
        let flags: u16 = m
            .load(GuestAddress(self.avail + ring::FLAGS), Ordering::Relaxed)
            .map_err(|_| RingError::Unmapped)?;
        Ok(u16::from_le(flags) & ring::AVAIL_F_NO_INTERRUPT == 0)
    }

    /// Tells the driver whether to kick (write the kick eventfd) when it adds buffers. Turning
    /// kicks on is followed by a full fence, so a caller that re-reads `pending` afterwards
    /// cannot miss a head the driver added without kicking.
    pub fn set_kicks(&self, m: &GuestMemoryMmap, on: bool) -> Result<(), RingError> {
        let flags = if on { 0 } else { ring::USED_F_NO_NOTIFY };
        m.store(
            flags.to_le(),
            GuestAddress(self.used + ring::FLAGS),
            Ordering::Relaxed,
        )
        .map_err(|_| RingError::Unmapped)?;
        fence(Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (GuestMem, Vring) {
        let mem = GuestMem::anonymous(&[(0, 0x10000)]).unwrap();
        let addrs = VringAddrs {
            desc: 0x1000,
            avail: 0x2000,
            used: 0x3000,
        };
        let v = Vring::new(&mem, 8, addrs, 0).unwrap();
        (mem, v)
    }

    fn offer(mem: &GuestMem, idx: u16, heads: &[u16]) {
        for (i, h) in heads.iter().enumerate() {
            let slot = (idx as usize + i) % 8;
            mem.mem()
                .write_obj(*h, GuestAddress(0x2004 + 2 * slot as u64))
                .unwrap();
        }
        mem.mem()
            .write_obj(idx.wrapping_add(heads.len() as u16), GuestAddress(0x2002))
            .unwrap();
    }

    #[test]
    fn pop_push_publish() {
        let (mem, mut v) = setup();
        let m = mem.mem();
        assert_eq!(v.pending(m), Ok(0));
        offer(&mem, 0, &[3, 5]);
        assert_eq!(v.pending(m), Ok(2));
        assert_eq!(v.pop(m), Ok(3));
        assert_eq!(v.pop(m), Ok(5));
        assert_eq!(v.pending(m), Ok(0));
        v.push_used(m, 5, 17).unwrap();
        assert_eq!(v.publish(m), Ok(true));
        assert_eq!(v.publish(m), Ok(false), "nothing new");
        let idx: u16 = m.read_obj(GuestAddress(0x3002)).unwrap();
        let id: u32 = m.read_obj(GuestAddress(0x3004)).unwrap();
        let len: u32 = m.read_obj(GuestAddress(0x3008)).unwrap();
        assert_eq!((idx, id, len), (1, 5, 17));
        // The driver suppresses interrupts.
        m.write_obj(1u16, GuestAddress(0x2000)).unwrap();
        v.push_used(m, 3, 1).unwrap();
        assert_eq!(v.publish(m), Ok(false));
        v.set_kicks(m, false).unwrap();
        assert_eq!(m.read_obj::<u16>(GuestAddress(0x3000)).unwrap(), 1);
        v.set_kicks(m, true).unwrap();
        assert_eq!(m.read_obj::<u16>(GuestAddress(0x3000)).unwrap(), 0);
    }

    #[test]
    fn hostile_indices() {
        let (mem, mut v) = setup();
        let m = mem.mem();
        m.write_obj(9u16, GuestAddress(0x2002)).unwrap();
        assert!(matches!(v.pending(m), Err(RingError::IndexJump { .. })));
        offer(&mem, 0, &[8]);
        assert_eq!(
            v.pop(m),
            Err(RingError::HeadOutOfRange { head: 8, size: 8 })
        );
        // Indices wrap at 2^16.
        let mut w = Vring::new(&mem, 8, v.addrs, 65535).unwrap();
        offer(&mem, 65535, &[1, 2]);
        assert_eq!(w.pending(m), Ok(2));
        assert_eq!(w.pop(m), Ok(1));
        assert_eq!(w.pop(m), Ok(2));
        assert_eq!(w.last_avail(), 1);
    }

    #[test]
    fn rings_outside_memory_are_refused() {
        let mem = GuestMem::anonymous(&[(0, 0x10000)]).unwrap();
        let addrs = VringAddrs {
            desc: 0xff00,
            avail: 0x2000,
            used: 0x3000,
        };
        assert!(Vring::new(&mem, 256, addrs, 0).is_err());
        assert!(valid_size(256) && !valid_size(0) && !valid_size(100) && !valid_size(65536));
    }
}
