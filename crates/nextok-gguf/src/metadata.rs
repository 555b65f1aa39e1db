use std::collections::HashMap;

use crate::Error;

/// The type of a metadata value, as GGUF codes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `u8` (code 0).
    U8,
    /// `i8` (code 1).
    I8,
    /// `u16` (code 2).
    U16,
    /// `i16` (code 3).
    I16,
    /// `u32` (code 4).
    U32,
    /// `i32` (code 5).
    I32,
    /// `f32` (code 6).
    F32,
    /// `bool` (code 7).
    Bool,
    /// A UTF-8 string (code 8).
    String,
    /// An array of values of one type (code 9).
    Array,
    /// `u64` (code 10).
    U64,
    /// `i64` (code 11).
    I64,
    /// `f64` (code 12).
    F64,
}

impl ValueType {
    /// The type for a GGUF value type code.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// The GGUF code of this type.
    pub fn code(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // The variants are the GGUF types, named as in `ValueType`.
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value: all elements share one type, so they are stored unboxed.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // The variants are the GGUF types, named as in `ValueType`.
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type of the elements.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as a signed integer, if it is an integer of any width.
    fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }
}

/// The metadata of a file: keys in file order, with lookup by name.
///
/// Typed getters accept any integer width for integers (files in the wild store the same key as
/// `u32` or `u64`) and `f32` or `f64` for floats, and fail with [`Error::WrongType`] otherwise.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Adds an entry; a key that is already present is an error.
    pub fn insert(&mut self, key: String, value: Value) -> Result<(), Error> {
        if self.index.contains_key(&key) {
            return Err(Error::DuplicateKey { key });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of a key, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value, Error> {
        self.get(key).ok_or_else(|| Error::MissingKey {
            key: key.to_owned(),
        })
    }

    fn wrong(key: &str, expected: &'static str, found: &Value) -> Error {
        Error::WrongType {
            key: key.to_owned(),
            expected,
            found: found.value_type(),
        }
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str, Error> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            other => Err(Self::wrong(key, "string", other)),
        }
    }

    /// A boolean value.
    pub fn get_bool(&self, key: &str) -> Result<bool, Error> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            other => Err(Self::wrong(key, "bool", other)),
        }
    }

    /// An integer value of any width that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64, Error> {
        let value = self.require(key)?;
        let wide = value
            .as_i128()
            .ok_or_else(|| Self::wrong(key, "integer", value))?;
        u64::try_from(wide).map_err(|_| Error::OutOfRange {
            key: key.to_owned(),
            value: wide.to_string(),
            expected: "u64",
        })
    }

    /// An integer value of any width that fits in `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32, Error> {
        let wide = self.get_u64(key)?;
        u32::try_from(wide).map_err(|_| Error::OutOfRange {
            key: key.to_owned(),
            value: wide.to_string(),
            expected: "u32",
        })
    }

    /// An integer value of any width that fits in `usize`.
    pub fn get_usize(&self, key: &str) -> Result<usize, Error> {
        let wide = self.get_u64(key)?;
        usize::try_from(wide).map_err(|_| Error::OutOfRange {
            key: key.to_owned(),
            value: wide.to_string(),
            expected: "usize",
        })
    }

    /// A floating-point value (`f32` or `f64`).
    pub fn get_f32(&self, key: &str) -> Result<f32, Error> {
        match self.require(key)? {
            Value::F32(v) => Ok(*v),
            Value::F64(v) => Ok(*v as f32),
            other => Err(Self::wrong(key, "float", other)),
        }
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Result<&Array, Error> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(Self::wrong(key, "array", other)),
        }
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<&[String], Error> {
        match self.get_array(key)? {
            Array::String(v) => Ok(v),
            other => Err(Error::WrongType {
                key: key.to_owned(),
                expected: "array of strings",
                found: other.element_type(),
            }),
        }
    }

    /// An array of `f32`.
    pub fn get_f32_array(&self, key: &str) -> Result<&[f32], Error> {
        match self.get_array(key)? {
            Array::F32(v) => Ok(v),
            other => Err(Error::WrongType {
                key: key.to_owned(),
                expected: "array of f32",
                found: other.element_type(),
            }),
        }
    }

    /// An array of `i32`.
    pub fn get_i32_array(&self, key: &str) -> Result<&[i32], Error> {
        match self.get_array(key)? {
            Array::I32(v) => Ok(v),
            other => Err(Error::WrongType {
                key: key.to_owned(),
                expected: "array of i32",
                found: other.element_type(),
            }),
        }
    }
}
