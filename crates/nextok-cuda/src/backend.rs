//! [`CudaBackend`]: the model crate's compute backend on one NVIDIA GPU.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use nextok_gguf::{dequant, GgmlType};
use nextok_kv_cache::KvCache;
use nextok_model::{Backend, Mask, QMatrix};

use crate::kernels;
use crate::Error;

/// Threads per block of the matrix kernels: `ROWS_PER_BLOCK` warps (see `kernels.cu`).
const MATMUL_THREADS: u32 = 128;
/// Weight rows per block of the block kernels (one per warp); the plain kernels take twice as
/// many (two per warp).
const ROWS_PER_BLOCK: usize = 4;
/// Token rows per block of the matrix kernels.
const TILE: usize = 8;
/// The most token tiles one launch covers (the grid's y dimension is at most 65,535).
const MAX_TILES_PER_LAUNCH: usize = 65_535;
/// Threads per block of the attention kernel.
const ATTENTION_THREADS: u32 = 128;
/// The most attention scores one launch keeps in device memory (128 MiB of f32): a long prompt's
/// rows are attended in chunks of rows that fit.
const MAX_SCORES: usize = 32 << 20;
/// Bytes of each end of a weight matrix kept to recognise it (see [`CudaBackend`]).
const FINGERPRINT: usize = 32;

/// Whether the CUDA driver library (`libcuda`) can be loaded. Nothing else is called.
pub fn driver_available() -> bool {
    // SAFETY: this only asks the dynamic loader to open the library by its usual names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether the run-time compiler library (`libnvrtc`) can be loaded. Nothing else is called.
pub fn nvrtc_available() -> bool {
    // SAFETY: as in `driver_available`.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Runs `f`, turning a panic inside cudarc (a driver too old to have a function this build
/// expects, for one) into a driver error, so that starting the backend never panics.
fn guarded<T>(call: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| String::from("a panic without a message"));
            Err(Error::Driver {
                call: call.to_owned(),
                message: format!("cudarc panicked: {message}"),
            })
        }
    }
}

/// Compiles the kernels with NVRTC and returns the PTX text. Needs only `libnvrtc`, not a GPU
/// nor a driver: tests use it to check the kernel source on machines without CUDA.
pub fn compile_ptx() -> Result<String, Error> {
    if !nvrtc_available() {
        return Err(Error::NoCuda {
            library: "libnvrtc",
            hint: "install the CUDA run-time compiler (for example `pip install \
                   nvidia-cuda-nvrtc-cu12`) and put the folder of libnvrtc.so.12 on \
                   LD_LIBRARY_PATH",
        });
    }
    guarded("nvrtcCompileProgram", || {
        let options = cudarc::nvrtc::CompileOptions {
            // Every fused multiply-add is written out; nothing else may be contracted.
            fmad: Some(false),
            ftz: Some(false),
            prec_div: Some(true),
            prec_sqrt: Some(true),
            name: Some(String::from("nextok_kernels.cu")),
            ..Default::default()
        };
        match cudarc::nvrtc::compile_ptx_with_opts(kernels::SOURCE, options) {
            Ok(ptx) => Ok(ptx.to_src()),
            Err(cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. }) => {
                Err(Error::Compile {
                    message: format!("{nvrtc:?}: {}", log.to_string_lossy()),
                })
            }
            Err(e) => Err(Error::Compile {
                message: format!("{e:?}"),
            }),
        }
    })
}

/// How a weight matrix is stored on the device, and so which kernel reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The file's own blocks.
    Q4_0,
    Q4_1,
    Q8_0,
    /// Plain numbers: the file's own f16 or bf16, or f32 (the file's, or dequantised at upload
    /// for every type without a kernel of its own).
    F16,
    BF16,
    F32,
}

/// A weight matrix held in device memory.
struct DeviceMatrix {
    layout: Layout,
    bytes: CudaSlice<u8>,
    /// The first and last bytes of the host matrix it was made from.
    fingerprint: Vec<u8>,
}

/// Identifies a host weight matrix: where its bytes are, how many, and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct WeightKey {
    addr: usize,
    len: usize,
    ty: GgmlType,
    rows: usize,
    cols: usize,
}

fn fingerprint(data: &[u8]) -> Vec<u8> {
    let n = data.len().min(FINGERPRINT);
    let mut f = data[..n].to_vec();
    f.extend_from_slice(&data[data.len() - n..]);
    f
}

/// A device buffer of f32 that grows (and never shrinks) to what a call needs.
struct Buffer(CudaSlice<f32>);

