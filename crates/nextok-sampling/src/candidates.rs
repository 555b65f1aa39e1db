//! The shared buffer that every stage of the chain works on.

use std::cmp::Ordering;

use crate::softmax::{dispatch_avx2, exp_lanes, exp_nonpositive, sum_exp, sum_lanes, LANES};
use crate::stages::FirstStage;
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
    // Scratch for the largest logit of each block of the fused top-k.
    maxima: Vec<f32>,
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
            maxima: Vec::new(),
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

    /// Fills the buffer and applies `first` in one go, reading the logits where they are rather
    /// than copying the whole vocabulary into the buffer first. The result, candidates and their
    /// order, is exactly that of [`Candidates::fill`] followed by the stage, so the draws are the
    /// same.
    ///
    /// The logits must be checked already (no NaN or `+inf`), with no `-inf` among them and no
    /// mask, and `max` must be their largest. Returns `false`, leaving the buffer in no
    /// particular state, in the rare cases the fused form does not cover: the caller then fills
    /// the buffer and runs the stage as usual.
    ///
    /// A first top-k (after a temperature or not) needs neither `max` nor the check: it checks
    /// as it goes, so a caller may
    /// skip the separate pass over the logits, and it returns `false` when some logit is not
    /// finite (NaN, `+inf` or a masked `-inf`), for the ordinary path to report or handle.
    pub(crate) fn fill_fused(&mut self, logits: &[f32], max: f32, first: FirstStage) -> bool {
        let n = logits.len();
        self.vocab = n;
        self.probs_fresh = false;
        self.may_have_neg_inf = false;
        match first {
            FirstStage::TopK(k) => {
                if k >= n {
                    // Top-k keeps every token, and leaves them in id order: the plain fill.
                    return false;
                }
                let finite = best_of_logits(logits, k, &mut self.scratch, &mut self.maxima);
                std::mem::swap(&mut self.items, &mut self.scratch);
                self.order = Order::Descending;
                finite
            }
            FirstStage::MinP(p) => {
                // As `keep_min_p`: `z >= max + ln(min_p)`, in f64.
                let threshold = max as f64 + (p as f64).ln();
                self.items.clear();
                collect_kept(logits, &mut self.items, |z| z as f64 >= threshold);
                self.order = if self.items.len() == n {
                    Order::Dense
                } else {
                    Order::Ids
                };
                true
            }
            FirstStage::TopP(p) => self.fill_top_p(logits, max, p),
            FirstStage::ScaledTopK(t, k) => {
                if k >= n {
                    return false;
                }
                self.fill_scaled_top_k(logits, t, k)
            }
            FirstStage::ScaledMinP(t, p) => {
                // As `divide_logits` then `keep_min_p`: the largest scaled logit is
                // `(max - max) / t = 0`, so the bar is `ln(min_p)`, in f64, on `(z - max) / t`.
                let threshold = (p as f64).ln();
                self.items.clear();
                collect_kept(logits, &mut self.items, |z| {
                    ((z - max) / t) as f64 >= threshold
                });
                for c in &mut self.items {
                    c.logit = (c.logit - max) / t;
                }
                self.order = if self.items.len() == n {
                    Order::Dense
                } else {
                    Order::Ids
                };
                // As after the temperature stage.
                self.may_have_neg_inf = true;
                true
            }
        }
    }

    /// The fused form of a temperature `t` then top-k: the best `k` tokens by the scaled
    /// logits `s(z) = (z - max) / t` (as [`Candidates::divide_logits`] computes them), ties to
    /// the lowest id, sorted, holding their scaled logits.
    ///
    /// `s` never decreases as `z` grows, but rounding may give two logits the same `s`, which
    /// changes the order of ties; so the best `k` raw logits only give the bar `s_k`, their
    /// lowest scaled logit. At least `k` tokens reach it, so the best `k` by scaled logit are
    /// among the tokens whose `s` reaches it: those are collected (a monotone test, so whole
    /// blocks are skipped), scaled, sorted and cut to `k`.
    fn fill_scaled_top_k(&mut self, logits: &[f32], t: f32, k: usize) -> bool {
        if !best_of_logits(logits, k, &mut self.scratch, &mut self.maxima) {
            return false;
        }
        let (Some(top), Some(kth)) = (self.scratch.first(), self.scratch.last()) else {
            return false;
        };
        let max = top.logit;
        let scaled = |z: f32| (z - max) / t;
        let bar = scaled(kth.logit);
        self.items.clear();
        collect_kept(logits, &mut self.items, |z| scaled(z) >= bar);
        for c in &mut self.items {
            c.logit = scaled(c.logit);
        }
        if k < self.items.len() {
            self.items.select_nth_unstable_by(k - 1, by_logit_desc);
            self.items.truncate(k);
        }
        self.items.sort_unstable_by(by_logit_desc);
        self.order = Order::Descending;
        // As after the temperature stage: a tiny `t` may have sent some to -inf.
        self.may_have_neg_inf = true;
        true
    }

    /// The fused form of [`Candidates::keep_top_p`] on a full vocabulary without `-inf`: the
    /// same normaliser (`sum_exp` runs the same additions in the same order as the buffer's own
    /// sum), the same running total over the same sorted prefix, so the same tokens are kept.
    ///
    /// The sorted prefix is found in two tries. First the best 64 tokens, found in one pass
    /// without copying anything, which is enough for a confident model. Otherwise a histogram of
    /// `max - z` (buckets of 1/32) bounds from below the mass of the tokens down to each bucket;
    /// every token in the buckets that hold `p` of the mass is collected, and sorted.
    fn fill_top_p(&mut self, logits: &[f32], max: f32, p: f32) -> bool {
        let n = logits.len();
        let inv_z = 1.0 / sum_exp(logits, max);
        let target = p as f64;
        let m = FIRST_NUCLEUS.min(n);
        // The logits were checked, so they are finite.
        best_of_logits(logits, m, &mut self.scratch, &mut self.maxima);
        if let Some(len) = nucleus_len(&self.scratch, max, inv_z, target) {
            self.scratch.truncate(len);
            std::mem::swap(&mut self.items, &mut self.scratch);
            self.order = Order::Descending;
            return true;
        }
        if m == n {
            // Rounding left the total just under p: `keep_top_p` keeps every token, sorted.
            std::mem::swap(&mut self.items, &mut self.scratch);
            self.order = Order::Descending;
            return true;
        }
        let mut hist = [0u32; BUCKETS];
        bucket_counts(logits, max, &mut hist);
        // The mass of a bucket is at least its count times e^(-its far edge); the last bucket
        // (everything further than its near edge) counts for nothing.
        let mut bound = 0.0f64;
        let mut last = BUCKETS - 1;
        for (b, &count) in hist.iter().enumerate().take(BUCKETS - 1) {
            bound += count as f64 * (-((b + 1) as f64) / BUCKET_SCALE as f64).exp() * inv_z;
            if bound >= target * (1.0 + 1e-4) {
                last = b;
                break;
            }
        }
        // Every token above a bar one bucket below those buckets (so that rounding cannot leave
        // one out) is collected: a prefix of the sorted order, whatever the bar.
        let bar = if last == BUCKETS - 1 {
            f32::NEG_INFINITY
        } else {
            max - ((last + 2) as f32 / BUCKET_SCALE + max.abs() * f32::EPSILON)
        };
        self.items.clear();
        collect_above(logits, bar, &mut self.items);
        // Sorted by a counting sort on finer buckets, each bucket then sorted on its own, only
        // as far as the running total needs.
        let mut counts = [0u32; FINE_BUCKETS + 1];
        for c in &self.items {
            counts[fine_bucket(max, c.logit) + 1] += 1;
        }
        for b in 1..=FINE_BUCKETS {
            counts[b] += counts[b - 1];
        }
        self.scratch.clear();
        self.scratch.resize(
            self.items.len(),
            Candidate {
                id: 0,
                logit: 0.0,
                prob: 0.0,
            },
        );
        let mut next = counts;
        for c in &self.items {
            let b = fine_bucket(max, c.logit);
            self.scratch[next[b] as usize] = *c;
            next[b] += 1;
        }
        std::mem::swap(&mut self.items, &mut self.scratch);
        self.order = Order::Descending;
        let mut cum = 0.0f64;
        for b in 0..FINE_BUCKETS {
            let range = counts[b] as usize..counts[b + 1] as usize;
            let start = range.start;
            let bucket = &mut self.items[range];
            bucket.sort_unstable_by(by_logit_desc);
            for (j, c) in bucket.iter().enumerate() {
                cum += exp_nonpositive(c.logit - max) as f64 * inv_z;
                if cum >= target {
                    self.items.truncate(start + j + 1);
                    return true;
                }
            }
        }
        // Every token and still short of p by rounding: `keep_top_p` keeps them all, sorted.
        // Otherwise the bound was not enough (it cannot be short by more than rounding): the
        // caller runs the ordinary top-p.
        self.items.len() == n
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

/// Number of histogram buckets of [`Candidates::fill_top_p`], and how many there are per unit of
/// logit: buckets cover `max - z` up to 32, the last one everything further.
const BUCKETS: usize = 1024;
const BUCKET_SCALE: f32 = 32.0;

/// Buckets of the counting sort of [`Candidates::fill_top_p`]: 128 per unit of logit, over 32.
const FINE_BUCKETS: usize = 4096;

/// The counting sort's bucket of `z`: as [`bucket`], four times finer.
#[inline(always)]
fn fine_bucket(max: f32, z: f32) -> usize {
    (((max - z) * 128.0).min((FINE_BUCKETS - 1) as f32)) as usize
}

/// The histogram bucket of logit `z`: `floor((max - z) * 32)`, at most the last. Never
/// increases as `z` grows, so the tokens of the first buckets are a prefix of the sorted order.
#[inline(always)]
fn bucket(max: f32, z: f32) -> usize {
    (((max - z) * BUCKET_SCALE).min((BUCKETS - 1) as f32)) as usize
}

dispatch_avx2! {
    /// Counts the logits in each bucket of [`bucket`].
    fn bucket_counts(logits: &[f32], max: f32, hist: &mut [u32; BUCKETS]) -> () = bucket_counts_generic;
}

#[inline(always)]
fn bucket_counts_generic(logits: &[f32], max: f32, hist: &mut [u32; BUCKETS]) {
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for ch in chunks {
        // The bucket numbers are computed vectorised, the counting one by one.
        let mut b = [0usize; LANES];
        for i in 0..LANES {
            b[i] = bucket(max, ch[i]);
        }
        for &i in &b {
            hist[i] += 1;
        }
    }
    for &z in rest {
        hist[bucket(max, z)] += 1;
    }
}

/// How many tokens of logits processed per block of a fused pass: a block whose largest logit is
/// below the bar is skipped after one vectorised test.
const BLOCK: usize = 64;

/// The largest of one block of logits.
#[inline(always)]
fn block_max(block: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let chunks = block.chunks_exact(LANES);
    let rest = chunks.remainder();
    for ch in chunks {
        for i in 0..LANES {
            m[i] = if ch[i] > m[i] { ch[i] } else { m[i] };
        }
    }
    for (i, &z) in rest.iter().enumerate() {
        m[i] = if z > m[i] { z } else { m[i] };
    }
    m.iter()
        .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a })
}

