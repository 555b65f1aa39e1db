//! The vocabulary as the constraints see it: the exact bytes of every token, preprocessed once
//! into a token trie.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::dfa::Dfa;
use crate::grammar::{FxMap, Radii, TerminalMask};
use crate::Error;

/// Terminal masks shared by every grammar built on one vocabulary: automata get a number the
/// first time a grammar uses them, and masks are kept per (number, state).
///
/// Numbers are never given twice, so that the whole cache can be dropped while grammars hold
/// numbers: a number still names its automaton, whose masks are then computed again. An
/// automaton met again after a drop gets a new number.
#[derive(Debug)]
pub(crate) struct SharedMasks {
    ids: FxMap<Arc<Dfa>, u64>,
    /// The number the next automaton gets.
    next_id: u64,
    /// Keyed by small integers: a fast hash (no SipHash), and room reserved up front, since a
    /// table that grows rehashes every entry inside one mask (milliseconds once it is large).
    masks: FxMap<(u64, u32), Arc<TerminalMask>>,
    /// Per automaton number, its radii (computed with the first mask whose walk needs them).
    radii: FxMap<u64, Arc<Radii>>,
    /// Words of mask memory held, to bound the cache.
    words: usize,
    /// Bytes of the automata numbered, which the cache keeps alive after their grammars are
    /// gone, to bound the cache.
    automata_bytes: usize,
    /// The most bytes of automata kept ([`SHARED_AUTOMATA_BYTES`]; less in tests).
    automata_bound: usize,
}

impl Default for SharedMasks {
    fn default() -> Self {
        SharedMasks {
            ids: FxMap::default(),
            next_id: 0,
            masks: FxMap::default(),
            radii: FxMap::default(),
            words: 0,
            automata_bytes: 0,
            automata_bound: SHARED_AUTOMATA_BYTES,
        }
    }
}

impl SharedMasks {
    /// Forgets every automaton, mask and radius (numbers given stay given).
    fn clear(&mut self) {
        self.ids.clear();
        self.masks.clear();
        self.radii.clear();
        self.words = 0;
        self.automata_bytes = 0;
    }
}

/// Most mask memory the shared cache keeps (in u64 words: 32 MiB); past it, it starts afresh.
const SHARED_WORDS: usize = 4 << 20;

/// Most bytes of numbered automata the shared cache keeps alive; past it, it starts afresh.
/// Without a bound, a server that compiled many schemas kept every terminal automaton it had
/// ever masked.
const SHARED_AUTOMATA_BYTES: usize = 32 << 20;

/// Entries the shared mask table reserves when it takes its first mask.
const SHARED_MASKS_RESERVED: usize = 1 << 14;

/// Most trie nodes a first mask of an automaton without radii visits before the radii are
/// computed (a walk of this many costs some tens of microseconds; radii of an automaton of
/// thousands of states, most of a millisecond).
const UNSKIPPED_NODES: usize = 4096;

/// One node of the token trie, stored in depth-first preorder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TrieNode {
    /// The byte on the edge into this node.
    pub(crate) byte: u8,
    /// Index one past this node's subtree.
    pub(crate) end: u32,
    /// Range into `TokenVocab::trie_tokens` of the tokens whose bytes end here.
    pub(crate) tok_start: u32,
    /// End of that range.
    pub(crate) tok_end: u32,
    /// The longest path below the node, in bytes (0 for a leaf; at most 255).
    pub(crate) height: u8,
    /// Bit `k` is set when every byte on an edge below the node is in `CATEGORIES[k]`.
    pub(crate) cats: u8,
    /// When the path to every node of the subtree (this one and those below it) is text (UTF-8
    /// characters that a JSON string holds unescaped, [`text_ascii`] and [`MULTIBYTE`], the
    /// last one possibly cut short), the most characters begun on any of those paths;
    /// [`NOT_TEXT`] otherwise.
    pub(crate) text: u8,
}

/// [`TrieNode::text`] of a subtree with a path that is not text.
pub(crate) const NOT_TEXT: u8 = u8::MAX;

/// The UTF-8 sequences of the multi-byte characters of text, as byte ranges, one per byte:
/// strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF) less U+2028 and
/// U+2029, which a pattern's `.` does not match (as it does not match `\n` and `\r`, which
/// are not text either).
pub(crate) const MULTIBYTE: [&[(u8, u8)]; 12] = [
    &[(0xC2, 0xDF), (0x80, 0xBF)],
    &[(0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)],
    &[(0xE1, 0xE1), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xE2, 0xE2), (0x80, 0x80), (0x80, 0xA7)],
    &[(0xE2, 0xE2), (0x80, 0x80), (0xAA, 0xBF)],
    &[(0xE2, 0xE2), (0x81, 0xBF), (0x80, 0xBF)],
    &[(0xE3, 0xEC), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)],
    &[(0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)],
];

/// Whether byte `b` is a character of text on its own: printable ASCII but `"` and `\`.
#[inline]
pub(crate) fn text_ascii(b: u8) -> bool {
    CATEGORIES[0](b)
}

