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
    /// The fewest tokens top-p, min-p, typical-p and the epsilon and eta cutoffs leave
    /// (transformers' `min_tokens_to_keep`). `>= 1`; default 1.
    pub min_tokens_to_keep: usize,
    /// Locally typical sampling's mass (transformers' `typical_p`). In `(0, 1]`; default 1 (off).
    pub typical_p: f32,
    /// Keep tokens at least this likely (transformers' `epsilon_cutoff`). In `[0, 1)`; default 0
    /// (off); 3e-4 is usual.
    pub epsilon_cutoff: f32,
    /// Eta sampling's ε (transformers' `eta_cutoff`). In `[0, 1)`; default 0 (off); 3e-4 is usual.
    pub eta_cutoff: f32,
    /// Never repeat an n-gram of the prompt and the answer (transformers'
    /// `no_repeat_ngram_size`). Default 0 (off).
    pub no_repeat_ngram_size: usize,
    /// Never repeat in the answer an n-gram of the prompt (transformers'
    /// `encoder_no_repeat_ngram_size`). Default 0 (off).
    pub encoder_no_repeat_ngram_size: usize,
    /// DRY's strength (llama.cpp's `dry_multiplier`). Finite and `>= 0`; default 0 (off); 0.8 is
    /// usual.
    pub dry_multiplier: f32,
    /// DRY's growth per repeated token (`dry_base`). Finite and `>= 1`; default 1.75.
    pub dry_base: f32,
    /// The longest repetition DRY leaves alone (`dry_allowed_length`). `>= 1`; default 2.
    pub dry_allowed_length: usize,
    /// How many of the last tokens DRY looks at (`dry_penalty_last_n`): -1 all of them, 0 off.
    /// `>= -1`; default -1.
    pub dry_penalty_last_n: i64,
    /// Texts that end a repetition for DRY (`dry_sequence_breakers`). Default `["\n", ":",
    /// "\"", "*"]`. The chain reads [`SamplingParams::dry_sequence_breaker_ids`]; the caller fills
    /// those from these texts and the vocabulary ([`dry_breaker_ids`](crate::dry_breaker_ids)).
    pub dry_sequence_breakers: Vec<String>,
    /// The token ids of the DRY sequence breakers (the caller fills them from the tokenizer, as
    /// it fills `end_token_ids`). Default empty.
    pub dry_sequence_breaker_ids: Vec<u32>,
    /// The chance that XTC acts at a step (`xtc_probability`). In `[0, 1]`; default 0 (off).
    pub xtc_probability: f32,
    /// XTC's threshold (`xtc_threshold`). In `[0, 1]`, above 0.5 off; default 0.1.
    pub xtc_threshold: f32,
    /// Keep tokens within `n` standard deviations of the top logit (llama.cpp's `top_n_sigma`).
    /// Finite; `<= 0` is off; default -1 (off).
    pub top_n_sigma: f32,
    /// Mirostat version (llama.cpp's `mirostat`): 0 off, 1 or 2. Default 0.
    pub mirostat: u8,
    /// Mirostat's target surprise in bits (`mirostat_tau`). Finite and `>= 0`; default 5.
    pub mirostat_tau: f32,
    /// Mirostat's learning rate (`mirostat_eta`). Finite and `>= 0`; default 0.1.
    pub mirostat_eta: f32,
    /// Dynamic temperature's range (llama.cpp's `dynatemp_range`): the temperature moves within
    /// `temperature ± range` with the entropy. Finite and `>= 0`; default 0 (off).
    pub dynatemp_range: f32,
    /// Dynamic temperature's exponent (`dynatemp_exponent`). Finite and `>= 0`; default 1.
    pub dynatemp_exponent: f32,
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
            min_tokens_to_keep: 1,
            typical_p: 1.0,
            epsilon_cutoff: 0.0,
            eta_cutoff: 0.0,
            no_repeat_ngram_size: 0,
            encoder_no_repeat_ngram_size: 0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: -1,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            dry_sequence_breaker_ids: Vec::new(),
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            top_n_sigma: -1.0,
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
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
        crate::extra::validate(self)?;
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
