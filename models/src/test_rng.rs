//! A seeded xorshift generator for the crate's unit tests, so their data depend only on the
//! seed.

/// Returns a generator of pseudo-random `u64`s; every seed, 0 included, gives a live stream.
pub(crate) fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
