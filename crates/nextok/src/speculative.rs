//! Drafts for exact speculative decoding: prompt lookup (n-gram matching over the prompt and the
//! answer so far), and the policy that decides how long a draft may be and when to stop
//! drafting.
//!
//! A draft only proposes. [`Generation`](crate::Generation) runs the pending token and the draft
//! through the model in one forward pass, then chooses at each position with the ordinary rule
//! (the same mask, chain, random draws and stop checks) and keeps a drafted token exactly when it
//! is the chosen one. A position's logits are the same bits however many positions a pass
//! computes, so the answer is the answer of plain decoding, token for token; a good draft only
//! makes it come sooner.

use serde::Serialize;

/// The longest n-gram matched against the text so far.
const NGRAM_MAX: usize = 3;
/// The shortest: a single token matches too often in ordinary text to be worth a pass.
const NGRAM_MIN: usize = 2;
/// The most tokens a draft from a match of only [`NGRAM_MIN`] tokens may hold: such matches are
/// common in text that does not repeat itself, and most of their drafts fail.
const SHORT_MATCH_DRAFT: usize = 2;
/// The length of the first draft.
const FIRST_DRAFT: usize = 2;
/// The longest draft.
const MAX_DRAFT: usize = 16;
/// The most rounds that decode without drafting after drafts that did not pay.
const MAX_PAUSE: usize = 64;
/// What one drafted token adds to a verifying pass, in plain decode steps: a pass of the pending
/// token and `d` drafted ones costs about `1 + DRAFT_COST * d` steps. Measured on SmolLM2-135M
/// Q4_1 on a 2-core CPU with AVX-512 VNNI, rows of logits included: a pass of 4 to 16 tokens
/// grows by about 0.35 steps a token with 2 threads and 0.5 with 1 (decode streams the weights
/// once a token, a pass multiplies them by every token; `cargo run --release -p nextok-model
/// --example speed` prints it). Larger models on wider machines cost less per drafted token, so
/// this errs on the side of drafting less.
const DRAFT_COST: f32 = 0.4;
/// What a pass must gain, in plain decode steps, beyond the cost of its drafted tokens before
/// drafting counts as paying: a margin for the choices, the dropped cache positions and the
/// error of [`DRAFT_COST`], so that text where drafts barely break even stops drafting.
const MIN_GAIN: f32 = 0.5;

/// How speculative decoding went for one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpeculativeStats {
    /// Forward passes that checked a draft.
    pub drafts: usize,
    /// Tokens drafted, in all.
    pub drafted_tokens: usize,
    /// Drafted tokens that were the chosen ones, and so were kept.
    pub accepted_tokens: usize,
}

/// The drafting state of one completion.
#[derive(Debug, Clone)]
pub(crate) struct Speculation {
    /// The prompt and the tokens chosen so far, the pending one included.
    history: Vec<u32>,
    /// How many of the completion's tokens `history` holds.
    seen: usize,
    /// The most tokens the next draft may hold: two more after a draft kept whole, one fewer
    /// after one that failed.
    max_draft: usize,
    /// Rounds still to decode without drafting.
    pause: usize,
    /// The running estimate of what drafting gains, in plain decode steps a pass: each pass
    /// halves it and adds its own gain, its `accepted` tokens less the cost of its `drafted`
    /// ones ([`DRAFT_COST`]) and the margin [`MIN_GAIN`]. It depends only on the tokens, never
    /// on timing, so a run's drafts are the same every time.
    gain: f32,
    /// How many times in a row, less one for each paying pass, drafting did not pay: each time
    /// it does not (`gain` at or below zero) drafting pauses for twice as many rounds as the
    /// time before, so on text that does not repeat itself drafting soon costs nothing.
    misses: u32,
    stats: SpeculativeStats,
}

