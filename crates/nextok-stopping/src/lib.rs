//! Decide when generation stops: end tokens, max tokens, stop sequences across token boundaries,
//! and the context window.
//!
//! The generation loop has no natural end: after every token the model can always predict
//! another. This crate is checked once per generated token and says when the answer is finished,
//! why, and which text may be shown to the user so far. It follows the specification's section
//! "Stopping" (the specification, *Inference and Decoding*).
//!
//! # Contents
//!
//! - [Usage](#usage)
//! - [The four conditions](#the-four-conditions)
//! - [Stop sequences and streaming](#stop-sequences-and-streaming)
//! - [Validation](#validation)
//! - [Untrusted input](#untrusted-input)
//!
//! # Usage
//!
//! Describe the conditions with [`StopConditions`], start a [`StopState`] for one generation
//! with the prompt's length, then [`push`](StopState::push) every generated token with the bytes
//! the detokenizer produced for it. Each call returns a [`Step`]: the text that is now safe to
//! show, and a [`Stop`] once the answer has ended.
//!
//! ```
//! use nextok_stopping::{Stop, StopConditions, StopReason, StopState};
//!
//! const EOS: u32 = 2;
//! let conditions = StopConditions {
//!     end_tokens: vec![EOS],
//!     max_new_tokens: Some(256),
//!     stop_sequences: vec!["\n".into()],
//!     context_window: Some(8192),
//!     ..StopConditions::default()
//! };
//! let mut state = StopState::new(&conditions, 7000)?;
//! assert_eq!(state.tokens_left(), Some(256));
//!
//! // The model writes "Label: FRAUD\nBecause ..." in tokens that do not align with the line break.
//! let mut answer = String::new();
//! let mut stop = None;
//! for (id, piece) in [(10, "Label"), (11, ":"), (12, " FRA"), (13, "UD\nBec"), (14, "ause")] {
//!     let step = state.push(id, piece.as_bytes());
//!     answer.push_str(&step.text);
//!     if step.stop.is_some() {
//!         stop = step.stop;
//!         break;
//!     }
//! }
//! assert_eq!(answer, "Label: FRAUD");
//! assert_eq!(stop, Some(Stop::StopSequence { index: 0, text: "\n".into() }));
//! assert_eq!(stop.map(|s| s.reason()), Some(StopReason::StopSequence));
//! # Ok::<(), nextok_stopping::Error>(())
//! ```
//!
//! If the loop ends for a reason this crate does not see (the user cancels, the tokens run out),
//! call [`StopState::finish`] to get the text still held back.
//!
//! # The four conditions
//!
//! After every token, the first condition that holds ends the answer ([`StopReason`]):
//!
//! 1. **End token** (`end_turn`): the token is one of [`StopConditions::end_tokens`], such as
//!    `<|im_end|>` or `<|endoftext|>`. The end token adds no text. It is checked first, so an end
//!    token that is also the last allowed token still reports the clean ending.
//! 2. **Stop sequence** (`stop_sequence`): the text so far contains one of
//!    [`StopConditions::stop_sequences`]. The answer is cut just before it (or just after it with
//!    [`StopConditions::include_stop_sequence`]); text generated after it is dropped.
//! 3. **Max tokens** (`max_tokens`): [`StopConditions::max_new_tokens`] tokens have been
//!    generated, end tokens included.
//! 4. **Context window** (`context_window`): prompt and answer together have reached
//!    [`StopConditions::context_window`]. With a window of 8,192 tokens and a prompt of 7,000, at
//!    most 1,192 tokens are generated, whatever `max_new_tokens` says.
//!
//! When the answer ends by an end token, max tokens or the context window, the text held back
//! for a possible stop sequence is released in the same [`Step`].
//!
//! # Stop sequences and streaming
//!
//! Stop sequences are matched on the bytes of the text, not on tokens, so a sequence split over
//! several tokens is found, and so is one that starts in the middle of a token. Pieces are
//! `&[u8]` because a token can end in the middle of a UTF-8 character (byte-fallback tokens, or
//! a streaming detokenizer); the concatenation of all pieces is expected to be UTF-8.
//!
//! The answer stops at the first byte at which it contains a stop sequence. If two sequences end
//! at that byte (one is a suffix of the other, such as `"\n"` and `".\n"`), the longer one is the
//! match, so that no part of a stop sequence stays in the answer; equal sequences report the lower
//! index. This definition does not depend on how the text is split into tokens: streaming gives
//! exactly the text and reason that matching the whole string at once gives.
//!
//! While streaming, a [`Step`] releases all text except:
//!
//! - the longest end of the text that could still be the beginning of a stop sequence, and
//! - an incomplete UTF-8 character at the very end.
//!
//! Nothing else is held back ([`StopState::held_back`] shows what is). Released text is always
//! whole characters. Bytes that are not valid UTF-8 and can no longer become valid are released as
//! U+FFFD, exactly as [`String::from_utf8_lossy`] would turn the whole answer.
//!
//! # Validation
//!
//! [`StopState::new`] rejects, with an [`Error`]: an empty stop sequence (it would match before
//! any text), `max_new_tokens = Some(0)` (use `None` for no limit; to generate nothing, do not run
//! the model), and a prompt that alone fills or exceeds the context window (never truncated
//! silently: the error names both numbers).
//!
//! # Untrusted input
//!
//! Stop sequences and pieces may come from users and models. No input makes this crate panic.
//! Each byte of a piece is read once per stop sequence, so the work per token does not grow with
//! the length of the stop sequences or of the answer; the held-back bytes are never more than the
//! longest stop sequence less one, or three bytes of an unfinished character.

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

