//! Mask time per decode step for a JSON string of a long bounded length (issue #16: `nextok
//! bench`'s constrained schema is `{"type": "string", "minLength": 400}`, whose every step is a
//! fresh state of a chain that counts characters). A fixed text of 600 characters is tokenized
//! by the model and walked token by token, each mask timed: the first walk on a fresh vocabulary
//! (every state new to the mask cache), then a second one on the same vocabulary (cache warm).
//! Prints, per walk, the median, p99, mean and largest mask time and the walk's total.
//!
//! ```text
//! cargo run --release -p nextok-constraints --example long_string_masks -- [minLength] [rounds]
//! ```
//! The model's tokenizer is read from `$NEXTOK_MODEL` or the default model's place in the cache
//! (`$XDG_CACHE_HOME` or `~/.cache`, then `nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use nextok_constraints::{
    compile_json_schema, Constraint, GrammarConstraint, JsonOptions, Percentiles, TokenVocab,
};
use nextok_tokenizer::EncodeOptions;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let min: usize = args.next().map_or(Ok(400), |r| r.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |r| r.parse())?;
    let tok = nextok_tokenizer::load_from_gguf_path(common::model_path())?;
    let words = "the quick brown fox jumps over a lazy dog while seven wizards quietly \
                 judge boxing matches, and 12 zebras (or so) graze; ";
    let body: String = words.chars().cycle().take(min + 200).collect();
    let text = serde_json::to_string(&body)?;
    let ids = tok.encode(&text, EncodeOptions::plain())?;
    let schema = serde_json::json!({"type": "string", "minLength": min});
    let g = compile_json_schema(&schema, &JsonOptions::default())?;
    println!(
        "{schema}: {} characters in {} tokens, {rounds} rounds",
        body.chars().count(),
        ids.len()
    );
    for round in 0..rounds {
        // A fresh vocabulary per round: its mask cache starts empty.
        let vocab = Arc::new(TokenVocab::from_tokenizer(tok.as_ref())?);
        let mut mask = vocab.empty_mask();
        for walk in ["cold", "warm"] {
            let mut c = GrammarConstraint::new(Arc::clone(&g), &vocab);
            let mut us = Vec::with_capacity(ids.len());
            for &id in &ids {
                let t0 = Instant::now();
                c.fill_mask(&mut mask)?;
                us.push(t0.elapsed().as_secs_f64() * 1e6);
                c.advance(id)?;
            }
            let total: f64 = us.iter().sum();
            let mean = total / us.len() as f64;
            let at = Percentiles::of(&mut us);
            println!(
                "round {round} {walk}: mask µs median {:.1} p99 {:.1} mean {:.1} max {:.1}; \
                 walk total {:.2} ms",
                at.median,
                at.p99,
                mean,
                at.max,
                total / 1e3
            );
        }
    }
    Ok(())
}
