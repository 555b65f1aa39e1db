//! The streaming stop-sequence matcher: bytes in, whole UTF-8 characters out.

use aho_corasick::{AhoCorasick, MatchKind};

use crate::Error;

/// A stop sequence found in the stream: where it is in the held bytes, and which one it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Found {
    start: usize,
    end: usize,
    index: usize,
}

/// Matches stop sequences across byte pieces and releases text that can no longer be part of one.
///
/// Invariant: every byte before `pending` has been released, and no suffix of the stream that
/// starts in the released part is a prefix of any stop sequence. So every future match starts
/// inside `pending`, and searching `pending` alone is enough.
#[derive(Debug, Clone)]
pub(crate) struct StopMatcher {
    /// `None` when there are no stop sequences: then only incomplete characters are held.
    automaton: Option<AhoCorasick>,
    stops: Vec<String>,
    /// The KMP failure function of each stop sequence, to find in linear time how much of the
    /// end of the text could begin it.
    failures: Vec<Vec<usize>>,
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
    pub(crate) fn new(stops: &[String], include_stop_sequence: bool) -> Result<Self, Error> {
        let automaton = if stops.is_empty() {
            None
        } else {
            // Standard semantics are the only ones that report overlapping matches, which we need
            // to find the match that ends first, whatever its length.
            let built = AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .build(stops)
                .map_err(|_| Error::StopSequencesTooLarge {
                    count: stops.len(),
                    total_bytes: stops.iter().map(String::len).sum(),
                })?;
            Some(built)
        };
        Ok(Self {
            automaton,
            stops: stops.to_vec(),
            failures: stops
                .iter()
                .map(|s| failure_function(s.as_bytes()))
                .collect(),
            include_stop_sequence,
            pending: Vec::new(),
        })
    }

    /// The bytes received but not yet released.
    pub(crate) fn held_back(&self) -> &[u8] {
        &self.pending
    }

    /// Adds one piece of the stream and releases what is decided.
    ///
    /// On a match, the text before the stop sequence (and the sequence itself when asked) is
    /// released and everything after it is dropped: the answer ends there.
    pub(crate) fn feed(&mut self, piece: &[u8]) -> Fed {
        self.pending.extend_from_slice(piece);
        if let Some(found) = self.earliest_match() {
            let cut = if self.include_stop_sequence {
                found.end
            } else {
                found.start
            };
            let text = String::from_utf8_lossy(&self.pending[..cut]).into_owned();
            self.pending.clear();
            return Fed {
                text,
                matched: Some(found.index),
            };
        }
        let keep_from = self.hold_start();
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
        text
    }

    /// The stop sequence that ends first in `pending`; among those that end at the same byte, the
    /// longest (then the lowest index), so that no part of a stop sequence stays in the answer.
    fn earliest_match(&self) -> Option<Found> {
        let automaton = self.automaton.as_ref()?;
        let mut best: Option<Found> = None;
        // Overlapping matches are reported in the order in which they end, so the loop can stop
        // at the first match that ends later than the best one.
        for m in automaton.find_overlapping_iter(&self.pending) {
            let candidate = Found {
                start: m.start(),
                end: m.end(),
                index: m.pattern().as_usize(),
            };
            match best {
                None => best = Some(candidate),
                Some(b) if candidate.end > b.end => break,
                Some(b) => {
                    if (candidate.start, candidate.index) < (b.start, b.index) {
                        best = Some(candidate);
                    }
                }
            }
        }
        best
    }

    /// Where the held-back part of `pending` starts: the earlier of the longest suffix that is a
    /// proper prefix of some stop sequence, and an incomplete UTF-8 character at the very end.
    fn hold_start(&self) -> usize {
        let n = self.pending.len();
        let longest = self
            .stops
            .iter()
            .zip(&self.failures)
            .map(|(stop, failure)| longest_prefix_at_end(stop.as_bytes(), failure, &self.pending))
            .max()
            .unwrap_or(0);
        let stop_start = n - longest;
        stop_start.min(incomplete_char_start(&self.pending))
    }
}

/// The KMP failure function of `pattern`: entry `i` is the length of the longest proper prefix of
/// `pattern[..=i]` that is also its suffix.
fn failure_function(pattern: &[u8]) -> Vec<usize> {
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
    failure
}

/// The length of the longest proper prefix of `pattern` that `text` ends with.
///
/// Only the last `pattern.len() - 1` bytes of `text` can take part, so this is linear in the
/// pattern's length however long the text is (a plain scan of every prefix would be quadratic,
/// which matters because stop sequences come from users).
fn longest_prefix_at_end(pattern: &[u8], failure: &[usize], text: &[u8]) -> usize {
    let tail = &text[text.len().saturating_sub(pattern.len().saturating_sub(1))..];
    let mut k = 0;
    for &byte in tail {
        // `k` stays below `pattern.len()` because the tail is shorter than the pattern.
        while k > 0 && pattern[k] != byte {
            k = failure[k - 1];
        }
        if pattern.get(k) == Some(&byte) {
            k += 1;
        }
    }
    k
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
        StopMatcher::new(&stops, include).unwrap()
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
    fn longest_prefix_at_end_agrees_with_a_plain_scan() {
        let patterns: [&[u8]; 5] = [b"aab", b"abab", b"aaaa", b"abcabd", b"x"];
        let texts: [&[u8]; 7] = [b"", b"a", b"aa", b"xaba", b"abcab", b"aaab", b"zzabcabcab"];
        for pattern in patterns {
            let failure = failure_function(pattern);
            for text in texts {
                let plain = (0..pattern.len())
                    .rev()
                    .find(|&k| k <= text.len() && text.ends_with(&pattern[..k]))
                    .unwrap_or(0);
                assert_eq!(
                    longest_prefix_at_end(pattern, &failure, text),
                    plain,
                    "pattern {pattern:?} text {text:?}"
                );
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
