//! The generation loop: prefill once, then one decode pass per token, each token chosen by the
//! sampling chain, checked by the stop conditions and turned into text as it comes.

use crate::engine::{ConstraintSpec, Engine, Prompt};
use crate::speculative::{Speculation, SpeculativeStats};
use crate::Error;
use nextok_constraints::{Constraint, Limits};
use nextok_kv_cache::KvCache;
use nextok_model::Logits;
use nextok_sampling::{
    beam_search, log_softmax, BatchRow, BeamConfig, Context, Sampled, Sampler, SamplingParams,
};
use nextok_stopping::{Stop, StopConditions, StopState};
use nextok_tokenizer::{StreamDecoder, Tokenizer};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

/// Everything that shapes an answer besides the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// The sampling chain and its seed ([`SamplingParams::greedy`] for greedy decoding).
    pub sampling: SamplingParams,
    /// Stop after this many new tokens (`None`: only the context window limits the answer).
    pub max_tokens: Option<usize>,
    /// Stop when the answer contains one of these texts; the text is cut before it.
    pub stop: Vec<String>,
    /// Keep going past the model's end tokens.
    pub ignore_eos: bool,
    /// More tokens that end the answer, as the model's end tokens do (vLLM's
    /// `stop_token_ids`); they count even with `ignore_eos`.
    pub stop_token_ids: Vec<u32>,
    /// Report each token's log-probability under the model's own distribution
    /// ([`TokenEvent::raw_logprob`]). It costs an exponential pass over the whole vocabulary
    /// per token, so it is off by default; `top_logprobs > 0` turns it on too. The tokens are
    /// the same either way.
    pub logprobs: bool,
    /// How many of the most likely alternatives to report with each token (their
    /// log-probabilities under the model's own distribution, as [`Self::logprobs`]).
    pub top_logprobs: usize,
    /// Completions of the prompt. They share the prompt's KV cache (forked, copy-on-write), and
    /// completion `i` samples with seed `seed + i`.
    pub n: usize,
    /// Beam search instead of sampling.
    pub beams: Option<BeamOptions>,
    /// A format the answer must follow: at every step the tokens that would break it are
    /// masked before the sampling chain.
    pub constraint: Option<ConstraintSpec>,
    /// Bounds on the constraint's grammar at compile time and on the work of each mask
    /// ([`Limits::DEFAULT`] unless a caller such as a server sets its own).
    pub constraint_limits: Limits,
    /// Exact speculative decoding (prompt lookup) for a single completion: drafts copied from
    /// the prompt and the answer so far are checked in one forward pass, and a drafted token is
    /// kept only where the ordinary loop chooses it, so the tokens are the same with it or
    /// without it. On by default; [`Engine::generate`] drafts for one completion without beam
    /// search, the [`Scheduler`](crate::Scheduler) for each completion (unless its
    /// [`SchedulerOptions::speculative`](crate::SchedulerOptions::speculative) is off).
    pub speculative: bool,
}

impl GenerateOptions {
    /// The most completions one request may ask for (`n`): each holds its own KV cache once it
    /// departs from the prompt, so `n` bounds a request's memory. OpenAI's API allows 128.
    pub const MAX_COMPLETIONS: usize = 128;
    /// The most beams one request may ask for: every step runs one pass over each beam and keeps
    /// a KV cache per beam. Wide enough for an exhaustive search over a small test vocabulary;
    /// usual widths are 1 to 10.
    pub const MAX_BEAMS: usize = 512;

    /// Checks the counts before anything is allocated: `n` and the beam width between 1 and
    /// their limits ([`Self::MAX_COMPLETIONS`], [`Self::MAX_BEAMS`]), `n` at most the beams,
    /// the sampling settings, and no constraint with beam search. [`Engine::generate`] runs it
    /// first; `max_tokens` needs no limit of its own, as the context window bounds the answer.
    pub fn validate(&self) -> Result<(), Error> {
        let range = |option, value, max| {
            if (1..=max).contains(&value) {
                Ok(())
            } else {
                Err(Error::OutOfRange {
                    option,
                    value,
                    min: 1,
                    max,
                })
            }
        };
        range("n", self.n, Self::MAX_COMPLETIONS)?;
        if let Some(b) = self.beams {
            range("beams", b.width, Self::MAX_BEAMS)?;
            if self.n > b.width {
                return Err(Error::InvalidOption {
                    option: "n",
                    expected: "at most the number of beams",
                });
            }
        }
        self.sampling.validate()?;
        if self.beams.is_some() && self.constraint.is_some() {
            return Err(Error::InvalidOption {
                option: "constraint",
                expected: "used without beam search",
            });
        }
        Ok(())
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            sampling: SamplingParams::default(),
            max_tokens: Some(256),
            stop: Vec::new(),
            ignore_eos: false,
            logprobs: false,
            top_logprobs: 0,
            n: 1,
            beams: None,
            constraint: None,
            stop_token_ids: Vec::new(),
            constraint_limits: Limits::DEFAULT,
            speculative: true,
        }
    }
}

