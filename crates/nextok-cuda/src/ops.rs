//! The buffer operations of [`CudaBackend`]: every step of a decoder layer on device memory, so
//! that the model crate's one forward pass keeps its activations, and a device pool's KV cache,
//! on the GPU.

use std::ops::Range;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use nextok_kv_cache::{KvCache, KvType};
use nextok_model::{Buffer, Mask, QMatrix, RopeOrdering, Rotary};

use crate::backend::{launch_attention, launch_matmul, upload, AttentionShape, State};
use crate::storage::DeviceStorage;
use crate::{CudaBackend, Error};

/// Threads per block of the element-wise kernels and of RMSNorm (`ROW_THREADS` in the source).
const THREADS: u32 = 256;
/// The most blocks of an element-wise launch (the kernels loop over the rest).
const MAX_BLOCKS: usize = 4096;
/// The `kv_type` argument of `write_kv_paged`: the cache's number type (`kv_round` in the
/// source).
const KV_F32: i32 = 0;
const KV_F16: i32 = 1;
const KV_BF16: i32 = 2;

type ModelResult<T> = Result<T, nextok_model::Error>;

fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            n.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32,
            1,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn int(v: usize, what: &str) -> Result<i32, Error> {
    i32::try_from(v).map_err(|_| Error::Driver {
        call: String::from("launch"),
        message: format!("{what} = {v} exceeds the kernels' 32-bit indices"),
    })
}

/// Launches kernel `$f` with the arguments in order.
macro_rules! launch {
    ($stream:expr, $name:literal, $f:expr, $cfg:expr, [$($arg:expr),* $(,)?]) => {{
        let mut args = $stream.launch_builder($f);
        $( args.arg($arg); )*
        // SAFETY: every use pushes the kernel's parameters in order and type (see
        // `kernels.cu`), with buffers checked to hold the counts it passes; the kernels touch
        // nothing else.
        unsafe { args.launch($cfg) }.map_err(|e| Error::driver(concat!("launch ", $name), e))?;
    }};
}

/// The device numbers of a buffer this backend made, of at least `min` numbers.
fn dev<'b>(b: &'b Buffer, what: &'static str, min: usize) -> ModelResult<&'b CudaSlice<f32>> {
    match b.device_handle::<CudaSlice<f32>>() {
        Some(s) if b.len() >= min => Ok(s),
        _ => Err(nextok_model::Error::ForeignBuffer { what, len: b.len() }),
    }
}

fn dev_mut<'b>(
    b: &'b mut Buffer,
    what: &'static str,
    min: usize,
) -> ModelResult<&'b mut CudaSlice<f32>> {
    let len = b.len();
    match b.device_handle_mut::<CudaSlice<f32>>() {
        Some(s) if len >= min => Ok(s),
        _ => Err(nextok_model::Error::ForeignBuffer { what, len }),
    }
}

