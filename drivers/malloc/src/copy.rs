//! Copies between the disk's shared words and a submitter's buffer.
//!
//! The disk may be read and written by several reactors at once (two I/Os to one block are
//! the user's race, as on any disk), so a copy must be defined behaviour under concurrent
//! access: a Rust `memcpy` of memory another thread writes is a data race. Relaxed 64-bit
//! atomics are defined but are not vectorised: a 4 KiB block takes ~860 ns from DRAM here
//! against ~510 ns for `memcpy`. On x86-64 the copy is `rep movsb` in inline assembly
//! instead: as fast as `memcpy` (the CPU picks its own width, ERMS/FSRM), and its racy
//! accesses are the hardware's, each byte a relaxed atomic access, as the atomics path does
//! at 8-byte granularity. Elsewhere, and under Miri (which runs no assembly), the atomics
//! path is used.

use std::sync::atomic::{AtomicU64, Ordering};

/// Copies `words` of the disk into `dst`.
///
/// # Safety
/// `dst..dst + words.len() * 8` must be valid for writes and touched by no one else during
/// the call.
#[inline]
pub(crate) unsafe fn disk_to_buf(words: &[AtomicU64], dst: *mut u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the source is `words` (live, shared, only ever accessed atomically or by this
    // assembly), the destination is the caller's exclusive buffer; the lengths match.
    unsafe {
        rep_movsb(words.as_ptr().cast(), dst, std::mem::size_of_val(words))
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    for (i, w) in words.iter().enumerate() {
        // SAFETY: `dst` covers `words.len()` words, exclusively ours (the caller's contract).
        unsafe {
            dst.cast::<u64>()
                .add(i)
                .write_unaligned(w.load(Ordering::Relaxed))
        };
    }
}

/// Copies `src` into `words` of the disk.
///
/// # Safety
/// `src..src + words.len() * 8` must be valid for reads and written by no one else during
/// the call.
#[inline]
pub(crate) unsafe fn buf_to_disk(src: *const u8, words: &[AtomicU64]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: as in `disk_to_buf`, the other way round: `words` is the shared destination
    // (interior mutability of atomics), `src` the caller's buffer.
    unsafe {
        rep_movsb(
            src,
            words.as_ptr().cast_mut().cast(),
            std::mem::size_of_val(words),
        )
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    for (i, w) in words.iter().enumerate() {
        // SAFETY: `src` covers `words.len()` words (the caller's contract).
        let v = unsafe { src.cast::<u64>().add(i).read_unaligned() };
        w.store(v, Ordering::Relaxed);
    }
}

/// Zeroes `words` of the disk (write zeroes, discard).
#[inline]
pub(crate) fn zero_disk(words: &[AtomicU64]) {
    for w in words {
        w.store(0, Ordering::Relaxed);
    }
}

/// `len` bytes from `src` to `dst` with `rep movsb`.
///
/// # Safety
/// Both ranges must be valid for `len` bytes, must not overlap, and every access to them
/// by others during the call must be atomic or by this function.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
unsafe fn rep_movsb(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract; the direction flag is clear on entry to any Rust
    // code (System V ABI), so the copy runs forward.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(n: usize) -> Vec<AtomicU64> {
        (0..n as u64)
            .map(|i| AtomicU64::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect()
    }

    #[test]
    fn round_trip_at_every_buffer_alignment() {
        for n in [1, 7, 64, 512] {
            let src = disk(n);
            for skew in 0..8 {
                let mut buf = vec![0u8; n * 8 + skew];
                // SAFETY: `buf[skew..]` holds `n` words and is ours.
                unsafe { disk_to_buf(&src, buf.as_mut_ptr().add(skew)) };
                for (i, w) in src.iter().enumerate() {
                    let got = &buf[skew + i * 8..skew + i * 8 + 8];
                    assert_eq!(got, w.load(Ordering::Relaxed).to_ne_bytes(), "word {i}");
                }
                assert!(
                    buf[..skew].iter().all(|&b| b == 0),
                    "wrote before the buffer"
                );
                let dst = disk(n + 1);
                dst[n].store(0xdead, Ordering::Relaxed);
                // SAFETY: as above, for reads.
                unsafe { buf_to_disk(buf.as_ptr().add(skew), &dst[..n]) };
                for i in 0..n {
                    assert_eq!(
                        dst[i].load(Ordering::Relaxed),
                        src[i].load(Ordering::Relaxed)
                    );
                }
                assert_eq!(
                    dst[n].load(Ordering::Relaxed),
                    0xdead,
                    "wrote past the range"
                );
            }
        }
    }

    #[test]
    fn zero_disk_clears_only_its_range() {
        let d = disk(16);
        zero_disk(&d[4..12]);
        for (i, w) in d.iter().enumerate() {
            let v = w.load(Ordering::Relaxed);
            assert_eq!(v == 0, (4..12).contains(&i) || i == 0, "word {i}");
        }
    }
}
