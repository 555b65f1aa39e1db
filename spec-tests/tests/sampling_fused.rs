//! The sampler's fused first stage (top-k, top-p or min-p run straight on the logits) against
//! the ordinary chain and against the reference.
//!
//! The ordinary chain is reached through an allowed-token mask that allows every token: the
//! sampler then fills its buffer from the whole vocabulary and runs every stage, exactly as it
//! did before the fused path existed. Same seed, same tokens, same log-probabilities to the bit,
//! draw after draw; and each drawn token is one the reference (`nextok_spec_tests::sampling`, in
//! f64, sorting the whole vocabulary) gives a positive probability, with that probability.

use nextok_sampling::{Context, Sampler, SamplingParams, StageKind};
use nextok_spec_tests::sampling as reference;
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Logits drawn from a seed: uniform in `[-scale, scale]`, or normal with deviation `scale` (as
/// llama.cpp's harness draws them, which makes top-p keep thousands of tokens), optionally on a
/// grid of 0.25 (many exact ties) and with about a tenth of them `-inf`.
#[derive(Debug, Clone)]
struct LogitsSpec {
    vocab: usize,
    seed: u64,
    scale: f32,
    normal: bool,
    grid: bool,
    masked: bool,
}

impl LogitsSpec {
    fn logits(&self) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut uniform = move || ((rng.next_u64() >> 40) as f32 + 0.5) / (1u64 << 24) as f32;
        (0..self.vocab)
            .map(|i| {
                let z = if self.normal {
                    // Box-Muller.
                    let (a, b) = (uniform(), uniform());
                    self.scale * (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos()
                } else {
                    self.scale * (2.0 * uniform() - 1.0)
                };
                let z = if self.grid {
                    (z * 4.0).round() / 4.0
                } else {
                    z
                };
                if self.masked && i > 0 && uniform() < 0.1 {
                    f32::NEG_INFINITY
                } else {
                    z
                }
            })
            .collect()
    }
}

fn logits_spec() -> impl Strategy<Value = LogitsSpec> {
    (
        prop_oneof![
            4 => 1usize..=64,
            3 => 65usize..=4096,
            2 => 4097usize..=140_000,
            1 => Just(262_144usize),
        ],
        any::<u64>(),
        0.05f32..12.0,
        any::<bool>(),
        any::<bool>(),
        prop_oneof![4 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(vocab, seed, scale, normal, grid, masked)| LogitsSpec {
            vocab,
            seed,
            scale,
            normal,
            grid,
            masked,
        })
}

/// llama.cpp's order (filters, then temperature) or the specification's (temperature first);
/// each filter on about half the time, so every one of them is sometimes the first stage.
fn params() -> impl Strategy<Value = SamplingParams> {
    (
        prop_oneof![Just(1.0f32), 0.2f32..2.0],
        proptest::option::of(prop_oneof![1usize..100, 100usize..300_000]),
        prop_oneof![Just(1.0f32), 0.05f32..1.0, 0.9f32..0.999],
        prop_oneof![Just(0.0f32), 0.001f32..0.5],
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(temperature, top_k, top_p, min_p, llama_order, seed)| {
            let order = if llama_order {
                vec![
                    StageKind::Penalties,
                    StageKind::LogitBias,
                    StageKind::TopK,
                    StageKind::TopP,
                    StageKind::MinP,
                    StageKind::Temperature,
                ]
            } else {
                StageKind::DEFAULT_ORDER.to_vec()
            };
            SamplingParams {
                temperature,
                top_k,
                top_p,
                min_p,
                seed: Some(seed),
                order,
                ..SamplingParams::default()
            }
        })
}

/// The reference's final distribution for `params` in their order: each filter on the softmax
/// of the logits as they are at that point, temperature dividing the logits of the tokens left.
fn reference_final(z: &[f64], params: &SamplingParams) -> Vec<f64> {
    let mut logits = z.to_vec();
    let mut keep: Vec<bool> = z.iter().map(|v| *v > f64::NEG_INFINITY).collect();
    let masked = |logits: &[f64], keep: &[bool]| -> Vec<f64> {
        logits
            .iter()
            .zip(keep)
            .map(|(&v, &k)| if k { v } else { f64::NEG_INFINITY })
            .collect()
    };
    for stage in &params.order {
        let current = masked(&logits, &keep);
        let probs = reference::softmax(&current);
        let order = reference::sorted_ids(&current);
        let kept = match stage {
            StageKind::Temperature => {
                if params.temperature != 1.0 {
                    logits = reference::divide_by_temperature(&logits, params.temperature as f64);
                }
                continue;
            }
            StageKind::TopK => match params.top_k {
                Some(k) => reference::top_k(&probs, &order, k),
                None => continue,
            },
            StageKind::TopP if params.top_p < 1.0 => {
                reference::top_p(&probs, &order, params.top_p as f64)
            }
            StageKind::MinP if params.min_p > 0.0 => reference::min_p(&probs, params.min_p as f64),
            _ => continue,
        };
        for (k, p) in keep.iter_mut().zip(&kept) {
            *k &= *p > 0.0;
        }
    }
    reference::softmax(&masked(&logits, &keep))
}

/// Whether nudging top-p or min-p by 1e-4 changes the reference's support: there `f32` and
/// `f64` rounding may legitimately disagree about the boundary token.
fn borderline(z: &[f64], params: &SamplingParams) -> bool {
    let support = |p: &SamplingParams| -> Vec<bool> {
        reference_final(z, p).iter().map(|&q| q > 0.0).collect()
    };
    let base = support(params);
    let mut nudged = Vec::new();
    if params.top_p < 1.0 {
        for d in [1e-4f32, -1e-4] {
            nudged.push(SamplingParams {
                top_p: (params.top_p + d).clamp(1e-6, 1.0),
                ..params.clone()
            });
        }
    }
    if params.min_p > 0.0 {
        for d in [1e-4f32, -1e-4] {
            nudged.push(SamplingParams {
                min_p: (params.min_p + d).clamp(0.0, 1.0),
                ..params.clone()
            });
        }
    }
    nudged.iter().any(|p| support(p) != base)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn fused_draws_equal_the_ordinary_chain_and_the_reference(spec in logits_spec(), params in params()) {
        let z = spec.logits();
        let all = vec![u64::MAX; z.len().div_ceil(64)];
        let ordinary_ctx = Context { allowed: Some(&all), ..Context::default() };
        let mut fast = Sampler::new(&params).unwrap();
        let mut ordinary = Sampler::new(&params).unwrap();
        let zf: Vec<f64> = z.iter().map(|&v| v as f64).collect();
        let check_reference = spec.vocab <= 70_000 && !borderline(&zf, &params);
        let want = if check_reference { reference_final(&zf, &params) } else { Vec::new() };
        for draw in 0..8 {
            let a = if draw % 2 == 0 {
                fast.choose(&z, &Context::default()).unwrap()
            } else {
                let s = fast.sample(&z, &Context::default()).unwrap();
                nextok_sampling::Chosen { token: s.token, logprob: s.logprob }
            };
            let b = ordinary.choose(&z, &ordinary_ctx).unwrap();
            prop_assert_eq!(a.token, b.token, "draw {}", draw);
            prop_assert_eq!(a.logprob.to_bits(), b.logprob.to_bits(), "draw {}", draw);
            if check_reference {
                let p = want[a.token as usize];
                prop_assert!(p > 0.0, "draw {}: token {} has reference probability 0", draw, a.token);
                let got = (a.logprob as f64).exp();
                prop_assert!((got - p).abs() <= 1e-6 + 2e-4 * p, "draw {}: token {}: {} vs reference {}", draw, a.token, got, p);
            }
        }
    }
}
