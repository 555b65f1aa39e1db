//! AVX-512 and AVX2 versions of the portable kernels, computing the same lanes with the same
//! fused multiply-adds, so that their results are identical to the last bit.
//!
//! Every function here is `unsafe` only because it needs CPU features: callers check them with
//! [`crate::Isa::is_available`] first, and every slice length is checked by the safe wrappers in
//! `lib.rs` before the raw loads.

#![allow(clippy::missing_safety_doc)]
// Arrays of registers are indexed on purpose: the index says which token or row a register
// belongs to, and the loops unroll to straight-line code.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::portable::{BLOCK_LANES, LANES};
use crate::Q4_1Act;

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

static NIBBLES_CENTRED: [f32; 16] = iota(-8.0);

/// Adds one expanded block (`lo` = elements 0–15, `hi` = 16–31) to `T` token rows, whose 32
/// lanes are kept as (0–15, 16–31).
#[inline(always)]
unsafe fn block_avx512<const T: usize>(
    lo: __m512,
    hi: __m512,
    x: &[&[f32]; T],
    at: usize,
    a: &mut [(__m512, __m512); T],
) {
    // SAFETY: the caller guarantees 32 readable numbers at `at` in every token row.
    unsafe {
        for t in 0..T {
            let xp = x[t].as_ptr().add(at);
            a[t].0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xp), a[t].0);
            a[t].1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xp.add(16)), a[t].1);
        }
    }
}

macro_rules! avx512_rows {
    ($name:ident, $doc:literal, $bytes:literal, |$blk:ident, $table:ident| $expand:block, $table_init:expr) => {
        #[doc = $doc]
        #[target_feature(enable = "avx512f,f16c,fma")]
        pub unsafe fn $name<const T: usize>(
            row: &[u8],
            x: [&[f32]; T],
            acc: &mut [[f32; BLOCK_LANES]; T],
        ) {
            let nb = row.len() / $bytes;
            // SAFETY: lengths checked by the caller: `row` holds `nb` blocks and each `x[t]`
            // 32·nb numbers.
            unsafe {
                #[allow(unused_variables)]
                let $table: __m512 = $table_init;
                let mut a: [(__m512, __m512); T] = [(_mm512_setzero_ps(), _mm512_setzero_ps()); T];
                for t in 0..T {
                    a[t] = (
                        _mm512_loadu_ps(acc[t].as_ptr()),
                        _mm512_loadu_ps(acc[t].as_ptr().add(16)),
                    );
                }
                for b in 0..nb {
                    let $blk = row.as_ptr().add($bytes * b);
                    let (lo, hi) = $expand;
                    block_avx512(lo, hi, &x, 32 * b, &mut a);
                }
                for t in 0..T {
                    _mm512_storeu_ps(acc[t].as_mut_ptr(), a[t].0);
                    _mm512_storeu_ps(acc[t].as_mut_ptr().add(16), a[t].1);
                }
            }
        }
    };
}

/// Expands one Q4_0 block: `d · (q − 8)`, with `q − 8` looked up in `centred`.
#[inline(always)]
unsafe fn expand_q4_0_avx512(blk: *const u8, centred: __m512) -> (__m512, __m512) {
    // SAFETY: the caller guarantees a whole block at `blk` and the features.
    unsafe {
        let dv = _mm512_set1_ps(f16_one(blk));
        let q = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2) as *const __m128i));
        (
            _mm512_mul_ps(dv, _mm512_permutexvar_ps(q, centred)),
            _mm512_mul_ps(dv, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), centred)),
        )
    }
}

avx512_rows!(
    q4_0_avx512,
    "Q4_0, AVX-512: see `portable::q4_0`.",
    18,
    |blk, table| { expand_q4_0_avx512(blk, table) },
    _mm512_loadu_ps(NIBBLES_CENTRED.as_ptr())
);

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

/// Adds one expanded block, as four registers of 8 (elements 0–7, 8–15, 16–23, 24–31), to the
/// 32 lanes of `T` token rows, kept in four registers the same way.
#[inline(always)]
unsafe fn block_avx2<const T: usize>(
    w: [__m256; 4],
    x: &[&[f32]; T],
    at: usize,
    a: &mut [[__m256; 4]; T],
) {
    // SAFETY: the caller guarantees 32 readable numbers at `at` in every token row.
    unsafe {
        for t in 0..T {
            let xp = x[t].as_ptr().add(at);
            for (i, wi) in w.iter().enumerate() {
                a[t][i] = _mm256_fmadd_ps(*wi, _mm256_loadu_ps(xp.add(8 * i)), a[t][i]);
            }
        }
    }
}

