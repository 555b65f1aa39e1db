//! The pool: budgets, prefix caching, least-recently-used eviction, copy-on-write and the typed
//! errors, each with the exact numbers it must give.

use nextok_kv_cache::{CacheConfig, Error, KvCache, KvPool, KvType};

const LAYERS: usize = 2;
const ROW: usize = 4;

fn config() -> CacheConfig {
    CacheConfig::new(LAYERS, 1, ROW, KvType::F32)
}

/// A pool of `blocks` blocks of the default 16 positions.
fn pool(blocks: u64) -> KvPool {
    KvPool::new(config(), blocks * config().block_bytes()).expect("the budget holds blocks")
}

/// The rows the "model" computes for position `pos` of `tokens`: a function of the tokens up to
/// it, as a real model's keys and values are.
fn rows(tokens: &[u32], pos: usize, layer: usize) -> (Vec<f32>, Vec<f32>) {
    let h = tokens[..=pos]
        .iter()
        .fold(17u32, |h, &t| h.wrapping_mul(31).wrapping_add(t))
        % 1000;
    let row = |which: usize| -> Vec<f32> {
        (0..ROW)
            .map(|i| h as f32 + layer as f32 * 0.25 + which as f32 * 0.5 + i as f32 * 0.01)
            .collect()
    };
    (row(0), row(1))
}

/// Appends `tokens` to `cache` and writes every layer of them.
fn run(cache: &mut KvCache, tokens: &[u32]) {
    let range = cache.push_tokens(tokens).expect("room in the pool");
    let all = cache.tokens().to_vec();
    for pos in range {
        for layer in 0..LAYERS {
            let (k, v) = rows(&all, pos, layer);
            cache.write(layer, pos, &k, &v).expect("a valid row");
        }
    }
}

/// Every row of `cache` is the one computed from its tokens.
fn assert_rows(cache: &KvCache) {
    let tokens = cache.tokens().to_vec();
    let mut got = vec![0.0; ROW];
    for pos in 0..cache.len() {
        for layer in 0..LAYERS {
            let (k, v) = rows(&tokens, pos, layer);
            cache.key(layer, pos).unwrap().to_f32(0..ROW, &mut got);
            assert_eq!(got, k, "key, layer {layer} pos {pos}");
            cache.value(layer, pos).unwrap().to_f32(0..ROW, &mut got);
            assert_eq!(got, v, "value, layer {layer} pos {pos}");
        }
    }
}

fn assert_accounting(pool: &KvPool) {
    assert_eq!(
        pool.used_blocks() + pool.cached_blocks() + pool.free_blocks(),
        pool.total_blocks()
    );
}

#[test]
fn a_second_request_with_the_same_prompt_starts_with_its_full_blocks() {
    let pool = pool(20);
    let prompt: Vec<u32> = (100..140).collect();
    let mut first = pool.new_cache();
    run(&mut first, &prompt);
    assert_eq!(first.publish_prefix(), 2);
    // Publishing again finds the blocks already there.
    assert_eq!(first.publish_prefix(), 2);

    let second = pool.cache_for_prompt(&prompt);
    assert_eq!(second.len(), 32);
    assert_eq!(second.tokens(), &prompt[..32]);
    assert_eq!(second.block_table(), &first.block_table()[..2]);
    assert_rows(&second);
    let mut a = vec![0.0; ROW];
    let mut b = vec![0.0; ROW];
    for pos in 0..32 {
        for layer in 0..LAYERS {
            first.key(layer, pos).unwrap().to_f32(0..ROW, &mut a);
            second.key(layer, pos).unwrap().to_f32(0..ROW, &mut b);
            assert_eq!(a, b);
        }
    }
    // Shared, the two blocks are used once: 3 blocks for `first`, none more for `second`.
    assert_eq!(pool.used_blocks(), 3);

    // A different token in block 2 (position 20) keeps block 1 only; in block 1, nothing.
    let mut other = prompt.clone();
    other[20] = 7;
    assert_eq!(pool.cache_for_prompt(&other).len(), 16);
    other[3] = 7;
    assert_eq!(pool.cache_for_prompt(&other).len(), 0);
    // At least one token is left to run: a prompt of exactly 32 tokens gets one block, 33 two.
    assert_eq!(pool.cache_for_prompt(&prompt[..32]).len(), 16);
    assert_eq!(pool.cache_for_prompt(&prompt[..33]).len(), 32);
    assert_eq!(pool.cache_for_prompt(&[]).len(), 0);
    assert_accounting(&pool);
}

#[test]
fn cached_blocks_outlive_their_sequence_until_evicted() {
    let pool = pool(20);
    let prompt: Vec<u32> = (0..40).collect();
    let mut first = pool.new_cache();
    run(&mut first, &prompt);
    first.publish_prefix();
    drop(first);
    // The partial third block is free; the two published ones are cached.
    assert_eq!(
        (pool.used_blocks(), pool.cached_blocks(), pool.free_blocks()),
        (0, 2, 18)
    );
    assert_eq!(pool.available_blocks(), 20);
    let mut second = pool.cache_for_prompt(&prompt);
    assert_eq!((pool.used_blocks(), pool.cached_blocks()), (2, 0));
    run(&mut second, &prompt[32..]);
    assert_rows(&second);
    assert_eq!(second.tokens(), prompt);
}

