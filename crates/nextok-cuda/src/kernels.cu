// The kernels of nextok-cuda, compiled at run time by NVRTC.
//
// They are compiled with --fmad=false, so that every multiply-add below is exactly the operation
// written: `fmaf` where the CPU kernels of nextok-kernels use a fused multiply-add, a plain
// product or sum where they do not. Every sum is taken in the CPU kernels' order (lanes, then a
// fixed reduction tree), so a weight product gives the CPU's bits, and each output number depends
// only on its own inputs (never on how many token rows share a launch).

#define ROWS_PER_BLOCK 4 // warps per block in the matrix kernels, one weight row (or two) each
#define TILE 8           // token rows computed together against one weight row
#define FULL_MASK 0xffffffffu

// An f16 number, converted exactly.
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
#ifdef NEXTOK_CPU_EMULATION
    // The tests' CPU emulation of these kernels (tests/emu) has no PTX.
    return emu_f16_to_f32(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

// The little-endian f16 at `p` (block fields are not 2-byte aligned in Q4_0 and Q8_0 rows).
__device__ __forceinline__ float load_f16(const unsigned char* p) {
    return f16_to_f32((unsigned short)(p[0] | (p[1] << 8)));
}

// Element `lane` (0..32) of one 32-number block, expanded as the CPU kernels expand it.
// `block_q4_0`: f16 d, 16 bytes of nibbles (element j low, element j + 16 high); x = d (q - 8).
struct Q4_0 {
    enum { BYTES = 18 };
    __device__ static float expand(const unsigned char* b, int lane) {
        const float d = load_f16(b);
        const unsigned char q = b[2 + (lane & 15)];
        const int v = lane < 16 ? (q & 15) : (q >> 4);
        return d * ((float)v - 8.0f);
    }
};


// Plain numbers: element i of a matrix of f32, f16 or bf16.
struct F32 {
    __device__ static float load(const unsigned char* w, size_t i) {
        return ((const float*)w)[i];
    }
};
struct F16 {
    __device__ static float load(const unsigned char* w, size_t i) {
        return f16_to_f32(((const unsigned short*)w)[i]);
    }
};
struct BF16 {
    __device__ static float load(const unsigned char* w, size_t i) {
        return __uint_as_float(((unsigned int)((const unsigned short*)w)[i]) << 16);
    }
};

// out[t * rows + r] = sum_k W[r, k] x[t * cols + k] for rows of 32-number blocks.
//
// One warp per weight row; lane l takes element l of every block, in block order, with one fused
// multiply-add per token (the CPU's `block_into`), then the lanes are summed as the CPU's
// `reduce32`: lanes i and i + 16, then i and i + 8, i + 4, i + 2, and 0 and 1.
// Grid: x = ceil(rows / ROWS_PER_BLOCK), y = token tiles of TILE rows starting at `t_base`.
template <typename B>
__device__ void matmul_blocks(const unsigned char* __restrict__ w, const float* __restrict__ x,
                              float* __restrict__ out, int rows, int cols, int tokens,
                              int t_base) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    // The whole warp leaves together, so the shuffles below always have 32 lanes.
    if (r >= rows) return;
    const int t0 = t_base + blockIdx.y * TILE;
    if (t0 >= tokens) return;
    const int nt = min(TILE, tokens - t0);
    const int nblocks = cols / 32;
    const unsigned char* row = w + (size_t)r * nblocks * B::BYTES;
    const float* xt = x + (size_t)t0 * cols + lane;
    float acc[TILE];
#pragma unroll
    for (int t = 0; t < TILE; ++t) acc[t] = 0.0f;
    // Unrolled so that several blocks' loads are in flight at once; each lane still adds its
    // blocks in order.
#pragma unroll 4
    for (int b = 0; b < nblocks; ++b) {
        const float wv = B::expand(row + (size_t)b * B::BYTES, lane);
#pragma unroll
        for (int t = 0; t < TILE; ++t) {
            if (t < nt) acc[t] = fmaf(wv, xt[(size_t)t * cols + (size_t)b * 32], acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
        float v = acc[t];
        v += __shfl_down_sync(FULL_MASK, v, 16);
        v += __shfl_down_sync(FULL_MASK, v, 8);
        v += __shfl_down_sync(FULL_MASK, v, 4);
        v += __shfl_down_sync(FULL_MASK, v, 2);
        v += __shfl_down_sync(FULL_MASK, v, 1);
        if (lane == 0 && t < nt) out[(size_t)(t0 + t) * rows + r] = v;
    }
}

// The same product for rows of plain numbers (f32, f16, bf16, and every other type, which the
// host dequantises to f32 once at upload).
//
// Sixteen lanes per weight row, two rows per warp; lane l takes the elements k = l (mod 16) in
// order with one fused multiply-add each (the CPU's `dot_lanes`), then the CPU's `reduce16`:
// lanes i and i + 8, then i + 4, i + 2, and 0 and 1.
// Grid: x = ceil(rows / (2 ROWS_PER_BLOCK)), y = token tiles as above.
template <typename E>
__device__ void matmul_lanes(const unsigned char* __restrict__ w, const float* __restrict__ x,
                             float* __restrict__ out, int rows, int cols, int tokens,
                             int t_base) {
    const int lane = threadIdx.x & 31;
    const int l = lane & 15;
    const int first = (blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5)) * 2;
    if (first >= rows) return;  // both halves of the warp are past the end
    const int r = first + (lane >> 4);
    const bool live = r < rows;
    // A half-warp past the last row reads that row and writes nothing, so that both halves
    // take part in every shuffle.
    const int rr = live ? r : rows - 1;
    const int t0 = t_base + blockIdx.y * TILE;
    if (t0 >= tokens) return;
    const int nt = min(TILE, tokens - t0);
    const size_t row0 = (size_t)rr * cols;
    const float* xt = x + (size_t)t0 * cols;
    float acc[TILE];
#pragma unroll
    for (int t = 0; t < TILE; ++t) acc[t] = 0.0f;
#pragma unroll 4
    for (int k = l; k < cols; k += 16) {
        const float wv = E::load(w, row0 + k);
#pragma unroll
        for (int t = 0; t < TILE; ++t) {
            if (t < nt) acc[t] = fmaf(wv, xt[(size_t)t * cols + k], acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < TILE; ++t) {
        float v = acc[t];
        v += __shfl_down_sync(FULL_MASK, v, 8, 16);
        v += __shfl_down_sync(FULL_MASK, v, 4, 16);
        v += __shfl_down_sync(FULL_MASK, v, 2, 16);
        v += __shfl_down_sync(FULL_MASK, v, 1, 16);
        if (l == 0 && live && t < nt) out[(size_t)(t0 + t) * rows + r] = v;
    }
}

// out[t * rows + r] = sum_k W[r, k] x[t * cols + k] for Q4_1 rows (`block_q4_1`: f16 d, f16 m,
// 16 bytes of nibbles, element j low and element j + 16 high), by the CPU's Q4_1 arithmetic
// (`nextok_kernels::portable::q4_1_row`): per block b, the activations in fixed point
// (`portable::fixed_point`: integers X_i = rint(x_i 2^k), k = 29 - the exponent of the block's
// largest magnitude, at least -90; scale 2^-k, 0 for a block of zeros, NaN for a block with an
// infinity or a NaN), S_b = the integer sum of the nibbles times X_i rounded once to f32, times
// the scale, and X_b = the activations' sum in the `reduce32` tree; then D = fmaf(d_b, S_b, D)
// and M = fmaf(m_b, X_b, M) in block order from 0, and D + M.
//
// One warp per weight row: lane l computes S_b and X_b of the blocks b = l (mod 32), and every
// lane then runs the two chains over the blocks in order, taking each block's sums from its
// lane by a shuffle. Grid: as `matmul_blocks`.
__device__ void matmul_q4_1_blocks(const unsigned char* __restrict__ w,
                                   const float* __restrict__ x, float* __restrict__ out,
                                   int rows, int cols, int tokens, int t_base) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    // The whole warp leaves together, so the shuffles below always have 32 lanes.
    if (r >= rows) return;
    const int t0 = t_base + blockIdx.y * TILE;
    if (t0 >= tokens) return;
    const int nt = min(TILE, tokens - t0);
    const int nblocks = cols / 32;
    const unsigned char* row = w + (size_t)r * nblocks * 20;
    for (int t = 0; t < nt; ++t) {
        const float* xt = x + (size_t)(t0 + t) * cols;
        float dsum = 0.0f, msum = 0.0f;
        for (int c = 0; c < nblocks; c += 32) {
            const int b = c + lane;
            float s = 0.0f, xsum = 0.0f;
            if (b < nblocks) {
                const unsigned char* blk = row + (size_t)b * 20;
                const float* xb = xt + (size_t)b * 32;
                bool finite = true;
                float amax = 0.0f;
                for (int i = 0; i < 32; ++i) {
                    finite = finite && isfinite(xb[i]);
                    amax = fmaxf(amax, fabsf(xb[i]));
                }
                if (!finite) {
                    s = __int_as_float(0x7fc00000);
                } else if (amax != 0.0f) {
                    const int e = max((int)((__float_as_uint(amax) >> 23) & 0xff) - 127, -90);
                    const int k = 29 - e;
                    const float up = __uint_as_float((unsigned)(k + 127) << 23);
                    const float scale = __uint_as_float((unsigned)(127 - k) << 23);
                    long long acc = 0;
                    for (int i = 0; i < 32; ++i) {
                        const unsigned char q = blk[4 + (i & 15)];
                        const int v = i < 16 ? (q & 15) : (q >> 4);
                        acc += (long long)v * __float2int_rn(__fmul_rn(xb[i], up));
                    }
                    s = __fmul_rn(__ll2float_rn(acc), scale);
                }
                float a[16];
                for (int i = 0; i < 16; ++i) a[i] = xb[i] + xb[i + 16];
                for (int width = 8; width >= 1; width /= 2)
                    for (int i = 0; i < width; ++i) a[i] = a[i] + a[i + width];
                xsum = a[0];
            }
            const int n = min(32, nblocks - c);
            for (int j = 0; j < n; ++j) {
                const float sj = __shfl_sync(FULL_MASK, s, j);
                const float xj = __shfl_sync(FULL_MASK, xsum, j);
                const unsigned char* blk = row + (size_t)(c + j) * 20;
                dsum = fmaf(load_f16(blk), sj, dsum);
                msum = fmaf(load_f16(blk + 2), xj, msum);
            }
        }
        if (lane == 0) out[(size_t)(t0 + t) * rows + r] = dsum + msum;
    }
}

// out[t * rows + r] = sum_k W[r, k] x[t * cols + k] for Q8_0 rows (`block_q8_0`: f16 d, 32
// signed bytes), by the CPU's Q8_0 arithmetic (`nextok_kernels::portable::q8_0_row`): per block
// b, S_b = the signed bytes times the activations, fused multiply-adds in element order from 0;
// then D = fmaf(d_b, S_b, D) in block order from 0.
//
// One warp per weight row; lane l computes S_b of the blocks b = l (mod 32), and every lane then
// runs the chain over the blocks in order, taking each block's sum from its lane by a shuffle.
// Grid: as `matmul_blocks`.
__device__ void matmul_q8_0_blocks(const unsigned char* __restrict__ w,
                                   const float* __restrict__ x, float* __restrict__ out,
                                   int rows, int cols, int tokens, int t_base) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    // The whole warp leaves together, so the shuffles below always have 32 lanes.
    if (r >= rows) return;
    const int t0 = t_base + blockIdx.y * TILE;
    if (t0 >= tokens) return;
    const int nt = min(TILE, tokens - t0);
    const int nblocks = cols / 32;
    const unsigned char* row = w + (size_t)r * nblocks * 34;
    for (int t = 0; t < nt; ++t) {
        const float* xt = x + (size_t)(t0 + t) * cols;
        float dsum = 0.0f;
        for (int c = 0; c < nblocks; c += 32) {
            const int b = c + lane;
            float s = 0.0f;
            if (b < nblocks) {
                const unsigned char* blk = row + (size_t)b * 34;
                const float* xb = xt + (size_t)b * 32;
                for (int i = 0; i < 32; ++i) s = fmaf((float)(signed char)blk[2 + i], xb[i], s);
            }
            const int n = min(32, nblocks - c);
            for (int j = 0; j < n; ++j) {
                const float sj = __shfl_sync(FULL_MASK, s, j);
                dsum = fmaf(load_f16(row + (size_t)(c + j) * 34), sj, dsum);
            }
        }
        if (lane == 0) out[(size_t)(t0 + t) * rows + r] = dsum;
    }
}

#define MATMUL(name, body, T)                                                                    \
    extern "C" __global__ void name(const unsigned char* w, const float* x, float* out, int rows, \
                                    int cols, int tokens, int t_base) {                          \
        body<T>(w, x, out, rows, cols, tokens, t_base);                                         \
    }

MATMUL(matmul_q4_0, matmul_blocks, Q4_0)
extern "C" __global__ void matmul_q4_1(const unsigned char* w, const float* x, float* out,
                                       int rows, int cols, int tokens, int t_base) {
    matmul_q4_1_blocks(w, x, out, rows, cols, tokens, t_base);
}
extern "C" __global__ void matmul_q8_0(const unsigned char* w, const float* x, float* out,
                                       int rows, int cols, int tokens, int t_base) {
    matmul_q8_0_blocks(w, x, out, rows, cols, tokens, t_base);
}
MATMUL(matmul_f32, matmul_lanes, F32)
MATMUL(matmul_f16, matmul_lanes, F16)
MATMUL(matmul_bf16, matmul_lanes, BF16)

// Token embedding rows, dequantised exactly as the host's `dequant::dequantize_row` does it (not
// as the products expand them: Q4_1's x = q d + m is a product and a sum here, two roundings,
// where the products fuse them): out[t * cols + k] = W[tokens[t], k]. One thread per number.
struct EmbedQ4_0 {
    enum { BYTES = 18 };
    __device__ static float value(const unsigned char* b, int j) {
        const unsigned char q = b[2 + (j & 15)];
        const int v = j < 16 ? (q & 15) : (q >> 4);
        return (float)(v - 8) * load_f16(b);
    }
};
struct EmbedQ4_1 {
    enum { BYTES = 20 };
    __device__ static float value(const unsigned char* b, int j) {
        const unsigned char q = b[4 + (j & 15)];
        const int v = j < 16 ? (q & 15) : (q >> 4);
        return (float)v * load_f16(b) + load_f16(b + 2);
    }
};
struct EmbedQ8_0 {
    enum { BYTES = 34 };
    __device__ static float value(const unsigned char* b, int j) {
        return (float)(signed char)b[2 + j] * load_f16(b);
    }
};

template <typename B>
__device__ void embed_blocks(const unsigned char* __restrict__ w, const int* __restrict__ tokens,
                             float* __restrict__ out, int cols, int n) {
    const size_t total = (size_t)n * cols;
    const size_t row_bytes = (size_t)(cols / 32) * B::BYTES;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / cols;
        const int k = (int)(i % cols);
        const unsigned char* row = w + (size_t)tokens[t] * row_bytes;
        out[i] = B::value(row + (size_t)(k / 32) * B::BYTES, k % 32);
    }
}

