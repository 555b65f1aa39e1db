//! [`Copier`]: the small random model with a pull toward continuing the text as it went before,
//! so that prompt-lookup drafts succeed (or, under sampling, half succeed). The speculative
//! decoding tests of `Generation` and of the scheduler run it.

use super::SEED;
use nextok::gguf::GgufFile;
use nextok::kv_cache::{KvCache, KvPool, KvType};
use nextok::model::{CpuBackend, LlamaModel, LoadOptions, Sequence};
use nextok::tokenizer::ChatTemplate;
use nextok::{Engine, Error, LanguageModel, LlamaOnBackend};

/// A model that continues what it has seen: at every position, the token that followed the
/// latest earlier occurrence of the current token gets `bonus` added to its logit. It depends
/// only on the tokens up to the position, so it keeps the `LanguageModel` contract (a
/// position's logits do not depend on how the work was split).
#[derive(Debug)]
pub struct Copier {
    inner: Box<dyn LanguageModel>,
    bonus: f32,
}

/// The token that followed the latest earlier occurrence of `history`'s last token.
fn follower(history: &[u32]) -> Option<u32> {
    let (&last, before) = history.split_last()?;
    let i = before.iter().rposition(|&t| t == last)?;
    Some(history[i + 1])
}

impl LanguageModel for Copier {
    fn forward(&self, batch: &mut [Sequence<'_>]) -> Result<Vec<Vec<f32>>, Error> {
        let mut out = self.inner.forward(batch)?;
        let vocab = self.vocab_size();
        for (seq, rows) in batch.iter().zip(out.iter_mut()) {
            // The rows are those of the last positions the cache now holds.
            let all = seq.cache.tokens();
            let first = all.len() - rows.len() / vocab;
            for (i, row) in rows.chunks_exact_mut(vocab).enumerate() {
                if let Some(next) = follower(&all[..=first + i]) {
                    row[next as usize] += self.bonus;
                }
            }
        }
        Ok(out)
    }

    fn new_cache(&self, kv_type: KvType) -> KvCache {
        self.inner.new_cache(kv_type)
    }

    fn new_pool(&self, kv_type: KvType, budget_bytes: u64) -> Result<KvPool, Error> {
        self.inner.new_pool(kv_type, budget_bytes)
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn context_window(&self) -> usize {
        self.inner.context_window()
    }

    fn host_parts(&self) -> usize {
        self.inner.host_parts()
    }

    fn run_host_parts(&self, job: &(dyn Fn(usize) + Sync)) {
        self.inner.run_host_parts(job)
    }
}

/// The small model behind a [`Copier`] of `bonus`, with `context` positions, on `threads` CPU
/// threads.
pub fn copier_on(bonus: f32, context: usize, threads: usize) -> Engine {
    let file = GgufFile::from_bytes(super::gguf(SEED, context)).unwrap();
    let tokenizer = nextok::tokenizer::load_from_gguf(&file).unwrap();
    let template = ChatTemplate::from_gguf(&file).unwrap();
    let model = LlamaModel::from_gguf(file, LoadOptions::default()).unwrap();
    let inner = LlamaOnBackend::new(model, Box::new(CpuBackend::new(threads)));
    let model = Copier {
        inner: Box::new(inner),
        bonus,
    };
    Engine::from_parts(Box::new(model), tokenizer, Some(template), KvType::F32).unwrap()
}

/// The small model behind a [`Copier`] of `bonus`, with `context` positions, on one thread.
pub fn copier(bonus: f32, context: usize) -> Engine {
    copier_on(bonus, context, 1)
}
