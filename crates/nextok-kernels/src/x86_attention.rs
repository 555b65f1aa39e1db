//! AVX-512 attention kernels for the query heads that share one key/value head (grouped-query
//! attention): every key and value row is loaded once for all of them, and the scores of many
//! keys are reduced together. The rows a few positions ahead are prefetched: a batched decode
//! step reads every sequence's cache from memory, block after block. Each number gets exactly
//! the operations of [`crate::dots`] and [`crate::weighted_sum`] for one head: the same lanes,
//! the same fused multiply-adds in the same order, and the same pairs in the reduction tree, so
//! the same bits.

// Register arrays are indexed by head, key and chunk together; iterators would hide the shape.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

/// Head size of the fast path: four registers of 16 numbers.
pub const HEAD: usize = 64;
/// Query heads computed together (their queries and accumulators must fit the 32 registers).
pub const MAX_HEADS: usize = 3;
/// Keys scored together per head.
const KEYS: usize = 4;
/// How many rows ahead the kernels ask for the key and value rows: a decode step reads every
/// sequence's cache from memory once, row after row, across blocks that the hardware
/// prefetcher cannot follow (each block is its own allocation).
const PREFETCH_ROWS: usize = 16;

/// Asks for the 64 numbers of `rows[at]` from `offset` on (256 bytes), if there is such a row.
#[inline(always)]
unsafe fn prefetch_row(rows: &[&[f32]], at: usize, offset: usize) {
    if let Some(row) = rows.get(at) {
        let p = row.as_ptr().wrapping_add(offset) as *const i8;
        // SAFETY: a prefetch is a hint and never faults; the caller has SSE.
        unsafe {
            // Four lines, and a fifth when the row's part does not start on a line.
            for at in [0, 64, 128, 192, 255] {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at));
            }
        }
    }
}

/// `portable::reduce16` of 16 registers at once: lane `i` of the result is the sum of the lanes
/// of `a[i]`, with the additions of the one-register tree (lanes `l` and `l + 8`, then `l + 4`,
/// `l + 2`, `l + 1`) done for all sixteen side by side.
#[inline(always)]
unsafe fn reduce16_x16(a: &[__m512; 16]) -> __m512 {
    // SAFETY: register operations only; the caller has AVX-512F.
    unsafe {
        // [s8(a[2p]), s8(a[2p + 1])]: lanes i and i + 8 of each register.
        let b: [__m512; 8] = std::array::from_fn(|p| {
            let (x, y) = (a[2 * p], a[2 * p + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x44>(x, y),
                _mm512_shuffle_f32x4::<0xEE>(x, y),
            )
        });
        // 128-bit lane k of c[p] is s4(a[4p + k]): lanes i and i + 4 of each s8.
        let c: [__m512; 4] = std::array::from_fn(|p| {
            let (x, y) = (b[2 * p], b[2 * p + 1]);
            _mm512_add_ps(
                _mm512_shuffle_f32x4::<0x88>(x, y),
                _mm512_shuffle_f32x4::<0xDD>(x, y),
            )
        });
        // 128-bit lane k of d[p]: s2(a[8p + k]), then s2(a[8p + 4 + k]): lanes i and i + 2.
        let d: [__m512; 2] = std::array::from_fn(|p| {
            let (x, y) = (c[2 * p], c[2 * p + 1]);
            _mm512_add_ps(
                _mm512_shuffle_ps::<0x44>(x, y),
                _mm512_shuffle_ps::<0xEE>(x, y),
            )
        });
        // Number 4k + j: the sum of a[4j + k] (lanes 0 and 1 of its s2).
        let e = _mm512_add_ps(
            _mm512_shuffle_ps::<0x88>(d[0], d[1]),
            _mm512_shuffle_ps::<0xDD>(d[0], d[1]),
        );
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_permutexvar_ps(order, e)
    }
}

/// `out[h · keys.len() + j] = dot(q_h, keys[j][offset..offset + 64])` for the `H` heads whose
/// queries are `q[64h..64h + 64]`: four keys at a time, each key's four registers loaded once for
/// every head.
///
/// # Safety
/// AVX-512F and FMA are available, `q` holds `64 · H` numbers, every key row `offset + 64`, and
/// `out` `H · keys.len()`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn dots_heads<const H: usize>(
    q: &[f32],
    keys: &[&[f32]],
    offset: usize,
    out: &mut [f32],
) {
    let m = keys.len();
    // SAFETY: the lengths are the caller's guarantee.
    unsafe {
        let qv: [[__m512; 4]; H] = std::array::from_fn(|h| {
            std::array::from_fn(|c| _mm512_loadu_ps(q.as_ptr().add(HEAD * h + 16 * c)))
        });
        // The loop asks for the rows PREFETCH_ROWS ahead of the ones it reads; the first ones
        // are asked for here, all at once, rather than read one miss after another.
        for j in 0..PREFETCH_ROWS.min(m) {
            prefetch_row(keys, j, offset);
        }
        let mut j = 0;
        while j + KEYS <= m {
            let kp: [*const f32; KEYS] = std::array::from_fn(|k| keys[j + k].as_ptr().add(offset));
            for k in 0..KEYS {
                prefetch_row(keys, j + k + PREFETCH_ROWS, offset);
            }
            // Accumulator 4h + k: head h against key j + k; the unused ones stay zero.
            let mut a = [_mm512_setzero_ps(); 16];
            for c in 0..4 {
                for k in 0..KEYS {
                    let kv = _mm512_loadu_ps(kp[k].add(16 * c));
                    for h in 0..H {
                        a[KEYS * h + k] = _mm512_fmadd_ps(qv[h][c], kv, a[KEYS * h + k]);
                    }
                }
            }
            let mut sums = [0.0f32; 16];
            _mm512_storeu_ps(sums.as_mut_ptr(), reduce16_x16(&a));
            for h in 0..H {
                out[h * m + j..h * m + j + KEYS].copy_from_slice(&sums[KEYS * h..KEYS * h + KEYS]);
            }
            j += KEYS;
        }
        // The last keys, one register per head and key, in the same order.
        if j < m {
            let mut a = [_mm512_setzero_ps(); 16];
            for c in 0..4 {
                for k in 0..m - j {
                    let kv = _mm512_loadu_ps(keys[j + k].as_ptr().add(offset + 16 * c));
                    for h in 0..H {
                        a[KEYS * h + k] = _mm512_fmadd_ps(qv[h][c], kv, a[KEYS * h + k]);
                    }
                }
            }
            let mut sums = [0.0f32; 16];
            _mm512_storeu_ps(sums.as_mut_ptr(), reduce16_x16(&a));
            for h in 0..H {
                out[h * m + j..h * m + m].copy_from_slice(&sums[KEYS * h..KEYS * h + m - j]);
            }
        }
    }
}

