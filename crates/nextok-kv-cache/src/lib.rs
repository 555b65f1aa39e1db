//! The KV cache: the keys and values of every processed token, per layer, kept in a pool of
//! fixed-size blocks shared by many sequences (a paged KV cache, as vLLM's PagedAttention).
//!
//! The specification ("The KV cache") explains why: a token's key and value vectors depend only
//! on itself and the tokens before it, so they are computed once, kept, and each decode step only
//! computes them for the one new token. This crate is the store; the model (`nextok-model`)
//! fills and reads it.
//!
//! # Manual
//!
//! - A [`KvPool`] is a memory budget cut into blocks of [`CacheConfig::block_positions`]
//!   positions (16 by default), each holding, for every layer, one key and one value row of
//!   `kv_heads × head_dim` numbers per position, stored as [`KvType::F32`] (the default, exact),
//!   [`KvType::F16`] or [`KvType::BF16`]. It is a cheap handle (`Arc` inside) for a scheduler
//!   to share.
//! - A [`KvCache`] is one sequence: its token ids and its block table. [`KvPool::new_cache`]
//!   makes an empty one; [`KvCache::new`] makes one in a private pool without a budget.
//! - [`KvCache::push_tokens`] makes room for new positions (blocks come from the pool;
//!   [`Error::OutOfBlocks`] with the numbers when it is spent, and [`KvCache::blocks_needed`]
//!   says beforehand how many it will take); [`KvCache::write`] stores a
//!   layer's key and value row for one of them; [`KvCache::key`] / [`KvCache::value`] read them
//!   back. [`KvCache::write_rows`] is the bulk form for a backend that moves the numbers
//!   itself: the cache checks, copies shared blocks and counts the rows, and hands the backend
//!   each row's [`RowPlace`] (block and slot) to store it at.
//! - [`KvCache::truncate`] rolls back to a shorter length (a rejected draft, an edited turn), and
//!   dropping a cache gives its blocks back.
//! - [`KvCache::fork`] makes a copy-on-write child that shares every block (for beams and
//!   parallel samples); a shared block is copied when one of its sharers writes to it.
//! - **Prefix caching.** [`KvCache::publish_prefix`] puts a sequence's full blocks in the pool's
//!   prefix cache, keyed by their tokens chained over the tokens before them;
//!   [`KvPool::cache_for_prompt`] starts a new sequence with the longest cached prefix of its
//!   prompt. Cached blocks outlive their sequence and are evicted least recently used first,
//!   only when the pool needs the memory.
//! - [`KvCache::reuse_prefix`] keeps the part of one cache that a new prompt has in common with
//!   the tokens it already processed (a chat's next turn).
//! - **The backend owns the memory.** A pool's numbers live in a [`BlockStorage`] that the
//!   compute backend provides ([`KvPool::with_storage`]); [`HostStorage`] is host memory, where
//!   the CPU backend's attention reads each row in place through [`KvCache::host_blocks`].
//! - [`CacheConfig::bytes_per_token`] is the specification's size formula ("How much memory the
//!   cache needs"), generalised to grouped-query attention:
//!   2 × layers × kv heads × head dim × bytes per number. A sequence holds
//!   [`KvCache::allocated_bytes`]: its length rounded up to whole blocks, so under one block is
//!   wasted per sequence.
//!
//! ```
//! use nextok_kv_cache::{CacheConfig, KvPool, KvType};
//!
//! // The specification's base model: 6 layers, 8 heads of 64 (d_model 512), 4-byte numbers.
//! let config = CacheConfig::new(6, 8, 64, KvType::F32);
//! assert_eq!(config.bytes_per_token(), 24_576);
//!
//! // A pool of 64 blocks of 16 positions.
//! let pool = KvPool::new(config, 64 * 16 * 24_576)?;
//! assert_eq!(pool.total_blocks(), 64);
//!
//! // A 40-token prompt, its keys and values written for every layer (the model does this).
//! let prompt: Vec<u32> = (0..40).collect();
//! let mut cache = pool.new_cache();
//! let new = cache.push_tokens(&prompt)?;
//! assert_eq!(new, 0..40);
//! for layer in 0..6 {
//!     for pos in new.clone() {
//!         let row = vec![pos as f32; 512];
//!         cache.write(layer, pos, &row, &row)?;
//!     }
//! }
//! assert_eq!((cache.bytes(), pool.used_blocks()), (40 * 24_576, 3));
//!
//! // A beam shares all three blocks until it writes.
//! let mut beam = cache.fork();
//! beam.truncate(20);
//! assert_eq!(cache.key(5, 30)?.get(0), Some(30.0));
//!
//! // The two full blocks go to the prefix cache; a second request with the same prompt starts
//! // with their 32 positions, and runs only the last 8 tokens.
//! assert_eq!(cache.publish_prefix(), 2);
//! drop((cache, beam));
//! assert_eq!((pool.used_blocks(), pool.cached_blocks()), (0, 2));
//! let second = pool.cache_for_prompt(&prompt);
//! assert_eq!(second.len(), 32);
//! assert_eq!(second.value(0, 17)?.get(0), Some(17.0));
//! # Ok::<(), nextok_kv_cache::Error>(())
//! ```

