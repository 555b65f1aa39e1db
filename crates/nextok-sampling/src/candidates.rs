//! The shared buffer that every stage of the chain works on.

use std::cmp::Ordering;

use crate::softmax::{dispatch_avx2, exp_lanes, exp_nonpositive, sum_lanes, LANES};
use crate::Error;

/// Size of the first sorted prefix that top-p tries before growing it.
const FIRST_NUCLEUS: usize = 64;

/// One token still in the running: its id, its current logit and, once computed, its probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Token id (its index in the logits).
    pub id: u32,
    /// Current logit, after every logit stage so far.
    pub logit: f32,
    /// Probability among the remaining candidates; only meaningful after
    /// [`Candidates::ensure_probs`].
    pub prob: f32,
}

/// How the candidates are ordered. Every stage keeps the order a deterministic function of its
/// input, so that the sampled token never depends on the internals of an unstable sort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// `items[i].id == i` for every `i`: the full vocabulary, in id order.
    Dense,
    /// Strictly increasing ids, with gaps.
    Ids,
    /// Non-increasing logits; equal logits in increasing id order.
    Descending,
    /// No particular order (but still deterministic).
    Other,
}

/// The tokens still in the running, shared by every stage of a chain.
///
/// Stages remove tokens (filters) or change logits (penalties, bias, temperature). Probabilities
/// are computed lazily, only when a stage needs them, and always over the remaining tokens, so
/// they add up to 1: a filter that removes tokens therefore also renormalises. The buffer is
/// reused from one token to the next, so that sampling allocates nothing once warm.
#[derive(Debug, Clone)]
pub struct Candidates {
    items: Vec<Candidate>,
    vocab: usize,
    probs_fresh: bool,
    order: Order,
    // Whether some logit may be -inf. Such tokens stay in the buffer (dropping them costs a pass)
    // until the next softmax, which removes them since their probability is exactly 0.
    may_have_neg_inf: bool,
    // Scratch for the top-m selection, kept to avoid allocating on every token.
    scratch: Vec<Candidate>,
}

impl Default for Candidates {
    fn default() -> Self {
        Self::new()
    }
}

/// Orders by logit, highest first, and equal logits by id, lowest first: a total order, so that
/// the result of a partial selection or an unstable sort does not depend on the algorithm.
#[inline]
pub(crate) fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    // `partial_cmp` rather than `total_cmp`, so that -0.0 and 0.0 are equal logits; NaN never
    // reaches the buffer.
    b.logit
        .partial_cmp(&a.logit)
        .unwrap_or(Ordering::Equal)
        .then(a.id.cmp(&b.id))
}

impl Candidates {
    /// An empty buffer.
    pub fn new() -> Self {
        Candidates {
            items: Vec::new(),
            vocab: 0,
            probs_fresh: false,
            order: Order::Dense,
            may_have_neg_inf: false,
            scratch: Vec::new(),
        }
    }

    /// Fills the buffer from raw logits, leaving out `-inf` logits and, when `allowed` is given,
    /// every token whose bit is clear (bit `i % 64` of word `i / 64` is token `i`).
    ///
    /// Errors: a NaN or `+inf` logit, a bitset too short for the logits, or no token left.
    pub fn fill(&mut self, logits: &[f32], allowed: Option<&[u64]>) -> Result<(), Error> {
        let scan = crate::softmax::scan(logits)?;
        self.fill_checked(logits, allowed, scan.any_neg_inf)
    }

    /// [`Candidates::fill`] for logits already checked for NaN and `+inf`; `any_neg_inf` says
    /// whether some logit is `-inf`.
    pub(crate) fn fill_checked(
        &mut self,
        logits: &[f32],
        allowed: Option<&[u64]>,
        any_neg_inf: bool,
    ) -> Result<(), Error> {
        self.items.clear();
        self.vocab = logits.len();
        self.probs_fresh = false;
        self.may_have_neg_inf = any_neg_inf;
        match allowed {
            None => {
                // A plain map (no filter) lets the copy run at memory speed; -inf logits are
                // dropped later, and only when there are any.
                self.items
                    .extend(logits.iter().enumerate().map(|(i, &z)| Candidate {
                        id: i as u32,
                        logit: z,
                        prob: 0.0,
                    }));
                self.order = Order::Dense;
            }
            Some(words) => {
                if words.len() * 64 < logits.len() {
                    return Err(Error::MaskTooShort {
                        words: words.len(),
                        vocab: logits.len(),
                    });
                }
                for (w, chunk) in logits.chunks(64).enumerate() {
                    let mut bits = words[w];
                    while bits != 0 {
                        let b = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        if let Some(&z) = chunk.get(b) {
                            self.items.push(Candidate {
                                id: (w * 64 + b) as u32,
                                logit: z,
                                prob: 0.0,
                            });
                        }
                    }
                }
                self.order = if self.items.len() == logits.len() {
                    Order::Dense
                } else {
                    Order::Ids
                };
            }
        }
        self.drop_neg_inf();
        if self.items.is_empty() {
            return Err(Error::NoCandidates { vocab: self.vocab });
        }
        Ok(())
    }

