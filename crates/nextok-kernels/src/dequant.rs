//! Dequantisation: the GGML block formats turned back into `f32`, exactly as ggml defines them.
//!
//! Each function follows the reference `dequantize_row_*` of ggml's `ggml-quants.c` (and the
//! block structs of `ggml-common.h`) operation by operation, in `f32`, so the numbers are the
//! ones the format means. Every product of a scale (an f16 value, 11 significant bits) with a
//! small integer (at most 8 bits) is exact in `f32`, so these values are the exact weights of the
//! file, up to the final addition of a minimum in the formats that have one.
//!
//! This is the definition the kernels are tested against, and the path of every type without a
//! fused kernel: [`dequantize_row`] runs on a few blocks at a time into a small scratch buffer,
//! so a full-precision copy of a weight matrix is never stored. It lives here, beside the
//! products, rather than in `nextok-gguf`, so that the file format (which the tokenizer and the
//! constraints read too) carries no weight arithmetic.
//!
//! ```
//! use nextok_gguf::GgmlType;
//! use nextok_kernels::dequant;
//!
//! // One Q8_0 block: the f16 scale 0.5 (bits 0x3800), then 32 signed bytes 0, 1, ..., 31.
//! let mut block = vec![0x00, 0x38];
//! block.extend((0..32u8).map(|q| q));
//! let mut out = [0.0f32; 32];
//! dequant::dequantize_row(GgmlType::Q8_0, &block, &mut out)?;
//! assert_eq!(out[3], 1.5);
//! # Ok::<(), nextok_kernels::Error>(())
//! ```

use half::bf16;

use nextok_gguf::{GgmlType, TensorView};

use crate::Error;

/// Whether [`dequantize_row`] can dequantise this type.
pub fn is_supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
    )
}

/// Dequantises `out.len()` elements stored as `ty` in `data`.
///
/// `out.len()` must be a whole number of blocks of `ty`, and `data` exactly the bytes of those
/// blocks; otherwise, or when the type is not supported, the error says which.
pub fn dequantize_row(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), Error> {
    let elements = out.len() as u64;
    let fail = |reason: &'static str| Error::Dequantize {
        ty,
        elements,
        bytes: data.len() as u64,
        reason,
    };
    if !is_supported(ty) {
        return Err(fail("this tensor type cannot be dequantised"));
    }
    let needed = ty
        .bytes_for(elements)
        .ok_or_else(|| fail("the element count is not a whole number of blocks"))?;
    if needed != data.len() as u64 {
        return Err(fail("the byte count does not match the element count"));
    }
    let be = ty.block_elements() as usize;
    let bb = ty.block_bytes() as usize;
    for (block, y) in data.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        match ty {
            GgmlType::F32 => y[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]),
            GgmlType::F16 => y[0] = half16(block, 0),
            GgmlType::BF16 => {
                y[0] = bf16::from_bits(u16::from_le_bytes([block[0], block[1]])).into()
            }
            GgmlType::Q4_0 => q4_0(block, y),
            GgmlType::Q4_1 => q4_1(block, y),
            GgmlType::Q5_0 => q5_0(block, y),
            GgmlType::Q5_1 => q5_1(block, y),
            GgmlType::Q8_0 => q8_0(block, y),
            GgmlType::Q4K => q4_k(block, y),
            GgmlType::Q5K => q5_k(block, y),
            GgmlType::Q6K => q6_k(block, y),
            // `is_supported` rejected every other type above.
            _ => return Err(fail("this tensor type cannot be dequantised")),
        }
    }
    Ok(())
}

/// Dequantises a whole tensor into a new vector (for small tensors such as norms, and for tools
/// and tests; the model's matrix kernels dequantise row by row instead).
pub fn dequantize_tensor(view: TensorView<'_>) -> Result<Vec<f32>, Error> {
    let elements = usize::try_from(view.info.elements()).map_err(|_| Error::Dequantize {
        ty: view.info.ggml_type,
        elements: view.info.elements(),
        bytes: view.data.len() as u64,
        reason: "the tensor is too large for this machine",
    })?;
    let mut out = vec![0.0; elements];
    dequantize_row(view.info.ggml_type, view.data, &mut out)?;
    Ok(out)
}

