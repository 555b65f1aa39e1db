//! One sequence's KV cache: its tokens and its block table into a pool.

use std::fmt;
use std::ops::Range;

use crate::pool::KvPool;
use crate::storage::{BlockId, HostBlock, RowRef};
use crate::{CacheConfig, Error};

/// The keys and values of one sequence: its token ids and a block table into a [`KvPool`]
/// (block `b` of the table holds positions `b · block_positions ..`). Cloning is
/// [`KvCache::fork`]; dropping gives the blocks back to the pool.
pub struct KvCache {
    pool: KvPool,
    tokens: Vec<u32>,
    table: Vec<BlockId>,
    /// Which rows this sequence has written, per block of the table: bit `layer ·
    /// block_positions + slot` of the block's `words` words. Only a block with every bit set is
    /// published to the prefix cache, so that no half-computed block is ever shared.
    written: Vec<u64>,
    /// How many bits of each block's words are set.
    filled: Vec<usize>,
}

impl fmt::Debug for KvCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvCache")
            .field("config", self.config())
            .field("len", &self.len())
            .field("blocks", &self.table.len())
            .finish_non_exhaustive()
    }
}

impl KvCache {
    /// An empty cache in a private host pool with no budget to speak of: a sequence on its own,
    /// as before pools existed. Use [`KvPool::new_cache`] to share a budget.
    pub fn new(config: CacheConfig) -> Result<Self, Error> {
        config.check()?;
        Ok(KvCache::in_pool(KvPool::unbounded(config)))
    }

    pub(crate) fn in_pool(pool: KvPool) -> Self {
        KvCache {
            pool,
            tokens: Vec::new(),
            table: Vec::new(),
            written: Vec::new(),
            filled: Vec::new(),
        }
    }

    /// A cache over `table`, blocks that the pool's prefix cache holds fully written, one
    /// reference each already taken.
    pub(crate) fn from_cached_blocks(pool: KvPool, tokens: &[u32], table: Vec<BlockId>) -> Self {
        let mut cache = KvCache::in_pool(pool);
        let (words, bits) = (cache.words(), cache.bits());
        cache.tokens = tokens.to_vec();
        for _ in &table {
            for w in 0..words {
                let set = (bits - w * 64).min(64);
                cache
                    .written
                    .push(if set == 64 { u64::MAX } else { (1 << set) - 1 });
            }
            cache.filled.push(bits);
        }
        cache.table = table;
        cache
    }

    /// Bits per block: one per layer and position.
    fn bits(&self) -> usize {
        self.config().layers * self.config().block_positions
    }

    /// Words of `written` per block.
    fn words(&self) -> usize {
        self.bits().div_ceil(64)
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.pool.inner.config
    }

    /// The pool the cache's blocks come from.
    pub fn pool(&self) -> &KvPool {
        &self.pool
    }

    /// The blocks that hold the cache's positions, in order: position `p` is in block
    /// `block_table()[p / block_positions]`, at slot `p % block_positions`.
    pub fn block_table(&self) -> &[BlockId] {
        &self.table
    }

    /// Number of positions held.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token id at every position held.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Bytes of keys and values held: length × [`CacheConfig::bytes_per_token`].
    pub fn bytes(&self) -> u64 {
        self.config().bytes_for(self.len() as u64)
    }

    /// Bytes of the blocks this cache refers to, including the unused tail of its last block and
    /// blocks shared with forks: under one block more than [`KvCache::bytes`].
    pub fn allocated_bytes(&self) -> u64 {
        self.table.len() as u64 * self.pool.block_bytes()
    }

    /// Blocks that [`KvCache::push_tokens`] would take from the pool for `tokens` more
    /// positions: the new blocks, and a copy of the partial last block when it is shared with a
    /// fork or the prefix cache. What a scheduler checks against
    /// [`KvPool::available_blocks`] before it runs a step.
    pub fn blocks_needed(&self, tokens: usize) -> usize {
        if tokens == 0 {
            return 0;
        }
        let bp = self.config().block_positions;
        let new_blocks = (self.len() + tokens).div_ceil(bp) - self.table.len();
        let shared_last = match self.table.last() {
            Some(&last) if !self.len().is_multiple_of(bp) => {
                !self.pool.inner.lock().exclusive(last)
            }
            _ => false,
        };
        new_blocks + usize::from(shared_last)
    }

