//! The stages of the sampling chain, and the chain itself.
//!
//! Each stage implements [`LogitsProcessor`]: it works on the shared [`Candidates`] buffer,
//! either changing logits (penalties, bias, temperature) or removing tokens (top-k, top-p, min-p,
//! allowed and banned ids, min-tokens). A [`Chain`] runs stages in order and is itself a stage.
//! Each stage's documentation says exactly what it computes, with `z` for a candidate's logit as
//! it reaches the stage, and its no-op case; [`Chain::from_params`] leaves no-op stages out.
//!
//! Two rules hold for every stage. Filters change no logit, and the probabilities of the tokens
//! they keep are renormalised the next time they are needed (they are always the softmax of the
//! remaining logits). A logit stage whose result is `+inf` stores `f32::MAX`, and one whose
//! result is `-inf` or NaN removes the token, so softmax never sees either.

use std::fmt;

use crate::candidates::Candidates;
use crate::params::{SamplingParams, StageKind};
use crate::trace::TraceStage;
use crate::Error;

/// What a stage may look at besides the logits: the tokens so far, and the constraint mask.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The prompt's tokens (used by the repetition penalty, which covers the whole text so far).
    pub prompt: &'a [u32],
    /// The tokens generated so far (used by every penalty and by min-tokens).
    pub generated: &'a [u32],
    /// Optional allowed-token bitset from a constraint: bit `i % 64` of word `i / 64` set means
    /// token `i` is allowed. Forbidden tokens are removed before the chain runs, exactly as if
    /// their logits were `-inf`.
    pub allowed: Option<&'a [u64]>,
}

impl<'a> Context<'a> {
    /// A context with generated tokens only.
    pub fn new(generated: &'a [u32]) -> Self {
        Context {
            generated,
            ..Context::default()
        }
    }
}

/// One stage of the sampling chain.
pub trait LogitsProcessor: Send + Sync + fmt::Debug {
    /// Short name, shown in the [`Trace`](crate::Trace) (`"top_k"`, `"temperature"`, ...).
    fn name(&self) -> &str;

    /// Applies the stage to the candidates.
    fn apply(&self, candidates: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error>;

    /// Applies the stage and records the distribution after it. A chain records each of its
    /// stages rather than itself.
    fn apply_traced(
        &self,
        candidates: &mut Candidates,
        ctx: &Context<'_>,
        trace: &mut Vec<TraceStage>,
    ) -> Result<(), Error> {
        self.apply(candidates, ctx)?;
        trace.push(TraceStage {
            name: self.name().to_string(),
            probs: candidates.dense_probs()?,
        });
        Ok(())
    }
}

/// A first stage that the sampler can run straight on the raw logits, fused with filling the
/// candidates, so that the whole vocabulary is never copied into the buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FirstStage {
    TopK(usize),
    TopP(f32),
    MinP(f32),
    /// Temperature `t` (neither 0 nor 1), then top-k: the candidates are the best `k` by the
    /// scaled logits, as [`Temperature`] computes them.
    ScaledTopK(f32, usize),
    /// Temperature `t` (neither 0 nor 1), then min-p on the scaled logits.
    ScaledMinP(f32, f32),
}

impl FirstStage {
    /// How many stages of the chain the fused form runs.
    pub(crate) fn stages(self) -> usize {
        match self {
            FirstStage::TopK(_) | FirstStage::TopP(_) | FirstStage::MinP(_) => 1,
            FirstStage::ScaledTopK(..) | FirstStage::ScaledMinP(..) => 2,
        }
    }
}

/// Stages run one after the other; itself a stage.
#[derive(Debug, Default)]
pub struct Chain {
    stages: Vec<Box<dyn LogitsProcessor>>,
    // What the first stage is, when it is one of this crate's filters that can run fused with
    // the fill (see `Candidates::fill_fused`), or a temperature followed by one.
    first: Option<FirstStage>,
    // The temperature of a first stage that is one (neither 0 nor 1), while it is alone.
    first_temperature: Option<f32>,
}

