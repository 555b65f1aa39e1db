//! Vocabularies for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use nextok_constraints::{decode_gpt2_byte_level, Constraint, TokenVocab};
use nextok_tokenizer::{BpeTokenizer, EncodeOptions, TokenKind, Tokenizer};
use rand_core::RngCore;
use serde_json::Value;

/// The default model's path, by the rule of `nextok::default_model_path` and `cargo xtask
/// fetch-model`: `$NEXTOK_MODEL` if set, else `nextok/models/` under `$XDG_CACHE_HOME`, else
/// under `~/.cache` (an empty variable counts as unset). This crate cannot depend on `nextok`,
/// which depends on it, so the three lines of the rule are here; the examples use this module.
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("NEXTOK_MODEL").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(xdg) => PathBuf::from(xdg),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    cache.join("nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// SmolLM2's tokenizer (nextok-tokenizer's byte-level BPE from the GGUF file) and its
/// 49,152-token vocabulary as exact bytes. End tokens are 0, 2 and 4 (conformance README);
/// other control tokens get no bytes, so no constraint ever allows them.
pub fn smollm2() -> (Arc<TokenVocab>, BpeTokenizer) {
    let path = model_path();
    let file = nextok_gguf::GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "cannot open the model at {} ({e}): run `cargo xtask fetch-model` first",
            path.display()
        )
    });
    let tok = BpeTokenizer::from_gguf(&file).expect("SmolLM2's tokenizer");
    let bytes: Vec<Vec<u8>> = (0..tok.vocab_size() as u32)
        .map(|id| match tok.token_kind(id).expect("id in range") {
            TokenKind::Normal | TokenKind::UserDefined | TokenKind::Byte => {
                tok.token_bytes(id).expect("id in range").to_vec()
            }
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(bytes.len(), 49152);
    let eos = tok.special_tokens().end_of_generation.clone();
    assert_eq!(eos, vec![0, 2, 4], "end tokens as llama.cpp sees them");
    (Arc::new(TokenVocab::new(bytes, &eos).expect("vocab")), tok)
}

/// SmolLM2's vocabulary and the model's own tokenization of instance text, as the conformance
/// runs need them (`ConformanceRun::new`): each compact instance is UTF-8, as serde_json writes it.
pub fn smollm2_instances() -> (Arc<TokenVocab>, impl Fn(&[u8]) -> Vec<u32>) {
    let (vocab, tok) = smollm2();
    let tokenize = move |b: &[u8]| {
        let text = std::str::from_utf8(b).expect("serde_json writes UTF-8");
        tok.encode(text, EncodeOptions::plain())
            .expect("tokenizable")
    };
    (vocab, tokenize)
}

/// SmolLM2's vocabulary read straight from the GGUF metadata (GPT-2 byte-level strings), as a
/// cross-check of the tokenizer's bytes.
pub fn smollm2_vocab_from_gguf() -> Arc<TokenVocab> {
    let path = model_path();
    let file = nextok_gguf::GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "cannot open the model at {} ({e}): run `cargo xtask fetch-model` first",
            path.display()
        )
    });
    let md = file.metadata();
    let tokens = md
        .get_str_array("tokenizer.ggml.tokens")
        .expect("tokenizer.ggml.tokens");
    let types = md.get_i32_array("tokenizer.ggml.token_type").ok();
    let bytes: Vec<Vec<u8>> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // Type 3 is a control token: its text is not output text.
            if types.is_some_and(|ty| ty.get(i) == Some(&3)) {
                return Vec::new();
            }
            decode_gpt2_byte_level(t).unwrap_or_default()
        })
        .collect();
    Arc::new(TokenVocab::new(bytes, &[0, 2, 4]).expect("vocab"))
}

/// The tokens of a byte-level vocabulary: `<eos>` (token 0), the 256 single bytes (token
/// `b + 1` is byte `b`), then `pieces`.
pub fn byte_tokens(pieces: &[&str]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = vec![b"<eos>".to_vec()];
    v.extend((0..=255u8).map(|b| vec![b]));
    v.extend(pieces.iter().map(|p| p.as_bytes().to_vec()));
    v
}

/// [`byte_tokens`] as a vocabulary whose end token is 0.
pub fn byte_vocab(pieces: &[&str]) -> Arc<TokenVocab> {
    Arc::new(TokenVocab::new(byte_tokens(pieces), &[0]).expect("vocab"))
}

/// A synthetic byte-level vocabulary: token 0 is the end token, then all 256 single bytes, then
/// multi-byte pieces that cross JSON boundaries and split UTF-8 characters.
pub fn synthetic_vocab() -> Arc<TokenVocab> {
    let mut v = byte_tokens(&[
        "\"}",
        "\",",
        "\":",
        "\",\"",
        "\":\"",
        "\"}]",
        "},{",
        "\":{\"",
        "\":[",
        "],",
        "]}",
        "{\"",
        "[{",
        "\":\"\"",
        "true",
        "false",
        "null",
        "name",
        "age",
        "\"name\"",
        "\"age\":",
        " ",
        "  ",
        "\n",
        "\n  ",
        ",\n  \"",
        "\": ",
        "12",
        "0.",
        "e+",
        "-1",
        "abc",
        "FRAUD",
        "OK",
        "FR",
        "AUD",
        "é",
        "\u{e9}t\u{e9}",
        "\u{1F600}",
        "\\n",
        "\\\"",
        "\\u00",
        "aa",
        "aaaa",
        "ab",
        "ba",
    ]);
    // Split UTF-8: the first two bytes of a 4-byte emoji, and the rest.
    let emoji = "\u{1F600}".as_bytes().to_vec();
    v.push(emoji[..2].to_vec());
    v.push(emoji[2..].to_vec());
    Arc::new(TokenVocab::new(v, &[0]).expect("vocab"))
}

