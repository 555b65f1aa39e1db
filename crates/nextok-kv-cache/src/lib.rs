//! The KV cache: the keys and values of every processed token, per layer, for one sequence.
//!
//! The specification ("The KV cache") explains why: a token's key and value vectors depend only
//! on itself and the tokens before it, so they are computed once, kept, and each decode step only
//! computes them for the one new token. This crate is the store; the model (`nextok-model`)
//! fills and reads it.
//!
//! # Manual
//!
//! - A [`KvCache`] holds one sequence: its token ids and, for every position and layer, one key
//!   and one value row of `kv_heads × head_dim` numbers, stored as [`KvType::F32`] (the default,
//!   exact), [`KvType::F16`] or [`KvType::BF16`].
//! - [`KvCache::push_tokens`] makes room for new positions; [`KvCache::write`] stores a layer's key
//!   and value row for one of them; [`KvCache::key`] / [`KvCache::value`] read them back.
//! - [`KvCache::truncate`] rolls back to a shorter length (a rejected draft, an edited turn).
//! - [`KvCache::fork`] makes a copy-on-write child that shares the whole prefix (for beams and
//!   parallel samples): positions are stored in blocks behind [`Arc`], and a block is copied only
//!   when one of its sharers writes to it.
//! - [`KvCache::reuse_prefix`] keeps the part of the cache that a new prompt has in common with
//!   the tokens already processed, so that only the rest is run through the model.
//! - [`CacheConfig::bytes_per_token`] is the specification's size formula ("How much memory the
//!   cache needs"), generalised to grouped-query attention:
//!   2 × layers × kv heads × head dim × bytes per number.
//!
//! ```
//! use nextok_kv_cache::{CacheConfig, KvCache, KvType};
//!
//! // The specification's base model: 6 layers, 8 heads of 64 (d_model 512), 4-byte numbers.
//! let config = CacheConfig::new(6, 8, 64, KvType::F32);
//! assert_eq!(config.bytes_per_token(), 24_576);
//!
//! let mut cache = KvCache::new(config)?;
//! let new = cache.push_tokens(&[1, 2, 3]);
//! assert_eq!(new, 0..3);
//! let row = vec![0.5f32; 512];
//! for layer in 0..6 {
//!     for pos in new.clone() {
//!         cache.write(layer, pos, &row, &row)?;
//!     }
//! }
//! let mut beam = cache.fork(); // shares all three positions
//! beam.truncate(2);
//! assert_eq!((cache.len(), beam.len()), (3, 2));
//! assert_eq!(cache.key(5, 2)?.get(0), Some(0.5));
//! assert_eq!(cache.bytes(), 3 * 24_576);
//! # Ok::<(), nextok_kv_cache::Error>(())
//! ```

use std::ops::Range;
use std::sync::Arc;

use half::{bf16, f16};

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
    /// Positions per storage block: the unit of sharing between forks.
    pub block_positions: usize,
}

impl CacheConfig {
    /// The default number of positions per block.
    pub const DEFAULT_BLOCK_POSITIONS: usize = 64;

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

    fn check(&self) -> Result<(), Error> {
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
    fn block_len(&self) -> usize {
        self.layers * 2 * self.block_positions * self.row_len()
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

/// The numbers of one block of positions, for every layer.
#[derive(Debug, Clone)]
enum Storage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

impl Storage {
    fn zeros(kv_type: KvType, len: usize) -> Self {
        match kv_type {
            KvType::F32 => Storage::F32(vec![0.0; len]),
            KvType::F16 => Storage::F16(vec![f16::ZERO; len]),
            KvType::BF16 => Storage::BF16(vec![bf16::ZERO; len]),
        }
    }

    fn row(&self, at: usize, len: usize) -> Row<'_> {
        match self {
            Storage::F32(v) => Row::F32(&v[at..at + len]),
            Storage::F16(v) => Row::F16(&v[at..at + len]),
            Storage::BF16(v) => Row::BF16(&v[at..at + len]),
        }
    }

    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Storage::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Storage::F16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d = f16::from_f32(s)),
            Storage::BF16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d = bf16::from_f32(s)),
        }
    }
}

/// The keys and values of one sequence. Cloning is [`KvCache::fork`].
#[derive(Debug, Clone)]
pub struct KvCache {
    config: CacheConfig,
    tokens: Vec<u32>,
    /// Blocks of `block_positions` positions; block `b` holds positions
    /// `b · block_positions ..`. Layout inside a block: `[layer][key, value][position][row]`.
    blocks: Vec<Arc<Storage>>,
}