/// Where a path is in its text: characters begun, and within the last one the bytes read of
/// it and the kinds of character ([`MULTIBYTE`], a bit each) they still fit; `None` once the
/// path is not text.
#[derive(Clone, Copy)]
struct TextAt {
    chars: u16,
    read: u8,
    kinds: u16,
}

impl TextAt {
    /// The path with byte `b` after it.
    fn then(self, b: u8) -> Option<TextAt> {
        let fits = |k: usize, at: usize| {
            MULTIBYTE[k]
                .get(at)
                .is_some_and(|&(lo, hi)| (lo..=hi).contains(&b))
        };
        let (chars, read, kinds) = match self.read {
            0 if text_ascii(b) => {
                return Some(TextAt {
                    chars: self.chars + 1,
                    read: 0,
                    kinds: 0,
                })
            }
            0 => (self.chars + 1, 0usize, u16::MAX),
            r => (self.chars, r as usize, self.kinds),
        };
        let kinds = (0..MULTIBYTE.len())
            .filter(|&k| kinds >> k & 1 == 1 && fits(k, read))
            .fold(0u16, |a, k| a | 1 << k);
        if kinds == 0 {
            return None;
        }
        // The kinds one byte sequence fits all have its length.
        let k = kinds.trailing_zeros() as usize;
        let read = match read + 1 == MULTIBYTE[k].len() {
            true => 0,
            false => read as u8 + 1,
        };
        Some(TextAt { chars, read, kinds })
    }
}

/// Byte sets that whole subtrees of a token trie often stay within (most tokens are words,
/// numbers or runs of spaces). A walk skips a subtree whose bytes all lie in one of them when the
/// automaton cannot die or accept within the subtree's height on those bytes.
pub(crate) const CATEGORIES: [fn(u8) -> bool; 5] = [
    // What a JSON string holds unescaped, in ASCII.
    |b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\',
    |b| b.is_ascii_alphanumeric(),
    |b| b.is_ascii_alphabetic(),
    |b| b.is_ascii_digit(),
    |b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'),
];

/// [`CATEGORIES`] as 256-bit byte sets, for tests by bit rather than by call.
pub(crate) fn category_sets() -> &'static [[u64; 4]; CATEGORIES.len()] {
    static SETS: OnceLock<[[u64; 4]; CATEGORIES.len()]> = OnceLock::new();
    SETS.get_or_init(|| {
        let mut sets = [[0u64; 4]; CATEGORIES.len()];
        for (set, keep) in sets.iter_mut().zip(CATEGORIES) {
            for b in (0..=255u8).filter(|&b| keep(b)) {
                set[(b >> 6) as usize] |= 1 << (b & 63);
            }
        }
        sets
    })
}

/// Whether byte `b` is in the 256-bit set `set`.
#[inline(always)]
pub(crate) fn has_byte(set: &[u64; 4], b: u8) -> bool {
    set[(b >> 6) as usize] >> (b & 63) & 1 == 1
}

/// Counts up to which [`TokensBy`] keeps a ready bitset.
const SHORT: usize = 16;

/// Some of the vocabulary's tokens by a count of theirs, to mark those of at most a given count
/// at once:
/// - the plain tokens (all bytes in `CATEGORIES[0]`, printable ASCII but `"` and `\`) by
///   length: in a JSON string of bounded length, those shorter than the characters left are
///   exactly the plain tokens allowed, so a walk marks them at once and visits only the rest;
/// - the text tokens ([`TrieNode::text`]: characters a JSON string holds unescaped, the last
///   one possibly cut short) by the characters they begin: where an automaton reads any text
///   of up to `n` characters without dying or accepting, those of at most `n` are allowed, so
///   a walk marks them at once and skips the subtrees of such text.
#[derive(Clone, Debug, Default)]
pub(crate) struct TokensBy {
    /// `short[n]`: the bitset of the tokens of count at most `n`, for `n` up to `SHORT`.
    short: Vec<Vec<u64>>,
    /// The tokens of count above `SHORT`, with their counts, least first.
    long: Vec<(usize, u32)>,
}

impl TokensBy {
    /// The tokens `ids` that `count` counts (`None`: not one of them), in bitsets of `words`
    /// words.
    fn new(ids: &[u32], words: usize, count: impl Fn(u32) -> Option<usize>) -> TokensBy {
        let mut short = vec![vec![0u64; words]; SHORT + 1];
        let mut long = Vec::new();
        for (t, n) in ids.iter().filter_map(|&t| Some((t, count(t)?))) {
            if n > SHORT {
                long.push((n, t));
            } else {
                for set in &mut short[n..] {
                    set[(t >> 6) as usize] |= 1 << (t & 63);
                }
            }
        }
        long.sort_unstable();
        TokensBy { short, long }
    }

    /// The plain tokens, by length.
    fn plain(tokens: &[Vec<u8>], ids: &[u32], words: usize) -> TokensBy {
        TokensBy::new(ids, words, |t| {
            let bytes = &tokens[t as usize];
            bytes
                .iter()
                .all(|&b| CATEGORIES[0](b))
                .then_some(bytes.len())
        })
    }

