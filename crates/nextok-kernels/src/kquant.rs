//! AVX-512 and AVX2 kernels for the K-quant types Q4_K, Q5_K and Q6_K (blocks of 256 weights),
//! which give exactly the bits of the dequantise-then-dot path (`crate::generic`). The weights
//! are formed in registers with the floating-point operations of `crate::dequant`:
//! - Q4_K: `d1 = d · sc`, `m1 = dmin · m`, then `w = d1 · q − m1`, a multiplication and a
//!   subtraction, never fused; Q5_K the same with a fifth bit of `q`;
//! - Q6_K: `ds = d · sc`, then `w = ds · (q − 32)`.
//!
//! Each token row keeps the 16 lanes of `crate::dot_lanes`: lane `l` takes the elements
//! `i ≡ l (mod 16)` in order, one fused multiply-add each, summed at the end by
//! `portable::reduce16`.
//!
//! Within a row the lane order makes every block a chain of 16 dependent fused multiply-adds per
//! token, so the kernels take `R` weight rows and `T` token rows at once: `R · T` independent
//! chains hide the latency, and each expanded weight serves `T` tokens, each activation load `R`
//! rows.
//!
//! Every function is `unsafe` only because it needs CPU features and reads rows without bounds
//! checks: callers check the features with [`crate::Isa::is_available`] and the lengths with
//! `QMat::new` and `crate::check`.

// Arrays of registers are indexed on purpose: the index says which row, token or group a register
// belongs to, and the loops unroll to straight-line code.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;
use std::ops::Range;

use nextok_gguf::GgmlType;

use crate::portable::{reduce16, LANES};
use crate::{Isa, QMat, SyncPtr};

/// Bytes of one Q4_K block: `d`, `dmin` (f16), 12 bytes of scales and minimums, 128 of nibbles.
const Q4K_BYTES: usize = 144;
/// Bytes of one Q5_K block: as Q4_K, with 32 bytes of fifth bits before the nibbles.
const Q5K_BYTES: usize = 176;
/// Bytes of one Q6_K block: 128 bytes of low bits, 64 of high bits, 16 scales, `d` (f16).
const Q6K_BYTES: usize = 210;
/// How far ahead of the current block the kernels prefetch a row, in bytes. Measured on this
/// project's Zen 4 machine, one thread, 16384 × 768 matrices streamed from memory: Q6_K against
/// 8 tokens took 3.2 ms with the prefetches and 4.5–4.8 ms without, against one token 6% less
/// time; Q4_K changed by less than the noise. 4 KiB ahead measured the same as 1 KiB.
const PREFETCH_BYTES: usize = 1024;

/// The numbers 0 to 31, the values of `q` in the Q4_K (first 16) and Q5_K lookup tables.
static QUANTS: [f32; 32] = {
    let mut t = [0.0f32; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = i as f32;
        i += 1;
    }
    t
};

/// The kernel for `ty` on `isa`: `R` rows against `T` token rows, reduced.
///
/// # Safety
/// `isa` is available on this CPU and is AVX-512 or AVX2; `ty` is Q4_K, Q5_K or Q6_K; every row
/// holds the same whole number of blocks of `ty` and each `x[t]` 256 numbers per block.
#[inline(always)]
unsafe fn kernel<const R: usize, const T: usize>(
    isa: Isa,
    ty: GgmlType,
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    // SAFETY: the caller's guarantees are those of the kernels.
    unsafe {
        match (ty, isa) {
            (GgmlType::Q4K, Isa::Avx512) => q4_k_avx512(rows, x),
            (GgmlType::Q5K, Isa::Avx512) => q5_k_avx512(rows, x),
            (GgmlType::Q6K, Isa::Avx512) => q6_k_avx512(rows, x),
            (GgmlType::Q4K, _) => q4_k_avx2(rows, x),
            (GgmlType::Q5K, _) => q5_k_avx2(rows, x),
            _ => q6_k_avx2(rows, x),
        }
    }
}

/// Tokens per call of the AVX2 one-row kernels: AVX2 has 16 registers, and 4 tokens' lanes
/// (8 registers) leave room for the weights; more tokens would spill the accumulators.
const AVX2_TILE: usize = 4;

