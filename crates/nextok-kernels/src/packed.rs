//! The packed layouts of Q4_1 and Q8_0 matrices: the same numbers as the GGUF blocks, arranged
//! so that a matrix-vector product spends fewer instructions per weight. Both store the rows in
//! tiles of 16, so that one vector register holds the same element of 16 rows. Q4_1 is described
//! here; a Q8_0 tile's block ([`Q8_0_TILE_BLOCK_BYTES`] = 544 bytes) is the 16 rows' f16 scales,
//! then each of the 32 elements as 16 signed bytes, one per row, which one widening load turns
//! into 16 numbers ([`crate::portable::q8_0_row`] is the arithmetic). [`unpack_q8_0_row`]
//! restores any row's file bytes exactly.
//!
//! A GGUF Q4_1 block is 20 bytes: an f16 scale `d`, an f16 minimum `m` and 16 bytes of
//! nibbles (byte `l` holds element `l` in its low half and element `l + 16` in its high half).
//! Q4_1's arithmetic (see [`crate::portable::q4_1_row`]) multiplies the nibbles themselves with
//! the activations (as integers), one block at a time, and applies `d` and `m` once per block.
//! The packed matrix stores the rows in **tiles of 16** ([`Q4_1_TILE_ROWS`]) so that one vector
//! register holds the same elements of 16 rows: the kernels turn the nibbles into bytes with one
//! mask (and one shift), four consecutive elements of a row in each 32-bit lane, ready for an
//! 8-bit dot-product instruction. A tile stores its blocks in order, each as
//! [`Q4_1_TILE_BLOCK_BYTES`] = 320 bytes:
//!
//! ```text
//! d of rows 0..16   (16 × f16, the file's bits)
//! m of rows 0..16   (16 × f16)
//! nibbles: 4 registers k = 0..4 of 16 lanes of 4 bytes, lane r holding elements
//!          8k .. 8k + 8 of row r: byte j (0..4) holds element 8k + j in its low half and
//!          element 8k + 4 + j in its high half
//! ```
//!
//! That is 20 bytes per block and row, as in the file. The last tile of a matrix whose row count
//! is not a multiple of 16 is padded with rows of zeros, which no product reads back.
//! [`unpack_q4_1_row`] restores any row's file bytes exactly.

use crate::dequant::f16_bits_to_f32;

/// Bytes of a GGUF Q4_1 block.
pub(crate) const Q4_1_BYTES: usize = 20;
/// Rows in one tile of a packed Q4_1 matrix.
pub const Q4_1_TILE_ROWS: usize = 16;
/// Bytes of one block of a packed Q4_1 tile (16 rows).
pub const Q4_1_TILE_BLOCK_BYTES: usize = 320;

/// Packs up to 16 GGUF Q4_1 rows of `blocks` blocks (`20 · blocks` bytes each) into one tile
/// (`320 · blocks` bytes); missing rows are zeros.
pub(crate) fn pack_q4_1_tile(rows: &[&[u8]], blocks: usize, out: &mut [u8]) {
    out.fill(0);
    for (r, row) in rows.iter().enumerate().take(Q4_1_TILE_ROWS) {
        for b in 0..blocks {
            let blk = &row[b * Q4_1_BYTES..(b + 1) * Q4_1_BYTES];
            let at = b * Q4_1_TILE_BLOCK_BYTES;
            out[at + 2 * r..at + 2 * r + 2].copy_from_slice(&blk[0..2]);
            out[at + 32 + 2 * r..at + 32 + 2 * r + 2].copy_from_slice(&blk[2..4]);
            // Element i < 16 is the low nibble of byte i, element i ≥ 16 the high nibble of
            // byte i − 16.
            let q = |i: usize| {
                if i < 16 {
                    blk[4 + i] & 15
                } else {
                    blk[4 + i - 16] >> 4
                }
            };
            for k in 0..4 {
                let o = at + 64 + 64 * k + 4 * r;
                for j in 0..4 {
                    out[o + j] = q(8 * k + j) | (q(8 * k + 4 + j) << 4);
                }
            }
        }
    }
}

/// Restores the GGUF bytes of row `r` (0..16) of one packed Q4_1 tile of `blocks` blocks into
/// `out` (`20 · blocks` bytes).
pub fn unpack_q4_1_row(tile: &[u8], r: usize, out: &mut [u8]) {
    for (b, blk) in out.chunks_exact_mut(Q4_1_BYTES).enumerate() {
        let at = b * Q4_1_TILE_BLOCK_BYTES;
        blk[0..2].copy_from_slice(&tile[at + 2 * r..at + 2 * r + 2]);
        blk[2..4].copy_from_slice(&tile[at + 32 + 2 * r..at + 32 + 2 * r + 2]);
        for l in 0..16 {
            let lo = tile_nibble(tile, r, b, l);
            let hi = tile_nibble(tile, r, b, l + 16);
            blk[4 + l] = lo | (hi << 4);
        }
    }
}