    /// Appends positions for `tokens` and returns their range, taking blocks from the pool as
    /// needed (evicting least recently used prefix-cache blocks before giving up). A last block
    /// shared with a fork or the prefix cache is copied now, since the new positions will be
    /// written into it. The new positions hold unspecified numbers until [`KvCache::write`]
    /// stores them, which the model does for every layer before it reads them.
    ///
    /// When the pool has too few blocks this is [`Error::OutOfBlocks`] and the cache is
    /// unchanged.
    pub fn push_tokens(&mut self, tokens: &[u32]) -> Result<Range<usize>, Error> {
        let start = self.len();
        if tokens.is_empty() {
            return Ok(start..start);
        }
        let bp = self.config().block_positions;
        let end = start + tokens.len();
        let new_blocks = end.div_ceil(bp) - self.table.len();
        let inner = &self.pool.inner;
        let mut state = inner.lock();
        // The partial last block gets new positions: it must be this sequence's alone.
        let shared_last = match self.table.last() {
            Some(&last) if !start.is_multiple_of(bp) => (!state.exclusive(last)).then_some(last),
            _ => None,
        };
        let mut ids = state.allocate(
            new_blocks + usize::from(shared_last.is_some()),
            inner.total,
            inner.storage.as_ref(),
        )?;
        if let Some(last) = shared_last {
            let copy = ids
                .pop()
                .unwrap_or_else(|| unreachable!("one block was allocated"));
            if let Err(e) = inner.storage.copy(last, copy) {
                state.release(copy);
                for &id in &ids {
                    state.release(id);
                }
                return Err(e);
            }
            state.release(last);
            if let Some(entry) = self.table.last_mut() {
                *entry = copy;
            }
        }
        drop(state);
        let words = self.words();
        for id in ids {
            self.table.push(id);
            self.written.extend(std::iter::repeat_n(0, words));
            self.filled.push(0);
        }
        self.tokens.extend_from_slice(tokens);
        Ok(start..end)
    }

    /// Checks the layer and the position: the block of the position and its slot there.
    fn locate(&self, layer: usize, pos: usize) -> Result<(usize, usize), Error> {
        let config = self.config();
        if layer >= config.layers {
            return Err(Error::LayerOutOfRange {
                layer,
                layers: config.layers,
            });
        }
        if pos >= self.len() {
            return Err(Error::PositionOutOfRange {
                pos,
                len: self.len(),
            });
        }
        let bp = config.block_positions;
        Ok((pos / bp, pos % bp))
    }

    /// Stores the key and value rows of `layer` at `pos`, rounded to the cache's number type,
    /// in the pool's storage. A block shared with a fork or the prefix cache is copied first
    /// (copy-on-write), which can fail with [`Error::OutOfBlocks`].
    pub fn write(
        &mut self,
        layer: usize,
        pos: usize,
        key: &[f32],
        value: &[f32],
    ) -> Result<(), Error> {
        self.config().check_row("key", key.len())?;
        self.config().check_row("value", value.len())?;
        let (b, slot) = self.locate(layer, pos)?;
        let inner = &self.pool.inner;
        {
            let mut state = inner.lock();
            let id = self.table[b];
            if !state.exclusive(id) {
                let ids = state.allocate(1, inner.total, inner.storage.as_ref())?;
                let copy = ids[0];
                if let Err(e) = inner.storage.copy(id, copy) {
                    state.release(copy);
                    return Err(e);
                }
                state.release(id);
                self.table[b] = copy;
            }
        }
        inner
            .storage
            .write(self.table[b], layer, slot, key, value)?;
        let bit = layer * self.config().block_positions + slot;
        let words = self.words();
        let word = &mut self.written[b * words + bit / 64];
        if *word & (1 << (bit % 64)) == 0 {
            *word |= 1 << (bit % 64);
            self.filled[b] += 1;
        }
        Ok(())
    }