/// One weight row against `T` token rows (`T` ≤ 8), for `crate::row_dot`: the bits of the
/// generic path, reduced.
///
/// # Safety
/// `isa` is available on this CPU and is AVX-512 or AVX2; `ty` is Q4_K, Q5_K or Q6_K; `row`
/// holds whole blocks of `ty` and each `x[t]` 256 numbers per block.
pub(crate) unsafe fn row_dot<const T: usize>(
    isa: Isa,
    ty: GgmlType,
    row: &[u8],
    x: [&[f32]; T],
) -> [f32; T] {
    if isa == Isa::Avx512 || T <= AVX2_TILE {
        // SAFETY: the caller's guarantees are those of the kernels.
        return unsafe { kernel::<1, T>(isa, ty, [row], x) }[0];
    }
    let mut out = [0.0f32; T];
    let mut c = 0;
    while c < T {
        let n = (T - c).min(AVX2_TILE);
        macro_rules! part {
            ($n:literal) => {{
                let xs: [&[f32]; $n] = std::array::from_fn(|i| x[c + i]);
                // SAFETY: as above.
                let res = unsafe { kernel::<1, $n>(isa, ty, [row], xs) };
                out[c..c + $n].copy_from_slice(&res[0]);
            }};
        }
        match n {
            4 => part!(4),
            3 => part!(3),
            2 => part!(2),
            _ => part!(1),
        }
        c += n;
    }
    out
}

/// Most tokens the two-row kernels take at once: on AVX-512, 2 rows × 4 tokens keep 8
/// accumulators in registers; on AVX2 (two registers per token and row, 16 registers in all)
/// 2 rows × 2 tokens.
fn pair_tile(isa: Isa) -> usize {
    if isa == Isa::Avx512 {
        4
    } else {
        2
    }
}

/// Most tokens for which AVX-512 Q4_K takes four rows at once (in tiles of this many tokens).
/// Measured on this project's Zen 4 machine, one thread, 16384 × 768: four rows took 28% less
/// time than two against one token and 22% less against two, but more against 3 to 8 tokens (in
/// tiles of 2); Q5_K and Q6_K, whose expansion holds more registers, were slower with four rows
/// even against one token.
const QUAD_TOKENS: usize = 2;

/// Rows `rows` of `w` (Q4_K, Q5_K or Q6_K) several at a time against the token rows `tokens`,
/// written to `out[t · w.rows + r]`; returns the first row not computed (at most one is left,
/// or on AVX2 all of them when there are more tokens than a pair tile, where one row against 4
/// tokens expands each weight fewer times). AVX-512 Q4_K against at most `QUAD_TOKENS` tokens
/// takes four rows at a time, then pairs; everything else pairs.
///
/// # Safety
/// `isa` is available on this CPU and is AVX-512 or AVX2; `w` is a validated Q4_K, Q5_K or Q6_K
/// matrix in the file's layout; `x` holds `tokens.end · w.cols` numbers; `out` points to
/// `tokens.end · w.rows` writable numbers, and no other thread writes these rows.
pub(crate) unsafe fn pairs(
    isa: Isa,
    w: &QMat<'_>,
    x: &[f32],
    tokens: Range<usize>,
    rows: Range<usize>,
    out: SyncPtr,
) -> usize {
    let tile = pair_tile(isa);
    if isa == Isa::Avx2 && tokens.len() > tile {
        return rows.start;
    }
    let mut r = rows.start;
    if isa == Isa::Avx512 && w.ty == GgmlType::Q4K && tokens.len() <= QUAD_TOKENS {
        // SAFETY: the caller's guarantees.
        r = unsafe { rows_at_once::<4>(isa, w, x, tokens.clone(), r..rows.end, out, QUAD_TOKENS) };
    }
    // SAFETY: as above.
    unsafe { rows_at_once::<2>(isa, w, x, tokens, r..rows.end, out, tile) }
}

