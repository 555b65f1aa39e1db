//! One sequence's KV cache: its tokens and its block table into a pool.

use std::fmt;
use std::ops::Range;

use crate::pool::KvPool;
use crate::storage::{BlockId, BlockStorage, HostBlock, RowRef};
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

/// Where one row of a [`KvCache::write_rows`] goes: the block that holds its position and the
/// position's slot in it. The row's numbers start at [`CacheConfig::row_offset`]`(layer, slot,
/// value)` among the block's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowPlace {
    /// The block, this sequence's alone when the place is handed out.
    pub block: BlockId,
    /// The position's slot in the block: `position % block_positions`.
    pub slot: usize,
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
    /// (copy-on-write), which can fail with [`Error::OutOfBlocks`]. This is
    /// [`KvCache::write_rows`] of one row with the storage's own [`BlockStorage::write`].
    pub fn write(
        &mut self,
        layer: usize,
        pos: usize,
        key: &[f32],
        value: &[f32],
    ) -> Result<(), Error> {
        self.config().check_row("key", key.len())?;
        self.config().check_row("value", value.len())?;
        self.write_rows(layer, pos..pos + 1, |storage, places| {
            places
                .iter()
                .try_for_each(|p| storage.write(p.block, layer, p.slot, key, value))
        })
    }

    /// Stores the rows of `layer` at `positions` in one go, with `store` doing the copying: the
    /// bulk form of [`KvCache::write`], for a backend that moves many rows at once (the CUDA
    /// backend scatters a step's new rows from device buffers into device blocks in one kernel
    /// launch).
    ///
    /// The cache does everything of a write but the copy of the numbers: it checks the layer and
    /// the positions, makes every block that `positions` touch this sequence's alone (a block
    /// shared with a fork or the prefix cache is copied into a fresh one, all copies or none), and
    /// then calls `store` with the pool's storage and the [`RowPlace`] of each position, in
    /// order: the block and slot where the key and value rows belong, rounded to the cache's
    /// number type, laid out as [`CacheConfig::row_offset`] says. Only when `store` returns `Ok`
    /// are the rows counted as written (which [`KvCache::publish_prefix`] relies on), so `store`
    /// must write every place it is given.
    ///
    /// Errors: [`Error::LayerOutOfRange`], [`Error::PositionOutOfRange`] (a position at or past
    /// [`KvCache::len`]) and [`Error::OutOfBlocks`] (too few blocks for the copies) leave the
    /// cache unchanged, as does a failed storage copy; an error from `store` is returned as it is,
    /// the cache then holding its copies of the shared blocks (the same numbers) and the rows
    /// not counted as written. An empty range stores nothing (only its layer is checked).
    ///
    /// ```
    /// use nextok_kv_cache::{BlockStorage, CacheConfig, KvCache, KvType};
    ///
    /// let config = CacheConfig::new(1, 1, 2, KvType::F32).with_block_positions(2);
    /// let mut cache = KvCache::new(config)?;
    /// cache.push_tokens(&[5, 6, 7])?;
    /// let mut seen = Vec::new();
    /// cache.write_rows(0, 1..3, |storage, places| {
    ///     for (i, p) in places.iter().enumerate() {
    ///         seen.push((p.block.index(), p.slot));
    ///         let row = [i as f32; 2];
    ///         storage.write(p.block, 0, p.slot, &row, &row)?;
    ///     }
    ///     Ok::<(), nextok_kv_cache::Error>(())
    /// })?;
    /// // Position 1 is slot 1 of the first block, position 2 slot 0 of the second.
    /// assert_eq!(seen, [(0, 1), (1, 0)]);
    /// assert_eq!(cache.value(0, 2)?.get(0), Some(1.0));
    /// # Ok::<(), nextok_kv_cache::Error>(())
    /// ```
    pub fn write_rows<E: From<Error>>(
        &mut self,
        layer: usize,
        positions: Range<usize>,
        store: impl FnOnce(&dyn BlockStorage, &[RowPlace]) -> Result<(), E>,
    ) -> Result<(), E> {
        if positions.is_empty() {
            let config = self.config();
            if layer >= config.layers {
                return Err(Error::LayerOutOfRange {
                    layer,
                    layers: config.layers,
                }
                .into());
            }
            return Ok(());
        }
        self.locate(layer, positions.start)?;
        self.locate(layer, positions.end - 1)?;
        let bp = self.config().block_positions;
        let blocks = positions.start / bp..(positions.end - 1) / bp + 1;
        self.make_exclusive(blocks)?;
        let place = |pos: usize| RowPlace {
            block: self.table[pos / bp],
            slot: pos % bp,
        };
        // A decode step writes one row per layer: its place on the stack, no allocation.
        let one: [RowPlace; 1];
        let many: Vec<RowPlace>;
        let places: &[RowPlace] = if positions.len() == 1 {
            one = [place(positions.start)];
            &one
        } else {
            many = positions.clone().map(place).collect();
            &many
        };
        store(self.pool.inner.storage.as_ref(), places)?;
        let words = self.words();
        for pos in positions {
            let (b, slot) = (pos / bp, pos % bp);
            let bit = layer * bp + slot;
            let word = &mut self.written[b * words + bit / 64];
            if *word & (1 << (bit % 64)) == 0 {
                *word |= 1 << (bit % 64);
                self.filled[b] += 1;
            }
        }
        Ok(())
    }

    /// Makes the blocks `blocks` of the table this sequence's alone: each one shared with a fork
    /// or the prefix cache is copied into a fresh block, which takes its place. All the copies
    /// are made before any entry of the table changes, so on an error the cache is unchanged.
    fn make_exclusive(&mut self, blocks: Range<usize>) -> Result<(), Error> {
        let inner = &self.pool.inner;
        let mut state = inner.lock();
        // The common case, a write into blocks already this sequence's alone, allocates nothing.
        if blocks.clone().all(|b| state.exclusive(self.table[b])) {
            return Ok(());
        }
        let shared: Vec<usize> = blocks
            .filter(|&b| !state.exclusive(self.table[b]))
            .collect();
        let copies = state.allocate(shared.len(), inner.total, inner.storage.as_ref())?;
        for (&b, &copy) in shared.iter().zip(&copies) {
            if let Err(e) = inner.storage.copy(self.table[b], copy) {
                for &id in &copies {
                    state.release(id);
                }
                return Err(e);
            }
        }
        for (&b, &copy) in shared.iter().zip(&copies) {
            state.release(self.table[b]);
            self.table[b] = copy;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KvType;

    const LAYERS: usize = 2;
    const BP: usize = 4;

    /// Distinct numbers per position, layer, key/value, element and round.
    fn row(round: usize, pos: usize, layer: usize, value: bool) -> Vec<f32> {
        (0..2)
            .map(|i| {
                (round * 1000 + pos * 10 + layer) as f32 / 3.0
                    + f32::from(u8::from(value)) * 0.5
                    + i as f32 * 0.01
            })
            .collect()
    }

    fn keys_of(cache: &KvCache, layer: usize) -> Vec<Vec<f32>> {
        (0..cache.len())
            .map(|pos| {
                let mut k = vec![0.0; 2];
                let mut v = vec![0.0; 2];
                cache.key(layer, pos).unwrap().to_f32(0..2, &mut k);
                cache.value(layer, pos).unwrap().to_f32(0..2, &mut v);
                k.extend(v);
                k
            })
            .collect()
    }

    /// A parent of 10 positions, every row written, its two full blocks published to the prefix
    /// cache, and a fork of it: the child's blocks are all shared, the first two also with the
    /// prefix cache.
    fn setup(kv_type: KvType) -> (KvPool, KvCache, KvCache) {
        let config = CacheConfig::new(LAYERS, 1, 2, kv_type).with_block_positions(BP);
        let pool = KvPool::new(config, 16 * config.block_bytes()).unwrap();
        let mut parent = pool.new_cache();
        parent.push_tokens(&(0..10).collect::<Vec<u32>>()).unwrap();
        for layer in 0..LAYERS {
            for pos in 0..10 {
                let (k, v) = (row(0, pos, layer, false), row(0, pos, layer, true));
                parent.write(layer, pos, &k, &v).unwrap();
            }
        }
        assert_eq!(parent.publish_prefix(), 2);
        let child = parent.fork();
        (pool, parent, child)
    }

    /// Rows 2..10 of layer 1 (three blocks, all shared) and then rows 3..9 of layer 0, written
    /// in bulk by `write_rows` (the rows stored at the places it gives) or row by row.
    fn overwrite(child: &mut KvCache, bulk: bool) {
        for (layer, positions) in [(1, 2..10), (0, 3..9)] {
            if bulk {
                child
                    .write_rows(layer, positions.clone(), |storage, places| {
                        assert_eq!(places.len(), positions.len());
                        for (pos, p) in positions.clone().zip(places) {
                            let (k, v) = (row(1, pos, layer, false), row(1, pos, layer, true));
                            storage.write(p.block, layer, p.slot, &k, &v)?;
                        }
                        Ok::<(), Error>(())
                    })
                    .unwrap();
            } else {
                for pos in positions {
                    let (k, v) = (row(1, pos, layer, false), row(1, pos, layer, true));
                    child.write(layer, pos, &k, &v).unwrap();
                }
            }
        }
    }

    #[test]
    fn bulk_writes_equal_row_by_row_writes() {
        for kv_type in [KvType::F32, KvType::F16, KvType::BF16] {
            let (pool_a, parent_a, mut bulk) = setup(kv_type);
            let (pool_b, parent_b, mut single) = setup(kv_type);
            let before = keys_of(&parent_a, 1);
            let prefix_blocks = parent_a.block_table()[..2].to_vec();
            overwrite(&mut bulk, true);
            overwrite(&mut single, false);
            for layer in 0..LAYERS {
                assert_eq!(keys_of(&bulk, layer), keys_of(&single, layer));
                // The parent and the prefix cache keep their numbers: shared blocks were
                // copied, never written in place.
                assert_eq!(keys_of(&parent_a, layer), keys_of(&parent_b, layer));
            }
            assert_eq!(keys_of(&parent_a, 1), before);
            assert_eq!(parent_a.block_table()[..2], prefix_blocks);
            let again = pool_a.cache_for_prompt(&(0..9).collect::<Vec<u32>>());
            assert_eq!(again.block_table(), prefix_blocks);
            assert_eq!(keys_of(&again, 1), before[..8]);
            // The child wrote into all three of its blocks: none is shared any more.
            assert_eq!((bulk.shared_blocks(), single.shared_blocks()), (0, 0));
            assert!(bulk
                .block_table()
                .iter()
                .all(|b| !prefix_blocks.contains(b)));
            assert_eq!(pool_a.used_blocks(), pool_b.used_blocks());
            assert_eq!(pool_a.used_blocks(), 3 + 3);
            // The written-row bookkeeping is the same, and counts every row once: each block
            // was fully written by the parent's rows before the fork.
            assert_eq!(bulk.written, single.written);
            assert_eq!(bulk.filled, single.filled);
            assert_eq!(bulk.filled, [8, 8, 4]);
            assert_eq!(
                keys_of(&bulk, 1)[5],
                [row(1, 5, 1, false), row(1, 5, 1, true)]
                    .concat()
                    .iter()
                    .map(|&x| kv_type.round(x))
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn bulk_writes_count_new_rows() {
        let config = CacheConfig::new(LAYERS, 1, 2, KvType::F32).with_block_positions(BP);
        let mut cache = KvCache::new(config).unwrap();
        cache.push_tokens(&[1; 6]).unwrap();
        let store = |storage: &dyn BlockStorage, places: &[RowPlace]| {
            places
                .iter()
                .try_for_each(|p| storage.write(p.block, 0, p.slot, &[1.0; 2], &[2.0; 2]))
        };
        cache.write_rows(0, 1..6, store).unwrap();
        assert_eq!(cache.filled, [3, 2]);
        // Writing again counts nothing twice.
        cache.write_rows(0, 0..6, store).unwrap();
        assert_eq!(cache.filled, [4, 2]);
        assert_eq!(cache.publish_prefix(), 0);
        cache.write_rows(1, 0..4, store).unwrap();
        assert_eq!(cache.filled, [8, 2]);
        assert_eq!(cache.publish_prefix(), 1);
        // An empty range stores nothing and counts nothing.
        let mut called = false;
        cache
            .write_rows(1, 4..4, |_, places| {
                called = !places.is_empty();
                Ok::<(), Error>(())
            })
            .unwrap();
        assert!(!called);
        assert_eq!(cache.filled, [8, 2]);
    }

    #[test]
    fn bulk_write_errors_leave_the_cache_unchanged() {
        let never = |_: &dyn BlockStorage, _: &[RowPlace]| -> Result<(), Error> {
            panic!("store called after a failed check")
        };
        let (pool, _parent, mut child) = setup(KvType::F32);
        let table = child.block_table().to_vec();
        let (written, filled) = (child.written.clone(), child.filled.clone());
        assert_eq!(
            child.write_rows(0, 8..11, never),
            Err(Error::PositionOutOfRange { pos: 10, len: 10 })
        );
        assert_eq!(
            child.write_rows(2, 0..1, never),
            Err(Error::LayerOutOfRange {
                layer: 2,
                layers: 2
            })
        );
        assert_eq!(
            child.write_rows(2, 0..0, never),
            Err(Error::LayerOutOfRange {
                layer: 2,
                layers: 2
            })
        );
        // Take all but one free block: copying the child's three shared blocks needs three.
        let mut hog = pool.new_cache();
        hog.push_tokens(&[9; 4 * 12]).unwrap();
        assert_eq!(pool.available_blocks(), 1);
        let used = pool.used_blocks();
        assert_eq!(
            child.write_rows(0, 0..10, never),
            Err(Error::OutOfBlocks {
                needed: 3,
                available: 1
            })
        );
        assert_eq!(child.block_table(), table);
        assert_eq!((child.shared_blocks(), pool.used_blocks()), (3, used));
        // A failing store: the copies are made (the same numbers), the rows are not counted.
        drop(hog);
        let mut fresh = pool.new_cache();
        fresh.push_tokens(&[3; 5]).unwrap();
        let failed = fresh.write_rows(0, 0..5, |_, _| {
            Err(Error::StorageFailed {
                operation: "write",
                block: 0,
            })
        });
        assert!(matches!(failed, Err(Error::StorageFailed { .. })));
        assert_eq!(fresh.filled, [0, 0]);
        assert_eq!(
            (child.written.clone(), child.filled.clone()),
            (written, filled)
        );
    }
}
