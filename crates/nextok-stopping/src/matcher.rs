//! The streaming stop-sequence matcher: bytes in, whole UTF-8 characters out.
//!
//! Each stop sequence has a KMP automaton whose state, carried from piece to piece, is the length
//! of the longest prefix of the sequence that the stream ends with. That one number answers both
//! questions asked after every byte: has the sequence just been completed, and how much of the end
//! of the text could still begin it (and so must be held back). Every byte is read once, so the
//! work per piece is its length times the number of stop sequences, however long the sequences
//! are. (The `aho-corasick` crate would match all sequences in one pass, but its public API
//! exposes neither a search state that survives across pieces nor the state's depth, which is
//! exactly the length to hold back; rescanning the held bytes on every piece would make the cost
//! grow with the length of the stop sequences, which come from users.)

/// The KMP automaton of one stop sequence.
#[derive(Debug, Clone)]
struct Kmp {
    pattern: Vec<u8>,
    /// Entry `i` is the length of the longest proper prefix of `pattern[..=i]` that is also its
    /// suffix: where to fall back to when the next byte does not extend the match.
    failure: Vec<usize>,
}

impl Kmp {
    /// `pattern` must not be empty.
    fn new(pattern: &[u8]) -> Self {
        let mut failure = vec![0; pattern.len()];
        let mut k = 0;
        for i in 1..pattern.len() {
            while k > 0 && pattern[i] != pattern[k] {
                k = failure[k - 1];
            }
            if pattern[i] == pattern[k] {
                k += 1;
            }
            failure[i] = k;
        }
        Self {
            pattern: pattern.to_vec(),
            failure,
        }
    }

    /// Given that the stream ends with `pattern[..k]` (and no longer prefix), the same after one
    /// more byte. `k == pattern.len()` (a full match) is allowed and falls back first.
    fn step(&self, mut k: usize, byte: u8) -> usize {
        if k == self.pattern.len() {
            k = self.failure[k - 1];
        }
        while k > 0 && self.pattern[k] != byte {
            k = self.failure[k - 1];
        }
        if self.pattern[k] == byte {
            k += 1;
        }
        k
    }
}

/// Matches stop sequences across byte pieces and releases text that can no longer be part of one.
///
/// Invariant: every byte before `pending` has been released, and `pending` is exactly the longest
/// end of the stream that is a proper prefix of a stop sequence or an unfinished character.
#[derive(Debug, Clone)]
pub(crate) struct StopMatcher {
    stops: Vec<Kmp>,
    /// For each stop sequence, the length of its longest prefix that the stream ends with.
    progress: Vec<usize>,
    include_stop_sequence: bool,
    pending: Vec<u8>,
}

/// What one piece of input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fed {
    /// Text released by this piece.
    pub(crate) text: String,
    /// The index of the stop sequence that completed in this piece, if any.
    pub(crate) matched: Option<usize>,
}

impl StopMatcher {
    /// Builds the matcher; the sequences must already be checked to be non-empty.
    pub(crate) fn new(stops: &[String], include_stop_sequence: bool) -> Self {
        Self {
            stops: stops.iter().map(|s| Kmp::new(s.as_bytes())).collect(),
            progress: vec![0; stops.len()],
            include_stop_sequence,
            pending: Vec::new(),
        }
    }

    /// The bytes received but not yet released.
    pub(crate) fn held_back(&self) -> &[u8] {
        &self.pending
    }

    /// Adds one piece of the stream and releases what is decided.
    ///
    /// The answer stops at the first byte at which a stop sequence is complete. If several end at
    /// that byte, the longest is the match (then the lowest index), so that no part of a stop
    /// sequence stays in the answer. On a match, the text before the stop sequence (and the
    /// sequence itself when asked) is released and the rest of the piece is dropped.
    pub(crate) fn feed(&mut self, piece: &[u8]) -> Fed {
        let base = self.pending.len();
        self.pending.extend_from_slice(piece);
        for (offset, &byte) in piece.iter().enumerate() {
            // (length, index) of the longest stop sequence completed by this byte.
            let mut completed: Option<(usize, usize)> = None;
            for (index, (stop, k)) in self.stops.iter().zip(&mut self.progress).enumerate() {
                *k = stop.step(*k, byte);
                let len = stop.pattern.len();
                if *k == len && completed.is_none_or(|(best, _)| len > best) {
                    completed = Some((len, index));
                }
            }
            if let Some((len, index)) = completed {
                let end = base + offset + 1;
                let cut = if self.include_stop_sequence {
                    end
                } else {
                    end - len
                };
                let text = String::from_utf8_lossy(&self.pending[..cut]).into_owned();
                self.pending.clear();
                self.progress.fill(0);
                return Fed {
                    text,
                    matched: Some(index),
                };
            }
        }
        let n = self.pending.len();
        // No sequence is complete, so each progress is a proper prefix, and by the invariant it
        // lies within `pending`.
        let could_start_a_stop = self.progress.iter().copied().max().unwrap_or(0).min(n);
        let keep_from = (n - could_start_a_stop).min(incomplete_char_start(&self.pending));
        let text = String::from_utf8_lossy(&self.pending[..keep_from]).into_owned();
        self.pending.drain(..keep_from);
        Fed {
            text,
            matched: None,
        }
    }