/// Rows `rows` of `w`, `R` at a time, against the token rows `tokens` in tiles of at most `tile`
/// (≤ 4) tokens; returns the first row not computed (fewer than `R` are left).
///
/// # Safety
/// As for `pairs`.
#[inline(always)]
unsafe fn rows_at_once<const R: usize>(
    isa: Isa,
    w: &QMat<'_>,
    x: &[f32],
    tokens: Range<usize>,
    rows: Range<usize>,
    out: SyncPtr,
    tile: usize,
) -> usize {
    let cols = w.cols;
    let mut r = rows.start;
    while r + R <= rows.end {
        let group: [&[u8]; R] = std::array::from_fn(|k| w.row(r + k));
        let mut t = tokens.start;
        while t < tokens.end {
            let n = (tokens.end - t).min(tile);
            macro_rules! tile {
                ($n:literal) => {{
                    let xs: [&[f32]; $n] =
                        std::array::from_fn(|i| &x[(t + i) * cols..(t + i + 1) * cols]);
                    // SAFETY: the caller guarantees the ISA and a validated matrix; the
                    // activations have `cols` numbers per token.
                    let res = unsafe { kernel::<R, $n>(isa, w.ty, group, xs) };
                    for (k, row_res) in res.iter().enumerate() {
                        for (i, &v) in row_res.iter().enumerate() {
                            // SAFETY: in bounds by the caller's contract; this thread owns rows
                            // `r..r + R`.
                            unsafe { *out.0.add((t + i) * w.rows + r + k) = v };
                        }
                    }
                }};
            }
            match n {
                4 => tile!(4),
                3 => tile!(3),
                2 => tile!(2),
                _ => tile!(1),
            }
            t += n;
        }
        r += R;
    }
    r
}

/// Reads the f16 at `p` as f32 (exact).
#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes and the f16c feature.
    unsafe {
        let bits = std::ptr::read_unaligned(p as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }
}

/// The 6-bit scales and minimums of a Q4_K block (its 12 bytes at `p`), as 16 bytes: scales of
/// sub-blocks 0–7, then minimums 0–7 (`scale_min_k4` of `crate::dequant`, all at once).
#[inline(always)]
unsafe fn q4_k_scales(p: *const u8) -> [u8; 16] {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    // SAFETY: the caller guarantees 12 readable bytes.
    let q: [u32; 3] = unsafe { std::ptr::read_unaligned(p as *const [u32; 3]) };
    let q = q.map(u32::from_le);
    // Sub-blocks 0–3 take the low 6 bits of bytes 0–3 (scales) and 4–7 (minimums); 4–7 take a
    // nibble of bytes 8–11 and the top two bits of bytes 0–3 (scales) or 4–7 (minimums).
    let words = [
        q[0] & LOW6,
        (q[2] & LOW4) | (((q[0] >> 6) & LOW2) << 4),
        q[1] & LOW6,
        ((q[2] >> 4) & LOW4) | (((q[1] >> 6) & LOW2) << 4),
    ];
    let mut out = [0u8; 16];
    for (i, w) in words.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Prefetches the weights `PREFETCH_BYTES` ahead of `p`, `lines` cache lines (enough to cover
/// one block's bytes, so that consecutive blocks leave no line out).
#[inline(always)]
unsafe fn prefetch(p: *const u8, lines: usize) {
    // SAFETY: a prefetch is a hint, never a fault, even past the end of a row.
    unsafe {
        for k in 0..lines {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH_BYTES + 64 * k) as *const i8);
        }
    }
}

/// `[d · sc[0..8], dmin · m[0..8]]` of a Q4_K or Q5_K block (the two share their first 16
/// bytes), each product as `dequant::q4_k` rounds it.
#[inline(always)]
unsafe fn q4_k_factors_avx512(blk: *const u8) -> [f32; 16] {
    // SAFETY: the caller guarantees a whole block and the features.
    unsafe {
        let sm = q4_k_scales(blk.add(4));
        let ints = _mm512_cvtepu8_epi32(_mm_loadu_si128(sm.as_ptr() as *const __m128i));
        let (d, dmin) = (f16_at(blk), f16_at(blk.add(2)));
        let dd = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d), _mm512_set1_ps(dmin));
        let mut f = [0.0f32; 16];
        _mm512_storeu_ps(f.as_mut_ptr(), _mm512_mul_ps(dd, _mm512_cvtepi32_ps(ints)));
        f
    }
}

/// The lanes of `R` rows and `T` tokens, reduced: `out[r][t] = reduce16(lanes)`.
#[inline(always)]
unsafe fn reduce_avx512<const R: usize, const T: usize>(a: &[[__m512; T]; R]) -> [[f32; T]; R] {
    // SAFETY: register stores to a local array; the caller has AVX-512F.
    unsafe {
        let mut out = [[0.0f32; T]; R];
        for r in 0..R {
            for t in 0..T {
                let mut lanes = [0.0f32; LANES];
                _mm512_storeu_ps(lanes.as_mut_ptr(), a[r][t]);
                out[r][t] = reduce16(lanes);
            }
        }
        out
    }
}