macro_rules! avx2_rows {
    ($name:ident, $doc:literal, $bytes:literal, |$blk:ident| $expand:block) => {
        #[doc = $doc]
        #[target_feature(enable = "avx2,f16c,fma")]
        pub unsafe fn $name<const T: usize>(
            row: &[u8],
            x: [&[f32]; T],
            acc: &mut [[f32; BLOCK_LANES]; T],
        ) {
            let nb = row.len() / $bytes;
            // SAFETY: lengths checked by the caller.
            unsafe {
                let mut a: [[__m256; 4]; T] = [[_mm256_setzero_ps(); 4]; T];
                for t in 0..T {
                    for i in 0..4 {
                        a[t][i] = _mm256_loadu_ps(acc[t].as_ptr().add(8 * i));
                    }
                }
                for b in 0..nb {
                    let $blk = row.as_ptr().add($bytes * b);
                    let w: [__m256; 4] = $expand;
                    block_avx2(w, &x, 32 * b, &mut a);
                }
                for t in 0..T {
                    for i in 0..4 {
                        _mm256_storeu_ps(acc[t].as_mut_ptr().add(8 * i), a[t][i]);
                    }
                }
            }
        }
    };
}

avx2_rows!(q4_0_avx2, "Q4_0, AVX2: see `portable::q4_0`.", 18, |blk| {
    let dv = _mm256_set1_ps(f16_one(blk));
    let mask = _mm256_set1_epi32(15);
    let eight = _mm256_set1_ps(8.0);
    let q0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(2) as *const __m128i));
    let q1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(10) as *const __m128i));
    let f = |q: __m256i| _mm256_mul_ps(dv, _mm256_sub_ps(_mm256_cvtepi32_ps(q), eight));
    [
        f(_mm256_and_si256(q0, mask)),
        f(_mm256_and_si256(q1, mask)),
        f(_mm256_srli_epi32(q0, 4)),
        f(_mm256_srli_epi32(q1, 4)),
    ]
});

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

/// `axpy`, AVX-512, for slices whose length is a multiple of 16.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn axpy_avx512(alpha: f32, x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees `x.len() == y.len()`, a multiple of 16.
    unsafe {
        let a = _mm512_set1_ps(alpha);
        for i in (0..x.len()).step_by(16) {
            let yp = y.as_mut_ptr().add(i);
            _mm512_storeu_ps(
                yp,
                _mm512_fmadd_ps(a, _mm512_loadu_ps(x.as_ptr().add(i)), _mm512_loadu_ps(yp)),
            );
        }
    }
}

/// `axpy`, AVX2, for slices whose length is a multiple of 16.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn axpy_avx2(alpha: f32, x: &[f32], y: &mut [f32]) {
    // SAFETY: the caller guarantees `x.len() == y.len()`, a multiple of 16.
    unsafe {
        let a = _mm256_set1_ps(alpha);
        for i in (0..x.len()).step_by(8) {
            let yp = y.as_mut_ptr().add(i);
            _mm256_storeu_ps(
                yp,
                _mm256_fmadd_ps(a, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(yp)),
            );
        }
    }
}

/// `portable::reduce32` of lanes kept as (0–15, 16–31), in registers: lanes `i` and `i + 16`,
/// then `i` and `i + 8`, `i` and `i + 4`, 0 and 2 with 1 and 3, then 0 and 1: the same additions
/// in the same pairs, so the same bits.
#[inline(always)]
unsafe fn reduce32_avx512(a: (__m512, __m512)) -> f32 {
    // SAFETY: register operations only; the caller has AVX-512F.
    unsafe {
        let s16 = _mm512_add_ps(a.0, a.1);
        let s8 = _mm256_add_ps(
            _mm512_castps512_ps256(s16),
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s16), 1)),
        );
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
    }
}

/// `portable::reduce16` of one register, in registers (the same pairs).
#[inline(always)]
unsafe fn reduce16_avx512(s16: __m512) -> f32 {
    // SAFETY: register operations only; the caller has AVX-512F.
    unsafe {
        let s8 = _mm256_add_ps(
            _mm512_castps512_ps256(s16),
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s16), 1)),
        );
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
    }
}

/// `dots`, AVX-512, for a query whose length is a multiple of 16: four keys at a time, each key's
/// lanes accumulated in order with fused multiply-adds, as `dot_lanes` does.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn dots_avx512(q: &[f32], keys: &[&[f32]], offset: usize, out: &mut [f32]) {
    let n = q.len();
    // SAFETY: the caller checked every key row has `offset + n` numbers, `out` has a slot per
    // key, and `n` is a multiple of 16.
    unsafe {
        let mut j = 0;
        while j + 4 <= keys.len() {
            let kp: [*const f32; 4] = std::array::from_fn(|i| keys[j + i].as_ptr().add(offset));
            let mut a = [_mm512_setzero_ps(); 4];
            for c in (0..n).step_by(16) {
                let qv = _mm512_loadu_ps(q.as_ptr().add(c));
                for i in 0..4 {
                    a[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kp[i].add(c)), a[i]);
                }
            }
            for i in 0..4 {
                out[j + i] = reduce16_avx512(a[i]);
            }
            j += 4;
        }
        while j < keys.len() {
            let kp = keys[j].as_ptr().add(offset);
            let mut a = _mm512_setzero_ps();
            for c in (0..n).step_by(16) {
                a = _mm512_fmadd_ps(
                    _mm512_loadu_ps(q.as_ptr().add(c)),
                    _mm512_loadu_ps(kp.add(c)),
                    a,
                );
            }
            out[j] = reduce16_avx512(a);
            j += 1;
        }
    }
}

