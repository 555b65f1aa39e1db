//! The compute backend: the operations of a forward pass behind a trait, so that a GPU backend
//! can provide them; and the CPU implementation.
//!
//! Two operations carry the arithmetic (the products with weight matrices, and attention over
//! the KV cache) and take host slices. The forward pass itself runs on [`Buffer`]s, numbers kept
//! where the backend computes: [`Backend::alloc`] makes them, and every step of a decoder layer
//! (embedding rows, RMSNorm, biases, rotary embeddings, the products, SwiGLU, writing the KV
//! cache, attention, the residual additions) is a method over them, so that on a device the
//! activations never leave it; [`Backend::download`] brings back only the logits asked for. Each
//! buffer method has a host default (the host code's formulas, no copy), which is all the CPU
//! backend needs.
//!
//! Exactness contract, which every implementation keeps: each output number is computed by one
//! fixed sequence of floating-point operations that depends only on its own inputs, never on how
//! many tokens or sequences share the call, how the work is split, or how many threads run. This
//! is what makes a position's logits bit-identical in one prefill, token by token, in chunks and
//! in a batch.
//!
//! The CPU kernels are plain loops rather than ndarray's matrix product on purpose: a general
//! matrix product blocks its reductions by the shape of the whole problem, so the same row would
//! be summed in a different order in a batch of 1 and a batch of 40.

use std::any::Any;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use nextok_gguf::GgmlType;
use nextok_kernels::dequant;
use nextok_kernels::{Isa, Layout, QMat, ThreadPool};
use nextok_kv_cache::{CacheConfig, KvCache, KvPool};

use crate::config::RopeOrdering;
use crate::Error;

/// A weight matrix: `rows` rows of `cols` numbers each, every row a whole number of blocks of
/// `ty`, either borrowed from the (memory-mapped) file as it stores them or, for Q4_1, packed at
/// load for the CPU kernels (see `nextok_kernels::packed`; the same numbers and the same bits).
#[derive(Debug, Clone, Copy)]
pub struct QMatrix<'a> {
    /// The storage type.
    pub ty: GgmlType,
    /// Output rows.
    pub rows: usize,
    /// Numbers per row (the input width).
    pub cols: usize,
    /// How the rows are laid out: as in the file, or packed. A backend that wants the file's
    /// layout gets it back exactly with [`QMatrix::file_row`].
    pub layout: Layout,
    /// The rows' bytes, row after row.
    pub data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    /// The matrix as the kernels take it, with its shape and byte count checked.
    pub fn kernel_matrix(&self) -> Result<QMat<'a>, Error> {
        Ok(match self.layout {
            Layout::Packed => QMat::new_packed(self.ty, self.rows, self.cols, self.data)?,
            _ => QMat::new(self.ty, self.rows, self.cols, self.data)?,
        })
    }

    /// Bytes per row in the file's layout.
    pub fn file_row_bytes(&self) -> usize {
        self.cols / self.ty.block_elements() as usize * self.ty.block_bytes() as usize
    }

    /// Writes row `r` as the file stores it into `out` (`file_row_bytes()` bytes): a copy, or
    /// the exact inverse of the packing.
    pub fn file_row(&self, r: usize, out: &mut [u8]) -> Result<(), Error> {
        let bad_row = || Error::BadShape {
            tensor: String::from("(matrix row)"),
            expected: vec![self.cols as u64, self.rows as u64],
            found: vec![self.cols as u64, r as u64],
        };
        if r >= self.rows || out.len() != self.file_row_bytes() {
            return Err(bad_row());
        }
        self.kernel_matrix()?.gguf_row(r, out);
        Ok(())
    }

    /// Dequantises row `r` into `out` (`cols` numbers).
    pub fn row(&self, r: usize, out: &mut [f32]) -> Result<(), Error> {
        if self.layout == Layout::Packed {
            let mut bytes = vec![0u8; self.file_row_bytes()];
            self.file_row(r, &mut bytes)?;
            dequant::dequantize_row(self.ty, &bytes, out)?;
            return Ok(());
        }
        let rb = self.file_row_bytes();
        let bytes = self.data.get(r * rb..(r + 1) * rb).ok_or(Error::BadShape {
            tensor: String::from("(matrix row)"),
            expected: vec![self.cols as u64, self.rows as u64],
            found: vec![self.cols as u64, r as u64],
        })?;
        dequant::dequantize_row(self.ty, bytes, out)?;
        Ok(())
    }
}

/// The operations a compute backend provides. See the module documentation for the exactness
/// contract every implementation keeps.
pub trait Backend: Send + Sync {
    /// The matrix product with a stored weight matrix:
    /// `out[t · rows + r] = Σ_k W[r, k] · x[t · cols + k]` for every token row `t < tokens`.
    /// The weights are dequantised on the fly; activations stay f32.
    fn matmul(
        &self,
        w: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), Error>;