/// Adds 16-element group `g` (elements `16g..16g + 16` of the row) of `R` rows to the lanes of
/// `T` tokens: one fused multiply-add per row and token, each activation load serving every row.
#[inline(always)]
unsafe fn group_avx512<const R: usize, const T: usize>(
    w: [__m512; R],
    x: &[&[f32]; T],
    g: usize,
    a: &mut [[__m512; T]; R],
) {
    // SAFETY: the caller guarantees 16 readable numbers at `16 g` of every token row.
    unsafe {
        for t in 0..T {
            let xv = _mm512_loadu_ps(x[t].as_ptr().add(16 * g));
            for r in 0..R {
                a[r][t] = _mm512_fmadd_ps(w[r], xv, a[r][t]);
            }
        }
    }
}

/// The 16 weights `d1 · q − m1` of a Q4_K sub-block, for q = 0..15 (in `nibbles`).
#[inline(always)]
unsafe fn q4_k_table_avx512(d1: f32, m1: f32, nibbles: __m512) -> __m512 {
    // SAFETY: register operations only; the caller has AVX-512F.
    unsafe {
        _mm512_sub_ps(
            _mm512_mul_ps(_mm512_set1_ps(d1), nibbles),
            _mm512_set1_ps(m1),
        )
    }
}

/// Sixteen bytes at `p`, zero-extended to 32-bit lanes.
#[inline(always)]
unsafe fn bytes16_avx512(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees 16 readable bytes and AVX-512F.
    unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i)) }
}

/// Q4_K, AVX-512: `R` rows against `T` token rows, reduced. Each sub-block of 32 weights has 16
/// possible values `d1 · q − m1` (q = 0..15, a multiplication then a subtraction, as
/// `dequant::q4_k` computes each weight), which a permutation puts in place.
///
/// # Safety
/// AVX-512F, F16C and FMA are available; every row holds the same whole number of Q4_K blocks
/// and each `x[t]` 256 numbers per block.
#[target_feature(enable = "avx512f,f16c,fma")]
pub(crate) unsafe fn q4_k_avx512<const R: usize, const T: usize>(
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = rows[0].len() / Q4K_BYTES;
    // SAFETY: lengths guaranteed by the caller.
    unsafe {
        let nibbles = _mm512_loadu_ps(QUANTS.as_ptr());
        let mut a = [[_mm512_setzero_ps(); T]; R];
        // Closures would not inherit the target features once passed to a generic function,
        // so the per-row work is written as plain loops over arrays of registers.
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut f = [[0.0f32; 16]; R];
        let mut w = [[_mm512_setzero_ps(); R]; 4];
        for b in 0..nb {
            for r in 0..R {
                blk[r] = rows[r].as_ptr().add(Q4K_BYTES * b);
                prefetch(blk[r], 3);
                f[r] = q4_k_factors_avx512(blk[r]);
            }
            for i in 0..4 {
                // Elements 64i..64i + 32 are the low nibbles of bytes 32i..32i + 32 (sub-block
                // 2i), elements 64i + 32..64i + 64 their high nibbles (sub-block 2i + 1).
                for r in 0..R {
                    let lo = q4_k_table_avx512(f[r][2 * i], f[r][8 + 2 * i], nibbles);
                    let hi = q4_k_table_avx512(f[r][2 * i + 1], f[r][9 + 2 * i], nibbles);
                    let q = blk[r].add(16 + 32 * i);
                    let q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(q as *const __m128i));
                    let q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(16) as *const __m128i));
                    // `permutexvar` reads only the low 4 bits of each index.
                    w[0][r] = _mm512_permutexvar_ps(q0, lo);
                    w[1][r] = _mm512_permutexvar_ps(q1, lo);
                    w[2][r] = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(q0), hi);
                    w[3][r] = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(q1), hi);
                }
                for g in 0..4 {
                    group_avx512(w[g], &x, 16 * b + 4 * i + g, &mut a);
                }
            }
        }
        reduce_avx512(&a)
    }
}

