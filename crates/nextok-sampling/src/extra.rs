//! The stages users reach for beyond the specification's: typical-p, epsilon and eta cutoffs,
//! no-repeat n-grams, DRY, XTC, top-n-sigma, mirostat, dynamic temperature, and
//! `min_tokens_to_keep` for the filters.
//!
//! Each stage says which library it follows (transformers, llama.cpp, text-generation-webui) and
//! where it differs. Probabilities are always the softmax of the remaining candidates, as for the
//! specification's stages, and filters change no logit.

use std::cmp::Ordering;
use std::sync::Mutex;

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

use crate::candidates::{by_logit_desc, Candidate, Candidates};
use crate::params::{SamplingParams, StageKind};
use crate::stages::{Chain, Context, LogitsProcessor, MinP, Temperature, TopK, TopP};
use crate::Error;

/// The ChaCha20 stream (of the sampler's seed) that [`Xtc`] draws from. The sampler's own draw
/// uses stream 0, so the two never share a number.
pub const XTC_STREAM: u64 = 1;

fn invalid(name: &'static str, value: f64, expected: &'static str) -> Error {
    Error::InvalidParam {
        name,
        value,
        expected,
    }
}

fn check_tokens(field: &'static str, tokens: &[u32], vocab: usize) -> Result<(), Error> {
    match tokens.iter().find(|&&t| t as usize >= vocab) {
        Some(&token) => Err(Error::TokenOutOfRange {
            field,
            token,
            vocab,
        }),
        None => Ok(()),
    }
}

/// Natural-log probabilities of the candidates (in buffer order), in f64, from their logits:
/// `z − max − ln Σ e^(z − max)`. Exact where an f32 probability would underflow to 0.
fn log_probs(items: &[Candidate]) -> Vec<f64> {
    let max = items
        .iter()
        .map(|c| c.logit as f64)
        .fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = items.iter().map(|c| (c.logit as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    items.iter().map(|c| c.logit as f64 - log_z).collect()
}

/// Shannon entropy (nats) of the distribution whose log-probabilities are `lp`.
fn entropy(lp: &[f64]) -> f64 {
    -lp.iter()
        .filter(|l| l.is_finite())
        .map(|&l| l.exp() * l)
        .sum::<f64>()
}

/// The `m`-th best candidate (1-based) by [`by_logit_desc`], if there are at least `m`.
fn mth_best(items: &[Candidate], m: usize) -> Option<Candidate> {
    if m == 0 || m > items.len() {
        return None;
    }
    let mut copy = items.to_vec();
    copy.select_nth_unstable_by(m - 1, by_logit_desc);
    Some(copy[m - 1])
}

fn check_min_keep(min_keep: usize) -> Result<(), Error> {
    if min_keep == 0 {
        return Err(invalid(
            "min_tokens_to_keep",
            0.0,
            ">= 1 (1 means no minimum beyond the top token)",
        ));
    }
    Ok(())
}

/// `min_tokens_to_keep` for a filter (transformers): the inner filter runs, and the `min_keep`
/// most likely candidates (by logit, ties to the lowest id) stay whatever it removed. For top-p,
/// min-p, epsilon and eta, whose kept tokens are always the most likely ones, that is: the
/// `max(kept, min_keep)` most likely tokens. With `min_keep = 1` (transformers' default) a filter
/// that would remove every token leaves the top one.
///
/// Meant for filters: the restored tokens keep the logits they had before the inner stage.
#[derive(Debug)]
pub struct MinKeep<S> {
    inner: S,
    min_keep: usize,
}

impl<S: LogitsProcessor> MinKeep<S> {
    /// Errors when `min_keep = 0`.
    pub fn new(inner: S, min_keep: usize) -> Result<Self, Error> {
        check_min_keep(min_keep)?;
        Ok(MinKeep { inner, min_keep })
    }
}

impl<S: LogitsProcessor> LogitsProcessor for MinKeep<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        // Only what might have to come back is copied: the `min_keep` best candidates.
        let before: Vec<Candidate> = if self.min_keep == 1 {
            c.argmax().into_iter().collect()
        } else {
            match mth_best(c.as_slice(), self.min_keep) {
                Some(last) => c
                    .as_slice()
                    .iter()
                    .filter(|x| by_logit_desc(x, &last) != Ordering::Greater)
                    .copied()
                    .collect(),
                None => c.as_slice().to_vec(),
            }
        };
        self.inner.apply(c, ctx)?;
        if c.len() >= self.min_keep.min(before.len()) {
            return Ok(());
        }
        let mut dense = c.dense_logits();
        for x in &before {
            dense[x.id as usize] = x.logit;
        }
        c.fill(&dense, None)
    }
}

