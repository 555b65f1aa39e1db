//! [`ResidentModel`]: the whole decoder stack on the device, with the KV cache in device memory
//! ([`DeviceCache`]); only the token ids go in and the last position's logits come out.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use nextok_gguf::{GgmlType, GgufFile};
use nextok_kernels::dequant;
use nextok_kernels::Layout;
use nextok_model::{LlamaConfig, LlamaModel, QMatrix, RopeOrdering};

use crate::backend::{
    launch_attention, launch_matmul, upload_matrix, AttentionShape, Buffer, DeviceMatrix, Kernels,
};
use crate::{CudaBackend, Error};

/// Threads per block of the element-wise kernels and of RMSNorm (`ROW_THREADS` in the source).
const THREADS: u32 = 256;
/// The most blocks of an element-wise launch (the kernels loop over the rest).
const MAX_BLOCKS: usize = 4096;

/// The weights of one decoder block on the device. Shapes are (rows × cols) of `W x`.
struct Layer {
    /// (d_model)
    attn_norm: CudaSlice<f32>,
    /// (heads · head_dim) × d_model, and its optional bias
    wq: DeviceMatrix,
    bq: Option<CudaSlice<f32>>,
    /// (kv_heads · head_dim) × d_model
    wk: DeviceMatrix,
    bk: Option<CudaSlice<f32>>,
    /// (kv_heads · head_dim) × d_model
    wv: DeviceMatrix,
    bv: Option<CudaSlice<f32>>,
    /// d_model × (heads · head_dim)
    wo: DeviceMatrix,
    /// (d_model)
    ffn_norm: CudaSlice<f32>,
    /// ffn × d_model
    gate: DeviceMatrix,
    /// ffn × d_model
    up: DeviceMatrix,
    /// d_model × ffn
    down: DeviceMatrix,
}

/// Per-call device buffers, grown to the largest call so far.
struct Scratch {
    x: Buffer,
    xn: Buffer,
    q: Buffer,
    k: Buffer,
    v: Buffer,
    attn: Buffer,
    proj: Buffer,
    gate: Buffer,
    up: Buffer,
    logits: Buffer,
    scores: Buffer,
    cos_sin: Buffer,
}

/// One sequence's keys and values in device memory: for every layer, `capacity` rows of
/// kv_heads × head_dim f32 numbers, position after position.
pub struct DeviceCache {
    keys: Vec<CudaSlice<f32>>,
    values: Vec<CudaSlice<f32>>,
    /// Numbers per position and layer: kv_heads × head_dim.
    row_len: usize,
    len: usize,
    capacity: usize,
}

impl std::fmt::Debug for DeviceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceCache")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl DeviceCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it has room for.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

/// A Llama-family model held whole in device memory: every weight matrix, the norms and biases,
/// and, per sequence, a [`DeviceCache`]. A forward call copies the new tokens' embeddings and
/// rotary table in and the last position's logits out; everything between runs on the device.
///
/// The arithmetic is the model crate's: the same weight-product and attention kernels as
/// [`CudaBackend`], and RMSNorm, rotary embeddings, biases, SwiGLU and the residual additions
/// with the host code's formulas (RMSNorm's double-precision sum of squares is summed in a tree
/// rather than in order; the exponential of SwiGLU is taken in double and rounded once).
pub struct ResidentModel {
    stream: Arc<CudaStream>,
    kernels: Kernels,
    config: LlamaConfig,
    /// The token embedding as the file stores it (vocab rows), for looking up new tokens.
    embd_type: GgmlType,
    embd: Vec<u8>,
    /// (vocab × d_model), the token embedding itself when tied
    output: DeviceMatrix,
    /// (d_model)
    output_norm: CudaSlice<f32>,
    /// (rope_dims / 2) rotation frequencies, with the optional `rope_freqs` divisors applied
    inv_freq: Vec<f64>,
    layers: Vec<Layer>,
    weight_bytes: u64,
    scratch: Mutex<Scratch>,
}

