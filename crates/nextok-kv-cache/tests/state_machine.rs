//! A state-machine test: random sequences of append, truncate, fork and prefix reuse, applied to
//! a set of caches and to a plain reference model (a vector of positions, each with its token and
//! its rows), compared in full after every step.

use nextok_kv_cache::{CacheConfig, KvCache, KvType};
use proptest::prelude::*;

const LAYERS: usize = 2;
const ROW: usize = 3;

/// One position of the reference: its token and, per layer, its key and value rows.
#[derive(Debug, Clone)]
struct RefPos {
    token: u32,
    rows: Vec<(Vec<f32>, Vec<f32>)>,
}

#[derive(Debug, Clone)]
enum Op {
    /// Append `n` tokens to sequence `seq` (taken modulo the number of sequences).
    Append { seq: usize, tokens: Vec<u32> },
    /// Truncate a sequence to `len` (may be longer than it: a no-op).
    Truncate { seq: usize, len: usize },
    /// Fork a sequence into a new one.
    Fork { seq: usize },
    /// Reuse the prefix of a sequence for a prompt made of its first `keep` tokens and `extra`.
    Reuse {
        seq: usize,
        keep: usize,
        extra: Vec<u32>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..8usize, prop::collection::vec(0..4u32, 1..6))
            .prop_map(|(seq, tokens)| Op::Append { seq, tokens }),
        1 => (0..8usize, 0..12usize).prop_map(|(seq, len)| Op::Truncate { seq, len }),
        1 => (0..8usize).prop_map(|seq| Op::Fork { seq }),
        1 => (0..8usize, 0..12usize, prop::collection::vec(0..4u32, 0..3))
            .prop_map(|(seq, keep, extra)| Op::Reuse { seq, keep, extra }),
    ]
}

/// The numbers written for a position: distinct per step, layer, key/value and element, and
/// rounded by the reference as the cache's number type rounds them.
fn row(step: usize, layer: usize, which: usize, kv_type: KvType) -> Vec<f32> {
    (0..ROW)
        .map(|i| {
            kv_type.round(step as f32 / 7.0 + layer as f32 * 0.25 + which as f32 + i as f32 * 0.01)
        })
        .collect()
}

fn check(caches: &[KvCache], reference: &[Vec<RefPos>]) {
    assert_eq!(caches.len(), reference.len());
    for (cache, seq) in caches.iter().zip(reference) {
        assert_eq!(cache.len(), seq.len());
        let tokens: Vec<u32> = seq.iter().map(|p| p.token).collect();
        assert_eq!(cache.tokens(), tokens);
        assert_eq!(cache.bytes(), cache.config().bytes_for(seq.len() as u64));
        for (pos, p) in seq.iter().enumerate() {
            for (layer, (k, v)) in p.rows.iter().enumerate() {
                let mut got = vec![0.0; ROW];
                cache.key(layer, pos).unwrap().to_f32(0..ROW, &mut got);
                assert_eq!(&got, k, "key, layer {layer} pos {pos}");
                cache.value(layer, pos).unwrap().to_f32(0..ROW, &mut got);
                assert_eq!(&got, v, "value, layer {layer} pos {pos}");
            }
        }
    }
}

fn run(ops: Vec<Op>, kv_type: KvType, block_positions: usize) {
    let config = CacheConfig::new(LAYERS, 1, ROW, kv_type).with_block_positions(block_positions);
    let mut caches = vec![KvCache::new(config).unwrap()];
    let mut reference: Vec<Vec<RefPos>> = vec![Vec::new()];
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Append { seq, tokens } => {
                let s = seq % caches.len();
                let range = caches[s].push_tokens(&tokens).unwrap();
                for (pos, &token) in range.zip(&tokens) {
                    let mut rows = Vec::new();
                    for layer in 0..LAYERS {
                        let (k, v) = (row(step, layer, 0, kv_type), row(step, layer, 1, kv_type));
                        caches[s].write(layer, pos, &k, &v).unwrap();
                        rows.push((k, v));
                    }
                    reference[s].push(RefPos { token, rows });
                }
            }
            Op::Truncate { seq, len } => {
                let s = seq % caches.len();
                caches[s].truncate(len);
                reference[s].truncate(len);
            }
            Op::Fork { seq } => {
                let s = seq % caches.len();
                caches.push(caches[s].fork());
                reference.push(reference[s].clone());
            }
            Op::Reuse { seq, keep, extra } => {
                let s = seq % caches.len();
                let mut prompt: Vec<u32> =
                    reference[s].iter().take(keep).map(|p| p.token).collect();
                prompt.extend(extra);
                let kept = caches[s].reuse_prefix(&prompt);
                // The reference's rule, stated plainly: the longest common prefix, leaving at
                // least one prompt token to run.
                let mut common = 0;
                while common < reference[s].len()
                    && common < prompt.len()
                    && reference[s][common].token == prompt[common]
                {
                    common += 1;
                }
                let expected = common.min(prompt.len().saturating_sub(1));
                assert_eq!(kept, expected);
                reference[s].truncate(expected);
            }
        }
        check(&caches, &reference);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn cache_matches_the_reference_model_f32(ops in prop::collection::vec(op(), 1..40), bp in 1..5usize) {
        run(ops, KvType::F32, bp);
    }

    #[test]
    fn cache_matches_the_reference_model_f16(ops in prop::collection::vec(op(), 1..40), bp in 1..5usize) {
        run(ops, KvType::F16, bp);
    }

    #[test]
    fn cache_matches_the_reference_model_bf16(ops in prop::collection::vec(op(), 1..40), bp in 1..5usize) {
        run(ops, KvType::BF16, bp);
    }
}

