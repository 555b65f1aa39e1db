//! Properties of the stages beyond the specification's chain, each checked against its reference
//! (`nextok_spec_tests::sampling_extra`) on random logits (vocabularies of 1 to 256k tokens) and
//! random parameters, and the determinism of the one stage that draws (XTC).

mod common;

use common::LogitsSpec;
use nextok_sampling::{
    Candidates, Chain, Context, Dry, DynamicTemperature, EncoderNoRepeatNGram, EpsilonCutoff,
    EtaCutoff, LogitsProcessor, MinKeep, Mirostat, MirostatVersion, NoRepeatNGram, Sampler,
    SamplingParams, TopNSigma, TypicalP, Xtc,
};
use nextok_spec_tests::sampling::{sample, softmax};
use nextok_spec_tests::sampling_extra as reference;
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

fn logits_spec() -> impl Strategy<Value = LogitsSpec> {
    (
        prop_oneof![
            5 => 1usize..=64,
            3 => 65usize..=4096,
            1 => 4097usize..=256_000,
        ],
        any::<u64>(),
        0.01f32..20.0,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(vocab, seed, scale, grid, masked)| LogitsSpec {
            vocab,
            seed,
            scale,
            grid,
            masked,
        })
}

fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn support(p: &[f64]) -> Vec<usize> {
    (0..p.len()).filter(|&i| p[i] > 0.0).collect()
}

/// The distribution after `stage` on `z`, from the fast crate.
fn fast(stage: impl LogitsProcessor + 'static, z: &[f32], ctx: &Context<'_>) -> Vec<f64> {
    try_fast(stage, z, ctx).unwrap()
}

fn try_fast(
    stage: impl LogitsProcessor + 'static,
    z: &[f32],
    ctx: &Context<'_>,
) -> Result<Vec<f64>, nextok_sampling::Error> {
    let chain = Chain::new().push(stage);
    let mut c = Candidates::new();
    c.fill(z, None)?;
    chain.apply(&mut c, ctx)?;
    Ok(f64s(&c.dense_probs()?))
}

/// Whether the reference's support moves when its parameter moves by a relative 1e-4: then f32
/// and f64 rounding may legitimately disagree about the token on the edge.
fn borderline(f: impl Fn(f64) -> Vec<f64>, x: f64) -> bool {
    let base = support(&softmax(&f(x)));
    [x * (1.0 + 1e-4), x * (1.0 - 1e-4)]
        .iter()
        .any(|&y| support(&softmax(&f(y))) != base)
}

fn assert_close(fast: &[f64], slow: &[f64]) -> Result<(), TestCaseError> {
    prop_assert_eq!(fast.len(), slow.len());
    for (i, (&f, &r)) in fast.iter().zip(slow).enumerate() {
        prop_assert!(
            (f - r).abs() <= 1e-6 + 2e-4 * r.max(f),
            "token {}: fast {} vs reference {}",
            i,
            f,
            r
        );
    }
    Ok(())
}

