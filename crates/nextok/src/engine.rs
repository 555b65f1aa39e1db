//! A loaded model with its tokenizer and chat template: what every generation needs.

use crate::grammar_cache::{
    GrammarCache, GrammarCacheStats, Kind, DEFAULT_GRAMMAR_CACHE_BYTES,
    DEFAULT_GRAMMAR_CACHE_CAPACITY,
};
use crate::language_model::{LanguageModel, LlamaOnBackend};
use crate::Error;
use nextok_constraints::{CompiledSchema, Constraint, JsonOptions, Limits, TokenVocab};
use nextok_gguf::GgufFile;
use nextok_kernels::ThreadPool;
use nextok_kv_cache::{KvCache, KvType};
use nextok_model::{Backend, CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};
use nextok_tokenizer::{ChatTemplate, EncodeOptions, Message, TokenKind, Tokenizer};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// A format the answer must follow (constrained decoding).
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintSpec {
    /// Exactly one of these texts.
    Choice(Vec<String>),
    /// A match of this regular expression.
    Regex(String),
    /// Any one JSON value.
    Json,
    /// A JSON value valid under this JSON Schema.
    JsonSchema(serde_json::Value),
    /// A sentence of this GBNF grammar (llama.cpp's format).
    Gbnf(String),
    /// A sentence of this Lark grammar.
    Lark(String),
}

/// Where the forward pass's arithmetic runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Device {
    /// The CPU kernels, on [`EngineOptions::threads`] threads.
    #[default]
    Cpu,
    /// An NVIDIA GPU by ordinal (0 is the first), through `nextok-cuda`: only in builds with the
    /// `cuda` feature; otherwise, or without a usable GPU, loading is
    /// [`Error::DeviceUnavailable`].
    Cuda(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// How to load and run a model.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Threads for the forward pass; `None` uses every core.
    pub threads: Option<usize>,
    /// How the KV cache stores its numbers (default f32: exact).
    pub kv_type: KvType,
    /// Where the arithmetic runs (default: the CPU).
    pub device: Device,
}

impl EngineOptions {
    /// The most threads the CPU backend may run per core: more only adds waiting, and each
    /// thread has its own stack.
    pub const MAX_THREADS_PER_CORE: usize = 8;
    /// The most threads the CPU backend may run on any machine.
    pub const MAX_THREADS: usize = 256;

    /// The most threads [`EngineOptions::threads`] may ask for on this machine:
    /// [`Self::MAX_THREADS_PER_CORE`] × the cores, or [`Self::MAX_THREADS`], whichever is less.
    pub fn max_threads() -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores
            .saturating_mul(Self::MAX_THREADS_PER_CORE)
            .min(Self::MAX_THREADS)
    }
}

/// Polls the mask worker makes before it sleeps: its jobs come one per decode step, far apart,
/// so spinning between them would only take a core from others.
const MASK_SPIN_LIMIT: u32 = 64;

/// The backend for `options`, or why there is none.
fn backend(options: &EngineOptions) -> Result<Box<dyn Backend>, Error> {
    if let Some(threads) = options.threads {
        let max = EngineOptions::max_threads();
        if !(1..=max).contains(&threads) {
            return Err(Error::OutOfRange {
                option: "threads",
                value: threads,
                min: 1,
                max,
            });
        }
    }
    match options.device {
        Device::Cpu => Ok(Box::new(match options.threads {
            Some(n) => CpuBackend::new(n),
            None => CpuBackend::all_cores(),
        })),
        #[cfg(feature = "cuda")]
        Device::Cuda(ordinal) => match nextok_cuda::CudaBackend::new(ordinal) {
            Ok(b) => Ok(Box::new(b)),
            Err(e) => Err(Error::DeviceUnavailable {
                device: options.device.to_string(),
                reason: e.to_string(),
            }),
        },
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(Error::DeviceUnavailable {
            device: options.device.to_string(),
            reason: String::from(
                "this build has no CUDA support; rebuild with the `cuda` feature \
                 (cargo build -p nextok-cli --features cuda)",
            ),
        }),
    }
}

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// A conversation, rendered through the model's chat template with the generation prompt.
    ///
    /// A message's content is always text: special-token text in it (`<|im_end|>`,
    /// `<|im_start|>`) is encoded as the characters it is made of, never as the control token,
    /// so a user cannot forge a turn or end one. Only the tokens the template itself writes are
    /// control tokens. Where no message holds such text, the ids are exactly those of the
    /// rendered text encoded with special tokens parsed. A template that slices, splits or tests
    /// the content so that its place in the text cannot be found is refused for messages that
    /// hold special-token text (`nextok_tokenizer::Error::ContentNotLocated`). To parse
    /// special tokens on purpose, render the text yourself and use [`Prompt::Raw`] with
    /// `parse_special`.
    Chat(Vec<Message>),
    /// Text continued as it is, without a chat template.
    Raw {
        /// The text.
        text: String,
        /// Whether special-token text (`<|im_start|>`) becomes the special tokens.
        parse_special: bool,
    },
    /// Token ids, as they are.
    Ids(Vec<u32>),
}