/// How a fused pass finds the largest logit of a block: portable code, or AVX2.
trait BlockMax {
    fn block_max(block: &[f32]) -> f32;
    /// Bit `i` set when `block[i] > bar`.
    fn above(block: &[f32; BLOCK], bar: f32) -> u64;
    /// [`BlockMax::above`], and whether every logit of the block is finite.
    fn above_finite(block: &[f32; BLOCK], bar: f32) -> (u64, bool);
    /// Writes the largest logit of each block of `size` (a multiple of [`BLOCK`]; the last
    /// block may be shorter) to `out` (one per block), and says whether the logits are finite.
    /// It may say `false` for finite logits whose sum overflows, never `true` for a NaN or an
    /// infinite one.
    fn block_maxima(logits: &[f32], size: usize, out: &mut [f32]) -> bool;
}

struct Portable;

impl BlockMax for Portable {
    #[inline(always)]
    fn block_max(block: &[f32]) -> f32 {
        block_max(block)
    }

    #[inline(always)]
    fn above(block: &[f32; BLOCK], bar: f32) -> u64 {
        block
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &z)| bits | (((z > bar) as u64) << i))
    }

    #[inline(always)]
    fn above_finite(block: &[f32; BLOCK], bar: f32) -> (u64, bool) {
        let finite = block.iter().fold(true, |f, z| f & z.is_finite());
        (Self::above(block, bar), finite)
    }

    #[inline(always)]
    fn block_maxima(logits: &[f32], size: usize, out: &mut [f32]) -> bool {
        let mut finite = true;
        for (o, block) in out.iter_mut().zip(logits.chunks(size)) {
            finite &= block.iter().fold(true, |f, z| f & z.is_finite());
            *o = block_max(block);
        }
        finite
    }
}

