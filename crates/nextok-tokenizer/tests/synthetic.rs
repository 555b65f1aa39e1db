//! Small vocabularies built in memory: SentencePiece worked by hand, the other pre-tokenizers,
//! bad input, and round trips over every byte.

// Plain ranges are given as a slice of ranges, often of one (`&[2..11]`).
#![allow(clippy::single_range_in_vec_init)]

use nextok_gguf::write::GgufWriter;
use nextok_gguf::{Array, GgufFile, Value};
use nextok_tokenizer::{
    load_from_gguf, BpeTokenizer, ChatTemplate, EncodeOptions, Error, HfTokenizer, PreTokenizer,
    SpmTokenizer, StreamDecoder, TokenKind, Tokenizer,
};
use proptest::prelude::*;

mod common;

fn strings(v: &[&str]) -> Value {
    Value::Array(Array::String(v.iter().map(|s| s.to_string()).collect()))
}

/// GPT-2's byte-level character for a byte (the same table as the crate's, written out again
/// from the definition so that the test does not trust the code under test).
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return b as char;
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + n).unwrap()
}

fn bl(text: &str) -> String {
    text.bytes().map(byte_char).collect()
}

/// A byte-level vocabulary: `<|endoftext|>`, `<|eot_id|>`, the 256 bytes, then each merge's
/// result, in merge order. Merges are given as plain text pairs.
fn byte_level_file(pre: &str, merges: &[(&str, &str)], extra: &[&str]) -> GgufWriter {
    let mut tokens = vec!["<|endoftext|>".to_owned(), "<|eot_id|>".to_owned()];
    tokens.extend((0..=255u8).map(|b| byte_char(b).to_string()));
    let mut rules = Vec::new();
    for (a, b) in merges {
        rules.push(format!("{} {}", bl(a), bl(b)));
        let joined = bl(&format!("{a}{b}"));
        if !tokens.contains(&joined) {
            tokens.push(joined);
        }
    }
    for e in extra {
        tokens.push(bl(e));
    }
    let mut types = vec![1i32; tokens.len()];
    types[0] = 3;
    types[1] = 3;
    GgufWriter::new()
        .metadata("general.architecture", Value::String("llama".into()))
        .metadata("llama.vocab_size", Value::U32(tokens.len() as u32))
        .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", Value::String(pre.into()))
        .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .metadata("tokenizer.ggml.merges", Value::Array(Array::String(rules)))
        .metadata("tokenizer.ggml.eos_token_id", Value::U32(0))
        .metadata("tokenizer.ggml.bos_token_id", Value::U32(0))
}

fn bpe(pre: &str, merges: &[(&str, &str)], extra: &[&str]) -> BpeTokenizer {
    let file = GgufFile::from_bytes(byte_level_file(pre, merges, extra).to_bytes()).unwrap();
    BpeTokenizer::from_gguf(&file).unwrap()
}

fn ids_of(tok: &dyn Tokenizer, pieces: &[&str]) -> Vec<u32> {
    pieces
        .iter()
        .map(|p| {
            tok.token_id(&bl(p))
                .unwrap_or_else(|| panic!("no token {p:?}"))
        })
        .collect()
}

#[test]
fn reference_splitter_sanity() {
    // The reference itself, on cases worked by hand from the expressions.
    assert_eq!(reference_split(&[GPT2_ORIGINAL], "   ab"), ["  ", " ab"]);
    assert_eq!(reference_split(&[LLAMA3_ORIGINAL], "12345"), ["123", "45"]);
}

#[test]
fn merges_apply_lowest_rank_first() {
    // Ranks: "l l" first, then "h e", then "he ll", then "hell o". "e l" (rank 4) would win if
    // merges went left to right, and must not.
    let merges = [
        ("l", "l"),
        ("h", "e"),
        ("he", "ll"),
        ("hell", "o"),
        ("e", "l"),
    ];
    let tok = bpe("gpt2", &merges, &[]);
    let ids = tok.encode("hello", EncodeOptions::plain()).unwrap();
    assert_eq!(ids, ids_of(&tok, &["hello"]));
    let ids = tok.encode("helo", EncodeOptions::plain()).unwrap();
    assert_eq!(ids, ids_of(&tok, &["he", "l", "o"]));
}

#[test]
fn llama3_takes_whole_words_that_are_tokens_and_groups_three_digits() {
    // "hello" is a token that no merge chain makes: Llama 3's `ignore_merges` takes it whole,
    // GPT-2's pre-tokenizer merges what the rules allow.
    let merges = [("h", "e"), ("1", "2"), ("12", "3")];
    let llama3 = bpe("llama-bpe", &merges, &["hello"]);
    assert_eq!(
        llama3.encode("hello", EncodeOptions::plain()).unwrap(),
        ids_of(&llama3, &["hello"])
    );
    let gpt2 = bpe("gpt2", &merges, &["hello"]);
    assert_eq!(
        gpt2.encode("hello", EncodeOptions::plain()).unwrap(),
        ids_of(&gpt2, &["he", "l", "l", "o"])
    );
    // Llama 3 words of up to three digits: "12345" is "123" + "45".
    assert_eq!(
        llama3.encode("12345", EncodeOptions::plain()).unwrap(),
        ids_of(&llama3, &["123", "4", "5"])
    );
    // Qwen 2 and SmolLM split every digit, so "123" never forms.
    for pre in ["qwen2", "smollm"] {
        let tok = bpe(pre, &merges, &[]);
        assert_eq!(
            tok.encode("123", EncodeOptions::plain()).unwrap(),
            ids_of(&tok, &["1", "2", "3"]),
            "{pre}"
        );
    }
    // GPT-2 keeps digit runs together.
    assert_eq!(
        gpt2.encode("123", EncodeOptions::plain()).unwrap(),
        ids_of(&gpt2, &["123"])
    );
}

