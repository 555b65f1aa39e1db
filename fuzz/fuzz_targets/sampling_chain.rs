//! Fuzzes the sampling chain of `nextok-sampling` with arbitrary logits (NaN and infinities
//! included) and arbitrary parameters: every input must give a typed error or a valid token,
//! never a panic.
//!
//! The input format is described on `Input`; it is simple enough to write seeds by hand (see
//! `corpus/sampling_chain/`). Besides "no panic" it checks that a returned token exists, has a
//! finite logit, is allowed by the mask, and has log-probabilities that are not NaN, and that a
//! successful trace's final distribution is finite and sums to 1.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nextok_sampling::{Context, Sampler, SamplingParams, StageKind, Trace};

/// Length of the fixed header; shorter inputs are padded with zeros.
const HEADER: usize = 32;

/// The input: a 32-byte header, then the logits as little-endian `f32`s.
///
/// - byte 0, stages on: bit 0 temperature, 1 top-k, 2 top-p, 3 min-p, 4 repetition penalty,
///   5 presence and frequency penalties, 6 logit bias, 7 constraint mask;
/// - byte 1, more: bit 0 allowed ids, 1 banned ids, 2 min-tokens, 3 reversed stage order,
///   4 a duplicated stage in the order (an error), 5 top-logprobs;
/// - bytes 2..26: six `f32`s: temperature, top-p, min-p, repetition, presence, frequency;
/// - byte 26: top-k; byte 27: number of draws (1 to 8); bytes 28..32: seed.
///
/// Token ids (history, bias, allowed, banned, end tokens, mask bits) are taken from the header
/// bytes modulo the vocabulary size plus 2, so that some are out of range on purpose.
#[derive(Debug)]
struct Input {
    header: [u8; HEADER],
    logits: Vec<f32>,
}

impl Input {
    fn parse(data: &[u8]) -> Input {
        let mut header = [0u8; HEADER];
        let n = data.len().min(HEADER);
        header[..n].copy_from_slice(&data[..n]);
        let logits = data[n..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Input { header, logits }
    }

    fn f32_at(&self, i: usize) -> f32 {
        let b = &self.header[i..i + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// A token id from header byte `i`, sometimes outside the vocabulary.
    fn token(&self, i: usize) -> u32 {
        (self.header[i % HEADER] as usize % (self.logits.len() + 2)) as u32
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let h = &input.header;
    let on = |bit: u8| h[0] >> bit & 1 == 1;
    let more = |bit: u8| h[1] >> bit & 1 == 1;
    let mut params = SamplingParams::default();
    if on(0) {
        params.temperature = input.f32_at(2);
    }
    if on(1) {
        params.top_k = Some(h[26] as usize);
    }
    if on(2) {
        params.top_p = input.f32_at(6);
    }
    if on(3) {
        params.min_p = input.f32_at(10);
    }
    if on(4) {
        params.repetition_penalty = input.f32_at(14);
    }
    if on(5) {
        params.presence_penalty = input.f32_at(18);
        params.frequency_penalty = input.f32_at(22);
    }
    if on(6) {
        params.logit_bias.insert(input.token(3), input.f32_at(4));
        params.logit_bias.insert(input.token(9), -input.f32_at(14));
    }
    if more(0) {
        params.allowed_token_ids = Some(vec![input.token(5), input.token(7), input.token(11)]);
    }
    if more(1) {
        params.banned_token_ids = vec![input.token(13), input.token(17)];
    }
    if more(2) {
        params.min_tokens = h[19] as usize % 4;
        params.end_token_ids = vec![input.token(21)];
    }
    if more(3) {
        params.order.reverse();
    }
    if more(4) {
        params.order[0] = StageKind::TopP;
        params.order[1] = StageKind::TopP;
    }
    if more(5) {
        params.top_logprobs = h[23] as usize % 8;
    }
    params.seed = Some(u32::from_le_bytes([h[28], h[29], h[30], h[31]]) as u64);

    let mask: Option<Vec<u64>> = on(7).then(|| {
        // Sometimes one word too short, which must be an error.
        let words = (input.logits.len().div_ceil(64) + 1).saturating_sub((h[25] & 1) as usize);
        (0..words)
            .map(|w| u64::from_le_bytes(h[(w * 8) % 24..(w * 8) % 24 + 8].try_into().unwrap()))
            .collect()
    });
    let prompt = [input.token(0), input.token(1), input.token(2)];
    let generated = [input.token(2), input.token(8), input.token(8)];
    let ctx = Context {
        prompt: &prompt,
        generated: &generated[..h[24] as usize % 4],
        allowed: mask.as_deref(),
    };

    let Ok(mut sampler) = Sampler::new(&params) else {
        return;
    };
    let allowed = |t: usize| mask.as_ref().is_none_or(|m| m[t / 64] >> (t % 64) & 1 == 1);
    for _ in 0..(h[27] % 8 + 1) {
        if let Ok(out) = sampler.sample(&input.logits, &ctx) {
            let t = out.token as usize;
            assert!(t < input.logits.len(), "token {t} outside the vocabulary");
            assert!(
                input.logits[t].is_finite(),
                "token {t} has logit {}",
                input.logits[t]
            );
            assert!(allowed(t), "masked token {t} chosen");
            assert!(!out.logprob.is_nan() && !out.raw_logprob.is_nan());
            assert!(out.top.len() <= params.top_logprobs);
        }
    }
    if let Ok(trace) = Trace::new(&params, &input.logits, &ctx) {
        assert!(trace.final_probs.iter().all(|p| p.is_finite() && *p >= 0.0));
        let sum: f64 = trace.final_probs.iter().map(|&p| p as f64).sum();
        assert!((sum - 1.0).abs() < 1e-3, "final distribution sums to {sum}");
    }
});
