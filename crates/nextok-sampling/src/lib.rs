//! Turn logits into a chosen token: softmax, temperature, top-k, top-p, min-p, penalties, seeded
//! sampling and beam search.
//!
//! This crate knows nothing about models, tokenizers or devices: it takes a slice of logits (one
//! `f32` per token of the vocabulary) and returns a token id. It follows the specification's
//! chapter "Choosing the next token" (the specification, *Inference and Decoding*).
//!
//! # Contents
//! - [`softmax`], [`log_softmax`], [`log_sum_exp`]: numerically stable, `-inf` gives exactly 0,
//!   NaN never comes out (NaN or `+inf` logits are an [`Error`]).
//! - [`SamplingParams`]: the settings users know (`temperature`, `top_k`, `top_p`, `min_p`,
//!   `repetition_penalty`, `presence_penalty`, `frequency_penalty`, `logit_bias`, `seed`, ...),
//!   serde-serialisable, checked by [`SamplingParams::validate`].
//! - [`Sampler`]: runs the chain and draws a token with a seeded ChaCha20 generator; returns a
//!   [`Sampled`] with the token, its log-probability under the final and the raw distribution,
//!   and the top alternatives when asked ([`Sampler::choose`]: the same token, without the raw
//!   distribution). [`sample_batch`] samples many sequences' rows over a thread pool.
//! - [`Chain`] and the stages ([`Temperature`], [`TopK`], [`TopP`], [`MinP`],
//!   [`RepetitionPenalty`], [`PresenceFrequencyPenalty`], [`LogitBias`], [`AllowedTokens`],
//!   [`BannedTokens`], [`MinTokens`]): each implements [`LogitsProcessor`] over a shared
//!   [`Candidates`] buffer; a chain is itself a stage, so custom orders and custom stages compose.
//!   Each stage's documentation says exactly what it computes. After any stage,
//!   [`Candidates::dense_logits`] and [`Candidates::dense_probs`] give the logits and the
//!   distribution over the whole vocabulary (`-inf` and 0 for the tokens filtered out).
//! - The stages users of other libraries reach for, under their names there (in `extra.rs`):
//!   [`TypicalP`] (`typical_p`), [`EpsilonCutoff`] and [`EtaCutoff`] (`epsilon_cutoff`,
//!   `eta_cutoff`), [`NoRepeatNGram`] and [`EncoderNoRepeatNGram`] (`no_repeat_ngram_size`,
//!   `encoder_no_repeat_ngram_size`), [`Dry`] (`dry_*`), [`Xtc`] (`xtc_*`), [`TopNSigma`]
//!   (`top_n_sigma`), [`Mirostat`] 1 and 2 (`mirostat`, `mirostat_tau`, `mirostat_eta`),
//!   [`DynamicTemperature`] (`dynatemp_range`, `dynatemp_exponent`) and [`MinKeep`]
//!   (`min_tokens_to_keep` for top-p, min-p, typical-p and the cutoffs). Each says which paper or
//!   library it follows; `spec-tests` checks each against a textbook reference.
//! - [`Trace`]: the distribution after each stage, for debugging (what `nextok sample` prints).
//! - [`beam_search`]: beam search over a callback that scores next tokens, with a length penalty.
//!
//! # The order of the stages
//! The default order is the specification's: token filters (constraint mask, allowed and banned
//! ids, min-tokens), then penalties, logit bias, temperature, softmax, top-k, top-p, min-p,
//! renormalise, sample. The filters always run first; the six other stages can be reordered with
//! [`SamplingParams::order`] (for example llama.cpp applies temperature after top-k and top-p).
//! Softmax is not a stage: probabilities are computed when a stage needs them, over the tokens
//! still in the running, so each filter renormalises what it keeps.
//!
//! The other stages sit around these six where llama.cpp's default order
//! (`penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature`) puts them, and
//! move with them when [`SamplingParams::order`] reorders:
//! 1. the no-repeat n-gram filters, with the other filters, first;
//! 2. DRY right after the penalties;
//! 3. top-n-sigma right before top-k, typical-p right after it;
//! 4. the epsilon and eta cutoffs (transformers' order, after min-p) and then XTC, after min-p;
//! 5. dynamic temperature in temperature's place (when `dynatemp_range > 0`), and
//!    `min_tokens_to_keep > 1` wraps top-p and min-p in their places;
//! 6. mirostat last: it reads the chosen token's probability from what it leaves.
//!
//! So the specification's order gives `no-repeat, penalties, DRY, logit bias, temperature,
//! top-n-sigma, top-k, typical-p, top-p, min-p, epsilon, eta, XTC, mirostat`, and the order
//! `[penalties, logit_bias, top_k, top_p, min_p, temperature]` gives llama.cpp's. Top-n-sigma
//! keeps the same tokens before or after a temperature; the others do not. llama.cpp runs
//! mirostat with temperature alone; here the other stages stay in the chain if they are set.
//!
//! # Speed
//! Nothing sorts the whole vocabulary, and nothing copies it into the candidates buffer when the
//! chain starts with top-k, top-p or min-p (without a mask or `-inf` logits): that first stage
//! runs straight on the logits, fused with the fill, and leaves exactly the candidates, in the
//! same order, that the fill and the stage would, so the draws are the same.
//! - The check for NaN and `+inf` and the maximum are one pass (AVX2 where the CPU has it).
//!   Greedy is that pass and a search for the first logit equal to the maximum.
//! - Top-k of a large vocabulary is two passes: the largest logit of each block (a vector
//!   maximum per 8 logits), which gives a bar that at least k logits reach, then only the blocks
//!   above it; of a small one, one pass that tests blocks of 64 logits against a rising bar (the
//!   k-th best so far). Both check the logits as they go, so a first top-k needs no separate
//!   check.
//! - A temperature followed by top-k or min-p (the specification's order) is fused too: the
//!   thresholds apply to the scaled logits `(z - max) / T`, computed as the temperature stage
//!   computes them, so the candidates are the same bits.
//! - Greedy under a constraint's mask first checks whether the mask allows the overall
//!   favourite, which it usually does.
//! - Min-p compares logits with `z_max + ln(min_p)` without exponentiating, skipping whole blocks.
//! - Top-p computes the normaliser in one exponential pass, then tries the best 64 tokens (a
//!   confident model's nucleus); otherwise a histogram of `z_max - z` bounds the mass above each
//!   logit, the tokens above the bound are collected and counting-sorted by buckets of 1/128,
//!   each bucket sorted only as far as the running total needs.
//! - Buffers are kept from one token to the next: sampling allocates nothing once warm.
//! - The raw log-probability costs an exponential pass over the vocabulary: [`Sampler::sample`]
//!   computes it, [`Sampler::choose`] draws the same token without it.
//! - [`sample_batch`] and [`choose_batch`] sample many sequences' rows over a thread pool, each
//!   exactly as alone.
//!
//! The vector code computes the same IEEE operations as the portable code (maxima and
//! comparisons, or the same exponential lane by lane), so results are bit-identical on every
//! machine. `nextok bench --sampler DIR` times llama.cpp's chains on logits files; the benches
//! (`cargo bench -p nextok-benches --bench sampling`) measure vocabularies of 32k to 256k tokens.
//!
//! # Determinism
//! Same logits, parameters and seed give the same token on every platform: the generator is
//! ChaCha20 seeded with [`SamplingParams::seed`], the uniform number is built from its raw bits,
//! the exponential is our own polynomial rather than the C library's, and every stage leaves the
//! candidates in an order fixed by the input (ties between equal logits go to the lowest id).
//!
//! Two stages look beyond the logits. [`Xtc`] draws its own number, from ChaCha20 stream
//! [`XTC_STREAM`] of the same seed at a place fixed by the step (`Context::generated`'s length),
//! so it never moves the sampler's draws and gives the same tokens for the same seed whatever
//! else runs. [`Mirostat`] keeps its `μ` from step to step inside the stage (so inside the
//! [`Sampler`]), learning each chosen token from the next step's `Context::generated`; running
//! a step again gives the same result.
//!
//! ```
//! use nextok_sampling::{Context, SamplingParams, Trace};
//!
//! // DRY: after the text 1 2 3 4 1 2 3, token 4 would repeat "1 2 3 4", a match of 3 tokens,
//! // so it loses 0.8 · 1.75^(3 − 2) = 1.4 (llama.cpp's default base and allowed length).
//! let params = SamplingParams { dry_multiplier: 0.8, ..SamplingParams::default() };
//! let ctx = Context { prompt: &[1, 2, 3, 4], generated: &[1, 2, 3], allowed: None };
//! let trace = Trace::new(&params, &[0.0; 6], &ctx)?;
//! assert!((trace.final_probs[4] - 0.0470).abs() < 1e-4);
//! assert!((trace.final_probs[0] - 0.1906).abs() < 1e-4);
//! # Ok::<(), nextok_sampling::Error>(())
//! ```
//!
//! # Example
//! The specification's worked example: T = 2, top-k 3, top-p 0.9 on the CAT/DOG/IS/LOVELY logits
//! leaves CAT 0.657 and DOG 0.343.
//! ```
//! use nextok_sampling::{Context, Sampler, SamplingParams, Trace};
//!
//! let logits = [6.2, 4.9, 2.1, 1.0]; // CAT, DOG, IS, LOVELY
//! let params = SamplingParams {
//!     temperature: 2.0,
//!     top_k: Some(3),
//!     top_p: 0.9,
//!     seed: Some(7),
//!     ..SamplingParams::default()
//! };
//! let trace = Trace::new(&params, &logits, &Context::default())?;
//! assert!((trace.final_probs[0] - 0.657).abs() < 5e-4);
//! assert!((trace.final_probs[1] - 0.343).abs() < 5e-4);
//!
//! let mut sampler = Sampler::new(&params)?;
//! let out = sampler.sample(&logits, &Context::default())?;
//! assert!(out.token == 0 || out.token == 1); // IS and LOVELY were filtered out
//!
//! let greedy = Sampler::new(&SamplingParams::greedy())?.sample(&logits, &Context::default())?;
//! assert_eq!(greedy.token, 0);
//! assert!((greedy.raw_logprob - 0.772f32.ln()).abs() < 1e-3);
//! # Ok::<(), nextok_sampling::Error>(())
//! ```

mod batch;
mod beam;
mod candidates;
mod error;
mod extra;
mod params;
mod sampler;
mod softmax;
mod stages;
mod trace;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use batch::{choose_batch, sample_batch, BatchRow};
pub use beam::{beam_search, BeamConfig, Hypothesis};
pub use candidates::{Candidate, Candidates};
pub use error::Error;
pub use extra::{
    dry_breaker_ids, Dry, DynamicTemperature, EncoderNoRepeatNGram, EpsilonCutoff, EtaCutoff,
    MinKeep, Mirostat, MirostatVersion, NoRepeatNGram, TopNSigma, TypicalP, Xtc, XTC_STREAM,
};
pub use params::{SamplingParams, StageKind};
pub use sampler::{Chosen, Sampled, Sampler, TokenLogprob};
pub use softmax::{exp_nonpositive, log_softmax, log_sum_exp, softmax, softmax_into};
pub use stages::{
    AllowedTokens, BannedTokens, Chain, Context, LogitBias, LogitsProcessor, MinP, MinTokens,
    PresenceFrequencyPenalty, RepetitionPenalty, Temperature, TopK, TopP,
};
pub use trace::{Trace, TraceStage};

// Compiles and runs the README's example as a doctest, so that it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
