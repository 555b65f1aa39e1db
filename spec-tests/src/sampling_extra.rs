//! Reference implementations of the stages beyond the specification's chain: typical-p, epsilon
//! and eta cutoffs, no-repeat n-grams, DRY, XTC, top-n-sigma, mirostat, dynamic temperature and
//! `min_tokens_to_keep`.
//!
//! Each is written from its paper or its library's description, step by step as that source
//! says it, in `f64`, sorting the whole vocabulary wherever the source sorts. A stage takes
//! logits (`-inf` for a token already out) and returns logits: a filter sets what it removes to
//! `-inf`, a logit stage changes values. `softmax` of the result is the distribution.
//!
//! Ordering convention, as in [`crate::sampling`]: "most likely first" is by logit, highest
//! first, and equal logits by id, lowest first.

use crate::sampling::{softmax, sorted_ids};

/// The ids of the tokens still in the running (finite logit).
fn alive(logits: &[f64]) -> Vec<usize> {
    (0..logits.len())
        .filter(|&i| logits[i] > f64::NEG_INFINITY)
        .collect()
}

/// `log_softmax` of the logits (`-inf` stays `-inf`).
pub fn log_softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = logits.iter().map(|z| (z - max).exp()).sum();
    logits.iter().map(|z| z - max - sum.ln()).collect()
}

/// Shannon entropy in nats of the softmax of the logits.
pub fn entropy(logits: &[f64]) -> f64 {
    let lp = log_softmax(logits);
    -lp.iter()
        .filter(|l| l.is_finite())
        .map(|l| l.exp() * l)
        .sum::<f64>()
}

