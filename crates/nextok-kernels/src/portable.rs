//! The portable kernels. They define the arithmetic that every instruction set reproduces bit
//! for bit: each block is expanded to f32 weights (`d · q + m` with one fused multiply-add for
//! Q4_1, `d · (q − 8)` for Q4_0, `d · q` for Q8_0), then 32 lanes accumulate, lane `l` taking
//! element `l` of every block, with fused multiply-adds (`f32::mul_add`, exact whether or not the
//! CPU has an FMA unit), and the fixed lane reduction of [`reduce32`]. Types without a block
//! kernel use 16 lanes over dequantised numbers ([`dot_lanes`], [`reduce16`]).

use crate::dequant::f16_bits_to_f32;

/// Lanes of the accumulators every kernel keeps.
pub const LANES: usize = 16;

/// Sums 16 lanes in a fixed tree: lanes `i` and `i + 8`, then `i` and `i + 4`, then `i` and
/// `i + 2`, then 0 and 1. The SIMD kernels store their accumulators and call this too.
#[inline]
pub fn reduce16(mut a: [f32; LANES]) -> f32 {
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            a[i] += a[i + width];
        }
    }
    a[0]
}

#[inline(always)]
fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

/// Lanes of the block kernels (Q4_0, Q4_1, Q8_0): lane `l` of a 32-element block takes element
/// `l`, so the two halves of a block go to independent accumulators.
pub const BLOCK_LANES: usize = 32;

/// Sums 32 lanes: lanes `i` and `i + 16` first, then [`reduce16`].
#[inline]
pub fn reduce32(a: [f32; BLOCK_LANES]) -> f32 {
    let mut half = [0.0f32; LANES];
    for i in 0..LANES {
        half[i] = a[i] + a[i + LANES];
    }
    reduce16(half)
}

/// Adds one expanded 32-element block to the lanes of `T` token rows: lane `l` takes element `l`
/// with one fused multiply-add.
#[inline(always)]
fn block_into<const T: usize>(
    w: &[f32; 32],
    x: &[&[f32]; T],
    at: usize,
    acc: &mut [[f32; BLOCK_LANES]; T],
) {
    for t in 0..T {
        let xb = &x[t][at..at + 32];
        for l in 0..BLOCK_LANES {
            acc[t][l] = w[l].mul_add(xb[l], acc[t][l]);
        }
    }
}

/// Q4_1 rows against `T` token rows. Each weight is expanded as `d · q + m` (one fused
/// multiply-add) and then used for every token of the tile.
pub fn q4_1<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; BLOCK_LANES]; T]) {
    let mut w = [0.0f32; 32];
    for (b, blk) in row.chunks_exact(20).enumerate() {
        let d = f16_at(blk, 0);
        let m = f16_at(blk, 2);
        for l in 0..LANES {
            let q = blk[4 + l];
            w[l] = d.mul_add(f32::from(q & 15), m);
            w[16 + l] = d.mul_add(f32::from(q >> 4), m);
        }
        block_into(&w, &x, 32 * b, acc);
    }
}

/// Q4_0 rows against `T` token rows; each weight is `d · (q − 8)`.
pub fn q4_0<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; BLOCK_LANES]; T]) {
    let mut w = [0.0f32; 32];
    for (b, blk) in row.chunks_exact(18).enumerate() {
        let d = f16_at(blk, 0);
        for l in 0..LANES {
            let q = blk[2 + l];
            w[l] = d * (f32::from(q & 15) - 8.0);
            w[16 + l] = d * (f32::from(q >> 4) - 8.0);
        }
        block_into(&w, &x, 32 * b, acc);
    }
}

/// Q8_0 rows against `T` token rows; each weight is `d · q`.
pub fn q8_0<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; BLOCK_LANES]; T]) {
    let mut w = [0.0f32; 32];
    for (b, blk) in row.chunks_exact(34).enumerate() {
        let d = f16_at(blk, 0);
        for (i, wi) in w.iter_mut().enumerate() {
            *wi = d * f32::from(blk[2 + i] as i8);
        }
        block_into(&w, &x, 32 * b, acc);
    }
}

/// `acc[l] += w[i] · x[i]` for every `i ≡ l (mod 16)`, in order, over one chunk of
/// dequantised weights that starts at a multiple of 16 elements.
pub fn dot_lanes(w: &[f32], x: &[f32], acc: &mut [f32; LANES]) {
    for (i, (&wi, &xi)) in w.iter().zip(x).enumerate() {
        let l = i % LANES;
        acc[l] = wi.mul_add(xi, acc[l]);
    }
}