/// `weighted_sum`, AVX-512, for a 64-number head: the output stays in four registers while the
/// value rows are added in order.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn weighted_sum64_avx512(
    probs: &[f32],
    values: &[&[f32]],
    offset: usize,
    acc: &mut [f32],
) {
    // SAFETY: the caller checked `acc` has 64 numbers and every value row `offset + 64`.
    unsafe {
        let mut a: [__m512; 4] = std::array::from_fn(|k| _mm512_loadu_ps(acc.as_ptr().add(16 * k)));
        for (&p, v) in probs.iter().zip(values) {
            let pv = _mm512_set1_ps(p);
            let vp = v.as_ptr().add(offset);
            for k in 0..4 {
                a[k] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(vp.add(16 * k)), a[k]);
            }
        }
        for k in 0..4 {
            _mm512_storeu_ps(acc.as_mut_ptr().add(16 * k), a[k]);
        }
    }
}

use crate::packed::{Q4_1_TILE_BLOCK_BYTES as TILE_BLOCK, Q4_1_TILE_ROWS as TILE_ROWS};

/// Asks for the cache lines of `len` bytes from `at + ahead` bytes past `p`: the bytes a
/// decode kernel will read `ahead` bytes later in its stream. A prefetch past the end of the
/// weights is a hint, never a fault.
#[inline(always)]
unsafe fn prefetch_ahead(p: *const u8, at: usize, len: usize, ahead: usize) {
    // SAFETY: prefetching reads nothing and cannot fault; `wrapping_add` needs no bounds.
    unsafe {
        let mut o = at + ahead;
        while o < at + ahead + len {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(o) as *const i8);
            o += 64;
        }
    }
}

/// How far ahead of the current block the Q4_1 tile kernels prefetch, in bytes of the tile.
const TILE_PREFETCH_BYTES: usize = 8 * TILE_BLOCK;

/// Adds `G` blocks of a packed Q4_1 tile, from block `b`, to the sums `D` and `M` of
/// `portable::q4_1_row` for `T` token rows, 16 weight rows in the lanes: the nibbles become
/// bytes (one mask, and one shift for the high halves: eight registers of four elements per
/// row), each of the four digit bytes of the activations is multiplied in with one 8-bit dot
/// product per four elements (`vpdpbusd`, exact in 32-bit integers), and the four digit sums
/// make the block's integer sum, rounded once to f32 (`hi · 2^16 + lo` with one fused
/// multiply-add, both parts exact in f32).
#[inline(always)]
unsafe fn q4_1_tile_blocks_avx512<const T: usize, const G: usize>(
    tile: *const u8,
    b: usize,
    act: &[Q4_1Act<'_>; T],
    dsum: &mut [__m512; T],
    msum: &mut [__m512; T],
) {
    // SAFETY: the caller guarantees `G` whole blocks from `b` in the tile, `b + G` blocks of
    // digits, scales and sums in every `act[t]`, and the features.
    unsafe {
        let low = _mm512_set1_epi8(0x0f);
        for g in 0..G {
            let blk = tile.add((b + g) * TILE_BLOCK);
            let w: [__m512i; 8] = std::array::from_fn(|i| {
                let v = _mm512_loadu_si512(blk.add(64 + 64 * (i / 2)) as *const _);
                if i % 2 == 0 {
                    _mm512_and_si512(v, low)
                } else {
                    _mm512_and_si512(_mm512_srli_epi32::<4>(v), low)
                }
            });
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(blk as *const __m256i));
            let m = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(32) as *const __m256i));
            // Four token rows at a time, then two, then one: 16, 8 or 4 chains of dot
            // products.
            let mut t = 0;
            while t + 4 <= T {
                q4_1_block_tokens::<4>(
                    &w,
                    d,
                    m,
                    &act[t..t + 4],
                    b + g,
                    &mut dsum[t..],
                    &mut msum[t..],
                );
                t += 4;
            }
            while t + 2 <= T {
                q4_1_block_tokens::<2>(
                    &w,
                    d,
                    m,
                    &act[t..t + 2],
                    b + g,
                    &mut dsum[t..],
                    &mut msum[t..],
                );
                t += 2;
            }
            if t < T {
                q4_1_block_tokens::<1>(
                    &w,
                    d,
                    m,
                    &act[t..t + 1],
                    b + g,
                    &mut dsum[t..],
                    &mut msum[t..],
                );
            }
        }
    }
}

