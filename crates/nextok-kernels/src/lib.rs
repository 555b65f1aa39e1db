//! CPU kernels for the matrix products of a forward pass: quantised weights, f32 activations,
//! and the same bits on every instruction set and every thread count.
//!
//! # Should I be using this crate?
//!
//! If you run a model with `nextok-model`, it uses this crate for you. Use it directly to multiply
//! f32 activations by a weight matrix stored in a GGML block format (Q4_0, Q4_1, Q8_0 with fused
//! kernels; Q4_K, Q5_K, Q6_K with fused AVX-512 and AVX2 kernels that give the bits of the
//! dequantise-then-dot path, which every other type [`dequant`] can dequantise goes through).
//!
//! # The arithmetic, and why it is fixed
//!
//! Each output number is one dot product computed by one thread in one fixed order, and the
//! AVX-512, AVX2 and portable versions perform exactly the same operations, so they agree to the
//! last bit, and so does a product of one token, of many, split over any number of threads.
//! Weights are never stored dequantised.
//!
//! - **Q4_1** (most weights of the default model): `Σ_b Σ_i (d_b · q_i + m_b) · x_i` is computed
//!   as `Σ_b d_b · S_b + Σ_b m_b · X_b`, where `S_b` is the sum of the products of the 4-bit
//!   integers `q_i` with the block's activations in fixed point ([`portable::fixed_point`]:
//!   integers on a power-of-two scale, exact for every activation within a factor 64 of the
//!   block's largest), summed exactly in integers and rounded once, and `X_b` is the block's
//!   activation sum; both are computed once per token row and shared by every weight row.
//!   [`portable::q4_1_row`] is the definition. The kernels keep 16 weight rows in the lanes of a
//!   register ([`packed`] stores Q4_1 matrices in tiles of 16 rows) and multiply the nibbles, as
//!   bytes, by the four bytes of each activation integer with 8-bit dot-product instructions
//!   (AVX-512 VNNI `vpdpbusd`; `vpmaddubsw` and `vpmaddwd` on AVX2): four products per lane and
//!   instruction, no shift or table lookup per element. That made one-token products (decode)
//!   about 1.2× faster than the f32 route's shift, table lookup and fused multiply-add per 16
//!   weights, and its sums more accurate (one rounding per block where it had 32).
//! - **Q8_0** (the default model's output layer, the tied embedding): `Σ_b d_b · S_b` the same
//!   way, `S_b` the products of the signed bytes with the activations (fused multiply-adds in
//!   element order). [`portable::q8_0_row`] is the definition. [`packed`] stores Q8_0 matrices in
//!   tiles of 16 rows too: per 16 weights, one widening load, one conversion and one fused
//!   multiply-add per token row (expanding every weight to `d · q` first cost a multiply more and
//!   a reduction tree per row), and a batch's token rows share each load of a tile.
//! - **Q4_0**: 32 lane accumulators, lane `l` taking element `l` of every block, each block
//!   expanded once into f32 weights in registers (`d · (q − 8)`) and used for a tile of up to 8
//!   token rows with fused multiply-adds, then a fixed reduction tree.
//! - Other types: 16 lanes over dequantised numbers, then a fixed tree.
//!
//! Token rows are processed in tiles of up to 8 against each weight block, which is what makes
//! prefill cheaper per token than decode.
//!
//! # Example
//!
//! ```
//! use nextok_gguf::GgmlType;
//! use nextok_kernels::{matmul, Isa, QMat, ThreadPool};
//!
//! // Two Q8_0 rows of 32 weights: row 0 is all 1.0 (scale 1.0 = f16 0x3c00, q = 1), row 1 all
//! // 0.5 (scale 0.5 = f16 0x3800, q = 1).
//! let mut data = Vec::new();
//! for scale in [0x3c00u16, 0x3800] {
//!     data.extend_from_slice(&scale.to_le_bytes());
//!     data.extend_from_slice(&[1u8; 32]);
//! }
//! let w = QMat::new(GgmlType::Q8_0, 2, 32, &data)?;
//! let x: Vec<f32> = (0..32).map(|i| i as f32).collect(); // one token
//! let mut out = [0.0f32; 2];
//! matmul(&ThreadPool::new(1), Isa::detect(), w, &x, 1, &mut out)?;
//! assert_eq!(out, [496.0, 248.0]);
//! # Ok::<(), nextok_kernels::Error>(())
//! ```

pub mod dequant;
#[cfg(target_arch = "x86_64")]
mod kquant;
pub mod packed;
mod pool;
pub mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_attention;

pub use pool::ThreadPool;

use nextok_gguf::GgmlType;
use portable::{BLOCK_LANES, LANES};

/// Errors: a product whose shapes or types do not fit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The weight type has no kernel and cannot be dequantised.
    #[error("no kernel for weights of type {ty:?}")]
    UnsupportedType {
        /// The type.
        ty: GgmlType,
    },
    /// The matrix's bytes, rows and columns disagree.
    #[error("a {rows} × {cols} matrix of {ty:?} needs {expected} bytes, got {found}: {reason}")]
    BadMatrix {
        /// The type.
        ty: GgmlType,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        found: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The activations or the output have the wrong length.
    #[error("{what} has {found} numbers, expected {expected}")]
    BadLength {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        found: usize,
        /// The length needed.
        expected: usize,
    },
    /// Bytes that cannot be dequantised as asked: an unsupported type, or a byte count that does
    /// not match the element count.
    #[error("cannot dequantise {elements} elements of {ty:?} from {bytes} bytes: {reason}")]
    Dequantize {
        /// The tensor type.
        ty: GgmlType,
        /// How many elements were asked for.
        elements: u64,
        /// How many bytes were given.
        bytes: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The instruction set asked for is not available on this CPU.
    #[error("the {isa:?} kernels cannot run on this CPU")]
    IsaUnavailable {
        /// The instruction set.
        isa: Isa,
    },
}

/// The instruction set a kernel uses. All of them give identical results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Plain Rust, on any CPU.
    Portable,
    /// AVX2 with FMA and F16C (x86-64).
    Avx2,
    /// AVX-512F with BW, VNNI, FMA and F16C (x86-64: Ice Lake, Sapphire Rapids, Zen 4 and
    /// later; a CPU with AVX-512F but not VNNI, such as Skylake-SP, runs the AVX2 kernels).
    Avx512,
}