template <typename E>
__device__ void embed_plain(const unsigned char* __restrict__ w, const int* __restrict__ tokens,
                            float* __restrict__ out, int cols, int n) {
    const size_t total = (size_t)n * cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / cols;
        out[i] = E::load(w, (size_t)tokens[t] * cols + i % cols);
    }
}

#define EMBED(name, body, T)                                                                     \
    extern "C" __global__ void name(const unsigned char* w, const int* tokens, float* out,       \
                                    int cols, int n) {                                          \
        body<T>(w, tokens, out, cols, n);                                                       \
    }

EMBED(embed_q4_0, embed_blocks, EmbedQ4_0)
EMBED(embed_q4_1, embed_blocks, EmbedQ4_1)
EMBED(embed_q8_0, embed_blocks, EmbedQ8_0)
EMBED(embed_f32, embed_plain, F32)
EMBED(embed_f16, embed_plain, F16)
EMBED(embed_bf16, embed_plain, BF16)

#define ATTENTION_THREADS 128

// Where key and value rows are: `n_keys` rows of kv_heads * hd f32 numbers each, position
// after position, in two buffers.
struct Contiguous {
    const float* k;
    const float* v;
    size_t row_len;
    __device__ const float* key(int j) const { return k + (size_t)j * row_len; }
    __device__ const float* value(int j) const { return v + (size_t)j * row_len; }
};

