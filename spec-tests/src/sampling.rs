//! Reference implementation of "Choosing the next token" and "Constrained decoding".
//!
//! Each function is the specification's formula or procedure written out directly, in `f64`,
//! sorting the whole vocabulary wherever the procedure says "sort". Nothing here is fast; it is
//! what the fast `nextok-sampling` crate is checked against.
//!
//! Ordering convention: "most likely first" sorts by logit, highest first (softmax is increasing,
//! so this is the order of the probabilities), and equal logits by token id, lowest first.

/// Softmax: `p_k = e^(z_k) / sum_j e^(z_j)`. The largest logit is subtracted first (which does not
/// change the result) so that `e^x` cannot overflow; `-inf` logits get probability 0.
pub fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|z| (z - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

/// Temperature: divides every logit by `t` ("Sampling and temperature"). `t` must be positive.
pub fn divide_by_temperature(logits: &[f64], t: f64) -> Vec<f64> {
    logits.iter().map(|z| z / t).collect()
}

/// The token ids sorted from most to least likely (by logit, ties to the lowest id).
pub fn sorted_ids(logits: &[f64]) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| {
        logits[b]
            .partial_cmp(&logits[a])
            .expect("logits are never NaN")
            .then(a.cmp(&b))
    });
    ids
}

/// Greedy decoding: the id of the most likely token (ties to the lowest id).
pub fn greedy(logits: &[f64]) -> usize {
    sorted_ids(logits)[0]
}

/// Renormalise: divide each probability by their sum so that they add up to 1 again.
pub fn renormalise(probs: &[f64]) -> Vec<f64> {
    let sum: f64 = probs.iter().sum();
    probs.iter().map(|p| p / sum).collect()
}

/// Keeps the probabilities of the tokens in `keep` (by id), sets the others to 0, renormalises.
pub fn keep_only(probs: &[f64], keep: &[usize]) -> Vec<f64> {
    let mut out = vec![0.0; probs.len()];
    for &i in keep {
        out[i] = probs[i];
    }
    renormalise(&out)
}

/// Top-k ("Top-k sampling"): keep the `k` most likely tokens, set every other to 0, renormalise.
/// `order` is the most-likely-first order of the tokens (see [`sorted_ids`]).
pub fn top_k(probs: &[f64], order: &[usize], k: usize) -> Vec<f64> {
    keep_only(probs, &order[..k.min(order.len())])
}

/// Top-p ("Top-p (nucleus) sampling"): 1. sort the tokens from most to least likely; 2. add their
/// probabilities one by one; 3. stop at the first token where the running total reaches `p`,
/// keeping it and every token before it; 4. renormalise.
pub fn top_p(probs: &[f64], order: &[usize], p: f64) -> Vec<f64> {
    top_p_nucleus(probs, order, p).0
}

/// Top-p, also returning the nucleus (ids, most likely first) and the running total at the stop.
pub fn top_p_nucleus(probs: &[f64], order: &[usize], p: f64) -> (Vec<f64>, Vec<usize>, f64) {
    if p >= 1.0 {
        // "p = 1 keeps every token, which is plain sampling". Said explicitly because a running
        // total in floating point can round up to 1 before the last, tiniest tokens.
        return (renormalise(probs), order.to_vec(), probs.iter().sum());
    }
    let mut running = 0.0;
    let mut nucleus = Vec::new();
    for &i in order {
        running += probs[i];
        nucleus.push(i);
        if running >= p {
            break;
        }
    }
    (keep_only(probs, &nucleus), nucleus, running)
}

/// Min-p: keep the tokens whose probability is at least `min_p` times the largest, renormalise.
pub fn min_p(probs: &[f64], min_p: f64) -> Vec<f64> {
    let max = probs.iter().cloned().fold(0.0, f64::max);
    let keep: Vec<usize> = (0..probs.len())
        .filter(|&i| probs[i] >= min_p * max)
        .collect();
    keep_only(probs, &keep)
}

/// Constrained decoding: forbidden tokens' logits become `-inf`, so softmax gives them exactly 0
/// and shares the probability among the allowed tokens.
pub fn mask_logits(logits: &[f64], allowed: &[bool]) -> Vec<f64> {
    logits
        .iter()
        .zip(allowed)
        .map(|(&z, &ok)| if ok { z } else { f64::NEG_INFINITY })
        .collect()
}