#[test]
fn special_tokens_only_when_parsed() {
    let tok = bpe("gpt2", &[], &[]);
    let parsed = tok
        .encode("a<|eot_id|>b", EncodeOptions::parse_special())
        .unwrap();
    assert_eq!(parsed[1], 1);
    assert_eq!(parsed.len(), 3);
    let plain = tok.encode("a<|eot_id|>b", EncodeOptions::plain()).unwrap();
    assert!(!plain.contains(&1));
    assert_eq!(tok.decode(&plain, false).unwrap(), "a<|eot_id|>b");
    // Skipping special tokens leaves the control token's text out.
    assert_eq!(tok.decode(&parsed, true).unwrap(), "ab");
    assert_eq!(tok.decode(&parsed, false).unwrap(), "a<|eot_id|>b");
    // `<|eot_id|>` ends a generation (llama.cpp's list), and is the end-of-turn token.
    assert_eq!(tok.special_tokens().eot, Some(1));
    assert_eq!(tok.special_tokens().end_of_generation, vec![0, 1]);
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::Gpt2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// With all 256 bytes in the vocabulary, every UTF-8 text round-trips under every
    /// pre-tokenizer, and the scan and priority-queue merges agree.
    #[test]
    fn every_text_round_trips(text in any::<String>(), pre in 0usize..4) {
        let name = ["gpt2", "smollm", "llama-bpe", "qwen2"][pre];
        let merges = [("t", "h"), ("th", "e"), (" ", "t"), (" t", "he"), ("e", "r"), ("a", "a"), ("aa", "aa")];
        let tok = bpe(name, &merges, &[]);
        let ids = tok.encode(&text, EncodeOptions::plain()).unwrap();
        prop_assert_eq!(tok.decode(&ids, false).unwrap(), text.clone());
        let (scan, heap) = tok.merge_both_ways(text.as_bytes()).unwrap();
        prop_assert_eq!(scan, heap);
    }
}

