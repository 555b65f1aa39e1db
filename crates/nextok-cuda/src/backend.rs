//! [`CudaBackend`]: the model crate's compute backend on one NVIDIA GPU.

use std::borrow::Cow;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig,
    PushKernelArg,
};
use nextok_gguf::GgmlType;
use nextok_kernels::dequant;
use nextok_kernels::Layout;
use std::ops::Range;

use nextok_kv_cache::{CacheConfig, KvCache, KvPool};
use nextok_model::{Backend, Buffer as ModelBuffer, Mask, QMatrix, Rotary};

use crate::kernels;
use crate::storage::DeviceStorage;
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

/// The CUDA version the driver supports and NVRTC's version, in words.
fn versions() -> String {
    let mut driver = 0i32;
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: both libraries are loaded (checked before any call), and each function writes
    // only the integers it is given.
    let (d, n) = unsafe {
        (
            cudarc::driver::sys::cuDriverGetVersion(&mut driver),
            cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor),
        )
    };
    let driver = if d == cudarc::driver::sys::CUresult::CUDA_SUCCESS {
        format!("{}.{}", driver / 1000, driver % 1000 / 10)
    } else {
        String::from("unknown")
    };
    let nvrtc = if n == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        format!("{major}.{minor}")
    } else {
        String::from("unknown")
    };
    format!("the driver supports CUDA {driver}, NVRTC is {nvrtc}")
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
enum DeviceLayout {
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
pub(crate) struct DeviceMatrix {
    layout: DeviceLayout,
    bytes: CudaSlice<u8>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// The first and last bytes of the host matrix it was made from.
    fingerprint: Vec<u8>,
}

/// Identifies a host weight matrix: where its bytes are, how many, and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct WeightKey {
    addr: usize,
    len: usize,
    layout: Layout,
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
pub(crate) struct Scratch(pub(crate) CudaSlice<f32>);

impl Scratch {
    pub(crate) fn new(stream: &Arc<CudaStream>) -> Result<Self, Error> {
        let b = stream
            .alloc_zeros::<f32>(1)
            .map_err(|e| Error::driver("allocate a buffer", e))?;
        Ok(Scratch(b))
    }