// Where key and value rows are in a paged cache: position j is at slot j % bp of block
// `blocks[j / bp]` of the sequence's block table (device addresses of the blocks), whose
// numbers are laid out [layer][key, value][slot][kv_heads * hd] (nextok-kv-cache's
// `CacheConfig::row_offset`). The rows are read where they are: no gather.
struct Paged {
    const unsigned long long* blocks;
    int layer;
    int bp;
    size_t row_len;
    __device__ const float* row(int j, int value) const {
        const float* block = (const float*)blocks[j / bp];
        return block + ((size_t)(layer * 2 + value) * bp + j % bp) * row_len;
    }
    __device__ const float* key(int j) const { return row(j, 0); }
    __device__ const float* value(int j) const { return row(j, 1); }
};

// Attention of query rows `row_base + blockIdx.x / heads`, head `blockIdx.x % heads`, against
// the key and value rows that `kv` addresses.
//
// Row i sees positions 0..=first + i when `causal`, every position otherwise. The arithmetic is
// the CPU backend's, step by step: scores are `dot(q, key)` with 16 lanes and `reduce16`, times
// `scale`; the maximum is subtracted; each score becomes exp(s - max) (in double and rounded
// once, the one step whose last bit may differ from the CPU's f32 exp); the probabilities are
// summed in key order; the output is the weighted sum of value rows in key order (one fused
// multiply-add per key), times 1 / sum.
//
// `scores` holds n_keys numbers for each block of this launch.
template <typename KV>
__device__ void attention_rows(const float* __restrict__ q, KV kv, float* __restrict__ out,
                               float* __restrict__ scores, int row_base, int heads,
                               int kv_heads, int hd, int first, int causal, int n_keys,
                               float scale) {
    __shared__ float red[ATTENTION_THREADS];
    const int tid = threadIdx.x;
    const int item = blockIdx.x;
    const int i = row_base + item / heads;
    const int h = item % heads;
    const int last = causal ? first + i : n_keys - 1;
    const int g = h / (heads / kv_heads);
    const float* qh = q + ((size_t)i * heads + h) * hd;
    float* s = scores + (size_t)item * n_keys;

    // Scores: one half-warp per key, eight keys at a time. Every half-warp runs the same number
    // of rounds (a key past `last` is computed on key `last` and not stored), so that both
    // halves of a warp take part in every shuffle.
    const int half = tid >> 4;
    const int l = tid & 15;
    for (int j0 = 0; j0 <= last; j0 += ATTENTION_THREADS / 16) {
        const int j = j0 + half;
        const int jj = j <= last ? j : last;
        const float* key = kv.key(jj) + (size_t)g * hd;
        float acc = 0.0f;
        for (int d = l; d < hd; d += 16) acc = fmaf(qh[d], key[d], acc);
        acc += __shfl_down_sync(FULL_MASK, acc, 8, 16);
        acc += __shfl_down_sync(FULL_MASK, acc, 4, 16);
        acc += __shfl_down_sync(FULL_MASK, acc, 2, 16);
        acc += __shfl_down_sync(FULL_MASK, acc, 1, 16);
        if (l == 0 && j <= last) s[j] = acc * scale;
    }
    __syncthreads();

    // The maximum (exact in any order).
    float m = __int_as_float(0xff800000);  // -infinity
    for (int j = tid; j <= last; j += ATTENTION_THREADS) m = fmaxf(m, s[j]);
    red[tid] = m;
    __syncthreads();
    for (int width = ATTENTION_THREADS / 2; width > 0; width >>= 1) {
        if (tid < width) red[tid] = fmaxf(red[tid], red[tid + width]);
        __syncthreads();
    }
    m = red[0];

    // Probabilities, unnormalised.
    for (int j = tid; j <= last; j += ATTENTION_THREADS) s[j] = (float)exp((double)(s[j] - m));
    __syncthreads();

    // The weighted sum of the value rows, and the sum of the probabilities, both in key order.
    for (int d = tid; d < hd; d += ATTENTION_THREADS) {
        float acc = 0.0f;
        float sum = 0.0f;
        const size_t col = (size_t)g * hd + d;
        for (int j = 0; j <= last; ++j) {
            const float p = s[j];
            sum += p;
            acc = fmaf(p, kv.value(j)[col], acc);
        }
        out[((size_t)i * heads + h) * hd + d] = acc * (1.0f / sum);
    }
}

