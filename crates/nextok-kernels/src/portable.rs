//! The portable kernels. They define the arithmetic that every instruction set reproduces bit
//! for bit. Q4_1 and Q8_0 have their own ([`q4_1_row`], [`q8_0_row`]: the integers times the
//! activations block by block, then each block's scale, and Q4_1's minimum). For Q4_0 each block
//! is expanded to f32 weights (`d · (q − 8)`), then 32 lanes accumulate, lane `l` taking
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

/// The sums of the 32-number blocks of `x` (`out[b]` = [`reduce32`] of `x[32b..32b + 32]`), which
/// Q4_1's arithmetic multiplies by each block's minimum. A product computes them once per token
/// row and shares them among all its weight rows.
pub fn block_sums(x: &[f32], out: &mut [f32]) {
    for (o, xb) in out.iter_mut().zip(x.chunks_exact(BLOCK_LANES)) {
        let mut a = [0.0f32; BLOCK_LANES];
        a.copy_from_slice(xb);
        *o = reduce32(a);
    }
}

/// The exponent of a block's fixed point: [`fixed_point`] scales a block whose largest
/// magnitude lies in `[2^e, 2^(e+1))` by `2^(FIXED_BITS - e)`, so that it becomes an integer of
/// magnitude below `2^(FIXED_BITS + 1)`.
pub const FIXED_BITS: i32 = 29;

/// The smallest block exponent [`fixed_point`] uses: blocks whose largest magnitude is below
/// `2^-90` are scaled as if it were `2^-90` (their fixed point has fewer significant bits, at
/// magnitudes no activation of a real model reaches), so that every scale is a normal f32.
pub const FIXED_MIN_EXPONENT: i32 = -90;

/// One 32-number block of activations as Q4_1's kernels multiply it: integers `X_i` and one
/// power of two `scale` with `x_i ≈ X_i · scale`, the block's largest magnitude scaled into
/// `[2^29, 2^30)`. Every activation within a factor `2^6` of the block's largest is represented
/// exactly (its 24 significant bits land on integers); smaller ones are rounded to the nearest
/// integer (ties to even), an error below `2^-30` of the block's largest magnitude, 64 times
/// below an f32 rounding of it. `X_i = round(x_i · 2^k)` with `k = 29 − e`, `e` the exponent of
/// the largest magnitude (at least [`FIXED_MIN_EXPONENT`]), and `scale = 2^-k`.
///
/// A block of zeros is `scale` 0; a block holding an infinity or a NaN is `scale` NaN (and
/// integers 0), so that the products it enters are NaN, as the arithmetic of the numbers would
/// make them.
pub fn fixed_point(xb: &[f32]) -> (f32, [i32; BLOCK_LANES]) {
    let mut xq = [0i32; BLOCK_LANES];
    if xb.iter().any(|v| !v.is_finite()) {
        return (f32::NAN, xq);
    }
    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        return (0.0, xq);
    }
    let e = (((amax.to_bits() >> 23) & 0xff) as i32 - 127).max(FIXED_MIN_EXPONENT);
    let k = FIXED_BITS - e;
    let up = f32::from_bits(((k + 127) as u32) << 23);
    let scale = f32::from_bits(((127 - k) as u32) << 23);
    for (q, &v) in xq.iter_mut().zip(xb) {
        *q = (v * up).round_ties_even() as i32;
    }
    (scale, xq)
}

/// Q4_1's arithmetic for one weight row against one token row: the definition that every Q4_1
/// kernel, on every layout and instruction set, reproduces bit for bit. With the nibbles `q` of
/// block `b` given by `nib(b, i)`, its scale and minimum by `dm(b)`, each block of `x` in
/// [`fixed_point`] (`X`, `scale_b`), and `xs[b]` from [`block_sums`]:
///
/// ```text
/// S_b = f32(Σ_i q_i · X_i) · scale_b      (an exact integer sum, rounded once to f32)
/// D   = fma(d_{n-1}, S_{n-1}, … fma(d_0, S_0, 0))                 (in block order)
/// M   = fma(m_{n-1}, xs_{n-1}, … fma(m_0, xs_0, 0))
/// out = D + M
/// ```
///
/// This is `Σ_b Σ_i (d_b · q_i + m_b) · x_i` with the products of 4-bit integers and activations
/// summed first, exactly, in integers: each block's sum is rounded once (a chain of fused
/// multiply-adds would round it 32 times). The SIMD kernels take the integers apart into four
/// signed bytes (`X = X_0 + 2^8 X_1 + 2^16 X_2 + 2^24 X_3`, see [`fixed_point_digits`]) and
/// multiply them by the nibbles with 8-bit dot-product instructions, four products per lane,
/// 16 rows per register: one instruction per 16 weights and byte of the activations, where the
/// f32 route needed a shift, a table lookup and a fused multiply-add per 16 weights.
#[inline]
pub fn q4_1_row(
    blocks: usize,
    dm: impl Fn(usize) -> (f32, f32),
    nib: impl Fn(usize, usize) -> u8,
    x: &[f32],
    xs: &[f32],
) -> f32 {
    let (mut dsum, mut msum) = (0.0f32, 0.0f32);
    for b in 0..blocks {
        let (scale, xq) = fixed_point(&x[BLOCK_LANES * b..BLOCK_LANES * (b + 1)]);
        let mut s = 0i64;
        for (i, &v) in xq.iter().enumerate() {
            s += i64::from(nib(b, i)) * i64::from(v);
        }
        let (d, m) = dm(b);
        dsum = d.mul_add(s as f32 * scale, dsum);
        msum = m.mul_add(xs[b], msum);
    }
    dsum + msum
}

