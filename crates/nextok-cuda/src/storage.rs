//! [`DeviceStorage`]: the blocks of a paged KV cache in device memory, where the CUDA backend's
//! attention reads them in place.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use nextok_kv_cache::{BlockId, BlockStorage, CacheConfig, Error, KvType};

/// A [`BlockStorage`] in the memory of one GPU: each block one device allocation of
/// [`CacheConfig::block_numbers`] f32 numbers, laid out as every storage lays a block out
/// (`[layer][key, value][slot][kv heads × head dim]`), made when the pool first hands the block
/// out. A cache of f16 or bf16 stores its numbers rounded to that type and kept as f32, so that
/// attention reads the host storage's very numbers (the device then holds twice the bytes the
/// pool counts).
///
/// [`CudaBackend::new_pool`](nextok_model::Backend::new_pool) makes pools over it; the
/// backend's attention reads a sequence's rows through its block table, a kernel argument.
pub struct DeviceStorage {
    config: CacheConfig,
    stream: Arc<CudaStream>,
    blocks: Mutex<Vec<Option<CudaSlice<f32>>>>,
}

impl std::fmt::Debug for DeviceStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prepared = self.lock().iter().filter(|b| b.is_some()).count();
        f.debug_struct("DeviceStorage")
            .field("config", &self.config)
            .field("prepared_blocks", &prepared)
            .finish()
    }
}

impl DeviceStorage {
    /// An empty storage for blocks of `config`'s shape on `stream`'s device.
    pub(crate) fn new(stream: Arc<CudaStream>, config: CacheConfig) -> Self {
        DeviceStorage {
            config,
            stream,
            blocks: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<CudaSlice<f32>>>> {
        // Each operation leaves the list whole (a block is set once allocated), so a panic
        // elsewhere never leaves it half-changed.
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this storage runs on `stream` (the backend's own).
    pub(crate) fn on_stream(&self, stream: &Arc<CudaStream>) -> bool {
        Arc::ptr_eq(&self.stream, stream)
    }

    /// The device addresses of `table`'s blocks, in order: the block table as the attention
    /// kernel takes it.
    pub(crate) fn addresses(&self, table: &[BlockId]) -> Result<Vec<u64>, Error> {
        let blocks = self.lock();
        table
            .iter()
            .map(|id| {
                let block = blocks
                    .get(id.index())
                    .and_then(Option::as_ref)
                    .ok_or(Error::UnknownBlock { block: id.index() })?;
                let (ptr, _sync) = block.device_ptr(&self.stream);
                Ok(ptr)
            })
            .collect()
    }

    fn check(&self, layer: usize, slot: usize) -> Result<(), Error> {
        self.config.check_slot(layer, slot)
    }
}

fn failed(operation: &'static str, block: BlockId) -> Error {
    Error::StorageFailed {
        operation,
        block: block.index(),
    }
}

impl BlockStorage for DeviceStorage {
    fn config(&self) -> &CacheConfig {
        &self.config
    }

    fn prepare(&self, block: BlockId) -> Result<(), Error> {
        let mut blocks = self.lock();
        let i = block.index();
        if blocks.len() <= i {
            blocks.resize_with(i + 1, || None);
        }
        if blocks[i].is_none() {
            let fresh = self
                .stream
                .alloc_zeros::<f32>(self.config.block_numbers())
                .map_err(|_| failed("prepare", block))?;
            blocks[i] = Some(fresh);
        }
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
        let row_len = self.config.row_len();
        let mut blocks = self.lock();
        let numbers = blocks
            .get_mut(block.index())
            .and_then(Option::as_mut)
            .ok_or(Error::UnknownBlock {
                block: block.index(),
            })?;
        for (row, value_row) in [(key, false), (value, true)] {
            let at = self.config.row_offset(layer, slot, value_row);
            let rounded: Vec<f32>;
            let src = match self.config.kv_type {
                KvType::F32 => row,
                t => {
                    rounded = row.iter().map(|&x| t.round(x)).collect();
                    &rounded
                }
            };
            self.stream
                .memcpy_htod(src, &mut numbers.slice_mut(at..at + row_len))
                .map_err(|_| failed("write", block))?;
        }
        Ok(())
    }

    fn copy(&self, from: BlockId, to: BlockId) -> Result<(), Error> {
        if from == to {
            return Ok(());
        }
        let mut blocks = self.lock();
        let (f, t) = (from.index(), to.index());
        let known = |i: usize| blocks.get(i).is_some_and(Option::is_some);
        if !known(f) {
            return Err(Error::UnknownBlock { block: f });
        }
        if !known(t) {
            return Err(Error::UnknownBlock { block: t });
        }
        // Take the destination out for the copy, so that both are borrowed at once.
        let mut dst = blocks[t].take().ok_or(Error::UnknownBlock { block: t })?;
        let result = match &blocks[f] {
            Some(src) => self
                .stream
                .memcpy_dtod(src, &mut dst)
                .map_err(|_| failed("copy", from)),
            None => Err(Error::UnknownBlock { block: f }),
        };
        blocks[t] = Some(dst);
        result
    }

    fn read(
        &self,
        block: BlockId,
        layer: usize,
        slot: usize,
        value: bool,
        out: &mut [f32],
    ) -> Result<(), Error> {
        self.check(layer, slot)?;
        self.config
            .check_row(if value { "value" } else { "key" }, out.len())?;
        let row_len = self.config.row_len();
        let blocks = self.lock();
        let numbers =
            blocks
                .get(block.index())
                .and_then(Option::as_ref)
                .ok_or(Error::UnknownBlock {
                    block: block.index(),
                })?;
        let at = self.config.row_offset(layer, slot, value);
        self.stream
            .memcpy_dtoh(&numbers.slice(at..at + row_len), out)
            .map_err(|_| failed("read", block))?;
        self.stream.synchronize().map_err(|_| failed("read", block))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