/// A random text over a small alphabet (so that it repeats itself) within the vocabulary.
fn text(vocab: usize, seed: u64, len: usize, alphabet: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let a = alphabet.min(vocab as u64).max(1);
    (0..len).map(|_| (rng.next_u64() % a) as u32).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn typical_p_equals_reference(spec in logits_spec(), mass in 0.01f64..1.0, min_keep in 1usize..5) {
        let z = spec.logits();
        let zf = f64s(&z);
        prop_assume!(!borderline(|m| reference::typical_p(&zf, m, min_keep), mass));
        let f = fast(TypicalP::new(mass as f32, min_keep).unwrap(), &z, &Context::default());
        // The fast stage gets the f32 of `mass`: the reference uses the same number.
        let r = softmax(&reference::typical_p(&zf, mass as f32 as f64, min_keep));
        assert_close(&f, &r)?;
    }

    #[test]
    fn epsilon_and_eta_cutoffs_equal_reference(spec in logits_spec(), eps in 1e-5f64..0.5, min_keep in 1usize..5, eta in any::<bool>()) {
        let z = spec.logits();
        let zf = f64s(&z);
        let slow = |e: f64| {
            let cut = if eta { reference::eta_cutoff(&zf, e) } else { reference::epsilon_cutoff(&zf, e) };
            reference::with_min_keep(&zf, &cut, min_keep)
        };
        prop_assume!(!borderline(slow, eps));
        let e = eps as f32;
        let f = if eta {
            fast(MinKeep::new(EtaCutoff::new(e).unwrap(), min_keep).unwrap(), &z, &Context::default())
        } else {
            fast(MinKeep::new(EpsilonCutoff::new(e).unwrap(), min_keep).unwrap(), &z, &Context::default())
        };
        assert_close(&f, &softmax(&slow(e as f64)))?;
    }

    #[test]
    fn top_n_sigma_equals_reference(spec in logits_spec(), n in 0.01f64..4.0) {
        let z = spec.logits();
        let zf = f64s(&z);
        prop_assume!(!borderline(|x| reference::top_n_sigma(&zf, x), n));
        let f = fast(TopNSigma::new(n as f32).unwrap(), &z, &Context::default());
        assert_close(&f, &softmax(&reference::top_n_sigma(&zf, n as f32 as f64)))?;
    }

    #[test]
    fn top_n_sigma_ignores_temperature(spec in logits_spec(), n in 0.01f64..4.0, t in 0.1f64..4.0) {
        // σ scales with the logits, so the kept set is the same at any temperature.
        let zf = f64s(&spec.logits());
        prop_assume!(!borderline(|x| reference::top_n_sigma(&zf, x), n));
        let scaled: Vec<f64> = zf.iter().map(|z| z / t).collect();
        prop_assert_eq!(
            support(&softmax(&reference::top_n_sigma(&zf, n))),
            support(&softmax(&reference::top_n_sigma(&scaled, n)))
        );
    }

    #[test]
    fn xtc_equals_reference_when_it_acts(spec in logits_spec(), threshold in 0.001f64..0.5) {
        let z = spec.logits();
        let zf = f64s(&z);
        prop_assume!(!borderline(|x| reference::xtc(&zf, x), threshold));
        let f = fast(Xtc::new(1.0, threshold as f32, 7).unwrap(), &z, &Context::default());
        assert_close(&f, &softmax(&reference::xtc(&zf, threshold as f32 as f64)))?;
    }

    #[test]
    fn xtc_is_deterministic_and_draws_from_its_own_stream(
        spec in logits_spec(), seed in any::<u64>(), probability in 0.0f32..=1.0, steps in 1usize..12,
    ) {
        // The same seed gives the same tokens, however many times a chain ran before.
        let z = spec.logits();
        let params = SamplingParams {
            xtc_probability: probability,
            xtc_threshold: 0.05,
            seed: Some(seed),
            ..Default::default()
        };
        let run = |warm_up: usize| {
            let mut s = Sampler::new(&params).unwrap();
            for _ in 0..warm_up {
                // Tracing runs the chain without a draw from the sampler.
                nextok_sampling::Trace::new(&params, &z, &Context::default()).unwrap();
            }
            let mut generated = Vec::new();
            for _ in 0..steps {
                let t = s.sample(&z, &Context::new(&generated)).unwrap().token;
                generated.push(t);
            }
            generated
        };
        prop_assert_eq!(run(0), run(3));
        // XTC's draw at a step is the same number whatever the sampler drew.
        for step in 0..steps {
            prop_assert_eq!(Xtc::draw(seed, step), Xtc::draw(seed, step));
            prop_assert!((0.0..1.0).contains(&Xtc::draw(seed, step)));
        }
    }

    #[test]
    fn dry_equals_reference(
        spec in logits_spec(), seed in any::<u64>(), len in 0usize..200, alphabet in 1u64..8,
        multiplier in 0.0f64..2.0, base in 1.0f64..3.0, allowed in 1usize..5,
        last_n in prop_oneof![Just(None), (0usize..100).prop_map(Some)],
        breakers in proptest::collection::vec(0u32..8, 0..3),
    ) {
        let z = spec.logits();
        let history = text(spec.vocab, seed, len, alphabet);
        let breakers: Vec<u32> = breakers.into_iter().filter(|&b| (b as usize) < spec.vocab).collect();
        let (m, b) = (multiplier as f32, base as f32);
        let split = len / 2;
        let ctx = Context { prompt: &history[..split], generated: &history[split..], allowed: None };
        let f = fast(Dry::new(m, b, allowed, last_n, breakers.clone()).unwrap(), &z, &ctx);
        let r = reference::dry(&f64s(&z), &history, m as f64, b as f64, allowed, last_n, &breakers);
        // Logits stay within f32 rounding of the reference's (penalties up to f32::MAX).
        let r32: Vec<f32> = r.iter().map(|&x| x as f32).collect();
        assert_close(&f, &f64s(&nextok_sampling::softmax(&r32).unwrap()))?;
    }

    #[test]
    fn no_repeat_ngram_equals_reference(
        spec in logits_spec(), seed in any::<u64>(), len in 0usize..80, alphabet in 1u64..6, n in 1usize..5,
        encoder in any::<bool>(),
    ) {
        let z = spec.logits();
        let zf = f64s(&z);
        let t = text(spec.vocab, seed, len, alphabet);
        let (prompt, generated) = t.split_at(len / 2);
        let ctx = Context { prompt, generated, allowed: None };
        let (f, r) = if encoder {
            (try_fast(EncoderNoRepeatNGram::new(n), &z, &ctx),
             reference::encoder_no_repeat_ngram(&zf, prompt, generated, n))
        } else {
            (try_fast(NoRepeatNGram::new(n), &z, &ctx), reference::no_repeat_ngram(&zf, &t, n))
        };
        // Everything can be banned: then the fast chain says that no token is left.
        if r.iter().all(|x| *x == f64::NEG_INFINITY) {
            prop_assert!(matches!(f, Err(nextok_sampling::Error::NoCandidates { .. })), "{:?}", f);
            return Ok(());
        }
        let f = f.unwrap();
        assert_close(&f, &softmax(&r))?;
    }

    #[test]
    fn dynamic_temperature_equals_reference(
        spec in logits_spec(), t in 0.0f64..3.0, range in 0.0f64..3.0, exponent in 0.0f64..3.0,
    ) {
        let z = spec.logits();
        let (t, range, exponent) = (t as f32, range as f32, exponent as f32);
        let f = fast(DynamicTemperature::new(t, range, exponent).unwrap(), &z, &Context::default());
        let r = reference::dynamic_temperature(&f64s(&z), t as f64, range as f64, exponent as f64);
        // Near temperature 0 an f32 rounding of the temperature moves the probabilities by more
        // than the tolerance: compare where the lowest temperature is at least 0.1.
        prop_assume!(t - range >= 0.1);
        assert_close(&f, &softmax(&r))?;
    }

    #[test]
    fn mirostat_over_several_steps_equals_reference(
        spec in logits_spec(), v1 in any::<bool>(), tau in 0.5f64..8.0, eta in 0.0f64..1.0, seed in any::<u64>(),
    ) {
        // Five steps on different logits; each step's token is drawn from the fast distribution,
        // and the reference follows with its own μ, updated from the probability of that token.
        let (tau, eta) = (tau as f32 as f64, eta as f32 as f64);
        let version = if v1 { MirostatVersion::V1 } else { MirostatVersion::V2 };
        let stage = Mirostat::new(version, tau as f32, eta as f32).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut mu = 2.0 * tau;
        let mut generated = Vec::new();
        let mut c = Candidates::new();
        for step in 0..5u64 {
            let z = LogitsSpec { seed: spec.seed.wrapping_add(step), ..spec.clone() }.logits();
            let zf = f64s(&z);
            let slow_at = |m: f64| {
                if v1 { reference::mirostat_v1(&zf, m, zf.len()).0 } else { reference::mirostat_v2(&zf, m) }
            };
            prop_assume!(!borderline(slow_at, mu));
            let slow = softmax(&slow_at(mu));
            c.fill(&z, None).unwrap();
            stage.apply(&mut c, &Context::new(&generated)).unwrap();
            let f = f64s(&c.dense_probs().unwrap());
            assert_close(&f, &slow)?;
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let token = sample(&f, u);
            mu = reference::mirostat_update(mu, slow[token], tau, eta);
            generated.push(token as u32);
        }
    }
}