/// The blocks of `x` in [`fixed_point`], as the SIMD kernels read them: `scales[b]` is block
/// `b`'s scale, and its integers are taken apart into four signed bytes each, `X = X_0 + 2^8
/// X_1 + 2^16 X_2 + 2^24 X_3` with every `X_j` in `-128..=127` (the balanced base-256 digits; an
/// integer below `2^30` in magnitude has them). `digits[32 b + 8 j + g]` holds digit `j` of
/// elements `4g .. 4g + 4` of block `b`, element `4g + i` in byte `i` (little-endian).
pub fn fixed_point_digits(x: &[f32], scales: &mut [f32], digits: &mut [i32]) {
    for (b, (xb, sc)) in x
        .chunks_exact(BLOCK_LANES)
        .zip(scales.iter_mut())
        .enumerate()
    {
        let (scale, xq) = fixed_point(xb);
        *sc = scale;
        let mut bytes = [[0u8; BLOCK_LANES]; 4];
        for (i, &v) in xq.iter().enumerate() {
            let mut r = v;
            for digit in bytes.iter_mut() {
                let d = r as i8;
                digit[i] = d as u8;
                r = (r - i32::from(d)) >> 8;
            }
        }
        for (j, digit) in bytes.iter().enumerate() {
            for g in 0..8 {
                let word = [
                    digit[4 * g],
                    digit[4 * g + 1],
                    digit[4 * g + 2],
                    digit[4 * g + 3],
                ];
                digits[32 * b + 8 * j + g] = i32::from_le_bytes(word);
            }
        }
    }
}

/// Q4_1 rows (the file's 20-byte blocks) against `T` token rows, by [`q4_1_row`].
pub fn q4_1<const T: usize>(row: &[u8], x: [&[f32]; T], xs: [&[f32]; T]) -> [f32; T] {
    let blocks = row.len() / 20;
    std::array::from_fn(|t| {
        q4_1_row(
            blocks,
            |b| (f16_at(row, 20 * b), f16_at(row, 20 * b + 2)),
            |b, i| {
                let byte = row[20 * b + 4 + (i & 15)];
                if i < 16 {
                    byte & 15
                } else {
                    byte >> 4
                }
            },
            x[t],
            xs[t],
        )
    })
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

/// Q8_0's arithmetic for one weight row against one token row: the definition that every Q8_0
/// kernel, on every layout and instruction set, reproduces bit for bit. With the signed bytes
/// `q` of block `b` given by `q(b, i)` and its scale by `d(b)`:
///
/// ```text
/// S_b = fma(q_31, x_31, … fma(q_1, x_1, fma(q_0, x_0, 0)))      (in element order)
/// out = fma(d_{n-1}, S_{n-1}, … fma(d_0, S_0, 0))                 (in block order)
/// ```
///
/// This is `Σ_b Σ_i d_b · q_i · x_i` with the products of the 8-bit integers and activations
/// summed first, as [`q4_1_row`] does it: a kernel keeps 16 rows in the lanes of a register
/// ([`crate::packed`]'s Q8_0 tiles) and needs, per 16 weights, one widening load, one
/// conversion and one fused multiply-add per token row, and the scale once per block.
#[inline]
pub fn q8_0_row(
    blocks: usize,
    d: impl Fn(usize) -> f32,
    q: impl Fn(usize, usize) -> i8,
    x: &[f32],
) -> f32 {
    let mut dsum = 0.0f32;
    for b in 0..blocks {
        let mut s = 0.0f32;
        for i in 0..BLOCK_LANES {
            s = f32::from(q(b, i)).mul_add(x[BLOCK_LANES * b + i], s);
        }
        dsum = d(b).mul_add(s, dsum);
    }
    dsum
}

/// Q8_0 rows (the file's 34-byte blocks) against `T` token rows, by [`q8_0_row`].
pub fn q8_0<const T: usize>(row: &[u8], x: [&[f32]; T]) -> [f32; T] {
    let blocks = row.len() / 34;
    std::array::from_fn(|t| {
        q8_0_row(
            blocks,
            |b| f16_at(row, 34 * b),
            |b, i| row[34 * b + 2 + i] as i8,
            x[t],
        )
    })
}

/// `acc[l] += w[i] · x[i]` for every `i ≡ l (mod 16)`, in order, over one chunk of
/// dequantised weights that starts at a multiple of 16 elements.
pub fn dot_lanes(w: &[f32], x: &[f32], acc: &mut [f32; LANES]) {
    for (i, (&wi, &xi)) in w.iter().zip(x).enumerate() {
        let l = i % LANES;
        acc[l] = wi.mul_add(xi, acc[l]);
    }
}
