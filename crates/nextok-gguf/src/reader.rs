//! The GGUF parser: header, metadata and tensor descriptions, every read bounds-checked.

use crate::{
    Array, Error, GgmlType, Metadata, TensorInfo, Value, ValueType, DEFAULT_ALIGNMENT, MAGIC,
};

/// Arrays nested deeper than this are refused: no real file nests at all, and a crafted one must
/// not exhaust the stack.
const MAX_NESTING: u32 = 8;
/// No tensor has more dimensions than this in GGML.
const MAX_DIMS: u32 = 4;

pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub data_start: u64,
    pub alignment: u64,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
        if n > self.remaining() {
            return Err(Error::Truncated {
                what,
                offset: self.pos as u64,
                needed: n as u64,
                available: self.remaining() as u64,
            });
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Error> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of elements that each take at least `min_bytes`: it cannot exceed what is left.
    fn count(&mut self, what: &'static str, min_bytes: usize) -> Result<usize, Error> {
        let offset = self.pos as u64;
        let n = self.u64(what)?;
        let limit = (self.remaining() / min_bytes.max(1)) as u64;
        if n > limit {
            return Err(Error::EndsEarly {
                what,
                value: n,
                offset,
                needed: n.saturating_mul(min_bytes as u64),
                file_len: self.bytes.len() as u64,
            });
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &'static str) -> Result<String, Error> {
        let offset = self.pos as u64;
        let len = self.count(what, 1)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::InvalidUtf8 { what, offset })
    }
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, Error> {
    let mut c = Cursor { bytes, pos: 0 };
    if bytes.len() < 4 || bytes[..4] != MAGIC {
        return Err(Error::BadMagic {
            found: bytes[..bytes.len().min(4)].to_vec(),
        });
    }
    c.pos = 4;
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(Error::UnsupportedVersion { version });
    }
    // A tensor description takes at least 8 + 4 + 4 + 8 bytes, a metadata entry at least 8 + 4 + 1.
    let tensor_count = c.count("tensor count", 24)?;
    let kv_count = c.count("metadata entry count", 13)?;

    let mut metadata = Metadata::default();
    for _ in 0..kv_count {
        let key = c.string("metadata key")?;
        let type_offset = c.pos as u64;
        let code = c.u32("metadata value type")?;
        let ty = ValueType::from_code(code).ok_or_else(|| Error::UnknownValueType {
            key: key.clone(),
            code,
            offset: type_offset,
        })?;
        let value = read_value(&mut c, ty, &key, 0)?;
        metadata.insert(key, value)?;
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(_) => {
            let a = metadata.get_u64("general.alignment")?;
            if a == 0 || !a.is_power_of_two() {
                return Err(Error::OutOfRange {
                    key: "general.alignment".into(),
                    value: a.to_string(),
                    expected: "a power of two",
                });
            }
            a
        }
    };

    let mut tensors = Vec::with_capacity(tensor_count);
    let mut names = std::collections::HashSet::new();
    for _ in 0..tensor_count {
        let name = c.string("tensor name")?;
        let dims_offset = c.pos as u64;
        let n_dims = c.u32("tensor dimension count")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(Error::Implausible {
                what: "tensor dimension count",
                value: n_dims.into(),
                offset: dims_offset,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64("tensor dimension")?);
        }
        let code = c.u32("tensor type")?;
        let ggml_type = GgmlType::from_code(code).ok_or_else(|| Error::UnsupportedTensorType {
            tensor: name.clone(),
            code,
        })?;
        let offset = c.u64("tensor offset")?;
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| Error::BadShape {
                tensor: name.clone(),
                dims: dims.clone(),
                reason: "the element count overflows",
            })?;
        if dims[0] % ggml_type.block_elements() != 0 {
            return Err(Error::BadShape {
                tensor: name.clone(),
                dims,
                reason: "the first dimension is not a whole number of blocks",
            });
        }
        let size = ggml_type
            .bytes_for(elements)
            .ok_or_else(|| Error::BadShape {
                tensor: name.clone(),
                dims: dims.clone(),
                reason: "the byte size overflows",
            })?;
        if !names.insert(name.clone()) {
            return Err(Error::DuplicateTensor { name });
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            size,
        });
    }

    let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    for t in &tensors {
        if t.offset % alignment != 0 {
            return Err(Error::TensorOutOfRange {
                tensor: t.name.clone(),
                offset: t.offset,
                size: t.size,
                reason: "the offset is not aligned",
            });
        }
        let start = data_start.saturating_add(t.offset);
        let end = start.saturating_add(t.size);
        if end > file_len {
            return Err(Error::TensorPastEnd {
                tensor: t.name.clone(),
                start,
                end,
                file_len,
            });
        }
    }

    Ok(Parsed {
        version,
        metadata,
        tensors,
        data_start,
        alignment,
    })
}

