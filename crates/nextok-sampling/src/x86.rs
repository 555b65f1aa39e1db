//! AVX2 versions of the passes over the whole vocabulary, for x86-64 CPUs that have it (checked
//! at run time by the callers). They compute exactly what the portable code computes: maxima and
//! comparisons, which involve no rounding, so the results are the same on every machine.

use std::arch::x86_64::*;

/// Lanes of one AVX2 vector of `f32`.
const W: usize = 8;

/// The largest of `a` and whether every value is finite (neither NaN nor infinite). The maximum
/// is meaningless when some value is NaN.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn max_and_finite(a: &[f32]) -> (f32, bool) {
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
    let mut fin = [_mm256_castsi256_ps(_mm256_set1_epi32(-1)); 4];
    let chunks = a.chunks_exact(4 * W);
    let rest = chunks.remainder();
    for ch in chunks {
        for j in 0..4 {
            // SAFETY: `ch` holds 4 * W floats, so `j * W .. j * W + W` is in bounds.
            let z = unsafe { _mm256_loadu_ps(ch.as_ptr().add(j * W)) };
            m[j] = _mm256_max_ps(m[j], z);
            // |z| < inf is false for NaN and for both infinities.
            fin[j] = _mm256_and_ps(
                fin[j],
                _mm256_cmp_ps(_mm256_and_ps(z, abs), inf, _CMP_LT_OQ),
            );
        }
    }
    let m = _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3]));
    let fin = _mm256_and_ps(_mm256_and_ps(fin[0], fin[1]), _mm256_and_ps(fin[2], fin[3]));
    let mut finite = _mm256_movemask_ps(fin) == 0xff;
    let mut max = hmax(m);
    for &z in rest {
        finite &= z.is_finite();
        max = if z > max { z } else { max };
    }
    (max, finite)
}

/// The largest lane of `v`.
#[target_feature(enable = "avx2")]
#[inline]
fn hmax(v: __m256) -> f32 {
    let h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    _mm_cvtss_f32(h)
}

/// The largest of a block of logits (`-inf` when empty); no NaN may be among them.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn block_max(block: &[f32]) -> f32 {
    let mut m0 = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut m1 = m0;
    let chunks = block.chunks_exact(2 * W);
    let rest = chunks.remainder();
    for ch in chunks {
        // SAFETY: `ch` holds 2 * W floats.
        unsafe {
            m0 = _mm256_max_ps(m0, _mm256_loadu_ps(ch.as_ptr()));
            m1 = _mm256_max_ps(m1, _mm256_loadu_ps(ch.as_ptr().add(W)));
        }
    }
    let mut max = hmax(_mm256_max_ps(m0, m1));
    for &z in rest {
        max = if z > max { z } else { max };
    }
    max
}

/// The first index of `a` whose value equals `x` (`==`, so -0.0 equals 0.0).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn first_equal(a: &[f32], x: f32) -> Option<usize> {
    let v = _mm256_set1_ps(x);
    let chunks = a.chunks_exact(4 * W);
    let rest = chunks.remainder();
    for (k, ch) in chunks.enumerate() {
        // SAFETY: `ch` holds 4 * W floats.
        let (e0, e1, e2, e3) = unsafe {
            let p = ch.as_ptr();
            (
                _mm256_cmp_ps(_mm256_loadu_ps(p), v, _CMP_EQ_OQ),
                _mm256_cmp_ps(_mm256_loadu_ps(p.add(W)), v, _CMP_EQ_OQ),
                _mm256_cmp_ps(_mm256_loadu_ps(p.add(2 * W)), v, _CMP_EQ_OQ),
                _mm256_cmp_ps(_mm256_loadu_ps(p.add(3 * W)), v, _CMP_EQ_OQ),
            )
        };
        let any = _mm256_or_ps(_mm256_or_ps(e0, e1), _mm256_or_ps(e2, e3));
        if _mm256_movemask_ps(any) != 0 {
            return ch.iter().position(|&z| z == x).map(|i| k * 4 * W + i);
        }
    }
    let base = a.len() - rest.len();
    rest.iter().position(|&z| z == x).map(|i| base + i)
}

