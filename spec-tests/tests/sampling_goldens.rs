//! Golden tests: every worked example of the specification's "Choosing the next token" and
//! "Constrained decoding" sections, and the "amo" step of "Generation step by step".
//!
//! Each case names its section and table. The specification prints rounded numbers, so each
//! case computes from the printed inputs and allows half a unit in the last printed digit
//! (0.772 -> 5e-4). Where a printed number was itself computed from rounded intermediates, the
//! tolerance is wider and the comment says why. Each case is checked against both the reference
//! (`nextok_spec_tests::sampling`) and the fast crate (`nextok_sampling`).

use nextok_sampling::{Context, Sampler, SamplingParams, Trace};
use nextok_spec_tests::sampling as reference;

/// CAT, DOG, IS, LOVELY: the logits after the prompt YOUR CAT IS A LOVELY.
const CAT_DOG: [f64; 4] = [6.2, 4.9, 2.1, 1.0];
const CAT: usize = 0;

/// Tolerance for numbers the specification computed from its own rounded numbers: it divides the
/// rounded probabilities (0.772 / 0.983 = 0.7853) where the logits give 0.7858. Each printed input
/// is off by up to 5e-4, which moves such a quotient by up to about 1e-3, so these values allow
/// 1e-3 instead of half their last digit.
const FROM_ROUNDED: f64 = 1e-3;
const DOG: usize = 1;

struct Golden {
    source: &'static str,
    logits: Vec<f64>,
    params: SamplingParams,
    /// Expected final probabilities of the first tokens (the rest must be 0 where listed).
    expected: Vec<f64>,
    tolerance: f64,
}

fn f32s(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}

fn ln_all(p: &[f64]) -> Vec<f64> {
    p.iter().map(|x| x.ln()).collect()
}

fn to_reference(p: &SamplingParams) -> reference::Params {
    reference::Params {
        temperature: p.temperature as f64,
        top_k: p.top_k,
        top_p: p.top_p as f64,
        min_p: p.min_p as f64,
        ..Default::default()
    }
}

fn fast_final(params: &SamplingParams, logits: &[f64]) -> Vec<f32> {
    Trace::new(params, &f32s(logits), &Context::default())
        .unwrap()
        .final_probs
}

fn assert_close(source: &str, what: &str, got: &[f64], expected: &[f64], tolerance: f64) {
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= tolerance,
            "{source} ({what}): token {i} is {g}, the specification prints {e} (tolerance {tolerance})"
        );
    }
}

fn check(cases: &[Golden]) {
    for case in cases {
        let r = reference::final_distribution(&case.logits, &to_reference(&case.params), &[], &[]);
        assert_close(case.source, "reference", &r, &case.expected, case.tolerance);
        let f: Vec<f64> = fast_final(&case.params, &case.logits)
            .iter()
            .map(|&x| x as f64)
            .collect();
        assert_close(
            case.source,
            "nextok-sampling",
            &f,
            &case.expected,
            case.tolerance,
        );
    }
}

fn temp(t: f32) -> SamplingParams {
    SamplingParams {
        temperature: t,
        ..Default::default()
    }
}

fn top_k(k: usize) -> SamplingParams {
    SamplingParams {
        top_k: Some(k),
        ..Default::default()
    }
}

fn top_p(p: f32) -> SamplingParams {
    SamplingParams {
        top_p: p,
        ..Default::default()
    }
}

#[test]
fn softmax_of_the_cat_dog_logits() {
    check(&[Golden {
        source: "Choosing the next token, table Token/Logit/Probability",
        logits: CAT_DOG.to_vec(),
        params: SamplingParams::default(),
        expected: vec![0.772, 0.211, 0.013, 0.004],
        tolerance: 5e-4,
    }]);
}

#[test]
fn temperature_worked_example_at_t_2() {
    let source = "Sampling and temperature, worked example T = 2";
    // Step 1: divide each logit by 2 (printed to 2 decimals at most: 3.1, 2.45, 1.05, 0.5).
    let divided = reference::divide_by_temperature(&CAT_DOG, 2.0);
    assert_close(source, "step 1", &divided, &[3.1, 2.45, 1.05, 0.5], 5e-3);
    // Step 2: e to each, and their sum.
    let exps: Vec<f64> = divided.iter().map(|z| z.exp()).collect();
    assert_close(source, "step 2", &exps, &[22.20, 11.59, 2.86, 1.65], 5e-3);
    let sum: f64 = exps.iter().sum();
    assert!((sum - 38.29).abs() <= 5e-3, "{source}: sum {sum}");
    // Step 3: divide each by the sum.
    check(&[Golden {
        source,
        logits: CAT_DOG.to_vec(),
        params: temp(2.0),
        expected: vec![0.580, 0.303, 0.075, 0.043],
        tolerance: 5e-4,
    }]);
    // At T = 0.5 the logits double (12.4, 9.8, 4.2, 2.0) and the CAT-DOG gap goes 1.3 -> 2.6.
    let half = reference::divide_by_temperature(&CAT_DOG, 0.5);
    assert_close(source, "T = 0.5", &half, &[12.4, 9.8, 4.2, 2.0], 5e-2);
    assert!(((half[CAT] - half[DOG]) - 2.6).abs() < 5e-2);
}

