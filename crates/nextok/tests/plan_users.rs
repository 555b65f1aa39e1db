//! The cost model's many-users figures (`nextok plan --users N --memory GB`), worked by hand on
//! the specification's 7-billion-weight example: 16-bit weights (14 GB), Llama 2 7B's shape (32
//! layers, d_model 4,096, 16-bit KV numbers: 524,288 bytes per token), on its illustrative GPU
//! (2,000 GB/s, 500 TFLOP/s). One decode step reads the weights once (14e9 / 2e12 = 7 ms) and
//! every user's KV cache (the prompt and half the answer: the default 1,000 + 200 / 2 = 1,100
//! positions, 1,100 × 524,288 = 576,716,800 bytes a user), and does 2 × 7e9 FLOPs per user
//! (0.028 ms each at 500 TFLOP/s).

use nextok::plan::{batched_decode, plan, users_that_fit, Bound, Machine, ModelFigures, Workload};

fn model_7b() -> ModelFigures {
    ModelFigures::from_dims(7e9, 2.0, 32, 4096, 2.0).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn thirty_two_users_share_one_read_of_the_weights_and_read_their_own_caches() {
    let p = plan(
        &model_7b(),
        &Machine::SPEC_EXAMPLE,
        &Workload {
            users: 32,
            ..Workload::default()
        },
    )
    .unwrap();
    assert_eq!(p.kv_positions_per_user, 1100.0);
    // 32 caches: 32 × 576,716,800 = 18,454,937,600 bytes, more than the weights. The step reads
    // 14e9 + 18,454,937,600 = 32,454,937,600 bytes: 16.2274688 ms. The arithmetic, 32 × 0.028
    // = 0.896 ms, is far below: memory-bound.
    assert_eq!(p.batched_decode.tokens, 32);
    assert_eq!(p.batched_decode.kv_bytes_read, 18_454_937_600.0);
    assert_eq!(p.batched_decode.bound, Bound::Memory);
    assert!(close(p.batched_decode.compute_s, 0.896e-3));
    assert!(close(p.batched_decode.memory_s, 16.2274688e-3));
    assert!(close(p.batched_decode.seconds, 16.2274688e-3));
    assert!(close(
        p.batched_decode.arithmetic_intensity,
        32.0 * 14e9 / 32_454_937_600.0
    ));
    // Each user: one token a step, 61.6 tokens/s (not the 142.9 of the weights alone); all 32:
    // 1,972 tokens/s.
    assert!(close(p.per_user_tokens_per_second, 1.0 / 16.2274688e-3));
    assert!(close(p.aggregate_tokens_per_second, 32.0 / 16.2274688e-3));
    // One user alone reads the weights and its one cache: 14,576,716,800 bytes, 7.2883584 ms.
    // Batching buys 32 × 7.2883584 / 16.2274688 = 14.37×, not 32×: the caches are not shared.
    assert!(close(p.batching_speedup, 32.0 * 7.2883584 / 16.2274688));
    assert!((p.batching_speedup - 14.372).abs() < 1e-3);
    assert_eq!(p.users_that_fit, None);
    // The single-user figures stay the specification's: the weights alone, 7 ms a token.
    assert!(close(p.decode.seconds, 7e-3));
    assert_eq!(p.decode.kv_bytes_read, 0.0);
}

#[test]
fn past_the_balance_point_the_arithmetic_sets_the_pace() {
    // 1,000 users of short conversations (a 1-token prompt, 2-token answers: 2 positions,
    // 1,048,576 bytes a user): 28 ms of arithmetic against 14e9 + 1,048,576,000 bytes = 7.524288
    // ms of reading.
    let p = plan(
        &model_7b(),
        &Machine::SPEC_EXAMPLE,
        &Workload {
            users: 1000,
            prompt_tokens: 1,
            answer_tokens: 2,
            ..Workload::default()
        },
    )
    .unwrap();
    assert_eq!(p.kv_positions_per_user, 2.0);
    assert_eq!(p.batched_decode.kv_bytes_read, 1_048_576_000.0);
    assert!(close(p.batched_decode.memory_s, 7.524288e-3));
    assert_eq!(p.batched_decode.bound, Bound::Compute);
    assert!(close(p.batched_decode.seconds, 28e-3));
    assert!(close(p.per_user_tokens_per_second, 1.0 / 28e-3));
    assert!(close(p.aggregate_tokens_per_second, 1000.0 / 28e-3));
    // One user alone: 14,001,048,576 bytes, 7.000524288 ms; 1,000 × that / 28 ms.
    assert!(close(p.batching_speedup, 1000.0 * 7.000524288 / 28.0));
}

#[test]
fn longer_conversations_slow_every_user_of_a_batch() {
    // The same 8 users with caches of 0, 1,000 and 10,000 positions: 14e9 bytes of weights plus
    // 8 × positions × 524,288 bytes of caches, at 2,000 GB/s.
    let machine = Machine::SPEC_EXAMPLE;
    let seconds = |positions: f64| batched_decode(&model_7b(), &machine, 8, positions).seconds;
    assert!(close(seconds(0.0), 7e-3));
    assert!(close(
        seconds(1000.0),
        (14e9 + 8.0 * 1000.0 * 524_288.0) / 2e12
    ));
    assert!(close(
        seconds(10_000.0),
        (14e9 + 8.0 * 10_000.0 * 524_288.0) / 2e12
    ));
    // At 10,000 positions the caches (41.9 GB) take three times the weights' read.
    assert!(seconds(10_000.0) > 3.0 * seconds(0.0));
    // With no cache to read, the step is the specification's pass over 8 tokens.
    let plain = nextok::plan::pass(&model_7b(), &machine, 8);
    let batched = batched_decode(&model_7b(), &machine, 8, 0.0);
    assert_eq!(batched, plain);
}

#[test]
fn users_that_fit_beside_the_weights() {
    // One conversation of 4,096 tokens: 4,096 × 524,288 = 2,147,483,648 bytes. 80 GB leave 66 GB
    // beside the weights: 66e9 / 2,147,483,648 = 30.7, so 30 users.
    let p = plan(
        &model_7b(),
        &Machine::SPEC_EXAMPLE,
        &Workload {
            memory_bytes: Some(80_000_000_000),
            ..Workload::default()
        },
    )
    .unwrap();
    assert_eq!(p.kv_bytes_per_conversation, 2_147_483_648.0);
    assert_eq!(p.users_that_fit, Some(30));
    // Exactly one conversation's room: one user; a byte less: none.
    let exact = 14e9 + 2_147_483_648.0;
    assert_eq!(users_that_fit(exact, 14e9, 2_147_483_648.0), 1);
    assert_eq!(users_that_fit(exact - 1.0, 14e9, 2_147_483_648.0), 0);
    // Memory smaller than the weights: nobody.
    assert_eq!(users_that_fit(10e9, 14e9, 2_147_483_648.0), 0);
}
