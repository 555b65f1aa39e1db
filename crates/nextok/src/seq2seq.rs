//! Generation with an encoder–decoder model: the specification's "Encoder–decoder: translating
//! 'I love you very much'".
//!
//! The encoder runs once over the source; the keys and values of every decoder layer's
//! cross-attention are computed from its output once; the decoder then starts from a start token
//! (`<SOS>`) and runs one pass per new token with its own KV cache, exactly like the decoder-only
//! loop: the same sampling chain (or beam search), the same stop conditions. The model works on
//! token ids (the specification's base model has no tokenizer), so the result is ids.
//!
//! ```
//! use nextok::model::{CpuBackend, EncDecConfig, EncoderDecoder};
//! use nextok::sampling::SamplingParams;
//! use nextok::seq2seq::{generate, Seq2SeqOptions};
//! use nextok::StopReason;
//!
//! // A small model with seeded random weights; token 0 is <SOS>, token 1 is <EOS>.
//! let config = EncDecConfig { encoder_layers: 1, decoder_layers: 1, d_model: 32, heads: 2, ffn_dim: 64, vocab: 20 };
//! let model = EncoderDecoder::random(config, 7)?;
//! let options = Seq2SeqOptions {
//!     start_token: 0,
//!     end_tokens: vec![1],
//!     max_tokens: 4,
//!     sampling: SamplingParams::greedy(),
//!     beams: None,
//! };
//! let out = generate(&model, &CpuBackend::new(1), &[3, 4, 5], &options)?;
//! assert!(out.tokens.len() <= 4);
//! assert!(matches!(out.stop_reason, StopReason::EndTurn | StopReason::MaxTokens));
//! # Ok::<(), nextok::Error>(())
//! ```

use std::collections::HashMap;

use nextok_kv_cache::{KvCache, KvType};
use nextok_model::{Backend, CrossAttention, DecoderSequence, EncoderDecoder, Logits};
use nextok_sampling::{beam_search, log_softmax, BeamConfig, Context, Sampler, SamplingParams};
use nextok_stopping::{StopConditions, StopReason, StopState};

use crate::Error;

/// How to generate with an encoder–decoder model.
#[derive(Debug, Clone)]
pub struct Seq2SeqOptions {
    /// The token the decoder starts from (`<SOS>`).
    pub start_token: u32,
    /// Tokens that end the answer (`<EOS>`).
    pub end_tokens: Vec<u32>,
    /// The most tokens to generate (the end token included).
    pub max_tokens: usize,
    /// The decoding rule when `beams` is `None`.
    pub sampling: SamplingParams,
    /// Beam search instead of sampling: `(width, length penalty)`.
    pub beams: Option<(usize, f64)>,
}

/// The result of [`generate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Seq2SeqOutput {
    /// The generated ids, the end token included when the answer ended with one.
    pub tokens: Vec<u32>,
    /// The sum of the tokens' natural log-probabilities under the model (the raw distribution).
    pub logprob: f64,
    /// Why generation stopped: `end_turn` or `max_tokens`.
    pub stop_reason: StopReason,
    /// Decoder positions computed for this answer (one per step with the cache).
    pub decoder_positions: u64,
}

/// Translates `source`: the encoder once, then one decoder pass per token.
pub fn generate(
    model: &EncoderDecoder,
    backend: &dyn Backend,
    source: &[u32],
    options: &Seq2SeqOptions,
) -> Result<Seq2SeqOutput, Error> {
    if options.max_tokens == 0 {
        return Err(Error::InvalidOption {
            option: "max_tokens",
            expected: "at least 1",
        });
    }
    let positions_before = model.decoder_positions();
    let cross = model.encode(backend, source)?;
    let mut cache = model.new_cache(KvType::F32);
    let first = step(model, backend, &cross, &mut cache, options.start_token)?;
    let mut output = match options.beams {
        None => sample(model, backend, &cross, cache, first, options)?,
        Some((width, length_penalty)) => beams(
            model,
            backend,
            &cross,
            cache,
            first,
            options,
            width,
            length_penalty,
        )?,
    };
    output.decoder_positions = model.decoder_positions() - positions_before;
    Ok(output)
}