#[test]
fn temperature_table_at_three_temperatures() {
    let source = "Sampling and temperature, table 'The same logits at three temperatures'";
    check(&[
        // Each value printed to its own precision; the tightest tolerance that fits all four is
        // half the last digit of the smallest, applied per column below.
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: temp(0.5),
            expected: vec![0.931, 0.069],
            tolerance: 5e-4,
        },
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: temp(1.0),
            expected: vec![0.772, 0.211, 0.013, 0.004],
            tolerance: 5e-4,
        },
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: temp(2.0),
            expected: vec![0.580, 0.303, 0.075, 0.043],
            tolerance: 5e-4,
        },
    ]);
    // The two small T = 0.5 values are printed with one significant digit: 0.0003 and 0.00003.
    let p = fast_final(&temp(0.5), &CAT_DOG);
    assert!(
        (p[2] as f64 - 0.0003).abs() <= 5e-5,
        "{source}: IS {}",
        p[2]
    );
    assert!(
        (p[3] as f64 - 0.00003).abs() <= 5e-6,
        "{source}: LOVELY {}",
        p[3]
    );
    // "IS comes up about 3 times in 10,000".
    assert!((p[2] as f64 * 10_000.0 - 3.0).abs() <= 0.5);
    // "LOVELY becomes about ten times more likely (0.004 -> 0.043)".
    let t1 = fast_final(&temp(1.0), &CAT_DOG);
    let t2 = fast_final(&temp(2.0), &CAT_DOG);
    assert!((t2[3] / t1[3] - 10.0).abs() < 1.5);
}

#[test]
fn top_k_table() {
    let source = "Top-k sampling, table k = 1, 2, 3";
    check(&[
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: top_k(1),
            expected: vec![1.0, 0.0, 0.0, 0.0],
            tolerance: 0.0,
        },
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: top_k(2),
            expected: vec![0.785, 0.215, 0.0, 0.0],
            tolerance: FROM_ROUNDED,
        },
        // 0.772 / 0.996 = 0.7751 from the rounded probabilities; 0.7758 from the logits.
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: top_k(3),
            expected: vec![0.775, 0.212, 0.013, 0.0],
            tolerance: FROM_ROUNDED,
        },
    ]);
    // Worked example k = 2, step 2: the kept probabilities add up to 0.983.
    let p = reference::softmax(&CAT_DOG);
    assert!((p[CAT] + p[DOG] - 0.983).abs() <= 5e-4);
}

#[test]
fn top_p_table() {
    let source = "Top-p (nucleus) sampling, table 'Different values of p'";
    check(&[
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: top_p(0.7),
            expected: vec![1.0, 0.0, 0.0, 0.0],
            tolerance: 0.0,
        },
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: top_p(0.9),
            expected: vec![0.785, 0.215, 0.0, 0.0],
            tolerance: FROM_ROUNDED,
        },
        Golden {
            source,
            logits: CAT_DOG.to_vec(),
            params: top_p(0.99),
            expected: vec![0.775, 0.212, 0.013, 0.0],
            tolerance: FROM_ROUNDED,
        },
    ]);
    // The running total at the stop and the nucleus size.
    let probs = reference::softmax(&CAT_DOG);
    let order = reference::sorted_ids(&CAT_DOG);
    for (p, total, size) in [(0.7, 0.772, 1), (0.9, 0.983, 2), (0.99, 0.996, 3)] {
        let (_, nucleus, running) = reference::top_p_nucleus(&probs, &order, p);
        assert!(
            (running - total).abs() <= 5e-4,
            "{source}: p = {p}: {running}"
        );
        assert_eq!(nucleus.len(), size, "{source}: p = {p}");
    }
}