/// Beam search's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeamOptions {
    /// Beams kept after each step.
    pub width: usize,
    /// Scores are divided by `length^length_penalty` (0 ranks by plain probability).
    pub length_penalty: f64,
}

/// One alternative token at a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    /// Token id.
    pub id: u32,
    /// Its text (bytes that are not UTF-8 on their own shown as U+FFFD).
    pub text: String,
    /// Its natural log-probability under the model's distribution.
    pub logprob: f32,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenEvent {
    /// Which completion it belongs to (0 unless `n > 1` or several beams are returned).
    pub index: usize,
    /// Token id.
    pub id: u32,
    /// The text this token releases: whole characters that can no longer be part of a stop
    /// sequence. It may be empty (half a character, a possible stop sequence, an end token), and
    /// may include text held back from earlier tokens.
    pub text: String,
    /// Natural log-probability of the token in the distribution it was drawn from (after the
    /// chain; 0 for greedy).
    pub logprob: f32,
    /// Its log-probability under the model's own distribution: `None` unless
    /// [`GenerateOptions::logprobs`] (or `top_logprobs`) asked for it, since it costs a pass
    /// over the vocabulary. Beam search, which computes it anyway, always gives it.
    pub raw_logprob: Option<f32>,
    /// The most likely alternatives under the model's own distribution, when asked for.
    pub top: Vec<Alternative>,
}

/// Token counts, with the names of the OpenAI API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values came from an earlier cache instead of the prefill.
    pub cached_prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
}

/// How long things took.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timings {
    /// From the call to `generate` to the first token chosen: mostly the prefill.
    pub time_to_first_token_s: f64,
    /// The prefill pass.
    pub prefill_s: f64,
    /// Prompt tokens run through the model per second of prefill.
    pub prefill_tokens_per_s: f64,
    /// From the first token chosen to the last.
    pub decode_s: f64,
    /// Tokens after the first, per second of decoding (0 for a one-token answer).
    pub decode_tokens_per_s: f64,
    /// Seconds per token after the first (0 for a one-token answer).
    pub time_per_output_token_s: f64,
    /// From the call to `generate` to the end of this completion.
    pub total_s: f64,
    /// Bytes the KV cache holds at the end (prompt and answer).
    pub kv_cache_bytes: u64,
}

/// A finished completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    /// Which completion (0 unless `n > 1`).
    pub index: usize,
    /// The answer's text, without the end token or the stop sequence.
    pub text: String,
    /// The generated token ids, the end token included when there is one.
    pub tokens: Vec<u32>,
    /// The prompt's token ids.
    pub prompt_tokens: Vec<u32>,
    /// Why the answer ended, and which end token or stop sequence matched.
    pub stop: Stop,
    /// Sum of the tokens' log-probabilities (in the distribution each was drawn from).
    pub logprob: f64,
    /// Token counts.
    pub usage: Usage,
    /// Timings.
    pub timings: Timings,
}

/// What a [`Generation`] yields: every token as it is chosen, then one final event per
/// completion.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A token was chosen.
    Token(TokenEvent),
    /// A completion has ended.
    Done(Box<Completion>),
}

/// The state of one completion that is chosen token by token: its sampler, constraint, stop
/// state and stream decoder, the tokens and text so far. [`Generation`] and the
/// [`Scheduler`](crate::Scheduler) both drive completions through it, so a token is chosen,
/// checked and turned into text by one piece of code, whoever runs the forward passes.
pub(crate) struct Decoding<'e> {
    pub(crate) index: usize,
    sampler: Sampler,
    stop: StopState,
    decoder: StreamDecoder<'e, dyn Tokenizer + 'e>,
    pub(crate) tokens: Vec<u32>,
    text: String,
    logprob: f64,
    pub(crate) first_token: Option<Instant>,
    pub(crate) last_token: Option<Instant>,
    pub(crate) masking: Option<Masking>,
    /// Whether the caller asked for log-probabilities under the model's own distribution.
    raw_logprobs: bool,
}

/// A completion's constraint and the mask of its next choice. The mask depends only on the
/// tokens chosen so far, so it can be computed on another thread while the forward pass that
/// scores the next position runs ([`overlapping_masks`]); [`Decoding::choose`] computes it
/// itself when nobody did.
pub(crate) struct Masking {
    constraint: Box<dyn Constraint + Send>,
    mask: Vec<u64>,
    /// How computing `mask` for the next choice ended; `None` while it is still to be computed.
    ready: Option<Result<(), nextok_constraints::Error>>,
}

impl Masking {
    /// Computes the mask of the next choice, unless it is computed already.
    fn prepare(&mut self) {
        if self.ready.is_none() {
            self.ready = Some(self.constraint.fill_mask(&mut self.mask));
        }
    }

    /// The mask of the next choice (computed now if it is not yet), or why it could not be
    /// computed. Once taken it is stale: the next choice needs a new one.
    fn take(&mut self) -> Result<&[u64], Error> {
        self.prepare();
        match self.ready.take() {
            Some(Err(e)) => Err(e.into()),
            _ => Ok(&self.mask),
        }
    }
}