/// Locally typical sampling (Meister et al. 2022, "Locally Typical Sampling"; transformers'
/// `TypicalLogitsWarper`, `typical_p`). With `H = −Σ p ln p` the entropy of the remaining
/// candidates, each token's score is `|−ln p − H|`; sorted by score (lowest first, ties to the
/// lowest id), the tokens are added until their probabilities reach `mass`, and every token whose
/// score is at most that last one's is kept, plus the first `min_keep` of that order (the most
/// typical, as transformers keeps them). Logits unchanged. No-op at `mass = 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TypicalP {
    mass: f32,
    min_keep: usize,
}

impl TypicalP {
    /// Errors unless `0 < mass <= 1` and `min_keep >= 1`.
    pub fn new(mass: f32, min_keep: usize) -> Result<Self, Error> {
        if !(mass > 0.0 && mass <= 1.0) {
            return Err(invalid("typical_p", mass as f64, "in (0, 1]"));
        }
        check_min_keep(min_keep)?;
        Ok(TypicalP { mass, min_keep })
    }
}

impl LogitsProcessor for TypicalP {
    fn name(&self) -> &str {
        "typical_p"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.mass >= 1.0 {
            return Ok(());
        }
        c.ensure_probs()?;
        let items = c.as_slice();
        let lp = log_probs(items);
        let h = entropy(&lp);
        let mut order: Vec<(f64, u32, f64)> = items
            .iter()
            .zip(&lp)
            .map(|(x, &l)| ((-l - h).abs(), x.id, l.exp()))
            .collect();
        order.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut cum = 0.0;
        let mut last = order.len() - 1;
        for (i, o) in order.iter().enumerate() {
            cum += o.2;
            if cum >= self.mass as f64 {
                last = i;
                break;
            }
        }
        let limit = order[last].0;
        let mut keep: Vec<u32> = order
            .iter()
            .enumerate()
            .filter(|&(i, o)| o.0 <= limit || i < self.min_keep)
            .map(|(_, o)| o.1)
            .collect();
        keep.sort_unstable();
        c.retain(|x| keep.binary_search(&x.id).is_ok());
        Ok(())
    }
}

/// Epsilon sampling (Hewitt et al. 2022, "Truncation Sampling as Language Model Desmoothing";
/// transformers' `EpsilonLogitsWarper`, `epsilon_cutoff`): keeps the tokens whose probability
/// is at least `epsilon`. Logits and order unchanged. No-op at 0. Alone it can leave no token;
/// [`SamplingParams`] wraps it in [`MinKeep`] (`min_tokens_to_keep`, at least 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpsilonCutoff {
    epsilon: f32,
}

impl EpsilonCutoff {
    /// Errors unless `0 <= epsilon < 1`.
    pub fn new(epsilon: f32) -> Result<Self, Error> {
        if !(0.0..1.0).contains(&epsilon) {
            return Err(invalid("epsilon_cutoff", epsilon as f64, "in [0, 1)"));
        }
        Ok(EpsilonCutoff { epsilon })
    }
}

impl LogitsProcessor for EpsilonCutoff {
    fn name(&self) -> &str {
        "epsilon_cutoff"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.epsilon > 0.0 {
            keep_at_least_prob(c, self.epsilon as f64)?;
        }
        Ok(())
    }
}

/// Keeps the candidates whose probability (f64, from the logits) is at least `threshold`.
fn keep_at_least_prob(c: &mut Candidates, threshold: f64) -> Result<(), Error> {
    c.ensure_probs()?;
    let lp = log_probs(c.as_slice());
    let keep: Vec<bool> = lp.iter().map(|l| l.exp() >= threshold).collect();
    let mut i = 0;
    c.retain(|_| {
        i += 1;
        keep[i - 1]
    });
    Ok(())
}

/// Eta sampling (Hewitt et al. 2022; transformers' `EtaLogitsWarper`, `eta_cutoff`): with `H`
/// the entropy of the remaining candidates, keeps the tokens whose probability is at least
/// `η = min(ε, √ε · e^(−H))`. Logits and order unchanged. No-op at 0. Alone it can leave no token;
/// [`SamplingParams`] wraps it in [`MinKeep`] (`min_tokens_to_keep`, at least 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EtaCutoff {
    epsilon: f32,
}

impl EtaCutoff {
    /// Errors unless `0 <= epsilon < 1`.
    pub fn new(epsilon: f32) -> Result<Self, Error> {
        if !(0.0..1.0).contains(&epsilon) {
            return Err(invalid("eta_cutoff", epsilon as f64, "in [0, 1)"));
        }
        Ok(EtaCutoff { epsilon })
    }
}

