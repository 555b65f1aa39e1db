//! KV blocks in device memory: the [`BlockStorage`] of the pools `CudaBackend::new_pool` makes,
//! read in place by the `attention_paged` kernel.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{CudaSlice, CudaStream};
use nextok_kv_cache::{BlockId, BlockStorage, CacheConfig, KvType};

use crate::Error;

/// A pool's f32 blocks, one device allocation for all of them, block after block in the
/// layout of [`CacheConfig::row_offset`]. Made once for the whole budget, so that a kernel
/// reaches every block from one base address.
pub struct DeviceStorage {
    config: CacheConfig,
    blocks: usize,
    pub(crate) stream: Arc<CudaStream>,
    numbers: Mutex<CudaSlice<f32>>,
}

impl std::fmt::Debug for DeviceStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStorage")
            .field("config", &self.config)
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl DeviceStorage {
    /// `blocks` zeroed blocks of `config`'s shape on `stream`'s device. Only f32 blocks: the
    /// paged kernel reads f32.
    pub(crate) fn new(
        stream: &Arc<CudaStream>,
        config: CacheConfig,
        blocks: usize,
    ) -> Result<Self, Error> {
        if config.kv_type != KvType::F32 {
            return Err(Error::Driver {
                call: String::from("allocate KV blocks"),
                message: format!("device KV blocks are f32, not {:?}", config.kv_type),
            });
        }
        let len = blocks * config.block_numbers();
        let numbers = stream
            .alloc_zeros::<f32>(len)
            .map_err(|e| Error::driver(format!("allocate {blocks} KV blocks ({len} f32)"), e))?;
        Ok(DeviceStorage {
            config,
            blocks,
            stream: Arc::clone(stream),
            numbers: Mutex::new(numbers),
        })
    }

    /// The blocks' numbers, locked: held while a kernel reads them.
    pub(crate) fn lock(&self) -> MutexGuard<'_, CudaSlice<f32>> {
        self.numbers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_block(&self, block: BlockId) -> Result<usize, nextok_kv_cache::Error> {
        if block.index() < self.blocks {
            Ok(block.index() * self.config.block_numbers())
        } else {
            Err(nextok_kv_cache::Error::UnknownBlock {
                block: block.index(),
            })
        }
    }

    fn check_row(
        &self,
        layer: usize,
        slot: usize,
        rows: &[(&'static str, usize)],
    ) -> Result<(), nextok_kv_cache::Error> {
        if layer >= self.config.layers {
            return Err(nextok_kv_cache::Error::LayerOutOfRange {
                layer,
                layers: self.config.layers,
            });
        }
        if slot >= self.config.block_positions {
            return Err(nextok_kv_cache::Error::PositionOutOfRange {
                pos: slot,
                len: self.config.block_positions,
            });
        }
        let expected = self.config.row_len();
        for &(what, found) in rows {
            if found != expected {
                return Err(nextok_kv_cache::Error::RowLength {
                    what,
                    expected,
                    found,
                });
            }
        }
        Ok(())
    }
}

fn failed(operation: &'static str, block: BlockId) -> nextok_kv_cache::Error {
    nextok_kv_cache::Error::StorageFailed {
        operation,
        block: block.index(),
    }
}

impl BlockStorage for DeviceStorage {
    fn config(&self) -> &CacheConfig {
        &self.config
    }

    fn prepare(&self, block: BlockId) -> Result<(), nextok_kv_cache::Error> {
        // The memory was allocated for every block at once.
        self.check_block(block).map(|_| ())
    }

    fn write(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        key: &[f32],
        value: &[f32],
    ) -> Result<(), nextok_kv_cache::Error> {
        let base = self.check_block(block)?;
        self.check_row(layer, slot, &[("key", key.len()), ("value", value.len())])?;
        let mut numbers = self.lock();
        for (row, is_value) in [(key, false), (value, true)] {
            let at = base + self.config.row_offset(layer, slot, is_value);
            // From pageable host memory the copy has taken the row when it returns.
            self.stream
                .memcpy_htod(row, &mut numbers.slice_mut(at..at + row.len()))
                .map_err(|_| failed("write", block))?;
        }
        Ok(())
    }

    fn copy(&self, from: BlockId, to: BlockId) -> Result<(), nextok_kv_cache::Error> {
        let (src, dst) = (self.check_block(from)?, self.check_block(to)?);
        if src == dst {
            return Ok(());
        }
        let n = self.config.block_numbers();
        let mut numbers = self.lock();
        // Two views of one allocation: split it between the blocks so that they are disjoint.
        let result = if src < dst {
            let (lo, mut hi) = numbers.split_at_mut(dst);
            self.stream
                .memcpy_dtod(&lo.slice(src..src + n), &mut hi.slice_mut(0..n))
        } else {
            let (mut lo, hi) = numbers.split_at_mut(src);
            self.stream
                .memcpy_dtod(&hi.slice(0..n), &mut lo.slice_mut(dst..dst + n))
        };
        result.map_err(|_| failed("copy", to))
    }

    fn read(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        value: bool,
        out: &mut [f32],
    ) -> Result<(), nextok_kv_cache::Error> {
        let base = self.check_block(block)?;
        let what = if value { "value" } else { "key" };
        self.check_row(layer, slot, &[(what, out.len())])?;
        let at = base + self.config.row_offset(layer, slot, value);
        let numbers = self.lock();
        self.stream
            .memcpy_dtoh(&numbers.slice(at..at + out.len()), out)
            .map_err(|_| failed("read", block))?;
        self.stream.synchronize().map_err(|_| failed("read", block))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