/// Runs `forward` on the calling thread while the engine's mask worker
/// ([`Engine::mask_worker`]) computes `masks` (the masks of the choices its logits are for), so
/// that a constraint costs the loop no time of its own. The masks are the same bits as when
/// [`Decoding::choose`] computes them, and an error computing one is reported by the choice
/// that needs it, as it would be without the worker. Where the engine has no mask worker (the
/// forward pass's threads take every core, or no thread could be started) or another thread is
/// using it, the choices compute their masks themselves; no thread is started per step.
pub(crate) fn overlapping_masks<T>(
    engine: &Engine,
    masks: Vec<&mut Masking>,
    forward: impl FnOnce() -> T,
) -> T {
    if masks.is_empty() {
        return forward();
    }
    let Some(worker) = engine.mask_worker().and_then(|w| w.try_lock().ok()) else {
        return forward();
    };
    let masks = Mutex::new(masks);
    worker.run_beside(forward, &|_| {
        // `prepare` does not panic; if it did, the pool re-raises it here.
        for m in masks.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
            m.prepare();
        }
    })
}

impl<'e> Decoding<'e> {
    /// Completion `index` of a request with `options` (already checked by
    /// [`Engine::check_request`]): it samples with seed `seed + index`.
    pub(crate) fn new(
        engine: &'e Engine,
        options: &GenerateOptions,
        conditions: &StopConditions,
        prompt_len: usize,
        index: usize,
    ) -> Result<Self, Error> {
        let mut params = options.sampling.clone();
        params.seed = Some(params.seed.unwrap_or(0).wrapping_add(index as u64));
        params.top_logprobs = options.top_logprobs;
        if params.dry_multiplier > 0.0 && params.dry_sequence_breaker_ids.is_empty() {
            params.dry_sequence_breaker_ids = engine.dry_breaker_ids(&params.dry_sequence_breakers);
        }
        let masking = match &options.constraint {
            Some(spec) => {
                let constraint = engine.sendable_constraint(spec, &options.constraint_limits)?;
                Some(Masking {
                    mask: constraint.vocab().empty_mask(),
                    constraint,
                    ready: None,
                })
            }
            None => None,
        };
        Ok(Decoding {
            index,
            sampler: Sampler::new(&params)?,
            stop: StopState::new(conditions, prompt_len)?,
            decoder: StreamDecoder::new(engine.tokenizer(), true),
            tokens: Vec::new(),
            text: String::new(),
            logprob: 0.0,
            first_token: None,
            last_token: None,
            masking,
            raw_logprobs: options.logprobs || options.top_logprobs > 0,
        })
    }

    /// Chooses the next token from the logits after `prompt` and the tokens so far: the
    /// constraint's mask, the sampling chain, the stop conditions and the stream decoder. Returns
    /// its event and, when the answer ends with it, why.
    pub(crate) fn choose(
        &mut self,
        engine: &Engine,
        prompt: &[u32],
        logits: &[f32],
    ) -> Result<(TokenEvent, Option<Stop>), Error> {
        let raw_logprobs = self.raw_logprobs;
        let row = self.batch_row(prompt, logits)?;
        // The same token and the same random numbers either way; `choose` skips the pass over
        // the vocabulary that the model's own log-probabilities cost.
        let chosen = if raw_logprobs {
            Chosen::from_sampled(row.sampler.sample(row.logits, &row.ctx)?, true)
        } else {
            let c = row.sampler.choose(row.logits, &row.ctx)?;
            Chosen {
                token: c.token,
                logprob: c.logprob,
                raw_logprob: None,
                top: Vec::new(),
            }
        };
        self.accept(engine, chosen)
    }

    /// Whether this completion's choices need the model's own log-probabilities (an exponential
    /// pass over the vocabulary): [`Sampler::sample`](nextok_sampling::Sampler::sample) when
    /// they do, [`Sampler::choose`](nextok_sampling::Sampler::choose) (the same token) when not.
    pub(crate) fn raw_logprobs(&self) -> bool {
        self.raw_logprobs
    }

    /// What the sampler drew for this completion by [`nextok_sampling::sample_batch`] or
    /// [`nextok_sampling::choose_batch`] (as [`Decoding::raw_logprobs`] says), kept as
    /// [`Decoding::accept`] takes it: the raw log-probability only when the caller asked for
    /// it.
    pub(crate) fn chosen(&self, drawn: Drawn) -> Chosen {
        match drawn {
            Drawn::Sampled(s) => Chosen::from_sampled(s, self.raw_logprobs),
            Drawn::Chosen(c) => Chosen {
                token: c.token,
                logprob: c.logprob,
                raw_logprob: None,
                top: Vec::new(),
            },
        }
    }