impl LogitsProcessor for EtaCutoff {
    fn name(&self) -> &str {
        "eta_cutoff"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.epsilon > 0.0 {
            c.ensure_probs()?;
            let h = entropy(&log_probs(c.as_slice()));
            let e = self.epsilon as f64;
            keep_at_least_prob(c, e.min(e.sqrt() * (-h).exp()))?;
        }
        Ok(())
    }
}

/// Top-n-sigma (Tang et al. 2024, "Top-nσ"; llama.cpp's `top_n_sigma`): with `max`, and `σ` the
/// population standard deviation of the remaining logits, keeps the tokens whose logit is at
/// least `max − n·σ`. Logits and order unchanged. Scaling every logit by the same positive
/// factor scales `σ` alike, so temperature before or after it gives the same set. No-op at
/// `n <= 0` (llama.cpp's −1 and 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopNSigma {
    n: f32,
}

impl TopNSigma {
    /// Errors unless `n` is finite.
    pub fn new(n: f32) -> Result<Self, Error> {
        if !n.is_finite() {
            return Err(invalid("top_n_sigma", n as f64, "finite (<= 0 is off)"));
        }
        Ok(TopNSigma { n })
    }
}

impl LogitsProcessor for TopNSigma {
    fn name(&self) -> &str {
        "top_n_sigma"
    }

    fn apply(&self, c: &mut Candidates, _: &Context<'_>) -> Result<(), Error> {
        if self.n <= 0.0 || c.len() <= 1 {
            return Ok(());
        }
        let finite = || {
            c.as_slice()
                .iter()
                .map(|x| x.logit as f64)
                .filter(|z| z.is_finite())
        };
        let count = finite().count() as f64;
        if count == 0.0 {
            return Ok(());
        }
        let max = finite().fold(f64::NEG_INFINITY, f64::max);
        let mean = finite().sum::<f64>() / count;
        let var = finite().map(|z| (z - mean) * (z - mean)).sum::<f64>() / count;
        let threshold = max - self.n as f64 * var.sqrt();
        c.retain(|x| x.logit as f64 >= threshold);
        Ok(())
    }
}

/// XTC, "exclude top choices" (text-generation-webui, llama.cpp's `xtc_probability` and
/// `xtc_threshold`): with probability `probability`, when at least two candidates have
/// probability `>= threshold`, removes all of them but the least likely one (the last in the
/// order by logit, ties to the lowest id), so that the answer avoids its most obvious
/// continuations while keeping a viable one. Logits unchanged. No-op when `probability = 0` or
/// `threshold > 0.5` (then at most one token can reach it).
///
/// The draw: the 64-bit word number `generated.len()` of ChaCha20 stream [`XTC_STREAM`] seeded
/// with the sampler's seed, as a uniform `u` in `[0, 1)` (`(x >> 11) · 2^−53`); the stage acts
/// when `u < probability`. So it depends on the seed and the position only, never on how often
/// the chain ran or on what else runs, and it never moves the sampler's own stream (stream 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Xtc {
    probability: f32,
    threshold: f32,
    seed: u64,
}

impl Xtc {
    /// Errors unless both are in `[0, 1]`.
    pub fn new(probability: f32, threshold: f32, seed: u64) -> Result<Self, Error> {
        if !(0.0..=1.0).contains(&probability) {
            return Err(invalid("xtc_probability", probability as f64, "in [0, 1]"));
        }
        if !(0.0..=1.0).contains(&threshold) {
            return Err(invalid(
                "xtc_threshold",
                threshold as f64,
                "in [0, 1] (above 0.5 is off)",
            ));
        }
        Ok(Xtc {
            probability,
            threshold,
            seed,
        })
    }

