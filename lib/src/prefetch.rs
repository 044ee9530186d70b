//! Cache prefetch hints for the I/O path: a batch that is about to touch many requests asks
//! for all their lines first, so the misses overlap instead of queueing one behind another
//! (after a wait in the kernel, a batch's requests are rarely still in the L1 cache).

/// Asks the CPU to bring the cache line holding `p` into every cache level. A hint only: it
/// never faults and changes no program state, so any address, even a dangling one, is fine.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and has no architectural effect whatever the address;
    // the SSE feature it needs is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_of_any_address_is_harmless() {
        let v = [1u64, 2, 3];
        prefetch(&v[1]);
        prefetch(std::ptr::null::<u64>());
        prefetch(usize::MAX as *const u8);
        assert_eq!(v, [1, 2, 3]);
    }
}