#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl BlockMax for Avx2 {
    #[inline(always)]
    fn block_max(block: &[f32]) -> f32 {
        // SAFETY: `Avx2` is only used inside functions that run on CPUs with AVX2 (see
        // `collect_kept` and `best_of_logits`).
        unsafe { crate::x86::block_max(block) }
    }

    #[inline(always)]
    fn above(block: &[f32; BLOCK], bar: f32) -> u64 {
        // SAFETY: as above.
        unsafe { crate::x86::above(block, bar) }
    }

    #[inline(always)]
    fn above_finite(block: &[f32; BLOCK], bar: f32) -> (u64, bool) {
        // SAFETY: as above.
        unsafe { crate::x86::above_finite(block, bar) }
    }

    #[inline(always)]
    fn block_maxima(logits: &[f32], size: usize, out: &mut [f32]) -> bool {
        // SAFETY: as above.
        unsafe { crate::x86::block_maxima(logits, size, out) }
    }
}

/// Appends to `out`, in id order, every token whose logit passes `keep`, which must be monotone
/// (true for a logit, true for any higher one): a block whose largest logit fails it is skipped
/// after one vectorised pass.
fn collect_kept(logits: &[f32], out: &mut Vec<Candidate>, keep: impl Fn(f32) -> bool) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(logits: &[f32], out: &mut Vec<Candidate>, keep: impl Fn(f32) -> bool) {
            collect_kept_with::<Avx2>(logits, out, keep)
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, as checked on the line above.
            return unsafe { avx2(logits, out, keep) };
        }
    }
    collect_kept_with::<Portable>(logits, out, keep)
}