    /// The text tokens, by characters begun.
    fn text(tokens: &[Vec<u8>], ids: &[u32], words: usize) -> TokensBy {
        let empty = TextAt {
            chars: 0,
            read: 0,
            kinds: 0,
        };
        TokensBy::new(ids, words, |t| {
            tokens[t as usize]
                .iter()
                .try_fold(empty, |at, &b| at.then(b))
                .map(|at| at.chars as usize)
        })
    }

    /// Sets the bits of the tokens of count at most `limit`.
    pub(crate) fn mark_upto(&self, limit: usize, mask: &mut [u64]) {
        let Some(short) = self.short.get(limit.min(SHORT)) else {
            return;
        };
        for (m, w) in mask.iter_mut().zip(short) {
            *m |= w;
        }
        for &(_, t) in self.long.iter().take_while(|&&(n, _)| n <= limit) {
            mask[(t >> 6) as usize] |= 1 << (t & 63);
        }
    }

    /// Sets the bits of the tokens of count below `limit` (all of them for `usize::MAX`).
    pub(crate) fn mark_shorter_than(&self, limit: usize, mask: &mut [u64]) {
        self.mark_upto(limit.saturating_sub(1), mask);
    }
}

/// A vocabulary: token id to bytes, plus the end-of-generation tokens.
///
/// Build it once per model and share it through an `Arc` between all constraints. Tokens with no
/// bytes (special tokens other than the end tokens) are allowed only by a grammar's token
/// references (GBNF's `<[id]>`, `!<[id]>`, `<|im_end|>`), never by bytes.
#[derive(Clone, Debug)]
pub struct TokenVocab {
    tokens: Vec<Vec<u8>>,
    eos: Vec<u32>,
    /// Preorder trie; node 0 is the root (no byte).
    pub(crate) trie: Vec<TrieNode>,
    pub(crate) trie_tokens: Vec<u32>,
    /// The distinct sets of bytes found below trie nodes (256-bit sets).
    pub(crate) byte_sets: Vec<[u64; 4]>,
    /// Per trie node, its index in `byte_sets`.
    pub(crate) below_set: Vec<u32>,
    /// Per trie node, its parent (0 for the root).
    parent: Vec<u32>,
    /// The root's children in the trie's order, `(byte, node)`: a walk picks those its
    /// automaton reads without touching the others' nodes.
    pub(crate) root_kids: Vec<(u8, u32)>,
    /// For the nodes of many children ([`WIDE`] or more), where in `wide_kids` their table of
    /// 256 children by byte begins (0 for no child): finding one child by scanning the
    /// siblings reads a node of each sibling's subtree, scattered over the trie.
    wide: FxMap<u32, u32>,
    wide_kids: Vec<u32>,
    /// The tokens made only of bytes of the first category (what a JSON string holds
    /// unescaped), by length.
    pub(crate) plain: TokensBy,
    /// The tokens that are text, by characters.
    pub(crate) text: TokensBy,
    shared: Arc<Mutex<SharedMasks>>,
    /// Identifies this vocabulary (and its clones, which share the cache) to grammars.
    serial: u64,
    /// Special tokens by their text (`<|im_end|>`), which grammars may name
    /// ([`TokenVocab::token_for_text`]).
    special: HashMap<String, u32>,
}

/// Children from which a trie node gets a table of them by byte ([`TokenVocab::trie_child`]).
const WIDE: usize = 12;

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

impl TokenVocab {
    /// Builds the vocabulary from each token's exact bytes and the end-of-generation token ids.
    ///
    /// End tokens are allowed exactly when the output is complete, whatever their bytes.
    pub fn new(tokens: Vec<Vec<u8>>, eos: &[u32]) -> Result<TokenVocab, Error> {
        for &t in eos {
            if t as usize >= tokens.len() {
                return Err(Error::EosOutOfRange {
                    token: t,
                    vocab_size: tokens.len(),
                });
            }
        }
        let mut eos = eos.to_vec();
        eos.sort_unstable();
        eos.dedup();
        let mut ids: Vec<u32> = (0..tokens.len() as u32)
            .filter(|t| !tokens[*t as usize].is_empty() && eos.binary_search(t).is_err())
            .collect();
        ids.sort_by(|&a, &b| tokens[a as usize].cmp(&tokens[b as usize]).then(a.cmp(&b)));
        let mut trie = vec![TrieNode {
            byte: 0,
            end: 0,
            tok_start: 0,
            tok_end: 0,
            height: 0,
            cats: 0,
            text: NOT_TEXT,
        }];
        let mut trie_tokens = Vec::with_capacity(ids.len());
        // `path[d]` is the node index at depth d + 1 along the current token's bytes.
        let mut path: Vec<usize> = Vec::new();
        let mut prev: &[u8] = &[];
        for &id in &ids {
            let bytes = &tokens[id as usize][..];
            let lcp = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            while path.len() > lcp {
                let n = path.pop().unwrap_or(0);
                trie[n].end = trie.len() as u32;
            }
            for &b in &bytes[lcp..] {
                let start = trie_tokens.len() as u32;
                trie.push(TrieNode {
                    byte: b,
                    end: 0,
                    tok_start: start,
                    tok_end: start,
                    height: 0,
                    cats: 0,
                    text: NOT_TEXT,
                });
                path.push(trie.len() - 1);
            }
            let leaf = *path.last().unwrap_or(&0);
            if trie[leaf].tok_end != trie_tokens.len() as u32 {
                // Only reachable for duplicates, which follow each other in sorted order.
                trie[leaf].tok_start = trie_tokens.len() as u32;
            }
            trie_tokens.push(id);
            trie[leaf].tok_end = trie_tokens.len() as u32;
            prev = bytes;
        }
        while let Some(n) = path.pop() {
            trie[n].end = trie.len() as u32;
        }
        trie[0].end = trie.len() as u32;
        let (byte_sets, below_set, parent) = summarize(&mut trie);
        let root_kids = children(&trie, 0)
            .map(|c| (trie[c].byte, c as u32))
            .collect();
        let (mut wide, mut wide_kids) = (FxMap::default(), Vec::new());
        for n in 1..trie.len() {
            if children(&trie, n).nth(WIDE - 1).is_some() {
                wide.insert(n as u32, wide_kids.len() as u32);
                let at = wide_kids.len();
                wide_kids.resize(at + 256, 0);
                for c in children(&trie, n) {
                    wide_kids[at + trie[c].byte as usize] = c as u32;
                }
            }
        }
        let words = tokens.len().div_ceil(64);
        let plain = TokensBy::plain(&tokens, &trie_tokens, words);
        let text = TokensBy::text(&tokens, &trie_tokens, words);
        Ok(TokenVocab {
            tokens,
            eos,
            trie,
            trie_tokens,
            byte_sets,
            below_set,
            parent,
            root_kids,
            wide,
            wide_kids,
            plain,
            text,
            shared: Arc::default(),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            special: HashMap::new(),
        })
    }

