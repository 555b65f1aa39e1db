//! AVX-512 and AVX2 versions of the portable kernels, computing the same lanes with the same
//! fused multiply-adds, so that their results are identical to the last bit.
//!
//! Every function here is `unsafe` only because it needs CPU features: callers check them with
//! [`crate::Isa::is_available`] first, and every slice length is checked by the safe wrappers in
//! `lib.rs` before the raw loads.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use crate::portable::LANES;

#[inline(always)]
unsafe fn f16_pair(ptr: *const u8) -> (f32, f32) {
    // SAFETY: the caller guarantees 4 readable bytes and the f16c feature.
    unsafe {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(
            ptr as *const i32,
        )));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_shuffle_ps(v, v, 1)))
    }
}

#[inline(always)]
unsafe fn f16_one(ptr: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes and the f16c feature.
    unsafe {
        let bits = std::ptr::read_unaligned(ptr as *const u16);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }
}

const fn iota(offset: f32) -> [f32; 16] {
    let mut t = [0.0f32; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = i as f32 + offset;
        i += 1;
    }
    t
}

static NIBBLES: [f32; 16] = iota(0.0);
static NIBBLES_CENTRED: [f32; 16] = iota(-8.0);

/// Q4_1, AVX-512: see `portable::q4_1`.
#[target_feature(enable = "avx512f,f16c,fma")]
pub unsafe fn q4_1_avx512<const T: usize>(
    row: &[u8],
    x: [&[f32]; T],
    sums: [&[f32]; T],
    acc: &mut [[f32; LANES]; T],
    mt: &mut [f32; T],
) {
    let nb = row.len() / 20;
    // SAFETY: lengths checked by the caller: `row` holds `nb` blocks, each `x[t]` 32·nb numbers
    // and each `sums[t]` nb numbers.
    unsafe {
        let table = _mm512_loadu_ps(NIBBLES.as_ptr());
        let mut a: [__m512; T] = [_mm512_setzero_ps(); T];
        for t in 0..T {
            a[t] = _mm512_loadu_ps(acc[t].as_ptr());
        }
        let mut m_acc = *mt;
        for b in 0..nb {
            let blk = row.as_ptr().add(20 * b);
            let (d, m) = f16_pair(blk);
            let dv = _mm512_set1_ps(d);
            let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(4) as *const __m128i));
            let lo = _mm512_permutexvar_ps(q, table);
            let hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * b);
                let p = _mm512_mul_ps(lo, _mm512_loadu_ps(xp));
                let p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), p);
                a[t] = _mm512_fmadd_ps(dv, p, a[t]);
                m_acc[t] = m.mul_add(*sums[t].get_unchecked(b), m_acc[t]);
            }
        }
        for t in 0..T {
            _mm512_storeu_ps(acc[t].as_mut_ptr(), a[t]);
        }
        *mt = m_acc;
    }
}

/// Q4_0, AVX-512: see `portable::q4_0`.
#[target_feature(enable = "avx512f,f16c,fma")]
pub unsafe fn q4_0_avx512<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; LANES]; T]) {
    let nb = row.len() / 18;
    // SAFETY: lengths checked by the caller.
    unsafe {
        let table = _mm512_loadu_ps(NIBBLES_CENTRED.as_ptr());
        let mut a: [__m512; T] = [_mm512_setzero_ps(); T];
        for t in 0..T {
            a[t] = _mm512_loadu_ps(acc[t].as_ptr());
        }
        for b in 0..nb {
            let blk = row.as_ptr().add(18 * b);
            let dv = _mm512_set1_ps(f16_one(blk));
            let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2) as *const __m128i));
            let lo = _mm512_permutexvar_ps(q, table);
            let hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table);
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * b);
                let p = _mm512_mul_ps(lo, _mm512_loadu_ps(xp));
                let p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), p);
                a[t] = _mm512_fmadd_ps(dv, p, a[t]);
            }
        }
        for t in 0..T {
            _mm512_storeu_ps(acc[t].as_mut_ptr(), a[t]);
        }
    }
}

