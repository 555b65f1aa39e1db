//! The stages of issue #16 as `SamplingParams` reach them: their place in the chain, their
//! names in JSON, their checks, and the sampler's determinism with the stateful ones.

use nextok_sampling::{dry_breaker_ids, Chain, Context, Error, Sampler, SamplingParams, StageKind};

fn everything_on() -> SamplingParams {
    SamplingParams {
        temperature: 0.8,
        top_k: Some(40),
        top_p: 0.95,
        min_p: 0.05,
        repetition_penalty: 1.1,
        typical_p: 0.9,
        epsilon_cutoff: 3e-4,
        eta_cutoff: 3e-4,
        no_repeat_ngram_size: 3,
        encoder_no_repeat_ngram_size: 4,
        dry_multiplier: 0.8,
        xtc_probability: 0.5,
        top_n_sigma: 2.0,
        mirostat: 2,
        dynatemp_range: 0.3,
        ..SamplingParams::default()
    }
}

#[test]
fn the_chain_follows_llama_cpps_order_around_the_plain_stages() {
    // llama.cpp's default order: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc,
    // temperature; with nextok's stages in that order, the new ones fall in the same places.
    let llama = SamplingParams {
        order: vec![
            StageKind::Penalties,
            StageKind::LogitBias,
            StageKind::TopK,
            StageKind::TopP,
            StageKind::MinP,
            StageKind::Temperature,
        ],
        ..everything_on()
    };
    assert_eq!(
        Chain::from_params(&llama).unwrap().names(),
        [
            "no_repeat_ngram",
            "encoder_no_repeat_ngram",
            "repetition_penalty",
            "dry",
            "top_n_sigma",
            "top_k",
            "typical_p",
            "top_p",
            "min_p",
            "epsilon_cutoff",
            "eta_cutoff",
            "xtc",
            "dynamic_temperature",
            "mirostat_v2",
        ]
    );
    // The default (the specification's) order moves only temperature.
    assert_eq!(
        Chain::from_params(&everything_on()).unwrap().names()[4..7],
        ["dynamic_temperature", "top_n_sigma", "top_k"]
    );
    // Everything off: nothing is added to the plain chain.
    let plain = SamplingParams {
        temperature: 0.8,
        top_k: Some(40),
        ..SamplingParams::default()
    };
    assert_eq!(
        Chain::from_params(&plain).unwrap().names(),
        ["temperature", "top_k"]
    );
}

#[test]
fn json_takes_the_names_transformers_and_llama_cpp_use() {
    let p: SamplingParams = serde_json::from_str(
        r#"{"typical_p": 0.9, "epsilon_cutoff": 3e-4, "eta_cutoff": 2e-4,
            "no_repeat_ngram_size": 3, "encoder_no_repeat_ngram_size": 2,
            "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3,
            "dry_penalty_last_n": 64, "dry_sequence_breakers": ["\n", "@@"],
            "xtc_probability": 0.5, "xtc_threshold": 0.2, "top_n_sigma": 1.5,
            "mirostat": 1, "mirostat_tau": 4.0, "mirostat_eta": 0.2,
            "dynatemp_range": 0.3, "dynatemp_exponent": 1.5, "min_tokens_to_keep": 2}"#,
    )
    .unwrap();
    p.validate().unwrap();
    assert_eq!(
        (p.typical_p, p.epsilon_cutoff, p.eta_cutoff),
        (0.9, 3e-4, 2e-4)
    );
    assert_eq!(
        (p.no_repeat_ngram_size, p.encoder_no_repeat_ngram_size),
        (3, 2)
    );
    assert_eq!(
        (
            p.dry_multiplier,
            p.dry_base,
            p.dry_allowed_length,
            p.dry_penalty_last_n
        ),
        (0.8, 2.0, 3, 64)
    );
    assert_eq!(p.dry_sequence_breakers, ["\n", "@@"]);
    assert_eq!(
        (p.xtc_probability, p.xtc_threshold, p.top_n_sigma),
        (0.5, 0.2, 1.5)
    );
    assert_eq!((p.mirostat, p.mirostat_tau, p.mirostat_eta), (1, 4.0, 0.2));
    assert_eq!((p.dynatemp_range, p.dynatemp_exponent), (0.3, 1.5));
    assert_eq!(p.min_tokens_to_keep, 2);
    // The defaults are llama.cpp's (each stage off).
    let d = SamplingParams::default();
    assert_eq!(d.dry_sequence_breakers, ["\n", ":", "\"", "*"]);
    assert_eq!(
        (d.dry_base, d.dry_allowed_length, d.dry_penalty_last_n),
        (1.75, 2, -1)
    );
    assert_eq!(
        (d.mirostat_tau, d.mirostat_eta, d.xtc_threshold),
        (5.0, 0.1, 0.1)
    );
    assert_eq!(Chain::from_params(&d).unwrap().len(), 0);
}