impl Isa {
    /// The fastest instruction set this CPU has. `NEXTOK_ISA=portable|avx2|avx512` chooses a
    /// slower one (for comparisons); a faster one than the CPU has is ignored.
    pub fn detect() -> Isa {
        let best = [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|isa| isa.is_available())
            .unwrap_or(Isa::Portable);
        let wanted = match std::env::var("NEXTOK_ISA").ok().as_deref() {
            Some("portable") => Isa::Portable,
            Some("avx2") => Isa::Avx2,
            Some("avx512") => Isa::Avx512,
            _ => return best,
        };
        if wanted.is_available() {
            wanted
        } else {
            best
        }
    }

    /// Whether this CPU can run the instruction set.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every instruction set this CPU can run.
    pub fn available() -> Vec<Isa> {
        [Isa::Portable, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .filter(|isa| isa.is_available())
            .collect()
    }
}

/// How the rows of a [`QMat`] are laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// The blocks as the GGUF file stores them.
    Gguf,
    /// Q4_1 or Q8_0 blocks in the [`packed`] layout (made by [`QMat::pack`]): the same numbers,
    /// fewer instructions per weight, the same bits from every kernel.
    Packed,
}

/// A weight matrix in a GGML block format: `rows` rows of `cols` numbers, row after row.
#[derive(Debug, Clone, Copy)]
pub struct QMat<'a> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    layout: Layout,
    data: &'a [u8],
}

impl<'a> QMat<'a> {
    /// Checks that `data` holds exactly `rows` rows of `cols` numbers of type `ty`.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, Error> {
        if !dequant::is_supported(ty) {
            return Err(Error::UnsupportedType { ty });
        }
        let be = ty.block_elements() as usize;
        let expected = (cols / be) * ty.block_bytes() as usize * rows;
        let fail = |reason| Error::BadMatrix {
            ty,
            rows,
            cols,
            expected,
            found: data.len(),
            reason,
        };
        if !cols.is_multiple_of(be) {
            return Err(fail("a row is not a whole number of blocks"));
        }
        if data.len() != expected {
            return Err(fail("the byte count does not match the shape"));
        }
        Ok(QMat {
            ty,
            rows,
            cols,
            layout: Layout::Gguf,
            data,
        })
    }

    /// Checks that `data` holds exactly `rows` packed rows of `cols` numbers (as [`QMat::pack`]
    /// makes them: tiles of 16 rows (the last one padded), of 320 bytes per block of 32 for
    /// Q4_1 and 544 for Q8_0).
    pub fn new_packed(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<Self, Error> {
        if !Self::packable(ty) {
            return Err(Error::UnsupportedType { ty });
        }
        let expected = packed_bytes(ty, rows, cols);
        let fail = |reason| Error::BadMatrix {
            ty,
            rows,
            cols,
            expected,
            found: data.len(),
            reason,
        };
        if !cols.is_multiple_of(32) {
            return Err(fail("a row is not a whole number of blocks"));
        }
        if data.len() != expected {
            return Err(fail("the byte count does not match the packed shape"));
        }
        Ok(QMat {
            ty,
            rows,
            cols,
            layout: Layout::Packed,
            data,
        })
    }

    /// Whether [`QMat::pack`] has a packed layout for matrices of this type (Q4_1, Q8_0).
    pub fn packable(ty: GgmlType) -> bool {
        matches!(ty, GgmlType::Q4_1 | GgmlType::Q8_0)
    }

    /// The matrix's bytes in the [`packed`] layout, for [`QMat::new_packed`]. The numbers, and
    /// every product's bits, are unchanged. A type without a packed layout, or a matrix that is
    /// already packed, is an error.
    pub fn pack(&self) -> Result<Vec<u8>, Error> {
        let mut out = vec![0u8; self.packed_len()];
        self.pack_into(&mut out)?;
        Ok(out)
    }

    /// Bytes of the matrix in the [`packed`] layout (whether or not its type has one).
    pub fn packed_len(&self) -> usize {
        packed_bytes(self.ty, self.rows, self.cols)
    }

    /// [`QMat::pack`] into `out`, which must hold exactly [`QMat::packed_len`] bytes.
    pub fn pack_into(&self, out: &mut [u8]) -> Result<(), Error> {
        if !Self::packable(self.ty) || self.layout != Layout::Gguf {
            return Err(Error::UnsupportedType { ty: self.ty });
        }
        if out.len() != self.packed_len() {
            return Err(Error::BadLength {
                what: "the packed output",
                found: out.len(),
                expected: self.packed_len(),
            });
        }
        let blocks = self.cols / 32;
        for (t, dst) in out.chunks_exact_mut(self.tile_bytes().max(1)).enumerate() {
            let first = t * TILE_ROWS;
            let n = (self.rows - first).min(TILE_ROWS);
            let rows: [&[u8]; TILE_ROWS] =
                std::array::from_fn(|i| if i < n { self.row(first + i) } else { &[] });
            pack_tile(self.ty, &rows[..n], blocks, dst);
        }
        Ok(())
    }

    /// The layout of the rows.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Writes row `r` as the GGUF file stores it (`out` holds one row of the file's bytes):
    /// a copy, or for a packed matrix the exact inverse of the packing.
    ///
    /// # Panics
    /// If `r` is not a row or `out` has the wrong length.
    pub fn gguf_row(&self, r: usize, out: &mut [u8]) {
        match self.layout {
            Layout::Gguf => out.copy_from_slice(self.row(r)),
            Layout::Packed if self.ty == GgmlType::Q4_1 => {
                packed::unpack_q4_1_row(self.tile(r / TILE_ROWS), r % TILE_ROWS, out)
            }
            Layout::Packed => packed::unpack_q8_0_row(self.tile(r / TILE_ROWS), r % TILE_ROWS, out),
        }
    }

    /// The storage type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Numbers per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of one row of the file's layout (a packed matrix's rows are tiles).
    fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_elements() as usize * self.ty.block_bytes() as usize
    }

    /// Bytes of one packed tile of 16 rows of this matrix's type (Q4_1 or Q8_0).
    fn tile_bytes(&self) -> usize {
        self.cols / 32 * tile_block_bytes(self.ty)
    }

    /// Tile `t` of a packed matrix.
    fn tile(&self, t: usize) -> &'a [u8] {
        let tb = self.tile_bytes();
        &self.data[t * tb..(t + 1) * tb]
    }

    /// Row `r` of a matrix in the file's layout.
    fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }
}