    /// Removes the tokens whose logit is `-inf`, if there may be any.
    fn drop_neg_inf(&mut self) {
        if self.may_have_neg_inf {
            self.retain(|c| c.logit != f32::NEG_INFINITY);
            self.may_have_neg_inf = false;
        }
    }

    /// Size of the vocabulary the buffer was filled from (the length of the logits).
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// Number of tokens still in the running.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no token is left.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The remaining candidates, in the buffer's current order.
    pub fn as_slice(&self) -> &[Candidate] {
        &self.items
    }

    /// Whether [`Candidate::prob`] is up to date.
    pub fn probs_fresh(&self) -> bool {
        self.probs_fresh
    }

    /// Errors with [`Error::NoCandidates`] when a stage left no token.
    pub(crate) fn check_not_empty(&self) -> Result<(), Error> {
        if self.items.is_empty() {
            Err(Error::NoCandidates { vocab: self.vocab })
        } else {
            Ok(())
        }
    }

    /// Sets every logit to `f(id, logit)`. A result of `+inf` is clamped to `f32::MAX`, so that a
    /// large penalty or bias can never turn softmax into NaN; `-inf` (or NaN) removes the token.
    pub fn map_logits(&mut self, mut f: impl FnMut(u32, f32) -> f32) {
        for c in &mut self.items {
            c.logit = clamp_logit(f(c.id, c.logit));
        }
        self.after_logit_change(false);
    }

    /// Sets the logit of token `id` to `f(logit)` when it is still a candidate, and returns whether
    /// it was. Results are clamped as in [`Candidates::map_logits`].
    pub fn update_logit(&mut self, id: u32, f: impl FnOnce(f32) -> f32) -> bool {
        match self.position(id) {
            Some(i) => {
                let c = &mut self.items[i];
                c.logit = clamp_logit(f(c.logit));
                self.after_logit_change(false);
                true
            }
            None => false,
        }
    }

    /// Where token `id` is in the buffer, if it is still a candidate: direct indexing or binary
    /// search while the buffer is in id order, a linear search otherwise.
    fn position(&self, id: u32) -> Option<usize> {
        match self.order {
            Order::Dense => ((id as usize) < self.items.len()).then_some(id as usize),
            Order::Ids => self.items.binary_search_by(|c| c.id.cmp(&id)).ok(),
            Order::Descending | Order::Other => self.items.iter().position(|c| c.id == id),
        }
    }

    /// Token `id`, if it is still a candidate.
    pub fn get(&self, id: u32) -> Option<&Candidate> {
        self.position(id).map(|i| &self.items[i])
    }

    /// Scales every logit by `1 / t` after subtracting the largest one. Dividing by a positive
    /// `t` keeps the order, and subtracting the maximum first means a tiny `t` sends the other
    /// logits to `-inf` instead of overflowing the top one to `+inf`.
    pub(crate) fn divide_logits(&mut self, t: f32) {
        let max = self.max_logit();
        if max == f32::NEG_INFINITY {
            // Every logit is -inf (a penalty overflowed): -inf - -inf would be NaN. Leave them;
            // the next softmax reports that no token is left.
            return;
        }
        shift_and_divide(&mut self.items, max, t);
        self.after_logit_change(true);
    }

    fn after_logit_change(&mut self, order_kept: bool) {
        self.probs_fresh = false;
        // A penalty or a tiny temperature can send a logit to -inf.
        self.may_have_neg_inf = true;
        if !order_kept && self.order == Order::Descending {
            self.order = Order::Other;
        }
    }

    /// Keeps only the candidates for which `keep` is true, in their current order.
    pub fn retain(&mut self, keep: impl FnMut(&Candidate) -> bool) {
        let before = self.items.len();
        self.items.retain(keep);
        if self.items.len() != before {
            self.probs_fresh = false;
            if self.order == Order::Dense {
                self.order = Order::Ids;
            }
        }
    }

    /// The largest logit (`-inf` when empty).
    pub fn max_logit(&self) -> f32 {
        if self.order == Order::Descending {
            return self.items.first().map_or(f32::NEG_INFINITY, |c| c.logit);
        }
        max_of_candidates(&self.items)
    }