#[inline(always)]
fn collect_kept_with<B: BlockMax>(
    logits: &[f32],
    out: &mut Vec<Candidate>,
    keep: impl Fn(f32) -> bool,
) {
    for (k, block) in logits.chunks(BLOCK).enumerate() {
        if keep(B::block_max(block)) {
            for (i, &z) in block.iter().enumerate() {
                if keep(z) {
                    out.push(Candidate {
                        id: (k * BLOCK + i) as u32,
                        logit: z,
                        prob: 0.0,
                    });
                }
            }
        }
    }
}

/// Appends to `out`, in id order, every token whose logit is above `bar`.
fn collect_above(logits: &[f32], bar: f32, out: &mut Vec<Candidate>) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(logits: &[f32], bar: f32, out: &mut Vec<Candidate>) {
            collect_above_with::<Avx2>(logits, bar, out)
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, as checked on the line above.
            return unsafe { avx2(logits, bar, out) };
        }
    }
    collect_above_with::<Portable>(logits, bar, out)
}

#[inline(always)]
fn collect_above_with<B: BlockMax>(logits: &[f32], bar: f32, out: &mut Vec<Candidate>) {
    let blocks = logits.chunks_exact(BLOCK);
    let rest = blocks.remainder();
    for (k, block) in blocks.enumerate() {
        let Ok(block) = <&[f32; BLOCK]>::try_from(block) else {
            continue;
        };
        let mut bits = B::above(block, bar);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            out.push(Candidate {
                id: (k * BLOCK + i) as u32,
                logit: block[i],
                prob: 0.0,
            });
        }
    }
    let base = logits.len() - rest.len();
    for (i, &z) in rest.iter().enumerate() {
        if z > bar {
            out.push(Candidate {
                id: (base + i) as u32,
                logit: z,
                prob: 0.0,
            });
        }
    }
}

/// Leaves in `out` the `m` best tokens of `logits` (`1 <= m <= len`), sorted by
/// [`by_logit_desc`]. `maxima` is scratch.
///
/// When the vocabulary is large against `m`, two passes: the first finds the largest logit of
/// each block (one vector maximum per 8 logits, nothing else; blocks of 64 logits or more, so
/// that there are at most 8 per wanted token), which gives a bar that at least `m` logits
/// reach ([`bar_of_maxima`]); the second looks only at the few blocks whose largest logit
/// reaches it. Otherwise one pass that skips whole blocks of 64 below a rising bar. Either way
/// a logit is offered to the list of the best when it is above the bar ([`offer`]): the
/// result is the same.
///
/// Also returns whether every logit is finite; when one is not, `out` means nothing. (The
/// two-pass form judges by the logits' sum, so finite logits so large that their sum
/// overflows also give `false`: the caller's ordinary path then handles them, with the same
/// result.)
fn best_of_logits(
    logits: &[f32],
    m: usize,
    out: &mut Vec<Candidate>,
    maxima: &mut Vec<f32>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(logits: &[f32], m: usize, out: &mut Vec<Candidate>, maxima: &mut Vec<f32>) -> bool {
            best_of_logits_with::<Avx2>(logits, m, out, maxima)
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, as checked on the line above.
            return unsafe { avx2(logits, m, out, maxima) };
        }
    }
    best_of_logits_with::<Portable>(logits, m, out, maxima)
}