// Attention over key and value rows in two contiguous buffers (a host cache copied in).
extern "C" __global__ void attention(const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, float* __restrict__ out,
                                     float* __restrict__ scores, int row_base, int heads,
                                     int kv_heads, int hd, int first, int causal, int n_keys,
                                     float scale) {
    const Contiguous kv{k, v, (size_t)kv_heads * hd};
    attention_rows(q, kv, out, scores, row_base, heads, kv_heads, hd, first, causal, n_keys,
                   scale);
}

// Attention over a paged cache in device memory, read in place through the sequence's block
// table `blocks` (see `Paged`).
extern "C" __global__ void attention_paged(const float* __restrict__ q,
                                           const unsigned long long* __restrict__ blocks,
                                           float* __restrict__ out, float* __restrict__ scores,
                                           int row_base, int heads, int kv_heads, int hd,
                                           int first, int causal, int n_keys, float scale,
                                           int layer, int block_positions) {
    const Paged kv{blocks, layer, block_positions, (size_t)kv_heads * hd};
    attention_rows(q, kv, out, scores, row_base, heads, kv_heads, hd, first, causal, n_keys,
                   scale);
}

// ---------------------------------------------------------------------------------------------
// Writing the KV cache in device memory: a step's new key and value rows go from the layer's
// buffers straight into their blocks, where attention_paged reads them.