    /// The first half of [`Decoding::choose`]: the sampler, logits and context (with the
    /// constraint's mask, computed now unless it is ready) of the next choice, as
    /// [`nextok_sampling::sample_batch`] takes them, so that many completions draw in one call.
    /// The choice is completed by [`Decoding::accept`] with what the sampler drew.
    pub(crate) fn batch_row<'a>(
        &'a mut self,
        prompt: &'a [u32],
        logits: &'a [f32],
    ) -> Result<BatchRow<'a>, Error> {
        let allowed = match self.masking.as_mut() {
            Some(m) => Some(m.take()?),
            None => None,
        };
        Ok(BatchRow {
            sampler: &mut self.sampler,
            logits,
            ctx: Context {
                prompt,
                generated: &self.tokens,
                allowed,
            },
        })
    }

    /// The second half of [`Decoding::choose`]: the token `sampled` from the row of
    /// [`Decoding::batch_row`] goes to the constraint, the stream decoder and the stop
    /// conditions. Returns its event and, when the answer ends with it, why.
    pub(crate) fn accept(
        &mut self,
        engine: &Engine,
        sampled: Chosen,
    ) -> Result<(TokenEvent, Option<Stop>), Error> {
        let mut constraint_done = false;
        if let Some(m) = self.masking.as_mut() {
            m.constraint.advance(sampled.token)?;
            constraint_done = m.constraint.is_finished();
        }
        let now = Instant::now();
        self.first_token.get_or_insert(now);
        self.last_token = Some(now);
        let token = sampled.token;
        let piece = self.decoder.push(token)?;
        let step = self.stop.push(token, piece.as_bytes());
        self.tokens.push(token);
        self.logprob += sampled.logprob as f64;
        let mut text = step.text;
        // A constraint that has accepted an end token allows nothing more, even when end tokens
        // do not stop the answer (ignore_eos): the answer ends there.
        let stop = match step.stop {
            None if constraint_done => Some(Stop::EndTurn { token }),
            other => other,
        };
        if let Some(stop) = &stop {
            // Bytes of an unfinished character are released as U+FFFD, as decoding the whole
            // answer at once would; after a stop sequence they were cut anyway.
            if !matches!(stop, Stop::StopSequence { .. }) {
                text.push_str(&self.decoder.finish());
            }
        }
        self.text.push_str(&text);
        let event = TokenEvent {
            index: self.index,
            id: token,
            text,
            logprob: sampled.logprob,
            raw_logprob: sampled.raw_logprob,
            top: alternatives(engine, &sampled.top),
        };
        Ok((event, stop))
    }

    /// The finished completion; its text and tokens move into it, so this is called once, when
    /// [`Decoding::choose`] has reported a stop. `timings` comes without its per-token figures,
    /// which are computed here from the completion's own first and last tokens.
    pub(crate) fn finish(
        &mut self,
        prompt: &[u32],
        cached_prompt_tokens: usize,
        stop: Stop,
        mut timings: Timings,
    ) -> Completion {
        let tokens = std::mem::take(&mut self.tokens);
        per_token(&mut timings, tokens.len());
        Completion {
            index: self.index,
            text: std::mem::take(&mut self.text),
            usage: Usage {
                prompt_tokens: prompt.len(),
                cached_prompt_tokens,
                completion_tokens: tokens.len(),
                total_tokens: prompt.len() + tokens.len(),
            },
            tokens,
            prompt_tokens: prompt.to_vec(),
            stop,
            logprob: self.logprob,
            timings,
        }
    }
}

/// What the sampler drew for one choice: with the model's own log-probabilities
/// ([`nextok_sampling::Sampler::sample`]) or without ([`nextok_sampling::Sampler::choose`]).
pub(crate) enum Drawn {
    Sampled(Sampled),
    Chosen(nextok_sampling::Chosen),
}

/// What one choice gives [`Decoding::accept`]: the sampler's answer, with the model's own
/// log-probabilities only when they were asked for.
pub(crate) struct Chosen {
    token: u32,
    logprob: f32,
    raw_logprob: Option<f32>,
    top: Vec<nextok_sampling::TokenLogprob>,
}

impl Chosen {
    fn from_sampled(s: Sampled, raw_logprobs: bool) -> Self {
        Chosen {
            token: s.token,
            logprob: s.logprob,
            raw_logprob: raw_logprobs.then_some(s.raw_logprob),
            top: s.top,
        }
    }
}

/// The alternatives' ids, texts and log-probabilities.
fn alternatives(engine: &Engine, top: &[nextok_sampling::TokenLogprob]) -> Vec<Alternative> {
    let tok = engine.tokenizer();
    top.iter()
        .map(|a| Alternative {
            id: a.token,
            text: String::from_utf8_lossy(tok.token_bytes(a.token).unwrap_or_default())
                .into_owned(),
            logprob: a.raw_logprob,
        })
        .collect()
}

/// One completion being generated by a [`Generation`]: its choices, its cache and the logits of
/// its next token.
struct Run<'e> {
    decoding: Decoding<'e>,
    cache: KvCache,
    logits: Vec<f32>,
}

