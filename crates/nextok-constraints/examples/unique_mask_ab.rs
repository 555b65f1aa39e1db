//! Mask cost of `uniqueItems` over strings, A/B in one run: each schema of a corpus that uses
//! `uniqueItems` is compiled as written (A: with the run-time check) and with every
//! `uniqueItems` removed (B: the same grammar without it), and the valid instances both accept
//! are walked token by token through both constraints, masks timed alternately, several rounds.
//! Prints the mask-time percentiles of each and their ratios; a loaded machine makes the
//! absolute numbers noise, the ratios less so.
//!
//! ```text
//! cargo run --release -p nextok-constraints --example unique_mask_ab -- \
//!     conformance/real-world/schemastore [rounds]
//! ```
//! The model's tokenizer is read from `$NEXTOK_MODEL` or the default model's place in the cache
//! (`$XDG_CACHE_HOME` or `~/.cache`, then `nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use nextok_constraints::{
    compile_json_schema, Constraint, Grammar, GrammarConstraint, JsonOptions, TokenVocab,
};
use nextok_tokenizer::EncodeOptions;
use serde_json::Value;

fn strip_unique(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("uniqueItems");
            o.values_mut().for_each(strip_unique);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_unique),
        _ => {}
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .unwrap_or("conformance/real-world/schemastore".into()),
    );
    let rounds: usize = args.next().map_or(Ok(5), |r| r.parse())?;
    let model = common::model_path();
    let tok = nextok_tokenizer::load_from_gguf_path(&model)?;
    let vocab = Arc::new(TokenVocab::from_tokenizer(tok.as_ref())?);
    let opts = JsonOptions::default();
    // (grammar with the check, grammar without it, instances' token ids).
    let mut cases = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        if !text.contains("uniqueItems") {
            continue;
        }
        let doc: Value = serde_json::from_str(&text)?;
        let schema = doc.get("schema").cloned().unwrap_or(Value::Null);
        let mut plain = schema.clone();
        strip_unique(&mut plain);
        let (Ok(a), Ok(b)) = (
            compile_json_schema(&schema, &opts),
            compile_json_schema(&plain, &opts),
        ) else {
            continue;
        };
        for t in doc
            .get("tests")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if t.get("valid") != Some(&Value::Bool(true)) {
                continue;
            }
            let data = serde_json::to_string(&t["data"])?;
            if !a.recognizes(data.as_bytes()) || !b.recognizes(data.as_bytes()) {
                continue;
            }
            let ids = tok.encode(&data, EncodeOptions::plain())?;
            cases.push((Arc::clone(&a), Arc::clone(&b), ids));
        }
    }
    measure("corpus", &cases, &vocab, rounds)?;
    // And one long array of distinct words, where every mask is inside the unique array.
    let words: Vec<String> = (0..80)
        .map(|i| {
            format!(
                "{}-{}",
                ["alpha", "beta", "gamma", "delta", "main", "app"][i % 6],
                i / 6
            )
        })
        .collect();
    let schema =
        serde_json::json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true});
    let mut plain = schema.clone();
    strip_unique(&mut plain);
    let ids = tok.encode(&serde_json::to_string(&words)?, EncodeOptions::plain())?;
    let synthetic = vec![(
        compile_json_schema(&schema, &opts)?,
        compile_json_schema(&plain, &opts)?,
        ids,
    )];
    measure("80 distinct strings", &synthetic, &vocab, rounds)
}

type Case = (Arc<Grammar>, Arc<Grammar>, Vec<u32>);

fn measure(
    name: &str,
    cases: &[Case],
    vocab: &Arc<TokenVocab>,
    rounds: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let mut mask = vocab.empty_mask();
    // Round 0 is a warm-up, not timed: the two grammars share their terminals' cached masks in
    // the vocabulary, so whichever ran first would pay every first computation. Then the one
    // that goes first alternates.
    for round in 0..=rounds {
        for (a, b, ids) in cases {
            let mut ca = GrammarConstraint::new(Arc::clone(a), vocab);
            let mut cb = GrammarConstraint::new(Arc::clone(b), vocab);
            for (i, &id) in ids.iter().enumerate() {
                let mut pair = [(&mut ca, &mut ta), (&mut cb, &mut tb)];
                if (round + i) % 2 == 1 {
                    pair.swap(0, 1);
                }
                for (c, times) in pair {
                    let t0 = Instant::now();
                    c.fill_mask(&mut mask)?;
                    if round > 0 {
                        times.push(t0.elapsed().as_secs_f64() * 1e6);
                    }
                    c.advance(id)?;
                }
            }
        }
    }
    println!(
        "{name}: {} instances, {} masks each way ({rounds} rounds, interleaved)",
        cases.len(),
        ta.len()
    );
    for p in [0.5, 0.99, 0.999] {
        let (x, y) = (percentile(&mut ta, p), percentile(&mut tb, p));
        println!(
            "p{:<5} with uniqueItems {x:9.2} us, without {y:9.2} us, ratio {:.3}",
            p * 100.0,
            x / y
        );
    }
    Ok(())
}