/// Q6_K, AVX-512: `R` rows against `T` token rows, reduced. Each 16-element group has its own
/// scale `ds = d · sc`; its weights are `ds · (q − 32)` with the 6-bit `q` assembled in integer
/// lanes (exact) and converted.
///
/// # Safety
/// AVX-512F, F16C and FMA are available; every row holds the same whole number of Q6_K blocks
/// and each `x[t]` 256 numbers per block.
#[target_feature(enable = "avx512f,f16c,fma")]
pub(crate) unsafe fn q6_k_avx512<const R: usize, const T: usize>(
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = rows[0].len() / Q6K_BYTES;
    // SAFETY: lengths guaranteed by the caller.
    unsafe {
        let low4 = _mm512_set1_epi32(0x0f);
        let high2 = _mm512_set1_epi32(0x30);
        let offset = _mm512_set1_epi32(32);
        let mut a = [[_mm512_setzero_ps(); T]; R];
        // Plain loops rather than closures: see `q4_k_avx512`.
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut ds = [[0.0f32; 16]; R];
        let mut ql = [[[_mm512_setzero_si512(); 2]; 2]; R];
        let mut qh = [[_mm512_setzero_si512(); 2]; R];
        let mut wg = [_mm512_setzero_ps(); R];
        for b in 0..nb {
            for r in 0..R {
                blk[r] = rows[r].as_ptr().add(Q6K_BYTES * b);
                prefetch(blk[r], 4);
                // The 16 scales (signed bytes) times `d`, one product per group.
                let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk[r].add(192) as *const __m128i));
                let dv = _mm512_set1_ps(f16_at(blk[r].add(208)));
                _mm512_storeu_ps(
                    ds[r].as_mut_ptr(),
                    _mm512_mul_ps(dv, _mm512_cvtepi32_ps(sc)),
                );
            }
            for h in 0..2 {
                // Per row: `ql` bytes 16j + 32m and `qh` bytes 16j of this half.
                for r in 0..R {
                    let p = blk[r].add(64 * h);
                    ql[r] = [
                        [bytes16_avx512(p), bytes16_avx512(p.add(32))],
                        [bytes16_avx512(p.add(16)), bytes16_avx512(p.add(48))],
                    ];
                    let p = blk[r].add(128 + 32 * h);
                    qh[r] = [bytes16_avx512(p), bytes16_avx512(p.add(16))];
                }
                // Element 32k + 16j + l of the half: the low nibble (k < 2) or high nibble of
                // `ql[16j + l + 32 (k mod 2)]`, and bits 2k, 2k + 1 of `qh[16j + l]` on top.
                for k in 0..4 {
                    for j in 0..2 {
                        for r in 0..R {
                            let bytes = ql[r][j][k % 2];
                            let low = if k < 2 {
                                _mm512_and_si512(bytes, low4)
                            } else {
                                _mm512_srli_epi32::<4>(bytes)
                            };
                            let hq = qh[r][j];
                            let high = match k {
                                0 => _mm512_slli_epi32::<4>(hq),
                                1 => _mm512_slli_epi32::<2>(hq),
                                2 => hq,
                                _ => _mm512_srli_epi32::<2>(hq),
                            };
                            // (high & 0x30) | low, in one instruction.
                            let q = _mm512_ternarylogic_epi32::<0xea>(high, high2, low);
                            let q = _mm512_sub_epi32(q, offset);
                            wg[r] = _mm512_mul_ps(
                                _mm512_set1_ps(ds[r][8 * h + 2 * k + j]),
                                _mm512_cvtepi32_ps(q),
                            );
                        }
                        group_avx512(wg, &x, 16 * b + 8 * h + 2 * k + j, &mut a);
                    }
                }
            }
        }
        reduce_avx512(&a)
    }
}

/// `v` shifted so that its bit `b` lands on bit 4 (the bit that picks the upper half of a
/// 32-entry lookup); the other bits move too, and the lookups ignore them.
#[inline(always)]
unsafe fn bit_to_4_avx512(v: __m512i, b: usize) -> __m512i {
    // SAFETY: register operations only; the caller has AVX-512F.
    unsafe {
        match b {
            0 => _mm512_slli_epi32::<4>(v),
            1 => _mm512_slli_epi32::<3>(v),
            2 => _mm512_slli_epi32::<2>(v),
            3 => _mm512_slli_epi32::<1>(v),
            4 => v,
            5 => _mm512_srli_epi32::<1>(v),
            6 => _mm512_srli_epi32::<2>(v),
            _ => _mm512_srli_epi32::<3>(v),
        }
    }
}