/// Rows in one tile of a packed matrix (Q4_1 and Q8_0 alike).
const TILE_ROWS: usize = packed::Q4_1_TILE_ROWS;
const _: () = assert!(packed::Q4_1_TILE_ROWS == packed::Q8_0_TILE_ROWS);

/// Whether the products of this type run on tiles of 16 rows (packed, or packed on the fly
/// from the file's rows): Q4_1 and Q8_0.
fn tiled(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_1 | GgmlType::Q8_0)
}

/// Bytes of one block of a packed tile (Q8_0's for every type but Q4_1).
fn tile_block_bytes(ty: GgmlType) -> usize {
    if ty == GgmlType::Q4_1 {
        packed::Q4_1_TILE_BLOCK_BYTES
    } else {
        packed::Q8_0_TILE_BLOCK_BYTES
    }
}

/// Packs up to 16 file rows of a tiled type into one tile.
fn pack_tile(ty: GgmlType, rows: &[&[u8]], blocks: usize, out: &mut [u8]) {
    if ty == GgmlType::Q4_1 {
        packed::pack_q4_1_tile(rows, blocks, out)
    } else {
        packed::pack_q8_0_tile(rows, blocks, out)
    }
}

/// Bytes of a `rows` × `cols` matrix in the packed layout of its type: whole tiles of 16 rows
/// (for a type without a packed layout, as if it were Q8_0).
fn packed_bytes(ty: GgmlType, rows: usize, cols: usize) -> usize {
    rows.div_ceil(TILE_ROWS) * (cols / 32) * tile_block_bytes(ty)
}

/// The row count each thread's share of a product is rounded up to: whole tiles for Q4_1 and
/// Q8_0, so that no tile is computed by two threads, and whole token tiles otherwise.
fn share_align(w: &QMat<'_>) -> usize {
    if tiled(w.ty) {
        TILE_ROWS
    } else {
        TILE
    }
}

/// Token rows computed together against one weight row: the block is expanded once for all.
const TILE: usize = 8;
/// Tokens whose activations are kept hot while a thread walks its rows (prefill): one tile, so
/// that they stay in L1 (8 × 576 numbers = 18 KB; 32 tokens measured 20% slower).
const TOKEN_BLOCK: usize = 8;

/// `out[t · rows + r] = Σ_k W[r, k] · x[t · cols + k]` for every token row `t < tokens`, split
/// over the pool's threads by rows. The result does not depend on the pool's size or the ISA.
pub fn matmul(
    pool: &ThreadPool,
    isa: Isa,
    w: QMat<'_>,
    x: &[f32],
    tokens: usize,
    out: &mut [f32],
) -> Result<(), Error> {
    check(isa, &w, x, tokens, out)?;
    let parts = pool.threads();
    let per = w.rows.div_ceil(parts).next_multiple_of(share_align(&w));
    let out_ptr = SyncPtr(out.as_mut_ptr());
    pool.run(|part| {
        let start = (part * per).min(w.rows);
        let end = ((part + 1) * per).min(w.rows);
        // SAFETY: `check` validated every length; each part writes only the output elements of
        // its own rows, so no two threads write the same element, and `out` outlives `run`.
        unsafe { rows_kernel(isa, &w, x, tokens, start..end, out_ptr) };
    });
    Ok(())
}