/// A block's slice as a fixed-size array, so that the loops over it compile without bounds
/// checks and vectorise. The callers slice exactly `N` bytes, so the conversion cannot fail.
#[inline(always)]
fn fixed<const N: usize>(s: &[u8]) -> &[u8; N] {
    s.try_into().unwrap_or_else(|_| unreachable!())
}

#[inline(always)]
fn fixed_mut<const N: usize>(s: &mut [f32]) -> &mut [f32; N] {
    s.try_into().unwrap_or_else(|_| unreachable!())
}

/// The f16 at byte `at` of a block, little-endian, as `f32` (ggml's `GGML_FP16_TO_FP32`).
#[inline(always)]
fn half16(block: &[u8], at: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// An f16 (as bits) widened to f32, exactly. Written out rather than taken from `half`, whose
/// conversion is an out-of-line call with a run-time CPU check: this one inlines into the block
/// loops, where it runs once or twice per block.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1F) as u32;
    let man = (h & 0x3FF) as u32;
    match exp {
        // Zero and subnormals: man · 2^−24, exact in f32.
        0 => f32::from_bits(sign | (man as f32 * (1.0 / 16_777_216.0)).to_bits()),
        // Infinities and NaNs keep their payload.
        31 => f32::from_bits(sign | 0x7F80_0000 | (man << 13)),
        // Normal numbers: rebias the exponent from 15 to 127.
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// `block_q4_0`: `d` (f16), then 16 bytes; element `j` is the low nibble of byte `j` and element
/// `j + 16` its high nibble; x = (q − 8) · d.
fn q4_0(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let (qs, y) = (fixed::<16>(&block[2..18]), fixed_mut::<32>(y));
    for j in 0..16 {
        y[j] = ((qs[j] & 0x0F) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// `block_q4_1`: `d`, `m` (f16), then 16 bytes of nibbles as in Q4_0; x = q · d + m.
fn q4_1(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let m = half16(block, 2);
    let (qs, y) = (fixed::<16>(&block[4..20]), fixed_mut::<32>(y));
    for j in 0..16 {
        y[j] = (qs[j] & 0x0F) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// `block_q5_0`: `d` (f16), `qh` (32 high bits, little-endian u32), 16 bytes of nibbles; the
/// fifth bit of element `j` is bit `j` of `qh`, of element `j + 16` bit `j + 12` shifted so that
/// it lands on bit 4; x = (q − 16) · d.
fn q5_0(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let qs = &block[6..22];
    for j in 0..16 {
        let xh0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
        y[j] = (((qs[j] & 0x0F) | xh0) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) | xh1) as i32 - 16) as f32 * d;
    }
}

/// `block_q5_1`: `d`, `m` (f16), `qh`, 16 bytes of nibbles as in Q5_0; x = q · d + m.
fn q5_1(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let m = half16(block, 2);
    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let qs = &block[8..24];
    for j in 0..16 {
        let xh0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
        y[j] = ((qs[j] & 0x0F) | xh0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) | xh1) as f32 * d + m;
    }
}

/// `block_q8_0`: `d` (f16), then 32 signed bytes; x = q · d.
fn q8_0(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let (qs, y) = (fixed::<32>(&block[2..34]), fixed_mut::<32>(y));
    for j in 0..32 {
        y[j] = (qs[j] as i8) as f32 * d;
    }
}

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K or Q5_K block, packed in 12 bytes
/// (ggml's `get_scale_min_k4`): sub-blocks 0–3 keep theirs in the low 6 bits of bytes `j` and
/// `j + 4`; sub-blocks 4–7 take 4 bits from byte `j + 4` and their top 2 bits from the spare top
/// bits of bytes `j − 4` and `j`.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// `block_q4_K`: `d`, `dmin` (f16), 12 bytes of packed scales and minimums, 128 bytes of nibbles.
/// Each 64 elements take 32 bytes: the low nibbles are sub-block `2i`, the high ones `2i + 1`;
/// x = d · sc · q − dmin · m.
fn q4_k(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let min = half16(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..144];
    for i in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * i, scales);
        let (sc2, m2) = scale_min_k4(2 * i + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let q = fixed::<32>(&qs[32 * i..32 * i + 32]);
        let out = fixed_mut::<64>(&mut y[64 * i..64 * i + 64]);
        for l in 0..32 {
            out[l] = d1 * (q[l] & 0x0F) as f32 - m1;
            out[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// `block_q5_K`: `d`, `dmin`, 12 bytes of scales, 32 bytes `qh` of high bits, 128 bytes of
/// nibbles. As Q4_K, plus a fifth bit: for the `i`-th 64 elements, bit `2i` of `qh[l]` belongs to
/// element `l` and bit `2i + 1` to element `l + 32`.
fn q5_k(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 0);
    let min = half16(block, 2);
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for i in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * i, scales);
        let (sc2, m2) = scale_min_k4(2 * i + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (u1, u2) = (1u8 << (2 * i), 2u8 << (2 * i));
        let ql = fixed::<32>(&qs[32 * i..32 * i + 32]);
        let qh = fixed::<32>(qh);
        let out = fixed_mut::<64>(&mut y[64 * i..64 * i + 64]);
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            out[l] = d1 * ((ql[l] & 0x0F) + h1) as f32 - m1;
            out[l + 32] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// `block_q6_K`: 128 bytes `ql` (low 4 bits), 64 bytes `qh` (high 2 bits), 16 signed 8-bit
/// scales, `d` (f16). Each half of 128 elements uses 64 bytes of `ql`, 32 of `qh` and 8 scales;
/// within it element `l + 32k` (k = 0..4) takes its low bits from `ql[l]` / `ql[l + 32]`
/// (low then high nibbles) and its high bits from bits `2k, 2k + 1` of `qh[l]`, with the scale
/// `sc[l / 16 + 2k]`; x = d · sc · (q − 32).
fn q6_k(block: &[u8], y: &mut [f32]) {
    let d = half16(block, 208);
    for half in 0..2 {
        let ql = fixed::<64>(&block[64 * half..64 * half + 64]);
        let qh = fixed::<32>(&block[128 + 32 * half..128 + 32 * half + 32]);
        let sc = fixed::<8>(&block[192 + 8 * half..192 + 8 * half + 8]);
        let out = fixed_mut::<128>(&mut y[128 * half..128 * half + 128]);
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            out[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            out[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            out[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            out[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
// Index loops mirror the layout's definition, element by element.
#[allow(clippy::needless_range_loop)]
mod tests {
    //! Goldens from hand-made blocks. Each expected value is worked out from the format's
    //! definition (ggml `ggml-common.h` block structs, `ggml-quants.c` `dequantize_row_*`), by
    //! hand for the literal checks, and element by element through an independent indexing of
    //! the layout for the full-block checks.

    use super::*;
    use half::f16;

    fn deq(ty: GgmlType, data: &[u8]) -> Vec<f32> {
        let n = data.len() / ty.block_bytes() as usize * ty.block_elements() as usize;
        let mut out = vec![f32::NAN; n];
        dequantize_row(ty, data, &mut out).unwrap();
        out
    }

    const F16_ONE: [u8; 2] = [0x00, 0x3C];
    const F16_HALF: [u8; 2] = [0x00, 0x38];
    const F16_TWO: [u8; 2] = [0x00, 0x40];
    const F16_QUARTER: [u8; 2] = [0x00, 0x34];
    const F16_MINUS_ONE: [u8; 2] = [0x00, 0xBC];

    #[test]
    fn f16_widening_matches_half_for_every_value() {
        for bits in 0..=u16::MAX {
            let ours = f16_bits_to_f32(bits);
            let theirs = f16::from_bits(bits).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#06x}");
            }
        }
    }

    #[test]
    fn plain_types() {
        let f32s: Vec<u8> = [1.5f32, -0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(deq(GgmlType::F32, &f32s), [1.5, -0.25]);
        // f16: 0x3C00 = 1, 0xC000 = −2, 0x7BFF = 65504 (the largest finite f16), 0x0001 = 2^−24.
        let f16s = [0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00];
        assert_eq!(
            deq(GgmlType::F16, &f16s),
            [1.0, -2.0, 65504.0, 2f32.powi(-24)]
        );
        // bf16 is the top half of an f32: 0x3F80 = 1, 0x4049 = 3.140625, 0xC2F7 = −123.5.
        let bf16s = [0x80, 0x3F, 0x49, 0x40, 0xF7, 0xC2];
        assert_eq!(deq(GgmlType::BF16, &bf16s), [1.0, 3.140625, -123.5]);
    }

    #[test]
    fn q8_0_block() {
        let mut b = F16_HALF.to_vec();
        let qs: [i8; 32] = core::array::from_fn(|j| [-128, -1, 0, 1, 127][j % 5]);
        b.extend(qs.iter().map(|&q| q as u8));
        let y = deq(GgmlType::Q8_0, &b);
        assert_eq!(&y[..5], [-64.0, -0.5, 0.0, 0.5, 63.5]);
        for j in 0..32 {
            assert_eq!(y[j], qs[j] as f32 * 0.5);
        }
    }

    #[test]
    fn q4_0_block() {
        // Byte j holds element j (low nibble, value j) and element j + 16 (high nibble, 15 − j).
        let mut b = F16_TWO.to_vec();
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::Q4_0, &b);
        // x = (q − 8) · d with d = 2.
        assert_eq!(
            [y[0], y[8], y[15], y[16], y[31]],
            [-16.0, 0.0, 14.0, 14.0, -16.0]
        );
        for j in 0..16 {
            assert_eq!(y[j], (j as f32 - 8.0) * 2.0);
            assert_eq!(y[j + 16], (7.0 - j as f32) * 2.0);
        }
    }

    #[test]
    fn q4_1_block() {
        let mut b = F16_QUARTER.to_vec();
        b.extend(F16_MINUS_ONE);
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::Q4_1, &b);
        // x = q · d + m with d = 0.25, m = −1.
        assert_eq!([y[0], y[15], y[16], y[31]], [-1.0, 2.75, 2.75, -1.0]);
        for j in 0..16 {
            assert_eq!(y[j], j as f32 * 0.25 - 1.0);
        }
    }

    #[test]
    fn q5_0_and_q5_1_blocks() {
        // Q5_0: qh bit 1 gives element 1 its fifth bit, bit 16 gives it to element 16.
        let mut b = F16_ONE.to_vec();
        b.extend(0x0001_0002u32.to_le_bytes());
        b.extend([0u8; 16]);
        let y = deq(GgmlType::Q5_0, &b);
        for (j, &v) in y.iter().enumerate() {
            let expected = if j == 1 || j == 16 { 0.0 } else { -16.0 };
            assert_eq!(v, expected, "element {j}");
        }
        // Q5_1: d = 1, m = 0.5; qh bit 31 is element 31's fifth bit, whose nibble is the high
        // nibble of byte 15 (15): 31 · 1 + 0.5.
        let mut b = F16_ONE.to_vec();
        b.extend(F16_HALF);
        b.extend(0x8000_0000u32.to_le_bytes());
        let mut qs = [0u8; 16];
        qs[15] = 0xF0;
        b.extend(qs);
        let y = deq(GgmlType::Q5_1, &b);
        assert_eq!([y[15], y[30], y[31]], [0.5, 0.5, 31.5]);
    }

    /// Packs 8 six-bit scales and minimums as ggml's Q4_K/Q5_K quantiser does.
    fn pack_scales(sc: [u8; 8], m: [u8; 8]) -> [u8; 12] {
        let mut s = [0u8; 12];
        for j in 0..8 {
            if j < 4 {
                s[j] = sc[j];
                s[j + 4] = m[j];
            } else {
                s[j + 4] = (sc[j] & 0x0F) | ((m[j] & 0x0F) << 4);
                s[j - 4] |= (sc[j] >> 4) << 6;
                s[j] |= (m[j] >> 4) << 6;
            }
        }
        s
    }

    const SC: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 63];
    const MN: [u8; 8] = [0, 1, 2, 3, 4, 5, 6, 40];

    /// The 4-bit part of element `e` of a Q4_K/Q5_K block whose nibble bytes are
    /// `qs[32i + l] = (l % 16) | ((15 − l % 16) << 4)`: elements `64i + l` are low nibbles and
    /// `64i + 32 + l` high ones.
    fn k_nibble(e: usize) -> u8 {
        let l = e % 32;
        if (e / 32).is_multiple_of(2) {
            (l % 16) as u8
        } else {
            15 - (l % 16) as u8
        }
    }

    fn k_qs() -> Vec<u8> {
        (0..128)
            .map(|i| ((i % 32 % 16) | ((15 - i % 32 % 16) << 4)) as u8)
            .collect()
    }

    #[test]
    fn q4_k_block() {
        let mut b = F16_ONE.to_vec();
        b.extend(F16_HALF);
        b.extend(pack_scales(SC, MN));
        b.extend(k_qs());
        let y = deq(GgmlType::Q4K, &b);
        // Worked by hand: element 5 is sub-block 0 (scale 1, min 0), q = 5: 5.
        // Element 224 is sub-block 7 (scale 63, min 40), high nibble of l = 0, q = 15:
        // 1 · 63 · 15 − 0.5 · 40 = 925. Element 255: q = 0, so −20.
        assert_eq!([y[5], y[224], y[255]], [5.0, 925.0, -20.0]);
        for (e, &v) in y.iter().enumerate() {
            let s = e / 32;
            let expected = SC[s] as f32 * k_nibble(e) as f32 - 0.5 * MN[s] as f32;
            assert_eq!(v, expected, "element {e}");
        }
    }

    #[test]
    fn q5_k_block() {
        let mut b = F16_ONE.to_vec();
        b.extend(F16_HALF);
        b.extend(pack_scales(SC, MN));
        // qh[31] = 0xFF: the fifth bit is set for elements 64i + 31 and 64i + 63, i = 0..4.
        let mut qh = [0u8; 32];
        qh[31] = 0xFF;
        b.extend(qh);
        b.extend(k_qs());
        let y = deq(GgmlType::Q5K, &b);
        // Element 255: sub-block 7, q = 0 + 16: 63 · 16 − 20 = 988. Element 254: q = 1, 43.
        assert_eq!([y[254], y[255]], [43.0, 988.0]);
        for (e, &v) in y.iter().enumerate() {
            let s = e / 32;
            let high = if e % 32 == 31 { 16.0 } else { 0.0 };
            let expected = SC[s] as f32 * (k_nibble(e) as f32 + high) - 0.5 * MN[s] as f32;
            assert_eq!(v, expected, "element {e}");
        }
    }

    #[test]
    fn q6_k_block() {
        let ql: Vec<u8> = (0..128).map(|i| (i * 7 % 256) as u8).collect();
        let qh: Vec<u8> = (0..64).map(|i| (i * 13 % 256) as u8).collect();
        let sc: Vec<i8> = (0..16).map(|k| k as i8 - 8).collect();
        let mut b = ql.clone();
        b.extend(&qh);
        b.extend(sc.iter().map(|&s| s as u8));
        b.extend(F16_HALF);
        let y = deq(GgmlType::Q6K, &b);
        // Element 0: ql[0] = 0, qh[0] = 0, so q = −32; scale sc[0] = −8: 0.5 · −8 · −32 = 128.
        assert_eq!(y[0], 128.0);
        // Element e lies in half h = e / 128, quarter k = (e % 128) / 32, column l = e % 32.
        for (e, &v) in y.iter().enumerate() {
            let (h, k, l) = (e / 128, e % 128 / 32, e % 32);
            let byte = ql[64 * h + l + 32 * (k % 2)];
            let low = if k < 2 { byte & 0x0F } else { byte >> 4 };
            let high = (qh[32 * h + l] >> (2 * k)) & 3;
            let q = ((low | (high << 4)) as i32 - 32) as f32;
            let scale = sc[8 * h + l / 16 + 2 * k] as f32;
            assert_eq!(v, 0.5 * scale * q, "element {e}");
        }
    }

    #[test]
    fn bad_lengths_and_types_are_errors() {
        let mut out = [0.0f32; 32];
        assert!(matches!(
            dequantize_row(GgmlType::Q8_0, &[0u8; 33], &mut out),
            Err(Error::Dequantize {
                bytes: 33,
                elements: 32,
                ..
            })
        ));
        let mut odd = [0.0f32; 31];
        assert!(matches!(
            dequantize_row(GgmlType::Q8_0, &[0u8; 34], &mut odd),
            Err(Error::Dequantize { .. })
        ));
        let mut k = [0.0f32; 256];
        assert!(matches!(
            dequantize_row(GgmlType::Q2K, &[0u8; 84], &mut k),
            Err(Error::Dequantize {
                ty: GgmlType::Q2K,
                ..
            })
        ));
    }

    #[test]
    fn whole_tensor_from_a_file() {
        let bytes = nextok_gguf::write::GgufWriter::new()
            .tensor_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0])
            .to_bytes();
        let file = nextok_gguf::GgufFile::from_bytes(bytes).unwrap();
        assert_eq!(
            dequantize_tensor(file.tensor("w").unwrap()).unwrap(),
            [1.0, 2.0, 3.0, 4.0]
        );
    }
}