#[test]
fn an_identical_block_is_shared_not_duplicated() {
    let pool = pool(20);
    let prompt: Vec<u32> = (0..40).collect();
    let (mut a, mut b) = (pool.new_cache(), pool.new_cache());
    run(&mut a, &prompt);
    run(&mut b, &prompt);
    assert_eq!(pool.used_blocks(), 6);
    a.publish_prefix();
    assert_eq!(b.publish_prefix(), 2);
    // `b` now holds `a`'s two full blocks and gave its own copies back.
    assert_eq!(b.block_table()[..2], a.block_table()[..2]);
    assert_ne!(b.block_table()[2], a.block_table()[2]);
    assert_eq!(pool.used_blocks(), 4);
    assert_rows(&b);
    assert_accounting(&pool);
}

#[test]
fn eviction_takes_the_least_recently_used_block_first() {
    // Six blocks: two prompts of 33 tokens take three each (two full, one partial).
    let pool = pool(6);
    let a: Vec<u32> = (0..33).collect();
    let b: Vec<u32> = (100..133).collect();
    for prompt in [&a, &b] {
        let mut cache = pool.new_cache();
        run(&mut cache, prompt);
        cache.publish_prefix();
    }
    assert_eq!((pool.cached_blocks(), pool.free_blocks()), (4, 2));
    // Using `a`'s blocks again makes them the most recently used.
    drop(pool.cache_for_prompt(&a));
    // A third prompt needs three blocks: the two free ones and one evicted, which must be the
    // least recently used: `b`'s second block (released before its first, as a sequence gives
    // its blocks back last to first, so that a chain is evicted from its end).
    let mut c = pool.new_cache();
    run(&mut c, &(200..233).collect::<Vec<u32>>());
    assert_eq!(
        (pool.used_blocks(), pool.cached_blocks(), pool.free_blocks()),
        (3, 3, 0)
    );
    assert_eq!(pool.cache_for_prompt(&b).len(), 16);
    assert_eq!(pool.cache_for_prompt(&a).len(), 32);
    // Next in line: `b`'s first block, then `a`'s second.
    let mut d = pool.new_cache();
    run(&mut d, &[9; 16]);
    assert_eq!(pool.cache_for_prompt(&b).len(), 0);
    assert_eq!(pool.cache_for_prompt(&a).len(), 32);
    let mut e = pool.new_cache();
    run(&mut e, &[8; 16]);
    assert_eq!(pool.cache_for_prompt(&a).len(), 16);
    assert_accounting(&pool);
}

#[test]
fn running_out_of_blocks_is_a_typed_error_that_changes_nothing() {
    let pool = pool(4);
    let mut cache = pool.new_cache();
    run(&mut cache, &[1; 40]); // three blocks
    let before = cache.block_table().to_vec();
    assert_eq!(
        (
            cache.blocks_needed(0),
            cache.blocks_needed(8),
            cache.blocks_needed(9)
        ),
        (0, 0, 1)
    );
    assert_eq!(cache.blocks_needed(30), 2);
    // 70 positions need five blocks: two more, and one is left.
    assert_eq!(
        cache.push_tokens(&[2; 30]),
        Err(Error::OutOfBlocks {
            needed: 2,
            available: 1
        })
    );
    assert_eq!((cache.len(), cache.block_table()), (40, &before[..]));
    assert_eq!(pool.used_blocks(), 3);
    // A fork shares the partial last block: its first new token needs a copy of that block too.
    let mut beam = cache.fork();
    assert_eq!((beam.blocks_needed(8), beam.blocks_needed(9)), (1, 2));
    assert_eq!(
        beam.push_tokens(&[3; 9]),
        Err(Error::OutOfBlocks {
            needed: 2,
            available: 1
        })
    );
    assert_eq!(beam.push_tokens(&[3; 8]), Ok(40..48));
    assert_eq!(pool.used_blocks(), 4);
    assert_eq!(
        Error::OutOfBlocks {
            needed: 2,
            available: 1
        }
        .to_string(),
        "out of KV blocks: 2 needed, 1 available"
    );
}

#[test]
fn a_budget_below_one_block_is_refused_with_the_numbers() {
    let block = config().block_bytes();
    assert_eq!(block, 16 * 2 * 2 * 4 * 4);
    assert_eq!(
        KvPool::new(config(), block - 1).unwrap_err(),
        Error::BudgetTooSmall {
            budget_bytes: block - 1,
            block_bytes: block
        }
    );
    assert_eq!(
        KvPool::new(config(), block * 5 / 2).unwrap().total_blocks(),
        2
    );
    assert_eq!(
        KvPool::new(CacheConfig::new(1, 0, 1, KvType::F32), 1 << 20).unwrap_err(),
        Error::ZeroDimension { what: "kv_heads" }
    );
}

