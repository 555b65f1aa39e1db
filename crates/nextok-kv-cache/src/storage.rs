//! Where a pool's numbers live: the [`BlockStorage`] seam that a compute backend implements, and
//! [`HostStorage`], the implementation in host memory.
//!
//! A storage holds numbered blocks ([`BlockId`]); the pool ([`KvPool`](crate::KvPool)) decides
//! which block belongs to which sequence and when a block may be written, and the storage only
//! stores numbers. A block's layout is [`CacheConfig::row_offset`]'s: `[layer][key, value]
//! [position in the block][kv heads × head dim]`, so that attention can read a sequence's rows
//! where they are, block after block of its block table.

use std::any::Any;
use std::fmt;
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard};

use half::{bf16, f16};

use crate::{CacheConfig, Error, KvType, Row};

/// The number of a block in its pool's storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(u32);

impl BlockId {
    /// The block numbered `index`.
    pub fn new(index: u32) -> Self {
        BlockId(index)
    }

    /// The block's number: its index in the storage.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The memory a [`KvPool`](crate::KvPool)'s blocks live in, provided by the compute backend that
/// reads them (host memory for the CPU backend, device memory for a GPU backend).
///
/// The pool calls these methods; code that runs a model goes through
/// [`KvCache`](crate::KvCache), which keeps the rule that makes them safe to call: a block is
/// written only by the one sequence that holds it alone, and shared blocks are copied first.
pub trait BlockStorage: Send + Sync + fmt::Debug {
    /// The shape and number type of every block.
    fn config(&self) -> &CacheConfig;

    /// Makes block `block` ready to hold numbers. The pool calls it once per block, the first
    /// time it hands the block out, so that memory is taken as the pool fills, not all at once.
    fn prepare(&self, block: BlockId) -> Result<(), Error>;

    /// Stores the key and value rows of `layer` at position `slot` of `block`, rounded to the
    /// number type.
    fn write(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        key: &[f32],
        value: &[f32],
    ) -> Result<(), Error>;

    /// Copies every number of block `from` into block `to` (copy-on-write of a shared block).
    fn copy(&self, from: BlockId, to: BlockId) -> Result<(), Error>;

    /// Reads the key (`value == false`) or value row of `layer` at `slot` of `block` as f32 into
    /// `out` (kv heads × head dim numbers).
    fn read(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        value: bool,
        out: &mut [f32],
    ) -> Result<(), Error>;

    /// The storage as host memory, when that is where the numbers live: the CPU backend's
    /// attention reads rows in place through it. `None` for device memory.
    fn host(&self) -> Option<&HostStorage> {
        None
    }

    /// The storage as [`Any`], so that a backend can recognise its own storage type.
    fn as_any(&self) -> &dyn Any;
}

/// The numbers of one block, in the cache's number type. Empty until the block is prepared.
#[derive(Debug, Clone)]
enum Numbers {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

impl Numbers {
    fn empty(kv_type: KvType) -> Self {
        match kv_type {
            KvType::F32 => Numbers::F32(Vec::new()),
            KvType::F16 => Numbers::F16(Vec::new()),
            KvType::BF16 => Numbers::BF16(Vec::new()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Numbers::F32(v) => v.len(),
            Numbers::F16(v) => v.len(),
            Numbers::BF16(v) => v.len(),
        }
    }

    fn fill_zeros(&mut self, len: usize) {
        match self {
            Numbers::F32(v) => v.resize(len, 0.0),
            Numbers::F16(v) => v.resize(len, f16::ZERO),
            Numbers::BF16(v) => v.resize(len, bf16::ZERO),
        }
    }

    fn row(&self, at: usize, len: usize) -> Row<'_> {
        match self {
            Numbers::F32(v) => Row::F32(&v[at..at + len]),
            Numbers::F16(v) => Row::F16(&v[at..at + len]),
            Numbers::BF16(v) => Row::BF16(&v[at..at + len]),
        }
    }

    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            Numbers::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Numbers::F16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d = f16::from_f32(s)),
            Numbers::BF16(v) => v[at..at + src.len()]
                .iter_mut()
                .zip(src)
                .for_each(|(d, &s)| *d = bf16::from_f32(s)),
        }
    }

    fn copy_from(&mut self, other: &Numbers) {
        match (self, other) {
            (Numbers::F32(d), Numbers::F32(s)) => d.copy_from_slice(s),
            (Numbers::F16(d), Numbers::F16(s)) => d.copy_from_slice(s),
            (Numbers::BF16(d), Numbers::BF16(s)) => d.copy_from_slice(s),
            // One storage holds one number type: the blocks of a storage always match.
            _ => {}
        }
    }
}

