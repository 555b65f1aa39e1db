//! The facade's one error type.

use std::path::PathBuf;

/// What can go wrong in the facade: finding the model, planning, and generating.
///
/// Each variant's message is one line that says what happened and what to do about it, so that
/// the command line can print it as it is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither `$NEXTOK_MODEL`, `$XDG_CACHE_HOME` nor `$HOME` is set, so there is no place for the
    /// default model.
    #[error("no cache folder for the default model: set NEXTOK_MODEL to a GGUF file, or set HOME or XDG_CACHE_HOME")]
    NoCacheDir,
    /// `$NEXTOK_MODEL` is set to the empty string.
    #[error("NEXTOK_MODEL is set but empty: set it to a GGUF file, or unset it to use the default model")]
    EmptyNextokModel,
    /// The model file given does not exist.
    #[error("model file {path} does not exist: pass --model PATH to a GGUF file, or leave --model out to use the default model")]
    ModelNotFound {
        /// The path that was looked for.
        path: PathBuf,
    },
    /// The model path exists but is not a regular file (a device, a FIFO, a socket): it is
    /// neither read nor mapped, since reading one could block or never end.
    #[error(
        "cannot load {path}: it is {kind}, not a regular file; pass --model PATH to a GGUF file"
    )]
    ModelNotARegularFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead (`a character device`, `a FIFO` ...).
        kind: &'static str,
    },
    /// The model path is something this build cannot load.
    #[error("cannot load {path}: it is {reason}; pass --model PATH to a GGUF file")]
    UnsupportedModelFormat {
        /// The path given.
        path: PathBuf,
        /// What it is, and why it cannot be loaded.
        reason: &'static str,
    },
    /// A file could not be read or written.
    #[error("cannot {action} {path}: {message}")]
    Io {
        /// What was being done (`read`, `create`, `rename` ...).
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// A figure the cost model computes is beyond what a 64-bit float holds (or the product of
    /// two given integers overflows): the inputs are larger than any real model or machine.
    #[error(
        "the plan's {figure} comes to {value}, beyond what can be computed: give smaller figures"
    )]
    PlanOverflow {
        /// Which figure.
        figure: &'static str,
        /// What it came to (infinite or not a number).
        value: f64,
    },
    /// A figure given to the cost model is out of its range.
    #[error("invalid {what} {value}: it must be {expected}")]
    InvalidPlanInput {
        /// Which input.
        what: &'static str,
        /// The value given.
        value: f64,
        /// What it must be.
        expected: &'static str,
    },
    /// The GGUF file could not be read.
    #[error("cannot read the model: {0}")]
    Gguf(#[from] nextok_gguf::Error),
    /// The model could not be loaded or run.
    #[error("model: {0}")]
    Model(#[from] nextok_model::Error),
    /// The tokenizer or the chat template failed.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] nextok_tokenizer::Error),
    /// Sampling settings are invalid, or sampling failed.
    #[error("sampling: {0}")]
    Sampling(#[from] nextok_sampling::Error),
    /// Stop conditions are invalid, or the prompt leaves no room for an answer.
    #[error("{0}")]
    Stopping(#[from] nextok_stopping::Error),
    /// A constraint could not be built or followed.
    #[error("constraint: {0}")]
    Constraint(#[from] nextok_constraints::Error),
    /// The tokenizer and the model disagree on the size of the vocabulary.
    #[error(
        "the tokenizer has {tokenizer} tokens but the model has {model}: the file is inconsistent"
    )]
    VocabularyMismatch {
        /// The tokenizer's vocabulary size.
        tokenizer: usize,
        /// The model's.
        model: usize,
    },
    /// A chat was asked of a model without a chat template.
    #[error("this model has no chat template: use a raw prompt (--raw)")]
    NoChatTemplate,
    /// The prompt has no tokens.
    #[error("the prompt is empty: give some text")]
    EmptyPrompt,
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// More tokens than the context window holds.
    #[error(
        "{tokens} tokens do not fit in the context window of {context_window} tokens (prompt and answer together): shorten the prompt"
    )]
    ContextWindowExceeded {
        /// Tokens that would be in the window.
        tokens: usize,
        /// The window.
        context_window: usize,
    },
    /// A text too short to score.
    #[error("a text of {tokens} token(s) cannot be scored: scoring needs at least 2 tokens")]
    TooShortToScore {
        /// Its tokens.
        tokens: usize,
    },
    /// A chat message whose role holds special-token text: the template writes the role among
    /// its own tokens, so such a role could forge a turn.
    #[error("message role {role:?} holds special-token text: a role must be plain text such as user, assistant or system")]
    SpecialTextInRole {
        /// The role given.
        role: String,
    },
    /// A generation option out of its range.
    #[error("invalid option `{option}`: it must be {expected}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A count given to the library (completions, beams, threads) is beyond its limit: the
    /// limit bounds the memory and threads one request can take.
    #[error("invalid option `{option}` {value}: it must be between {min} and {max}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// The value given.
        value: usize,
        /// The smallest value allowed.
        min: usize,
        /// The largest value allowed.
        max: usize,
    },
    /// The compute device asked for cannot be used: this build lacks its feature, or the machine
    /// lacks the hardware, driver or libraries.
    #[error("cannot run on {device}: {reason}")]
    DeviceUnavailable {
        /// The device asked for (`cuda:0`).
        device: String,
        /// Why, and what to do about it.
        reason: String,
    },
    /// The scheduler's waiting queue is full: try again later (an HTTP server answers 429 or
    /// 503 with `Retry-After`).
    #[error("the scheduler's queue is full ({waiting} requests waiting, at most {limit}): try again later")]
    QueueFull {
        /// Requests waiting when this one came.
        waiting: usize,
        /// The queue's length ([`SchedulerOptions::max_waiting`](crate::SchedulerOptions)).
        limit: usize,
    },
    /// A request whose KV cache could never fit the scheduler's memory budget, even alone: its
    /// prompt and the most tokens it may generate (for every completion) need more positions than
    /// the budget's blocks hold. Ask for fewer tokens, or give the scheduler more memory.
    #[error("the request needs KV memory for {tokens} tokens (prompt and max tokens, every completion) but the scheduler's budget holds {fit}: ask for fewer tokens or give it more memory")]
    ExceedsKvBudget {
        /// Positions the request may need at most: the prompt, and `max_tokens` (or the rest of
        /// the context window) for each of its `n` completions.
        tokens: usize,
        /// Positions the budget holds at most (its blocks × positions per block).
        fit: usize,
    },
    /// The scheduler is shutting down or has shut down: it takes no new request, and requests it
    /// could not finish within the grace period end with this error.
    #[error("the scheduler has shut down")]
    SchedulerShutDown,
    /// The scheduler's worker thread ended unexpectedly (a panic in a model); nothing more can
    /// be run on it.
    #[error("the scheduler's worker thread has stopped: {reason}")]
    SchedulerFailed {
        /// What happened.
        reason: String,
    },
    /// A [`LanguageModel`](crate::LanguageModel) returned another number of logits than the
    /// positions asked for (a model that breaks the trait's contract).
    #[error("the model returned {got} logits where {expected} were asked for")]
    ModelOutput {
        /// Numbers asked for.
        expected: usize,
        /// Numbers returned.
        got: usize,
    },
}