/// The token whose bytes are `s`.
pub fn token_id(vocab: &TokenVocab, s: &str) -> u32 {
    (0..vocab.len() as u32)
        .find(|&t| vocab.token_bytes(t) == Some(s.as_bytes()))
        .unwrap_or_else(|| panic!("no token for {s:?}"))
}

/// Whether token `t`'s bit is set in `mask`.
pub fn bit(mask: &[u64], t: u32) -> bool {
    mask[t as usize / 64] >> (t % 64) & 1 == 1
}

/// Feeds `text` byte by byte (token `b + 1` is byte `b`, as in these tests' vocabularies), each
/// mask checked against `advance` first ([`check_mask`]): whether some byte was refused or the
/// output is incomplete after the last.
pub fn walk_refuses(c: &mut dyn Constraint, text: &str) -> bool {
    for (i, b) in text.bytes().enumerate() {
        check_mask(c, &text.as_bytes()[..i]);
        if c.advance(b as u32 + 1).is_err() {
            return true;
        }
    }
    !c.is_complete()
}

/// [`walk_refuses`] for a text every byte of which must be taken (a refused byte panics); the
/// mask after the last, checked too.
pub fn walk_accepting(c: &mut dyn Constraint, text: &str) -> Vec<u64> {
    for (i, b) in text.bytes().enumerate() {
        check_mask(c, &text.as_bytes()[..i]);
        c.advance(b as u32 + 1)
            .unwrap_or_else(|e| panic!("{text} at {i}: {e}"));
    }
    check_mask(c, text.as_bytes())
}

/// Checks that every token's mask bit is whether `advance` takes it, and that an incomplete
/// output has some allowed token.
pub fn check_mask(c: &mut dyn Constraint, out: &[u8]) -> Vec<u64> {
    let vocab = Arc::clone(c.vocab());
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).expect("mask");
    for t in 0..vocab.len() as u32 {
        let ok = c.advance(t).is_ok();
        assert_eq!(
            ok,
            bit(&mask, t),
            "token {:?} after {:?}",
            String::from_utf8_lossy(vocab.token_bytes(t).unwrap_or_default()),
            String::from_utf8_lossy(out)
        );
        if ok {
            c.rollback(1).expect("rollback");
        }
    }
    assert!(
        mask.iter().any(|&w| w != 0),
        "dead end after {:?}",
        String::from_utf8_lossy(out)
    );
    mask
}

/// Tokens a random walk prefers: those whose first byte is in `first` and, with `long`, every
/// token of more than one byte.
pub fn preferred_tokens(vocab: &TokenVocab, first: &[u8], long: bool) -> Vec<u32> {
    (0..vocab.len() as u32)
        .filter(|&t| match vocab.token_bytes(t).unwrap_or_default() {
            [] => false,
            [b] => first.contains(b),
            _ => long,
        })
        .collect()
}

/// What [`random_walk`] wrote: the output's bytes (the end token's none), whether it took an
/// end token (0 in the synthetic vocabularies; 0, 2 or 4 in SmolLM2's), and the mask before
/// each token it took.
pub struct Walk {
    pub out: Vec<u8>,
    pub ended: bool,
    pub masks: Vec<Vec<u64>>,
}

/// A random walk of at most `steps` tokens, every mask checked against `advance`
/// ([`check_mask`]): the next token is one of `preferred` the mask allows, except one time in
/// `odds` (or when it allows none of them) any allowed token, so that keys and items repeat.
pub fn random_walk(
    c: &mut dyn Constraint,
    rng: &mut impl RngCore,
    preferred: &[u32],
    odds: u32,
    steps: usize,
) -> Walk {
    let vocab = Arc::clone(c.vocab());
    let mut walk = Walk {
        out: Vec::new(),
        ended: false,
        masks: Vec::new(),
    };
    for _ in 0..steps {
        let mask = check_mask(c, &walk.out);
        let allowed: Vec<u32> = (0..vocab.len() as u32).filter(|&t| bit(&mask, t)).collect();
        let liked: Vec<u32> = preferred
            .iter()
            .copied()
            .filter(|&t| bit(&mask, t))
            .collect();
        walk.masks.push(mask);
        let pool = if !liked.is_empty() && !rng.next_u32().is_multiple_of(odds) {
            &liked
        } else {
            &allowed
        };
        let t = pool[rng.next_u32() as usize % pool.len()];
        c.advance(t).expect("an allowed token");
        if vocab.is_eos(t) {
            walk.ended = true;
            break;
        }
        walk.out
            .extend_from_slice(vocab.token_bytes(t).expect("a token of the vocabulary"));
    }
    walk
}

/// Rolling back the last `n` tokens of `walk` (all of them if it took fewer) restores the mask
/// from before them.
pub fn assert_rollback_restores(c: &mut dyn Constraint, walk: &Walk, n: usize) {
    let back = walk.masks.len().min(n);
    c.rollback(back).expect("rollback");
    let mut mask = c.vocab().empty_mask();
    c.fill_mask(&mut mask).expect("mask");
    assert_eq!(mask, walk.masks[walk.masks.len() - back]);
}

/// JSON Schema's equality of instances: numbers by value, arrays item by item, objects as
/// member sets.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Panics, naming the output `out` they were read from, when two of `items` are [`same`].
pub fn assert_distinct(items: &[Value], out: &[u8]) {
    for (x, a) in items.iter().enumerate() {
        for b in &items[x + 1..] {
            assert!(!same(a, b), "{}", String::from_utf8_lossy(out));
        }
    }
}