/// Q5_K, AVX-512: `R` rows against `T` token rows, reduced. As `q4_k_avx512`, with 32 possible
/// values `d1 · q − m1` (q = 0..31) per sub-block in two registers, and the 5-bit index made of
/// the nibble and the sub-block's bit of `qh` (`permutex2var` reads only the low 5 bits).
///
/// # Safety
/// AVX-512F, F16C and FMA are available; every row holds the same whole number of Q5_K blocks
/// and each `x[t]` 256 numbers per block.
#[target_feature(enable = "avx512f,f16c,fma")]
pub(crate) unsafe fn q5_k_avx512<const R: usize, const T: usize>(
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = rows[0].len() / Q5K_BYTES;
    // SAFETY: lengths guaranteed by the caller.
    unsafe {
        let quants = [
            _mm512_loadu_ps(QUANTS.as_ptr()),
            _mm512_loadu_ps(QUANTS.as_ptr().add(16)),
        ];
        let low4 = _mm512_set1_epi32(0x0f);
        let mut a = [[_mm512_setzero_ps(); T]; R];
        // Plain loops rather than closures: see `q4_k_avx512`.
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut f = [[0.0f32; 16]; R];
        let mut qh = [[_mm512_setzero_si512(); 2]; R];
        let mut w = [[_mm512_setzero_ps(); R]; 4];
        for b in 0..nb {
            for r in 0..R {
                blk[r] = rows[r].as_ptr().add(Q5K_BYTES * b);
                prefetch(blk[r], 3);
                f[r] = q4_k_factors_avx512(blk[r]);
                qh[r] = [
                    bytes16_avx512(blk[r].add(16)),
                    bytes16_avx512(blk[r].add(32)),
                ];
            }
            for i in 0..4 {
                // As Q4_K, with bit 2i (low nibbles) or 2i + 1 (high nibbles) of `qh[l]` as the
                // fifth bit of element l of each half.
                for r in 0..R {
                    let (s, t) = (2 * i, 2 * i + 1);
                    let lo = q4_k_table_avx512(f[r][s], f[r][8 + s], quants[0]);
                    let lo_up = q4_k_table_avx512(f[r][s], f[r][8 + s], quants[1]);
                    let hi = q4_k_table_avx512(f[r][t], f[r][8 + t], quants[0]);
                    let hi_up = q4_k_table_avx512(f[r][t], f[r][8 + t], quants[1]);
                    let q = blk[r].add(48 + 32 * i);
                    for j in 0..2 {
                        let bytes = bytes16_avx512(q.add(16 * j));
                        // Bits 0–3 from the nibble, bit 4 (and above, ignored) from `qh`.
                        let idx_lo = _mm512_ternarylogic_epi32::<0xca>(
                            low4,
                            bytes,
                            bit_to_4_avx512(qh[r][j], 2 * i),
                        );
                        let idx_hi = _mm512_ternarylogic_epi32::<0xca>(
                            low4,
                            _mm512_srli_epi32::<4>(bytes),
                            bit_to_4_avx512(qh[r][j], 2 * i + 1),
                        );
                        w[j][r] = _mm512_permutex2var_ps(lo, idx_lo, lo_up);
                        w[2 + j][r] = _mm512_permutex2var_ps(hi, idx_hi, hi_up);
                    }
                }
                for g in 0..4 {
                    group_avx512(w[g], &x, 16 * b + 4 * i + g, &mut a);
                }
            }
        }
        reduce_avx512(&a)
    }
}

/// The lanes of `R` rows and `T` tokens (two registers of 8 each), reduced.
#[inline(always)]
unsafe fn reduce_avx2<const R: usize, const T: usize>(a: &[[[__m256; 2]; T]; R]) -> [[f32; T]; R] {
    // SAFETY: register stores to a local array; the caller has AVX.
    unsafe {
        let mut out = [[0.0f32; T]; R];
        for r in 0..R {
            for t in 0..T {
                let mut lanes = [0.0f32; LANES];
                _mm256_storeu_ps(lanes.as_mut_ptr(), a[r][t][0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[r][t][1]);
                out[r][t] = reduce16(lanes);
            }
        }
        out
    }
}

/// `group_avx512` in two registers of 8 lanes.
#[inline(always)]
unsafe fn group_avx2<const R: usize, const T: usize>(
    w: [[__m256; 2]; R],
    x: &[&[f32]; T],
    g: usize,
    a: &mut [[[__m256; 2]; T]; R],
) {
    // SAFETY: the caller guarantees 16 readable numbers at `16 g` of every token row.
    unsafe {
        for t in 0..T {
            let xp = x[t].as_ptr().add(16 * g);
            let xv = [_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8))];
            for r in 0..R {
                for h in 0..2 {
                    a[r][t][h] = _mm256_fmadd_ps(w[r][h], xv[h], a[r][t][h]);
                }
            }
        }
    }
}

/// Eight bytes at `p`, zero-extended to 32-bit lanes.
#[inline(always)]
unsafe fn bytes8_avx2(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 8 readable bytes and AVX2.
    unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i)) }
}

