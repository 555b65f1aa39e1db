//! The seeded sampler: logits in, one token out.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

use crate::candidates::{by_logit_desc, Candidate, Candidates};
use crate::softmax::{scan, sum_exp, Scan};
use crate::stages::{Chain, Context, FirstStage, LogitsProcessor};
use crate::{Error, SamplingParams};

/// One alternative token with its log-probabilities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLogprob {
    /// Token id.
    pub token: u32,
    /// Log-probability under the model's raw distribution (softmax of the unmodified logits).
    pub raw_logprob: f32,
    /// Log-probability under the final distribution (`-inf` if the chain removed the token).
    pub logprob: f32,
}

/// The outcome of one sampling step.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The chosen token id.
    pub token: u32,
    /// Its log-probability under the final distribution, the one it was drawn from (0 for greedy).
    pub logprob: f32,
    /// Its log-probability under the raw distribution (softmax of the unmodified logits).
    pub raw_logprob: f32,
    /// The most likely tokens under the raw distribution, most likely first (ties to the lowest
    /// id); as many as [`SamplingParams::top_logprobs`] asks for.
    pub top: Vec<TokenLogprob>,
}

/// A chosen token without the raw distribution: what [`Sampler::choose`] returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chosen {
    /// The chosen token id.
    pub token: u32,
    /// Its log-probability under the final distribution, the one it was drawn from (0 for greedy).
    pub logprob: f32,
}

/// Turns logits into a chosen token with a chain of stages and a seeded ChaCha20 generator.
///
/// The same logits, parameters and seed give the same token on every platform and every run: the
/// uniform number is built from the generator's raw 64-bit output (`(x >> 11) * 2^-53`, not a
/// `rand` distribution whose internals may change), the exponential is our own, and every stage
/// keeps the candidates in an order that does not depend on sort internals.
#[derive(Debug)]
pub struct Sampler {
    chain: Chain,
    rng: ChaCha20Rng,
    candidates: Candidates,
    scratch: Vec<Candidate>,
    top_logprobs: usize,
    // Plain greedy needs no candidates buffer: a single pass over the logits finds the token.
    plain_greedy: bool,
}

impl Sampler {
    /// A sampler for `params`, after validating them.
    pub fn new(params: &SamplingParams) -> Result<Self, Error> {
        let chain = Chain::from_params(params)?;
        // Dynamic temperature may replace the temperature stage: greedy only if it is the plain one.
        let plain_greedy = params.temperature == 0.0 && chain.names() == ["temperature"];
        let mut s = Sampler::from_chain(chain, params.seed.unwrap_or(0));
        s.plain_greedy = plain_greedy;
        s.top_logprobs = params.top_logprobs;
        Ok(s)
    }

    /// A sampler running a custom chain.
    pub fn from_chain(chain: Chain, seed: u64) -> Self {
        Sampler {
            chain,
            rng: ChaCha20Rng::seed_from_u64(seed),
            candidates: Candidates::new(),
            scratch: Vec::new(),
            top_logprobs: 0,
            plain_greedy: false,
        }
    }

