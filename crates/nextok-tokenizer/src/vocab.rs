//! What every tokenizer shares: the token texts, kinds and bytes, the special tokens, and the
//! splitting of text at special tokens.

use std::collections::HashMap;
use std::ops::Range;

use nextok_gguf::{GgufFile, Metadata};
use regex_automata::meta::Regex;
use regex_automata::{Input, MatchKind, PatternSet};

use crate::{EncodeOptions, Error, TokenId};

/// The kind of a token, as GGUF's `tokenizer.ggml.token_type` codes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenKind {
    /// An ordinary piece of text (code 1; also code 0, "undefined").
    Normal,
    /// The unknown token (code 2).
    Unknown,
    /// A control token such as BOS, EOS or `<|im_start|>` (code 3): recognised in text only when
    /// special tokens are parsed, left out of decoded text when special tokens are skipped.
    Control,
    /// A token added by the model's authors (code 4): always recognised in text.
    UserDefined,
    /// A placeholder that is never produced (code 5).
    Unused,
    /// A SentencePiece byte token such as `<0x0A>` (code 6).
    Byte,
}

impl TokenKind {
    pub(crate) fn from_code(id: TokenId, code: i32) -> Result<Self, Error> {
        Ok(match code {
            0 | 1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => return Err(Error::BadTokenType { id, code }),
        })
    }
}

/// The special tokens of a vocabulary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<TokenId>,
    /// End of sequence.
    pub eos: Option<TokenId>,
    /// End of turn (`<|eot_id|>`, `<|im_end|>`, ...).
    pub eot: Option<TokenId>,
    /// Padding.
    pub pad: Option<TokenId>,
    /// The unknown token.
    pub unk: Option<TokenId>,
    /// Every token that ends a generation, in increasing order.
    pub end_of_generation: Vec<TokenId>,
}

/// Token texts that end a generation, as llama.cpp lists them (`llama_vocab::impl::load`).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// Token texts llama.cpp takes for the end-of-turn token when the file names none, in order.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Fill-in-the-middle padding, repository and file-separator tokens: llama.cpp ends a generation
/// on them too.
const FIM_EOG_TEXTS: &[&[&str]] = &[
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];

/// Computes the end-of-turn token and the set of tokens that end a generation with llama.cpp's
/// rule: the tokens with the listed texts, the first FIM pad, repository and file-separator
/// tokens, EOS and end-of-turn. The listed tokens become control tokens, as llama.cpp overrides
/// their type.
pub(crate) fn end_of_generation(
    lookup: impl Fn(&str) -> Option<TokenId>,
    kinds: &mut [TokenKind],
    special: &mut SpecialTokens,
) {
    // Tokens recognised by their text become control tokens, as llama.cpp overrides their type.
    let mut by_name = Vec::new();
    let eot_by_name = EOT_TEXTS.iter().find_map(|t| lookup(t));
    if special.eot.is_none() {
        special.eot = eot_by_name;
        by_name.extend(eot_by_name);
    }
    for group in FIM_EOG_TEXTS {
        by_name.extend(group.iter().find_map(|t| lookup(t)));
    }
    by_name.extend(EOG_TEXTS.iter().filter_map(|t| lookup(t)));
    for &id in &by_name {
        if let Some(kind) = kinds.get_mut(id as usize) {
            *kind = TokenKind::Control;
        }
    }
    let mut set = by_name;
    set.extend(special.eos);
    set.extend(special.eot);
    set.sort_unstable();
    set.dedup();
    special.end_of_generation = set;
}

/// One piece of text after splitting at special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    /// Text for the tokenizer's model.
    Text(&'a str),
    /// A special token found in the text.
    Token(TokenId),
}

/// Finds special tokens in text, as llama.cpp's `tokenizer_st_partition` does: each special
/// token in turn, longest text first, splits every remaining text fragment at its occurrences.
#[derive(Debug, Clone)]
pub(crate) struct SpecialSplitter {
    /// (text, id, is control or unknown), longest text first.
    tokens: Vec<(String, TokenId, bool)>,
    /// Finds which special texts occur at all, in one pass over the text.
    finder: Option<Regex>,
}

