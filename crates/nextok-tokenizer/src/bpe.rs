//! Byte-level BPE, the GGUF `gpt2` tokenizer kind.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::ops::Range;
use std::sync::Mutex;

use nextok_gguf::GgufFile;

use crate::bytelevel;
use crate::pretokenize::{PreTokenizer, Splitter};
use crate::vocab::{vocab_methods, Fragment, GgufVocab, Pieces, Vocab};
use crate::{EncodeOptions, Error, SpecialTokens, TokenId, TokenKind, Tokenizer};

/// Words longer than this are merged with a priority queue; shorter ones by scanning, which is
/// faster for the short words that make up nearly all text.
const SCAN_LIMIT: usize = 48;

/// The word cache is cleared when it holds this many words, which bounds its memory.
const CACHE_LIMIT: usize = 1 << 17;

/// The merge table and the word cache hash with rustc-hash's Fx hasher: fast, and good enough
/// for keys that an attacker does not choose adversarially against a fixed table (the cache is
/// bounded and cleared, so a bad case costs speed, never correctness).
type FxBuild = rustc_hash::FxBuildHasher;

/// A merge: its rank (lower merges first) and the token it makes.
#[derive(Debug, Clone, Copy)]
struct Merge {
    rank: u32,
    result: TokenId,
}

/// Byte-level BPE over a GGUF vocabulary and merge list, with one of llama.cpp's pre-tokenizers.
///
/// Encoding splits the text at special tokens, cuts each stretch into words with the
/// pre-tokenizer, spells each word's bytes with the 256 byte tokens, and applies merges lowest
/// rank first (leftmost first among equal ranks). Words seen before come from a cache.
#[derive(Debug)]
pub struct BpeTokenizer {
    vocab: Vocab,
    /// Normal tokens by their bytes, for `ignore_merges`.
    by_bytes: HashMap<Box<[u8]>, TokenId, FxBuild>,
    pre: PreTokenizer,
    splitter: Splitter,
    merges: HashMap<u64, Merge, FxBuild>,
    byte_ids: [Option<TokenId>; 256],
    cache: Mutex<WordCache>,
}

/// Words already encoded, by their bytes.
type WordCache = HashMap<Box<[u8]>, Box<[TokenId]>, FxBuild>;

