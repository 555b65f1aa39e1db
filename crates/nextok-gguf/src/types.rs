/// The element types of GGML tensors, with their block layouts.
///
/// Quantised types store elements in blocks: a block of [`GgmlType::block_elements`] elements
/// takes [`GgmlType::block_bytes`] bytes. Plain types are blocks of one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    BF16,
    /// 32 elements: an f16 scale `d` and 32 4-bit values; x = d · (q − 8).
    Q4_0,
    /// 32 elements: f16 scale `d`, f16 minimum `m`, 32 4-bit values; x = d · q + m.
    Q4_1,
    /// 32 elements: f16 scale, 32 high bits, 32 4-bit low parts; x = d · (q − 16).
    Q5_0,
    /// 32 elements: f16 scale and minimum, 32 high bits, 32 low nibbles; x = d · q + m.
    Q5_1,
    /// 32 elements: an f16 scale `d` and 32 signed bytes; x = d · q.
    Q8_0,
    /// 256 elements in 16 sub-blocks, 2-bit values with 4-bit scales and minimums.
    Q2K,
    /// 256 elements in 16 sub-blocks, 3-bit values with 6-bit scales.
    Q3K,
    /// 256 elements in 8 sub-blocks of 32, 4-bit values with 6-bit scales and minimums.
    Q4K,
    /// 256 elements in 8 sub-blocks of 32, 5-bit values with 6-bit scales and minimums.
    Q5K,
    /// 256 elements in 16 sub-blocks of 16, 6-bit values with 8-bit scales.
    Q6K,
    /// 256 elements: an f32 scale, 256 signed bytes and 16 partial sums (used for activations).
    Q8K,
}

impl GgmlType {
    /// The type for a GGML type code, if we know it.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    /// The GGML type code.
    pub fn code(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Q8K => 15,
            GgmlType::BF16 => 30,
        }
    }

    /// Elements per block.
    pub fn block_elements(self) -> u64 {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                32
            }
            GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q2K => 84,
            GgmlType::Q3K => 110,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
            GgmlType::Q8K => 292,
        }
    }

    /// Bytes taken by `elements` elements, or `None` if they are not a whole number of blocks
    /// or the size overflows.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        if !elements.is_multiple_of(self.block_elements()) {
            return None;
        }
        (elements / self.block_elements()).checked_mul(self.block_bytes())
    }
}