    /// Restarts the random generator from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = ChaCha20Rng::seed_from_u64(seed);
    }

    /// Sets how many raw-distribution alternatives each [`Sampled`] carries.
    pub fn set_top_logprobs(&mut self, n: usize) {
        self.top_logprobs = n;
    }

    /// The chain this sampler runs.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The next uniform number in `[0, 1)`: the top 53 bits of one 64-bit output.
    fn next_uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Chooses the next token, with its log-probabilities under the final and the raw
    /// distribution and the top alternatives that [`Sampler::set_top_logprobs`] asks for.
    ///
    /// The raw log-probability costs an exponential over the whole vocabulary; a caller that
    /// does not need it calls [`Sampler::choose`], which draws the same token.
    ///
    /// Errors: a NaN or `+inf` logit, a token id in `ctx` outside the vocabulary, a mask that is
    /// too short, or no token left after masking and filtering.
    pub fn sample(&mut self, logits: &[f32], ctx: &Context<'_>) -> Result<Sampled, Error> {
        let scan = checked_scan(logits)?;
        let max = scan.max;
        let Chosen { token, logprob } = self.choose_scanned(logits, ctx, scan)?;
        let log_z = max as f64 + sum_exp(logits, max).ln();
        let raw = |z: f32| (z as f64 - log_z) as f32;

        let mut top = Vec::new();
        if self.top_logprobs > 0 {
            self.scratch.clear();
            self.scratch
                .extend(logits.iter().enumerate().map(|(i, &z)| Candidate {
                    id: i as u32,
                    logit: z,
                    prob: 0.0,
                }));
            let n = self.top_logprobs.min(self.scratch.len());
            if n < self.scratch.len() {
                self.scratch.select_nth_unstable_by(n - 1, by_logit_desc);
                self.scratch.truncate(n);
            }
            self.scratch.sort_unstable_by(by_logit_desc);
            for alt in &self.scratch {
                let logprob = if self.plain_greedy {
                    if alt.id == token {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                } else {
                    self.candidates
                        .get(alt.id)
                        .map_or(f32::NEG_INFINITY, |c| (c.prob as f64).ln() as f32)
                };
                top.push(TokenLogprob {
                    token: alt.id,
                    raw_logprob: raw(alt.logit),
                    logprob,
                });
            }
        }
        Ok(Sampled {
            token,
            logprob,
            raw_logprob: raw(logits[token as usize]),
            top,
        })
    }

    /// Chooses the next token: the same token, and the same random numbers used, as
    /// [`Sampler::sample`], without the raw log-probabilities (no pass over the vocabulary for
    /// them) and without alternatives.
    ///
    /// Errors as [`Sampler::sample`].
    pub fn choose(&mut self, logits: &[f32], ctx: &Context<'_>) -> Result<Chosen, Error> {
        // A first top-k (after a temperature or not) checks the logits as it selects, which
        // saves a pass; it gives up on any
        // logit that is not finite, and the ordinary path then reports or handles it.
        if let (false, Some(first @ (FirstStage::TopK(_) | FirstStage::ScaledTopK(..))), None) =
            (self.plain_greedy, self.chain.first_stage(), ctx.allowed)
        {
            if self.candidates.fill_fused(logits, f32::NAN, first) {
                return self.draw_after_first(ctx, first);
            }
        }
        let scan = checked_scan(logits)?;
        self.choose_scanned(logits, ctx, scan)
    }

    /// Runs the chain after the stages that `fill_fused` ran as `first`, and draws.
    fn draw_after_first(&mut self, ctx: &Context<'_>, first: FirstStage) -> Result<Chosen, Error> {
        self.chain
            .apply_from(&mut self.candidates, ctx, first.stages())?;
        self.draw()
    }

    /// Draws from the candidates as the chain left them.
    fn draw(&mut self) -> Result<Chosen, Error> {
        let u = self.next_uniform();
        let c = self.candidates.pick(u)?;
        Ok(Chosen {
            token: c.id,
            logprob: (c.prob as f64).ln() as f32,
        })
    }

    fn choose_scanned(
        &mut self,
        logits: &[f32],
        ctx: &Context<'_>,
        scan: Scan,
    ) -> Result<Chosen, Error> {
        if self.plain_greedy {
            return Ok(Chosen {
                token: greedy(logits, scan.max, ctx.allowed)?,
                logprob: 0.0,
            });
        }
        // Without a mask and without `-inf` logits, a first top-k, top-p or min-p runs straight
        // on the logits; its result, and so every later stage and the draw, is the same.
        if let (Some(first), None, false) =
            (self.chain.first_stage(), ctx.allowed, scan.any_neg_inf)
        {
            if self.candidates.fill_fused(logits, scan.max, first) {
                return self.draw_after_first(ctx, first);
            }
        }
        self.candidates
            .fill_checked(logits, ctx.allowed, scan.any_neg_inf)?;
        self.chain.apply(&mut self.candidates, ctx)?;
        self.draw()
    }
}

/// Checks the logits and finds their largest; all `-inf` (or none) is [`Error::NoCandidates`].
fn checked_scan(logits: &[f32]) -> Result<Scan, Error> {
    let scan = scan(logits)?;
    if scan.max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates {
            vocab: logits.len(),
        });
    }
    Ok(scan)
}