impl Chain {
    /// An empty chain (samples from the plain softmax of the logits).
    pub fn new() -> Self {
        Chain {
            stages: Vec::new(),
            first: None,
            first_temperature: None,
        }
    }

    /// Appends a stage.
    pub fn push(mut self, stage: impl LogitsProcessor + 'static) -> Self {
        let any: &dyn std::any::Any = &stage;
        if let (1, Some(t)) = (self.stages.len(), self.first_temperature) {
            // A temperature then top-k or min-p: both run on the scaled logits, in one go.
            self.first = if let Some(s) = any.downcast_ref::<TopK>() {
                Some(FirstStage::ScaledTopK(t, s.k))
            } else if let Some(s) = any.downcast_ref::<MinP>() {
                (s.p > 0.0).then_some(FirstStage::ScaledMinP(t, s.p))
            } else {
                None
            };
        }
        if self.stages.is_empty() {
            self.first_temperature = any
                .downcast_ref::<Temperature>()
                .and_then(|s| (s.t != 0.0 && s.t != 1.0).then_some(s.t));
            self.first = if let Some(s) = any.downcast_ref::<TopK>() {
                Some(FirstStage::TopK(s.k))
            } else if let Some(s) = any.downcast_ref::<TopP>() {
                (s.p < 1.0).then_some(FirstStage::TopP(s.p))
            } else if let Some(s) = any.downcast_ref::<MinP>() {
                (s.p > 0.0).then_some(FirstStage::MinP(s.p))
            } else {
                None
            };
        }
        self.stages.push(Box::new(stage));
        self
    }

    /// The first stage, when it can run fused with the fill.
    pub(crate) fn first_stage(&self) -> Option<FirstStage> {
        self.first
    }

    /// Applies the stages from `start` on (the ones before it already ran).
    pub(crate) fn apply_from(
        &self,
        candidates: &mut Candidates,
        ctx: &Context<'_>,
        start: usize,
    ) -> Result<(), Error> {
        for stage in self.stages.iter().skip(start) {
            stage.apply(candidates, ctx)?;
            candidates.check_not_empty()?;
        }
        Ok(())
    }

    /// The chain that `params` describe, in `params.order`, after validating them.
    ///
    /// Token filters (allowed and banned ids, min-tokens) always come first, since filtering
    /// after top-k could leave nothing. Stages that would do nothing (temperature 1, top-p 1,
    /// no bias, ...) are left out.
    pub fn from_params(params: &SamplingParams) -> Result<Chain, Error> {
        params.validate()?;
        let mut chain = Chain::new();
        if let Some(ids) = &params.allowed_token_ids {
            chain = chain.push(AllowedTokens::new(ids.clone()));
        }
        if !params.banned_token_ids.is_empty() {
            chain = chain.push(BannedTokens::new(params.banned_token_ids.clone()));
        }
        if params.min_tokens > 0 && !params.end_token_ids.is_empty() {
            chain = chain.push(MinTokens::new(
                params.min_tokens,
                params.end_token_ids.clone(),
            ));
        }
        chain = crate::extra::push_filters(chain, params);
        for kind in &params.order {
            // The stages of `extra` sit around the plain ones in llama.cpp's order.
            chain = crate::extra::push_slot(chain, *kind, params, true)?;
            let replaced;
            (chain, replaced) = crate::extra::replace_slot(chain, *kind, params)?;
            if replaced {
                chain = crate::extra::push_slot(chain, *kind, params, false)?;
                continue;
            }
            match kind {
                StageKind::Penalties => {
                    if params.repetition_penalty != 1.0 {
                        chain = chain.push(RepetitionPenalty::new(params.repetition_penalty)?);
                    }
                    if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
                        chain = chain.push(PresenceFrequencyPenalty::new(
                            params.presence_penalty,
                            params.frequency_penalty,
                        )?);
                    }
                }
                StageKind::LogitBias => {
                    if !params.logit_bias.is_empty() {
                        chain = chain.push(LogitBias::new(
                            params.logit_bias.iter().map(|(&t, &b)| (t, b)).collect(),
                        )?);
                    }
                }
                StageKind::Temperature => {
                    if params.temperature != 1.0 {
                        chain = chain.push(Temperature::new(params.temperature)?);
                    }
                }
                StageKind::TopK => {
                    if let Some(k) = params.top_k {
                        chain = chain.push(TopK::new(k)?);
                    }
                }
                StageKind::TopP => {
                    if params.top_p < 1.0 {
                        chain = chain.push(TopP::new(params.top_p)?);
                    }
                }
                StageKind::MinP => {
                    if params.min_p > 0.0 {
                        chain = chain.push(MinP::new(params.min_p)?);
                    }
                }
            }
            chain = crate::extra::push_slot(chain, *kind, params, false)?;
        }
        crate::extra::push_last(chain, params)
    }

    /// Number of stages (a nested chain counts as one).
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Whether the chain has no stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The names of the stages, in order.
    pub fn names(&self) -> Vec<&str> {
        self.stages.iter().map(|s| s.name()).collect()
    }
}

