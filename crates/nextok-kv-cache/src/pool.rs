//! The pool: fixed-size blocks under a memory budget, shared by many sequences, with the prefix
//! cache.
//!
//! Every block is in exactly one of three states:
//!
//! - **used**: held by at least one live [`KvCache`] (counted by references, so that forks share
//!   blocks);
//! - **cached**: held by no cache but registered in the prefix cache, so that a later prompt that
//!   starts with the same tokens can take it; evictable, least recently released first;
//! - **free**: neither.
//!
//! `used + cached + free == total` always holds.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::storage::{BlockId, BlockStorage, HostStorage};
use crate::{CacheConfig, Error, KvCache};

/// What identifies a full block in the prefix cache: the block it follows and its own tokens.
///
/// This is vLLM's chained block hash made exact: instead of a hash of the parent's hash, the key
/// holds the parent's registration number (unique for the life of the pool, never reused) and
/// the tokens themselves, so that the map's hash chains over every token before the block and a
/// hash collision can never hand out another prompt's rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PrefixKey {
    /// The registration number of the block before this one; 0 for a sequence's first block.
    parent: u64,
    tokens: Box<[u32]>,
}

/// A block's entry in the prefix cache.
#[derive(Debug, Clone)]
struct Registration {
    key: PrefixKey,
    /// Unique for the life of the pool, never 0: the `parent` of the blocks that follow it.
    number: u64,
}

/// The pool's bookkeeping for one block it has handed out at least once.
#[derive(Debug, Clone, Default)]
struct BlockState {
    /// Table entries of live caches that point at this block.
    refs: u32,
    /// Set while the block is in the prefix cache.
    registration: Option<Registration>,
    /// When the block was last released (its key in the LRU order), while it is cached.
    released_at: u64,
}

/// The bookkeeping of a pool, behind its mutex.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// One entry per block handed out so far; blocks past `blocks.len()` were never used.
    blocks: Vec<BlockState>,
    /// Blocks held by no cache and not in the prefix cache.
    free: Vec<BlockId>,
    /// Blocks with `refs > 0`.
    used: usize,
    /// Cached blocks by release time: the first is the least recently used.
    lru: BTreeMap<u64, BlockId>,
    clock: u64,
    /// The prefix cache. A fixed hasher: nothing in a library draws randomness from the OS.
    prefix: HashMap<PrefixKey, BlockId, BuildHasherDefault<DefaultHasher>>,
    next_number: u64,
}

impl State {
    fn block(&mut self, id: BlockId) -> &mut BlockState {
        &mut self.blocks[id.index()]
    }

    /// Free blocks, counting those never handed out.
    fn free(&self, total: usize) -> usize {
        self.free.len() + (total - self.blocks.len())
    }

    /// Whether the caller that holds `id` holds it alone and it is not in the prefix cache, so
    /// that it may write to it.
    pub(crate) fn exclusive(&self, id: BlockId) -> bool {
        let b = &self.blocks[id.index()];
        b.refs == 1 && b.registration.is_none()
    }

    pub(crate) fn refs(&self, id: BlockId) -> u32 {
        self.blocks[id.index()].refs
    }

    /// One more table entry points at `id`.
    pub(crate) fn retain(&mut self, id: BlockId) {
        let b = &mut self.blocks[id.index()];
        if b.refs == 0 {
            let released_at = b.released_at;
            self.used += 1;
            self.lru.remove(&released_at);
        }
        self.block(id).refs += 1;
    }

    /// One table entry fewer points at `id`: when none is left the block becomes cached (if it
    /// is registered, as the most recently used) or free.
    pub(crate) fn release(&mut self, id: BlockId) {
        let clock = self.clock;
        let b = self.block(id);
        b.refs -= 1;
        if b.refs > 0 {
            return;
        }
        if b.registration.is_some() {
            b.released_at = clock;
            self.clock += 1;
            self.lru.insert(clock, id);
        } else {
            self.free.push(id);
        }
        self.used -= 1;
    }

