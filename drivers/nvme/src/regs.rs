//! Controller registers (BAR0) and the register-access interface.
//!
//! The driver reaches the controller only through [`RegisterIo`]: a mapped BAR0 (see
//! [`crate::vfio`]) in production, a software controller in tests. Register fields are decoded
//! by the small value types here ([`Cap`], [`Cc`], [`Csts`]).

/// Register offsets in BAR0.
pub mod off {
    /// Controller capabilities (64-bit).
    pub const CAP: usize = 0x00;
    /// Version.
    pub const VS: usize = 0x08;
    /// Interrupt mask set.
    pub const INTMS: usize = 0x0c;
    /// Interrupt mask clear.
    pub const INTMC: usize = 0x10;
    /// Controller configuration.
    pub const CC: usize = 0x14;
    /// Controller status.
    pub const CSTS: usize = 0x1c;
    /// Admin queue attributes.
    pub const AQA: usize = 0x24;
    /// Admin submission queue base (64-bit).
    pub const ASQ: usize = 0x28;
    /// Admin completion queue base (64-bit).
    pub const ACQ: usize = 0x30;
    /// First doorbell.
    pub const DOORBELLS: usize = 0x1000;
}

/// Access to a controller's registers. Implementations must perform each call as one access
/// of the given width, in program order (MMIO semantics).
pub trait RegisterIo: Send + Sync {
    /// Reads the 32-bit register at byte offset `off`.
    fn read32(&self, off: usize) -> u32;

    /// Writes the 32-bit register at byte offset `off`.
    fn write32(&self, off: usize, val: u32);

    /// Reads a 64-bit register as two 32-bit reads, low dword first (the spec allows it and
    /// some platforms cannot issue 64-bit MMIO).
    fn read64(&self, off: usize) -> u64 {
        let lo = self.read32(off);
        let hi = self.read32(off + 4);
        u64::from(lo) | u64::from(hi) << 32
    }

    /// Writes a 64-bit register as two 32-bit writes, low dword first.
    fn write64(&self, off: usize, val: u64) {
        self.write32(off, val as u32);
        self.write32(off + 4, (val >> 32) as u32);
    }

    /// Size of the register window in bytes (doorbells beyond it cannot be used).
    fn len(&self) -> usize;

    /// Whether the window is empty (never for a real controller).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Offset of the submission queue tail doorbell of queue `qid`.
pub fn sq_tail_doorbell(qid: u16, dstrd: u8) -> usize {
    off::DOORBELLS + (2 * usize::from(qid)) * (4usize << dstrd)
}

/// Offset of the completion queue head doorbell of queue `qid`.
pub fn cq_head_doorbell(qid: u16, dstrd: u8) -> usize {
    off::DOORBELLS + (2 * usize::from(qid) + 1) * (4usize << dstrd)
}

/// Controller capabilities (CAP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum entries per I/O queue (1-based, i.e. MQES + 1).
    pub fn max_queue_entries(self) -> u32 {
        (self.0 & 0xffff) as u32 + 1
    }

    /// Contiguous queues required.
    pub fn cqr(self) -> bool {
        self.0 & (1 << 16) != 0
    }

    /// Worst-case time to become ready or not ready, in milliseconds (TO × 500 ms).
    pub fn timeout_ms(self) -> u64 {
        ((self.0 >> 24) & 0xff) * 500
    }

    /// Doorbell stride exponent: the stride is `4 << dstrd` bytes.
    pub fn dstrd(self) -> u8 {
        ((self.0 >> 32) & 0xf) as u8
    }

    /// Command sets supported (CSS bits).
    pub fn css(self) -> u8 {
        (self.0 >> 37) as u8
    }

    /// Smallest memory page size, in bytes.
    pub fn mps_min_bytes(self) -> u64 {
        1 << (12 + ((self.0 >> 48) & 0xf))
    }