/// A generation in progress: an iterator of [`Event`]s.
///
/// Created by [`Engine::generate`]. The prefill runs on the first call to `next`. Then each round
/// chooses one token for every running completion and runs those tokens through the model in one
/// batched pass; the round's events come out one per call. With `n > 1` the completions' token
/// events interleave (each carries its `index`), and each completion's [`Event::Done`] comes as
/// soon as it ends. After every completion has ended the iterator ends;
/// [`Generation::into_cache`] then gives back the KV cache of the last completion that ended, for
/// a conversation that goes on.
pub struct Generation<'e> {
    engine: &'e Engine,
    options: GenerateOptions,
    conditions: StopConditions,
    prompt: Vec<u32>,
    started: Instant,
    /// The cache before the prefill (reused prefix only) until the prefill runs; after it, the
    /// prompt's cache, forked for each completion.
    cache: Option<KvCache>,
    cached_prompt_tokens: usize,
    prefilled: bool,
    prefill_s: f64,
    first_logits: Vec<f32>,
    /// The completions still running; they decode side by side, one batched pass per round.
    runs: Vec<Run<'e>>,
    /// Drafting for exact speculative decoding, when it is on (one completion, no beams).
    speculation: Option<Speculation>,
    pending: VecDeque<Event>,
    last_cache: Option<KvCache>,
    failed: bool,
}

impl std::fmt::Debug for Generation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("prompt_tokens", &self.prompt.len())
            .field("options", &self.options)
            .finish()
    }
}

impl Engine {
    /// Starts generating from a prompt.
    pub fn generate(
        &self,
        prompt: &Prompt,
        options: &GenerateOptions,
    ) -> Result<Generation<'_>, Error> {
        let started = Instant::now();
        let ids = self.encode_prompt(prompt)?;
        self.generate_from(ids, options, None, started)
    }

    /// Starts generating from prompt ids, reusing `cache` for the part of the prompt it already
    /// holds (a conversation that goes on).
    pub fn generate_ids(
        &self,
        prompt: Vec<u32>,
        options: &GenerateOptions,
        cache: Option<KvCache>,
    ) -> Result<Generation<'_>, Error> {
        self.generate_from(prompt, options, cache, Instant::now())
    }

    fn generate_from(
        &self,
        prompt: Vec<u32>,
        options: &GenerateOptions,
        cache: Option<KvCache>,
        started: Instant,
    ) -> Result<Generation<'_>, Error> {
        let conditions = self.check_request(&prompt, options)?;
        let mut cache = cache.unwrap_or_else(|| self.new_cache());
        let cached_prompt_tokens = cache.reuse_prefix(&prompt);
        Ok(Generation {
            engine: self,
            options: options.clone(),
            conditions,
            started,
            cache: Some(cache),
            cached_prompt_tokens,
            prefilled: false,
            prefill_s: 0.0,
            first_logits: Vec::new(),
            runs: Vec::new(),
            speculation: (options.speculative && options.n == 1 && options.beams.is_none())
                .then(|| Speculation::new(&prompt)),
            prompt,
            pending: VecDeque::new(),
            last_cache: None,
            failed: false,
        })
    }

    /// Checks a request before any time is spent on the model, and returns its stop conditions:
    /// a non-empty prompt of ids in the vocabulary, the options ([`GenerateOptions::validate`]),
    /// a constraint that builds, stop sequences and max tokens, and a prompt that leaves room
    /// for an answer in the context window.
    pub(crate) fn check_request(
        &self,
        prompt: &[u32],
        options: &GenerateOptions,
    ) -> Result<StopConditions, Error> {
        if prompt.is_empty() {
            return Err(Error::EmptyPrompt);
        }
        let vocab = self.vocab_size();
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange { id, vocab });
        }
        options.validate()?;
        if let Some(&id) = options
            .stop_token_ids
            .iter()
            .find(|&&id| id as usize >= vocab)
        {
            return Err(Error::TokenOutOfRange { id, vocab });
        }
        if let Some(spec) = &options.constraint {
            // Built once here so that a bad pattern, schema or grammar is refused before any time
            // is spent on the model.
            self.constraint_with_limits(spec, &options.constraint_limits)?;
        }
        let conditions = StopConditions {
            end_tokens: {
                let mut ends = if options.ignore_eos {
                    Vec::new()
                } else {
                    self.end_tokens()
                };
                ends.extend(
                    options
                        .stop_token_ids
                        .iter()
                        .filter(|id| !ends.contains(id))
                        .collect::<Vec<_>>(),
                );
                ends
            },
            max_new_tokens: options.max_tokens,
            stop_sequences: options.stop.clone(),
            context_window: Some(self.context_window()),
            ..StopConditions::default()
        };
        // Checks the stop sequences, max tokens and that the prompt leaves room for an answer,
        // before any time is spent on the model.
        StopState::new(&conditions, prompt.len()).map_err(|e| match e {
            nextok_stopping::Error::PromptFillsContextWindow {
                prompt_tokens,
                context_window,
            } => Error::ContextWindowExceeded {
                tokens: prompt_tokens,
                context_window,
            },
            other => other.into(),
        })?;
        Ok(conditions)
    }
}

