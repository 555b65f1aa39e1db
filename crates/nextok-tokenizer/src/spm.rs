//! SentencePiece, the GGUF `llama` tokenizer kind (Llama 2, Mistral, TinyLlama).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Range;

use nextok_gguf::GgufFile;

use crate::vocab::{vocab_methods, Fragment, GgufVocab, Pieces, Vocab};
use crate::{EncodeOptions, Error, SpecialTokens, TokenId, TokenKind, Tokenizer};

/// SentencePiece's visible space.
const SPACE: char = '▁';

/// SentencePiece's BPE over a GGUF vocabulary, as llama.cpp runs it (`llm_tokenizer_spm`).
///
/// Spaces become `▁`, and a space is put in front of the text (and after every special token)
/// when `tokenizer.ggml.add_space_prefix` is true (the default). The text starts as one symbol
/// per character; the adjacent pair whose concatenation is the token with the highest score is
/// merged first (leftmost first among equal scores), until no pair is a token. A character that
/// is not a token is spelled with the byte tokens `<0x00>` to `<0xFF>` (byte fallback).
#[derive(Debug)]
pub struct SpmTokenizer {
    /// The vocabulary; its `strips_leading_space` is `tokenizer.ggml.add_space_prefix`, since
    /// decoding takes away the space that encoding puts in front.
    vocab: Vocab,
    scores: Vec<f32>,
    byte_ids: [Option<TokenId>; 256],
}

/// A candidate merge in the queue: the highest score first, then the leftmost.
#[derive(Debug, Clone, Copy)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

/// A symbol: a byte range of the text, linked to its neighbours.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

/// The byte a token text `<0xAB>` stands for.
fn byte_of(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl SpmTokenizer {
    /// Loads the tokenizer from a GGUF file with `tokenizer.ggml.model = llama`. BOS, EOS and
    /// the unknown token default to 1, 2 and 0, as in llama.cpp.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, Error> {
        let mut vocab = GgufVocab::read(file)?;
        let n = vocab.texts.len();
        let default = |id: TokenId| ((id as usize) < n).then_some(id);
        let meta = file.metadata();
        if meta.get("tokenizer.ggml.bos_token_id").is_none() {
            vocab.special.bos = default(1);
        }
        if meta.get("tokenizer.ggml.eos_token_id").is_none() {
            vocab.special.eos = default(2);
            if let Some(eos) = vocab.special.eos {
                if let Err(at) = vocab.special.end_of_generation.binary_search(&eos) {
                    vocab.special.end_of_generation.insert(at, eos);
                }
            }
        }
        if meta.get("tokenizer.ggml.unknown_token_id").is_none() {
            vocab.special.unk = default(0);
        }
        Ok(Self::new(vocab))
    }

    fn new(vocab: GgufVocab) -> Self {
        let GgufVocab {
            texts,
            kinds,
            scores,
            index,
            special,
            add_bos,
            add_space_prefix,
        } = vocab;
        let mut pieces = Pieces::default();
        let mut byte_ids = [None; 256];
        for (id, (text, kind)) in texts.iter().zip(&kinds).enumerate() {
            match kind {
                TokenKind::Normal => pieces.push(text.replace(SPACE, " ").as_bytes()),
                TokenKind::Byte => match byte_of(text) {
                    Some(b) => {
                        byte_ids[b as usize].get_or_insert(id as TokenId);
                        pieces.push(&[b]);
                    }
                    None => pieces.push(text.as_bytes()),
                },
                TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined => {
                    pieces.push(text.as_bytes())
                }
                TokenKind::Unused => pieces.push(&[]),
            }
        }
        // llama.cpp falls back to the single-character token when a byte token is missing.
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            if slot.is_none() && b < 0x80 {
                let text = (b as u8 as char).to_string();
                *slot = index.get(&text).copied();
            }
        }
        SpmTokenizer {
            vocab: Vocab::new(
                texts,
                kinds,
                pieces,
                index,
                special,
                add_bos.unwrap_or(true),
                add_space_prefix.unwrap_or(true),
            ),
            scores,
            byte_ids,
        }
    }

    /// A token's text as the vocabulary stores it (`▁the` for " the").
    pub fn token_text(&self, id: TokenId) -> Result<&str, Error> {
        self.vocab.token_text(id)
    }

    fn try_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        if left == NONE || right == NONE {
            return;
        }
        let start = symbols[left].start;
        let end = symbols[right].start + symbols[right].len;
        if let Some(&id) = self.vocab.index.get(&text[start..end]) {
            queue.push(Bigram {
                score: self.scores[id as usize],
                left,
                right,
                size: end - start,
            });
        }
    }

    /// Tokenizes one stretch of text that already has `▁` for spaces.
    fn tokenize(&self, text: &str, out: &mut Vec<TokenId>) -> Result<(), Error> {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (at, c) in text.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol {
                start: at,
                len: c.len_utf8(),
                prev: i.wrapping_sub(1),
                next: if at + c.len_utf8() == text.len() {
                    NONE
                } else {
                    i + 1
                },
            });
        }
        if symbols.is_empty() {
            return Ok(());
        }
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.try_bigram(text, &symbols, i - 1, i, &mut queue);
        }
        while let Some(bigram) = queue.pop() {
            let (l, r) = (bigram.left, bigram.right);
            if symbols[l].len == 0
                || symbols[r].len == 0
                || symbols[l].len + symbols[r].len != bigram.size
            {
                continue;
            }
            symbols[l].len += symbols[r].len;
            symbols[r].len = 0;
            symbols[l].next = symbols[r].next;
            if symbols[r].next != NONE {
                let after = symbols[r].next;
                symbols[after].prev = l;
            }
            self.try_bigram(text, &symbols, symbols[l].prev, l, &mut queue);
            self.try_bigram(text, &symbols, l, symbols[l].next, &mut queue);
        }
        let mut i = 0;
        while i != NONE {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.vocab.index.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        let id = self.byte_ids[b as usize]
                            .or(self.vocab.special.unk)
                            .ok_or(Error::UnencodableByte { byte: b })?;
                        out.push(id);
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }
}

impl Tokenizer for SpmTokenizer {
    fn encode_with_plain_ranges(
        &self,
        text: &str,
        plain: &[Range<usize>],
        options: EncodeOptions,
    ) -> Result<Vec<TokenId>, Error> {
        let mut out = self.vocab.start(options, text.len() / 3 + 2)?;
        // The space prefix goes before the text and after every special token.
        let mut after_special = true;
        let mut buffer = String::new();
        for fragment in self.vocab.split(text, options.parse_special, plain)? {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    buffer.clear();
                    if self.vocab.strips_leading_space() && after_special {
                        buffer.push(SPACE);
                    }
                    for c in t.chars() {
                        buffer.push(if c == ' ' { SPACE } else { c });
                    }
                    self.tokenize(&buffer, &mut out)?;
                    after_special = false;
                }
            }
        }
        Ok(out)
    }

    vocab_methods!();
}