/// `q4_k_factors_avx512` with AVX2.
#[inline(always)]
unsafe fn q4_k_factors_avx2(blk: *const u8) -> [f32; 16] {
    // SAFETY: the caller guarantees a whole block and the features.
    unsafe {
        let sm = q4_k_scales(blk.add(4));
        let mut f = [0.0f32; 16];
        for k in 0..2 {
            let dk = _mm256_set1_ps(f16_at(blk.add(2 * k)));
            let ints = bytes8_avx2(sm.as_ptr().add(8 * k));
            _mm256_storeu_ps(
                f.as_mut_ptr().add(8 * k),
                _mm256_mul_ps(dk, _mm256_cvtepi32_ps(ints)),
            );
        }
        f
    }
}

/// Q4_K, AVX2: see `q4_k_avx512`; here each weight is `d1 · q − m1` computed directly (the same
/// two operations).
///
/// # Safety
/// AVX2, F16C and FMA are available; every row holds the same whole number of Q4_K blocks and
/// each `x[t]` 256 numbers per block.
#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn q4_k_avx2<const R: usize, const T: usize>(
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = rows[0].len() / Q4K_BYTES;
    // SAFETY: lengths guaranteed by the caller.
    unsafe {
        let low4 = _mm256_set1_epi32(0x0f);
        let mut a = [[[_mm256_setzero_ps(); 2]; T]; R];
        // Plain loops rather than closures: see `q4_k_avx512`.
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut f = [[0.0f32; 16]; R];
        let mut wg = [[_mm256_setzero_ps(); 2]; R];
        for b in 0..nb {
            for r in 0..R {
                blk[r] = rows[r].as_ptr().add(Q4K_BYTES * b);
                prefetch(blk[r], 3);
                f[r] = q4_k_factors_avx2(blk[r]);
            }
            for i in 0..4 {
                for g in 0..4 {
                    // Group g of these 64 elements: the low (g < 2) or high nibbles of bytes
                    // 32i + 16 (g mod 2) .. + 16, of sub-block 2i + g / 2.
                    let s = 2 * i + g / 2;
                    for r in 0..R {
                        let (dv, mv) = (_mm256_set1_ps(f[r][s]), _mm256_set1_ps(f[r][8 + s]));
                        let q = blk[r].add(16 + 32 * i + 16 * (g % 2));
                        for e in 0..2 {
                            let bytes = bytes8_avx2(q.add(8 * e));
                            let nib = if g < 2 {
                                _mm256_and_si256(bytes, low4)
                            } else {
                                _mm256_srli_epi32::<4>(bytes)
                            };
                            wg[r][e] =
                                _mm256_sub_ps(_mm256_mul_ps(dv, _mm256_cvtepi32_ps(nib)), mv);
                        }
                    }
                    group_avx2(wg, &x, 16 * b + 4 * i + g, &mut a);
                }
            }
        }
        reduce_avx2(&a)
    }
}

/// Q6_K, AVX2: see `q6_k_avx512`.
///
/// # Safety
/// AVX2, F16C and FMA are available; every row holds the same whole number of Q6_K blocks and
/// each `x[t]` 256 numbers per block.
#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn q6_k_avx2<const R: usize, const T: usize>(
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = rows[0].len() / Q6K_BYTES;
    // SAFETY: lengths guaranteed by the caller.
    unsafe {
        let low4 = _mm256_set1_epi32(0x0f);
        let high2 = _mm256_set1_epi32(0x30);
        let offset = _mm256_set1_epi32(32);
        let mut a = [[[_mm256_setzero_ps(); 2]; T]; R];
        // Plain loops rather than closures: see `q4_k_avx512`.
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut ds = [[0.0f32; 16]; R];
        let mut wg = [[_mm256_setzero_ps(); 2]; R];
        for b in 0..nb {
            for r in 0..R {
                blk[r] = rows[r].as_ptr().add(Q6K_BYTES * b);
                prefetch(blk[r], 4);
                let dv = _mm256_set1_ps(f16_at(blk[r].add(208)));
                for k in 0..2 {
                    let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        blk[r].add(192 + 8 * k) as *const __m128i
                    ));
                    _mm256_storeu_ps(
                        ds[r].as_mut_ptr().add(8 * k),
                        _mm256_mul_ps(dv, _mm256_cvtepi32_ps(sc)),
                    );
                }
            }
            for h in 0..2 {
                for k in 0..4 {
                    for j in 0..2 {
                        for r in 0..R {
                            let dv = _mm256_set1_ps(ds[r][8 * h + 2 * k + j]);
                            let ql = blk[r].add(64 * h + 16 * j + 32 * (k % 2));
                            let qh = blk[r].add(128 + 32 * h + 16 * j);
                            for e in 0..2 {
                                let bytes = bytes8_avx2(ql.add(8 * e));
                                let low = if k < 2 {
                                    _mm256_and_si256(bytes, low4)
                                } else {
                                    _mm256_srli_epi32::<4>(bytes)
                                };
                                let hq = bytes8_avx2(qh.add(8 * e));
                                let high = match k {
                                    0 => _mm256_slli_epi32::<4>(hq),
                                    1 => _mm256_slli_epi32::<2>(hq),
                                    2 => hq,
                                    _ => _mm256_srli_epi32::<2>(hq),
                                };
                                let q = _mm256_or_si256(_mm256_and_si256(high, high2), low);
                                let q = _mm256_sub_epi32(q, offset);
                                wg[r][e] = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(q));
                            }
                        }
                        group_avx2(wg, &x, 16 * b + 8 * h + 2 * k + j, &mut a);
                    }
                }
            }
        }
        reduce_avx2(&a)
    }
}

