//! The forward pass over paged caches from a budgeted pool: a prompt whose prefix comes from the
//! prefix cache gives the same logits, bit for bit, as a full prefill in a fresh cache, and
//! running out of blocks is a typed error that leaves the caches as they were.

use nextok_gguf::{GgmlType, GgufFile};
use nextok_kv_cache::{KvCache, KvPool, KvType};
use nextok_model::testing::RandomLlama;
use nextok_model::{Backend, CpuBackend, Error, LlamaModel, LoadOptions, Logits, Sequence};
use proptest::prelude::*;

fn load(spec: &RandomLlama, seed: u64) -> LlamaModel {
    let file = GgufFile::from_bytes(spec.to_gguf(seed)).unwrap();
    LlamaModel::from_gguf(file, LoadOptions::default()).unwrap()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// Runs `tokens` after what `cache` holds, returning every new position's logits.
fn run(model: &LlamaModel, backend: &dyn Backend, cache: &mut KvCache, tokens: &[u32]) -> Vec<f32> {
    let mut out = model
        .forward(
            backend,
            &mut [Sequence {
                cache,
                tokens,
                logits: Logits::All,
            }],
        )
        .unwrap();
    out.remove(0)
}

/// Prefix-cache hits against full prefills, for a model, a number type and a block size: `a`
/// runs first and publishes its blocks; `b` (which shares a prefix with `a`) starts from the
/// cache and runs the rest; its logits must be those of `b` prefilled in a fresh cache.
fn check_prefix_hit(
    model: &LlamaModel,
    backend: &dyn Backend,
    pool: &KvPool,
    a: &[u32],
    b: &[u32],
) -> usize {
    let vocab = model.config().vocab;
    let kv = pool.config().kv_type;
    let mut first = pool.new_cache();
    let a_logits = run(model, backend, &mut first, a);
    let mut fresh = model.new_cache(kv);
    assert_eq!(
        bits(&a_logits),
        bits(&run(model, backend, &mut fresh, a)),
        "a pooled cache computes what a private one does"
    );
    first.publish_prefix();

    let mut cached = pool.cache_for_prompt(b);
    let hit = cached.len();
    assert_eq!(&b[..hit], &a[..hit]);
    let b_logits = run(model, backend, &mut cached, &b[hit..]);
    let mut fresh = model.new_cache(kv);
    let full = run(model, backend, &mut fresh, b);
    assert_eq!(bits(&b_logits), bits(&full[hit * vocab..]), "hit of {hit}");
    // Decoding on from both gives the same logits too.
    for step in 0..3u32 {
        let t = [(step * 7 + 3) % vocab as u32];
        let x = run(model, backend, &mut cached, &t);
        let y = run(model, backend, &mut fresh, &t);
        assert_eq!(bits(&x), bits(&y), "decode step {step}");
    }
    hit
}

#[test]
fn a_prompt_from_the_prefix_cache_gives_the_logits_of_a_full_prefill() {
    let model = load(&RandomLlama::default(), 11);
    let backend = CpuBackend::new(1);
    for kv in [KvType::F32, KvType::F16] {
        // The model's own pool, from its backend: blocks of 16 positions.
        let pool = model.new_pool(&backend, kv, 1 << 22).unwrap();
        assert_eq!(pool.config().block_positions, 16);
        assert!(pool.storage().host().is_some());
        let a: Vec<u32> = (0..40).map(|i| (i * 13 + 5) % 50).collect();
        // The same prompt: two full blocks (32 tokens) come from the cache.
        assert_eq!(check_prefix_hit(&model, &backend, &pool, &a, &a), 32);
        // A different token in the second block: the first block only.
        let mut b = a.clone();
        b[20] = 49;
        assert_eq!(check_prefix_hit(&model, &backend, &pool, &a, &b), 16);
    }
}

#[test]
fn running_out_of_blocks_in_a_forward_pass_leaves_the_caches_unchanged() {
    let model = load(&RandomLlama::default(), 12);
    let backend = CpuBackend::new(1);
    let config = model.cache_config(KvType::F32);
    let pool = model
        .new_pool(&backend, KvType::F32, 3 * config.block_bytes())
        .unwrap();
    let (mut a, mut b) = (pool.new_cache(), pool.new_cache());
    run(&model, &backend, &mut a, &[1; 20]);
    assert_eq!(pool.used_blocks(), 2);
    // `a` fits its next token; `b` needs two blocks and one is left.
    let err = model
        .forward(
            &backend,
            &mut [
                Sequence {
                    cache: &mut a,
                    tokens: &[2],
                    logits: Logits::Last,
                },
                Sequence {
                    cache: &mut b,
                    tokens: &[3; 17],
                    logits: Logits::Last,
                },
            ],
        )
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Cache(nextok_kv_cache::Error::OutOfBlocks {
            needed: 2,
            available: 1
        })
    ));
    assert_eq!((a.len(), b.len(), pool.used_blocks()), (20, 0, 2));
    // With the room back, the same pass runs, and `a`'s logits are a fresh cache's.
    let mut fresh = model.new_cache(KvType::F32);
    run(&model, &backend, &mut fresh, &[1; 20]);
    assert_eq!(
        bits(&run(&model, &backend, &mut a, &[2])),
        bits(&run(&model, &backend, &mut fresh, &[2]))
    );
    assert!(KvPool::new(config, config.block_bytes() - 1).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Any block size, prompt lengths and point of divergence, on a model of another weight
    /// type and grouping, with two threads.
    #[test]
    fn prefix_hits_are_exact_for_any_block_size(
        seed in 0..1000u64,
        bp in 1..9usize,
        len in 2..30usize,
        diverge in 0..30usize,
    ) {
        let spec = RandomLlama {
            weight_type: GgmlType::Q4_1,
            heads: 4,
            kv_heads: 1,
            ..RandomLlama::default()
        };
        let model = load(&spec, seed);
        let backend = CpuBackend::new(2).with_min_work_per_thread(1);
        let config = model.cache_config(KvType::F32).with_block_positions(bp);
        let pool = KvPool::new(config, 64 * config.block_bytes()).unwrap();
        let a: Vec<u32> = (0..len as u32).map(|i| (i * 17 + seed as u32) % 50).collect();
        let mut b = a.clone();
        if diverge < len {
            b[diverge] = (b[diverge] + 1) % 50;
        }
        let hit = check_prefix_hit(&model, &backend, &pool, &a, &b);
        // The longest cached prefix in whole blocks, leaving one token to run.
        let common = diverge.min(len);
        prop_assert_eq!(hit, (common.min(len - 1) / bp) * bp);
    }
}