impl Buffer {
    fn new(stream: &Arc<CudaStream>) -> Result<Self, Error> {
        let b = stream
            .alloc_zeros::<f32>(1)
            .map_err(|e| Error::driver("allocate a buffer", e))?;
        Ok(Buffer(b))
    }

    /// Makes room for `len` numbers.
    fn ensure(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), Error> {
        if self.0.len() < len {
            let size = len.next_power_of_two();
            let fresh = stream
                .alloc_zeros::<f32>(size)
                .map_err(|e| Error::driver(format!("allocate {size} f32"), e))?;
            // The old buffer is freed here; the stream runs in order, so no queued work still
            // uses it by the time the memory is reused.
            self.0 = fresh;
        }
        Ok(())
    }

    /// Makes room for `host` and copies it in.
    fn fill(&mut self, stream: &Arc<CudaStream>, host: &[f32], what: &str) -> Result<(), Error> {
        self.ensure(stream, host.len())?;
        stream
            .memcpy_htod(host, &mut self.0)
            .map_err(|e| Error::driver(format!("copy {what} in"), e))
    }
}

/// Everything a call changes, behind one lock: calls from several threads take turns on the
/// backend's one stream.
struct State {
    weights: HashMap<WeightKey, DeviceMatrix>,
    weight_bytes: u64,
    x: Buffer,
    out: Buffer,
    keys: Buffer,
    values: Buffer,
    scores: Buffer,
    /// Host staging for the keys and values of one attention call.
    host_keys: Vec<f32>,
    host_values: Vec<f32>,
}

struct Kernels {
    q4_0: CudaFunction,
    q4_1: CudaFunction,
    q8_0: CudaFunction,
    f32: CudaFunction,
    f16: CudaFunction,
    bf16: CudaFunction,
    attention: CudaFunction,
}

/// The compute backend on one NVIDIA GPU (see the crate documentation).
///
/// Weight matrices are copied to device memory (plain allocations) the first time a product
/// uses them and kept there, keyed by the address, length, type and shape of their bytes on the
/// host, which for a loaded model are fixed (the memory-mapped file). A few bytes of each end
/// are kept too and compared at every use, so that a different matrix later placed at the same
/// address is uploaded afresh rather than confused with the old one; [`CudaBackend::clear_weights`]
/// frees them all. Activations, and the keys and values of an attention call, are copied in and
/// the results out at every call.
pub struct CudaBackend {
    ordinal: usize,
    name: String,
    // The stream holds the context; the context is kept too for device queries.
    _ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: Kernels,
    state: Mutex<State>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Starts the backend on device `ordinal` (0 for the first GPU): loads the driver, creates a
    /// context and compiles the kernels with NVRTC.
    ///
    /// Without a driver, without NVRTC or without that device this is an [`Error`]
    /// ([`Error::NoCuda`], [`Error::NoDevice`]), never a panic.
    pub fn new(ordinal: usize) -> Result<Self, Error> {
        if !driver_available() {
            return Err(Error::NoCuda {
                library: "libcuda",
                hint: "no NVIDIA driver on this machine, or libcuda.so.1 is not on the loader's \
                       path",
            });
        }
        let ptx = compile_ptx()?;
        guarded("start the device", || Self::start(ordinal, ptx))
    }