    /// The candidate with the highest logit; ties go to the lowest token id.
    pub fn argmax(&self) -> Option<Candidate> {
        if self.order == Order::Descending {
            return self.items.first().copied();
        }
        let mut best: Option<Candidate> = None;
        for c in &self.items {
            match best {
                Some(b) if by_logit_desc(c, &b) != Ordering::Less => {}
                _ => best = Some(*c),
            }
        }
        best
    }

    /// Computes [`Candidate::prob`] as the softmax of the remaining logits, if not already fresh.
    /// Tokens whose logit became `-inf` are dropped first, since their probability is exactly 0.
    ///
    /// Errors with [`Error::NoCandidates`] when no token with a finite logit is left.
    pub fn ensure_probs(&mut self) -> Result<(), Error> {
        if self.probs_fresh {
            return Ok(());
        }
        self.drop_neg_inf();
        self.check_not_empty()?;
        let max = self.max_logit();
        let sum = exp_candidates(&mut self.items, max);
        self.scale_probs(sum);
        self.probs_fresh = true;
        Ok(())
    }

    /// Divides every probability by `sum` (renormalisation).
    fn scale_probs(&mut self, sum: f64) {
        let inv = (1.0 / sum) as f32;
        for c in &mut self.items {
            c.prob *= inv;
        }
    }

    /// Keeps the `k` most likely candidates, sorted (highest first, ties to the lowest id), by a
    /// partial selection: `O(n + k log k)` instead of a full sort.
    pub(crate) fn keep_top_k(&mut self, k: usize) {
        if k < self.items.len() {
            if self.order != Order::Descending {
                self.select_top(0, k, false);
            }
            self.items.truncate(k);
            self.probs_fresh = false;
            self.order = Order::Descending;
        }
    }

    /// Puts the `m` best candidates of `items[from..]` (by [`by_logit_desc`]) at the start of
    /// that range, sorted. With `keep_rest`, the other candidates follow in no particular order;
    /// without it they may be dropped.
    fn select_top(&mut self, from: usize, m: usize, keep_rest: bool) {
        let n = self.items.len() - from;
        if m == 0 {
            return;
        }
        if m >= n {
            self.items[from..].sort_unstable_by(by_logit_desc);
            return;
        }
        if m * 16 > n {
            let tail = &mut self.items[from..];
            tail.select_nth_unstable_by(m - 1, by_logit_desc);
            tail[..m].sort_unstable_by(by_logit_desc);
            return;
        }
        self.best_into_scratch(from, m);
        let tail = &mut self.items[from..];
        if keep_rest {
            // Move the chosen m (every candidate at least as good as the m-th) to the front, in
            // one pass, then write them back in sorted order.
            let last = self.scratch[m - 1];
            let mut j = 0;
            for i in 0..n {
                if by_logit_desc(&tail[i], &last) != Ordering::Greater {
                    tail.swap(i, j);
                    j += 1;
                }
            }
            debug_assert_eq!(j, m);
        }
        tail[..m].copy_from_slice(&self.scratch);
    }

    /// Leaves the `m` best candidates of `items[from..]` (`m` at most its length), sorted, in the
    /// scratch list, without changing the buffer.
    ///
    /// One pass keeps the candidates that beat a threshold (the m-th best seen so far, raised
    /// whenever the list grows to 4m): one comparison per token instead of a quickselect's
    /// several passes and swaps.
    fn best_into_scratch(&mut self, from: usize, m: usize) {
        let scratch = &mut self.scratch;
        scratch.clear();
        let cap = 4 * m.max(16);
        let mut threshold: Option<Candidate> = None;
        for c in &self.items[from..] {
            if let Some(t) = &threshold {
                // Only a candidate strictly better than the m-th best so far can make the cut.
                if c.logit < t.logit || by_logit_desc(c, t) != Ordering::Less {
                    continue;
                }
            }
            scratch.push(*c);
            if scratch.len() >= cap {
                scratch.select_nth_unstable_by(m - 1, by_logit_desc);
                scratch.truncate(m);
                threshold = Some(scratch[m - 1]);
            }
        }
        if m < scratch.len() {
            scratch.select_nth_unstable_by(m - 1, by_logit_desc);
            scratch.truncate(m);
        }
        scratch.sort_unstable_by(by_logit_desc);
    }

