//! Benchmarks of the sampling chain at real vocabulary sizes.
//!
//! Run with `cargo bench -p nextok-benches --bench sampling`. Each iteration samples one token
//! (validation, raw log-probability, the chain and the draw), so the reported time is the cost
//! per token.

use std::time::Duration;

use criterion::{criterion_main, BenchmarkId, Criterion};
use nextok_sampling::{Context, Sampler, SamplingParams};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Vocabulary sizes of common models: Llama 2 (32k), SmolLM2 (49k), Llama 3 (128k), Gemma (256k).
const VOCABS: [usize; 4] = [32_000, 49_152, 128_256, 256_000];

/// Logits shaped like a language model's: most tokens around 0 with a spread of about 2 (a sum of
/// uniforms, close to normal), and twenty favourites about 20 above the bulk, so that top-p 0.95
/// keeps a nucleus of a few tokens to a few dozen, as it does on real text, rather than
/// thousands.
fn logits(vocab: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut uniform = || (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
    let mut z: Vec<f32> = (0..vocab)
        .map(|_| (uniform() + uniform() + uniform() + uniform() - 2.0) * 3.5)
        .collect();
    for i in 0..20 {
        let at = (uniform() * vocab as f32) as usize % vocab;
        z[at] = 20.0 - i as f32 * 0.3;
    }
    z
}

fn bench_chain(c: &mut Criterion) {
    let cases: [(&str, SamplingParams); 4] = [
        ("greedy", SamplingParams::greedy()),
        (
            "temp_topk40_topp0.95",
            SamplingParams {
                temperature: 0.8,
                top_k: Some(40),
                top_p: 0.95,
                ..Default::default()
            },
        ),
        (
            "temp_topp0.95",
            SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                ..Default::default()
            },
        ),
        (
            "minp0.05",
            SamplingParams {
                min_p: 0.05,
                ..Default::default()
            },
        ),
    ];
    let mut group = c.benchmark_group("sampling");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    for (name, params) in &cases {
        for &vocab in &VOCABS {
            let z = logits(vocab, vocab as u64);
            let mut sampler = Sampler::new(params).expect("valid parameters");
            let ctx = Context::default();
            group.bench_with_input(BenchmarkId::new(*name, vocab), &z, |b, z| {
                b.iter(|| sampler.sample(z, &ctx).expect("logits are finite"))
            });
        }
    }
    group.finish();
}

// `criterion_group!` defines an undocumented public function; keeping it in its own module lets
// the lint exception cover that function alone.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench_chain);
}
criterion_main!(group::benches);