/// The block size of the first pass of [`best_of_logits`] for `n` logits and the best `m`: the
/// smallest multiple of 64 by a power of two that leaves at most `8 m` blocks (fewer, larger
/// blocks cost fewer horizontal maxima; more, smaller ones a shorter second pass). `None` when
/// that leaves fewer than `2 m` blocks: the second pass would look at too large a share of the
/// vocabulary, and one pass does better.
fn two_pass_block(n: usize, m: usize) -> Option<usize> {
    let mut size = BLOCK;
    while n.div_ceil(size) > 8 * m {
        size *= 2;
    }
    (n.div_ceil(size) >= 2 * m).then_some(size)
}

/// Offers token `id` with logit `z` to the list of the best `m` so far: it enters when above
/// `bar`, and when the list reaches `cap` it is cut to its best `m` and the bar rises to the
/// `m`-th of them. A later token equal to the bar cannot be among the best `m`: the `m` tokens
/// kept are at least as high and lose no tie to it.
#[inline(always)]
fn offer(out: &mut Vec<Candidate>, bar: &mut f32, m: usize, cap: usize, id: usize, z: f32) {
    // The bar may have risen since the block was tested.
    if z > *bar {
        out.push(Candidate {
            id: id as u32,
            logit: z,
            prob: 0.0,
        });
        if out.len() >= cap {
            out.select_nth_unstable_by(m - 1, by_logit_desc);
            out.truncate(m);
            *bar = out[m - 1].logit;
        }
    }
}

#[inline(always)]
fn best_of_logits_with<B: BlockMax>(
    logits: &[f32],
    m: usize,
    out: &mut Vec<Candidate>,
    maxima: &mut Vec<f32>,
) -> bool {
    out.clear();
    let cap = 4 * m.max(16);
    let mut bar = f32::NEG_INFINITY;
    if let Some(size) = two_pass_block(logits.len(), m) {
        maxima.clear();
        maxima.resize(logits.len().div_ceil(size), 0.0);
        if !B::block_maxima(logits, size, maxima) {
            return false;
        }
        // At least `m` logits (the largest of `m` blocks) reach the bar, so the `m`-th best
        // logit does too, and so does each of the best `m`: every one of them is above the
        // float just below the bar, and lies in a block whose largest logit is.
        bar = bar_of_maxima(maxima, m).next_down();
        for (k, &block_max) in maxima.iter().enumerate() {
            if block_max <= bar {
                continue;
            }
            let start = k * size;
            let block = &logits[start..logits.len().min(start + size)];
            let chunks = block.chunks_exact(BLOCK);
            let rest = chunks.remainder();
            for (j, chunk) in chunks.enumerate() {
                let Ok(chunk) = <&[f32; BLOCK]>::try_from(chunk) else {
                    continue;
                };
                let mut bits = B::above(chunk, bar);
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    offer(out, &mut bar, m, cap, start + j * BLOCK + i, chunk[i]);
                }
            }
            let base = start + block.len() - rest.len();
            for (i, &z) in rest.iter().enumerate() {
                offer(out, &mut bar, m, cap, base + i, z);
            }
        }
    } else {
        let blocks = logits.chunks_exact(BLOCK);
        let rest = blocks.remainder();
        let mut finite = true;
        for (k, block) in blocks.enumerate() {
            let Ok(block) = <&[f32; BLOCK]>::try_from(block) else {
                continue;
            };
            // Only the tokens above the bar are looked at one by one.
            let (mut bits, block_finite) = B::above_finite(block, bar);
            finite &= block_finite;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                offer(out, &mut bar, m, cap, k * BLOCK + i, block[i]);
            }
        }
        let base = logits.len() - rest.len();
        for (i, &z) in rest.iter().enumerate() {
            finite &= z.is_finite();
            offer(out, &mut bar, m, cap, base + i, z);
        }
        if !finite {
            return false;
        }
    }
    if m < out.len() {
        out.select_nth_unstable_by(m - 1, by_logit_desc);
        out.truncate(m);
    }
    out.sort_unstable_by(by_logit_desc);
    true
}