mod error;
mod matcher;

use serde::{Deserialize, Serialize};

pub use error::Error;
use matcher::StopMatcher;

/// What ends a generation. Every field is optional: the default stops at nothing.
///
/// ```
/// use nextok_stopping::StopConditions;
///
/// // ChatML models end a turn with <|im_end|>; base models end with <|endoftext|>.
/// let conditions = StopConditions {
///     end_tokens: vec![0, 2],
///     max_new_tokens: Some(512),
///     ..StopConditions::default()
/// };
/// assert!(conditions.validate().is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StopConditions {
    /// Token ids that end the answer (`end_turn`), such as `<|im_end|>` and `<|endoftext|>`.
    /// A set in meaning; duplicates are harmless.
    pub end_tokens: Vec<u32>,
    /// The most tokens to generate (`max_tokens`); `None` for no limit. Must not be `Some(0)`.
    pub max_new_tokens: Option<usize>,
    /// Texts that end the answer when they appear (`stop_sequence`). None may be empty.
    pub stop_sequences: Vec<String>,
    /// The model's context window in tokens, prompt and answer together (`context_window`);
    /// `None` for no limit.
    pub context_window: Option<usize>,
    /// Keep the matched stop sequence at the end of the returned text. Off by default, as in the
    /// usual APIs.
    pub include_stop_sequence: bool,
}

impl StopConditions {
    /// Checks the conditions that do not depend on the prompt: no empty stop sequence, and
    /// `max_new_tokens` not zero.
    pub fn validate(&self) -> Result<(), Error> {
        if let Some(index) = self.stop_sequences.iter().position(String::is_empty) {
            return Err(Error::EmptyStopSequence { index });
        }
        if self.max_new_tokens == Some(0) {
            return Err(Error::ZeroMaxNewTokens);
        }
        Ok(())
    }
}

/// Why an answer ended, with the names users know from the Anthropic and OpenAI APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model chose an end token: the normal, clean ending.
    EndTurn,
    /// The limit on new tokens was reached; the answer is probably incomplete.
    MaxTokens,
    /// A stop sequence appeared in the text.
    StopSequence,
    /// Prompt and answer filled the context window; the answer is probably incomplete.
    ContextWindow,
}

/// Why an answer ended, and which end token or stop sequence matched.
///
/// It serialises with the reason under `stop_reason`, for example
/// `{"stop_reason":"stop_sequence","index":0,"text":"\n"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "stop_reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Stop {
    /// The model chose an end token.
    EndTurn {
        /// The end token's id.
        token: u32,
    },
    /// The limit on new tokens was reached.
    MaxTokens,
    /// A stop sequence appeared in the text.
    StopSequence {
        /// Its position in [`StopConditions::stop_sequences`].
        index: usize,
        /// The stop sequence itself.
        text: String,
    },
    /// Prompt and answer filled the context window.
    ContextWindow,
}

impl Stop {
    /// The reason alone, without which token or sequence matched.
    pub fn reason(&self) -> StopReason {
        match self {
            Stop::EndTurn { .. } => StopReason::EndTurn,
            Stop::MaxTokens => StopReason::MaxTokens,
            Stop::StopSequence { .. } => StopReason::StopSequence,
            Stop::ContextWindow => StopReason::ContextWindow,
        }
    }
}

/// What one generated token did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Text released by this token: whole characters that can no longer be part of a stop
    /// sequence. Often empty while a possible stop sequence is pending.
    pub text: String,
    /// Set on the token that ends the answer.
    pub stop: Option<Stop>,
}

