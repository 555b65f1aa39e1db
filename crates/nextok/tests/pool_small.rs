//! `LanguageModel::new_pool` on the small random model (`tests/common`): the pool comes from the
//! model's backend in the model's layout, its caches run through the same `forward`, and a
//! prompt whose prefix comes from the prefix cache gets the logits of a full prefill.

mod common;

use common::{gguf, SEED};
use nextok::gguf::GgufFile;
use nextok::kv_cache::{KvCache, KvType};
use nextok::model::{CpuBackend, LlamaModel, LoadOptions, Logits, Sequence};
use nextok::{Error, LanguageModel, LlamaOnBackend};

fn model() -> LlamaOnBackend {
    let file = GgufFile::from_bytes(gguf(SEED, 4096)).expect("the small GGUF parses");
    let model = LlamaModel::from_gguf(file, LoadOptions::default()).expect("the small model loads");
    LlamaOnBackend::new(model, Box::new(CpuBackend::new(1)))
}

fn all_logits(model: &dyn LanguageModel, cache: &mut KvCache, tokens: &[u32]) -> Vec<u32> {
    let mut out = model
        .forward(&mut [Sequence {
            cache,
            tokens,
            logits: Logits::All,
        }])
        .expect("the forward pass runs");
    out.remove(0).iter().map(|x| x.to_bits()).collect()
}

#[test]
fn the_models_pool_has_its_layout_and_reuses_cached_prefixes_exactly() {
    let model = model();
    let layout = *model.new_cache(KvType::F16).config();
    let pool = model
        .new_pool(KvType::F16, 100 * layout.block_bytes())
        .unwrap();
    assert_eq!(*pool.config(), layout);
    assert_eq!(pool.total_blocks(), 100);

    let prompt: Vec<u32> = (0..45).map(|i| (i * 7 + 3) % 60).collect();
    let mut first = pool.new_cache();
    let full = all_logits(&model, &mut first, &prompt);
    assert_eq!(first.publish_prefix(), 2);
    let mut second = pool.cache_for_prompt(&prompt);
    assert_eq!(second.len(), 32);
    let vocab = model.vocab_size();
    assert_eq!(
        all_logits(&model, &mut second, &prompt[32..]),
        full[32 * vocab..]
    );
    drop((first, second));
    assert_eq!((pool.used_blocks(), pool.cached_blocks()), (0, 2));

    // A budget below one block is refused with the numbers.
    match model.new_pool(KvType::F16, layout.block_bytes() - 1) {
        Err(Error::Model(nextok::model::Error::Cache(
            nextok::kv_cache::Error::BudgetTooSmall {
                budget_bytes,
                block_bytes,
            },
        ))) => assert_eq!(
            (budget_bytes, block_bytes),
            (layout.block_bytes() - 1, layout.block_bytes())
        ),
        other => panic!("expected BudgetTooSmall, got {other:?}"),
    }
}
