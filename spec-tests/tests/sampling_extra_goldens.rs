//! Golden tests of the stages beyond the specification's chain, each a small example computed by
//! hand from the definition its source gives (the paper or the library named in `source`), and
//! checked against both the reference (`nextok_spec_tests::sampling_extra`) and the fast crate.
//!
//! Most cases use the distribution P = (0.5, 0.3, 0.15, 0.05) (logits `ln P`), whose entropy is
//! H = 1.142120 nats. The expected numbers are printed to six digits, so the tolerance is 1e-6
//! plus the f32 rounding of the fast crate (2e-6 in all).

use nextok_sampling::{
    Chain, Context, LogitsProcessor, Mirostat, MirostatVersion, SamplingParams, Trace,
};
use nextok_spec_tests::sampling::softmax;
use nextok_spec_tests::sampling_extra as reference;

const TOLERANCE: f64 = 2e-6;

fn p4() -> Vec<f64> {
    [0.5f64, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect()
}

fn f32s(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}

/// A reference stage: logits in, logits out.
type Stage = Box<dyn Fn(&[f64]) -> Vec<f64>>;

struct Golden {
    source: &'static str,
    logits: Vec<f64>,
    params: SamplingParams,
    prompt: Vec<u32>,
    generated: Vec<u32>,
    /// The reference stage applied to the logits.
    reference: Stage,
    expected: Vec<f64>,
}

fn check(g: &Golden) {
    let ctx = Context {
        prompt: &g.prompt,
        generated: &g.generated,
        allowed: None,
    };
    let fast = Trace::new(&g.params, &f32s(&g.logits), &ctx)
        .unwrap()
        .final_probs;
    let slow = softmax(&(g.reference)(&g.logits));
    assert_eq!(fast.len(), g.expected.len(), "{}", g.source);
    for (i, &e) in g.expected.iter().enumerate() {
        assert!(
            (fast[i] as f64 - e).abs() <= TOLERANCE,
            "{}: token {i}: fast {} vs expected {e}",
            g.source,
            fast[i]
        );
        assert!(
            (slow[i] - e).abs() <= TOLERANCE,
            "{}: token {i}: reference {} vs expected {e}",
            g.source,
            slow[i]
        );
    }
}

#[test]
fn typical_p_keeps_the_most_typical_tokens_not_the_most_likely() {
    // Distances |−ln p − H|: 0.449, 0.062, 0.755, 1.854, so the order is token 1, 0, 2, 3.
    check(&Golden {
        source: "Meister et al. 2022, 'Locally Typical Sampling', Algorithm 1 (mass 0.5): \
                 token 1 (0.3) then token 0 (0.5) reach 0.5",
        logits: p4(),
        params: SamplingParams {
            typical_p: 0.5,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::typical_p(z, 0.5, 1)),
        expected: vec![0.625, 0.375, 0.0, 0.0],
    });
    check(&Golden {
        source: "Meister et al. 2022, Algorithm 1 (mass 0.2): the most typical token alone, \
                 which is not the most likely one",
        logits: p4(),
        params: SamplingParams {
            typical_p: 0.2,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::typical_p(z, 0.2, 1)),
        expected: vec![0.0, 1.0, 0.0, 0.0],
    });
}

#[test]
fn epsilon_and_eta_cutoffs() {
    check(&Golden {
        source: "Hewitt et al. 2022, 'Truncation Sampling as Language Model Desmoothing', \
                 section 4, epsilon 0.1: P >= 0.1 is kept and renormalised by 0.95",
        logits: p4(),
        params: SamplingParams {
            epsilon_cutoff: 0.1,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::epsilon_cutoff(z, 0.1)),
        expected: vec![0.526316, 0.315789, 0.157895, 0.0],
    });
    check(&Golden {
        source: "Hewitt et al. 2022, section 5, epsilon 0.16: eta = min(0.16, 0.4 e^-H) = \
                 0.127657, so 0.15 stays (epsilon 0.16 alone would remove it)",
        logits: p4(),
        params: SamplingParams {
            eta_cutoff: 0.16,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::eta_cutoff(z, 0.16)),
        expected: vec![0.526316, 0.315789, 0.157895, 0.0],
    });
}

#[test]
fn min_tokens_to_keep_widens_top_p_and_epsilon() {
    check(&Golden {
        source: "transformers TopPLogitsWarper(top_p=0.5, min_tokens_to_keep=3): the nucleus \
                 is token 0 alone, three tokens stay",
        logits: p4(),
        params: SamplingParams {
            top_p: 0.5,
            min_tokens_to_keep: 3,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| {
            let order = nextok_spec_tests::sampling::sorted_ids(z);
            let nucleus = nextok_spec_tests::sampling::top_p(&softmax(z), &order, 0.5);
            let filtered: Vec<f64> = z
                .iter()
                .zip(&nucleus)
                .map(|(&l, &p)| if p > 0.0 { l } else { f64::NEG_INFINITY })
                .collect();
            reference::with_min_keep(z, &filtered, 3)
        }),
        expected: vec![0.526316, 0.315789, 0.157895, 0.0],
    });
    check(&Golden {
        source: "transformers EpsilonLogitsWarper(epsilon=0.4, min_tokens_to_keep=2)",
        logits: p4(),
        params: SamplingParams {
            epsilon_cutoff: 0.4,
            min_tokens_to_keep: 2,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::with_min_keep(z, &reference::epsilon_cutoff(z, 0.4), 2)),
        expected: vec![0.625, 0.375, 0.0, 0.0],
    });
}

#[test]
fn top_n_sigma_keeps_logits_within_n_deviations() {
    // Logits 3, 2, 1, 0, -4: mean 0.4, σ = √5.84 = 2.416609, so max − σ = 0.583391.
    check(&Golden {
        source: "Tang et al. 2024, 'Top-nσ', Algorithm 1 (n = 1), as llama.cpp's top_n_sigma",
        logits: vec![3.0, 2.0, 1.0, 0.0, -4.0],
        params: SamplingParams {
            top_n_sigma: 1.0,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::top_n_sigma(z, 1.0)),
        expected: vec![0.665241, 0.244728, 0.090031, 0.0, 0.0],
    });
}

#[test]
fn xtc_removes_the_top_choices_but_the_last_viable_one() {
    check(&Golden {
        source: "XTC as llama.cpp's llama_sampler_xtc_apply defines it (threshold 0.1, \
                 probability 1): 0.5, 0.3 and 0.15 reach 0.1, all but 0.15 go",
        logits: p4(),
        params: SamplingParams {
            xtc_probability: 1.0,
            xtc_threshold: 0.1,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::xtc(z, 0.1)),
        expected: vec![0.0, 0.0, 0.75, 0.25],
    });
}

#[test]
fn dry_penalises_the_token_that_would_extend_a_repetition() {
    // Text 1 2 3 4 1 2 3: the earlier "1 2 3" was followed by 4, a match of length 3, so token 4
    // loses 0.8 · 1.75^(3 − 2) = 1.4; equal logits otherwise.
    let history = [1u32, 2, 3, 4, 1, 2, 3];
    check(&Golden {
        source: "DRY as its author describes it (text-generation-webui PR 5677): penalty = \
                 multiplier · base^(match length − allowed length)",
        logits: vec![0.0; 6],
        params: SamplingParams {
            dry_multiplier: 0.8,
            dry_base: 1.75,
            dry_allowed_length: 2,
            ..Default::default()
        },
        prompt: history[..4].to_vec(),
        generated: history[4..].to_vec(),
        reference: Box::new(move |z| reference::dry(z, &history, 0.8, 1.75, 2, None, &[])),
        expected: vec![0.190600, 0.190600, 0.190600, 0.190600, 0.047001, 0.190600],
    });
    // Token 2 a sequence breaker: the match stops at it, length 1 < 2, no penalty.
    check(&Golden {
        source: "DRY (PR 5677): a sequence breaker ends the match",
        logits: vec![0.0; 6],
        params: SamplingParams {
            dry_multiplier: 0.8,
            dry_sequence_breaker_ids: vec![2],
            ..Default::default()
        },
        prompt: history[..4].to_vec(),
        generated: history[4..].to_vec(),
        reference: Box::new(move |z| reference::dry(z, &history, 0.8, 1.75, 2, None, &[2])),
        expected: vec![1.0 / 6.0; 6],
    });
}

#[test]
fn no_repeat_ngram_and_its_encoder_variant() {
    let uniform = vec![0.0; 10];
    check(&Golden {
        source: "transformers NoRepeatNGramLogitsProcessor(3): text 5 6 7 5 6, the trigram \
                 5 6 7 exists, so 7 is banned",
        logits: uniform.clone(),
        params: SamplingParams {
            no_repeat_ngram_size: 3,
            ..Default::default()
        },
        prompt: vec![5, 6, 7],
        generated: vec![5, 6],
        reference: Box::new(|z| reference::no_repeat_ngram(z, &[5, 6, 7, 5, 6], 3)),
        expected: [vec![1.0 / 9.0; 7], vec![0.0], vec![1.0 / 9.0; 2]].concat(),
    });
    check(&Golden {
        source: "transformers EncoderNoRepeatNGramLogitsProcessor(2): prompt 5 6 7, answer \
                 9 5, so 6 (after 5 in the prompt) is banned",
        logits: uniform.clone(),
        params: SamplingParams {
            encoder_no_repeat_ngram_size: 2,
            ..Default::default()
        },
        prompt: vec![5, 6, 7],
        generated: vec![9, 5],
        reference: Box::new(|z| reference::encoder_no_repeat_ngram(z, &[5, 6, 7], &[9, 5], 2)),
        expected: [vec![1.0 / 9.0; 6], vec![0.0], vec![1.0 / 9.0; 3]].concat(),
    });
}

#[test]
fn dynamic_temperature_follows_the_entropy() {
    // Logits 1, 0: P = (0.731059, 0.268941), normalised entropy 0.839942, so with T = 1 and
    // range 0.5 the temperature is 0.5 + 1.0 · 0.839942 = 1.339942.
    check(&Golden {
        source: "llama.cpp llama_sampler_temp_ext_apply (temp 1, dynatemp_range 0.5, \
                 exponent 1)",
        logits: vec![1.0, 0.0],
        params: SamplingParams {
            dynatemp_range: 0.5,
            ..Default::default()
        },
        prompt: vec![],
        generated: vec![],
        reference: Box::new(|z| reference::dynamic_temperature(z, 1.0, 0.5, 1.0)),
        expected: vec![0.678372, 0.321628],
    });
}

#[test]
fn mirostat_v1_on_a_zipf_distribution_keeps_the_papers_k() {
    // p_i ∝ 1/i² over N = 1000 tokens: the fitted exponent is exactly 2, and with tau = 3
    // (mu = 6) k = (1 · 2^6 / (1 − 1000^-1))^(1/2) = 8.004, so the top 8 stay.
    let n = 1000;
    let logits: Vec<f64> = (1..=n).map(|i| -2.0 * (i as f64).ln()).collect();
    let (r, k) = reference::mirostat_v1(&logits, 6.0, n);
    assert!((k.unwrap() - 8.004003).abs() < 1e-5, "k = {k:?}");
    let params = SamplingParams {
        mirostat: 1,
        mirostat_tau: 3.0,
        ..Default::default()
    };
    let fast = Trace::new(&params, &f32s(&logits), &Context::default())
        .unwrap()
        .final_probs;
    let slow = softmax(&r);
    let kept = fast.iter().filter(|&&p| p > 0.0).count();
    assert_eq!(kept, 8, "Basu et al. 2021, Algorithm 1");
    assert_eq!(slow.iter().filter(|&&p| p > 0.0).count(), 8);
    // Σ_{i<=8} 1/i² = 1.527422, so p_1 = 0.654698 and p_8 = 0.010230.
    for (i, e) in [(0, 0.654698), (7, 0.010230)] {
        assert!(
            (fast[i] as f64 - e).abs() < TOLERANCE,
            "fast p[{i}] = {}",
            fast[i]
        );
        assert!(
            (slow[i] - e).abs() < TOLERANCE,
            "reference p[{i}] = {}",
            slow[i]
        );
    }
}

#[test]
fn mirostat_v2_updates_mu_from_the_chosen_token() {
    // tau = 1.5, so mu = 3 at step 0: tokens with −log2 p <= 3 (p >= 0.125) stay: 0, 1, 2,
    // renormalised by 0.95. Choosing token 2 (p = 0.157895, surprise 2.662965) with eta = 1 gives
    // mu = 3 − (2.662965 − 1.5) = 1.837035: then p >= 0.279896 stays, tokens 0 and 1.
    let stage = Mirostat::new(MirostatVersion::V2, 1.5, 1.0).unwrap();
    let logits = f32s(&p4());
    let mut c = nextok_sampling::Candidates::new();
    let source = "Basu et al. 2021, Algorithm 2, as llama.cpp's mirostat_v2";
    for (generated, expected, mu) in [
        (vec![], vec![0.526316, 0.315789, 0.157895, 0.0], 3.0),
        (vec![2u32], vec![0.625, 0.375, 0.0, 0.0], 1.837035),
    ] {
        c.fill(&logits, None).unwrap();
        stage.apply(&mut c, &Context::new(&generated)).unwrap();
        let fast = c.dense_probs().unwrap();
        let slow = softmax(&reference::mirostat_v2(&p4(), mu));
        for i in 0..4 {
            assert!(
                (fast[i] as f64 - expected[i]).abs() < TOLERANCE,
                "{source}: fast {fast:?}"
            );
            assert!(
                (slow[i] - expected[i]).abs() < TOLERANCE,
                "{source}: reference {slow:?}"
            );
        }
    }
    let mu = reference::mirostat_update(3.0, 0.15 / 0.95, 1.5, 1.0);
    assert!((mu - 1.837035).abs() < 1e-6, "{source}: mu = {mu}");
    // The same step again (the same `generated`) gives the same truncation: nothing is learnt
    // twice.
    c.fill(&logits, None).unwrap();
    stage.apply(&mut c, &Context::new(&[2])).unwrap();
    assert_eq!(c.len(), 2);
    // Through `Chain` too (the stage is a `LogitsProcessor` like any other).
    let chain = Chain::new().push(Mirostat::new(MirostatVersion::V2, 1.5, 1.0).unwrap());
    c.fill(&logits, None).unwrap();
    chain.apply(&mut c, &Context::default()).unwrap();
    assert_eq!(c.len(), 3);
}