/// Q5_K, AVX2: see `q5_k_avx512`; here each weight is `d1 · q − m1` computed directly.
///
/// # Safety
/// AVX2, F16C and FMA are available; every row holds the same whole number of Q5_K blocks and
/// each `x[t]` 256 numbers per block.
#[target_feature(enable = "avx2,f16c,fma")]
pub(crate) unsafe fn q5_k_avx2<const R: usize, const T: usize>(
    rows: [&[u8]; R],
    x: [&[f32]; T],
) -> [[f32; T]; R] {
    let nb = rows[0].len() / Q5K_BYTES;
    // SAFETY: lengths guaranteed by the caller.
    unsafe {
        let low4 = _mm256_set1_epi32(0x0f);
        let mut a = [[[_mm256_setzero_ps(); 2]; T]; R];
        // Plain loops rather than closures: see `q4_k_avx512`.
        let mut blk = [std::ptr::null::<u8>(); R];
        let mut f = [[0.0f32; 16]; R];
        let mut wg = [[_mm256_setzero_ps(); 2]; R];
        for b in 0..nb {
            for r in 0..R {
                blk[r] = rows[r].as_ptr().add(Q5K_BYTES * b);
                prefetch(blk[r], 3);
                f[r] = q4_k_factors_avx2(blk[r]);
            }
            for i in 0..4 {
                for g in 0..4 {
                    // Group g of these 64 elements: the low (g < 2) or high nibbles of bytes
                    // 32i + 16 (g mod 2) .. + 16 of sub-block 2i + g / 2, whose fifth bit is bit
                    // 2i + g / 2 of `qh[16 (g mod 2) + l]`.
                    let s = 2 * i + g / 2;
                    let sixteen = _mm256_set1_epi32(16 << s);
                    for r in 0..R {
                        let (dv, mv) = (_mm256_set1_ps(f[r][s]), _mm256_set1_ps(f[r][8 + s]));
                        let q = blk[r].add(48 + 32 * i + 16 * (g % 2));
                        let h = blk[r].add(16 + 16 * (g % 2));
                        for e in 0..2 {
                            let bytes = bytes8_avx2(q.add(8 * e));
                            let nib = if g < 2 {
                                _mm256_and_si256(bytes, low4)
                            } else {
                                _mm256_srli_epi32::<4>(bytes)
                            };
                            // The fifth bit, moved to bit 4: `qh` shifted left by 4 has bit
                            // `s` of `qh` at bit `s + 4`, which `sixteen` picks out.
                            let hb = _mm256_and_si256(
                                _mm256_slli_epi32::<4>(bytes8_avx2(h.add(8 * e))),
                                sixteen,
                            );
                            let hb = _mm256_srl_epi32(hb, _mm_cvtsi32_si128(s as i32));
                            let q = _mm256_or_si256(nib, hb);
                            wg[r][e] = _mm256_sub_ps(_mm256_mul_ps(dv, _mm256_cvtepi32_ps(q)), mv);
                        }
                    }
                    group_avx2(wg, &x, 16 * b + 4 * i + g, &mut a);
                }
            }
        }
        reduce_avx2(&a)
    }
}