/// Several products of the same activations in one dispatch of the pool: `outs[i] = ws[i] · x`
/// for every matrix, each split over the threads by rows as [`matmul`] splits it, so every
/// output gets exactly the bits [`matmul`] gives it. A decode step uses it for the query, key
/// and value projections, which share their input: one wake-up of the pool instead of three.
/// At most [`MAX_GROUPED`] matrices, so that the call allocates nothing.
pub fn matmul_many(
    pool: &ThreadPool,
    isa: Isa,
    ws: &[QMat<'_>],
    x: &[f32],
    tokens: usize,
    outs: &mut [&mut [f32]],
) -> Result<(), Error> {
    if ws.len() != outs.len() {
        return Err(Error::BadLength {
            what: "the list of outputs",
            found: outs.len(),
            expected: ws.len(),
        });
    }
    if ws.len() > MAX_GROUPED {
        return Err(Error::BadLength {
            what: "the list of matrices",
            found: ws.len(),
            expected: MAX_GROUPED,
        });
    }
    for (w, out) in ws.iter().zip(outs.iter()) {
        check(isa, w, x, tokens, out)?;
    }
    let parts = pool.threads();
    let mut ptrs = [SyncPtr(std::ptr::null_mut()); MAX_GROUPED];
    for (p, o) in ptrs.iter_mut().zip(outs.iter_mut()) {
        *p = SyncPtr(o.as_mut_ptr());
    }
    pool.run(|part| {
        for (w, &out) in ws.iter().zip(&ptrs) {
            let per = w.rows.div_ceil(parts).next_multiple_of(share_align(w));
            let start = (part * per).min(w.rows);
            let end = ((part + 1) * per).min(w.rows);
            // SAFETY: `check` validated every length; each part writes only the output elements
            // of its own rows of each matrix, and the outputs outlive `run`.
            unsafe { rows_kernel(isa, w, x, tokens, start..end, out) };
        }
    });
    Ok(())
}

/// The most matrices one [`matmul_many`] call takes.
pub const MAX_GROUPED: usize = 8;

/// The SwiGLU feed-forward input in one dispatch: `gate_out = silu(gate · x) ⊙ (up · x)`, where
/// `silu(g) = g / (1 + e^−g)`. Each thread computes its rows of both products (the bits of
/// [`matmul`]) and combines them while they are still in its cache, so the gate and up products
/// are never read back in a separate pass. `up_out` receives `up · x`.
#[allow(clippy::too_many_arguments)] // two matrices and two outputs, each named for its role
pub fn matmul_swiglu(
    pool: &ThreadPool,
    isa: Isa,
    gate: QMat<'_>,
    up: QMat<'_>,
    x: &[f32],
    tokens: usize,
    gate_out: &mut [f32],
    up_out: &mut [f32],
) -> Result<(), Error> {
    check(isa, &gate, x, tokens, gate_out)?;
    check(isa, &up, x, tokens, up_out)?;
    if gate.rows != up.rows {
        return Err(Error::BadLength {
            what: "the up projection's rows",
            found: up.rows,
            expected: gate.rows,
        });
    }
    let rows = gate.rows;
    let parts = pool.threads();
    let per = rows.div_ceil(parts).next_multiple_of(share_align(&gate));
    let (g_ptr, u_ptr) = (SyncPtr(gate_out.as_mut_ptr()), SyncPtr(up_out.as_mut_ptr()));
    pool.run(|part| {
        let start = (part * per).min(rows);
        let end = ((part + 1) * per).min(rows);
        // SAFETY: `check` validated every length; each part reads and writes only the elements
        // of its own rows, and the outputs outlive `run`.
        unsafe {
            rows_kernel(isa, &gate, x, tokens, start..end, g_ptr);
            rows_kernel(isa, &up, x, tokens, start..end, u_ptr);
            for t in 0..tokens {
                for r in start..end {
                    let g = &mut *g_ptr.0.add(t * rows + r);
                    *g = silu_times(*g, *u_ptr.0.add(t * rows + r));
                }
            }
        }
    });
    Ok(())
}

/// `silu(g) · u = g / (1 + e^−g) · u`, the one formula every SwiGLU path uses.
#[inline]
pub fn silu_times(g: f32, u: f32) -> f32 {
    g / (1.0 + (-g).exp()) * u
}

/// [`matmul`] on the calling thread alone.
pub fn matmul_serial(
    isa: Isa,
    w: QMat<'_>,
    x: &[f32],
    tokens: usize,
    out: &mut [f32],
) -> Result<(), Error> {
    check(isa, &w, x, tokens, out)?;
    // SAFETY: lengths checked; one thread writes everything.
    unsafe { rows_kernel(isa, &w, x, tokens, 0..w.rows, SyncPtr(out.as_mut_ptr())) };
    Ok(())
}

fn check(isa: Isa, w: &QMat<'_>, x: &[f32], tokens: usize, out: &[f32]) -> Result<(), Error> {
    if !isa.is_available() {
        return Err(Error::IsaUnavailable { isa });
    }
    if x.len() != tokens * w.cols {
        return Err(Error::BadLength {
            what: "the activations",
            found: x.len(),
            expected: tokens * w.cols,
        });
    }
    if out.len() != tokens * w.rows {
        return Err(Error::BadLength {
            what: "the output",
            found: out.len(),
            expected: tokens * w.rows,
        });
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
// SAFETY: used only to write disjoint elements from different threads (see `matmul`).
unsafe impl Sync for SyncPtr {}
// SAFETY: as above.
unsafe impl Send for SyncPtr {}

/// Computes rows `rows` for every token and writes them to `out[t · w.rows + r]`.
///
/// # Safety
/// `x` holds `tokens · w.cols` numbers, `out` points to `tokens · w.rows` writable numbers, and no other thread writes these rows.
unsafe fn rows_kernel(
    isa: Isa,
    w: &QMat<'_>,
    x: &[f32],
    tokens: usize,
    rows: std::ops::Range<usize>,
    out: SyncPtr,
) {
    let cols = w.cols;
    let mut scratch = Vec::new();
    if tiled(w.ty) {
        // SAFETY: the function's contract.
        unsafe { tiled_chunks(isa, w, x, tokens, rows, out) };
        return;
    }
    for t0 in (0..tokens).step_by(TOKEN_BLOCK) {
        let t1 = (t0 + TOKEN_BLOCK).min(tokens);
        let mut r = rows.start;
        // K-quants (Q4_K, Q5_K, Q6_K) on AVX-512 or AVX2: two or four rows at a time, so that
        // several chains of fused multiply-adds are in flight per token.
        #[cfg(target_arch = "x86_64")]
        if matches!(isa, Isa::Avx512 | Isa::Avx2)
            && matches!(w.ty, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K)
        {
            // SAFETY: the ISA is available (checked in `check`), the matrix was validated, and
            // this part owns the rows (the function's contract).
            r = unsafe { kquant::pairs(isa, w, x, t0..t1, r..rows.end, out) };
        }
        for r in r..rows.end {
            let row = w.row(r);
            let mut t = t0;
            while t < t1 {
                let n = (t1 - t).min(TILE);
                let mut res = [0.0f32; TILE];
                macro_rules! tile {
                    ($n:literal) => {{
                        let xs: [&[f32]; $n] =
                            std::array::from_fn(|i| &x[(t + i) * cols..(t + i + 1) * cols]);
                        let r: [f32; $n] =
                            row_dot::<$n>(isa, w.ty, w.layout, row, xs, &mut scratch);
                        res[..$n].copy_from_slice(&r);
                    }};
                }
                match n {
                    8 => tile!(8),
                    7 => tile!(7),
                    6 => tile!(6),
                    5 => tile!(5),
                    4 => tile!(4),
                    3 => tile!(3),
                    2 => tile!(2),
                    _ => tile!(1),
                }
                for (i, &v) in res[..n].iter().enumerate() {
                    // SAFETY: in bounds by the function's contract; this thread owns row `r`.
                    unsafe { *out.0.add((t + i) * w.rows + r) = v };
                }
                t += n;
            }
        }
    }
}

/// Weight bytes of a thread's rows that every token block of a group multiplies before the
/// thread moves on to its next rows: a part of L2 (1 MB a core here, 256 KB or more on most
/// x86 cores), so that only the first token block reads them from memory.
const CHUNK_BYTES: usize = 128 * 1024;
/// Token rows whose activations a group keeps in L2 while its chunks of weight rows pass (32 of
/// 1,536 numbers are 192 KB): a batched decode step of up to 32 sequences is one group.
const TOKEN_GROUP: usize = 4 * TOKEN_BLOCK;

/// Q4_1 or Q8_0 rows `rows` against every token row, as [`tiled_rows`] computes them, in an
/// order that reads each weight from memory once per group of [`TOKEN_GROUP`] token rows:
/// chunks of whole tiles ([`CHUNK_BYTES`]), each multiplied with every token block of the group
/// while it is in cache. With one token block (decode) it is one `tiled_rows` call. A batched
/// decode step of 16 or 32 sequences would otherwise stream the 32 MB output layer from memory
/// two or four times. The order of the work never changes a number: each output is one tile
/// kernel's fixed operations on its own token row.
///
/// # Safety
/// As for `rows_kernel`.
unsafe fn tiled_chunks(
    isa: Isa,
    w: &QMat<'_>,
    x: &[f32],
    tokens: usize,
    rows: std::ops::Range<usize>,
    out: SyncPtr,
) {
    if tokens == 0 {
        return;
    }
    PREPARED.with(|cell| match cell.try_borrow_mut() {
        // SAFETY: the function's contract.
        Ok(mut prep) => unsafe { tiled_prepared(isa, w, x, &mut prep, tokens, rows, out) },
        // Not reached (a product does not start another on its own thread), but correct.
        Err(_) => {
            let mut prep = Prepared::EMPTY;
            // SAFETY: the function's contract.
            unsafe { tiled_prepared(isa, w, x, &mut prep, tokens, rows, out) }
        }
    });
}

/// [`tiled_chunks`] with this thread's [`Prepared`], filled for each group of token rows just
/// before its products, while it fits in cache.
///
/// # Safety
/// As for `rows_kernel`.
unsafe fn tiled_prepared(
    isa: Isa,
    w: &QMat<'_>,
    x: &[f32],
    prep: &mut Prepared,
    tokens: usize,
    rows: std::ops::Range<usize>,
    out: SyncPtr,
) {
    let mut scratch = Vec::new();
    if tokens <= TOKEN_BLOCK {
        prep.fill(isa, w, x, 0..tokens);
        // SAFETY: the function's contract.
        unsafe { tiled_rows(isa, w, x, prep, 0..tokens, rows, out, &mut scratch) };
        return;
    }
    let chunk_rows = (CHUNK_BYTES / w.tile_bytes().max(1)).max(1) * TILE_ROWS;
    for g0 in (0..tokens).step_by(TOKEN_GROUP) {
        let g1 = (g0 + TOKEN_GROUP).min(tokens);
        prep.fill(isa, w, x, g0..g1);
        let mut start = rows.start;
        while start < rows.end {
            // Chunks end on tile boundaries, so that no tile is cut.
            let end = (start / TILE_ROWS * TILE_ROWS + chunk_rows).min(rows.end);
            for t0 in (g0..g1).step_by(TOKEN_BLOCK) {
                let t1 = (t0 + TOKEN_BLOCK).min(g1);
                // SAFETY: the function's contract; `start..end` lies within `rows`.
                unsafe { tiled_rows(isa, w, x, prep, t0..t1, start..end, out, &mut scratch) };
            }
            start = end;
        }
    }
}

/// One token row's activations as the SIMD Q4_1 kernels read them, computed once per product
/// and shared by all its weight rows: the blocks in fixed point
/// (`portable::fixed_point_digits`: 32 words of digits and one scale per block) and the block
/// sums (`portable::block_sums`).
#[derive(Clone, Copy)]
pub(crate) struct Q4_1Act<'a> {
    pub(crate) digits: &'a [i32],
    pub(crate) scales: &'a [f32],
    pub(crate) sums: &'a [f32],
}

/// What a Q4_1 product needs of its token rows besides the numbers, computed once per product
/// (and thread) and shared by all its weight rows and chunks: each row's block sums
/// (`portable::block_sums`), and for the SIMD kernels its blocks in fixed point
/// (`portable::fixed_point_digits`). Empty for other types. Each thread keeps one, whose
/// buffers only grow (see [`PREPARED`]): a prefill's activations would otherwise be fresh pages
/// of memory for every product.
struct Prepared {
    blocks: usize,
    /// The token rows prepared: `tokens.start` is at index 0.
    tokens: std::ops::Range<usize>,
    sums: Vec<f32>,
    scales: Vec<f32>,
    digits: Vec<i32>,
}

thread_local! {
    /// This thread's [`Prepared`], reused by every product it computes.
    static PREPARED: std::cell::RefCell<Prepared> = const {
        std::cell::RefCell::new(Prepared::EMPTY)
    };
}

/// Words between two token rows' digits in a [`Prepared`]: a row's `32 · blocks`, and 16 more
/// (64 bytes), so that the rows a tile kernel reads together do not fall in the same few sets
/// of the L1 cache (a row of 1,536 numbers is 6 KB of digits: 1.5 × 4 KB).
fn digit_stride(blocks: usize) -> usize {
    32 * blocks + 16
}

/// Grows `v` to at least `len` elements; the ones it had keep their values, which the caller
/// overwrites.
fn at_least<T: Copy + Default>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize(len, T::default());
    }
}

