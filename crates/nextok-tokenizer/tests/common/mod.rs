//! Shared set-up for the tests: the real model, the conformance data, and a `tokenizer.json`
//! built from the model's own vocabulary and merges.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use nextok_gguf::GgufFile;
use nextok_tokenizer::{BpeTokenizer, HfTokenizer};

/// The default model's path, by the same rule as `cargo xtask fetch-model`.
pub fn model_path() -> PathBuf {
    if let Some(path) = std::env::var_os("NEXTOK_MODEL") {
        return PathBuf::from(path);
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"),
    };
    cache
        .join("nextok")
        .join("models")
        .join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The real SmolLM2 model file. Fails (never skips) when it is absent.
pub fn model() -> &'static GgufFile {
    static FILE: OnceLock<GgufFile> = OnceLock::new();
    FILE.get_or_init(|| {
        let path = model_path();
        GgufFile::open(&path).unwrap_or_else(|e| {
            panic!(
                "cannot open the default model at {}: {e}; run `cargo xtask fetch-model` first",
                path.display()
            )
        })
    })
}

/// The real model's tokenizer.
pub fn smollm() -> &'static BpeTokenizer {
    static TOK: OnceLock<BpeTokenizer> = OnceLock::new();
    TOK.get_or_init(|| BpeTokenizer::from_gguf(model()).expect("SmolLM2's tokenizer loads"))
}

/// `conformance/<name>` parsed as JSON.
pub fn conformance(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../conformance")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `tokenizer.json` for the model's vocabulary and merges with SmolLM2's published
/// pre-tokenizer (single digits, then GPT-2's byte-level split), control tokens as special
/// added tokens, and a byte-level decoder.
pub fn smollm_tokenizer_json() -> String {
    let meta = model().metadata();
    let tokens = meta.get_str_array("tokenizer.ggml.tokens").unwrap();
    let types = meta.get_i32_array("tokenizer.ggml.token_type").unwrap();
    let merges = meta.get_str_array("tokenizer.ggml.merges").unwrap();
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), serde_json::Value::from(id)))
        .collect();
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (_, &ty))| ty == 3)
        .map(|(id, (t, _))| {
            serde_json::json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
        ]},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
            "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges}
    })
    .to_string()
}

/// SmolLM2's `tokenizer_config.json` fields that name special tokens.
pub const SMOLLM_CONFIG: &str = r#"{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>", "add_bos_token": false}"#;

/// The `tokenizer.json` path of the model's vocabulary.
pub fn smollm_hf() -> &'static HfTokenizer {
    static TOK: OnceLock<HfTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        HfTokenizer::from_bytes(
            smollm_tokenizer_json().as_bytes(),
            Some(SMOLLM_CONFIG.as_bytes()),
        )
        .expect("the generated tokenizer.json loads")
    })
}

/// Hex of bytes, as `pieces_hex` writes them.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