impl Speculation {
    pub(crate) fn new(prompt: &[u32]) -> Self {
        Speculation {
            history: prompt.to_vec(),
            seen: 0,
            max_draft: FIRST_DRAFT,
            pause: 0,
            gain: 0.0,
            misses: 0,
            stats: SpeculativeStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> SpeculativeStats {
        self.stats
    }

    /// Appends to `out` a draft of at most `limit` tokens to follow `tokens` (the completion's
    /// tokens so far, which only ever grow), or nothing while drafting pauses or when the text
    /// so far has no match.
    pub(crate) fn draft(&mut self, tokens: &[u32], limit: usize, out: &mut Vec<u32>) {
        if let Some(new) = tokens.get(self.seen..) {
            self.history.extend_from_slice(new);
            self.seen = tokens.len();
        }
        if self.pause > 0 {
            self.pause -= 1;
            return;
        }
        lookup(&self.history, self.max_draft.min(limit), out);
    }

    /// Records how a draft of `drafted` tokens went: its first `accepted` were kept. A pass saves
    /// `accepted` plain steps and costs about `DRAFT_COST * drafted` more than a plain one; while
    /// the running estimate of that gain less the margin [`MIN_GAIN`] stays above zero drafting
    /// goes on, and when it does not, drafting pauses.
    pub(crate) fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.stats.drafts += 1;
        self.stats.drafted_tokens += drafted;
        self.stats.accepted_tokens += accepted;
        if accepted == drafted {
            self.max_draft = (self.max_draft + 2).min(MAX_DRAFT);
        } else {
            self.max_draft = self.max_draft.saturating_sub(1).max(1);
        }
        let pass = accepted as f32 - DRAFT_COST * drafted as f32 - MIN_GAIN;
        self.gain = self.gain * 0.5 + pass;
        if self.gain > 0.0 {
            self.misses = self.misses.saturating_sub(1);
        } else {
            // Drafting does not pay: pause, longer each time, then judge the drafts after the
            // pause afresh.
            self.misses = self.misses.saturating_add(1);
            self.pause = 1usize
                .checked_shl(self.misses)
                .map_or(MAX_PAUSE, |p| p.min(MAX_PAUSE));
            self.gain = 0.0;
        }
    }
}

/// Prompt lookup: finds the latest earlier occurrence of the last `n` tokens of `history` (the
/// longest `n` from [`NGRAM_MAX`] down to [`NGRAM_MIN`] that occurs) and appends to `out` the
/// `k` tokens that followed it (at most [`SHORT_MATCH_DRAFT`] after a match of [`NGRAM_MIN`]
/// tokens while [`NGRAM_MAX`] is longer). Where the copy reaches the end of `history` it goes on copying
/// its own draft, so a text that repeats with a short period gets a full draft.
pub(crate) fn lookup(history: &[u32], k: usize, out: &mut Vec<u32>) {
    let len = history.len();
    if k == 0 {
        return;
    }
    for n in (NGRAM_MIN..=NGRAM_MAX).rev() {
        if len <= n {
            continue;
        }
        let tail = &history[len - n..];
        let Some(start) = (0..len - n).rev().find(|&s| history[s..s + n] == *tail) else {
            continue;
        };
        let k = if n < NGRAM_MAX {
            k.min(SHORT_MATCH_DRAFT)
        } else {
            k
        };
        // `start + n < len`: the match ends before the tail does.
        let from = start + n;
        let first = out.len();
        for i in 0..k {
            let src = from + i;
            let token = if src < len {
                history[src]
            } else {
                out[first + src - len]
            };
            out.push(token);
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(history: &[u32], k: usize) -> Vec<u32> {
        let mut out = Vec::new();
        lookup(history, k, &mut out);
        out
    }

    #[test]
    fn the_latest_longest_match_is_copied() {
        // "4 5 6" occurs twice before the end; the later one is followed by 9.
        assert_eq!(
            draft(&[4, 5, 6, 7, 8, 4, 5, 6, 9, 1, 4, 5, 6], 3),
            vec![9, 1, 4]
        );
        // The trigram "1 2 3" wins over the later bigram "2 3".
        assert_eq!(draft(&[1, 2, 3, 4, 0, 2, 3, 7, 1, 2, 3], 2), vec![4, 0]);
    }

    #[test]
    fn a_bigram_match_drafts_at_most_two_tokens() {
        // Only "5 6" matches; its latest earlier occurrence is followed by 3 5 6.
        assert_eq!(SHORT_MATCH_DRAFT, 2);
        assert_eq!(draft(&[5, 6, 9, 1, 5, 6, 3, 5, 6], 4), vec![3, 5]);
        assert_eq!(draft(&[5, 6, 9, 1, 5, 6, 3, 5, 6], 1), vec![3]);
    }

    #[test]
    fn a_short_period_is_copied_past_the_end() {
        assert_eq!(draft(&[1, 2, 3, 1, 2, 3], 7), vec![1, 2, 3, 1, 2, 3, 1]);
    }

    #[test]
    fn no_match_no_draft() {
        assert_eq!(draft(&[1, 2, 3, 4, 5], 4), Vec::<u32>::new());
        assert_eq!(draft(&[1, 2], 4), Vec::<u32>::new());
        assert_eq!(draft(&[1, 2, 1, 2], 0), Vec::<u32>::new());
    }

    #[test]
    fn failed_drafts_pause_drafting_and_a_kept_one_resumes_it() {
        let mut s = Speculation::new(&[1, 2, 3, 1, 2, 3]);
        let mut out = Vec::new();
        // Drafts `rounds` times; returns the lengths of the drafts made.
        let mut rounds = |s: &mut Speculation, n: usize, limit: usize| {
            let mut lengths = Vec::new();
            for _ in 0..n {
                out.clear();
                s.draft(&[], limit, &mut out);
                lengths.push(out.len());
            }
            lengths
        };
        assert_eq!(rounds(&mut s, 1, 8), [FIRST_DRAFT]);
        s.record(FIRST_DRAFT, 0);
        // One miss: two rounds without a draft, then drafts again, one token shorter.
        assert_eq!(rounds(&mut s, 3, 8), [0, 0, FIRST_DRAFT - 1]);
        s.record(FIRST_DRAFT - 1, 0);
        // Two misses in a row: four rounds without; the drafts stay at least one token long.
        assert_eq!(rounds(&mut s, 5, 8), [0, 0, 0, 0, 1]);
        // Kept whole: it pays, so no pause, and the next draft is two tokens longer.
        s.record(1, 1);
        assert_eq!(rounds(&mut s, 1, 8), [3]);
        assert_eq!(s.misses, 1);
        s.record(3, 3);
        assert_eq!(rounds(&mut s, 1, 8), [5]);
        assert_eq!(s.misses, 0);
        // The limit caps a draft.
        assert_eq!(rounds(&mut s, 1, 1), [1]);
        assert_eq!(
            s.stats(),
            SpeculativeStats {
                drafts: 4,
                drafted_tokens: FIRST_DRAFT + (FIRST_DRAFT - 1) + 1 + 3,
                accepted_tokens: 4,
            }
        );
    }

    /// Drafts whose first token is kept and the rest dropped save one step for the price of
    /// their drafted tokens and the margin: drafting pauses, longer and longer, until it drafts
    /// in only a few rounds in a hundred.
    #[test]
    fn drafts_kept_only_at_their_first_token_pause_drafting() {
        let mut s = Speculation::new(&[1, 2, 3, 1, 2, 3]);
        let mut out = Vec::new();
        let (mut drafted_rounds, mut paused_run, mut longest_pause) = (0, 0, 0);
        for round in 0..1000 {
            out.clear();
            s.draft(&[], 64, &mut out);
            if out.is_empty() {
                paused_run += 1;
                longest_pause = longest_pause.max(paused_run);
                continue;
            }
            paused_run = 0;
            drafted_rounds += 1;
            if round == 0 {
                assert_eq!(out.len(), FIRST_DRAFT);
            }
            s.record(out.len(), 1);
        }
        assert_eq!(longest_pause, MAX_PAUSE);
        assert!(
            drafted_rounds < 60,
            "{drafted_rounds} rounds of 1000 drafted"
        );
        let stats = s.stats();
        assert_eq!(stats.drafts, drafted_rounds);
        assert_eq!(stats.accepted_tokens, drafted_rounds);
    }

    /// Drafts kept whole always pay: drafting never pauses, and the drafts grow to the longest.
    #[test]
    fn drafts_kept_whole_never_pause_and_grow_to_the_longest() {
        let mut s = Speculation::new(&[1, 2, 3, 1, 2, 3]);
        let mut out = Vec::new();
        let mut lengths = Vec::new();
        for _ in 0..100 {
            out.clear();
            s.draft(&[], 64, &mut out);
            assert!(!out.is_empty(), "drafting paused");
            lengths.push(out.len());
            s.record(out.len(), out.len());
        }
        assert_eq!(
            &lengths[..4],
            &[
                FIRST_DRAFT,
                FIRST_DRAFT + 2,
                FIRST_DRAFT + 4,
                FIRST_DRAFT + 6
            ]
        );
        assert!(lengths.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(lengths.last(), Some(&MAX_DRAFT));
        assert_eq!(s.stats().drafted_tokens, s.stats().accepted_tokens);
    }

    /// A short draft that fails at its first token amid drafts that pay costs its drafted
    /// tokens, but drafting goes on in the very next round, one token shorter.
    #[test]
    fn a_first_token_miss_amid_paying_drafts_does_not_pause() {
        let mut s = Speculation::new(&[1, 2, 3, 1, 2, 3]);
        let mut out = Vec::new();
        for len in [
            FIRST_DRAFT,
            FIRST_DRAFT + 2,
            FIRST_DRAFT + 4,
            FIRST_DRAFT + 6,
        ] {
            out.clear();
            s.draft(&[], 64, &mut out);
            assert_eq!(out.len(), len);
            s.record(len, len);
        }
        out.clear();
        s.draft(&[], 4, &mut out);
        assert_eq!(out.len(), 4);
        s.record(out.len(), 0);
        out.clear();
        s.draft(&[], 64, &mut out);
        assert_eq!(out.len(), FIRST_DRAFT + 7);
        assert_eq!(s.misses, 0);
    }
}
