use proptest::prelude::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::*;
use crate::spec::desc_flags::{INDIRECT, NEXT, WRITE};

/// Two regions with a hole between them: [0, 64 KiB) and [128 KiB, 192 KiB).
fn mem() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 64 << 10),
        (GuestAddress(128 << 10), 64 << 10),
    ])
    .unwrap()
}

const QSIZE: u32 = 16;
const TABLE: u64 = 0x1000;
const Q: Table = Table {
    addr: TABLE,
    len: QSIZE,
};

fn put(m: &GuestMemoryMmap, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
    let d = Desc {
        addr,
        len,
        flags,
        next,
    };
    m.write_slice(&d.to_bytes(), GuestAddress(table + u64::from(i) * 16))
        .unwrap();
}

fn header(m: &GuestMemoryMmap, at: u64, type_: u32, sector: u64) {
    let h = ReqHeader {
        type_,
        ioprio: 0,
        sector,
    };
    m.write_slice(&h.to_bytes(), GuestAddress(at)).unwrap();
}

fn walk_ok(m: &GuestMemoryMmap, head: u16) -> Vec<Segment> {
    let mut out = Vec::new();
    walk(m, Q, head, 128, &mut out).unwrap();
    out
}

#[test]
fn linux_layout_header_data_status() {
    let m = mem();
    header(&m, 0x4000, 0, 8);
    put(&m, TABLE, 3, 0x4000, 16, NEXT, 5);
    put(&m, TABLE, 5, 0x8000, 4096, NEXT | WRITE, 1);
    put(&m, TABLE, 1, 0x5000, 1, WRITE, 0);
    let mut segs = walk_ok(&m, 3);
    assert_eq!(segs.len(), 3);
    let p = split_blk(&m, &mut segs).unwrap();
    assert_eq!(p.header.type_, 0);
    assert_eq!(p.header.sector, 8);
    assert_eq!(p.status, 0x5000);
    assert_eq!(p.data_len, 4096);
    assert_eq!(
        segs,
        vec![Segment {
            addr: 0x8000,
            len: 4096,
            writable: true
        }]
    );
}

#[test]
fn any_layout_header_split_and_status_shared_with_data() {
    let m = mem();
    // The header in two pieces (10 + 6 bytes), the second shared with 512 bytes of data; the
    // status byte at the end of the last writable buffer.
    header(&m, 0x4000, 1, 0);
    let h = {
        let mut b = [0u8; 16];
        m.read_slice(&mut b, GuestAddress(0x4000)).unwrap();
        b
    };
    m.write_slice(&h[..10], GuestAddress(0x6000)).unwrap();
    m.write_slice(&h[10..], GuestAddress(0x7000)).unwrap();
    put(&m, TABLE, 0, 0x6000, 10, NEXT, 1);
    put(&m, TABLE, 1, 0x7000, 6 + 512, NEXT, 2);
    put(&m, TABLE, 2, 0x9000, 1, WRITE, 0);
    let mut segs = walk_ok(&m, 0);
    let p = split_blk(&m, &mut segs).unwrap();
    assert_eq!(p.header.type_, 1);
    assert_eq!(p.data_len, 512);
    assert_eq!(segs[0].addr, 0x7006);
    assert_eq!(p.status, 0x9000);

    // Read data and status in one writable buffer.
    header(&m, 0x4000, 0, 0);
    put(&m, TABLE, 0, 0x4000, 16, NEXT, 1);
    put(&m, TABLE, 1, 0x8000, 513, WRITE, 0);
    let mut segs = walk_ok(&m, 0);
    let p = split_blk(&m, &mut segs).unwrap();
    assert_eq!(p.status, 0x8000 + 512);
    assert_eq!(p.data_len, 512);
    assert_eq!(segs.len(), 1);
}

#[test]
fn zero_length_buffers_are_skipped() {
    let m = mem();
    header(&m, 0x4000, 4, 0);
    put(&m, TABLE, 0, 0x4000, 16, NEXT, 1);
    put(&m, TABLE, 1, 0xdead_0000, 0, NEXT, 2);
    put(&m, TABLE, 2, 0x5000, 1, WRITE, 0);
    let mut segs = walk_ok(&m, 0);
    assert_eq!(segs.len(), 2);
    let p = split_blk(&m, &mut segs).unwrap();
    assert_eq!(p.data_len, 0);
    assert!(segs.is_empty());
}

