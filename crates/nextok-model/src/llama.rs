//! The Llama-family decoder-only transformer (Llama 2 and 3, Mistral, Qwen2, SmolLM2): RMSNorm,
//! rotary position embeddings, grouped-query attention, a SwiGLU feed-forward network, and an
//! output projection tied to the token embedding or separate.
//!
//! Tensor names are the GGUF checkpoint's own (`blk.N.attn_q.weight`, ...). Weight matrices are
//! never dequantised in memory: the kernels expand their blocks in registers. Q4_1 and Q8_0
//! matrices are packed once at load into the kernels' faster layout (the same numbers; see
//! [`LoadOptions::keep_file_layout`]); every other matrix is read from the (memory-mapped) file.
//! Only the vectors (norm weights, biases) are decoded to f32 at load, a few kilobytes per layer.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nextok_gguf::GgufFile;
use nextok_kernels::dequant;
use nextok_kv_cache::{CacheConfig, KvCache, KvPool, KvType};

use nextok_kernels::{Layout, QMat};

use crate::backend::{AttendEntry, Backend, Mask, QMatrix, Rotary};
use crate::config::{LlamaConfig, RopeOrdering};
use crate::Error;

/// Options for loading a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Overrides the rotary pairing the architecture implies (for checkpoints converted
    /// without llama.cpp's permutation of the Q and K rows).
    pub rope_ordering: Option<RopeOrdering>,
    /// Keeps every weight matrix in the file's layout. By default the Q4_1 and Q8_0 matrices are
    /// packed once at load into the layouts of `nextok_kernels::packed` (Q4_1 in tiles of 16
    /// rows, 20 bytes per block of 32 as in the file; Q8_0 36 bytes per block instead of 34; in
    /// memory advised for huge pages rather than mapped from the file), which the CPU kernels
    /// multiply faster with the same bits (Q4_1 rows in the file's layout are packed a tile at
    /// a time on every product). A backend that wants the file's bytes can either set
    /// this or read them back exactly with [`QMatrix::file_row`](crate::QMatrix::file_row).
    pub keep_file_layout: bool,
}

/// Which positions of a sequence to return logits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// None: only fill the cache (for example the first chunks of a long prompt).
    None,
    /// The last new position: what generation needs.
    Last,
    /// Every new position: what scoring needs.
    All,
}

/// The new tokens of one sequence in a forward call. They take the positions that follow the
/// ones its cache holds: `cache.len()..cache.len() + tokens.len()`.
#[derive(Debug)]
pub struct Sequence<'a> {
    /// The sequence's cache; the call appends the new tokens' keys and values.
    pub cache: &'a mut KvCache,
    /// The new tokens.
    pub tokens: &'a [u32],
    /// Which logits to return.
    pub logits: Logits,
}

/// A weight tensor: where its bytes are in the file, and its matrix shape.
#[derive(Debug, Clone)]
struct Tensor {
    ty: nextok_gguf::GgmlType,
    rows: usize,
    cols: usize,
    /// Which weight file (shard) holds it.
    shard: usize,
    bytes: Range<usize>,
    /// Where the rows are in the model's [`PackedStore`], when they were packed at load.
    packed: Option<Range<usize>>,
}

/// The weights of one decoder block. Shapes are (rows × cols) of the product `W x`.
#[derive(Debug)]
struct Layer {
    /// (d_model)
    attn_norm: Vec<f32>,
    /// (heads · head_dim) × d_model, and optional bias (heads · head_dim)
    wq: Tensor,
    bq: Option<Vec<f32>>,
    /// (kv_heads · head_dim) × d_model
    wk: Tensor,
    bk: Option<Vec<f32>>,
    /// (kv_heads · head_dim) × d_model
    wv: Tensor,
    bv: Option<Vec<f32>>,
    /// d_model × (heads · head_dim)
    wo: Tensor,
    /// (d_model)
    ffn_norm: Vec<f32>,
    /// ffn × d_model
    gate: Tensor,
    /// ffn × d_model
    up: Tensor,
    /// d_model × ffn
    down: Tensor,
}

