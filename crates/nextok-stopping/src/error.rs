//! The one error type of this crate.

/// Everything that can be wrong with a set of stop conditions or with the prompt they apply to.
///
/// Each variant names what is wrong and where, so that an API server can turn it into a precise
/// message for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stop sequence is the empty string. It would match before any text is generated, so it
    /// is rejected rather than silently ending every generation at once.
    #[error("stop sequence {index} is empty; an empty stop sequence would end every answer before it starts")]
    EmptyStopSequence {
        /// The position of the empty sequence in `StopConditions::stop_sequences`.
        index: usize,
    },
    /// `max_new_tokens` is `Some(0)`. A generation must produce at least one token; a caller that
    /// wants no answer should not run the model at all.
    #[error("max_new_tokens is 0; it must be at least 1 (use None for no limit)")]
    ZeroMaxNewTokens,
    /// The prompt alone fills or exceeds the context window, so no token of the answer fits.
    /// The prompt is never truncated silently; the caller decides what to cut.
    #[error(
        "the prompt has {prompt_tokens} tokens but the context window holds {context_window}; \
         no room is left for the answer"
    )]
    PromptFillsContextWindow {
        /// The number of tokens in the prompt.
        prompt_tokens: usize,
        /// The model's context window, in tokens (prompt and answer together).
        context_window: usize,
    },
}