impl std::fmt::Debug for ResidentModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResidentModel")
            .field("config", &self.config)
            .field("weight_bytes", &self.weight_bytes)
            .finish_non_exhaustive()
    }
}

/// A tensor of the file by name: its type, dimensions and bytes.
fn find<'f>(file: &'f GgufFile, name: &str) -> Result<(GgmlType, Vec<u64>, &'f [u8]), Error> {
    let info = file
        .tensors()
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::MissingTensor {
            name: name.to_owned(),
        })?;
    Ok((info.ggml_type, info.dims.clone(), file.view(info).data))
}

fn bad_tensor(name: &str, ty: GgmlType, reason: String) -> Error {
    Error::BadMatrix {
        ty,
        rows: 0,
        cols: 0,
        reason: format!("{name}: {reason}"),
    }
}

/// A vector tensor (norm weights, biases, rope divisors) decoded to f32.
fn host_vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, Error> {
    let (ty, dims, bytes) = find(file, name)?;
    if dims != [len as u64] {
        return Err(bad_tensor(
            name,
            ty,
            format!("dimensions {dims:?}, expected [{len}]"),
        ));
    }
    let mut out = vec![0.0f32; len];
    dequant::dequantize_row(ty, bytes, &mut out)
        .map_err(|e| bad_tensor(name, ty, e.to_string()))?;
    Ok(out)
}

/// Grid size for an element-wise kernel over `n` items.
fn blocks(n: usize) -> u32 {
    n.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS) as u32
}

fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks(n), 1, 1),
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
        // `kernels.cu`), with buffers sized for the counts it passes; the kernels touch nothing
        // else.
        unsafe { args.launch($cfg) }.map_err(|e| Error::driver(concat!("launch ", $name), e))?;
    }};
}