impl<'e> Generation<'e> {
    /// The prompt's token ids.
    pub fn prompt_tokens(&self) -> &[u32] {
        &self.prompt
    }

    /// The KV cache of the last completion that finished (prompt and answer, without the last
    /// token chosen, which was never run through the model). `None` before one has finished.
    pub fn into_cache(self) -> Option<KvCache> {
        self.last_cache
    }

    /// How speculative decoding went so far: drafts checked, tokens drafted and kept (all zero
    /// when it is off, or did not pay and was never tried).
    pub fn speculative_stats(&self) -> SpeculativeStats {
        self.speculation
            .as_ref()
            .map(Speculation::stats)
            .unwrap_or_default()
    }

    /// Runs the generation to the end and returns its completions, in index order.
    pub fn collect_completions(&mut self) -> Result<Vec<Completion>, Error> {
        let mut out = Vec::new();
        for event in self.by_ref() {
            if let Event::Done(c) = event? {
                out.push(*c);
            }
        }
        out.sort_by_key(|c| c.index);
        Ok(out)
    }

    fn prefill(&mut self) -> Result<(), Error> {
        let t = Instant::now();
        let mut cache = self.cache.take().unwrap_or_else(|| self.engine.new_cache());
        let start = cache.len();
        self.first_logits = self
            .engine
            .forward(&mut cache, &self.prompt[start..], Logits::Last)?;
        self.cache = Some(cache);
        self.prefill_s = t.elapsed().as_secs_f64();
        self.prefilled = true;
        Ok(())
    }