use std::ops::Range;

use half::{bf16, f16};

mod cache;
mod pool;
mod storage;

pub use cache::{KvCache, RowPlace};
pub use pool::KvPool;
pub use storage::{BlockId, BlockStorage, HostBlock, HostStorage, RowRef};

/// What can go wrong when using a cache.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration with a zero dimension.
    #[error("invalid cache configuration: {what} must be at least 1")]
    ZeroDimension {
        /// Which dimension is zero.
        what: &'static str,
    },
    /// A layer index past the configured number of layers.
    #[error("layer {layer} is out of range: the cache has {layers} layers")]
    LayerOutOfRange {
        /// The layer asked for.
        layer: usize,
        /// How many layers there are.
        layers: usize,
    },
    /// A position at or past the cache's length.
    #[error("position {pos} is out of range: the cache holds {len} positions")]
    PositionOutOfRange {
        /// The position asked for.
        pos: usize,
        /// How many positions the cache holds.
        len: usize,
    },
    /// The pool has too few blocks left (free or evictable from the prefix cache).
    #[error("out of KV blocks: {needed} needed, {available} available")]
    OutOfBlocks {
        /// Blocks the operation needed.
        needed: usize,
        /// Blocks the pool could still give.
        available: usize,
    },
    /// A pool budget smaller than one block.
    #[error("a KV budget of {budget_bytes} bytes holds no block of {block_bytes} bytes")]
    BudgetTooSmall {
        /// The budget asked for.
        budget_bytes: u64,
        /// Bytes of one block.
        block_bytes: u64,
    },
    /// A block number the storage never prepared.
    #[error("block {block} is not in the storage")]
    UnknownBlock {
        /// The block's number.
        block: usize,
    },
    /// Rows asked for in host memory from a pool whose numbers live elsewhere (a device): its
    /// backend reads them.
    #[error("the cache's numbers are not in host memory")]
    NotOnHost,
    /// A storage (a backend's memory) failed to do what the pool asked.
    #[error("the KV storage failed to {operation} block {block}")]
    StorageFailed {
        /// What it was asked: `"prepare"`, `"write"`, `"copy"` or `"read"`.
        operation: &'static str,
        /// The block.
        block: usize,
    },
    /// A key or value row of the wrong length.
    #[error("a {what} row has {found} numbers, expected {expected} (kv heads × head dim)")]
    RowLength {
        /// `"key"` or `"value"`.
        what: &'static str,
        /// The configured row length.
        expected: usize,
        /// The given row length.
        found: usize,
    },
}

/// How the numbers of the cache are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// 32-bit floats: exact, the default.
    #[default]
    F32,
    /// 16-bit IEEE floats: half the memory, rounded (as llama.cpp's default cache).
    F16,
    /// bfloat16: half the memory, f32's range with 8 significant bits.
    BF16,
}