#[inline]
fn pair(left: TokenId, right: TokenId) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl BpeTokenizer {
    /// Loads the tokenizer from a GGUF file with `tokenizer.ggml.model = gpt2`. A file without
    /// `tokenizer.ggml.pre` uses GPT-2's pre-tokenizer, as llama.cpp does.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, Error> {
        let meta = file.metadata();
        let pre = match meta.get("tokenizer.ggml.pre") {
            None => PreTokenizer::Gpt2,
            Some(_) => PreTokenizer::from_name(meta.get_str("tokenizer.ggml.pre")?)?,
        };
        let vocab = GgufVocab::read(file)?;
        let merges = meta.get_str_array("tokenizer.ggml.merges")?;
        Self::new(vocab, merges, pre)
    }

    fn new(vocab: GgufVocab, merge_rules: &[String], pre: PreTokenizer) -> Result<Self, Error> {
        let GgufVocab {
            texts,
            kinds,
            index,
            special,
            add_bos,
            ..
        } = vocab;
        let mut pieces = Pieces::default();
        let mut by_bytes = HashMap::default();
        for (id, (text, kind)) in texts.iter().zip(&kinds).enumerate() {
            match kind {
                TokenKind::Normal => {
                    let bytes = bytelevel::decode(text);
                    pieces.push(&bytes);
                    by_bytes
                        .entry(bytes.into_boxed_slice())
                        .or_insert(id as TokenId);
                }
                // llama.cpp prints control, unknown and user-defined tokens as their text, and
                // nothing for unused and byte tokens (which byte-level vocabularies do not use).
                TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined => {
                    pieces.push(text.as_bytes())
                }
                TokenKind::Unused | TokenKind::Byte => pieces.push(&[]),
            }
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            let mut buf = [0u8; 4];
            let text = bytelevel::byte_to_char(b as u8).encode_utf8(&mut buf);
            *slot = index.get(&*text).copied();
        }
        let mut merges = HashMap::with_capacity_and_hasher(merge_rules.len(), FxBuild::default());
        for (rank, rule) in merge_rules.iter().enumerate() {
            // llama.cpp splits at the first space after the first character.
            let first = rule.chars().next().map_or(0, char::len_utf8);
            let split = rule[first..]
                .find(' ')
                .map(|at| at + first)
                .ok_or_else(|| Error::BadMerge {
                    index: rank,
                    rule: rule.clone(),
                })?;
            let (left, right) = (&rule[..split], &rule[split + 1..]);
            // A merge whose parts or result are not tokens can never apply to token ids.
            let (Some(&l), Some(&r)) = (index.get(left), index.get(right)) else {
                continue;
            };
            let mut joined = String::with_capacity(left.len() + right.len());
            joined.push_str(left);
            joined.push_str(right);
            let Some(&result) = index.get(&joined) else {
                continue;
            };
            merges.entry(pair(l, r)).or_insert(Merge {
                rank: rank as u32,
                result,
            });
        }
        Ok(BpeTokenizer {
            vocab: Vocab::new(
                texts,
                kinds,
                pieces,
                index,
                special,
                add_bos.unwrap_or(false),
                false,
            ),
            by_bytes,
            pre,
            splitter: Splitter::new(pre),
            merges,
            byte_ids,
            cache: Mutex::new(HashMap::default()),
        })
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The words the pre-tokenizer cuts plain text into (before byte-level BPE runs on each).
    pub fn pre_tokenize<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut words = Vec::new();
        self.splitter.split(text, |w| words.push(w));
        words
    }

    /// A token's text as the vocabulary stores it (`Ġthe` for " the").
    pub fn token_text(&self, id: TokenId) -> Result<&str, Error> {
        self.vocab.token_text(id)
    }

    /// Encodes one word, appending its ids to `out`.
    ///
    /// A byte that no token spells (SmolLM2 has none for 0x04 or 0xFF, for example) is dropped,
    /// as llama.cpp drops it; since no merge involves it, the bytes on either side are merged as
    /// separate words.
    fn encode_word(&self, word: &[u8], out: &mut Vec<TokenId>) {
        if word.len() == 1 {
            out.extend(self.byte_ids[word[0] as usize]);
            return;
        }
        if self.pre.ignores_merges() {
            if let Some(&id) = self.by_bytes.get(word) {
                out.push(id);
                return;
            }
        }
        for part in word.split(|&b| self.byte_ids[b as usize].is_none()) {
            if part.is_empty() {
                continue;
            }
            let start = out.len();
            out.extend(part.iter().filter_map(|&b| self.byte_ids[b as usize]));
            if part.len() <= SCAN_LIMIT {
                self.merge_scan(out, start);
            } else {
                self.merge_heap(out, start);
            }
        }
    }

    /// Whether every byte of `text` is spelled by some token, so that encoding keeps all of it.
    pub fn can_spell(&self, text: &str) -> bool {
        text.bytes().all(|b| self.byte_ids[b as usize].is_some())
    }

    /// Merges `syms[start..]` by repeatedly finding the lowest-ranked adjacent pair.
    fn merge_scan(&self, syms: &mut Vec<TokenId>, start: usize) {
        loop {
            let word = &syms[start..];
            let mut best: Option<(u32, usize, TokenId)> = None;
            for (i, w) in word.windows(2).enumerate() {
                if let Some(m) = self.merges.get(&pair(w[0], w[1])) {
                    if best.is_none_or(|(rank, _, _)| m.rank < rank) {
                        best = Some((m.rank, i, m.result));
                    }
                }
            }
            let Some((_, i, result)) = best else { return };
            syms[start + i] = result;
            syms.remove(start + i + 1);
        }
    }

    /// The same merges with a priority queue over a linked list of symbols, for long words.
    fn merge_heap(&self, syms: &mut Vec<TokenId>, start: usize) {
        let word: Vec<TokenId> = syms.drain(start..).collect();
        let n = word.len();
        let mut ids = word;
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        // Entries are (rank, left position, right position, left id, right id); an entry whose
        // symbols changed since it was pushed is stale and skipped.
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, ids: &[TokenId], l: usize, r: usize| {
            if let Some(m) = self.merges.get(&pair(ids[l], ids[r])) {
                heap.push(Reverse((m.rank, l, r, ids[l], ids[r])));
            }
        };
        for i in 0..n - 1 {
            push(&mut heap, &ids, i, i + 1);
        }
        while let Some(Reverse((_, l, r, lid, rid))) = heap.pop() {
            if !alive[l] || !alive[r] || next[l] != r || ids[l] != lid || ids[r] != rid {
                continue;
            }
            let Some(m) = self.merges.get(&pair(lid, rid)) else {
                continue;
            };
            ids[l] = m.result;
            alive[r] = false;
            next[l] = next[r];
            if next[r] < n {
                prev[next[r]] = l;
            }
            if prev[l] < n {
                push(&mut heap, &ids, prev[l], l);
            }
            if next[l] < n {
                push(&mut heap, &ids, l, next[l]);
            }
        }
        let mut i = 0;
        while i < n {
            syms.push(ids[i]);
            i = next[i];
        }
    }

    fn encode_text(
        &self,
        text: &str,
        out: &mut Vec<TokenId>,
        cache: &mut Option<std::sync::MutexGuard<'_, WordCache>>,
    ) {
        self.splitter.split(text, |word| {
            let bytes = word.as_bytes();
            match cache.as_mut() {
                Some(cache) => {
                    if let Some(ids) = cache.get(bytes) {
                        out.extend_from_slice(ids);
                        return;
                    }
                    let start = out.len();
                    self.encode_word(bytes, out);
                    if cache.len() >= CACHE_LIMIT {
                        cache.clear();
                    }
                    cache.insert(bytes.into(), out[start..].into());
                }
                None => self.encode_word(bytes, out),
            }
        });
    }

    /// Encodes without the word cache (for tests that compare the two paths).
    #[doc(hidden)]
    pub fn encode_uncached(&self, text: &str) -> Result<Vec<TokenId>, Error> {
        let mut out = Vec::new();
        self.encode_text(text, &mut out, &mut None);
        Ok(out)
    }

    /// Merges a word's byte tokens with both algorithms and returns (scan, heap), for tests.
    #[doc(hidden)]
    pub fn merge_both_ways(&self, word: &[u8]) -> Result<(Vec<TokenId>, Vec<TokenId>), Error> {
        let mut a: Vec<TokenId> = word
            .iter()
            .filter_map(|&b| self.byte_ids[b as usize])
            .collect();
        let mut b = a.clone();
        if !a.is_empty() {
            self.merge_scan(&mut a, 0);
            self.merge_heap(&mut b, 0);
        }
        Ok((a, b))
    }
}

impl Tokenizer for BpeTokenizer {
    fn encode_with_plain_ranges(
        &self,
        text: &str,
        plain: &[Range<usize>],
        options: EncodeOptions,
    ) -> Result<Vec<TokenId>, Error> {
        let mut out = self.vocab.start(options, text.len() / 3 + 2)?;
        // The shared word cache is used when no other thread holds it; a busy cache is not
        // waited for, since encoding without it gives the same ids.
        let mut cache = self.cache.try_lock().ok();
        for fragment in self.vocab.split(text, options.parse_special, plain)? {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(t) => self.encode_text(t, &mut out, &mut cache),
            }
        }
        Ok(out)
    }

    vocab_methods!();
}