#[test]
fn out_of_range_values_are_typed_errors_that_name_the_field() {
    type Set = fn(&mut SamplingParams);
    let cases: [(Set, &str); 20] = [
        (|p| p.typical_p = 0.0, "typical_p"),
        (|p| p.typical_p = 1.5, "typical_p"),
        (|p| p.typical_p = f32::NAN, "typical_p"),
        (|p| p.epsilon_cutoff = 1.0, "epsilon_cutoff"),
        (|p| p.epsilon_cutoff = -0.1, "epsilon_cutoff"),
        (|p| p.eta_cutoff = f32::INFINITY, "eta_cutoff"),
        (|p| p.min_tokens_to_keep = 0, "min_tokens_to_keep"),
        (|p| p.dry_multiplier = -1.0, "dry_multiplier"),
        (|p| p.dry_base = 0.5, "dry_base"),
        (|p| p.dry_allowed_length = 0, "dry_allowed_length"),
        (|p| p.dry_penalty_last_n = -2, "dry_penalty_last_n"),
        (|p| p.xtc_probability = 1.5, "xtc_probability"),
        (|p| p.xtc_threshold = -0.1, "xtc_threshold"),
        (|p| p.top_n_sigma = f32::NAN, "top_n_sigma"),
        (|p| p.mirostat = 3, "mirostat"),
        (|p| p.mirostat_tau = -1.0, "mirostat_tau"),
        (|p| p.mirostat_eta = f32::NAN, "mirostat_eta"),
        (|p| p.dynatemp_range = -0.5, "dynatemp_range"),
        (|p| p.dynatemp_exponent = f32::INFINITY, "dynatemp_exponent"),
        (|p| p.dynatemp_exponent = -1.0, "dynatemp_exponent"),
    ];
    for (set, field) in cases {
        let mut p = SamplingParams::default();
        set(&mut p);
        match p.validate() {
            Err(Error::InvalidParam { name, .. }) => assert_eq!(name, field),
            other => panic!("{field}: {other:?}"),
        }
        assert!(Sampler::new(&p).is_err(), "{field}");
    }
    // The edges that are allowed.
    let edges = SamplingParams {
        typical_p: 1.0,
        xtc_probability: 1.0,
        xtc_threshold: 1.0,
        top_n_sigma: -1.0,
        dry_penalty_last_n: 0,
        dry_base: 1.0,
        mirostat_tau: 0.0,
        ..SamplingParams::default()
    };
    edges.validate().unwrap();
}

#[test]
fn dynamic_temperature_at_temperature_zero_still_samples() {
    // Temperature 0 alone is greedy; with a range it is not, so the sampler must not take its
    // greedy shortcut. Over 64 seeds on flat logits some draw differs from the top token.
    let logits = [1.0f32, 0.9, 0.8, 0.7];
    let greedy = |range: f32| {
        (0..64).all(|seed| {
            let p = SamplingParams {
                temperature: 0.0,
                dynatemp_range: range,
                seed: Some(seed),
                ..SamplingParams::default()
            };
            Sampler::new(&p)
                .unwrap()
                .sample(&logits, &Context::default())
                .unwrap()
                .token
                == 0
        })
    };
    assert!(greedy(0.0));
    assert!(!greedy(1.0));
}

#[test]
fn stateful_and_drawing_stages_give_the_same_tokens_for_the_same_seed() {
    let logits: Vec<f32> = (0..500).map(|i| ((i * 37) % 101) as f32 / 20.0).collect();
    for mirostat in [1, 2] {
        let params = SamplingParams {
            mirostat,
            xtc_probability: 0.5,
            xtc_threshold: 0.01,
            dry_multiplier: 0.8,
            dry_sequence_breaker_ids: vec![3],
            seed: Some(11),
            ..SamplingParams::default()
        };
        let run = || {
            let mut s = Sampler::new(&params).unwrap();
            let mut out: Vec<u32> = Vec::new();
            for _ in 0..40 {
                let t = s.sample(&logits, &Context::new(&out)).unwrap().token;
                out.push(t);
            }
            out
        };
        let a = run();
        assert_eq!(a, run(), "mirostat {mirostat}");
        // And they are not all the same token: the stages leave something to draw from.
        assert!(a.iter().any(|&t| t != a[0]), "mirostat {mirostat}: {a:?}");
    }
}

#[test]
fn dry_breakers_are_the_tokens_that_hold_a_breaker_text() {
    let vocab: [&[u8]; 6] = [b"a", b"b:", b"\n\n", b"c", b"##", b"#"];
    let tokens = vocab.iter().enumerate().map(|(i, b)| (i as u32, *b));
    let breakers = ["\n".to_string(), ":".into(), "##".into(), String::new()];
    // "#" alone does not hold "##"; the empty text is ignored rather than matching everything.
    assert_eq!(dry_breaker_ids(&breakers, tokens), [1, 2, 4]);
}