/// Q8_0, AVX-512: see `portable::q8_0`.
#[target_feature(enable = "avx512f,f16c,fma")]
pub unsafe fn q8_0_avx512<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; LANES]; T]) {
    let nb = row.len() / 34;
    // SAFETY: lengths checked by the caller.
    unsafe {
        let mut a: [__m512; T] = [_mm512_setzero_ps(); T];
        for t in 0..T {
            a[t] = _mm512_loadu_ps(acc[t].as_ptr());
        }
        for b in 0..nb {
            let blk = row.as_ptr().add(34 * b);
            let dv = _mm512_set1_ps(f16_one(blk));
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                blk.add(2) as *const __m128i
            )));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                blk.add(18) as *const __m128i
            )));
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * b);
                let p = _mm512_mul_ps(lo, _mm512_loadu_ps(xp));
                let p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), p);
                a[t] = _mm512_fmadd_ps(dv, p, a[t]);
            }
        }
        for t in 0..T {
            _mm512_storeu_ps(acc[t].as_mut_ptr(), a[t]);
        }
    }
}

/// `dot_lanes`, AVX-512, for a chunk whose length is a multiple of 16.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn dot_lanes_avx512(w: &[f32], x: &[f32], acc: &mut [f32; LANES]) {
    // SAFETY: the caller guarantees `w.len() == x.len()`, a multiple of 16.
    unsafe {
        let mut a = _mm512_loadu_ps(acc.as_ptr());
        for i in (0..w.len()).step_by(16) {
            a = _mm512_fmadd_ps(
                _mm512_loadu_ps(w.as_ptr().add(i)),
                _mm512_loadu_ps(x.as_ptr().add(i)),
                a,
            );
        }
        _mm512_storeu_ps(acc.as_mut_ptr(), a);
    }
}

#[inline(always)]
unsafe fn load_lanes_avx2(acc: &[f32; LANES]) -> (__m256, __m256) {
    // SAFETY: 16 numbers are readable.
    unsafe {
        (
            _mm256_loadu_ps(acc.as_ptr()),
            _mm256_loadu_ps(acc.as_ptr().add(8)),
        )
    }
}

#[inline(always)]
unsafe fn store_lanes_avx2(acc: &mut [f32; LANES], a: (__m256, __m256)) {
    // SAFETY: 16 numbers are writable.
    unsafe {
        _mm256_storeu_ps(acc.as_mut_ptr(), a.0);
        _mm256_storeu_ps(acc.as_mut_ptr().add(8), a.1);
    }
}

/// Q4_1, AVX2: lanes 0–7 and 8–15 in two registers.
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn q4_1_avx2<const T: usize>(
    row: &[u8],
    x: [&[f32]; T],
    sums: [&[f32]; T],
    acc: &mut [[f32; LANES]; T],
    mt: &mut [f32; T],
) {
    let nb = row.len() / 20;
    // SAFETY: lengths checked by the caller.
    unsafe {
        let mask = _mm256_set1_epi32(15);
        let mut a: [(__m256, __m256); T] = [(_mm256_setzero_ps(), _mm256_setzero_ps()); T];
        for t in 0..T {
            a[t] = load_lanes_avx2(&acc[t]);
        }
        let mut m_acc = *mt;
        for b in 0..nb {
            let blk = row.as_ptr().add(20 * b);
            let (d, m) = f16_pair(blk);
            let dv = _mm256_set1_ps(d);
            let q0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(4) as *const __m128i));
            let q1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(12) as *const __m128i));
            let lo0 = _mm256_cvtepi32_ps(_mm256_and_si256(q0, mask));
            let lo1 = _mm256_cvtepi32_ps(_mm256_and_si256(q1, mask));
            let hi0 = _mm256_cvtepi32_ps(_mm256_srli_epi32(q0, 4));
            let hi1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(q1, 4));
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * b);
                let p0 = _mm256_mul_ps(lo0, _mm256_loadu_ps(xp));
                let p1 = _mm256_mul_ps(lo1, _mm256_loadu_ps(xp.add(8)));
                let p0 = _mm256_fmadd_ps(hi0, _mm256_loadu_ps(xp.add(16)), p0);
                let p1 = _mm256_fmadd_ps(hi1, _mm256_loadu_ps(xp.add(24)), p1);
                a[t].0 = _mm256_fmadd_ps(dv, p0, a[t].0);
                a[t].1 = _mm256_fmadd_ps(dv, p1, a[t].1);
                m_acc[t] = m.mul_add(*sums[t].get_unchecked(b), m_acc[t]);
            }
        }
        for t in 0..T {
            store_lanes_avx2(&mut acc[t], a[t]);
        }
        *mt = m_acc;
    }
}