impl Prompt {
    /// A one-message chat, with an optional system message first.
    pub fn chat(system: Option<&str>, user: &str) -> Self {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(Message::system(s));
        }
        messages.push(Message::user(user));
        Prompt::Chat(messages)
    }

    /// Text continued as it is, special-token text left as text.
    pub fn raw(text: impl Into<String>) -> Self {
        Prompt::Raw {
            text: text.into(),
            parse_special: false,
        }
    }
}

/// A model, its tokenizer and its chat template, ready to run.
///
/// The engine is immutable: every sequence's state lives in a [`KvCache`] that a
/// [`Generation`](crate::Generation) or a [`Chat`](crate::Chat) owns, so one engine serves any
/// number of generations.
///
/// It is made from a GGUF file ([`Engine::load`], [`Engine::from_gguf`]: a Llama-family model on
/// the backend [`EngineOptions`] chooses, with the file's tokenizer and chat template), or from
/// parts ([`Engine::from_parts`]): any [`LanguageModel`], any [`Tokenizer`] and an optional
/// [`ChatTemplate`]. The loop only reaches the model through [`LanguageModel`].
pub struct Engine {
    model: Box<dyn LanguageModel>,
    tokenizer: Box<dyn Tokenizer>,
    /// The model's chat template: `None` when the file has none, an error when it has one that
    /// does not parse (kept so that raw prompts still work and chats say what is wrong).
    template: Option<Result<ChatTemplate, nextok_tokenizer::Error>>,
    kv_type: KvType,
    /// Every token's bytes as constraints see them, built on first use.
    vocab: OnceLock<Arc<TokenVocab>>,
    /// How JSON Schemas given as constraints are read (their limits come with each call).
    json_schema: JsonOptions,
    /// The thread that computes constraint masks while a forward pass runs, started on first
    /// use; `None` when the forward pass's own threads take every core (or no thread could be
    /// started), and the masks are computed by the choices themselves.
    mask_worker: OnceLock<Option<Mutex<ThreadPool>>>,
    /// The grammars of the JSON Schemas, GBNF and Lark grammars met lately, each compiled once.
    grammars: GrammarCache<CompiledSchema>,
    /// The automata of the patterns and choices met lately, as fresh constraints to clone.
    automata: GrammarCache<nextok_constraints::RegexConstraint>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.model)
            .field("kv_type", &self.kv_type)
            .field("template", &self.chat_template().map(|t| t.name()))
            .finish()
    }
}