/// The allowed token with the highest logit, ties to the lowest id. `max` is the largest logit.
fn greedy(logits: &[f32], max: f32, allowed: Option<&[u64]>) -> Result<u32, Error> {
    let none = Error::NoCandidates {
        vocab: logits.len(),
    };
    let Some(words) = allowed else {
        // Without a mask the answer is the first logit equal to the maximum.
        return first_equal(logits, max).map(|i| i as u32).ok_or(none);
    };
    if words.len() * 64 < logits.len() {
        return Err(Error::MaskTooShort {
            words: words.len(),
            vocab: logits.len(),
        });
    }
    let is_allowed = |i: usize| words[i / 64] >> (i % 64) & 1 == 1;
    // The first logit equal to the maximum, when the mask allows it, is the answer: no allowed
    // logit is higher and no equal one comes before it. A constraint usually allows the
    // model's favourite, so this is two vectorised passes.
    if let Some(i) = first_equal(logits, max) {
        if is_allowed(i) {
            return Ok(i as u32);
        }
    }
    // Otherwise the largest allowed logit, lane by lane so that the loop vectorises, then the
    // first allowed token that has it.
    let mut lanes = [f32::NEG_INFINITY; 16];
    for (w, chunk) in logits.chunks(64).enumerate() {
        let word = words[w];
        if word == 0 {
            continue;
        }
        for (j, &z) in chunk.iter().enumerate() {
            let ok = word >> j & 1 == 1;
            let l = &mut lanes[j % 16];
            *l = if ok && z > *l { z } else { *l };
        }
    }
    let best = lanes
        .iter()
        .fold(f32::NEG_INFINITY, |m, &z| if z > m { z } else { m });
    if best == f32::NEG_INFINITY {
        return Err(none);
    }
    logits
        .iter()
        .enumerate()
        .position(|(i, &z)| z == best && is_allowed(i))
        .map(|i| i as u32)
        .ok_or(none)
}

/// The first index whose logit equals `x` (`==`, so -0.0 equals 0.0).
fn first_equal(logits: &[f32], x: f32) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, as checked on the line above.
        return unsafe { crate::x86::first_equal(logits, x) };
    }
    // Chunks are tested whole (no early exit inside one, so the test vectorises), then the
    // first matching chunk is searched.
    const CHUNK: usize = 64;
    logits
        .chunks(CHUNK)
        .position(|c| c.iter().fold(false, |hit, &z| hit | (z == x)))
        .and_then(|k| {
            let start = k * CHUNK;
            logits[start..]
                .iter()
                .position(|&z| z == x)
                .map(|i| start + i)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the allowed finite logit that is highest, ties to the lowest id.
    fn naive(logits: &[f32], words: &[u64]) -> Option<u32> {
        let mut best: Option<(usize, f32)> = None;
        for (i, &z) in logits.iter().enumerate() {
            let ok = words[i / 64] >> (i % 64) & 1 == 1;
            if ok && z != f32::NEG_INFINITY && best.is_none_or(|(_, b)| z > b) {
                best = Some((i, z));
            }
        }
        best.map(|(i, _)| i as u32)
    }

    #[test]
    fn masked_greedy_is_the_best_allowed_token() {
        // Logits on a coarse grid (many ties), masks from dense to sparse, with and without the
        // overall favourite allowed, and some -inf logits.
        let mut x = 0x9e37_79b9_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in [1usize, 63, 64, 65, 1000, 4099] {
            for density in [0u64, 1, 2, 4, 8] {
                let logits: Vec<f32> = (0..n)
                    .map(|_| match next() % 50 {
                        0 => f32::NEG_INFINITY,
                        r => (r % 7) as f32 - 3.0,
                    })
                    .collect();
                let words: Vec<u64> = (0..n.div_ceil(64))
                    .map(|_| {
                        // Each bit set with probability 1 - 2^-density (0: every bit clear).
                        if density == 0 {
                            0
                        } else {
                            (0..density).fold(0, |w, _| w | next())
                        }
                    })
                    .collect();
                let scan = crate::softmax::scan(&logits).unwrap();
                if scan.max == f32::NEG_INFINITY {
                    continue;
                }
                let got = greedy(&logits, scan.max, Some(&words)).ok();
                assert_eq!(got, naive(&logits, &words), "{n} logits, density {density}");
            }
        }
    }
}