impl KvCache {
    /// An empty cache.
    pub fn new(config: CacheConfig) -> Result<Self, Error> {
        config.check()?;
        Ok(KvCache {
            config,
            tokens: Vec::new(),
            blocks: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
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
        self.config.bytes_for(self.len() as u64)
    }

    /// Bytes of the blocks this cache refers to, including the unused tail of its last block and
    /// blocks shared with forks.
    pub fn allocated_bytes(&self) -> u64 {
        (self.blocks.len() * self.config.block_len() * self.config.kv_type.bytes()) as u64
    }

    /// Appends positions for `tokens` and returns their range. Their keys and values are zero
    /// until [`KvCache::write`] stores them, which the model does for every layer before it
    /// reads them.
    pub fn push_tokens(&mut self, tokens: &[u32]) -> Range<usize> {
        let start = self.len();
        self.tokens.extend_from_slice(tokens);
        let blocks = self.len().div_ceil(self.config.block_positions);
        while self.blocks.len() < blocks {
            let len = self.config.block_len();
            self.blocks
                .push(Arc::new(Storage::zeros(self.config.kv_type, len)));
        }
        start..self.len()
    }

    /// Where a row starts in its block, after checking the layer and the position.
    fn locate(&self, layer: usize, pos: usize, value: bool) -> Result<(usize, usize), Error> {
        if layer >= self.config.layers {
            return Err(Error::LayerOutOfRange {
                layer,
                layers: self.config.layers,
            });
        }
        if pos >= self.len() {
            return Err(Error::PositionOutOfRange {
                pos,
                len: self.len(),
            });
        }
        let bp = self.config.block_positions;
        let row = self.config.row_len();
        let at = ((layer * 2 + usize::from(value)) * bp + pos % bp) * row;
        Ok((pos / bp, at))
    }

    /// Stores the key and value rows of `layer` at `pos`, rounded to the cache's number type.
    /// A block shared with a fork is copied first (copy-on-write).
    pub fn write(
        &mut self,
        layer: usize,
        pos: usize,
        key: &[f32],
        value: &[f32],
    ) -> Result<(), Error> {
        let expected = self.config.row_len();
        for (what, row) in [("key", key), ("value", value)] {
            if row.len() != expected {
                return Err(Error::RowLength {
                    what,
                    expected,
                    found: row.len(),
                });
            }
        }
        let (block, k_at) = self.locate(layer, pos, false)?;
        let (_, v_at) = self.locate(layer, pos, true)?;
        let storage = Arc::make_mut(&mut self.blocks[block]);
        storage.write(k_at, key);
        storage.write(v_at, value);
        Ok(())
    }

    /// The key row of `layer` at `pos`.
    pub fn key(&self, layer: usize, pos: usize) -> Result<Row<'_>, Error> {
        let (block, at) = self.locate(layer, pos, false)?;
        Ok(self.blocks[block].row(at, self.config.row_len()))
    }

    /// The value row of `layer` at `pos`.
    pub fn value(&self, layer: usize, pos: usize) -> Result<Row<'_>, Error> {
        let (block, at) = self.locate(layer, pos, true)?;
        Ok(self.blocks[block].row(at, self.config.row_len()))
    }

    /// Rolls back to the first `len` positions (no-op if the cache is not longer).
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
        self.blocks
            .truncate(self.tokens.len().div_ceil(self.config.block_positions));
    }

    /// A child that shares every position with this cache. Blocks are copied only when one side
    /// writes to a shared block, so a fork costs a few pointers until the two sequences diverge.
    pub fn fork(&self) -> KvCache {
        self.clone()
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
        self.blocks
            .iter()
            .filter(|b| Arc::strong_count(b) > 1)
            .count()
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
        cache.push_tokens(&[1, 2, 3, 4, 5]);
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
            cache.push_tokens(&[7]);
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
        cache.push_tokens(&[1]);
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
        parent.push_tokens(&[1, 2, 3]);
        for pos in 0..3 {
            parent.write(0, pos, &[pos as f32], &[0.0]).unwrap();
        }
        let mut child = parent.fork();
        assert_eq!(child.shared_blocks(), 2);
        // The child's next position falls in the shared, half-full second block: writing it copies
        // that block only.
        child.push_tokens(&[9]);
        child.write(0, 3, &[90.0], &[0.0]).unwrap();
        assert_eq!(child.shared_blocks(), 1);
        parent.push_tokens(&[4]);
        parent.write(0, 3, &[40.0], &[0.0]).unwrap();
        assert_eq!(child.key(0, 3).unwrap().get(0), Some(90.0));
        assert_eq!(parent.key(0, 3).unwrap().get(0), Some(40.0));
        assert_eq!(child.key(0, 2).unwrap().get(0), Some(2.0));
    }

    #[test]
    fn prefix_reuse_keeps_the_common_part_and_one_token_to_run() {
        let mut cache = KvCache::new(CacheConfig::new(1, 1, 1, KvType::F32)).unwrap();
        cache.push_tokens(&[1, 2, 3, 4]);
        assert_eq!(cache.common_prefix_len(&[1, 2, 9]), 2);
        assert_eq!(cache.reuse_prefix(&[1, 2, 3, 4]), 3);
        assert_eq!(cache.tokens(), [1, 2, 3]);
        assert_eq!(cache.reuse_prefix(&[1, 5]), 1);
        assert_eq!(cache.reuse_prefix(&[]), 0);
        assert!(cache.is_empty());
    }
}