/// Runs one new token through the decoder and returns the logits after it.
fn step(
    model: &EncoderDecoder,
    backend: &dyn Backend,
    cross: &CrossAttention,
    cache: &mut KvCache,
    token: u32,
) -> Result<Vec<f32>, Error> {
    let tokens = [token];
    let mut batch = [DecoderSequence {
        cross,
        cache,
        tokens: &tokens,
        logits: Logits::Last,
    }];
    let mut rows = model.decode(backend, &mut batch)?;
    rows.pop().ok_or(Error::InvalidOption {
        option: "logits",
        expected: "one row from the decoder",
    })
}

fn sample(
    model: &EncoderDecoder,
    backend: &dyn Backend,
    cross: &CrossAttention,
    mut cache: KvCache,
    mut logits: Vec<f32>,
    options: &Seq2SeqOptions,
) -> Result<Seq2SeqOutput, Error> {
    let conditions = StopConditions {
        end_tokens: options.end_tokens.clone(),
        max_new_tokens: Some(options.max_tokens),
        ..StopConditions::default()
    };
    let mut stop_state = StopState::new(&conditions, 1)?;
    let mut sampler = Sampler::new(&options.sampling)?;
    let mut tokens = Vec::new();
    let mut logprob = 0.0f64;
    loop {
        let chosen = sampler.sample(&logits, &Context::new(&tokens))?;
        tokens.push(chosen.token);
        logprob += f64::from(chosen.raw_logprob);
        if let Some(stop) = stop_state.push(chosen.token, &[]).stop {
            return Ok(Seq2SeqOutput {
                tokens,
                logprob,
                stop_reason: stop.reason(),
                decoder_positions: 0,
            });
        }
        logits = step(model, backend, cross, &mut cache, chosen.token)?;
    }
}

#[allow(clippy::too_many_arguments)]
fn beams(
    model: &EncoderDecoder,
    backend: &dyn Backend,
    cross: &CrossAttention,
    cache: KvCache,
    first: Vec<f32>,
    options: &Seq2SeqOptions,
    width: usize,
    length_penalty: f64,
) -> Result<Seq2SeqOutput, Error> {
    let config = BeamConfig {
        beam_width: width,
        num_return_sequences: 1,
        length_penalty,
        end_tokens: options.end_tokens.clone(),
        early_stopping: true,
        max_new_tokens: options.max_tokens,
    };
    // Each running beam's cache and next-token log-probabilities, by its tokens so far. A beam's
    // cache is a fork of its parent's (copy-on-write) with one more token.
    let mut states: HashMap<Vec<u32>, (KvCache, Vec<f32>)> = HashMap::new();
    states.insert(Vec::new(), (cache, log_softmax(&first)?));
    let hypotheses = beam_search(&config, |prefixes: &[&[u32]]| {
        let mut next = HashMap::new();
        let mut rows = Vec::with_capacity(prefixes.len());
        for &p in prefixes {
            if p.is_empty() {
                let row = states.get(p).map(|s| s.1.clone()).unwrap_or_default();
                rows.push(row);
                continue;
            }
            let (Some(&last), Some((parent, _))) = (p.last(), states.get(&p[..p.len() - 1])) else {
                return Err(Error::InvalidOption {
                    option: "beams",
                    expected: "each beam to extend a beam of the previous step",
                });
            };
            let mut cache = parent.fork();
            let row = log_softmax(&step(model, backend, cross, &mut cache, last)?)?;
            rows.push(row.clone());
            next.insert(p.to_vec(), (cache, row));
        }
        if !next.is_empty() {
            states = next;
        }
        Ok::<_, Error>(rows)
    })?;
    let best = hypotheses.into_iter().next().ok_or(Error::InvalidOption {
        option: "beams",
        expected: "a search that returns a sequence",
    })?;
    Ok(Seq2SeqOutput {
        stop_reason: if best.ended {
            StopReason::EndTurn
        } else {
            StopReason::MaxTokens
        },
        tokens: best.tokens,
        logprob: best.logprob,
        decoder_positions: 0,
    })
}