    fn start(ordinal: usize, ptx: String) -> Result<Self, Error> {
        cudarc::driver::result::init().map_err(|e| Error::driver("cuInit", e))?;
        let count = cudarc::driver::result::device::get_count()
            .map_err(|e| Error::driver("cuDeviceGetCount", e))?;
        let count = usize::try_from(count).unwrap_or(0);
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::driver("create a context", e))?;
        // One stream runs everything in order, so cudarc's tracking of reads and writes across
        // streams (an event per buffer per launch) is not needed.
        // SAFETY: no work has been queued yet, and this backend never uses a second stream.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx
            .name()
            .map_err(|e| Error::driver("cuDeviceGetName", e))?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| Error::driver("load the kernels' PTX", e))?;
        let f = |n: &str| {
            module
                .load_function(n)
                .map_err(|e| Error::driver(format!("find kernel {n}"), e))
        };
        let kernels = Kernels {
            q4_0: f("matmul_q4_0")?,
            q4_1: f("matmul_q4_1")?,
            q8_0: f("matmul_q8_0")?,
            f32: f("matmul_f32")?,
            f16: f("matmul_f16")?,
            bf16: f("matmul_bf16")?,
            attention: f("attention")?,
        };
        let stream = ctx.default_stream();
        let state = State {
            weights: HashMap::new(),
            weight_bytes: 0,
            x: Buffer::new(&stream)?,
            out: Buffer::new(&stream)?,
            keys: Buffer::new(&stream)?,
            values: Buffer::new(&stream)?,
            scores: Buffer::new(&stream)?,
            host_keys: Vec::new(),
            host_values: Vec::new(),
        };
        Ok(CudaBackend {
            ordinal,
            name,
            _ctx: ctx,
            stream,
            kernels,
            state: Mutex::new(state),
        })
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's name, as the driver reports it (`NVIDIA H200`).
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// How many weight matrices are held in device memory, and their bytes.
    pub fn weights_on_device(&self) -> (usize, u64) {
        let state = self.lock();
        (state.weights.len(), state.weight_bytes)
    }

    /// Frees every weight matrix held in device memory; the next product that needs one uploads
    /// it again.
    pub fn clear_weights(&self) {
        let mut state = self.lock();
        state.weights.clear();
        state.weight_bytes = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held leaves nothing half-done that a later call relies on:
        // buffers are rewritten by each call, and a weight is inserted only once uploaded.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A device failure, as the model crate's error (which has no variant for a backend's own
    /// failures yet: the message carries this crate's error).
    fn model_error(&self, e: Error) -> nextok_model::Error {
        nextok_model::Error::Io {
            path: format!("CUDA device {} ({})", self.ordinal, self.name),
            message: e.to_string(),
        }
    }

    fn matmul_device(
        &self,
        w: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        let (rows, cols) = (w.rows, w.cols);
        let too_big = |what: &str| Error::BadMatrix {
            ty: w.ty,
            rows,
            cols,
            reason: format!("{what} exceed the kernels' 32-bit indices"),
        };
        let rows_i = i32::try_from(rows).map_err(|_| too_big("rows"))?;
        let cols_i = i32::try_from(cols).map_err(|_| too_big("columns"))?;
        let tokens_i = i32::try_from(tokens).map_err(|_| too_big("token rows"))?;
        let stream = &self.stream;
        let mut guard = self.lock();
        let State {
            weights,
            weight_bytes,
            x: dx,
            out: dout,
            ..
        } = &mut *guard;
        dx.fill(stream, x, "activations")?;
        dout.ensure(stream, out.len())?;
        let matrix = upload(stream, weights, weight_bytes, &w)?;
        let (f, rows_per_block) = match matrix.layout {
            Layout::Q4_0 => (&self.kernels.q4_0, ROWS_PER_BLOCK),
            Layout::Q4_1 => (&self.kernels.q4_1, ROWS_PER_BLOCK),
            Layout::Q8_0 => (&self.kernels.q8_0, ROWS_PER_BLOCK),
            Layout::F32 => (&self.kernels.f32, 2 * ROWS_PER_BLOCK),
            Layout::F16 => (&self.kernels.f16, 2 * ROWS_PER_BLOCK),
            Layout::BF16 => (&self.kernels.bf16, 2 * ROWS_PER_BLOCK),
        };
        let grid_x = u32::try_from(rows.div_ceil(rows_per_block)).map_err(|_| too_big("rows"))?;
        let tiles = tokens.div_ceil(TILE);
        let mut tile0 = 0;
        while tile0 < tiles {
            let n = (tiles - tile0).min(MAX_TILES_PER_LAUNCH);
            // At most `tokens`, which fits in an i32 (checked above).
            let t_base = (tile0 * TILE) as i32;
            let cfg = LaunchConfig {
                grid_dim: (grid_x, n as u32, 1),
                block_dim: (MATMUL_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut args = stream.launch_builder(f);
            args.arg(&matrix.bytes)
                .arg(&dx.0)
                .arg(&mut dout.0)
                .arg(&rows_i)
                .arg(&cols_i)
                .arg(&tokens_i)
                .arg(&t_base);
            // SAFETY: the kernel's parameters are (u8*, f32*, f32*, int, int, int, int) as pushed;
            // the weight buffer holds `rows` rows of `cols` numbers in `layout`, the activation
            // buffer at least tokens × cols numbers and the output buffer tokens × rows (sized
            // above), and the kernel touches nothing else.
            unsafe { args.launch(cfg) }.map_err(|e| Error::driver("launch a weight product", e))?;
            tile0 += n;
        }
        stream
            .memcpy_dtoh(&dout.0.slice(0..out.len()), out)
            .map_err(|e| Error::driver("copy the product out", e))?;
        stream
            .synchronize()
            .map_err(|e| Error::driver("wait for the weight product", e))?;
        Ok(())
    }

    /// Attention of `q`'s rows over the first `keys` positions of `cache`'s layer `layer`.
    #[allow(clippy::too_many_arguments)]
    fn attention_device(
        &self,
        q: &[f32],
        cache: &KvCache,
        layer: usize,
        first: usize,
        causal: bool,
        keys: usize,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), nextok_model::Error> {
        let config = cache.config();
        let (hd, kv_heads) = (config.head_dim, config.kv_heads);
        let row_len = kv_heads * hd;
        let n_rows = q.len() / (heads * hd);
        let err = |e: Error| self.model_error(e);
        let int = |v: usize, what: &'static str| {
            i32::try_from(v).map_err(|_| {
                err(Error::Driver {
                    call: String::from("launch attention"),
                    message: format!("{what} = {v} exceeds the kernel's 32-bit indices"),
                })
            })
        };
        let (heads_i, kv_heads_i, hd_i) = (
            int(heads, "heads")?,
            int(kv_heads, "kv heads")?,
            int(hd, "head dim")?,
        );
        let (first_i, keys_i) = (int(first, "first position")?, int(keys, "keys")?);
        int(n_rows * heads, "query rows × heads")?;
        let causal_i = i32::from(causal);
        let scale = 1.0 / (hd as f32).sqrt();
        let stream = &self.stream;
        let mut guard = self.lock();
        let State {
            x: dq,
            out: dout,
            keys: dk,
            values: dv,
            scores: dscores,
            host_keys,
            host_values,
            ..
        } = &mut *guard;
        // Gather the layer's keys and values as f32 rows (an f16 or bf16 cache's numbers are
        // converted exactly), as the CPU backend does.
        host_keys.resize(keys * row_len, 0.0);
        host_values.resize(keys * row_len, 0.0);
        for j in 0..keys {
            let span = j * row_len..(j + 1) * row_len;
            cache
                .key(layer, j)?
                .to_f32(0..row_len, &mut host_keys[span.clone()]);
            cache
                .value(layer, j)?
                .to_f32(0..row_len, &mut host_values[span]);
        }
        dq.fill(stream, q, "queries").map_err(err)?;
        dk.fill(stream, host_keys, "keys").map_err(err)?;
        dv.fill(stream, host_values, "values").map_err(err)?;
        dout.ensure(stream, out.len()).map_err(err)?;
        // Rows per launch, so that the scores of one launch fit in MAX_SCORES.
        let chunk = (MAX_SCORES / (heads * keys).max(1)).clamp(1, n_rows.max(1));
        dscores.ensure(stream, chunk * heads * keys).map_err(err)?;
        let mut row0 = 0;
        while row0 < n_rows {
            let n = chunk.min(n_rows - row0);
            // Below n_rows, which fits in an i32 (checked above).
            let row_base = row0 as i32;
            let cfg = LaunchConfig {
                grid_dim: ((n * heads) as u32, 1, 1),
                block_dim: (ATTENTION_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut args = stream.launch_builder(&self.kernels.attention);
            args.arg(&dq.0)
                .arg(&dk.0)
                .arg(&dv.0)
                .arg(&mut dout.0)
                .arg(&mut dscores.0)
                .arg(&row_base)
                .arg(&heads_i)
                .arg(&kv_heads_i)
                .arg(&hd_i)
                .arg(&first_i)
                .arg(&causal_i)
                .arg(&keys_i)
                .arg(&scale);
            // SAFETY: the parameters match the kernel's signature in order and type; the query
            // and output buffers hold n_rows × heads × hd numbers, the key and value buffers
            // `keys` rows of kv_heads × hd, the scores n × heads × keys; every row sees at most
            // `keys` positions (checked by the caller), and heads is a multiple of kv_heads.
            unsafe { args.launch(cfg) }.map_err(|e| err(Error::driver("launch attention", e)))?;
            row0 += n;
        }
        stream
            .memcpy_dtoh(&dout.0.slice(0..out.len()), out)
            .map_err(|e| err(Error::driver("copy attention out", e)))?;
        stream
            .synchronize()
            .map_err(|e| err(Error::driver("wait for attention", e)))?;
        Ok(())
    }
}

/// Uploads `w` unless an identical matrix is already on the device, and returns it.
fn upload<'m>(
    stream: &Arc<CudaStream>,
    weights: &'m mut HashMap<WeightKey, DeviceMatrix>,
    weight_bytes: &mut u64,
    w: &QMatrix<'_>,
) -> Result<&'m DeviceMatrix, Error> {
    let key = WeightKey {
        addr: w.data.as_ptr() as usize,
        len: w.data.len(),
        ty: w.ty,
        rows: w.rows,
        cols: w.cols,
    };
    let print = fingerprint(w.data);
    let fresh = weights.get(&key).is_some_and(|m| m.fingerprint == print);
    if !fresh {
        if let Some(old) = weights.remove(&key) {
            *weight_bytes -= old.bytes.len() as u64;
        }
        let (layout, host) = device_layout(w)?;
        let bytes = stream
            .clone_htod(&host[..])
            .map_err(|e| Error::driver(format!("upload {} weight bytes", host.len()), e))?;
        *weight_bytes += bytes.len() as u64;
        weights.insert(
            key,
            DeviceMatrix {
                layout,
                bytes,
                fingerprint: print,
            },
        );
    }
    weights.get(&key).ok_or_else(|| Error::Driver {
        call: String::from("upload"),
        message: String::from("weight missing after upload"),
    })
}

/// The bytes a matrix has on the device, and their layout: the file's own bytes for the types
/// with a kernel, and the exact dequantised f32 numbers (as `nextok-gguf` computes them) for the
/// others.
fn device_layout<'a>(w: &QMatrix<'a>) -> Result<(Layout, std::borrow::Cow<'a, [u8]>), Error> {
    use std::borrow::Cow;
    let layout = match w.ty {
        GgmlType::Q4_0 => Layout::Q4_0,
        GgmlType::Q4_1 => Layout::Q4_1,
        GgmlType::Q8_0 => Layout::Q8_0,
        GgmlType::F16 => Layout::F16,
        GgmlType::BF16 => Layout::BF16,
        GgmlType::F32 => Layout::F32,
        ty => {
            let mut numbers = vec![0.0f32; w.rows * w.cols];
            dequant::dequantize_row(ty, w.data, &mut numbers).map_err(|e| Error::BadMatrix {
                ty,
                rows: w.rows,
                cols: w.cols,
                reason: e.to_string(),
            })?;
            let bytes: Vec<u8> = numbers.iter().flat_map(|v| v.to_le_bytes()).collect();
            return Ok((Layout::F32, Cow::Owned(bytes)));
        }
    };
    Ok((layout, Cow::Borrowed(w.data)))
}

