//! Pre-tokenizers: the regular expressions that cut text into words before byte-level BPE runs
//! on each word. They are llama.cpp's (`llm_tokenizer_bpe` in `src/llama-vocab.cpp`).
//!
//! The expressions end in `\s+(?!\S)|\s+`: a run of whitespace, less its last character when a
//! non-space follows (so that the space joins the next word). `regex-automata` has no
//! look-ahead, so the run is matched by a second pattern, `\s+`, and shortened here by one
//! character when it is longer than one character and a non-whitespace character follows within
//! the text being split. This gives the same words as the look-ahead form.

use regex_automata::meta::Regex;
use regex_automata::Input;

use crate::Error;

/// GPT-2's expression, without its final `\s+(?!\S)`.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+";

/// Llama 3's expression (case-insensitive contractions spelled out, as llama.cpp does), without
/// its final `\s+(?!\S)|\s+`.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+";

/// Qwen 2's expression: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+";

/// The whitespace-run pattern that stands for `\s+(?!\S)|\s+`.
const SPACES: &str = r"\s+";

/// Which pre-tokenizer a byte-level BPE vocabulary uses (`tokenizer.ggml.pre`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PreTokenizer {
    /// GPT-2's expression (`default`, `gpt2`, `mpt`, `olmo`, `jais`).
    Gpt2,
    /// Every digit on its own, then GPT-2's expression (`smollm`, `starcoder`, `refact`,
    /// `command-r`, `codeshell`, `exaone`, `minerva`).
    Smollm,
    /// Llama 3's expression (`llama-bpe`, `llama3`, `dbrx`, `smaug-bpe`): up to three digits.
    Llama3,
    /// Qwen 2's expression (`qwen2`, `stablelm2`, `hunyuan`): single digits.
    Qwen2,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` name.
    pub fn from_name(name: &str) -> Result<Self, Error> {
        Ok(match name {
            "default" | "gpt2" | "gpt-2" | "mpt" | "olmo" | "jais" => PreTokenizer::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => PreTokenizer::Smollm,
            "llama-bpe" | "llama3" | "llama-v3" | "dbrx" | "smaug-bpe" => PreTokenizer::Llama3,
            "qwen2" | "stablelm2" | "hunyuan" => PreTokenizer::Qwen2,
            other => {
                return Err(Error::UnsupportedPreTokenizer {
                    pre: other.to_owned(),
                })
            }
        })
    }

    /// Whether a word that is itself a token is taken whole, before any merge (Llama 3's
    /// `ignore_merges`).
    pub(crate) fn ignores_merges(self) -> bool {
        self == PreTokenizer::Llama3
    }

    fn pattern(self) -> &'static str {
        match self {
            PreTokenizer::Gpt2 | PreTokenizer::Smollm => GPT2,
            PreTokenizer::Llama3 => LLAMA3,
            PreTokenizer::Qwen2 => QWEN2,
        }
    }
}

/// A compiled pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    kind: PreTokenizer,
    regex: Regex,
}

impl Splitter {
    pub(crate) fn new(kind: PreTokenizer) -> Self {
        // The patterns are constants of this file and compile; a test checks each of them.
        let regex = Regex::new_many(&[kind.pattern(), SPACES])
            .unwrap_or_else(|e| panic!("pre-tokenizer {kind:?} does not compile: {e}"));
        Splitter { kind, regex }
    }

    /// Calls `word` with each word of `text`, in order. The words cover the text exactly.
    pub(crate) fn split<'a>(&self, text: &'a str, mut word: impl FnMut(&'a str)) {
        if self.kind == PreTokenizer::Smollm {
            // Every number character is a word of its own; the expression splits what lies
            // between, each stretch on its own (so that its end is the end of the text for the
            // look-ahead).
            let mut start = 0;
            for (at, c) in text.char_indices() {
                if c.is_numeric() {
                    if at > start {
                        self.split_range(text, start, at, &mut word);
                    }
                    let end = at + c.len_utf8();
                    word(&text[at..end]);
                    start = end;
                }
            }
            if start < text.len() {
                self.split_range(text, start, text.len(), &mut word);
            }
        } else {
            self.split_range(text, 0, text.len(), &mut word);
        }
    }

    fn split_range<'a>(
        &self,
        text: &'a str,
        start: usize,
        end: usize,
        word: &mut impl FnMut(&'a str),
    ) {
        let mut at = start;
        while at < end {
            let input = Input::new(text).range(at..end);
            let Some(m) = self.regex.search(&input) else {
                word(&text[at..end]);
                return;
            };
            if m.start() > at {
                // Characters no alternative matches stay a word of their own, as llama.cpp
                // keeps the gaps between matches.
                word(&text[at..m.start()]);
            }
            let mut stop = m.end();
            if m.pattern().as_usize() == 1 && stop < end {
                // `\s+(?!\S)`: give the last whitespace character back when a non-space follows
                // and the run is longer than one character.
                let next = text[stop..end].chars().next();
                if next.is_some_and(|c| !c.is_whitespace()) {
                    let run = &text[m.start()..stop];
                    if let Some((last, _)) = run.char_indices().last() {
                        if last > 0 {
                            stop = m.start() + last;
                        }
                    }
                }
            }
            word(&text[m.start()..stop]);
            at = stop;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(kind: PreTokenizer, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        Splitter::new(kind).split(text, |w| out.push(w.to_owned()));
        out
    }

    #[test]
    fn every_pattern_compiles() {
        for kind in [
            PreTokenizer::Gpt2,
            PreTokenizer::Smollm,
            PreTokenizer::Llama3,
            PreTokenizer::Qwen2,
        ] {
            let _ = Splitter::new(kind);
        }
    }

    #[test]
    fn gpt2_spaces_join_the_next_word() {
        // Worked by hand from the expression: a run of three spaces before a word keeps two,
        // the third starts the word; trailing spaces stay together.
        assert_eq!(
            words(PreTokenizer::Gpt2, "   ab cd   "),
            ["  ", " ab", " cd", "   "]
        );
        assert_eq!(words(PreTokenizer::Gpt2, "a\t\tb"), ["a", "\t", "\t", "b"]);
        assert_eq!(
            words(PreTokenizer::Gpt2, "I'm WE'VE"),
            ["I", "'m", " WE", "'", "VE"]
        );
        assert_eq!(words(PreTokenizer::Gpt2, "x 2024"), ["x", " 2024"]);
    }

    #[test]
    fn smollm_splits_digits_first() {
        assert_eq!(
            words(PreTokenizer::Smollm, "In 2024,  7"),
            ["In", " ", "2", "0", "2", "4", ",", "  ", "7"]
        );
    }

    #[test]
    fn llama3_groups_three_digits_and_newlines() {
        assert_eq!(words(PreTokenizer::Llama3, "12345"), ["123", "45"]);
        assert_eq!(words(PreTokenizer::Llama3, "a\n\n b"), ["a", "\n\n", " b"]);
        assert_eq!(words(PreTokenizer::Llama3, "WE'VE"), ["WE", "'VE"]);
        assert_eq!(words(PreTokenizer::Qwen2, "123"), ["1", "2", "3"]);
    }
}