    /// The uniform number the stage draws at step `step` (the number of generated tokens).
    pub fn draw(seed: u64, step: usize) -> f64 {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        rng.set_stream(XTC_STREAM);
        // A word position counts 32-bit words; one draw is one 64-bit output.
        rng.set_word_pos(2 * step as u128);
        (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

impl LogitsProcessor for Xtc {
    fn name(&self) -> &str {
        "xtc"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        if self.probability <= 0.0 || self.threshold > 0.5 || c.len() < 2 {
            return Ok(());
        }
        if Xtc::draw(self.seed, ctx.generated.len()) >= self.probability as f64 {
            return Ok(());
        }
        c.ensure_probs()?;
        let lp = log_probs(c.as_slice());
        let t = self.threshold as f64;
        let mut above = c
            .as_slice()
            .iter()
            .zip(&lp)
            .filter(|(_, l)| l.exp() >= t)
            .map(|(x, _)| *x);
        let Some(first) = above.next() else {
            return Ok(());
        };
        let (count, last) = above.fold((1, first), |(n, worst), x| {
            let worse = by_logit_desc(&x, &worst) == Ordering::Greater;
            (n + 1, if worse { x } else { worst })
        });
        if count >= 2 {
            let mut i = 0;
            c.retain(|x| {
                i += 1;
                x.id == last.id || lp[i - 1].exp() < t
            });
        }
        Ok(())
    }
}

/// DRY, "don't repeat yourself" (p-e-w, text-generation-webui; llama.cpp's `dry_*`): penalises
/// the tokens that would extend a repetition of earlier text.
///
/// Over the last `penalty_last_n` tokens `h` of the prompt and the answer (all of them when
/// `None`), for every earlier position `i` (not the last), the match length `m(i)` is the number
/// of tokens, counted back from `h[i]` and from the last token together, that are equal and not
/// sequence breakers. The token `h[i + 1]` that followed, unless it is a breaker, gets
/// `z ← z − multiplier · base^(m − allowed_length)` for the longest such `m` that is
/// `>= allowed_length` (and `>= 1`). The exponent is capped as llama.cpp caps it
/// (`88.7228 / ln base`), so the penalty stays finite. No-op when `multiplier = 0` or
/// `penalty_last_n = Some(0)`. Breakers are token ids ([`dry_breaker_ids`] finds them from
/// texts). Match lengths come from one Z-function pass over the reversed window, `O(n)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: usize,
    last_n: Option<usize>,
    breakers: Vec<u32>,
}

impl Dry {
    /// Errors unless `multiplier` is finite and `>= 0`, `base` finite and `>= 1`,
    /// `allowed_length >= 1`.
    pub fn new(
        multiplier: f32,
        base: f32,
        allowed_length: usize,
        last_n: Option<usize>,
        mut breakers: Vec<u32>,
    ) -> Result<Self, Error> {
        if !(multiplier.is_finite() && multiplier >= 0.0) {
            return Err(invalid(
                "dry_multiplier",
                multiplier as f64,
                "finite and >= 0 (0 is off)",
            ));
        }
        if !(base.is_finite() && base >= 1.0) {
            return Err(invalid("dry_base", base as f64, "finite and >= 1"));
        }
        if allowed_length == 0 {
            return Err(invalid("dry_allowed_length", 0.0, ">= 1"));
        }
        breakers.sort_unstable();
        breakers.dedup();
        Ok(Dry {
            multiplier,
            base,
            allowed_length,
            last_n,
            breakers,
        })
    }

    /// The penalty for a match of length `m` (0 below `allowed_length`).
    pub fn penalty(&self, m: usize) -> f32 {
        if m < self.allowed_length {
            return 0.0;
        }
        let mut exp = (m - self.allowed_length) as f64;
        if self.base > 1.000001 {
            exp = exp.min((88.722_839_1f64 / (self.base as f64).ln()).floor());
        }
        (self.multiplier as f64 * (self.base as f64).powf(exp)).min(f32::MAX as f64) as f32
    }

    /// The longest match length (`>= allowed_length`) for each token that would extend a
    /// repetition of `history`, sorted by token id.
    pub fn match_lengths(&self, history: &[u32]) -> Vec<(u32, usize)> {
        let h = match self.last_n {
            Some(n) => &history[history.len().saturating_sub(n)..],
            None => history,
        };
        let len = h.len();
        if len < 2 {
            return Vec::new();
        }
        let is_breaker = |t: u32| self.breakers.binary_search(&t).is_ok();
        // The match may not run into a breaker on the side of the last token.
        let run = h.iter().rev().take_while(|&&t| !is_breaker(t)).count();
        if run == 0 {
            return Vec::new();
        }
        // z[k]: the longest common prefix of the reversed window and its suffix from k, i.e. how
        // far the text ending at position `len − 1 − k` agrees, backwards, with the text's end.
        let r: Vec<u32> = h.iter().rev().copied().collect();
        let z = z_function(&r);
        let mut out: Vec<(u32, usize)> = Vec::new();
        for i in 0..len - 1 {
            let m = z[len - 1 - i].min(run);
            let next = h[i + 1];
            if m >= self.allowed_length && !is_breaker(next) {
                out.push((next, m));
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        out.dedup_by_key(|x| x.0);
        out
    }
}

/// The Z-function: `z[k]` is the length of the longest common prefix of `s` and `s[k..]`
/// (`z[0] = s.len()`), in linear time.
fn z_function(s: &[u32]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    if n == 0 {
        return z;
    }
    z[0] = n;
    let (mut l, mut r) = (0, 0);
    for k in 1..n {
        if k < r {
            z[k] = (r - k).min(z[k - l]);
        }
        while k + z[k] < n && s[z[k]] == s[k + z[k]] {
            z[k] += 1;
        }
        if k + z[k] > r {
            l = k;
            r = k + z[k];
        }
    }
    z
}

impl LogitsProcessor for Dry {
    fn name(&self) -> &str {
        "dry"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        if self.multiplier == 0.0 || self.last_n == Some(0) {
            return Ok(());
        }
        check_tokens("prompt", ctx.prompt, c.vocab_size())?;
        check_tokens("generated", ctx.generated, c.vocab_size())?;
        let history = [ctx.prompt, ctx.generated].concat();
        for (token, m) in self.match_lengths(&history) {
            let p = self.penalty(m);
            c.update_logit(token, |z| z - p);
        }
        Ok(())
    }
}

/// The token ids that count as DRY sequence breakers: every token whose bytes contain one of the
/// (non-empty) `breakers` whole. This is llama.cpp's rule for the default one-character breakers
/// (`"\n"`, `":"`, `"\""`, `"*"`); a longer breaker split across several tokens is not
/// recognised, only a token that holds it all.
pub fn dry_breaker_ids<'a>(
    breakers: &[String],
    tokens: impl IntoIterator<Item = (u32, &'a [u8])>,
) -> Vec<u32> {
    let needles: Vec<&[u8]> = breakers
        .iter()
        .map(|s| s.as_bytes())
        .filter(|b| !b.is_empty())
        .collect();
    tokens
        .into_iter()
        .filter(|(_, bytes)| {
            needles
                .iter()
                .any(|n| bytes.windows(n.len()).any(|w| w == *n))
        })
        .map(|(id, _)| id)
        .collect()
}

/// No-repeat n-gram (transformers' `NoRepeatNGramLogitsProcessor`, `no_repeat_ngram_size`):
/// removes every token that would complete an n-gram already present in the prompt followed by
/// the answer (transformers' `input_ids` of a decoder-only model): those that followed an
/// earlier occurrence of the last `n − 1` tokens. A filter. No-op at `n = 0`, and while the text
/// is shorter than `n − 1` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRepeatNGram {
    n: usize,
}

impl NoRepeatNGram {
    /// `n = 0` is off.
    pub fn new(n: usize) -> Self {
        NoRepeatNGram { n }
    }
}

/// The tokens that followed an occurrence of `tail` in `text` (ascending, distinct).
fn followers(text: &[u32], tail: &[u32]) -> Vec<u32> {
    let k = tail.len();
    let mut out: Vec<u32> = (0..text.len().saturating_sub(k))
        .filter(|&i| &text[i..i + k] == tail)
        .map(|i| text[i + k])
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

impl LogitsProcessor for NoRepeatNGram {
    fn name(&self) -> &str {
        "no_repeat_ngram"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        if self.n == 0 {
            return Ok(());
        }
        check_tokens("prompt", ctx.prompt, c.vocab_size())?;
        check_tokens("generated", ctx.generated, c.vocab_size())?;
        let text = [ctx.prompt, ctx.generated].concat();
        if text.len() + 1 < self.n {
            return Ok(());
        }
        let banned = followers(&text, &text[text.len() + 1 - self.n..]);
        if !banned.is_empty() {
            c.retain(|x| banned.binary_search(&x.id).is_err());
        }
        Ok(())
    }
}

/// Encoder no-repeat n-gram (transformers' `EncoderNoRepeatNGramLogitsProcessor`,
/// `encoder_no_repeat_ngram_size`): removes every token that would make the answer repeat an
/// n-gram of the prompt (the encoder's input): those that followed, in the prompt, an occurrence
/// of the answer's last `n − 1` tokens. With `n = 1` no prompt token can be chosen. A filter.
/// No-op at `n = 0`, and while the answer is shorter than `n − 1` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderNoRepeatNGram {
    n: usize,
}

impl EncoderNoRepeatNGram {
    /// `n = 0` is off.
    pub fn new(n: usize) -> Self {
        EncoderNoRepeatNGram { n }
    }
}

impl LogitsProcessor for EncoderNoRepeatNGram {
    fn name(&self) -> &str {
        "encoder_no_repeat_ngram"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        if self.n == 0 {
            return Ok(());
        }
        check_tokens("prompt", ctx.prompt, c.vocab_size())?;
        check_tokens("generated", ctx.generated, c.vocab_size())?;
        let g = ctx.generated;
        if g.len() + 1 < self.n {
            return Ok(());
        }
        let banned = followers(ctx.prompt, &g[g.len() + 1 - self.n..]);
        if !banned.is_empty() {
            c.retain(|x| banned.binary_search(&x.id).is_err());
        }
        Ok(())
    }
}

/// Dynamic temperature (llama.cpp's `dynatemp_range`, `dynatemp_exponent`, after kalomaze's
/// entropy sampling): with `H` the entropy of the remaining `n` candidates and `H / ln n` its
/// normalised value, the temperature is `T_min + (T_max − T_min) · (H / ln n)^exponent` with
/// `T_min = max(0, T − range)` and `T_max = T + range`, applied as [`Temperature`] is (so 0 is
/// greedy). A confident distribution is sharpened, a flat one flattened. No-op with one
/// candidate. `n` counts the candidates still in the running (llama.cpp also counts tokens a
/// grammar masked to `−inf`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DynamicTemperature {
    t: f32,
    range: f32,
    exponent: f32,
}

impl DynamicTemperature {
    /// Errors unless `t`, `range` and `exponent` are finite and `>= 0`.
    pub fn new(t: f32, range: f32, exponent: f32) -> Result<Self, Error> {
        Temperature::new(t)?;
        if !(range.is_finite() && range >= 0.0) {
            return Err(invalid(
                "dynatemp_range",
                range as f64,
                "finite and >= 0 (0 is off)",
            ));
        }
        if !(exponent.is_finite() && exponent >= 0.0) {
            return Err(invalid(
                "dynatemp_exponent",
                exponent as f64,
                "finite and >= 0",
            ));
        }
        Ok(DynamicTemperature { t, range, exponent })
    }

    /// The temperature for a distribution of normalised entropy `h` (in `[0, 1]`).
    pub fn temperature(&self, h: f64) -> f64 {
        let lo = (self.t as f64 - self.range as f64).max(0.0);
        let hi = self.t as f64 + self.range as f64;
        lo + (hi - lo) * h.powf(self.exponent as f64)
    }
}

impl LogitsProcessor for DynamicTemperature {
    fn name(&self) -> &str {
        "dynamic_temperature"
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        c.ensure_probs()?;
        if c.len() <= 1 {
            return Ok(());
        }
        let h = entropy(&log_probs(c.as_slice())) / (c.len() as f64).ln();
        let t = self.temperature(h.clamp(0.0, 1.0)) as f32;
        Temperature::new(t)?.apply(c, ctx)
    }
}

/// Which mirostat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirostatVersion {
    /// Mirostat 1: a Zipf estimate from the 100 most likely tokens chooses a top-k.
    V1,
    /// Mirostat 2: keeps the tokens whose surprise `−log2 p` is at most `μ`.
    V2,
}

/// Mirostat (Basu et al. 2021, "Mirostat: a neural text decoding algorithm that directly
/// controls perplexity"; llama.cpp's `mirostat`, `mirostat_tau`, `mirostat_eta`): keeps the
/// surprise of the chosen tokens near `tau` by a truncation that adapts from step to step.
///
/// `μ` starts at `2·tau`. Version 2 keeps the candidates with `−log2 p <= μ` (at least the most
/// likely one); version 1 estimates the Zipf exponent `ŝ` by least squares over the 100 most
/// likely tokens (`t_i = ln((i+2)/(i+1))`, `b_i = ln(p_i / p_{i+1})`, `ŝ = Σ t_i b_i / Σ t_i²`),
/// then keeps the top `k = ((ŝ − 1) · 2^μ / (1 − N^(1−ŝ)))^(1/ŝ)` (N the vocabulary; `k` rounded
/// down, at least 1; every token when `k` is not finite). After the draw, with `p` the chosen
/// token's probability after the truncation, `μ ← μ − eta · (−log2 p − tau)`.
///
/// It must be the last stage of its chain, since the chosen token's probability is read from
/// what it leaves. State across steps: the stage learns the chosen token at the next step, from
/// `Context::generated` (its last token), so that a step run again (the same `generated`) gives
/// the same truncation, and `μ` of every step so far is kept, so a caller may go back to an
/// earlier step. At step 0 (no generated token), or after a gap it cannot follow, `μ` starts
/// again at `2·tau`.
#[derive(Debug)]
pub struct Mirostat {
    version: MirostatVersion,
    tau: f32,
    eta: f32,
    state: Mutex<MirostatState>,
}

#[derive(Debug, Default)]
struct MirostatState {
    /// `mus[s]`: the `μ` used at step `s`.
    mus: Vec<f64>,
    /// The step last applied and what it kept (id, probability), by id.
    last: Option<(usize, Vec<(u32, f32)>)>,
}

/// How many of the most likely tokens mirostat 1 fits its Zipf exponent to.
const MIROSTAT_M: usize = 100;

impl Mirostat {
    /// Errors unless `tau` and `eta` are finite and `>= 0`.
    pub fn new(version: MirostatVersion, tau: f32, eta: f32) -> Result<Self, Error> {
        if !(tau.is_finite() && tau >= 0.0) {
            return Err(invalid("mirostat_tau", tau as f64, "finite and >= 0"));
        }
        if !(eta.is_finite() && eta >= 0.0) {
            return Err(invalid("mirostat_eta", eta as f64, "finite and >= 0"));
        }
        Ok(Mirostat {
            version,
            tau,
            eta,
            state: Mutex::new(MirostatState::default()),
        })
    }

