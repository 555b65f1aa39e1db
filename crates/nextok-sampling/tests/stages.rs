//! Behaviour of each stage, the sampler and beam search on small hand-checked inputs.

use nextok_sampling::*;

const NEG: f32 = f32::NEG_INFINITY;

fn final_probs(params: &SamplingParams, logits: &[f32], ctx: &Context<'_>) -> Vec<f32> {
    Trace::new(params, logits, ctx).unwrap().final_probs
}

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
}

#[test]
fn invalid_params_are_typed_errors() {
    let bad = |p: SamplingParams, name: &str| match p.validate() {
        Err(Error::InvalidParam { name: n, .. }) => assert_eq!(n, name),
        other => panic!("{name}: expected InvalidParam, got {other:?}"),
    };
    for t in [-0.1, f32::NAN, f32::INFINITY] {
        bad(
            SamplingParams {
                temperature: t,
                ..Default::default()
            },
            "temperature",
        );
    }
    bad(
        SamplingParams {
            top_k: Some(0),
            ..Default::default()
        },
        "top_k",
    );
    for p in [0.0, -0.5, 1.01, f32::NAN] {
        bad(
            SamplingParams {
                top_p: p,
                ..Default::default()
            },
            "top_p",
        );
    }
    bad(
        SamplingParams {
            min_p: 1.5,
            ..Default::default()
        },
        "min_p",
    );
    bad(
        SamplingParams {
            repetition_penalty: 0.0,
            ..Default::default()
        },
        "repetition_penalty",
    );
    bad(
        SamplingParams {
            presence_penalty: f32::NAN,
            ..Default::default()
        },
        "presence_penalty",
    );
    let mut p = SamplingParams::default();
    p.logit_bias.insert(3, f32::INFINITY);
    assert_eq!(
        p.validate(),
        Err(Error::InvalidLogitBias {
            token: 3,
            value: f32::INFINITY
        })
    );
    let p = SamplingParams {
        order: vec![StageKind::TopK; 2],
        ..Default::default()
    };
    assert_eq!(
        p.validate(),
        Err(Error::DuplicateStage {
            stage: StageKind::TopK
        })
    );
    let p = SamplingParams {
        order: vec![StageKind::TopK],
        ..Default::default()
    };
    assert_eq!(
        p.validate(),
        Err(Error::MissingStage {
            stage: StageKind::Penalties
        })
    );
    assert!(Sampler::new(&SamplingParams {
        top_k: Some(0),
        ..Default::default()
    })
    .is_err());
}

#[test]
fn bad_logits_are_typed_errors() {
    let mut s = Sampler::new(&SamplingParams::default()).unwrap();
    let ctx = Context::default();
    assert!(matches!(
        s.sample(&[1.0, f32::NAN], &ctx),
        Err(Error::InvalidLogit { index: 1, .. })
    ));
    assert!(matches!(
        s.sample(&[f32::INFINITY], &ctx),
        Err(Error::InvalidLogit { index: 0, .. })
    ));
    assert_eq!(
        s.sample(&[NEG, NEG], &ctx),
        Err(Error::NoCandidates { vocab: 2 })
    );
    assert_eq!(s.sample(&[], &ctx), Err(Error::NoCandidates { vocab: 0 }));
    let mut g = Sampler::new(&SamplingParams::greedy()).unwrap();
    assert!(matches!(
        g.sample(&[f32::NAN], &ctx),
        Err(Error::InvalidLogit { .. })
    ));
}

#[test]
fn greedy_ties_break_toward_the_lowest_id_on_every_path() {
    let logits = [1.0, 3.0, 2.0, 3.0, 3.0];
    let ctx = Context::default();
    for params in [
        SamplingParams::greedy(),
        SamplingParams {
            top_k: Some(1),
            ..Default::default()
        },
        // Temperature 0 with another stage takes the chain path rather than the one-pass path.
        SamplingParams {
            temperature: 0.0,
            min_p: 0.1,
            ..Default::default()
        },
    ] {
        let mut s = Sampler::new(&params).unwrap();
        for _ in 0..5 {
            assert_eq!(s.sample(&logits, &ctx).unwrap().token, 1, "{params:?}");
        }
    }
}