    /// The same vocabulary, with the texts of its special tokens (`("<|im_end|>", 2)`), so that
    /// a grammar can name them ([`TokenVocab::token_for_text`]). A text given twice keeps its
    /// last id.
    pub fn with_special_tokens<S: Into<String>>(
        mut self,
        special: impl IntoIterator<Item = (S, u32)>,
    ) -> Result<TokenVocab, Error> {
        for (text, id) in special {
            if id as usize >= self.tokens.len() {
                return Err(Error::TokenOutOfRange {
                    token: id,
                    vocab_size: self.tokens.len(),
                });
            }
            self.special.insert(text.into(), id);
        }
        Ok(self)
    }

    /// The token a grammar means by `text` (GBNF's `<|im_end|>` or `<think>`): the special token
    /// of that text, else the token whose bytes are exactly the text (the lowest id if several
    /// are), else none. llama.cpp takes the text's tokenization when it is one token, which is
    /// that token.
    pub fn token_for_text(&self, text: &str) -> Option<u32> {
        if let Some(&id) = self.special.get(text) {
            return Some(id);
        }
        self.tokens
            .iter()
            .position(|t| !text.is_empty() && t.as_slice() == text.as_bytes())
            .map(|i| i as u32)
    }

    /// The vocabulary of a tokenizer, as constraints need it: every token's exact bytes
    /// ([`Tokenizer::token_bytes`](nextok_tokenizer::Tokenizer::token_bytes)), except that
    /// control tokens (`<|im_start|>`, BOS) and the unknown token get no bytes, so no constraint
    /// allows them unless a grammar names them (GBNF's `<|im_start|>`: their texts are kept as
    /// [`TokenVocab::with_special_tokens`] keeps them); the end tokens are
    /// [`SpecialTokens::end_of_generation`](nextok_tokenizer::SpecialTokens::end_of_generation),
    /// which a constraint allows exactly when the output is complete.
    ///
    /// A control token's bytes are its text, so the vocabulary of
    /// [`Tokenizer::all_token_bytes`](nextok_tokenizer::Tokenizer::all_token_bytes) would let a
    /// grammar accept `<|im_start|>` wherever that text fits (inside a JSON string, for one). The
    /// unknown token is left out too: its text (`<unk>`) is not what it means.
    ///
    /// Needs the `tokenizer` feature (on by default).
    ///
    /// ```
    /// use nextok_constraints::TokenVocab;
    /// use nextok_tokenizer::{load_from_gguf, GgufFile};
    /// # use nextok_gguf::{write::GgufWriter, Array, Value};
    /// # let bytes = GgufWriter::new()
    /// #     .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
    /// #     .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(
    /// #         ["<|im_end|>", "<|im_start|>", "a", "b"].map(String::from).to_vec())))
    /// #     .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![3, 3, 1, 1])))
    /// #     .metadata("tokenizer.ggml.merges", Value::Array(Array::String(vec![])))
    /// #     .to_bytes();
    /// // A vocabulary of `<|im_end|>` (an end token), `<|im_start|>` (a control token), `a`, `b`.
    /// let tokenizer = load_from_gguf(&GgufFile::from_bytes(bytes)?)?;
    /// let vocab = TokenVocab::from_tokenizer(tokenizer.as_ref())?;
    /// assert_eq!(vocab.eos_tokens(), [0]);
    /// assert_eq!(vocab.token_bytes(1), Some(&b""[..])); // never allowed
    /// assert_eq!(vocab.token_bytes(2), Some(&b"a"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokenizer")]
    pub fn from_tokenizer(
        tokenizer: &dyn nextok_tokenizer::Tokenizer,
    ) -> Result<TokenVocab, Error> {
        use nextok_tokenizer::TokenKind;
        let vocab_size = tokenizer.vocab_size();
        let mut bytes = Vec::with_capacity(vocab_size);
        // Ids are u32: a larger vocabulary cannot be read (its id u32::MAX is the first refused).
        let n = u32::try_from(vocab_size).map_err(|_| Error::TokenizerInconsistent {
            token: u32::MAX,
            vocab_size,
        })?;
        let mut special = Vec::new();
        for id in 0..n {
            let refused = Error::TokenizerInconsistent {
                token: id,
                vocab_size,
            };
            let kind = tokenizer.token_kind(id).map_err(|_| refused.clone())?;
            bytes.push(match kind {
                TokenKind::Control | TokenKind::Unknown => {
                    // Its text, for grammars that name it (`<|im_end|>`).
                    if let Ok(text) = tokenizer.token_bytes(id) {
                        if let Ok(text) = std::str::from_utf8(text) {
                            special.push((text.to_string(), id));
                        }
                    }
                    Vec::new()
                }
                _ => tokenizer.token_bytes(id).map_err(|_| refused)?.to_vec(),
            });
        }
        TokenVocab::new(bytes, &tokenizer.special_tokens().end_of_generation)?
            .with_special_tokens(special)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the vocabulary has no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The bytes of a token, if the id is in range.
    pub fn token_bytes(&self, token: u32) -> Option<&[u8]> {
        self.tokens.get(token as usize).map(|v| &v[..])
    }

    /// The end-of-generation tokens, sorted.
    pub fn eos_tokens(&self) -> &[u32] {
        &self.eos
    }

    /// Whether `token` ends generation.
    pub fn is_eos(&self, token: u32) -> bool {
        self.eos.binary_search(&token).is_ok()
    }

    /// Number of `u64` words in a mask for this vocabulary.
    pub fn mask_words(&self) -> usize {
        self.tokens.len().div_ceil(64)
    }

    /// A mask of the right size with no token allowed.
    pub fn empty_mask(&self) -> Vec<u64> {
        vec![0; self.mask_words()]
    }

    /// Splits `bytes` into tokens by greedy longest match over the trie. This is not a model's
    /// tokenization (BPE merges differ); it is a quick, deterministic way to cut text into
    /// multi-byte tokens for tests and benchmarks. `None` if some byte has no token.
    pub fn greedy_tokenize(&self, bytes: &[u8]) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let (mut node, mut best) = (0usize, None);
            let mut i = pos;
            while i < bytes.len() {
                let Some(c) = self.trie_child(node, bytes[i]) else {
                    break;
                };
                node = c;
                i += 1;
                if self.trie[c].tok_end > self.trie[c].tok_start {
                    best = Some((i, self.trie_tokens[self.trie[c].tok_start as usize]));
                }
            }
            let (next, tok) = best?;
            out.push(tok);
            pos = next;
        }
        Some(out)
    }

    /// A number identifying this vocabulary's shared mask cache.
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// The number of automaton `dfa` in this vocabulary's shared mask cache.
    pub(crate) fn dfa_id(&self, dfa: &Arc<Dfa>) -> u64 {
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&id) = g.ids.get(dfa) {
            return id;
        }
        let bytes = dfa.heap_bytes();
        if g.automata_bytes + bytes > g.automata_bound {
            g.clear();
        }
        let id = g.next_id;
        g.next_id += 1;
        g.automata_bytes += bytes;
        g.ids.insert(Arc::clone(dfa), id);
        id
    }

    /// Bounds the bytes of automata the shared cache keeps, and says how many it keeps now.
    #[cfg(test)]
    pub(crate) fn bound_shared_automata(&self, bytes: usize) -> usize {
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        g.automata_bound = bytes;
        g.ids.len()
    }

    /// The mask of automaton number `id` (which is `dfa`) in `state`, computed once (with
    /// `walk`, walked from the trie even where it reads one byte at a time).
    pub(crate) fn terminal_mask(
        &self,
        id: u64,
        dfa: &Dfa,
        state: u32,
        walk: bool,
    ) -> Arc<TerminalMask> {
        if let Some(m) = self.cached_terminal_mask(id, state) {
            return m;
        }
        // Computed outside the lock so that other threads are not held up; a race computes the
        // same mask twice, harmlessly.
        let radii = self
            .shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .radii
            .get(&id)
            .cloned();
        // Radii cost a pass over the whole automaton (most of a first mask of a large one):
        // they are computed only once a walk without them visits too many nodes, or at once
        // from a state that reads most bytes (free text, whose walk would not end soon).
        let free = dfa
            .live_bytes(state)
            .iter()
            .map(|w| w.count_ones())
            .sum::<u32>()
            >= 128;
        let unskipped = match radii {
            Some(_) => None,
            None if free => None,
            None => (!walk)
                .then(|| TerminalMask::along_one_path(self, dfa, state))
                .flatten()
                .or_else(|| TerminalMask::compute_unskipped(self, dfa, state, UNSKIPPED_NODES)),
        };
        let m = match unskipped {
            Some(m) => m,
            None => {
                let r = radii.unwrap_or_else(|| {
                    let r = Arc::new(Radii::compute(dfa));
                    let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
                    Arc::clone(g.radii.entry(id).or_insert(r))
                });
                TerminalMask::compute(self, dfa, &r, state, true)
            }
        };
        self.insert_terminal_mask(id, state, m)
    }

    /// The cached mask of automaton `id` in `state`, if computed.
    pub(crate) fn cached_terminal_mask(&self, id: u64, state: u32) -> Option<Arc<TerminalMask>> {
        // A poisoned lock only means another thread panicked mid-insert; the maps stay valid.
        self.shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .masks
            .get(&(id, state))
            .cloned()
    }

    /// Caches `m` as the mask of automaton `id` in `state` (a race keeps the first). A mask
    /// cached under two keys counts twice toward the cache's bound.
    pub(crate) fn insert_terminal_mask(
        &self,
        id: u64,
        state: u32,
        m: impl Into<Arc<TerminalMask>>,
    ) -> Arc<TerminalMask> {
        let m = m.into();
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        if g.masks.capacity() == 0 {
            g.masks.reserve(SHARED_MASKS_RESERVED);
        }
        let words = m.inside.words() + (m.exits.len() + m.ends.len()) / 2;
        if g.words + words > SHARED_WORDS {
            // Radii and automata go too: they are rebuilt with the next first mask of their
            // automaton.
            g.clear();
        }
        g.words += words;
        Arc::clone(g.masks.entry((id, state)).or_insert(m))
    }

    /// The end of the range of `trie_tokens` holding the tokens at trie node `n` or below it
    /// (they start at its `tok_start`): tokens are stored in preorder, so the subtree's range
    /// ends where the next node's begins.
    #[inline]
    pub(crate) fn subtree_tokens_end(&self, n: usize) -> usize {
        self.trie
            .get(self.trie[n].end as usize)
            .map_or(self.trie_tokens.len(), |next| next.tok_start as usize)
    }

    /// The child of trie node `n` on byte `b`, if some token goes on with it.
    pub(crate) fn trie_child(&self, n: usize, b: u8) -> Option<usize> {
        if n == 0 {
            let k = self.root_kids.binary_search_by_key(&b, |&(x, _)| x).ok()?;
            return Some(self.root_kids[k].1 as usize);
        }
        if let Some(&at) = self.wide.get(&(n as u32)) {
            return match self.wide_kids[at as usize + b as usize] {
                0 => None,
                c => Some(c as usize),
            };
        }
        children(&self.trie, n).find(|&c| self.trie[c].byte == b)
    }

    /// Writes into `path` the bytes on the way from the root to trie node `n`.
    pub(crate) fn trie_path(&self, n: usize, path: &mut Vec<u8>) {
        path.clear();
        let mut n = n;
        while n != 0 {
            path.push(self.trie[n].byte);
            n = self.parent[n] as usize;
        }
        path.reverse();
    }

    /// Sets the bits of all tokens ending at trie node `n`.
    #[inline(always)]
    pub(crate) fn mark_node(&self, n: usize, mask: &mut [u64]) {
        let node = &self.trie[n];
        for &t in &self.trie_tokens[node.tok_start as usize..node.tok_end as usize] {
            mask[(t >> 6) as usize] |= 1 << (t & 63);
        }
    }
}