/// "My favourite colour is": blue 0.20, green 0.18, red 0.17, purple 0.15, yellow 0.12, black
/// 0.10, and the remaining 0.08 spread over other tokens (here eight tokens of 0.01).
fn colours() -> Vec<f64> {
    let mut p = vec![0.20, 0.18, 0.17, 0.15, 0.12, 0.10];
    p.extend([0.01; 8]);
    ln_all(&p)
}

/// "The capital of France is": Paris 0.97, the remaining 0.03 spread over thousands of tokens
/// (here 3,000 tokens of 0.00001).
fn france() -> Vec<f64> {
    let mut p = vec![0.97];
    p.extend(vec![0.00001; 3000]);
    ln_all(&p)
}

fn kept(probs: &[f32]) -> usize {
    probs.iter().filter(|&&p| p > 0.0).count()
}

#[test]
fn colours_and_capital_of_france_with_top_k() {
    let source = "Top-k sampling, table 'The capital of France' / 'My favourite colour'";
    check(&[Golden {
        source,
        logits: colours(),
        params: top_k(2),
        expected: vec![0.526, 0.474, 0.0],
        tolerance: 5e-4,
    }]);
    // k = 2 keeps Paris and one unlikely token; k = 50 keeps Paris and 49 unlikely tokens.
    let k2 = fast_final(&top_k(2), &france());
    assert_eq!(kept(&k2), 2, "{source}");
    assert!(k2[0] > 0.99);
    assert_eq!(kept(&fast_final(&top_k(50), &france())), 50, "{source}");
    // k = 50 keeps all six colours.
    assert!(fast_final(&top_k(50), &colours())[..6]
        .iter()
        .all(|&p| p > 0.0));
}

#[test]
fn colours_and_capital_of_france_with_top_p() {
    let source = "Top-p (nucleus) sampling, table 'How it fixes top-k's weakness', p = 0.9";
    check(&[Golden {
        source,
        logits: colours(),
        params: top_p(0.9),
        expected: vec![0.217, 0.196, 0.185, 0.163, 0.130, 0.109, 0.0],
        tolerance: 5e-4,
    }]);
    let colours_p = fast_final(&top_p(0.9), &colours());
    assert_eq!(kept(&colours_p), 6, "{source}: all six colours");
    let france_p = fast_final(&top_p(0.9), &france());
    assert_eq!(kept(&france_p), 1, "{source}: Paris alone");
    // Running totals: blue 0.20 -> green 0.38 -> red 0.55 -> purple 0.70 -> yellow 0.82 ->
    // black 0.92.
    let probs: Vec<f64> = colours().iter().map(|z| z.exp()).collect();
    let mut running = 0.0;
    for (i, want) in [0.20, 0.38, 0.55, 0.70, 0.82, 0.92].iter().enumerate() {
        running += probs[i];
        assert!(
            (running - want).abs() <= 5e-3,
            "{source}: running total {i}"
        );
    }
}

#[test]
fn combined_pipeline_at_t_2_k_3_p_0_9() {
    let source = "How the rules combine, worked example T = 2, k = 3, p = 0.9";
    let params = SamplingParams {
        temperature: 2.0,
        top_k: Some(3),
        top_p: 0.9,
        ..Default::default()
    };
    let trace = Trace::new(&params, &f32s(&CAT_DOG), &Context::default()).unwrap();
    let names: Vec<&str> = trace.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["softmax", "temperature", "top_k", "top_p"]);
    let rows: [(&str, &[f64], f64); 3] = [
        ("temperature", &[0.580, 0.303, 0.075, 0.043], 5e-4),
        // 0.580 / 0.958 = 0.6054 from the rounded row above; 0.6058 from the logits.
        ("top_k", &[0.605, 0.316, 0.078, 0.0], FROM_ROUNDED),
        ("top_p", &[0.657, 0.343, 0.0, 0.0], 5e-4),
    ];
    for (name, expected, tol) in rows {
        let stage = trace.stages.iter().find(|s| s.name == name).unwrap();
        let got: Vec<f64> = stage.probs.iter().map(|&x| x as f64).collect();
        assert_close(source, name, &got, expected, tol);
        let reference_stage = reference::pipeline(&CAT_DOG, &to_reference(&params), &[], &[])
            .into_iter()
            .find(|(n, _)| {
                *n == if name == "temperature" {
                    "softmax"
                } else {
                    name
                }
            })
            .unwrap()
            .1;
        assert_close(source, name, &reference_stage, expected, tol);
    }
    // "divide by 0.580 + 0.303 + 0.075 = 0.958": a sum of three rounded values, each off by up
    // to 5e-4, so 1.5e-3 (the logits give 0.9569).
    let t2 = reference::softmax(&reference::divide_by_temperature(&CAT_DOG, 2.0));
    assert!((t2[0] + t2[1] + t2[2] - 0.958).abs() <= 1.5e-3);
    // "running total 0.605, then 0.921": a sum of two values that are themselves derived (each
    // within FROM_ROUNDED), so 2e-3 (the logits give 0.9221).
    let k3 = reference::top_k(&t2, &[0, 1, 2, 3], 3);
    assert!((k3[0] + k3[1] - 0.921).abs() <= 2.0 * FROM_ROUNDED);
    assert_close(
        source,
        "final",
        &trace
            .final_probs
            .iter()
            .map(|&x| x as f64)
            .collect::<Vec<_>>(),
        &[0.657, 0.343, 0.0, 0.0],
        5e-4,
    );
}