impl SpecialSplitter {
    /// The splitter for the control, unknown and user-defined tokens among `texts`.
    pub(crate) fn new(texts: &[String], kinds: &[TokenKind]) -> Self {
        let mut tokens: Vec<(String, TokenId, bool)> = texts
            .iter()
            .zip(kinds)
            .enumerate()
            .filter(|(_, (text, kind))| {
                !text.is_empty()
                    && matches!(
                        kind,
                        TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined
                    )
            })
            .map(|(id, (text, kind))| {
                (text.clone(), id as TokenId, *kind != TokenKind::UserDefined)
            })
            .collect();
        // Longest first; equal lengths by id, so that the order is fixed.
        tokens.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let patterns: Vec<String> = tokens.iter().map(|(text, _, _)| escape(text)).collect();
        let finder = if tokens.is_empty() {
            None
        } else {
            Regex::builder()
                .configure(Regex::config().match_kind(MatchKind::All))
                .build_many(&patterns)
                .ok()
        };
        SpecialSplitter { tokens, finder }
    }

    /// Splits text at special tokens. Control and unknown tokens count only with
    /// `parse_special`, and only where they lie wholly outside the `plain` byte ranges (which
    /// must be checked with [`check_plain_ranges`]); user-defined tokens always count.
    ///
    /// Text fragments are cut only at special tokens, never at the edges of a plain range, so
    /// text on both sides of such an edge is encoded as one stretch, as it would be without the
    /// ranges.
    pub(crate) fn split<'a>(
        &self,
        text: &'a str,
        parse_special: bool,
        plain: &[Range<usize>],
    ) -> Vec<Fragment<'a>> {
        // Empty text has no fragment at all: llama.cpp gives no tokens for it (not even
        // SentencePiece's space prefix).
        if text.is_empty() {
            return Vec::new();
        }
        if self.tokens.is_empty() {
            return vec![Fragment::Text(text)];
        }
        let present = match &self.finder {
            Some(finder) => {
                let mut set = PatternSet::new(finder.pattern_len());
                finder.which_overlapping_matches(&Input::new(text), &mut set);
                if set.is_empty() {
                    return vec![Fragment::Text(text)];
                }
                Some(set)
            }
            None => None,
        };
        // Fragments as byte ranges of `text`, so that occurrences can be compared with `plain`.
        let mut fragments = vec![Piece::Text(0..text.len())];
        let mut found = Vec::new();
        for (index, (special, id, control)) in self.tokens.iter().enumerate() {
            if *control && !parse_special {
                continue;
            }
            if let Some(set) = &present {
                if !set.contains(regex_automata::PatternID::new_unchecked(index)) {
                    continue;
                }
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                match fragment {
                    Piece::Text(range) if range.len() >= special.len() => {
                        found.clear();
                        if *control && !plain.is_empty() {
                            // Search each stretch of the fragment outside the plain ranges on
                            // its own, so that an occurrence straddling an edge can neither
                            // count nor hide a later one that lies wholly outside.
                            for stretch in outside(range.clone(), plain) {
                                occurrences(text, stretch, special, &mut found);
                            }
                        } else {
                            occurrences(text, range.clone(), special, &mut found);
                        }
                        let mut last = range.start;
                        for &at in &found {
                            if at > last {
                                next.push(Piece::Text(last..at));
                            }
                            next.push(Piece::Token(*id));
                            last = at + special.len();
                        }
                        if last < range.end {
                            next.push(Piece::Text(last..range.end));
                        }
                    }
                    other => next.push(other),
                }
            }
            fragments = next;
        }
        fragments
            .into_iter()
            .map(|piece| match piece {
                Piece::Text(range) => Fragment::Text(&text[range]),
                Piece::Token(id) => Fragment::Token(id),
            })
            .collect()
    }
}

/// A fragment while splitting: a byte range of the text, or a special token found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(Range<usize>),
    Token(TokenId),
}