/// The children of node `n` of a preorder trie: the nodes from `n + 1` to its end, each
/// after the previous one's subtree.
pub(crate) fn children(trie: &[TrieNode], n: usize) -> impl Iterator<Item = usize> + '_ {
    let end = trie[n].end as usize;
    let within = move |c: usize| (c < end).then_some(c);
    std::iter::successors(within(n + 1), move |&c| within(trie[c].end as usize))
}

/// Sets the height and byte categories of every subtree of a preorder trie, and returns the set
/// of bytes on the edges below each node (interned sets, and each node's index among them) and
/// each node's parent.
fn summarize(trie: &mut [TrieNode]) -> (Vec<[u64; 4]>, Vec<u32>, Vec<u32>) {
    let mut cat_of = [0u8; 256];
    for (b, c) in cat_of.iter_mut().enumerate() {
        for (k, f) in CATEGORIES.iter().enumerate() {
            if f(b as u8) {
                *c |= 1 << k;
            }
        }
    }
    for n in trie.iter_mut() {
        n.height = 0;
        n.cats = (1 << CATEGORIES.len()) - 1;
    }
    // Parents from a preorder pass, then children fold into parents in reverse preorder.
    let mut parent = vec![0u32; trie.len()];
    let mut stack: Vec<usize> = vec![0];
    for (i, p) in parent.iter_mut().enumerate().skip(1) {
        while stack.last().is_some_and(|&t| trie[t].end as usize <= i) {
            stack.pop();
        }
        *p = *stack.last().unwrap_or(&0) as u32;
        stack.push(i);
    }
    // Each node's own text (its path's), in preorder; then subtrees fold into parents.
    let mut at: Vec<Option<TextAt>> = vec![None; trie.len()];
    let empty = TextAt {
        chars: 0,
        read: 0,
        kinds: 0,
    };
    for i in 1..trie.len() {
        let p = parent[i] as usize;
        let from = if p == 0 { Some(empty) } else { at[p] };
        at[i] = from.and_then(|t| t.then(trie[i].byte));
        trie[i].text = match at[i] {
            Some(t) if t.chars < u16::from(NOT_TEXT) => t.chars as u8,
            _ => NOT_TEXT,
        };
    }
    trie[0].text = NOT_TEXT;
    let mut below = vec![[0u64; 4]; trie.len()];
    for i in (1..trie.len()).rev() {
        let (c, p) = (trie[i], parent[i] as usize);
        let n = &mut trie[p];
        if p != 0 {
            // `NOT_TEXT` is the largest value, so it wins.
            n.text = n.text.max(c.text);
        }
        n.height = n.height.max(c.height.saturating_add(1));
        n.cats &= c.cats & cat_of[c.byte as usize];
        let mut set = below[i];
        set[(c.byte >> 6) as usize] |= 1 << (c.byte & 63);
        for (w, x) in below[p].iter_mut().zip(set) {
            *w |= x;
        }
    }
    let mut ids: FxMap<[u64; 4], u32> = FxMap::default();
    let mut sets = Vec::new();
    let index = below
        .iter()
        .map(|set| {
            *ids.entry(*set).or_insert_with(|| {
                sets.push(*set);
                sets.len() as u32 - 1
            })
        })
        .collect();
    (sets, index, parent)
}