impl LogitsProcessor for Chain {
    fn name(&self) -> &str {
        "chain"
    }

    fn apply(&self, candidates: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        self.apply_from(candidates, ctx, 0)
    }

    fn apply_traced(
        &self,
        candidates: &mut Candidates,
        ctx: &Context<'_>,
        trace: &mut Vec<TraceStage>,
    ) -> Result<(), Error> {
        for stage in &self.stages {
            stage.apply_traced(candidates, ctx, trace)?;
            candidates.check_not_empty()?;
        }
        Ok(())
    }
}

fn check_range(field: &'static str, tokens: &[u32], vocab: usize) -> Result<(), Error> {
    match tokens.iter().find(|&&t| t as usize >= vocab) {
        Some(&token) => Err(Error::TokenOutOfRange {
            field,
            token,
            vocab,
        }),
        None => Ok(()),
    }
}

fn sorted_unique(mut ids: Vec<u32>) -> Vec<u32> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Temperature: `z ← (z − max) / T`, where `max` is the largest remaining logit. The softmax is
/// that of `z / T` (subtracting a constant changes no probability); subtracting `max` first means
/// a tiny `T` sends the other logits to `−inf`, which removes them, instead of sending the top one
/// to `+inf`. So after this stage the top logit is 0 and the others are negative. `T < 1`
/// sharpens the distribution, `T > 1` flattens it, and the order of the tokens never changes.
///
/// `T = 0` means greedy: only the top token is kept (ties go to the lowest id), its logit
/// unchanged. No-op at `T = 1`: the logits are not even shifted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Temperature {
    t: f32,
}

impl Temperature {
    /// Errors unless `t` is finite and `>= 0`.
    pub fn new(t: f32) -> Result<Self, Error> {
        if !(t.is_finite() && t >= 0.0) {
            return Err(Error::InvalidParam {
                name: "temperature",
                value: t as f64,
                expected: "finite and >= 0 (0 means greedy)",
            });
        }
        Ok(Temperature { t })
    }
}

impl LogitsProcessor for Temperature {
    fn name(&self) -> &str {
        "temperature"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.t == 0.0 {
            c.keep_argmax();
        } else if self.t != 1.0 {
            c.divide_logits(self.t);
        }
        Ok(())
    }
}

/// Top-k: keeps the `k` candidates with the highest logits (equal logits: the lowest ids first),
/// sorted highest first; logits unchanged. No-op when `k` is at least the number of candidates;
/// `k = 1` is greedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopK {
    k: usize,
}

impl TopK {
    /// Errors when `k = 0`.
    pub fn new(k: usize) -> Result<Self, Error> {
        if k == 0 {
            return Err(Error::InvalidParam {
                name: "top_k",
                value: 0.0,
                expected: ">= 1 (leave it unset to keep every token)",
            });
        }
        Ok(TopK { k })
    }
}

impl LogitsProcessor for TopK {
    fn name(&self) -> &str {
        "top_k"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        c.keep_top_k(self.k);
        Ok(())
    }
}