    /// Several products of the same activations: `outs[i] = ws[i] · x`, each with the bits
    /// [`Backend::matmul`] gives it. A backend can run them in one dispatch; by default they run
    /// one after another.
    fn matmul_many(
        &self,
        ws: &[QMatrix<'_>],
        x: &[f32],
        tokens: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<(), Error> {
        matmul_each(self, ws, x, tokens, outs)
    }

    /// The SwiGLU input of a feed-forward network: `gate_out = silu(gate · x) ⊙ (up · x)` with
    /// [`nextok_kernels::silu_times`], the products with the bits of [`Backend::matmul`];
    /// `up_out` is scratch for `up · x`. By default: two products, then the combination.
    #[allow(clippy::too_many_arguments)] // two matrices and two outputs, each named for its role
    fn swiglu(
        &self,
        gate: QMatrix<'_>,
        up: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        gate_out: &mut [f32],
        up_out: &mut [f32],
    ) -> Result<(), Error> {
        swiglu_separately(self, gate, up, x, tokens, gate_out, up_out)
    }

    /// A pool of KV blocks of `config`'s shape under `budget_bytes`, its numbers in this
    /// backend's memory, where [`Backend::attention`] reads them. By default: host memory
    /// ([`KvPool::new`]), which the CPU backend reads in place.
    fn new_pool(&self, config: CacheConfig, budget_bytes: u64) -> Result<KvPool, Error> {
        Ok(KvPool::new(config, budget_bytes)?)
    }

    /// Attention of one sequence in one layer: query rows `q` (`heads × head_dim` numbers each)
    /// against the keys and values `cache` holds, as `mask` allows, written to `out` in the same
    /// layout as `q`. The keys and values a row sees must already be in the cache. They are read
    /// where the cache's pool keeps them, block after block of its block table.
    fn attention(
        &self,
        q: &[f32],
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), Error>;

    // The operations of a decoder layer over buffers that the backend keeps where it computes
    // (see [`Buffer`]): `LlamaModel::forward` is written once against them, so on a device
    // backend the activations and the KV cache stay in device memory for the whole pass. Each
    // default works on host buffers with the host code's formulas, so a host backend (the CPU)
    // needs none of its own and pays no copy.

    /// A buffer of `len` numbers, all zero, where this backend computes.
    fn alloc(&self, len: usize) -> Result<Buffer, Error> {
        Ok(Buffer::host(vec![0.0; len]))
    }

    /// `numbers` where this backend computes (a host backend keeps the vector itself).
    fn upload(&self, numbers: Vec<f32>) -> Result<Buffer, Error> {
        Ok(Buffer::host(numbers))
    }

    /// The numbers of `buffer` in host memory (a host backend returns its vector itself).
    fn download(&self, buffer: Buffer) -> Result<Vec<f32>, Error> {
        let len = buffer.len();
        buffer.into_host().map_err(|_| Error::ForeignBuffer {
            what: "download",
            len,
        })
    }

    /// Row `t` of `out` (rows of `table.cols` numbers) is row `tokens[t]` of `table`,
    /// dequantised exactly ([`QMatrix::row`]): the token embedding.
    fn embed(&self, table: QMatrix<'_>, tokens: &[u32], out: &mut Buffer) -> Result<(), Error> {
        let out = host_mut(out, "embed: the output", tokens.len() * table.cols)?;
        for (row, &t) in out.chunks_exact_mut(table.cols.max(1)).zip(tokens) {
            table.row(t as usize, row)?;
        }
        Ok(())
    }

    /// RMSNorm of every row of `x` (rows of `w.len()` numbers) into `out`, as
    /// the model crate computes it: `x / sqrt(mean(x²) + ε) · w`, the sum of squares
    /// in f64, in order.
    fn rms_norm(&self, x: &Buffer, w: &[f32], eps: f32, out: &mut Buffer) -> Result<(), Error> {
        let x = host(x, "rms_norm: the input", 0)?;
        let out = host_mut(out, "rms_norm: the output", x.len())?;
        crate::llama::rms_norm(x, w, eps, &mut out[..x.len()]);
        Ok(())
    }

    /// RMSNorm of the rows `rows` of `x` (in that order) into the rows of `out`: the rows whose
    /// logits are wanted.
    fn rms_norm_rows(
        &self,
        x: &Buffer,
        rows: &[usize],
        w: &[f32],
        eps: f32,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        let d = w.len();
        let x = host(x, "rms_norm_rows: the input", 0)?;
        let out = host_mut(out, "rms_norm_rows: the output", rows.len() * d)?;
        for (dst, &r) in out.chunks_exact_mut(d.max(1)).zip(rows) {
            let src = x.get(r * d..(r + 1) * d).ok_or(Error::ForeignBuffer {
                what: "rms_norm_rows: the input",
                len: x.len(),
            })?;
            crate::llama::rms_norm(src, w, eps, dst);
        }
        Ok(())
    }

    /// `x[r · width + i] += bias[i]` for every row `r` of `x` (`width = bias.len()`).
    fn add_bias(&self, x: &mut Buffer, bias: &[f32]) -> Result<(), Error> {
        let x = host_mut(x, "add_bias", 0)?;
        for row in x.chunks_exact_mut(bias.len().max(1)) {
            row.iter_mut().zip(bias).for_each(|(a, b)| *a += b);
        }
        Ok(())
    }

    /// `x[i] += y[i]`: the residual connection.
    fn add(&self, x: &mut Buffer, y: &Buffer) -> Result<(), Error> {
        let y = host(y, "add: the addend", 0)?;
        let x = host_mut(x, "add: the sum", y.len())?;
        x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
        Ok(())
    }

    /// Rotary position embeddings of every head of every row of `x`, with `table`'s
    /// `(cos, sin)` pairs (`rotary.pairs` per row, row after row; see [`Rotary`]).
    fn rope(&self, x: &mut Buffer, table: &Buffer, rotary: Rotary) -> Result<(), Error> {
        let table = host(table, "rope: the table", 0)?;
        let x = host_mut(x, "rope", 0)?;
        rotary.apply(x, table);
        Ok(())
    }

    /// [`Backend::matmul`] over buffers.
    fn project(
        &self,
        w: QMatrix<'_>,
        x: &Buffer,
        tokens: usize,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        let x = host(x, "project: the input", 0)?;
        let out = host_mut(out, "project: the output", 0)?;
        self.matmul(w, x, tokens, out)
    }

    /// [`Backend::matmul_many`] over buffers.
    fn project_many(
        &self,
        ws: &[QMatrix<'_>],
        x: &Buffer,
        tokens: usize,
        outs: &mut [&mut Buffer],
    ) -> Result<(), Error> {
        let x = host(x, "project_many: the input", 0)?;
        let mut slices = Vec::with_capacity(outs.len());
        for out in outs.iter_mut() {
            slices.push(host_mut(out, "project_many: an output", 0)?);
        }
        self.matmul_many(ws, x, tokens, &mut slices)
    }

    /// [`Backend::swiglu`] over buffers.
    #[allow(clippy::too_many_arguments)] // as `swiglu`
    fn project_swiglu(
        &self,
        gate: QMatrix<'_>,
        up: QMatrix<'_>,
        x: &Buffer,
        tokens: usize,
        gate_out: &mut Buffer,
        up_out: &mut Buffer,
    ) -> Result<(), Error> {
        let x = host(x, "project_swiglu: the input", 0)?;
        let gate_out = host_mut(gate_out, "project_swiglu: the gate", 0)?;
        let up_out = host_mut(up_out, "project_swiglu: the up product", 0)?;
        self.swiglu(gate, up, x, tokens, gate_out, up_out)
    }

    /// Stores the key and value rows `rows` of `keys` and `values` (kv heads × head dim numbers
    /// each) in `cache`'s layer `layer`, at the positions from `first` on. The positions must
    /// have been pushed already ([`KvCache::push_tokens`]).
    fn write_kv(
        &self,
        cache: &mut KvCache,
        layer: usize,
        first: usize,
        keys: &Buffer,
        values: &Buffer,
        rows: Range<usize>,
    ) -> Result<(), Error> {
        let kvd = cache.config().kv_heads * cache.config().head_dim;
        let need = rows.end * kvd;
        let keys = host(keys, "write_kv: the keys", need)?;
        let values = host(values, "write_kv: the values", need)?;
        for (i, row) in rows.enumerate() {
            let span = row * kvd..(row + 1) * kvd;
            cache.write(layer, first + i, &keys[span.clone()], &values[span])?;
        }
        Ok(())
    }

    /// [`Backend::attention`] of the query rows `rows` of `q` (heads × head dim numbers each)
    /// into the same rows of `out`.
    #[allow(clippy::too_many_arguments)] // as `attention`, and the rows
    fn attend(
        &self,
        q: &Buffer,
        rows: Range<usize>,
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        let width = heads * cache.config().head_dim;
        let span = rows.start * width..rows.end * width;
        let q = host(q, "attend: the queries", span.end)?;
        let out = host_mut(out, "attend: the output", span.end)?;
        self.attention(&q[span.clone()], cache, layer, mask, heads, &mut out[span])
    }

    /// [`Backend::attend`] for every sequence of a batch in one call: for each entry, the
    /// query rows `entry.rows` of `q` against `entry.cache` under `entry.mask`, into the same
    /// rows of `out`. Every row gets the bits `attend` gives it alone (the exactness contract);
    /// a backend may run all the entries' rows and heads in one dispatch, which a decode step
    /// of many sequences (one row each) needs. By default: one `attend` after another.
    fn attend_many(
        &self,
        q: &Buffer,
        entries: &[AttendEntry<'_>],
        layer: usize,
        heads: usize,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        for e in entries {
            self.attend(q, e.rows.clone(), e.cache, layer, e.mask, heads, out)?;
        }
        Ok(())
    }

    /// Host threads that [`Backend::run_host_parts`] runs a job's parts on; 1 by default.
    fn host_parts(&self) -> usize {
        1
    }

    /// Runs `job(part)` once for every `part < host_parts()` on the host threads the backend
    /// keeps between passes (the CPU backend's persistent pool), and returns when all are done:
    /// for host work beside the forward pass, such as sampling many sequences' rows, that
    /// should start no thread and not compete with spinning workers. By default on the calling
    /// thread, one part after another.
    fn run_host_parts(&self, job: &(dyn Fn(usize) + Sync)) {
        for part in 0..self.host_parts() {
            job(part);
        }
    }
}

/// One sequence of a [`Backend::attend_many`] call: its query rows, its cache and its mask.
#[derive(Debug, Clone)]
pub struct AttendEntry<'a> {
    /// The sequence's query rows in the batch's buffer.
    pub rows: Range<usize>,
    /// The sequence's cache, holding every key and value its rows see.
    pub cache: &'a KvCache,
    /// Which cached positions each row sees.
    pub mask: Mask,
}

/// Numbers where a backend computes: the activations of a forward pass, made by
/// [`Backend::alloc`] or [`Backend::upload`] and read back with [`Backend::download`]. For a host
/// backend a plain vector; for a device backend whatever handle it keeps (device memory), which
/// only that backend reads.
pub struct Buffer {
    len: usize,
    data: BufferData,
}

enum BufferData {
    Host(Vec<f32>),
    Device(Box<dyn Any + Send + Sync>),
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match self.data {
            BufferData::Host(_) => "host",
            BufferData::Device(_) => "device",
        };
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("in", &place)
            .finish()
    }
}

impl Buffer {
    /// A buffer in host memory.
    pub fn host(numbers: Vec<f32>) -> Self {
        Buffer {
            len: numbers.len(),
            data: BufferData::Host(numbers),
        }
    }

    /// A buffer of `len` numbers that a device backend keeps as `handle` (its own type).
    pub fn device(len: usize, handle: Box<dyn Any + Send + Sync>) -> Self {
        Buffer {
            len,
            data: BufferData::Device(handle),
        }
    }

    /// Numbers in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no number.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The numbers, when the buffer is in host memory.
    pub fn as_host(&self) -> Option<&[f32]> {
        match &self.data {
            BufferData::Host(v) => Some(v),
            BufferData::Device(_) => None,
        }
    }

    /// The numbers, when the buffer is in host memory.
    pub fn as_host_mut(&mut self) -> Option<&mut [f32]> {
        match &mut self.data {
            BufferData::Host(v) => Some(v),
            BufferData::Device(_) => None,
        }
    }

    /// The vector of a host buffer, or the buffer itself back.
    pub fn into_host(self) -> Result<Vec<f32>, Buffer> {
        match self.data {
            BufferData::Host(v) => Ok(v),
            BufferData::Device(_) => Err(self),
        }
    }

    /// A device buffer's handle, when it is a `T`.
    pub fn device_handle<T: Any>(&self) -> Option<&T> {
        match &self.data {
            BufferData::Device(h) => h.downcast_ref(),
            BufferData::Host(_) => None,
        }
    }

    /// A device buffer's handle, when it is a `T`.
    pub fn device_handle_mut<T: Any>(&mut self) -> Option<&mut T> {
        match &mut self.data {
            BufferData::Device(h) => h.downcast_mut(),
            BufferData::Host(_) => None,
        }
    }
}

/// The numbers of a host buffer of at least `min` numbers.
fn host<'b>(b: &'b Buffer, what: &'static str, min: usize) -> Result<&'b [f32], Error> {
    match b.as_host() {
        Some(v) if v.len() >= min => Ok(v),
        _ => Err(Error::ForeignBuffer { what, len: b.len() }),
    }
}

/// The numbers of a host buffer of at least `min` numbers, to write.
fn host_mut<'b>(b: &'b mut Buffer, what: &'static str, min: usize) -> Result<&'b mut [f32], Error> {
    let len = b.len();
    match b.as_host_mut() {
        Some(v) if v.len() >= min => Ok(v),
        _ => Err(Error::ForeignBuffer { what, len }),
    }
}

/// The shape of one rotary embedding: which numbers of each row turn, and how they pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotary {
    /// Heads per row.
    pub heads: usize,
    /// Numbers per head.
    pub head_dim: usize,
    /// Pairs turned per head (`rope_dims / 2`): the table has this many `(cos, sin)` pairs per
    /// row.
    pub pairs: usize,
    /// Which numbers pair up.
    pub ordering: RopeOrdering,
}

impl Rotary {
    /// Rotates the first `2 · pairs` numbers of every head of every row of `x` by the table's
    /// angles: `(x0, x1) → (x0·cos − x1·sin, x0·sin + x1·cos)`, each product rounded.
    pub fn apply(&self, x: &mut [f32], table: &[f32]) {
        let half = self.pairs;
        for (row, angles) in x
            .chunks_exact_mut((self.heads * self.head_dim).max(1))
            .zip(table.chunks_exact((2 * half).max(1)))
        {
            for head in row.chunks_exact_mut(self.head_dim.max(1)) {
                for (i, cs) in angles.chunks_exact(2).enumerate() {
                    let (co, s) = (cs[0], cs[1]);
                    let (a, b) = match self.ordering {
                        RopeOrdering::Normal => (2 * i, 2 * i + 1),
                        RopeOrdering::NeoX => (i, i + half),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * co - x1 * s;
                    head[b] = x0 * s + x1 * co;
                }
            }
        }
    }
}

/// `outs[i] = ws[i] · x`, one [`Backend::matmul`] after another: the default of
/// [`Backend::matmul_many`], and what the CPU backend does with products too small to share.
fn matmul_each<B: Backend + ?Sized>(
    backend: &B,
    ws: &[QMatrix<'_>],
    x: &[f32],
    tokens: usize,
    outs: &mut [&mut [f32]],
) -> Result<(), Error> {
    if ws.len() != outs.len() {
        return Err(nextok_kernels::Error::BadLength {
            what: "the list of outputs",
            found: outs.len(),
            expected: ws.len(),
        }
        .into());
    }
    for (w, out) in ws.iter().zip(outs.iter_mut()) {
        backend.matmul(*w, x, tokens, out)?;
    }
    Ok(())
}

/// SwiGLU as two [`Backend::matmul`]s and then the combination: the default of
/// [`Backend::swiglu`], and what the CPU backend does with products too small to share.
#[allow(clippy::too_many_arguments)] // two matrices and two outputs, each named for its role
fn swiglu_separately<B: Backend + ?Sized>(
    backend: &B,
    gate: QMatrix<'_>,
    up: QMatrix<'_>,
    x: &[f32],
    tokens: usize,
    gate_out: &mut [f32],
    up_out: &mut [f32],
) -> Result<(), Error> {
    backend.matmul(gate, x, tokens, gate_out)?;
    backend.matmul(up, x, tokens, up_out)?;
    for (g, &u) in gate_out.iter_mut().zip(up_out.iter()) {
        *g = nextok_kernels::silu_times(*g, u);
    }
    Ok(())
}

/// Multiply-adds below which a part of a kernel is not worth a thread of its own, by default.
/// At 200,000 a decode step's attention output product (576 × 576) ran on one thread while the
/// others waited; at 100,000 it is split, and 2-thread decode measured 7% faster.
const MIN_WORK_PER_THREAD: usize = 100_000;

/// Which cached positions each query row of an attention call sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    /// Self-attention with the causal mask: query row `i` is position `first + i` and sees
    /// positions `0..=first + i`.
    Causal {
        /// The position of the first query row.
        first: usize,
    },
    /// Every row sees every position of the cache: an encoder's self-attention, and
    /// cross-attention to an encoder's output.
    Full,
}

/// The CPU backend: the fused kernels of `nextok-kernels` (AVX-512, AVX2 or portable, chosen at
/// run time; all give the same bits) for weight products, with the work split over a persistent
/// pool of `threads` threads that is started once, so a decode step starts no thread.
#[derive(Debug, Clone)]
pub struct CpuBackend {
    threads: usize,
    min_work: usize,
    int8: bool,
    isa: Isa,
    pool: Arc<ThreadPool>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new(1)
    }
}

impl CpuBackend {
    /// A backend using `threads` threads (at least 1).
    pub fn new(threads: usize) -> Self {
        CpuBackend {
            threads: threads.max(1),
            min_work: MIN_WORK_PER_THREAD,
            int8: false,
            isa: Isa::detect(),
            pool: Arc::new(ThreadPool::new(threads.max(1))),
        }
    }