impl Prepared {
    /// Nothing prepared, no buffers.
    const EMPTY: Prepared = Prepared {
        blocks: 0,
        tokens: 0..0,
        sums: Vec::new(),
        scales: Vec::new(),
        digits: Vec::new(),
    };

    /// Computes what `w` needs of the token rows `tokens` of `x`.
    fn fill(&mut self, isa: Isa, w: &QMat<'_>, x: &[f32], tokens: std::ops::Range<usize>) {
        let q4_1 = w.ty == GgmlType::Q4_1;
        let (cols, blocks) = (w.cols, w.cols / 32);
        let n = if q4_1 { tokens.len() } else { 0 };
        let fixed = q4_1 && isa != Isa::Portable;
        let first = tokens.start;
        self.blocks = blocks;
        self.tokens = first..first + n;
        at_least(&mut self.sums, n * blocks);
        if fixed {
            at_least(&mut self.scales, n * blocks);
            at_least(&mut self.digits, digit_stride(blocks) * n);
        }
        for t in 0..n {
            let xt = &x[(first + t) * cols..(first + t + 1) * cols];
            let st = &mut self.sums[t * blocks..(t + 1) * blocks];
            let (sc, dg) = if fixed {
                (
                    &mut self.scales[t * blocks..(t + 1) * blocks],
                    &mut self.digits[digit_stride(blocks) * t..][..32 * blocks],
                )
            } else {
                (&mut [][..], &mut [][..])
            };
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the ISA is available (checked in `check`); `xt` has `32 · blocks`
                // numbers, `st` and `sc` `blocks` and `dg` `32 · blocks`.
                Isa::Avx512 => unsafe { x86::q4_1_prepare_avx512(xt, st, sc, dg) },
                _ => {
                    portable::block_sums(xt, st);
                    if fixed {
                        portable::fixed_point_digits(xt, sc, dg);
                    }
                }
            }
        }
    }

    /// Token row `t`'s block sums (empty for other types than Q4_1).
    fn sums(&self, t: usize) -> &[f32] {
        if !self.tokens.contains(&t) {
            return &[];
        }
        let i = t - self.tokens.start;
        self.sums
            .get(i * self.blocks..(i + 1) * self.blocks)
            .unwrap_or(&[])
    }

    /// Token row `t` as the SIMD Q4_1 kernels read it.
    fn act(&self, t: usize) -> Q4_1Act<'_> {
        let (b, i) = if self.tokens.contains(&t) {
            (self.blocks, t - self.tokens.start)
        } else {
            (0, 0)
        };
        Q4_1Act {
            digits: self
                .digits
                .get(digit_stride(b) * i..)
                .and_then(|d| d.get(..32 * b))
                .unwrap_or(&[]),
            scales: self.scales.get(i * b..(i + 1) * b).unwrap_or(&[]),
            sums: self.sums(t),
        }
    }
}