/// Segments of a [`HostStorage`]: segment `k` holds blocks `2^k − 1 .. 2^(k+1) − 1`, so the
/// storage grows without moving a block and 32 segments cover every [`BlockId`].
const SEGMENTS: usize = 32;

/// Blocks in host memory: each block is one allocation behind a read-write lock, made when the
/// pool first hands the block out and reused after.
///
/// Reading takes a block's read lock ([`HostStorage::block`]); the pool's rule (a block is
/// written only by the sequence that holds it alone) means that a reader never waits for a
/// writer in practice, and the lock makes the rule's enforcement memory-safe.
pub struct HostStorage {
    config: CacheConfig,
    segments: [OnceLock<Box<[RwLock<Numbers>]>>; SEGMENTS],
}

impl fmt::Debug for HostStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let segments = self.segments.iter().filter(|s| s.get().is_some()).count();
        f.debug_struct("HostStorage")
            .field("config", &self.config)
            .field("segments", &segments)
            .finish()
    }
}

impl HostStorage {
    /// An empty storage for blocks of `config`'s shape.
    pub fn new(config: CacheConfig) -> Self {
        HostStorage {
            config,
            segments: std::array::from_fn(|_| OnceLock::new()),
        }
    }

    /// The lock of block `block`'s numbers, its segment made if needed.
    fn slot(&self, block: BlockId) -> Option<&RwLock<Numbers>> {
        let n = block.0 as u64 + 1;
        let k = (63 - n.leading_zeros()) as usize;
        let i = (n - (1u64 << k)) as usize;
        let kv_type = self.config.kv_type;
        let segment = self.segments.get(k)?.get_or_init(|| {
            (0..1usize << k)
                .map(|_| RwLock::new(Numbers::empty(kv_type)))
                .collect()
        });
        segment.get(i)
    }

    /// Block `block`, locked for reading: its rows borrowed in place. Meant for the blocks of a
    /// cache one holds ([`KvCache::host_blocks`](crate::KvCache::host_blocks) does this): a
    /// block that no cache holds can be handed out and written meanwhile, and the writer waits
    /// while the lock is held.
    pub fn block(&self, block: BlockId) -> Result<HostBlock<'_>, Error> {
        let numbers = self
            .slot(block)
            .ok_or(Error::UnknownBlock {
                block: block.index(),
            })?
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if numbers.len() != self.config.block_numbers() {
            return Err(Error::UnknownBlock {
                block: block.index(),
            });
        }
        Ok(HostBlock {
            numbers,
            config: &self.config,
        })
    }

    fn check(&self, layer: usize, slot: usize) -> Result<(), Error> {
        self.config.check_slot(layer, slot)
    }
}

impl BlockStorage for HostStorage {
    fn config(&self) -> &CacheConfig {
        &self.config
    }

    fn prepare(&self, block: BlockId) -> Result<(), Error> {
        let slot = self.slot(block).ok_or(Error::UnknownBlock {
            block: block.index(),
        })?;
        let mut numbers = slot.write().unwrap_or_else(PoisonError::into_inner);
        numbers.fill_zeros(self.config.block_numbers());
        Ok(())
    }

    fn write(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        key: &[f32],
        value: &[f32],
    ) -> Result<(), Error> {
        self.check(layer, slot)?;
        self.config.check_row("key", key.len())?;
        self.config.check_row("value", value.len())?;
        let lock = self.slot(block).ok_or(Error::UnknownBlock {
            block: block.index(),
        })?;
        let mut numbers = lock.write().unwrap_or_else(PoisonError::into_inner);
        if numbers.len() != self.config.block_numbers() {
            return Err(Error::UnknownBlock {
                block: block.index(),
            });
        }
        numbers.write(self.config.row_offset(layer, slot, false), key);
        numbers.write(self.config.row_offset(layer, slot, true), value);
        Ok(())
    }

