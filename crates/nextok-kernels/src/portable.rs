//! The portable kernels. They define the arithmetic that every instruction set reproduces bit
//! for bit: 16 lanes, lane `l` of a 32-element block taking elements `l` and `l + 16`, fused
//! multiply-adds (`f32::mul_add`, which is exact whether or not the CPU has an FMA unit), and the
//! fixed lane reduction of [`reduce16`].

use nextok_gguf::dequant::f16_bits_to_f32;

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

/// Per 32-element block of every token row, the sum of its activations, added left to right.
/// Q4_1's minimum term needs it; it is computed once per product and shared by every row.
pub fn block_sums(x: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.extend(x.chunks_exact(32).map(|b| {
        let mut s = 0.0f32;
        for &v in b {
            s += v;
        }
        s
    }));
}

/// Q4_1 rows against `T` token rows: `acc[t]` lanes and the minimum term `mt[t]`.
pub fn q4_1<const T: usize>(
    row: &[u8],
    x: [&[f32]; T],
    sums: [&[f32]; T],
    acc: &mut [[f32; LANES]; T],
    mt: &mut [f32; T],
) {
    for (b, blk) in row.chunks_exact(20).enumerate() {
        let d = f16_at(blk, 0);
        let m = f16_at(blk, 2);
        let qs = &blk[4..20];
        for t in 0..T {
            let xb = &x[t][32 * b..32 * b + 32];
            for l in 0..LANES {
                let p = f32::from(qs[l] & 15) * xb[l];
                let p = f32::from(qs[l] >> 4).mul_add(xb[16 + l], p);
                acc[t][l] = d.mul_add(p, acc[t][l]);
            }
            mt[t] = m.mul_add(sums[t][b], mt[t]);
        }
    }
}

/// Q4_0 rows against `T` token rows.
pub fn q4_0<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; LANES]; T]) {
    for (b, blk) in row.chunks_exact(18).enumerate() {
        let d = f16_at(blk, 0);
        let qs = &blk[2..18];
        for t in 0..T {
            let xb = &x[t][32 * b..32 * b + 32];
            for l in 0..LANES {
                let p = (f32::from(qs[l] & 15) - 8.0) * xb[l];
                let p = (f32::from(qs[l] >> 4) - 8.0).mul_add(xb[16 + l], p);
                acc[t][l] = d.mul_add(p, acc[t][l]);
            }
        }
    }
}

/// Q8_0 rows against `T` token rows.
pub fn q8_0<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; LANES]; T]) {
    for (b, blk) in row.chunks_exact(34).enumerate() {
        let d = f16_at(blk, 0);
        let qs = &blk[2..34];
        for t in 0..T {
            let xb = &x[t][32 * b..32 * b + 32];
            for l in 0..LANES {
                let p = f32::from(qs[l] as i8) * xb[l];
                let p = f32::from(qs[16 + l] as i8).mul_add(xb[16 + l], p);
                acc[t][l] = d.mul_add(p, acc[t][l]);
            }
        }
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
