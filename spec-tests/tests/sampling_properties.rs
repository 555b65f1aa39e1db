//! Properties of the fast sampling chain, checked against the reference on random logits
//! (vocabularies of 1 to 256k tokens) and random parameters.

mod common;

use common::LogitsSpec;
use nextok_sampling::{Chain, Context, Sampler, SamplingParams, TopP, Trace};
use nextok_spec_tests::sampling as reference;
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

fn vocab() -> impl Strategy<Value = usize> {
    prop_oneof![
        5 => 1usize..=64,
        3 => 65usize..=4096,
        1 => 4097usize..=256_000,
        1 => Just(256_000usize),
    ]
}

fn logits_spec() -> impl Strategy<Value = LogitsSpec> {
    (
        vocab(),
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

/// Random parameters; each stage is on about half the time.
fn params() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![Just(1.0f32), 0.1f32..3.0],
        proptest::option::of(1usize..100),
        prop_oneof![Just(1.0f32), 0.01f32..1.0],
        prop_oneof![Just(0.0f32), 0.0f32..0.5],
        prop_oneof![Just(1.0f32), 0.5f32..2.0],
        prop_oneof![Just((0.0f32, 0.0f32)), (-1.0f32..1.0, -1.0f32..1.0)],
        any::<u64>(),
    )
        .prop_map(
            |(temperature, top_k, top_p, min_p, rep, (pres, freq), seed)| SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                repetition_penalty: rep,
                presence_penalty: pres,
                frequency_penalty: freq,
                seed: Some(seed),
                ..Default::default()
            },
        )
}

/// Random prompt and generated tokens within the vocabulary, and a logit bias on a few tokens.
fn history(vocab: usize, seed: u64) -> (Vec<u32>, Vec<u32>, Vec<(u32, f32)>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let mut tok = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| (rng.next_u64() % vocab as u64) as u32)
            .collect()
    };
    let prompt = tok(20);
    let generated = tok(30);
    let bias = tok(3).into_iter().zip([2.5f32, -4.0, 0.75]).collect();
    (prompt, generated, bias)
}

fn to_reference(p: &SamplingParams) -> reference::Params {
    reference::Params {
        temperature: p.temperature as f64,
        top_k: p.top_k,
        top_p: p.top_p as f64,
        min_p: p.min_p as f64,
        repetition_penalty: p.repetition_penalty as f64,
        presence_penalty: p.presence_penalty as f64,
        frequency_penalty: p.frequency_penalty as f64,
        logit_bias: p
            .logit_bias
            .iter()
            .map(|(&t, &b)| (t as usize, b as f64))
            .collect(),
    }
}

fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn support<T: Copy + Into<f64>>(p: &[T]) -> Vec<usize> {
    (0..p.len()).filter(|&i| p[i].into() > 0.0).collect()
}