/// The same state machine on caches that share one pool with a budget, with the operations a
/// scheduler adds: publishing full blocks to the prefix cache, starting a sequence from a cached
/// prefix, and dropping a sequence. Rows are a function of the tokens up to their position (as a
/// model's keys and values are), so that a block taken from the prefix cache has a reference.
mod pooled {
    use super::*;
    use nextok_kv_cache::{Error, KvPool};
    use std::collections::HashSet;

    #[derive(Debug, Clone)]
    pub enum PoolOp {
        Append {
            seq: usize,
            tokens: Vec<u32>,
        },
        Truncate {
            seq: usize,
            len: usize,
        },
        Fork {
            seq: usize,
        },
        Drop {
            seq: usize,
        },
        Publish {
            seq: usize,
        },
        /// A new sequence for the first `keep` tokens of a sequence and `extra`, from the cache.
        FromPrompt {
            seq: usize,
            keep: usize,
            extra: Vec<u32>,
        },
    }

    pub fn pool_op() -> impl Strategy<Value = PoolOp> {
        prop_oneof![
            4 => (0..8usize, prop::collection::vec(0..3u32, 1..9))
                .prop_map(|(seq, tokens)| PoolOp::Append { seq, tokens }),
            1 => (0..8usize, 0..16usize).prop_map(|(seq, len)| PoolOp::Truncate { seq, len }),
            1 => (0..8usize).prop_map(|seq| PoolOp::Fork { seq }),
            1 => (0..8usize).prop_map(|seq| PoolOp::Drop { seq }),
            2 => (0..8usize).prop_map(|seq| PoolOp::Publish { seq }),
            2 => (0..8usize, 0..20usize, prop::collection::vec(0..3u32, 0..4))
                .prop_map(|(seq, keep, extra)| PoolOp::FromPrompt { seq, keep, extra }),
        ]
    }

    /// The key (`which` 0) or value (1) row of position `pos` of `tokens`.
    fn row_of(tokens: &[u32], pos: usize, layer: usize, which: usize, kv_type: KvType) -> Vec<f32> {
        let h = tokens[..=pos]
            .iter()
            .fold(7u32, |h, &t| h.wrapping_mul(31).wrapping_add(t + 1))
            % 4096;
        (0..ROW)
            .map(|i| {
                kv_type.round(h as f32 / 7.0 + layer as f32 * 0.25 + which as f32 + i as f32 * 0.01)
            })
            .collect()
    }

    fn check(pool: &KvPool, caches: &[KvCache], reference: &[Vec<u32>], kv_type: KvType) {
        assert_eq!(caches.len(), reference.len());
        let mut held = HashSet::new();
        let mut got = vec![0.0; ROW];
        for (cache, tokens) in caches.iter().zip(reference) {
            assert_eq!(cache.tokens(), &tokens[..]);
            assert_eq!(cache.bytes(), cache.config().bytes_for(tokens.len() as u64));
            // Under one block of waste per sequence.
            assert_eq!(cache.block_table().len(), pool.blocks_for(tokens.len()));
            held.extend(cache.block_table().iter().copied());
            for pos in 0..tokens.len() {
                for layer in 0..LAYERS {
                    cache.key(layer, pos).unwrap().to_f32(0..ROW, &mut got);
                    assert_eq!(
                        got,
                        row_of(tokens, pos, layer, 0, kv_type),
                        "key {layer} {pos}"
                    );
                    cache.value(layer, pos).unwrap().to_f32(0..ROW, &mut got);
                    assert_eq!(
                        got,
                        row_of(tokens, pos, layer, 1, kv_type),
                        "value {layer} {pos}"
                    );
                }
            }
        }
        assert_eq!(pool.used_blocks(), held.len());
        assert_eq!(
            pool.used_blocks() + pool.cached_blocks() + pool.free_blocks(),
            pool.total_blocks()
        );
    }