/// A SentencePiece vocabulary for hand-worked cases: `<unk>`, `<s>`, `</s>`, the 256 byte
/// tokens (ids 3 to 258), then pieces with scores, and a user-defined `<tool>`.
fn spm_file(add_space_prefix: Option<bool>) -> GgufWriter {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32, 0.0, 0.0];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let pieces: &[(&str, f32)] = &[
        ("▁", -10.0),
        ("h", -10.0),
        ("e", -10.0),
        ("l", -10.0),
        ("o", -10.0),
        ("w", -10.0),
        ("r", -10.0),
        ("d", -10.0),
        ("ll", -1.0),
        ("he", -2.0),
        ("hell", -0.5),
        ("▁h", -3.0),
        ("▁w", -4.0),
        ("or", -6.0),
        ("ld", -7.0),
    ];
    for (p, s) in pieces {
        tokens.push((*p).to_owned());
        types.push(1);
        scores.push(*s);
    }
    tokens.push("<tool>".into());
    types.push(4);
    scores.push(0.0);
    let mut w = GgufWriter::new()
        .metadata("tokenizer.ggml.model", Value::String("llama".into()))
        .metadata("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))
        .metadata("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))
        .metadata("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    if let Some(add) = add_space_prefix {
        w = w.metadata("tokenizer.ggml.add_space_prefix", Value::Bool(add));
    }
    w
}

fn spm(add_space_prefix: Option<bool>) -> SpmTokenizer {
    let file = GgufFile::from_bytes(spm_file(add_space_prefix).to_bytes()).unwrap();
    SpmTokenizer::from_gguf(&file).unwrap()
}

fn spm_ids(tok: &SpmTokenizer, pieces: &[&str]) -> Vec<u32> {
    pieces.iter().map(|p| tok.token_id(p).unwrap()).collect()
}

#[test]
fn sentencepiece_merges_by_score_worked_by_hand() {
    // "hello world" becomes "▁hello▁world". By score: "ll" (-1), then "he" (-2), then "hell"
    // (-0.5, formed by the first two), then "▁h" is stale, "▁w" (-4), "or" (-6), "ld" (-7):
    // ▁ | hell | o | ▁w | or | ld.
    let tok = spm(None);
    let ids = tok.encode("hello world", EncodeOptions::plain()).unwrap();
    assert_eq!(ids, spm_ids(&tok, &["▁", "hell", "o", "▁w", "or", "ld"]));
    assert_eq!(tok.decode(&ids, false).unwrap(), "hello world");
    assert!(tok.strips_leading_space());
    assert!(tok.add_bos_by_default());
    // BOS, EOS and unknown default to 1, 2, 0; EOS ends a generation.
    assert_eq!(tok.special_tokens().bos, Some(1));
    assert_eq!(tok.special_tokens().end_of_generation, vec![2]);
    let with_bos = tok
        .encode("hello world", EncodeOptions::plain().with_bos(true))
        .unwrap();
    assert_eq!(with_bos[0], 1);
    assert_eq!(tok.decode(&with_bos, true).unwrap(), "hello world");
}

#[test]
fn sentencepiece_byte_fallback() {
    // "hi€": "▁h" merges; "i" and "€" are not pieces and are spelled with byte tokens
    // (id = 3 + byte).
    let tok = spm(None);
    let ids = tok.encode("hi€", EncodeOptions::plain()).unwrap();
    let mut expected = spm_ids(&tok, &["▁h"]);
    expected.extend([3 + 0x69, 3 + 0xE2, 3 + 0x82, 3 + 0xAC]);
    assert_eq!(ids, expected);
    assert_eq!(tok.token_kind(3 + 0xE2).unwrap(), TokenKind::Byte);
    assert_eq!(tok.token_bytes(3 + 0xE2).unwrap(), &[0xE2]);
    assert_eq!(tok.decode(&ids, false).unwrap(), "hi€");
    // Streaming holds the euro sign's first two bytes back.
    let mut stream = StreamDecoder::new(&tok, false);
    let parts: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(parts, ["h", "i", "", "", "€"]);
}

#[test]
fn sentencepiece_space_after_special_tokens_and_user_defined_tokens() {
    let tok = spm(None);
    // After a parsed special token the space prefix comes again: "<s>hello" is <s>, then
    // "▁hello" = ▁ | hell | o.
    let ids = tok
        .encode("<s>hello", EncodeOptions::parse_special())
        .unwrap();
    let mut expected = vec![1];
    expected.extend(spm_ids(&tok, &["▁", "hell", "o"]));
    assert_eq!(ids, expected);
    // User-defined tokens are recognised even when special tokens are not parsed.
    let ids = tok.encode("he<tool>", EncodeOptions::plain()).unwrap();
    // "▁he": "he" (-2) scores higher than "▁h" (-3), so it merges first.
    let mut expected = spm_ids(&tok, &["▁", "he"]);
    expected.push(tok.token_id("<tool>").unwrap());
    assert_eq!(ids, expected);
    // Without the space prefix, "hello" has no leading "▁" and decoding strips nothing.
    let bare = spm(Some(false));
    let ids = bare.encode("hello", EncodeOptions::plain()).unwrap();
    assert_eq!(ids, spm_ids(&bare, &["hell", "o"]));
    assert!(!bare.strips_leading_space());
    let spaced = bare.encode(" hello", EncodeOptions::plain()).unwrap();
    assert_eq!(bare.decode(&spaced, false).unwrap(), " hello");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// SentencePiece: streaming equals whole decoding over random ids (the leading space
    /// included), and text round-trips thanks to byte fallback.
    #[test]
    fn sentencepiece_streaming_and_round_trip(ids in prop::collection::vec(0u32..275, 0..30), text in any::<String>(), skip in any::<bool>()) {
        let tok = spm(None);
        let mut stream = StreamDecoder::new(&tok, skip);
        let mut out = String::new();
        for &id in &ids {
            out += &stream.push(id).unwrap();
        }
        out += &stream.finish();
        prop_assert_eq!(out, tok.decode(&ids, skip).unwrap());
        let encoded = tok.encode(&text, EncodeOptions::plain()).unwrap();
        prop_assert_eq!(tok.decode(&encoded, false).unwrap(), text);
    }
}

fn load(w: GgufWriter) -> Result<Box<dyn Tokenizer>, Error> {
    load_from_gguf(&GgufFile::from_bytes(w.to_bytes()).unwrap())
}

fn base(tokens: &[&str]) -> GgufWriter {
    GgufWriter::new()
        .metadata("general.architecture", Value::String("llama".into()))
        .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
        .metadata("tokenizer.ggml.tokens", strings(tokens))
}

#[test]
fn malformed_metadata_gives_typed_errors() {
    // Missing merges.
    let err = load(base(&["a", "b"])).unwrap_err();
    assert!(
        matches!(&err, Error::Gguf(nextok_gguf::Error::MissingKey { key }) if key == "tokenizer.ggml.merges"),
        "{err:?}"
    );
    // Tokens of the wrong type.
    let err = load(
        GgufWriter::new()
            .metadata("tokenizer.ggml.model", Value::String("gpt2".into()))
            .metadata(
                "tokenizer.ggml.tokens",
                Value::Array(Array::I32(vec![1, 2])),
            )
            .metadata("tokenizer.ggml.merges", strings(&[])),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Gguf(nextok_gguf::Error::WrongType { key, .. }) if key == "tokenizer.ggml.tokens"),
        "{err:?}"
    );
    // Token types as floats.
    let err = load(
        base(&["a", "b"])
            .metadata("tokenizer.ggml.merges", strings(&[]))
            .metadata(
                "tokenizer.ggml.token_type",
                Value::Array(Array::F32(vec![1.0, 1.0])),
            ),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Gguf(nextok_gguf::Error::WrongType { key, .. }) if key == "tokenizer.ggml.token_type"),
        "{err:?}"
    );
    // A vocabulary whose size disagrees with the model's.
    let err = load(
        base(&["a", "b"])
            .metadata("llama.vocab_size", Value::U32(3))
            .metadata("tokenizer.ggml.merges", strings(&[])),
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::VocabSizeMismatch {
            key: "llama.vocab_size".into(),
            tokens: 2,
            declared: 3
        }
    );
    // Token types of the wrong length, and an undefined type code.
    let err = load(
        base(&["a", "b"])
            .metadata("tokenizer.ggml.merges", strings(&[]))
            .metadata(
                "tokenizer.ggml.token_type",
                Value::Array(Array::I32(vec![1])),
            ),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ArrayLength {
                found: 1,
                expected: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let err = load(
        base(&["a", "b"])
            .metadata("tokenizer.ggml.merges", strings(&[]))
            .metadata(
                "tokenizer.ggml.token_type",
                Value::Array(Array::I32(vec![1, 9])),
            ),
    )
    .unwrap_err();
    assert_eq!(err, Error::BadTokenType { id: 1, code: 9 });
    // A merge rule without a space, a special id outside the vocabulary, a duplicate token.
    let err =
        load(base(&["a", "b"]).metadata("tokenizer.ggml.merges", strings(&["ab"]))).unwrap_err();
    assert_eq!(
        err,
        Error::BadMerge {
            index: 0,
            rule: "ab".into()
        }
    );
    let err = load(
        base(&["a", "b"])
            .metadata("tokenizer.ggml.merges", strings(&[]))
            .metadata("tokenizer.ggml.eos_token_id", Value::U32(7)),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::SpecialTokenOutOfRange {
                id: 7,
                vocab_size: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let err = load(base(&["a", "a"]).metadata("tokenizer.ggml.merges", strings(&[]))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::DuplicateToken {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let err = load(base(&[]).metadata("tokenizer.ggml.merges", strings(&[]))).unwrap_err();
    assert_eq!(err, Error::EmptyVocabulary);
    // Unknown tokenizer kinds and pre-tokenizers.
    let err =
        load(GgufWriter::new().metadata("tokenizer.ggml.model", Value::String("bert".into())))
            .unwrap_err();
    assert_eq!(
        err,
        Error::UnsupportedModel {
            model: "bert".into()
        }
    );
    let err = load(
        base(&["a"])
            .metadata("tokenizer.ggml.pre", Value::String("klingon".into()))
            .metadata("tokenizer.ggml.merges", strings(&[])),
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::UnsupportedPreTokenizer {
            pre: "klingon".into()
        }
    );
    // Asking for BOS where there is none.
    let tok = load(base(&["a"]).metadata("tokenizer.ggml.merges", strings(&[]))).unwrap();
    assert_eq!(
        tok.encode("a", EncodeOptions::plain().with_bos(true)),
        Err(Error::MissingSpecialToken { which: "BOS" })
    );
}

#[test]
fn bad_tokenizer_json_gives_typed_errors() {
    let mut bytes =
        br#"{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#
            .to_vec();
    bytes.insert(20, 0xFF);
    assert_eq!(
        HfTokenizer::from_bytes(&bytes, None).unwrap_err(),
        Error::InvalidUtf8 { offset: 20 }
    );
    assert!(matches!(
        HfTokenizer::from_bytes(b"{not json", None),
        Err(Error::TokenizerJson { .. })
    ));
    assert!(matches!(
        HfTokenizer::from_bytes(br#"{"version": "1.0"}"#, None),
        Err(Error::TokenizerJson { .. })
    ));
    assert!(matches!(
        HfTokenizer::from_file("/nonexistent/tokenizer.json"),
        Err(Error::Io { .. })
    ));
}

#[test]
fn sentencepiece_style_tokenizer_json() {
    // A Llama-2-style tokenizer.json: Metaspace-like decoding (Replace ▁, ByteFallback, Strip).
    let json = serde_json::json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
        ],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        ]},
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}
        ]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xE2>": 3, "<0x82>": 4, "<0xAC>": 5,
                "▁": 6, "h": 7, "i": 8, "▁h": 9, "▁hi": 10},
            "merges": ["▁ h", "▁h i"]}
    })
    .to_string();
    let config = br#"{"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true}"#;
    let tok = HfTokenizer::from_bytes(json.as_bytes(), Some(config)).unwrap();
    let ids = tok
        .encode("hi €", EncodeOptions::plain().with_bos(true))
        .unwrap();
    assert_eq!(ids, vec![1, 10, 6, 3, 4, 5]);
    assert!(tok.strips_leading_space());
    assert!(tok.add_bos_by_default());
    assert_eq!(tok.decode(&ids, true).unwrap(), "hi €");
    assert_eq!(tok.token_bytes(10).unwrap(), b" hi");
    assert_eq!(tok.token_kind(4).unwrap(), TokenKind::Byte);
    assert_eq!(tok.special_tokens().end_of_generation, vec![2]);
    let mut stream = StreamDecoder::new(&tok, true);
    let text: String = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(text, "hi €");
}

