//! Constrained decoding with three nextok crates and no model.
//!
//! Loads a tokenizer from a GGUF file, builds the constraint vocabulary from it, compiles a JSON
//! Schema, and "decodes" greedily from a fixed vector of seeded pseudo-random logits (a stand-in
//! for a model): at each step the constraint's mask sets forbidden logits to -inf, the sampling
//! chain picks a token, and the constraint advances, until an end token. The text must then
//! parse as JSON and match the schema.
//!
//! Usage: `constrain-check MODEL.gguf` (or set `NEXTOK_MODEL`).

use std::sync::Arc;

use nextok_constraints::{apply_mask, from_json_schema, Constraint, JsonOptions, TokenVocab};
use nextok_sampling::{Context, Sampler, SamplingParams};
use nextok_tokenizer::load_from_gguf_path;
use serde_json::{json, Value};

/// At most this many tokens: the schema's bounds make every output much shorter.
const MAX_TOKENS: usize = 200;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("constrain-check: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("NEXTOK_MODEL").ok())
        .ok_or("usage: constrain-check MODEL.gguf (or set NEXTOK_MODEL)")?;
    let tokenizer = load_from_gguf_path(&path)?;
    // Control tokens (`<|im_start|>`) get no bytes, so the constraint can never allow them.
    let vocab = Arc::new(TokenVocab::from_tokenizer(tokenizer.as_ref())?);

    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "admin": {"type": "boolean"}
        },
        "required": ["name", "age", "admin"],
        "additionalProperties": false
    });
    let mut constraint = from_json_schema(&schema, &vocab, &JsonOptions::default())?;

    let logits = pseudo_random_logits(vocab.len(), 42);
    let mut sampler = Sampler::new(&SamplingParams::greedy())?;
    let mut mask = vocab.empty_mask();
    let mut ids = Vec::new();
    loop {
        if ids.len() == MAX_TOKENS {
            return Err(format!("no end token after {MAX_TOKENS} tokens").into());
        }
        constraint.fill_mask(&mut mask)?;
        let mut masked = logits.clone();
        apply_mask(&mut masked, &mask);
        let token = sampler.sample(&masked, &Context::new(&ids))?.token;
        constraint.advance(token)?;
        if vocab.is_eos(token) {
            break;
        }
        ids.push(token);
    }

    let text = String::from_utf8(tokenizer.decode_bytes(&ids, true)?)?;
    println!("{text}");
    let value: Value = serde_json::from_str(&text)?;
    let fits = value["name"]
        .as_str()
        .is_some_and(|s| (1..=12).contains(&s.chars().count()))
        && value["age"].as_u64().is_some_and(|a| a <= 120)
        && value["admin"].is_boolean()
        && value.as_object().is_some_and(|o| o.len() == 3);
    if !fits {
        return Err(format!("{text} does not match the schema").into());
    }
    println!(
        "ok: {} tokens, valid JSON that matches the schema",
        ids.len()
    );
    Ok(())
}

/// One logit per token in [0, 1), from SplitMix64 seeded with `seed`: the same on every run.
fn pseudo_random_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}