/// One block of a Q4_1 tile (its nibbles as bytes in `w`, its 16 scales `d` and minimums `m`)
/// against `P` token rows `act`: the four digit sums of each by `vpdpbusd`, its integer sum
/// rounded once to f32 and scaled, then `dsum[u] += d · S` and `msum[u] += m · X_b`.
#[inline(always)]
unsafe fn q4_1_block_tokens<const P: usize>(
    w: &[__m512i; 8],
    d: __m512,
    m: __m512,
    act: &[Q4_1Act<'_>],
    b: usize,
    dsum: &mut [__m512],
    msum: &mut [__m512],
) {
    // SAFETY: the caller guarantees `P` token rows in `act`, `dsum` and `msum`, block `b` of
    // digits, scales and sums in each, and the features.
    unsafe {
        let mut a = [[_mm512_setzero_si512(); 4]; P];
        for (i, wi) in w.iter().enumerate() {
            for u in 0..P {
                let dp = act.get_unchecked(u).digits.as_ptr().add(32 * b);
                for (j, aj) in a[u].iter_mut().enumerate() {
                    *aj = _mm512_dpbusd_epi32(*aj, *wi, _mm512_set1_epi32(*dp.add(8 * j + i)));
                }
            }
        }
        for u in 0..P {
            let at = act.get_unchecked(u);
            let lo = _mm512_add_epi32(a[u][0], _mm512_slli_epi32::<8>(a[u][1]));
            let hi = _mm512_add_epi32(a[u][2], _mm512_slli_epi32::<8>(a[u][3]));
            let s = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(hi),
                _mm512_set1_ps(65536.0),
                _mm512_cvtepi32_ps(lo),
            );
            let s = _mm512_mul_ps(s, _mm512_set1_ps(*at.scales.get_unchecked(b)));
            let (ds, ms) = (dsum.get_unchecked_mut(u), msum.get_unchecked_mut(u));
            *ds = _mm512_fmadd_ps(d, s, *ds);
            *ms = _mm512_fmadd_ps(m, _mm512_set1_ps(*at.sums.get_unchecked(b)), *ms);
        }
    }
}

/// One token row against one packed Q4_1 tile of `blocks` blocks at `p`, AVX-512: the 16 rows'
/// `D + M` of `portable::q4_1_row`. Blocks go four at a time, so that sixteen chains of dot
/// products are in flight, and the last four to seven blocks as one group.
#[inline(always)]
unsafe fn q4_1_decode_tile_avx512(p: *const u8, blocks: usize, act: Q4_1Act<'_>) -> __m512 {
    // SAFETY: the caller guarantees a tile of `blocks` blocks at `p`, `blocks` blocks of
    // digits, scales and sums in `act`, and the features.
    unsafe {
        let act1 = [act];
        let (mut dsum, mut msum) = ([_mm512_setzero_ps()], [_mm512_setzero_ps()]);
        let mut b = 0;
        // Decode streams every weight from memory once per token: each group first asks for
        // the bytes as many blocks ahead as it reads, so that every line of the thread's tiles
        // (which lie one after the other) is asked for once, across the tiles' ends too.
        macro_rules! group {
            ($g:literal) => {{
                prefetch_ahead(p, b * TILE_BLOCK, $g * TILE_BLOCK, TILE_PREFETCH_BYTES);
                q4_1_tile_blocks_avx512::<1, $g>(p, b, &act1, &mut dsum, &mut msum)
            }};
        }
        while blocks - b >= 8 {
            group!(4);
            b += 4;
        }
        match blocks - b {
            0 => {}
            1 => group!(1),
            2 => group!(2),
            3 => group!(3),
            4 => group!(4),
            5 => group!(5),
            6 => group!(6),
            _ => group!(7),
        }
        _mm512_add_ps(dsum[0], msum[0])
    }
}

/// Consecutive packed Q4_1 tiles of `blocks` blocks (`tiles`) against one token row, AVX-512:
/// `out[16 · i + r]` is row `r` of tile `i`, the bits of `q4_1_tile_avx512`. Decode's path: one
/// call for all of a thread's tiles.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
pub unsafe fn q4_1_tiles_decode_avx512(
    tiles: &[u8],
    blocks: usize,
    act: Q4_1Act<'_>,
    out: &mut [f32],
) {
    // SAFETY: the caller guarantees `out.len() / 16` tiles of `blocks` blocks in `tiles` and
    // `blocks` blocks of digits, scales and sums in `act`.
    unsafe {
        for (i, o) in out.chunks_exact_mut(TILE_ROWS).enumerate() {
            let p = tiles.as_ptr().add(i * blocks * TILE_BLOCK);
            _mm512_storeu_ps(o.as_mut_ptr(), q4_1_decode_tile_avx512(p, blocks, act));
        }
    }
}