impl Backend for CudaBackend {
    fn matmul(
        &self,
        w: QMatrix<'_>,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
    ) -> Result<(), nextok_model::Error> {
        // The same checks, and errors, as the CPU kernels: the matrix's bytes fit its shape and
        // type, and the activations and output have their lengths.
        nextok_kernels::QMat::new(w.ty, w.rows, w.cols, w.data)?;
        if x.len() != tokens * w.cols {
            return Err(nextok_kernels::Error::BadLength {
                what: "the activations",
                found: x.len(),
                expected: tokens * w.cols,
            }
            .into());
        }
        if out.len() != tokens * w.rows {
            return Err(nextok_kernels::Error::BadLength {
                what: "the output",
                found: out.len(),
                expected: tokens * w.rows,
            }
            .into());
        }
        if out.is_empty() {
            return Ok(());
        }
        self.matmul_device(w, x, tokens, out)
            .map_err(|e| self.model_error(e))
    }

    fn attention(
        &self,
        q: &[f32],
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut [f32],
    ) -> Result<(), nextok_model::Error> {
        let config = cache.config();
        let hd = config.head_dim;
        let width = heads * hd;
        if heads == 0 || !heads.is_multiple_of(config.kv_heads) || !q.len().is_multiple_of(width) {
            return Err(nextok_kernels::Error::BadLength {
                what: "the queries (heads × head dim per row, heads a multiple of kv heads)",
                found: q.len(),
                expected: q.len().next_multiple_of(width.max(1)),
            }
            .into());
        }
        if out.len() != q.len() {
            return Err(nextok_kernels::Error::BadLength {
                what: "the attention output",
                found: out.len(),
                expected: q.len(),
            }
            .into());
        }
        let n_rows = q.len() / width;
        if n_rows == 0 {
            return Ok(());
        }
        let (first, causal, keys) = match mask {
            Mask::Causal { first } => (first, true, first + n_rows),
            Mask::Full => (0, false, cache.len()),
        };
        // Every position a row sees must be in the cache: asking for the last one gives the
        // cache's own error when it is not (as on the CPU).
        cache.key(layer, keys.saturating_sub(1))?;
        self.attention_device(q, cache, layer, first, causal, keys, heads, out)
    }
}