fn read_value(c: &mut Cursor<'_>, ty: ValueType, key: &str, depth: u32) -> Result<Value, Error> {
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>("u8 value")?[0]),
        ValueType::I8 => Value::I8(c.array::<1>("i8 value")?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array("u16 value")?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array("i16 value")?)),
        ValueType::U32 => Value::U32(c.u32("u32 value")?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array("i32 value")?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array("f32 value")?)),
        ValueType::Bool => Value::Bool(c.array::<1>("bool value")?[0] != 0),
        ValueType::String => Value::String(c.string("string value")?),
        ValueType::U64 => Value::U64(c.u64("u64 value")?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array("i64 value")?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array("f64 value")?)),
        ValueType::Array => Value::Array(read_array(c, key, depth)?),
    })
}

fn read_array(c: &mut Cursor<'_>, key: &str, depth: u32) -> Result<Array, Error> {
    let type_offset = c.pos as u64;
    if depth >= MAX_NESTING {
        return Err(Error::Implausible {
            what: "array nesting depth",
            value: depth.into(),
            offset: type_offset,
        });
    }
    let code = c.u32("array element type")?;
    let ty = ValueType::from_code(code).ok_or_else(|| Error::UnknownValueType {
        key: key.to_owned(),
        code,
        offset: type_offset,
    })?;
    macro_rules! fixed {
        ($variant:ident, $t:ty, $n:literal, $what:literal) => {{
            let n = c.count("array length", $n)?;
            let raw = c.take(n * $n, $what)?;
            Array::$variant(
                raw.chunks_exact($n)
                    .map(|b| {
                        let mut a = [0u8; $n];
                        a.copy_from_slice(b);
                        <$t>::from_le_bytes(a)
                    })
                    .collect(),
            )
        }};
    }
    Ok(match ty {
        ValueType::U8 => fixed!(U8, u8, 1, "u8 array"),
        ValueType::I8 => fixed!(I8, i8, 1, "i8 array"),
        ValueType::U16 => fixed!(U16, u16, 2, "u16 array"),
        ValueType::I16 => fixed!(I16, i16, 2, "i16 array"),
        ValueType::U32 => fixed!(U32, u32, 4, "u32 array"),
        ValueType::I32 => fixed!(I32, i32, 4, "i32 array"),
        ValueType::F32 => fixed!(F32, f32, 4, "f32 array"),
        ValueType::U64 => fixed!(U64, u64, 8, "u64 array"),
        ValueType::I64 => fixed!(I64, i64, 8, "i64 array"),
        ValueType::F64 => fixed!(F64, f64, 8, "f64 array"),
        ValueType::Bool => {
            let n = c.count("array length", 1)?;
            Array::Bool(c.take(n, "bool array")?.iter().map(|&b| b != 0).collect())
        }
        ValueType::String => {
            let n = c.count("array length", 8)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(c.string("string array element")?);
            }
            Array::String(v)
        }
        ValueType::Array => {
            // Each nested array takes at least its type code and length.
            let n = c.count("array length", 12)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}