    fn start_run(&mut self, index: usize) -> Result<Run<'e>, Error> {
        // The last completion takes the prompt's cache itself; earlier ones fork it.
        let cache = if index + 1 == self.options.n {
            self.cache.take()
        } else {
            self.cache.as_ref().map(KvCache::fork)
        }
        .unwrap_or_else(|| self.engine.new_cache());
        Ok(Run {
            decoding: Decoding::new(
                self.engine,
                &self.options,
                &self.conditions,
                self.prompt.len(),
                index,
            )?,
            cache,
            logits: self.first_logits.clone(),
        })
    }

    /// Chooses one token of a run. Returns its event, and either the run (to be given the
    /// chosen token's logits) or, when the answer has ended, the completion.
    fn step(
        &mut self,
        mut run: Run<'e>,
    ) -> Result<(TokenEvent, Result<Run<'e>, Completion>), Error> {
        let (event, stop) = run
            .decoding
            .choose(self.engine, &self.prompt, &run.logits)?;
        Ok(match stop {
            Some(stop) => (event, Err(self.finish(run, stop))),
            None => (event, Ok(run)),
        })
    }

    /// One round: every running completion chooses a token, and those that go on run their
    /// tokens through the model together in one batched pass (the weights are read once for all
    /// of them). Its events are queued.
    fn round(&mut self) -> Result<(), Error> {
        let mut going = Vec::with_capacity(self.runs.len());
        for run in std::mem::take(&mut self.runs) {
            let (event, next) = self.step(run)?;
            self.pending.push_back(Event::Token(event));
            match next {
                Ok(run) => going.push(run),
                Err(done) => self.pending.push_back(Event::Done(Box::new(done))),
            }
        }
        let tokens: Vec<u32> = going
            .iter()
            .filter_map(|r| r.decoding.tokens.last().copied())
            .collect();
        let mut caches: Vec<&mut KvCache> = Vec::with_capacity(going.len());
        let mut masks = Vec::new();
        for run in going.iter_mut() {
            caches.push(&mut run.cache);
            masks.extend(run.decoding.masking.as_mut());
        }
        let engine = self.engine;
        let logits =
            overlapping_masks(engine, masks, || engine.forward_batch(&mut caches, &tokens))?;
        for (run, logits) in going.iter_mut().zip(logits) {
            run.logits = logits;
        }
        self.runs = going;
        Ok(())
    }

    /// One round of exact speculative decoding for the one running completion. Its last chosen
    /// token (not yet in its cache) and a draft to follow it run through the model in one pass
    /// that returns the logits of every position; then the ordinary choice runs at each
    /// position in turn, and a drafted token is kept exactly when it is the chosen one. The
    /// first choice that differs from the draft (or the one after a draft kept whole) ends the
    /// round; the rest of the draft is dropped from the cache. The choices are those of the
    /// plain loop (one per emitted token, with its mask, random draw and stop check), and no
    /// choice is made for a dropped position.
    fn speculative_round(&mut self) -> Result<(), Error> {
        let Some(mut run) = self.runs.pop() else {
            return Ok(());
        };
        let Some(&last) = run.decoding.tokens.last() else {
            // The first token comes from the prefill's logits.
            let (event, next) = self.step(run)?;
            self.pending.push_back(Event::Token(event));
            match next {
                Ok(run) => self.runs.push(run),
                Err(done) => self.pending.push_back(Event::Done(Box::new(done))),
            }
            return Ok(());
        };
        let engine = self.engine;
        let base = run.cache.len();
        // A round chooses at most one token more than it drafts: the draft stays within the
        // tokens the answer may still take and the positions the context window has left.
        let chosen = run.decoding.tokens.len();
        let answer_room = self
            .options
            .max_tokens
            .map_or(usize::MAX, |m| m.saturating_sub(chosen));
        let context_room = engine.context_window().saturating_sub(base);
        let limit = answer_room.min(context_room).saturating_sub(1);
        let mut input = vec![last];
        if let Some(s) = self.speculation.as_mut() {
            s.draft(&run.decoding.tokens, limit, &mut input);
        }
        let drafted = input.len() - 1;
        let positions = if drafted == 0 {
            Logits::Last
        } else {
            Logits::All
        };
        let rows = {
            let masks = run.decoding.masking.as_mut().into_iter().collect();
            let cache = &mut run.cache;
            overlapping_masks(engine, masks, || engine.forward(cache, &input, positions))?
        };
        let vocab = engine.vocab_size();
        if rows.len() != input.len() * vocab {
            return Err(Error::ModelOutput {
                expected: input.len() * vocab,
                got: rows.len(),
            });
        }
        let mut accepted = 0;
        let mut stop = None;
        for (j, row) in rows.chunks_exact(vocab).enumerate() {
            let (event, end) = run.decoding.choose(engine, &self.prompt, row)?;
            let id = event.id;
            self.pending.push_back(Event::Token(event));
            // The cache keeps the positions before the token just chosen.
            if end.is_some() || input.get(j + 1) != Some(&id) {
                run.cache.truncate(base + 1 + j);
                stop = end;
                break;
            }
            accepted += 1;
        }
        if let Some(s) = self.speculation.as_mut() {
            s.record(drafted, accepted);
        }
        match stop {
            Some(stop) => {
                let done = self.finish(run, stop);
                self.pending.push_back(Event::Done(Box::new(done)));
            }
            None => self.runs.push(run),
        }
        Ok(())
    }

    fn timings(&self, first: Option<Instant>, last: Option<Instant>, cache: &KvCache) -> Timings {
        let prefilled = self.prompt.len() - self.cached_prompt_tokens;
        timings(
            self.started,
            first,
            last,
            self.prefill_s,
            prefilled,
            cache.bytes(),
        )
    }

    fn finish(&mut self, mut run: Run<'e>, stop: Stop) -> Completion {
        let d = &run.decoding;
        let timings = self.timings(d.first_token, d.last_token, &run.cache);
        let completion =
            run.decoding
                .finish(&self.prompt, self.cached_prompt_tokens, stop, timings);
        self.last_cache = Some(run.cache);
        completion
    }

    /// Beam search over the whole answer; its events are queued.
    fn beam(&mut self, beams: BeamOptions) -> Result<(), Error> {
        let engine = self.engine;
        let prompt_cache = self.cache.take().unwrap_or_else(|| engine.new_cache());
        let context_left = engine.context_window() - self.prompt.len();
        let config = BeamConfig {
            beam_width: beams.width,
            num_return_sequences: self.options.n,
            length_penalty: beams.length_penalty,
            end_tokens: self.conditions.end_tokens.clone(),
            early_stopping: true,
            max_new_tokens: self
                .options
                .max_tokens
                .unwrap_or(context_left)
                .min(context_left),
        };
        // Each running beam's cache and next-token log-probabilities, by its tokens so far. A
        // beam's cache is a fork of its parent's with one more token: copy-on-write, so the
        // prompt's keys and values are shared by every beam.
        let mut states: HashMap<Vec<u32>, (KvCache, Vec<f32>)> = HashMap::new();
        states.insert(Vec::new(), (prompt_cache, log_softmax(&self.first_logits)?));
        let mut token_logprob: HashMap<Vec<u32>, f32> = HashMap::new();
        let mut first_token: Option<Instant> = None;
        let hypotheses = beam_search(&config, |prefixes: &[&[u32]]| {
            if prefixes.iter().all(|p| p.is_empty()) {
                let row = states.get(&[][..]).map(|s| s.1.clone()).unwrap_or_default();
                return Ok(vec![row; prefixes.len()]);
            }
            // Every beam is its parent's cache, forked, plus its last token; all of them run in
            // one batched pass.
            let mut caches = Vec::with_capacity(prefixes.len());
            let mut last_tokens = Vec::with_capacity(prefixes.len());
            for &p in prefixes {
                let parent = states.get(&p[..p.len().saturating_sub(1)]);
                let (Some(&last), Some((parent_cache, parent_row))) = (p.last(), parent) else {
                    return Err(Error::InvalidOption {
                        option: "beams",
                        expected: "each beam to extend a beam of the previous step",
                    });
                };
                token_logprob.insert(p.to_vec(), parent_row[last as usize]);
                caches.push(parent_cache.fork());
                last_tokens.push(last);
            }
            first_token.get_or_insert_with(Instant::now);
            let logits = {
                let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
                engine.forward_batch(&mut refs, &last_tokens)?
            };
            let mut next: HashMap<Vec<u32>, (KvCache, Vec<f32>)> = HashMap::new();
            let mut rows = Vec::with_capacity(prefixes.len());
            for ((&p, cache), logits) in prefixes.iter().zip(caches).zip(logits) {
                let row = log_softmax(&logits)?;
                rows.push(row.clone());
                next.insert(p.to_vec(), (cache, row));
            }
            states = next;
            Ok::<_, Error>(rows)
        })?;
        let last_token = Some(Instant::now());
        for (index, h) in hypotheses.into_iter().enumerate() {
            let mut stop_state = StopState::new(&self.conditions, self.prompt.len())?;
            let mut decoder = StreamDecoder::new(engine.tokenizer(), true);
            let mut text = String::new();
            let mut tokens = Vec::new();
            let mut stop = None;
            for (i, &id) in h.tokens.iter().enumerate() {
                let piece = decoder.push(id)?;
                let step = stop_state.push(id, piece.as_bytes());
                tokens.push(id);
                let mut piece_text = step.text;
                if let Some(s) = &step.stop {
                    if !matches!(s, Stop::StopSequence { .. }) {
                        piece_text.push_str(&decoder.finish());
                    }
                }
                text.push_str(&piece_text);
                let lp = token_logprob
                    .get(&h.tokens[..=i])
                    .copied()
                    .unwrap_or(f32::NAN);
                self.pending.push_back(Event::Token(TokenEvent {
                    index,
                    id,
                    text: piece_text,
                    logprob: lp,
                    raw_logprob: Some(lp),
                    top: Vec::new(),
                }));
                if step.stop.is_some() {
                    stop = step.stop;
                    break;
                }
            }
            let stop = match stop {
                Some(s) => s,
                None => {
                    text.push_str(&stop_state.finish());
                    Stop::MaxTokens
                }
            };
            let cache = states
                .get(&h.tokens[..h.tokens.len().saturating_sub(1)])
                .map(|s| s.0.fork())
                .unwrap_or_else(|| engine.new_cache());
            let mut timings = self.timings(first_token, last_token, &cache);
            per_token(&mut timings, tokens.len());
            self.pending.push_back(Event::Done(Box::new(Completion {
                index,
                text,
                usage: Usage {
                    prompt_tokens: self.prompt.len(),
                    cached_prompt_tokens: self.cached_prompt_tokens,
                    completion_tokens: tokens.len(),
                    total_tokens: self.prompt.len() + tokens.len(),
                },
                tokens,
                prompt_tokens: self.prompt.clone(),
                stop,
                logprob: h.logprob,
                timings,
            })));
        }
        Ok(())
    }

    fn advance(&mut self) -> Result<Option<Event>, Error> {
        if let Some(e) = self.pending.pop_front() {
            return Ok(Some(e));
        }
        if !self.prefilled {
            self.prefill()?;
            if let Some(b) = self.options.beams {
                self.beam(b)?;
                return Ok(self.pending.pop_front());
            }
            for index in 0..self.options.n {
                let run = self.start_run(index)?;
                self.runs.push(run);
            }
        }
        if self.runs.is_empty() {
            return Ok(None);
        }
        if self.speculation.is_some() {
            self.speculative_round()?;
        } else {
            self.round()?;
        }
        Ok(self.pending.pop_front())
    }
}

