//! The shared buffer that every stage of the chain works on.

use std::cmp::Ordering;

use crate::softmax::{exp_lanes, exp_nonpositive, sum_lanes, LANES};
use crate::Error;

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
        }
    }

    /// Fills the buffer from raw logits, leaving out `-inf` logits and, when `allowed` is given,
    /// every token whose bit is clear (bit `i % 64` of word `i / 64` is token `i`).
    ///
    /// Errors: a NaN or `+inf` logit, a bitset too short for the logits, or no token left.
    pub fn fill(&mut self, logits: &[f32], allowed: Option<&[u64]>) -> Result<(), Error> {
        crate::softmax::checked_max(logits)?;
        self.fill_checked(logits, allowed)
    }

    /// [`Candidates::fill`] for logits already checked for NaN and `+inf`.
    pub(crate) fn fill_checked(
        &mut self,
        logits: &[f32],
        allowed: Option<&[u64]>,
    ) -> Result<(), Error> {
        self.items.clear();
        self.vocab = logits.len();
        self.probs_fresh = false;
        match allowed {
            None => {
                self.items.extend(
                    logits
                        .iter()
                        .enumerate()
                        .filter(|(_, z)| **z != f32::NEG_INFINITY)
                        .map(|(i, &z)| Candidate {
                            id: i as u32,
                            logit: z,
                            prob: 0.0,
                        }),
                );
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
                            if z != f32::NEG_INFINITY {
                                self.items.push(Candidate {
                                    id: (w * 64 + b) as u32,
                                    logit: z,
                                    prob: 0.0,
                                });
                            }
                        }
                    }
                }
            }
        }
        self.order = if self.items.len() == logits.len() {
            Order::Dense
        } else {
            Order::Ids
        };
        if self.items.is_empty() {
            return Err(Error::NoCandidates { vocab: self.vocab });
        }
        Ok(())
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
        let found = match self.order {
            Order::Dense => self.items.get_mut(id as usize),
            Order::Ids => match self.items.binary_search_by(|c| c.id.cmp(&id)) {
                Ok(i) => Some(&mut self.items[i]),
                Err(_) => None,
            },
            Order::Descending | Order::Other => self.items.iter_mut().find(|c| c.id == id),
        };
        match found {
            Some(c) => {
                c.logit = clamp_logit(f(c.logit));
                self.after_logit_change(false);
                true
            }
            None => false,
        }
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
        for c in &mut self.items {
            c.logit = (c.logit - max) / t;
        }
        self.after_logit_change(true);
    }

    fn after_logit_change(&mut self, order_kept: bool) {
        self.probs_fresh = false;
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
        self.items.iter().fold(
            f32::NEG_INFINITY,
            |m, c| if c.logit > m { c.logit } else { m },
        )
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
        self.retain(|c| c.logit != f32::NEG_INFINITY);
        self.check_not_empty()?;
        let max = self.max_logit();
        // Gathering blocks of logits into an array lets the exponential run vectorised even
        // though the buffer interleaves ids, logits and probabilities.
        let mut sum = 0.0f64;
        let mut chunks = self.items.chunks_exact_mut(LANES);
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
                self.items.select_nth_unstable_by(k - 1, by_logit_desc);
                self.items.truncate(k);
                self.items.sort_unstable_by(by_logit_desc);
            } else {
                self.items.truncate(k);
            }
            self.probs_fresh = false;
            self.order = Order::Descending;
        }
    }

    /// Keeps the smallest group of most likely candidates whose probabilities add up to at least
    /// `p` (the token that crosses `p` is kept), sorted highest first.
    ///
    /// When the buffer is not sorted yet, it grows a sorted prefix by partial selection (64
    /// tokens, then 4 times more each round) until the prefix holds mass `p`, so that a confident
    /// model costs one linear pass and a flat one at most a few.
    pub(crate) fn keep_top_p(&mut self, p: f32) -> Result<(), Error> {
        self.ensure_probs()?;
        let target = p as f64;
        let n = self.items.len();
        let mut sorted = if self.order == Order::Descending {
            n
        } else {
            0
        };
        let mut cum = 0.0f64;
        let mut scanned = 0;
        loop {
            while scanned < sorted {
                cum += self.items[scanned].prob as f64;
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
            let grow = if sorted == 0 { 64 } else { sorted * 3 };
            let end = (sorted + grow).min(n);
            let tail = &mut self.items[sorted..];
            if end < n {
                tail.select_nth_unstable_by(end - sorted - 1, by_logit_desc);
            }
            self.items[sorted..end].sort_unstable_by(by_logit_desc);
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

    /// Writes the current distribution over the whole vocabulary: the probability of each
    /// remaining candidate, 0 for every other token.
    pub fn dense_probs(&mut self) -> Result<Vec<f32>, Error> {
        self.ensure_probs()?;
        let mut out = vec![0.0; self.vocab];
        for c in &self.items {
            out[c.id as usize] = c.prob;
        }
        Ok(out)
    }
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
