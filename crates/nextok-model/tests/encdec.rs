//! The encoder–decoder base model on the specification's translation example ("Encoder–decoder:
//! translating", "The KV cache"): the encoder runs once, cross-attention keys and values are
//! computed once, the decoder with a cache processes 4 positions instead of 10, the cache size
//! matches the specification's table, and logits are bit-identical on every path.

use nextok_kv_cache::{KvCache, KvType};
use nextok_model::{
    CpuBackend, CrossAttention, DecoderSequence, EncDecConfig, EncoderDecoder, Error, Logits,
};
use proptest::prelude::*;

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b }) as u32
}

fn step(
    model: &EncoderDecoder,
    backend: &CpuBackend,
    cross: &CrossAttention,
    cache: &mut KvCache,
    tokens: &[u32],
    logits: Logits,
) -> Vec<f32> {
    model
        .decode(
            backend,
            &mut [DecoderSequence {
                cross,
                cache,
                tokens,
                logits,
            }],
        )
        .unwrap()
        .remove(0)
}

/// The translation example on the base model: "<SOS> I love you very much <EOS>" (7 source
/// tokens), 4 decoder steps ("Ti amo molto <EOS>" in the specification; random weights here).
#[test]
fn translation_example_on_the_base_model() {
    let model = EncoderDecoder::random(EncDecConfig::base(1_000), 2017).unwrap();
    let backend = CpuBackend::new(2).with_min_work_per_thread(1);
    let source = [1, 11, 12, 13, 14, 15, 2];
    let cross = model.encode(&backend, &source).unwrap();
    assert_eq!(model.encoder_runs(), 1);
    // Cross-attention keys and values: once per decoder layer and source position.
    assert_eq!(model.cross_rows_computed(), 6 * 7);

    // With the cache: one new position per step.
    let mut cache = model.new_cache(KvType::F32);
    let mut next = 1; // <SOS>
    let mut with_cache = Vec::new();
    for _ in 0..4 {
        let logits = step(&model, &backend, &cross, &mut cache, &[next], Logits::Last);
        next = argmax(&logits);
        with_cache.push(bits(&logits));
    }
    assert_eq!(model.decoder_positions(), 4);
    // The cache holds 4 positions at the specification's 24,576 bytes each ("How much memory the
    // cache needs", base model table: 2 × 6 × 512 × 4 bytes).
    assert_eq!(model.cache_config(KvType::F32).bytes_per_token(), 24_576);
    assert_eq!(cache.bytes(), 4 * 24_576);

    // Without the cache: every step reruns the whole decoder input, 1 + 2 + 3 + 4 = 10 positions,
    // and gets exactly the same numbers.
    let mut input = vec![1u32];
    for expected in &with_cache {
        let mut fresh = model.new_cache(KvType::F32);
        let logits = step(&model, &backend, &cross, &mut fresh, &input, Logits::Last);
        assert_eq!(&bits(&logits), expected);
        input.push(argmax(&logits));
    }
    assert_eq!(model.decoder_positions(), 4 + 10);
    // Neither loop ran the encoder or the cross projections again.
    assert_eq!(model.encoder_runs(), 1);
    assert_eq!(model.cross_rows_computed(), 6 * 7);
}

fn small() -> EncDecConfig {
    EncDecConfig {
        encoder_layers: 2,
        decoder_layers: 2,
        d_model: 32,
        heads: 4,
        ffn_dim: 48,
        vocab: 20,
    }
}

fn all_logits(
    model: &EncoderDecoder,
    backend: &CpuBackend,
    cross: &CrossAttention,
    target: &[u32],
    chunk: usize,
) -> Vec<f32> {
    let mut cache = model.new_cache(KvType::F32);
    let mut out = Vec::new();
    for part in target.chunks(chunk) {
        out.extend(step(model, backend, cross, &mut cache, part, Logits::All));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn decoder_logits_are_bit_identical_on_every_path(
        seed in any::<u64>(),
        source in prop::collection::vec(0..20u32, 1..8),
        other_source in prop::collection::vec(0..20u32, 1..8),
        target in prop::collection::vec(0..20u32, 1..8),
        chunk in 1..4usize,
    ) {
        let model = EncoderDecoder::random(small(), seed).unwrap();
        let (one, two) = (CpuBackend::new(1), CpuBackend::new(2).with_min_work_per_thread(1));
        let cross = model.encode(&one, &source).unwrap();
        let reference = bits(&all_logits(&model, &one, &cross, &target, target.len()));
        prop_assert_eq!(&bits(&all_logits(&model, &one, &cross, &target, 1)), &reference);
        prop_assert_eq!(&bits(&all_logits(&model, &two, &cross, &target, chunk)), &reference);
        // Encoding with two threads gives the same cross-attention, hence the same logits.
        let cross2 = model.encode(&two, &source).unwrap();
        prop_assert_eq!(&bits(&all_logits(&model, &one, &cross2, &target, chunk)), &reference);
        // Beside another sequence with another source, in one decoder call.
        let other_cross = model.encode(&one, &other_source).unwrap();
        let (mut a, mut b) = (model.new_cache(KvType::F32), model.new_cache(KvType::F32));
        let out = model
            .decode(&two, &mut [
                DecoderSequence { cross: &other_cross, cache: &mut b, tokens: &[3, 4], logits: Logits::All },
                DecoderSequence { cross: &cross, cache: &mut a, tokens: &target, logits: Logits::All },
            ])
            .unwrap();
        prop_assert_eq!(&bits(&out[1]), &reference);
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    assert!(matches!(
        EncoderDecoder::random(
            EncDecConfig {
                heads: 3,
                ..small()
            },
            1
        ),
        Err(Error::BadHyperparameter { .. })
    ));
    let model = EncoderDecoder::random(small(), 1).unwrap();
    let backend = CpuBackend::new(1);
    assert_eq!(
        model.encode(&backend, &[]).unwrap_err(),
        Error::NoTokens { seq: 0 }
    );
    assert!(matches!(
        model.encode(&backend, &[1, 20]),
        Err(Error::TokenOutOfRange { token: 20, .. })
    ));
    let cross = model.encode(&backend, &[1, 2]).unwrap();
    let mut cache = model.new_cache(KvType::F32);
    let err = model
        .decode(
            &backend,
            &mut [DecoderSequence {
                cross: &cross,
                cache: &mut cache,
                tokens: &[25],
                logits: Logits::Last,
            }],
        )
        .unwrap_err();
    assert!(matches!(err, Error::TokenOutOfRange { token: 25, .. }));
    assert!(cache.is_empty());
}