/// Top-p (nucleus): with `p_i` the softmax of the remaining logits, keeps the shortest prefix of
/// the candidates sorted by logit (highest first, equal logits by lowest id) whose `p_i` add up
/// (in f64) to at least `p`; the token that crosses `p` is kept, and so is every token when
/// rounding leaves the total just short. Logits unchanged, kept tokens sorted highest first.
/// No-op at `p = 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopP {
    p: f32,
}

impl TopP {
    /// Errors unless `0 < p <= 1`.
    pub fn new(p: f32) -> Result<Self, Error> {
        if !(p > 0.0 && p <= 1.0) {
            return Err(Error::InvalidParam {
                name: "top_p",
                value: p as f64,
                expected: "in (0, 1]",
            });
        }
        Ok(TopP { p })
    }
}

impl LogitsProcessor for TopP {
    fn name(&self) -> &str {
        "top_p"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.p < 1.0 {
            c.keep_top_p(self.p)?;
        }
        Ok(())
    }
}

/// Min-p: keeps the tokens whose probability is at least `min_p` times the top token's, computed
/// on logits as `z ≥ max + ln(min_p)` (in f64, `max` the largest remaining logit); logits and
/// order unchanged. No-op at `min_p = 0`; `min_p = 1` keeps only the tokens tied with the top
/// one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinP {
    p: f32,
}

impl MinP {
    /// Errors unless `0 <= min_p <= 1`.
    pub fn new(min_p: f32) -> Result<Self, Error> {
        if !(0.0..=1.0).contains(&min_p) {
            return Err(Error::InvalidParam {
                name: "min_p",
                value: min_p as f64,
                expected: "in [0, 1]",
            });
        }
        Ok(MinP { p: min_p })
    }
}

impl LogitsProcessor for MinP {
    fn name(&self) -> &str {
        "min_p"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.p > 0.0 {
            c.keep_min_p(self.p);
        }
        Ok(())
    }
}

/// Repetition penalty (CTRL, Keskar et al. 2019, as in transformers): for every distinct token of
/// the prompt and the generated text that is still a candidate, `z ← z / penalty` when `z > 0`
/// and `z ← z · penalty` otherwise, once however often the token occurred. No-op at
/// `penalty = 1`. An id outside the vocabulary is an error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RepetitionPenalty {
    penalty: f32,
}

impl RepetitionPenalty {
    /// Errors unless `penalty` is finite and `> 0`.
    pub fn new(penalty: f32) -> Result<Self, Error> {
        if !(penalty.is_finite() && penalty > 0.0) {
            return Err(Error::InvalidParam {
                name: "repetition_penalty",
                value: penalty as f64,
                expected: "finite and > 0 (1 means no penalty)",
            });
        }
        Ok(RepetitionPenalty { penalty })
    }
}

impl LogitsProcessor for RepetitionPenalty {
    fn name(&self) -> &str {
        "repetition_penalty"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        check_range("prompt", ctx.prompt, c.vocab_size())?;
        check_range("generated", ctx.generated, c.vocab_size())?;
        let seen = sorted_unique([ctx.prompt, ctx.generated].concat());
        let penalty = self.penalty;
        for id in seen {
            c.update_logit(id, |z| if z > 0.0 { z / penalty } else { z * penalty });
        }
        Ok(())
    }
}

/// Presence and frequency penalties (OpenAI): over the generated tokens only (not the prompt),
/// a candidate that occurred `n > 0` times gets `z ← z − (presence + n · frequency)`. Negative
/// values encourage repetition instead. No-op when both are 0. An id outside the vocabulary is an
/// error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PresenceFrequencyPenalty {
    presence: f32,
    frequency: f32,
}

impl PresenceFrequencyPenalty {
    /// Errors unless both are finite.
    pub fn new(presence: f32, frequency: f32) -> Result<Self, Error> {
        for (name, value) in [
            ("presence_penalty", presence),
            ("frequency_penalty", frequency),
        ] {
            if !value.is_finite() {
                return Err(Error::InvalidParam {
                    name,
                    value: value as f64,
                    expected: "finite",
                });
            }
        }
        Ok(PresenceFrequencyPenalty {
            presence,
            frequency,
        })
    }
}

