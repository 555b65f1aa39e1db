//! Benchmarks of constrained decoding: mask time per token on SmolLM2's 49,152-token vocabulary
//! and on a synthetic 128k vocabulary, for a JSON Schema with nested objects, arrays, enums and
//! patterns, and compile time to the first mask.
//!
//! Run with `cargo bench -p nextok-benches --bench constraints` (needs the default model for its
//! vocabulary: `cargo xtask fetch-model`). Besides criterion's timings it prints per-mask
//! percentiles, split into positions inside JSON strings and between them (keys, punctuation,
//! numbers), for a cold first pass (caches empty) and warm passes. The first compile of the
//! 49k report is the process's first (no automaton built yet); the repeated "compile to first
//! mask" figures and criterion's reuse the automata that the crate keeps per regular expression
//! and the terminal masks that the vocabulary keeps, as a server compiling schemas does.

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

mod common;

use common::{DOCUMENT, SCHEMA};

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use nextok_constraints::{
    compile_json_schema, Constraint, GrammarConstraint, JsonOptions, Percentiles, TokenVocab,
};
use nextok_tokenizer::{EncodeOptions, Tokenizer};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// SmolLM2's vocabulary grown to 128,256 tokens with concatenations of two random tokens, so the
/// trie has the shape of a larger real vocabulary.
fn synthetic_128k(base: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(128);
    let mut v = base.to_vec();
    let nonempty: Vec<&Vec<u8>> = base.iter().filter(|t| !t.is_empty()).collect();
    while v.len() < 128_256 {
        let a = nonempty[rng.next_u32() as usize % nonempty.len()];
        let b = nonempty[rng.next_u32() as usize % nonempty.len()];
        v.push([a.as_slice(), b.as_slice()].concat());
    }
    v
}

/// Whether each token of the document starts inside a JSON string.
fn in_string_flags(vocab: &TokenVocab, tokens: &[u32]) -> Vec<bool> {
    let (mut inside, mut escaped) = (false, false);
    let mut flags = Vec::new();
    for &t in tokens {
        flags.push(inside);
        for &b in vocab.token_bytes(t).unwrap_or_default() {
            if escaped {
                escaped = false;
            } else if inside && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                inside = !inside;
            }
        }
    }
    flags
}

/// Walks the document, timing every mask; returns (in-string, between) microseconds.
fn walk(
    grammar: &Arc<nextok_constraints::Grammar>,
    vocab: &Arc<TokenVocab>,
    tokens: &[u32],
    flags: &[bool],
) -> (Vec<f64>, Vec<f64>) {
    let mut c = GrammarConstraint::new(Arc::clone(grammar), vocab);
    let mut mask = vocab.empty_mask();
    let (mut ins, mut between) = (Vec::new(), Vec::new());
    for (i, &t) in tokens.iter().enumerate() {
        let t0 = Instant::now();
        c.fill_mask(&mut mask).expect("mask");
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if flags[i] {
            ins.push(us)
        } else {
            between.push(us)
        }
        assert!(
            mask[t as usize / 64] >> (t % 64) & 1 == 1,
            "document token {i} not allowed"
        );
        c.advance(t).expect("advance");
    }
    assert!(c.is_complete());
    (ins, between)
}

fn fmt(p: Percentiles) -> String {
    format!(
        "median {:.2} us, p99 {:.1} us, max {:.1} us",
        p.median, p.p99, p.max
    )
}

fn report(name: &str, vocab: &Arc<TokenVocab>, tokens: &[u32]) {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("schema");
    let flags = in_string_flags(vocab, tokens);
    let t0 = Instant::now();
    let grammar = compile_json_schema(&schema, &JsonOptions::default()).expect("compile");
    let compile = t0.elapsed();
    let (mut ci, mut cb) = walk(&grammar, vocab, tokens, &flags);
    let mut all_cold: Vec<f64> = ci.iter().chain(&cb).copied().collect();
    let (mut wi, mut wb) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let (a, b) = walk(&grammar, vocab, tokens, &flags);
        wi.extend(a);
        wb.extend(b);
    }
    let mut all_warm: Vec<f64> = wi.iter().chain(&wb).copied().collect();
    println!(
        "[{name}] {} tokens, first compile {:.2} ms",
        tokens.len(),
        compile.as_secs_f64() * 1e3
    );
    println!(
        "[{name}] cold pass, all:        {}",
        fmt(Percentiles::of(&mut all_cold))
    );
    println!(
        "[{name}] cold pass, in strings: {}",
        fmt(Percentiles::of(&mut ci))
    );
    println!(
        "[{name}] cold pass, between:    {}",
        fmt(Percentiles::of(&mut cb))
    );
    println!(
        "[{name}] warm passes, all:        {}",
        fmt(Percentiles::of(&mut all_warm))
    );
    println!(
        "[{name}] warm passes, in strings: {}",
        fmt(Percentiles::of(&mut wi))
    );
    println!(
        "[{name}] warm passes, between:    {}",
        fmt(Percentiles::of(&mut wb))
    );
    let mut compiles = Vec::new();
    for _ in 0..30 {
        let t0 = Instant::now();
        let g = compile_json_schema(&schema, &JsonOptions::default()).expect("compile");
        let mut c = GrammarConstraint::new(g, vocab);
        let mut mask = vocab.empty_mask();
        c.fill_mask(&mut mask).expect("mask");
        compiles.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let p = Percentiles::of(&mut compiles);
    println!(
        "[{name}] compile to first mask, 30 more times: median {:.2} ms, p99 {:.2} ms",
        p.median, p.p99
    );
}

fn bench(c: &mut Criterion) {
    let (base, tok, _) = common::smollm2();
    let v49 = Arc::new(TokenVocab::new(base.clone(), &[0, 2, 4]).expect("vocab"));
    let v128 = Arc::new(TokenVocab::new(synthetic_128k(&base), &[0, 2, 4]).expect("vocab"));
    // SmolLM2's own tokenization; its ids mean the same in the 128k vocabulary, which only adds
    // tokens after them.
    let tokens = tok
        .encode(DOCUMENT, EncodeOptions::plain())
        .expect("tokenizable");
    report("49k", &v49, &tokens);
    report("128k", &v128, &tokens);
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("schema");
    let mut group = c.benchmark_group("constraints");
    group
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(20);
    for (name, vocab) in [("49k", &v49), ("128k", &v128)] {
        let grammar = compile_json_schema(&schema, &JsonOptions::default()).expect("compile");
        let flags = in_string_flags(vocab, &tokens);
        group.throughput(Throughput::Elements(tokens.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("json_schema_walk_per_token", name),
            &(),
            |b, _| b.iter(|| walk(&grammar, vocab, &tokens, &flags)),
        );
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(
            BenchmarkId::new("compile_to_first_mask", name),
            &(),
            |b, _| {
                b.iter(|| {
                    let g = compile_json_schema(&schema, &JsonOptions::default()).expect("compile");
                    let mut c = GrammarConstraint::new(g, vocab);
                    let mut mask = vocab.empty_mask();
                    c.fill_mask(&mut mask).expect("mask");
                    mask
                })
            },
        );
    }
    group.finish();
}

// `criterion_group!` defines an undocumented public function; keeping it in its own module lets
// the lint exception cover that function alone.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
