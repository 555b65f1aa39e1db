//! The attention of one batched decode step of SmolLM2-135M (30 layers, 9 query heads over 3
//! key/value heads of 64): 8 sequences of 192 cached positions each, in blocks of 16 positions
//! laid out as the KV cache lays them out (`[layer][key, value][slot][row]`, one allocation per
//! block), so that the step reads every sequence's keys and values from memory as a real step
//! does. It times one `dots` / `weighted_sum` call per query head against one `dots_heads` /
//! `weighted_sum_heads` call per key/value head, interleaved (A, B, A, B, ...) so that a busy
//! machine slows both alike, checks that both give the same bits, and prints the medians.
//!
//! `cargo bench -p nextok-benches --bench attention [-- SEQUENCES POSITIONS REPEATS]`

use nextok_kernels::{dots, dots_heads, weighted_sum, weighted_sum_heads, Isa};
use std::time::Instant;

const LAYERS: usize = 30;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HD: usize = 64;
const BLOCK: usize = 16;
const ROW: usize = KV_HEADS * HD;

struct Sequence {
    /// One allocation per block of `BLOCK` positions.
    blocks: Vec<Vec<f32>>,
    positions: usize,
}

impl Sequence {
    fn new(positions: usize, seed: &mut u64) -> Self {
        let per_block = LAYERS * 2 * BLOCK * ROW;
        let blocks = (0..positions.div_ceil(BLOCK))
            .map(|_| (0..per_block).map(|_| unit(seed)).collect())
            .collect();
        Sequence { blocks, positions }
    }

    /// Every key (or value) row of `layer`, in order.
    fn rows(&self, layer: usize, value: bool) -> Vec<&[f32]> {
        (0..self.positions)
            .map(|p| {
                let at = ((layer * 2 + usize::from(value)) * BLOCK + p % BLOCK) * ROW;
                &self.blocks[p / BLOCK][at..at + ROW]
            })
            .collect()
    }
}

fn unit(state: &mut u64) -> f32 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
}

/// Softmax of each head's scores in place, as the CPU backend computes it; returns the sums.
fn softmax(scores: &mut [f32], keys: usize, sums: &mut [f32]) {
    let scale = 1.0 / (HD as f32).sqrt();
    for (head, sum) in scores.chunks_exact_mut(keys).zip(sums.iter_mut()) {
        head.iter_mut().for_each(|s| *s *= scale);
        let max = head.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        *sum = 0.0;
        for s in head.iter_mut() {
            *s = (*s - max).exp();
            *sum += *s;
        }
    }
}

/// One step's attention over every layer and sequence; `grouped` chooses the kernels.
fn step(isa: Isa, seqs: &[Sequence], q: &[f32], grouped: bool, out: &mut [f32]) {
    let group = HEADS / KV_HEADS;
    let mut scores = Vec::new();
    let mut sums = [0.0f32; HEADS];
    for layer in 0..LAYERS {
        for (s, seq) in seqs.iter().enumerate() {
            let (keys, values) = (seq.rows(layer, false), seq.rows(layer, true));
            let m = keys.len();
            let q = &q[s * HEADS * HD..(s + 1) * HEADS * HD];
            let out = &mut out[(layer * seqs.len() + s) * HEADS * HD..][..HEADS * HD];
            out.fill(0.0);
            for g in 0..KV_HEADS {
                let heads = g * group..(g + 1) * group;
                let (qs, acc) = (
                    &q[heads.start * HD..heads.end * HD],
                    &mut out[heads.start * HD..heads.end * HD],
                );
                scores.clear();
                scores.resize(group * m, 0.0);
                if grouped {
                    dots_heads(isa, qs, group, &keys, g * HD, &mut scores);
                } else {
                    for h in 0..group {
                        let part = &mut scores[h * m..(h + 1) * m];
                        dots(isa, &qs[h * HD..(h + 1) * HD], &keys, g * HD, part);
                    }
                }
                softmax(&mut scores, m, &mut sums);
                if grouped {
                    weighted_sum_heads(isa, &scores, group, &values, g * HD, acc);
                } else {
                    for h in 0..group {
                        let p = &scores[h * m..(h + 1) * m];
                        weighted_sum(isa, p, &values, g * HD, &mut acc[h * HD..(h + 1) * HD]);
                    }
                }
                for (head, &sum) in acc.chunks_exact_mut(HD).zip(&sums) {
                    head.iter_mut().for_each(|a| *a /= sum);
                }
            }
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; the numbers, if any, follow it.
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (n_seqs, positions, repeats) = (
        numbers.first().copied().unwrap_or(8),
        numbers.get(1).copied().unwrap_or(192),
        numbers.get(2).copied().unwrap_or(15),
    );
    let isa = Isa::detect();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let seqs: Vec<Sequence> = (0..n_seqs)
        .map(|_| Sequence::new(positions, &mut seed))
        .collect();
    let q: Vec<f32> = (0..n_seqs * HEADS * HD).map(|_| unit(&mut seed)).collect();
    let len = LAYERS * n_seqs * HEADS * HD;
    let (mut a, mut b) = (vec![0.0f32; len], vec![0.0f32; len]);
    let (mut per_head, mut grouped) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let t = Instant::now();
        step(isa, &seqs, &q, false, &mut a);
        per_head.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        step(isa, &seqs, &q, true, &mut b);
        grouped.push(t.elapsed().as_secs_f64() * 1e3);
    }
    assert!(
        a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
        "the grouped kernels changed a bit"
    );
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ph, gr) = (median(&mut per_head), median(&mut grouped));
    println!(
        "attention of one decode step, {n_seqs} sequences × {positions} positions, {isa:?}, \
         {repeats} interleaved repeats: per head {ph:.3} ms, grouped {gr:.3} ms (median), \
         per head / grouped = {:.3}",
        ph / gr
    );
}