/// Element `i` of block `b` of row `r` of a packed Q4_1 tile.
#[inline(always)]
fn tile_nibble(tile: &[u8], r: usize, b: usize, i: usize) -> u8 {
    let o = b * Q4_1_TILE_BLOCK_BYTES + 64 + 64 * (i / 8) + 4 * r + i % 4;
    (tile[o] >> (4 * (i % 8 / 4))) & 15
}

/// The f16 at byte `at`.
#[inline(always)]
fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

/// One packed Q4_1 tile of `blocks` blocks against `T` token rows (`xs[t]`: the block sums of
/// `x[t]`, see [`crate::portable::block_sums`]): `out[t][r]` for the 16 rows of the tile, by
/// [`crate::portable::q4_1_row`]'s arithmetic, so the bits of the file's rows.
pub fn q4_1_tile<const T: usize>(
    tile: &[u8],
    x: [&[f32]; T],
    xs: [&[f32]; T],
    out: &mut [[f32; Q4_1_TILE_ROWS]; T],
) {
    let blocks = tile.len() / Q4_1_TILE_BLOCK_BYTES;
    for (t, out_t) in out.iter_mut().enumerate() {
        for (r, o) in out_t.iter_mut().enumerate() {
            *o = crate::portable::q4_1_row(
                blocks,
                |b| {
                    let at = b * Q4_1_TILE_BLOCK_BYTES;
                    (f16_at(tile, at + 2 * r), f16_at(tile, at + 32 + 2 * r))
                },
                |b, i| tile_nibble(tile, r, b, i),
                x[t],
                xs[t],
            );
        }
    }
}

/// Bytes of a GGUF Q8_0 block.
pub(crate) const Q8_0_BYTES: usize = 34;
/// Rows in one tile of a packed Q8_0 matrix.
pub const Q8_0_TILE_ROWS: usize = 16;
/// Bytes of one block of a packed Q8_0 tile (16 rows): the 16 rows' f16 scales (the file's
/// bits, 32 bytes), then the 32 elements, each as 16 signed bytes (byte `r` of element `i` is
/// row `r`'s `q_i`): 34 bytes per block and row, as in the file.
pub const Q8_0_TILE_BLOCK_BYTES: usize = 544;

/// Packs up to 16 GGUF Q8_0 rows of `blocks` blocks (`34 · blocks` bytes each) into one tile
/// (`544 · blocks` bytes); missing rows are zeros.
pub(crate) fn pack_q8_0_tile(rows: &[&[u8]], blocks: usize, out: &mut [u8]) {
    out.fill(0);
    for (r, row) in rows.iter().enumerate().take(Q8_0_TILE_ROWS) {
        for b in 0..blocks {
            let blk = &row[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
            let at = b * Q8_0_TILE_BLOCK_BYTES;
            out[at + 2 * r..at + 2 * r + 2].copy_from_slice(&blk[0..2]);
            for (i, &q) in blk[2..].iter().enumerate() {
                out[at + 32 + 16 * i + r] = q;
            }
        }
    }
}

/// Restores the GGUF bytes of row `r` (0..16) of one packed Q8_0 tile of `blocks` blocks into
/// `out` (`34 · blocks` bytes).
pub fn unpack_q8_0_row(tile: &[u8], r: usize, out: &mut [u8]) {
    for (b, blk) in out.chunks_exact_mut(Q8_0_BYTES).enumerate() {
        let at = b * Q8_0_TILE_BLOCK_BYTES;
        blk[0..2].copy_from_slice(&tile[at + 2 * r..at + 2 * r + 2]);
        for (i, q) in blk[2..].iter_mut().enumerate() {
            *q = tile[at + 32 + 16 * i + r];
        }
    }
}

/// One packed Q8_0 tile of `blocks` blocks against `T` token rows: `out[t][r]` for the 16 rows
/// of the tile, by [`crate::portable::q8_0_row`]'s arithmetic, so the bits of the file's rows.
pub fn q8_0_tile<const T: usize>(
    tile: &[u8],
    x: [&[f32]; T],
    out: &mut [[f32; Q8_0_TILE_ROWS]; T],
) {
    let blocks = tile.len() / Q8_0_TILE_BLOCK_BYTES;
    for (t, out_t) in out.iter_mut().enumerate() {
        for (r, o) in out_t.iter_mut().enumerate() {
            *o = crate::portable::q8_0_row(
                blocks,
                |b| f16_at(tile, b * Q8_0_TILE_BLOCK_BYTES + 2 * r),
                |b, i| tile[b * Q8_0_TILE_BLOCK_BYTES + 32 + 16 * i + r] as i8,
                x[t],
            );
        }
    }
}