    pub fn run(ops: Vec<PoolOp>, kv_type: KvType, block_positions: usize, blocks: u64) {
        let config =
            CacheConfig::new(LAYERS, 1, ROW, kv_type).with_block_positions(block_positions);
        let pool = KvPool::new(config, blocks * config.block_bytes()).unwrap();
        let mut caches = vec![pool.new_cache()];
        let mut reference: Vec<Vec<u32>> = vec![Vec::new()];
        for op in ops {
            if caches.is_empty() {
                caches.push(pool.new_cache());
                reference.push(Vec::new());
            }
            let n = caches.len();
            match op {
                PoolOp::Append { seq, tokens } => {
                    let s = seq % n;
                    let needed = pool.blocks_for(reference[s].len() + tokens.len())
                        - caches[s].block_table().len();
                    let available = pool.available_blocks();
                    let exact = caches[s].blocks_needed(tokens.len());
                    let used = pool.used_blocks();
                    match caches[s].push_tokens(&tokens) {
                        Ok(range) => {
                            assert!(exact <= available);
                            // Every block counted is taken; a copied last block that only
                            // the prefix cache shared goes back to it.
                            let now = pool.used_blocks();
                            assert!(now == used + exact || now + 1 == used + exact);
                            reference[s].extend(&tokens);
                            for pos in range {
                                for layer in 0..LAYERS {
                                    let k = row_of(&reference[s], pos, layer, 0, kv_type);
                                    let v = row_of(&reference[s], pos, layer, 1, kv_type);
                                    caches[s].write(layer, pos, &k, &v).unwrap();
                                }
                            }
                        }
                        Err(Error::OutOfBlocks {
                            needed: e_needed,
                            available: e_available,
                        }) => {
                            // The error's numbers are the pool's; a shared last block adds one.
                            assert_eq!(e_available, available);
                            assert!(e_needed == needed || e_needed == needed + 1);
                            assert_eq!(e_needed, exact);
                            assert!(e_needed > e_available);
                        }
                        Err(e) => panic!("unexpected error {e}"),
                    }
                }
                PoolOp::Truncate { seq, len } => {
                    caches[seq % n].truncate(len);
                    reference[seq % n].truncate(len);
                }
                PoolOp::Fork { seq } => {
                    caches.push(caches[seq % n].fork());
                    reference.push(reference[seq % n].clone());
                }
                PoolOp::Drop { seq } => {
                    caches.remove(seq % n);
                    reference.remove(seq % n);
                }
                PoolOp::Publish { seq } => {
                    let published = caches[seq % n].publish_prefix();
                    assert_eq!(published, reference[seq % n].len() / block_positions);
                }
                PoolOp::FromPrompt { seq, keep, extra } => {
                    let mut prompt: Vec<u32> =
                        reference[seq % n].iter().take(keep).copied().collect();
                    prompt.extend(extra);
                    let cache = pool.cache_for_prompt(&prompt);
                    assert_eq!(cache.len() % block_positions, 0);
                    assert!(cache.len() < prompt.len().max(1));
                    reference.push(prompt[..cache.len()].to_vec());
                    caches.push(cache);
                }
            }
            check(&pool, &caches, &reference, kv_type);
        }
        drop(caches);
        assert_eq!(pool.used_blocks(), 0);
        assert_eq!(
            pool.cached_blocks() + pool.free_blocks(),
            pool.total_blocks()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn pooled_caches_match_the_reference_f32(
        ops in prop::collection::vec(pooled::pool_op(), 1..60),
        bp in 1..5usize,
        blocks in 4..40u64,
    ) {
        pooled::run(ops, KvType::F32, bp, blocks);
    }

    #[test]
    fn pooled_caches_match_the_reference_bf16(
        ops in prop::collection::vec(pooled::pool_op(), 1..60),
        bp in 1..5usize,
        blocks in 4..40u64,
    ) {
        pooled::run(ops, KvType::BF16, bp, blocks);
    }
}