    /// The `μ` the stage would use at step `generated.len()`, updating its state.
    fn mu_for(&self, st: &mut MirostatState, generated: &[u32]) -> f64 {
        let n = generated.len();
        let start = 2.0 * self.tau as f64;
        if n > 0 {
            if let Some((step, kept)) = &st.last {
                if step + 1 == n && *step < st.mus.len() {
                    let token = generated[n - 1];
                    if let Ok(i) = kept.binary_search_by_key(&token, |k| k.0) {
                        let surprise = -(kept[i].1 as f64).log2();
                        let mu = st.mus[*step] - self.eta as f64 * (surprise - self.tau as f64);
                        st.mus.truncate(n);
                        st.mus.push(mu);
                        return mu;
                    }
                }
            }
            if n < st.mus.len() {
                st.mus.truncate(n + 1);
                return st.mus[n];
            }
        }
        st.mus.clear();
        st.mus.resize(n + 1, start);
        start
    }

    /// Mirostat 1's `k` for the probabilities `p` (most likely first, at most 100 used), a
    /// vocabulary of `n_vocab` and `μ`. `None` when it is not finite.
    pub fn v1_k(p: &[f64], n_vocab: usize, mu: f64) -> Option<f64> {
        let (mut tb, mut tt) = (0.0f64, 0.0f64);
        for i in 0..(MIROSTAT_M - 1).min(p.len().saturating_sub(1)) {
            let t = ((i + 2) as f64 / (i + 1) as f64).ln();
            let b = (p[i] / p[i + 1]).ln();
            tb += t * b;
            tt += t * t;
        }
        let s = tb / tt;
        let e = s - 1.0;
        let k = (e * 2f64.powf(mu) / (1.0 - (n_vocab as f64).powf(-e))).powf(1.0 / s);
        k.is_finite().then_some(k)
    }
}

impl LogitsProcessor for Mirostat {
    fn name(&self) -> &str {
        match self.version {
            MirostatVersion::V1 => "mirostat",
            MirostatVersion::V2 => "mirostat_v2",
        }
    }