/// A loaded Llama-family model. Immutable: every per-sequence state lives in the [`KvCache`]es
/// passed to [`LlamaModel::forward`], so one model serves any number of sequences and threads.
pub struct LlamaModel {
    /// The GGUF file (or, for a safetensors checkpoint, a metadata-only one).
    file: GgufFile,
    /// The weights' files (shards) when they are not in `file`.
    weights: Vec<Backing>,
    /// The Q4_1 and Q8_0 matrices, packed at load (see [`LoadOptions::keep_file_layout`]).
    packed: Option<PackedStore>,
    config: LlamaConfig,
    /// vocab × d_model
    token_embd: Tensor,
    /// vocab × d_model (the token embedding itself when tied)
    output: Tensor,
    tied_output: bool,
    /// (d_model)
    output_norm: Vec<f32>,
    /// (rope_dims / 2) divisors of the rotation frequencies, if the checkpoint has them
    rope_freqs: Option<Vec<f32>>,
    layers: Vec<Layer>,
    positions: AtomicU64,
}

impl std::fmt::Debug for LlamaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaModel")
            .field("config", &self.config)
            .field("tied_output", &self.tied_output)
            .finish_non_exhaustive()
    }
}

/// Where a checkpoint's tensor is: its type, its dimensions in GGML order (innermost first), and
/// its bytes in the weight storage.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) ty: nextok_gguf::GgmlType,
    pub(crate) dims: Vec<u64>,
    /// Which weight file (shard) holds it (0 for a GGUF file).
    pub(crate) shard: usize,
    pub(crate) bytes: Range<usize>,
}

/// The tensors of a checkpoint, by their GGUF names.
pub(crate) type Table = HashMap<String, Found>;

/// The bytes the weights are read from, when they are not the GGUF file's own.
pub(crate) enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

fn tensor(table: &Table, name: &str, expected: &[usize]) -> Result<Tensor, Error> {
    let found = table.get(name).ok_or_else(|| Error::MissingTensor {
        name: name.to_owned(),
    })?;
    let expected_u64: Vec<u64> = expected.iter().map(|&d| d as u64).collect();
    if found.dims != expected_u64 {
        return Err(Error::BadShape {
            tensor: name.to_owned(),
            expected: expected_u64,
            found: found.dims.clone(),
        });
    }
    let ty = found.ty;
    let cols = expected[0];
    if !dequant::is_supported(ty) || !(cols as u64).is_multiple_of(ty.block_elements()) {
        return Err(Error::UnsupportedTensorType {
            tensor: name.to_owned(),
            ty,
        });
    }
    Ok(Tensor {
        ty,
        rows: expected.get(1).copied().unwrap_or(1),
        cols,
        shard: found.shard,
        bytes: found.bytes.clone(),
        packed: None,
    })
}

/// The packed matrices of a model, in one anonymous mapping: in the order a forward pass reads
/// them, so that the kernels' prefetches past the end of one matrix fetch the start of the next,
/// and advised for huge pages, which on Linux halve the page walks of a pass over the weights.
struct PackedStore {
    map: memmap2::MmapMut,
}

