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

/// Key and value rows for the tests of KV writes: random numbers, and in every third row numbers of
/// any bit pattern (subnormals, overflows to infinity, NaNs with payloads, ties of the 16-bit
/// roundings), so that every branch of the kernel's rounding meets the host's.
pub fn kv_rows(rng: &mut ChaCha8Rng, rows: usize, row_len: usize) -> Vec<f32> {
    let mut out = random(rng, rows * row_len);
    for (i, x) in out.iter_mut().enumerate() {
        if (i / row_len) % 3 == 1 {
            let bits = rng.next_u32();
            *x = f32::from_bits(match i % 4 {
                // A tie for bf16 (and, with the low bits clear, for f16) at a random exponent.
                0 => (bits & 0xffff_0000) | 0x8000,
                1 => (bits & 0xffff_e000) | 0x1000,
                _ => bits,
            });
        }
    }
    out
}
