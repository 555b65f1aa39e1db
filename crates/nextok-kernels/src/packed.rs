//! The packed layouts of Q4_1 and Q8_0 rows: the same numbers as the GGUF blocks, arranged so
//! that a matrix-vector product spends fewer instructions per weight. Q8_0 only widens each
//! block's scale to f32 (36 bytes per block instead of 34); Q4_1 is described here.
//!
//! A GGUF Q4_1 block is 20 bytes: an f16 scale `d`, an f16 minimum `m` and 16 bytes of
//! nibbles (byte `l` holds element `l` in its low half and element `l + 16` in its high half).
//! Expanding it costs, per block and row, two f16 conversions and two register broadcasts before
//! any weight is formed, and one 16-byte zero-extending load. Decode does this for every block of
//! every row once per token, and on this project's reference CPU it was a third of the product's
//! instructions.
//!
//! The packed row stores the blocks in groups of four (then one group of two and one of one for
//! the rest of the row), each group of `G` blocks as
//!
//! ```text
//! d_0 … d_{G-1}  m_0 … m_{G-1}   (f32, little-endian: the f16 values widened exactly)
//! nibbles: 16 lanes of 8·G bits
//! ```
//!
//! where lane `l` holds, from its lowest bits up, for each block `k` of the group the nibble of
//! element `l` and then the nibble of element `l + 16`. A group of four is 32 bytes of scales and
//! one 64-byte register of nibbles; a group of two has 16-bit lanes and a group of one 8-bit lanes
//! (the GGUF bytes themselves). Every block takes 24 bytes, 4 more than in the file, in exchange
//! for scales that are ready to broadcast from memory and nibbles that a shift puts in place.
//!
//! The numbers are unchanged: `d` and `m` widen from f16 to f32 exactly, so a weight is still
//! `d · q + m` with one fused multiply-add, and every kernel gives the same bits on the packed
//! rows as on the GGUF ones. [`unpack_q4_1_row`] and [`unpack_q8_0_row`] restore the file's
//! bytes exactly.

use crate::dequant::f16_bits_to_f32;

use crate::portable::{BLOCK_LANES, LANES};

/// Bytes of a GGUF Q4_1 block.
pub(crate) const Q4_1_BYTES: usize = 20;
/// Bytes of a packed Q4_1 block.
pub const Q4_1_PACKED_BYTES: usize = 24;

/// The sizes of the groups a row of `blocks` blocks is cut into, in order: fours, then at most
/// one two and one one.
pub(crate) fn groups(blocks: usize) -> impl Iterator<Item = usize> {
    let fours = blocks / 4;
    let rest = blocks % 4;
    std::iter::repeat_n(4, fours)
        .chain((rest >= 2).then_some(2))
        .chain((rest % 2 == 1).then_some(1))
}

/// Packs one GGUF Q4_1 row (`20 · n` bytes) into `out` (`24 · n` bytes).
pub(crate) fn pack_q4_1_row(row: &[u8], out: &mut [u8]) {
    let blocks = row.len() / Q4_1_BYTES;
    let (mut b, mut at) = (0, 0);
    for g in groups(blocks) {
        for k in 0..g {
            let blk = &row[(b + k) * Q4_1_BYTES..];
            let d = f16_bits_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
            let m = f16_bits_to_f32(u16::from_le_bytes([blk[2], blk[3]]));
            out[at + 4 * k..at + 4 * k + 4].copy_from_slice(&d.to_le_bytes());
            out[at + 4 * (g + k)..at + 4 * (g + k) + 4].copy_from_slice(&m.to_le_bytes());
        }
        let nib = at + 8 * g;
        let lane_bytes = g; // two nibbles of each block: 8·G bits.
        for l in 0..LANES {
            let mut lane = 0u32;
            for k in 0..g {
                let q = u32::from(row[(b + k) * Q4_1_BYTES + 4 + l]);
                lane |= (q & 15) << (8 * k);
                lane |= (q >> 4) << (8 * k + 4);
            }
            let bytes = lane.to_le_bytes();
            out[nib + lane_bytes * l..nib + lane_bytes * (l + 1)]
                .copy_from_slice(&bytes[..lane_bytes]);
        }
        b += g;
        at += Q4_1_PACKED_BYTES * g;
    }
}

/// Restores the GGUF bytes of one packed Q4_1 row (`24 · n` bytes) into `out` (`20 · n`).
pub fn unpack_q4_1_row(packed: &[u8], out: &mut [u8]) {
    let blocks = packed.len() / Q4_1_PACKED_BYTES;
    let (mut b, mut at) = (0, 0);
    for g in groups(blocks) {
        let nib = at + 8 * g;
        let lane_bytes = g;
        for k in 0..g {
            let f32_at = |o: usize| {
                f32::from_le_bytes([packed[o], packed[o + 1], packed[o + 2], packed[o + 3]])
            };
            let blk = &mut out[(b + k) * Q4_1_BYTES..(b + k + 1) * Q4_1_BYTES];
            // The scales came from f16, so the conversion back is exact.
            let d = f16_bits_of(f32_at(at + 4 * k));
            let m = f16_bits_of(f32_at(at + 4 * (g + k)));
            blk[0..2].copy_from_slice(&d.to_le_bytes());
            blk[2..4].copy_from_slice(&m.to_le_bytes());
            for l in 0..LANES {
                let lane = lane_at(packed, nib, lane_bytes, l);
                let lo = (lane >> (8 * k)) & 15;
                let hi = (lane >> (8 * k + 4)) & 15;
                blk[4 + l] = (lo | (hi << 4)) as u8;
            }
        }
        b += g;
        at += Q4_1_PACKED_BYTES * g;
    }
}