    /// Takes `n` blocks for a cache (each with one reference): free ones first, then ones never
    /// used, then the least recently used cached ones. Either all `n` or none.
    pub(crate) fn allocate(
        &mut self,
        n: usize,
        total: usize,
        storage: &dyn BlockStorage,
    ) -> Result<Vec<BlockId>, Error> {
        let available = self.free(total) + self.lru.len();
        if n > available {
            return Err(Error::OutOfBlocks {
                needed: n,
                available,
            });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = if let Some(id) = self.free.pop() {
                id
            } else if self.blocks.len() < total {
                let id = BlockId::new(self.blocks.len() as u32);
                if let Err(e) = storage.prepare(id) {
                    for &taken in &out {
                        self.release(taken);
                    }
                    return Err(e);
                }
                self.blocks.push(BlockState::default());
                id
            } else {
                self.evict_one()
            };
            self.block(id).refs = 1;
            self.used += 1;
            out.push(id);
        }
        Ok(out)
    }

    /// Removes the least recently used cached block from the prefix cache and returns it. Only
    /// called when the LRU list is not empty (`allocate` counted it).
    fn evict_one(&mut self) -> BlockId {
        let (_, id) = self
            .lru
            .pop_first()
            .unwrap_or_else(|| unreachable!("allocate counts the cached blocks first"));
        if let Some(reg) = self.block(id).registration.take() {
            self.prefix.remove(&reg.key);
        }
        id
    }

    /// The registration number of `id` if it is in the prefix cache.
    pub(crate) fn number(&self, id: BlockId) -> Option<u64> {
        self.blocks[id.index()]
            .registration
            .as_ref()
            .map(|r| r.number)
    }

    /// The cached block that holds `tokens` after the block numbered `parent`.
    pub(crate) fn lookup(&self, parent: u64, tokens: &[u32]) -> Option<BlockId> {
        let key = PrefixKey {
            parent,
            tokens: tokens.into(),
        };
        self.prefix.get(&key).copied()
    }

    /// Puts `id` (full, every layer written) in the prefix cache under `tokens` after `parent`,
    /// and returns its registration number.
    pub(crate) fn register(&mut self, id: BlockId, parent: u64, tokens: &[u32]) -> u64 {
        self.next_number += 1;
        let number = self.next_number;
        let key = PrefixKey {
            parent,
            tokens: tokens.into(),
        };
        self.prefix.insert(key.clone(), id);
        self.block(id).registration = Some(Registration { key, number });
        number
    }
}

/// The shared part of a pool.
pub(crate) struct PoolInner {
    pub(crate) config: CacheConfig,
    pub(crate) block_bytes: u64,
    pub(crate) total: usize,
    pub(crate) storage: Box<dyn BlockStorage>,
    state: Mutex<State>,
}

impl PoolInner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while the lock was held leaves counts that are still consistent
        // (every update is a few integer operations), so the pool stays usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pool of fixed-size KV blocks under a memory budget, shared by many sequences: the paged KV
/// cache. A cheap, cloneable handle (`Arc` inside).
///
/// Sequences ([`KvCache`]) made by [`KvPool::new_cache`] or [`KvPool::cache_for_prompt`] take
/// blocks from the pool as they grow and give them back when they shrink or drop; forks share
/// blocks until one side writes to a shared one. Full blocks published by
/// [`KvCache::publish_prefix`] stay in the pool's prefix cache after their sequence ends, until
/// the memory is needed (least recently used first).
///
/// ```
/// use nextok_kv_cache::{CacheConfig, Error, KvPool, KvType};
///
/// let config = CacheConfig::new(2, 1, 4, KvType::F32); // blocks of 16 positions
/// let pool = KvPool::new(config, 10 * config.block_bytes())?;
/// assert_eq!(pool.total_blocks(), 10);
/// let mut cache = pool.new_cache();
/// cache.push_tokens(&[7; 20])?; // two blocks
/// assert_eq!((pool.used_blocks(), pool.available_blocks()), (2, 8));
/// let too_long = cache.push_tokens(&[7; 200]).unwrap_err();
/// assert_eq!(too_long, Error::OutOfBlocks { needed: 12, available: 8 });
/// drop(cache);
/// assert_eq!(pool.used_blocks(), 0);
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone)]
pub struct KvPool {
    pub(crate) inner: Arc<PoolInner>,
}

impl std::fmt::Debug for KvPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvPool")
            .field("config", &self.inner.config)
            .field("total_blocks", &self.inner.total)
            .field("used_blocks", &self.used_blocks())
            .field("cached_blocks", &self.cached_blocks())
            .field("storage", &self.inner.storage)
            .finish()
    }
}

impl KvPool {
    /// A pool in host memory with as many blocks as `budget_bytes` holds.
    pub fn new(config: CacheConfig, budget_bytes: u64) -> Result<KvPool, Error> {
        config.check()?;
        KvPool::with_storage(Box::new(HostStorage::new(config)), budget_bytes)
    }

