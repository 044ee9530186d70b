//! The descriptor-chain parser: walks one split-ring chain in guest memory (direct or through
//! one indirect table) into a list of [`Segment`]s, then splits a virtio-blk request's header
//! and status byte off it.
//!
//! Every value read from guest memory is hostile: the guest may point descriptors outside its
//! memory, build loops, nest indirect tables, put readable buffers after writable ones, or
//! change the table while it is read (each descriptor is read once, into a local copy). The
//! walk is bounded by the queue size (a chain visits each descriptor at most once), an
//! indirect table's length and a segment limit; every segment it returns lies inside guest
//! memory. It allocates nothing: the caller's vector is reused.

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

use crate::spec::{Desc, ReqHeader, desc_flags};

/// Largest indirect table accepted, in descriptors (Linux's tables hold seg_max + 2).
pub const MAX_INDIRECT: u32 = 1024;

/// One piece of a request's buffers: `len` bytes at guest physical address `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub len: u32,
    /// Device-writable (the device fills it); otherwise device-readable.
    pub writable: bool,
}

/// Why a chain cannot be used. The request cannot even be answered with a status byte: the
/// ring hands it back with a used length of 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("descriptor {0} is outside the queue")]
    IndexOutOfRange(u32),
    #[error("the descriptor table at {0:#x} is outside guest memory")]
    TableOutsideMemory(u64),
    #[error("the chain loops or is longer than its table ({0} descriptors)")]
    Loop(u32),
    #[error("more than {0} segments")]
    TooManySegments(usize),
    #[error("an indirect descriptor inside an indirect table")]
    NestedIndirect,
    #[error("an indirect descriptor that is not the chain's only one")]
    IndirectInChain,
    #[error(
        "an indirect table of {0} bytes (not a whole number of 1..={MAX_INDIRECT} descriptors)"
    )]
    IndirectLength(u32),
    #[error("a buffer of {len} bytes at {addr:#x} is outside guest memory")]
    BufferOutsideMemory { addr: u64, len: u32 },
    #[error("a device-readable buffer after a device-writable one")]
    ReadableAfterWritable,
}

/// Where a chain's descriptors are read from.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    /// Guest physical address of the descriptor table.
    pub addr: u64,
    /// Entries in it (the queue size, or an indirect table's length).
    pub len: u32,
}

/// Reads descriptor `index` of `table`.
fn read_desc<M: GuestMemoryBackend>(mem: &M, table: Table, index: u32) -> Result<Desc, ChainError> {
    if index >= table.len {
        return Err(ChainError::IndexOutOfRange(index));
    }
    let at = table
        .addr
        .checked_add(u64::from(index) * Desc::SIZE as u64)
        .ok_or(ChainError::TableOutsideMemory(table.addr))?;
    let mut b = [0u8; Desc::SIZE];
    mem.read_slice(&mut b, GuestAddress(at))
        .map_err(|_| ChainError::TableOutsideMemory(table.addr))?;
    Ok(Desc::from_bytes(&b))
}

/// Walks the chain of `queue` (the ring's descriptor table) that starts at `head`, appending its
/// buffers to `out` (cleared first), at most `max_segs` of them. Zero-length buffers are
/// skipped. On success every segment lies inside `mem` and no readable segment follows a
/// writable one.
pub fn walk<M: GuestMemoryBackend>(
    mem: &M,
    queue: Table,
    head: u16,
    max_segs: usize,
    out: &mut Vec<Segment>,
) -> Result<(), ChainError> {
    out.clear();
    let first = read_desc(mem, queue, u32::from(head))?;
    if first.has(desc_flags::INDIRECT) {
        if first.has(desc_flags::NEXT) {
            return Err(ChainError::IndirectInChain);
        }
        if first.len == 0
            || !first.len.is_multiple_of(Desc::SIZE as u32)
            || first.len / Desc::SIZE as u32 > MAX_INDIRECT
        {
            return Err(ChainError::IndirectLength(first.len));
        }
        let table = Table {
            addr: first.addr,
            len: first.len / Desc::SIZE as u32,
        };
        let d = read_desc(mem, table, 0)?;
        return follow(mem, table, d, max_segs, out, true);
    }
    follow(mem, queue, first, max_segs, out, false)
}

