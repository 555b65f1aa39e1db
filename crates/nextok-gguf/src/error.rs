use crate::ValueType;

/// What can go wrong when reading a GGUF file. Each variant says what was wrong and, where the
/// problem is in the file, at which byte offset.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or mapped.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path that was opened.
        path: String,
        /// The operating system's message.
        message: String,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: the first four bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first bytes of the file (fewer than four if it is that short).
        found: Vec<u8>,
    },
    /// The version is one we do not read.
    #[error("unsupported GGUF version {version} (supported: 2 and 3)")]
    UnsupportedVersion {
        /// The version in the header.
        version: u32,
    },
    /// The file ends in the middle of something.
    #[error(
        "the file ends at byte {end}, in the middle of the {what} at byte {offset} ({needed} bytes, {available} remain): it is truncated (an interrupted download?)",
        end = offset + available
    )]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// How many bytes it needs.
        needed: u64,
        /// How many bytes remain.
        available: u64,
    },
    /// A metadata value type code that GGUF does not define.
    #[error("unknown metadata value type {code} for key `{key}` at byte {offset}")]
    UnknownValueType {
        /// The key whose value has the bad type.
        key: String,
        /// The type code.
        code: u32,
        /// Where the type code is.
        offset: u64,
    },
    /// A string that is not UTF-8.
    #[error("invalid UTF-8 in {what} at byte {offset}")]
    InvalidUtf8 {
        /// What the string is (a key, a value, a tensor name).
        what: &'static str,
        /// Where the string starts.
        offset: u64,
    },
    /// A count or length says that more is coming than the file holds: each element takes at
    /// least some bytes, and the file ends before that many could fit.
    #[error(
        "the file ends at byte {file_len}, but the {what} at byte {offset} is {value}, which needs at least {needed} more bytes: it is truncated (an interrupted download?) or corrupt"
    )]
    EndsEarly {
        /// What the count counts.
        what: &'static str,
        /// The count.
        value: u64,
        /// Where the count is.
        offset: u64,
        /// The fewest bytes that many elements take (saturated at `u64::MAX`).
        needed: u64,
        /// The file's length: where it ends.
        file_len: u64,
    },
    /// A tensor's bytes run past the end of the file.
    #[error(
        "the file ends at byte {file_len}, but tensor `{tensor}` takes bytes {start} to {end}: it is truncated (an interrupted download?) or corrupt"
    )]
    TensorPastEnd {
        /// The tensor's name.
        tensor: String,
        /// Where its bytes start in the file (saturated at `u64::MAX`).
        start: u64,
        /// Where they end (saturated at `u64::MAX`).
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The path names something that is not a regular file (a device, a FIFO, a folder): it is
    /// neither mapped nor read, since reading one could block or never end.
    #[error("cannot read {path}: it is {kind}, not a regular file")]
    NotARegularFile {
        /// The path that was opened.
        path: String,
        /// What it is (`a character device`, `a FIFO` ...).
        kind: &'static str,
    },
    /// A count that cannot be right whatever the file's length (too many dimensions, too deep
    /// nesting).
    #[error("implausible {what} {value} at byte {offset}")]
    Implausible {
        /// What the count counts.
        what: &'static str,
        /// The count.
        value: u64,
        /// Where it is.
        offset: u64,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key `{key}`")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A tensor type code we do not know or do not support.
    #[error("tensor `{tensor}` has unsupported type {code}")]
    UnsupportedTensorType {
        /// The tensor's name.
        tensor: String,
        /// The GGML type code.
        code: u32,
    },
    /// A tensor whose shape does not fit its type or is absurd.
    #[error("tensor `{tensor}` has an invalid shape {dims:?}: {reason}")]
    BadShape {
        /// The tensor's name.
        tensor: String,
        /// Its dimensions.
        dims: Vec<u64>,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// A tensor's bytes lie (partly) outside the file, or are misaligned.
    #[error(
        "tensor `{tensor}` at data offset {offset} with {size} bytes is out of range: {reason}"
    )]
    TensorOutOfRange {
        /// The tensor's name.
        tensor: String,
        /// Its offset in the data section.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A tensor name that appears twice.
    #[error("duplicate tensor `{name}`")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// A tensor that was asked for and is not in the file.
    #[error("missing tensor `{name}`")]
    MissingTensor {
        /// The name.
        name: String,
    },
    /// A metadata key that was asked for and is not in the file.
    #[error("missing metadata key `{key}`")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value of another type than the one asked for.
    #[error("metadata key `{key}` has type {found:?}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What the caller expected.
        expected: &'static str,
        /// What the file has.
        found: ValueType,
    },
    /// A metadata value of the right type but out of the range the caller needs.
    #[error("metadata key `{key}` has value {value}, which does not fit in {expected}")]
    OutOfRange {
        /// The key.
        key: String,
        /// The value, printed.
        value: String,
        /// The type or range that was needed.
        expected: &'static str,
    },
}