impl CudaBackend {
    /// The cache's storage when it is this backend's device memory.
    pub(crate) fn device_storage<'c>(&self, cache: &'c KvCache) -> Option<&'c DeviceStorage> {
        cache
            .pool()
            .storage()
            .as_any()
            .downcast_ref::<DeviceStorage>()
            .filter(|s| s.on_stream(self.stream()))
    }

    /// Runs `f` with the backend's state locked, turning a device error into the model crate's.
    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> Result<T, Error>) -> ModelResult<T> {
        let mut state = self.lock();
        f(&mut state).map_err(|e| self.model_error(e))
    }

    /// A host vector of the model (a norm's weights, a bias) in device memory: uploaded the
    /// first time and kept, keyed by its address and length and checked against its numbers at
    /// every use (a few hundred numbers), so a different vector at the same address is uploaded
    /// afresh.
    fn vector<'s>(&self, state: &'s mut State, host: &[f32]) -> Result<&'s CudaSlice<f32>, Error> {
        let key = (host.as_ptr() as usize, host.len());
        let fresh = state.vectors.get(&key).is_some_and(|(h, _)| h[..] == *host);
        if !fresh {
            let d = self
                .stream()
                .clone_htod(host)
                .map_err(|e| Error::driver("upload a vector", e))?;
            state.vectors.insert(key, (host.to_vec(), d));
        }
        state
            .vectors
            .get(&key)
            .map(|(_, d)| d)
            .ok_or_else(|| Error::Driver {
                call: String::from("upload a vector"),
                message: String::from("vector missing after upload"),
            })
    }

    pub(crate) fn alloc_buffer(&self, len: usize) -> ModelResult<Buffer> {
        let slice = self
            .stream()
            .alloc_zeros::<f32>(len.max(1))
            .map_err(|e| self.model_error(Error::driver(format!("allocate {len} f32"), e)))?;
        Ok(Buffer::device(len, Box::new(slice)))
    }

    pub(crate) fn upload_buffer(&self, numbers: &[f32]) -> ModelResult<Buffer> {
        let mut b = self.alloc_buffer(numbers.len())?;
        if !numbers.is_empty() {
            let d = dev_mut(&mut b, "upload", numbers.len())?;
            self.stream()
                .memcpy_htod(numbers, &mut d.slice_mut(0..numbers.len()))
                .map_err(|e| self.model_error(Error::driver("copy numbers in", e)))?;
        }
        Ok(b)
    }

    pub(crate) fn download_buffer(&self, b: &Buffer, range: Range<usize>) -> ModelResult<Vec<f32>> {
        let d = dev(b, "download", range.end)?;
        let mut out = vec![0.0f32; range.len()];
        if !out.is_empty() {
            let err = |e| self.model_error(Error::driver("copy numbers out", e));
            self.stream()
                .memcpy_dtoh(&d.slice(range), &mut out)
                .map_err(err)?;
            self.stream().synchronize().map_err(err)?;
        }
        Ok(out)
    }

    pub(crate) fn embed_device(
        &self,
        table: QMatrix<'_>,
        tokens: &[u32],
        out: &mut Buffer,
    ) -> ModelResult<()> {
        // Only the token ids go in; the rows are read from the matrix on the device (the
        // output projection's own copy when the embedding is tied) and dequantised as the host
        // does it.
        table.kernel_matrix()?;
        if let Some((index, &token)) = tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= table.rows)
        {
            return Err(nextok_model::Error::TokenOutOfRange {
                seq: 0,
                index,
                token,
                vocab: table.rows,
            });
        }
        let n = tokens.len();
        let o = dev_mut(out, "embed: the output", n * table.cols)?;
        if n == 0 || table.cols == 0 {
            return Ok(());
        }
        let ids: Vec<i32> = tokens
            .iter()
            .map(|&t| int(t as usize, "token id"))
            .collect::<Result<_, _>>()
            .map_err(|e| self.model_error(e))?;
        let stream = self.stream().clone();
        let kernels = self.kernels();
        self.with_state(|state| {
            let ids = stream
                .clone_htod(&ids[..])
                .map_err(|e| Error::driver("copy the token ids in", e))?;
            let State {
                weights,
                weight_bytes,
                ..
            } = state;
            let matrix = upload(&stream, weights, weight_bytes, &table)?;
            crate::backend::launch_embed(&stream, kernels, matrix, &ids, o, n)
        })
    }

    pub(crate) fn rms_norm_device(
        &self,
        x: &Buffer,
        rows: Option<&[usize]>,
        w: &[f32],
        eps: f32,
        out: &mut Buffer,
    ) -> ModelResult<()> {
        let d = w.len();
        if d == 0 {
            return Ok(());
        }
        let n_out = rows.map_or(x.len() / d, <[usize]>::len);
        let in_rows = x.len() / d;
        if rows.is_some_and(|r| r.iter().any(|&r| r >= in_rows)) {
            return Err(nextok_model::Error::ForeignBuffer {
                what: "rms_norm_rows: the input",
                len: x.len(),
            });
        }
        let xs = dev(x, "rms_norm: the input", 0)?;
        let o = dev_mut(out, "rms_norm: the output", n_out * d)?;
        if n_out == 0 {
            return Ok(());
        }
        let stream = self.stream().clone();
        let kernels = self.kernels();
        self.with_state(|state| {
            let wd = self.vector(state, w)?;
            let d_i = int(d, "d_model")?;
            int(n_out, "rows")?;
            match rows {
                None => launch!(
                    stream,
                    "rms_norm",
                    &kernels.rms_norm,
                    per_row(n_out),
                    [xs, wd, &mut *o, &d_i, &eps]
                ),
                Some(rows) => {
                    let idx: Vec<i32> = rows
                        .iter()
                        .map(|&r| int(r, "row"))
                        .collect::<Result<_, _>>()?;
                    let idx = stream
                        .clone_htod(&idx[..])
                        .map_err(|e| Error::driver("copy the row numbers in", e))?;
                    launch!(
                        stream,
                        "rms_norm_rows",
                        &kernels.rms_norm_rows,
                        per_row(n_out),
                        [xs, &idx, wd, &mut *o, &d_i, &eps]
                    );
                }
            }
            Ok(())
        })
    }

    pub(crate) fn add_bias_device(&self, x: &mut Buffer, bias: &[f32]) -> ModelResult<()> {
        let width = bias.len();
        if width == 0 {
            return Ok(());
        }
        let rows = x.len() / width;
        let xs = dev_mut(x, "add_bias", 0)?;
        let stream = self.stream().clone();
        let kernels = self.kernels();
        self.with_state(|state| {
            let b = self.vector(state, bias)?;
            let (rows_i, w_i) = (int(rows, "rows")?, int(width, "bias width")?);
            launch!(
                stream,
                "add_bias",
                &kernels.add_bias,
                elementwise(rows * width),
                [&mut *xs, b, &rows_i, &w_i]
            );
            Ok(())
        })
    }

    pub(crate) fn add_device(&self, x: &mut Buffer, y: &Buffer) -> ModelResult<()> {
        let n = y.len();
        let ys = dev(y, "add: the addend", 0)?;
        let xs = dev_mut(x, "add: the sum", n)?;
        let stream = self.stream();
        let n_i = int(n, "numbers").map_err(|e| self.model_error(e))?;
        (|| {
            launch!(
                stream,
                "add",
                &self.kernels().add,
                elementwise(n),
                [xs, ys, &n_i]
            );
            Ok(())
        })()
        .map_err(|e| self.model_error(e))
    }

    pub(crate) fn rope_device(
        &self,
        x: &mut Buffer,
        table: &Buffer,
        rotary: Rotary,
    ) -> ModelResult<()> {
        let Rotary {
            heads,
            head_dim,
            pairs,
            ordering,
        } = rotary;
        let width = heads * head_dim;
        if width == 0 || pairs == 0 {
            return Ok(());
        }
        let rows = x.len() / width;
        if 2 * pairs > head_dim {
            return Err(nextok_model::Error::ForeignBuffer {
                what: "rope: more pairs than a head holds",
                len: x.len(),
            });
        }
        let t = dev(table, "rope: the table", rows * pairs * 2)?;
        let xs = dev_mut(x, "rope", rows * width)?;
        let stream = self.stream();
        (|| {
            let (rows_i, heads_i) = (int(rows, "rows")?, int(heads, "heads")?);
            let (hd_i, half_i) = (int(head_dim, "head dim")?, int(pairs, "rope pairs")?);
            int(rows * heads * pairs, "rotations")?;
            let neox = i32::from(ordering == RopeOrdering::NeoX);
            launch!(
                stream,
                "rope",
                &self.kernels().rope,
                elementwise(rows * heads * pairs),
                [xs, t, &rows_i, &heads_i, &hd_i, &half_i, &neox]
            );
            Ok(())
        })()
        .map_err(|e| self.model_error(e))
    }

    pub(crate) fn project_device(
        &self,
        w: QMatrix<'_>,
        x: &Buffer,
        tokens: usize,
        out: &mut Buffer,
    ) -> ModelResult<()> {
        w.kernel_matrix()?;
        let xs = dev(x, "project: the input", tokens * w.cols)?;
        let o = dev_mut(out, "project: the output", tokens * w.rows)?;
        if tokens == 0 || w.rows == 0 {
            return Ok(());
        }
        let stream = self.stream().clone();
        let kernels = self.kernels();
        self.with_state(|state| {
            let State {
                weights,
                weight_bytes,
                ..
            } = state;
            let matrix = upload(&stream, weights, weight_bytes, &w)?;
            launch_matmul(
                &stream,
                kernels,
                matrix,
                &xs.as_view(),
                &mut o.as_view_mut(),
                tokens,
            )
        })
    }

    pub(crate) fn silu_mul_device(
        &self,
        gate: &mut Buffer,
        up: &Buffer,
        n: usize,
    ) -> ModelResult<()> {
        let u = dev(up, "swiglu: the up product", n)?;
        let g = dev_mut(gate, "swiglu: the gate", n)?;
        let stream = self.stream();
        (|| {
            let n_i = int(n, "numbers")?;
            launch!(
                stream,
                "silu_mul",
                &self.kernels().silu_mul,
                elementwise(n),
                [g, u, &n_i]
            );
            Ok(())
        })()
        .map_err(|e| self.model_error(e))
    }

    /// Stores rows of device keys and values in `cache`'s layer `layer`, at the positions from
    /// `first` on.
    ///
    /// A cache in this device's memory is written on the device: [`KvCache::write_rows`] checks
    /// the positions, copies shared blocks (copy-on-write, on the device) and counts the rows,
    /// and one `write_kv_paged` launch scatters every row from the buffers into its block and
    /// slot, rounded to the cache's number type; the only copy in is the list of places (an
    /// address and a slot per row). Any other cache (host memory) gets the rows through the
    /// host: copied out, then [`KvCache::write`] row by row.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_kv_device(
        &self,
        cache: &mut KvCache,
        layer: usize,
        first: usize,
        keys: &Buffer,
        values: &Buffer,
        rows: Range<usize>,
    ) -> ModelResult<()> {
        let config = *cache.config();
        let kvd = config.row_len();
        let span = rows.start * kvd..rows.end * kvd;
        let (dk, dv) = (
            dev(keys, "write_kv: the keys", span.end)?,
            dev(values, "write_kv: the values", span.end)?,
        );
        if self.device_storage(cache).is_some() {
            let stream = self.stream().clone();
            let kernels = self.kernels();
            let positions = first..first + rows.len();
            return cache.write_rows(layer, positions, |storage, places| {
                if places.is_empty() {
                    return Ok(());
                }
                let storage = storage.as_any().downcast_ref::<DeviceStorage>().ok_or(
                    nextok_model::Error::ForeignBuffer {
                        what: "write_kv: the cache's storage",
                        len: 0,
                    },
                )?;
                let blocks: Vec<_> = places.iter().map(|p| p.block).collect();
                let addresses = storage.addresses(&blocks)?;
                // Address and slot of each row, in row order (the kernel's `places`).
                let packed: Vec<u64> = addresses
                    .iter()
                    .zip(places)
                    .flat_map(|(&a, p)| [a, p.slot as u64])
                    .collect();
                (|| {
                    int(span.len(), "new key numbers")?;
                    let (rows_i, kvd_i) = (int(places.len(), "rows")?, int(kvd, "row length")?);
                    let (layer_i, bp_i) = (
                        int(layer, "layer")?,
                        int(config.block_positions, "block positions")?,
                    );
                    let kv_type = match config.kv_type {
                        KvType::F32 => KV_F32,
                        KvType::F16 => KV_F16,
                        KvType::BF16 => KV_BF16,
                    };
                    let places = stream
                        .clone_htod(&packed[..])
                        .map_err(|e| Error::driver("copy the KV places in", e))?;
                    let (ks, vs) = (dk.slice(span.clone()), dv.slice(span.clone()));
                    // SAFETY (with the macro's): each place is the address of a live block of
                    // this storage (block_numbers f32, the layout `row_offset` says) and a slot
                    // below block_positions, for a layer below the cache's layers, all checked by
                    // `write_rows`; the key and value views hold rows × row_len numbers.
                    launch!(
                        stream,
                        "write_kv_paged",
                        &kernels.write_kv_paged,
                        elementwise(span.len()),
                        [&ks, &vs, &places, &rows_i, &kvd_i, &layer_i, &bp_i, &kv_type]
                    );
                    Ok(())
                })()
                .map_err(|e| self.model_error(e))
            });
        }
        // Both copies queued, then one wait.
        let (mut k, mut v) = (vec![0.0f32; span.len()], vec![0.0f32; span.len()]);
        if !span.is_empty() {
            let err = |e| self.model_error(Error::driver("copy the new keys and values out", e));
            let stream = self.stream();
            stream
                .memcpy_dtoh(&dk.slice(span.clone()), &mut k)
                .map_err(err)?;
            stream.memcpy_dtoh(&dv.slice(span), &mut v).map_err(err)?;
            stream.synchronize().map_err(err)?;
        }
        for (i, (kr, vr)) in k.chunks_exact(kvd).zip(v.chunks_exact(kvd)).enumerate() {
            cache.write(layer, first + i, kr, vr)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attend_device(
        &self,
        q: &Buffer,
        rows: Range<usize>,
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut Buffer,
    ) -> ModelResult<()> {
        let config = *cache.config();
        let (hd, kv_heads) = (config.head_dim, config.kv_heads);
        let width = heads * hd;
        if heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(nextok_kernels::Error::BadLength {
                what: "the queries (heads a multiple of kv heads)",
                found: heads,
                expected: heads.next_multiple_of(kv_heads),
            }
            .into());
        }
        let n_rows = rows.len();
        if n_rows == 0 {
            return Ok(());
        }
        let (first, causal, keys) = match mask {
            Mask::Causal { first } => (first, true, first + n_rows),
            Mask::Full => (0, false, cache.len()),
        };
        if keys == 0 || keys > cache.len() || layer >= config.layers {
            return Err(nextok_kv_cache::Error::PositionOutOfRange {
                pos: keys.saturating_sub(1),
                len: cache.len(),
            }
            .into());
        }
        let span = rows.start * width..rows.end * width;
        let qs = dev(q, "attend: the queries", span.end)?;
        let o = dev_mut(out, "attend: the output", span.end)?;
        let shape = AttentionShape {
            rows: n_rows,
            heads,
            kv_heads,
            head_dim: hd,
            first,
            causal,
            keys,
        };
        let stream = self.stream().clone();
        let kernels = self.kernels();
        match self.device_storage(cache) {
            Some(storage) => {
                // The cache is in this device's memory: attention reads its blocks in place,
                // through the block table.
                let blocks = keys.div_ceil(config.block_positions);
                let table = storage.addresses(&cache.block_table()[..blocks])?;
                self.with_state(|state| {
                    let table = stream
                        .clone_htod(&table[..])
                        .map_err(|e| Error::driver("copy the block table in", e))?;
                    crate::backend::launch_paged_attention(
                        &stream,
                        kernels,
                        shape,
                        &qs.slice(span.clone()),
                        &table,
                        (layer, config.block_positions),
                        &mut o.slice_mut(span.clone()),
                        &mut state.scores,
                    )
                })
            }
            None => {
                // A cache in host memory (or another device's): its rows are copied in.
                let row_len = config.row_len();
                let (mut hk, mut hv) = (vec![0.0f32; keys * row_len], vec![0.0f32; keys * row_len]);
                for j in 0..keys {
                    let r = j * row_len..(j + 1) * row_len;
                    cache.key(layer, j)?.to_f32(0..row_len, &mut hk[r.clone()]);
                    cache.value(layer, j)?.to_f32(0..row_len, &mut hv[r]);
                }
                self.with_state(|state| {
                    state.keys.fill(&stream, &hk, "keys")?;
                    state.values.fill(&stream, &hv, "values")?;
                    let State {
                        keys: dk,
                        values: dv,
                        scores,
                        ..
                    } = state;
                    launch_attention(
                        &stream,
                        kernels,
                        shape,
                        [&qs.slice(span.clone()), &dk.0.as_view(), &dv.0.as_view()],
                        &mut o.slice_mut(span.clone()),
                        scores,
                    )
                })
            }
        }
    }
}