/// Appends the starts of the non-overlapping occurrences of `special` in `text[range]`, leftmost
/// first, as offsets into `text`.
fn occurrences(text: &str, range: Range<usize>, special: &str, found: &mut Vec<usize>) {
    let start = range.start;
    if let Some(stretch) = text.get(range) {
        found.extend(stretch.match_indices(special).map(|(at, _)| start + at));
    }
}

/// The parts of `range` that no plain range covers, in order (`plain` sorted, non-overlapping).
fn outside(range: Range<usize>, plain: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = range.start;
    // The ranges before this one are skipped by a binary search, so that splitting a long chat
    // costs no more than the ranges each fragment meets.
    let first = plain.partition_point(|p| p.end <= at);
    for p in &plain[first..] {
        if p.end <= at || p.is_empty() {
            continue;
        }
        if p.start >= range.end {
            break;
        }
        if p.start > at {
            out.push(at..p.start);
        }
        at = at.max(p.end);
    }
    if at < range.end {
        out.push(at..range.end);
    }
    out
}

/// Checks that `plain` holds sorted, non-overlapping ranges inside `text` whose ends fall on
/// character boundaries.
pub(crate) fn check_plain_ranges(text: &str, plain: &[Range<usize>]) -> Result<(), Error> {
    let mut previous_end = 0;
    for r in plain {
        if r.start > r.end
            || r.start < previous_end
            || !text.is_char_boundary(r.start)
            || !text.is_char_boundary(r.end)
        {
            return Err(Error::PlainRange {
                start: r.start,
                end: r.end,
                len: text.len(),
            });
        }
        previous_end = r.end;
    }
    Ok(())
}

/// Escapes a literal for a regular expression.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '.'
                | '+'
                | '*'
                | '?'
                | '('
                | ')'
                | '|'
                | '['
                | ']'
                | '{'
                | '}'
                | '^'
                | '$'
                | '#'
                | '&'
                | '-'
                | '~'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The tokenizer metadata both GGUF kinds read.
pub(crate) struct GgufVocab {
    pub(crate) texts: Vec<String>,
    pub(crate) kinds: Vec<TokenKind>,
    pub(crate) scores: Vec<f32>,
    pub(crate) index: HashMap<String, TokenId>,
    pub(crate) special: SpecialTokens,
    pub(crate) add_bos: Option<bool>,
    pub(crate) add_space_prefix: Option<bool>,
}

fn optional_id(meta: &Metadata, key: &str, vocab_size: usize) -> Result<Option<TokenId>, Error> {
    if meta.get(key).is_none() {
        return Ok(None);
    }
    let id = meta.get_u64(key)?;
    if id as usize >= vocab_size || id > u64::from(u32::MAX) {
        // llama.cpp writes -1 (as u32::MAX) for "none" in some converters; accept that as absent.
        if id == u64::from(u32::MAX) {
            return Ok(None);
        }
        return Err(Error::SpecialTokenOutOfRange {
            key: key.to_owned(),
            id,
            vocab_size,
        });
    }
    Ok(Some(id as TokenId))
}