#[test]
fn builtin_templates() {
    assert!(matches!(
        ChatTemplate::builtin("vicuna"),
        Err(Error::UnknownTemplate { .. })
    ));
    use nextok_tokenizer::Message;
    let chat = [
        Message::system("Be brief."),
        Message::user("Hi"),
        Message::assistant("Hello"),
        Message::user("Bye"),
    ];
    // Llama 2's format: the system message inside the first [INST], BOS before each user turn,
    // EOS after each answer (Meta's template, as the Llama 2 Chat model card gives it).
    let llama2 = ChatTemplate::builtin("llama2").unwrap();
    assert_eq!(
        llama2.render(&chat, false).unwrap(),
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]"
    );
    let mistral = ChatTemplate::builtin("mistral").unwrap();
    assert_eq!(
        mistral.render(&chat[1..], false).unwrap(),
        "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]"
    );
    let chatml = ChatTemplate::builtin("chatml").unwrap();
    assert_eq!(
        chatml.render(&chat[..2], true).unwrap(),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn template_environment_is_transformers() {
    use nextok_tokenizer::Message;
    // trim_blocks and lstrip_blocks: block tags take their line's indentation and newline away.
    let t = ChatTemplate::new(
        "t",
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content.strip() | upper }}]\n    {% endif %}\n{% endfor %}",
        "",
        "",
    )
    .unwrap();
    assert_eq!(
        t.render(&[Message::user("  hi  ")], false).unwrap(),
        "[HI]\n"
    );
    // tojson does not escape HTML and formats like Python's json.dumps.
    let t = ChatTemplate::new("t", "{{ messages[0] | tojson }}", "", "").unwrap();
    assert_eq!(
        t.render(&[Message::user("<b>&")], false).unwrap(),
        r#"{"role": "user", "content": "<b>&"}"#
    );
    // Loop controls.
    let t = ChatTemplate::new(
        "t",
        "{% for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    assert_eq!(
        t.render(&[Message::user("a"), Message::user("b")], false)
            .unwrap(),
        "a"
    );
    // Python string methods.
    let t = ChatTemplate::new(
        "t",
        "{{ messages[0].content.startswith('x') }} {{ messages[0].content.split(',') | length }}",
        "",
        "",
    )
    .unwrap();
    // Python prints booleans and None capitalised.
    assert_eq!(
        t.render(&[Message::user("x,y,z")], false).unwrap(),
        "True 3"
    );
    let t = ChatTemplate::new("t", "{{ none }} {{ false }}", "", "").unwrap();
    assert_eq!(t.render(&[], false).unwrap(), "None False");
}