    /// The same backend with the kernels of another instruction set (for comparisons; every
    /// instruction set gives the same bits). An instruction set this CPU lacks is an error.
    pub fn with_isa(self, isa: Isa) -> Result<Self, Error> {
        if !isa.is_available() {
            return Err(nextok_kernels::Error::IsaUnavailable { isa }.into());
        }
        Ok(CpuBackend { isa, ..self })
    }

    /// The instruction set of the weight-product kernels.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The same backend in the opt-in fast mode of llama.cpp: before a product with a Q4_0, Q4_1
    /// or Q8_0 matrix, each block of 32 activations is rounded to 8-bit integers with one f16
    /// scale, and the block products are integer sums. Faster arithmetic in principle, but
    /// no longer exact (see the conformance report); never the default. Results stay
    /// reproducible: the rounding and the order of the sums depend on nothing but the row.
    pub fn with_int8_activations(self) -> Self {
        CpuBackend { int8: true, ..self }
    }

    /// The same backend, giving a thread its own part of a kernel only when that part has at
    /// least `min_work` multiply-adds (default 100,000). Results never depend on it; tests set 1
    /// to split even tiny kernels.
    pub fn with_min_work_per_thread(self, min_work: usize) -> Self {
        CpuBackend {
            min_work: min_work.max(1),
            ..self
        }
    }