    /// Keeps the smallest group of most likely candidates whose probabilities add up to at least
    /// `p` (the token that crosses `p` is kept), sorted highest first.
    ///
    /// When the buffer is not sorted yet, it grows a sorted prefix by partial selection (64
    /// tokens, then 4 times more each round) until the prefix holds mass `p`, so that a confident
    /// model costs one linear pass and a flat one at most a few.
    pub(crate) fn keep_top_p(&mut self, p: f32) -> Result<(), Error> {
        // Only the normaliser is needed over the whole buffer; probabilities are computed for the
        // sorted prefix alone, which saves writing and rescaling a probability per token.
        let fresh = self.probs_fresh;
        let (max, inv_z) = if fresh {
            (0.0, 1.0)
        } else {
            self.drop_neg_inf();
            self.check_not_empty()?;
            let max = self.max_logit();
            (max, 1.0 / exp_sum_candidates(&self.items, max))
        };
        let target = p as f64;
        let n = self.items.len();
        if !fresh && self.order != Order::Descending && n > FIRST_NUCLEUS * 16 {
            // A confident model's nucleus fits in the first few dozen tokens: find them without
            // touching the buffer, and only if they do not reach p fall back to growing a sorted
            // prefix in place.
            self.best_into_scratch(0, FIRST_NUCLEUS);
            let mut cum = 0.0f64;
            for (i, c) in self.scratch.iter().enumerate() {
                cum += exp_nonpositive(c.logit - max) as f64 * inv_z;
                if cum >= target {
                    self.items.clear();
                    self.items.extend_from_slice(&self.scratch[..=i]);
                    self.order = Order::Descending;
                    self.probs_fresh = false;
                    return Ok(());
                }
            }
        }
        let mut sorted = if self.order == Order::Descending {
            n
        } else {
            0
        };
        let mut cum = 0.0f64;
        let mut scanned = 0;
        loop {
            while scanned < sorted {
                let c = &self.items[scanned];
                cum += if fresh {
                    c.prob as f64
                } else {
                    exp_nonpositive(c.logit - max) as f64 * inv_z
                };
                scanned += 1;
                if cum >= target {
                    self.items.truncate(scanned);
                    self.order = Order::Descending;
                    self.probs_fresh = false;
                    return Ok(());
                }
            }
            if sorted == n {
                // Rounding left the total just under p: every token is needed.
                self.order = Order::Descending;
                return Ok(());
            }
            let grow = if sorted == 0 {
                FIRST_NUCLEUS
            } else {
                sorted * 3
            };
            let end = (sorted + grow).min(n);
            self.select_top(sorted, end - sorted, true);
            sorted = end;
        }
    }

    /// Keeps the candidates whose probability is at least `min_p` times the top probability.
    ///
    /// This works on logits, without exponentiating the vocabulary: `p_i >= min_p * p_max` is
    /// `z_i >= z_max + ln(min_p)`. The order of the buffer is kept.
    pub(crate) fn keep_min_p(&mut self, min_p: f32) {
        let threshold = self.max_logit() as f64 + (min_p as f64).ln();
        self.retain(|c| c.logit as f64 >= threshold);
    }

    /// Keeps only the top candidate (ties to the lowest id): greedy decoding.
    pub(crate) fn keep_argmax(&mut self) {
        if let Some(best) = self.argmax() {
            if self.items.len() > 1 {
                self.items.clear();
                self.items.push(best);
                self.probs_fresh = false;
            }
            self.order = Order::Descending;
        }
    }

    /// Picks a candidate by inverse transform sampling with `u` in `[0, 1)`: the first candidate,
    /// in the buffer's order, at which the running total of probabilities exceeds `u` times the
    /// total. A candidate with probability 0 is never chosen.
    pub(crate) fn pick(&mut self, u: f64) -> Result<Candidate, Error> {
        self.ensure_probs()?;
        let total: f64 = self.items.iter().map(|c| c.prob as f64).sum();
        let target = u * total;
        let mut cum = 0.0f64;
        for c in &self.items {
            cum += c.prob as f64;
            if cum > target {
                return Ok(*c);
            }
        }
        // Rounding can leave `cum` a hair below the target when u is close to 1: take the last
        // token that has any probability.
        self.items
            .iter()
            .rev()
            .find(|c| c.prob > 0.0)
            .copied()
            .ok_or(Error::NoCandidates { vocab: self.vocab })
    }

    /// Writes the current logits over the whole vocabulary: each remaining candidate's logit as
    /// the stages so far left it, `-inf` for every other token (filtered out, or never a
    /// candidate). Its softmax is [`Candidates::dense_probs`].
    ///
    /// The logits are those the stages computed, not the raw ones: after [`Temperature`] they
    /// are `(z - max) / T`, so the top one is 0.
    ///
    /// [`Temperature`]: crate::Temperature
    pub fn dense_logits(&self) -> Vec<f32> {
        let mut out = vec![f32::NEG_INFINITY; self.vocab];
        for c in &self.items {
            out[c.id as usize] = c.logit;
        }
        out
    }