    /// Releases everything still held, because the stream has ended for another reason.
    ///
    /// A character left incomplete at the end of the stream becomes U+FFFD, as
    /// `String::from_utf8_lossy` does for the whole answer.
    pub(crate) fn flush(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.progress.fill(0);
        text
    }
}

/// The start of a trailing incomplete UTF-8 character (one that more bytes could still complete),
/// or `bytes.len()` when the bytes end on a character boundary or in bytes that are already
/// invalid.
pub(crate) fn incomplete_char_start(bytes: &[u8]) -> usize {
    let n = bytes.len();
    // A UTF-8 character is at most 4 bytes long, so an incomplete one is at most 3.
    for start in n.saturating_sub(3)..n {
        if let Err(e) = std::str::from_utf8(&bytes[start..]) {
            if e.valid_up_to() == 0 && e.error_len().is_none() {
                return start;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str], include: bool) -> StopMatcher {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        StopMatcher::new(&stops, include)
    }

    #[test]
    fn holds_only_a_possible_stop_prefix() {
        let mut m = matcher(&["END"], false);
        let fed = m.feed(b"the E");
        assert_eq!(fed.text, "the ");
        assert_eq!(m.held_back(), b"E");
        let fed = m.feed(b"Xit");
        assert_eq!(fed.text, "EXit");
        assert!(m.held_back().is_empty());
    }

    #[test]
    fn holds_an_incomplete_character() {
        let euro = "€".as_bytes();
        let mut m = matcher(&[], false);
        assert_eq!(m.feed(&euro[..1]).text, "");
        assert_eq!(m.feed(&euro[1..2]).text, "");
        assert_eq!(m.held_back(), &euro[..2]);
        assert_eq!(m.feed(&euro[2..]).text, "€");
    }

    #[test]
    fn invalid_bytes_are_released_as_replacement_characters() {
        // 0xFF can never start or continue a character, so nothing waits for it.
        let mut m = matcher(&[], false);
        assert_eq!(m.feed(b"a\xFFb").text, "a\u{FFFD}b");
        // A lead byte followed by a non-continuation byte is decided too.
        assert_eq!(m.feed(b"\xE2x").text, "\u{FFFD}x");
    }

    #[test]
    fn earliest_ending_match_wins_and_the_longest_at_a_tie() {
        // "abc" starts first but "b" ends first: the answer is cut at the first moment it contains
        // a stop sequence.
        let mut m = matcher(&["abc", "b"], false);
        assert_eq!(
            m.feed(b"xabc"),
            Fed {
                text: "xa".into(),
                matched: Some(1)
            }
        );
        // "b" and "ab" both end at the same byte: the longer one is removed whole.
        let mut m = matcher(&["b", "ab"], false);
        assert_eq!(
            m.feed(b"xab"),
            Fed {
                text: "x".into(),
                matched: Some(1)
            }
        );
    }

    #[test]
    fn kmp_state_is_the_longest_prefix_the_text_ends_with() {
        let patterns: [&[u8]; 5] = [b"aab", b"abab", b"aaaa", b"abcabd", b"x"];
        let texts: [&[u8]; 8] = [
            b"",
            b"a",
            b"aa",
            b"xaba",
            b"abcab",
            b"aaab",
            b"zzabcabcab",
            b"abababab",
        ];
        for pattern in patterns {
            let kmp = Kmp::new(pattern);
            for text in texts {
                let state = text.iter().fold(0, |k, &b| kmp.step(k, b));
                // A plain scan: the longest prefix of the pattern, whole or not, that ends the text.
                let plain = (0..=pattern.len())
                    .rev()
                    .find(|&k| text.ends_with(&pattern[..k]))
                    .unwrap_or(0);
                assert_eq!(state, plain, "pattern {pattern:?} text {text:?}");
            }
        }
    }

    #[test]
    fn incomplete_char_start_finds_only_completable_tails() {
        assert_eq!(incomplete_char_start(b"ab"), 2);
        assert_eq!(incomplete_char_start(b"a\xF0\x9F"), 1);
        assert_eq!(incomplete_char_start(b"a\xF0\x9F\x98"), 1);
        // E0 80 can never be completed (an overlong form), so it is not held.
        assert_eq!(incomplete_char_start(b"a\xE0\x80"), 3);
        assert_eq!(incomplete_char_start(b""), 0);
    }
}