/// Bit `i` set when `block[i] > bar`, for a block of 64 logits.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn above(block: &[f32; 64], bar: f32) -> u64 {
    let v = _mm256_set1_ps(bar);
    let mut bits = 0u64;
    for j in 0..8 {
        // SAFETY: the block holds 64 floats, so `8 * j .. 8 * j + 8` is in bounds.
        let z = unsafe { _mm256_loadu_ps(block.as_ptr().add(j * W)) };
        let m = _mm256_movemask_ps(_mm256_cmp_ps(z, v, _CMP_GT_OQ)) as u32 as u64;
        bits |= m << (j * W);
    }
    bits
}

/// [`above`], and whether every logit of the block is finite (neither NaN nor infinite).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn above_finite(block: &[f32; 64], bar: f32) -> (u64, bool) {
    let v = _mm256_set1_ps(bar);
    let zero = _mm256_setzero_ps();
    let mut nan = zero;
    let mut bits = 0u64;
    for j in 0..8 {
        // SAFETY: the block holds 64 floats, so `8 * j .. 8 * j + 8` is in bounds.
        let z = unsafe { _mm256_loadu_ps(block.as_ptr().add(j * W)) };
        let m = _mm256_movemask_ps(_mm256_cmp_ps(z, v, _CMP_GT_OQ)) as u32 as u64;
        bits |= m << (j * W);
        // z * 0 is ±0 for a finite z and NaN otherwise; or-ing keeps a NaN's exponent bits.
        nan = _mm256_or_ps(nan, _mm256_mul_ps(z, zero));
    }
    let finite = _mm256_movemask_ps(_mm256_cmp_ps(nan, nan, _CMP_UNORD_Q)) == 0;
    (bits, finite)
}

/// The largest logit of each block of `size` (a multiple of 64; the last block may be shorter),
/// written to `out` (one per block), and whether the logits are finite, judged by their sum: a
/// NaN or an infinity makes it NaN or infinite, so `true` means every logit is finite (finite
/// logits whose sum overflows give `false`).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn block_maxima(a: &[f32], size: usize, out: &mut [f32]) -> bool {
    let mut sum = [_mm256_setzero_ps(); 2];
    let mut finite = true;
    for (o, b) in out.iter_mut().zip(a.chunks(size)) {
        let mut m = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
        let chunks = b.chunks_exact(8 * W);
        let rest = chunks.remainder();
        for c in chunks {
            let p = c.as_ptr();
            // SAFETY: the chunk holds 64 floats, so `j * W .. j * W + W` is in bounds, j < 8.
            let v: [__m256; 8] = std::array::from_fn(|j| unsafe { _mm256_loadu_ps(p.add(j * W)) });
            m[0] = _mm256_max_ps(
                m[0],
                _mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3])),
            );
            m[1] = _mm256_max_ps(
                m[1],
                _mm256_max_ps(_mm256_max_ps(v[4], v[5]), _mm256_max_ps(v[6], v[7])),
            );
            sum[0] = _mm256_add_ps(
                sum[0],
                _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])),
            );
            sum[1] = _mm256_add_ps(
                sum[1],
                _mm256_add_ps(_mm256_add_ps(v[4], v[5]), _mm256_add_ps(v[6], v[7])),
            );
        }
        let mut max = hmax(_mm256_max_ps(m[0], m[1]));
        for &z in rest {
            finite &= z.is_finite();
            max = if z > max { z } else { max };
        }
        *o = max;
    }
    let s = _mm256_add_ps(sum[0], sum[1]);
    // s - s is 0 in a finite lane and NaN otherwise.
    let d = _mm256_sub_ps(s, s);
    finite && _mm256_movemask_ps(_mm256_cmp_ps(d, d, _CMP_UNORD_Q)) == 0
}