#[test]
fn combined_pipeline_at_t_1() {
    let source = "How the rules combine, 'The same settings with T = 1'";
    let params = SamplingParams {
        temperature: 1.0,
        top_k: Some(3),
        top_p: 0.9,
        ..Default::default()
    };
    check(&[Golden {
        source,
        logits: CAT_DOG.to_vec(),
        params: params.clone(),
        expected: vec![0.785, 0.215, 0.0, 0.0],
        tolerance: FROM_ROUNDED,
    }]);
    // Top-k 3 gives 0.775, 0.212, 0.013 (tolerance as in `top_k_table`); top-p stops at 0.987.
    let trace = Trace::new(&params, &f32s(&CAT_DOG), &Context::default()).unwrap();
    let k = &trace
        .stages
        .iter()
        .find(|s| s.name == "top_k")
        .unwrap()
        .probs;
    let k: Vec<f64> = k.iter().map(|&x| x as f64).collect();
    assert_close(
        source,
        "top_k",
        &k,
        &[0.775, 0.212, 0.013, 0.0],
        FROM_ROUNDED,
    );
    assert!((k[0] + k[1] - 0.987).abs() <= 5e-4);
    // DOG rises from 0.215 to 0.343 between T = 1 and T = 2.
    let t2 = fast_final(
        &SamplingParams {
            temperature: 2.0,
            ..params
        },
        &CAT_DOG,
    );
    assert!((t2[DOG] as f64 - 0.343).abs() < 5e-4);
    assert!((trace.final_probs[DOG] as f64 - 0.215).abs() < FROM_ROUNDED);
}

/// 99.9th percentile of the chi-square distribution with `df` degrees of freedom.
fn chi_square_999(df: usize) -> f64 {
    [10.828, 13.816, 16.266][df - 1]
}

#[test]
fn sampling_frequencies_match_the_probabilities() {
    let source = "Sampling and temperature: 'about 772 CAT, 211 DOG, 13 IS and 4 LOVELY' per 1,000";
    let n = 100_000;
    let mut sampler = Sampler::new(&SamplingParams {
        seed: Some(2024),
        ..Default::default()
    })
    .unwrap();
    let logits = f32s(&CAT_DOG);
    let mut counts = [0u64; 4];
    for _ in 0..n {
        counts[sampler.sample(&logits, &Context::default()).unwrap().token as usize] += 1;
    }
    let probs = reference::softmax(&CAT_DOG);
    let stat = reference::chi_square(&counts, &probs);
    assert!(
        stat < chi_square_999(3),
        "{source}: chi-square {stat}, counts {counts:?}"
    );
    // Per 1,000 runs, within rounding of the printed counts.
    for (c, want) in counts.iter().zip([772.0, 211.0, 13.0, 4.0]) {
        let per_thousand = *c as f64 * 1000.0 / n as f64;
        assert!(
            (per_thousand - want).abs() < 3.0,
            "{source}: {per_thousand} vs {want}"
        );
    }

    // The combined pipeline samples CAT 0.657 and DOG 0.343 and never IS or LOVELY.
    let source = "How the rules combine: 'samples CAT with probability 0.657 and DOG 0.343'";
    let mut sampler = Sampler::new(&SamplingParams {
        temperature: 2.0,
        top_k: Some(3),
        top_p: 0.9,
        seed: Some(7),
        ..Default::default()
    })
    .unwrap();
    let mut counts = [0u64; 4];
    for _ in 0..n {
        counts[sampler.sample(&logits, &Context::default()).unwrap().token as usize] += 1;
    }
    assert_eq!(counts[2] + counts[3], 0, "{source}");
    let expected = reference::final_distribution(
        &CAT_DOG,
        &reference::Params {
            temperature: 2.0,
            top_k: Some(3),
            top_p: 0.9,
            ..Default::default()
        },
        &[],
        &[],
    );
    let stat = reference::chi_square(&counts[..2], &expected[..2]);
    assert!(
        stat < chi_square_999(1),
        "{source}: chi-square {stat}, counts {counts:?}"
    );
}