    fn apply(&self, c: &mut Candidates, ctx: &Context<'_>) -> Result<(), Error> {
        // A panic elsewhere while the lock was held cannot leave the state half-written (every
        // update is a push or a truncate), so a poisoned lock is still usable.
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mu = self.mu_for(&mut st, ctx.generated);
        c.ensure_probs()?;
        match self.version {
            MirostatVersion::V2 => {
                let lp = log_probs(c.as_slice());
                let best = c.argmax().map(|b| b.id);
                let bound = -mu * std::f64::consts::LN_2;
                let mut i = 0;
                c.retain(|x| {
                    i += 1;
                    lp[i - 1] >= bound || Some(x.id) == best
                });
            }
            MirostatVersion::V1 => {
                let mut top = c.as_slice().to_vec();
                let m = MIROSTAT_M.min(top.len());
                if m < top.len() {
                    top.select_nth_unstable_by(m - 1, by_logit_desc);
                    top.truncate(m);
                }
                top.sort_unstable_by(by_logit_desc);
                let lp = log_probs(c.as_slice());
                let lse = c.as_slice()[0].logit as f64 - lp[0];
                let p: Vec<f64> = top.iter().map(|x| (x.logit as f64 - lse).exp()).collect();
                if let Some(k) = Mirostat::v1_k(&p, c.vocab_size(), mu) {
                    if k < c.len() as f64 {
                        TopK::new((k as usize).max(1))?.apply(c, ctx)?;
                    }
                }
            }
        }
        c.ensure_probs()?;
        let mut kept: Vec<(u32, f32)> = c.as_slice().iter().map(|x| (x.id, x.prob)).collect();
        kept.sort_unstable_by_key(|k| k.0);
        st.last = Some((ctx.generated.len(), kept));
        Ok(())
    }
}

/// Checks the fields of this module's stages.
pub(crate) fn validate(p: &SamplingParams) -> Result<(), Error> {
    check_min_keep(p.min_tokens_to_keep)?;
    TypicalP::new(p.typical_p, p.min_tokens_to_keep)?;
    EpsilonCutoff::new(p.epsilon_cutoff)?;
    EtaCutoff::new(p.eta_cutoff)?;
    dry(p)?;
    Xtc::new(p.xtc_probability, p.xtc_threshold, 0)?;
    TopNSigma::new(p.top_n_sigma)?;
    if p.mirostat > 2 {
        return Err(invalid("mirostat", p.mirostat as f64, "0 (off), 1 or 2"));
    }
    Mirostat::new(MirostatVersion::V2, p.mirostat_tau, p.mirostat_eta)?;
    DynamicTemperature::new(p.temperature, p.dynatemp_range, p.dynatemp_exponent)?;
    Ok(())
}

fn dry(p: &SamplingParams) -> Result<Dry, Error> {
    let last_n = match p.dry_penalty_last_n {
        -1 => None,
        n if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        n => {
            return Err(invalid(
                "dry_penalty_last_n",
                n as f64,
                ">= -1 (-1 is the whole text, 0 is off)",
            ))
        }
    };
    Dry::new(
        p.dry_multiplier,
        p.dry_base,
        p.dry_allowed_length,
        last_n,
        p.dry_sequence_breaker_ids.clone(),
    )
}

/// The token filters of this module, which run with the other filters, before every other
/// stage: no-repeat n-grams.
pub(crate) fn push_filters(mut chain: Chain, p: &SamplingParams) -> Chain {
    if p.no_repeat_ngram_size > 0 {
        chain = chain.push(NoRepeatNGram::new(p.no_repeat_ngram_size));
    }
    if p.encoder_no_repeat_ngram_size > 0 {
        chain = chain.push(EncoderNoRepeatNGram::new(p.encoder_no_repeat_ngram_size));
    }
    chain
}

/// The stage (or stages) of `kind`, with this module's stages in llama.cpp's order around them
/// (see the crate documentation); `None` where the existing stage stays as it is.
pub(crate) fn push_slot(
    mut chain: Chain,
    kind: StageKind,
    p: &SamplingParams,
    before: bool,
) -> Result<Chain, Error> {
    let keep = p.min_tokens_to_keep;
    match (kind, before) {
        (StageKind::Penalties, false) if p.dry_multiplier > 0.0 && p.dry_penalty_last_n != 0 => {
            chain = chain.push(dry(p)?);
        }
        (StageKind::TopK, true) if p.top_n_sigma > 0.0 => {
            chain = chain.push(TopNSigma::new(p.top_n_sigma)?);
        }
        (StageKind::TopK, false) if p.typical_p < 1.0 => {
            chain = chain.push(TypicalP::new(p.typical_p, keep)?);
        }
        (StageKind::MinP, false) => {
            if p.epsilon_cutoff > 0.0 {
                chain = chain.push(MinKeep::new(EpsilonCutoff::new(p.epsilon_cutoff)?, keep)?);
            }
            if p.eta_cutoff > 0.0 {
                chain = chain.push(MinKeep::new(EtaCutoff::new(p.eta_cutoff)?, keep)?);
            }
            if p.xtc_probability > 0.0 && p.xtc_threshold <= 0.5 {
                chain = chain.push(Xtc::new(
                    p.xtc_probability,
                    p.xtc_threshold,
                    p.seed.unwrap_or(0),
                )?);
            }
        }
        _ => {}
    }
    Ok(chain)
}

/// Replaces the plain stage of `kind` when this module's settings change it: dynamic temperature
/// for temperature, and `min_tokens_to_keep > 1` for top-p and min-p. The flag says whether it
/// did (then the plain stage is left out).
pub(crate) fn replace_slot(
    chain: Chain,
    kind: StageKind,
    p: &SamplingParams,
) -> Result<(Chain, bool), Error> {
    let keep = p.min_tokens_to_keep;
    Ok(match kind {
        StageKind::Temperature if p.dynatemp_range > 0.0 => (
            chain.push(DynamicTemperature::new(
                p.temperature,
                p.dynatemp_range,
                p.dynatemp_exponent,
            )?),
            true,
        ),
        StageKind::TopP if keep > 1 && p.top_p < 1.0 => {
            (chain.push(MinKeep::new(TopP::new(p.top_p)?, keep)?), true)
        }
        StageKind::MinP if keep > 1 && p.min_p > 0.0 => {
            (chain.push(MinKeep::new(MinP::new(p.min_p)?, keep)?), true)
        }
        _ => (chain, false),
    })
}

/// Mirostat, which ends the chain.
pub(crate) fn push_last(chain: Chain, p: &SamplingParams) -> Result<Chain, Error> {
    Ok(match p.mirostat {
        1 => chain.push(Mirostat::new(
            MirostatVersion::V1,
            p.mirostat_tau,
            p.mirostat_eta,
        )?),
        2 => chain.push(Mirostat::new(
            MirostatVersion::V2,
            p.mirostat_tau,
            p.mirostat_eta,
        )?),
        _ => chain,
    })
}