    /// The key row of `layer` at `pos`, borrowed where it lives (host storage only; a device
    /// pool's rows are read by its backend: [`Error::NotOnHost`]).
    pub fn key(&self, layer: usize, pos: usize) -> Result<RowRef<'_>, Error> {
        self.row(layer, pos, false)
    }

    /// The value row of `layer` at `pos` (see [`KvCache::key`]).
    pub fn value(&self, layer: usize, pos: usize) -> Result<RowRef<'_>, Error> {
        self.row(layer, pos, true)
    }

    fn row(&self, layer: usize, pos: usize, value: bool) -> Result<RowRef<'_>, Error> {
        let (b, slot) = self.locate(layer, pos)?;
        let host = self.pool.storage().host().ok_or(Error::NotOnHost)?;
        RowRef::new(host.block(self.table[b])?, layer, slot, value)
    }

    /// The blocks holding the first `positions` positions, locked for reading in host memory:
    /// what attention reads in place. Position `p` is at slot `p % block_positions` of block
    /// `p / block_positions` of the result.
    pub fn host_blocks(&self, positions: usize) -> Result<Vec<HostBlock<'_>>, Error> {
        if positions > self.len() {
            return Err(Error::PositionOutOfRange {
                pos: positions - 1,
                len: self.len(),
            });
        }
        let host = self.pool.storage().host().ok_or(Error::NotOnHost)?;
        let blocks = positions.div_ceil(self.config().block_positions);
        self.table[..blocks]
            .iter()
            .map(|&id| host.block(id))
            .collect()
    }

    /// Rolls back to the first `len` positions (no-op if the cache is not longer), giving the
    /// blocks past them back to the pool.
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len() {
            return;
        }
        self.tokens.truncate(len);
        let bp = self.config().block_positions;
        let keep = len.div_ceil(bp);
        {
            let mut state = self.pool.inner.lock();
            for &id in self.table[keep..].iter().rev() {
                state.release(id);
            }
        }
        let words = self.words();
        self.table.truncate(keep);
        self.written.truncate(keep * words);
        self.filled.truncate(keep);
        // The rows of the dropped positions of the last block no longer belong to the sequence.
        if !len.is_multiple_of(bp) {
            let b = keep - 1;
            for layer in 0..self.config().layers {
                for slot in len % bp..bp {
                    let bit = layer * bp + slot;
                    let word = &mut self.written[b * words + bit / 64];
                    if *word & (1 << (bit % 64)) != 0 {
                        *word &= !(1 << (bit % 64));
                        self.filled[b] -= 1;
                    }
                }
            }
        }
    }

    /// A child that shares every position with this cache. Blocks are copied only when one side
    /// writes to a shared block, so a fork costs a few numbers until the two sequences diverge.
    pub fn fork(&self) -> KvCache {
        let mut state = self.pool.inner.lock();
        for &id in &self.table {
            state.retain(id);
        }
        drop(state);
        KvCache {
            pool: self.pool.clone(),
            tokens: self.tokens.clone(),
            table: self.table.clone(),
            written: self.written.clone(),
            filled: self.filled.clone(),
        }
    }

    /// How many leading tokens of `tokens` this cache already holds.
    pub fn common_prefix_len(&self, tokens: &[u32]) -> usize {
        self.tokens
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Prepares the cache to process the prompt `tokens`: keeps the positions it has in common
    /// with it, at most `tokens.len() − 1` of them so that at least one token is left to run and
    /// give logits, drops the rest, and returns how many were kept. The caller then runs
    /// `tokens[kept..]` through the model.
    pub fn reuse_prefix(&mut self, tokens: &[u32]) -> usize {
        let kept = self
            .common_prefix_len(tokens)
            .min(tokens.len().saturating_sub(1));
        self.truncate(kept);
        kept
    }

    /// How many of this cache's blocks are shared with another cache (a fork or its parent).
    pub fn shared_blocks(&self) -> usize {
        let state = self.pool.inner.lock();
        self.table.iter().filter(|&&id| state.refs(id) > 1).count()
    }

    /// Registers this cache's full blocks (every position present and every layer written) in
    /// the pool's prefix cache, in order from the first, and returns how many of its leading
    /// blocks are now there. A block is keyed by its tokens and the block before it (a chain
    /// over every token before it); when an identical block is already cached this cache takes
    /// that one and gives its own copy back, so the pool never holds a block twice.
    ///
    /// Published blocks outlive the cache: when it drops they stay cached until the pool needs
    /// the memory, least recently used first. The scheduler calls this after each forward pass.
    pub fn publish_prefix(&mut self) -> usize {
        let bp = self.config().block_positions;
        let bits = self.bits();
        let inner = &self.pool.inner;
        let mut state = inner.lock();
        let mut parent = 0;
        let mut published = 0;
        for (b, entry) in self.table.iter_mut().enumerate() {
            if (b + 1) * bp > self.tokens.len() || self.filled[b] != bits {
                break;
            }
            let tokens = &self.tokens[b * bp..(b + 1) * bp];
            parent = match state.number(*entry) {
                Some(number) => number,
                None => match state.lookup(parent, tokens) {
                    Some(existing) => {
                        state.retain(existing);
                        state.release(*entry);
                        *entry = existing;
                        state.number(existing).unwrap_or(0)
                    }
                    None => state.register(*entry, parent, tokens),
                },
            };
            published += 1;
        }
        published
    }
}

impl Clone for KvCache {
    /// [`KvCache::fork`].
    fn clone(&self) -> Self {
        self.fork()
    }
}

impl Drop for KvCache {
    fn drop(&mut self) {
        let mut state = self.pool.inner.lock();
        // The last block first: children are then older in the LRU order than their parents
        // and are evicted first, which keeps the cached chains whole.
        for &id in self.table.iter().rev() {
            state.release(id);
        }
    }
}
