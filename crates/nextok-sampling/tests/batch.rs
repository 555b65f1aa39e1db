//! Batched sampling: many sequences' rows over threads give exactly what each sampler gives alone.

use nextok_sampling::*;

/// Logits from a seed (xorshift, uniform in [-8, 8)).
fn logits(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 16_000) as f32 / 1000.0 - 8.0
        })
        .collect()
}

/// A different chain per row: greedy, sampling with each first stage, penalties, a mask.
fn params(row: usize) -> SamplingParams {
    let seed = Some(1000 + row as u64);
    match row % 5 {
        0 => SamplingParams::greedy(),
        1 => SamplingParams {
            temperature: 0.8,
            top_k: Some(40),
            top_p: 0.95,
            min_p: 0.05,
            seed,
            ..Default::default()
        },
        2 => SamplingParams {
            top_p: 0.9,
            temperature: 1.3,
            seed,
            order: vec![
                StageKind::TopP,
                StageKind::Temperature,
                StageKind::Penalties,
                StageKind::LogitBias,
                StageKind::TopK,
                StageKind::MinP,
            ],
            ..Default::default()
        },
        3 => SamplingParams {
            min_p: 0.1,
            repetition_penalty: 1.2,
            seed,
            top_logprobs: 3,
            ..Default::default()
        },
        _ => SamplingParams {
            temperature: 1.1,
            seed,
            ..Default::default()
        },
    }
}

#[test]
fn batches_give_what_each_sampler_gives_alone() {
    let rows = 23;
    let vocab = 5000;
    let z: Vec<Vec<f32>> = (0..rows).map(|r| logits(vocab, r as u32 + 7)).collect();
    let generated: Vec<u32> = vec![1, 2, 3, 2];
    let mask: Vec<u64> = (0..vocab.div_ceil(64))
        .map(|w| 0xf0f0_f0f0_f0f0_f0f0u64.rotate_left(w as u32))
        .collect();
    let ctx = |r: usize| Context {
        prompt: &[],
        generated: &generated,
        allowed: (r % 7 == 6).then_some(&mask[..]),
    };

    // Alone: three steps of every row's own sampler.
    let alone: Vec<Vec<Sampled>> = z
        .iter()
        .enumerate()
        .map(|(r, z)| {
            let mut s = Sampler::new(&params(r)).unwrap();
            (0..3).map(|_| s.sample(z, &ctx(r)).unwrap()).collect()
        })
        .collect();

    for threads in [1, 2, 3, 8, 40] {
        let mut samplers: Vec<Sampler> = (0..rows)
            .map(|r| Sampler::new(&params(r)).unwrap())
            .collect();
        #[allow(clippy::needless_range_loop)] // `step` indexes each row's steps
        for step in 0..3 {
            let mut batch: Vec<BatchRow<'_>> = samplers
                .iter_mut()
                .enumerate()
                .map(|(r, sampler)| BatchRow {
                    sampler,
                    logits: &z[r],
                    ctx: ctx(r),
                })
                .collect();
            let out = sample_batch(&mut batch, threads, |job| {
                // The parts run on scoped threads, started in reverse order.
                std::thread::scope(|s| {
                    for part in (1..threads).rev() {
                        s.spawn(move || job(part));
                    }
                    job(0);
                })
            });
            assert_eq!(out.len(), rows);
            for (r, got) in out.into_iter().enumerate() {
                assert_eq!(
                    got.unwrap(),
                    alone[r][step],
                    "{threads} threads, row {r}, step {step}"
                );
            }
        }
    }
}

#[test]
fn choose_batch_draws_the_same_tokens_and_parts_left_out_still_run() {
    let rows = 9;
    let z: Vec<Vec<f32>> = (0..rows).map(|r| logits(700, r as u32 + 99)).collect();
    let want: Vec<Sampled> = z
        .iter()
        .enumerate()
        .map(|(r, z)| {
            let mut s = Sampler::new(&params(r)).unwrap();
            s.sample(z, &Context::default()).unwrap()
        })
        .collect();
    let mut samplers: Vec<Sampler> = (0..rows)
        .map(|r| Sampler::new(&params(r)).unwrap())
        .collect();
    let mut batch: Vec<BatchRow<'_>> = samplers
        .iter_mut()
        .enumerate()
        .map(|(r, sampler)| BatchRow {
            sampler,
            logits: &z[r],
            ctx: Context::default(),
        })
        .collect();
    // A `run` that only runs part 1 of 3: the other parts are sampled on the calling thread.
    let out = choose_batch(&mut batch, 3, |job| job(1));
    for (r, got) in out.into_iter().enumerate() {
        let got = got.unwrap();
        assert_eq!(got.token, want[r].token, "row {r}");
        assert_eq!(got.logprob.to_bits(), want[r].logprob.to_bits(), "row {r}");
    }
}

#[test]
fn a_bad_row_fails_alone() {
    let good = logits(100, 3);
    let bad = vec![0.0, f32::NAN, 1.0];
    let mut a = Sampler::new(&params(1)).unwrap();
    let mut b = Sampler::new(&params(1)).unwrap();
    let mut rows = [
        BatchRow {
            sampler: &mut a,
            logits: &good,
            ctx: Context::default(),
        },
        BatchRow {
            sampler: &mut b,
            logits: &bad,
            ctx: Context::default(),
        },
    ];
    let out = sample_batch(&mut rows, 2, |job| {
        job(0);
        job(1);
    });
    assert!(out[0].is_ok());
    assert!(matches!(out[1], Err(Error::InvalidLogit { index: 1, .. })));
    assert!(sample_batch(&mut [], 4, |_| {}).is_empty());
}