/// `acc[64h + i] = probs[h · values.len() + j] · values[j][offset + i] + acc[64h + i]` (fused),
/// for `j` in order, for the `H` heads: each value row's four registers are loaded once for every
/// head, and each head's sum stays in its own four registers.
///
/// # Safety
/// AVX-512F and FMA are available, `probs` holds `H · values.len()` numbers, every value row
/// `offset + 64`, and `acc` `64 · H`.
#[target_feature(enable = "avx512f,fma")]
pub unsafe fn weighted_sum_heads<const H: usize>(
    probs: &[f32],
    values: &[&[f32]],
    offset: usize,
    acc: &mut [f32],
) {
    let m = values.len();
    // SAFETY: the lengths are the caller's guarantee.
    unsafe {
        let mut a: [[__m512; 4]; H] = std::array::from_fn(|h| {
            std::array::from_fn(|c| _mm512_loadu_ps(acc.as_ptr().add(HEAD * h + 16 * c)))
        });
        // As in `dots_heads`: the first rows asked for at once.
        for j in 0..PREFETCH_ROWS.min(m) {
            prefetch_row(values, j, offset);
        }
        for (j, v) in values.iter().enumerate() {
            prefetch_row(values, j + PREFETCH_ROWS, offset);
            let vp = v.as_ptr().add(offset);
            let vv: [__m512; 4] = std::array::from_fn(|c| _mm512_loadu_ps(vp.add(16 * c)));
            for h in 0..H {
                let pv = _mm512_set1_ps(*probs.get_unchecked(h * m + j));
                for c in 0..4 {
                    a[h][c] = _mm512_fmadd_ps(pv, vv[c], a[h][c]);
                }
            }
        }
        for h in 0..H {
            for c in 0..4 {
                _mm512_storeu_ps(acc.as_mut_ptr().add(HEAD * h + 16 * c), a[h][c]);
            }
        }
    }
}
