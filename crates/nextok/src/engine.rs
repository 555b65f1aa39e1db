//! A loaded model with its tokenizer and chat template: what every generation needs.

use crate::Error;
use nextok_kv_cache::{KvCache, KvType};
use nextok_model::{CpuBackend, LlamaModel, Logits, Sequence};
use nextok_tokenizer::{ChatTemplate, EncodeOptions, Message, Tokenizer};
use std::path::Path;

/// How to load and run a model.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Threads for the forward pass; `None` uses every core.
    pub threads: Option<usize>,
    /// How the KV cache stores its numbers (default f32: exact).
    pub kv_type: KvType,
}

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// A conversation, rendered through the model's chat template with the generation prompt.
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
pub struct Engine {
    model: LlamaModel,
    tokenizer: Box<dyn Tokenizer>,
    template: Option<ChatTemplate>,
    backend: CpuBackend,
    kv_type: KvType,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", self.model.config())
            .field("threads", &self.backend.threads())
            .field("template", &self.template.as_ref().map(|t| t.name()))
            .finish()
    }
}

impl Engine {
    /// Loads a GGUF model file: weights, tokenizer and chat template.
    pub fn load(path: impl AsRef<Path>, options: &EngineOptions) -> Result<Self, Error> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::ModelNotFound {
                path: path.to_path_buf(),
            });
        }
        let model = LlamaModel::open(path)?;
        let tokenizer = nextok_tokenizer::load_from_gguf(model.file())?;
        if tokenizer.vocab_size() != model.config().vocab {
            return Err(Error::VocabularyMismatch {
                tokenizer: tokenizer.vocab_size(),
                model: model.config().vocab,
            });
        }
        // A model without a template can still continue raw text; asking it to chat is the error.
        let template = if model
            .file()
            .metadata()
            .get("tokenizer.chat_template")
            .is_some()
        {
            Some(ChatTemplate::from_gguf(model.file())?)
        } else {
            None
        };
        let backend = match options.threads {
            Some(n) => CpuBackend::new(n),
            None => CpuBackend::all_cores(),
        };
        Ok(Engine {
            model,
            tokenizer,
            template,
            backend,
            kv_type: options.kv_type,
        })
    }

    /// The model.
    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer.as_ref()
    }

    /// The chat template, if the model has one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// Tokens the model can see at once, prompt and answer together.
    pub fn context_window(&self) -> usize {
        self.model.config().context
    }

    /// The tokens that end a generation.
    pub fn end_tokens(&self) -> Vec<u32> {
        self.tokenizer.special_tokens().end_of_generation.clone()
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        self.model.new_cache(self.kv_type)
    }

    /// Renders a conversation through the chat template.
    pub fn render_chat(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        let template = self.template.as_ref().ok_or(Error::NoChatTemplate)?;
        Ok(template.render(messages, add_generation_prompt)?)
    }

    /// The prompt's token ids. A chat is rendered and its special tokens parsed; BOS is added
    /// when the model asks for it.
    pub fn encode_prompt(&self, prompt: &Prompt) -> Result<Vec<u32>, Error> {
        let bos = self.tokenizer.add_bos_by_default();
        let ids = match prompt {
            Prompt::Chat(messages) => {
                let text = self.render_chat(messages, true)?;
                self.tokenizer
                    .encode(&text, EncodeOptions::parse_special().with_bos(bos))?
            }
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
        let vocab = self.model.config().vocab;
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange { id, vocab });
        }
        Ok(ids)
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
        let mut out = self.model.forward(
            &self.backend,
            &mut [Sequence {
                cache,
                tokens,
                logits,
            }],
        )?;
        Ok(out.pop().unwrap_or_default())
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
        let vocab = self.model.config().vocab;
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