/// Whether `p`'s support is decided by a near tie, where `f32` and `f64` rounding may
/// legitimately disagree: nudging top-p or min-p by 1e-4 changes the reference's support.
fn borderline(z: &[f64], p: &reference::Params, prompt: &[u32], generated: &[u32]) -> bool {
    let base = support(&reference::final_distribution(z, p, prompt, generated));
    let nudged = |f: &dyn Fn(&mut reference::Params)| {
        let mut q = p.clone();
        f(&mut q);
        support(&reference::final_distribution(z, &q, prompt, generated)) != base
    };
    (p.top_p < 1.0
        && (nudged(&|q| q.top_p = (q.top_p + 1e-4).min(1.0))
            || nudged(&|q| q.top_p = (q.top_p - 1e-4).max(1e-6))))
        || (p.min_p > 0.0
            && (nudged(&|q| q.min_p += 1e-4) || nudged(&|q| q.min_p = (q.min_p - 1e-4).max(0.0))))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn probabilities_sum_to_one(spec in logits_spec(), params in params()) {
        let z = spec.logits();
        let trace = Trace::new(&params, &z, &Context::default()).unwrap();
        for stage in trace.stages.iter().map(|s| &s.probs).chain([&trace.final_probs]) {
            prop_assert!(stage.iter().all(|p| p.is_finite() && *p >= 0.0));
            let sum: f64 = stage.iter().map(|&p| p as f64).sum();
            prop_assert!((sum - 1.0).abs() < 1e-4, "sum {}", sum);
        }
        let r = reference::final_distribution(&f64s(&z), &to_reference(&params), &[], &[]);
        prop_assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn temperature_never_changes_the_order(spec in logits_spec(), t in 0.05f32..5.0) {
        let z = spec.logits();
        let params = SamplingParams { temperature: t, ..Default::default() };
        let trace = Trace::new(&params, &z, &Context::default()).unwrap();
        let p = &trace.final_probs;
        let r = reference::softmax(&reference::divide_by_temperature(&f64s(&z), t as f64));
        // Sorted by logit, the probabilities never increase: exactly for the reference, and
        // up to the fast exponential's rounding (`exp_nonpositive`: about 2 units in the last
        // place each, so two neighbours may swap by at most 4 units of the larger; found by
        // this test with logits 1e-7 apart at vocabulary 186,920).
        let order = reference::sorted_ids(&f64s(&z));
        for w in order.windows(2) {
            let slack = 4.0 * f32::EPSILON * p[w[1]];
            prop_assert!(p[w[0]] >= p[w[1]] - slack, "fast: {} ({:e}) before {} ({:e})", w[0], p[w[0]], w[1], p[w[1]]);
            prop_assert!(r[w[0]] >= r[w[1]], "reference: {} before {}", w[0], w[1]);
        }
    }

    #[test]
    fn temperature_zero_and_top_k_1_are_greedy(spec in logits_spec(), seed in any::<u64>(), t in 0.1f32..3.0) {
        let z = spec.logits();
        let want = reference::greedy(&f64s(&z)) as u32;
        let greedy = Sampler::new(&SamplingParams { seed: Some(seed), ..SamplingParams::greedy() })
            .unwrap()
            .sample(&z, &Context::default())
            .unwrap();
        prop_assert_eq!(greedy.token, want);
        let k1 = SamplingParams { temperature: t, top_k: Some(1), seed: Some(seed), ..Default::default() };
        prop_assert_eq!(Sampler::new(&k1).unwrap().sample(&z, &Context::default()).unwrap().token, want);
    }

    #[test]
    fn temperature_towards_zero_concentrates_on_the_top_token(spec in logits_spec()) {
        let z = spec.logits();
        let zf = f64s(&z);
        let order = reference::sorted_ids(&zf);
        // Only meaningful when the top token is unique by a clear margin.
        prop_assume!(order.len() == 1 || zf[order[0]] - zf[order[1]] >= 0.05);
        let p = Trace::new(&SamplingParams { temperature: 1e-3, ..Default::default() }, &z, &Context::default())
            .unwrap()
            .final_probs;
        prop_assert!(p[order[0]] > 0.999);
    }

    #[test]
    fn top_p_1_keeps_every_token(spec in logits_spec()) {
        let z = spec.logits();
        let chain = Chain::new().push(TopP::new(1.0).unwrap());
        let p = Trace::of_chain(&chain, &z, &Context::default()).unwrap().final_probs;
        // The same distribution as plain softmax: the same support, and the same values up to
        // summation order (the chain drops `-inf` tokens before summing).
        let plain = nextok_sampling::softmax(&z).unwrap();
        let (sp, splain) = (support(&p), support(&plain));
        prop_assert!(sp == splain, "support {} tokens vs plain softmax {}", sp.len(), splain.len());
        prop_assert!(p.iter().zip(&plain).all(|(a, b)| (a - b).abs() <= 1e-6 * b));
        let zf = f64s(&z);
        let r = reference::top_p(&reference::softmax(&zf), &reference::sorted_ids(&zf), 1.0);
        prop_assert_eq!(support(&r), support(&reference::softmax(&zf)));
    }

    #[test]
    fn top_p_keeps_a_prefix_of_the_sorted_order(spec in logits_spec(), top_p in 0.001f32..1.0, t in 0.1f32..3.0) {
        let z = spec.logits();
        let params = SamplingParams { temperature: t, top_p, ..Default::default() };
        let p = Trace::new(&params, &z, &Context::default()).unwrap().final_probs;
        let order = reference::sorted_ids(&f64s(&z));
        let kept = order.iter().take_while(|&&i| p[i] > 0.0).count();
        prop_assert!(kept >= 1);
        prop_assert!(order[kept..].iter().all(|&i| p[i] == 0.0), "kept tokens are not a prefix");
    }

    #[test]
    fn a_masked_token_is_never_chosen(spec in logits_spec(), params in params(), mask_seed in any::<u64>()) {
        let z = spec.logits();
        let words = spec.vocab.div_ceil(64);
        let mut rng = ChaCha8Rng::seed_from_u64(mask_seed);
        let mut mask: Vec<u64> = (0..words).map(|_| rng.next_u64() & rng.next_u64()).collect();
        mask[0] |= 1; // token 0 is always finite, so something stays allowed
        let allowed = |t: usize| mask[t / 64] >> (t % 64) & 1 == 1;
        let ctx = Context { allowed: Some(&mask), ..Default::default() };
        let mut sampler = Sampler::new(&params).unwrap();
        for _ in 0..20 {
            let t = sampler.sample(&z, &ctx).unwrap().token as usize;
            prop_assert!(allowed(t), "masked token {} chosen", t);
        }
        let p = Trace::new(&params, &z, &ctx).unwrap().final_probs;
        prop_assert!((0..z.len()).all(|t| allowed(t) || p[t] == 0.0));
    }

    #[test]
    fn fast_chain_equals_reference_chain(spec in logits_spec(), mut params in params(), with_history in any::<bool>()) {
        let z = spec.logits();
        let (prompt, generated, bias) = if with_history {
            history(spec.vocab, spec.seed)
        } else {
            (vec![], vec![], vec![])
        };
        params.logit_bias = bias.into_iter().collect();
        let rp = to_reference(&params);
        let zf = f64s(&z);
        prop_assume!(!borderline(&zf, &rp, &prompt, &generated));
        let ctx = Context { prompt: &prompt, generated: &generated, allowed: None };
        let fast = Trace::new(&params, &z, &ctx).unwrap().final_probs;
        let slow = reference::final_distribution(&zf, &rp, &prompt, &generated);
        for (i, (&f, &r)) in fast.iter().zip(&slow).enumerate() {
            let f = f as f64;
            prop_assert!(
                (f - r).abs() <= 1e-6 + 2e-4 * r.max(f),
                "token {}: fast {} vs reference {}", i, f, r
            );
        }
    }
}