#[test]
fn size_accounting_follows_the_specification() {
    // The specification's base model: 24,576 bytes per token; a block of 16 positions.
    let base = CacheConfig::new(6, 8, 64, KvType::F32);
    assert_eq!(base.bytes_per_token(), 24_576);
    assert_eq!(base.block_bytes(), 16 * 24_576);
    let pool = KvPool::new(base, 1_000 * 24_576).unwrap();
    assert_eq!(pool.total_blocks(), 62);
    assert_eq!(pool.blocks_for(40), 3);
    let mut cache = pool.new_cache();
    cache.push_tokens(&[0; 40]).unwrap();
    assert_eq!(cache.bytes(), 40 * 24_576);
    // Waste is the unused tail of the last block: under one block.
    assert_eq!(cache.allocated_bytes(), 48 * 24_576);
    assert!(cache.allocated_bytes() - cache.bytes() < pool.block_bytes());
    assert_eq!(pool.usage_ratio(), 3.0 / 62.0);
}

#[test]
fn writing_a_published_block_copies_it() {
    let pool = pool(10);
    let prompt: Vec<u32> = (0..20).collect();
    let mut cache = pool.new_cache();
    run(&mut cache, &prompt);
    cache.publish_prefix();
    let published = cache.block_table()[0];
    cache.write(0, 3, &[-1.0; ROW], &[-2.0; ROW]).unwrap();
    assert_ne!(cache.block_table()[0], published);
    assert_eq!(cache.key(0, 3).unwrap().get(0), Some(-1.0));
    // The cached block keeps the published rows.
    let again = pool.cache_for_prompt(&prompt);
    assert_eq!(again.block_table()[0], published);
    assert_rows(&again);
}

#[test]
fn only_blocks_with_every_layer_written_are_published() {
    let pool = pool(10);
    let prompt: Vec<u32> = (0..33).collect();
    let mut cache = pool.new_cache();
    cache.push_tokens(&prompt).unwrap();
    for pos in 0..33 {
        let (k, v) = rows(&prompt, pos, 0);
        cache.write(0, pos, &k, &v).unwrap();
    }
    assert_eq!(cache.publish_prefix(), 0);
    for pos in 0..16 {
        let (k, v) = rows(&prompt, pos, 1);
        cache.write(1, pos, &k, &v).unwrap();
    }
    assert_eq!(cache.publish_prefix(), 1);
    assert_eq!(pool.cache_for_prompt(&prompt).len(), 16);
}

#[test]
fn truncated_positions_must_be_written_again_before_publishing() {
    let pool = pool(10);
    let prompt: Vec<u32> = (0..17).collect();
    let mut cache = pool.new_cache();
    run(&mut cache, &prompt);
    cache.truncate(10);
    // New tokens at 10..16 with only layer 0 written: the old rows there do not count.
    let range = cache.push_tokens(&[50; 6]).unwrap();
    let tokens = cache.tokens().to_vec();
    for pos in range {
        let (k, v) = rows(&tokens, pos, 0);
        cache.write(0, pos, &k, &v).unwrap();
    }
    assert_eq!(cache.publish_prefix(), 0);
    for pos in 10..16 {
        let (k, v) = rows(&tokens, pos, 1);
        cache.write(1, pos, &k, &v).unwrap();
    }
    assert_eq!(cache.publish_prefix(), 1);
    assert_rows(&pool.cache_for_prompt(&[&tokens[..], &[1]].concat()));
}

#[test]
fn forks_copy_a_shared_block_before_writing_it() {
    let pool = pool(10);
    let mut parent = pool.new_cache();
    run(&mut parent, &[1; 20]);
    let mut child = parent.fork();
    assert_eq!((child.shared_blocks(), pool.used_blocks()), (2, 2));
    run(&mut child, &[2; 4]);
    // The child's new positions went into a copy of the half-full second block.
    assert_eq!(child.block_table()[0], parent.block_table()[0]);
    assert_ne!(child.block_table()[1], parent.block_table()[1]);
    assert_eq!((child.shared_blocks(), pool.used_blocks()), (1, 3));
    assert_rows(&parent);
    assert_rows(&child);
    drop(parent);
    assert_eq!(child.shared_blocks(), 0);
    drop(child);
    assert_eq!(pool.used_blocks(), 0);
    assert_eq!(pool.free_blocks(), 10);
}

#[test]
fn caches_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KvPool>();
    send_sync::<KvCache>();
    let pool = pool(10);
    let prompt: Vec<u32> = (0..40).collect();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (pool, prompt) = (pool.clone(), prompt.clone());
            std::thread::spawn(move || {
                let mut cache = pool.new_cache();
                run(&mut cache, &prompt);
                cache.publish_prefix();
                assert_rows(&cache);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("the thread ran");
    }
    assert_eq!((pool.used_blocks(), pool.cached_blocks()), (0, 2));
}