/// One packed Q4_1 tile (`crate::packed`) against `T` token rows, AVX-512: `out[t][r]` for the
/// tile's 16 rows, with the operations of `portable::q4_1_row`, so the same bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
pub unsafe fn q4_1_tile_avx512<const T: usize>(
    tile: &[u8],
    act: [Q4_1Act<'_>; T],
    out: &mut [[f32; TILE_ROWS]; T],
) {
    let blocks = tile.len() / TILE_BLOCK;
    // SAFETY: the caller guarantees a tile of `blocks` blocks and `blocks` blocks of digits,
    // scales and sums in every `act[t]`.
    unsafe {
        let v = q4_1_tile_sums_avx512(tile.as_ptr(), blocks, &act);
        for t in 0..T {
            _mm512_storeu_ps(out[t].as_mut_ptr(), v[t]);
        }
    }
}

/// Consecutive packed Q4_1 tiles of `blocks` blocks (`tiles`) against `T` token rows, AVX-512:
/// `out[t][16 · i + r]` is row `r` of tile `i` for token row `t`, the bits of
/// `q4_1_tile_avx512`. The batched path: one call for all of a thread's whole tiles, each
/// tile's 16 sums stored straight into every token's output row.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c,fma")]
pub unsafe fn q4_1_tiles_avx512<const T: usize>(
    tiles: &[u8],
    blocks: usize,
    act: [Q4_1Act<'_>; T],
    out: [&mut [f32]; T],
) {
    let count = out.iter().map(|o| o.len()).min().unwrap_or(0) / TILE_ROWS;
    // SAFETY: the caller guarantees `count` tiles of `blocks` blocks in `tiles` and `blocks`
    // blocks of digits, scales and sums in every `act[t]`; each `out[t]` holds `16 · count`
    // numbers.
    unsafe {
        for i in 0..count {
            let p = tiles.as_ptr().add(i * blocks * TILE_BLOCK);
            let v = q4_1_tile_sums_avx512(p, blocks, &act);
            for t in 0..T {
                _mm512_storeu_ps(out[t].as_mut_ptr().add(TILE_ROWS * i), v[t]);
            }
        }
    }
}

/// The 16 rows' `D + M` of `portable::q4_1_row` for one packed Q4_1 tile of `blocks` blocks at
/// `p` against `T` token rows: what `q4_1_tile_avx512` and `q4_1_tiles_avx512` store, inlined
/// into both so that the two are one sequence of operations.
#[inline(always)]
unsafe fn q4_1_tile_sums_avx512<const T: usize>(
    p: *const u8,
    blocks: usize,
    act: &[Q4_1Act<'_>; T],
) -> [__m512; T] {
    // SAFETY: the caller guarantees a tile of `blocks` blocks at `p`, `blocks` blocks of digits,
    // scales and sums in every `act[t]`, and the features.
    unsafe {
        if T == 1 {
            let mut one = [_mm512_setzero_ps(); T];
            one[0] = q4_1_decode_tile_avx512(p, blocks, act[0]);
            return one;
        }
        let mut dsum = [_mm512_setzero_ps(); T];
        let mut msum = [_mm512_setzero_ps(); T];
        // Each block first asks for the bytes as far ahead as decode does (the next tile
        // follows this one in a packed matrix).
        for b in 0..blocks {
            prefetch_ahead(p, b * TILE_BLOCK, TILE_BLOCK, TILE_PREFETCH_BYTES);
            q4_1_tile_blocks_avx512::<T, 1>(p, b, act, &mut dsum, &mut msum);
        }
        std::array::from_fn(|t| _mm512_add_ps(dsum[t], msum[t]))
    }
}

/// `portable::block_sums` and `portable::fixed_point_digits` in one pass over the numbers,
/// AVX-512: per block, its `reduce32` tree in registers; the largest magnitude by a maximum
/// tree, its exponent from the bits, one multiply by `2^k` and one rounding conversion, and
/// the four digits by sign-extending shifts, each narrowed to bytes with one instruction.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn q4_1_prepare_avx512(
    x: &[f32],
    sums: &mut [f32],
    scales: &mut [f32],
    digits: &mut [i32],
) {
    use crate::portable::{FIXED_BITS, FIXED_MIN_EXPONENT};
    // SAFETY: the caller guarantees `scales.len()` sums in `sums`, `32 · scales.len()` numbers
    // in `x` and `32 · scales.len()` words in `digits`.
    unsafe {
        for (b, sc) in scales.iter_mut().enumerate() {
            let p = x.as_ptr().add(32 * b);
            let v = [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))];
            *sums.get_unchecked_mut(b) = reduce32_avx512((v[0], v[1]));
            let dp = digits.as_mut_ptr().add(32 * b);
            // x − x is 0 exactly when x is finite.
            let zero = _mm512_setzero_ps();
            let nonfinite = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(_mm512_sub_ps(v[0], v[0]), zero)
                | _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(_mm512_sub_ps(v[1], v[1]), zero);
            let amax =
                _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
            if nonfinite != 0 || amax == 0.0 {
                *sc = if nonfinite != 0 { f32::NAN } else { 0.0 };
                for i in 0..32 {
                    *dp.add(i) = 0;
                }
                continue;
            }
            let e = (((amax.to_bits() >> 23) & 0xff) as i32 - 127).max(FIXED_MIN_EXPONENT);
            let k = FIXED_BITS - e;
            let up = _mm512_set1_ps(f32::from_bits(((k + 127) as u32) << 23));
            *sc = f32::from_bits(((127 - k) as u32) << 23);
            for (h, vh) in v.iter().enumerate() {
                let mut r = _mm512_cvtps_epi32(_mm512_mul_ps(*vh, up));
                for j in 0..4 {
                    let d = _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(r));
                    _mm_storeu_si128(
                        dp.add(8 * j + 4 * h) as *mut __m128i,
                        _mm512_cvtepi32_epi8(d),
                    );
                    r = _mm512_srai_epi32::<8>(_mm512_sub_epi32(r, d));
                }
            }
        }
    }
}