    /// A pool whose numbers live in `storage` (a backend's memory), with as many blocks as
    /// `budget_bytes` holds.
    pub fn with_storage(
        storage: Box<dyn BlockStorage>,
        budget_bytes: u64,
    ) -> Result<KvPool, Error> {
        let config = *storage.config();
        config.check()?;
        let block_bytes = config.block_bytes();
        let blocks = (budget_bytes / block_bytes).min(MAX_BLOCKS as u64) as usize;
        if blocks == 0 {
            return Err(Error::BudgetTooSmall {
                budget_bytes,
                block_bytes,
            });
        }
        Ok(KvPool::build(config, storage, blocks))
    }

    /// A host pool with no budget to speak of, for one sequence made by [`KvCache::new`].
    pub(crate) fn unbounded(config: CacheConfig) -> KvPool {
        KvPool::build(config, Box::new(HostStorage::new(config)), MAX_BLOCKS)
    }

    fn build(config: CacheConfig, storage: Box<dyn BlockStorage>, total: usize) -> KvPool {
        KvPool {
            inner: Arc::new(PoolInner {
                config,
                block_bytes: config.block_bytes(),
                total,
                storage,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The shape and number type of every cache of the pool.
    pub fn config(&self) -> &CacheConfig {
        &self.inner.config
    }

    /// Bytes of one block: [`CacheConfig::block_bytes`].
    pub fn block_bytes(&self) -> u64 {
        self.inner.block_bytes
    }

    /// Blocks in the pool: the budget divided by [`KvPool::block_bytes`], rounded down.
    pub fn total_blocks(&self) -> usize {
        self.inner.total
    }

    /// Blocks held by live caches.
    pub fn used_blocks(&self) -> usize {
        self.inner.lock().used
    }

    /// Blocks kept only by the prefix cache: evictable when memory is needed.
    pub fn cached_blocks(&self) -> usize {
        self.inner.lock().lru.len()
    }

    /// Blocks neither held by a cache nor kept by the prefix cache.
    pub fn free_blocks(&self) -> usize {
        self.inner.lock().free(self.inner.total)
    }

    /// Blocks a cache can still take: free and evictable ones.
    pub fn available_blocks(&self) -> usize {
        let state = self.inner.lock();
        state.free(self.inner.total) + state.lru.len()
    }

    /// Used blocks over all blocks, in `0.0..=1.0` (the `kv_cache_usage_ratio` of a server's
    /// metrics).
    pub fn usage_ratio(&self) -> f64 {
        self.used_blocks() as f64 / self.inner.total as f64
    }

    /// Blocks needed to hold `positions` positions.
    pub fn blocks_for(&self, positions: usize) -> usize {
        positions.div_ceil(self.inner.config.block_positions)
    }

    /// The storage the pool's numbers live in.
    pub fn storage(&self) -> &dyn BlockStorage {
        self.inner.storage.as_ref()
    }

    /// Whether `self` and `other` are handles to the same pool.
    pub fn same_pool(&self, other: &KvPool) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// An empty sequence whose blocks come from this pool.
    pub fn new_cache(&self) -> KvCache {
        KvCache::in_pool(self.clone())
    }

    /// A sequence that already holds the longest prefix of `prompt` found in the prefix cache:
    /// whole blocks only, and at most `prompt.len() − 1` tokens, so that at least one token is
    /// left to run through the model for logits. Its [`KvCache::len`] is the number of tokens
    /// it took from the cache; the caller runs `prompt[cache.len()..]`.
    pub fn cache_for_prompt(&self, prompt: &[u32]) -> KvCache {
        let bp = self.inner.config.block_positions;
        let mut table = Vec::new();
        {
            let mut state = self.inner.lock();
            let mut parent = 0;
            for block in prompt[..prompt.len().saturating_sub(1)].chunks_exact(bp) {
                let Some(id) = state.lookup(parent, block) else {
                    break;
                };
                state.retain(id);
                parent = state.number(id).unwrap_or(0);
                table.push(id);
            }
        }
        let len = table.len() * bp;
        KvCache::from_cached_blocks(self.clone(), &prompt[..len], table)
    }
}

/// The most blocks a pool can have: block numbers are 32-bit.
const MAX_BLOCKS: usize = u32::MAX as usize;