/// Follows `NEXT` links from `d` within `table`.
fn follow<M: GuestMemoryBackend>(
    mem: &M,
    table: Table,
    mut d: Desc,
    max_segs: usize,
    out: &mut Vec<Segment>,
    indirect: bool,
) -> Result<(), ChainError> {
    let mut seen_writable = false;
    // A chain without loops visits each descriptor of its table at most once.
    let mut visited = 1u32;
    loop {
        if d.has(desc_flags::INDIRECT) {
            return Err(if indirect {
                ChainError::NestedIndirect
            } else {
                ChainError::IndirectInChain
            });
        }
        let writable = d.has(desc_flags::WRITE);
        if !writable && seen_writable {
            return Err(ChainError::ReadableAfterWritable);
        }
        seen_writable |= writable;
        if d.len > 0 {
            if !GuestMemoryBackend::check_range(mem, GuestAddress(d.addr), d.len as usize) {
                return Err(ChainError::BufferOutsideMemory {
                    addr: d.addr,
                    len: d.len,
                });
            }
            if out.len() == max_segs {
                return Err(ChainError::TooManySegments(max_segs));
            }
            out.push(Segment {
                addr: d.addr,
                len: d.len,
                writable,
            });
        }
        if !d.has(desc_flags::NEXT) {
            return Ok(());
        }
        if visited == table.len {
            return Err(ChainError::Loop(table.len));
        }
        visited += 1;
        d = read_desc(mem, table, u32::from(d.next))?;
    }
}

/// A virtio-blk request split into its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlkParts {
    pub header: ReqHeader,
    /// Guest physical address of the status byte.
    pub status: u64,
    /// Bytes of the data segments left in the chain's vector.
    pub data_len: u64,
}

/// Why a chain is not a virtio-blk request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PartsError {
    /// No writable byte at the end for the status: nothing can be reported.
    #[error("the chain does not end in a device-writable status byte")]
    NoStatus,
    /// The status byte exists (at this address) but the header is short or writable.
    #[error("the request header is not 16 device-readable bytes")]
    BadHeader { status: u64 },
}

/// Splits the header (16 readable bytes at the front, possibly across segments) and the status
/// byte (the last byte, writable) off `segs`, leaving only the data segments in it. The header
/// is read from guest memory once.
pub fn split_blk<M: GuestMemoryBackend>(
    mem: &M,
    segs: &mut Vec<Segment>,
) -> Result<BlkParts, PartsError> {
    let last = match segs.last_mut() {
        Some(s) if s.writable => s,
        _ => return Err(PartsError::NoStatus),
    };
    last.len -= 1;
    let status = last.addr + u64::from(last.len);
    if last.len == 0 {
        segs.pop();
    }
    let mut hdr = [0u8; ReqHeader::SIZE];
    let mut got = 0usize;
    let mut consumed = 0usize;
    for s in segs.iter_mut() {
        if got == hdr.len() {
            break;
        }
        if s.writable {
            return Err(PartsError::BadHeader { status });
        }
        let take = (hdr.len() - got).min(s.len as usize);
        mem.read_slice(&mut hdr[got..got + take], GuestAddress(s.addr))
            .map_err(|_| PartsError::BadHeader { status })?;
        got += take;
        s.addr += take as u64;
        s.len -= take as u32;
        if s.len == 0 {
            consumed += 1;
        }
    }
    if got < hdr.len() {
        return Err(PartsError::BadHeader { status });
    }
    segs.drain(..consumed);
    let data_len = segs.iter().map(|s| u64::from(s.len)).sum();
    Ok(BlkParts {
        header: ReqHeader::from_bytes(&hdr),
        status,
        data_len,
    })
}

#[cfg(test)]
mod tests;