/// Packs every Q4_1 and Q8_0 matrix among `matrices` (see [`LoadOptions::keep_file_layout`]) into one
/// [`PackedStore`], on as many threads as the machine has cores: packing is a pass over most of
/// the model's bytes. Returns `None` when there is nothing to pack.
fn pack_all<'t>(
    matrices: impl Iterator<Item = &'t mut Tensor>,
    shards: &[&[u8]],
) -> Result<Option<PackedStore>, Error> {
    let mut todo: Vec<&mut Tensor> = matrices.filter(|t| QMat::packable(t.ty)).collect();
    if todo.is_empty() {
        return Ok(None);
    }
    let mut sizes = Vec::with_capacity(todo.len());
    for t in &todo {
        let bytes = shards
            .get(t.shard)
            .and_then(|b| b.get(t.bytes.clone()))
            .unwrap_or(&[]);
        sizes.push(QMat::new(t.ty, t.rows, t.cols, bytes)?.packed_len());
    }
    let total: usize = sizes.iter().sum();
    let mut map = memmap2::MmapMut::map_anon(total).map_err(|e| Error::Backend {
        backend: "CPU".into(),
        message: format!("cannot map {total} bytes for the packed weights: {e}"),
    })?;
    // Advice only: where the kernel declines, the pages are ordinary ones.
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    let mut start = 0;
    for (t, &n) in todo.iter_mut().zip(&sizes) {
        t.packed = Some(start..start + n);
        start += n;
    }
    // Cut the mapping into each matrix's part, then give each thread a run of matrices.
    let mut parts: Vec<(&Tensor, &mut [u8])> = Vec::with_capacity(todo.len());
    let mut rest: &mut [u8] = &mut map;
    for (t, &n) in todo.iter().zip(&sizes) {
        let (part, tail) = rest.split_at_mut(n);
        parts.push((&**t, part));
        rest = tail;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = parts.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let jobs: Vec<_> = parts
            .chunks_mut(per)
            .map(|chunk| {
                scope.spawn(move || -> Result<(), Error> {
                    for (t, out) in chunk.iter_mut() {
                        let bytes = shards
                            .get(t.shard)
                            .and_then(|b| b.get(t.bytes.clone()))
                            .unwrap_or(&[]);
                        QMat::new(t.ty, t.rows, t.cols, bytes)?.pack_into(out)?;
                    }
                    Ok(())
                })
            })
            .collect();
        jobs.into_iter().try_for_each(|job| {
            job.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    })?;
    Ok(Some(PackedStore { map }))
}

fn vector(table: &Table, shards: &[&[u8]], name: &str, len: usize) -> Result<Vec<f32>, Error> {
    let t = tensor(table, name, &[len])?;
    let mut out = vec![0.0; len];
    let bytes = shards
        .get(t.shard)
        .and_then(|b| b.get(t.bytes.clone()))
        .unwrap_or(&[]);
    dequant::dequantize_row(t.ty, bytes, &mut out)?;
    Ok(out)
}

fn optional_vector(
    table: &Table,
    bytes: &[&[u8]],
    name: &str,
    len: usize,
) -> Result<Option<Vec<f32>>, Error> {
    if table.contains_key(name) {
        vector(table, bytes, name, len).map(Some)
    } else {
        Ok(None)
    }
}

impl LlamaModel {
    /// Opens and memory-maps a GGUF file and loads the model from it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        Self::from_gguf(GgufFile::open(path)?, LoadOptions::default())
    }

    /// Loads the model from an opened GGUF file, checking every tensor's presence, shape and type.
    pub fn from_gguf(file: GgufFile, options: LoadOptions) -> Result<Self, Error> {
        let base = file.bytes().as_ptr() as usize;
        let table: Table = file
            .tensors()
            .iter()
            .map(|info| {
                let view = file.view(info);
                let start = view.data.as_ptr() as usize - base;
                (
                    info.name.clone(),
                    Found {
                        ty: info.ggml_type,
                        dims: info.dims.clone(),
                        shard: 0,
                        bytes: start..start + view.data.len(),
                    },
                )
            })
            .collect();
        Self::load(file, Vec::new(), &table, options)
    }

    /// Loads from metadata in GGUF keys (`file`), a tensor table, and the files the table points
    /// into (`weights`, or, when there are none, the GGUF file's own bytes).
    pub(crate) fn load(
        file: GgufFile,
        weights: Vec<Backing>,
        table: &Table,
        options: LoadOptions,
    ) -> Result<Self, Error> {
        // The vocabulary size is the token embedding's second dimension.
        let vocab = table
            .get("token_embd.weight")
            .and_then(|t| t.dims.get(1).copied())
            .ok_or_else(|| Error::MissingTensor {
                name: "token_embd.weight".into(),
            })?;
        let vocab = usize::try_from(vocab).map_err(|_| Error::BadHyperparameter {
            key: "token_embd.weight".into(),
            value: vocab,
            reason: "vocabulary too large",
        })?;
        let mut config = LlamaConfig::from_metadata(file.metadata(), vocab)?;
        if let Some(o) = options.rope_ordering {
            config.rope_ordering = o;
        }
        let shards: Vec<&[u8]> = if weights.is_empty() {
            vec![file.bytes()]
        } else {
            weights.iter().map(Backing::bytes).collect()
        };
        // Every matrix must lie inside its shard, so that the kernels' views are in bounds.
        for (name, found) in table {
            let inside = shards
                .get(found.shard)
                .is_some_and(|b| found.bytes.end <= b.len());
            if !inside {
                return Err(Error::Safetensors {
                    message: format!("tensor `{name}` lies outside its file"),
                });
            }
        }
        let bytes = &shards[..];
        let c = &config;
        let (d, kvd, ffn) = (c.d_model, c.kv_dim(), c.ffn_dim);
        let token_embd = tensor(table, "token_embd.weight", &[d, vocab])?;
        let (mut output, tied_output) = if table.contains_key("output.weight") {
            (tensor(table, "output.weight", &[d, vocab])?, false)
        } else {
            (token_embd.clone(), true)
        };
        let output_norm = vector(table, bytes, "output_norm.weight", d)?;
        // Llama 3.1-style per-frequency divisors of the rotation angles, when the file has them.
        let rope_freqs = optional_vector(table, bytes, "rope_freqs.weight", c.rope_dims / 2)?;
        // No capacity from the file's own count: a huge `block_count` must fail at the first
        // missing tensor, not in the allocator.
        let mut layers = Vec::new();
        for i in 0..c.layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(Layer {
                attn_norm: vector(table, bytes, &n("attn_norm.weight"), d)?,
                wq: tensor(table, &n("attn_q.weight"), &[d, d])?,
                bq: optional_vector(table, bytes, &n("attn_q.bias"), d)?,
                wk: tensor(table, &n("attn_k.weight"), &[d, kvd])?,
                bk: optional_vector(table, bytes, &n("attn_k.bias"), kvd)?,
                wv: tensor(table, &n("attn_v.weight"), &[d, kvd])?,
                bv: optional_vector(table, bytes, &n("attn_v.bias"), kvd)?,
                wo: tensor(table, &n("attn_output.weight"), &[d, d])?,
                ffn_norm: vector(table, bytes, &n("ffn_norm.weight"), d)?,
                gate: tensor(table, &n("ffn_gate.weight"), &[d, ffn])?,
                up: tensor(table, &n("ffn_up.weight"), &[d, ffn])?,
                down: tensor(table, &n("ffn_down.weight"), &[ffn, d])?,
            });
        }
        let mut packed = None;
        if !options.keep_file_layout {
            let matrices = layers.iter_mut().flat_map(|l| {
                [
                    &mut l.wq,
                    &mut l.wk,
                    &mut l.wv,
                    &mut l.wo,
                    &mut l.gate,
                    &mut l.up,
                    &mut l.down,
                ]
            });
            packed = pack_all(matrices.chain([&mut output]), bytes)?;
        }
        Ok(LlamaModel {
            file,
            weights,
            packed,
            config,
            token_embd,
            output,
            tied_output,
            output_norm,
            rope_freqs,
            layers,
            positions: AtomicU64::new(0),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Whether the output projection is the token embedding (tied weights).
    pub fn tied_output(&self) -> bool {
        self.tied_output
    }

    /// The GGUF file the model came from, for its metadata (tokenizer, chat template). For a
    /// safetensors checkpoint it is a metadata-only file holding the hyper-parameters of its
    /// `config.json` under the GGUF keys.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    fn shard_bytes(&self, shard: usize) -> &[u8] {
        match self.weights.get(shard) {
            Some(b) => b.bytes(),
            None => self.file.bytes(),
        }
    }

    /// The cache configuration for this model.
    pub fn cache_config(&self, kv_type: KvType) -> CacheConfig {
        CacheConfig::new(
            self.config.layers,
            self.config.kv_heads,
            self.config.head_dim,
            kv_type,
        )
    }

    /// A new, empty cache for one sequence.
    pub fn new_cache(&self, kv_type: KvType) -> KvCache {
        // The model's dimensions were checked to be non-zero at load, so this cannot fail.
        KvCache::new(self.cache_config(kv_type)).unwrap_or_else(|_| unreachable!())
    }

    /// A pool of KV blocks in this model's layout under `budget_bytes`, its numbers where
    /// `backend` keeps them ([`Backend::new_pool`]): the caches of many sequences, with prefix
    /// caching, for a scheduler.
    pub fn new_pool(
        &self,
        backend: &dyn Backend,
        kv_type: KvType,
        budget_bytes: u64,
    ) -> Result<KvPool, Error> {
        backend.new_pool(self.cache_config(kv_type), budget_bytes)
    }

    /// How many token positions have gone through the decoder stack since loading: the
    /// specification's count of processed positions ("The KV cache").
    pub fn positions_processed(&self) -> u64 {
        self.positions.load(Ordering::Relaxed)
    }

    fn matrix<'s>(&'s self, t: &'s Tensor) -> QMatrix<'s> {
        match (&t.packed, &self.packed) {
            (Some(range), Some(store)) => QMatrix {
                ty: t.ty,
                rows: t.rows,
                cols: t.cols,
                layout: Layout::Packed,
                data: &store.map[range.clone()],
            },
            _ => QMatrix {
                ty: t.ty,
                rows: t.rows,
                cols: t.cols,
                layout: Layout::Gguf,
                data: &self.shard_bytes(t.shard)[t.bytes.clone()],
            },
        }
    }

    /// Runs the new tokens of every sequence through the model, appends their keys and values to
    /// each sequence's cache, and returns, per sequence, the logits asked for: `vocab` numbers per
    /// position, positions in order (empty for [`Logits::None`]).
    ///
    /// On error the caches are left as they were.
    pub fn forward(
        &self,
        backend: &dyn Backend,
        batch: &mut [Sequence<'_>],
    ) -> Result<Vec<Vec<f32>>, Error> {
        let c = &self.config;
        let expected = self.cache_config(KvType::F32);
        for (s, seq) in batch.iter().enumerate() {
            check_sequence(s, seq.cache, seq.tokens, seq.logits, &expected, "kv heads")?;
            if let Some((index, &token)) = seq
                .tokens
                .iter()
                .enumerate()
                .find(|(_, &t)| t as usize >= c.vocab)
            {
                return Err(Error::TokenOutOfRange {
                    seq: s,
                    index,
                    token,
                    vocab: c.vocab,
                });
            }
            let end = seq.cache.len() + seq.tokens.len();
            if end > c.context {
                return Err(Error::ContextOverflow {
                    seq: s,
                    pos: end - 1,
                    context: c.context,
                });
            }
        }
        let starts: Vec<usize> = batch.iter().map(|s| s.cache.len()).collect();
        let result = self.forward_checked(backend, batch);
        if result.is_err() {
            for (seq, &len) in batch.iter_mut().zip(&starts) {
                seq.cache.truncate(len);
            }
        }
        result
    }

    fn forward_checked(
        &self,
        backend: &dyn Backend,
        batch: &mut [Sequence<'_>],
    ) -> Result<Vec<Vec<f32>>, Error> {
        let c = &self.config;
        let (d, kvd, ffn, hd) = (c.d_model, c.kv_dim(), c.ffn_dim, c.head_dim);
        // Rows are laid out sequence after sequence; `spans[s]` are sequence s's rows and
        // `ranges[s]` their positions.
        let mut spans = Vec::with_capacity(batch.len());
        let mut ranges = Vec::with_capacity(batch.len());
        let mut positions = Vec::new();
        let mut tokens = Vec::new();
        for seq in batch.iter_mut() {
            let range = seq.cache.push_tokens(seq.tokens)?;
            spans.push(tokens.len()..tokens.len() + seq.tokens.len());
            positions.extend(range.clone());
            ranges.push(range);
            tokens.extend_from_slice(seq.tokens);
        }
        let n = tokens.len();
        self.positions.fetch_add(n as u64, Ordering::Relaxed);

        // Every buffer below is where the backend computes (device memory on a GPU): only the
        // token ids, the rotary table and the wanted logits cross between host and backend.
        // x: (n × d_model), the residual stream.
        let mut x = backend.alloc(n * d)?;
        backend.embed(self.matrix(&self.token_embd), &tokens, &mut x)?;
        // (n × rope_dims / 2) (cos, sin) pairs
        let table = backend.upload(rope_table(c, self.rope_freqs.as_deref(), &positions))?;
        let rotary = |heads| Rotary {
            heads,
            head_dim: hd,
            pairs: c.rope_dims / 2,
            ordering: c.rope_ordering,
        };
        let mut xn = backend.alloc(n * d)?;
        let mut q = backend.alloc(n * d)?;
        let mut k = backend.alloc(n * kvd)?;
        let mut v = backend.alloc(n * kvd)?;
        let mut attn = backend.alloc(n * d)?;
        let mut proj = backend.alloc(n * d)?;
        let mut gate = backend.alloc(n * ffn)?;
        let mut up = backend.alloc(n * ffn)?;
        for (li, layer) in self.layers.iter().enumerate() {
            backend.rms_norm(&x, &layer.attn_norm, c.rms_eps, &mut xn)?;
            backend.project_many(
                &[
                    self.matrix(&layer.wq),
                    self.matrix(&layer.wk),
                    self.matrix(&layer.wv),
                ],
                &xn,
                n,
                &mut [&mut q, &mut k, &mut v],
            )?;
            for (buf, bias) in [
                (&mut q, &layer.bq),
                (&mut k, &layer.bk),
                (&mut v, &layer.bv),
            ] {
                if let Some(bias) = bias {
                    backend.add_bias(buf, bias)?;
                }
            }
            backend.rope(&mut q, &table, rotary(c.heads))?;
            backend.rope(&mut k, &table, rotary(c.kv_heads))?;
            for (s, seq) in batch.iter_mut().enumerate() {
                backend.write_kv(seq.cache, li, ranges[s].start, &k, &v, spans[s].clone())?;
            }
            // Every sequence's attention in one call, so that a backend can run the rows and
            // heads of a decode step's many one-row sequences in one dispatch.
            let entries: Vec<AttendEntry<'_>> = batch
                .iter()
                .enumerate()
                .map(|(s, seq)| AttendEntry {
                    rows: spans[s].clone(),
                    cache: &*seq.cache,
                    mask: Mask::Causal {
                        first: ranges[s].start,
                    },
                })
                .collect();
            backend.attend_many(&q, &entries, li, c.heads, &mut attn)?;
            backend.project(self.matrix(&layer.wo), &attn, n, &mut proj)?;
            backend.add(&mut x, &proj)?;

            backend.rms_norm(&x, &layer.ffn_norm, c.rms_eps, &mut xn)?;
            backend.project_swiglu(
                self.matrix(&layer.gate),
                self.matrix(&layer.up),
                &xn,
                n,
                &mut gate,
                &mut up,
            )?;
            backend.project(self.matrix(&layer.down), &gate, n, &mut proj)?;
            backend.add(&mut x, &proj)?;
        }

        // The logits, only for the rows asked for.
        let mut wanted = Vec::new();
        for (s, seq) in batch.iter().enumerate() {
            match seq.logits {
                Logits::None => {}
                Logits::Last => wanted.push(spans[s].end - 1),
                Logits::All => wanted.extend(spans[s].clone()),
            }
        }
        let mut sel = backend.alloc(wanted.len() * d)?;
        backend.rms_norm_rows(&x, &wanted, &self.output_norm, c.rms_eps, &mut sel)?;
        let mut logits = backend.alloc(wanted.len() * c.vocab)?;
        if !wanted.is_empty() {
            backend.project(self.matrix(&self.output), &sel, wanted.len(), &mut logits)?;
        }
        let logits = backend.download(logits)?;
        let mut out = Vec::with_capacity(batch.len());
        let mut at = 0;
        for seq in batch.iter() {
            let rows = match seq.logits {
                Logits::None => 0,
                Logits::Last => 1,
                Logits::All => seq.tokens.len(),
            };
            out.push(logits[at * c.vocab..(at + rows) * c.vocab].to_vec());
            at += rows;
        }
        Ok(out)
    }
}

/// RMSNorm of every row of `x` (rows of `w.len()` numbers): `x / sqrt(mean(x²) + ε) · w`. The sum
/// of squares is taken in f64, in order.
pub(crate) fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    const ROWS: usize = 4;
    let d = w.len();
    if d == 0 {
        return;
    }
    // Rows four at a time, as a batched decode step has many: each row's sum of squares is
    // still its own sum in order (the same bits as one row alone), but the four chains of
    // dependent additions run side by side instead of one after another.
    let whole = x.len() / d / ROWS * ROWS * d;
    let (x4, x1) = x.split_at(whole);
    let (out4, out1) = out.split_at_mut(whole.min(out.len()));
    for (rows, dsts) in x4
        .chunks_exact(ROWS * d)
        .zip(out4.chunks_exact_mut(ROWS * d))
    {
        let mut ss = [0.0f64; ROWS];
        for i in 0..d {
            for (j, s) in ss.iter_mut().enumerate() {
                let v = rows[j * d + i] as f64;
                *s += v * v;
            }
        }
        for ((row, dst), ss) in rows.chunks_exact(d).zip(dsts.chunks_exact_mut(d)).zip(ss) {
            rms_scale(row, w, eps, ss, dst);
        }
    }
    for (row, dst) in x1.chunks_exact(d).zip(out1.chunks_exact_mut(d)) {
        let mut ss = 0.0f64;
        for &v in row {
            ss += v as f64 * v as f64;
        }
        rms_scale(row, w, eps, ss, dst);
    }
}

/// One row of [`rms_norm`] once its sum of squares `ss` is known.
fn rms_scale(row: &[f32], w: &[f32], eps: f32, ss: f64, dst: &mut [f32]) {
    let scale = 1.0 / (ss / w.len() as f64 + eps as f64).sqrt();
    for ((o, &v), &g) in dst.iter_mut().zip(row).zip(w) {
        *o = (v as f64 * scale) as f32 * g;
    }
}

/// cos and sin of every rotation angle for every row's position, computed in f64 once per call
/// and rounded to f32, as `(cos, sin)` pairs (`rope_dims / 2` per row, row after row): angle(p, i)
/// = (p / scale) · base^(−2i / rope_dims) / divisor(i), the divisors being the optional
/// `rope_freqs.weight` of Llama 3.1-style checkpoints (1 without it).
fn rope_table(c: &LlamaConfig, divisors: Option<&[f32]>, positions: &[usize]) -> Vec<f32> {
    let half = c.rope_dims / 2;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| {
            let divisor = divisors.map_or(1.0, |d| d[i] as f64);
            c.rope_base.powf(-(2.0 * i as f64) / c.rope_dims as f64) / divisor
        })
        .collect();
    let mut cos_sin = Vec::with_capacity(positions.len() * half * 2);
    for &p in positions {
        let p = p as f64 / c.rope_scale;
        for f in &inv_freq {
            let (s, co) = (p * f).sin_cos();
            cos_sin.push(co as f32);
            cos_sin.push(s as f32);
        }
    }
    cos_sin
}

/// Checks one sequence of a batch before any work: its cache has the model's shape (`heads` names
/// the heads in the message: "kv heads" for grouped-query models), and logits are asked for only
/// where there are new tokens. Shared by the decoder-only and encoder–decoder models.
pub(crate) fn check_sequence(
    seq: usize,
    cache: &KvCache,
    tokens: &[u32],
    logits: Logits,
    expected: &CacheConfig,
    heads: &str,
) -> Result<(), Error> {
    let cc = cache.config();
    if (cc.layers, cc.kv_heads, cc.head_dim)
        != (expected.layers, expected.kv_heads, expected.head_dim)
    {
        return Err(Error::IncompatibleCache {
            seq,
            expected: format!(
                "{} layers, {} {heads} of {}",
                expected.layers, expected.kv_heads, expected.head_dim
            ),
            found: format!(
                "{} layers, {} {heads} of {}",
                cc.layers, cc.kv_heads, cc.head_dim
            ),
        });
    }
    if tokens.is_empty() && logits != Logits::None {
        return Err(Error::NoTokens { seq });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::rms_norm;

    #[test]
    fn rms_norm_of_many_rows_gives_each_row_the_bits_it_gets_alone() {
        // 11 rows: two groups of four and three rows alone; values of every size, so that the
        // f64 sums of squares round differently in any other order.
        let d = 37;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let x: Vec<f32> = (0..11 * d)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                unit * 10f32.powi((state % 7) as i32 - 3)
            })
            .collect();
        let w: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 / d as f32).collect();
        let mut all = vec![0.0f32; x.len()];
        rms_norm(&x, &w, 1e-5, &mut all);
        for (r, (row, got)) in x.chunks_exact(d).zip(all.chunks_exact(d)).enumerate() {
            let mut alone = vec![0.0f32; d];
            rms_norm(row, &w, 1e-5, &mut alone);
            // The definition, written out: the sum of squares in f64, in order.
            let ss: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
            let scale = 1.0 / (ss / d as f64 + 1e-5f32 as f64).sqrt();
            let want: Vec<u32> = row
                .iter()
                .zip(&w)
                .map(|(&v, &g)| ((v as f64 * scale) as f32 * g).to_bits())
                .collect();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want,
                "row {r} in the batch"
            );
            assert_eq!(
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want,
                "row {r} alone"
            );
        }
    }
}
