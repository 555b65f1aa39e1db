//! The seam between the generation loop and a model: what the loop asks of a model, and the
//! Llama family on a compute backend as the implementation that ships.

use crate::Error;
use nextok_kv_cache::{KvCache, KvPool, KvType};
use nextok_model::{Backend, LlamaModel, Sequence};

/// What the facade's loop needs of a model: a forward pass over a batch of sequences, each with
/// its own KV cache, that returns logits; an empty cache of the model's layout; the vocabulary
/// size; and the context window.
///
/// [`Engine`](crate::Engine) holds a `Box<dyn LanguageModel>`, so everything it does
/// (generation, `n` completions, beam search, chats, scoring, classification) runs on any
/// implementation. [`LlamaOnBackend`] is the one [`Engine::load`](crate::Engine::load) builds
/// from a GGUF file; [`Engine::from_parts`](crate::Engine::from_parts) takes any other.
///
/// The batch of sequences is the primitive on purpose: a prefill is one sequence of many tokens,
/// a decode round of `n` completions or beams is many sequences of one token each, and a
/// scheduler that batches requests hands the model one batch per step.
///
/// # Contract
///
/// The loop relies on these, and its tests check them through it:
///
/// - **Positions.** The new tokens of a [`Sequence`] take the positions that follow the ones its
///   cache holds (`cache.len()..cache.len() + tokens.len()`); the call appends their keys and
///   values to the cache and nothing else.
/// - **Logits.** The result has one entry per sequence, in order: empty for
///   [`Logits::None`](nextok_model::Logits::None), `vocab_size()` numbers for
///   [`Logits::Last`](nextok_model::Logits::Last), and `tokens.len() × vocab_size()` numbers,
///   position after position, for [`Logits::All`](nextok_model::Logits::All).
/// - **Exactness.** A position's logits depend only on the tokens up to it, never on how the work
///   was split: a prefill, token-by-token decoding, a forked cache and a batch beside other
///   sequences give the same bits. This is what lets a chat reuse its cache and `n` completions
///   share the prompt's without changing an answer.
/// - **Errors, not panics.** A token outside the vocabulary, a cache of another layout or a
///   sequence past the context window is an [`Error`], and the caches then hold what they held
///   before the call.
pub trait LanguageModel: Send + Sync + std::fmt::Debug {
    /// Runs each sequence's new tokens after what its cache holds, appends their keys and values
    /// to the cache, and returns the logits each sequence asks for (see the contract above).
    fn forward(&self, batch: &mut [Sequence<'_>]) -> Result<Vec<Vec<f32>>, Error>;

    /// An empty KV cache in this model's layout (layers, key/value heads, head width), its
    /// numbers stored as `kv_type`. A model checks its dimensions when it is built, so this
    /// cannot fail.
    fn new_cache(&self, kv_type: KvType) -> KvCache;

    /// A pool of KV blocks in this model's layout under `budget_bytes`, its numbers stored as
    /// `kv_type` where the model's backend reads them: the caches of many sequences, with
    /// prefix caching, for a scheduler. By default a host pool of [`LanguageModel::new_cache`]'s
    /// layout; a budget smaller than one block is an error.
    fn new_pool(&self, kv_type: KvType, budget_bytes: u64) -> Result<KvPool, Error> {
        let config = *self.new_cache(kv_type).config();
        KvPool::new(config, budget_bytes).map_err(|e| nextok_model::Error::from(e).into())
    }

    /// Tokens in the vocabulary: the length of one row of logits.
    fn vocab_size(&self) -> usize;

    /// Tokens the model can see at once, prompt and answer together.
    fn context_window(&self) -> usize;

    /// Host threads that [`LanguageModel::run_host_parts`] splits a job over; 1 by default.
    fn host_parts(&self) -> usize {
        1
    }

    /// Runs `job(part)` once for every `part < host_parts()` and returns when all are done, on
    /// the threads the model's backend keeps between passes where it has them (the CPU
    /// backend's pool): the scheduler samples a step's sequences this way. By default on the
    /// calling thread, one part after another.
    fn run_host_parts(&self, job: &(dyn Fn(usize) + Sync)) {
        for part in 0..self.host_parts() {
            job(part);
        }
    }
}

/// A Llama-family model ([`LlamaModel`]) and the compute backend its forward pass runs on: the
/// [`LanguageModel`] that [`Engine::load`](crate::Engine::load) builds.
pub struct LlamaOnBackend {
    model: LlamaModel,
    backend: Box<dyn Backend>,
}

impl LlamaOnBackend {
    /// The model, run on `backend`.
    pub fn new(model: LlamaModel, backend: Box<dyn Backend>) -> Self {
        LlamaOnBackend { model, backend }
    }

    /// The model.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// The backend.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }
}

impl std::fmt::Debug for LlamaOnBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaOnBackend")
            .field("config", self.model.config())
            .finish_non_exhaustive()
    }
}

impl LanguageModel for LlamaOnBackend {
    fn forward(&self, batch: &mut [Sequence<'_>]) -> Result<Vec<Vec<f32>>, Error> {
        Ok(self.model.forward(self.backend.as_ref(), batch)?)
    }

    /// A cache where the backend keeps its numbers: a private pool of the backend's storage
    /// with no budget to speak of (device memory for a GPU backend, so that attention reads the
    /// blocks in place), or the model's host cache if the backend makes no pool.
    fn new_cache(&self, kv_type: KvType) -> KvCache {
        self.model
            .new_pool(self.backend.as_ref(), kv_type, u64::MAX)
            .map(|pool| pool.new_cache())
            .unwrap_or_else(|_| self.model.new_cache(kv_type))
    }

    fn new_pool(&self, kv_type: KvType, budget_bytes: u64) -> Result<KvPool, Error> {
        Ok(self
            .model
            .new_pool(self.backend.as_ref(), kv_type, budget_bytes)?)
    }

    fn vocab_size(&self) -> usize {
        self.model.config().vocab
    }

    fn context_window(&self) -> usize {
        self.model.config().context
    }

    fn host_parts(&self) -> usize {
        self.backend.host_parts()
    }

    fn run_host_parts(&self, job: &(dyn Fn(usize) + Sync)) {
        self.backend.run_host_parts(job);
    }
}