/// A completion's timings, without the per-token figures
/// ([`Decoding::into_completion`] adds them): `started` is when the request came, `first` and
/// `last` when its first and last tokens were chosen, `prefill_s` how long the prompt's pass took
/// and `prefilled` how many prompt tokens it ran.
pub(crate) fn timings(
    started: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    prefill_s: f64,
    prefilled: usize,
    kv_cache_bytes: u64,
) -> Timings {
    let ttft = first.map_or(0.0, |f| (f - started).as_secs_f64());
    let decode_s = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => 0.0,
    };
    Timings {
        time_to_first_token_s: ttft,
        prefill_s,
        prefill_tokens_per_s: rate(prefilled, prefill_s),
        decode_s,
        decode_tokens_per_s: 0.0,
        time_per_output_token_s: 0.0,
        total_s: started.elapsed().as_secs_f64(),
        kv_cache_bytes,
    }
}

/// Fills in the figures per token after the first, for an answer of `tokens` tokens.
fn per_token(timings: &mut Timings, tokens: usize) {
    let after_first = tokens.saturating_sub(1);
    timings.decode_tokens_per_s = rate(after_first, timings.decode_s);
    timings.time_per_output_token_s = if after_first > 0 {
        timings.decode_s / after_first as f64
    } else {
        0.0
    };
}

fn rate(count: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.advance() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => None,
            Err(e) => {
                // After an error the state is not worth resuming: the iterator ends.
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