impl GgufVocab {
    /// Reads and checks `tokenizer.ggml.tokens`, `token_type`, `scores`, the special token ids,
    /// and the model's declared vocabulary size.
    pub(crate) fn read(file: &GgufFile) -> Result<Self, Error> {
        let meta = file.metadata();
        let texts = meta.get_str_array("tokenizer.ggml.tokens")?.to_vec();
        let n = texts.len();
        if n == 0 {
            return Err(Error::EmptyVocabulary);
        }
        if n > u32::MAX as usize {
            return Err(Error::ArrayLength {
                key: "tokenizer.ggml.tokens".into(),
                found: n,
                expected: u32::MAX as usize,
            });
        }
        if let Ok(arch) = meta.get_str("general.architecture") {
            let key = format!("{arch}.vocab_size");
            if meta.get(&key).is_some() {
                let declared = meta.get_u64(&key)?;
                if declared != n as u64 {
                    return Err(Error::VocabSizeMismatch {
                        key,
                        tokens: n,
                        declared,
                    });
                }
            }
        }
        let check_len = |key: &str, found: usize| {
            if found == n {
                Ok(())
            } else {
                Err(Error::ArrayLength {
                    key: key.to_owned(),
                    found,
                    expected: n,
                })
            }
        };
        let mut kinds = vec![TokenKind::Normal; n];
        if meta.get("tokenizer.ggml.token_type").is_some() {
            let codes = meta.get_i32_array("tokenizer.ggml.token_type")?;
            check_len("tokenizer.ggml.token_type", codes.len())?;
            for (id, (&code, kind)) in codes.iter().zip(&mut kinds).enumerate() {
                *kind = TokenKind::from_code(id as TokenId, code)?;
            }
        }
        let scores = if meta.get("tokenizer.ggml.scores").is_some() {
            let scores = meta.get_f32_array("tokenizer.ggml.scores")?;
            check_len("tokenizer.ggml.scores", scores.len())?;
            scores.to_vec()
        } else {
            vec![0.0; n]
        };
        let mut index = HashMap::with_capacity(n);
        for (id, text) in texts.iter().enumerate() {
            if let Some(first) = index.insert(text.clone(), id as TokenId) {
                // llama.cpp keeps the last id for a text seen twice; a vocabulary that does this
                // cannot round-trip, so it is refused.
                return Err(Error::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: id as TokenId,
                });
            }
        }
        let mut special = SpecialTokens {
            bos: optional_id(meta, "tokenizer.ggml.bos_token_id", n)?,
            eos: optional_id(meta, "tokenizer.ggml.eos_token_id", n)?,
            eot: optional_id(meta, "tokenizer.ggml.eot_token_id", n)?,
            pad: optional_id(meta, "tokenizer.ggml.padding_token_id", n)?,
            unk: optional_id(meta, "tokenizer.ggml.unknown_token_id", n)?,
            end_of_generation: Vec::new(),
        };
        let eom = optional_id(meta, "tokenizer.ggml.eom_token_id", n)?;
        end_of_generation(|t| index.get(t).copied(), &mut kinds, &mut special);
        if let Some(eom) = eom {
            if let Err(at) = special.end_of_generation.binary_search(&eom) {
                special.end_of_generation.insert(at, eom);
            }
        }
        let flag = |key: &str| -> Result<Option<bool>, Error> {
            match meta.get(key) {
                None => Ok(None),
                Some(_) => Ok(Some(meta.get_bool(key)?)),
            }
        };
        Ok(GgufVocab {
            add_bos: flag("tokenizer.ggml.add_bos_token")?,
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix")?,
            texts,
            kinds,
            scores,
            index,
            special,
        })
    }
}

/// Token bytes for every id, stored in one buffer.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Pieces {
    pub(crate) fn push(&mut self, piece: &[u8]) {
        self.bytes.extend_from_slice(piece);
        self.ends.push(self.bytes.len());
    }

    pub(crate) fn get(&self, id: TokenId) -> Result<&[u8], Error> {
        let i = id as usize;
        let end = *self.ends.get(i).ok_or(Error::UnknownTokenId {
            id,
            vocab_size: self.ends.len(),
        })?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Ok(&self.bytes[start..end])
    }
}

/// Checks an id against the vocabulary size.
pub(crate) fn check_id(id: TokenId, vocab_size: usize) -> Result<usize, Error> {
    if (id as usize) < vocab_size {
        Ok(id as usize)
    } else {
        Err(Error::UnknownTokenId { id, vocab_size })
    }
}

/// The [`Tokenizer`](crate::Tokenizer) methods that a tokenizer answers from its `vocab` field
/// (a [`Vocab`]): all but the encoders, written once for the BPE, SentencePiece and
/// `tokenizer.json` tokenizers.
macro_rules! vocab_methods {
    () => {
        fn vocab_size(&self) -> usize {
            self.vocab.len()
        }

        fn token_bytes(&self, id: TokenId) -> Result<&[u8], Error> {
            self.vocab.token_bytes(id)
        }

        fn token_kind(&self, id: TokenId) -> Result<TokenKind, Error> {
            self.vocab.token_kind(id)
        }

        fn token_id(&self, text: &str) -> Option<TokenId> {
            self.vocab.token_id(text)
        }

        fn special_tokens(&self) -> &SpecialTokens {
            self.vocab.special_tokens()
        }

        fn add_bos_by_default(&self) -> bool {
            self.vocab.add_bos()
        }

        fn strips_leading_space(&self) -> bool {
            self.vocab.strips_leading_space()
        }
    };
}
pub(crate) use vocab_methods;