/// A value that at least `m` of `maxima` reach (`1 <= m <= maxima.len()`, all finite): the
/// highest of 257 steps from their largest down to their least at which at least `m` of them
/// are, found by bisection (each count one vectorised pass over the maxima).
#[inline(always)]
fn bar_of_maxima(maxima: &[f32], m: usize) -> f32 {
    // Lanes of running extremes and counts, so that the loops vectorise.
    let mut lo = [f32::INFINITY; LANES];
    let mut hi = [f32::NEG_INFINITY; LANES];
    let chunks = maxima.chunks_exact(LANES);
    let rest = chunks.remainder();
    for ch in chunks {
        for i in 0..LANES {
            lo[i] = if ch[i] < lo[i] { ch[i] } else { lo[i] };
            hi[i] = if ch[i] > hi[i] { ch[i] } else { hi[i] };
        }
    }
    for (i, &x) in rest.iter().enumerate() {
        lo[i] = if x < lo[i] { x } else { lo[i] };
        hi[i] = if x > hi[i] { x } else { hi[i] };
    }
    let lo = lo
        .iter()
        .fold(f32::INFINITY, |a, &x| if x < a { x } else { a });
    let hi = hi
        .iter()
        .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a });
    const STEPS: u32 = 256;
    let step = (hi - lo) / STEPS as f32;
    // Never increases with `j` (each operation rounds monotonically); the last step is the
    // least maximum itself, which all of them reach.
    let at = |j: u32| {
        if j == STEPS {
            lo
        } else {
            hi - j as f32 * step
        }
    };
    let reach = |t: f32| reaching(maxima, t);
    // The first step at which `m` maxima are reached lies in `(low, high]`.
    let (mut low, mut high) = (0u32, STEPS);
    if reach(at(0)) >= m {
        return at(0);
    }
    while high - low > 1 {
        let mid = (low + high) / 2;
        if reach(at(mid)) >= m {
            high = mid;
        } else {
            low = mid;
        }
    }
    at(high)
}

/// How many of `maxima` are at least `t`.
#[inline(always)]
fn reaching(maxima: &[f32], t: f32) -> usize {
    let mut n = [0u32; LANES];
    let chunks = maxima.chunks_exact(LANES);
    let rest = chunks.remainder();
    for ch in chunks {
        for i in 0..LANES {
            n[i] += (ch[i] >= t) as u32;
        }
    }
    let n = n.iter().map(|&c| c as usize).sum::<usize>();
    n + rest.iter().filter(|&&x| x >= t).count()
}