/// The stop state of one generation: counts tokens, matches stop sequences and holds back text.
///
/// Once a [`Stop`] has been returned, further pushes release nothing and return the same stop,
/// so a caller that pushes one token too many gets a consistent answer rather than more text.
#[derive(Debug, Clone)]
pub struct StopState {
    end_tokens: Vec<u32>,
    max_new_tokens: Option<usize>,
    /// `context_window - prompt_tokens`, already checked to be at least 1.
    room: Option<usize>,
    generated: usize,
    stop_sequences: Vec<String>,
    matcher: StopMatcher,
    stop: Option<Stop>,
}

impl StopState {
    /// Starts a generation after a prompt of `prompt_tokens` tokens.
    ///
    /// Fails if the conditions are invalid (see [`StopConditions::validate`]) or if the prompt
    /// alone fills the context window.
    ///
    /// ```
    /// use nextok_stopping::{Error, StopConditions, StopState};
    ///
    /// let conditions = StopConditions { context_window: Some(8192), ..Default::default() };
    /// assert_eq!(StopState::new(&conditions, 7000)?.tokens_left(), Some(1192));
    /// assert_eq!(
    ///     StopState::new(&conditions, 8192).unwrap_err(),
    ///     Error::PromptFillsContextWindow { prompt_tokens: 8192, context_window: 8192 },
    /// );
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new(conditions: &StopConditions, prompt_tokens: usize) -> Result<Self, Error> {
        conditions.validate()?;
        let room = match conditions.context_window {
            Some(context_window) if prompt_tokens >= context_window => {
                return Err(Error::PromptFillsContextWindow {
                    prompt_tokens,
                    context_window,
                });
            }
            Some(context_window) => Some(context_window - prompt_tokens),
            None => None,
        };
        Ok(Self {
            end_tokens: conditions.end_tokens.clone(),
            max_new_tokens: conditions.max_new_tokens,
            room,
            generated: 0,
            stop_sequences: conditions.stop_sequences.clone(),
            matcher: StopMatcher::new(&conditions.stop_sequences, conditions.include_stop_sequence),
            stop: None,
        })
    }

    /// Records one generated token and the bytes the detokenizer produced for it.
    ///
    /// `piece` may end, or start, in the middle of a UTF-8 character; an end token's piece is
    /// ignored, since end tokens add no text.
    pub fn push(&mut self, token: u32, piece: &[u8]) -> Step {
        if let Some(stop) = &self.stop {
            return Step {
                text: String::new(),
                stop: Some(stop.clone()),
            };
        }
        self.generated += 1;
        if self.end_tokens.contains(&token) {
            let text = self.matcher.flush();
            return self.stopped(text, Stop::EndTurn { token });
        }
        let fed = self.matcher.feed(piece);
        if let Some(index) = fed.matched {
            let text = self.stop_sequences.get(index).cloned().unwrap_or_default();
            return self.stopped(fed.text, Stop::StopSequence { index, text });
        }
        let limit = if self.max_new_tokens.is_some_and(|max| self.generated >= max) {
            Some(Stop::MaxTokens)
        } else if self.room.is_some_and(|room| self.generated >= room) {
            Some(Stop::ContextWindow)
        } else {
            None
        };
        match limit {
            Some(stop) => {
                // The answer ends here, so text held for a possible stop sequence is released.
                let mut text = fed.text;
                text.push_str(&self.matcher.flush());
                self.stopped(text, stop)
            }
            None => Step {
                text: fed.text,
                stop: None,
            },
        }
    }

    fn stopped(&mut self, text: String, stop: Stop) -> Step {
        self.stop = Some(stop.clone());
        Step {
            text,
            stop: Some(stop),
        }
    }

    /// Ends the generation for a reason this state does not see (cancelled, out of tokens) and
    /// returns the text still held back. After a [`Stop`], this is empty.
    pub fn finish(mut self) -> String {
        self.matcher.flush()
    }

    /// How many more tokens may be generated: the smaller of what `max_new_tokens` and the
    /// context window leave, `None` if neither is set, and `Some(0)` once stopped.
    pub fn tokens_left(&self) -> Option<usize> {
        if self.stop.is_some() {
            return Some(0);
        }
        let by_max = self
            .max_new_tokens
            .map(|m| m.saturating_sub(self.generated));
        let by_room = self.room.map(|r| r.saturating_sub(self.generated));
        match (by_max, by_room) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The number of tokens pushed so far, end token included (pushes after a stop do not count).
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// The stop, once the answer has ended.
    pub fn stop(&self) -> Option<&Stop> {
        self.stop.as_ref()
    }

    /// The bytes received but not yet released: a possible start of a stop sequence and an
    /// incomplete character at the end, and nothing else.
    pub fn held_back(&self) -> &[u8] {
        self.matcher.held_back()
    }
}