/// `q4_1_tile_blocks_avx512` with AVX2: the 16 rows in two registers of 8; each 8-bit dot
/// product is `vpmaddubsw` (pairs of products into 16 bits, which hold them: at most
/// 2 · 15 · 128) then `vpmaddwd` by ones (pairs into 32 bits), exact as `vpdpbusd`.
#[inline(always)]
unsafe fn q4_1_tile_block_avx2<const T: usize>(
    tile: *const u8,
    b: usize,
    act: &[Q4_1Act<'_>; T],
    dsum: &mut [[__m256; 2]; T],
    msum: &mut [[__m256; 2]; T],
) {
    // SAFETY: as for `q4_1_tile_blocks_avx512`.
    unsafe {
        let low = _mm256_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let blk = tile.add(b * TILE_BLOCK);
        for h in 0..2 {
            let w: [__m256i; 8] = std::array::from_fn(|i| {
                let v = _mm256_loadu_si256(blk.add(64 + 64 * (i / 2) + 32 * h) as *const __m256i);
                if i % 2 == 0 {
                    _mm256_and_si256(v, low)
                } else {
                    _mm256_and_si256(_mm256_srli_epi32::<4>(v), low)
                }
            });
            let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(16 * h) as *const __m128i));
            let m = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(32 + 16 * h) as *const __m128i));
            for t in 0..T {
                let dp = act[t].digits.as_ptr().add(32 * b);
                let mut a = [_mm256_setzero_si256(); 4];
                for i in 0..8 {
                    for (j, aj) in a.iter_mut().enumerate() {
                        let pairs =
                            _mm256_maddubs_epi16(w[i], _mm256_set1_epi32(*dp.add(8 * j + i)));
                        *aj = _mm256_add_epi32(*aj, _mm256_madd_epi16(pairs, ones));
                    }
                }
                let lo = _mm256_add_epi32(a[0], _mm256_slli_epi32::<8>(a[1]));
                let hi = _mm256_add_epi32(a[2], _mm256_slli_epi32::<8>(a[3]));
                let s = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(hi),
                    _mm256_set1_ps(65536.0),
                    _mm256_cvtepi32_ps(lo),
                );
                let s = _mm256_mul_ps(s, _mm256_set1_ps(*act[t].scales.get_unchecked(b)));
                dsum[t][h] = _mm256_fmadd_ps(d, s, dsum[t][h]);
                msum[t][h] =
                    _mm256_fmadd_ps(m, _mm256_set1_ps(*act[t].sums.get_unchecked(b)), msum[t][h]);
            }
        }
    }
}

/// One packed Q4_1 tile against `T` token rows, AVX2: see `q4_1_tile_avx512`.
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn q4_1_tile_avx2<const T: usize>(
    tile: &[u8],
    act: [Q4_1Act<'_>; T],
    out: &mut [[f32; TILE_ROWS]; T],
) {
    let blocks = tile.len() / TILE_BLOCK;
    // SAFETY: as for `q4_1_tile_avx512`.
    unsafe {
        let p = tile.as_ptr();
        let mut dsum = [[_mm256_setzero_ps(); 2]; T];
        let mut msum = [[_mm256_setzero_ps(); 2]; T];
        for b in 0..blocks {
            q4_1_tile_block_avx2::<T>(p, b, &act, &mut dsum, &mut msum);
        }
        for t in 0..T {
            for h in 0..2 {
                _mm256_storeu_ps(
                    out[t].as_mut_ptr().add(8 * h),
                    _mm256_add_ps(dsum[t][h], msum[t][h]),
                );
            }
        }
    }
}

use crate::packed::{Q8_0_TILE_BLOCK_BYTES as Q8_BLOCK, Q8_0_TILE_ROWS};

/// Adds `G` blocks of a packed Q8_0 tile, from block `b`, to the sums of
/// `portable::q8_0_row` for `T` token rows, 16 weight rows in the lanes: per element, one
/// widening load and one conversion give the 16 rows' `q` as f32, and one fused multiply-add per
/// token adds them times the broadcast activation to the block's sum `S_b`; then `d_b · S_b`.
#[inline(always)]
unsafe fn q8_0_tile_blocks_avx512<const T: usize, const G: usize>(
    tile: *const u8,
    b: usize,
    x: &[&[f32]; T],
    dsum: &mut [__m512; T],
) {
    // SAFETY: the caller guarantees `G` whole blocks from `b` in the tile, `32 · (b + G)`
    // numbers in every `x[t]`, and the features.
    unsafe {
        let mut s = [[_mm512_setzero_ps(); T]; G];
        for i in 0..32 {
            for g in 0..G {
                let q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                    tile.add((b + g) * Q8_BLOCK + 32 + 16 * i) as *const __m128i,
                )));
                let at = 32 * (b + g) + i;
                for t in 0..T {
                    s[g][t] = _mm512_fmadd_ps(q, _mm512_set1_ps(*x[t].get_unchecked(at)), s[g][t]);
                }
            }
        }
        for g in 0..G {
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(
                tile.add((b + g) * Q8_BLOCK) as *const __m256i
            ));
            for t in 0..T {
                dsum[t] = _mm512_fmadd_ps(d, s[g][t], dsum[t]);
            }
        }
    }
}