    fn copy(&self, from: BlockId, to: BlockId) -> Result<(), Error> {
        if from == to {
            return Ok(());
        }
        let unknown = |b: BlockId| Error::UnknownBlock { block: b.index() };
        // Copied through a buffer, so that the two locks are never held together.
        let source = self.block(from)?.numbers.clone();
        let lock = self.slot(to).ok_or(unknown(to))?;
        let mut numbers = lock.write().unwrap_or_else(PoisonError::into_inner);
        if numbers.len() != source.len() {
            return Err(unknown(to));
        }
        numbers.copy_from(&source);
        Ok(())
    }

    fn read(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        value: bool,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let block = self.block(block)?;
        let row = if value {
            block.value(layer, slot)?
        } else {
            block.key(layer, slot)?
        };
        if out.len() != row.len() {
            return Err(Error::RowLength {
                what: if value { "value" } else { "key" },
                expected: row.len(),
                found: out.len(),
            });
        }
        row.to_f32(0..row.len(), out);
        Ok(())
    }

    fn host(&self) -> Option<&HostStorage> {
        Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One host block, locked for reading: its key and value rows, borrowed where they are.
#[derive(Debug)]
pub struct HostBlock<'a> {
    numbers: RwLockReadGuard<'a, Numbers>,
    config: &'a CacheConfig,
}

impl HostBlock<'_> {
    fn row(&self, layer: usize, slot: usize, value: bool) -> Result<Row<'_>, Error> {
        if layer >= self.config.layers {
            return Err(Error::LayerOutOfRange {
                layer,
                layers: self.config.layers,
            });
        }
        if slot >= self.config.block_positions {
            return Err(Error::PositionOutOfRange {
                pos: slot,
                len: self.config.block_positions,
            });
        }
        let at = self.config.row_offset(layer, slot, value);
        Ok(self.numbers.row(at, self.config.row_len()))
    }

    /// The key row of `layer` at position `slot` of the block.
    pub fn key(&self, layer: usize, slot: usize) -> Result<Row<'_>, Error> {
        self.row(layer, slot, false)
    }

    /// The value row of `layer` at position `slot` of the block.
    pub fn value(&self, layer: usize, slot: usize) -> Result<Row<'_>, Error> {
        self.row(layer, slot, true)
    }
}

/// One key or value row of a host block, borrowed where it lives (the block stays locked for
/// reading while the row is borrowed). [`KvCache::key`](crate::KvCache::key) and
/// [`KvCache::value`](crate::KvCache::value) return it.
#[derive(Debug)]
pub struct RowRef<'a> {
    block: HostBlock<'a>,
    at: usize,
}

impl<'a> RowRef<'a> {
    /// The row of `layer` at `slot` of `block`, after checking both.
    pub(crate) fn new(
        block: HostBlock<'a>,
        layer: usize,
        slot: usize,
        value: bool,
    ) -> Result<Self, Error> {
        block.row(layer, slot, value)?;
        let at = block.config.row_offset(layer, slot, value);
        Ok(RowRef { block, at })
    }

    /// The row, in its storage type.
    pub fn row(&self) -> Row<'_> {
        self.block.numbers.row(self.at, self.block.config.row_len())
    }

    /// Numbers in the row.
    pub fn len(&self) -> usize {
        self.block.config.row_len()
    }

    /// Whether the row is empty (never, for a checked configuration).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number `i` as f32.
    pub fn get(&self, i: usize) -> Option<f32> {
        self.row().get(i)
    }

    /// The numbers `range` of the row, as f32, into `out` (see [`Row::to_f32`]).
    pub fn to_f32(&self, range: std::ops::Range<usize>, out: &mut [f32]) {
        self.row().to_f32(range, out)
    }

    /// The row itself when it is stored as f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self.row() {
            Row::F32(r) => Some(r),
            _ => None,
        }
    }
}
