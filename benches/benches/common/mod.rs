//! What the constrained-decoding benches share: SmolLM2's tokenizer and its vocabulary as exact
//! bytes.

use std::path::PathBuf;

use nextok_constraints::decode_gpt2_byte_level;
use nextok_tokenizer::BpeTokenizer;

/// The default model: `$NEXTOK_MODEL`, else SmolLM2 in the user's cache.
pub fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("NEXTOK_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// SmolLM2's tokenizer, its vocabulary as exact bytes (control tokens other than the end tokens
/// get none) and each token's name as stored in the GGUF file.
pub fn smollm2() -> (Vec<Vec<u8>>, BpeTokenizer, Vec<String>) {
    let path = model_path();
    let file = nextok_gguf::GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "cannot open {} ({e}): run `cargo xtask fetch-model`",
            path.display()
        )
    });
    let tok = BpeTokenizer::from_gguf(&file).expect("tokenizer");
    let md = file.metadata();
    let tokens = md.get_str_array("tokenizer.ggml.tokens").expect("tokens");
    let types = md.get_i32_array("tokenizer.ggml.token_type").ok();
    let bytes = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if types.is_some_and(|ty| ty.get(i) == Some(&3)) {
                Vec::new()
            } else {
                decode_gpt2_byte_level(t).unwrap_or_default()
            }
        })
        .collect();
    let names = tokens.iter().map(|t| t.to_string()).collect();
    (bytes, tok, names)
}

/// The nested JSON Schema both constrained-decoding benches measure: objects, arrays, enums,
/// patterns, formats and bounds.
pub const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^[a-z]{3}-[0-9]{4}$"},
    "name": {"type": "string", "maxLength": 60},
    "status": {"enum": ["active", "inactive", "pending"]},
    "score": {"type": "number", "minimum": 0, "maximum": 100},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "owner": {
      "type": "object",
      "properties": {"email": {"type": "string", "format": "email"}, "age": {"type": "integer", "minimum": 0}},
      "required": ["email"],
      "additionalProperties": false
    },
    "items": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}[0-9]+$"}, "qty": {"type": "integer", "minimum": 1}},
        "required": ["sku", "qty"],
        "additionalProperties": false
      }
    }
  },
  "required": ["id", "name", "status", "items"],
  "additionalProperties": false
}"#;

/// A document valid under [`SCHEMA`].
pub const DOCUMENT: &str = r#"{"id":"abc-1234","name":"Widget order for the spring catalogue, second batch","status":"pending","score":87.5,"tags":["red","blue","sale"],"owner":{"email":"jane.doe@example.com","age":42},"items":[{"sku":"AB123","qty":2},{"sku":"CD9","qty":10}]}"#;
