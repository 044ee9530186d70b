//! Dataset Management: the ranges a DSM command's data holds.

use std::mem::size_of;

/// A Dataset Management range (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DsmRange {
    /// Context attributes.
    pub cattr: u32,
    /// Length in logical blocks.
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

const _: () = assert!(size_of::<DsmRange>() == 16);

/// DSM attribute (CDW11): deallocate.
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;