#[test]
fn temperature_zero_is_greedy_with_log_probability_zero() {
    let logits = [0.5, 2.0, 1.0];
    let out = Sampler::new(&SamplingParams::greedy())
        .unwrap()
        .sample(&logits, &Context::default())
        .unwrap();
    assert_eq!(out.token, 1);
    assert_eq!(out.logprob, 0.0);
    let want = 2.0 - (0.5f64.exp() + 2.0f64.exp() + 1.0f64.exp()).ln();
    assert!((out.raw_logprob as f64 - want).abs() < 1e-6);
}

#[test]
fn top_k_at_least_the_vocabulary_keeps_everything() {
    let logits = [0.3, -1.0, 2.0];
    let all = softmax(&logits).unwrap();
    for k in [3, 4, 1000] {
        let p = SamplingParams {
            top_k: Some(k),
            ..Default::default()
        };
        assert!(close(
            &final_probs(&p, &logits, &Context::default()),
            &all,
            1e-6
        ));
    }
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative_logits_once() {
    let logits = [2.0, -1.0, 0.5, 0.0];
    let params = SamplingParams {
        repetition_penalty: 2.0,
        ..Default::default()
    };
    // Token 0 appears three times, token 1 once in the prompt: each is penalised once.
    let ctx = Context {
        prompt: &[1, 0],
        generated: &[0, 0],
        allowed: None,
    };
    let got = final_probs(&params, &logits, &ctx);
    let want = softmax(&[1.0, -2.0, 0.5, 0.0]).unwrap();
    assert!(close(&got, &want, 1e-6), "{got:?} vs {want:?}");
}

#[test]
fn presence_and_frequency_penalties_follow_openai() {
    let logits = [1.0, 1.0, 1.0];
    let params = SamplingParams {
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        ..Default::default()
    };
    // Token 0 generated twice: 1 - (0.5 + 2 * 0.25) = 0. Token 2 once: 1 - 0.75 = 0.25. The
    // prompt does not count.
    let ctx = Context {
        prompt: &[1, 1],
        generated: &[0, 2, 0],
        allowed: None,
    };
    let got = final_probs(&params, &logits, &ctx);
    let want = softmax(&[0.0, 1.0, 0.25]).unwrap();
    assert!(close(&got, &want, 1e-6), "{got:?} vs {want:?}");
}

#[test]
fn logit_bias_adds_and_checks_the_token_range() {
    let mut params = SamplingParams::default();
    params.logit_bias.insert(2, 3.0);
    let got = final_probs(&params, &[1.0, 0.0, -1.0], &Context::default());
    assert!(close(&got, &softmax(&[1.0, 0.0, 2.0]).unwrap(), 1e-6));
    params.logit_bias.insert(9, 1.0);
    let err = Trace::new(&params, &[1.0, 0.0, -1.0], &Context::default()).unwrap_err();
    assert_eq!(
        err,
        Error::TokenOutOfRange {
            field: "logit_bias",
            token: 9,
            vocab: 3
        }
    );
    let ctx = Context::new(&[7]);
    let p = SamplingParams {
        frequency_penalty: 1.0,
        ..Default::default()
    };
    assert!(matches!(
        Trace::new(&p, &[0.0; 3], &ctx),
        Err(Error::TokenOutOfRange {
            field: "generated",
            ..
        })
    ));
}

#[test]
fn allowed_banned_and_min_tokens() {
    let logits = [3.0, 2.0, 1.0, 0.0];
    let p = SamplingParams {
        allowed_token_ids: Some(vec![3, 1]),
        ..Default::default()
    };
    let got = final_probs(&p, &logits, &Context::default());
    let e = (-2.0f32).exp();
    assert!(close(
        &got,
        &[0.0, 1.0 / (1.0 + e), 0.0, e / (1.0 + e)],
        1e-6
    ));

    let p = SamplingParams {
        banned_token_ids: vec![0],
        ..SamplingParams::greedy()
    };
    assert_eq!(
        Sampler::new(&p)
            .unwrap()
            .sample(&logits, &Context::default())
            .unwrap()
            .token,
        1
    );

    let p = SamplingParams {
        min_tokens: 2,
        end_token_ids: vec![0],
        ..SamplingParams::greedy()
    };
    let mut s = Sampler::new(&p).unwrap();
    assert_eq!(
        s.sample(&logits, &Context::new(&[5, 5][..1]))
            .unwrap()
            .token,
        1
    );
    assert_eq!(s.sample(&logits, &Context::new(&[1, 1])).unwrap().token, 0);

    let p = SamplingParams {
        allowed_token_ids: Some(vec![]),
        ..Default::default()
    };
    assert_eq!(
        Sampler::new(&p)
            .unwrap()
            .sample(&logits, &Context::default()),
        Err(Error::NoCandidates { vocab: 4 })
    );
}

#[test]
fn the_constraint_bitset_masks_before_the_chain() {
    // Tokens 1 and 65 allowed, in a vocabulary of 70.
    let mut logits = vec![0.0f32; 70];
    logits[0] = 10.0;
    logits[65] = 1.0;
    let mask = [1u64 << 1, 1u64 << 1];
    let ctx = Context {
        allowed: Some(&mask),
        ..Default::default()
    };
    for params in [SamplingParams::greedy(), SamplingParams::default()] {
        let mut s = Sampler::new(&params).unwrap();
        for _ in 0..50 {
            let t = s.sample(&logits, &ctx).unwrap().token;
            assert!(t == 1 || t == 65, "{t}");
        }
    }
    let trace = Trace::new(&SamplingParams::default(), &logits, &ctx).unwrap();
    assert_eq!(trace.stages[1].name, "mask");
    let e = 1.0f32.exp();
    assert!((trace.final_probs[65] - e / (1.0 + e)).abs() < 1e-6);
    let short = [u64::MAX];
    let ctx = Context {
        allowed: Some(&short),
        ..Default::default()
    };
    let mut s = Sampler::new(&SamplingParams::greedy()).unwrap();
    assert_eq!(
        s.sample(&logits, &ctx),
        Err(Error::MaskTooShort {
            words: 1,
            vocab: 70
        })
    );
    let none = [0u64, 0];
    let ctx = Context {
        allowed: Some(&none),
        ..Default::default()
    };
    assert_eq!(
        s.sample(&logits, &ctx),
        Err(Error::NoCandidates { vocab: 70 })
    );
}

#[test]
fn same_seed_same_tokens_and_different_seeds_differ() {
    let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
    let run = |seed| {
        let mut s = Sampler::new(&SamplingParams {
            seed: Some(seed),
            ..Default::default()
        })
        .unwrap();
        (0..64)
            .map(|_| s.sample(&logits, &Context::default()).unwrap().token)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn top_logprobs_are_the_raw_most_likely_tokens() {
    let logits = [0.0, 3.0, 1.0, 3.0, 2.0];
    let params = SamplingParams {
        top_k: Some(2),
        top_logprobs: 3,
        ..Default::default()
    };
    let out = Sampler::new(&params)
        .unwrap()
        .sample(&logits, &Context::default())
        .unwrap();
    let lp = log_softmax(&logits).unwrap();
    let ids: Vec<u32> = out.top.iter().map(|t| t.token).collect();
    assert_eq!(ids, [1, 3, 4]);
    for t in &out.top {
        assert!((t.raw_logprob - lp[t.token as usize]).abs() < 1e-6);
    }
    // Top-k 2 keeps tokens 1 and 3 at 1/2 each; token 4 is out.
    assert!((out.top[0].logprob - 0.5f32.ln()).abs() < 1e-6);
    assert_eq!(out.top[2].logprob, NEG);
    assert!((out.logprob - 0.5f32.ln()).abs() < 1e-6);
}

#[test]
fn the_order_is_configurable() {
    // Top-p 0.5 then temperature 10 keeps only CAT; temperature first flattens enough that
    // top-p 0.5 needs two tokens.
    let logits = [6.2, 4.9, 2.1, 1.0];
    let mut p = SamplingParams {
        temperature: 10.0,
        top_p: 0.5,
        ..Default::default()
    };
    let default_order = final_probs(&p, &logits, &Context::default());
    assert!(default_order[1] > 0.0);
    p.order = vec![
        StageKind::TopP,
        StageKind::Penalties,
        StageKind::LogitBias,
        StageKind::Temperature,
        StageKind::TopK,
        StageKind::MinP,
    ];
    assert_eq!(
        final_probs(&p, &logits, &Context::default()),
        vec![1.0, 0.0, 0.0, 0.0]
    );
}

#[test]
fn min_p_keeps_tokens_within_a_factor_of_the_top() {
    let probs = [0.5f32, 0.3, 0.1, 0.06, 0.04];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    let p = SamplingParams {
        min_p: 0.15,
        ..Default::default()
    };
    let got = final_probs(&p, &logits, &Context::default());
    // Threshold 0.15 * 0.5 = 0.075: tokens 0, 1 and 2 stay, renormalised by 0.9.
    assert!(
        close(&got, &[0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9, 0.0, 0.0], 1e-5),
        "{got:?}"
    );
}

#[test]
fn extreme_penalties_never_produce_nan() {
    let logits = [3e38, -3e38, 0.0];
    let mut p = SamplingParams {
        repetition_penalty: 1e-3,
        ..Default::default()
    };
    p.logit_bias.insert(0, 3e38);
    let ctx = Context {
        prompt: &[0, 1],
        ..Default::default()
    };
    let probs = final_probs(&p, &logits, &ctx);
    assert!(probs.iter().all(|x| x.is_finite()));
    assert_eq!(probs[0], 1.0);
}

#[test]
fn params_and_trace_serialise() {
    let mut p = SamplingParams {
        temperature: 0.7,
        top_k: Some(40),
        seed: Some(3),
        ..Default::default()
    };
    p.logit_bias.insert(50256, -100.0);
    let json = serde_json::to_string(&p).unwrap();
    assert!(json.contains(r#""logit_bias":{"50256":-100.0}"#), "{json}");
    assert_eq!(serde_json::from_str::<SamplingParams>(&json).unwrap(), p);
    assert!(serde_json::from_str::<SamplingParams>(r#"{"temprature": 1}"#).is_err());
    let trace = Trace::new(&p, &[1.0, 2.0], &Context::default());
    // Token 50256 is outside this two-token vocabulary.
    assert!(matches!(trace, Err(Error::TokenOutOfRange { .. })));
    p.logit_bias.clear();
    let v: serde_json::Value =
        serde_json::to_value(Trace::new(&p, &[1.0, 2.0], &Context::default()).unwrap()).unwrap();
    assert_eq!(v["stages"][0]["name"], "softmax");
    assert_eq!(v["final"].as_array().unwrap().len(), 2);
}

#[test]
fn beam_search_rejects_bad_settings_and_bad_rows() {
    let ok = |p: &[&[u32]]| -> Result<Vec<Vec<f32>>, Error> { Ok(vec![vec![0.0, NEG]; p.len()]) };
    for config in [
        BeamConfig {
            beam_width: 0,
            ..Default::default()
        },
        BeamConfig {
            num_return_sequences: 5,
            ..Default::default()
        },
        BeamConfig {
            length_penalty: f64::NAN,
            ..Default::default()
        },
        BeamConfig {
            max_new_tokens: 0,
            ..Default::default()
        },
    ] {
        assert!(matches!(
            beam_search(&config, ok),
            Err(Error::InvalidParam { .. })
        ));
    }
    let nan = |p: &[&[u32]]| -> Result<Vec<Vec<f32>>, Error> { Ok(vec![vec![f32::NAN]; p.len()]) };
    assert!(matches!(
        beam_search(&BeamConfig::default(), nan),
        Err(Error::InvalidLogprob { .. })
    ));
    let short = |_: &[&[u32]]| -> Result<Vec<Vec<f32>>, Error> { Ok(vec![]) };
    assert!(matches!(
        beam_search(&BeamConfig::default(), short),
        Err(Error::BeamBatchSize { .. })
    ));
}

#[test]
fn beam_search_returns_unfinished_beams_at_the_length_limit() {
    // Two tokens, never an end token: every sequence of length 3 is a candidate, "000" is best.
    let step = |p: &[&[u32]]| -> Result<Vec<Vec<f32>>, Error> {
        Ok(vec![vec![0.7f32.ln(), 0.3f32.ln()]; p.len()])
    };
    let config = BeamConfig {
        beam_width: 2,
        num_return_sequences: 2,
        max_new_tokens: 3,
        length_penalty: 0.0,
        ..Default::default()
    };
    let out = beam_search(&config, step).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].tokens, [0, 0, 0]);
    assert!(!out[0].ended);
    assert!((out[0].logprob - 3.0 * 0.7f64.ln()).abs() < 1e-6);
    assert_eq!(out[1].tokens.len(), 3);
    assert!((out[1].logprob - (2.0 * 0.7f64.ln() + 0.3f64.ln())).abs() < 1e-6);
}

#[test]
fn length_penalty_divides_by_length_to_the_alpha() {
    // Vocabulary: 0 = end, 1 = "a". Ending at once has probability 0.4; "a" then the end has
    // 0.6 * 0.5 = 0.3. Plain probability (alpha = 0) prefers the short answer; dividing by the
    // length (alpha = 1) prefers the long one: ln 0.3 / 2 = -0.602 > ln 0.4 = -0.916.
    let step = |p: &[&[u32]]| -> Result<Vec<Vec<f32>>, Error> {
        Ok(p.iter()
            .map(|pre| match pre.len() {
                0 => vec![0.4f32.ln(), 0.6f32.ln()],
                _ => vec![0.5f32.ln(), 0.5f32.ln()],
            })
            .collect())
    };
    let cfg = |alpha| BeamConfig {
        beam_width: 2,
        num_return_sequences: 2,
        length_penalty: alpha,
        end_tokens: vec![0],
        early_stopping: true,
        max_new_tokens: 5,
    };
    let out = beam_search(&cfg(0.0), step).unwrap();
    assert_eq!(out[0].tokens, [0]);
    assert_eq!(out[1].tokens, [1, 0]);
    let out = beam_search(&cfg(1.0), step).unwrap();
    assert_eq!(out[0].tokens, [1, 0]);
    assert!((out[0].score - 0.3f64.ln() / 2.0).abs() < 1e-6);
    assert!((out[1].score - 0.4f64.ln()).abs() < 1e-6);
    assert!(out.iter().all(|h| h.ended));
}

#[test]
fn negative_zero_and_zero_are_equal_logits() {
    // Found by the spec-tests properties: ordering with `total_cmp` put -0.0 below 0.0, so ties
    // between them broke by sign instead of toward the lowest id.
    let logits = [-0.0, 0.0, -1.0];
    for params in [
        SamplingParams::greedy(),
        SamplingParams {
            top_k: Some(1),
            ..Default::default()
        },
        SamplingParams {
            top_p: 0.01,
            ..Default::default()
        },
    ] {
        let out = Sampler::new(&params)
            .unwrap()
            .sample(&logits, &Context::default())
            .unwrap();
        assert_eq!(out.token, 0, "{params:?}");
    }
}

#[test]
fn dense_logits_are_the_stages_logits_with_minus_infinity_for_the_rest() {
    // Logits chosen so that every step is exact in f32.
    let logits = [3.0, 1.0, -1.0, 0.5, NEG];
    let mut c = Candidates::new();
    c.fill(&logits, None).unwrap();
    assert_eq!(c.dense_logits(), logits, "before any stage: the input");

    // Temperature 2 shifts by the maximum 3 and halves: 0, -1, -2, -1.25. Top-k 3 then drops
    // token 2 (the lowest), and changes no logit.
    let ctx = Context::default();
    Temperature::new(2.0).unwrap().apply(&mut c, &ctx).unwrap();
    assert_eq!(c.dense_logits(), [0.0, -1.0, -2.0, -1.25, NEG]);
    TopK::new(3).unwrap().apply(&mut c, &ctx).unwrap();
    let dense = c.dense_logits();
    assert_eq!(dense, [0.0, -1.0, NEG, -1.25, NEG]);

    // Their softmax is the distribution the buffer reports.
    let probs = c.dense_probs().unwrap();
    assert!(close(&softmax(&dense).unwrap(), &probs, 1e-6), "{probs:?}");
    assert_eq!(probs[2], 0.0);

    // A constraint's bitset removes a token before any stage: -inf there too.
    c.fill(&logits, Some(&[0b1101])).unwrap();
    assert_eq!(c.dense_logits(), [3.0, NEG, -1.0, 0.5, NEG]);
}
