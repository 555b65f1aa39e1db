//! Shared helpers of the real-model tests: the model's path, the conformance data, a greedy loop.

#![allow(dead_code)]

use std::sync::OnceLock;

use nextok_gguf::GgufFile;
use nextok_kv_cache::{KvCache, KvType};
use nextok_model::{Backend, LlamaModel, LoadOptions, Logits, Sequence};

/// The conformance data directory (`conformance/` at the repository root).
pub const CONFORMANCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../conformance");

/// Where the default model is: `$NEXTOK_MODEL`, or the cache `cargo xtask fetch-model` fills.
pub fn model_path() -> String {
    std::env::var("NEXTOK_MODEL").unwrap_or_else(|_| {
        format!(
            "{}/.cache/nextok/models/SmolLM2-135M-Instruct.Q4_1.gguf",
            std::env::var("HOME").unwrap_or_default()
        )
    })
}

/// The default model's file. Fails (never skips) when it is absent.
pub fn model_file() -> GgufFile {
    let path = model_path();
    GgufFile::open(&path).unwrap_or_else(|e| {
        panic!("cannot open the default model at {path} ({e}): run `cargo xtask fetch-model` first")
    })
}

/// The default model, loaded once per test binary. Fails (never skips) when it is absent.
pub fn model() -> &'static LlamaModel {
    static MODEL: OnceLock<LlamaModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        LlamaModel::from_gguf(model_file(), LoadOptions::default())
            .expect("the default model loads")
    })
}

pub fn json(rel: &str) -> serde_json::Value {
    let path = format!("{CONFORMANCE}/{rel}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

pub fn f32_file(rel: &str) -> Vec<f32> {
    let path = format!("{CONFORMANCE}/{rel}");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// (max |a − b|, mean |a − b|)
pub fn diff(a: &[f32], b: &[f32]) -> (f32, f64) {
    assert_eq!(a.len(), b.len());
    let mut max = 0.0f32;
    let mut sum = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let d = (x - y).abs();
        max = max.max(d);
        sum += d as f64;
    }
    (max, sum / a.len() as f64)
}

/// One prefill of `tokens` returning every position's logits.
pub fn prefill_all(
    model: &LlamaModel,
    backend: &dyn Backend,
    tokens: &[u32],
) -> (Vec<f32>, KvCache) {
    let mut cache = model.new_cache(KvType::F32);
    let out = model
        .forward(
            backend,
            &mut [Sequence {
                cache: &mut cache,
                tokens,
                logits: Logits::All,
            }],
        )
        .unwrap();
    (out.into_iter().next().unwrap(), cache)
}

/// Greedy decoding of `steps` tokens after `prompt`: the prompt in one prefill, then one token
/// per call with the cache. Returns the chosen ids.
pub fn greedy(model: &LlamaModel, backend: &dyn Backend, prompt: &[u32], steps: usize) -> Vec<u32> {
    let mut cache = model.new_cache(KvType::F32);
    let mut next = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..steps {
        let logits = model
            .forward(
                backend,
                &mut [Sequence {
                    cache: &mut cache,
                    tokens: &next,
                    logits: Logits::Last,
                }],
            )
            .unwrap();
        let t = argmax(&logits[0]) as u32;
        out.push(t);
        next = vec![t];
    }
    out
}