    /// Writes the current distribution over the whole vocabulary: the probability of each
    /// remaining candidate (the softmax of the remaining logits), 0 for every other token.
    pub fn dense_probs(&mut self) -> Result<Vec<f32>, Error> {
        self.ensure_probs()?;
        let mut out = vec![0.0; self.vocab];
        for c in &self.items {
            out[c.id as usize] = c.prob;
        }
        Ok(out)
    }
}

dispatch_avx2! {
    /// Sets each candidate's probability to `e^(logit - max)` and returns their sum.
    fn exp_candidates(items: &mut [Candidate], max: f32) -> f64 = exp_candidates_generic;
}

#[inline(always)]
fn exp_candidates_generic(items: &mut [Candidate], max: f32) -> f64 {
    // Gathering blocks of logits into an array lets the exponential run vectorised even
    // though the buffer interleaves ids, logits and probabilities.
    let mut sum = 0.0f64;
    let mut chunks = items.chunks_exact_mut(LANES);
    for ch in &mut chunks {
        let mut x = [0.0f32; LANES];
        for i in 0..LANES {
            x[i] = ch[i].logit - max;
        }
        let e = exp_lanes(&x);
        for i in 0..LANES {
            ch[i].prob = e[i];
        }
        sum += sum_lanes(&e);
    }
    for c in chunks.into_remainder() {
        c.prob = exp_nonpositive(c.logit - max);
        sum += c.prob as f64;
    }
    sum
}

dispatch_avx2! {
    /// The largest logit of the candidates (`-inf` when there are none).
    fn max_of_candidates(items: &[Candidate]) -> f32 = max_of_candidates_generic;
}

#[inline(always)]
fn max_of_candidates_generic(items: &[Candidate]) -> f32 {
    // One running maximum per lane, so that the comparisons do not form one long dependency
    // chain and the loop vectorises.
    let mut max = [f32::NEG_INFINITY; LANES];
    let chunks = items.chunks_exact(LANES);
    let rest = chunks.remainder();
    for ch in chunks {
        for i in 0..LANES {
            let z = ch[i].logit;
            max[i] = if z > max[i] { z } else { max[i] };
        }
    }
    for (i, c) in rest.iter().enumerate() {
        max[i] = if c.logit > max[i] { c.logit } else { max[i] };
    }
    max.iter()
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

dispatch_avx2! {
    /// Sets every logit to `(logit - max) / t`.
    fn shift_and_divide(items: &mut [Candidate], max: f32, t: f32) -> () = shift_and_divide_generic;
}

#[inline(always)]
fn shift_and_divide_generic(items: &mut [Candidate], max: f32, t: f32) {
    // Gathering blocks of logits into an array lets the division run vectorised even though the
    // buffer interleaves ids, logits and probabilities.
    let mut chunks = items.chunks_exact_mut(LANES);
    for ch in &mut chunks {
        let mut x = [0.0f32; LANES];
        for i in 0..LANES {
            x[i] = (ch[i].logit - max) / t;
        }
        for i in 0..LANES {
            ch[i].logit = x[i];
        }
    }
    for c in chunks.into_remainder() {
        c.logit = (c.logit - max) / t;
    }
}

dispatch_avx2! {
    /// Sum of `e^(logit - max)` over the candidates.
    fn exp_sum_candidates(items: &[Candidate], max: f32) -> f64 = exp_sum_candidates_generic;
}

#[inline(always)]
fn exp_sum_candidates_generic(items: &[Candidate], max: f32) -> f64 {
    let mut sum = 0.0f64;
    let chunks = items.chunks_exact(LANES);
    let rest = chunks.remainder();
    for ch in chunks {
        let mut x = [0.0f32; LANES];
        for i in 0..LANES {
            x[i] = ch[i].logit - max;
        }
        sum += sum_lanes(&exp_lanes(&x));
    }
    for c in rest {
        sum += exp_nonpositive(c.logit - max) as f64;
    }
    sum
}

/// Clamps `+inf` (from a penalty or bias that overflowed) to the largest finite logit, and turns
/// NaN (which only a faulty custom stage can produce) into `-inf`, removing the token, so that
/// softmax never sees either.
#[inline]
fn clamp_logit(z: f32) -> f32 {
    if z == f32::INFINITY {
        f32::MAX
    } else if z.is_nan() {
        f32::NEG_INFINITY
    } else {
        z
    }
}