#[test]
fn template_from_tokenizer_config() {
    let config = br#"{"bos_token": {"content": "<s>"}, "eos_token": "</s>",
        "chat_template": [{"name": "tool_use", "template": "x"},
                          {"name": "default", "template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"}]}"#;
    let t = ChatTemplate::from_tokenizer_config(config).unwrap();
    assert_eq!(
        t.render(&[nextok_tokenizer::Message::user("hi")], false)
            .unwrap(),
        "<s>hi</s>"
    );
    assert!(matches!(
        ChatTemplate::from_tokenizer_config(b"{}"),
        Err(Error::TokenizerJson { .. })
    ));
    assert_eq!(
        ChatTemplate::from_tokenizer_config(b"\xff").unwrap_err(),
        Error::InvalidUtf8 { offset: 0 }
    );
}

/// The pre-tokenizers' expressions as llama.cpp and the models' tokenizer.json write them, with
/// the look-ahead `\s+(?!\S)` that `regex-automata` lacks: the `tokenizers` crate runs them
/// with fancy-regex, an independent implementation to check our emulation of the look-ahead.
const GPT2_ORIGINAL: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
const LLAMA3_ORIGINAL: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_ORIGINAL: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

fn reference_split(patterns: &[&str], text: &str) -> Vec<String> {
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{
        OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer as _,
        SplitDelimiterBehavior,
    };
    let mut pts = PreTokenizedString::from(text);
    for p in patterns {
        let split = Split::new(
            SplitPattern::Regex((*p).to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .unwrap();
        split.pre_tokenize(&mut pts).unwrap();
    }
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(s, _, _)| s.to_owned())
        .collect()
}

fn text_for_splitting() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        any::<String>(),
        "[ \t\r\na-zA-Z0-9'.,]{0,16}",
        Just("   \n\n  \t x".to_owned()),
        Just("I'M we'Ve 123456 ٣٤".to_owned()),
        Just("日本語 テキスト\u{3000}\u{3000}x".to_owned()),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Our pre-tokenizers cut text exactly where the original look-ahead expressions do.
    #[test]
    fn pre_tokenizers_match_the_original_expressions(text in text_for_splitting()) {
        static TOKS: std::sync::OnceLock<Vec<BpeTokenizer>> = std::sync::OnceLock::new();
        let toks = TOKS.get_or_init(|| {
            ["gpt2", "smollm", "llama-bpe", "qwen2"].iter().map(|n| bpe(n, &[], &[])).collect()
        });
        for (tok, (name, patterns)) in toks.iter().zip([
            ("gpt2", vec![GPT2_ORIGINAL]),
            ("smollm", vec![r"\p{N}", GPT2_ORIGINAL]),
            ("llama-bpe", vec![LLAMA3_ORIGINAL]),
            ("qwen2", vec![QWEN2_ORIGINAL]),
        ]) {
            let ours: Vec<String> = tok
                .pre_tokenize(&text)
                .into_iter()
                .map(str::to_owned)
                .collect();
            prop_assert_eq!(ours, reference_split(&patterns, &text), "pre-tokenizer {}", name);
        }
    }
}

