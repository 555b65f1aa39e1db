//! The one error type of this crate.

use crate::params::StageKind;

/// Everything that can go wrong while validating parameters, sampling or searching beams.
///
/// Every variant carries the values that explain what was wrong and where, so that a caller can
/// report it without parsing the message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A logit was NaN or `+inf`. Logits must be finite, or `-inf` for a masked token.
    #[error("logit {index} is {value}: logits must be finite, or -inf for a masked token")]
    InvalidLogit {
        /// Token id (position in the logits slice) of the bad value.
        index: usize,
        /// The bad value.
        value: f32,
    },
    /// No token is left to choose: the logits were empty, all `-inf`, or every token was masked.
    #[error("no token can be chosen: all {vocab} tokens are -inf, masked or filtered out")]
    NoCandidates {
        /// Number of logits given.
        vocab: usize,
    },
    /// A sampling parameter is outside its valid range.
    #[error("parameter `{name}` is {value}, but it must be {expected}")]
    InvalidParam {
        /// Name of the parameter, as in [`SamplingParams`](crate::SamplingParams).
        name: &'static str,
        /// The value given (integers are converted to `f64`).
        value: f64,
        /// The valid range, in words.
        expected: &'static str,
    },
    /// A logit bias is NaN or infinite.
    #[error("logit bias for token {token} is {value}, but it must be finite")]
    InvalidLogitBias {
        /// The token the bias is for.
        token: u32,
        /// The bad bias.
        value: f32,
    },
    /// A token id given by the caller does not exist in the vocabulary.
    #[error("token {token} in {field} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange {
        /// Which input held the id (`"logit_bias"`, `"prompt"`, `"generated"`, ...).
        field: &'static str,
        /// The bad id.
        token: u32,
        /// Size of the vocabulary (length of the logits).
        vocab: usize,
    },
    /// The allowed-token bitset is too short for the vocabulary.
    #[error("allowed-token mask has {words} words ({} bits) but the vocabulary has {vocab} tokens", words * 64)]
    MaskTooShort {
        /// Number of `u64` words given.
        words: usize,
        /// Size of the vocabulary (length of the logits).
        vocab: usize,
    },
    /// A stage is listed twice in [`SamplingParams::order`](crate::SamplingParams::order).
    #[error("stage `{stage}` appears twice in the order")]
    DuplicateStage {
        /// The repeated stage.
        stage: StageKind,
    },
    /// A stage is missing from [`SamplingParams::order`](crate::SamplingParams::order).
    #[error("stage `{stage}` is missing from the order")]
    MissingStage {
        /// The missing stage.
        stage: StageKind,
    },
    /// The beam-search callback returned a different number of rows than it was given prefixes.
    #[error("beam-search callback returned {got} rows for {expected} prefixes")]
    BeamBatchSize {
        /// Number of prefixes passed to the callback.
        expected: usize,
        /// Number of rows it returned.
        got: usize,
    },
    /// A row returned by the beam-search callback has a different length from the first row.
    #[error("beam-search row {row} has {got} log-probabilities, expected {expected}")]
    BeamRowLength {
        /// Index of the row (prefix) in the batch.
        row: usize,
        /// Length of the first row.
        expected: usize,
        /// Length of this row.
        got: usize,
    },
    /// The beam-search callback returned a NaN or `+inf` log-probability.
    #[error("beam-search row {row}, token {token}: log-probability is {value}, but it must be finite or -inf")]
    InvalidLogprob {
        /// Index of the row (prefix) in the batch.
        row: usize,
        /// Token id.
        token: usize,
        /// The bad value.
        value: f32,
    },
}