    /// A backend with as many threads as the machine has cores.
    pub fn all_cores() -> Self {
        CpuBackend::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The number of threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `job(item range, local output)` over `n` items split into contiguous parts, one per
    /// thread, and returns the parts' outputs in order. Each item is computed whole by one
    /// thread, so the split never changes a result.
    fn split<F>(&self, n: usize, min_per_thread: usize, job: F) -> Result<Vec<Vec<f32>>, Error>
    where
        F: Fn(Range<usize>) -> Result<Vec<f32>, Error> + Sync,
    {
        self.split_by_cost(n, min_per_thread, |_| 1, job)
    }

    /// Like `split`, but the parts are cut so that each has about the same total `cost(item)`
    /// (attention rows late in a prompt see more keys than early ones). Which thread computes
    /// an item never changes its result.
    fn split_by_cost<C, F>(
        &self,
        n: usize,
        min_per_thread: usize,
        cost: C,
        job: F,
    ) -> Result<Vec<Vec<f32>>, Error>
    where
        C: Fn(usize) -> usize,
        F: Fn(Range<usize>) -> Result<Vec<f32>, Error> + Sync,
    {
        let parts = self.threads.min(n.div_ceil(min_per_thread.max(1))).max(1);
        if parts == 1 {
            return Ok(vec![job(0..n)?]);
        }
        let total: usize = (0..n).map(&cost).sum();
        let mut bounds = vec![0usize; parts + 1];
        let (mut acc, mut next) = (0usize, 1usize);
        for i in 0..n {
            acc += cost(i);
            while next < parts && acc * parts >= total * next {
                bounds[next] = i + 1;
                next += 1;
            }
        }
        for b in bounds.iter_mut().skip(next) {
            *b = n;
        }
        bounds[parts] = n;
        type Slot = Mutex<Option<Result<Vec<f32>, Error>>>;
        let results: Vec<Slot> = (0..parts).map(|_| Mutex::new(None)).collect();
        // `parts` never exceeds the pool's threads, so every part runs exactly once.
        self.pool.run(|p| {
            if p < parts {
                let out = job(bounds[p]..bounds[p + 1]);
                *results[p].lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
            }
        });
        results
            .into_iter()
            .map(|slot| {
                slot.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_else(|| Ok(Vec::new()))
            })
            .collect()
    }
}

/// Activations rounded to 8 bits in blocks of 32, as llama.cpp's `quantize_row_q8_1`:
/// `d = max|x| / 127` stored as f16, `q = round(x / d)`, and `s = d · Σq` stored as f16.
struct Q8Rows {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
}

fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

impl Q8Rows {
    fn new(x: &[f32]) -> Self {
        let blocks = x.len() / 32;
        let mut out = Q8Rows {
            qs: Vec::with_capacity(x.len()),
            d: Vec::with_capacity(blocks),
            s: Vec::with_capacity(blocks),
        };
        for block in x.chunks_exact(32) {
            let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for &v in block {
                let q = (v * id).round() as i8;
                sum += q as i32;
                out.qs.push(q);
            }
            out.d.push(round_f16(d));
            out.s.push(round_f16(d * sum as f32));
        }
        out
    }
}

/// One row of 8-bit-activation products: ggml's `vec_dot_q4_0_q8_0`, `vec_dot_q4_1_q8_1` and
/// `vec_dot_q8_0_q8_0`, block by block in order.
fn dot_int8(ty: GgmlType, row: &[u8], x: &Q8Rows, first_block: usize) -> f32 {
    let bb = ty.block_bytes() as usize;
    let mut sum = 0.0f32;
    for (b, block) in row.chunks_exact(bb).enumerate() {
        let qx = &x.qs[(first_block + b) * 32..(first_block + b + 1) * 32];
        let (dx, sx) = (x.d[first_block + b], x.s[first_block + b]);
        let half =
            |at: usize| dequant::f16_bits_to_f32(u16::from_le_bytes([block[at], block[at + 1]]));
        match ty {
            GgmlType::Q8_0 => {
                let sumi: i32 = block[2..34]
                    .iter()
                    .zip(qx)
                    .map(|(&w, &a)| (w as i8) as i32 * a as i32)
                    .sum();
                sum += sumi as f32 * (half(0) * dx);
            }
            GgmlType::Q4_0 => {
                let qs = &block[2..18];
                let sumi: i32 = (0..16)
                    .map(|j| {
                        ((qs[j] & 0x0F) as i32 - 8) * qx[j] as i32
                            + ((qs[j] >> 4) as i32 - 8) * qx[j + 16] as i32
                    })
                    .sum();
                sum += sumi as f32 * (half(0) * dx);
            }
            _ => {
                // Q4_1: x = d · q + m, so Σ x·a = d·dx·Σ q·qa + m·s.
                let qs = &block[4..20];
                let sumi: i32 = (0..16)
                    .map(|j| {
                        (qs[j] & 0x0F) as i32 * qx[j] as i32
                            + (qs[j] >> 4) as i32 * qx[j + 16] as i32
                    })
                    .sum();
                sum += (half(0) * dx) * sumi as f32 + half(2) * sx;
            }
        }
    }
    sum
}

impl CpuBackend {
    fn matmul_int8(
        &self,
        w: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let (rows, cols) = (w.rows, w.cols);
        let q8 = Q8Rows::new(x);
        let blocks_per_row = cols / 32;
        let min_rows = self.min_work.div_ceil((cols * tokens).max(1));
        let parts = self.split(rows, min_rows, |range| {
            let mut local = vec![0.0f32; range.len() * tokens];
            // ggml's integer dot products read the file's blocks; a packed row is unpacked first.
            let mut row = vec![0u8; w.file_row_bytes()];
            for (i, r) in range.enumerate() {
                w.file_row(r, &mut row)?;
                for t in 0..tokens {
                    local[i * tokens + t] = dot_int8(w.ty, &row, &q8, t * blocks_per_row);
                }
            }
            Ok(local)
        })?;
        let mut r0 = 0;
        for part in parts {
            let n = part.len() / tokens.max(1);
            for i in 0..n {
                for t in 0..tokens {
                    out[t * rows + r0 + i] = part[i * tokens + t];
                }
            }
            r0 += n;
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn matmul(
        &self,
        w: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let (rows, cols) = (w.rows, w.cols);
        debug_assert_eq!(x.len(), tokens * cols);
        debug_assert_eq!(out.len(), tokens * rows);
        if self.int8 && matches!(w.ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0) {
            return self.matmul_int8(w, x, tokens, out);
        }
        // The fused kernels dequantise each block in registers and keep f32 activations; each
        // output is one fixed sequence of operations, so the split over threads (and whether the
        // pool is used at all) never changes a bit.
        let m = w.kernel_matrix()?;
        if rows * cols * tokens < self.min_work * 2 || self.threads == 1 {
            nextok_kernels::matmul_serial(self.isa, m, x, tokens, out)?;
        } else {
            nextok_kernels::matmul(&self.pool, self.isa, m, x, tokens, out)?;
        }
        Ok(())
    }

    fn matmul_many(
        &self,
        ws: &[QMatrix<'_>],
        x: &[f32],
        tokens: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<(), Error> {
        let work: usize = ws.iter().map(|w| w.rows * w.cols * tokens).sum();
        let Some(first) = ws.first() else {
            return matmul_each(self, ws, x, tokens, outs);
        };
        if self.int8
            || self.threads == 1
            || work < self.min_work * 2
            || ws.len() != outs.len()
            || ws.len() > nextok_kernels::MAX_GROUPED
        {
            return matmul_each(self, ws, x, tokens, outs);
        }
        // The kernels' views of the matrices, without allocating: at most MAX_GROUPED of them.
        let mut ms = [first.kernel_matrix()?; nextok_kernels::MAX_GROUPED];
        for (m, w) in ms.iter_mut().zip(ws) {
            *m = w.kernel_matrix()?;
        }
        nextok_kernels::matmul_many(&self.pool, self.isa, &ms[..ws.len()], x, tokens, outs)?;
        Ok(())
    }

    fn swiglu(
        &self,
        gate: QMatrix<'_>,
        up: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        gate_out: &mut [f32],
        up_out: &mut [f32],
    ) -> Result<(), Error> {
        let work = (gate.rows + up.rows) * gate.cols * tokens;
        if self.int8 || self.threads == 1 || work < self.min_work * 2 {
            return swiglu_separately(self, gate, up, x, tokens, gate_out, up_out);
        }
        let (g, u) = (gate.kernel_matrix()?, up.kernel_matrix()?);
        nextok_kernels::matmul_swiglu(&self.pool, self.isa, g, u, x, tokens, gate_out, up_out)?;
        Ok(())
    }

    fn attention(
        &self,
        q: &[f32],
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let width = heads * cache.config().head_dim;
        let entry = AttendEntry {
            rows: 0..q.len() / width.max(1),
            cache,
            mask,
        };
        self.attention_rows(q, &[entry], layer, heads, out)
    }

    fn attend_many(
        &self,
        q: &Buffer,
        entries: &[AttendEntry<'_>],
        layer: usize,
        heads: usize,
        out: &mut Buffer,
    ) -> Result<(), Error> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let width = heads * first.cache.config().head_dim;
        let end = entries.iter().map(|e| e.rows.end).max().unwrap_or(0) * width;
        let q = host(q, "attend_many: the queries", end)?;
        let out = host_mut(out, "attend_many: the output", end)?;
        self.attention_rows(q, entries, layer, heads, out)
    }

    fn host_parts(&self) -> usize {
        self.pool.threads()
    }

    fn run_host_parts(&self, job: &(dyn Fn(usize) + Sync)) {
        self.pool.run(job);
    }
}

/// Query heads per key/value head whose softmax sums an attention item keeps on the stack.
const MAX_GROUP: usize = 8;

/// One entry of an attention call, ready to run: every key and value row its query rows see,
/// borrowed in place from the cache's blocks (f32) or converted once (f16, bf16).
struct Prepared<'c> {
    blocks: Vec<nextok_kv_cache::HostBlock<'c>>,
    kbuf: Vec<f32>,
    vbuf: Vec<f32>,
    keys: usize,
}

impl CpuBackend {
    /// Attention of every entry's query rows (rows of `q` and `out`, `heads × head_dim` numbers
    /// each) in one split over the threads: the work items are (entry, row, head) triples, each
    /// computed whole by one thread with the same operations whatever else is in the call, so a
    /// row's numbers are the same bits alone, in a prefill or beside other sequences.
    fn attention_rows(
        &self,
        q: &[f32],
        entries: &[AttendEntry<'_>],
        layer: usize,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let config = *first.cache.config();
        let hd = config.head_dim;
        let width = heads * hd;
        if heads == 0 || config.kv_heads == 0 || !heads.is_multiple_of(config.kv_heads) {
            return Err(Error::IncompatibleCache {
                seq: 0,
                expected: format!("a divisor of the {heads} query heads as kv heads"),
                found: format!("{} kv heads", config.kv_heads),
            });
        }
        let group = heads / config.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let row_len = config.kv_heads * hd;
        let bp = config.block_positions;
        let f32_rows = config.kv_type == nextok_kv_cache::KvType::F32;
        // How many keys each entry's rows see at most.
        let keys_of = |e: &AttendEntry<'_>| match e.mask {
            Mask::Causal { first } => first + e.rows.len(),
            Mask::Full => e.cache.len(),
        };
        for (seq, e) in entries.iter().enumerate() {
            let c = e.cache.config();
            if (c.kv_heads, c.head_dim, c.kv_type) != (config.kv_heads, hd, config.kv_type) {
                return Err(Error::IncompatibleCache {
                    seq,
                    expected: format!("{} kv heads of {hd}", config.kv_heads),
                    found: format!("{} kv heads of {}", c.kv_heads, c.head_dim),
                });
            }
            if e.rows.end * width > q.len() || e.rows.end * width > out.len() {
                return Err(Error::ForeignBuffer {
                    what: "attention: the rows",
                    len: q.len().min(out.len()),
                });
            }
        }
        // Borrow every key and value row once per call (not once per row, head and key), in
        // place: the blocks of each sequence's block table are locked for reading and f32 rows
        // are borrowed from them; other types are converted once into a buffer. The arithmetic
        // per score is unchanged, so the results are the same bits.
        let mut prepared = Vec::with_capacity(entries.len());
        for e in entries {
            let keys = keys_of(e);
            let blocks = e.cache.host_blocks(keys)?;
            let (mut kbuf, mut vbuf) = (Vec::new(), Vec::new());
            if !f32_rows {
                kbuf = vec![0.0f32; keys * row_len];
                vbuf = vec![0.0f32; keys * row_len];
                for j in 0..keys {
                    let span = j * row_len..(j + 1) * row_len;
                    let block = &blocks[j / bp];
                    block
                        .key(layer, j % bp)?
                        .to_f32(0..row_len, &mut kbuf[span.clone()]);
                    block
                        .value(layer, j % bp)?
                        .to_f32(0..row_len, &mut vbuf[span]);
                }
            }
            prepared.push(Prepared {
                blocks,
                kbuf,
                vbuf,
                keys,
            });
        }
        type Rows<'r> = (Vec<&'r [f32]>, Vec<&'r [f32]>);
        let mut rows: Vec<Rows<'_>> = Vec::with_capacity(entries.len());
        for p in &prepared {
            let mut krows: Vec<&[f32]> = Vec::with_capacity(p.keys);
            let mut vrows: Vec<&[f32]> = Vec::with_capacity(p.keys);
            for j in 0..p.keys {
                if f32_rows {
                    let block = &p.blocks[j / bp];
                    match (block.key(layer, j % bp)?, block.value(layer, j % bp)?) {
                        (nextok_kv_cache::Row::F32(k), nextok_kv_cache::Row::F32(v)) => {
                            krows.push(k);
                            vrows.push(v);
                        }
                        // An f32 cache always has f32 rows; this is unreachable in practice,
                        // and an error is better than a wrong number.
                        _ => {
                            return Err(Error::IncompatibleCache {
                                seq: 0,
                                found: String::from("rows that are not f32"),
                                expected: String::from("an f32 cache"),
                            })
                        }
                    }
                } else {
                    krows.push(&p.kbuf[j * row_len..(j + 1) * row_len]);
                    vrows.push(&p.vbuf[j * row_len..(j + 1) * row_len]);
                }
            }
            rows.push((krows, vrows));
        }
        let rows = &rows;
        // Items are (entry, row, key/value head), entry after entry: `starts[e]` is entry e's
        // first item. An item computes the `group` query heads that read that key/value head, so
        // each key and value row is loaded once for all of them. A call with too few such items
        // to keep the threads busy (one sequence's decode row) splits by query head instead:
        // `per_item` heads an item, the same bits either way.
        let rows_in_call: usize = entries.iter().map(|e| e.rows.len()).sum();
        let per_item = if rows_in_call * config.kv_heads >= 2 * self.threads {
            group
        } else {
            1
        };
        let chunks = heads / per_item;
        let mut starts = Vec::with_capacity(entries.len() + 1);
        let mut n = 0;
        for e in entries {
            starts.push(n);
            n += e.rows.len() * chunks;
        }
        starts.push(n);
        let starts = &starts;
        // The entry of item `item`, and the item's place in it.
        let locate = |item: usize| {
            let e = starts.partition_point(|&s| s <= item) - 1;
            (e, item - starts[e])
        };
        // The last position item's row sees.
        let last_seen = |e: usize, i: usize| match entries[e].mask {
            Mask::Causal { first } => first + i,
            Mask::Full => entries[e].cache.len().saturating_sub(1),
        };
        // The SIMD dot products and weighted sums of `nextok-kernels`: the same bits on every ISA.
        let isa = self.isa;
        // Attention's parts are cheap to hand out (no weights to stream), so a part is worth a
        // thread at an eighth of a weight product's minimum: a decode step's heads are split
        // once the context passes a few dozen positions. The keys an item reads on average
        // stand for every item's.
        let key_items: usize = entries
            .iter()
            .zip(&prepared)
            .map(|(e, p)| p.keys * e.rows.len() * heads)
            .sum();
        let keys = key_items / (n * per_item).max(1);
        let min_items = (self.min_work / 8).div_ceil((2 * keys * hd * per_item).max(1));
        // A row sees the keys up to its own position: balance the parts by that count.
        let keys_seen = |item: usize| {
            let (e, local) = locate(item);
            last_seen(e, local / chunks) + 1
        };
        let span = per_item * hd;
        let parts = self.split_by_cost(n, min_items, keys_seen, |items| {
            let mut local = vec![0.0f32; items.len() * span];
            let mut scores = Vec::new();
            for (slot, item) in items.enumerate() {
                let (e, local_item) = locate(item);
                let (i, c) = (local_item / chunks, local_item % chunks);
                let (krows, vrows) = &rows[e];
                let last = last_seen(e, i);
                let seen = last + 1;
                // The item's query heads, side by side: c·per_item .. (c + 1)·per_item, all
                // reading key/value head g.
                let g = c * per_item / group;
                let cols = g * hd..(g + 1) * hd;
                let at = (entries[e].rows.start + i) * width + c * span;
                let qs = &q[at..at + span];
                scores.clear();
                scores.resize(per_item * seen, 0.0);
                nextok_kernels::dots_heads(
                    isa,
                    qs,
                    per_item,
                    &krows[..seen],
                    cols.start,
                    &mut scores,
                );
                let mut sums = [0.0f32; MAX_GROUP];
                let mut many = Vec::new();
                let sums: &mut [f32] = if per_item <= MAX_GROUP {
                    &mut sums[..per_item]
                } else {
                    many.resize(per_item, 0.0);
                    &mut many
                };
                // Each head's softmax, in order, as for a head alone.
                for (head, sum) in scores.chunks_exact_mut(seen).zip(sums.iter_mut()) {
                    for s in head.iter_mut() {
                        *s *= scale;
                    }
                    let max = head.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    for s in head.iter_mut() {
                        *s = (*s - max).exp();
                        *sum += *s;
                    }
                }
                let acc = &mut local[slot * span..(slot + 1) * span];
                nextok_kernels::weighted_sum_heads(
                    isa,
                    &scores,
                    per_item,
                    &vrows[..seen],
                    cols.start,
                    acc,
                );
                for (head, &sum) in acc.chunks_exact_mut(hd.max(1)).zip(sums.iter()) {
                    let inv = 1.0 / sum;
                    head.iter_mut().for_each(|a| *a *= inv);
                }
            }
            Ok(local)
        })?;
        // The parts hold the items in order, `per_item` heads of a row each.
        let mut item = 0;
        for part in parts {
            for heads_out in part.chunks_exact(span.max(1)) {
                let (e, local_item) = locate(item);
                let (i, c) = (local_item / chunks, local_item % chunks);
                let at = (entries[e].rows.start + i) * width + c * span;
                out[at..at + span].copy_from_slice(heads_out);
                item += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of `len` positions with pseudo-random keys and values in every layer.
    fn filled_cache(config: CacheConfig, len: usize, seed: u32) -> KvCache {
        let mut cache = KvCache::new(config).unwrap();
        let tokens: Vec<u32> = (0..len as u32).collect();
        cache.push_tokens(&tokens).unwrap();
        let width = config.kv_heads * config.head_dim;
        let number = |i: usize| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761);
            (h >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for layer in 0..config.layers {
            for pos in 0..len {
                let at = (layer * len + pos) * 2 * width;
                let k: Vec<f32> = (0..width).map(|i| number(at + i)).collect();
                let v: Vec<f32> = (0..width).map(|i| number(at + width + i)).collect();
                cache.write(layer, pos, &k, &v).unwrap();
            }
        }
        cache
    }

    #[test]
    fn attend_many_gives_each_sequence_the_bits_it_gets_alone() {
        // Three sequences of different lengths (one decode row, a chunk of three rows, and one
        // row that sees the whole cache), 6 query heads over 2 kv heads of 64, in f32 and f16
        // caches, on 1 to 3 threads with every part split as finely as it goes.
        let (heads, hd) = (6usize, 64usize);
        for kv_type in [nextok_kv_cache::KvType::F32, nextok_kv_cache::KvType::F16] {
            let config = CacheConfig::new(2, 2, hd, kv_type);
            let caches = [
                filled_cache(config, 40, 1),
                filled_cache(config, 19, 2),
                filled_cache(config, 7, 3),
            ];
            let masks = [
                Mask::Causal { first: 39 },
                Mask::Causal { first: 16 },
                Mask::Full,
            ];
            let rows = [0..1, 1..4, 4..5];
            let width = heads * hd;
            let q: Vec<f32> = (0..5 * width)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect();
            for threads in [1, 2, 3] {
                let backend = CpuBackend::new(threads).with_min_work_per_thread(1);
                let entries: Vec<AttendEntry<'_>> = (0..3)
                    .map(|s| AttendEntry {
                        rows: rows[s].clone(),
                        cache: &caches[s],
                        mask: masks[s],
                    })
                    .collect();
                let mut out = Buffer::host(vec![0.0; 5 * width]);
                backend
                    .attend_many(&Buffer::host(q.clone()), &entries, 1, heads, &mut out)
                    .unwrap();
                let out = out.into_host().unwrap();
                for s in 0..3 {
                    let span = rows[s].start * width..rows[s].end * width;
                    let mut alone = vec![0.0; span.len()];
                    CpuBackend::new(1)
                        .attention(&q[span.clone()], &caches[s], 1, masks[s], heads, &mut alone)
                        .unwrap();
                    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&out[span]),
                        bits(&alone),
                        "{kv_type:?}, {threads} threads, sequence {s}"
                    );
                    assert!(alone.iter().all(|v| v.is_finite() && *v != 0.0));
                }
            }
        }
    }

    #[test]
    fn matmul_matches_a_plain_product_with_any_split() {
        // A 40 × 32 F32 matrix with small integer entries: every product and sum is exact.
        let (rows, cols, tokens) = (40usize, 32usize, 3usize);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let data: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let m = QMatrix {
            ty: GgmlType::F32,
            rows,
            cols,
            layout: Layout::Gguf,
            data: &data,
        };
        let x: Vec<f32> = (0..tokens * cols)
            .map(|i| ((i * 3) % 7) as f32 - 3.0)
            .collect();
        for threads in [1, 2, 3] {
            let mut out = vec![0.0; tokens * rows];
            CpuBackend::new(threads)
                .matmul(m, &x, tokens, &mut out)
                .unwrap();
            for t in 0..tokens {
                for r in 0..rows {
                    let e: f32 = (0..cols).map(|k| w[r * cols + k] * x[t * cols + k]).sum();
                    assert_eq!(out[t * rows + r], e, "threads {threads} t {t} r {r}");
                }
            }
        }
    }
}