/// The length of the shortest prefix of `sorted` whose probabilities `e^(z - max) / Z` add up
/// (in f64, in order) to at least `target`, as [`Candidates::keep_top_p`] adds them.
fn nucleus_len(sorted: &[Candidate], max: f32, inv_z: f64, target: f64) -> Option<usize> {
    let mut cum = 0.0f64;
    for (i, c) in sorted.iter().enumerate() {
        cum += exp_nonpositive(c.logit - max) as f64 * inv_z;
        if cum >= target {
            return Some(i + 1);
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::{Context, LogitsProcessor, MinP, TopK, TopP};

    /// Logits from a seed: normal with deviation `sd` (Box-Muller over a xorshift), optionally
    /// rounded to a grid of 0.5 so that many are tied.
    fn logits(n: usize, sd: f32, grid: bool, seed: u32) -> Vec<f32> {
        let mut x = seed | 1;
        let mut uniform = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 + 0.5) / 4_294_967_296.0
        };
        (0..n)
            .map(|_| {
                let (a, b) = (uniform(), uniform());
                let z = sd * (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos();
                if grid {
                    (z * 2.0).round() / 2.0
                } else {
                    z
                }
            })
            .collect()
    }

    /// The fused fill's candidates, in order, against the plain fill followed by the stage; and
    /// whether the fused form covered the case.
    fn check(z: &[f32], first: FirstStage, stage: &dyn LogitsProcessor) -> bool {
        let max = crate::softmax::checked_max(z).unwrap();
        let mut fused = Candidates::new();
        let covered = fused.fill_fused(z, max, first);
        let mut plain = Candidates::new();
        plain.fill(z, None).unwrap();
        stage.apply(&mut plain, &Context::default()).unwrap();
        if covered {
            assert_eq!(
                fused.as_slice(),
                plain.as_slice(),
                "{first:?}, {} logits",
                z.len()
            );
            assert_eq!(fused.order, plain.order, "{first:?}");
            assert_eq!(fused.vocab_size(), plain.vocab_size());
        }
        covered
    }

    #[test]
    fn fused_first_stages_keep_what_the_stages_keep() {
        for (n, sd, grid, seed) in [
            (1, 1.0, false, 1),
            (50, 3.0, true, 2),
            (1000, 3.0, false, 3),
            (5000, 0.3, true, 4),
            (32_000, 3.0, false, 5),
            (49_152, 3.0, true, 6),
            (131_072, 3.0, false, 7),
        ] {
            let z = logits(n, sd, grid, seed);
            for k in [1, 2, 40, 64, 1000] {
                let covered = check(&z, FirstStage::TopK(k), &TopK::new(k).unwrap());
                assert_eq!(covered, k < n, "top-k {k} of {n}");
            }
            for p in [0.01, 0.5, 0.95, 0.999] {
                assert!(
                    check(&z, FirstStage::TopP(p), &TopP::new(p).unwrap()),
                    "top-p {p}, {n}"
                );
            }
            for p in [0.001, 0.05, 0.5, 1.0] {
                assert!(
                    check(&z, FirstStage::MinP(p), &MinP::new(p).unwrap()),
                    "min-p {p}, {n}"
                );
            }
        }
    }

    /// The best `m` by a full sort, the definition.
    fn best_by_sort(z: &[f32], m: usize) -> Vec<Candidate> {
        let mut all: Vec<Candidate> = z
            .iter()
            .enumerate()
            .map(|(i, &logit)| Candidate {
                id: i as u32,
                logit,
                prob: 0.0,
            })
            .collect();
        all.sort_by(by_logit_desc);
        all.truncate(m);
        all
    }

    #[test]
    fn both_forms_of_the_fused_top_k_agree_with_a_full_sort() {
        // Sizes and `m` on both sides of the two-pass threshold, ties (the grid), blocks of one
        // value, a ragged last block; the portable code and the AVX2 code (where the CPU has
        // it) must both give the sorted best `m`, ties to the lowest id.
        let mut maxima = Vec::new();
        let mut out = Vec::new();
        for (n, sd, grid, seed) in [
            (100, 1.0, true, 1),
            (4_099, 3.0, false, 2),
            (32_000, 3.0, false, 3),
            (32_000, 0.2, true, 4),
            (49_152, 3.0, true, 5),
            (70_001, 3.0, false, 6),
        ] {
            let z = logits(n, sd, grid, seed);
            for m in [1, 2, 40, 64, 257, 1000] {
                if m > n {
                    continue;
                }
                let want = best_by_sort(&z, m);
                assert!(best_of_logits_with::<Portable>(
                    &z,
                    m,
                    &mut out,
                    &mut maxima
                ));
                assert_eq!(out, want, "portable, {n} logits, m {m}");
                assert!(best_of_logits(&z, m, &mut out, &mut maxima));
                assert_eq!(out, want, "dispatched, {n} logits, m {m}");
            }
        }
        // Every logit equal: the lowest ids win.
        let flat = vec![0.5f32; 10_000];
        assert!(best_of_logits(&flat, 40, &mut out, &mut maxima));
        assert_eq!(out, best_by_sort(&flat, 40));
    }

    #[test]
    fn the_fused_top_k_refuses_logits_that_are_not_finite() {
        let mut maxima = Vec::new();
        let mut out = Vec::new();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 777, 31_999] {
                let mut z = logits(32_000, 3.0, false, 9);
                z[at] = bad;
                // Both forms (two passes at m = 40, one pass at m = 4000).
                for m in [40, 4000] {
                    assert!(
                        !best_of_logits(&z, m, &mut out, &mut maxima),
                        "{bad} at {at}"
                    );
                    assert!(!best_of_logits_with::<Portable>(
                        &z,
                        m,
                        &mut out,
                        &mut maxima
                    ));
                }
            }
        }
        // Finite logits whose sum overflows are refused by the two-pass form (the caller's
        // ordinary path handles them); the sampler still draws what the plain chain draws.
        let huge: Vec<f32> = (0..32_000)
            .map(|i| if i % 2 == 0 { 3e38 } else { 2e38 })
            .collect();
        let params = crate::SamplingParams {
            top_k: Some(40),
            seed: Some(3),
            ..crate::SamplingParams::default()
        };
        let chosen = crate::Sampler::new(&params)
            .unwrap()
            .choose(&huge, &Context::default())
            .unwrap();
        let mut plain = crate::Candidates::new();
        plain.fill(&huge, None).unwrap();
        TopK::new(40)
            .unwrap()
            .apply(&mut plain, &Context::default())
            .unwrap();
        assert!(plain.get(chosen.token).is_some());
        assert_eq!(chosen.token % 2, 0);
    }

    #[test]
    fn a_temperature_then_top_k_or_min_p_fused_keeps_the_same_bits() {
        // Temperature first (transformers' order): the fused form must leave exactly the
        // candidates, scaled logits bit for bit, order and flags, that the fill, the temperature
        // and the stage leave. Coarse grids and tiny temperatures make rounding tie scaled
        // logits that the raw ones order.
        use crate::stages::Temperature;
        for (n, sd, grid, seed) in [
            (50, 3.0, true, 21),
            (5000, 0.3, true, 22),
            (32_000, 3.0, false, 23),
            (49_152, 3.0, true, 24),
            (131_072, 3.0, false, 25),
        ] {
            let mut z = logits(n, sd, grid, seed);
            // Neighbouring floats that a division by a large t may merge.
            for i in (0..n).step_by(97) {
                z[i] = z[0].next_down();
            }
            let max = crate::softmax::checked_max(&z).unwrap();
            for t in [0.8f32, 1e-3, 3.0, 1e-30, 1e-38, 1e30] {
                let plain = |stage: &dyn LogitsProcessor| {
                    let mut c = Candidates::new();
                    c.fill(&z, None).unwrap();
                    let ctx = Context::default();
                    Temperature::new(t).unwrap().apply(&mut c, &ctx).unwrap();
                    stage.apply(&mut c, &ctx).unwrap();
                    c
                };
                let same = |fused: &Candidates, plain: &Candidates, what: &str| {
                    let bits = |c: &Candidates| -> Vec<(u32, u32)> {
                        c.as_slice()
                            .iter()
                            .map(|c| (c.id, c.logit.to_bits()))
                            .collect()
                    };
                    assert_eq!(bits(fused), bits(plain), "{what}, t {t}, {n} logits");
                    assert_eq!(fused.order, plain.order, "{what}, t {t}");
                    assert_eq!(fused.may_have_neg_inf, plain.may_have_neg_inf);
                    assert_eq!(fused.vocab_size(), plain.vocab_size());
                };
                for k in [1, 2, 40, 64, 1000] {
                    if k >= n {
                        continue;
                    }
                    let mut fused = Candidates::new();
                    assert!(fused.fill_fused(&z, f32::NAN, FirstStage::ScaledTopK(t, k)));
                    same(&fused, &plain(&TopK::new(k).unwrap()), "top-k");
                }
                for p in [0.001, 0.05, 0.5, 1.0] {
                    let mut fused = Candidates::new();
                    assert!(fused.fill_fused(&z, max, FirstStage::ScaledMinP(t, p)));
                    same(&fused, &plain(&MinP::new(p).unwrap()), "min-p");
                }
            }
        }
    }

    #[test]
    fn top_p_of_a_flat_vocabulary_keeps_thousands_sorted() {
        // Normal logits with deviation 3 over 128k tokens, as llama.cpp's harness draws them:
        // the nucleus of 0.95 is several thousand tokens, beyond the first 64, so the histogram
        // route runs.
        let z = logits(131_072, 3.0, false, 11);
        let max = crate::softmax::checked_max(&z).unwrap();
        let mut c = Candidates::new();
        assert!(c.fill_fused(&z, max, FirstStage::TopP(0.95)));
        assert!(c.len() > 1000, "{} tokens", c.len());
        assert!(c
            .as_slice()
            .windows(2)
            .all(|w| by_logit_desc(&w[0], &w[1]) == Ordering::Less));
        assert!(check(&z, FirstStage::TopP(0.95), &TopP::new(0.95).unwrap()));
    }
}