impl Engine {
    /// Loads a GGUF model file: weights, tokenizer and chat template. The forward pass runs on
    /// the device `options` names, which is checked before the file is read.
    pub fn load(path: impl AsRef<Path>, options: &EngineOptions) -> Result<Self, Error> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(Error::UnsupportedModelFormat {
                path: path.to_path_buf(),
                reason: "a folder (safetensors checkpoints are not supported yet)",
            });
        }
        crate::model_path::check_model_file(path)?;
        // The device first: an unusable one fails before the model is read.
        let backend = backend(options)?;
        Self::from_file(GgufFile::open(path)?, backend, options)
    }

    /// Loads a model from a GGUF file already opened (or built in memory with
    /// [`GgufFile::from_bytes`]): weights, tokenizer and chat template, as [`Engine::load`] does.
    pub fn from_gguf(file: GgufFile, options: &EngineOptions) -> Result<Self, Error> {
        let backend = backend(options)?;
        Self::from_file(file, backend, options)
    }

    fn from_file(
        file: GgufFile,
        backend: Box<dyn Backend>,
        options: &EngineOptions,
    ) -> Result<Self, Error> {
        // The CPU kernels' packed layout is made at load; a GPU takes the file's own blocks, so
        // packing for it would only cost host memory and load time.
        let load = LoadOptions {
            keep_file_layout: options.device != Device::Cpu,
            ..LoadOptions::default()
        };
        let model = LlamaModel::from_gguf(file, load)?;
        let tokenizer = nextok_tokenizer::load_from_gguf(model.file())?;
        // A model without a template can still continue raw text; asking it to chat is the error.
        let template = if model
            .file()
            .metadata()
            .get("tokenizer.chat_template")
            .is_some()
        {
            Some(ChatTemplate::from_gguf(model.file()))
        } else {
            None
        };
        Self::assemble(
            Box::new(LlamaOnBackend::new(model, backend)),
            tokenizer,
            template,
            options.kv_type,
        )
    }

    /// An engine from its parts: a model, its tokenizer, its chat template (`None`: raw prompts
    /// only, and a chat is [`Error::NoChatTemplate`]), and how the KV cache stores its numbers.
    ///
    /// The tokenizer's vocabulary must be the model's: [`Error::VocabularyMismatch`] otherwise.
    pub fn from_parts(
        model: Box<dyn LanguageModel>,
        tokenizer: Box<dyn Tokenizer>,
        template: Option<ChatTemplate>,
        kv_type: KvType,
    ) -> Result<Self, Error> {
        Self::assemble(model, tokenizer, template.map(Ok), kv_type)
    }

    fn assemble(
        model: Box<dyn LanguageModel>,
        tokenizer: Box<dyn Tokenizer>,
        template: Option<Result<ChatTemplate, nextok_tokenizer::Error>>,
        kv_type: KvType,
    ) -> Result<Self, Error> {
        if tokenizer.vocab_size() != model.vocab_size() {
            return Err(Error::VocabularyMismatch {
                tokenizer: tokenizer.vocab_size(),
                model: model.vocab_size(),
            });
        }
        Ok(Engine {
            model,
            tokenizer,
            template,
            kv_type,
            vocab: OnceLock::new(),
            json_schema: JsonOptions::default(),
            mask_worker: OnceLock::new(),
            grammars: GrammarCache::new(
                DEFAULT_GRAMMAR_CACHE_CAPACITY,
                DEFAULT_GRAMMAR_CACHE_BYTES,
            ),
            automata: GrammarCache::new(
                DEFAULT_GRAMMAR_CACHE_CAPACITY,
                DEFAULT_GRAMMAR_CACHE_BYTES,
            ),
        })
    }

    /// Sets how [`ConstraintSpec::JsonSchema`] schemas are read from now on: unknown keywords
    /// refused or listed ([`JsonOptions::strict`]), `format` enforced or an annotation
    /// ([`JsonOptions::format`]), the draft of a schema whose `$schema` names none
    /// ([`JsonOptions::draft`]), the documents `$ref`s may name ([`JsonOptions::resources`]),
    /// whitespace and property order. Its [`JsonOptions::limits`] are replaced by each call's
    /// (a server's bounds on a stranger's schema).
    ///
    /// ```no_run
    /// use nextok::constraints::JsonOptions;
    /// use nextok::{ConstraintSpec, Engine, EngineOptions};
    ///
    /// let mut engine = Engine::load("model.gguf", &EngineOptions::default())?;
    /// engine.set_json_schema_options(JsonOptions::default().with_strict(true));
    /// // `javaType` is not a JSON Schema keyword: refused now, where it was ignored before.
    /// let spec = ConstraintSpec::JsonSchema(serde_json::json!({"javaType": "Foo"}));
    /// assert!(engine.constraint(&spec).is_err());
    /// # Ok::<(), nextok::Error>(())
    /// ```
    pub fn set_json_schema_options(&mut self, options: JsonOptions) {
        self.json_schema = options;
        // The kept grammars were compiled under the old options.
        self.grammars.clear();
    }

    /// Keeps the grammars of at most `capacity` constraints (JSON Schemas, GBNF and Lark
    /// grammars) and the automata of as many patterns and choices, the most recently used, so
    /// that a constraint met again is not compiled again (default
    /// [`DEFAULT_GRAMMAR_CACHE_CAPACITY`](crate::DEFAULT_GRAMMAR_CACHE_CAPACITY); 0 keeps none).
    /// A request's constraint is built when the request is checked and again for each of its
    /// completions when the scheduler admits it, on the scheduler's thread; with its grammar
    /// kept, only the first of those compiles.
    ///
    /// ```no_run
    /// use nextok::{ConstraintSpec, Engine, EngineOptions};
    ///
    /// let engine = Engine::load("model.gguf", &EngineOptions::default())?;
    /// let spec = ConstraintSpec::JsonSchema(serde_json::json!({"type": "array"}));
    /// engine.constraint(&spec)?;
    /// engine.constraint(&spec)?;
    /// let stats = engine.grammar_cache_stats();
    /// assert_eq!((stats.misses, stats.hits), (1, 1));
    /// engine.set_grammar_cache_capacity(0);
    /// assert_eq!(engine.grammar_cache_stats().entries, 0);
    /// # Ok::<(), nextok::Error>(())
    /// ```
    pub fn set_grammar_cache_capacity(&self, capacity: usize) {
        self.grammars.set_capacity(capacity);
        self.automata.set_capacity(capacity);
    }

    /// Keeps at most `max_bytes` of grammars (and as many of automata), the most recently used
    /// (default [`DEFAULT_GRAMMAR_CACHE_BYTES`](crate::DEFAULT_GRAMMAR_CACHE_BYTES), as
    /// [`Grammar::heap_bytes`](nextok_constraints::Grammar::heap_bytes) counts them): a grammar
    /// larger than that is used and not kept. What a stranger's schemas can make the server
    /// hold is bounded by this, not by the number of grammars.
    pub fn set_grammar_cache_bytes(&self, max_bytes: usize) {
        self.grammars.set_max_bytes(max_bytes);
        self.automata.set_max_bytes(max_bytes);
    }

    /// The grammar cache's hits and misses so far, and how many grammars and automata it keeps
    /// ([`Engine::set_grammar_cache_capacity`], [`Engine::set_grammar_cache_bytes`]; `capacity`
    /// and `max_bytes` are per kind: grammars, automata).
    pub fn grammar_cache_stats(&self) -> GrammarCacheStats {
        let (g, a) = (self.grammars.stats(), self.automata.stats());
        GrammarCacheStats {
            hits: g.hits + a.hits,
            misses: g.misses + a.misses,
            entries: g.entries + a.entries,
            capacity: g.capacity,
            bytes: g.bytes + a.bytes,
            max_bytes: g.max_bytes,
        }
    }

    /// How JSON Schemas are read ([`Engine::set_json_schema_options`]; default
    /// [`JsonOptions::default`]).
    pub fn json_schema_options(&self) -> &JsonOptions {
        &self.json_schema
    }

    /// Compiles `schema` as [`ConstraintSpec::JsonSchema`] would, under `limits`, and reports
    /// what it did not enforce ([`CompiledSchema::ignored`]: unknown keywords and `format`
    /// names, other drafts' keywords), so that a caller can tell its user. The grammar is kept
    /// ([`Engine::set_grammar_cache_capacity`]): the constraints built from the same schema
    /// next take it instead of compiling it again.
    pub fn check_json_schema(
        &self,
        schema: &serde_json::Value,
        limits: &Limits,
    ) -> Result<CompiledSchema, Error> {
        let text = schema.to_string();
        Ok(self
            .grammars
            .get_or_compile(Kind::JsonSchema, &text, limits, || {
                let options = self.json_schema.clone().with_limits(*limits);
                nextok_constraints::compile_json_schema_report(schema, &options)
            })?)
    }

    /// The vocabulary as constraints see it ([`TokenVocab::from_tokenizer`]): every token's
    /// bytes, with the control tokens (`<|im_start|>` ...) and the unknown token left empty so
    /// that no constraint ever allows them, and the end tokens, which a constraint allows exactly
    /// when the output is complete.
    pub fn constraint_vocab(&self) -> Result<Arc<TokenVocab>, Error> {
        if let Some(v) = self.vocab.get() {
            return Ok(v.clone());
        }
        let vocab = Arc::new(TokenVocab::from_tokenizer(self.tokenizer.as_ref())?);
        Ok(self.vocab.get_or_init(|| vocab).clone())
    }

    /// A fresh constraint that follows `spec` from the start of an answer.
    pub fn constraint(&self, spec: &ConstraintSpec) -> Result<Box<dyn Constraint>, Error> {
        self.constraint_with_limits(spec, &Limits::DEFAULT)
    }

    /// [`Engine::constraint`] under `limits`: the grammar's size at compile time and the work of
    /// each mask as it runs (a server's bounds on a stranger's schema).
    pub fn constraint_with_limits(
        &self,
        spec: &ConstraintSpec,
        limits: &Limits,
    ) -> Result<Box<dyn Constraint>, Error> {
        Ok(self.sendable_constraint(spec, limits)?)
    }

    /// [`Engine::constraint_with_limits`] as a constraint that may move to another thread: the
    /// generation loop computes the next mask on a worker thread while the forward pass runs.
    pub(crate) fn sendable_constraint(
        &self,
        spec: &ConstraintSpec,
        limits: &Limits,
    ) -> Result<Box<dyn Constraint + Send>, Error> {
        use nextok_constraints as c;
        let vocab = self.constraint_vocab()?;
        let compiled = match spec {
            ConstraintSpec::Choice(choices) => {
                let text = serde_json::Value::from(choices.clone()).to_string();
                let kept = self
                    .automata
                    .get_or_compile(Kind::Choice, &text, limits, || {
                        c::RegexConstraint::from_choices(choices, &vocab)
                    })?;
                return Ok(Box::new(kept));
            }
            ConstraintSpec::Regex(pattern) => {
                let kept = self
                    .automata
                    .get_or_compile(Kind::Regex, pattern, limits, || {
                        c::RegexConstraint::from_regex_with_limits(pattern, &vocab, limits)
                    })?;
                return Ok(Box::new(kept));
            }
            // Any JSON value: the schema `true`'s grammar, kept as any schema's.
            ConstraintSpec::Json => {
                self.check_json_schema(&serde_json::Value::Bool(true), limits)?
            }
            ConstraintSpec::JsonSchema(schema) => self.check_json_schema(schema, limits)?,
            // Token texts such as `<|im_end|>` are the tokenizer's special tokens.
            ConstraintSpec::Gbnf(text) => self.kept_grammar(Kind::Gbnf, text, limits, || {
                c::compile_gbnf_for_vocab(text, "root", &vocab, limits)
            })?,
            ConstraintSpec::Lark(text) => self.kept_grammar(Kind::Lark, text, limits, || {
                c::compile_lark_with_limits(text, limits)
            })?,
        };
        Ok(Box::new(c::GrammarConstraint::new(
            compiled.grammar,
            &vocab,
        )))
    }

    /// The grammar of a GBNF or Lark `text` under `limits`, kept (`grammars`) or compiled, as
    /// a schema's is kept: with nothing unenforced and no draft.
    fn kept_grammar(
        &self,
        kind: Kind,
        text: &str,
        limits: &Limits,
        compile: impl FnOnce() -> Result<Arc<nextok_constraints::Grammar>, nextok_constraints::Error>,
    ) -> Result<CompiledSchema, Error> {
        Ok(self.grammars.get_or_compile(kind, text, limits, || {
            Ok::<_, nextok_constraints::Error>(CompiledSchema {
                grammar: compile()?,
                draft: None,
                ignored: Vec::new(),
            })
        })?)
    }

    /// The thread that computes constraint masks while the forward pass runs
    /// ([`overlapping_masks`](crate::generate::overlapping_masks)), started on first use and
    /// kept: a pool of the caller and one worker that sleeps between steps. `None` when the
    /// forward pass's host threads already take every core (a mask thread would take the core of
    /// one of them, and every barrier of the pass would wait for it; the mask is then computed
    /// on the caller, a few microseconds against a step of milliseconds) or when no thread
    /// can be started.
    pub(crate) fn mask_worker(&self) -> Option<&Mutex<ThreadPool>> {
        self.mask_worker
            .get_or_init(|| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                if self.model.host_parts() >= cores {
                    return None;
                }
                ThreadPool::with_spin_limit(2, MASK_SPIN_LIMIT)
                    .ok()
                    .map(Mutex::new)
            })
            .as_ref()
    }

    /// The model the loop runs on.
    pub fn model(&self) -> &dyn LanguageModel {
        self.model.as_ref()
    }

    /// Tokens in the vocabulary, the model's and the tokenizer's (they were checked to agree).
    pub fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer.as_ref()
    }

    /// The chat template, if the model has one that parses.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref().and_then(|t| t.as_ref().ok())
    }

    /// Tokens the model can see at once, prompt and answer together.
    pub fn context_window(&self) -> usize {
        self.model.context_window()
    }

    /// The tokens that end a generation.
    pub fn end_tokens(&self) -> Vec<u32> {
        self.tokenizer.special_tokens().end_of_generation.clone()
    }

    /// The token ids that count as DRY sequence breakers for these texts: every token of the
    /// vocabulary whose bytes hold one of them ([`nextok_sampling::dry_breaker_ids`]).
    pub fn dry_breaker_ids(&self, breakers: &[String]) -> Vec<u32> {
        let t = self.tokenizer();
        let tokens =
            (0..t.vocab_size() as u32).filter_map(|id| t.token_bytes(id).ok().map(|b| (id, b)));
        nextok_sampling::dry_breaker_ids(breakers, tokens)
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        self.model.new_cache(self.kv_type)
    }

    /// A pool of KV blocks for this model under `budget_bytes`, its numbers stored as the
    /// engine's [`KvType`] where the model's backend reads them
    /// ([`LanguageModel::new_pool`]): what a [`Scheduler`](crate::Scheduler) serves its requests
    /// from. A budget smaller than one block is an error.
    pub fn new_pool(&self, budget_bytes: u64) -> Result<nextok_kv_cache::KvPool, Error> {
        self.model.new_pool(self.kv_type, budget_bytes)
    }

    /// Renders a conversation through the chat template.
    pub fn render_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        Ok(self.template()?.render(messages, add_generation_prompt)?)
    }

    /// The chat template, or why there is none.
    fn template(&self) -> Result<&ChatTemplate, Error> {
        match &self.template {
            None => Err(Error::NoChatTemplate),
            Some(Err(e)) => Err(e.clone().into()),
            Some(Ok(t)) => Ok(t),
        }
    }

    /// The prompt's token ids. A chat is rendered and the special tokens its template writes
    /// are parsed, while special-token text inside a message stays text; BOS is added when the
    /// model asks for it.
    pub fn encode_prompt(&self, prompt: &Prompt) -> Result<Vec<u32>, Error> {
        let bos = self.tokenizer.add_bos_by_default();
        let ids = match prompt {
            Prompt::Chat(messages) => self.encode_chat(messages, bos)?,
            Prompt::Raw {
                text,
                parse_special,
            } => self.tokenizer.encode(
                text,
                EncodeOptions {
                    add_bos: bos,
                    parse_special: *parse_special,
                },
            )?,
            Prompt::Ids(ids) => ids.clone(),
        };
        if ids.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let vocab = self.model.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange { id, vocab });
        }
        Ok(ids)
    }

    /// Encodes a conversation with the generation prompt: the template's own special tokens
    /// become control tokens, and the content of every message is text, whatever it holds, so
    /// that no message can forge a turn (`<|im_end|><|im_start|>assistant`).
    fn encode_chat(&self, messages: &[Message], bos: bool) -> Result<Vec<u32>, Error> {
        let template = self.template()?;
        // A role is written among the template's own tokens, where special text would count.
        for message in messages {
            if self.holds_special_text(&message.role)? {
                return Err(Error::SpecialTextInRole {
                    role: message.role.clone(),
                });
            }
        }
        let (text, plain) = match template.render_with_spans(messages, true) {
            Ok(chat) => (chat.text, chat.content),
            Err(e @ nextok_tokenizer::Error::ContentNotLocated { .. }) => {
                // The template changes the content in a way the spans cannot follow. Content
                // without any special-token text cannot forge anything, and is encoded as the
                // plain rendering; otherwise the refusal stands.
                for message in messages {
                    if self.holds_special_text(&message.content)? {
                        return Err(e.into());
                    }
                }
                (template.render(messages, true)?, Vec::new())
            }
            Err(e) => return Err(e.into()),
        };
        // Templates such as Llama 3's write the BOS text themselves; adding BOS again would give
        // the model a sequence it never saw in training. BOS text that opens a message's content
        // is the message's, not the template's.
        let written = self
            .tokenizer
            .special_tokens()
            .bos
            .and_then(|id| self.tokenizer.token_bytes(id).ok())
            .is_some_and(|b| {
                !b.is_empty()
                    && text.as_bytes().starts_with(b)
                    && plain.first().is_none_or(|r| r.start >= b.len())
            });
        Ok(self.tokenizer.encode_with_plain_ranges(
            &text,
            &plain,
            EncodeOptions::parse_special().with_bos(bos && !written),
        )?)
    }

    /// Whether text holds the text of a token that only parsed special tokens give (a control
    /// or unknown token, such as `<|im_start|>`).
    fn holds_special_text(&self, text: &str) -> Result<bool, Error> {
        for id in self
            .tokenizer
            .encode(text, EncodeOptions::parse_special())?
        {
            if matches!(
                self.tokenizer.token_kind(id)?,
                TokenKind::Control | TokenKind::Unknown
            ) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Runs `tokens` after what `cache` holds and returns the logits asked for (`vocab` numbers
    /// per position).
    pub fn forward(
        &self,
        cache: &mut KvCache,
        tokens: &[u32],
        logits: Logits,
    ) -> Result<Vec<f32>, Error> {
        let context = self.context_window();
        if cache.len() + tokens.len() > context {
            return Err(Error::ContextWindowExceeded {
                tokens: cache.len() + tokens.len(),
                context_window: context,
            });
        }
        let mut out = self.model.forward(&mut [Sequence {
            cache,
            tokens,
            logits,
        }])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Runs one new token for each of several caches in one batched pass (the weights are read
    /// once for all of them) and returns each one's last-position logits, in order.
    pub fn forward_batch(
        &self,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
    ) -> Result<Vec<Vec<f32>>, Error> {
        if caches.len() != tokens.len() {
            return Err(Error::InvalidOption {
                option: "tokens",
                expected: "one token per cache",
            });
        }
        let context = self.context_window();
        if let Some(c) = caches.iter().find(|c| c.len() + 1 > context) {
            return Err(Error::ContextWindowExceeded {
                tokens: c.len() + 1,
                context_window: context,
            });
        }
        let mut batch: Vec<Sequence<'_>> = caches
            .iter_mut()
            .zip(tokens.chunks(1))
            .map(|(cache, token)| Sequence {
                cache,
                tokens: token,
                logits: Logits::Last,
            })
            .collect();
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        self.model.forward(&mut batch)
    }

    /// The logits of a prompt in one prefill: the last position's, or every position's row after
    /// row.
    pub fn logits(&self, ids: &[u32], all_positions: bool) -> Result<Vec<f32>, Error> {
        if ids.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let mut cache = self.new_cache();
        let which = if all_positions {
            Logits::All
        } else {
            Logits::Last
        };
        self.forward(&mut cache, ids, which)
    }

    /// The log-probability of every token of `ids` after the ones before it (the first token has
    /// none: nothing comes before it), and the perplexity over those.
    pub fn score(&self, ids: &[u32]) -> Result<Score, Error> {
        if ids.len() < 2 {
            return Err(Error::TooShortToScore { tokens: ids.len() });
        }
        let vocab = self.model.vocab_size();
        let rows = self.logits(&ids[..ids.len() - 1], true)?;
        let mut logprobs = Vec::with_capacity(ids.len() - 1);
        for (row, &next) in rows.chunks_exact(vocab).zip(&ids[1..]) {
            let lp = nextok_sampling::log_softmax(row)?;
            logprobs.push(lp[next as usize]);
        }
        let mean = logprobs.iter().map(|&x| x as f64).sum::<f64>() / logprobs.len() as f64;
        Ok(Score {
            tokens: ids.to_vec(),
            logprobs,
            perplexity: (-mean).exp(),
        })
    }
}

/// How likely a text is under the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Score {
    /// The text's tokens.
    pub tokens: Vec<u32>,
    /// `logprobs[i]` is the natural log-probability of `tokens[i + 1]` after `tokens[..=i]`.
    pub logprobs: Vec<f32>,
    /// `exp(−mean log-probability)`.
    pub perplexity: f64,
}

/// How likely one label is as the whole answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LabelScore {
    /// The label.
    pub label: String,
    /// Its tokens, followed by the end-of-turn token when the model has one.
    pub tokens: Vec<u32>,
    /// Natural log-probability of those tokens after the prompt.
    pub logprob: f64,
    /// `exp(logprob)`: the label's probability without a constraint.
    pub probability: f64,
    /// The probability renormalised over the labels: what constrained decoding gives the label as
    /// a whole answer (specification, "Constrained decoding").
    pub constrained: f64,
}

impl Engine {
    /// Scores each label as the whole answer to `prompt`: the probability of its tokens and, when
    /// the model has an end-of-turn token, of the answer ending right after it. The prompt is
    /// prefilled once; each label runs on a fork of its cache. Labels come back best first.
    ///
    /// Only the tokenizer's own tokenization of each label is counted; a model could in principle
    /// spell a label with other tokens, whose (usually tiny) probability is left out.
    pub fn classify(&self, prompt: &Prompt, labels: &[String]) -> Result<Vec<LabelScore>, Error> {
        if labels.len() < 2 {
            return Err(Error::InvalidOption {
                option: "labels",
                expected: "at least two labels",
            });
        }
        let ids = self.encode_prompt(prompt)?;
        let vocab = self.model.vocab_size();
        let mut cache = self.new_cache();
        let first = self.forward(&mut cache, &ids, Logits::Last)?;
        let first = nextok_sampling::log_softmax(&first)?;
        let specials = self.tokenizer.special_tokens();
        let end = specials.eot.or(specials.eos);
        let mut scores = Vec::with_capacity(labels.len());
        for label in labels {
            let mut tokens = self.tokenizer.encode(label, EncodeOptions::plain())?;
            if tokens.is_empty() {
                return Err(Error::InvalidOption {
                    option: "labels",
                    expected: "non-empty labels",
                });
            }
            tokens.extend(end);
            let mut logprob = first[tokens[0] as usize] as f64;
            if tokens.len() > 1 {
                let mut fork = cache.fork();
                let rows = self.forward(&mut fork, &tokens[..tokens.len() - 1], Logits::All)?;
                for (row, &next) in rows.chunks_exact(vocab).zip(&tokens[1..]) {
                    logprob += nextok_sampling::log_softmax(row)?[next as usize] as f64;
                }
            }
            scores.push(LabelScore {
                label: label.clone(),
                tokens,
                logprob,
                probability: logprob.exp(),
                constrained: 0.0,
            });
        }
        let max = scores
            .iter()
            .map(|s| s.logprob)
            .fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = scores.iter().map(|s| (s.logprob - max).exp()).sum();
        for s in &mut scores {
            s.constrained = (s.logprob - max).exp() / total;
        }
        scores.sort_by(|a, b| b.logprob.total_cmp(&a.logprob));
        Ok(scores)
    }
}

#[cfg(test)]
mod device_tests {
    use super::*;

    #[test]
    fn the_cpu_is_the_default_device() {
        let options = EngineOptions::default();
        assert_eq!(options.device, Device::Cpu);
        assert!(backend(&options).is_ok());
    }

    #[test]
    fn an_unusable_cuda_device_is_a_typed_error() {
        // Ordinal 4096 exists nowhere: without the feature the build says so, with it the
        // backend reports the missing driver or device. Never a panic.
        let options = EngineOptions {
            device: Device::Cuda(4096),
            ..EngineOptions::default()
        };
        match backend(&options) {
            Err(Error::DeviceUnavailable { device, reason }) => {
                assert_eq!(device, "cuda:4096");
                if !cfg!(feature = "cuda") {
                    assert!(reason.contains("`cuda` feature"), "{reason}");
                }
            }
            Err(e) => panic!("expected DeviceUnavailable, got {e}"),
            Ok(_) => panic!("device 4096 cannot exist"),
        }
    }
}
