//! Generation with the encoder–decoder base model (specification, "Encoder–decoder: translating
//! 'I love you very much'"), on seeded random weights.

use nextok::model::{CpuBackend, EncDecConfig, EncoderDecoder};
use nextok::sampling::SamplingParams;
use nextok::seq2seq::{generate, Seq2SeqOptions};
use nextok::StopReason;

const SOS: u32 = 0;
const EOS: u32 = 1;

fn model() -> EncoderDecoder {
    let config = EncDecConfig {
        encoder_layers: 2,
        decoder_layers: 2,
        d_model: 64,
        heads: 4,
        ffn_dim: 128,
        vocab: 40,
    };
    EncoderDecoder::random(config, 11).unwrap()
}

fn options(sampling: SamplingParams, beams: Option<(usize, f64)>) -> Seq2SeqOptions {
    Seq2SeqOptions {
        start_token: SOS,
        end_tokens: vec![EOS],
        max_tokens: 8,
        sampling,
        beams,
    }
}

/// "The encoder runs once ... The decoder runs once per output token": one encoder run, and one
/// decoder position per generated token with the cache (1 + 2 + 3 + 4 = 10 without it).
#[test]
fn the_encoder_runs_once_and_the_decoder_once_per_token() {
    let model = model();
    let backend = CpuBackend::new(1);
    let source = [5, 6, 7, 8, 9, 10, 11]; // "<SOS> I love you very much <EOS>": 7 tokens
    let out = generate(
        &model,
        &backend,
        &source,
        &options(SamplingParams::greedy(), None),
    )
    .unwrap();
    assert_eq!(model.encoder_runs(), 1);
    assert_eq!(out.decoder_positions, out.tokens.len() as u64);
    match out.stop_reason {
        StopReason::EndTurn => assert_eq!(out.tokens.last(), Some(&EOS)),
        StopReason::MaxTokens => assert_eq!(out.tokens.len(), 8),
        other => panic!("unexpected stop reason {other:?}"),
    }
    assert!(out.logprob <= 0.0 && out.logprob.is_finite());
}

#[test]
fn the_same_seed_gives_the_same_tokens() {
    let model = model();
    let backend = CpuBackend::new(2);
    let params = SamplingParams {
        temperature: 1.5,
        seed: Some(42),
        ..SamplingParams::default()
    };
    let a = generate(&model, &backend, &[3, 4, 5], &options(params.clone(), None)).unwrap();
    let b = generate(
        &model,
        &CpuBackend::new(1),
        &[3, 4, 5],
        &options(params, None),
    )
    .unwrap();
    assert_eq!(a, b);
}

/// A beam of width 1 keeps the single most likely token at every step: greedy decoding.
#[test]
fn a_beam_of_width_one_is_greedy() {
    let model = model();
    let backend = CpuBackend::new(1);
    for source in [[3u32, 4, 5], [9, 2, 30], [12, 12, 12]] {
        let greedy = generate(
            &model,
            &backend,
            &source,
            &options(SamplingParams::greedy(), None),
        )
        .unwrap();
        let beam = generate(
            &model,
            &backend,
            &source,
            &options(SamplingParams::greedy(), Some((1, 0.0))),
        )
        .unwrap();
        assert_eq!(beam.tokens, greedy.tokens, "source {source:?}");
        assert!((beam.logprob - greedy.logprob).abs() < 1e-4);
    }
}

/// A wider beam returns a sequence that either ended with the end token (and says so) or ran to
/// the length limit.
#[test]
fn wider_beams_return_a_finished_or_full_length_sequence() {
    let model = model();
    let backend = CpuBackend::new(1);
    let out = generate(
        &model,
        &backend,
        &[3, 4, 5],
        &options(SamplingParams::greedy(), Some((3, 0.0))),
    )
    .unwrap();
    assert!(out.tokens.len() <= 8);
    assert_eq!(
        out.stop_reason == StopReason::EndTurn,
        out.tokens.last() == Some(&EOS)
    );
}

#[test]
fn bad_inputs_are_errors() {
    let model = model();
    let backend = CpuBackend::new(1);
    let mut o = options(SamplingParams::greedy(), None);
    assert!(generate(&model, &backend, &[], &o).is_err());
    assert!(generate(&model, &backend, &[99], &o).is_err());
    o.max_tokens = 0;
    assert!(generate(&model, &backend, &[3], &o).is_err());
}
