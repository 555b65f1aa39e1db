//! The CUDA backend of nextok: the model crate's [`Backend`](nextok_model::Backend) on one
//! NVIDIA GPU, the whole forward pass with its activations and a paged KV cache in device memory.
//!
//! # Should I use this crate?
//!
//! Only through the `cuda` feature of the `nextok` facade or the `nextok` command
//! (`nextok generate --device cuda`), unless you drive [`LlamaModel`](nextok_model::LlamaModel)
//! yourself. Decode speed is set by how fast the weights can be read once per token (see the
//! specification, "Why decode is limited by memory, not arithmetic"): tens of GB/s on a CPU,
//! several TB/s on a data-centre GPU.
//!
//! # Manual
//!
//! - [`CudaBackend::new`] starts the backend on a device: it loads the driver (`libcuda`) and the
//!   run-time compiler (`libnvrtc`) dynamically, creates a context, and compiles the kernels from
//!   their CUDA C source with NVRTC. Building needs no CUDA toolkit; running needs the driver and
//!   NVRTC. Without them, or without the device, it returns [`Error::NoCuda`] or
//!   [`Error::NoDevice`]; it never panics ([`driver_available`] and [`nvrtc_available`] only ask
//!   the loader).
//! - The backend implements [`Backend`](nextok_model::Backend), so the model's one forward pass
//!   runs on it: pass `&backend` where a [`CpuBackend`](nextok_model::CpuBackend) would go.
//! - Weight matrices go to device memory (plain allocations, no managed memory) the first time
//!   they are used, and stay there ([`CudaBackend::weights_on_device`],
//!   [`CudaBackend::clear_weights`]). Q4_0, Q4_1 and Q8_0 rows keep the file's blocks and are
//!   dequantised in registers; f16, bf16 and f32 keep their numbers; every other type (Q5_0,
//!   Q5_1, K-quants) is dequantised once, exactly, to f32 at upload.
//! - The backend implements every buffer operation of the trait too (embedding rows, RMSNorm,
//!   biases, rotary embeddings, residual additions, SwiGLU, writing the KV cache, attention), so
//!   the model crate's one forward pass keeps its activations in device memory: a call copies in
//!   the new token ids (their embedding rows are read from the matrix on the device, dequantised
//!   exactly as the host does it) and their rotary table, and copies out only the logits asked
//!   for.
//! - The KV cache lives in device memory when it comes from a pool the backend made
//!   ([`Backend::new_pool`](nextok_model::Backend::new_pool), or
//!   [`LlamaModel::new_pool`](nextok_model::LlamaModel::new_pool)): a [`DeviceStorage`] holds
//!   each block as one device allocation, and attention reads a sequence's rows where they are,
//!   block after block of its block table (a kernel argument), with no gather. A cache in host
//!   memory works too: its rows are copied in for each attention call. New keys and values reach
//!   a device cache without leaving the device: the cache's own
//!   [`KvCache::write_rows`](nextok_kv_cache::KvCache::write_rows) keeps its bookkeeping whole
//!   (copy-on-write of shared blocks, done on the device, and which rows are written, for the
//!   prefix cache) and hands back each row's block and slot, and one kernel launch per layer
//!   scatters the step's rows there, rounded to the cache's number type exactly as the host
//!   storage rounds them. A host cache gets its new rows copied out and written row by row.
//!
//! # Exactness
//!
//! The kernels compute each number with the same operations in the same order as the CPU
//! kernels of `nextok-kernels` (the same lanes, fused multiply-adds and reduction trees; NVRTC is
//! told not to contract anything else), so a weight product is meant to give the CPU's bits.
//! Attention differs from the CPU in one step: the exponential, computed in double precision and
//! rounded once, may differ from the CPU's f32 exponential in the last bit; SwiGLU's exponential
//! likewise. RMSNorm sums its squares in double and in order, as the host does, so it gives the
//! host's bits. Each output still depends only on its own inputs, never on how many tokens or
//! sequences share a call. The tests
//! that run on a GPU (`cargo test -p nextok-cuda -- --ignored`) check both claims against the
//! CPU backend stage by stage; without a GPU, `tests/emulated.rs` compiles the kernels' own
//! source as C++ against a CPU emulation of the CUDA built-ins (a thread per CUDA thread,
//! barriers for warp shuffles) and checks the same claims kernel by kernel.
//!
//! # Example
//!
//! ```
//! use nextok_cuda::{CudaBackend, Error};
//! use nextok_kv_cache::KvType;
//! use nextok_model::{testing::RandomLlama, CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};
//!
//! let file = nextok_gguf::GgufFile::from_bytes(RandomLlama::default().to_gguf(7))?;
//! let model = LlamaModel::from_gguf(file, LoadOptions::default())?;
//! match CudaBackend::new(0) {
//!     Ok(gpu) => {
//!         let mut run = |backend: &dyn nextok_model::Backend| {
//!             // A pool in the backend's memory: device memory on the GPU.
//!             let pool = model.new_pool(backend, KvType::F32, 1 << 20)?;
//!             let mut cache = pool.new_cache();
//!             let seq = Sequence { cache: &mut cache, tokens: &[1, 2, 3], logits: Logits::Last };
//!             model.forward(backend, &mut [seq])
//!         };
//!         let (on_gpu, on_cpu) = (run(&gpu)?, run(&CpuBackend::new(1))?);
//!         let diff = on_gpu[0].iter().zip(&on_cpu[0]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
//!         assert!(diff < 1e-3, "GPU and CPU logits differ by {diff}");
//!     }
//!     // No driver, no NVRTC or no GPU: a typed error, and the CPU backend serves instead.
//!     Err(e @ (Error::NoCuda { .. } | Error::NoDevice { .. })) => println!("no GPU: {e}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod error;
mod kernels;
mod ops;
mod storage;

pub use backend::{compile_ptx, driver_available, nvrtc_available, CudaBackend};
pub use error::Error;
pub use kernels::KERNEL_NAMES;
pub use storage::DeviceStorage;