/// The f16 bits of a number that is an f16 value widened to f32 (as every packed scale is):
/// the exact inverse of `f16_bits_to_f32` on those numbers.
fn f16_bits_of(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    match exp {
        // Infinities and NaNs keep the top of the payload, which is all an f16 had.
        255 => sign | 0x7c00 | (man >> 13) as u16,
        0 => sign,
        // f16 normals: the exponent re-biased, the mantissa's low 13 bits are zero.
        113.. => sign | (((exp - 112) as u16) << 10) | (man >> 13) as u16,
        // f16 subnormals: m · 2^-24 with m < 1024.
        _ => sign | ((0x80_0000 | man) >> (126 - exp).clamp(0, 31)) as u16,
    }
}

#[inline(always)]
fn lane_at(packed: &[u8], nib: usize, lane_bytes: usize, l: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes[..lane_bytes].copy_from_slice(&packed[nib + lane_bytes * l..nib + lane_bytes * (l + 1)]);
    u32::from_le_bytes(bytes)
}

/// Packed Q4_1 rows against `T` token rows: exactly the operations of [`crate::portable::q4_1`]
/// on the unpacked row, so the same bits.
pub fn q4_1_packed<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; BLOCK_LANES]; T]) {
    let blocks = row.len() / Q4_1_PACKED_BYTES;
    let mut w = [0.0f32; 32];
    let (mut b, mut at) = (0, 0);
    for g in groups(blocks) {
        let nib = at + 8 * g;
        let lane_bytes = g;
        for k in 0..g {
            let f32_at =
                |o: usize| f32::from_le_bytes([row[o], row[o + 1], row[o + 2], row[o + 3]]);
            let d = f32_at(at + 4 * k);
            let m = f32_at(at + 4 * (g + k));
            for l in 0..LANES {
                let lane = lane_at(row, nib, lane_bytes, l);
                w[l] = d.mul_add(((lane >> (8 * k)) & 15) as f32, m);
                w[16 + l] = d.mul_add(((lane >> (8 * k + 4)) & 15) as f32, m);
            }
            let base = 32 * (b + k);
            for t in 0..T {
                let xb = &x[t][base..base + 32];
                for l in 0..BLOCK_LANES {
                    acc[t][l] = w[l].mul_add(xb[l], acc[t][l]);
                }
            }
        }
        b += g;
        at += Q4_1_PACKED_BYTES * g;
    }
}

/// Bytes of a GGUF Q8_0 block.
pub(crate) const Q8_0_BYTES: usize = 34;
/// Bytes of a packed Q8_0 block: the scale widened to f32 (little-endian), then the 32 signed
/// bytes as in the file. The kernels broadcast the scale straight from memory instead of
/// converting it from f16 in every block of every row.
pub const Q8_0_PACKED_BYTES: usize = 36;

/// Packs one GGUF Q8_0 row (`34 · n` bytes) into `out` (`36 · n` bytes).
pub(crate) fn pack_q8_0_row(row: &[u8], out: &mut [u8]) {
    for (blk, dst) in row
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(Q8_0_PACKED_BYTES))
    {
        let d = f16_bits_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        dst[..4].copy_from_slice(&d.to_le_bytes());
        dst[4..].copy_from_slice(&blk[2..]);
    }
}

/// Restores the GGUF bytes of one packed Q8_0 row (`36 · n` bytes) into `out` (`34 · n`).
pub fn unpack_q8_0_row(packed: &[u8], out: &mut [u8]) {
    for (blk, dst) in packed
        .chunks_exact(Q8_0_PACKED_BYTES)
        .zip(out.chunks_exact_mut(Q8_0_BYTES))
    {
        let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
        dst[..2].copy_from_slice(&f16_bits_of(d).to_le_bytes());
        dst[2..].copy_from_slice(&blk[4..]);
    }
}

/// Packed Q8_0 rows against `T` token rows: exactly the operations of
/// [`crate::portable::q8_0`] on the unpacked row, so the same bits.
pub fn q8_0_packed<const T: usize>(row: &[u8], x: [&[f32]; T], acc: &mut [[f32; BLOCK_LANES]; T]) {
    let mut w = [0.0f32; 32];
    for (b, blk) in row.chunks_exact(Q8_0_PACKED_BYTES).enumerate() {
        let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
        for (i, wi) in w.iter_mut().enumerate() {
            *wi = d * f32::from(blk[4 + i] as i8);
        }
        for t in 0..T {
            let xb = &x[t][32 * b..32 * b + 32];
            for l in 0..BLOCK_LANES {
                acc[t][l] = w[l].mul_add(xb[l], acc[t][l]);
            }
        }
    }
}