    /// Makes room for `len` numbers.
    pub(crate) fn ensure(&mut self, stream: &Arc<CudaStream>, len: usize) -> Result<(), Error> {
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
    pub(crate) fn fill(
        &mut self,
        stream: &Arc<CudaStream>,
        host: &[f32],
        what: &str,
    ) -> Result<(), Error> {
        self.ensure(stream, host.len())?;
        stream
            .memcpy_htod(host, &mut self.0)
            .map_err(|e| Error::driver(format!("copy {what} in"), e))
    }
}

/// Everything a call changes, behind one lock: calls from several threads take turns on the
/// backend's one stream.
pub(crate) struct State {
    pub(crate) weights: HashMap<WeightKey, DeviceMatrix>,
    pub(crate) weight_bytes: u64,
    /// The model's vectors (norm weights, biases) in device memory, by host address and length,
    /// with their host numbers to recognise them.
    pub(crate) vectors: HashMap<(usize, usize), (Vec<f32>, CudaSlice<f32>)>,
    x: Scratch,
    out: Scratch,
    pub(crate) keys: Scratch,
    pub(crate) values: Scratch,
    pub(crate) scores: Scratch,
    /// Host staging for the keys and values of one attention call.
    host_keys: Vec<f32>,
    host_values: Vec<f32>,
}

/// The compiled kernels, one function each (see `kernels.cu`).
#[derive(Clone)]
pub(crate) struct Kernels {
    q4_0: CudaFunction,
    q4_1: CudaFunction,
    q8_0: CudaFunction,
    f32: CudaFunction,
    f16: CudaFunction,
    bf16: CudaFunction,
    /// Token embedding rows, one kernel per device layout (see `kernels.cu`).
    embed: [CudaFunction; 6],
    attention: CudaFunction,
    attention_paged: CudaFunction,
    pub(crate) write_kv_paged: CudaFunction,
    pub(crate) rms_norm: CudaFunction,
    pub(crate) rms_norm_rows: CudaFunction,
    pub(crate) add_bias: CudaFunction,
    pub(crate) add: CudaFunction,
    pub(crate) silu_mul: CudaFunction,
    pub(crate) rope: CudaFunction,
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
        // PTX newer than the driver is refused: the versions say when that is the cause.
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(|e| Error::driver(format!("load the kernels' PTX ({})", versions()), e))?;
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
            embed: [
                f("embed_q4_0")?,
                f("embed_q4_1")?,
                f("embed_q8_0")?,
                f("embed_f32")?,
                f("embed_f16")?,
                f("embed_bf16")?,
            ],
            attention: f("attention")?,
            attention_paged: f("attention_paged")?,
            write_kv_paged: f("write_kv_paged")?,
            rms_norm: f("rms_norm")?,
            rms_norm_rows: f("rms_norm_rows")?,
            add_bias: f("add_bias")?,
            add: f("add")?,
            silu_mul: f("silu_mul")?,
            rope: f("rope")?,
        };
        let stream = ctx.default_stream();
        let state = State {
            weights: HashMap::new(),
            weight_bytes: 0,
            vectors: HashMap::new(),
            x: Scratch::new(&stream)?,
            out: Scratch::new(&stream)?,
            keys: Scratch::new(&stream)?,
            values: Scratch::new(&stream)?,
            scores: Scratch::new(&stream)?,
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

    /// The stream every call runs on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The compiled kernels.
    pub(crate) fn kernels(&self) -> &Kernels {
        &self.kernels
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

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held leaves nothing half-done that a later call relies on:
        // buffers are rewritten by each call, and a weight is inserted only once uploaded.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A device failure, as the model crate's error for a backend's own failures.
    pub(crate) fn model_error(&self, e: Error) -> nextok_model::Error {
        nextok_model::Error::Backend {
            backend: format!("CUDA device {} ({})", self.ordinal, self.name),
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
        launch_matmul(
            stream,
            &self.kernels,
            matrix,
            &dx.0.as_view(),
            &mut dout.0.as_view_mut(),
            tokens,
        )?;
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
        launch_attention(
            stream,
            &self.kernels,
            AttentionShape {
                rows: n_rows,
                heads,
                kv_heads,
                head_dim: hd,
                first,
                causal,
                keys,
            },
            [&dq.0.as_view(), &dk.0.as_view(), &dv.0.as_view()],
            &mut dout.0.as_view_mut(),
            dscores,
        )
        .map_err(err)?;
        stream
            .memcpy_dtoh(&dout.0.slice(0..out.len()), out)
            .map_err(|e| err(Error::driver("copy attention out", e)))?;
        stream
            .synchronize()
            .map_err(|e| err(Error::driver("wait for attention", e)))?;
        Ok(())
    }
}

/// Launches the weight product `out = W x` for `tokens` rows of activations, all on the device.
pub(crate) fn launch_matmul(
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    matrix: &DeviceMatrix,
    x: &CudaView<'_, f32>,
    out: &mut CudaViewMut<'_, f32>,
    tokens: usize,
) -> Result<(), Error> {
    let (rows, cols) = (matrix.rows, matrix.cols);
    let bad = |reason: String| Error::Driver {
        call: String::from("launch a weight product"),
        message: reason,
    };
    if x.len() < tokens * cols || out.len() < tokens * rows {
        return Err(bad(format!(
            "buffers of {} and {} numbers for {tokens} × {cols} in and {tokens} × {rows} out",
            x.len(),
            out.len()
        )));
    }
    let int = |v: usize, what: &str| {
        i32::try_from(v).map_err(|_| bad(format!("{what} = {v} exceeds 32-bit indices")))
    };
    let (rows_i, cols_i, tokens_i) = (
        int(rows, "rows")?,
        int(cols, "columns")?,
        int(tokens, "token rows")?,
    );
    let (f, rows_per_block) = match matrix.layout {
        DeviceLayout::Q4_0 => (&kernels.q4_0, ROWS_PER_BLOCK),
        DeviceLayout::Q4_1 => (&kernels.q4_1, ROWS_PER_BLOCK),
        DeviceLayout::Q8_0 => (&kernels.q8_0, ROWS_PER_BLOCK),
        DeviceLayout::F32 => (&kernels.f32, 2 * ROWS_PER_BLOCK),
        DeviceLayout::F16 => (&kernels.f16, 2 * ROWS_PER_BLOCK),
        DeviceLayout::BF16 => (&kernels.bf16, 2 * ROWS_PER_BLOCK),
    };
    // At most rows / 4 + 1, which fits: rows fits in an i32.
    let grid_x = rows.div_ceil(rows_per_block) as u32;
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
            .arg(x)
            .arg(&mut *out)
            .arg(&rows_i)
            .arg(&cols_i)
            .arg(&tokens_i)
            .arg(&t_base);
        // SAFETY: the kernel's parameters are (u8*, f32*, f32*, int, int, int, int) as pushed;
        // the weight buffer holds `rows` rows of `cols` numbers in `layout`, the activations at
        // least tokens × cols numbers and the output tokens × rows (checked above), and the
        // kernel touches nothing else.
        unsafe { args.launch(cfg) }.map_err(|e| Error::driver("launch a weight product", e))?;
        tile0 += n;
    }
    Ok(())
}

/// Launches the token embedding: row `t` of `out` is row `tokens[t]` of `matrix`, dequantised
/// as the host's `dequant::dequantize_row` does it, for `n` tokens (each checked below the
/// matrix's rows by the caller).
pub(crate) fn launch_embed(
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    matrix: &DeviceMatrix,
    tokens: &CudaSlice<i32>,
    out: &mut CudaSlice<f32>,
    n: usize,
) -> Result<(), Error> {
    let cols = matrix.cols;
    let bad = |reason: String| Error::Driver {
        call: String::from("launch the embedding"),
        message: reason,
    };
    if tokens.len() < n || out.len() < n * cols {
        return Err(bad(format!(
            "{} token ids and {} numbers out for {n} rows of {cols}",
            tokens.len(),
            out.len()
        )));
    }
    let total =
        i32::try_from(n * cols).map_err(|_| bad(format!("{n} × {cols} exceeds 32-bit indices")))?;
    let cols_i = cols as i32;
    let n_i = n as i32;
    let f = match matrix.layout {
        DeviceLayout::Q4_0 => &kernels.embed[0],
        DeviceLayout::Q4_1 => &kernels.embed[1],
        DeviceLayout::Q8_0 => &kernels.embed[2],
        DeviceLayout::F32 => &kernels.embed[3],
        DeviceLayout::F16 => &kernels.embed[4],
        DeviceLayout::BF16 => &kernels.embed[5],
    };
    let cfg = LaunchConfig {
        grid_dim: ((total as usize).div_ceil(256).clamp(1, 4096) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut args = stream.launch_builder(f);
    args.arg(&matrix.bytes)
        .arg(tokens)
        .arg(&mut *out)
        .arg(&cols_i)
        .arg(&n_i);
    // SAFETY: the kernel's parameters are (u8*, i32*, f32*, int, int) as pushed; the matrix holds
    // `rows` rows of `cols` numbers in `layout` and every token id is below `rows` (the caller
    // checks), the ids hold n numbers and the output n × cols (checked above).
    unsafe { args.launch(cfg) }.map_err(|e| Error::driver("launch the embedding", e))?;
    Ok(())
}

/// The shape of one attention call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttentionShape {
    /// Query rows.
    pub(crate) rows: usize,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    /// The position of the first query row (causal mask).
    pub(crate) first: usize,
    pub(crate) causal: bool,
    /// Key and value rows in the buffers that rows may see.
    pub(crate) keys: usize,
}

/// Launches attention of `qkv[0]`'s rows over the key and value rows `qkv[1]`, `qkv[2]`
/// (position after position, kv_heads × head_dim numbers each) into `out`, in chunks of rows
/// whose scores fit in `scores` (grown to what a chunk needs, at most MAX_SCORES numbers).
pub(crate) fn launch_attention(
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    shape: AttentionShape,
    qkv: [&CudaView<'_, f32>; 3],
    out: &mut CudaViewMut<'_, f32>,
    scores: &mut Scratch,
) -> Result<(), Error> {
    let AttentionShape {
        rows,
        heads,
        kv_heads,
        head_dim: hd,
        first,
        causal,
        keys,
    } = shape;
    let bad = |reason: String| Error::Driver {
        call: String::from("launch attention"),
        message: reason,
    };
    let [q, k, v] = qkv;
    let kv_len = keys * kv_heads * hd;
    let last_seen = if causal { first + rows } else { keys };
    if kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
        || q.len() < rows * heads * hd
        || out.len() < rows * heads * hd
        || k.len() < kv_len
        || v.len() < kv_len
        || last_seen > keys
    {
        return Err(bad(format!("inconsistent shapes {shape:?}")));
    }
    let int = |v: usize, what: &str| {
        i32::try_from(v).map_err(|_| bad(format!("{what} = {v} exceeds 32-bit indices")))
    };
    let (heads_i, kv_heads_i, hd_i) = (
        int(heads, "heads")?,
        int(kv_heads, "kv heads")?,
        int(hd, "head dim")?,
    );
    let (first_i, keys_i) = (int(first, "first position")?, int(keys, "keys")?);
    int(rows * heads, "query rows × heads")?;
    let causal_i = i32::from(causal);
    let scale = 1.0 / (hd as f32).sqrt();
    // Rows per launch, so that the scores of one launch fit in MAX_SCORES.
    let chunk = (MAX_SCORES / (heads * keys).max(1)).clamp(1, rows.max(1));
    scores.ensure(stream, chunk * heads * keys)?;
    let mut row0 = 0;
    while row0 < rows {
        let n = chunk.min(rows - row0);
        // Below `rows`, which fits in an i32 (checked above).
        let row_base = row0 as i32;
        let cfg = LaunchConfig {
            grid_dim: ((n * heads) as u32, 1, 1),
            block_dim: (ATTENTION_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = stream.launch_builder(&kernels.attention);
        args.arg(q)
            .arg(k)
            .arg(v)
            .arg(&mut *out)
            .arg(&mut scores.0)
            .arg(&row_base)
            .arg(&heads_i)
            .arg(&kv_heads_i)
            .arg(&hd_i)
            .arg(&first_i)
            .arg(&causal_i)
            .arg(&keys_i)
            .arg(&scale);
        // SAFETY: the parameters match the kernel's signature in order and type; the query and
        // output buffers hold rows × heads × hd numbers, the key and value buffers `keys` rows
        // of kv_heads × hd, the scores n × heads × keys; every row sees at most `keys`
        // positions, and heads is a multiple of kv_heads (all checked above).
        unsafe { args.launch(cfg) }.map_err(|e| Error::driver("launch attention", e))?;
        row0 += n;
    }
    Ok(())
}

/// Launches attention of `q`'s rows over a paged cache in device memory: `table` holds the
/// device addresses of the sequence's blocks, in order (its block table), and `at` is the layer
/// and the positions per block. The rows are read in place, in chunks of query rows whose scores
/// fit in `scores`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_paged_attention(
    stream: &Arc<CudaStream>,
    kernels: &Kernels,
    shape: AttentionShape,
    q: &CudaView<'_, f32>,
    table: &CudaSlice<u64>,
    at: (usize, usize),
    out: &mut CudaViewMut<'_, f32>,
    scores: &mut Scratch,
) -> Result<(), Error> {
    let AttentionShape {
        rows,
        heads,
        kv_heads,
        head_dim: hd,
        first,
        causal,
        keys,
    } = shape;
    let (layer, block_positions) = at;
    let bad = |reason: String| Error::Driver {
        call: String::from("launch paged attention"),
        message: reason,
    };
    let last_seen = if causal { first + rows } else { keys };
    if kv_heads == 0
        || block_positions == 0
        || !heads.is_multiple_of(kv_heads)
        || q.len() < rows * heads * hd
        || out.len() < rows * heads * hd
        || table.len() < keys.div_ceil(block_positions)
        || last_seen > keys
    {
        return Err(bad(format!(
            "inconsistent shapes {shape:?}, {} blocks of {block_positions}",
            table.len()
        )));
    }
    let int = |v: usize, what: &str| {
        i32::try_from(v).map_err(|_| bad(format!("{what} = {v} exceeds 32-bit indices")))
    };
    let (heads_i, kv_heads_i, hd_i) = (
        int(heads, "heads")?,
        int(kv_heads, "kv heads")?,
        int(hd, "head dim")?,
    );
    let (first_i, keys_i) = (int(first, "first position")?, int(keys, "keys")?);
    let (layer_i, bp_i) = (
        int(layer, "layer")?,
        int(block_positions, "block positions")?,
    );
    int(rows * heads, "query rows × heads")?;
    let causal_i = i32::from(causal);
    let scale = 1.0 / (hd as f32).sqrt();
    let chunk = (MAX_SCORES / (heads * keys).max(1)).clamp(1, rows.max(1));
    scores.ensure(stream, chunk * heads * keys)?;
    let mut row0 = 0;
    while row0 < rows {
        let n = chunk.min(rows - row0);
        let row_base = row0 as i32;
        let cfg = LaunchConfig {
            grid_dim: ((n * heads) as u32, 1, 1),
            block_dim: (ATTENTION_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = stream.launch_builder(&kernels.attention_paged);
        args.arg(q)
            .arg(table)
            .arg(&mut *out)
            .arg(&mut scores.0)
            .arg(&row_base)
            .arg(&heads_i)
            .arg(&kv_heads_i)
            .arg(&hd_i)
            .arg(&first_i)
            .arg(&causal_i)
            .arg(&keys_i)
            .arg(&scale)
            .arg(&layer_i)
            .arg(&bp_i);
        // SAFETY: the parameters match the kernel's signature in order and type; the query and
        // output views hold rows × heads × hd numbers; the table holds the address of every
        // block that a row's positions fall in, each block a live allocation of the storage's
        // block_numbers f32 laid out as `row_offset` says, for a layer below the cache's layers
        // (checked by the caller); the scores hold n × heads × keys numbers.
        unsafe { args.launch(cfg) }.map_err(|e| Error::driver("launch paged attention", e))?;
        row0 += n;
    }
    Ok(())
}

/// Uploads `w` unless an identical matrix is already on the device, and returns it.
pub(crate) fn upload<'m>(
    stream: &Arc<CudaStream>,
    weights: &'m mut HashMap<WeightKey, DeviceMatrix>,
    weight_bytes: &mut u64,
    w: &QMatrix<'_>,
) -> Result<&'m DeviceMatrix, Error> {
    let key = WeightKey {
        addr: w.data.as_ptr() as usize,
        len: w.data.len(),
        layout: w.layout,
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
        let matrix = upload_matrix(stream, w, print)?;
        *weight_bytes += matrix.bytes.len() as u64;
        weights.insert(key, matrix);
    }
    weights.get(&key).ok_or_else(|| Error::Driver {
        call: String::from("upload"),
        message: String::from("weight missing after upload"),
    })
}

/// Copies `w` to device memory in the layout of its kernel.
pub(crate) fn upload_matrix(
    stream: &Arc<CudaStream>,
    w: &QMatrix<'_>,
    fingerprint: Vec<u8>,
) -> Result<DeviceMatrix, Error> {
    let (layout, host) = device_layout(w)?;
    let bytes = stream
        .clone_htod(&host[..])
        .map_err(|e| Error::driver(format!("upload {} weight bytes", host.len()), e))?;
    Ok(DeviceMatrix {
        layout,
        bytes,
        rows: w.rows,
        cols: w.cols,
        fingerprint,
    })
}

/// The bytes a matrix has on the device, and their layout: the file's own bytes for the types
/// with a kernel, and the exact dequantised f32 numbers (as `nextok_kernels::dequant` computes them) for the
/// others. A matrix the CPU kernels hold in another layout (packed Q4_1) is turned back into the
/// file's bytes first, exactly.
fn device_layout<'a>(w: &QMatrix<'a>) -> Result<(DeviceLayout, Cow<'a, [u8]>), Error> {
    let bad = |reason: String| Error::BadMatrix {
        ty: w.ty,
        rows: w.rows,
        cols: w.cols,
        reason,
    };
    let file_bytes: Cow<'a, [u8]> = if w.layout == Layout::Gguf {
        Cow::Borrowed(w.data)
    } else {
        let rb = w.file_row_bytes();
        let mut bytes = vec![0u8; w.rows * rb];
        for (r, row) in bytes.chunks_exact_mut(rb.max(1)).enumerate() {
            w.file_row(r, row).map_err(|e| bad(e.to_string()))?;
        }
        Cow::Owned(bytes)
    };
    let layout = match w.ty {
        GgmlType::Q4_0 => DeviceLayout::Q4_0,
        GgmlType::Q4_1 => DeviceLayout::Q4_1,
        GgmlType::Q8_0 => DeviceLayout::Q8_0,
        GgmlType::F16 => DeviceLayout::F16,
        GgmlType::BF16 => DeviceLayout::BF16,
        GgmlType::F32 => DeviceLayout::F32,
        ty => {
            let mut numbers = vec![0.0f32; w.rows * w.cols];
            dequant::dequantize_row(ty, &file_bytes, &mut numbers)
                .map_err(|e| bad(e.to_string()))?;
            let bytes: Vec<u8> = numbers.iter().flat_map(|v| v.to_le_bytes()).collect();
            return Ok((DeviceLayout::F32, Cow::Owned(bytes)));
        }
    };
    Ok((layout, file_bytes))
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
        w.kernel_matrix()?;
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
        if self.device_storage(cache).is_some() {
            // A cache in this device's memory: the queries go in, attention reads the blocks
            // in place, and the output comes out.
            let q_dev = self.upload_buffer(q)?;
            let mut out_dev = self.alloc_buffer(out.len())?;
            self.attend_device(&q_dev, 0..n_rows, cache, layer, mask, heads, &mut out_dev)?;
            out.copy_from_slice(&self.download_buffer(&out_dev, 0..out.len())?);
            return Ok(());
        }
        // Every position a row sees must be in the cache: asking for the last one gives the
        // cache's own error when it is not (as on the CPU).
        cache.key(layer, keys.saturating_sub(1))?;
        self.attention_device(q, cache, layer, first, causal, keys, heads, out)
    }

    fn new_pool(
        &self,
        config: CacheConfig,
        budget_bytes: u64,
    ) -> Result<KvPool, nextok_model::Error> {
        let storage = DeviceStorage::new(self.stream.clone(), config);
        Ok(KvPool::with_storage(Box::new(storage), budget_bytes)?)
    }

    fn alloc(&self, len: usize) -> Result<ModelBuffer, nextok_model::Error> {
        self.alloc_buffer(len)
    }

    fn upload(&self, numbers: Vec<f32>) -> Result<ModelBuffer, nextok_model::Error> {
        self.upload_buffer(&numbers)
    }

    fn download(&self, buffer: ModelBuffer) -> Result<Vec<f32>, nextok_model::Error> {
        self.download_buffer(&buffer, 0..buffer.len())
    }

    fn embed(
        &self,
        table: QMatrix<'_>,
        tokens: &[u32],
        out: &mut ModelBuffer,
    ) -> Result<(), nextok_model::Error> {
        self.embed_device(table, tokens, out)
    }

    fn rms_norm(
        &self,
        x: &ModelBuffer,
        w: &[f32],
        eps: f32,
        out: &mut ModelBuffer,
    ) -> Result<(), nextok_model::Error> {
        self.rms_norm_device(x, None, w, eps, out)
    }

    fn rms_norm_rows(
        &self,
        x: &ModelBuffer,
        rows: &[usize],
        w: &[f32],
        eps: f32,
        out: &mut ModelBuffer,
    ) -> Result<(), nextok_model::Error> {
        self.rms_norm_device(x, Some(rows), w, eps, out)
    }

    fn add_bias(&self, x: &mut ModelBuffer, bias: &[f32]) -> Result<(), nextok_model::Error> {
        self.add_bias_device(x, bias)
    }

    fn add(&self, x: &mut ModelBuffer, y: &ModelBuffer) -> Result<(), nextok_model::Error> {
        self.add_device(x, y)
    }

    fn rope(
        &self,
        x: &mut ModelBuffer,
        table: &ModelBuffer,
        rotary: Rotary,
    ) -> Result<(), nextok_model::Error> {
        self.rope_device(x, table, rotary)
    }

    fn project(
        &self,
        w: QMatrix<'_>,
        x: &ModelBuffer,
        tokens: usize,
        out: &mut ModelBuffer,
    ) -> Result<(), nextok_model::Error> {
        self.project_device(w, x, tokens, out)
    }

    fn project_many(
        &self,
        ws: &[QMatrix<'_>],
        x: &ModelBuffer,
        tokens: usize,
        outs: &mut [&mut ModelBuffer],
    ) -> Result<(), nextok_model::Error> {
        if ws.len() != outs.len() {
            return Err(nextok_kernels::Error::BadLength {
                what: "the list of outputs",
                found: outs.len(),
                expected: ws.len(),
            }
            .into());
        }
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.project_device(*w, x, tokens, out)?;
        }
        Ok(())
    }

    fn project_swiglu(
        &self,
        gate: QMatrix<'_>,
        up: QMatrix<'_>,
        x: &ModelBuffer,
        tokens: usize,
        gate_out: &mut ModelBuffer,
        up_out: &mut ModelBuffer,
    ) -> Result<(), nextok_model::Error> {
        self.project_device(gate, x, tokens, gate_out)?;
        self.project_device(up, x, tokens, up_out)?;
        self.silu_mul_device(gate_out, up_out, tokens * gate.rows)
    }

    fn write_kv(
        &self,
        cache: &mut KvCache,
        layer: usize,
        first: usize,
        keys: &ModelBuffer,
        values: &ModelBuffer,
        rows: Range<usize>,
    ) -> Result<(), nextok_model::Error> {
        self.write_kv_device(cache, layer, first, keys, values, rows)
    }

    fn attend(
        &self,
        q: &ModelBuffer,
        rows: Range<usize>,
        cache: &KvCache,
        layer: usize,
        mask: Mask,
        heads: usize,
        out: &mut ModelBuffer,
    ) -> Result<(), nextok_model::Error> {
        self.attend_device(q, rows, cache, layer, mask, heads, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nextok_gguf::GgufFile;
    use nextok_kernels::QMat;
    use nextok_model::testing::RandomLlama;

    /// The bytes and shape of `blk.0.ffn_down.weight` of a random model of type `ty`.
    fn matrix(ty: GgmlType) -> (GgufFile, usize, usize) {
        let spec = RandomLlama {
            layers: 1,
            d_model: 256,
            ffn_dim: 512,
            weight_type: ty,
            ..RandomLlama::default()
        };
        let file = GgufFile::from_bytes(spec.to_gguf(9)).expect("random model");
        let info = file
            .tensors()
            .iter()
            .find(|t| t.name == "blk.0.ffn_down.weight")
            .expect("tensor");
        let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
        (file, rows, cols)
    }

    fn data(file: &GgufFile) -> &[u8] {
        let info = file
            .tensors()
            .iter()
            .find(|t| t.name == "blk.0.ffn_down.weight")
            .expect("tensor");
        file.view(info).data
    }

    #[test]
    fn the_device_gets_the_files_blocks_even_from_packed_rows() {
        for (ty, layout) in [
            (GgmlType::Q4_0, DeviceLayout::Q4_0),
            (GgmlType::Q4_1, DeviceLayout::Q4_1),
            (GgmlType::Q8_0, DeviceLayout::Q8_0),
            (GgmlType::F16, DeviceLayout::F16),
            (GgmlType::BF16, DeviceLayout::BF16),
            (GgmlType::F32, DeviceLayout::F32),
        ] {
            let (file, rows, cols) = matrix(ty);
            let bytes = data(&file);
            let w = QMatrix {
                ty,
                rows,
                cols,
                layout: Layout::Gguf,
                data: bytes,
            };
            let (l, b) = device_layout(&w).expect("layout");
            assert_eq!((l, &b[..]), (layout, bytes), "{ty:?} in the file's layout");
            if QMat::packable(ty) {
                let packed = QMat::new(ty, rows, cols, bytes)
                    .and_then(|m| m.pack())
                    .expect("packs");
                assert_ne!(&packed[..], bytes, "{ty:?}: packing changed nothing");
                let w = QMatrix {
                    layout: Layout::Packed,
                    data: &packed,
                    ..w
                };
                let (l, b) = device_layout(&w).expect("layout");
                assert_eq!((l, &b[..]), (layout, bytes), "{ty:?} unpacked at upload");
            }
        }
    }

    #[test]
    fn types_without_a_kernel_are_dequantised_exactly_at_upload() {
        for ty in [
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
        ] {
            let (file, rows, cols) = matrix(ty);
            let bytes = data(&file);
            let w = QMatrix {
                ty,
                rows,
                cols,
                layout: Layout::Gguf,
                data: bytes,
            };
            let (l, b) = device_layout(&w).expect("layout");
            assert_eq!(l, DeviceLayout::F32);
            let mut expected = vec![0.0f32; rows * cols];
            dequant::dequantize_row(ty, bytes, &mut expected).expect("dequantise");
            let got: Vec<f32> = b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            assert_eq!(got, expected, "{ty:?}");
        }
    }
}
