//! The cost model's many-users figures (`nextok plan --users N --memory GB`), worked by hand on
//! the specification's 7-billion-weight example: 16-bit weights (14 GB), Llama 2 7B's shape (32
//! layers, d_model 4,096, 16-bit KV numbers: 524,288 bytes per token), on its illustrative GPU
//! (2,000 GB/s, 500 TFLOP/s). One decode step reads the weights once: 14e9 / 2e12 = 7 ms, and
//! does 2 × 7e9 FLOPs per user: 0.028 ms each at 500 TFLOP/s.

use nextok::plan::{plan, users_that_fit, Bound, Machine, ModelFigures, Workload};

fn model_7b() -> ModelFigures {
    ModelFigures::from_dims(7e9, 2.0, 32, 4096, 2.0).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn thirty_two_users_share_one_read_of_the_weights() {
    let p = plan(
        &model_7b(),
        &Machine::SPEC_EXAMPLE,
        &Workload {
            users: 32,
            ..Workload::default()
        },
    )
    .unwrap();
    // 32 users: arithmetic 32 × 0.028 ms = 0.896 ms < 7 ms of reading: still memory-bound, so
    // each user gets the single-user speed and the aggregate is 32 times it.
    assert_eq!(p.batched_decode.tokens, 32);
    assert_eq!(p.batched_decode.bound, Bound::Memory);
    assert!(close(p.batched_decode.compute_s, 0.896e-3));
    assert!(close(p.batched_decode.seconds, 7e-3));
    assert!(close(p.per_user_tokens_per_second, 1.0 / 7e-3));
    assert!(close(p.aggregate_tokens_per_second, 32.0 / 7e-3));
    assert!(close(p.batching_speedup, 32.0));
    assert_eq!(p.users_that_fit, None);
}

#[test]
fn past_the_balance_point_the_arithmetic_sets_the_pace() {
    // 1,000 users: 28 ms of arithmetic against 7 ms of reading.
    let p = plan(
        &model_7b(),
        &Machine::SPEC_EXAMPLE,
        &Workload {
            users: 1000,
            ..Workload::default()
        },
    )
    .unwrap();
    assert_eq!(p.batched_decode.bound, Bound::Compute);
    assert!(close(p.batched_decode.seconds, 28e-3));
    assert!(close(p.per_user_tokens_per_second, 1.0 / 28e-3));
    assert!(close(p.aggregate_tokens_per_second, 1000.0 / 28e-3));
    // 1,000 × 7 ms / 28 ms: the speed-up is the ratio of the two limits times the users.
    assert!(close(p.batching_speedup, 250.0));
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
