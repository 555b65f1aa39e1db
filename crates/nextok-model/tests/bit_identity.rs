//! A position's logits are bit-identical however it is computed: in one prefill, token by token
//! with the cache, in chunks of any size, beside other sequences in one batch, with 1 or more
//! threads. Checked with proptest on small random models of every weight type, and on the real
//! model for a short prompt. Also: the specification's count of processed positions, measured on
//! what the model actually runs.

mod common;

use nextok_gguf::{GgmlType, GgufFile};
use nextok_kv_cache::{KvCache, KvType};
use nextok_model::testing::RandomLlama;
use nextok_model::{Backend, CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};
use proptest::prelude::*;

fn load(spec: &RandomLlama, seed: u64) -> LlamaModel {
    let file = GgufFile::from_bytes(spec.to_gguf(seed)).unwrap();
    LlamaModel::from_gguf(file, LoadOptions::default()).unwrap()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Every position's logits, feeding `tokens` in chunks of the given sizes (cycled).
fn chunked(
    model: &LlamaModel,
    backend: &dyn Backend,
    kv: KvType,
    tokens: &[u32],
    sizes: &[usize],
) -> Vec<f32> {
    let mut cache = model.new_cache(kv);
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < tokens.len() {
        let n = sizes[i % sizes.len()].clamp(1, tokens.len() - at);
        let logits = model
            .forward(
                backend,
                &mut [Sequence {
                    cache: &mut cache,
                    tokens: &tokens[at..at + n],
                    logits: Logits::All,
                }],
            )
            .unwrap();
        out.extend_from_slice(&logits[0]);
        at += n;
        i += 1;
    }
    out
}

/// Every position's logits of `tokens`, computed in lockstep chunks beside another sequence
/// `other` in the same forward calls.
fn batched(
    model: &LlamaModel,
    backend: &dyn Backend,
    kv: KvType,
    tokens: &[u32],
    other: &[u32],
    size: usize,
) -> Vec<f32> {
    let mut a = model.new_cache(kv);
    let mut b = model.new_cache(kv);
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < tokens.len() {
        let n = size.min(tokens.len() - i);
        let m = size.min(other.len() - j);
        let logits = model
            .forward(
                backend,
                &mut [
                    Sequence {
                        cache: &mut b,
                        tokens: &other[j..j + m],
                        logits: if m == 0 { Logits::None } else { Logits::Last },
                    },
                    Sequence {
                        cache: &mut a,
                        tokens: &tokens[i..i + n],
                        logits: Logits::All,
                    },
                ],
            )
            .unwrap();
        out.extend_from_slice(&logits[1]);
        i += n;
        j += m;
    }
    out
}

fn check_all_paths(model: &LlamaModel, kv: KvType, tokens: &[u32], other: &[u32], sizes: &[usize]) {
    let one = CpuBackend::new(1);
    let two = CpuBackend::new(2).with_min_work_per_thread(1);
    let reference = bits(&chunked(model, &one, kv, tokens, &[tokens.len()]));
    assert_eq!(
        bits(&chunked(model, &one, kv, tokens, &[1])),
        reference,
        "token by token"
    );
    assert_eq!(
        bits(&chunked(model, &one, kv, tokens, sizes)),
        reference,
        "chunks {sizes:?}"
    );
    assert_eq!(
        bits(&chunked(model, &two, kv, tokens, &[tokens.len()])),
        reference,
        "2 threads"
    );
    assert_eq!(
        bits(&chunked(model, &two, kv, tokens, &[1])),
        reference,
        "2 threads, token by token"
    );
    assert_eq!(
        bits(&batched(model, &one, kv, tokens, other, sizes[0])),
        reference,
        "batched"
    );
    assert_eq!(
        bits(&batched(model, &two, kv, tokens, other, sizes[0])),
        reference,
        "batched, 2 threads"
    );
    // The opt-in 8-bit-activation mode is not exact, but just as reproducible.
    let int8 = CpuBackend::new(1).with_int8_activations();
    let int8_two = CpuBackend::new(2)
        .with_min_work_per_thread(1)
        .with_int8_activations();
    let int8_reference = bits(&chunked(model, &int8, kv, tokens, &[tokens.len()]));
    assert_eq!(
        bits(&chunked(model, &int8_two, kv, tokens, &[1])),
        int8_reference,
        "int8, 2 threads, token by token"
    );
    assert_eq!(
        bits(&batched(model, &int8_two, kv, tokens, other, sizes[0])),
        int8_reference,
        "int8, batched"
    );
}

fn spec_for(ty: GgmlType, bias: bool, tied: bool) -> RandomLlama {
    // K-quants come in blocks of 256, so their rows must be that wide.
    let wide = ty.block_elements() == 256;
    RandomLlama {
        d_model: if wide { 256 } else { 64 },
        ffn_dim: if wide { 256 } else { 96 },
        heads: 4,
        kv_heads: if bias { 4 } else { 2 },
        layers: 2,
        vocab: 40,
        weight_type: ty,
        tied_output: tied,
        attention_bias: bias,
        architecture: if bias { "qwen2".into() } else { "llama".into() },
        context: 4096,
    }
}

const TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn logits_are_bit_identical_on_every_path(
        ty in prop::sample::select(TYPES.to_vec()),
        bias in any::<bool>(),
        tied in any::<bool>(),
        f16_cache in any::<bool>(),
        seed in any::<u64>(),
        tokens in prop::collection::vec(0..40u32, 1..10),
        other in prop::collection::vec(0..40u32, 1..10),
        sizes in prop::collection::vec(1..5usize, 1..4),
    ) {
        let model = load(&spec_for(ty, bias, tied), seed);
        let kv = if f16_cache { KvType::F16 } else { KvType::F32 };
        check_all_paths(&model, kv, &tokens, &other, &sizes);
    }
}

