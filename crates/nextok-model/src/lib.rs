//! The forward pass: Llama-family decoder-only transformers over GGUF or safetensors weights, with prefill,
//! decode and batching of several sequences, exact and reproducible.
//!
//! # Manual
//!
//! - [`LlamaModel`] loads a GGUF checkpoint (memory-mapped; weight matrices are read in place and
//!   dequantised on the fly, never copied) and checks every tensor's presence, shape and type.
//!   Bad files give an [`Error`] that says what and where. Unquantised Hugging Face checkpoints
//!   (`config.json` + `model.safetensors`, F32/F16/BF16) load with
//!   [`LlamaModel::open_safetensors`] through the same checks.
//! - The model is immutable. A sequence's state is its [`KvCache`](nextok_kv_cache::KvCache)
//!   ([`LlamaModel::new_cache`]). One [`LlamaModel::forward`] call takes new tokens for one or
//!   more sequences ([`Sequence`]), appends their keys and values to the caches, and returns the
//!   logits asked for ([`Logits::Last`] to generate, [`Logits::All`] to score).
//! - [`EncoderDecoder`] is the specification's encoder–decoder base model (6 + 6 layers,
//!   d_model 512, 8 heads, feed-forward 2048) with seeded random weights: the encoder runs once,
//!   the cross-attention keys and values are computed once ([`EncoderDecoder::encode`]) and
//!   reused at every decoder step ([`EncoderDecoder::decode`]).
//! - Arithmetic runs on a [`Backend`]: [`CpuBackend`] here, with any number of threads.
//!
//! # Exactness
//!
//! Activations are f32 and weights are the exact dequantised values of the file; nothing is
//! rounded to 8 bits. Every kernel computes each output number in one fixed order that depends
//! only on its own inputs, so a position's logits are **bit-identical** whether it is computed in
//! one prefill, token by token with the cache, in chunks, beside other sequences in a batch, or
//! with any number of threads.
//!
//! ```
//! use nextok_model::{testing::RandomLlama, CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};
//! use nextok_kv_cache::KvType;
//!
//! let bytes = RandomLlama::default().to_gguf(7);
//! let file = nextok_gguf::GgufFile::from_bytes(bytes)?;
//! let model = LlamaModel::from_gguf(file, LoadOptions::default())?;
//! let backend = CpuBackend::new(1);
//!
//! // Prefill three tokens, then decode one: the cache makes the second call process 1 position.
//! let mut cache = model.new_cache(KvType::F32);
//! let out = model.forward(&backend, &mut [Sequence { cache: &mut cache, tokens: &[1, 2, 3], logits: Logits::Last }])?;
//! assert_eq!(out[0].len(), model.config().vocab);
//! model.forward(&backend, &mut [Sequence { cache: &mut cache, tokens: &[4], logits: Logits::Last }])?;
//! assert_eq!((cache.len(), model.positions_processed()), (4, 4));
//! # Ok::<(), nextok_model::Error>(())
//! ```

mod backend;
mod config;
mod encdec;
mod error;
mod llama;
mod safetensors;
pub mod testing;

pub use backend::{AttendEntry, Backend, Buffer, CpuBackend, Mask, QMatrix, Rotary};
pub use config::{LlamaConfig, RopeOrdering};
pub use encdec::{CrossAttention, DecoderSequence, EncDecConfig, EncoderDecoder};
pub use error::Error;
pub use llama::{LlamaModel, LoadOptions, Logits, Sequence};
pub use nextok_kernels::Layout;