/// Decodes a GPT-2 byte-level token string (as stored in GGUF `tokenizer.ggml.tokens` and in
/// byte-level BPE `vocab.json`) back into its bytes. Returns `None` when a character is not in
/// GPT-2's byte-to-unicode table (special tokens such as `<|im_end|>` decode fine because their
/// characters are printable ASCII, which the table maps to themselves).
pub fn decode_gpt2_byte_level(token: &str) -> Option<Vec<u8>> {
    token
        .chars()
        .map(|c| {
            let c = c as u32;
            // Printable bytes map to themselves; the other 68 bytes map, in order, to U+0100...
            let printable = |b: u32| {
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b)
            };
            if c < 256 && printable(c) {
                return Some(c as u8);
            }
            let k = c.checked_sub(256)?;
            (0..256u32)
                .filter(|&b| !printable(b))
                .nth(k as usize)
                .map(|b| b as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trie_preorder_and_duplicates() {
        let v = TokenVocab::new(
            vec![
                b"ab".to_vec(),
                b"a".to_vec(),
                b"b".to_vec(),
                b"ab".to_vec(),
                vec![],
            ],
            &[4],
        )
        .unwrap();
        // root, a, ab, b
        assert_eq!(v.trie.len(), 4);
        assert_eq!(v.trie[1].byte, b'a');
        assert_eq!(v.trie[1].end, 3);
        assert_eq!(
            &v.trie_tokens[v.trie[2].tok_start as usize..v.trie[2].tok_end as usize],
            &[0, 3]
        );
        assert!(v.is_eos(4) && !v.is_eos(0));
    }

    /// Text is UTF-8 of characters a JSON string holds unescaped, the last one possibly cut
    /// short; a subtree is text when every path in it is, and counts the most characters.
    #[test]
    fn text_is_counted_by_characters_begun() {
        let tokens: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            "\u{e9}t\u{e9}".as_bytes().to_vec(),
            b"\xc3".to_vec(),
            b"\xa9".to_vec(),
            b"a\"".to_vec(),
            b"\xe2\x80".to_vec(),
            "\u{2028}".as_bytes().to_vec(),
            "\u{2027}".as_bytes().to_vec(),
            "\u{1F600}x".as_bytes().to_vec(),
            b"\xe0\x80\x80".to_vec(),
            b"\n".to_vec(),
        ];
        let v = TokenVocab::new(tokens.clone(), &[]).unwrap();
        let text = |t: &[u8]| {
            let mut n = 0;
            for &b in t {
                n = v.trie_child(n, b).unwrap();
            }
            // A leaf's subtree is its own node.
            let leaf = v.trie[n].end as usize == n + 1;
            (leaf, v.trie[n].text)
        };
        assert_eq!(text(b"ab"), (true, 2));
        assert_eq!(text("\u{e9}t\u{e9}".as_bytes()), (true, 3));
        // `é` cut short is a character begun; a lone continuation byte is not text.
        assert_eq!(text(b"\xa9"), (true, NOT_TEXT));
        assert_eq!(text(b"a\""), (true, NOT_TEXT));
        assert_eq!(text("\u{2027}".as_bytes()), (true, 1));
        assert_eq!(text("\u{2028}".as_bytes()), (true, NOT_TEXT));
        assert_eq!(text("\u{1F600}x".as_bytes()), (true, 2));
        // Overlong, and a control byte.
        assert_eq!(text(b"\xe0\x80\x80"), (true, NOT_TEXT));
        assert_eq!(text(b"\n"), (true, NOT_TEXT));
        // `\xe2\x80` leads to U+2027 (text) and U+2028 (not): its subtree is not text.
        assert_eq!(text(b"\xe2\x80"), (false, NOT_TEXT));
        // `a` holds `ab` and `a"`; `\xc3` holds `\xc3` (1 begun) and `été` (3).
        assert_eq!(text(b"a"), (false, NOT_TEXT));
        assert_eq!(text(b"\xc3").1, 3);
        // The tokens of text by characters: `ab`, `\xc3`, `\xe2\x80`, `\u{2027}` and `😀x`
        // within 2; `été` too within 3.
        let mut mask = v.empty_mask();
        v.text.mark_upto(2, &mut mask);
        let marked = |mask: &[u64]| {
            (0..tokens.len() as u32)
                .filter(|&t| mask[t as usize / 64] >> (t % 64) & 1 == 1)
                .collect::<Vec<_>>()
        };
        assert_eq!(marked(&mask), vec![0, 2, 5, 7, 8]);
        v.text.mark_upto(3, &mut mask);
        assert_eq!(marked(&mask), vec![0, 1, 2, 5, 7, 8]);
    }

    #[test]
    fn gpt2_decoding() {
        assert_eq!(decode_gpt2_byte_level("Ġhello").unwrap(), b" hello");
        assert_eq!(decode_gpt2_byte_level("Ċ").unwrap(), b"\n");
        assert_eq!(decode_gpt2_byte_level("Ã©").unwrap(), "é".as_bytes());
        assert!(decode_gpt2_byte_level("\u{4e00}").is_none());
    }

    #[test]
    fn plain_tokens_by_length() {
        // Plain runs of every length from 1 to 20, and the same runs with a quote in them.
        let mut tokens: Vec<Vec<u8>> = (1..=20).map(|n| vec![b'x'; n]).collect();
        tokens.extend((1..=20).map(|n| [vec![b'y'; n - 1], vec![b'"']].concat()));
        tokens.push(Vec::new());
        let v = TokenVocab::new(tokens.clone(), &[40]).unwrap();
        for limit in (0..=22).chain([usize::MAX]) {
            let mut mask = v.empty_mask();
            v.plain.mark_shorter_than(limit, &mut mask);
            for (t, bytes) in tokens.iter().enumerate() {
                let expected = t < 20 && bytes.len() < limit;
                assert_eq!(mask[t / 64] >> (t % 64) & 1 == 1, expected, "{limit} {t}");
            }
        }
    }

    #[test]
    fn trie_child_finds_every_child_of_narrow_and_wide_nodes() {
        // Under "a", children on 40 bytes (a wide node, looked up in its table); under "b", 3
        // (found by scanning).
        let mut tokens: Vec<Vec<u8>> = (0..40u8).map(|i| vec![b'a', b'0' + i]).collect();
        tokens.extend([
            b"bx".to_vec(),
            b"by".to_vec(),
            b"bz".to_vec(),
            b"a".to_vec(),
        ]);
        let v = TokenVocab::new(tokens, &[]).unwrap();
        let a = v.trie_child(0, b'a').unwrap();
        let b = v.trie_child(0, b'b').unwrap();
        assert!(v.wide.contains_key(&(a as u32)) && !v.wide.contains_key(&(b as u32)));
        for n in 0..v.trie.len() {
            for byte in 0..=255u8 {
                let scanned = children(&v.trie, n).find(|&c| v.trie[c].byte == byte);
                assert_eq!(v.trie_child(n, byte), scanned, "node {n} byte {byte}");
            }
        }
        assert_eq!(v.trie[v.trie_child(a, b'7').unwrap()].byte, b'7');
        assert_eq!(v.trie_child(a, b'x'), None);
    }

    /// An automaton numbered after the shared cache was dropped gets a number never given
    /// before: a grammar holding the number of an automaton from before the drop must not find
    /// the masks of another under it.
    #[test]
    fn numbers_outlive_a_dropped_shared_cache() {
        let v = TokenVocab::new(vec![b"a".to_vec(), b"b".to_vec(), b"ab".to_vec()], &[]).unwrap();
        let (a, b) = (
            Arc::new(Dfa::literal(b"ab")),
            Arc::new(Dfa::from_regex("b+").unwrap()),
        );
        let first = v.dfa_id(&a);
        assert_eq!(v.dfa_id(&a), first);
        let start = a.start();
        v.terminal_mask(first, &a, start, false);
        assert!(v.cached_terminal_mask(first, start).is_some());
        // Any automaton now drops those kept.
        v.bound_shared_automata(1);
        let second = v.dfa_id(&b);
        assert_ne!(second, first);
        assert!(v.cached_terminal_mask(first, start).is_none());
        v.terminal_mask(second, &b, b.start(), false);
        assert!(v.cached_terminal_mask(first, start).is_none());
        assert_eq!(v.bound_shared_automata(1), 1);
        // `a` again, after the drop: a new number.
        let third = v.dfa_id(&a);
        assert!(third != first && third != second);
    }
}
