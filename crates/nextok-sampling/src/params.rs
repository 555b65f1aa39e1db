//! User-facing sampling parameters.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Error;

/// A reorderable stage of the chain, as named in [`SamplingParams::order`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    /// Repetition penalty, then presence and frequency penalties.
    Penalties,
    /// Logit bias.
    LogitBias,
    /// Temperature (0 means greedy).
    Temperature,
    /// Top-k.
    TopK,
    /// Top-p (nucleus).
    TopP,
    /// Min-p.
    MinP,
}

impl StageKind {
    /// Every stage, in the specification's default order: penalties and biases, then
    /// temperature, then (after softmax) top-k, top-p and min-p.
    pub const DEFAULT_ORDER: [StageKind; 6] = [
        StageKind::Penalties,
        StageKind::LogitBias,
        StageKind::Temperature,
        StageKind::TopK,
        StageKind::TopP,
        StageKind::MinP,
    ];
}

impl fmt::Display for StageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StageKind::Penalties => "penalties",
            StageKind::LogitBias => "logit_bias",
            StageKind::Temperature => "temperature",
            StageKind::TopK => "top_k",
            StageKind::TopP => "top_p",
            StageKind::MinP => "min_p",
        })
    }
}

/// Sampling parameters, with the names users know from transformers and the OpenAI API.
///
/// Every field has a default that turns its stage off, so `SamplingParams::default()` samples
/// from the model's own probabilities, and JSON may give only the fields it changes:
///
/// ```
/// let p: nextok_sampling::SamplingParams =
///     serde_json::from_str(r#"{"temperature": 0.7, "top_p": 0.9, "seed": 42}"#).unwrap();
/// assert_eq!(p.top_k, None);
/// p.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingParams {
    /// Divides the logits before softmax; 0 means greedy. Finite and `>= 0`; default 1 (off).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens. `>= 1`; default `None` (off).
    pub top_k: Option<usize>,
    /// Keep the smallest top group whose probabilities reach `p`. In `(0, 1]`; default 1 (off).
    pub top_p: f32,
    /// Keep tokens at least `min_p` times as likely as the top one. In `[0, 1]`; default 0 (off).
    pub min_p: f32,
    /// CTRL repetition penalty over the prompt and generated text. Finite and `> 0`; default 1
    /// (off); 1.1 to 1.3 are usual.
    pub repetition_penalty: f32,
    /// OpenAI presence penalty over generated tokens. Finite; default 0 (off).
    pub presence_penalty: f32,
    /// OpenAI frequency penalty over generated tokens. Finite; default 0 (off).
    pub frequency_penalty: f32,
    /// Added to the logits of the given token ids (OpenAI `logit_bias`; JSON keys are the ids
    /// as strings). Finite values; default empty.
    pub logit_bias: BTreeMap<u32, f32>,
    /// Seed of the random generator. `None` uses seed 0: this library never takes randomness from
    /// the operating system, so a caller that wants different answers passes different seeds.
    pub seed: Option<u64>,
    /// Ban `end_token_ids` until this many tokens have been generated. Default 0 (off).
    pub min_tokens: usize,
    /// The end tokens that `min_tokens` bans (the caller fills them from the model).
    pub end_token_ids: Vec<u32>,
    /// When set, only these token ids can be chosen.
    pub allowed_token_ids: Option<Vec<u32>>,
    /// These token ids can never be chosen.
    pub banned_token_ids: Vec<u32>,
    /// Number of most likely alternatives (under the model's raw distribution) to return with
    /// each sampled token. Default 0.
    pub top_logprobs: usize,
    /// Order of the reorderable stages: a permutation of all six [`StageKind`]s. Token filters
    /// (allowed and banned ids, min-tokens, the constraint mask) always run first. Default:
    /// [`StageKind::DEFAULT_ORDER`].
    pub order: Vec<StageKind>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: BTreeMap::new(),
            seed: None,
            min_tokens: 0,
            end_token_ids: Vec::new(),
            allowed_token_ids: None,
            banned_token_ids: Vec::new(),
            top_logprobs: 0,
            order: StageKind::DEFAULT_ORDER.to_vec(),
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Checks every field's range and the order, returning the first problem found.
    pub fn validate(&self) -> Result<(), Error> {
        crate::stages::Temperature::new(self.temperature)?;
        if let Some(k) = self.top_k {
            crate::stages::TopK::new(k)?;
        }
        crate::stages::TopP::new(self.top_p)?;
        crate::stages::MinP::new(self.min_p)?;
        crate::stages::RepetitionPenalty::new(self.repetition_penalty)?;
        crate::stages::PresenceFrequencyPenalty::new(
            self.presence_penalty,
            self.frequency_penalty,
        )?;
        if let Some((&token, &value)) = self.logit_bias.iter().find(|(_, b)| !b.is_finite()) {
            return Err(Error::InvalidLogitBias { token, value });
        }
        for (i, stage) in self.order.iter().enumerate() {
            if self.order[..i].contains(stage) {
                return Err(Error::DuplicateStage { stage: *stage });
            }
        }
        if let Some(stage) = StageKind::DEFAULT_ORDER
            .iter()
            .find(|s| !self.order.contains(s))
        {
            return Err(Error::MissingStage { stage: *stage });
        }
        Ok(())
    }
}