/// Q4_0, AVX2.
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn q4_0_avx2<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; LANES]; T]) {
    let nb = row.len() / 18;
    // SAFETY: lengths checked by the caller.
    unsafe {
        let mask = _mm256_set1_epi32(15);
        let eight = _mm256_set1_ps(8.0);
        let mut a: [(__m256, __m256); T] = [(_mm256_setzero_ps(), _mm256_setzero_ps()); T];
        for t in 0..T {
            a[t] = load_lanes_avx2(&acc[t]);
        }
        for b in 0..nb {
            let blk = row.as_ptr().add(18 * b);
            let dv = _mm256_set1_ps(f16_one(blk));
            let q0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(2) as *const __m128i));
            let q1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(10) as *const __m128i));
            let lo0 = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q0, mask)), eight);
            let lo1 = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(q1, mask)), eight);
            let hi0 = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q0, 4)), eight);
            let hi1 = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(q1, 4)), eight);
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * b);
                let p0 = _mm256_mul_ps(lo0, _mm256_loadu_ps(xp));
                let p1 = _mm256_mul_ps(lo1, _mm256_loadu_ps(xp.add(8)));
                let p0 = _mm256_fmadd_ps(hi0, _mm256_loadu_ps(xp.add(16)), p0);
                let p1 = _mm256_fmadd_ps(hi1, _mm256_loadu_ps(xp.add(24)), p1);
                a[t].0 = _mm256_fmadd_ps(dv, p0, a[t].0);
                a[t].1 = _mm256_fmadd_ps(dv, p1, a[t].1);
            }
        }
        for t in 0..T {
            store_lanes_avx2(&mut acc[t], a[t]);
        }
    }
}

/// Q8_0, AVX2.
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn q8_0_avx2<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; LANES]; T]) {
    let nb = row.len() / 34;
    // SAFETY: lengths checked by the caller.
    unsafe {
        let mut a: [(__m256, __m256); T] = [(_mm256_setzero_ps(), _mm256_setzero_ps()); T];
        for t in 0..T {
            a[t] = load_lanes_avx2(&acc[t]);
        }
        for b in 0..nb {
            let blk = row.as_ptr().add(34 * b);
            let dv = _mm256_set1_ps(f16_one(blk));
            let ld = |o: usize| {
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                    blk.add(o) as *const __m128i
                )))
            };
            let (lo0, lo1, hi0, hi1) = (ld(2), ld(10), ld(18), ld(26));
            for t in 0..T {
                let xp = x[t].as_ptr().add(32 * b);
                let p0 = _mm256_mul_ps(lo0, _mm256_loadu_ps(xp));
                let p1 = _mm256_mul_ps(lo1, _mm256_loadu_ps(xp.add(8)));
                let p0 = _mm256_fmadd_ps(hi0, _mm256_loadu_ps(xp.add(16)), p0);
                let p1 = _mm256_fmadd_ps(hi1, _mm256_loadu_ps(xp.add(24)), p1);
                a[t].0 = _mm256_fmadd_ps(dv, p0, a[t].0);
                a[t].1 = _mm256_fmadd_ps(dv, p1, a[t].1);
            }
        }
        for t in 0..T {
            store_lanes_avx2(&mut acc[t], a[t]);
        }
    }
}

/// `dot_lanes`, AVX2, for a chunk whose length is a multiple of 16.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_lanes_avx2(w: &[f32], x: &[f32], acc: &mut [f32; LANES]) {
    // SAFETY: the caller guarantees `w.len() == x.len()`, a multiple of 16.
    unsafe {
        let (mut a0, mut a1) = load_lanes_avx2(acc);
        for i in (0..w.len()).step_by(16) {
            let wp = w.as_ptr().add(i);
            let xp = x.as_ptr().add(i);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wp), _mm256_loadu_ps(xp), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(8)), _mm256_loadu_ps(xp.add(8)), a1);
        }
        store_lanes_avx2(acc, (a0, a1));
    }
}