#[test]
fn greedy_picks_cat_every_time() {
    let source = "Greedy decoding: 'Here it picks CAT (0.772), every time'";
    let mut s = Sampler::new(&SamplingParams::greedy()).unwrap();
    for seed in 0..20 {
        s.reseed(seed);
        let out = s.sample(&f32s(&CAT_DOG), &Context::default()).unwrap();
        assert_eq!(out.token as usize, CAT, "{source}");
        assert!((out.raw_logprob.exp() - 0.772).abs() <= 5e-4, "{source}");
    }
    assert_eq!(reference::greedy(&CAT_DOG), CAT);
}

/// FRAUD 0.55, OK 0.30, I 0.08, The 0.05, all other tokens 0.02 (here two tokens of 0.01).
const FRAUD_PROBS: [f64; 6] = [0.55, 0.30, 0.08, 0.05, 0.01, 0.01];

#[test]
fn fraud_label_mask() {
    let source = "Constrained decoding, worked example 'the fraud label'";
    let logits = ln_all(&FRAUD_PROBS);
    let allowed = [true, true, false, false, false, false];
    // Reference: forbidden logits become -inf, softmax shares the mass.
    let r = reference::softmax(&reference::mask_logits(&logits, &allowed));
    assert_close(
        source,
        "reference",
        &r,
        &[0.647, 0.353, 0.0, 0.0, 0.0, 0.0],
        5e-4,
    );
    assert!(
        r[2..].iter().all(|&p| p == 0.0),
        "{source}: masked tokens get exactly 0"
    );
    // Fast: the constraint bitset (bits 0 and 1).
    let mask = [0b11u64];
    let ctx = Context {
        allowed: Some(&mask),
        ..Default::default()
    };
    let trace = Trace::new(&SamplingParams::default(), &f32s(&logits), &ctx).unwrap();
    let f: Vec<f64> = trace.final_probs.iter().map(|&x| x as f64).collect();
    assert_close(
        source,
        "nextok-sampling",
        &f,
        &[0.647, 0.353, 0.0, 0.0, 0.0, 0.0],
        5e-4,
    );
    assert!(trace.final_probs[2..].iter().all(|&p| p == 0.0));
    // "with greedy decoding it is FRAUD".
    let out = Sampler::new(&SamplingParams::greedy())
        .unwrap()
        .sample(&f32s(&logits), &ctx)
        .unwrap();
    assert_eq!(out.token, 0, "{source}");

    // "with a threshold of 0.6, this transaction would pass without constrained decoding (0.55)
    // but be flagged with it (0.647)": the score is the probability of FRAUD.
    let mut sampler = Sampler::new(&SamplingParams {
        top_logprobs: 1,
        ..Default::default()
    })
    .unwrap();
    let constrained = sampler.sample(&f32s(&logits), &ctx).unwrap().top[0];
    assert_eq!(constrained.token, 0);
    let unconstrained_score = constrained.raw_logprob.exp() as f64;
    let constrained_score = constrained.logprob.exp() as f64;
    assert!((unconstrained_score - 0.55).abs() <= 5e-3, "{source}");
    assert!((constrained_score - 0.647).abs() <= 5e-4, "{source}");
    let threshold = 0.6;
    assert!(unconstrained_score < threshold && constrained_score >= threshold);
}

#[test]
fn the_amo_step() {
    let source = "Generation step by step, 'One step in detail' (step 2: amo 0.81)";
    // amo 0.81, adoro 0.12, voglio 0.04, all other tokens together 0.03 (here three of 0.01).
    let probs = [0.81, 0.12, 0.04, 0.01, 0.01, 0.01];
    let logits = ln_all(&probs);
    let r = reference::softmax(&logits);
    assert_close(source, "reference", &r, &probs, 5e-3);
    let out = Sampler::new(&SamplingParams::greedy())
        .unwrap()
        .sample(&f32s(&logits), &Context::default())
        .unwrap();
    assert_eq!(out.token, 0, "{source}: greedy picks amo");
    assert!((out.raw_logprob.exp() as f64 - 0.81).abs() <= 5e-3);
    assert_eq!(reference::greedy(&logits), 0);
}