/// The random models are not degenerate: their logits differ between positions and are finite.
#[test]
fn random_models_give_finite_varied_logits() {
    for ty in TYPES {
        let model = load(&spec_for(ty, false, true), 3);
        let logits = chunked(&model, &CpuBackend::new(1), KvType::F32, &[1, 2, 3], &[3]);
        assert!(logits.iter().all(|v| v.is_finite()), "{ty:?}");
        assert_ne!(&logits[..40], &logits[40..80], "{ty:?}");
    }
}

/// The same on the real model, for the first 6 tokens of the conformance prompt.
#[test]
fn real_model_logits_are_bit_identical_on_every_path() {
    let model = common::model();
    let tokens = &common::ids(&common::json("logits/allpos.json")["ids"])[..6];
    check_all_paths(model, KvType::F32, tokens, &[504, 3575, 282], &[2, 3, 1]);
}

/// The generation loop the specification counts ("The KV cache"): producing n tokens without a
/// cache runs 1 + 2 + ... + n positions through the model, with a cache n. Both loops here also
/// produce bit-identical logits, which is what makes the cache a pure saving.
fn count_positions(n: usize) -> (u64, u64) {
    let spec = RandomLlama {
        layers: 1,
        d_model: 32,
        heads: 1,
        kv_heads: 1,
        ffn_dim: 32,
        vocab: 16,
        ..RandomLlama::default()
    };
    let backend = CpuBackend::new(1);
    let argmax = |x: &[f32]| (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b }) as u32;

    // Without a cache: every step runs the whole sequence so far from an empty cache.
    let model = load(&spec, 11);
    let mut seq = vec![1u32];
    let mut uncached = Vec::new();
    for _ in 0..n {
        let mut cache = model.new_cache(KvType::F32);
        let out = model
            .forward(
                &backend,
                &mut [Sequence {
                    cache: &mut cache,
                    tokens: &seq,
                    logits: Logits::Last,
                }],
            )
            .unwrap();
        uncached.push(bits(&out[0]));
        seq.push(argmax(&out[0]));
    }
    let without = model.positions_processed();

    // With a cache: every step runs the one new token.
    let model = load(&spec, 11);
    let mut cache: KvCache = model.new_cache(KvType::F32);
    let mut next = 1u32;
    for step in uncached.iter() {
        let out = model
            .forward(
                &backend,
                &mut [Sequence {
                    cache: &mut cache,
                    tokens: &[next],
                    logits: Logits::Last,
                }],
            )
            .unwrap();
        assert_eq!(&bits(&out[0]), step);
        next = argmax(&out[0]);
    }
    (without, model.positions_processed())
}

/// The specification's translation example: 4 steps, 10 positions without a cache, 4 with it.
#[test]
fn four_steps_process_10_positions_without_a_cache_and_4_with_it() {
    assert_eq!(count_positions(4), (10, 4));
}

