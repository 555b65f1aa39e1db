//! Every figure of the specification's worked examples on cost, recomputed by `nextok::plan`.
//!
//! Source: the specification, *Inference and Decoding*. Each golden names its section and table and
//! uses the precision the specification prints as its tolerance (half a unit of the last printed
//! digit; "≈" figures likewise).

use nextok::plan::{
    kv_bytes_per_token, pass, plan, positions_without_cache, text_size, tokens_left, Bound,
    Machine, ModelFigures, Workload,
};

struct Golden {
    source: &'static str,
    got: f64,
    expected: f64,
    tolerance: f64,
}

fn check(goldens: &[Golden]) {
    let mut failures = Vec::new();
    for g in goldens {
        if (g.got - g.expected).abs() > g.tolerance {
            failures.push(format!(
                "{}: got {}, expected {} ± {}",
                g.source, g.got, g.expected, g.tolerance
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const MB: f64 = 1e6;
const GB: f64 = 1e9;

/// The base model: 65 million weights at 4 bytes; 6 decoder layers, d_model 512, 32-bit cache.
fn base_model() -> ModelFigures {
    ModelFigures::from_dims(65e6, 4.0, 6, 512, 4.0).unwrap()
}

/// The 7-billion-weight model: 16-bit weights; Llama 2 7B's 32 layers, d_model 4,096, 16-bit cache.
fn model_7b() -> ModelFigures {
    ModelFigures::from_dims(7e9, 2.0, 32, 4096, 2.0).unwrap()
}

#[test]
fn inference_vs_training_memory() {
    let p = plan(&base_model(), &Machine::SPEC_EXAMPLE, &Workload::default()).unwrap();
    check(&[
        Golden {
            source: "Why inference needs less memory, table 'What is stored': inference 260 MB",
            got: p.weight_bytes / MB,
            expected: 260.0,
            tolerance: 0.5,
        },
        Golden {
            source: "Why inference needs less memory, table 'What is stored': training 1,040 MB",
            got: p.training_bytes / MB,
            expected: 1040.0,
            tolerance: 0.5,
        },
    ]);
}

#[test]
fn arithmetic_intensity_of_the_base_model() {
    let model = base_model();
    let m = Machine::SPEC_EXAMPLE;
    let prefill = pass(&model, &m, 1000);
    let decode = pass(&model, &m, 1);
    let src = "Why decode is limited by memory, not arithmetic, table 'Prefill, 1,000-token prompt / Decode, 1 new token'";
    check(&[
        Golden {
            source: src,
            got: prefill.flops,
            expected: 130_000_000_000.0,
            tolerance: 0.5,
        },
        Golden {
            source: src,
            got: decode.flops,
            expected: 130_000_000.0,
            tolerance: 0.5,
        },
        Golden {
            source: src,
            got: prefill.arithmetic_intensity,
            expected: 500.0,
            tolerance: 0.5,
        },
        Golden {
            source: src,
            got: decode.arithmetic_intensity,
            expected: 0.5,
            tolerance: 0.05,
        },
    ]);
}

#[test]
fn seven_billion_weight_example() {
    let p = plan(&model_7b(), &Machine::SPEC_EXAMPLE, &Workload::default()).unwrap();
    let table = "Worked example: a 7-billion-weight model, table 'Prefill, 1,000-token prompt / Decode, 1 token'";
    let bullets = "Worked example: a 7-billion-weight model, bullets after the table";
    check(&[
        Golden {
            source: "Worked example: a 7-billion-weight model, 'Weights in memory: 14 GB'",
            got: p.weight_bytes / GB,
            expected: 14.0,
            tolerance: 0.5,
        },
        Golden {
            source: table,
            got: p.prefill.memory_s * 1e3,
            expected: 7.0,
            tolerance: 0.5,
        },
        Golden {
            source: table,
            got: p.decode.memory_s * 1e3,
            expected: 7.0,
            tolerance: 0.5,
        },
        Golden {
            source: table,
            got: p.prefill.compute_s * 1e3,
            expected: 28.0,
            tolerance: 0.5,
        },
        Golden {
            source: table,
            got: p.decode.compute_s * 1e3,
            expected: 0.028,
            tolerance: 0.0005,
        },
        Golden {
            source: bullets,
            got: p.time_to_first_token_s * 1e3,
            expected: 28.0,
            tolerance: 0.5,
        },
        Golden {
            source: bullets,
            got: p.time_per_output_token_s * 1e3,
            expected: 7.0,
            tolerance: 0.5,
        },
        Golden {
            source: bullets,
            got: p.tokens_per_second,
            expected: 143.0,
            tolerance: 0.5,
        },
        Golden {
            source: bullets,
            got: p.answer_s,
            expected: 1.43,
            tolerance: 0.005,
        },
        Golden {
            source: "Worked example: a 7-billion-weight model, 'Per token, prefill is 250 times faster'",
            got: p.prefill_speedup_per_token,
            expected: 250.0,
            tolerance: 0.5,
        },
        Golden {
            source: "Worked example: a 7-billion-weight model, 'decode would need 1,000 × 7 ms = 7 seconds'",
            got: 1000.0 * p.time_per_output_token_s,
            expected: 7.0,
            tolerance: 0.5,
        },
        Golden {
            source: "What this means in practice, 'Reasoning models': 2,000 × 7 ms = 14 seconds",
            got: 2000.0 * p.time_per_output_token_s,
            expected: 14.0,
            tolerance: 0.5,
        },
    ]);
    assert_eq!(
        p.prefill.bound,
        Bound::Compute,
        "{table}: prefill is limited by arithmetic"
    );
    assert_eq!(
        p.decode.bound,
        Bound::Memory,
        "{table}: decode is limited by memory"
    );
}

#[test]
fn kv_cache_sizes() {
    let base = plan(
        &base_model(),
        &Machine::SPEC_EXAMPLE,
        &Workload {
            conversation_tokens: 1000,
            ..Workload::default()
        },
    )
    .unwrap();
    let big = plan(&model_7b(), &Machine::SPEC_EXAMPLE, &Workload::default()).unwrap();
    let base_table = "How much memory the cache needs, table 'Base model (6 decoder layers, d_model = 512, 4 bytes)'";
    let big_table =
        "How much memory the cache needs, table 'A 7-billion-weight model ... Llama 2 7B'";
    check(&[
        Golden {
            source: base_table,
            got: kv_bytes_per_token(&base_model()),
            expected: 24_576.0,
            tolerance: 0.5,
        },
        Golden {
            source: base_table,
            got: base.kv_bytes_per_conversation / MB,
            expected: 24.6,
            tolerance: 0.05,
        },
        Golden {
            source: "How much memory the cache needs: 'about 9% of the 260 MB of weights'",
            got: 100.0 * base.kv_bytes_per_conversation / base.weight_bytes,
            expected: 9.0,
            tolerance: 0.5,
        },
        Golden {
            source: big_table,
            got: big.kv_bytes_per_token,
            expected: 524_288.0,
            tolerance: 0.5,
        },
        Golden {
            source: big_table,
            got: big.kv_bytes_per_conversation / GB,
            expected: 2.15,
            tolerance: 0.005,
        },
        Golden {
            source: big_table,
            got: big.kv_bytes_all_users / GB,
            expected: 68.7,
            tolerance: 0.05,
        },
        Golden {
            source:
                "How much memory the cache needs: 'almost five times as much memory as the model'",
            got: big.kv_bytes_all_users / big.weight_bytes,
            expected: 5.0,
            tolerance: 0.5,
        },
    ]);
    assert_eq!(
        positions_without_cache(1000),
        Some(500_500),
        "The cache growing, step by step: 1 + 2 + ... + 1,000 = 500,500 positions"
    );
    assert_eq!(
        positions_without_cache(4),
        Some(10),
        "The waste it removes: 1 + 2 + 3 + 4 = 10 positions"
    );
}

#[test]
fn context_window() {
    assert_eq!(
        tokens_left(8192, 7000),
        1192,
        "The context window: a hard limit: 8,192 − 7,000 = 1,192 tokens left"
    );
    let mut model = base_model();
    model.context_window = Some(8192);
    let p = plan(
        &model,
        &Machine::SPEC_EXAMPLE,
        &Workload {
            prompt_tokens: 7000,
            ..Workload::default()
        },
    )
    .unwrap();
    assert_eq!(
        p.tokens_left,
        Some(1192),
        "The context window: a hard limit"
    );
    assert_eq!(
        tokens_left(8192, 9000),
        0,
        "a prompt past the window leaves nothing"
    );
}

#[test]
fn context_window_in_words_and_pages() {
    let table =
        "How big is a context window?, table 'Context window / Words (× 0.75) / Pages (÷ 500)'";
    // (tokens, words, pages, tolerance on pages): the table prints 12 for 12.288 pages.
    let rows = [
        (1_000, 750.0, 1.5, 0.05),
        (8_192, 6_144.0, 12.0, 0.5),
        (128_000, 96_000.0, 192.0, 0.5),
        (1_000_000, 750_000.0, 1_500.0, 0.5),
    ];
    let mut goldens = Vec::new();
    for (tokens, words, pages, tol) in rows {
        let size = text_size(tokens);
        goldens.push(Golden {
            source: table,
            got: size.words,
            expected: words,
            tolerance: 0.5,
        });
        goldens.push(Golden {
            source: table,
            got: size.pages,
            expected: pages,
            tolerance: tol,
        });
    }
    check(&goldens);
    assert!(
        (text_size(8192).pages - 12.288).abs() < 1e-9,
        "{table}: 6,144 ÷ 500 = 12.288"
    );
}

#[test]
fn bad_figures_are_typed_errors() {
    assert!(matches!(
        ModelFigures::from_dims(0.0, 4.0, 6, 512, 4.0),
        Err(nextok::Error::InvalidPlanInput { .. })
    ));
    assert!(matches!(
        ModelFigures::from_dims(65e6, f64::NAN, 6, 512, 4.0),
        Err(nextok::Error::InvalidPlanInput { .. })
    ));
    assert!(matches!(
        Machine::new(-1.0, 500.0),
        Err(nextok::Error::InvalidPlanInput { .. })
    ));
    assert!(matches!(
        plan(
            &base_model(),
            &Machine::SPEC_EXAMPLE,
            &Workload {
                prompt_tokens: 0,
                ..Workload::default()
            }
        ),
        Err(nextok::Error::InvalidPlanInput { .. })
    ));
}

#[test]
fn heads_are_checked_and_each_blamed_by_name() {
    // Issue #13: `plan --heads 0` was accepted, and `--kv-heads 0` was blamed on d_model.
    let by_hand =
        |heads, kv_heads| ModelFigures::from_heads(7e9, 2.0, 32, 4096, heads, kv_heads, 2.0);
    let blamed = |r: Result<ModelFigures, nextok::Error>| match r {
        Err(nextok::Error::InvalidPlanInput { what, .. }) => what,
        other => panic!("expected InvalidPlanInput, got {other:?}"),
    };
    assert_eq!(blamed(by_hand(0, 8)), "heads");
    assert_eq!(blamed(by_hand(32, 0)), "KV heads");
    // 4096 is not a whole number of 3-wide heads; 5 KV heads do not divide 32 heads; more KV
    // heads than heads is not grouped-query attention.
    assert_eq!(blamed(by_hand(3, 1)), "heads");
    assert_eq!(blamed(by_hand(32, 5)), "KV heads");
    assert_eq!(blamed(by_hand(32, 64)), "KV heads");
    // Llama 2 70B's shape: 8192 wide, 64 heads, 8 KV heads: a KV width of 8 × 128 = 1024.
    let gqa = ModelFigures::from_heads(70e9, 2.0, 80, 8192, 64, 8, 2.0).unwrap();
    assert_eq!(gqa.kv_width, 1024);
}

#[test]
fn figures_too_large_to_compute_are_refused_not_printed() {
    // Issue #13: `plan` printed inf and NaN for huge inputs. 1e300 weights of 1e10 bytes each
    // overflow f64 (about 1.8e308) as soon as they are multiplied.
    assert!(matches!(
        ModelFigures::from_dims(1e300, 1e10, 32, 4096, 2.0),
        Err(nextok::Error::PlanOverflow {
            figure: "weight bytes",
            ..
        })
    ));
    // The weights fit, but 2 × weights × prompt tokens (the prefill FLOPs) does not.
    let model = ModelFigures::from_dims(1e300, 1.0, 32, 4096, 2.0).unwrap();
    let workload = Workload {
        prompt_tokens: u64::MAX,
        ..Workload::default()
    };
    match plan(&model, &Machine::SPEC_EXAMPLE, &workload) {
        Err(nextok::Error::PlanOverflow { figure, value }) => {
            assert_eq!(figure, "prefill FLOPs");
            assert!(value.is_infinite());
        }
        other => panic!("expected PlanOverflow, got {other:?}"),
    }
}

#[test]
fn positions_without_cache_is_checked_arithmetic() {
    // 2^32 (2^32 + 1) / 2 = 2^63 + 2^31 fits in a u64, though the product before halving does
    // not; u64::MAX's does not fit at all.
    assert_eq!(
        positions_without_cache(1 << 32),
        Some((1 << 63) + (1 << 31))
    );
    assert_eq!(positions_without_cache(u64::MAX), None);
}