/// How far ahead of the current block the Q8_0 tile kernels prefetch, in bytes of the tile: 17 KB
/// (measured: 4 KB left the Q8_0 decode product about as slow as two rows of the file's layout
/// at a time; 17 KB made it about 1.6 times as fast).
const Q8_PREFETCH_BYTES: usize = 32 * Q8_BLOCK;

/// One token row against one packed Q8_0 tile of `blocks` blocks at `p`, AVX-512: the 16 rows of
/// `portable::q8_0_row`. Blocks go four at a time, so that four chains of fused multiply-adds
/// are in flight, and the last four to seven blocks as one group.
#[inline(always)]
unsafe fn q8_0_decode_tile_avx512(p: *const u8, blocks: usize, x: &[f32]) -> __m512 {
    // SAFETY: the caller guarantees a tile of `blocks` blocks at `p`, `32 · blocks` numbers in
    // `x`, and the features.
    unsafe {
        let x1 = [x];
        let mut dsum = [_mm512_setzero_ps()];
        let mut b = 0;
        // As in `q4_1_decode_tile_avx512`: every line of the stream asked for once, ahead.
        macro_rules! group {
            ($g:literal) => {{
                prefetch_ahead(p, b * Q8_BLOCK, $g * Q8_BLOCK, Q8_PREFETCH_BYTES);
                q8_0_tile_blocks_avx512::<1, $g>(p, b, &x1, &mut dsum)
            }};
        }
        while blocks - b >= 8 {
            group!(4);
            b += 4;
        }
        match blocks - b {
            0 => {}
            1 => group!(1),
            2 => group!(2),
            3 => group!(3),
            4 => group!(4),
            5 => group!(5),
            6 => group!(6),
            _ => group!(7),
        }
        dsum[0]
    }
}

/// Consecutive packed Q8_0 tiles of `blocks` blocks against one token row, AVX-512:
/// `out[16 · i + r]` is row `r` of tile `i`, the bits of `q8_0_tile_avx512`. Decode's path: one
/// call for all of a thread's tiles.
#[target_feature(enable = "avx512f,f16c,fma")]
pub unsafe fn q8_0_tiles_decode_avx512(tiles: &[u8], blocks: usize, x: &[f32], out: &mut [f32]) {
    // SAFETY: the caller guarantees `out.len() / 16` tiles of `blocks` blocks in `tiles` and
    // `32 · blocks` numbers in `x`.
    unsafe {
        for (i, o) in out.chunks_exact_mut(Q8_0_TILE_ROWS).enumerate() {
            let p = tiles.as_ptr().add(i * blocks * Q8_BLOCK);
            _mm512_storeu_ps(o.as_mut_ptr(), q8_0_decode_tile_avx512(p, blocks, x));
        }
    }
}

/// One packed Q8_0 tile (`crate::packed`) against `T` token rows, AVX-512: `out[t][r]` for the
/// tile's 16 rows, with the operations of `portable::q8_0_row`, so the same bits.
#[target_feature(enable = "avx512f,f16c,fma")]
pub unsafe fn q8_0_tile_avx512<const T: usize>(
    tile: &[u8],
    x: [&[f32]; T],
    out: &mut [[f32; Q8_0_TILE_ROWS]; T],
) {
    let blocks = tile.len() / Q8_BLOCK;
    // SAFETY: the caller guarantees a tile of `blocks` blocks and `32 · blocks` numbers in every
    // `x[t]`.
    unsafe {
        let v = q8_0_tile_sums_avx512(tile.as_ptr(), blocks, &x);
        for t in 0..T {
            _mm512_storeu_ps(out[t].as_mut_ptr(), v[t]);
        }
    }
}

