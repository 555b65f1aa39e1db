//! Helpers shared by the tests that compare the CUDA kernels with the CPU backend (on a GPU, and
//! on the CPU emulation of the CUDA built-ins).

use rand_chacha::ChaCha8Rng;
use rand_core::RngCore;

/// `n` numbers in [-1, 1), from the seeded generator.
pub fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0)
        .collect()
}

/// The first index where two outputs differ in their bits, with both numbers.
pub fn first_difference(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        .map(|(i, (x, y))| (i, *x, *y))
}