impl ResidentModel {
    /// Copies `model`'s weights to the device of `backend`. The weights are read from the
    /// model's GGUF file by their names (the tensors the model itself uses), so a model loaded
    /// from safetensors gives [`Error::MissingTensor`].
    pub fn new(backend: &CudaBackend, model: &LlamaModel) -> Result<Self, Error> {
        let (stream, kernels) = backend.parts();
        let c = model.config().clone();
        let file = model.file();
        let (d, kvd, ffn) = (c.d_model, c.kv_dim(), c.ffn_dim);
        let mut weight_bytes = 0u64;
        let mut matrix = |name: &str, rows: usize, cols: usize| -> Result<DeviceMatrix, Error> {
            let (ty, dims, data) = find(file, name)?;
            if dims != [cols as u64, rows as u64] {
                return Err(bad_tensor(
                    name,
                    ty,
                    format!("dimensions {dims:?}, expected [{cols}, {rows}]"),
                ));
            }
            let w = QMatrix {
                ty,
                rows,
                cols,
                layout: Layout::Gguf,
                data,
            };
            w.kernel_matrix()
                .map_err(|e| bad_tensor(name, ty, e.to_string()))?;
            let m = upload_matrix(stream, &w, Vec::new())?;
            weight_bytes += m.device_bytes() as u64;
            Ok(m)
        };
        let vector = |name: &str, len: usize| -> Result<CudaSlice<f32>, Error> {
            let v = host_vector(file, name, len)?;
            stream
                .clone_htod(&v[..])
                .map_err(|e| Error::driver(format!("upload {name}"), e))
        };
        let optional = |name: &str, len: usize| -> Result<Option<CudaSlice<f32>>, Error> {
            match vector(name, len) {
                Ok(v) => Ok(Some(v)),
                Err(Error::MissingTensor { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        };
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(Layer {
                attn_norm: vector(&n("attn_norm.weight"), d)?,
                wq: matrix(&n("attn_q.weight"), d, d)?,
                bq: optional(&n("attn_q.bias"), d)?,
                wk: matrix(&n("attn_k.weight"), kvd, d)?,
                bk: optional(&n("attn_k.bias"), kvd)?,
                wv: matrix(&n("attn_v.weight"), kvd, d)?,
                bv: optional(&n("attn_v.bias"), kvd)?,
                wo: matrix(&n("attn_output.weight"), d, d)?,
                ffn_norm: vector(&n("ffn_norm.weight"), d)?,
                gate: matrix(&n("ffn_gate.weight"), ffn, d)?,
                up: matrix(&n("ffn_up.weight"), ffn, d)?,
                down: matrix(&n("ffn_down.weight"), d, ffn)?,
            });
        }
        let output = if model.tied_output() {
            matrix("token_embd.weight", c.vocab, d)?
        } else {
            matrix("output.weight", c.vocab, d)?
        };
        let output_norm = vector("output_norm.weight", d)?;
        let (embd_type, _, embd) = find(file, "token_embd.weight")?;
        let half = c.rope_dims / 2;
        let divisors = match host_vector(file, "rope_freqs.weight", half) {
            Ok(v) => Some(v),
            Err(Error::MissingTensor { .. }) => None,
            Err(e) => return Err(e),
        };
        // The host's rotation frequencies (nextok-model's RopeTable), in f64.
        let inv_freq = (0..half)
            .map(|i| {
                let divisor = divisors.as_ref().map_or(1.0, |d| d[i] as f64);
                c.rope_base.powf(-(2.0 * i as f64) / c.rope_dims as f64) / divisor
            })
            .collect();
        let scratch = Scratch {
            x: Buffer::new(stream)?,
            xn: Buffer::new(stream)?,
            q: Buffer::new(stream)?,
            k: Buffer::new(stream)?,
            v: Buffer::new(stream)?,
            attn: Buffer::new(stream)?,
            proj: Buffer::new(stream)?,
            gate: Buffer::new(stream)?,
            up: Buffer::new(stream)?,
            logits: Buffer::new(stream)?,
            scores: Buffer::new(stream)?,
            cos_sin: Buffer::new(stream)?,
        };
        Ok(ResidentModel {
            stream: stream.clone(),
            kernels: kernels.clone(),
            config: c,
            embd_type,
            embd: embd.to_vec(),
            output,
            output_norm,
            inv_freq,
            layers,
            weight_bytes,
            scratch: Mutex::new(scratch),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Bytes of weight matrices in device memory.
    pub fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    /// A new, empty device cache with room for `capacity` positions (at most the context
    /// length).
    pub fn new_cache(&self, capacity: usize) -> Result<DeviceCache, Error> {
        let capacity = capacity.min(self.config.context);
        let n = capacity.max(1) * self.config.kv_dim();
        let alloc = || {
            self.stream
                .alloc_zeros::<f32>(n)
                .map_err(|e| Error::driver(format!("allocate a cache layer of {n} f32"), e))
        };
        let mut keys = Vec::with_capacity(self.config.layers);
        let mut values = Vec::with_capacity(self.config.layers);
        for _ in 0..self.config.layers {
            keys.push(alloc()?);
            values.push(alloc()?);
        }
        Ok(DeviceCache {
            keys,
            values,
            row_len: self.config.kv_dim(),
            len: 0,
            capacity,
        })
    }

    /// Runs `tokens` through the model at the positions after the ones `cache` holds, appends
    /// their keys and values to it, and returns the last position's logits (`vocab` numbers).
    /// On error the cache holds what it held before.
    pub fn forward(&self, cache: &mut DeviceCache, tokens: &[u32]) -> Result<Vec<f32>, Error> {
        let c = &self.config;
        let (d, kvd, ffn, hd) = (c.d_model, c.kv_dim(), c.ffn_dim, c.head_dim);
        let n = tokens.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= c.vocab) {
            return Err(Error::TokenOutOfRange {
                token,
                vocab: c.vocab,
            });
        }
        let p0 = cache.len;
        if p0 + n > cache.capacity {
            return Err(Error::CacheFull {
                capacity: cache.capacity,
                needed: p0 + n,
            });
        }
        if (cache.keys.len(), cache.row_len) != (c.layers, kvd) {
            return Err(Error::IncompatibleCache {
                expected_layers: c.layers,
                expected_row: kvd,
                found_layers: cache.keys.len(),
                found_row: cache.row_len,
            });
        }
        // The new tokens' embeddings and their positions' (cos, sin) pairs, made on the host.
        let row_bytes =
            d / self.embd_type.block_elements() as usize * self.embd_type.block_bytes() as usize;
        let mut x_host = vec![0.0f32; n * d];
        for (row, &t) in x_host.chunks_exact_mut(d).zip(tokens) {
            let t = t as usize;
            let bytes = self
                .embd
                .get(t * row_bytes..(t + 1) * row_bytes)
                .ok_or_else(|| {
                    bad_tensor(
                        "token_embd.weight",
                        self.embd_type,
                        format!("no row {t} in {} bytes", self.embd.len()),
                    )
                })?;
            dequant::dequantize_row(self.embd_type, bytes, row)
                .map_err(|e| bad_tensor("token_embd.weight", self.embd_type, e.to_string()))?;
        }
        let half = self.inv_freq.len();
        let mut cos_sin = Vec::with_capacity(n * half * 2);
        for p in p0..p0 + n {
            let p = p as f64 / c.rope_scale;
            for f in &self.inv_freq {
                let (s, co) = (p * f).sin_cos();
                cos_sin.push(co as f32);
                cos_sin.push(s as f32);
            }
        }
        let (d_i, n_i) = (int(d, "d_model")?, int(n, "tokens")?);
        let neox = i32::from(c.rope_ordering == RopeOrdering::NeoX);
        let (hd_i, half_i) = (int(hd, "head dim")?, int(half, "rope pairs")?);
        let (heads_i, kv_heads_i) = (int(c.heads, "heads")?, int(c.kv_heads, "kv heads")?);
        let eps = c.rms_eps;
        let stream = &self.stream;
        let k = &self.kernels;
        let mut guard = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let Scratch {
            x,
            xn,
            q,
            k: kb,
            v: vb,
            attn,
            proj,
            gate,
            up,
            logits,
            scores,
            cos_sin: cs,
        } = &mut *guard;
        x.fill(stream, &x_host, "embeddings")?;
        cs.fill(stream, &cos_sin, "rotary table")?;
        for (b, len) in [
            (&mut *xn, n * d),
            (&mut *q, n * d),
            (&mut *kb, n * kvd),
            (&mut *vb, n * kvd),
            (&mut *attn, n * d),
            (&mut *proj, n * d),
            (&mut *gate, n * ffn),
            (&mut *up, n * ffn),
            (&mut *logits, c.vocab),
        ] {
            b.ensure(stream, len)?;
        }
        let rows_cfg = |rows: usize| LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let nd = int(n * d, "n × d_model")?;
        let nf = int(n * ffn, "n × ffn")?;
        for (li, layer) in self.layers.iter().enumerate() {
            // Attention.
            launch!(
                stream,
                "rms_norm",
                &k.rms_norm,
                rows_cfg(n),
                [&x.0, &layer.attn_norm, &mut xn.0, &d_i, &eps]
            );
            launch_matmul(
                stream,
                k,
                &layer.wq,
                &xn.0.as_view(),
                &mut q.0.as_view_mut(),
                n,
            )?;
            launch_matmul(
                stream,
                k,
                &layer.wk,
                &xn.0.as_view(),
                &mut kb.0.as_view_mut(),
                n,
            )?;
            launch_matmul(
                stream,
                k,
                &layer.wv,
                &xn.0.as_view(),
                &mut vb.0.as_view_mut(),
                n,
            )?;
            for (buf, bias, width) in [
                (&mut *q, &layer.bq, d),
                (&mut *kb, &layer.bk, kvd),
                (&mut *vb, &layer.bv, kvd),
            ] {
                if let Some(bias) = bias {
                    let w_i = int(width, "bias width")?;
                    launch!(
                        stream,
                        "add_bias",
                        &k.add_bias,
                        elementwise(n * width),
                        [&mut buf.0, bias, &n_i, &w_i]
                    );
                }
            }
            launch!(
                stream,
                "rope",
                &k.rope,
                elementwise(n * c.heads * half),
                [&mut q.0, &cs.0, &n_i, &heads_i, &hd_i, &half_i, &neox]
            );
            launch!(
                stream,
                "rope",
                &k.rope,
                elementwise(n * c.kv_heads * half),
                [&mut kb.0, &cs.0, &n_i, &kv_heads_i, &hd_i, &half_i, &neox]
            );
            let span = p0 * kvd..(p0 + n) * kvd;
            stream
                .memcpy_dtod(
                    &kb.0.slice(0..n * kvd),
                    &mut cache.keys[li].slice_mut(span.clone()),
                )
                .map_err(|e| Error::driver("store keys", e))?;
            stream
                .memcpy_dtod(
                    &vb.0.slice(0..n * kvd),
                    &mut cache.values[li].slice_mut(span),
                )
                .map_err(|e| Error::driver("store values", e))?;
            launch_attention(
                stream,
                k,
                AttentionShape {
                    rows: n,
                    heads: c.heads,
                    kv_heads: c.kv_heads,
                    head_dim: hd,
                    first: p0,
                    causal: true,
                    keys: p0 + n,
                },
                [
                    &q.0.as_view(),
                    &cache.keys[li].as_view(),
                    &cache.values[li].as_view(),
                ],
                &mut attn.0.as_view_mut(),
                scores,
            )?;
            launch_matmul(
                stream,
                k,
                &layer.wo,
                &attn.0.as_view(),
                &mut proj.0.as_view_mut(),
                n,
            )?;
            launch!(
                stream,
                "add",
                &k.add,
                elementwise(n * d),
                [&mut x.0, &proj.0, &nd]
            );
            // Feed-forward.
            launch!(
                stream,
                "rms_norm",
                &k.rms_norm,
                rows_cfg(n),
                [&x.0, &layer.ffn_norm, &mut xn.0, &d_i, &eps]
            );
            launch_matmul(
                stream,
                k,
                &layer.gate,
                &xn.0.as_view(),
                &mut gate.0.as_view_mut(),
                n,
            )?;
            launch_matmul(
                stream,
                k,
                &layer.up,
                &xn.0.as_view(),
                &mut up.0.as_view_mut(),
                n,
            )?;
            launch!(
                stream,
                "silu_mul",
                &k.silu_mul,
                elementwise(n * ffn),
                [&mut gate.0, &up.0, &nf]
            );
            launch_matmul(
                stream,
                k,
                &layer.down,
                &gate.0.as_view(),
                &mut proj.0.as_view_mut(),
                n,
            )?;
            launch!(
                stream,
                "add",
                &k.add,
                elementwise(n * d),
                [&mut x.0, &proj.0, &nd]
            );
        }
        // The last position's logits.
        let last = x.0.slice((n - 1) * d..n * d);
        launch!(
            stream,
            "rms_norm",
            &k.rms_norm,
            rows_cfg(1),
            [&last, &self.output_norm, &mut xn.0, &d_i, &eps]
        );
        launch_matmul(
            stream,
            k,
            &self.output,
            &xn.0.as_view(),
            &mut logits.0.as_view_mut(),
            1,
        )?;
        let mut out = vec![0.0f32; c.vocab];
        stream
            .memcpy_dtoh(&logits.0.slice(0..c.vocab), &mut out)
            .map_err(|e| Error::driver("copy the logits out", e))?;
        stream
            .synchronize()
            .map_err(|e| Error::driver("wait for the forward pass", e))?;
        cache.len = p0 + n;
        Ok(out)
    }
}
