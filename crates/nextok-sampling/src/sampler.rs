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
        // A first top-k checks the logits as it selects, which saves a pass; it gives up on any
        // logit that is not finite, and the ordinary path then reports or handles it.
        if let (false, Some(first @ FirstStage::TopK(_)), None) =
            (self.plain_greedy, self.chain.first_stage(), ctx.allowed)
        {
            if self.candidates.fill_fused(logits, f32::NAN, first) {
                return self.draw_after_first(ctx);
            }
        }
        let scan = checked_scan(logits)?;
        self.choose_scanned(logits, ctx, scan)
    }

    /// Runs the chain after its first stage, which `fill_fused` ran, and draws.
    fn draw_after_first(&mut self, ctx: &Context<'_>) -> Result<Chosen, Error> {
        self.chain.apply_from(&mut self.candidates, ctx, 1)?;
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
        let fused = match self.chain.first_stage() {
            Some(first) if ctx.allowed.is_none() && !scan.any_neg_inf => {
                self.candidates.fill_fused(logits, scan.max, first)
            }
            _ => false,
        };
        if fused {
            return self.draw_after_first(ctx);
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
    let mut best: Option<(usize, f32)> = None;
    match allowed {
        None => {
            // Without a mask the answer is the first logit equal to the maximum. Chunks are
            // tested whole (no early exit inside one, so the test vectorises), then the first
            // matching chunk is searched.
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2, as checked on the line above.
                let first = unsafe { crate::x86::first_equal(logits, max) };
                return first.map(|i| i as u32).ok_or(Error::NoCandidates {
                    vocab: logits.len(),
                });
            }
            const CHUNK: usize = 64;
            best = logits
                .chunks(CHUNK)
                .position(|c| c.iter().fold(false, |hit, &z| hit | (z == max)))
                .and_then(|k| {
                    let start = k * CHUNK;
                    logits[start..]
                        .iter()
                        .position(|&z| z == max)
                        .map(|i| (start + i, max))
                });
        }
        Some(words) => {
            if words.len() * 64 < logits.len() {
                return Err(Error::MaskTooShort {
                    words: words.len(),
                    vocab: logits.len(),
                });
            }
            for (i, &z) in logits.iter().enumerate() {
                let ok = words[i / 64] >> (i % 64) & 1 == 1;
                if ok && z != f32::NEG_INFINITY && best.is_none_or(|(_, b)| z > b) {
                    best = Some((i, z));
                }
            }
        }
    }
    best.map(|(i, _)| i as u32).ok_or(Error::NoCandidates {
        vocab: logits.len(),
    })
}
