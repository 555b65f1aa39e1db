//! The crate's one error type.

/// What can go wrong when starting the CUDA backend or running a kernel.
///
/// The driver's and NVRTC's own error values are turned into their names and messages here, so
/// that no third-party type appears in this crate's API.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA library could not be found (no NVIDIA driver installed, or not on the loader's
    /// path). Nothing was called, so nothing panicked.
    #[error("CUDA is not available: {library} was not found ({hint})")]
    NoCuda {
        /// The library looked for: `libcuda` (the driver) or `libnvrtc` (the run-time compiler).
        library: &'static str,
        /// What to install or set.
        hint: &'static str,
    },
    /// The driver is present but has no device with this ordinal.
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoDevice {
        /// The device asked for.
        ordinal: usize,
        /// How many devices the driver sees.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver call `{call}` failed: {message}")]
    Driver {
        /// What was being done (`cuInit`, `allocate`, `launch matmul_q4_1` ...).
        call: String,
        /// The driver's error name and message.
        message: String,
    },
    /// NVRTC refused the kernel source (a bug in this crate, or an NVRTC too old for it).
    #[error("NVRTC could not compile the kernels: {message}")]
    Compile {
        /// NVRTC's status and compilation log.
        message: String,
    },
    /// A weight matrix the backend cannot prepare (its type cannot be dequantised, or its bytes
    /// do not match its shape).
    #[error("cannot upload a {rows} × {cols} matrix of {ty:?}: {reason}")]
    BadMatrix {
        /// The storage type.
        ty: nextok_gguf::GgmlType,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// What is wrong.
        reason: String,
    },
    /// A tensor the device-resident model needs is not in the model's GGUF file (a safetensors
    /// checkpoint keeps its weights elsewhere; use [`CudaBackend`](crate::CudaBackend) with the
    /// model's own forward pass instead).
    #[error("tensor `{name}` is not in the model's GGUF file")]
    MissingTensor {
        /// The tensor's name.
        name: String,
    },
    /// A token id outside the vocabulary.
    #[error("token {token} is outside the vocabulary of {vocab}")]
    TokenOutOfRange {
        /// The id.
        token: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A device cache without room for the new tokens.
    #[error("the device cache holds {capacity} positions, and {needed} are needed")]
    CacheFull {
        /// Positions the cache was made for.
        capacity: usize,
        /// Positions the call needs.
        needed: usize,
    },
    /// A device cache made for a model of another shape.
    #[error(
        "the device cache has {found_layers} layers of {found_row} numbers per position, \
         the model needs {expected_layers} of {expected_row}"
    )]
    IncompatibleCache {
        /// The model's layers.
        expected_layers: usize,
        /// The model's kv_heads × head_dim.
        expected_row: usize,
        /// The cache's layers.
        found_layers: usize,
        /// The cache's numbers per position and layer.
        found_row: usize,
    },
}

impl Error {
    /// A driver failure, with the driver's error name and message.
    pub(crate) fn driver(call: impl Into<String>, e: cudarc::driver::DriverError) -> Self {
        Error::Driver {
            call: call.into(),
            message: format!("{e:?}"),
        }
    }
}