    /// Largest memory page size, in bytes.
    pub fn mps_max_bytes(self) -> u64 {
        1 << (12 + ((self.0 >> 52) & 0xf))
    }
}

/// Controller configuration (CC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cc(pub u32);

impl Cc {
    /// Enable bit.
    pub const EN: u32 = 1;
    /// Shutdown notification: normal.
    pub const SHN_NORMAL: u32 = 1 << 14;
    /// Shutdown notification mask.
    pub const SHN_MASK: u32 = 3 << 14;

    /// The configuration the driver enables the controller with: NVM command set (or all
    /// I/O command sets when CAP.CSS advertises IOCS), memory page size `page_size`, round-robin
    /// arbitration, 64-byte SQEs and 16-byte CQEs. EN is left clear.
    pub fn for_enable(cap: Cap, page_size: u64) -> Cc {
        let mps = page_size.trailing_zeros().saturating_sub(12);
        let css = if cap.css() & (1 << 6) != 0 { 6 } else { 0 };
        Cc(css << 4 | mps << 7 | 6 << 16 | 4 << 20)
    }

    /// Whether EN is set.
    pub fn enabled(self) -> bool {
        self.0 & Cc::EN != 0
    }
}

/// Controller status (CSTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Csts(pub u32);

impl Csts {
    /// Ready.
    pub fn rdy(self) -> bool {
        self.0 & 1 != 0
    }

    /// Controller fatal status.
    pub fn cfs(self) -> bool {
        self.0 & 2 != 0
    }

    /// Shutdown status: 0 normal operation, 1 occurring, 2 complete.
    pub fn shst(self) -> u8 {
        ((self.0 >> 2) & 3) as u8
    }

    /// The register reads as all ones: the device is gone (surprise removal, dead link).
    pub fn is_all_ones(self) -> bool {
        self.0 == u32::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fields_decode() {
        // QEMU's controller: MQES 2047, CQR, TO 15 (7.5 s), DSTRD 0, CSS 0xc1, MPSMAX 64K.
        let cap = Cap(0x0040_1820_0f01_07ff);
        assert_eq!(cap.max_queue_entries(), 2048);
        assert!(cap.cqr());
        assert_eq!(cap.timeout_ms(), 7500);
        assert_eq!(cap.dstrd(), 0);
        assert_eq!(cap.css(), 0xc1);
        assert_eq!(cap.mps_min_bytes(), 4096);
        assert_eq!(cap.mps_max_bytes(), 65536);
    }

    #[test]
    fn cc_for_enable() {
        let cap = Cap(0x0040_1820_0f01_07ff);
        let cc = Cc::for_enable(cap, 4096);
        // IOCS advertised (CSS bit 6) → CC.CSS = 6; MPS 0; IOSQES 6; IOCQES 4.
        assert_eq!(cc.0, 6 << 4 | 6 << 16 | 4 << 20);
        assert!(!cc.enabled());
        let nvm_only = Cap(1 << 37);
        assert_eq!(Cc::for_enable(nvm_only, 8192).0, 1 << 7 | 6 << 16 | 4 << 20);
    }

    #[test]
    fn doorbell_offsets() {
        assert_eq!(sq_tail_doorbell(0, 0), 0x1000);
        assert_eq!(cq_head_doorbell(0, 0), 0x1004);
        assert_eq!(sq_tail_doorbell(1, 0), 0x1008);
        assert_eq!(cq_head_doorbell(1, 0), 0x100c);
        assert_eq!(sq_tail_doorbell(1, 2), 0x1000 + 2 * 16);
        assert_eq!(cq_head_doorbell(3, 1), 0x1000 + 7 * 8);
    }

    #[test]
    fn csts_fields() {
        let c = Csts(0b1001);
        assert!(c.rdy());
        assert!(!c.cfs());
        assert_eq!(c.shst(), 2);
        assert!(Csts(u32::MAX).is_all_ones());
    }
}
