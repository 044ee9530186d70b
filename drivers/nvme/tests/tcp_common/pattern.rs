//! Test data that differs per seed, so data read back from the wrong place or an older write
//! is told apart. Shared with pmio-nvmf's tests (`targets/nvmf/tests/common/mod.rs` includes
//! this file): the two suites check the two ends of the same NVMe/TCP wire, and a test helper
//! is no reason for either crate to depend on the other.

/// `len` bytes of a pattern that differs per `seed` (xorshift64).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