/// What every tokenizer holds and answers in the same way: each token's text, kind and exact
/// bytes, the index from text to id, the special tokens and their splitter, and the two flags
/// the [`Tokenizer`](crate::Tokenizer) trait asks about. [`BpeTokenizer`](crate::BpeTokenizer),
/// [`SpmTokenizer`](crate::SpmTokenizer) and `HfTokenizer` each hold one and forward the trait's
/// accessors to it, so those accessors are written once.
#[derive(Debug)]
pub(crate) struct Vocab {
    /// Each token's text as the vocabulary stores it (`Ġthe`, `▁the`, `<|im_start|>`).
    pub(crate) texts: Vec<String>,
    kinds: Vec<TokenKind>,
    pieces: Pieces,
    pub(crate) index: HashMap<String, TokenId>,
    pub(crate) special: SpecialTokens,
    specials: SpecialSplitter,
    add_bos: bool,
    strips_leading_space: bool,
}

impl Vocab {
    /// A vocabulary from its parts; `pieces` holds the bytes of every id in order. The splitter
    /// for special tokens is built here, from the texts and kinds.
    pub(crate) fn new(
        texts: Vec<String>,
        kinds: Vec<TokenKind>,
        pieces: Pieces,
        index: HashMap<String, TokenId>,
        special: SpecialTokens,
        add_bos: bool,
        strips_leading_space: bool,
    ) -> Self {
        let specials = SpecialSplitter::new(&texts, &kinds);
        Vocab {
            texts,
            kinds,
            pieces,
            index,
            special,
            specials,
            add_bos,
            strips_leading_space,
        }
    }

    /// The number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// A token's exact bytes.
    pub(crate) fn token_bytes(&self, id: TokenId) -> Result<&[u8], Error> {
        self.pieces.get(id)
    }

    /// A token's kind.
    pub(crate) fn token_kind(&self, id: TokenId) -> Result<TokenKind, Error> {
        Ok(self.kinds[check_id(id, self.kinds.len())?])
    }

    /// The id of the token whose stored text is `text`.
    pub(crate) fn token_id(&self, text: &str) -> Option<TokenId> {
        self.index.get(text).copied()
    }

    /// A token's text as the vocabulary stores it.
    pub(crate) fn token_text(&self, id: TokenId) -> Result<&str, Error> {
        Ok(&self.texts[check_id(id, self.texts.len())?])
    }

    /// BOS, EOS, end-of-turn, padding, unknown and the end-of-generation set.
    pub(crate) fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    /// Whether the model asks for BOS at the start of a prompt.
    pub(crate) fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether decoding drops one space at the very start (SentencePiece's space prefix).
    pub(crate) fn strips_leading_space(&self) -> bool {
        self.strips_leading_space
    }

    /// The start of an encoding: an empty list with room for `capacity` ids, holding BOS when
    /// the options ask for it (an error when the vocabulary has none).
    pub(crate) fn start(
        &self,
        options: EncodeOptions,
        capacity: usize,
    ) -> Result<Vec<TokenId>, Error> {
        let mut out = Vec::with_capacity(capacity);
        if options.add_bos {
            out.push(
                self.special
                    .bos
                    .ok_or(Error::MissingSpecialToken { which: "BOS" })?,
            );
        }
        Ok(out)
    }

    /// Splits text at special tokens, none of control kind inside the `plain` byte ranges (see
    /// [`SpecialSplitter::split`]); a range that is not sorted, non-overlapping and on
    /// character boundaries of `text` is an error.
    pub(crate) fn split<'a>(
        &self,
        text: &'a str,
        parse_special: bool,
        plain: &[Range<usize>],
    ) -> Result<Vec<Fragment<'a>>, Error> {
        check_plain_ranges(text, plain)?;
        Ok(self.specials.split(text, parse_special, plain))
    }
}