/// Q4_1 or Q8_0 rows `rows` against token rows `tokens`, by `portable::q4_1_row`'s or
/// `portable::q8_0_row`'s arithmetic: the packed layout's tiles of 16 rows (the file's rows are
/// packed into `scratch` one tile at a time first), each against up to 8 token rows; the
/// portable code takes the file's rows one by one. Writes `out[t · w.rows + r]`.
///
/// # Safety
/// As for `rows_kernel`.
#[allow(clippy::too_many_arguments)]
unsafe fn tiled_rows(
    isa: Isa,
    w: &QMat<'_>,
    x: &[f32],
    prep: &Prepared,
    tokens: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    out: SyncPtr,
    scratch: &mut Vec<u8>,
) {
    const TR: usize = TILE_ROWS;
    let q4_1 = w.ty == GgmlType::Q4_1;
    let (cols, blocks) = (w.cols, w.cols / 32);
    let n = tokens.len();
    let xrow = |t: usize| &x[t * cols..(t + 1) * cols];
    let srow = |t: usize| prep.sums(t);
    let act = |t: usize| prep.act(t);
    if isa == Isa::Portable && w.layout == Layout::Gguf {
        for r in rows {
            let row = w.row(r);
            for t in tokens.clone() {
                let [v] = if q4_1 {
                    portable::q4_1::<1>(row, [xrow(t)], [srow(t)])
                } else {
                    portable::q8_0::<1>(row, [xrow(t)])
                };
                // SAFETY: in bounds by the function's contract; this thread owns row `r`.
                unsafe { *out.0.add(t * w.rows + r) = v };
            }
        }
        return;
    }
    // On AVX-512 with packed rows, the thread's whole tiles go in one call per token block,
    // written straight to the output: decode's kernels for one token row, the batched ones for
    // several (the same operations per tile as the tile-at-a-time path below).
    #[cfg(target_arch = "x86_64")]
    let whole =
        if isa == Isa::Avx512 && w.layout == Layout::Packed && (1..=TOKEN_BLOCK).contains(&n) {
            rows.start.div_ceil(TR)..rows.end / TR
        } else {
            0..0
        };
    #[cfg(not(target_arch = "x86_64"))]
    let whole = 0..0;
    #[cfg(target_arch = "x86_64")]
    if whole.start < whole.end {
        let tb = w.tile_bytes();
        let first = whole.start * TR;
        let len = (whole.end - whole.start) * TR;
        let tiles = &w.data[whole.start * tb..whole.end * tb];
        let t0 = tokens.start;
        // Token row `t`'s outputs of the whole tiles.
        // SAFETY: these rows belong to this thread (the function's contract) and lie in token
        // row `t` of `out`; distinct token rows are distinct parts of `out`.
        let dst = |t: usize| unsafe {
            std::slice::from_raw_parts_mut(out.0.add(t * w.rows + first), len)
        };
        macro_rules! batched {
            ($n:literal) => {{
                let xs: [&[f32]; $n] = std::array::from_fn(|i| xrow(t0 + i));
                let ds: [&mut [f32]; $n] = std::array::from_fn(|i| dst(t0 + i));
                // SAFETY: the ISA is available (checked in `check`), `tiles` holds `len / 16`
                // tiles of `blocks` blocks, and every row `blocks` blocks' numbers and sums.
                unsafe {
                    if q4_1 {
                        let acts: [Q4_1Act<'_>; $n] = std::array::from_fn(|i| act(t0 + i));
                        x86::q4_1_tiles_avx512::<$n>(tiles, blocks, acts, ds);
                    } else {
                        x86::q8_0_tiles_avx512::<$n>(tiles, blocks, xs, ds);
                    }
                }
            }};
        }
        match n {
            // SAFETY: as above.
            1 => unsafe {
                if q4_1 {
                    x86::q4_1_tiles_decode_avx512(tiles, blocks, act(t0), dst(t0));
                } else {
                    x86::q8_0_tiles_decode_avx512(tiles, blocks, xrow(t0), dst(t0));
                }
            },
            2 => batched!(2),
            3 => batched!(3),
            4 => batched!(4),
            5 => batched!(5),
            6 => batched!(6),
            7 => batched!(7),
            // `n` is 1 to TOKEN_BLOCK here (see `whole`).
            _ => batched!(8),
        }
    }
    // The tiles not done above: those before and after the whole ones (a decode's thread has
    // a few thousand whole tiles in the output layer, not worth a pass to skip).
    let tiles = rows.start / TR..rows.end.div_ceil(TR);
    let (skip_from, skip_to) = if whole.is_empty() {
        (tiles.end, tiles.end)
    } else {
        (whole.start, whole.end)
    };
    for tile_index in (tiles.start..skip_from).chain(skip_to..tiles.end) {
        let first = tile_index * TR;
        let tile: &[u8] = if w.layout == Layout::Packed {
            w.tile(tile_index)
        } else {
            let count = (w.rows - first).min(TR);
            let file_rows: [&[u8]; TR] =
                std::array::from_fn(|i| if i < count { w.row(first + i) } else { &[] });
            scratch.resize(w.tile_bytes(), 0);
            pack_tile(w.ty, &file_rows[..count], blocks, scratch);
            scratch
        };
        let live = rows.start.max(first)..rows.end.min(first + TR);
        let mut t = tokens.start;
        while t < tokens.end {
            let n = (tokens.end - t).min(TOKEN_BLOCK);
            macro_rules! tile {
                ($n:literal) => {{
                    let xs: [&[f32]; $n] = std::array::from_fn(|i| xrow(t + i));
                    let ss: [&[f32]; $n] = std::array::from_fn(|i| srow(t + i));
                    let mut res = [[0.0f32; TR]; $n];
                    match (isa, q4_1) {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: the ISA is available (checked in `check`), the tile holds
                        // `blocks` blocks, and every row `blocks` blocks' numbers and sums.
                        (Isa::Avx512, true) => unsafe {
                            let acts: [Q4_1Act<'_>; $n] = std::array::from_fn(|i| act(t + i));
                            x86::q4_1_tile_avx512(tile, acts, &mut res)
                        },
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        (Isa::Avx2, true) => unsafe {
                            let acts: [Q4_1Act<'_>; $n] = std::array::from_fn(|i| act(t + i));
                            x86::q4_1_tile_avx2(tile, acts, &mut res)
                        },
                        (_, true) => packed::q4_1_tile(tile, xs, ss, &mut res),
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        (Isa::Avx512, false) => unsafe {
                            x86::q8_0_tile_avx512(tile, xs, &mut res)
                        },
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        (Isa::Avx2, false) => unsafe { x86::q8_0_tile_avx2(tile, xs, &mut res) },
                        (_, false) => packed::q8_0_tile(tile, xs, &mut res),
                    }
                    for (i, row_res) in res.iter().enumerate() {
                        for r in live.clone() {
                            // SAFETY: in bounds by the function's contract; this thread owns
                            // the rows of `rows`.
                            unsafe { *out.0.add((t + i) * w.rows + r) = row_res[r - first] };
                        }
                    }
                }};
            }
            match n {
                8 => tile!(8),
                7 => tile!(7),
                6 => tile!(6),
                5 => tile!(5),
                4 => tile!(4),
                3 => tile!(3),
                2 => tile!(2),
                _ => tile!(1),
            }
            t += n;
        }
    }
}

/// One weight row against `T` token rows.
fn row_dot<const T: usize>(
    isa: Isa,
    ty: GgmlType,
    layout: Layout,
    row: &[u8],
    x: [&[f32]; T],
    scratch: &mut Vec<f32>,
) -> [f32; T] {
    let mut acc = [[0.0f32; BLOCK_LANES]; T];
    // Packed rows never come here: Q4_1 and Q8_0 go through `tiled_rows`.
    match (layout, ty, isa) {
        #[cfg(target_arch = "x86_64")]
        (Layout::Gguf, GgmlType::Q4_0, Isa::Avx512) => {
            // SAFETY: the ISA is available (checked in `check`) and the lengths fit.
            unsafe { x86::q4_0_avx512(row, x, &mut acc) }
        }
        #[cfg(target_arch = "x86_64")]
        (Layout::Gguf, GgmlType::Q4_0, Isa::Avx2) => {
            // SAFETY: as above.
            unsafe { x86::q4_0_avx2(row, x, &mut acc) }
        }
        (Layout::Gguf, GgmlType::Q4_0, _) => portable::q4_0(row, x, &mut acc),
        #[cfg(target_arch = "x86_64")]
        (Layout::Gguf, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K, Isa::Avx512 | Isa::Avx2) => {
            // SAFETY: the ISA is available (checked in `check`) and the row holds whole blocks.
            return unsafe { kquant::row_dot(isa, ty, row, x) };
        }
        _ => {
            let mut lanes = [[0.0f32; LANES]; T];
            generic(isa, ty, row, x, &mut lanes, scratch);
            return std::array::from_fn(|t| portable::reduce16(lanes[t]));
        }
    }
    std::array::from_fn(|t| portable::reduce32(acc[t]))
}

/// Types without a fused kernel: dequantise 256 numbers at a time (scalar code, the same on every
/// ISA), then accumulate them into the lanes.
fn generic<const T: usize>(
    isa: Isa,
    ty: GgmlType,
    row: &[u8],
    x: [&[f32]; T],
    acc: &mut [[f32; LANES]; T],
    scratch: &mut Vec<f32>,
) {
    const CHUNK: usize = 256;
    let be = ty.block_elements() as usize;
    let bb = ty.block_bytes() as usize;
    let cols = row.len() / bb * be;
    scratch.resize(CHUNK, 0.0);
    let mut start = 0;
    while start < cols {
        let n = CHUNK.min(cols - start);
        let bytes = &row[start / be * bb..(start + n) / be * bb];
        // The matrix was validated in `QMat::new`, so the chunk is whole blocks of a supported
        // type; if that ever failed, zeros would be a wrong answer, so stop loudly instead.
        if let Err(e) = dequant::dequantize_row(ty, bytes, &mut scratch[..n]) {
            unreachable!("validated matrix failed to dequantise: {e}");
        }
        for t in 0..T {
            dot_lanes(isa, &scratch[..n], &x[t][start..start + n], &mut acc[t]);
        }
        start += n;
    }
}

/// `acc[l] += w[i] · x[i]` for `i ≡ l (mod 16)`, with the ISA's vectors for whole groups of 16.
fn dot_lanes(isa: Isa, w: &[f32], x: &[f32], acc: &mut [f32; LANES]) {
    let whole = w.len() / LANES * LANES;
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the ISA is available and both slices have `whole` numbers.
        Isa::Avx512 => unsafe { x86::dot_lanes_avx512(&w[..whole], &x[..whole], acc) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { x86::dot_lanes_avx2(&w[..whole], &x[..whole], acc) },
        _ => portable::dot_lanes(&w[..whole], &x[..whole], acc),
    }
    portable::dot_lanes(&w[whole..], &x[whole..], acc);
}

/// `Σ a[i] · b[i]` over the shorter length: 16 lanes of fused multiply-adds, lane `l` taking the
/// elements `i ≡ l (mod 16)` in order, then [`portable::reduce16`]. The same bits on every ISA
/// (an ISA this CPU lacks falls back to portable code). Attention uses it for query·key scores.
pub fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    let isa = if isa.is_available() {
        isa
    } else {
        Isa::Portable
    };
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; LANES];
    dot_lanes(isa, &a[..n], &b[..n], &mut acc);
    portable::reduce16(acc)
}

/// `y[i] = alpha · x[i] + y[i]` (fused) over the shorter length; the same bits on every ISA.
/// Attention uses it to add a value row, weighted by its probability, to the output.
pub fn axpy(isa: Isa, alpha: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let whole = n / LANES * LANES;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if isa.is_available() => {
            // SAFETY: the ISA is available and both slices have `whole` numbers.
            unsafe { x86::axpy_avx512(alpha, &x[..whole], &mut y[..whole]) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if isa.is_available() => {
            // SAFETY: as above.
            unsafe { x86::axpy_avx2(alpha, &x[..whole], &mut y[..whole]) }
        }
        _ => {
            for (yi, &xi) in y[..whole].iter_mut().zip(&x[..whole]) {
                *yi = alpha.mul_add(xi, *yi);
            }
        }
    }
    for (yi, &xi) in y[whole..n].iter_mut().zip(&x[whole..n]) {
        *yi = alpha.mul_add(xi, *yi);
    }
}

/// `out[j] = dot(isa, q, &keys[j][offset..offset + q.len()])` for every key: the query·key
/// scores of one attention head, each the same bits as [`dot`], computed several keys at a time.
///
/// # Panics
/// If `out` is shorter than `keys` or a key row is shorter than `offset + q.len()` (a caller's
/// bug, not input).
pub fn dots(isa: Isa, q: &[f32], keys: &[&[f32]], offset: usize, out: &mut [f32]) {
    let n = q.len();
    assert!(
        out.len() >= keys.len(),
        "dots: output shorter than the keys"
    );
    assert!(
        keys.iter().all(|k| k.len() >= offset + n),
        "dots: a key row is shorter than offset + query"
    );
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.is_available() && n.is_multiple_of(LANES) {
        // SAFETY: the ISA is available and every slice was checked above.
        unsafe { x86::dots_avx512(q, keys, offset, out) };
        return;
    }
    for (o, k) in out.iter_mut().zip(keys) {
        *o = dot(isa, q, &k[offset..offset + n]);
    }
}

/// `acc[i] = probs[j] · values[j][offset + i] + acc[i]` (fused), for `j` in order: the weighted
/// sum of value rows of one attention head, the same bits as calling [`axpy`] once per row.
///
/// # Panics
/// If `probs` and `values` differ in length or a value row is shorter than `offset + acc.len()`.
pub fn weighted_sum(isa: Isa, probs: &[f32], values: &[&[f32]], offset: usize, acc: &mut [f32]) {
    let n = acc.len();
    assert_eq!(
        probs.len(),
        values.len(),
        "weighted_sum: one probability per value row"
    );
    assert!(
        values.iter().all(|v| v.len() >= offset + n),
        "weighted_sum: a value row is shorter than offset + output"
    );
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.is_available() && n == 64 {
        // SAFETY: the ISA is available and every slice was checked above.
        unsafe { x86::weighted_sum64_avx512(probs, values, offset, acc) };
        return;
    }
    for (&p, v) in probs.iter().zip(values) {
        axpy(isa, p, &v[offset..offset + n], acc);
    }
}

/// [`dots`] for several query heads that read the same keys (grouped-query attention):
/// `out[h · keys.len() + j]` is `dot(isa, q_h, &keys[j][offset..offset + n])` for head `h` of
/// `heads`, whose query is `q[h · n..(h + 1) · n]` (`n = q.len() / heads`). The bits are those of
/// one [`dots`] call per head; the AVX-512 version (heads of 64 numbers) loads each key once for
/// up to three heads and reduces the scores of many keys together.
///
/// # Panics
/// If `heads` is 0 or does not divide `q.len()`, `out` is shorter than `heads · keys.len()`, or a
/// key row is shorter than `offset + n` (a caller's bug, not input).
pub fn dots_heads(
    isa: Isa,
    q: &[f32],
    heads: usize,
    keys: &[&[f32]],
    offset: usize,
    out: &mut [f32],
) {
    assert!(
        heads > 0 && q.len().is_multiple_of(heads),
        "dots_heads: the queries are not {heads} heads"
    );
    let (n, m) = (q.len() / heads, keys.len());
    assert!(
        out.len() >= heads * m,
        "dots_heads: output shorter than heads × keys"
    );
    assert!(
        keys.iter().all(|k| k.len() >= offset + n),
        "dots_heads: a key row is shorter than offset + query"
    );
    let mut h = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.is_available() && n == x86_attention::HEAD {
        while h < heads {
            let g = (heads - h).min(x86_attention::MAX_HEADS);
            let (qs, o) = (&q[h * n..(h + g) * n], &mut out[h * m..(h + g) * m]);
            // SAFETY: the ISA is available and every slice was checked above.
            unsafe {
                match g {
                    3 => x86_attention::dots_heads::<3>(qs, keys, offset, o),
                    2 => x86_attention::dots_heads::<2>(qs, keys, offset, o),
                    _ => x86_attention::dots_heads::<1>(qs, keys, offset, o),
                }
            }
            h += g;
        }
    }
    for h in h..heads {
        dots(
            isa,
            &q[h * n..(h + 1) * n],
            keys,
            offset,
            &mut out[h * m..(h + 1) * m],
        );
    }
}

/// [`weighted_sum`] for several heads that read the same value rows: for head `h` of `heads`,
/// `acc[h · n..(h + 1) · n]` (`n = acc.len() / heads`) receives the value rows weighted by
/// `probs[h · values.len()..(h + 1) · values.len()]`, with the bits of one [`weighted_sum`] call
/// per head. The AVX-512 version (heads of 64 numbers) loads each value row once for up to three
/// heads.
///
/// # Panics
/// If `heads` is 0 or does not divide `acc.len()`, `probs` does not hold `heads · values.len()`
/// numbers, or a value row is shorter than `offset + n`.
pub fn weighted_sum_heads(
    isa: Isa,
    probs: &[f32],
    heads: usize,
    values: &[&[f32]],
    offset: usize,
    acc: &mut [f32],
) {
    assert!(
        heads > 0 && acc.len().is_multiple_of(heads),
        "weighted_sum_heads: the output is not {heads} heads"
    );
    let (n, m) = (acc.len() / heads, values.len());
    assert_eq!(
        probs.len(),
        heads * m,
        "weighted_sum_heads: one probability per head and value row"
    );
    assert!(
        values.iter().all(|v| v.len() >= offset + n),
        "weighted_sum_heads: a value row is shorter than offset + output"
    );
    let mut h = 0;
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.is_available() && n == x86_attention::HEAD {
        while h < heads {
            let g = (heads - h).min(x86_attention::MAX_HEADS);
            let (p, a) = (&probs[h * m..(h + g) * m], &mut acc[h * n..(h + g) * n]);
            // SAFETY: the ISA is available and every slice was checked above.
            unsafe {
                match g {
                    3 => x86_attention::weighted_sum_heads::<3>(p, values, offset, a),
                    2 => x86_attention::weighted_sum_heads::<2>(p, values, offset, a),
                    _ => x86_attention::weighted_sum_heads::<1>(p, values, offset, a),
                }
            }
            h += g;
        }
    }
    for h in h..heads {
        weighted_sum(
            isa,
            &probs[h * m..(h + 1) * m],
            values,
            offset,
            &mut acc[h * n..(h + 1) * n],
        );
    }
}
