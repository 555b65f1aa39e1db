//! Stopping, as the specification's section "Stopping" states it, with stop sequences matched on
//! the whole answer at once.
//!
//! "Three conditions do this, and every generation stops at whichever comes first": the end
//! token, the maximum number of tokens and the stop sequence; "above all of them sits a hard
//! limit, the context window: the prompt and the answer together can never be longer than the
//! model allows". This reference walks the tokens once for the token-level conditions, then looks
//! for stop sequences in the whole text by brute force. It knows nothing of streaming, so the
//! streaming matcher in `nextok-stopping` is checked against it.
//!
//! Definitions that the specification leaves open, fixed here and in `nextok-stopping` alike:
//! - The answer stops at the first byte at which it contains a stop sequence. If several stop
//!   sequences end at that byte, the longest is the match (then the lowest index).
//! - An end token adds no text and counts as a generated token. If one token meets several
//!   conditions, the end token wins, then the stop sequence, then max tokens, then the window.
//! - Text is bytes; it becomes a string with `String::from_utf8_lossy` at the very end.

/// The stop conditions of one generation.
#[derive(Debug, Clone, Default)]
pub struct Conditions {
    /// Token ids that end the answer.
    pub end_tokens: Vec<u32>,
    /// The most tokens to generate, if limited.
    pub max_new_tokens: Option<usize>,
    /// Texts that end the answer.
    pub stop_sequences: Vec<String>,
    /// Prompt and answer together, in tokens, if limited.
    pub context_window: Option<usize>,
    /// Keep the matched stop sequence in the text.
    pub include_stop_sequence: bool,
}

/// Why the answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The model produced this end token.
    EndTurn {
        /// The end token.
        token: u32,
    },
    /// The maximum number of new tokens was generated.
    MaxTokens,
    /// This stop sequence appeared in the text.
    StopSequence {
        /// Its index in `Conditions::stop_sequences`.
        index: usize,
    },
    /// Prompt and answer filled the context window.
    ContextWindow,
}

/// The answer: its text, why it ended (`None` when the tokens ran out first), and how many tokens
/// were generated up to and including the one that ended it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The returned text.
    pub text: String,
    /// Why it ended.
    pub reason: Option<Reason>,
    /// Tokens generated, the ending token included.
    pub tokens: usize,
}

/// The first stop sequence in `text`: the one that ends at the smallest byte offset, the longest
/// among those. Returns `(start, end, index)`.
pub fn earliest_stop(text: &[u8], stop_sequences: &[String]) -> Option<(usize, usize, usize)> {
    for end in 1..=text.len() {
        let mut best: Option<(usize, usize, usize)> = None;
        for (index, stop) in stop_sequences.iter().enumerate() {
            let stop = stop.as_bytes();
            if !stop.is_empty() && text[..end].ends_with(stop) {
                let start = end - stop.len();
                if best.is_none_or(|(s, _, _)| start < s) {
                    best = Some((start, end, index));
                }
            }
        }
        if best.is_some() {
            return best;
        }
    }
    None
}

/// Generates from a fixed list of `(token id, text bytes)` after a prompt of `prompt_tokens`
/// tokens, and applies the stop conditions to the whole answer at once.
///
/// The caller has checked that the prompt leaves room in the window.
pub fn generate(
    tokens: &[(u32, Vec<u8>)],
    conditions: &Conditions,
    prompt_tokens: usize,
) -> Outcome {
    let mut bytes = Vec::new();
    // Where each token's text ends in `bytes`, to find the token at which a stop sequence ends.
    let mut ends = Vec::new();
    let mut reason = None;
    for (i, (id, piece)) in tokens.iter().enumerate() {
        let generated = i + 1;
        if conditions.end_tokens.contains(id) {
            ends.push(bytes.len());
            reason = Some(Reason::EndTurn { token: *id });
            break;
        }
        bytes.extend_from_slice(piece);
        ends.push(bytes.len());
        if conditions
            .max_new_tokens
            .is_some_and(|max| generated >= max)
        {
            reason = Some(Reason::MaxTokens);
            break;
        }
        if conditions
            .context_window
            .is_some_and(|window| prompt_tokens + generated >= window)
        {
            reason = Some(Reason::ContextWindow);
            break;
        }
    }
    if let Some((start, end, index)) = earliest_stop(&bytes, &conditions.stop_sequences) {
        let cut = if conditions.include_stop_sequence {
            end
        } else {
            start
        };
        // The token whose text contains the last byte of the stop sequence ends the answer.
        let tokens = ends
            .iter()
            .position(|&e| e >= end)
            .map_or(ends.len(), |i| i + 1);
        return Outcome {
            text: String::from_utf8_lossy(&bytes[..cut]).into_owned(),
            reason: Some(Reason::StopSequence { index }),
            tokens,
        };
    }
    Outcome {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        reason,
        tokens: ends.len(),
    }
}

/// Whether `tail` is the beginning of one UTF-8 character that more bytes could complete.
///
/// Tried directly: append every pattern of continuation bytes that any valid character needs,
/// and see whether one character results.
pub fn is_incomplete_char(tail: &[u8]) -> bool {
    if tail.is_empty() || tail.len() > 3 {
        return false;
    }
    // These cover every range a second byte may be restricted to (E0, ED, F0, F4).
    const CONTINUATIONS: [u8; 6] = [0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF];
    for missing in 1..=(4 - tail.len()) {
        let mut combos: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..missing {
            combos = combos
                .iter()
                .flat_map(|c| {
                    CONTINUATIONS.iter().map(move |&b| {
                        let mut c = c.clone();
                        c.push(b);
                        c
                    })
                })
                .collect();
        }
        for combo in combos {
            let mut whole = tail.to_vec();
            whole.extend_from_slice(&combo);
            if std::str::from_utf8(&whole).is_ok_and(|s| s.chars().count() == 1) {
                return true;
            }
        }
    }
    false
}

/// How many bytes at the end of the text so far a streaming matcher must hold back: the longest
/// end that is a proper prefix of a stop sequence or the start of an unfinished character, and
/// nothing shorter would be correct.
pub fn must_hold(text: &[u8], stop_sequences: &[String]) -> usize {
    for start in 0..=text.len() {
        let tail = &text[start..];
        let starts_a_stop = !tail.is_empty()
            && stop_sequences
                .iter()
                .any(|s| s.len() > tail.len() && s.as_bytes().starts_with(tail));
        if starts_a_stop || is_incomplete_char(tail) {
            return tail.len();
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_stop_prefers_the_earliest_end_then_the_longest() {
        let stops = vec!["abc".to_string(), "b".to_string(), "xab".to_string()];
        assert_eq!(earliest_stop(b"zabc", &stops), Some((2, 3, 1)));
        assert_eq!(earliest_stop(b"xab", &stops), Some((0, 3, 2)));
        assert_eq!(earliest_stop(b"zzz", &stops), None);
    }

    #[test]
    fn incomplete_chars_are_recognised() {
        let euro = "€".as_bytes();
        assert!(is_incomplete_char(&euro[..1]));
        assert!(is_incomplete_char(&euro[..2]));
        assert!(!is_incomplete_char(euro));
        assert!(!is_incomplete_char(b"a"));
        assert!(!is_incomplete_char(b"\xE0\x80"));
        assert!(is_incomplete_char(b"\xF4\x8F"));
        assert!(!is_incomplete_char(b"\xF4\x90"));
    }
}