/// Sets the logits of the tokens not in `keep` to `-inf`.
fn keep_only(logits: &[f64], keep: impl Fn(usize) -> bool) -> Vec<f64> {
    (0..logits.len())
        .map(|i| {
            if keep(i) {
                logits[i]
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect()
}

/// transformers' `min_tokens_to_keep`: after `filtered` (the output of a filter on `logits`),
/// the `min_keep` most likely tokens of `logits` are back whatever the filter did.
pub fn with_min_keep(logits: &[f64], filtered: &[f64], min_keep: usize) -> Vec<f64> {
    let top: Vec<usize> = sorted_ids(logits)
        .into_iter()
        .filter(|&i| logits[i] > f64::NEG_INFINITY)
        .take(min_keep)
        .collect();
    keep_only(logits, |i| {
        filtered[i] > f64::NEG_INFINITY || top.contains(&i)
    })
}

/// Locally typical sampling (Meister et al. 2022, Algorithm 1; transformers'
/// `TypicalLogitsWarper`): 1. the entropy `H`; 2. each token's distance `|−log p − H|`;
/// 3. sort by distance, smallest first; 4. add probabilities in that order until they reach
/// `mass`; 5. keep every token no farther than the one that reached it, and the first
/// `min_keep` of the order.
pub fn typical_p(logits: &[f64], mass: f64, min_keep: usize) -> Vec<f64> {
    let lp = log_softmax(logits);
    let h = entropy(logits);
    let mut order = alive(logits);
    let dist = |i: usize| (-lp[i] - h).abs();
    order.sort_by(|&a, &b| dist(a).partial_cmp(&dist(b)).unwrap().then(a.cmp(&b)));
    let mut running = 0.0;
    let mut last = order.len() - 1;
    for (n, &i) in order.iter().enumerate() {
        running += lp[i].exp();
        if running >= mass {
            last = n;
            break;
        }
    }
    let limit = dist(order[last]);
    let first: Vec<usize> = order.iter().take(min_keep).cloned().collect();
    keep_only(logits, |i| {
        logits[i] > f64::NEG_INFINITY && (dist(i) <= limit || first.contains(&i))
    })
}

/// Epsilon sampling (Hewitt et al. 2022, section 4): keep the tokens with `p >= epsilon`.
pub fn epsilon_cutoff(logits: &[f64], epsilon: f64) -> Vec<f64> {
    let p = softmax(logits);
    keep_only(logits, |i| p[i] > 0.0 && p[i] >= epsilon)
}

/// Eta sampling (Hewitt et al. 2022, section 5): `η = min(ε, √ε · exp(−H))`, keep `p >= η`.
pub fn eta_cutoff(logits: &[f64], epsilon: f64) -> Vec<f64> {
    let eta = epsilon.min(epsilon.sqrt() * (-entropy(logits)).exp());
    epsilon_cutoff(logits, eta)
}

/// Top-nσ (Tang et al. 2024, Algorithm 1; llama.cpp): keep the tokens whose logit is at least
/// `max − n·σ`, `σ` the population standard deviation of the remaining logits.
pub fn top_n_sigma(logits: &[f64], n: f64) -> Vec<f64> {
    let live = alive(logits);
    let count = live.len() as f64;
    let max = live
        .iter()
        .map(|&i| logits[i])
        .fold(f64::NEG_INFINITY, f64::max);
    let mean = live.iter().map(|&i| logits[i]).sum::<f64>() / count;
    let var = live
        .iter()
        .map(|&i| (logits[i] - mean).powi(2))
        .sum::<f64>()
        / count;
    let threshold = max - n * var.sqrt();
    keep_only(logits, |i| logits[i] >= threshold)
}

/// XTC when it acts (llama.cpp's `llama_sampler_xtc_apply`): sort most likely first; find the
/// last token whose probability is at least `threshold`; if it is not the first, remove every
/// token before it.
pub fn xtc(logits: &[f64], threshold: f64) -> Vec<f64> {
    let p = softmax(logits);
    let order = sorted_ids(logits);
    let mut last = 0;
    for (n, &i) in order.iter().enumerate() {
        if p[i] >= threshold {
            last = n;
        } else {
            break;
        }
    }
    let mut removed = vec![false; logits.len()];
    for &i in &order[..last] {
        removed[i] = true;
    }
    keep_only(logits, |i| !removed[i])
}

/// DRY as text-generation-webui's `DRYLogitsProcessor` computes it (without its cap of 50 on the
/// match length, with llama.cpp's cap on the exponent): for every earlier occurrence of the last
/// token, extend the match backwards while the tokens agree and are not breakers; the token
/// that followed the occurrence (unless a breaker) gets the penalty of its longest match.
pub fn dry(
    logits: &[f64],
    history: &[u32],
    multiplier: f64,
    base: f64,
    allowed_length: usize,
    last_n: Option<usize>,
    breakers: &[u32],
) -> Vec<f64> {
    let mut out = logits.to_vec();
    if multiplier == 0.0 || last_n == Some(0) {
        return out;
    }
    let h = match last_n {
        Some(n) => &history[history.len().saturating_sub(n)..],
        None => history,
    };
    let Some(&last) = h.last() else {
        return out;
    };
    if breakers.contains(&last) {
        return out;
    }
    let mut longest: Vec<(u32, usize)> = Vec::new();
    for i in 0..h.len() - 1 {
        if h[i] != last {
            continue;
        }
        let next = h[i + 1];
        if breakers.contains(&next) {
            continue;
        }
        let mut m = 1;
        loop {
            if m > i {
                break;
            }
            let j = i - m;
            let previous = h[h.len() - 1 - m];
            if h[j] != previous || breakers.contains(&previous) {
                break;
            }
            m += 1;
        }
        match longest.iter_mut().find(|(t, _)| *t == next) {
            Some(e) => e.1 = e.1.max(m),
            None => longest.push((next, m)),
        }
    }
    for (t, m) in longest {
        if m >= allowed_length {
            let mut exp = (m - allowed_length) as f64;
            if base > 1.000001 {
                exp = exp.min((88.722_839_1 / base.ln()).floor());
            }
            let penalty = (multiplier * base.powf(exp)).min(f32::MAX as f64);
            out[t as usize] -= penalty;
        }
    }
    out
}

/// All n-grams of `text`, as transformers' `_get_ngrams` builds them: a map from the first
/// `n − 1` tokens to the tokens that followed them.
fn ngrams(text: &[u32], n: usize) -> Vec<(Vec<u32>, u32)> {
    if text.len() < n {
        return Vec::new();
    }
    (0..=text.len() - n)
        .map(|i| (text[i..i + n - 1].to_vec(), text[i + n - 1]))
        .collect()
}

/// No-repeat n-gram (transformers' `NoRepeatNGramLogitsProcessor`): the n-grams of the whole
/// text; the tokens that would complete one whose first `n − 1` tokens are the text's last
/// `n − 1` are removed.
pub fn no_repeat_ngram(logits: &[f64], text: &[u32], n: usize) -> Vec<f64> {
    if n == 0 || text.len() + 1 < n {
        return logits.to_vec();
    }
    let tail = &text[text.len() + 1 - n..];
    let banned: Vec<u32> = ngrams(text, n)
        .into_iter()
        .filter(|(head, _)| head == tail)
        .map(|(_, t)| t)
        .collect();
    keep_only(logits, |i| !banned.contains(&(i as u32)))
}

/// Encoder no-repeat n-gram (transformers' `EncoderNoRepeatNGramLogitsProcessor`): the n-grams
/// of the encoder's input (the prompt); the tokens that would complete one whose first `n − 1`
/// tokens are the answer's last `n − 1` are removed.
pub fn encoder_no_repeat_ngram(
    logits: &[f64],
    prompt: &[u32],
    generated: &[u32],
    n: usize,
) -> Vec<f64> {
    if n == 0 || generated.len() + 1 < n {
        return logits.to_vec();
    }
    let tail = &generated[generated.len() + 1 - n..];
    let banned: Vec<u32> = ngrams(prompt, n)
        .into_iter()
        .filter(|(head, _)| head == tail)
        .map(|(_, t)| t)
        .collect();
    keep_only(logits, |i| !banned.contains(&(i as u32)))
}

/// Dynamic temperature (llama.cpp's `llama_sampler_temp_ext_apply`): the entropy normalised by
/// its largest value `ln n` over the `n` remaining tokens, mapped to
/// `T_min + (T_max − T_min) · h^exponent`, then the logits divided by it (0: the top token only).
/// One remaining token: unchanged.
pub fn dynamic_temperature(logits: &[f64], t: f64, range: f64, exponent: f64) -> Vec<f64> {
    let n = alive(logits).len();
    if n <= 1 {
        return logits.to_vec();
    }
    let h = (entropy(logits) / (n as f64).ln()).clamp(0.0, 1.0);
    let lo = (t - range).max(0.0);
    let hi = t + range;
    let temp = lo + (hi - lo) * h.powf(exponent);
    if temp == 0.0 {
        let top = sorted_ids(logits)[0];
        return keep_only(logits, |i| i == top);
    }
    logits.iter().map(|z| z / temp).collect()
}

/// Mirostat 2 (Basu et al. 2021, Algorithm 2; llama.cpp): keep the tokens whose surprise
/// `−log2 p` is at most `mu` (the most likely one always).
pub fn mirostat_v2(logits: &[f64], mu: f64) -> Vec<f64> {
    let p = softmax(logits);
    let top = sorted_ids(logits)[0];
    keep_only(logits, |i| i == top || (p[i] > 0.0 && -p[i].log2() <= mu))
}

/// Mirostat 1 (Basu et al. 2021, Algorithm 1; llama.cpp with m = 100): estimate the Zipf
/// exponent `ŝ` from the 100 most likely tokens by least squares, compute
/// `k = ((ŝ − 1) · 2^mu / (1 − N^(1 − ŝ)))^(1/ŝ)` and keep the top `max(⌊k⌋, 1)` (every token
/// when `k` is not finite). Also returns `k`.
pub fn mirostat_v1(logits: &[f64], mu: f64, n_vocab: usize) -> (Vec<f64>, Option<f64>) {
    let p = softmax(logits);
    let order: Vec<usize> = sorted_ids(logits)
        .into_iter()
        .filter(|&i| p[i] > 0.0)
        .collect();
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..99.min(order.len() - 1) {
        let t = ((i + 2) as f64 / (i + 1) as f64).ln();
        let b = (p[order[i]] / p[order[i + 1]]).ln();
        num += t * b;
        den += t * t;
    }
    let s = num / den;
    let eps = s - 1.0;
    let k = (eps * 2f64.powf(mu) / (1.0 - (n_vocab as f64).powf(-eps))).powf(1.0 / s);
    if !k.is_finite() || k >= order.len() as f64 {
        return (logits.to_vec(), k.is_finite().then_some(k));
    }
    let mut keep = vec![false; logits.len()];
    for &i in &order[..(k.floor() as usize).max(1)] {
        keep[i] = true;
    }
    (keep_only(logits, |i| keep[i]), Some(k))
}

/// Mirostat's update after choosing a token of probability `p` (after the truncation):
/// `mu − eta · (−log2 p − tau)`.
pub fn mirostat_update(mu: f64, p: f64, tau: f64, eta: f64) -> f64 {
    mu - eta * (-p.log2() - tau)
}