#[test]
fn hostile_direct_chains_are_refused() {
    let m = mem();
    let mut out = Vec::new();
    let mut w = |head| walk(&m, Q, head, 128, &mut out);
    // The head outside the queue.
    assert_eq!(w(16), Err(ChainError::IndexOutOfRange(16)));
    // A loop: 0 -> 1 -> 0.
    put(&m, TABLE, 0, 0x4000, 16, NEXT, 1);
    put(&m, TABLE, 1, 0x5000, 16, NEXT, 0);
    assert_eq!(
        walk(&m, Q, 0, 128, &mut Vec::new()),
        Err(ChainError::Loop(QSIZE))
    );
    // A self loop.
    put(&m, TABLE, 2, 0x4000, 16, NEXT, 2);
    assert_eq!(
        walk(&m, Q, 2, 128, &mut Vec::new()),
        Err(ChainError::Loop(QSIZE))
    );
    // next outside the queue.
    put(&m, TABLE, 3, 0x4000, 16, NEXT, 400);
    assert_eq!(
        walk(&m, Q, 3, 128, &mut Vec::new()),
        Err(ChainError::IndexOutOfRange(400))
    );
    // Buffers outside guest memory: past the end, in the hole, straddling the hole, wrapping.
    for (addr, len) in [
        (192 << 10, 16),
        (96 << 10, 16),
        ((64 << 10) - 8, 16),
        (u64::MAX - 4, 16),
    ] {
        put(&m, TABLE, 4, addr, len, 0, 0);
        assert_eq!(
            walk(&m, Q, 4, 128, &mut Vec::new()),
            Err(ChainError::BufferOutsideMemory { addr, len }),
            "{addr:#x}+{len}"
        );
    }
    // Readable after writable.
    put(&m, TABLE, 5, 0x4000, 16, NEXT | WRITE, 6);
    put(&m, TABLE, 6, 0x5000, 16, 0, 0);
    assert_eq!(
        walk(&m, Q, 5, 128, &mut Vec::new()),
        Err(ChainError::ReadableAfterWritable)
    );
    // The descriptor table itself outside memory.
    let far = Table {
        addr: 100 << 10,
        len: QSIZE,
    };
    assert_eq!(
        walk(&m, far, 0, 128, &mut Vec::new()),
        Err(ChainError::TableOutsideMemory(100 << 10))
    );
    // More segments than allowed.
    for i in 0..8 {
        put(&m, TABLE, i, 0x4000, 1, NEXT, i + 1);
    }
    put(&m, TABLE, 8, 0x4000, 1, 0, 0);
    assert_eq!(
        walk(&m, Q, 0, 4, &mut Vec::new()),
        Err(ChainError::TooManySegments(4))
    );
    assert_eq!(walk(&m, Q, 0, 9, &mut Vec::new()), Ok(()));
}

#[test]
fn indirect_tables() {
    let m = mem();
    let ind = 0x2000u64;
    header(&m, 0x4000, 0, 0);
    put(&m, ind, 0, 0x4000, 16, NEXT, 1);
    put(&m, ind, 1, 0x8000, 4096, NEXT | WRITE, 2);
    put(&m, ind, 2, 0x5000, 1, WRITE, 0);
    put(&m, TABLE, 7, ind, 3 * 16, INDIRECT, 0);
    let mut segs = walk_ok(&m, 7);
    assert_eq!(segs.len(), 3);
    assert_eq!(split_blk(&m, &mut segs).unwrap().data_len, 4096);

    let mut out = Vec::new();
    let mut w = |m: &GuestMemoryMmap| walk(m, Q, 7, 128, &mut out);
    // A next past the table's end (the table is 3 long).
    put(&m, ind, 1, 0x8000, 4096, NEXT | WRITE, 3);
    assert_eq!(w(&m), Err(ChainError::IndexOutOfRange(3)));
    put(&m, ind, 1, 0x8000, 4096, NEXT | WRITE, 2);
    // A fourth descriptor in a table of three.
    put(&m, ind, 2, 0x5000, 1, WRITE | NEXT, 0);
    assert_eq!(w(&m), Err(ChainError::Loop(3)));
    // A loop inside the table.
    put(&m, ind, 2, 0x5000, 1, WRITE | NEXT, 1);
    assert_eq!(w(&m), Err(ChainError::Loop(3)));
    // Nested indirect.
    put(&m, ind, 2, ind, 16, INDIRECT, 0);
    assert_eq!(w(&m), Err(ChainError::NestedIndirect));
    put(&m, ind, 2, 0x5000, 1, WRITE, 0);
    // Indirect with NEXT, and indirect that is not the head.
    put(&m, TABLE, 7, ind, 48, INDIRECT | NEXT, 8);
    assert_eq!(w(&m), Err(ChainError::IndirectInChain));
    put(&m, TABLE, 7, 0x4000, 16, NEXT, 8);
    put(&m, TABLE, 8, ind, 48, INDIRECT, 0);
    assert_eq!(w(&m), Err(ChainError::IndirectInChain));
    // Bad table lengths.
    for len in [0, 17, (MAX_INDIRECT + 1) * 16] {
        put(&m, TABLE, 7, ind, len, INDIRECT, 0);
        assert_eq!(w(&m), Err(ChainError::IndirectLength(len)));
    }
    // The table outside memory.
    put(&m, TABLE, 7, 96 << 10, 48, INDIRECT, 0);
    assert_eq!(w(&m), Err(ChainError::TableOutsideMemory(96 << 10)));
}

