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