/// Consecutive packed Q8_0 tiles of `blocks` blocks against `T` token rows, AVX-512:
/// `out[t][16 · i + r]` is row `r` of tile `i` for token row `t`, the bits of
/// `q8_0_tile_avx512`. The batched path, as `q4_1_tiles_avx512`.
#[target_feature(enable = "avx512f,f16c,fma")]
pub unsafe fn q8_0_tiles_avx512<const T: usize>(
    tiles: &[u8],
    blocks: usize,
    x: [&[f32]; T],
    out: [&mut [f32]; T],
) {
    let count = out.iter().map(|o| o.len()).min().unwrap_or(0) / Q8_0_TILE_ROWS;
    // SAFETY: the caller guarantees `count` tiles of `blocks` blocks in `tiles` and `32 · blocks`
    // numbers in every `x[t]`; each `out[t]` holds `16 · count` numbers.
    unsafe {
        for i in 0..count {
            let p = tiles.as_ptr().add(i * blocks * Q8_BLOCK);
            let v = q8_0_tile_sums_avx512(p, blocks, &x);
            for t in 0..T {
                _mm512_storeu_ps(out[t].as_mut_ptr().add(Q8_0_TILE_ROWS * i), v[t]);
            }
        }
    }
}

/// The 16 rows of `portable::q8_0_row` for one packed Q8_0 tile of `blocks` blocks at `p`
/// against `T` token rows: what `q8_0_tile_avx512` and `q8_0_tiles_avx512` store.
#[inline(always)]
unsafe fn q8_0_tile_sums_avx512<const T: usize>(
    p: *const u8,
    blocks: usize,
    x: &[&[f32]; T],
) -> [__m512; T] {
    // SAFETY: the caller guarantees a tile of `blocks` blocks at `p`, `32 · blocks` numbers in
    // every `x[t]`, and the features.
    unsafe {
        if T == 1 {
            let mut one = [_mm512_setzero_ps(); T];
            one[0] = q8_0_decode_tile_avx512(p, blocks, x[0]);
            return one;
        }
        let mut dsum = [_mm512_setzero_ps(); T];
        let mut b = 0;
        // Two tokens: two blocks at a time, so that four chains are in flight.
        // Each block first asks for the bytes as far ahead as decode does (the next tile
        // follows this one in a packed matrix).
        if T == 2 {
            while b + 2 <= blocks {
                prefetch_ahead(p, b * Q8_BLOCK, 2 * Q8_BLOCK, Q8_PREFETCH_BYTES);
                q8_0_tile_blocks_avx512::<T, 2>(p, b, x, &mut dsum);
                b += 2;
            }
        }
        while b < blocks {
            prefetch_ahead(p, b * Q8_BLOCK, Q8_BLOCK, Q8_PREFETCH_BYTES);
            q8_0_tile_blocks_avx512::<T, 1>(p, b, x, &mut dsum);
            b += 1;
        }
        dsum
    }
}

/// `q8_0_tile_blocks_avx512` with AVX2: the 16 rows in two registers of 8.
#[inline(always)]
unsafe fn q8_0_tile_blocks_avx2<const T: usize, const G: usize>(
    tile: *const u8,
    b: usize,
    x: &[&[f32]; T],
    dsum: &mut [[__m256; 2]; T],
) {
    // SAFETY: as for `q8_0_tile_blocks_avx512`.
    unsafe {
        let mut s = [[[_mm256_setzero_ps(); 2]; T]; G];
        for i in 0..32 {
            for g in 0..G {
                let at = tile.add((b + g) * Q8_BLOCK + 32 + 16 * i);
                let q: [__m256; 2] = std::array::from_fn(|h| {
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        at.add(8 * h) as *const __m128i
                    )))
                });
                let e = 32 * (b + g) + i;
                for t in 0..T {
                    let xv = _mm256_set1_ps(*x[t].get_unchecked(e));
                    for h in 0..2 {
                        s[g][t][h] = _mm256_fmadd_ps(q[h], xv, s[g][t][h]);
                    }
                }
            }
        }
        for g in 0..G {
            let blk = tile.add((b + g) * Q8_BLOCK);
            for h in 0..2 {
                let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(16 * h) as *const __m128i));
                for t in 0..T {
                    dsum[t][h] = _mm256_fmadd_ps(d, s[g][t][h], dsum[t][h]);
                }
            }
        }
    }
}

/// One packed Q8_0 tile against `T` token rows, AVX2: see `q8_0_tile_avx512`.
#[target_feature(enable = "avx2,f16c,fma")]
pub unsafe fn q8_0_tile_avx2<const T: usize>(
    tile: &[u8],
    x: [&[f32]; T],
    out: &mut [[f32; Q8_0_TILE_ROWS]; T],
) {
    let blocks = tile.len() / Q8_BLOCK;
    // SAFETY: as for `q8_0_tile_avx512`.
    unsafe {
        let p = tile.as_ptr();
        let mut dsum = [[_mm256_setzero_ps(); 2]; T];
        let mut b = 0;
        if T == 1 {
            while b + 2 <= blocks {
                q8_0_tile_blocks_avx2::<T, 2>(p, b, &x, &mut dsum);
                b += 2;
            }
        }
        while b < blocks {
            q8_0_tile_blocks_avx2::<T, 1>(p, b, &x, &mut dsum);
            b += 1;
        }
        for t in 0..T {
            for h in 0..2 {
                _mm256_storeu_ps(out[t].as_mut_ptr().add(8 * h), dsum[t][h]);
            }
        }
    }
}