// x as the KV cache's number type stores it, as f32: the `half` crate's conversions that the
// host storage uses (round to nearest, ties to even; NaN kept quiet with the top of its payload),
// in integer arithmetic, so that a device block holds the host storage's very numbers.
// kv_type: 0 f32, 1 f16, 2 bf16 (KV_F32, KV_F16, KV_BF16 in src/ops.rs).
__device__ __forceinline__ float kv_round(float x, int kv_type) {
    const unsigned int u = __float_as_uint(x);
    if (kv_type == 2) {
        unsigned int b;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            b = (u >> 16) | 0x0040u;
        } else {
            b = u >> 16;
            if ((u & 0x8000u) != 0 && (u & (3u * 0x8000u - 1u)) != 0) b += 1;
        }
        return __uint_as_float((b & 0xffffu) << 16);
    }
    if (kv_type != 1) return x;
    // f32 to f16 bits.
    const unsigned int sign = u & 0x80000000u, exp = u & 0x7f800000u, man = u & 0x007fffffu;
    unsigned int h;
    if (exp == 0x7f800000u) {
        h = (sign >> 16) | 0x7c00u | (man == 0 ? 0u : 0x0200u) | (man >> 13);
    } else {
        const int half_exp = (int)(exp >> 23) - 127 + 15;
        if (half_exp >= 0x1f) {
            h = (sign >> 16) | 0x7c00u;
        } else if (half_exp <= 0) {
            if (14 - half_exp > 24) {
                h = sign >> 16;
            } else {
                const unsigned int m = man | 0x00800000u;
                unsigned int half_man = m >> (14 - half_exp);
                const unsigned int round_bit = 1u << (13 - half_exp);
                if ((m & round_bit) != 0 && (m & (3u * round_bit - 1u)) != 0) half_man += 1;
                h = (sign >> 16) | half_man;
            }
        } else {
            h = (sign >> 16) | ((unsigned int)half_exp << 10) | (man >> 13);
            if ((man & 0x1000u) != 0 && (man & (3u * 0x1000u - 1u)) != 0) h += 1;
        }
    }
    // f16 bits back to f32: exact for every number; a NaN as the `half` crate widens it.
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0)
        return __uint_as_float(((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x03ffu) << 13));
    return f16_to_f32((unsigned short)h);
}