/// Hyper-parameters llama.cpp reads even when it loads only the vocabulary.
fn with_llama_hparams(w: GgufWriter) -> GgufWriter {
    w.metadata("llama.context_length", Value::U32(256))
        .metadata("llama.embedding_length", Value::U32(64))
        .metadata("llama.block_count", Value::U32(1))
        .metadata("llama.feed_forward_length", Value::U32(128))
        .metadata("llama.attention.head_count", Value::U32(4))
        .metadata("llama.attention.head_count_kv", Value::U32(4))
        .metadata("llama.rope.dimension_count", Value::U32(16))
        .metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5))
}

/// The merges of the synthetic byte-level vocabularies that llama.cpp tokenized for
/// `tests/data/llama_cpp_synthetic.json`.
const REFERENCE_MERGES: &[(&str, &str)] = &[
    ("t", "h"),
    ("th", "e"),
    (" ", "t"),
    (" t", "he"),
    ("i", "n"),
    (" ", "a"),
    ("e", "r"),
    ("1", "2"),
    ("12", "3"),
    ("'", "s"),
    ("\n", "\n"),
    (" ", " "),
    ("o", "n"),
    ("a", "n"),
    ("an", "d"),
    (" ", "and"),
];

/// The vocabularies of `tests/data/llama_cpp_synthetic.json`, by name.
fn reference_files() -> Vec<(&'static str, GgufWriter)> {
    let mut out = Vec::new();
    // llama.cpp knows GPT-2's pre-tokenizer as `gpt-2` (we also accept `gpt2`).
    for pre in ["gpt-2", "smollm", "llama-bpe", "qwen2"] {
        // `byte_level_file` already names the architecture and the vocabulary size.
        let w = with_llama_hparams(byte_level_file(pre, REFERENCE_MERGES, &["hello"]));
        out.push((pre, w));
    }
    let spm = with_llama_hparams(
        spm_file(None)
            .metadata("general.architecture", Value::String("llama".into()))
            .metadata("llama.vocab_size", Value::U32(275)),
    );
    out.push(("spm", spm));
    out
}

/// Writes the reference vocabularies as GGUF files into `$NEXTOK_WRITE_GGUF_DIR`, for
/// regenerating `tests/data/llama_cpp_synthetic.json` with llama.cpp (see that file's `source`).
#[test]
#[ignore = "writes files; run by hand to regenerate reference data"]
fn write_reference_models() {
    let dir = std::env::var("NEXTOK_WRITE_GGUF_DIR").expect("set NEXTOK_WRITE_GGUF_DIR");
    for (name, w) in reference_files() {
        std::fs::write(format!("{dir}/{name}.gguf"), w.to_bytes()).unwrap();
    }
}