/// CTRL repetition penalty: each distinct token of `history` has a positive logit divided by
/// `penalty` and a negative one multiplied by it.
pub fn repetition_penalty(logits: &[f64], history: &[u32], penalty: f64) -> Vec<f64> {
    let mut out = logits.to_vec();
    for (i, z) in out.iter_mut().enumerate() {
        if history.contains(&(i as u32)) {
            *z = if *z > 0.0 { *z / penalty } else { *z * penalty };
        }
    }
    out
}

/// OpenAI presence and frequency penalties: a token generated `n > 0` times loses
/// `presence + n * frequency` from its logit.
pub fn presence_frequency_penalty(
    logits: &[f64],
    generated: &[u32],
    presence: f64,
    frequency: f64,
) -> Vec<f64> {
    let mut out = logits.to_vec();
    for (i, z) in out.iter_mut().enumerate() {
        let n = generated.iter().filter(|&&t| t as usize == i).count();
        if n > 0 {
            *z -= presence + n as f64 * frequency;
        }
    }
    out
}

/// Settings of the reference pipeline; `None` or the neutral value turns a stage off.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Temperature; 0 means greedy.
    pub temperature: f64,
    /// Top-k.
    pub top_k: Option<usize>,
    /// Top-p; 1 keeps every token.
    pub top_p: f64,
    /// Min-p; 0 keeps every token.
    pub min_p: f64,
    /// CTRL repetition penalty over prompt and generated tokens; 1 is off.
    pub repetition_penalty: f64,
    /// OpenAI presence penalty over generated tokens.
    pub presence_penalty: f64,
    /// OpenAI frequency penalty over generated tokens.
    pub frequency_penalty: f64,
    /// Added to the logits of the given ids.
    pub logit_bias: Vec<(usize, f64)>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            temperature: 1.0,
            top_k: None,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
        }
    }
}

/// The distribution after each stage of the default order ("How the rules combine"): penalties
/// and biases, temperature, softmax, top-k, top-p, min-p (each filter renormalises).
///
/// Returns `(stage name, probabilities)` pairs; the last is the distribution sampled from.
pub fn pipeline(
    logits: &[f64],
    params: &Params,
    prompt: &[u32],
    generated: &[u32],
) -> Vec<(&'static str, Vec<f64>)> {
    let history: Vec<u32> = prompt.iter().chain(generated).cloned().collect();
    let mut z = repetition_penalty(logits, &history, params.repetition_penalty);
    z = presence_frequency_penalty(
        &z,
        generated,
        params.presence_penalty,
        params.frequency_penalty,
    );
    for &(i, b) in &params.logit_bias {
        z[i] += b;
    }
    let mut stages = Vec::new();
    if params.temperature == 0.0 {
        // "APIs therefore treat a temperature of 0 as always pick the top token".
        let mut greedy_probs = vec![0.0; z.len()];
        greedy_probs[greedy(&z)] = 1.0;
        stages.push(("temperature", greedy_probs));
        return stages;
    }
    z = divide_by_temperature(&z, params.temperature);
    let order = sorted_ids(&z);
    let mut p = softmax(&z);
    stages.push(("softmax", p.clone()));
    if let Some(k) = params.top_k {
        p = top_k(&p, &order, k);
        stages.push(("top_k", p.clone()));
    }
    if params.top_p < 1.0 {
        p = top_p(&p, &order, params.top_p);
        stages.push(("top_p", p.clone()));
    }
    if params.min_p > 0.0 {
        p = min_p(&p, params.min_p);
        stages.push(("min_p", p.clone()));
    }
    stages
}

/// The final distribution of [`pipeline`].
pub fn final_distribution(
    logits: &[f64],
    params: &Params,
    prompt: &[u32],
    generated: &[u32],
) -> Vec<f64> {
    pipeline(logits, params, prompt, generated)
        .pop()
        .map(|(_, p)| p)
        .unwrap_or_default()
}

/// Sampling: the token whose interval `[P(< i), P(<= i))` of the cumulative distribution, in id
/// order, holds `u` in `[0, 1)`.
pub fn sample(probs: &[f64], u: f64) -> usize {
    let mut running = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        running += p;
        if u < running {
            return i;
        }
    }
    probs.iter().rposition(|&p| p > 0.0).unwrap_or(0)
}

/// Pearson's chi-square statistic of observed counts against expected probabilities.
pub fn chi_square(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .filter(|(_, &p)| p > 0.0)
        .map(|(&c, &p)| {
            let e = n as f64 * p;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}