impl KvType {
    /// Bytes per number.
    pub fn bytes(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 | KvType::BF16 => 2,
        }
    }

    /// The value `x` becomes when stored in this type.
    pub fn round(self, x: f32) -> f32 {
        match self {
            KvType::F32 => x,
            KvType::F16 => f16::from_f32(x).to_f32(),
            KvType::BF16 => bf16::from_f32(x).to_f32(),
        }
    }
}

/// The shape and number type of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheConfig {
    /// Layers that attend to earlier tokens.
    pub layers: usize,
    /// Key/value heads per layer (fewer than query heads under grouped-query attention).
    pub kv_heads: usize,
    /// Numbers per head.
    pub head_dim: usize,
    /// How the numbers are stored.
    pub kv_type: KvType,
    /// Positions per block: the unit of allocation in a pool, of sharing between forks and of
    /// the prefix cache.
    pub block_positions: usize,
}

impl CacheConfig {
    /// The default number of positions per block.
    pub const DEFAULT_BLOCK_POSITIONS: usize = 16;

    /// A configuration with the default block size.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize, kv_type: KvType) -> Self {
        CacheConfig {
            layers,
            kv_heads,
            head_dim,
            kv_type,
            block_positions: Self::DEFAULT_BLOCK_POSITIONS,
        }
    }

    /// The same configuration with another block size.
    pub fn with_block_positions(self, block_positions: usize) -> Self {
        CacheConfig {
            block_positions,
            ..self
        }
    }

    /// Numbers in one key (or value) row: `kv_heads × head_dim`.
    pub fn row_len(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Checks a row's place in a block (`layer` below the layers, `slot` below the block's
    /// positions): what every [`BlockStorage`] checks before it touches a block.
    pub fn check_slot(&self, layer: usize, slot: usize) -> Result<(), Error> {
        if layer >= self.layers {
            return Err(Error::LayerOutOfRange {
                layer,
                layers: self.layers,
            });
        }
        if slot >= self.block_positions {
            return Err(Error::PositionOutOfRange {
                pos: slot,
                len: self.block_positions,
            });
        }
        Ok(())
    }

    /// Checks that a key or value row (`what`) has [`CacheConfig::row_len`] numbers.
    pub fn check_row(&self, what: &'static str, len: usize) -> Result<(), Error> {
        let expected = self.row_len();
        if len != expected {
            return Err(Error::RowLength {
                what,
                expected,
                found: len,
            });
        }
        Ok(())
    }

    /// Bytes the cache needs per token: 2 × layers × kv heads × head dim × bytes per number (the
    /// specification's "How much memory the cache needs", with kv heads × head dim in place of
    /// d_model, which is what it is under grouped-query attention).
    pub fn bytes_per_token(&self) -> u64 {
        2 * self.layers as u64 * self.row_len() as u64 * self.kv_type.bytes() as u64
    }

    /// Bytes the cache needs for `tokens` tokens.
    pub fn bytes_for(&self, tokens: u64) -> u64 {
        self.bytes_per_token() * tokens
    }

    pub(crate) fn check(&self) -> Result<(), Error> {
        for (what, v) in [
            ("layers", self.layers),
            ("kv_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("block_positions", self.block_positions),
        ] {
            if v == 0 {
                return Err(Error::ZeroDimension { what });
            }
        }
        Ok(())
    }

    /// Numbers in one block: layers × (key, value) × positions × row.
    pub fn block_numbers(&self) -> usize {
        self.layers * 2 * self.block_positions * self.row_len()
    }

    /// Bytes of one block: [`CacheConfig::block_numbers`] × bytes per number, which is
    /// `block_positions` × [`CacheConfig::bytes_per_token`].
    pub fn block_bytes(&self) -> u64 {
        self.block_numbers() as u64 * self.kv_type.bytes() as u64
    }

    /// Where the key (`value == false`) or value row of `layer` at position `slot` of a block
    /// starts among the block's numbers. The layout is `[layer][key, value][slot][row]`, the
    /// same in every [`BlockStorage`].
    pub fn row_offset(&self, layer: usize, slot: usize, value: bool) -> usize {
        ((layer * 2 + usize::from(value)) * self.block_positions + slot) * self.row_len()
    }
}

/// One stored key or value row, borrowed from the cache in its storage type.
#[derive(Debug, Clone, Copy)]
pub enum Row<'a> {
    /// Stored as f32.
    F32(&'a [f32]),
    /// Stored as f16.
    F16(&'a [f16]),
    /// Stored as bf16.
    BF16(&'a [bf16]),
}

impl Row<'_> {
    /// Numbers in the row.
    pub fn len(&self) -> usize {
        match self {
            Row::F32(r) => r.len(),
            Row::F16(r) => r.len(),
            Row::BF16(r) => r.len(),
        }
    }

    /// Whether the row is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number `i` as f32.
    pub fn get(&self, i: usize) -> Option<f32> {
        match self {
            Row::F32(r) => r.get(i).copied(),
            Row::F16(r) => r.get(i).map(|x| x.to_f32()),
            Row::BF16(r) => r.get(i).map(|x| x.to_f32()),
        }
    }

    /// The numbers `range` of the row, as f32, into `out` (which must have `range.len()`
    /// numbers). Borrowing an f32 row directly with [`Row::as_f32`] avoids the copy.
    pub fn to_f32(&self, range: Range<usize>, out: &mut [f32]) {
        match self {
            Row::F32(r) => out.copy_from_slice(&r[range]),
            Row::F16(r) => out
                .iter_mut()
                .zip(&r[range])
                .for_each(|(o, x)| *o = x.to_f32()),
            Row::BF16(r) => out
                .iter_mut()
                .zip(&r[range])
                .for_each(|(o, x)| *o = x.to_f32()),
        }
    }

    /// The row itself when it is stored as f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Row::F32(r) => Some(r),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goldens from the specification, "How much memory the cache needs", its two tables. The
    /// tolerances are the printed precision (24.6 MB → ±0.05 MB, 2.15 GB → ±0.005 GB).
    #[test]
    fn size_goldens_from_the_specification() {
        // Base model: 6 decoder layers, d_model 512 (8 heads × 64), 4 bytes.
        let base = CacheConfig::new(6, 8, 64, KvType::F32);
        assert_eq!(base.bytes_per_token(), 24_576);
        let mb = base.bytes_for(1_000) as f64 / 1e6;
        assert!((mb - 24.6).abs() <= 0.05, "{mb} MB");
        // Llama 2 7B-like: 32 layers, d_model 4,096 (32 heads × 128), 16-bit numbers.
        for kv_type in [KvType::F16, KvType::BF16] {
            let llama = CacheConfig::new(32, 32, 128, kv_type);
            assert_eq!(llama.bytes_per_token(), 524_288);
            let gb = llama.bytes_for(4_096) as f64 / 1e9;
            assert!((gb - 2.15).abs() <= 0.005, "{gb} GB");
            let users = 32.0 * llama.bytes_for(4_096) as f64 / 1e9;
            assert!((users - 68.7).abs() <= 0.05, "{users} GB");
        }
        // Grouped-query attention counts kv heads, not query heads: SmolLM2-135M keeps 3 kv
        // heads of 64 in 30 layers, 2 × 30 × 192 × 4 = 46,080 bytes per token.
        assert_eq!(
            CacheConfig::new(30, 3, 64, KvType::F32).bytes_per_token(),
            46_080
        );
    }

    #[test]
    fn a_live_cache_reports_its_size() {
        let config = CacheConfig::new(2, 1, 4, KvType::F16).with_block_positions(4);
        let mut cache = KvCache::new(config).unwrap();
        cache.push_tokens(&[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(cache.bytes(), 5 * 2 * 2 * 4 * 2);
        // Two blocks of 4 positions are allocated for 5 positions.
        assert_eq!(cache.allocated_bytes(), 2 * 2 * 2 * 4 * 4 * 2);
    }

    #[test]
    fn rounding_follows_the_number_type() {
        let third = 1.0f32 / 3.0;
        for kv_type in [KvType::F32, KvType::F16, KvType::BF16] {
            let config = CacheConfig::new(1, 1, 2, kv_type);
            let mut cache = KvCache::new(config).unwrap();
            cache.push_tokens(&[7]).unwrap();
            cache.write(0, 0, &[third, 1.0], &[2.0, -third]).unwrap();
            let k = cache.key(0, 0).unwrap();
            assert_eq!(k.get(0), Some(kv_type.round(third)));
            assert_eq!(
                cache.value(0, 0).unwrap().get(1),
                Some(kv_type.round(-third))
            );
            assert_eq!(k.as_f32().is_some(), kv_type == KvType::F32);
        }
        // f16 keeps 11 significant bits: 1/3 becomes 0.333251953125.
        assert_eq!(KvType::F16.round(third), 0.333_251_95);
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        assert_eq!(
            KvCache::new(CacheConfig::new(0, 1, 1, KvType::F32)).unwrap_err(),
            Error::ZeroDimension { what: "layers" }
        );
        let mut cache = KvCache::new(CacheConfig::new(2, 1, 2, KvType::F32)).unwrap();
        cache.push_tokens(&[1]).unwrap();
        assert_eq!(
            cache.write(0, 1, &[0.0; 2], &[0.0; 2]),
            Err(Error::PositionOutOfRange { pos: 1, len: 1 })
        );
        assert_eq!(
            cache.write(2, 0, &[0.0; 2], &[0.0; 2]),
            Err(Error::LayerOutOfRange {
                layer: 2,
                layers: 2
            })
        );
        assert_eq!(
            cache.write(0, 0, &[0.0; 3], &[0.0; 2]),
            Err(Error::RowLength {
                what: "key",
                expected: 2,
                found: 3
            })
        );
        assert!(cache.key(0, 5).is_err());
    }

    #[test]
    fn forks_share_blocks_until_written() {
        let config = CacheConfig::new(1, 1, 1, KvType::F32).with_block_positions(2);
        let mut parent = KvCache::new(config).unwrap();
        parent.push_tokens(&[1, 2, 3]).unwrap();
        for pos in 0..3 {
            parent.write(0, pos, &[pos as f32], &[0.0]).unwrap();
        }
        let mut child = parent.fork();
        assert_eq!(child.shared_blocks(), 2);
        // The child's next position falls in the shared, half-full second block: writing it copies
        // that block only.
        child.push_tokens(&[9]).unwrap();
        child.write(0, 3, &[90.0], &[0.0]).unwrap();
        assert_eq!(child.shared_blocks(), 1);
        parent.push_tokens(&[4]).unwrap();
        parent.write(0, 3, &[40.0], &[0.0]).unwrap();
        assert_eq!(child.key(0, 3).unwrap().get(0), Some(90.0));
        assert_eq!(parent.key(0, 3).unwrap().get(0), Some(40.0));
        assert_eq!(child.key(0, 2).unwrap().get(0), Some(2.0));
    }

    #[test]
    fn prefix_reuse_keeps_the_common_part_and_one_token_to_run() {
        let mut cache = KvCache::new(CacheConfig::new(1, 1, 1, KvType::F32)).unwrap();
        cache.push_tokens(&[1, 2, 3, 4]).unwrap();
        assert_eq!(cache.common_prefix_len(&[1, 2, 9]), 2);
        assert_eq!(cache.reuse_prefix(&[1, 2, 3, 4]), 3);
        assert_eq!(cache.tokens(), [1, 2, 3]);
        assert_eq!(cache.reuse_prefix(&[1, 5]), 1);
        assert_eq!(cache.reuse_prefix(&[]), 0);
        assert!(cache.is_empty());
    }
}