/// The specification's long answer: 1,000 tokens, 500,500 positions without a cache, 1,000 with it.
#[test]
fn a_thousand_steps_process_500_500_positions_without_a_cache_and_1000_with_it() {
    assert_eq!(count_positions(1_000), (500_500, 1_000));
}

fn last_logits(model: &LlamaModel, cache: &mut KvCache, tokens: &[u32]) -> Vec<u32> {
    let out = model
        .forward(
            &CpuBackend::new(1),
            &mut [Sequence {
                cache,
                tokens,
                logits: Logits::Last,
            }],
        )
        .unwrap();
    bits(&out[0])
}

/// Forked caches (beams, parallel samples) and reused prompt prefixes give exactly the logits of
/// a fresh run over the whole sequence.
#[test]
fn forks_and_prefix_reuse_give_the_logits_of_a_fresh_run() {
    let model = load(&spec_for(GgmlType::Q4_1, false, true), 21);
    let prompt = [5u32, 6, 7, 8, 9];
    let fresh = |tokens: &[u32]| last_logits(&model, &mut model.new_cache(KvType::F32), tokens);

    // Fork after the prompt; the two branches continue differently in one batch.
    let mut a = model.new_cache(KvType::F32);
    model
        .forward(
            &CpuBackend::new(1),
            &mut [Sequence {
                cache: &mut a,
                tokens: &prompt,
                logits: Logits::None,
            }],
        )
        .unwrap();
    let mut b = a.fork();
    let out = model
        .forward(
            &CpuBackend::new(2).with_min_work_per_thread(1),
            &mut [
                Sequence {
                    cache: &mut a,
                    tokens: &[1],
                    logits: Logits::Last,
                },
                Sequence {
                    cache: &mut b,
                    tokens: &[2, 3],
                    logits: Logits::Last,
                },
            ],
        )
        .unwrap();
    assert_eq!(bits(&out[0]), fresh(&[5, 6, 7, 8, 9, 1]));
    assert_eq!(bits(&out[1]), fresh(&[5, 6, 7, 8, 9, 2, 3]));

    // A new prompt that shares the first five tokens reuses them and runs only the rest.
    let next = [5u32, 6, 7, 8, 9, 4, 4];
    let before = model.positions_processed();
    let kept = b.reuse_prefix(&next);
    assert_eq!(kept, 5);
    assert_eq!(last_logits(&model, &mut b, &next[kept..]), fresh(&next));
    // The reuse ran 2 positions; the fresh run beside it ran all 7.
    assert_eq!(model.positions_processed() - before, 2 + 7);
}

/// Packing the Q4_1 matrices at load (the default) changes no bit of any logit: on random Q4_1
/// models with tied and separate output matrices, and on the real model, on every instruction
/// set this CPU has.
#[test]
fn packed_weights_give_the_bits_of_the_file_layout() {
    let keep = LoadOptions {
        keep_file_layout: true,
        ..LoadOptions::default()
    };
    let backends: Vec<CpuBackend> = nextok_kernels::Isa::available()
        .into_iter()
        .map(|isa| CpuBackend::new(2).with_isa(isa).unwrap())
        .collect();
    for (seed, tied) in [(1, true), (2, false), (3, true)] {
        let spec = spec_for(GgmlType::Q4_1, false, tied);
        let packed = load(&spec, seed);
        let file = GgufFile::from_bytes(spec.to_gguf(seed)).unwrap();
        let unpacked = LlamaModel::from_gguf(file, keep.clone()).unwrap();
        for b in &backends {
            let tokens = [5, 1, 39, 7, 7];
            assert_eq!(
                bits(&chunked(&packed, b, KvType::F32, &tokens, &[2, 3])),
                bits(&chunked(&unpacked, b, KvType::F32, &tokens, &[5])),
                "seed {seed}, {:?}",
                b.isa()
            );
        }
    }
    let real_packed = common::model();
    let real_file = LlamaModel::from_gguf(common::model_file(), keep).unwrap();
    let tokens = &common::ids(&common::json("logits/allpos.json")["ids"])[..4];
    for b in &backends {
        assert_eq!(
            bits(&chunked(real_packed, b, KvType::F32, tokens, &[4])),
            bits(&chunked(&real_file, b, KvType::F32, tokens, &[1])),
            "real model, {:?}",
            b.isa()
        );
    }
}