// Row r of `keys` and of `values` (row_len numbers each) into the block at address
// places[2 r], slot places[2 r + 1], of layer `layer`, rounded to the cache's number type: one
// launch per layer for all of a step's rows. The places come from KvCache::write_rows, which
// has made each block this sequence's alone; no two rows share a place. The block layout is
// Paged's: [layer][key, value][slot][row_len].
extern "C" __global__ void write_kv_paged(const float* __restrict__ keys,
                                          const float* __restrict__ values,
                                          const unsigned long long* __restrict__ places, int rows,
                                          int row_len, int layer, int block_positions,
                                          int kv_type) {
    const size_t n = (size_t)rows * row_len;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / row_len, e = i % row_len;
        float* block = (float*)places[2 * r];
        const size_t slot = (size_t)places[2 * r + 1];
        const size_t key_at = ((size_t)layer * 2 * block_positions + slot) * row_len + e;
        block[key_at] = kv_round(keys[i], kv_type);
        block[key_at + (size_t)block_positions * row_len] = kv_round(values[i], kv_type);
    }
}

// ---------------------------------------------------------------------------------------------
// The rest of a decoder layer, so that the model crate's forward pass keeps its activations on
// the device: the same formulas as the model crate's host code, one kernel each.

#define ROW_THREADS 256