#[test]
fn status_and_header_problems() {
    let m = mem();
    header(&m, 0x4000, 0, 0);
    // The last buffer readable: no status byte.
    put(&m, TABLE, 0, 0x4000, 16, NEXT, 1);
    put(&m, TABLE, 1, 0x5000, 1, 0, 0);
    let mut segs = walk_ok(&m, 0);
    assert_eq!(split_blk(&m, &mut segs), Err(PartsError::NoStatus));
    // A short header.
    put(&m, TABLE, 0, 0x4000, 8, NEXT, 1);
    put(&m, TABLE, 1, 0x5000, 1, WRITE, 0);
    let mut segs = walk_ok(&m, 0);
    assert_eq!(
        split_blk(&m, &mut segs),
        Err(PartsError::BadHeader { status: 0x5000 })
    );
    // A writable header.
    put(&m, TABLE, 0, 0x4000, 16, NEXT | WRITE, 1);
    let mut segs = walk_ok(&m, 0);
    assert_eq!(
        split_blk(&m, &mut segs),
        Err(PartsError::BadHeader { status: 0x5000 })
    );
    // Only a status byte.
    put(&m, TABLE, 0, 0x5000, 1, WRITE, 0);
    let mut segs = walk_ok(&m, 0);
    assert_eq!(
        split_blk(&m, &mut segs),
        Err(PartsError::BadHeader { status: 0x5000 })
    );
    // An empty chain.
    put(&m, TABLE, 0, 0x5000, 0, 0, 0);
    let mut segs = walk_ok(&m, 0);
    assert_eq!(split_blk(&m, &mut segs), Err(PartsError::NoStatus));
}

/// Addresses a hostile guest would use: inside, at the edges of and outside its memory.
fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..(64 << 10),
        (60u64 << 10)..(70 << 10),
        (120u64 << 10)..(200 << 10),
        Just(u64::MAX - 3),
        any::<u64>(),
    ]
}

fn desc() -> impl Strategy<Value = Desc> {
    (
        addr(),
        prop_oneof![0u32..64, 0u32..8192, any::<u32>()],
        0u16..8,
        prop_oneof![0u16..20, any::<u16>()],
    )
        .prop_map(|(addr, len, flags, next)| Desc {
            addr,
            len,
            flags,
            next,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the guest writes in its descriptor table and indirect table, the walk ends,
    /// and what it returns is inside guest memory, bounded, and ordered readable-first; the
    /// request split never panics and keeps the header and status inside the chain.
    #[test]
    fn prop_hostile_chains_never_escape(
        table in proptest::collection::vec(desc(), QSIZE as usize),
        indirect in proptest::collection::vec(desc(), 8),
        head in 0u16..20,
        max_segs in 1usize..12,
        junk in proptest::collection::vec(any::<u8>(), 64),
    ) {
        let m = mem();
        for (i, d) in table.iter().enumerate() {
            m.write_slice(&d.to_bytes(), GuestAddress(TABLE + i as u64 * 16)).unwrap();
        }
        for (i, d) in indirect.iter().enumerate() {
            m.write_slice(&d.to_bytes(), GuestAddress(0x2000 + i as u64 * 16)).unwrap();
        }
        m.write_slice(&junk, GuestAddress(0x4000)).unwrap();
        let mut segs = Vec::new();
        if walk(&m, Q, head, max_segs, &mut segs).is_ok() {
            prop_assert!(segs.len() <= max_segs);
            let mut seen_w = false;
            for s in &segs {
                prop_assert!(s.len > 0);
                prop_assert!(GuestMemoryBackend::check_range(&m, GuestAddress(s.addr), s.len as usize));
                prop_assert!(s.writable || !seen_w);
                seen_w |= s.writable;
            }
            let before = segs.clone();
            if let Ok(p) = split_blk(&m, &mut segs) {
                let total: u64 = before.iter().map(|s| u64::from(s.len)).sum();
                prop_assert_eq!(p.data_len + 16 + 1, total);
                let last = before.last().unwrap();
                prop_assert!(last.writable);
                prop_assert_eq!(p.status, last.addr + u64::from(last.len) - 1);
                for s in &segs {
                    prop_assert!(s.len > 0);
                    prop_assert!(GuestMemoryBackend::check_range(&m, GuestAddress(s.addr), s.len as usize));
                }
            }
        } else {
            prop_assert!(segs.len() <= max_segs);
        }
    }
}
