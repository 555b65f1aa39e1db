//! Read GGUF model files: typed metadata, memory-mapped zero-copy tensor views, and the GGML
//! tensor types with their block layouts.
//!
//! GGUF is the single-file format of llama.cpp: a header, a list of typed key/value metadata
//! entries (architecture, hyper-parameters, the tokenizer's vocabulary and merges, the chat
//! template), a list of tensor descriptions, and then the tensors' bytes, aligned. This crate
//! parses the first three completely and validates every tensor's extent against the file, so that
//! a tensor view handed out later is always in bounds. Versions 2 and 3 are supported.
//!
//! # Example
//!
//! ```
//! use nextok_gguf::{GgufFile, GgmlType, Value};
//!
//! // A tiny file built in memory: one metadata entry and one 2 × 2 F32 tensor.
//! let bytes = nextok_gguf::write::GgufWriter::new()
//!     .metadata("general.architecture", Value::String("llama".into()))
//!     .tensor_f32("w", &[2, 2], &[1.0, 2.0, 3.0, 4.0])
//!     .to_bytes();
//! let file = GgufFile::from_bytes(bytes)?;
//! assert_eq!(file.metadata().get_str("general.architecture")?, "llama");
//! let w = file.tensor("w")?;
//! assert_eq!(w.info.ggml_type, GgmlType::F32);
//! assert_eq!(w.info.dims, vec![2, 2]);
//! assert_eq!(w.data.len(), 16);
//! # Ok::<(), nextok_gguf::Error>(())
//! ```
//!
//! # Untrusted input
//!
//! Every count, length, offset and type in the file is checked before it is used; a malformed file
//! gives an [`Error`] that says what was wrong and at which byte offset, never a panic, and never
//! an allocation larger than the file itself.

mod error;
mod metadata;
mod reader;
mod types;
pub mod write;

pub use error::Error;
pub use metadata::{Array, Metadata, Value, ValueType};
pub use types::GgmlType;

use std::path::Path;

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// The alignment of tensor data when the file does not set `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Where the bytes of a file live: a read-only memory map, or a buffer in memory.
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// The description of one tensor, as the file gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name in the checkpoint, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGML order: `dims[0]` is the innermost (contiguous) one. A weight matrix
    /// with `n` output rows of `k` inputs each is `[k, n]`.
    pub dims: Vec<u64>,
    /// The element type.
    pub ggml_type: GgmlType,
    /// Offset of the tensor's first byte, relative to the start of the data section.
    pub offset: u64,
    /// Number of bytes the tensor occupies.
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements: the product of the dimensions.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A tensor's description and its bytes, borrowed from the file (zero-copy).
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// The tensor's description.
    pub info: &'a TensorInfo,
    /// The tensor's raw bytes, in its GGML block layout.
    pub data: &'a [u8],
}

/// An opened GGUF file: its metadata, its tensor descriptions, and access to the tensors' bytes.
pub struct GgufFile {
    backing: Backing,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    data_start: u64,
    alignment: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata_entries", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("data_start", &self.data_start)
            .finish()
    }
}

impl GgufFile {
    /// Opens and memory-maps a GGUF file, and checks its structure. Only a regular file is
    /// opened (a link is followed): anything else is [`Error::NotARegularFile`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let io = |source: std::io::Error| Error::Io {
            path: path.display().to_string(),
            message: source.to_string(),
        };
        let not_regular = |kind: std::fs::FileType| Error::NotARegularFile {
            path: path.display().to_string(),
            kind: file_kind(&kind),
        };
        // Only a regular file is opened and mapped: opening a FIFO blocks until a writer comes,
        // and a device such as /dev/zero maps without end. The path is checked before opening
        // (so a FIFO is never opened), and the opened file again (so a path swapped in between
        // cannot slip by).
        let kind = std::fs::metadata(path).map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(not_regular(kind));
        }
        let file = std::fs::File::open(path).map_err(io)?;
        let kind = file.metadata().map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(not_regular(kind));
        }
        // SAFETY: the map is read-only. A file changed by another process while mapped could
        // change the bytes under us; every read of the map is bounds-checked, so that can give
        // wrong numbers but never undefined behaviour in this crate's own code.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
            path: path.display().to_string(),
            message: source.to_string(),
        })?;
        Self::from_backing(Backing::Mmap(map))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, Error> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<Self, Error> {
        let parsed = reader::parse(backing.bytes())?;
        Ok(GgufFile {
            backing,
            version: parsed.version,
            metadata: parsed.metadata,
            tensors: parsed.tensors,
            data_start: parsed.data_start,
            alignment: parsed.alignment,
        })
    }

    /// The file's GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata entries.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Every tensor's description, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The alignment of tensor data in this file.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// Asks the kernel to back the mapped file with huge pages where it can (Linux
    /// `MADV_HUGEPAGE`). Returns whether the advice was accepted. A no-op for files in memory.
    pub fn advise_huge_pages(&self) -> bool {
        match &self.backing {
            #[cfg(target_os = "linux")]
            Backing::Mmap(m) => m.advise(memmap2::Advice::HugePage).is_ok(),
            _ => false,
        }
    }

    /// Looks a tensor up by name.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, Error> {
        let info = self
            .tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::MissingTensor {
                name: name.to_owned(),
            })?;
        Ok(self.view(info))
    }

    /// The view of a tensor description that belongs to this file.
    pub fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        // The parser checked that every tensor lies inside the file, so this cannot go out of
        // range for an `info` taken from `self.tensors()`; for a foreign one, clamp rather than
        // panic.
        let bytes = self.backing.bytes();
        let start = (self.data_start + info.offset).min(bytes.len() as u64) as usize;
        let end = (self.data_start + info.offset + info.size).min(bytes.len() as u64) as usize;
        TensorView {
            info,
            data: &bytes[start..end],
        }
    }
}

/// What kind of file `t` is, in words ("a FIFO", "a character device", "a folder", ...), for
/// messages about a path that should be a regular file. Every nextok crate that opens a user's
/// file (the GGUF reader, the facade's model check, the command's schema and grammar files) says
/// it with these words.
pub fn file_kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a folder"
    } else if t.is_file() {
        "a regular file"
    } else {
        "an unknown kind of file"
    }
}
