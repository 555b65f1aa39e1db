//! The nextok inference library: the generation loop from prompt to streamed text, over the
//! nextok crates.
//!
//! This is the crate to depend on to run a model. It puts the other crates together in the
//! order of the specification's loop ("The big picture"): chat template → tokenize → one prefill
//! pass → one decode pass per token with the KV cache → constraint mask → sampling chain → stop
//! conditions → streaming detokenizer. The expert crates are re-exported under short names
//! ([`gguf`], [`tokenizer`], [`model`], [`kv_cache`], [`sampling`], [`stopping`],
//! [`constraints`]) for what this facade does not cover.
//!
//! # Contents
//!
//! - [`Engine`]: a loaded model, its tokenizer and chat template; [`Engine::generate`] starts a
//!   [`Generation`], an iterator of [`Event`]s: each token as it is chosen ([`TokenEvent`]: id,
//!   text, log-probability, alternatives), then a [`Completion`] with the whole text, the
//!   [`Stop`] (reason, and which end token or stop sequence), [`Usage`] and [`Timings`] (time to
//!   first token, prefill and decode tokens/s, time per output token, KV cache bytes).
//! - [`GenerateOptions`]: sampling ([`sampling::SamplingParams`], seeded: the same prompt,
//!   options and seed give the same tokens), max tokens, stop sequences, `n` completions (which
//!   share the prompt's cache through a copy-on-write fork and decode in one batched pass),
//!   beam search ([`BeamOptions`]) and constrained decoding ([`ConstraintSpec`]).
//! - [`Chat`]: a conversation that goes on and reuses the cache of everything said so far.
//! - [`Engine::logits`], [`Engine::score`] and [`Engine::classify`]: the model's numbers
//!   without generating.
//! - [`default_model_path`]: where the default model (SmolLM2-135M-Instruct, Q4_1) lives, and
//!   [`DEFAULT_MODEL_SHA256`], [`DEFAULT_MODEL_PACKAGE`]: which file it is. This library starts no
//!   process and downloads nothing: the `nextok` command (`nextok-cli`) fetches the default model
//!   on first use, and `cargo xtask fetch-model` runs that fetch.
//! - [`plan`]: the specification's cost model (memory, KV cache, prefill and decode time).
//!
//! # Crate features
//!
//! - `cuda`: [`Device::Cuda`] in [`EngineOptions`] runs the forward pass on an NVIDIA GPU through
//!   `nextok-cuda` (builds without a CUDA toolkit; running needs the driver and NVRTC). Without
//!   the feature, or without a usable GPU, loading an engine for it is
//!   [`Error::DeviceUnavailable`]; the CPU ([`Device::Cpu`]) is the default either way.
//!
//! # Example
//!
//! ```no_run
//! use nextok::{Engine, EngineOptions, Event, GenerateOptions, Prompt};
//!
//! // Any GGUF file of the Llama family; `nextok::default_model_path()` names the default model's
//! // place (the `nextok` command fetches it there on first use).
//! let engine = Engine::load("SmolLM2-135M-Instruct.Q4_1.gguf", &EngineOptions::default())?;
//! let prompt = Prompt::chat(None, "Translate to Italian: I love you very much");
//! for event in engine.generate(&prompt, &GenerateOptions::default())? {
//!     match event? {
//!         Event::Token(t) => print!("{}", t.text),
//!         Event::Done(c) => eprintln!(
//!             "\n{:?}, {:.1} tokens/s",
//!             c.stop.reason(),
//!             c.timings.decode_tokens_per_s
//!         ),
//!     }
//! }
//! # Ok::<(), nextok::Error>(())
//! ```
//!
//! The default model's path follows the XDG rule, the same as `cargo xtask fetch-model`, and an
//! empty `NEXTOK_MODEL` is an error rather than a silent default:
//!
//! ```
//! let path = nextok::default_model_path_from(None, Some("/var/cache".into()), None)?;
//! assert_eq!(
//!     path,
//!     std::path::Path::new("/var/cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
//! );
//! assert_eq!(
//!     nextok::default_model_path_from(Some("".into()), None, None),
//!     Err(nextok::Error::EmptyNextokModel)
//! );
//! # Ok::<(), nextok::Error>(())
//! ```
//!
//! # Invariants
//!
//! - The engine is immutable; every sequence's state is a KV cache owned by a generation or a
//!   chat.
//! - Randomness comes only from the seed in the sampling options.
//! - A prompt that does not leave room for one token of answer is refused before the model runs.

mod chat;
mod default_model;
mod engine;
mod error;
mod generate;
mod model_path;
pub mod plan;
pub mod seq2seq;

pub use chat::Chat;
pub use engine::{ConstraintSpec, Device, Engine, EngineOptions, LabelScore, Prompt, Score};
pub use generate::{
    Alternative, BeamOptions, Completion, Event, GenerateOptions, Generation, Timings, TokenEvent,
    Usage,
};
pub use nextok_constraints as constraints;
pub use nextok_kv_cache as kv_cache;
pub use nextok_model as model;
pub use nextok_stopping::{Stop, StopReason};
pub use nextok_tokenizer as tokenizer;

pub use default_model::{DEFAULT_MODEL_FILE, DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_SHA256};
pub use error::Error;
pub use model_path::{default_model_path, default_model_path_from};
pub use nextok_gguf as gguf;
pub use nextok_sampling as sampling;
pub use nextok_stopping as stopping;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