impl LogitsProcessor for PresenceFrequencyPenalty {
    fn name(&self) -> &str {
        "presence_frequency_penalty"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        check_range("generated", ctx.generated, c.vocab_size())?;
        let mut tokens = ctx.generated.to_vec();
        tokens.sort_unstable();
        for run in tokens.chunk_by(|a, b| a == b) {
            let n = run.len() as f32;
            let delta = self.presence + n * self.frequency;
            c.update_logit(run[0], |z| z - delta);
        }
        Ok(())
    }
}

/// Logit bias (OpenAI `logit_bias`): `z ← z + bias` for each listed token that is still a
/// candidate (a token listed twice gets both); a token already filtered out stays out. No-op when
/// empty. An id outside the vocabulary is an error.
#[derive(Debug, Clone, PartialEq)]
pub struct LogitBias {
    bias: Vec<(u32, f32)>,
}

impl LogitBias {
    /// Errors when a bias is not finite. A token listed twice gets the sum of its biases.
    pub fn new(bias: Vec<(u32, f32)>) -> Result<Self, Error> {
        if let Some(&(token, value)) = bias.iter().find(|(_, b)| !b.is_finite()) {
            return Err(Error::InvalidLogitBias { token, value });
        }
        Ok(LogitBias { bias })
    }
}

impl LogitsProcessor for LogitBias {
    fn name(&self) -> &str {
        "logit_bias"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        for &(token, b) in &self.bias {
            if token as usize >= c.vocab_size() {
                return Err(Error::TokenOutOfRange {
                    field: "logit_bias",
                    token,
                    vocab: c.vocab_size(),
                });
            }
            c.update_logit(token, |z| z + b);
        }
        Ok(())
    }
}

/// Keeps only the candidates whose ids are listed; logits unchanged. An empty list leaves
/// nothing, which is an error when sampling. An id outside the vocabulary is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedTokens {
    ids: Vec<u32>,
}

impl AllowedTokens {
    /// The allowed ids, in any order.
    pub fn new(ids: Vec<u32>) -> Self {
        AllowedTokens {
            ids: sorted_unique(ids),
        }
    }
}

impl LogitsProcessor for AllowedTokens {
    fn name(&self) -> &str {
        "allowed_tokens"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        check_range("allowed_token_ids", &self.ids, c.vocab_size())?;
        c.retain(|t| self.ids.binary_search(&t.id).is_ok());
        Ok(())
    }
}

/// Removes the candidates whose ids are listed; logits unchanged. No-op when empty. An id outside
/// the vocabulary is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BannedTokens {
    ids: Vec<u32>,
}

impl BannedTokens {
    /// The banned ids, in any order.
    pub fn new(ids: Vec<u32>) -> Self {
        BannedTokens {
            ids: sorted_unique(ids),
        }
    }
}

impl LogitsProcessor for BannedTokens {
    fn name(&self) -> &str {
        "banned_tokens"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        check_range("banned_token_ids", &self.ids, c.vocab_size())?;
        if !self.ids.is_empty() {
            c.retain(|t| self.ids.binary_search(&t.id).is_err());
        }
        Ok(())
    }
}

/// Min-tokens: removes the end tokens (as [`BannedTokens`] does) while fewer than `min` tokens
/// have been generated (`Context::generated`), so that the answer cannot end early. No-op once
/// `min` tokens are out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinTokens {
    min: usize,
    end: BannedTokens,
}

impl MinTokens {
    /// Bans `end_ids` while fewer than `min` tokens have been generated.
    pub fn new(min: usize, end_ids: Vec<u32>) -> Self {
        MinTokens {
            min,
            end: BannedTokens::new(end_ids),
        }
    }
}

impl LogitsProcessor for MinTokens {
    fn name(&self) -> &str {
        "min_tokens"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        if ctx.generated.len() < self.min {
            self.end.apply(c, ctx)?;
        }
        Ok(())
    }
}