/// llama.cpp's own tokenizations of 20 texts (each with special tokens parsed and not) for the
/// four byte-level pre-tokenizers and the SentencePiece vocabulary above; see the file's
/// `source` for how they were made.
#[test]
fn synthetic_vocabularies_match_llama_cpp() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/llama_cpp_synthetic.json"
    );
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut checked = 0;
    for (name, w) in reference_files() {
        let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
        let tok = load_from_gguf(&file).unwrap();
        let cases = data["vocabularies"][name].as_array().unwrap();
        assert_eq!(cases.len(), 40, "{name}");
        for case in cases {
            let text = case["text"].as_str().unwrap();
            let parse_special = case["parse_special"].as_bool().unwrap();
            let expected: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let options = EncodeOptions {
                add_bos: false,
                parse_special,
            };
            let ids = tok.encode(text, options).unwrap();
            assert_eq!(
                ids, expected,
                "{name}: {text:?} (parse_special {parse_special})"
            );
            // Byte-level pieces concatenate to llama.cpp's detokenization (SentencePiece's is
            // the pieces joined without dropping the leading space, which `decode` drops).
            if name != "spm" {
                let hex: String = tok
                    .decode_bytes(&ids, false)
                    .unwrap()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(
                    hex,
                    case["detokenized_hex"].as_str().unwrap(),
                    "{name}: {text:?}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 200);
}

/// A differential check against llama.cpp on random texts (control characters, combining
/// marks, emoji, CJK, Arabic, non-ASCII digits, special-token text): `tests/data/
/// llama_cpp_random.json` (600 cases per vocabulary, from `tests/data/llama_cpp_random.py`),
/// or the full output of that script at `$NEXTOK_LLAMA_CPP_RANDOM`. `smollm2` is the real
/// model, which must be present (run `cargo xtask fetch-model`).
#[test]
fn random_texts_match_llama_cpp() {
    let data: serde_json::Value = match std::env::var("NEXTOK_LLAMA_CPP_RANDOM") {
        Ok(path) => serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap(),
        Err(_) => {
            let path = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/data/llama_cpp_random.json"
            );
            let file: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            file["vocabularies"].clone()
        }
    };
    let mut tokenizers: Vec<(String, Box<dyn Tokenizer>)> = reference_files()
        .into_iter()
        .map(|(n, w)| {
            let file = GgufFile::from_bytes(w.to_bytes()).unwrap();
            (n.to_owned(), load_from_gguf(&file).unwrap())
        })
        .collect();
    tokenizers.push(("smollm2".into(), load_from_gguf(common::model()).unwrap()));
    let mut failures = 0;
    let mut checked = 0;
    for (name, tok) in &tokenizers {
        let Some(cases) = data.get(name.as_str()).and_then(|v| v.as_array()) else {
            continue;
        };
        for case in cases {
            let text = case["text"].as_str().unwrap();
            let options = EncodeOptions {
                add_bos: false,
                parse_special: case["parse_special"].as_bool().unwrap(),
            };
            let expected: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let ids = tok.encode(text, options).unwrap();
            checked += 1;
            if ids != expected {
                failures += 1;
                if failures < 20 {
                    eprintln!("{name}: {text:?} {options:?}\n  ours      {ids:?}\n  llama.cpp {expected:?}");
                }
            }
        }
    }
    eprintln!("{checked} cases, {failures} differ");
    assert!(checked >= 3000, "only {checked} cases");
    assert_eq!(failures, 0);
}

// Plain ranges: special-token text inside them stays text (the chat content path).

/// The control tokens' byte ranges in the text that `ids` decode to.
fn control_spans(tok: &dyn Tokenizer, ids: &[u32]) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    let mut out = Vec::new();
    for &id in ids {
        let len = tok.token_bytes(id).unwrap().len();
        if tok.token_kind(id).unwrap() == TokenKind::Control {
            out.push(at..at + len);
        }
        at += len;
    }
    out
}

#[test]
fn plain_ranges_keep_control_text_as_text() {
    let tok = bpe("gpt2", &[("<", "|"), ("|", ">")], &[]);
    let text = "a<|eot_id|>b<|eot_id|>";
    let ids = tok
        .encode_with_plain_ranges(text, &[2..11], EncodeOptions::parse_special())
        .unwrap();
    // The first `<|eot_id|>` overlaps the range and is text, merged exactly as plain encoding
    // merges it, "<|" across the range's edge included; the second is the token.
    let mut expected = tok.encode("a<|eot_id|>b", EncodeOptions::plain()).unwrap();
    assert_eq!(expected[1], tok.token_id(&bl("<|")).unwrap());
    expected.push(1);
    assert_eq!(ids, expected);
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
    // A range that only touches the token's first bytes is enough to keep it text.
    let ids = tok
        .encode_with_plain_ranges("a<|eot_id|>", &[0..2], EncodeOptions::parse_special())
        .unwrap();
    assert!(!ids.contains(&1), "{ids:?}");
    assert_eq!(
        ids,
        tok.encode("a<|eot_id|>", EncodeOptions::plain()).unwrap()
    );
    // Without parse_special nothing changes: the text is plain everywhere.
    assert_eq!(
        tok.encode_with_plain_ranges(text, &[2..11], EncodeOptions::plain())
            .unwrap(),
        tok.encode(text, EncodeOptions::plain()).unwrap()
    );
    // No ranges: exactly `encode`.
    assert_eq!(
        tok.encode_with_plain_ranges(text, &[], EncodeOptions::parse_special())
            .unwrap(),
        tok.encode(text, EncodeOptions::parse_special()).unwrap()
    );
}

#[test]
fn plain_ranges_in_sentencepiece() {
    let tok = spm(None);
    // `</s>` (id 2) is a control token: text inside the range, the token outside it.
    let text = "hello</s>hello</s>";
    let ids = tok
        .encode_with_plain_ranges(text, &[5..9], EncodeOptions::parse_special())
        .unwrap();
    assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 1);
    assert_eq!(ids.last(), Some(&2));
    assert_eq!(
        ids[..ids.len() - 1],
        tok.encode("hello</s>hello", EncodeOptions::plain())
            .unwrap()
    );
}