// RMSNorm of row `r` of x (rows of d numbers) into row `dst` of out:
// x / sqrt(mean(x^2) + eps) * w. The sum of squares is in double and in order, as on the host
// (one thread adds, so the bits are the host's); the scaling is spread over the block.
__device__ void rms_norm_row(const float* __restrict__ x, const float* __restrict__ w,
                             float* __restrict__ out, int d, float eps, size_t r, size_t dst) {
    __shared__ double scale_shared;
    const float* row = x + r * d;
    float* o = out + dst * d;
    if (threadIdx.x == 0) {
        double ss = 0.0;
        for (int i = 0; i < d; ++i) ss += (double)row[i] * (double)row[i];
        scale_shared = 1.0 / sqrt(ss / (double)d + (double)eps);
    }
    __syncthreads();
    const double scale = scale_shared;
    for (int i = threadIdx.x; i < d; i += ROW_THREADS) o[i] = (float)((double)row[i] * scale) * w[i];
}

// RMSNorm of every row: one block per row.
extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w,
                                    float* __restrict__ out, int d, float eps) {
    rms_norm_row(x, w, out, d, eps, blockIdx.x, blockIdx.x);
}

// RMSNorm of the rows `rows[blockIdx.x]` of x into the rows of out, in order (the rows whose
// logits are wanted).
extern "C" __global__ void rms_norm_rows(const float* __restrict__ x, const int* __restrict__ rows,
                                         const float* __restrict__ w, float* __restrict__ out,
                                         int d, float eps) {
    rms_norm_row(x, w, out, d, eps, (size_t)rows[blockIdx.x], blockIdx.x);
}

// x[r * width + i] += b[i] for every row r.
extern "C" __global__ void add_bias(float* __restrict__ x, const float* __restrict__ b, int rows,
                                    int width) {
    const size_t n = (size_t)rows * width;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += b[i % width];
}

// x[i] += y[i]: the residual connection.
extern "C" __global__ void add(float* __restrict__ x, const float* __restrict__ y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] += y[i];
}

// SwiGLU: g = g / (1 + exp(-g)) * u (the exponential in double, rounded once).
extern "C" __global__ void silu_mul(float* __restrict__ g, const float* __restrict__ u, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float v = g[i];
        g[i] = v / (1.0f + (float)exp(-(double)v)) * u[i];
    }
}

// Rotary embeddings of the first 2 * half numbers of every head of every row, with the host's
// table of (cos, sin) pairs per row and frequency: pairs (2i, 2i + 1), or (i, i + half) when
// `neox`. One thread per (row, head, i).
extern "C" __global__ void rope(float* __restrict__ x, const float* __restrict__ cos_sin, int rows,
                                int heads, int hd, int half, int neox) {
    const size_t n = (size_t)rows * heads * half;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(t % half);
        const size_t rh = t / half;  // row * heads + head
        const size_t r = rh / heads;
        float* head = x + rh * hd;
        const float co = cos_sin[(r * half + i) * 2];
        const float s = cos_sin[(r * half + i) * 2 + 1];
        const int a = neox ? i : 2 * i;
        const int b = neox ? i + half : 2 * i + 1;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * co - x1 * s;
        head[b] = x0 * s + x1 * co;
    }
}