#[test]
fn bad_plain_ranges_are_errors() {
    let tok = bpe("gpt2", &[], &[]);
    let bad = |text: &str, ranges: &[std::ops::Range<usize>]| {
        tok.encode_with_plain_ranges(text, ranges, EncodeOptions::parse_special())
    };
    // Out of order, overlapping, past the end, reversed, inside a character.
    assert_eq!(
        bad("abcdef", &[3..4, 1..2]),
        Err(Error::PlainRange {
            start: 1,
            end: 2,
            len: 6
        })
    );
    assert!(matches!(
        bad("abcdef", &[1..4, 3..5]),
        Err(Error::PlainRange { start: 3, .. })
    ));
    assert!(matches!(
        bad("abc", &[1..4]),
        Err(Error::PlainRange { end: 4, .. })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = [2..1];
    assert!(matches!(
        bad("abc", &reversed),
        Err(Error::PlainRange { start: 2, .. })
    ));
    assert!(matches!(
        bad("é", &[0..1]),
        Err(Error::PlainRange { end: 1, .. })
    ));
    // Touching and empty ranges are fine.
    assert!(bad("abcdef", &[1..3, 3..3, 3..6]).is_ok());
}

proptest! {
    /// Over texts made of special-token text, pieces of it and ordinary text, and ranges at
    /// random piece boundaries: the ids decode to the text, every control token lies wholly
    /// outside the ranges, and every occurrence of control text wholly outside them is a token.
    #[test]
    fn control_tokens_only_outside_plain_ranges(
        pieces in proptest::collection::vec(
            prop::sample::select(vec![
                "a", "b", " ", "é", "<|eot_id|>", "<|endoftext|>", "<|eot", "_id|>", "<|", "|>",
            ]),
            0..24,
        ),
        cuts in proptest::collection::vec(0usize..25, 0..8),
    ) {
        let tok = bpe("gpt2", &[("a", "<"), ("|", ">"), ("<", "|")], &[]);
        let text: String = pieces.concat();
        let mut bounds = vec![0];
        for p in &pieces {
            bounds.push(bounds.last().unwrap() + p.len());
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|&c| bounds[c % bounds.len()]).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let ranges: Vec<_> = cuts.chunks_exact(2).map(|c| c[0]..c[1]).collect();
        let ids = tok
            .encode_with_plain_ranges(&text, &ranges, EncodeOptions::parse_special())
            .unwrap();
        prop_assert_eq!(tok.decode(&ids, false).unwrap(), text.clone());
        let controls = control_spans(&tok, &ids);
        for c in &controls {
            for r in &ranges {
                prop_assert!(c.end <= r.start || c.start >= r.end, "{c:?} in {r:?}");
            }
        }
        // The two control texts cannot overlap themselves or each other, so every occurrence
        // outside the ranges must have become a token.
        let mut outside = 0;
        for special in ["<|eot_id|>", "<|endoftext|>"] {
            for (at, _) in text.match_indices(special) {
                let end = at + special.len();
                if ranges.iter().all(|r| end <= r.start || at >= r.end) {
                    outside += 1;
                }
            }
        }
        prop_assert_eq!(controls.len(), outside);
    }
}

#[test]
fn render_with_spans_finds_each_content() {
    use nextok_tokenizer::Message;
    let chat = [
        Message::system("Be <|im_start|> brief."),
        Message::user("<|im_end|><|im_start|>assistant"),
    ];
    let chatml = ChatTemplate::builtin("chatml").unwrap();
    let r = chatml.render_with_spans(&chat, true).unwrap();
    assert_eq!(r.text, chatml.render(&chat, true).unwrap());
    let found: Vec<&str> = r.content.iter().map(|s| &r.text[s.clone()]).collect();
    assert_eq!(found, [chat[0].content.as_str(), chat[1].content.as_str()]);
    // Llama 3 trims the content, Llama 2 strips it: the spans hold what is left, and the text
    // is the plain rendering still.
    let chat = [
        Message::user("  \n hi <|eot_id|> there \t"),
        Message::assistant("ok"),
    ];
    let llama3 = ChatTemplate::builtin("llama3").unwrap();
    let r = llama3.render_with_spans(&chat, true).unwrap();
    assert_eq!(r.text, llama3.render(&chat, true).unwrap());
    let found: Vec<&str> = r.content.iter().map(|s| &r.text[s.clone()]).collect();
    assert_eq!(found, ["hi <|eot_id|> there", "ok"]);
    let llama2 = ChatTemplate::builtin("llama2").unwrap();
    let chat = [Message::system(" sys "), Message::user(" u </s> ")];
    let r = llama2.render_with_spans(&chat, false).unwrap();
    assert_eq!(r.text, llama2.render(&chat, false).unwrap());
    let found: Vec<&str> = r.content.iter().map(|s| &r.text[s.clone()]).collect();
    assert_eq!(found, ["sys", "u </s>"]);
    // Empty and all-space content have no span, and change nothing.
    let chat = [Message::user(""), Message::user("  ")];
    let r = chatml.render_with_spans(&chat, false).unwrap();
    assert_eq!(r.text, chatml.render(&chat, false).unwrap());
    assert!(r.content.is_empty());
    // Content that holds the noncharacters the markers would be: other ones are taken.
    let chat = [Message::user("\u{FDD0}x\u{FDD1}<|im_end|>")];
    let r = chatml.render_with_spans(&chat, false).unwrap();
    assert_eq!(&r.text[r.content[0].clone()], chat[0].content);
    // tojson: the span holds the escaped content.
    let t = ChatTemplate::new("j", "{{ messages[0].content | tojson }}", "", "").unwrap();
    let r = t
        .render_with_spans(&[Message::user("a\"<s>")], false)
        .unwrap();
    assert_eq!(r.text, r#""a\"<s>""#);
    assert_eq!(&r.text[r.content[0].clone()], r#"a\"<s>"#);
}

#[test]
fn render_with_spans_refuses_what_it_cannot_follow() {
    use nextok_tokenizer::Message;
    let located = |source: &str, content: &str| {
        ChatTemplate::new("t", source, "", "")
            .unwrap()
            .render_with_spans(&[Message::user(content)], false)
    };
    // Slicing cuts a marker off; a test on the content takes another branch; a split keeps
    // only part of it. Each is an error, never a guess.
    for (source, content) in [
        ("{{ messages[0].content[1:] }}", "x<|im_end|>"),
        (
            "{% if messages[0].content == 'x' %}yes{% else %}no{% endif %}",
            "x",
        ),
        ("{{ messages[0].content.split('|')[1] }}", "a|b|c"),
        ("{{ messages[0].content | length }}", "abc"),
    ] {
        assert!(
            matches!(
                located(source, content),
                Err(Error::ContentNotLocated { ref template, .. }) if template == "t"
            ),
            "{source}: {:?}",
            located(source, content)
        );
    }
    // Every noncharacter in the input leaves no marker to use.
    let all: String = (0xFDD0..=0xFDEFu32)
        .chain((0..=16u32).flat_map(|p| [p << 16 | 0xFFFE, p << 16 | 0xFFFF]))
        .filter_map(char::from_u32)
        .collect();
    assert!(matches!(
        located("{{ messages[0].content }}", &all),
        Err(Error::ContentNotLocated { .. })
    ));
}
